/* SPDX-License-Identifier: MIT */
/*
 * fuse/bf.h - private to fuse/: the state every part of the daemon shares,
 * the device (struct bf_dev), the .sys node (struct bf_node) and the daemon
 * (struct bf_daemon) with their locks, and the inode numbers and limits of
 * the mount. No function: each module's are in its own header (devs.h,
 * live.h, sysfs.h, ...), so a file's #include list says what it uses. Only
 * fuse/ includes libfuse.
 */
#ifndef BLKFS_BF_H
#define BLKFS_BF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/conf.h"
#include "../core/pcache.h"
#include "slots.h"

struct bf_req;
struct bf_reply_tl;
struct bt_dev;

/*
 * A device. Devices come and go while mounted (devs.c): each is allocated
 * alone and published in a slot of d->devs; its memory lives until its last
 * reference goes.
 *
 * Lock order: d->add_lock -> dev->ctl_lock -> dev->live_lock (live.c) -> d->dev_lock ->
 * dev->slots.lock (slots.h);
 * d->ref_lock is a leaf. d->dev_lock is held only to look up or to change
 * the table (never across backend I/O, a FUSE reply or a notification).
 */
struct bf_dev {
	struct bf_daemon *d;
	struct blk_host host;		/* what the stack may call back: drop_volatile */
	const struct conf_device *cd;
	struct blk_backend *be;		/* top of the filter stack */
	struct pc_dev *pc;
	struct blk_geometry geo;
	struct bt_dev *bt;		/* its trace state, for the FUSE level (backends/lib/trace.h) */
	uint32_t cblk;
	uint64_t ino;
	uid_t uid;			/* owner of the device file */
	gid_t gid;

	int ref;			/* atomic: the table's, each open's, each bf_dev_get()'s */
	int opens;			/* atomic, raised under d->dev_lock: open device files */
	bool removing;			/* d->dev_lock (write): no new open, no bf_dev_get() */
	int slot;			/* in d->devs, -1 before publication */
	/*
	 * Commands that change the device (remove; resize, snapshot, reset):
	 * one at a time. A handler that took it after bf_dev_get() checks
	 * bf_dev_removed(): a remove may have gone first.
	 */
	pthread_mutex_t ctl_lock;
	bool removed;			/* ctl_lock: unpublished by remove */
	/* .sys/NAME/...: built before publication, fixed from then on */
	struct bf_node *nodes;
	size_t nr_nodes, cap_nodes;
	struct conf own;		/* an added device's config (cd points into it) */

	/* requests in flight: a pool of max_pending slots (slots.h), the entries devfile.c's */
	struct bf_slots slots;
	struct bf_req *reqs;		/* the entries */
	/*
	 * Replies: answered by the thread that received the request (inline)
	 * or later, from another thread (parked). Each replying thread counts
	 * in a block of its own (devfile.c, backends/lib/tlslots.h), found at
	 * reply_id in its table and listed on reply_tl for readers; these two
	 * keep what exited threads counted. bf_dev_reply_counts() sums them.
	 */
	uint32_t reply_id;		/* set up before serving; TLS_NO_ID: the shared counts only */
	struct bf_reply_tl *reply_tl;	/* reply_lock (devfile.c): the threads' blocks */
	uint64_t req_inline;		/* atomic: exited threads' inline replies */
	uint64_t req_parked;		/* atomic: exited threads' parked replies */

	/* resize, snapshot, reset, save: one at a time per device (live.c); before slots.lock */
	pthread_mutex_t live_lock;
};

/* The device's size now: changed live by bf_dev_resize(), read anywhere. */
static inline uint64_t bf_dev_size(const struct bf_dev *bd)
{
	return __atomic_load_n(&bd->geo.size, __ATOMIC_RELAXED);
}

/*
 * How long the kernel may keep an entry or attributes without asking.
 * Names come and go (add, remove) and sizes change (resize): each change
 * is notified (inval_entry, delete, inval_inode), and the timeout is what
 * bounds a stale answer when a notification cannot help: a lookup's reply
 * built before a remove and delivered after its notify_delete is cached
 * as it is. A second of staleness at most, one getattr a second per file.
 */
#define BF_TIMEOUT 1.0

#define BF_MAX_WRITE (1u << 20)	/* libfuse 3.14 fails above 1 MiB (measured here) */

#define BF_ROOT_INO 1
#define BF_DEV_INO 2		/* device files: from 2 up, never reused while mounted */
#define BF_SYS_INO (1u << 20)	/* .sys nodes: from here up, never reused while mounted */

/* A directory or attribute of the .sys tree. */
struct bf_node {
	uint64_t ino, parent;
	const char *name;
	bool dir;
	struct bf_dev *dev;		/* a device's node: lives as long as the device */
	const struct bf_dev_attr *da;	/* device attribute, or */
	struct blk_backend *be;		/* a layer's blk_attr */
	const struct blk_attr *ba;
	bool ctl;			/* .sys/control (control.h) */
};

struct bf_daemon {
	struct conf conf;
	const char *conf_path;
	struct pc_cache *pc;
	/*
	 * The devices, in slots (readdir order); dev_lock. Readers (lookup,
	 * getattr, open, readdir, .sys) hold it shared for a lookup and a copy;
	 * add and remove hold it exclusive to publish or unpublish.
	 */
	pthread_rwlock_t dev_lock;
	struct bf_dev *devs[PC_MAX_DEVS];
	int nr_devs;			/* dev_lock: devices in the table */
	uint64_t next_ino;		/* dev_lock (write): the next device file's */
	uint64_t next_sys_ino;		/* atomic: the next .sys node's */
	pthread_mutex_t add_lock;	/* add and remove: one at a time */
	pthread_mutex_t ref_lock;	/* with ref_cond: remove waits for the last reference */
	pthread_cond_t ref_cond;
	bool locks_ready;
	const char *mnt;		/* canonical mount point */
	int ready_fd;			/* daemon mode: pipe to the waiting parent, else -1 */
	int log_fd;			/* daemon mode: stderr after readiness */
	bool foreground;
	/* .sys, .sys/.transport, .sys/control: built before mounting, fixed */
	struct bf_node *nodes;
	void *se;			/* the fuse_session while serving, else NULL */
	size_t nr_nodes, cap_nodes;
	char fsname[PATH_MAX];		/* the mount's source: the config's absolute path */
	char kopts[1024];		/* mount options for the kernel (bf_mount_options) */
	/*
	 * bf_serve gave up on a hung I/O: threads still wait on it, and what
	 * it may reach (devices, cache, session) must never be freed: exit.
	 */
	bool abandoned;
	/*
	 * dev_lock (write), read atomically: at unmount, the control commands
	 * still running made no progress for shutdown_timeout and were given
	 * up on (control.c): the table changes no more, and what they hold is
	 * never freed.
	 */
	bool ctl_given_up;
};

#endif
