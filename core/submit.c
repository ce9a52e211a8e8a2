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
#include <stdlib.h>
#include <string.h>

#include "log.h"
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

uint64_t acct_begin(struct pc_dev *dev)
{
	uint64_t now = blk_now_ns();

	pthread_mutex_lock(&dev->acct_lock);
	if (!dev->acct_in_flight++)
		dev->acct_busy_since_ns = now;
	pthread_mutex_unlock(&dev->acct_lock);
	return now;
}

static unsigned hist_bucket(uint64_t len)
{
	unsigned b = 0;

	while (b < PC_HIST_BUCKETS - 1 && (512ull << b) < len)
		b++;
	return b;
}

void acct_end(struct pc_dev *dev, enum blk_op op, uint64_t len, uint64_t start_ns, int res)
{
	uint64_t now = blk_now_ns(), ns = now - start_ns;

	/*
	 * Nanoseconds, as the kernel's part_stat: rounding each I/O (or busy
	 * period) down to whole milliseconds made every await 0 on a ram
	 * device and left busy periods under 1 ms out of %util.
	 */

	pthread_mutex_lock(&dev->acct_lock);
	if (!--dev->acct_in_flight)
		STAT_ADD(dev, io_ticks_ns, now - dev->acct_busy_since_ns);
	pthread_mutex_unlock(&dev->acct_lock);
	STAT_ADD(dev, time_in_queue_ns, ns);
	if (res)
		return;
	bt_dev_latency(dev->bt, op, ns);
	switch (op) {
	case BLK_READ:
		STAT_ADD(dev, backend_read_ios, 1);
		STAT_ADD(dev, backend_read_bytes, len);
		STAT_ADD(dev, read_ticks_ns, ns);
		break;
	case BLK_WRITE:
		STAT_ADD(dev, backend_write_ios, 1);
		STAT_ADD(dev, backend_write_bytes, len);
		STAT_ADD(dev, write_ticks_ns, ns);
		STAT_ADD(dev, write_hist[hist_bucket(len)], 1);
		break;
	case BLK_FLUSH:
		STAT_ADD(dev, backend_flushes, 1);
		STAT_ADD(dev, flush_ticks_ns, ns);
		break;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		STAT_ADD(dev, backend_discards, 1);
		STAT_ADD(dev, backend_discard_bytes, len);
		STAT_ADD(dev, discard_ticks_ns, ns);
		break;
	}
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

struct pc_sio {
	struct blk_io io;
	struct pc_dev *dev;
	struct pc_batch *batch;
	uint64_t start_ns;
	struct iovec iov[];	/* the slice, when split */
};

size_t pc_sio_size(void)
{
	return sizeof(struct pc_sio) + PC_SIO_IOV * sizeof(struct iovec);
}

static void sio_end_io(struct blk_io *io, int res)
{
	struct pc_sio *s = (struct pc_sio *)io;

	struct pc_dev *dev = s->dev;
	struct pc_batch *b = s->batch;

	uint64_t fail_pos = res ? io->pos + io->done : UINT64_MAX;

	if (bt_on(dev->bt, BT_LEVEL_DEV))
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_COMPLETE |
			 BT_TC_ACT(bt_op_cat(io->op, io->flags)), io->pos, io->len, res, NULL, 0, 0);
	acct_end(dev, io->op, io->len, s->start_ns, res);
	be_pool_put(&dev->sio_pool, s);
	pc_batch_done_at(b, res, fail_pos);
}

static void sio_submit(struct pc_dev *dev, struct pc_sio *s, struct pc_batch *batch)
{
	int ret;

	s->dev = dev;
	s->batch = batch;
	s->io.end_io = sio_end_io;
	s->io.private = s;
	pc_batch_add(batch);
	s->start_ns = acct_begin(dev);
	pc_trace_issue(dev, &s->io, false);
	ret = blk_submit(dev->be, &s->io);
	if (ret < 0)
		sio_end_io(&s->io, ret);
}

/* @flags go on the backend I/O when the range is one (BLK_IO_WAITED: see backend.h). */
static void submit_split(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			 const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			 unsigned int flags)
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
		for (i = 0; left; i++) {
			size_t avail = iov[i].iov_len - (i ? 0 : skip);

			left -= avail < left ? avail : left;
			cnt++;
		}
		s = be_pool_get_size(&dev->sio_pool, sizeof(*s) + (size_t)cnt * sizeof(struct iovec));
		if (!s) {
			pc_batch_add(batch);
			pc_batch_done(batch, -ENOMEM);
			return;
		}
		left = n;
		for (i = 0; i < cnt; i++) {
			size_t avail = iov[0].iov_len - skip;
			size_t take = avail < left ? avail : (size_t)left;

			s->iov[i].iov_base = (char *)iov[0].iov_base + skip;
			s->iov[i].iov_len = take;
			left -= take;
			skip += take;
			if (skip == iov[0].iov_len) {
				iov++;
				iovcnt--;
				skip = 0;
			}
		}
		s->io.op = op;
		s->io.flags = flags;
		s->io.pos = pos;
		s->io.len = n;
		s->io.iov = s->iov;
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
	submit_split(dev, op, pos, len, iov, iovcnt, batch, 0);
}

void pc_submit_split_flags(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			   const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			   unsigned int flags)
{
	submit_split(dev, op, pos, len, iov, iovcnt, batch, flags);
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
	submit_split(dev, op, pos, len, iov, iovcnt, &batch, BLK_IO_WAITED);
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
