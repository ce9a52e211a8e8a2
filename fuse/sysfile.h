/* SPDX-License-Identifier: MIT */
/* fuse/sysfile.h - opening a .sys attribute or the control file (sysfile.c). */
#ifndef BLKFS_FUSE_SYSFILE_H
#define BLKFS_FUSE_SYSFILE_H

#include <fuse_lowlevel.h>

struct bf_node;

/* Open @n for @req (the caller holds a reference on n->dev when there is one); replies. */
void bf_sys_open(fuse_req_t req, struct bf_node *n, struct fuse_file_info *fi);

#endif
