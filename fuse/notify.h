/* SPDX-License-Identifier: MIT */
/* fuse/notify.h - telling the kernel and a service manager (notify.c). */
#ifndef BLKFS_FUSE_NOTIFY_H
#define BLKFS_FUSE_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct bf_daemon;

/*
 * bf_notify - send one sd_notify message ("READY=1", "STATUS=...", lines
 * separated by newlines) to $NOTIFY_SOCKET; nothing without it. Returns 0
 * or -errno (warned about once).
 */
int bf_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * Notifications to the kernel about a device file (inode @ino), the one
 * way fuse/ sends them: bf_notify_inval_inode() drops what the kernel
 * caches of it (attributes; with @off >= 0 also its pages in [@off,
 * @off + @len), @len 0: to the end, which first writes the dirty ones
 * back through this daemon); bf_notify_store() puts @len bytes at @off
 * into its page cache, moving its size up to cover them. They wait in the
 * kernel for requests of the file (its write-back, a READ holding a
 * folio): never called from a ring queue thread (bf_rawio_offqueue()), and
 * refused there (-EDEADLK; rawio.c). Nothing is sent while no session
 * serves (0). Returns 0 or -errno (-ENOENT: the kernel has no inode
 * cached).
 */
int bf_notify_inval_inode(struct bf_daemon *d, uint64_t ino, off_t off, off_t len);
int bf_notify_store(struct bf_daemon *d, uint64_t ino, off_t off, const void *buf, size_t len);
/* The mount is usable: tell the waiting parent and a service manager (READY=1). */
void bf_ready(struct bf_daemon *d);

/* The kernel forgets a name: inval_entry (added) or delete (removed, @child) */
void bf_notify_entry(struct bf_daemon *d, uint64_t parent, uint64_t child, const char *name);

#endif
