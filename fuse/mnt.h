/* SPDX-License-Identifier: MIT */
/*
 * fuse/mnt.h - mount points and the loop devices over files (mnt.c), for
 * the client and the daemon.
 */
#ifndef BLKFS_FUSE_MNT_H
#define BLKFS_FUSE_MNT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * bf_canon_mnt - the canonical path of a mount point without stat()ing it
 * (a dead or hung FUSE mount blocks on stat): only its parent is resolved.
 */
int bf_canon_mnt(const char *arg, char *out, size_t len);
/* bf_mount_type - the type mounted on top at @mnt ("fuse.blkfs"), "" if none. */
void bf_mount_type(const char *mnt, char *type, size_t len);
/*
 * Split a line of /proc/self/mountinfo into at most @max fields, the mount
 * point (field 4) decoded. Returns how many; fewer than 5: not a mount line.
 */
int bf_mountinfo_fields(char *line, char **fields, int max);
/* sysfs's backing_file of loop device @name ("loop3"), without the newline; -errno. */
int bf_loop_backing(const char *name, char *out, size_t len);
/*
 * bf_loops_over - loop devices over the file @path (@exact), or over any
 * file below the directory @path: their names ("/dev/loop3") into @devs and
 * backing files into @files (may be NULL), at most @max. Returns the count.
 */
int bf_loops_over(const char *path, bool exact, char (*devs)[32], int max,
		  char (*files)[PATH_MAX]);

#endif
