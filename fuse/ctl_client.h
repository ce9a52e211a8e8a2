/* SPDX-License-Identifier: MIT */
/*
 * fuse/ctl_client.h - the control file's client (fuse/ctl_client.c): the
 * commands `blkfs add|remove|resize|...` send one line to MNT/.sys/control
 * and print the message read back.
 */
#ifndef BLKFS_CTL_CLIENT_H
#define BLKFS_CTL_CLIENT_H

#include <stddef.h>

#include "ctl_parse.h"

/**
 * bf_ctl_run - the client: send one command to the mount at @mnt
 * @mnt: the mount point (as given)
 * @argc, @argv: the command, argv[0] the verb
 *
 * Opens MNT/.sys/control, writes the line, reads the message back, prints
 * it (stdout on success when not empty; "blkfs: VERB: message" on stderr
 * on failure).
 * Returns: the exit status: 0 done, 1 the daemon refused, 2 usage or the
 * mount cannot be reached.
 */
int bf_ctl_run(const char *mnt, int argc, char **argv);
/* As bf_ctl_run(), the success message (without its newline) into @out instead of stdout. */
int bf_ctl_run_msg(const char *mnt, int argc, char **argv, char *out, size_t outlen);

#endif
