// SPDX-License-Identifier: MIT
/*
 * backends/rbd.c - a Ceph RBD image through librbd: blkfs in front of a
 * distributed block store without a gateway daemon (qemu-nbd and the nbd
 * backend were the route before).
 *
 * I/O: rbd_aio_readv/rbd_aio_writev straight from the cache's iovec (folio
 * memory), rbd_aio_flush, and rbd_aio_write_zeroes for both DISCARD and
 * WRITE_ZEROES (librbd's discard skips partial objects and rounds to
 * rbd_discard_granularity_bytes, so it would not read back as zeros).
 *
 * Completions: librbd (Ceph 16) calls a completion's callback on its own
 * asio thread, with none of its locks held (AioCompletion dispatches the
 * user's callback after it has finished with the request), so end_io runs
 * right there: no hand-off to a thread of ours and back. That thread is
 * also where the next I/O of a queue that was full is submitted from.
 * The other model (rbd_set_image_notification with an eventfd, polled by
 * a thread of ours with rbd_poll_io_events, as SPDK does) costs a wake-up
 * across threads per batch, 40-80 us on this VM.
 *
 * Queueing: at most queue_depth I/Os are in librbd at once; more wait in a
 * FIFO (rd->lock) and go out as earlier ones complete. A submit never
 * blocks and never fails for want of a slot.
 *
 * Failure: librados's op, mon-op and mount timeouts are set from `timeout`
 * (default 30 s), so a cluster that stops answering fails requests with
 * EIO after that long instead of hanging the mount; the cache keeps the
 * data dirty and the next fsync reports it. librados counts the timeout
 * from the moment librbd has an I/O, not from its submit here: an I/O that
 * waited for a slot behind ones that timed out would wait a whole timeout
 * more, and a queue of them one timeout per queue_depth I/Os (an fsync
 * with the OSD stopped took twice `timeout` to fail). So when an I/O ends
 * with ETIMEDOUT, every waiter queued before that moment fails with it at
 * once instead of going out (rbd_finish); the cache keeps their data dirty
 * and writes it again later. The same for what comes after: once an I/O
 * timed out the device is "down" (down_ns), and every I/O fails at once
 * with ETIMEDOUT until the probe thread (rbd_probe_fn) has the OSD of the
 * image's header answer a stat, tried each second. An fsync would
 * otherwise wait for its writeback in flight to time out, then write the
 * same data again and wait a second timeout. Where only some OSDs are gone
 * and the header's answers, the probe ends "down" at once, and I/O waits
 * its own timeout as before. And before the first timeout: while librbd
 * has answered nothing for stall_ns (min(timeout / 2, 2 s)) with I/O in
 * flight, new I/O waits here instead of going out, so that it fails with
 * the first timeout rather than wait for one of its own (an I/O that went
 * out just before the first timeout timed out a whole timeout later, and an
 * fsync waiting for it took 2 x timeout, 1 run of rbd_outage.sh in 10).
 * From a stop of the OSD to the EIO is then at most timeout + stall_ns.
 *
 * The exclusive lock: taken with rbd_lock_acquire(EXCLUSIVE) (librbd hands
 * a lock taken automatically to whoever asks); a second opener is refused
 * naming the holder. `break_lock = yes` breaks the lock of a holder that
 * is dead, which is one that no longer watches the image (a live one is
 * refused by name even so: rbd_break_dead_lock).
 *
 * Lock order: rd->lock is a leaf; it is never held across a librbd call
 * or end_io.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends_int.h"
#include "kit/knobs.h"

#define RBD_DEF_QD		64u
#define RBD_MAX_QD		4096u
#define RBD_DEF_TIMEOUT_S	30u
#define RBD_MAX_TIMEOUT_S	3600u

/*
 * The config's keys, in the order ops->keys lists them (the config's
 * message for an unknown key names them so). open() reads the text keys
 * first and checks pool and image, then the others in the order it read
 * them by hand (rbd_value_keys), so that a config with two bad values
 * names the same one as before. Built without librbd the table is still
 * here: the keys are known, and a config that asks for rbd is refused by
 * open() saying why.
 */
struct rbd_conf {
	const char *pool, *image, *ns, *conf, *id, *keyring;
	unsigned int qd, timeout_s;
	bool create, exclusive, break_lock, cache;
};

#define RBD_KNOBS(K)											\
	K(pool,        text, pool,       0, 0, 0, "a pool's name", "the RADOS pool (required)")	\
	K(image,       text, image,      0, 0, 0, "an image's name", "the RBD image (required)")	\
	K(namespace,   text, ns,         0, 0, 0, "a namespace", "the pool's namespace")		\
	K(conf,        text, conf,       0, 0, 0, "a path",						\
	  "a ceph.conf (absent: the library's search)")						\
	K(id,          text, id,         0, 0, 0, "a client id", "the client id (absent: admin)")	\
	K(keyring,     text, keyring,    0, 0, 0, "a path",						\
	  "the client's keyring (absent: the one ceph.conf names)")					\
	K(create,      bool, create,     0, 1, 0, "yes/no",						\
	  "create the image with size when it does not exist")					\
	K(queue_depth, uint, qd,         1, RBD_MAX_QD, RBD_DEF_QD, "I/Os",				\
	  "I/Os in librbd at once; more wait in order")						\
	K(timeout,     sec,  timeout_s,  1, RBD_MAX_TIMEOUT_S, RBD_DEF_TIMEOUT_S,			\
	  "librados takes whole seconds",								\
	  "librados's op and monitor-op timeouts: an unanswered request fails with EIO")		\
	K(exclusive,   bool, exclusive,  0, 1, 1, "yes/no",						\
	  "take the image's exclusive lock; an image locked by another client is refused")	\
	K(break_lock,  bool, break_lock, 0, 1, 0, "yes/no",						\
	  "break the lock of a holder that is dead (no longer watches the image)")		\
	K(rbd_cache,   bool, cache,      0, 1, 0, "yes/no", "librbd's client cache")

BK_BACKEND_DEFINE(rbd, struct rbd_conf, RBD_KNOBS);

#ifdef BLKFS_HAVE_RBD

#include <rados/librados.h>
#include <rbd/librbd.h>

/*
 * Below this a real cluster's ordinary OSD failover fails I/O: the monitors
 * mark a dead OSD down only after osd_heartbeat_grace (20 s) plus up to
 * osd_heartbeat_interval (6 s), and requests to it wait that long.
 */
#define RBD_SAFE_TIMEOUT_S	30u
/* Connecting at open waits at most this long (a dead monitor fails a mount fast). */
#define RBD_MAX_MOUNT_TIMEOUT_S	10u
#define NS_PER_S		1000000000ull
#define RBD_DEF_PBS		4096u

struct rbd_dev;

/* One I/O in librbd or waiting for a slot; from rd->pool. */
struct rbd_req {
	struct blk_io *io;
	struct rbd_dev *rd;
	struct list_head link;		/* rd->lock: on rd->waiting */
	uint64_t queued_ns;		/* blk_now_ns() when it joined rd->waiting */
};

struct rbd_dev {
	struct blk_backend be;		/* must come first */
	struct blk_geometry geo;	/* size changes only in rbd_be_resize (quiesced),
					 * atomically: read with __atomic_load_n */
	struct blk_geometry geo_open;	/* geo as opened: the fields that never change,
					 * copied whole without racing with size */
	uint64_t max_size;		/* atomic: the largest geo.size of this open
					 * (rbd_check_geometry, under writeback) */
	rados_t cluster;
	rados_ioctx_t ioctx;
	rbd_image_t image;
	char *pool_name, *image_name, *dev;
	bool exclusive, cache;
	unsigned int qd;
	struct be_pool pool;

	pthread_mutex_t lock;
	struct list_head waiting;	/* lock: requests past queue_depth */
	unsigned int inflight;		/* lock: requests in librbd */
	uint64_t progress_ns;		/* lock: the last completion, or when inflight
					 * left 0: how long librbd has answered nothing */
	uint64_t stall_ns;		/* set at open: min(timeout / 2, 2 s) */

	/* atomic counters for ->stat */
	uint64_t nr_reads, nr_writes, nr_flushes, nr_zeroes, nr_errors, nr_queued;
	bool said_error;		/* atomic: the first failed I/O was logged */
	unsigned int nr_broken;		/* set at open: dead holders' locks broken (break_lock) */

	/*
	 * The header watch (rbd_update_watch): librbd's callback only wakes
	 * watch_thread, which asks the image's size (a librbd call that may
	 * refresh the image: not for librbd's own thread) and tells the host
	 * when it differs from geo.size. A notice stays pending until the
	 * size is read (a failed read is tried again each second), and none
	 * is taken for an outside resize while blkfs's own resize or reset
	 * changes the size (wown), or across one (wgen).
	 */
	const struct blk_host *host;
	uint64_t watch_handle;
	bool watching;
	pthread_t watch_thread;
	pthread_mutex_t wlock;
	pthread_cond_t wcond;		/* to watch_thread: wpending, !wown or wstop
					 * (blk_cond_init: timed retries) */
	bool wpending, wstop;		/* wlock */
	bool wown;			/* wlock: an own resize or reset is under way */
	uint64_t wgen;			/* wlock: own resizes and resets ended */
	uint64_t nr_outside_resizes;	/* atomic */
	uint64_t obj_size;		/* the image's object size (fixed) */

	/* An I/O timed out: fail I/O at once until the probe is answered. */
	uint64_t down_ns;		/* atomic: blk_now_ns() it went down, 0 up */
	uint64_t nr_fast_fails;		/* atomic: I/Os failed at once while down */
	uint64_t nr_downs;		/* atomic */
	char header_oid[128];		/* the object the probe stats */
	pthread_t probe_thread;
	bool probe_running;
	/*
	 * Test hooks (BLKFS_RBD_TEST, read at open; the tests' only way to
	 * make librbd fail on cue): "features" makes rbd_get_features fail
	 * with EIO, "notice_size=N" the watch's first N reads of the size.
	 */
	bool test_features;
	unsigned int test_notice_fails;	/* wlock */
	pthread_mutex_t plock;
	pthread_cond_t pcond;		/* to the probe thread: down or pstop
					 * (blk_cond_init: timed retries) */
	bool pstop;			/* plock */
};

static int rbd_start(struct rbd_req *rq);

/*
 * What a real block device would give: EIO for anything the cluster does
 * (a timeout, a blocklisted client, a lost lock), ENOSPC for a full pool.
 */
static int rbd_map_err(int r)
{
	return r == -ENOSPC || r == -EDQUOT ? -ENOSPC : -EIO;
}

/*
 * End @rq's I/O with @res and pass its slot to the oldest waiter, if any:
 * the next I/O to end when that one fails at once. Returns the waiter
 * (its slot taken, inflight as it was) or NULL.
 */
static struct rbd_req *rbd_end_one(struct rbd_dev *rd, struct rbd_req *rq, int res)
{
	struct blk_io *io = rq->io;
	struct rbd_req *next = NULL;

	pthread_mutex_lock(&rd->lock);
	rd->progress_ns = blk_now_ns();
	if (!list_empty(&rd->waiting)) {
		next = list_first_entry(&rd->waiting, struct rbd_req, link);
		list_del_init(&next->link);
	} else {
		rd->inflight--;
	}
	pthread_mutex_unlock(&rd->lock);
	be_pool_put(&rd->pool, rq);
	if (res < 0) {
		__atomic_add_fetch(&rd->nr_errors, 1, __ATOMIC_RELAXED);
		if (be_first_io(&rd->said_error))
			blk_err("rbd: %s: %s of %" PRIu64 "+%" PRIu64 " failed: %s (as %s; "
				"later failures are counted in rbd_errors)", rd->dev,
				blk_op_name(io->op), io->pos, io->len, strerror(-res),
				strerror(-rbd_map_err(res)));
		res = rbd_map_err(res);
	}
	/* No lock of ours or librbd's is held here (see the top of the file). */
	io->end_io(io, res);
	return next;
}

/*
 * End @rq with @res, then start the waiters its slot passes to. A loop,
 * not a recursion: each waiter can fail at once (past an end that moved
 * in after an outside shrink, a refusal by librbd), and a long queue of
 * such would otherwise nest as deep as it is long, on librbd's thread.
 */
static void rbd_finish(struct rbd_dev *rd, struct rbd_req *rq, int res)
{
	/* waiters queued before this moment fail with a timeout (the top of the file) */
	uint64_t tmo_at = res == -ETIMEDOUT ? blk_now_ns() : 0;

	while ((rq = rbd_end_one(rd, rq, res))) {
		if (tmo_at && rq->queued_ns <= tmo_at) {
			res = -ETIMEDOUT;
			continue;
		}
		res = rbd_start(rq);
		if (!res)
			break;
		tmo_at = res == -ETIMEDOUT ? blk_now_ns() : 0;
	}
}

/* An I/O timed out: the device is down until the probe is answered (the top). */
static void rbd_set_down(struct rbd_dev *rd)
{
	uint64_t zero = 0;

	if (!__atomic_compare_exchange_n(&rd->down_ns, &zero, blk_now_ns(), false,
					 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		return;
	__atomic_add_fetch(&rd->nr_downs, 1, __ATOMIC_RELAXED);
	blk_warn("rbd: %s: an I/O to %s/%s timed out: I/O fails at once until the cluster "
		 "answers (asked each second)", rd->dev, rd->pool_name, rd->image_name);
	pthread_mutex_lock(&rd->plock);
	pthread_cond_signal(&rd->pcond);
	pthread_mutex_unlock(&rd->plock);
}

static void rbd_complete_cb(rbd_completion_t c, void *arg)
{
	struct rbd_req *rq = arg;
	struct blk_io *io = rq->io;
	ssize_t r = rbd_aio_get_return_value(c);
	int res = 0;

	rbd_aio_release(c);
	/*
	 * Only the probe ends "down", never an I/O that succeeds: librbd
	 * answers some without the cluster (a read of an object the object
	 * map says does not exist, a flush with nothing to flush, a write
	 * into its cache), and one such let an fsync with the OSD stopped
	 * wait for a second timeout (rbd_outage.sh, 1 run in 10).
	 */
	if (r == -ETIMEDOUT)
		rbd_set_down(rq->rd);
	if (r < 0)
		res = (int)r;
	else if (io->op == BLK_READ && (uint64_t)r != io->len)
		/* Short: the image shrank under us (a resize from outside). */
		res = -EIO;
	rbd_finish(rq->rd, rq, res);
}

/*
 * Hand @rq, which holds a slot, to librbd: 0, or -errno for a refusal at
 * submission or an I/O past an end that moved in (rbd_be_submit), which
 * the caller ends like a failed I/O (rbd_finish).
 */
static int rbd_start(struct rbd_req *rq)
{
	struct rbd_dev *rd = rq->rd;
	struct blk_io *io = rq->io;
	rbd_completion_t c;
	int r;

	if (io->op != BLK_FLUSH &&
	    io->pos + io->len > __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED))
		return -ENXIO;	/* past an end that moved in (above) */
	if (__atomic_load_n(&rd->down_ns, __ATOMIC_RELAXED)) {
		/* an I/O timed out and the probe has had no answer yet (the top) */
		__atomic_add_fetch(&rd->nr_fast_fails, 1, __ATOMIC_RELAXED);
		return -ETIMEDOUT;
	}
	r = rbd_aio_create_completion(rq, rbd_complete_cb, &c);
	if (r < 0)
		return r;
	switch (io->op) {
	case BLK_READ:
		r = rbd_aio_readv(rd->image, io->iov, io->iovcnt, io->pos, c);
		break;
	case BLK_WRITE:
		r = rbd_aio_writev(rd->image, io->iov, io->iovcnt, io->pos, c);
		break;
	case BLK_FLUSH:
		r = rbd_aio_flush(rd->image, c);
		break;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		r = rbd_aio_write_zeroes(rd->image, io->pos, io->len, c, 0, 0);
		break;
	default:
		r = -EINVAL;
	}
	if (r < 0)
		rbd_aio_release(c);
	return r < 0 ? r : 0;
}

static int rbd_be_submit(struct blk_backend *be, struct blk_io *io)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;
	struct rbd_req *rq;
	bool now;
	int r;

	rq = be_pool_get(&rd->pool);
	if (!rq)
		return -ENOMEM;
	rq->io = io;
	rq->rd = rd;
	switch (io->op) {
	case BLK_READ:
		__atomic_add_fetch(&rd->nr_reads, 1, __ATOMIC_RELAXED);
		break;
	case BLK_WRITE:
		__atomic_add_fetch(&rd->nr_writes, 1, __ATOMIC_RELAXED);
		break;
	case BLK_FLUSH:
		__atomic_add_fetch(&rd->nr_flushes, 1, __ATOMIC_RELAXED);
		break;
	default:
		__atomic_add_fetch(&rd->nr_zeroes, 1, __ATOMIC_RELAXED);
	}
	rq->queued_ns = blk_now_ns();
	pthread_mutex_lock(&rd->lock);
	/* librbd answering nothing for stall_ns: wait here (the top of the file) */
	now = rd->inflight < rd->qd && list_empty(&rd->waiting) &&
	      (!rd->inflight || rq->queued_ns < rd->progress_ns + rd->stall_ns);
	if (!now)
		list_add_tail(&rq->link, &rd->waiting);
	else if (!rd->inflight++)
		rd->progress_ns = rq->queued_ns;
	pthread_mutex_unlock(&rd->lock);
	if (!now) {
		__atomic_add_fetch(&rd->nr_queued, 1, __ATOMIC_RELAXED);
		return 0;
	}
	r = rbd_start(rq);
	if (r)
		rbd_finish(rd, rq, r);
	return 0;
}

static void rbd_be_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	/*
	 * Not *geo = rd->geo: that reads size plainly while rbd_size_take
	 * stores it (TSan, tests/tsan/rbd.sh: writeback's check against an
	 * outside resize). size is stored atomically; the rest is fixed.
	 */
	*geo = rd->geo_open;
	geo->size = __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED);
}

/*
 * What blk_submit()'s check holds I/O to: after a shrink from outside the
 * cache may still write back past the new end in the moment between
 * blk_resize() and its dropping what lies there (fuse/live.c,
 * outside_resize()): that fails in rbd_start(), it is no caller's bug.
 */
static void rbd_check_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	*geo = rd->geo_open;	/* not rd->geo: see rbd_be_geometry */
	/* rbd_be_resize raises it while background writeback may submit */
	geo->size = __atomic_load_n(&rd->max_size, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------------- probe */

/*
 * While the device is down, stat the image's header object each second
 * (bounded by the OSD op timeout, `timeout`); an answer, whatever it says,
 * is the cluster answering: up again. A plain RADOS op, past librbd's
 * cache, which could answer a read without the cluster.
 */
static void *rbd_probe_fn(void *arg)
{
	struct rbd_dev *rd = arg;
	uint64_t size, down;
	bool said = false;
	time_t mtime;
	int r;

	pthread_mutex_lock(&rd->plock);
	while (!rd->pstop) {
		down = __atomic_load_n(&rd->down_ns, __ATOMIC_RELAXED);
		if (!down) {
			pthread_cond_wait(&rd->pcond, &rd->plock);
			continue;
		}
		pthread_mutex_unlock(&rd->plock);
		r = rados_stat(rd->ioctx, rd->header_oid, &size, &mtime);
		pthread_mutex_lock(&rd->plock);
		/*
		 * The OSD answered: the header's stat, or that it is gone.
		 * Any other error is no answer (one came back 3 s into a
		 * stop of the OSD, before the timeout): asked again.
		 */
		if (r >= 0 || r == -ENOENT) {
			if (__atomic_compare_exchange_n(&rd->down_ns, &down, 0, false,
							__ATOMIC_RELAXED, __ATOMIC_RELAXED))
				blk_info("rbd: %s: the cluster answers again after %" PRIu64 " ms "
					 "(I/O failed at once meanwhile)", rd->dev,
					 (blk_now_ns() - down) / 1000000u);
			said = false;
			continue;
		}
		if (r != -ETIMEDOUT && !said)
			blk_warn("rbd: %s: the probe of %s (rados_stat): %s; asked again each "
				 "second", rd->dev, rd->header_oid, strerror(-r));
		said = said || r != -ETIMEDOUT;
		if (!rd->pstop)
			blk_cond_wait_ms(&rd->pcond, &rd->plock, 1000);
	}
	pthread_mutex_unlock(&rd->plock);
	return NULL;
}

static int rbd_probe_start(struct rbd_dev *rd, struct blk_params *p)
{
	char id[96];
	int r;

	if (rbd_get_id(rd->image, id, sizeof(id)) >= 0)
		snprintf(rd->header_oid, sizeof(rd->header_oid), "rbd_header.%s", id);
	else	/* a format 1 image */
		snprintf(rd->header_oid, sizeof(rd->header_oid), "%s.rbd", rd->image_name);
	r = pthread_create(&rd->probe_thread, NULL, rbd_probe_fn, rd);
	if (r)
		return blk_param_error(p, NULL, "no thread for the rbd probe: %s", strerror(r));
	rd->probe_running = true;
	return 0;
}

static void rbd_probe_stop(struct rbd_dev *rd)
{
	if (!rd->probe_running)
		return;
	pthread_mutex_lock(&rd->plock);
	rd->pstop = true;
	pthread_cond_signal(&rd->pcond);
	pthread_mutex_unlock(&rd->plock);
	pthread_join(rd->probe_thread, NULL);
	rd->probe_running = false;
}

/* ---------------------------------------------------------------- watch */

static void rbd_watch_cb(void *arg)
{
	struct rbd_dev *rd = arg;

	pthread_mutex_lock(&rd->wlock);
	rd->wpending = true;
	pthread_cond_signal(&rd->wcond);
	pthread_mutex_unlock(&rd->wlock);
}

static void *rbd_watch_fn(void *arg)
{
	struct rbd_dev *rd = arg;
	bool said = false;
	uint64_t size, gen;
	int r;

	pthread_mutex_lock(&rd->wlock);
	for (;;) {
		while ((!rd->wpending || rd->wown) && !rd->wstop)
			pthread_cond_wait(&rd->wcond, &rd->wlock);
		if (rd->wstop)
			break;
		rd->wpending = false;
		gen = rd->wgen;
		pthread_mutex_unlock(&rd->wlock);
		/* The header changed: a resize, or a snapshot, a lock, a feature. */
		r = rbd_get_size(rd->image, &size);
		pthread_mutex_lock(&rd->wlock);
		if (rd->test_notice_fails && r >= 0) {
			rd->test_notice_fails--;
			r = -EIO;
		}
		if (r < 0) {
			/* Not lost: asked again in a second until it is read. */
			if (!said)
				blk_warn("rbd: %s: reading the size of %s/%s after a header "
					 "notice: %s; trying again each second", rd->dev,
					 rd->pool_name, rd->image_name, strerror(-r));
			said = true;
			rd->wpending = true;
			if (!rd->wstop)
				blk_cond_wait_ms(&rd->wcond, &rd->wlock, 1000);
			continue;
		}
		said = false;
		if (rd->wown || rd->wgen != gen) {
			/* read across blkfs's own change: read again once it is done */
			rd->wpending = true;
			continue;
		}
		if (size == __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED))
			continue;
		pthread_mutex_unlock(&rd->wlock);
		__atomic_add_fetch(&rd->nr_outside_resizes, 1, __ATOMIC_RELAXED);
		blk_info("rbd: %s: %s/%s is %" PRIu64 " bytes now (resized outside blkfs)",
			 rd->dev, rd->pool_name, rd->image_name, size);
		rd->host->size_changed(rd->host->ctx);
		pthread_mutex_lock(&rd->wlock);
	}
	pthread_mutex_unlock(&rd->wlock);
	return NULL;
}

/*
 * Around blkfs's own change of the image's size (rbd_be_resize, a reset):
 * the header notice it causes is not an outside resize.
 */
static void rbd_own_begin(struct rbd_dev *rd)
{
	pthread_mutex_lock(&rd->wlock);
	rd->wown = true;
	pthread_mutex_unlock(&rd->wlock);
}

static void rbd_own_end(struct rbd_dev *rd)
{
	pthread_mutex_lock(&rd->wlock);
	rd->wown = false;
	rd->wgen++;
	pthread_cond_signal(&rd->wcond);
	pthread_mutex_unlock(&rd->wlock);
}

static int rbd_watch_start(struct rbd_dev *rd, struct blk_params *p)
{
	int r;

	if (!rd->host || !rd->host->size_changed)
		return 0;
	r = pthread_create(&rd->watch_thread, NULL, rbd_watch_fn, rd);
	if (r)
		return blk_param_error(p, NULL, "no thread for the image watch: %s", strerror(r));
	r = rbd_update_watch(rd->image, &rd->watch_handle, rbd_watch_cb, rd);
	if (r < 0) {
		pthread_mutex_lock(&rd->wlock);
		rd->wstop = true;
		pthread_cond_signal(&rd->wcond);
		pthread_mutex_unlock(&rd->wlock);
		pthread_join(rd->watch_thread, NULL);
		return blk_param_error(p, "image", "rbd_update_watch on %s/%s: %s", rd->pool_name,
				       rd->image_name, strerror(-r));
	}
	rd->watching = true;
	return 0;
}

static void rbd_watch_stop(struct rbd_dev *rd)
{
	if (!rd->watching)
		return;
	/* No callback runs after this returns. */
	rbd_update_unwatch(rd->image, rd->watch_handle);
	pthread_mutex_lock(&rd->wlock);
	rd->wstop = true;
	pthread_cond_signal(&rd->wcond);
	pthread_mutex_unlock(&rd->wlock);
	pthread_join(rd->watch_thread, NULL);
	rd->watching = false;
}

/* ---------------------------------------------------------------- open */

#define RBD_MAX_LOCKERS		8
#define RBD_MAX_WATCHERS	64

/* A holder of the image's lock, from rbd_list_lockers. */
struct rbd_locker {
	char client[64];		/* "client.4123" */
	char addr[128];			/* "127.0.0.1:0/3456": rbd_lock_get_owners' name */
	int64_t id;			/* 4123, or -1 */
};

/* An address without its messenger prefix ("v1:"): the forms may differ. */
static const char *rbd_addr_bare(const char *a)
{
	if (!strncmp(a, "v1:", 3) || !strncmp(a, "v2:", 3))
		return a + 3;
	if (!strncmp(a, "any:", 4))
		return a + 4;
	return a;
}

static bool rbd_addr_eq(const char *a, const char *b)
{
	return !strcmp(rbd_addr_bare(a), rbd_addr_bare(b));
}

/*
 * The image's lockers: their number (at most @max in @v), or -errno.
 * librbd's exclusive lock is a cls lock on the header object, so it is
 * listed here, with the client and address rbd_lock_get_owners leaves out.
 */
static int rbd_lockers(rbd_image_t img, struct rbd_locker *v, int max)
{
	char clients[1024], cookies[1024], addrs[1024], tag[256];
	size_t clen = sizeof(clients), klen = sizeof(cookies), alen = sizeof(addrs);
	size_t tlen = sizeof(tag), coff = 0, aoff = 0;
	int excl, i;
	ssize_t n;

	n = rbd_list_lockers(img, &excl, tag, &tlen, clients, &clen, cookies, &klen, addrs,
			     &alen);
	if (n < 0)
		return (int)n;
	for (i = 0; i < n && i < max && coff < clen && aoff < alen; i++) {
		const char *c = clients + coff, *a = addrs + aoff;

		snprintf(v[i].client, sizeof(v[i].client), "%s", c);
		snprintf(v[i].addr, sizeof(v[i].addr), "%s", a);
		v[i].id = !strncmp(c, "client.", 7) ? strtoll(c + 7, NULL, 10) : -1;
		coff += strnlen(c, clen - coff) + 1;
		aoff += strnlen(a, alen - aoff) + 1;
	}
	return i;
}

/* "client.4123 at 127.0.0.1:0/3456, ..." in @buf, for a message. */
static void rbd_lockers_name(const struct rbd_locker *v, int nr, char *buf, size_t len)
{
	size_t off = 0;
	int i;

	snprintf(buf, len, "another client");
	for (i = 0; i < nr && off < len; i++) {
		int n = snprintf(buf + off, len - off, "%s%s at %s", i ? ", " : "", v[i].client,
				 v[i].addr);

		if (n < 0)
			break;
		off += (size_t)n;
	}
}

/* Who holds the image's lock, for a message; *@any: someone does. */
static void rbd_lock_holder(rbd_image_t img, char *buf, size_t len, bool *any)
{
	struct rbd_locker v[RBD_MAX_LOCKERS];
	int nr = rbd_lockers(img, v, RBD_MAX_LOCKERS);

	*any = nr > 0;
	rbd_lockers_name(v, nr > 0 ? nr : 0, buf, len);
}

/*
 * Whether @l still watches the image's header: 1 yes, 0 no, or -errno.
 * A client that watches is alive, or died less than the OSD's watch
 * timeout ago; one that does not cannot answer a lock request either
 * (librbd's request goes to the holder through its watch). Matched by
 * client id or address, either being enough: a false "alive" only keeps
 * a lock, a false "dead" would blocklist a live client.
 */
static int rbd_locker_watches(rbd_image_t img, const struct rbd_locker *l)
{
	rbd_image_watcher_t w[RBD_MAX_WATCHERS];
	size_t nr = RBD_MAX_WATCHERS, i;
	int r, found = 0;

	r = rbd_watchers_list(img, w, &nr);
	if (r < 0)
		return r;
	for (i = 0; i < nr; i++)
		if ((l->id >= 0 && w[i].id == l->id) || rbd_addr_eq(w[i].addr, l->addr))
			found = 1;
	rbd_watchers_list_cleanup(w, nr);
	return found;
}

/*
 * break_lock = yes: break the lock of holders that are dead, that is no
 * longer watch the image; a holder that watches is refused by name. The
 * break (rbd_lock_break) blocklists the holder, so a client taken for
 * dead that is only cut off (its watch lapsed) can write no more, and it
 * breaks only while the lock is still the one checked here (librbd
 * compares the owner's address): a lock that changed hands in between is
 * refused. Returns 0 or what blk_param_error returns.
 */
static int rbd_break_dead_lock(struct rbd_dev *rd, struct blk_params *p,
			       const struct rbd_locker *v, int nr, const char *holder)
{
	rbd_lock_mode_t mode = RBD_LOCK_MODE_EXCLUSIVE;
	char *owners[RBD_MAX_LOCKERS], wto[32];
	size_t nr_owners = RBD_MAX_LOCKERS, i;
	int r, j;

	for (j = 0; j < nr; j++) {
		r = rbd_locker_watches(rd->image, &v[j]);
		if (r < 0)
			return blk_param_error(p, "break_lock", "cannot list the watchers of "
					       "%s/%s to tell whether %s is alive: %s",
					       rd->pool_name, rd->image_name, v[j].client,
					       strerror(-r));
		if (!r)
			continue;
		if (rados_conf_get(rd->cluster, "osd_client_watch_timeout", wto, sizeof(wto)))
			snprintf(wto, sizeof(wto), "30");
		return blk_param_error(p, "image",
			"%s/%s is locked by %s, which still watches the image, so it is taken "
			"for alive: not broken although break_lock = yes (breaking a live "
			"holder's lock would blocklist it and fail its unwritten data). If it "
			"was killed, the OSD keeps its watch "
			"for osd_client_watch_timeout after its last ping (%s s in this client's "
			"ceph.conf, 30 s by default; the OSDs' own setting rules): mount again "
			"after that", rd->pool_name, rd->image_name, holder, wto);
	}
	r = rbd_lock_get_owners(rd->image, &mode, owners, &nr_owners);
	if (r == -ENOENT)
		return 0;	/* released meanwhile: rbd_lock_acquire takes it */
	if (r < 0)
		return blk_param_error(p, "break_lock", "cannot list the lock owners of %s/%s: %s",
				       rd->pool_name, rd->image_name, strerror(-r));
	for (i = 0; i < nr_owners && !r; i++) {
		for (j = 0; j < nr && !rbd_addr_eq(owners[i], v[j].addr); j++)
			;
		if (j == nr) {
			r = -EBUSY;
			blk_param_error(p, "image", "%s/%s: its lock passed to %s while blkfs "
					"checked %s for life; not broken, try again",
					rd->pool_name, rd->image_name, owners[i], holder);
			break;
		}
		r = rbd_lock_break(rd->image, mode, owners[i]);
		if (r < 0) {
			blk_param_error(p, "break_lock", "breaking the lock of %s/%s held by "
					"%s: %s", rd->pool_name, rd->image_name, v[j].client,
					strerror(-r));
			break;
		}
		rd->nr_broken++;
		blk_warn("rbd: %s: broke the lock of %s/%s held by %s at %s, which no longer "
			 "watches the image (break_lock = yes; librbd blocklists it)", rd->dev,
			 rd->pool_name, rd->image_name, v[j].client, v[j].addr);
	}
	rbd_lock_get_owners_cleanup(owners, nr_owners);
	return r;
}

/*
 * The exclusive lock, taken so that librbd never hands it over. An image
 * that already has a holder is refused without asking for the lock:
 * librbd's own acquire would wait out the holder's watch (30 s when it
 * died) and then break the lock by itself, which only break_lock = yes
 * may do here, and only to a dead holder (rbd_break_dead_lock).
 */
static int rbd_take_lock(struct rbd_dev *rd, struct blk_params *p, bool break_lock)
{
	struct rbd_locker v[RBD_MAX_LOCKERS];
	char holder[512];
	bool any;
	int r, nr;

	nr = rbd_lockers(rd->image, v, RBD_MAX_LOCKERS);
	if (nr < 0)
		return blk_param_error(p, "image", "cannot list the lockers of %s/%s: %s",
				       rd->pool_name, rd->image_name, strerror(-nr));
	rbd_lockers_name(v, nr, holder, sizeof(holder));
	if (nr && !break_lock)
		return blk_param_error(p, "image",
			"%s/%s is locked by %s; if that holder is dead (a killed blkfs), "
			"`break_lock = yes` in this section (or `rbd lock rm`) breaks its lock "
			"once its watch is gone; `exclusive = no` shares the image on purpose",
			rd->pool_name, rd->image_name, holder);
	if (nr) {
		r = rbd_break_dead_lock(rd, p, v, nr, holder);
		if (r)
			return r;
	}
	r = rbd_lock_acquire(rd->image, RBD_LOCK_MODE_EXCLUSIVE);
	if (r < 0) {
		rbd_lock_holder(rd->image, holder, sizeof(holder), &any);
		return blk_param_error(p, "image", "%s/%s: taking its exclusive lock failed: %s%s%s",
				       rd->pool_name, rd->image_name, strerror(-r),
				       any ? "; held by " : "", any ? holder : "");
	}
	return 0;
}

/* The geometry from the image (@size, @obj) and the config. */
static int rbd_geometry_init(struct rbd_dev *rd, struct blk_params *p, uint64_t size,
			     uint64_t obj)
{
	const struct blk_geometry *cfg = &p->geo;
	struct blk_geometry *g = &rd->geo;

	g->lbs = be_geo_given(p, "logical_block_size", cfg->lbs) ? cfg->lbs : 512;
	g->pbs = be_geo_given(p, "physical_block_size", cfg->pbs) ? cfg->pbs : RBD_DEF_PBS;
	if (g->pbs < g->lbs)
		g->pbs = g->lbs;
	if (obj < g->pbs || obj > (1u << 30) || obj % g->pbs)
		obj = g->pbs > (4u << 20) ? g->pbs : (4u << 20);
	if (size % g->lbs)
		return blk_param_error(p, "image", "%s/%s has %" PRIu64 " bytes, not a multiple "
				       "of the logical block size %u", rd->pool_name,
				       rd->image_name, size, g->lbs);
	if (!size)
		return blk_param_error(p, "image", "%s/%s is empty (0 bytes)", rd->pool_name,
				       rd->image_name);
	if (cfg->size && cfg->size != size)
		return blk_param_error(p, "size", "config says %" PRIu64 " but %s/%s has %" PRIu64,
				       cfg->size, rd->pool_name, rd->image_name, size);
	g->size = size;
	rd->max_size = size;
	if (be_geo_given(p, "max_io", cfg->max_io)) {
		if (cfg->max_io > obj)
			return blk_param_error(p, "max_io", "config says %u but the image's "
					       "objects are %" PRIu64 " bytes (at most that)",
					       cfg->max_io, obj);
		if (cfg->max_io % g->pbs)
			return blk_param_error(p, "max_io", "%u is not a multiple of the "
					       "physical block size %u", cfg->max_io, g->pbs);
		g->max_io = cfg->max_io;
	} else {
		g->max_io = (uint32_t)obj;
	}
	g->io_min = be_geo_given(p, "io_min", cfg->io_min) ? cfg->io_min : g->pbs;
	g->io_opt = be_geo_given(p, "io_opt", cfg->io_opt) ? cfg->io_opt : (uint32_t)obj;
	g->dma_align = 1;
	return 0;
}

static int rbd_conf_set(struct rbd_dev *rd, struct blk_params *p, const char *key,
			const char *opt, const char *val)
{
	int r = rados_conf_set(rd->cluster, opt, val);

	if (r < 0)
		return blk_param_error(p, key, "librados refused %s = %s: %s", opt, val,
				       strerror(-r));
	return 0;
}

static void rbd_dev_free(struct rbd_dev *rd)
{
	rbd_watch_stop(rd);
	rbd_probe_stop(rd);
	if (rd->image)
		rbd_close(rd->image);
	if (rd->ioctx)
		rados_ioctx_destroy(rd->ioctx);
	if (rd->cluster)
		rados_shutdown(rd->cluster);
	be_pool_destroy(&rd->pool);
	pthread_mutex_destroy(&rd->lock);
	pthread_mutex_destroy(&rd->wlock);
	pthread_cond_destroy(&rd->wcond);
	pthread_mutex_destroy(&rd->plock);
	pthread_cond_destroy(&rd->pcond);
	free(rd->pool_name);
	free(rd->image_name);
	free(rd->dev);
	free(rd);
}

/* BLKFS_RBD_TEST=features,notice_size=N: the test hooks (struct rbd_dev). */
static void rbd_test_env(struct rbd_dev *rd)
{
	const char *env = getenv("BLKFS_RBD_TEST");
	char buf[128], *tok, *save;

	if (!env || !*env)
		return;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "features"))
			rd->test_features = true;
		else if (!strncmp(tok, "notice_size=", 12))
			rd->test_notice_fails = (unsigned int)strtoul(tok + 12, NULL, 10);
		else
			blk_warn("rbd: BLKFS_RBD_TEST: '%s' is no test hook (features, "
				 "notice_size=N)", tok);
	}
}

/* Read before pool and image are checked, in the table's order. */
static const char *const rbd_text_keys[] = { "pool", "image", "namespace", "conf", "id", "keyring" };
/* Read after, in the order open() read them by hand (see struct rbd_conf). */
static const char *const rbd_value_keys[] = {
	"queue_depth", "create", "exclusive", "break_lock", "rbd_cache", "timeout"
};
_Static_assert(sizeof(rbd_text_keys) / sizeof(rbd_text_keys[0]) +
	       sizeof(rbd_value_keys) / sizeof(rbd_value_keys[0]) == bk_nr_knobs,
	       "rbd_be_open reads every row of RBD_KNOBS");

/* The keys of @names from the table into @c: 0, or -EINVAL with p->err set. */
static int rbd_parse_keys(struct blk_params *p, const char *const *names, size_t nr,
			  struct rbd_conf *c)
{
	size_t i;
	int r;

	for (i = 0; i < nr; i++) {
		r = bk_parse_key(&bk_table, p, names[i], c);
		assert(r != -ENOENT);
		if (r)
			return r;
	}
	return 0;
}

static struct blk_backend *rbd_be_open(struct blk_params *p, struct blk_backend *next)
{
	const char *pool, *image, *ns, *conf, *id, *keyring;
	bool create, break_lock, created = false;
	unsigned int timeout_s;
	char tmo[32], mtmo[32], who[128];
	uint64_t ns_tmo, features = 0;
	struct rbd_conf c;
	rbd_image_info_t info;
	struct rbd_dev *rd;
	int r, order = 0;

	(void)next;
	r = rbd_parse_keys(p, rbd_text_keys, sizeof(rbd_text_keys) / sizeof(rbd_text_keys[0]), &c);
	if (r)
		return ERR_PTR(r);
	pool = c.pool;
	image = c.image;
	ns = c.ns;
	conf = c.conf;
	id = c.id;
	keyring = c.keyring;
	if (!pool || !*pool)
		return ERR_PTR(blk_param_error(p, "pool", "missing (the RADOS pool the image is in, "
					       "pool = rbd)"));
	if (!image || !*image)
		return ERR_PTR(blk_param_error(p, "image", "missing (the RBD image's name, "
					       "image = NAME)"));
	if (conf && access(conf, R_OK))
		return ERR_PTR(blk_param_error(p, "conf", "%s: %s", conf, strerror(errno)));
	if (keyring && access(keyring, R_OK))
		return ERR_PTR(blk_param_error(p, "keyring", "%s: %s", keyring, strerror(errno)));

	rd = calloc(1, sizeof(*rd));
	if (!rd) {
		blk_param_error(p, NULL, "out of memory");
		return ERR_PTR(-ENOMEM);
	}
	rd->be.ops = &rbd_backend_ops;
	pthread_mutex_init(&rd->lock, NULL);
	pthread_mutex_init(&rd->wlock, NULL);
	pthread_mutex_init(&rd->plock, NULL);
	r = blk_cond_init(&rd->wcond);
	if (!r) {
		r = blk_cond_init(&rd->pcond);
		if (r)
			pthread_cond_destroy(&rd->wcond);
	}
	if (r) {
		pthread_mutex_destroy(&rd->plock);
		pthread_mutex_destroy(&rd->wlock);
		pthread_mutex_destroy(&rd->lock);
		free(rd);
		return ERR_PTR(blk_param_error(p, NULL, "pthread_cond_init: %s", strerror(r)));
	}
	rd->host = p->host;
	rbd_test_env(rd);
	list_init(&rd->waiting);
	rd->pool_name = strdup(pool);
	rd->image_name = strdup(image);
	rd->dev = strdup(p->dev ? p->dev : "?");
	r = -ENOMEM;
	if (!rd->pool_name || !rd->image_name || !rd->dev) {
		blk_param_error(p, NULL, "out of memory");
		goto out_free;
	}

	r = rbd_parse_keys(p, rbd_value_keys, sizeof(rbd_value_keys) / sizeof(rbd_value_keys[0]),
			   &c);
	if (r)
		goto out_free;
	rd->qd = c.qd;
	create = c.create;
	rd->exclusive = c.exclusive;
	break_lock = c.break_lock;
	rd->cache = c.cache;
	timeout_s = c.timeout_s;
	ns_tmo = (uint64_t)timeout_s * NS_PER_S;
	rd->stall_ns = ns_tmo / 2 < 2 * NS_PER_S ? ns_tmo / 2 : 2 * NS_PER_S;
	if (timeout_s < RBD_SAFE_TIMEOUT_S)
		blk_warn("rbd: %s: timeout = %s is below %us: on a real cluster an ordinary OSD "
			 "failover (about 26 s before the monitors mark a dead OSD down: "
			 "osd_heartbeat_grace 20 s + osd_heartbeat_interval 6 s) then fails I/O "
			 "with EIO instead of waiting for it (the data stays dirty, fsync "
			 "reports it); right for a test cluster only", rd->dev,
			 blk_param_get(p, "timeout"), RBD_SAFE_TIMEOUT_S);
	if (create && !p->geo.size) {
		r = blk_param_error(p, "size", "needed to create %s/%s (create = yes)", pool, image);
		goto out_free;
	}
	r = be_pool_init(&rd->pool, 2 * (size_t)rd->qd, sizeof(struct rbd_req), 64);
	if (r) {
		blk_param_error(p, NULL, "out of memory");
		goto out_free;
	}

	r = rados_create(&rd->cluster, id ? id : "admin");
	if (r < 0) {
		rd->cluster = NULL;
		blk_param_error(p, "id", "rados_create(%s): %s", id ? id : "admin", strerror(-r));
		goto out_free;
	}
	/*
	 * librbd copies every write unless told not to (Ceph 16's default is
	 * true: a caller may change a buffer in flight). blkfs's cache keeps a
	 * folio under writeback unchanged for this backend (.stable_writes,
	 * core/pcache.c invariant 7), and a direct write's buffer is the
	 * request's until its end_io, so librbd may send from them. Set before
	 * the conf file and $CEPH_ARGS are read: either may put the copy back
	 * (to compare, say).
	 */
	r = rbd_conf_set(rd, p, "backend", "rbd_disable_zero_copy_writes", "false");
	if (r)
		goto out_free;
	/* NULL: the library's search ($CEPH_CONF, /etc/ceph/ceph.conf, ...). */
	r = rados_conf_read_file(rd->cluster, conf);
	if (r < 0) {
		blk_param_error(p, "conf", "%s: cannot read it: %s", conf ? conf :
				"ceph.conf (the library's default search: $CEPH_CONF, "
				"/etc/ceph/ceph.conf)", strerror(-r));
		goto out_free;
	}
	/* $CEPH_ARGS and friends, as the rbd command takes them. */
	rados_conf_parse_env(rd->cluster, NULL);
	snprintf(tmo, sizeof(tmo), "%u", timeout_s);
	r = rbd_conf_set(rd, p, "timeout", "rados_osd_op_timeout", tmo);
	if (!r)
		r = rbd_conf_set(rd, p, "timeout", "rados_mon_op_timeout", tmo);
	snprintf(mtmo, sizeof(mtmo), "%u", timeout_s < RBD_MAX_MOUNT_TIMEOUT_S ? timeout_s :
		 RBD_MAX_MOUNT_TIMEOUT_S);
	if (!r)
		r = rbd_conf_set(rd, p, "timeout", "client_mount_timeout", mtmo);
	if (!r)
		r = rbd_conf_set(rd, p, "rbd_cache", "rbd_cache", rd->cache ? "true" : "false");
	if (!r && keyring)
		r = rbd_conf_set(rd, p, "keyring", "keyring", keyring);
	/* librados's own log stays out of the daemon's (set `log file` in conf). */
	if (!r)
		r = rbd_conf_set(rd, p, "conf", "log_to_stderr", "false");
	if (!r)
		r = rbd_conf_set(rd, p, "conf", "err_to_stderr", "false");
	if (r)
		goto out_free;

	r = rados_connect(rd->cluster);
	if (r < 0) {
		blk_param_error(p, conf ? "conf" : "pool",
				"connecting to the cluster%s%s: %s%s%s%s", conf ? " of " : "",
				conf ? conf : "",  strerror(-r),
				r == -ETIMEDOUT ? " (no monitor answered within " : "",
				r == -ETIMEDOUT ? mtmo : "",
				r == -ETIMEDOUT ? " s; is `mon host` right and the cluster up?)" : "");
		rados_shutdown(rd->cluster);
		rd->cluster = NULL;
		goto out_free;
	}
	r = rados_ioctx_create(rd->cluster, pool, &rd->ioctx);
	if (r < 0) {
		rd->ioctx = NULL;
		blk_param_error(p, "pool", "%s: %s", pool,
				r == -ENOENT ? "no such pool in the cluster" : strerror(-r));
		goto out_free;
	}
	if (ns)
		rados_ioctx_set_namespace(rd->ioctx, ns);

	/* Read-only: no lock is asked for, no write can slip through. */
	if (p->read_only)
		r = rbd_open_read_only(rd->ioctx, image, &rd->image, NULL);
	else
		r = rbd_open(rd->ioctx, image, &rd->image, NULL);
	if (r == -ENOENT && create) {
		if (p->read_only) {
			r = blk_param_error(p, "create", "%s/%s does not exist and the mount is "
					    "read-only: nothing is created", pool, image);
			rd->image = NULL;
			goto out_free;
		}
		r = rbd_create(rd->ioctx, image, p->geo.size, &order);
		if (r < 0) {
			rd->image = NULL;
			blk_param_error(p, "create", "creating %s/%s: %s", pool, image,
					strerror(-r));
			goto out_free;
		}
		created = true;
		r = rbd_open(rd->ioctx, image, &rd->image, NULL);
	}
	if (r < 0) {
		rd->image = NULL;
		blk_param_error(p, "image", "%s in pool %s%s%s: %s%s", image, pool,
				ns ? ", namespace " : "", ns ? ns : "",
				r == -ENOENT ? "no such image" : strerror(-r),
				r == -ENOENT ? " (create = yes with size makes one)" : "");
		goto out_free;
	}
	r = rbd_stat(rd->image, &info, sizeof(info));
	if (r < 0) {
		blk_param_error(p, "image", "rbd_stat of %s/%s: %s", pool, image, strerror(-r));
		goto out_free;
	}
	rd->obj_size = info.obj_size;
	r = rbd_geometry_init(rd, p, info.size, info.obj_size);
	if (r)
		goto out_free;
	rd->geo_open = rd->geo;

	/*
	 * A failure here must not open the image as if it had no
	 * exclusive-lock feature: that would skip the lock and warn falsely.
	 */
	r = rbd_get_features(rd->image, &features);
	if (rd->test_features && r >= 0)
		r = -EIO;
	if (r < 0) {
		blk_param_error(p, "image", "rbd_get_features of %s/%s: %s (the lock cannot "
				"be taken without knowing them)", pool, image, strerror(-r));
		goto out_free;
	}
	if (!(features & RBD_FEATURE_EXCLUSIVE_LOCK)) {
		if (rd->exclusive)
			blk_warn("rbd: %s: %s/%s has no exclusive-lock feature: nothing keeps a "
				 "second client from writing it at the same time", rd->dev,
				 pool, image);
	} else if (rd->exclusive && !p->read_only) {
		r = rbd_take_lock(rd, p, break_lock);
		if (r)
			goto out_free;
	}
	r = rbd_watch_start(rd, p);
	if (r)
		goto out_free;
	r = rbd_probe_start(rd, p);
	if (r)
		goto out_free;
	snprintf(who, sizeof(who), "%s/%s%s%s", pool, ns ? ns : "", ns ? "/" : "", image);
	blk_info("rbd: %s: %s%s, %" PRIu64 " bytes, objects of %" PRIu64 " bytes, rbd_cache %s",
		 rd->dev, who, created ? " (created)" : "", info.size, info.obj_size,
		 rd->cache ? "on" : "off");
	return &rd->be;

out_free:
	rbd_dev_free(rd);
	return ERR_PTR(r < 0 ? r : -EINVAL);
}

static void rbd_be_close(struct blk_backend *be)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	assert(!rd->inflight && list_empty(&rd->waiting));
	if (rd->exclusive && rd->image)
		rbd_lock_release(rd->image);
	rbd_dev_free(rd);
}

/* ------------------------------------------------------- resize, stats */

/*
 * The image's size now (rbd_stat) as geo.size, raising max_size; 0 or
 * -errno. Called with the device quiesced, inside rbd_own_begin/end.
 */
static int rbd_size_take(struct rbd_dev *rd, uint64_t *size)
{
	rbd_image_info_t info;
	int r;

	r = rbd_stat(rd->image, &info, sizeof(info));
	if (r < 0) {
		blk_err("rbd: %s: rbd_stat(%s/%s): %s", rd->dev, rd->pool_name, rd->image_name,
			strerror(-r));
		return r;
	}
	if (info.size % rd->geo.lbs) {
		blk_err("rbd: %s: %s/%s is now %" PRIu64 " bytes, not a multiple of %u", rd->dev,
			rd->pool_name, rd->image_name, info.size, rd->geo.lbs);
		return -EINVAL;
	}
	/* Only here (blk_resize is one at a time): a load then a store is enough. */
	if (info.size > __atomic_load_n(&rd->max_size, __ATOMIC_RELAXED))
		__atomic_store_n(&rd->max_size, info.size, __ATOMIC_RELAXED);
	__atomic_store_n(&rd->geo.size, info.size, __ATOMIC_RELAXED);
	*size = info.size;
	return 0;
}

/* blk_resize(): rbd_resize to @size, or (0) the image's size now. */
static int rbd_be_resize(struct blk_backend *be, uint64_t *size)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;
	int r = 0;

	if (*size % rd->geo.lbs)
		return -EINVAL;
	rbd_own_begin(rd);
	if (*size && *size != __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED)) {
		r = rbd_resize(rd->image, *size);
		if (r < 0)
			blk_err("rbd: %s: rbd_resize(%s/%s, %" PRIu64 "): %s", rd->dev,
				rd->pool_name, rd->image_name, *size, strerror(-r));
	}
	if (!r)
		r = rbd_size_take(rd, size);
	rbd_own_end(rd);
	return r;
}

static size_t rbd_be_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;
	unsigned int inflight;

	pthread_mutex_lock(&rd->lock);
	inflight = rd->inflight;
	pthread_mutex_unlock(&rd->lock);
	return be_stat_printf(buf, len,
		"rbd_cache %d\nrbd_queue_depth %u\nrbd_inflight %u\nrbd_reads %" PRIu64 "\nrbd_writes %" PRIu64
		"\nrbd_flushes %" PRIu64 "\nrbd_zeroes %" PRIu64 "\nrbd_queued %" PRIu64
		"\nrbd_errors %" PRIu64 "\nrbd_locks_broken %u\nrbd_outside_resizes %" PRIu64
		"\nrbd_down %d\nrbd_downs %" PRIu64 "\nrbd_fast_fails %" PRIu64 "\n", rd->cache, rd->qd, inflight,
		__atomic_load_n(&rd->nr_reads, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_writes, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_flushes, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_zeroes, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_queued, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_errors, __ATOMIC_RELAXED), rd->nr_broken,
		__atomic_load_n(&rd->nr_outside_resizes, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->down_ns, __ATOMIC_RELAXED) != 0,
		__atomic_load_n(&rd->nr_downs, __ATOMIC_RELAXED),
		__atomic_load_n(&rd->nr_fast_fails, __ATOMIC_RELAXED));
}

/* ------------------------------------------------------------ snapshots */

static int rbd_snap_err(struct rbd_dev *rd, const char *what, const char *name, int r)
{
	if (r != -ENOENT && r != -EEXIST)
		blk_err("rbd: %s: %s %s@%s: %s", rd->dev, what, rd->image_name, name,
			strerror(-r));
	return r;
}

static int rbd_be_snap_create(struct blk_backend *be, const char *name)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	return rbd_snap_err(rd, "rbd_snap_create", name, rbd_snap_create(rd->image, name));
}

static int rbd_be_snap_destroy(struct blk_backend *be, const char *name)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	return rbd_snap_err(rd, "rbd_snap_remove", name, rbd_snap_remove(rd->image, name));
}

/* A rollback copies every object of the image back: time grows with the image. */
static int rbd_be_snap_reset(struct blk_backend *be, const char *name)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;
	uint64_t old = __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED), size;
	int r;

	if (!blk_snap_name_valid(name))
		return -EINVAL;
	pthread_mutex_lock(&rd->lock);
	assert(!rd->inflight);
	pthread_mutex_unlock(&rd->lock);
	rbd_own_begin(rd);
	r = rbd_snap_err(rd, "rbd_snap_rollback", name, rbd_snap_rollback(rd->image, name));
	/*
	 * A snapshot of another size: the image has that size now, so the
	 * device does at once, not when (if) the header notice comes; the
	 * host takes it (size_changed) once this reset is done. The size is
	 * read even after a failed rollback, which may have got that far.
	 */
	if (rbd_size_take(rd, &size) < 0)
		size = old;
	rbd_own_end(rd);
	if (size != old) {
		blk_info("rbd: %s: %s/%s is %" PRIu64 " bytes after the reset to %s (%" PRIu64
			 " before)", rd->dev, rd->pool_name, rd->image_name, size, name, old);
		if (rd->host && rd->host->size_changed)
			rd->host->size_changed(rd->host->ctx);
	}
	return r;
}

/*
 * data_bytes and own_bytes from rbd_diff_iterate2, by whole objects where
 * the image keeps a valid fast-diff object map (it answers from the map,
 * cheaply), else by exact extents (a listing of every object's clones: one
 * RADOS op per object of the image, per snapshot):
 *  - data_bytes: what the snapshot has data for (the diff from the start);
 *  - own_bytes: what deleting it frees. RADOS keeps an object's clone for
 *    a snapshot when the object was written after it (before the next
 *    snapshot, or the head for the last one), and that clone is the
 *    snapshot's alone when the object was also written since the one
 *    before (else the older snapshot reads the same clone). So: the
 *    objects written both in (previous, this] and in (this, next], whole
 *    (a clone is a whole object), that this snapshot has data in.
 */
struct rbd_diff_acc {
	uint64_t bytes;		/* bytes of extents with data */
	uint8_t *objs;		/* per object: 1 written in the diff (NULL: not kept) */
	uint64_t obj_size, nr_objs;
};

static int rbd_diff_cb(uint64_t off, size_t len, int exists, void *arg)
{
	struct rbd_diff_acc *a = arg;
	uint64_t o;

	if (exists)
		a->bytes += len;
	if (a->objs && len)
		for (o = off / a->obj_size; o <= (off + len - 1) / a->obj_size && o < a->nr_objs; o++)
			a->objs[o] = 1;
	return 0;
}

/* The diff of @img (at its snapshot, or the head) from @from (NULL: the start). */
static int rbd_diff(rbd_image_t img, const char *from, uint64_t size, bool whole,
		    struct rbd_diff_acc *a)
{
	a->bytes = 0;
	if (a->objs)
		memset(a->objs, 0, a->nr_objs);
	return rbd_diff_iterate2(img, from, 0, size, 1, whole, rbd_diff_cb, a);
}

/* data_bytes and own_bytes of snapshot @i of @snaps (the comment above). */
static int rbd_snap_usage(struct rbd_dev *rd, rbd_snap_info_t *snaps, int n, int i, bool whole,
			  struct blk_snap_info *out)
{
	uint64_t nr = (snaps[i].size + rd->obj_size - 1) / rd->obj_size, o, own = 0, end;
	struct rbd_diff_acc data = { .obj_size = rd->obj_size, .nr_objs = nr };
	struct rbd_diff_acc since = data, after = data;
	rbd_image_t at = NULL, next = NULL;
	int r;

	data.objs = calloc(nr ? nr : 1, 3);
	if (!data.objs)
		return -ENOMEM;
	since.objs = data.objs + nr;
	after.objs = data.objs + 2 * nr;
	r = rbd_open_read_only(rd->ioctx, rd->image_name, &at, snaps[i].name);
	if (r < 0)
		goto out;
	if (i + 1 < n) {
		r = rbd_open_read_only(rd->ioctx, rd->image_name, &next, snaps[i + 1].name);
		if (r < 0)
			goto out;
	}
	r = rbd_diff(at, NULL, snaps[i].size, whole, &data);
	if (!r)
		r = rbd_diff(at, i ? snaps[i - 1].name : NULL, snaps[i].size, whole, &since);
	/* what follows may be smaller (a shrink): diffed up to its end only */
	end = next ? snaps[i + 1].size : __atomic_load_n(&rd->geo.size, __ATOMIC_RELAXED);
	if (!r)
		r = rbd_diff(next ? next : rd->image, snaps[i].name,
			     end < snaps[i].size ? end : snaps[i].size, whole, &after);
	if (r < 0)
		goto out;
	for (o = 0; o < nr; o++)
		if (data.objs[o] && since.objs[o] && after.objs[o])
			own += o + 1 < nr ? rd->obj_size : snaps[i].size - o * rd->obj_size;
	out->data_bytes = data.bytes;
	out->own_bytes = own;
out:
	if (next)
		rbd_close(next);
	if (at)
		rbd_close(at);
	free(data.objs);
	return r;
}

static int rbd_be_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;
	uint64_t features = 0, flags = 0;
	rbd_snap_info_t *snaps;
	int max = 16, n, i, out = 0, r = 0;
	bool whole;

	for (;;) {
		snaps = calloc((size_t)max, sizeof(*snaps));
		if (!snaps)
			return -ENOMEM;
		n = rbd_snap_list(rd->image, snaps, &max);
		if (n != -ERANGE)
			break;
		free(snaps);
	}
	if (n < 0) {
		free(snaps);
		return n;
	}
	whole = !rbd_get_features(rd->image, &features) && (features & RBD_FEATURE_FAST_DIFF) &&
		!rbd_get_flags(rd->image, &flags) && !(flags & RBD_FLAG_FAST_DIFF_INVALID);
	for (i = 0; i < n; i++) {
		struct timespec ts = { 0 };

		if (!blk_snap_name_valid(snaps[i].name))
			continue;
		if (out < nr) {
			memset(&v[out], 0, sizeof(v[out]));
			snprintf(v[out].name, sizeof(v[out].name), "%s", snaps[i].name);
			if (!rbd_snap_get_timestamp(rd->image, snaps[i].id, &ts))
				v[out].created = (uint64_t)ts.tv_sec;
			r = rbd_snap_usage(rd, snaps, n, i, whole, &v[out]);
			if (r < 0) {
				blk_err("rbd: %s: counting the data of %s@%s (rbd_diff_iterate2): %s",
					rd->dev, rd->image_name, snaps[i].name, strerror(-r));
				break;
			}
		}
		out++;
	}
	rbd_snap_list_end(snaps);
	free(snaps);
	return r < 0 ? r : out;
}

static int rbd_be_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	struct rbd_dev *rd = (struct rbd_dev *)be;

	(void)path;
	blk_warn("rbd: %s: save is not supported for rbd (use `rbd export %s/%s%s%s FILE`)",
		 rd->dev, rd->pool_name, rd->image_name, name ? "@" : "", name ? name : "");
	return -EOPNOTSUPP;
}

static const struct blk_snap_ops rbd_snap_ops = {
	.create = rbd_be_snap_create,
	.destroy = rbd_be_snap_destroy,
	.reset = rbd_be_snap_reset,
	.list = rbd_be_snap_list,
	.save = rbd_be_snap_save,
};

#else /* !BLKFS_HAVE_RBD */

/* Built without librbd: a config that asks for rbd is refused, saying why. */
static struct blk_backend *rbd_be_open(struct blk_params *p, struct blk_backend *next)
{
	(void)next;
	return ERR_PTR(blk_param_error(p, "backend", "rbd: this blkfs was built without "
		"librbd (install librbd-dev, see tools/install-deps, and build again)"));
}

#endif

const struct blk_backend_ops rbd_backend_ops = {
	.name = "rbd",
	/* librbd sends from the folio itself (rbd_disable_zero_copy_writes = false) */
	.stable_writes = true,
	.keys = rbd_keys,
	.help = "rbd: a Ceph RBD image through librbd (pool, image, namespace, conf, id, keyring, "
		"create, queue_depth, timeout, exclusive, break_lock, rbd_cache)",
	.open = rbd_be_open,
#ifdef BLKFS_HAVE_RBD
	.close = rbd_be_close,
	.geometry = rbd_be_geometry,
	.check_geometry = rbd_check_geometry,
	.submit = rbd_be_submit,
	.stat = rbd_be_stat,
	.snap = &rbd_snap_ops,
	.resize = rbd_be_resize,
#endif
};
