/* SPDX-License-Identifier: MIT */
/* fuse/tprobe.h - transport = auto at mount: `blkfs probe-transport` run as a child (cmd_probe.c). */
#ifndef BLKFS_FUSE_TPROBE_H
#define BLKFS_FUSE_TPROBE_H

#include <stdbool.h>
#include <stddef.h>

/*
 * bf_tprobe_run - run `blkfs probe-transport -q` (with --cached when
 * @cached: the result cached this boot if there is one) as a child of this
 * process, for at most @limit_ms (then SIGTERM, which makes it clean its
 * mounts up, and SIGKILL 5 s later). Returns 0 with @choice "uring" or
 * "dev" and @detail one word: the ring/dev ratios ("1.234,0.950,0.880"),
 * "cached" or "no_ring"; or -errno with @detail saying why it failed.
 */
int bf_tprobe_run(bool cached, unsigned limit_ms, char *choice, size_t clen, char *detail,
		  size_t dlen);

/*
 * bf_enable_uring - the kernel's switch for FUSE over io_uring
 * (/sys/module/fuse/parameters/enable_uring): 1 Y, 0 N, -errno when the
 * parameter is missing (-ENOENT: this kernel has no FUSE over io_uring).
 */
int bf_enable_uring(void);

#endif
