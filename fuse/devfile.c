/* SPDX-License-Identifier: MIT */
/*
 * fuse/devfile.c - the device file's operations (file.h): its open policy
 * (a read-only mount, the kernel's writeback cache, the reply's caching
 * flags) and release; read, write, fsync and fallocate of a device, each
 * a request that takes one of the device's slots (slots.h) and starts the
 * cache's asynchronous form; its reply comes from the completion. The
 * hot path: nothing here but the request's way to the cache and back.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/tlslots.h"
#include "../backends/lib/trace.h"
#include "bf.h"
#include "devfile.h"
#include "devtab.h"
#include "file.h"
#include "rawio.h"
#include "slots.h"

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
	char *data;		/* direct READ: the reply's data (unless mapped: aio.map) */
	char *kept;		/* a receive buffer this request holds */
	int state;		/* atomic: REQ_* */
	struct bf_slot slot;	/* bd->slots */
	struct pc_read rd;
	/* the FUSE level's record of it (backends/lib/trace.h): begun at receipt, ended at the reply */
	uint64_t bt_start, bt_pos, bt_len;
	uint32_t bt_pid;
	enum blk_op bt_op;
};

/*
 * Replies counted per thread, as the device level's counts (core/submit.c):
 * a reply is counted by the thread that sends it, in a block of its own (a
 * plain store, no shared line), found through its table (tlslots.h) at
 * bd->reply_id and listed on bd->reply_tl. reply_lock, a leaf: the lists,
 * the ids, a block's bd (written under it, read by its owner without it).
 * A device that goes orphans its blocks (bd = NULL) before its id is free
 * again; the owner frees an orphan at its next look-up of that id or at
 * exit. A thread that exits folds its counts into bd->req_inline and
 * bd->req_parked.
 */
struct bf_reply_tl {
	struct bf_reply_tl *next;	/* reply_lock: bd->reply_tl */
	struct bf_dev *bd;		/* atomic, written under reply_lock: NULL once removed */
	uint64_t inl, parked;		/* its thread's: OWNED_ADD */
};

#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELAXED)

static pthread_mutex_t reply_lock = PTHREAD_MUTEX_INITIALIZER;

static void reply_attach(void *blk, void *owner)
{
	struct bf_reply_tl *t = blk;
	struct bf_dev *bd = owner;

	__atomic_store_n(&t->bd, bd, __ATOMIC_RELAXED);
	t->next = bd->reply_tl;
	bd->reply_tl = t;
}

static void reply_fold(void *blk)
{
	struct bf_reply_tl *t = blk, **pp;
	struct bf_dev *bd = t->bd;

	if (!bd)
		return;
	for (pp = &bd->reply_tl; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	__atomic_add_fetch(&bd->req_inline, t->inl, __ATOMIC_RELAXED);
	__atomic_add_fetch(&bd->req_parked, t->parked, __ATOMIC_RELAXED);
}

static struct tls_kind reply_kind = TLS_KIND_INIT(&reply_lock, sizeof(struct bf_reply_tl),
						  reply_attach, reply_fold);
static __thread struct tls_table reply_tt;

/* One more reply of @bd, sent by the thread that received its request (@inl) or not. */
static void reply_count(struct bf_dev *bd, bool inl)
{
	struct bf_reply_tl *t = tls_slot(&reply_tt, bd->reply_id);

	if (__builtin_expect(!t || __atomic_load_n(&t->bd, __ATOMIC_RELAXED) != bd, 0))
		t = tls_slot_make(&reply_kind, &reply_tt, bd->reply_id, bd);
	if (__builtin_expect(t != NULL, 1))
		OWNED_ADD(inl ? &t->inl : &t->parked, 1);
	else
		__atomic_add_fetch(inl ? &bd->req_inline : &bd->req_parked, 1, __ATOMIC_RELAXED);
}

void bf_dev_reply_counts(struct bf_dev *bd, uint64_t *inl, uint64_t *parked)
{
	struct bf_reply_tl *t;

	/* under reply_lock: a block that an exiting thread folds is counted once */
	pthread_mutex_lock(&reply_lock);
	*inl = __atomic_load_n(&bd->req_inline, __ATOMIC_RELAXED);
	*parked = __atomic_load_n(&bd->req_parked, __ATOMIC_RELAXED);
	for (t = bd->reply_tl; t; t = t->next) {
		*inl += __atomic_load_n(&t->inl, __ATOMIC_RELAXED);
		*parked += __atomic_load_n(&t->parked, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&reply_lock);
}

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
	for (i = n; i-- > 0;) {	/* the first entry on top, as before */
		bd->reqs[i].bd = bd;
		ret = bf_slots_add(&bd->slots, &bd->reqs[i].slot);
		if (ret) {	/* no room for the pool's table: none taken yet */
			bf_slots_destroy(&bd->slots);
			free(bd->reqs);
			bd->reqs = NULL;
			return ret;
		}
	}
	pthread_mutex_init(&bd->live_lock, NULL);
	pthread_mutex_lock(&reply_lock);
	bd->reply_tl = NULL;
	bd->reply_id = tls_id_get_locked(&reply_kind);
	pthread_mutex_unlock(&reply_lock);
	return 0;
}

void bf_dev_reqs_destroy(struct bf_dev *bd)
{
	struct bf_reply_tl *t;

	if (!bd->reqs)
		return;
	/* the threads' blocks are orphans from now on */
	pthread_mutex_lock(&reply_lock);
	for (t = bd->reply_tl; t; t = t->next)
		__atomic_store_n(&t->bd, NULL, __ATOMIC_RELAXED);
	bd->reply_tl = NULL;
	tls_id_put_locked(&reply_kind, bd->reply_id);
	bd->reply_id = TLS_NO_ID;
	pthread_mutex_unlock(&reply_lock);
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
 * it begins here (Q), before any wait for a slot (the time the caller
 * waited), is issued (D) once it has its slot, and ends at its reply
 * (req_trace_end()).
 */
static struct bf_req *req_get(struct bf_dev *bd, fuse_req_t req,
			      void (*done)(struct pc_aio *aio, ssize_t res), enum blk_op op,
			      uint64_t pos, uint64_t len)
{
	uint32_t pid = (uint32_t)fuse_req_ctx(req)->pid;
	uint64_t start = bt_req_begin(bd->bt, op, pos, len, pid);
	bool waited;
	struct bf_req *r = req_of_slot(bf_slots_get(&bd->slots, &waited));

	/*
	 * Its start is its unsplit I/O's start too (the device level's begin
	 * takes it in this thread, within this handler: clock.h), unless it
	 * waited for its slot: that wait is no device time.
	 */
	if (!waited)
		blk_stamp_set(&blk_begin_stamp, &r->aio, start);

	/* the slot is the FUSE level's D: Q2D is the wait for it */
	bt_req_issue(bd->bt, op, pos, len, pid);
	r->req = req;
	r->data = NULL;
	r->kept = NULL;
	r->state = REQ_RUNNING;
	r->aio.done = done;
	r->aio.waited = false;
	r->aio.fua = false;
	r->aio.map_ok = false;
	r->aio.map = NULL;
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
	/*
	 * Answered inline (in its handler, in the thread that received it):
	 * the device level's end of its unsplit I/O, in this thread just
	 * before, is its end too (one clock read for both: clock.h).
	 */
	bt_req_end_tok(r->bd->bt, r->bt_op, r->bt_pos, r->bt_len, r->bt_pid, r->bt_start,
		       (long)res, req_here == r ? &r->aio : NULL);
}

static void req_put(struct bf_req *r)
{
	struct bf_dev *bd = r->bd;

	if (req_here == r) {	/* a handler that gave up on @r before starting it */
		req_here = NULL;
		blk_stamp_clear(&blk_begin_stamp);
	}

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
	/* @r's start is no later I/O's start (untaken: @r sent none, or parked first) */
	blk_stamp_clear(&blk_begin_stamp);
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
	reply_count(r->bd, req_here == r);
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

/*
 * A reply from @cnt pieces of memory. libfuse's fuse_reply_iov() mallocs a
 * vector one longer, for its header, and frees it, per reply; a reply of one
 * piece (a 4 KiB read, the common case) goes through fuse_reply_buf(), whose
 * vector is on the stack.
 */
static void reply_pieces(fuse_req_t req, const struct iovec *iov, int cnt)
{
	if (cnt == 1)
		fuse_reply_buf(req, iov[0].iov_base, iov[0].iov_len);
	else
		fuse_reply_iov(req, iov, cnt);
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
		reply_pieces(r->req, r->rd.iov, r->rd.iovcnt);
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
	else if (aio->map)
		/*
		 * Inside the backend's end_io, under its lock shared: straight
		 * from its memory (ram's arena), the kernel's copy the only one.
		 * The writev(2) to /dev/fuse blocks on nothing of ours.
		 */
		reply_pieces(r->req, aio->map, (int)aio->mapcnt);
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

/* ------------------------------------------------------- the file's ops */

/* An open device file. */
struct bf_devfile {
	struct bf_file f;	/* first (file.h) */
	struct bf_dev *dev;	/* held, counted in its opens, until release */
	bool direct;		/* opened with O_DIRECT */
	pc_errseq_t since;	/* writeback errors this opener has seen */
};
_Static_assert(offsetof(struct bf_devfile, f) == 0, "bf_devfile: f first");

static inline struct bf_devfile *devfile_of(struct bf_file *f)
{
	return bf_file_entry(f, struct bf_devfile);
}

/* An open of the device file ends (or failed): the count and reference bf_open took. */
static void dev_close(struct bf_dev *bd)
{
	__atomic_sub_fetch(&bd->opens, 1, __ATOMIC_RELAXED);
	bf_dev_put(bd);
}

/* @in->dev held and counted in its opens (file.h): kept in the file, or dropped on error. */
static int dev_open(fuse_req_t req, const struct bf_inode *in, struct fuse_file_info *fi)
{
	struct bf_daemon *d = fuse_req_userdata(req);
	struct bf_dev *bd = in->dev;
	struct bf_devfile *df;
	struct bf_file *f;

	/*
	 * A read-only mount (-o ro): the kernel already refuses opens for
	 * writing on it (EROFS, as on any read-only filesystem); refused here
	 * too, so no handle that could write ever exists.
	 */
	if (d->conf.mount.read_only && (fi->flags & O_ACCMODE) != O_RDONLY) {
		dev_close(bd);
		return -EROFS;
	}
	f = bf_file_alloc(&bf_dev_fops, sizeof(*df));
	if (!f) {
		dev_close(bd);
		return -ENOMEM;
	}
	if (d->conf.mount.kernel_writeback && (fi->flags & O_TRUNC)) {
		/*
		 * With the kernel's writeback cache the kernel owns the size: it
		 * would believe the device empty after O_TRUNC and keep believing
		 * it. Refused rather than ignored (README: kernel_cache).
		 */
		bf_file_free(f);
		dev_close(bd);
		return -EPERM;
	}
	df = devfile_of(f);
	df->dev = bd;
	df->direct = fi->flags & O_DIRECT;
	df->since = pc_errseq_sample(bd->pc);
	fi->fh = (uint64_t)(uintptr_t)f;
	if (d->conf.mount.kernel_writeback) {
		/* the kernel caches and handles O_DIRECT itself (writes back, invalidates) */
		fi->keep_cache = 1;
		fi->noflush = 0;
		return 0;
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
	return 0;
}

static void dev_release(struct bf_file *f)
{
	struct bf_dev *bd = devfile_of(f)->dev;

	bf_file_free(f);
	dev_close(bd);
}

static void dev_read(fuse_req_t req, struct bf_file *f, size_t size, off_t off)
{
	struct bf_devfile *df = devfile_of(f);
	struct bf_req *r;
	char *buf;

	if (df->direct) {
		buf = bf_rawio_req_buf();
		if (!buf) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		if (size > BF_MAX_WRITE)
			size = BF_MAX_WRITE;
		r = req_get(df->dev, req, dread_done, BLK_READ, (uint64_t)off, size);
		r->data = buf;
		/* over /dev/fuse the reply may leave from the backend's memory */
		r->aio.map_ok = !bf_rawio_req_in_ring();
		pc_direct_read_async(df->dev->pc, &r->aio, buf, size, (uint64_t)off);
		req_returned(r, buf, size);
		return;
	}
	r = req_get(df->dev, req, read_done, BLK_READ, (uint64_t)off, size);
	pc_read_async(df->dev->pc, &r->aio, &r->rd, size, (uint64_t)off);
	req_returned(r, NULL, 0);
}

static void dev_write(fuse_req_t req, struct bf_file *f, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	struct bf_devfile *df = devfile_of(f);
	struct bf_req *r;

	r = req_get(df->dev, req, write_done, BLK_WRITE, (uint64_t)off, size);
	if (!bf_rawio_in_thread_buf(buf, size)) {
		/* the data is not where the request could take it along: a copy */
		char *k = bf_rawio_keep(&buf, size);

		/* the copy's time is not the device's: its I/O reads its own start */
		blk_stamp_clear(&blk_begin_stamp);

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
	if (df->direct && !fi->writepage)
		pc_direct_write_async(df->dev->pc, &r->aio, buf, size, (uint64_t)off);
	else
		pc_write_async(df->dev->pc, &r->aio, buf, size, (uint64_t)off);
	req_returned(r, buf, size);
}

static void dev_fsync(fuse_req_t req, struct bf_file *f)
{
	struct bf_devfile *df = devfile_of(f);
	struct bf_req *r;

	r = req_get(df->dev, req, status_done, BLK_FLUSH, 0, 0);
	pc_fsync_async(df->dev->pc, &r->aio, &df->since);
	req_returned(r, NULL, 0);
}

/* As the kernel's blkdev_fallocate(). */
static void dev_fallocate(fuse_req_t req, struct bf_file *f, int mode, off_t off, off_t len)
{
	struct bf_devfile *df = devfile_of(f);
	uint64_t size, start = (uint64_t)off, n = (uint64_t)len;
	struct bf_req *r;

	size = bf_dev_size(df->dev);
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
	if ((start | n) & (df->dev->geo.lbs - 1)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	switch (mode) {
	case FALLOC_FL_ZERO_RANGE:
	case FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE:
		r = req_get(df->dev, req, status_done, BLK_WRITE_ZEROES, start, n);
		pc_write_zeroes_async(df->dev->pc, &r->aio, start, n);
		break;
	case FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE:
		r = req_get(df->dev, req, status_done, BLK_DISCARD, start, n);
		pc_discard_async(df->dev->pc, &r->aio, start, n);
		break;
	default:
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	req_returned(r, NULL, 0);
}

const struct bf_file_ops bf_dev_fops = {
	.open = dev_open,
	.release = dev_release,
	.read = dev_read,
	.write = dev_write,
	.fsync = dev_fsync,
	.fallocate = dev_fallocate,
};
