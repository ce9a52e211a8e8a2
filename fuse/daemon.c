/* SPDX-License-Identifier: MIT */
/*
 * fuse/daemon.c - the FUSE side of blkfs: libfuse3 low-level operations that
 * present each device as a regular file with block-device semantics, the
 * session (multithreaded, 1 MiB requests, direct mode with shared mmap
 * allowed), and the final writeback when the mount goes away.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <grp.h>
#include <pwd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../backends/lib/list.h"
#include "../backends/lib/trace.h"
#include "../core/log.h"
#include "../core/stack.h"
#include "bf.h"
#include "control.h"
#include "slots.h"

#define BF_MIN_BACKGROUND 64	/* async requests the kernel may send at once, at least */
#ifndef BF_MAX_THREADS
#define BF_MAX_THREADS 16	/* FUSE worker threads */
#endif

/* One open device file, or .sys attribute. */
struct bf_file {
	struct list_head node_open;	/* open_files: freed at exit if never released */
	struct bf_dev *dev;
	bool direct;		/* opened with O_DIRECT */
	pc_errseq_t since;	/* writeback errors this opener has seen */
	/*
	 * A .sys file: its content is a snapshot taken at open. Its node is
	 * looked up again by number for a store: a device's nodes go with it.
	 */
	bool sys;
	bool ctl;		/* .sys/control */
	uint64_t sys_ino;
	size_t len;		/* .sys/control: ctl_lock */
	size_t rpos;		/* .sys/control: where the next read starts; ctl_lock */
	char buf[];		/* .sys/control: the last command's message; ctl_lock */
};

/*
 * The result of the last command written on an open .sys/control, which two
 * threads may write and read at once on one descriptor: held only to copy.
 */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

#define BF_SYS_BUF 16384	/* blkfs_stat with a histogram and backend lines */

/*
 * Every open file, so that the handles of files still open when the
 * daemon exits (the kernel sends no RELEASE for them then) are freed.
 */
static pthread_mutex_t open_files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct list_head open_files = LIST_HEAD_INIT(open_files);	/* open_files_lock */

static struct bf_file *file_alloc(size_t extra)
{
	struct bf_file *f = calloc(1, sizeof(*f) + extra);

	if (!f)
		return NULL;
	pthread_mutex_lock(&open_files_lock);
	list_add_tail(&f->node_open, &open_files);
	pthread_mutex_unlock(&open_files_lock);
	return f;
}

static void file_free(struct bf_file *f)
{
	pthread_mutex_lock(&open_files_lock);
	list_del_init(&f->node_open);
	pthread_mutex_unlock(&open_files_lock);
	free(f);
}

/* The handles the kernel never released (files open at exit). */
static void files_free_all(void)
{
	struct list_head *pos, *n;

	pthread_mutex_lock(&open_files_lock);
	list_for_each_safe(pos, n, &open_files) {
		list_del_init(pos);
		free(list_entry(pos, struct bf_file, node_open));
	}
	pthread_mutex_unlock(&open_files_lock);
}

static struct bf_daemon *bf_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The device of inode @ino; d->dev_lock held. */
static struct bf_dev *dev_of_ino(struct bf_daemon *d, fuse_ino_t ino)
{
	return bf_dev_of_ino_locked(d, ino);
}

/* ----------------------------------------------------------- attributes */

/* Attributes of @ino; d->dev_lock held. Returns false when there is no such inode. */
static bool fill_attr(struct bf_daemon *d, fuse_ino_t ino, struct stat *st)
{
	struct bf_dev *bd = dev_of_ino(d, ino);
	struct bf_node *n = bf_sys_node_locked(d, ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (n && n->ctl) {
		/* the mounter's (root may always write it) */
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = 0;
		st->st_blksize = 4096;
		return true;
	}
	if (n) {
		st->st_mode = n->dir ? S_IFDIR | 0555 : S_IFREG | (bf_sys_writable(n) ? 0644 : 0444);
		st->st_nlink = n->dir ? 2 : 1;
		st->st_size = n->dir ? 0 : 4096;	/* as sysfs: the content is made at open */
		st->st_blksize = 4096;
		return true;
	}
	if (!bd) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		st->st_blksize = 4096;
		return ino == BF_ROOT_INO;
	}
	st->st_mode = S_IFREG | bd->cd->mode;
	st->st_uid = bd->uid;
	st->st_gid = bd->gid;
	st->st_nlink = 1;
	st->st_size = (off_t)bf_dev_size(bd);
	st->st_blocks = (blkcnt_t)(bf_dev_size(bd) / 512);
	/* the block the cache tracks state in: writes of this size never read first */
	st->st_blksize = bd->cblk;
	return true;
}

/* --------------------------------------------------------------- session */

/* Every device's request slots together, as the kernel's u16 allows. */
static unsigned bf_max_background(const struct bf_daemon *d)
{
	uint64_t n = (uint64_t)d->conf.mount.max_pending * (uint64_t)(d->nr_devs ? d->nr_devs : 1);

	return n < BF_MIN_BACKGROUND ? BF_MIN_BACKGROUND : n > 65535 ? 65535 : (unsigned)n;
}

static void bf_init(void *userdata, struct fuse_conn_info *conn)
{
	struct bf_daemon *d = userdata;

	/* reads through splice were ~20x slower here */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
			FUSE_CAP_WRITEBACK_CACHE);
	/*
	 * kernel_cache = writeback: the kernel's page cache takes small writes
	 * and sends them on in large requests (4 KiB dd ran ~6x faster here),
	 * at the price of owning the file size (see bf_open).
	 */
	if (d->conf.mount.kernel_writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	/* O_TRUNC reaches open(), which ignores it: a plain `dd of=` keeps the device */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
	conn->max_write = BF_MAX_WRITE;
	conn->max_read = 0;
	/*
	 * The kernel holds back asynchronous requests (libaio O_DIRECT, readahead)
	 * past max_background for the whole mount: sized to every device's
	 * slots together, so that requests parked on one slow device never
	 * keep another's waiting in the kernel. Counted at INIT: devices added
	 * later (blkfs add) share what the mount's config asked for.
	 */
	conn->max_background = bf_max_background(d);
	conn->congestion_threshold = conn->max_background * 3 / 4;
}

static void bf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct bf_daemon *d = bf_of(req);
	struct fuse_entry_param e;
	struct bf_node *n;
	int i, err = ENOENT;

	memset(&e, 0, sizeof(e));
	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_lookup_locked(d, parent, name);
	if (n) {
		e.ino = n->ino;
	} else if (parent != BF_ROOT_INO) {
		/* a device file is no directory; a directory gone with its device has nothing */
		err = dev_of_ino(d, parent) ? ENOTDIR : ENOENT;
	} else {
		for (i = 0; i < PC_MAX_DEVS; i++) {
			if (d->devs[i] && !strcmp(name, d->devs[i]->cd->name)) {
				e.ino = d->devs[i]->ino;
				break;
			}
		}
	}
	if (e.ino) {
		e.attr_timeout = BF_TIMEOUT;
		e.entry_timeout = BF_TIMEOUT;
		fill_attr(d, e.ino, &e.attr);
	}
	pthread_rwlock_unlock(&d->dev_lock);
	if (e.ino)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, err);
}

static void bf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	struct stat st;
	bool ok;

	(void)fi;
	pthread_rwlock_rdlock(&d->dev_lock);
	ok = fill_attr(d, ino, &st);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!ok)
		fuse_reply_err(req, ENOENT);	/* a removed device the kernel still knows */
	else
		fuse_reply_attr(req, &st, BF_TIMEOUT);
}

/*
 * A device has the size it has: truncate to that size succeeds and changes
 * nothing, any other size is EINVAL. Times may be set (touch works) and are
 * not kept; owner and mode belong to the config.
 */
static void bf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	int err = 0;

	if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct bf_dev *bd;
		struct bf_node *n;

		pthread_rwlock_rdlock(&d->dev_lock);
		bd = dev_of_ino(d, ino);
		n = bf_sys_node_locked(d, ino);
		/* `echo x > attr` without O_TRUNC reaching open: nothing to cut */
		if (!(n && !n->dir)) {
			if (!bd)
				err = n || ino == BF_ROOT_INO ? EISDIR : ENOENT;
			else if ((uint64_t)attr->st_size != bf_dev_size(bd))
				err = EINVAL;
		}
		pthread_rwlock_unlock(&d->dev_lock);
		if (err) {
			fuse_reply_err(req, err);
			return;
		}
	}
	bf_getattr(req, ino, fi);
}

/*
 * Only the user who mounted, or root, runs commands: the file's mode says
 * so where the kernel checks it (allow_other brings default_permissions);
 * the request's uid is checked too, at open and at each write.
 */
static bool ctl_writer_ok(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx && (ctx->uid == 0 || ctx->uid == getuid());
}

/* An open of the device file ends (or failed): bf_open's count and reference. */
static void dev_close(struct bf_dev *bd)
{
	__atomic_sub_fetch(&bd->opens, 1, __ATOMIC_RELAXED);
	bf_dev_put(bd);
}

/* A .sys attribute: a snapshot of its value for readers, a store per write. */
static void sys_open(fuse_req_t req, struct bf_node *n, struct fuse_file_info *fi)
{
	bool wr = (fi->flags & O_ACCMODE) != O_RDONLY;
	struct bf_file *f;
	int len = 0;

	if (n->dir) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (wr && !bf_sys_writable(n)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (wr && n->ctl && !ctl_writer_ok(req)) {
		fuse_reply_err(req, EACCES);
		return;
	}
	f = file_alloc(BF_SYS_BUF);
	if (!f) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	f->sys = true;
	f->ctl = n->ctl;
	f->sys_ino = n->ino;
	if ((fi->flags & O_ACCMODE) != O_WRONLY) {
		len = bf_sys_show(n, f->buf, BF_SYS_BUF);
		if (len < 0) {
			file_free(f);
			fuse_reply_err(req, -len);
			return;
		}
	}
	f->len = (size_t)len < BF_SYS_BUF ? (size_t)len : BF_SYS_BUF;
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->direct_io = 1;	/* every read and write reaches us: no stale values */
	fi->nonseekable = 0;
	fuse_reply_open(req, fi);
}

static void bf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	struct bf_dev *bd;
	struct bf_node *n;
	struct bf_file *f;
	int err = 0;

	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_node_locked(d, ino);
	if (n && n->dev)
		bf_dev_hold(n->dev);	/* its nodes live as long as it does */
	bd = n ? NULL : dev_of_ino(d, ino);
	if (bd && bd->removing) {
		err = EBUSY;		/* remove is writing it back */
	} else if (bd) {
		/* under dev_lock: remove checks opens with it held exclusive */
		bf_dev_hold(bd);
		__atomic_add_fetch(&bd->opens, 1, __ATOMIC_RELAXED);
	} else if (!n) {
		err = ino == BF_ROOT_INO ? EISDIR : ENOENT;
	}
	pthread_rwlock_unlock(&d->dev_lock);
	if (n) {
		sys_open(req, n, fi);
		if (n->dev)
			bf_dev_put(n->dev);
		return;
	}
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	/*
	 * A read-only mount (-o ro): the kernel already refuses opens for
	 * writing on it (EROFS, as on any read-only filesystem); refused here
	 * too, so no handle that could write ever exists.
	 */
	if (d->conf.mount.read_only && (fi->flags & O_ACCMODE) != O_RDONLY) {
		dev_close(bd);
		fuse_reply_err(req, EROFS);
		return;
	}
	f = file_alloc(0);
	if (!f) {
		dev_close(bd);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (d->conf.mount.kernel_writeback && (fi->flags & O_TRUNC)) {
		/*
		 * With the kernel's writeback cache the kernel owns the size: it
		 * would believe the device empty after O_TRUNC and keep believing
		 * it. Refused rather than ignored (README: kernel_cache).
		 */
		file_free(f);
		dev_close(bd);
		fuse_reply_err(req, EPERM);
		return;
	}
	f->dev = bd;
	f->direct = fi->flags & O_DIRECT;
	f->since = pc_errseq_sample(bd->pc);
	fi->fh = (uint64_t)(uintptr_t)f;
	if (d->conf.mount.kernel_writeback) {
		/* the kernel caches and handles O_DIRECT itself (writes back, invalidates) */
		fi->keep_cache = 1;
		fi->noflush = 0;
		fuse_reply_open(req, fi);
		return;
	}
	/*
	 * Direct mode: every read and write reaches this daemon, in requests of
	 * up to 1 MiB, so blkfs's cache is the one cache and block-device
	 * semantics hold. Shared mmap still works: INIT negotiated
	 * FUSE_DIRECT_IO_ALLOW_MMAP (see rawio.c).
	 */
	fi->direct_io = 1;
	fi->keep_cache = 0;
	fi->noflush = 1;
	/* FOPEN_PARALLEL_DIRECT_WRITES is added to the reply in rawio.c */
	/* O_TRUNC is ignored, as a block device ignores it */
	fuse_reply_open(req, fi);
}

static void bf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_file *f = (struct bf_file *)(uintptr_t)fi->fh;
	struct bf_dev *bd = f->dev;

	(void)ino;
	file_free(f);
	if (bd)
		dev_close(bd);
	fuse_reply_err(req, 0);
}

static struct bf_file *file_of(struct fuse_file_info *fi)
{
	return (struct bf_file *)(uintptr_t)fi->fh;
}

/* --------------------------------------------------- requests in flight */

/*
 * One request of a device file on its way: a slot of the device's pool of
 * [mount] max_pending, the block layer's tag. The handler starts the
 * cache's asynchronous form and returns to receive the next request; the
 * reply comes from the completion (pc_aio.done), in whatever thread that
 * runs (pcache.h's rules). A request whose data sits in the receiving
 * thread's buffer (a WRITE's data, a direct READ's destination) takes that
 * buffer along when it is still running as its handler returns
 * (bf_rawio_keep), so the thread receives into another one.
 */
enum { REQ_RUNNING, REQ_RETURNED, REQ_DONE };

/*
 * The request whose handler this thread is running: its completion, when
 * it runs here before the handler returns, was inline (the device
 * finished at once: no hand-off); anywhere else, the request was parked.
 */
static __thread const struct bf_req *req_here;

struct bf_req {
	struct pc_aio aio;	/* first: the completion finds the slot from it */
	struct bf_dev *bd;
	fuse_req_t req;
	char *data;		/* direct READ: the reply's data */
	char *kept;		/* a receive buffer this request holds */
	int state;		/* atomic: REQ_* */
	struct bf_slot slot;	/* bd->slots */
	struct pc_read rd;
	/* the FUSE level's record of it (backends/lib/trace.h): begun at receipt, ended at the reply */
	uint64_t bt_start, bt_pos, bt_len;
	uint32_t bt_pid;
	enum blk_op bt_op;
};

int bf_dev_reqs_init(struct bf_dev *bd, uint32_t n)
{
	uint32_t i;
	int ret;

	bd->reqs = calloc(n, sizeof(*bd->reqs));
	if (!bd->reqs)
		return -ENOMEM;
	ret = bf_slots_init(&bd->slots);
	if (ret) {
		free(bd->reqs);
		bd->reqs = NULL;
		return ret;
	}
	pthread_mutex_init(&bd->live_lock, NULL);
	for (i = n; i-- > 0;) {	/* the first entry on top, as before */
		bd->reqs[i].bd = bd;
		bf_slots_add(&bd->slots, &bd->reqs[i].slot);
	}
	return 0;
}

void bf_dev_reqs_destroy(struct bf_dev *bd)
{
	if (!bd->reqs)
		return;
	bf_slots_destroy(&bd->slots);
	pthread_mutex_destroy(&bd->live_lock);
	free(bd->reqs);
	bd->reqs = NULL;
}

static struct bf_req *req_of_slot(struct bf_slot *slot)
{
	return (struct bf_req *)((char *)slot - offsetof(struct bf_req, slot));
}

/*
 * A slot, waiting for one when all are taken, as the block layer waits for
 * a tag (rule R5 in core/THREADS.md: the one wait a receiving thread may
 * do). @op, @pos, @len: the request, for the FUSE level's trace and counts:
 * it begins here, before any wait for a slot (the time the caller waited),
 * and ends at its reply (req_trace_end()).
 */
static struct bf_req *req_get(struct bf_dev *bd, fuse_req_t req,
			      void (*done)(struct pc_aio *aio, ssize_t res), enum blk_op op,
			      uint64_t pos, uint64_t len)
{
	uint32_t pid = (uint32_t)fuse_req_ctx(req)->pid;
	uint64_t start = bt_req_begin(bd->bt, op, pos, len, pid);
	struct bf_req *r = req_of_slot(bf_slots_get(&bd->slots));

	r->req = req;
	r->data = NULL;
	r->kept = NULL;
	r->state = REQ_RUNNING;
	r->aio.done = done;
	r->aio.waited = false;
	r->aio.fua = false;
	r->bt_start = start;
	r->bt_pos = pos;
	r->bt_len = len;
	r->bt_pid = pid;
	r->bt_op = op;
	req_here = r;
	return r;
}

/* The request is answered with @res (bytes, 0 or -errno): the FUSE level's C, just before the reply. */
static void req_trace_end(struct bf_req *r, ssize_t res)
{
	bt_req_end(r->bd->bt, r->bt_op, r->bt_pos, r->bt_len, r->bt_pid, r->bt_start, (long)res);
}

static void req_put(struct bf_req *r)
{
	struct bf_dev *bd = r->bd;

	if (req_here == r)	/* a handler that gave up on @r before starting it */
		req_here = NULL;

	if (r->kept)
		bf_rawio_release(r->kept);
	r->kept = NULL;
	bf_slots_put(&bd->slots, &r->slot);
}

/*
 * The handler has started @r and returns. If @r is still running and its
 * data (@len bytes at @data, or none) is in this thread's receive buffer,
 * the buffer goes with it. Whichever of this and the completion comes
 * second frees the slot.
 */
static void req_returned(struct bf_req *r, const char *data, size_t len)
{
	req_here = NULL;
	if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == REQ_DONE) {
		req_put(r);
		return;
	}
	if (data && !r->kept && bf_rawio_in_thread_buf(data, len)) {
		char *k = bf_rawio_keep(&data, len);	/* no copy: cannot fail */

		r->kept = IS_ERR(k) ? NULL : k;
	}
	if (__atomic_exchange_n(&r->state, REQ_RETURNED, __ATOMIC_ACQ_REL) == REQ_DONE)
		req_put(r);
}

/* The completion has replied. */
static void req_finish(struct bf_req *r)
{
	__atomic_add_fetch(req_here == r ? &r->bd->req_inline : &r->bd->req_parked, 1,
			   __ATOMIC_RELAXED);
	if (__atomic_exchange_n(&r->state, REQ_DONE, __ATOMIC_ACQ_REL) == REQ_RETURNED)
		req_put(r);
}

static struct bf_req *req_of(struct pc_aio *aio)
{
	return (struct bf_req *)aio;
}

static void reply_result(struct bf_req *r, ssize_t res)
{
	if (res < 0)
		fuse_reply_err(r->req, (int)-res);
	else
		fuse_reply_err(r->req, 0);
}

static void read_done(struct pc_aio *aio, ssize_t res)
{
	struct bf_req *r = req_of(aio);

	req_trace_end(r, res);
	if (res < 0) {
		fuse_reply_err(r->req, (int)-res);
	} else if (res == 0) {
		fuse_reply_buf(r->req, NULL, 0);
	} else {
		/* straight from folio memory: the kernel's copy is the only one */
		fuse_reply_iov(r->req, r->rd.iov, r->rd.iovcnt);
		pc_read_end(&r->rd);
	}
	req_finish(r);
}

static void dread_done(struct pc_aio *aio, ssize_t res)
{
	struct bf_req *r = req_of(aio);

	req_trace_end(r, res);
	if (res < 0)
		fuse_reply_err(r->req, (int)-res);
	else
		fuse_reply_buf(r->req, r->data, (size_t)res);
	req_finish(r);
}

static void write_done(struct pc_aio *aio, ssize_t res)
{
	struct bf_req *r = req_of(aio);

	req_trace_end(r, res);
	if (res < 0)
		fuse_reply_err(r->req, (int)-res);
	else
		fuse_reply_write(r->req, (size_t)res);
	req_finish(r);
}

static void status_done(struct pc_aio *aio, ssize_t res)
{
	struct bf_req *r = req_of(aio);

	req_trace_end(r, res);
	reply_result(r, res);
	req_finish(r);
}

static void bf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct bf_file *f = file_of(fi);
	struct bf_req *r;
	char *buf;

	(void)ino;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (f->ctl) {
		size_t n;

		/*
		 * The message of the last command written on this descriptor, from
		 * where the last read stopped: the write moved the file offset past
		 * the command, so the offset says nothing here.
		 */
		buf = bf_rawio_req_buf();
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		pthread_mutex_lock(&ctl_lock);
		n = size < f->len - f->rpos ? size : f->len - f->rpos;
		memcpy(buf, f->buf + f->rpos, n);
		f->rpos += n;
		pthread_mutex_unlock(&ctl_lock);
		fuse_reply_buf(req, buf, n);
		return;
	}
	if (f->sys) {
		size_t o = (size_t)off < f->len ? (size_t)off : f->len;
		size_t n = size < f->len - o ? size : f->len - o;

		/*
		 * Reply from this thread's buffer, not from @f: once the kernel has
		 * the data, the reader may close and another thread free @f while
		 * this one is still returning from writev.
		 */
		buf = bf_rawio_req_buf();
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		memcpy(buf, f->buf + o, n);
		fuse_reply_buf(req, buf, n);
		return;
	}
	if (f->direct) {
		buf = bf_rawio_req_buf();
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (size > BF_MAX_WRITE)
			size = BF_MAX_WRITE;
		r = req_get(f->dev, req, dread_done, BLK_READ, (uint64_t)off, size);
		r->data = buf;
		pc_direct_read_async(f->dev->pc, &r->aio, buf, size, (uint64_t)off);
		req_returned(r, buf, size);
		return;
	}
	r = req_get(f->dev, req, read_done, BLK_READ, (uint64_t)off, size);
	pc_read_async(f->dev->pc, &r->aio, &r->rd, size, (uint64_t)off);
	req_returned(r, NULL, 0);
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
	int err = off ? -EINVAL : sys_store(bf_of(req), ino, buf, size);

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
static void sys_write(fuse_req_t req, struct bf_file *f, const char *buf, size_t size, off_t off)
{
	struct sys_job *job;

	if (!bf_rawio_queue_thread()) {
		sys_write_here(req, f->sys_ino, buf, size, off);
		return;
	}
	job = malloc(sizeof(*job));
	if (!job) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	*job = (struct sys_job){ .w.fn = sys_job_fn, .req = req, .ino = f->sys_ino, .buf = buf,
				 .size = size, .off = off };
	if (bf_rawio_offqueue(&job->w)) {
		free(job);
		fuse_reply_err(req, EAGAIN);
	}
}

/* The command's message into the open file (read back there), then the reply. */
static void ctl_done(fuse_req_t req, struct bf_file *f, int ret, const char *msg, size_t size)
{
	pthread_mutex_lock(&ctl_lock);
	f->len = strlen(msg);
	if (f->len > BF_SYS_BUF)
		f->len = BF_SYS_BUF;
	memcpy(f->buf, msg, f->len);
	f->rpos = 0;
	pthread_mutex_unlock(&ctl_lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

/*
 * A command runs in a thread of its own: it may take a while (remove
 * writes a device back), and the thread that received it must go on
 * serving. With FUSE over io_uring that thread is its CPU's only queue
 * thread: every request from that CPU would wait behind the command.
 */
struct ctl_job {
	struct ctl_job *next;	/* ctl_jobs_lock: in ctl_running */
	fuse_req_t req;
	struct bf_file *f;	/* the write holds the file open until its reply */
	bool replying;		/* ctl_jobs_lock: its thread answers it */
	bool given_up;		/* ctl_jobs_lock: the unmount answered it (ctl_jobs_give_up) */
	size_t size;
	char line[];		/* a copy: /dev/fuse's buffer is the receiver's */
};

static pthread_mutex_t ctl_jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctl_jobs_cond = PTHREAD_COND_INITIALIZER;
static struct ctl_job *ctl_running;	/* ctl_jobs_lock: commands running */

static void ctl_run(fuse_req_t req, struct bf_file *f, const char *buf, size_t size)
{
	char msg[BF_CTL_MSG_MAX];
	int ret = bf_ctl_exec(bf_of(req), buf, size, msg, sizeof(msg));

	ctl_done(req, f, ret, msg, size);
}

static void *ctl_job_fn(void *arg)
{
	struct ctl_job *job = arg, **p;
	char msg[BF_CTL_MSG_MAX];
	bool reply;
	int ret;

	ret = bf_ctl_exec(bf_of(job->req), job->line, job->size, msg, sizeof(msg));
	/* answered once: by this thread, or by an unmount that gave up on it */
	pthread_mutex_lock(&ctl_jobs_lock);
	reply = !job->given_up;
	job->replying = reply;
	pthread_mutex_unlock(&ctl_jobs_lock);
	if (reply)
		ctl_done(job->req, job->f, ret, msg, job->size);
	pthread_mutex_lock(&ctl_jobs_lock);
	for (p = &ctl_running; *p != job; p = &(*p)->next)
		;
	*p = job->next;
	pthread_cond_broadcast(&ctl_jobs_cond);
	pthread_mutex_unlock(&ctl_jobs_lock);
	free(job);
	return NULL;
}

/* ctl_jobs_lock held: a command neither finished nor given up on? */
static bool ctl_jobs_busy(void *arg)
{
	struct ctl_job *job;

	(void)arg;
	for (job = ctl_running; job; job = job->next)
		if (!job->given_up)
			return true;
	return false;
}

/*
 * Answer the commands still running with ESHUTDOWN (the client says the
 * mount went away with the device's data unwritten) and leave their
 * threads where they wait: on a hung backend, holding their locks. The
 * final writeback gives their devices up (shutdown.c) and waits for none
 * of those locks; nothing they may reach is freed (d->abandoned).
 */
static void ctl_jobs_give_up(struct bf_daemon *d)
{
	struct ctl_job *job;
	char t[32], msg[256];

	bf_devs_give_up(d);
	blk_format_duration(t, sizeof(t), d->conf.mount.shutdown_timeout_ms * 1000000ull);
	snprintf(msg, sizeof(msg), "the mount went away: the command made no progress for %s "
		 "(shutdown_timeout) and was given up on; what its device had not written back "
		 "is lost\n", t);
	for (;;) {
		fuse_req_t req = NULL;
		struct bf_file *f = NULL;
		size_t size = 0;
		int ll = 0;
		char line[128];

		pthread_mutex_lock(&ctl_jobs_lock);
		for (job = ctl_running; job; job = job->next) {
			if (job->given_up || job->replying)
				continue;
			job->given_up = true;
			req = job->req;
			f = job->f;
			size = job->size;
			ll = (int)(size && job->line[size - 1] == '\n' ? size - 1 : size);
			snprintf(line, sizeof(line), "%.*s", ll, job->line);
			break;
		}
		pthread_mutex_unlock(&ctl_jobs_lock);
		if (!req)
			break;
		blk_err("control: %s: given up at unmount: no progress for %s (shutdown_timeout); "
			"its thread is left waiting on the hung I/O", line, t);
		ctl_done(req, f, -ESHUTDOWN, msg, size);
	}
}

/*
 * Wait for the commands still running (the loop has ended: none comes),
 * as long as the devices make progress; false when they were given up on.
 */
static bool ctl_jobs_wait(struct bf_daemon *d)
{
	bool done = bf_final_wait_busy(d, ctl_jobs_busy, NULL, &ctl_jobs_lock, &ctl_jobs_cond);

	if (!done)
		ctl_jobs_give_up(d);
	/* those answering by themselves are done in a moment */
	pthread_mutex_lock(&ctl_jobs_lock);
	while (ctl_jobs_busy(NULL))
		pthread_cond_wait(&ctl_jobs_cond, &ctl_jobs_lock);
	pthread_mutex_unlock(&ctl_jobs_lock);
	return done;
}

/* One command per write, whatever the offset (a second write on the same descriptor is the next). */
static void ctl_write(fuse_req_t req, struct bf_file *f, const char *buf, size_t size)
{
	pthread_attr_t attr;
	struct ctl_job *job;
	pthread_t t;
	char msg[128];

	if (!ctl_writer_ok(req)) {
		snprintf(msg, sizeof(msg), "only uid %u (who mounted) or root may run commands\n",
			 (unsigned)getuid());
		ctl_done(req, f, -EACCES, msg, size);
		return;
	}
	/* a line too long to run is refused at once, here */
	job = size <= BF_CTL_MAX_LINE ? malloc(sizeof(*job) + size) : NULL;
	if (!job && size <= BF_CTL_MAX_LINE && bf_rawio_queue_thread()) {
		/* not here: a command may notify the kernel (bf_rawio_offqueue()) */
		ctl_done(req, f, -ENOMEM, "no memory to run the command\n", size);
		return;
	}
	if (!job) {
		ctl_run(req, f, buf, size);
		return;
	}
	job->req = req;
	job->f = f;
	job->replying = false;
	job->given_up = false;
	job->size = size;
	memcpy(job->line, buf, size);
	pthread_mutex_lock(&ctl_jobs_lock);
	job->next = ctl_running;
	ctl_running = job;
	pthread_mutex_unlock(&ctl_jobs_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, ctl_job_fn, job)) {
		struct ctl_job **p;

		pthread_mutex_lock(&ctl_jobs_lock);
		for (p = &ctl_running; *p != job; p = &(*p)->next)
			;
		*p = job->next;
		pthread_mutex_unlock(&ctl_jobs_lock);
		free(job);
		if (bf_rawio_queue_thread())	/* it may notify the kernel: not from there */
			ctl_done(req, f, -EAGAIN, "no thread to run the command\n", size);
		else
			ctl_run(req, f, buf, size);	/* no thread: here, as a last resort */
	}
	pthread_attr_destroy(&attr);
}

static void bf_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct bf_file *f = file_of(fi);
	struct bf_req *r;

	(void)ino;
	buf = bf_rawio_write_data(buf);
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (f->ctl) {
		ctl_write(req, f, buf, size);
		return;
	}
	if (f->sys) {
		sys_write(req, f, buf, size, off);
		return;
	}
	r = req_get(f->dev, req, write_done, BLK_WRITE, (uint64_t)off, size);
	if (!bf_rawio_in_thread_buf(buf, size)) {
		/* the data is not where the request could take it along: a copy */
		char *k = bf_rawio_keep(&buf, size);

		if (IS_ERR(k)) {
			req_trace_end(r, -ENOMEM);
			req_put(r);
			fuse_reply_err(req, ENOMEM);
			return;
		}
		r->kept = k;
	}
	/*
	 * The kernel passes a write's O_DSYNC / O_SYNC (the file's, or
	 * pwritev2's RWF_DSYNC) in its flags: honoured as a disk honours FUA,
	 * the reply waits for the data to be on stable storage.
	 */
	r->aio.fua = (fi->flags & O_DSYNC) != 0;
	/*
	 * Kernel page-cache writeback of a shared mapping may come through a
	 * handle opened with O_DIRECT; it is buffered data, never refused.
	 */
	if (f->direct && !fi->writepage)
		pc_direct_write_async(f->dev->pc, &r->aio, buf, size, (uint64_t)off);
	else
		pc_write_async(f->dev->pc, &r->aio, buf, size, (uint64_t)off);
	req_returned(r, buf, size);
}

static void bf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct bf_file *f = file_of(fi);
	struct bf_req *r;

	(void)ino;
	(void)datasync;
	if (f->sys) {
		fuse_reply_err(req, 0);
		return;
	}
	r = req_get(f->dev, req, status_done, BLK_FLUSH, 0, 0);
	pc_fsync_async(f->dev->pc, &r->aio, &f->since);
	req_returned(r, NULL, 0);
}

static void bf_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* As the kernel's blkdev_fallocate(). */
static void bf_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	struct bf_file *f = file_of(fi);
	uint64_t size, start = (uint64_t)off, n = (uint64_t)len;
	struct bf_req *r;

	(void)ino;
	if (f->sys) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	size = bf_dev_size(f->dev);
	if (mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (off < 0 || len <= 0 || start >= size) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (n > size - start) {
		if (!(mode & FALLOC_FL_KEEP_SIZE)) {
			fuse_reply_err(req, EINVAL);
			return;
		}
		n = size - start;
	}
	if ((start | n) & (f->dev->geo.lbs - 1)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	switch (mode) {
	case FALLOC_FL_ZERO_RANGE:
	case FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE:
		r = req_get(f->dev, req, status_done, BLK_WRITE_ZEROES, start, n);
		pc_write_zeroes_async(f->dev->pc, &r->aio, start, n);
		break;
	case FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE:
		r = req_get(f->dev, req, status_done, BLK_DISCARD, start, n);
		pc_discard_async(f->dev->pc, &r->aio, start, n);
		break;
	default:
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	req_returned(r, NULL, 0);
}

static void bf_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	struct bf_node *n;
	bool dir;

	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_node_locked(d, ino);
	dir = ino == BF_ROOT_INO || (n && n->dir);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!dir) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_reply_open(req, fi);
}

/*
 * Offsets: 1 after ".", 2 after "..", then 3 + the position of the entry
 * (a slot for a device, bf_sys_next_locked()'s position in .sys): an entry
 * keeps its offset while others come and go, so a listing read in several
 * calls neither repeats nor skips a device that stays.
 */
static void bf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	size_t used = 0, cap = size < 65536 ? size : 65536;
	struct bf_node *self = NULL;
	uint64_t pos;
	struct stat st;
	size_t need;
	char *buf;
	off_t i;

	(void)fi;
	if (off < 0) {		/* the kernel sends back only offsets we gave */
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(cap ? cap : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_rwlock_rdlock(&d->dev_lock);
	if (ino != BF_ROOT_INO) {
		self = bf_sys_node_locked(d, ino);
		if (!self || !self->dir)
			goto out_unlock;	/* gone with its device: empty */
	}
	for (i = off; i < 2; i++) {
		fill_attr(d, i == 0 || !self ? ino : self->parent, &st);
		need = fuse_add_direntry(req, buf + used, cap - used, i == 0 ? "." : "..", &st,
					 i + 1);
		if (need > cap - used)
			goto out_unlock;
		used += need;
	}
	pos = (uint64_t)(off > 2 ? off - 2 : 0);
	for (;;) {
		const char *name;
		fuse_ino_t child;

		if (self) {
			struct bf_node *c = bf_sys_next_locked(d, ino, &pos);

			if (!c)
				break;
			name = c->name;
			child = c->ino;
		} else {
			/* the root lists the devices; .sys is found by name only */
			while (pos < PC_MAX_DEVS && !d->devs[pos])
				pos++;
			if (pos >= PC_MAX_DEVS)
				break;
			name = d->devs[pos]->cd->name;
			child = d->devs[pos]->ino;
		}
		fill_attr(d, child, &st);
		need = fuse_add_direntry(req, buf + used, cap - used, name, &st, (off_t)pos + 3);
		if (need > cap - used)
			break;
		used += need;
		pos++;
	}
out_unlock:
	pthread_rwlock_unlock(&d->dev_lock);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void bf_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct bf_daemon *d = bf_of(req);
	struct statvfs sv;
	uint64_t total = 0;
	int i;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	pthread_rwlock_rdlock(&d->dev_lock);
	for (i = 0; i < PC_MAX_DEVS; i++)
		if (d->devs[i])
			total += bf_dev_size(d->devs[i]);
	sv.f_files = (fsfilcnt_t)d->nr_devs + 1;
	pthread_rwlock_unlock(&d->dev_lock);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096;
	sv.f_namemax = CONF_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* Names are the config's: nothing is created, removed or renamed. */
static void bf_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t r)
{
	(void)p; (void)n; (void)m; (void)r;
	fuse_reply_err(req, EPERM);
}

static void bf_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
	(void)p; (void)n; (void)m;
	fuse_reply_err(req, EPERM);
}

static void bf_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
	(void)p; (void)n;
	fuse_reply_err(req, EPERM);
}

static void bf_symlink(fuse_req_t req, const char *l, fuse_ino_t p, const char *n)
{
	(void)l; (void)p; (void)n;
	fuse_reply_err(req, EPERM);
}

static void bf_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np,
		      const char *nn, unsigned int flags)
{
	(void)p; (void)n; (void)np; (void)nn; (void)flags;
	fuse_reply_err(req, EPERM);
}

static void bf_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np, const char *nn)
{
	(void)ino; (void)np; (void)nn;
	fuse_reply_err(req, EPERM);
}

static void bf_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
		      struct fuse_file_info *fi)
{
	(void)p; (void)n; (void)m; (void)fi;
	fuse_reply_err(req, EPERM);
}

static const struct fuse_lowlevel_ops bf_ops = {
	.init = bf_init,
	.lookup = bf_lookup,
	.getattr = bf_getattr,
	.setattr = bf_setattr,
	.open = bf_open,
	.release = bf_release,
	.read = bf_read,
	.write = bf_write,
	.fsync = bf_fsync,
	.flush = bf_flush,
	.fallocate = bf_fallocate,
	.opendir = bf_opendir,
	.readdir = bf_readdir,
	.statfs = bf_statfs,
	.mknod = bf_mknod,
	.mkdir = bf_mkdir,
	.rmdir = bf_unlink,
	.unlink = bf_unlink,
	.symlink = bf_symlink,
	.rename = bf_rename,
	.link = bf_link,
	.create = bf_create,
};

/* ------------------------------------------------------------- serving */

/* fsname= as a FUSE option: its commas and backslashes escaped (fuse_opt's rule). */
static void fsname_opt(const char *name, char *out, size_t len)
{
	size_t o = 0;

	for (; *name && o + 3 < len; name++) {
		if (*name == ',' || *name == '\\')
			out[o++] = '\\';
		out[o++] = *name;
	}
	out[o] = 0;
}

int bf_serve(struct bf_daemon *d, char *status, size_t statuslen)
{
	char opts[2048], fsname[2 * PATH_MAX], why[1024];
	char *argv[] = { "blkfs", "-o", opts, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse_loop_config *lc;
	struct fuse_session *se;
	struct bf_final *fin;
	bool cmds_done;
	int dummy, ret, code = 0;

	/*
	 * The source is the config's absolute path, so `mount -a` and findmnt
	 * see an fstab line's mount as mounted. Private to the mounting user
	 * unless allow_other (config or mount option); then the kernel checks
	 * each file's mode and owner (default_permissions).
	 */
	fsname_opt(d->fsname[0] ? d->fsname : "blkfs", fsname, sizeof(fsname));
	if (snprintf(opts, sizeof(opts), "fsname=%s,subtype=blkfs%s%s%s", fsname,
		     d->conf.mount.allow_other ? ",allow_other,default_permissions" : "",
		     d->kopts[0] ? "," : "", d->kopts) >= (int)sizeof(opts)) {
		fprintf(stderr, "blkfs: mount options too long: %s\n", opts);
		return 1;
	}
	se = fuse_session_new(&args, &bf_ops, sizeof(bf_ops), d);
	if (!se) {
		fprintf(stderr, "blkfs: bad FUSE options: %s\n", opts);
		fuse_opt_free_args(&args);
		return 1;
	}
	dummy = bf_rawio_attach(d, se, BF_MAX_WRITE, why, sizeof(why));
	if (dummy < 0) {
		fprintf(stderr, "%s\n", why);
		code = 1;
		goto out_destroy;
	}
	d->se = se;
	if (fuse_session_mount(se, d->mnt)) {
		fprintf(stderr, "blkfs: cannot mount %s (see the message above)\n", d->mnt);
		close(dummy);
		code = 1;
		goto out_destroy;
	}
	close(dummy);
	if (fuse_set_signal_handlers(se)) {
		fprintf(stderr, "blkfs: cannot install signal handlers\n");
		code = 1;
		goto out_unmount;
	}
	ret = pc_cache_start(d->pc);
	if (ret) {
		fprintf(stderr, "blkfs: cannot start the flusher: %s\n", strerror(-ret));
		code = 1;
		goto out_stop;
	}

	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, BF_MAX_THREADS);
	fuse_loop_cfg_set_clone_fd(lc, 0);
	ret = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	if (ret < 0 && ret != -ENODEV)
		blk_err("request loop ended: %s", strerror(-ret));

out_stop:
	/*
	 * A command's reply goes out while the transport still takes it. One
	 * that makes no progress for shutdown_timeout (a remove whose
	 * writeback hangs) is answered with an error and left running: its
	 * device is given up on with it, and nothing is freed.
	 */
	cmds_done = ctl_jobs_wait(d);
	/*
	 * The ring serves no new request (as the ended loop does not) and its
	 * threads commit the replies to those in hand, then end: before the
	 * handlers go, since a dying queue signals the loop.
	 */
	if (!bf_rawio_stop(d->conf.mount.shutdown_timeout_ms))
		d->abandoned = true;	/* requests in hand on a hung device: exit, free nothing */
	/*
	 * Requests still in flight get their replies (the kernel drops those
	 * of a connection that is gone) before the final writeback, each
	 * device in a thread of its own, and a device that makes no progress
	 * for [mount] shutdown_timeout is given up on (fuse/shutdown.c).
	 */
	fin = bf_final_begin(d);
	if (!cmds_done)
		d->abandoned = true;	/* a command's thread still uses its file, its device */
	if (bf_final_wait_drained(d, fin) && !d->abandoned)
		files_free_all();	/* else a request given up on may still use its file */
	if (bf_rawio_failed()) {
		/* callers waiting on the ring get ENOTCONN now, not after the writeback */
		code = 1;
		d->se = NULL;
		fuse_session_unmount(se);
	}
	/*
	 * From here a signal cannot stop the daemon before its data is
	 * written: ours replace libfuse's handlers (which would only end the
	 * loop, already ended) before libfuse removes its own, so no moment
	 * is left where the default action, death, applies.
	 */
	bf_final_signals();
	fuse_remove_signal_handlers(se);
	bf_notify("STOPPING=1\nSTATUS=Writing back before exit");
	bf_final_progress_start(d);
	/* everything dirty goes to the backend before the mount disappears */
	if (bf_final_end(d, fin, status, statuslen))
		code = 1;
	bf_final_progress_stop();
	bf_notify("STATUS=%s", d->abandoned ? "Gave up on a hung I/O: data lost (see the log)" :
		  code ? "Data could not be written back (see the log)" : "All data written back");
out_unmount:
	d->se = NULL;
	/* lazily, and the kernel ends what callers still wait for once we exit */
	fuse_session_unmount(se);
	if (d->abandoned) {
		/* a hung request may still reply through the session: it stays */
		fuse_opt_free_args(&args);
		return code;
	}
out_destroy:
	d->se = NULL;
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	bf_rawio_detach();
	return code;
}
