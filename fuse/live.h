/* SPDX-License-Identifier: MIT */
/* fuse/live.h - a mount that changes while it serves (live.c). */
#ifndef BLKFS_FUSE_LIVE_H
#define BLKFS_FUSE_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;
struct bf_dev;

/*
 * bf_dev_resize - give @bd a new size, or the size its storage has now
 * @spec: bytes, with an optional K/M/G/T suffix (binary), or "auto"
 * @msg: receives the result ("ram0: 1073741824 -> 2147483648 bytes") or why not
 *
 * Holds the device's requests, writes back and flushes its dirty data,
 * resizes the backend stack (blk_resize()) and the cache, then tells the
 * kernel (every opener sees the new size at once). Refused, with nothing
 * changed: a size not a multiple of the cache block (EINVAL); a shrink
 * below a loop device that sits on the file (EBUSY); a shrink with
 * kernel_cache = writeback, whose kernel keeps its own larger size
 * (EOPNOTSUPP); dirty data that cannot be written back (EIO); what the
 * backend refuses (blk_resize()). Returns 0 or -errno.
 */
int bf_dev_resize(struct bf_dev *bd, const char *spec, char *msg, size_t len);
/* .sys/DEV/snapshots: one line per snapshot, "NAME created=EPOCH data_bytes=N own_bytes=N". */
int bf_dev_snapshots_show(struct bf_dev *bd, char *buf, size_t len);
/* Does @bd's stack keep snapshots (the ram backend)? */
bool bf_dev_has_snapshots(struct bf_dev *bd);
/*
 * The control file's verbs (fuse/control.c's table): argv[0] is the verb;
 * 0 or -errno, @msg gets the result or the error.
 *   resize DEV SIZE|auto
 *   snapshot DEV SNAP          snapshot -d DEV SNAP (delete)
 *   reset DEV SNAP
 *   save DEV FILE [SNAP]       FILE: an absolute path
 */
int bf_cmd_resize(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_snapshot(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_reset(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_save(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);

/* .sys/DEV/drop_caches: the device's clean cached data, blkfs's and the kernel's, goes. */
void bf_dev_drop_caches(struct bf_dev *bd);
/* A simulated power cut of the device (blk_host.drop_volatile) */
void bf_dev_drop_volatile(void *ctx);
/* The storage's size changed outside (blk_host.size_changed): resize auto */
void bf_dev_size_changed(void *ctx);

#endif
