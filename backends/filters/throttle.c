// SPDX-License-Identifier: MIT
/*
 * backends/filters/throttle.c - the throttle filter: a disk's bandwidth and queue,
 * modelled. A bandwidth cap per direction (null_blk's mbps, nbdkit's rate
 * filter), a concurrency limit (at most N I/Os at the layer below, the rest
 * wait in order, as a disk with a queue depth of N), and latency that grows
 * with the I/Os in flight.
 *
 * Keys (and live attrs of the same names, .sys/DEV/throttle/ATTR):
 *	mbps		a cap on READ and WRITE together, in MiB/s (2^20
 *			bytes, as null_blk counts); 0 (default) is no cap
 *	read_mbps, write_mbps
 *			a cap on one direction; with mbps too, both apply
 *	burst		bytes that may pass at once after an idle spell (the
 *			bucket's size, K/M/G suffixes); default 0
 *	queue_depth	at most this many I/Os at the layer below; the rest wait
 *			in submission order; 0 (default) is no limit
 *	latency_per_inflight
 *			a duration: an I/O passed down waits this long for each
 *			other I/O in flight below (see the model below); 0 is off
 *	pool		I/Os the filter holds without allocating (config only)
 * Read-only attrs: `inflight` (I/Os at the layer below now) and `queued`
 * (waiting for a slot).
 *
 * Bandwidth is a token bucket kept as a virtual time vt: the bucket is
 * full (burst bytes) at vt + burst/rate and empty at vt. An I/O of L bytes
 * takes L tokens: vt = max(vt, now - burst/rate) + L/rate, and it goes on
 * at max(now, vt). So every I/O pays for its own bytes before it goes: a
 * 1 MiB READ at 100 MiB/s waits 10 ms on an idle bucket with no burst, and
 * one larger than the burst waits for what the bucket lacks. Large I/O
 * drains the bucket by its size, honestly; the long-run rate is the cap.
 * DISCARD, WRITE_ZEROES and FLUSH carry no data and are not charged.
 *
 * Latency with concurrency (the model chosen): a device whose internal
 * parallelism is used up serves each I/O more slowly the more share it:
 * an I/O passed down while K others are in flight below waits K times
 * latency_per_inflight first (holding its queue slot). With queue_depth 1
 * and a delay below, the filter is a single server; with this knob it is
 * a shared one whose latency grows linearly with the load.
 *
 * An I/O goes: bucket (held on the timer queue until its tokens are
 * there) -> queue (FIFO, until a slot is free) -> contention hold (timer
 * queue again) -> the layer below. With nothing configured, submit()
 * passes the I/O on itself after one atomic load. Otherwise it goes down
 * as a child (from a pool filled at open), so close can wait for it.
 * Whoever frees a slot dispatches the queue; one thread at a time does
 * (td->dispatching), so a layer below that completes inline cannot make
 * the stack grow with the queue.
 *
 * Trace (trace.h): the filter is the last queue in blkfs, so it says when
 * an I/O leaves it (D, at the submit below) and when it came in (I, for
 * every I/O, as the kernel's insert into its queue), so btt's I2D is the
 * time spent here; the cache then emits only Q (queues_below counts the
 * throttle filters of the device).
 *
 * Lock: td->lock covers the knobs, the buckets, the queue and the counts;
 * it is never held across a submit below or an end_io.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends_int.h"
#include "../kit/knobs.h"
#include "../lib/trace.h"

#define THROTTLE_MAX_MBPS	1000000u		/* 1 TiB/s: no cap, in effect */
#define THROTTLE_MAX_QD		65536u
#define THROTTLE_MAX_PER_NS	(1000000000ull)		/* latency_per_inflight: at most 1s */
#define NS_PER_S		1000000000ull

/* A token bucket: rate bytes/s (0: off), empty at vt_ns. */
struct throttle_bucket {
	unsigned int mbps;
	uint64_t vt_ns;
};

enum throttle_stage { TS_BUCKET, TS_CONTEND };

/* A child I/O. From td->pool. */
struct throttle_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;
	struct throttle_dev *td;
	struct be_timer timer;
	enum throttle_stage stage;	/* what the timer ends */
	struct throttle_io *next;	/* td->lock: on the queue */
};

struct throttle_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;
	struct bt_dev *bt;		/* trace state; NULL: none */
	struct be_pool pool;		/* struct throttle_io */
	struct be_timerq tq;
	/* Atomic: something is configured; with nothing, submit() passes I/O on itself. */
	bool active;

	pthread_mutex_t lock;
	pthread_cond_t idle_cv;		/* to close: inflight reached 0 */
	struct throttle_bucket all, rd, wr;	/* lock */
	uint64_t burst;			/* lock: bytes */
	unsigned int qd;		/* lock: 0 = no limit */
	uint64_t per_inflight_ns;	/* lock */
	unsigned int below;		/* lock: children below, or held for contention */
	unsigned int max_below;		/* lock */
	struct throttle_io *q_head, **q_tail;	/* lock: waiting for a slot, oldest first */
	size_t nr_queued;		/* lock */
	bool dispatching;		/* lock: a thread is in dispatch()'s loop */
	uint64_t inflight;		/* lock: children taken and not yet completed to the cache */
	unsigned int nr_pool;		/* the pool's size (config only) */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_bw_waits;		/* I/Os held by a bucket */
	uint64_t bw_wait_ns;		/* their holds, added up */
	uint64_t nr_queued_total;	/* I/Os that waited for a slot */
	uint64_t nr_contended;		/* I/Os held for the others in flight */
	uint64_t contend_ns;		/* those holds, added up */
};

/* ---- the buckets ---- */

static uint64_t cost_ns(uint64_t bytes, unsigned int mbps)
{
	return (uint64_t)((unsigned __int128)bytes * NS_PER_S / ((uint64_t)mbps << 20));
}

/* When @len bytes may go through @b at @now (and take them). Caller holds td->lock. */
static uint64_t bucket_take_locked(struct throttle_bucket *b, uint64_t burst, uint64_t len,
				   uint64_t now)
{
	uint64_t full, base = b->vt_ns;

	if (!b->mbps)
		return now;
	full = cost_ns(burst, b->mbps);
	if (now > full && base < now - full)
		base = now - full;
	b->vt_ns = base + cost_ns(len, b->mbps);
	return b->vt_ns > now ? b->vt_ns : now;
}

/* Caller holds td->lock. */
static void update_active_locked(struct throttle_dev *td)
{
	bool a = td->all.mbps || td->rd.mbps || td->wr.mbps || td->qd || td->per_inflight_ns;

	__atomic_store_n(&td->active, a, __ATOMIC_RELAXED);
}

/* ---- I/O ---- */

static void throttle_end_io(struct blk_io *io, int res);
static void dispatch(struct throttle_dev *td);

static void trace_io(struct bt_dev *bt, uint32_t act, const struct blk_io *io)
{
	if (bt_on(bt, BT_LEVEL_DEV))
		bt_event(bt, BT_LEVEL_DEV, act | BT_TC_ACT(bt_op_cat(io->op, io->flags)), io->pos,
			 io->len, 0, NULL, 0, 0);
}

static void submit_below(struct throttle_io *c)
{
	int ret;

	trace_io(c->td->bt, BT_ACT_ISSUE, &c->io);
	ret = blk_submit(c->td->be.next, &c->io);

	/* We took the parent: a refusal below becomes its completion. */
	if (ret)
		throttle_end_io(&c->io, ret);
}

/* @c has a slot; it waits @hold_ns (the others in flight below) first. */
static void start_below(struct throttle_dev *td, struct throttle_io *c, uint64_t hold_ns)
{
	if (hold_ns) {
		__atomic_add_fetch(&td->nr_contended, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&td->contend_ns, hold_ns, __ATOMIC_RELAXED);
		c->io.flags &= ~BLK_IO_WAITED;
		c->stage = TS_CONTEND;
		if (!be_timerq_add(&td->tq, &c->timer, blk_now_ns() + hold_ns))
			return;
		/* no room on the timer queue: it goes without the hold */
	}
	submit_below(c);
}

/*
 * A slot for @c now, when nothing waits before it and one is free (the
 * hold it must wait in *@hold_ns); else false. Caller holds td->lock.
 */
static bool take_slot_locked(struct throttle_dev *td, uint64_t *hold_ns)
{
	if (td->q_head || (td->qd && td->below >= td->qd))
		return false;
	*hold_ns = td->per_inflight_ns * td->below;
	if (++td->below > td->max_below)
		td->max_below = td->below;
	return true;
}

/* Into the queue (and dispatch it), after a bucket's hold or when no slot was free. */
static void enter_queue(struct throttle_dev *td, struct throttle_io *c)
{
	uint64_t hold;

	pthread_mutex_lock(&td->lock);
	if (take_slot_locked(td, &hold)) {
		pthread_mutex_unlock(&td->lock);
		start_below(td, c, hold);
		return;
	}
	/* dispatched by whoever frees a slot: nobody waits in that thread */
	c->io.flags &= ~BLK_IO_WAITED;
	c->next = NULL;
	*td->q_tail = c;
	td->q_tail = &c->next;
	td->nr_queued++;
	pthread_mutex_unlock(&td->lock);
	__atomic_add_fetch(&td->nr_queued_total, 1, __ATOMIC_RELAXED);
	dispatch(td);
}

/*
 * Start queued I/Os while slots are free. One thread at a time: another
 * that finds the loop running leaves it the work (the loop rechecks the
 * queue under the lock after each start, so nothing is missed).
 */
static void dispatch(struct throttle_dev *td)
{
	pthread_mutex_lock(&td->lock);
	if (td->dispatching) {
		pthread_mutex_unlock(&td->lock);
		return;
	}
	td->dispatching = true;
	while (td->q_head && (!td->qd || td->below < td->qd)) {
		struct throttle_io *c = td->q_head;
		uint64_t hold = td->per_inflight_ns * td->below;

		td->q_head = c->next;
		if (!td->q_head)
			td->q_tail = &td->q_head;
		td->nr_queued--;
		if (++td->below > td->max_below)
			td->max_below = td->below;
		pthread_mutex_unlock(&td->lock);
		start_below(td, c, hold);
		pthread_mutex_lock(&td->lock);
	}
	td->dispatching = false;
	pthread_mutex_unlock(&td->lock);
}

static void throttle_fire(struct be_timer *t)
{
	struct throttle_io *c = (struct throttle_io *)((char *)t - offsetof(struct throttle_io, timer));

	if (c->stage == TS_BUCKET)
		enter_queue(c->td, c);
	else
		submit_below(c);
}

static void throttle_end_io(struct blk_io *io, int res)
{
	struct throttle_io *c = (struct throttle_io *)io;
	struct throttle_dev *td = c->td;
	struct blk_io *parent = c->parent;

	bool waiting;

	pthread_mutex_lock(&td->lock);
	td->below--;
	waiting = td->q_head != NULL;
	pthread_mutex_unlock(&td->lock);
	/* the freed slot goes to the next in line before the cache hears of this one */
	if (waiting)
		dispatch(td);
	parent->done = res ? io->done : 0;
	be_pool_put(&td->pool, c);
	parent->end_io(parent, res);
	/* After the parent's end_io: close waits for inflight 0 before freeing td. */
	pthread_mutex_lock(&td->lock);
	if (!--td->inflight)
		pthread_cond_broadcast(&td->idle_cv);
	pthread_mutex_unlock(&td->lock);
}

static int throttle_submit(struct blk_backend *be, struct blk_io *io)
{
	struct throttle_dev *td = (struct throttle_dev *)be;
	struct throttle_io *c;
	uint64_t now, due, hold;

	trace_io(td->bt, BT_ACT_INSERT, io);
	if (!__atomic_load_n(&td->active, __ATOMIC_RELAXED)) {
		trace_io(td->bt, BT_ACT_ISSUE, io);
		return blk_submit(be->next, io);
	}
	c = be_pool_get(&td->pool);
	if (!c)
		return -ENOMEM;
	c->io = be_child_io(io, throttle_end_io, c);
	c->parent = io;
	c->td = td;
	c->timer.fire = throttle_fire;
	pthread_mutex_lock(&td->lock);
	/*
	 * The clock is read under the lock: a submitter preempted between a
	 * reading taken before it and the lock would find the bucket's time
	 * ahead of its stale "now" and wait for tokens that are there.
	 */
	now = blk_now_ns();
	due = now;
	td->inflight++;
	if (io->op == BLK_READ || io->op == BLK_WRITE) {
		struct throttle_bucket *dir = io->op == BLK_READ ? &td->rd : &td->wr;
		uint64_t d1 = bucket_take_locked(dir, td->burst, io->len, now);
		uint64_t d2 = bucket_take_locked(&td->all, td->burst, io->len, now);

		due = d1 > d2 ? d1 : d2;
	}
	/* the common case, under the same lock: no wait for tokens, a slot free */
	if (due <= now && take_slot_locked(td, &hold)) {
		pthread_mutex_unlock(&td->lock);
		start_below(td, c, hold);
		return 0;
	}
	pthread_mutex_unlock(&td->lock);
	if (due > now) {
		__atomic_add_fetch(&td->nr_bw_waits, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&td->bw_wait_ns, due - now, __ATOMIC_RELAXED);
		c->io.flags &= ~BLK_IO_WAITED;
		c->stage = TS_BUCKET;
		if (!be_timerq_add(&td->tq, &c->timer, due))
			return 0;
		/* no room on the timer queue: it goes on unthrottled rather than fail */
	}
	enter_queue(td, c);
	return 0;
}

/* ---- the knobs: config keys and .sys/DEV/throttle/ ---- */

/* A store under td->lock: a knob set to 0 everywhere turns the filter off. */
static void active_changed(struct blk_backend *be)
{
	update_active_locked((struct throttle_dev *)be);
}

/* After any store: a deeper queue (or none) lets the waiting ones go now. */
static void dispatch_be(struct blk_backend *be)
{
	dispatch((struct throttle_dev *)be);
}

static int attr_queued_show(struct blk_backend *be, char *buf, size_t len)
{
	struct throttle_dev *td = (struct throttle_dev *)be;
	char s[24];

	pthread_mutex_lock(&td->lock);
	snprintf(s, sizeof(s), "%zu", td->nr_queued);
	pthread_mutex_unlock(&td->lock);
	return be_attr_out(buf, len, s);
}

/* A new limit applies to the I/O that comes next. */
#define THROTTLE_KNOBS(K)										\
	K(mbps,        uint, all.mbps, 0, THROTTLE_MAX_MBPS, 0, "MiB/s", RW, active_changed)		\
	K(read_mbps,   uint, rd.mbps,  0, THROTTLE_MAX_MBPS, 0, "MiB/s", RW, active_changed)		\
	K(write_mbps,  uint, wr.mbps,  0, THROTTLE_MAX_MBPS, 0, "MiB/s", RW, active_changed)		\
	K(burst,       size, burst,    0, UINT64_MAX,        0, "bytes", RW, NULL)			\
	K(queue_depth, uint, qd,       0, THROTTLE_MAX_QD,   0, "I/Os",  RW, active_changed)		\
	K(latency_per_inflight, duration, per_inflight_ns, 0, THROTTLE_MAX_PER_NS, 0, "ns", RW,	\
	  active_changed)										\
	K(pool,        pool, nr_pool,  1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)			\
	K(inflight,    uint, below,    0, 0, 0, "I/Os", RO, NULL)					\
	K(queued,      none, nr_queued, 0, 0, 0, "I/Os", OWNRO, NULL)

BK_DEFINE(throttle, struct throttle_dev, lock, dispatch_be, THROTTLE_KNOBS);

/* ---- open, close, stat ---- */

static struct blk_backend *throttle_open(struct blk_params *p, struct blk_backend *next)
{
	struct throttle_dev *td;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the throttle filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	td = calloc(1, sizeof(*td));
	if (!td) {
		blk_param_error(p, NULL, "cannot set up the throttle filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	td->dev = p->dev ? p->dev : "?";
	td->q_tail = &td->q_head;
	ret = bk_params(&bk_table, p, &td->be);
	if (ret)
		goto out_free;
	update_active_locked(td);

	ret = be_pool_init(&td->pool, td->nr_pool, sizeof(struct throttle_io), 64);
	if (ret)
		goto out_err;
	ret = -pthread_mutex_init(&td->lock, NULL);
	if (ret)
		goto out_destroy_pool;
	ret = -pthread_cond_init(&td->idle_cv, NULL);
	if (ret)
		goto out_destroy_lock;
	ret = be_timerq_init(&td->tq, td->nr_pool);
	if (ret)
		goto out_destroy_cv;
	td->be.ops = &throttle_filter_ops;
	td->be.next = next;
	td->bt = p->dev ? bt_dev_get(p->dev) : NULL;
	if (td->bt)
		__atomic_add_fetch(&td->bt->queues_below, 1, __ATOMIC_RELAXED);
	return &td->be;

out_destroy_cv:
	pthread_cond_destroy(&td->idle_cv);
out_destroy_lock:
	pthread_mutex_destroy(&td->lock);
out_destroy_pool:
	be_pool_destroy(&td->pool);
out_err:
	blk_param_error(p, NULL, "cannot set up the throttle filter: %s", strerror(-ret));
out_free:
	free(td);
	return ERR_PTR(ret);
}

/*
 * What the buckets and contention hold goes on now; the queue drains as
 * the layer below completes (no limit is lifted: a queue depth of 1 stays
 * 1). Then wait for every child, so the layer below, closed next, sees
 * none of ours.
 */
static void throttle_close(struct blk_backend *be)
{
	struct throttle_dev *td = (struct throttle_dev *)be;

	be_timerq_stop(&td->tq);
	pthread_mutex_lock(&td->lock);
	while (td->inflight)
		pthread_cond_wait(&td->idle_cv, &td->lock);
	pthread_mutex_unlock(&td->lock);
	be_timerq_destroy(&td->tq);
	if (td->bt)
		__atomic_sub_fetch(&td->bt->queues_below, 1, __ATOMIC_RELAXED);
	pthread_cond_destroy(&td->idle_cv);
	pthread_mutex_destroy(&td->lock);
	be_pool_destroy(&td->pool);
	free(td);
}

static size_t throttle_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct throttle_dev *td = (struct throttle_dev *)be;
	unsigned int below, max_below;
	size_t queued, n;

	pthread_mutex_lock(&td->lock);
	below = td->below;
	max_below = td->max_below;
	queued = td->nr_queued;
	pthread_mutex_unlock(&td->lock);
	n = be_stat_printf(buf, len,
			   "throttle_bw_waits %llu\nthrottle_bw_wait_us %llu\nthrottle_queued_ios %llu\n"
			   "throttle_contended_ios %llu\nthrottle_contend_us %llu\n"
			   "throttle_inflight %u\nthrottle_max_inflight %u\nthrottle_queue_len %zu\n"
			   "throttle_timer_grows %llu\n",
			   (unsigned long long)__atomic_load_n(&td->nr_bw_waits, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&td->bw_wait_ns, __ATOMIC_RELAXED) / 1000,
			   (unsigned long long)__atomic_load_n(&td->nr_queued_total, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&td->nr_contended, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&td->contend_ns, __ATOMIC_RELAXED) / 1000,
			   below, max_below, queued, (unsigned long long)be_timerq_grows(&td->tq));
	return n + be_pool_stat(&td->pool, "throttle", buf + n, len - n);
}

const struct blk_backend_ops throttle_filter_ops = {
	.name = "throttle",
	.is_filter = true,
	.keys = throttle_keys,
	.help = "throttle: bandwidth and queue; throttle.mbps/read_mbps/write_mbps = MiB/s, throttle.burst = SIZE, "
		"throttle.queue_depth = N, throttle.latency_per_inflight = 50us",
	.open = throttle_open,
	.close = throttle_close,
	.geometry = be_filter_geometry,
	.resize = be_filter_resize,
	.submit = throttle_submit,
	.stat = throttle_stat,
	.attrs = throttle_attrs,
	.snap = &be_filter_snap_ops,
};
