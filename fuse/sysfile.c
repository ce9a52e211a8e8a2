/* SPDX-License-Identifier: MIT */
/*
 * fuse/sysfile.c - a .sys attribute's operations (file.h): opened, its value
 * is a snapshot (bf_sys_show) that reads return; each write is one store
 * (bf_sys_store), run off the ring's queues when it came on one. (The
 * control file, a .sys node too, has control.c's ops.)
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/lib/log.h"
#include "bf.h"
#include "devtab.h"
#include "file.h"
#include "rawio.h"
#include "sysfile.h"
#include "sysfs.h"

#define BF_SYS_MAX (16u << 20)	/* a snapshot grows to this, no further */

/* An open .sys attribute: what it read at open. */
struct bf_sysfile {
	struct bf_file f;	/* first (file.h) */
	/* its node, looked up again by number for a store: a device's nodes go with it */
	uint64_t ino;
	size_t len;		/* of the snapshot */
	char buf[];		/* the snapshot taken at open */
};
_Static_assert(offsetof(struct bf_sysfile, f) == 0, "bf_sysfile: f first");

static inline struct bf_sysfile *sysfile_of(struct bf_file *f)
{
	return bf_file_entry(f, struct bf_sysfile);
}

/*
 * A .sys attribute: a snapshot of its value for readers, a store per write.
 * @in->node->dev (when there is one) is held by the caller.
 */
static int bf_sys_open(fuse_req_t req, const struct bf_inode *in, struct fuse_file_info *fi)
{
	bool wr = (fi->flags & O_ACCMODE) != O_RDONLY;
	struct bf_node *n = in->node;
	struct bf_sysfile *sf;
	struct bf_file *f;
	size_t cap = BF_SYS_BUF;
	int len = 0, tries;

	(void)req;
	if (n->dir)
		return -EISDIR;
	if (wr && !bf_sys_writable(n))
		return -EACCES;
	/*
	 * The buffer is sized from the content, never cut: a show returns the
	 * length it needs, as snprintf, and a text longer than the buffer is
	 * shown again into one of that size (with room for what grew
	 * meanwhile). .sys/DEV/latency spans 16 KiB after a fault hang, and
	 * --prometheus lost histograms when it was cut.
	 */
	for (tries = 0;; tries++) {
		f = bf_file_alloc(&bf_sys_fops, sizeof(*sf) + cap);
		if (!f)
			return -ENOMEM;
		sf = sysfile_of(f);
		sf->ino = n->ino;
		if ((fi->flags & O_ACCMODE) == O_WRONLY)
			break;
		len = bf_sys_show(n, sf->buf, cap);
		if (len < 0) {
			bf_file_free(f);
			return len;
		}
		if ((size_t)len < cap)
			break;
		bf_file_free(f);
		if (tries == 3 || (size_t)len > BF_SYS_MAX) {
			blk_err(".sys: a snapshot of %zu bytes or more (%d tries): refused", (size_t)len,
				tries + 1);
			return -EFBIG;
		}
		cap = (size_t)len + (size_t)len / 4 + 1;
	}
	sf->len = (size_t)len < cap ? (size_t)len : cap;
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->direct_io = 1;	/* every read and write reaches us: no stale values */
	fi->nonseekable = 0;
	return 0;
}

static void sys_read(fuse_req_t req, struct bf_file *f, size_t size, off_t off)
{
	struct bf_sysfile *sf = sysfile_of(f);
	size_t o = (size_t)off < sf->len ? (size_t)off : sf->len;
	size_t n = size < sf->len - o ? size : sf->len - o;
	char *buf;

	/*
	 * Reply from this thread's buffer, not from @f: once the kernel has
	 * the data, the reader may close and another thread free @sf while
	 * this one is still returning from writev.
	 */
	buf = bf_rawio_req_buf();
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	memcpy(buf, sf->buf + o, n);
	fuse_reply_buf(req, buf, n);
}

/*
 * A store to the .sys attribute @ino: its device (when it has one) held
 * while the store runs; ENODEV once the device is gone.
 */
static int sys_store(struct bf_daemon *d, uint64_t ino, const char *buf, size_t size)
{
	struct bf_node *n;
	int err;

	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_node_locked(d, ino);
	if (n && n->dev)
		bf_dev_hold(n->dev);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!n)
		return -ENODEV;
	err = bf_sys_store(n, buf, size);
	if (n->dev)
		bf_dev_put(n->dev);
	return err;
}

static void sys_write_here(fuse_req_t req, uint64_t ino, const char *buf, size_t size, off_t off)
{
	int err = off ? -EINVAL : sys_store(fuse_req_userdata(req), ino, buf, size);

	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_write(req, size);
}

/* A .sys store parked off the ring's queues: what it needs until its reply. */
struct sys_job {
	struct bf_offq w;
	fuse_req_t req;
	uint64_t ino;
	const char *buf;	/* the ring entry's: valid until the reply */
	size_t size;
	off_t off;
};

static void sys_job_fn(struct bf_offq *w)
{
	struct sys_job *job = (struct sys_job *)w;

	sys_write_here(job->req, job->ino, job->buf, job->size, job->off);
	free(job);
}

/*
 * A write to a .sys attribute: one store. A store may notify the kernel
 * (drop_caches, size, a filter's power cut: bf_notify_inval_inode()), and
 * the kernel may then send requests and wait for them: on a ring queue's
 * thread, which would be the one to serve them, it runs off the queue
 * (bf_rawio_offqueue()), the request parked meanwhile. Every store goes
 * that way, whichever notifies: they are rare, and a filter's may.
 */
static void sys_write(fuse_req_t req, struct bf_file *f, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct sys_job *job;

	(void)fi;
	if (!bf_rawio_queue_thread()) {
		sys_write_here(req, sysfile_of(f)->ino, buf, size, off);
		return;
	}
	job = malloc(sizeof(*job));
	if (!job) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*job = (struct sys_job){ .w.fn = sys_job_fn, .req = req, .ino = sysfile_of(f)->ino, .buf = buf,
				 .size = size, .off = off };
	if (bf_rawio_offqueue(&job->w)) {
		free(job);
		fuse_reply_err(req, EAGAIN);
	}
}

const struct bf_file_ops bf_sys_fops = {
	.open = bf_sys_open,
	.release = bf_file_free,
	.read = sys_read,
	.write = sys_write,
	.fsync = bf_file_fsync_none,
	.fallocate = bf_file_fallocate_none,
};
