/* SPDX-License-Identifier: MIT */
/* fuse/loop.h - `blkfs attach` and `blkfs detach`, and the I/O flusher (loop.c). */
#ifndef BLKFS_FUSE_LOOP_H
#define BLKFS_FUSE_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* `blkfs attach MNT DEV` and `blkfs detach /dev/loopN | MNT DEV`: exit codes. */
int bf_cmd_attach(int argc, char **argv);
int bf_cmd_detach(int argc, char **argv);
/*
 * bf_io_flusher - PR_SET_IO_FLUSHER for the calling thread and every thread
 * it creates later (call before the daemon's threads start); warns once
 * when the kernel refuses (it needs CAP_SYS_RESOURCE).
 */
void bf_io_flusher(void);

#endif
