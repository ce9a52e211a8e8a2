/* SPDX-License-Identifier: MIT */
/* fuse/devs.h - devices created, published, removed (devs.c); the mount's devices opened and closed. */
#ifndef BLKFS_FUSE_DEVS_H
#define BLKFS_FUSE_DEVS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../core/conf.h"

struct bf_daemon;
struct bf_dev;

/*
 * bf_open_devices - open every device's backend, check its geometry, create
 * the cache and put the devices behind it. Writes "FILE:LINE: KEY: message"
 * to @err on failure. Returns 0 or -errno.
 */
int bf_open_devices(struct bf_daemon *d, bool create_cache, char *err, size_t errlen);
void bf_close_devices(struct bf_daemon *d);

/*
 * bf_dev_create - a device of the config @c (@cd one of its devices, or
 * an added device's own): its stack opened, its geometry checked, its
 * owner resolved; with a cache (d->pc), put behind it with its request
 * slots and its .sys subtree built (bf_dev_attach). Not published. Returns the device or
 * ERR_PTR(-errno) with @err set ("FILE:LINE: KEY: message").
 */
struct bf_dev *bf_dev_create(struct bf_daemon *d, const struct conf *c, struct conf_device *cd,
			     char *err, size_t errlen);
/* Put a device created before the cache existed behind it (as bf_dev_create does after). */
int bf_dev_attach(struct bf_daemon *d, struct bf_dev *bd, char *err, size_t errlen);
/* Publish @bd in a free slot (0 or -ENOSPC). */
int bf_dev_publish(struct bf_daemon *d, struct bf_dev *bd);
/* Close and free a device that no request uses any more (an unpublished one, or at exit). */
void bf_dev_destroy(struct bf_dev *bd);
/* The control file's `add` and `remove` (control.h's bf_cmd_fn). */
int bf_cmd_add(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_remove(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);

#endif
