/* SPDX-License-Identifier: MIT */
/* fuse/trace.h - `trace DEV` and `blkfs trace` (trace.c). */
#ifndef BLKFS_FUSE_TRACE_H
#define BLKFS_FUSE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;

/* fuse/trace.c: `trace DEV [device|fuse]` (the daemon's side) and `blkfs trace` (the client) */
int bf_cmd_trace(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_trace_client(int argc, char **argv);

#endif
