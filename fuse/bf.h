/* SPDX-License-Identifier: MIT */
/*
 * fuse/bf.h - private to fuse/: the daemon's state and the pieces main.c
 * and daemon.c share. Only fuse/ includes libfuse.
 */
#ifndef BLKFS_BF_H
#define BLKFS_BF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/conf.h"
#include "../core/pcache.h"

struct bf_dev {
	const struct conf_device *cd;
	struct blk_backend *be;		/* top of the filter stack */
	struct pc_dev *pc;
	struct blk_geometry geo;
	uint32_t cblk;
	uint64_t ino;
};

struct bf_daemon {
	struct conf conf;
	const char *conf_path;
	struct pc_cache *pc;
	struct bf_dev *devs;
	int nr_devs;
	const char *mnt;		/* canonical mount point */
	int ready_fd;			/* daemon mode: pipe to the waiting parent, else -1 */
	int log_fd;			/* daemon mode: stderr after readiness */
	bool foreground;
};

/* daemon.c */
/*
 * bf_open_devices - open every device's backend, check its geometry, create
 * the cache and put the devices behind it. Writes "FILE:LINE: KEY: message"
 * to @err on failure. Returns 0 or -errno.
 */
int bf_open_devices(struct bf_daemon *d, bool create_cache, char *err, size_t errlen);
void bf_close_devices(struct bf_daemon *d);
/*
 * bf_serve - mount at d->mnt with @fuse_opts, serve until unmounted or
 * signalled, write everything back, unmount. Returns the process exit code
 * (0, or 1 if data was lost or the mount failed); @status receives the
 * lines for the status file.
 */
int bf_serve(struct bf_daemon *d, const char *fuse_opts, char *status, size_t statuslen);

/* main.c */
void bf_ready(struct bf_daemon *d);

#endif
