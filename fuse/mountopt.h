/* SPDX-License-Identifier: MIT */
/* fuse/mountopt.h - mount -o options (mountopt.c). */
#ifndef BLKFS_FUSE_MOUNTOPT_H
#define BLKFS_FUSE_MOUNTOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;

/*
 * bf_mount_options - take the -o options of a mount (comma separated, as
 * mount.fuse3 passes an fstab line's): generic mount flags into d->kopts
 * (`ro` also sets d->conf.mount.read_only), [mount] keys and allow_other
 * into d->conf (overriding the file), fstab-only ones ignored. Call after
 * the config is parsed. Returns 0, or -EINVAL with @err naming the option.
 */
int bf_mount_options(struct bf_daemon *d, const char *opts, char *err, size_t errlen);

#endif
