/* SPDX-License-Identifier: MIT */
/*
 * fuse/sysfile.h - a .sys attribute's operations (sysfile.c; file.h): the
 * open of any .sys node but the control file (control.h).
 */
#ifndef BLKFS_FUSE_SYSFILE_H
#define BLKFS_FUSE_SYSFILE_H

struct bf_file_ops;

extern const struct bf_file_ops bf_sys_fops;

#endif
