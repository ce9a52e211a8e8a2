/* SPDX-License-Identifier: MIT */
/*
 * fuse/crashcheck.h - `blkfs crashcheck` (fuse/crashcheck.c): the crash
 * states of a recorded dm-log-writes log, checked or materialized.
 */
#ifndef BLKFS_CRASHCHECK_H
#define BLKFS_CRASHCHECK_H

/* argv[0] is "crashcheck". Returns the exit status: 0, 1 (a state failed), 2 (bad input). */
int bf_cmd_crashcheck(int argc, char **argv);

#endif
