/* SPDX-License-Identifier: MIT */
/*
 * fuse/file.h - an open file of the mount and its operations. Each kind of
 * file the mount serves has its own table, chosen at open as the kernel
 * chooses f_op: the device file's (devfile.c), a .sys attribute's
 * (sysfile.c), the control file's (control.c). daemon.c's bf_open finds
 * what the inode is and calls its kind's open, which makes the file;
 * release, reads, writes, fsyncs and fallocates go to the file's table,
 * daemon.c checking only what every kind shares (a negative offset): one
 * indirect call where a branch on the kind was.
 *
 * Every open file is also on a list (file.c), so that the handles of files
 * still open when the daemon exits (the kernel sends no RELEASE for them
 * then) are freed.
 */
#ifndef BLKFS_FUSE_FILE_H
#define BLKFS_FUSE_FILE_H

#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdint.h>

#include "../backends/lib/list.h"

/* a .sys snapshot's first buffer (blkfs_stat with a histogram and backend lines); control's */
#define BF_SYS_BUF 16384

struct bf_dev;
struct bf_file;
struct bf_node;

/*
 * What bf_open (daemon.c) found at the inode opened, under d->dev_lock,
 * for its kind's open: a device, or a .sys node (an attribute, a .sys
 * directory, the control file).
 */
struct bf_inode {
	/*
	 * The device file's device: held (bf_dev_hold) and counted in its
	 * opens, both taken under d->dev_lock (remove checks opens with it
	 * held exclusive). The open takes both over: its file keeps them
	 * until release, or the open drops them when it fails.
	 */
	struct bf_dev *dev;
	/* A .sys node: node->dev (when there is one) held across the open. */
	struct bf_node *node;
};

/*
 * What a kind of file does. open and release as the kernel's f_op: open
 * makes the file and sets @fi (fh and the reply's flags), the caller
 * replies; release frees it, the caller replies. The others reply to @req,
 * now or later.
 */
struct bf_file_ops {
	/* 0 or -errno; the file in fi->fh, allocated with this table */
	int (*open)(fuse_req_t req, const struct bf_inode *in, struct fuse_file_info *fi);
	/* the last close: nothing uses @f afterwards */
	void (*release)(struct bf_file *f);
	/* @off >= 0 */
	void (*read)(fuse_req_t req, struct bf_file *f, size_t size, off_t off);
	/* @buf: the data where bf_rawio_write_data() says it is; @off >= 0 */
	void (*write)(fuse_req_t req, struct bf_file *f, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi);
	void (*fsync)(fuse_req_t req, struct bf_file *f);
	void (*fallocate)(fuse_req_t req, struct bf_file *f, int mode, off_t off, off_t len);
};

/*
 * What every open file has, whatever its kind: each kind's own struct
 * (struct bf_devfile in devfile.c, bf_sysfile in sysfile.c, bf_ctlfile in
 * control.c) embeds it as its first member, named f, and finds itself
 * from it with bf_file_entry().
 */
struct bf_file {
	const struct bf_file_ops *ops;	/* chosen at open */
	struct list_head node_open;	/* file.c's list: freed at exit if never released */
};

/*
 * The kind's struct @type around @ptr, its member f. f comes first in
 * every kind (file.c frees the whole from it): the offset is 0, nothing is
 * loaded on the way.
 */
#define bf_file_entry(ptr, type) ((type *)((char *)(ptr) - offsetof(type, f)))

static inline struct bf_file *bf_file_of(struct fuse_file_info *fi)
{
	return (struct bf_file *)(uintptr_t)fi->fh;
}

/*
 * A file of the kind whose struct is @size bytes (zeroed, its struct
 * bf_file first), on the list of open files; NULL without memory.
 */
struct bf_file *bf_file_alloc(const struct bf_file_ops *ops, size_t size);
/* Frees the whole of the kind's struct: a release that has nothing else to drop. */
void bf_file_free(struct bf_file *f);
/* A file with nothing to sync (0), and one that cannot be allocated (EOPNOTSUPP). */
void bf_file_fsync_none(fuse_req_t req, struct bf_file *f);
void bf_file_fallocate_none(fuse_req_t req, struct bf_file *f, int mode, off_t off, off_t len);
/* At exit: the handles the kernel never released (files open then). */
void bf_files_free_all(void);

#endif
