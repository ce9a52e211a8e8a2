/* SPDX-License-Identifier: MIT */
/* fuse/statx.h - `blkfs stat` (statx.c). */
#ifndef BLKFS_FUSE_STATX_H
#define BLKFS_FUSE_STATX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fuse/statx.c: `blkfs stat` as latency lines, as iostat -x (-i), as Prometheus's text */
void bf_stat_latency(const char *mnt, const char *dev, bool json, bool first_field);
int bf_stat_interval(const char *mnt, const char *dev, double secs, long count);
int bf_stat_prometheus(const char *mnt, const char *dev);

#endif
