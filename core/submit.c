/* SPDX-License-Identifier: MIT */
/*
 * core/submit.c - how every I/O reaches the backend: a batch of I/Os
 * someone waits for, the accounting of each backend I/O (the fields of the
 * kernel's /sys/block/X/stat, the write-size histogram), and submission of
 * a data I/O split at max_io by slicing its vector (no copy). Reads, direct
 * I/O, flushes, discards and writeback all go through here.
 */
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/lib/log.h"
#include "../backends/lib/tlslots.h"
#include "pcache_int.h"

/* ---------------------------------------------------------------- batches */

/*
 * A synchronous batch counts under its mutex, so that its waiter cannot
 * see it finished and free it while the last pc_batch_done() still holds
 * it. An asynchronous one (pc_batch_init_async) counts atomically and the
 * last pc_batch_done() calls ->end instead; its submitter holds a +1 bias
 * while it submits, so ->end runs once, after the last piece has gone out
 * and ended (in the submitter, when every piece ended inside submit()).
 */
void pc_batch_init(struct pc_batch *b)
{
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	b->pending = 0;
	b->err = 0;
	b->fail_pos = UINT64_MAX;
	b->end = NULL;
}

void pc_batch_init_async(struct pc_batch *b, void (*end)(struct pc_batch *b))
{
	b->pending = 1;		/* the submitter's bias */
	b->err = 0;
	b->fail_pos = UINT64_MAX;
	b->end = end;
}

void pc_batch_add(struct pc_batch *b)
{
	if (b->end) {
		__atomic_add_fetch(&b->pending, 1, __ATOMIC_RELAXED);
		return;
	}
	pthread_mutex_lock(&b->lock);
	b->pending++;
	pthread_mutex_unlock(&b->lock);
}

void pc_batch_done(struct pc_batch *b, int res)
{
	pc_batch_done_at(b, res, UINT64_MAX);
}

/* As pc_batch_done(), for an I/O that failed from @fail_pos on (partial completion). */
void pc_batch_done_at(struct pc_batch *b, int res, uint64_t fail_pos)
{
	if (b->end) {
		int zero = 0;

		if (res) {
			uint64_t cur = __atomic_load_n(&b->fail_pos, __ATOMIC_RELAXED);

			__atomic_compare_exchange_n(&b->err, &zero, res, false, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
			while (fail_pos < cur &&
			       !__atomic_compare_exchange_n(&b->fail_pos, &cur, fail_pos, false,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				;
		}
		if (__atomic_sub_fetch(&b->pending, 1, __ATOMIC_ACQ_REL) == 0)
			b->end(b);
		return;
	}
	pthread_mutex_lock(&b->lock);
	if (res && !b->err)
		b->err = res;
	if (res && fail_pos < b->fail_pos)
		b->fail_pos = fail_pos;
	if (--b->pending == 0)
		pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
}

int pc_batch_wait(struct pc_batch *b)
{
	int err;

	assert(!b->end);
	pthread_mutex_lock(&b->lock);
	while (b->pending)
		pthread_cond_wait(&b->cond, &b->lock);
	err = b->err;
	pthread_mutex_unlock(&b->lock);
	return err;
}

/* The asynchronous batch's first error (read in ->end). */
int pc_batch_err(struct pc_batch *b)
{
	return __atomic_load_n(&b->err, __ATOMIC_ACQUIRE);
}

/*
 * After a failure, how many bytes from @pos (where the batch's I/O began)
 * completed before the first failing byte: what a partial completion
 * lets the caller keep. 0 when nothing said.
 */
uint64_t pc_batch_ok_bytes(struct pc_batch *b, uint64_t pos)
{
	uint64_t fail = __atomic_load_n(&b->fail_pos, __ATOMIC_ACQUIRE);

	return fail != UINT64_MAX && fail > pos ? fail - pos : 0;
}

void pc_batch_destroy(struct pc_batch *b)
{
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
}

/* ----------------------------------------------------------- accounting */

/*
 * Per-thread counts. A backend I/O used to take dev->acct_lock twice (in
 * flight, busy period) and ~10 locked atomics on dev->st, lines every
 * worker shares; now each thread counts in its own block (struct
 * pc_stat_tl), as the FUSE level does (backends/lib/trace.c) and as the
 * kernel's part_stat counts per CPU. A thread's table is indexed by the
 * device's stat_id, unique among the live devices of the process.
 *
 * stat_lock guards the lists (dev->stat_tl), the ids, and a block's dev
 * (written under it, read by its owner without it). A removed device
 * orphans its blocks (dev = NULL, under stat_lock, before its id is free
 * again), and the owner frees an orphan at its next look-up of that id or
 * at exit: the owner, having learnt of a newer device with the same id
 * (or the same address) through some lock its adder released after
 * pc_dev_add(), sees the NULL, never a stale match. Leaf lock: nothing is
 * taken under it. The tables, their growth, the ids and the fold at a
 * thread's exit are backends/lib/tlslots.c's, under stat_lock.
 */
static pthread_mutex_t stat_lock = PTHREAD_MUTEX_INITIALIZER;

static void stat_attach(void *blk, void *owner);
static void stat_fold(void *blk);

/* the table growth, the ids and the fold at exit: backends/lib/tlslots.h */
static struct tls_kind stat_kind = TLS_KIND_INIT(&stat_lock, sizeof(struct pc_stat_tl),
						 stat_attach, stat_fold);
static __thread struct tls_table stat_tt;	/* by stat_id */
_Static_assert(PC_STAT_NO_ID == TLS_NO_ID, "a device without an id has no slot");

static void stat_attach(void *blk, void *owner)
{
	struct pc_stat_tl *t = blk;
	struct pc_dev *dev = owner;

	__atomic_store_n(&t->dev, dev, __ATOMIC_RELAXED);
	t->next = dev->stat_tl;
	dev->stat_tl = t;
}

/* A thread exits: what it counted goes to its device's shared counts (an orphan's nowhere). */
static void stat_fold(void *blk)
{
	struct pc_stat_tl *t = blk;
	struct pc_dev *dev = t->dev;
	const uint64_t *src = (const uint64_t *)&t->st;
	uint64_t *dst;
	struct pc_stat_tl **pp;
	size_t i;

	if (!dev)
		return;
	dst = (uint64_t *)&dev->st;
	for (pp = &dev->stat_tl; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	for (i = 0; i < sizeof(t->st) / sizeof(uint64_t); i++)
		if (src[i])
			__atomic_add_fetch(&dst[i], src[i], __ATOMIC_RELAXED);
	__atomic_add_fetch(&dev->acct_in_flight, t->in_flight, __ATOMIC_RELAXED);
}

struct pc_stat_tl *pc_stat_tl_get(struct pc_dev *dev)
{
	uint32_t id = dev->stat_id;
	struct pc_stat_tl *t = tls_slot(&stat_tt, id);

	if (__builtin_expect(t && __atomic_load_n(&t->dev, __ATOMIC_RELAXED) == dev, 1))
		return t;
	return tls_slot_make(&stat_kind, &stat_tt, id, dev);
}

void pc_stat_dev_init(struct pc_dev *dev)
{
	pthread_mutex_lock(&stat_lock);
	dev->stat_id = tls_id_get_locked(&stat_kind);
	pthread_mutex_unlock(&stat_lock);
}

void pc_stat_dev_destroy(struct pc_dev *dev)
{
	struct pc_stat_tl *t;

	pthread_mutex_lock(&stat_lock);
	for (t = dev->stat_tl; t; t = t->next)
		__atomic_store_n(&t->dev, NULL, __ATOMIC_RELAXED);
	dev->stat_tl = NULL;
	tls_id_put_locked(&stat_kind, dev->stat_id);
	pthread_mutex_unlock(&stat_lock);
}

/* Backend I/Os in flight: the exited threads' count and every live thread's. */
static uint64_t dev_in_flight(struct pc_dev *dev)
{
	uint64_t n;
	struct pc_stat_tl *t;

	pthread_mutex_lock(&stat_lock);
	n = __atomic_load_n(&dev->acct_in_flight, __ATOMIC_RELAXED);
	for (t = dev->stat_tl; t; t = t->next)
		n += __atomic_load_n(&t->in_flight, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&stat_lock);
	return n;
}

void pc_stat_sum(struct pc_dev *dev, struct pc_stats *st)
{
	uint64_t *dst = (uint64_t *)st, now = blk_now_ns(), shown;
	const uint64_t *src = (const uint64_t *)&dev->st;
	struct pc_stat_tl *t;
	size_t i, n = sizeof(*st) / sizeof(uint64_t);

	/* under stat_lock: a block that an exiting thread folds is counted once */
	pthread_mutex_lock(&stat_lock);
	for (i = 0; i < n; i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	st->in_flight = __atomic_load_n(&dev->acct_in_flight, __ATOMIC_RELAXED);
	for (t = dev->stat_tl; t; t = t->next) {
		const uint64_t *ts = (const uint64_t *)&t->st;

		for (i = 0; i < n; i++)
			dst[i] += __atomic_load_n(&ts[i], __ATOMIC_RELAXED);
		st->in_flight += __atomic_load_n(&t->in_flight, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&stat_lock);
	/*
	 * An I/O that began in one thread and ended in another can be seen
	 * ended and not begun while the blocks are summed: never below 0.
	 */
	if ((int64_t)st->in_flight < 0)
		st->in_flight = 0;
	st->io_ticks_ns = __atomic_load_n(&dev->st.io_ticks_ns, __ATOMIC_RELAXED);
	if (st->in_flight) {
		/* the busy time since the last update counts too */
		uint64_t stamp = __atomic_load_n(&dev->acct_stamp_ns, __ATOMIC_RELAXED);

		if (now > stamp)
			st->io_ticks_ns += now - stamp;
	}
	/*
	 * Never less than a reader was shown before: that guess counts the
	 * time since the stamp as busy, and the next mover may find nothing
	 * in flight and add none of it (as trace.c's bt_fuse_counts()).
	 */
	shown = __atomic_load_n(&dev->acct_ticks_shown, __ATOMIC_RELAXED);
	while (st->io_ticks_ns > shown &&
	       !__atomic_compare_exchange_n(&dev->acct_ticks_shown, &shown, st->io_ticks_ns, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	if (st->io_ticks_ns < shown)
		st->io_ticks_ns = shown;
}

/*
 * Busy time without a lock, as the kernel's update_io_ticks(): the thread
 * that moves the stamp from S to @now adds now - S when the device was
 * busy over [S, now]: an I/O is ending (@end: in flight all along), or one
 * was in flight when this one began. A loser of the race adds nothing: the
 * winner covered up to its own time, the next move covers the rest. At
 * the kernel's kind of granularity (it moves the stamp once a jiffy): a
 * move at most once per PC_TICK_NS, so that the shared line and the sum
 * of the in-flight counts (stat_lock) are taken that often, not per I/O:
 * 1 ms, the kernel's jiffy at HZ=1000 (at 64 us the sums were a measurable
 * share of a QD32 run: trace.c's BT_TICK_NS).
 * Called before the in-flight count changes.
 */
#define PC_TICK_NS 1000000u

static void acct_ticks(struct pc_dev *dev, uint64_t now, bool end)
{
	uint64_t stamp = __atomic_load_n(&dev->acct_stamp_ns, __ATOMIC_RELAXED);

	if (now >= stamp + PC_TICK_NS &&
	    __atomic_compare_exchange_n(&dev->acct_stamp_ns, &stamp, now, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED) &&
	    (end || dev_in_flight(dev)))
		__atomic_add_fetch(&dev->st.io_ticks_ns, now - stamp, __ATOMIC_RELAXED);
}

static void acct_in_flight_add(struct pc_dev *dev, struct pc_stat_tl *t, uint64_t delta)
{
	if (__builtin_expect(t != NULL, 1))
		OWNED_ADD(&t->in_flight, delta);
	else
		__atomic_add_fetch(&dev->acct_in_flight, delta, __ATOMIC_RELAXED);
}

/* acct_begin() at @now, read (or taken) by the caller. */
static uint64_t acct_begin_at(struct pc_dev *dev, uint64_t now)
{
	acct_ticks(dev, now, false);
	acct_in_flight_add(dev, pc_stat_tl_get(dev), 1);
	return now;
}

uint64_t acct_begin(struct pc_dev *dev)
{
	/* another I/O of this thread's: no stamp left is its request's begin or end */
	blk_stamp_clear(&blk_begin_stamp);
	blk_stamp_clear(&blk_end_stamp);
	return acct_begin_at(dev, blk_now_ns());
}

/*
 * acct_begin() of the unsplit I/O embedded in the request @tok (its struct
 * pc_aio): when the request's handler in this thread left its start as the
 * begin stamp (it got its slot without waiting: fuse/devfile.c), that is
 * this I/O's start too, and the clock is not read again (issue 39; the
 * little the cache does between, a look-up of the range, is counted as the
 * device's). Else the clock's now; the stamp is gone either way.
 */
static uint64_t acct_begin_tok(struct pc_dev *dev, const void *tok)
{
	blk_stamp_clear(&blk_end_stamp);
	return acct_begin_at(dev, blk_stamp_take(&blk_begin_stamp, tok));
}

static unsigned hist_bucket(uint64_t len)
{
	unsigned b = 0;

	while (b < PC_HIST_BUCKETS - 1 && (512ull << b) < len)
		b++;
	return b;
}

/* acct_end() with the clock read by the caller (@now). */
static void acct_end_at(struct pc_dev *dev, enum blk_op op, uint64_t len, uint64_t start_ns,
			int res, uint64_t now)
{
	uint64_t ns = now - start_ns;
	struct pc_stat_tl *t = pc_stat_tl_get(dev);

	/*
	 * Nanoseconds, as the kernel's part_stat: rounding each I/O (or busy
	 * period) down to whole milliseconds made every await 0 on a ram
	 * device and left busy periods under 1 ms out of %util.
	 */
	acct_ticks(dev, now, true);
	acct_in_flight_add(dev, t, (uint64_t)-1);
	STAT_ADD_TL(t, dev, time_in_queue_ns, ns);
	if (res)
		return;
	bt_dev_latency(dev->bt, op, ns);
	switch (op) {
	case BLK_READ:
		STAT_ADD_TL(t, dev, backend_read_ios, 1);
		STAT_ADD_TL(t, dev, backend_read_bytes, len);
		STAT_ADD_TL(t, dev, read_ticks_ns, ns);
		break;
	case BLK_WRITE:
		STAT_ADD_TL(t, dev, backend_write_ios, 1);
		STAT_ADD_TL(t, dev, backend_write_bytes, len);
		STAT_ADD_TL(t, dev, write_ticks_ns, ns);
		STAT_ADD_TL(t, dev, write_hist[hist_bucket(len)], 1);
		break;
	case BLK_FLUSH:
		STAT_ADD_TL(t, dev, backend_flushes, 1);
		STAT_ADD_TL(t, dev, flush_ticks_ns, ns);
		break;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		STAT_ADD_TL(t, dev, backend_discards, 1);
		STAT_ADD_TL(t, dev, backend_discard_bytes, len);
		STAT_ADD_TL(t, dev, discard_ticks_ns, ns);
		break;
	}
}

void acct_end(struct pc_dev *dev, enum blk_op op, uint64_t len, uint64_t start_ns, int res)
{
	/* a writeback I/O (writeback.c) ends: no request's end stamp */
	blk_stamp_clear(&blk_end_stamp);
	acct_end_at(dev, op, len, start_ns, res, blk_now_ns());
}

/* ----------------------------------------------------- plain submission */

/*
 * D: the I/O leaves the cache for the device, unless a filter below queues
 * it (throttle): then that filter says when it leaves its queue.
 */
void pc_trace_issue(struct pc_dev *dev, const struct blk_io *io, bool merged)
{
	uint32_t cat;

	if (!bt_on(dev->bt, BT_LEVEL_DEV) ||
	    __atomic_load_n(&dev->bt->queues_below, __ATOMIC_RELAXED))
		return;
	cat = bt_op_cat(io->op, io->flags);
	/* btt links merges (M) to their D through an insert (I); Q D C needs none */
	if (merged)
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_INSERT | BT_TC_ACT(cat), io->pos, io->len, 0,
			 NULL, 0, 0);
	bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_ISSUE | BT_TC_ACT(cat), io->pos, io->len, 0, NULL, 0, 0);
}

/* ------------------------------------------------- the first hop's check */

/*
 * Bad first hops logged: 5 lines per 5 s for the whole process. A cache bug
 * that shapes I/O wrongly does it per I/O; the log must not drown in it.
 */
static struct blk_ratelimit first_hop_rl = BLK_RATELIMIT_INIT(5000, 5);

/*
 * The one check the installed build keeps (issue 43): the CHECKS=1 build
 * checks every hop at blk_submit() and aborts; this checks only the first,
 * what the cache made, and fails that I/O instead. The geometry is the
 * one blk_submit()'s check uses (check_geometry, else geometry): the
 * layer's word, read as the contract check reads it, from any thread
 * (rbd's check_geometry lets writeback reach past a shrink from outside;
 * dev->geo.size is the cache's, written by pc_dev_set_size() without
 * atomics). The cost: tools/blkfs-hopcost.
 *
 * -EIO, not -EINVAL: the fault is the cache's, not the caller's (its
 * request was checked at the front door, fuse/), as the kernel's
 * submit_bio_noacct() ends a bio past the device's end with
 * BLK_STS_IOERR (bio_check_eod). An application cannot mend its arguments
 * after EINVAL here, and fsync's EINVAL means "cannot sync this file".
 */
int pc_submit_first_hop(struct blk_backend *be, const char *name, struct blk_io *io)
{
	struct blk_geometry geo;

	if (be->ops->check_geometry)
		be->ops->check_geometry(be, &geo);
	else
		be->ops->geometry(be, &geo);
	if (__builtin_expect(blk_io_valid(&geo, io), 1))
		return blk_submit(be, io);
	if (blk_ratelimit(&first_hop_rl, "first-hop check"))
		blk_err("%s: cache bug: %s %llu+%llu (%d segments) outside layer %s's geometry "
			"(lbs %u, size %llu, max_io %u, dma_align %u): failed with EIO", name,
			blk_op_name(io->op), (unsigned long long)io->pos,
			(unsigned long long)io->len, io->iovcnt, be->ops->name ? be->ops->name : "?",
			geo.lbs, (unsigned long long)geo.size, geo.max_io, geo.dma_align);
	return -EIO;
}

/* A pooled pc_sio's slices of the vector, right after it. */
static struct iovec *sio_iov(struct pc_sio *s)
{
	return (struct iovec *)(s + 1);
}

size_t pc_sio_size(void)
{
	return sizeof(struct pc_sio) + PC_SIO_IOV * sizeof(struct iovec);
}

/*
 * Mapped reads (BLK_IO_MAPPED, backend.h). The backend ends the read with
 * a vector over its own memory, valid until end_io returns, while it holds
 * its lock shared. The request can be answered from it only inside this
 * end_io, and only when this thread is the one that submitted it, still
 * inside submit(): the request's end then runs here (its batch's bias,
 * the submitter's, is dropped here instead of after submit()) and the
 * reply leaves from the backend's memory with no copy. Anywhere else (an
 * end_io on another thread, a split piece, a request that is not the one
 * this thread submits) the mapping is copied into the I/O's own buffer
 * here (sio_copy_map()), and the request ends as it always has.
 *
 * map_inline: the request whose mapped read this thread is submitting;
 * set to NULL by the end_io that took its bias.
 */
static __thread struct pc_aio *map_inline;
static __thread bool map_inline_taken;

void pc_map_inline_begin(struct pc_aio *aio)
{
	map_inline = aio;
	map_inline_taken = false;
}

bool pc_map_inline_end(void)
{
	bool taken = map_inline_taken;

	map_inline = NULL;
	map_inline_taken = false;
	return taken;
}

/* The backend's mapping into the I/O's own vector: the old path's one copy. */
static void sio_copy_map(struct blk_io *io)
{
	const struct iovec *dst = io->iov;
	size_t doff = 0;
	unsigned int i;

	for (i = 0; i < io->mapcnt; i++) {
		const char *src = io->map[i].iov_base;
		size_t left = io->map[i].iov_len;

		while (left) {
			size_t n = dst->iov_len - doff;

			if (n > left)
				n = left;
			memcpy((char *)dst->iov_base + doff, src, n);
			src += n;
			left -= n;
			doff += n;
			if (doff == dst->iov_len) {
				dst++;
				doff = 0;
			}
		}
	}
	io->map = NULL;
	io->mapcnt = 0;
}

static void sio_end_io(struct blk_io *io, int res)
{
	struct pc_sio *s = (struct pc_sio *)io;

	struct pc_dev *dev = s->dev;
	struct pc_batch *b = s->batch;
	struct pc_aio *inl = NULL;

	if (io->map) {
		struct pc_aio *aio = (struct pc_aio *)((char *)s - offsetof(struct pc_aio, sio));

		if (!res && !s->pooled && map_inline == aio)
			inl = aio;
		else
			sio_copy_map(io);
	}

	uint64_t fail_pos = res ? io->pos + io->done : UINT64_MAX;

	if (bt_on(dev->bt, BT_LEVEL_DEV))
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_COMPLETE |
			 BT_TC_ACT(bt_op_cat(io->op, io->flags)), io->pos, io->len, res, NULL, 0, 0);
	uint64_t now = blk_now_ns();

	acct_end_at(dev, io->op, io->len, s->start_ns, res, now);
	/*
	 * An embedded one is an unsplit direct I/O's, in its struct pc_aio
	 * (pcache.h): its end is the request's end stamp too, taken by the
	 * request's reply when it leaves in this thread (clock.h). A pooled
	 * one's end is no request's.
	 */
	if (s->pooled)
		blk_stamp_clear(&blk_end_stamp);
	else
		blk_stamp_set(&blk_end_stamp,
			      (const char *)s - offsetof(struct pc_aio, sio), now);
	/* an embedded one is its request's: gone once the batch ends */
	if (s->pooled)
		be_pool_put(&dev->sio_pool, s);
	if (inl) {
		/* the piece, then the submitter's bias: the end (the reply) runs here */
		map_inline = NULL;
		map_inline_taken = true;
		inl->map = io->map;
		inl->mapcnt = io->mapcnt;
		pc_batch_done(b, 0);
		pc_batch_done(b, 0);
		return;
	}
	pc_batch_done_at(b, res, fail_pos);
}

static void sio_submit(struct pc_dev *dev, struct pc_sio *s, struct pc_batch *batch)
{
	int ret;

	s->dev = dev;
	s->batch = batch;
	s->io.end_io = sio_end_io;
	s->io.private = s;
	s->io.done = 0;		/* a backend that fails it says, else nothing completed */
	s->io.map = NULL;	/* BLK_IO_MAPPED: the backend's answer, if it gives one */
	s->io.mapcnt = 0;
	pc_batch_add(batch);
	s->start_ns = s->pooled ? acct_begin(dev) :
		      acct_begin_tok(dev, (const char *)s - offsetof(struct pc_aio, sio));
	pc_trace_issue(dev, &s->io, false);
	ret = pc_submit_first_hop(dev->be, dev->name, &s->io);
	if (ret < 0)
		sio_end_io(&s->io, ret);
}

/*
 * @flags go on the backend I/O when the range is one (BLK_IO_WAITED: see
 * backend.h). @embed, when not NULL, is the caller's storage for the I/O
 * when the range is one and @iov is exactly it (the I/O then points at
 * @iov, which lives until the batch ends): no pool.
 */
static void submit_split(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			 const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			 unsigned int flags, struct pc_sio *embed)
{
	size_t skip = 0;	/* bytes of iov[0] already sent */
	uint64_t max = dev_max_io(dev);

	assert(op == BLK_READ || op == BLK_WRITE);
	assert(len && !(pos & (dev->geo.lbs - 1)) && !(len & (dev->geo.lbs - 1)));
	/* pieces of a split go out together, not one after the other */
	if (len > max)
		flags = 0;
	while (len) {
		uint64_t n = len < max ? len : max;
		uint64_t left = n;
		struct pc_sio *s;
		int cnt = 0, i;

		/* count the slices this piece needs */
		bool whole = false;	/* the piece is all of iov[0, cnt) */

		for (i = 0; left; i++) {
			size_t avail = iov[i].iov_len - (i ? 0 : skip);

			whole = avail == left;
			left -= avail < left ? avail : left;
			cnt++;
		}
		if (embed && n == len && !skip && whole) {
			/* unsplit: the request's own storage, the caller's vector */
			s = embed;
			s->pooled = false;
			s->io.iov = iov;
			iov += cnt;
			iovcnt -= cnt;
		} else {
			struct iovec *v;

			s = be_pool_get_size(&dev->sio_pool,
					     sizeof(*s) + (size_t)cnt * sizeof(struct iovec));
			if (!s) {
				pc_batch_add(batch);
				pc_batch_done(batch, -ENOMEM);
				return;
			}
			s->pooled = true;
			v = sio_iov(s);
			left = n;
			for (i = 0; i < cnt; i++) {
				size_t avail = iov[0].iov_len - skip;
				size_t take = avail < left ? avail : (size_t)left;

				v[i].iov_base = (char *)iov[0].iov_base + skip;
				v[i].iov_len = take;
				left -= take;
				skip += take;
				if (skip == iov[0].iov_len) {
					iov++;
					iovcnt--;
					skip = 0;
				}
			}
			s->io.iov = v;
		}
		s->io.op = op;
		s->io.flags = flags;
		s->io.pos = pos;
		s->io.len = n;
		s->io.iovcnt = cnt;
		/*
		 * Each piece is queued (Q) on its own, after an X that says
		 * where it was split from the rest: btt matches a Q with the
		 * D and C of the same range, and fio's replay of the Q events
		 * issues the I/Os the device got.
		 */
		if (bt_on(dev->bt, BT_LEVEL_DEV)) {
			uint32_t cat = bt_op_cat(op, flags);

			if (len > n)
				bt_split(dev->bt, cat, pos, n, pos + n);
			bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_QUEUE | BT_TC_ACT(cat), pos, n, 0, NULL,
				 0, 0);
		}
		len -= n;
		pos += n;
		if (len)
			STAT_ADD(dev, split_ios, 1);
		sio_submit(dev, s, batch);
	}
	(void)iovcnt;
}

void pc_submit_split(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		     const struct iovec *iov, int iovcnt, struct pc_batch *batch)
{
	submit_split(dev, op, pos, len, iov, iovcnt, batch, 0, NULL);
}

void pc_submit_split_flags(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			   const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			   unsigned int flags)
{
	submit_split(dev, op, pos, len, iov, iovcnt, batch, flags, NULL);
}

void pc_submit_split_embed(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			   const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			   unsigned int flags, struct pc_sio *embed)
{
	submit_split(dev, op, pos, len, iov, iovcnt, batch, flags, embed);
}

int pc_submit_split_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			 const struct iovec *iov, int iovcnt)
{
	return pc_submit_split_wait_ok(dev, op, pos, len, iov, iovcnt, NULL);
}

int pc_submit_split_wait_ok(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			    const struct iovec *iov, int iovcnt, uint64_t *ok)
{
	struct pc_batch batch;
	int err;

	pc_batch_init(&batch);
	submit_split(dev, op, pos, len, iov, iovcnt, &batch, BLK_IO_WAITED, NULL);
	err = pc_batch_wait(&batch);
	if (ok)
		*ok = err ? pc_batch_ok_bytes(&batch, pos) : len;
	pc_batch_destroy(&batch);
	return err;
}

void pc_submit_nodata(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		      struct pc_batch *batch)
{
	struct pc_sio *s = be_pool_get_size(&dev->sio_pool, sizeof(*s));

	if (!s) {
		pc_batch_add(batch);
		pc_batch_done(batch, -ENOMEM);
		return;
	}
	s->pooled = true;
	s->io.op = op;
	s->io.pos = pos;
	s->io.len = len;
	if (bt_on(dev->bt, BT_LEVEL_DEV))
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_QUEUE | BT_TC_ACT(bt_op_cat(op, 0)), pos, len,
			 0, NULL, 0, 0);
	sio_submit(dev, s, batch);
}

int pc_submit_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		   const struct iovec *iov, int iovcnt)
{
	struct pc_batch batch;
	int err;

	if (op == BLK_READ || op == BLK_WRITE)
		return pc_submit_split_wait(dev, op, pos, len, iov, iovcnt);
	pc_batch_init(&batch);
	pc_submit_nodata(dev, op, pos, len, &batch);
	err = pc_batch_wait(&batch);
	pc_batch_destroy(&batch);
	return err;
}
