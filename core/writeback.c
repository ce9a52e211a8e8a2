/* SPDX-License-Identifier: MIT */
/*
 * core/writeback.c - getting data to and from the backend: I/O submission
 * with zero-copy splitting at max_io, writeback of dirty blocks (runs of
 * contiguous dirty blocks, also across folios, become one I/O), and the
 * background flusher thread.
 *
 * A block leaves the dirty set when its writeback I/O is built (under the
 * folio lock) and the folio's wb_ios counts the I/O until it completes; a
 * failed write puts the block back in the dirty set (on_error = keep) and
 * stores the error in the device's errseq for the next fsync.
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "pcache_int.h"

/* ----------------------------------------------------- plain submission */

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
	uint64_t now = blk_now_ns(), ms = (now - start_ns) / 1000000;

	pthread_mutex_lock(&dev->acct_lock);
	if (!--dev->acct_in_flight)
		STAT_ADD(dev, io_ticks_ms, (now - dev->acct_busy_since_ns) / 1000000);
	pthread_mutex_unlock(&dev->acct_lock);
	STAT_ADD(dev, time_in_queue_ms, ms);
	if (res)
		return;
	switch (op) {
	case BLK_READ:
		STAT_ADD(dev, backend_read_ios, 1);
		STAT_ADD(dev, backend_read_bytes, len);
		STAT_ADD(dev, read_ticks_ms, ms);
		break;
	case BLK_WRITE:
		STAT_ADD(dev, backend_write_ios, 1);
		STAT_ADD(dev, backend_write_bytes, len);
		STAT_ADD(dev, write_ticks_ms, ms);
		STAT_ADD(dev, write_hist[hist_bucket(len)], 1);
		break;
	case BLK_FLUSH:
		STAT_ADD(dev, backend_flushes, 1);
		STAT_ADD(dev, flush_ticks_ms, ms);
		break;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		STAT_ADD(dev, backend_discards, 1);
		STAT_ADD(dev, backend_discard_bytes, len);
		STAT_ADD(dev, discard_ticks_ms, ms);
		break;
	}
}

/* ----------------------------------------------------- plain submission */

struct pc_sio {
	struct blk_io io;
	struct pc_dev *dev;
	struct pc_batch *batch;
	uint64_t start_ns;
	struct iovec iov[];	/* the slice, when split */
};

static void sio_end_io(struct blk_io *io, int res)
{
	struct pc_sio *s = (struct pc_sio *)io;

	acct_end(s->dev, io->op, io->len, s->start_ns, res);
	pc_batch_done(s->batch, res);
	free(s);
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
		s = calloc(1, sizeof(*s) + (size_t)cnt * sizeof(struct iovec));
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

int pc_submit_split_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			 const struct iovec *iov, int iovcnt)
{
	struct pc_batch batch;
	int err;

	pc_batch_init(&batch);
	submit_split(dev, op, pos, len, iov, iovcnt, &batch, BLK_IO_WAITED);
	err = pc_batch_wait(&batch);
	pc_batch_destroy(&batch);
	return err;
}

int pc_submit_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		   const struct iovec *iov, int iovcnt)
{
	struct pc_batch batch;
	struct pc_sio *s;
	int err;

	if (op == BLK_READ || op == BLK_WRITE)
		return pc_submit_split_wait(dev, op, pos, len, iov, iovcnt);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->io.op = op;
	s->io.pos = pos;
	s->io.len = len;
	pc_batch_init(&batch);
	sio_submit(dev, s, &batch);
	err = pc_batch_wait(&batch);
	pc_batch_destroy(&batch);
	return err;
}

/* ------------------------------------------------------------ writeback */

struct wb_seg {
	struct pc_folio *f;
	uint32_t off, len;	/* bytes within the folio */
};

struct wb_io {
	struct blk_io io;
	struct pc_dev *dev;
	struct pc_batch *batch;
	uint64_t start_ns;
	struct wb_io *next;	/* builder's ready list */
	int nsegs, cap;
	struct wb_seg *segs;
	struct iovec *iov;
};

struct wb_builder {
	struct pc_dev *dev;
	uint64_t max_io;	/* read once: max_sectors_kb may change meanwhile */
	struct pc_batch *batch;
	struct wb_io *cur;	/* still growing */
	struct wb_io *ready;	/* closed, to submit once no folio lock is held */
	struct wb_io **ready_tail;
	uint64_t bytes;		/* submitted */
	int err;		/* allocation failures */
};

static void wb_end_io(struct blk_io *io, int res);

static struct wb_io *wb_io_alloc(struct pc_dev *dev, uint64_t max_io)
{
	int cap = (int)(max_io / dev->pc->folio_size) + 2;
	struct wb_io *w;

	w = malloc(sizeof(*w) + (size_t)cap * (sizeof(struct wb_seg) + sizeof(struct iovec)));
	if (!w)
		return NULL;
	memset(w, 0, sizeof(*w));
	w->dev = dev;
	w->cap = cap;
	w->iov = (struct iovec *)(w + 1);
	w->segs = (struct wb_seg *)(w->iov + cap);
	w->io.op = BLK_WRITE;
	w->io.iov = w->iov;
	w->io.end_io = wb_end_io;
	w->io.private = w;
	return w;
}

static void wb_close(struct wb_builder *b)
{
	if (!b->cur)
		return;
	b->cur->next = NULL;
	*b->ready_tail = b->cur;
	b->ready_tail = &b->cur->next;
	b->cur = NULL;
}

static void wb_submit_ready(struct wb_builder *b)
{
	struct wb_io *w = b->ready, *next;
	int ret;

	b->ready = NULL;
	b->ready_tail = &b->ready;
	for (; w; w = next) {
		next = w->next;
		w->io.iovcnt = w->nsegs;
		w->batch = b->batch;
		b->bytes += w->io.len;
		pc_batch_add(b->batch);
		w->start_ns = acct_begin(b->dev);
		ret = blk_submit(b->dev->be, &w->io);
		if (ret < 0)
			wb_end_io(&w->io, ret);
	}
}

/*
 * Add bytes [off, off+len) of @f to the I/O being built: appended when it
 * continues the current I/O on the device, cut where the I/O reaches
 * max_io. Caller holds f->lock and has taken the blocks out of the dirty set.
 */
static void wb_add_locked(struct wb_builder *b, struct pc_folio *f, uint32_t off, uint32_t len)
{
	struct pc_dev *dev = b->dev;
	uint64_t max = b->max_io;

	while (len) {
		uint64_t p = folio_pos(dev->pc, f) + off;
		struct wb_io *w = b->cur;
		uint32_t take;

		if (w && (w->io.pos + w->io.len != p || w->io.len == max || w->nsegs == w->cap)) {
			/* the run goes on in a new I/O: a split at max_io */
			if (w->io.pos + w->io.len == p)
				STAT_ADD(dev, split_ios, 1);
			wb_close(b);
		}
		if (!b->cur) {
			b->cur = wb_io_alloc(dev, max);
			if (!b->cur) {
				/* put the blocks back: they stay dirty for a later pass */
				uint32_t b0 = off >> dev->cblk_shift;
				uint32_t b1 = (off + len - 1) >> dev->cblk_shift;
				size_t nr = bm_set_range(f->state, dev->nr_blks + b0, b1 - b0 + 1);

				folio_account_dirty_locked(dev, f, (long)nr);
				b->err = -ENOMEM;
				return;
			}
			b->cur->io.pos = p;
		}
		w = b->cur;
		take = max - w->io.len < len ? (uint32_t)(max - w->io.len) : len;
		w->segs[w->nsegs].f = f;
		w->segs[w->nsegs].off = off;
		w->segs[w->nsegs].len = take;
		w->iov[w->nsegs].iov_base = f->data + off;
		w->iov[w->nsegs].iov_len = take;
		w->nsegs++;
		w->io.len += take;
		f->wb_ios++;
		folio_get(f);
		__atomic_add_fetch(&dev->wb_bytes, take, __ATOMIC_RELAXED);
		__atomic_add_fetch(&dev->pc->wb_bytes, take, __ATOMIC_RELAXED);
		off += take;
		len -= take;
	}
}

static void wb_note_result(struct pc_dev *dev, const struct wb_io *w, int res)
{
	uint64_t now = blk_now_ms();
	bool log;

	acct_end(dev, BLK_WRITE, w->io.len, w->start_ns, res);
	if (!res) {
		pthread_mutex_lock(&dev->err_lock);
		dev->failing = 0;
		dev->nr_fails = 0;
		pthread_mutex_unlock(&dev->err_lock);
		return;
	}
	STAT_ADD(dev, writeback_errors, 1);
	pc_errseq_set(dev, res);
	pthread_mutex_lock(&dev->err_lock);
	dev->failing = -res;
	if (dev->nr_fails < 16)
		dev->nr_fails++;
	/* back off: 100 ms, doubling, at most 5 s between background retries */
	dev->retry_after_ms = now + ((100u << (dev->nr_fails - 1)) < 5000 ?
				     (100u << (dev->nr_fails - 1)) : 5000);
	pthread_mutex_unlock(&dev->err_lock);
	log = blk_ratelimit(&dev->err_rl, dev->name);
	if (log)
		blk_err("%s: writeback of %llu bytes at %llu failed: %s; %s",
			dev->name, (unsigned long long)w->io.len,
			(unsigned long long)w->io.pos, strerror(-res),
			dev->on_error_drop ? "dropped (on_error = drop)" : "the data stays dirty");
}

static void wb_end_io(struct blk_io *io, int res)
{
	struct wb_io *w = io->private;
	struct pc_dev *dev = w->dev;
	int i;

	for (i = 0; i < w->nsegs; i++) {
		struct wb_seg *s = &w->segs[i];
		struct pc_folio *f = s->f;
		bool clean;

		pthread_mutex_lock(&f->lock);
		if (res && dev->on_error_drop) {
			STAT_ADD(dev, dropped_bytes, s->len);
		} else if (res) {
			uint32_t b0 = s->off >> dev->cblk_shift;
			uint32_t b1 = (s->off + s->len - 1) >> dev->cblk_shift, b;
			size_t nr = 0;

			/* keep: back into the dirty set (only blocks still cached) */
			for (b = b0; b <= b1; b++)
				if (bm_test(f->state, b))
					nr += bm_set_range(f->state, dev->nr_blks + b, 1);
			folio_account_dirty_locked(dev, f, (long)nr);
		}
		assert(f->wb_ios > 0);
		f->wb_ios--;
		clean = !f->nr_dirty && !f->wb_ios;
		if (!f->wb_ios && f->waiters)
			pthread_cond_broadcast(&f->wait);
		pthread_mutex_unlock(&f->lock);
		__atomic_sub_fetch(&dev->wb_bytes, s->len, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&dev->pc->wb_bytes, s->len, __ATOMIC_RELAXED);
		if (clean)
			folio_unpark(dev->pc, f);
		folio_put(f);
	}
	wb_note_result(dev, w, res);
	if (w->batch)
		pc_batch_done(w->batch, res);
	free(w);
}



/*
 * Write the dirty blocks of @v (sorted by index). With @sync, a folio under
 * writeback is waited for (its new dirty blocks must not race the old
 * write to the device) and the call returns once everything it and others
 * had in flight on these folios is done; without, such folios are skipped.
 */
/*
 * The blocks of @f to write, into @mask: the dirty ones, widened to whole
 * physical blocks where the cache holds the rest uptodate, so the device
 * never has to read-modify-write. Caller holds f->lock.
 */
static void wb_mask_locked(struct pc_dev *dev, struct pc_folio *f, unsigned long *mask)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb, p;

	bm_copy(mask, f->state, nb, nb);
	if (!ppb)
		return;
	for (p = 0; p < nb; p += ppb) {
		if (bm_all(mask, p, ppb, false) || bm_all(mask, p, ppb, true))
			continue;
		if (bm_all(f->state, p, ppb, true))
			bm_set_range(mask, p, ppb);
		else
			STAT_ADD(dev, partial_pblk_writes, 1);
	}
}

static bool pblk_needs_rmw(const struct pc_dev *dev, const struct pc_folio *f, uint32_t p);

/* With rmw = cache: does @f hold part of a physical block dirty and the rest not uptodate? */
static bool wb_rmw_needed(struct pc_dev *dev, struct pc_folio *f)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb, p;
	bool need = false;

	if (!ppb || dev->rmw_device)
		return false;
	pthread_mutex_lock(&f->lock);
	for (p = 0; p < nb && !need; p += ppb)
		need = pblk_needs_rmw(dev, f, p);
	pthread_mutex_unlock(&f->lock);
	return need;
}

/* Does physical block @p (first cache block) of @f need its missing part read? */
static bool pblk_needs_rmw(const struct pc_dev *dev, const struct pc_folio *f, uint32_t p)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb;

	return !bm_all(f->state, nb + p, ppb, false) && !bm_all(f->state, p, ppb, true);
}

/*
 * Read the missing blocks of @f's partly dirty physical blocks, so
 * writeback can send whole physical blocks (rmw = cache). Neighbouring
 * physical blocks that need it share one read: from the first missing
 * block to the last, into a bounce buffer, of which only the missing
 * blocks are copied in (the ones between may be dirty).
 */
static void wb_rmw_fill(struct pc_dev *dev, struct pc_folio *f)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb, sh = dev->cblk_shift;
	uint32_t max_blks = PC_READ_MAX >> sh, p, q, b0, b1, b;
	char *scratch = pc_bounce_buf();
	size_t up = 0;

	if (!scratch)
		return;
	pthread_mutex_lock(&f->lock);
	folio_excl_begin_locked(f);
	pthread_mutex_unlock(&f->lock);
	/* excl keeps the uptodate bits still; the dirty bits in the same words need the lock */
	for (p = 0; p < nb; p = q) {
		pthread_mutex_lock(&f->lock);
		if (!pblk_needs_rmw(dev, f, p)) {
			pthread_mutex_unlock(&f->lock);
			q = p + ppb;
			continue;
		}
		b0 = (uint32_t)bm_find(f->state, p, p + ppb, false);
		for (q = p + ppb; q < nb && pblk_needs_rmw(dev, f, q) &&
		     q + ppb - b0 <= max_blks; q += ppb)
			;
		/* the last missing block of the span */
		for (b1 = q; b1 > b0 && bm_test(f->state, b1 - 1); b1--)
			;
		pthread_mutex_unlock(&f->lock);
		if (folio_read_span(dev, f, b0, b1 - b0, scratch))
			continue;
		pthread_mutex_lock(&f->lock);
		for (b = b0; b < b1; b++) {
			if (bm_test(f->state, b))
				continue;
			memcpy(f->data + ((size_t)b << sh), scratch + ((size_t)(b - b0) << sh),
			       (size_t)1 << sh);
			up += bm_set_range(f->state, b, 1);
		}
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_lock(&f->lock);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	__atomic_add_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
}

static int wb_folios_bytes(struct pc_dev *dev, struct pc_folio **v, int n, bool sync, uint64_t *bytes)
{
	unsigned long mask[BM_WORDS(2u << 20 >> 9)];
	uint32_t nb = dev->nr_blks;
	struct wb_builder b = { .dev = dev, .max_io = dev_max_io(dev) };
	struct pc_batch batch;
	int i, err;

	/*
	 * rmw = cache: first complete the partly dirty physical blocks, all of
	 * them, so that building the I/Os below never stops to read and runs
	 * still merge across folios.
	 */
	if (dev->ppb && !dev->rmw_device)
		for (i = 0; i < n; i++)
			if (wb_rmw_needed(dev, v[i]))
				wb_rmw_fill(dev, v[i]);

	pc_batch_init(&batch);
	b.batch = &batch;
	b.ready_tail = &b.ready;
	for (i = 0; i < n; i++) {
		struct pc_folio *f = v[i];
		size_t s = 0, e;

		pthread_mutex_lock(&f->lock);
		if (f->wb_ios) {
			if (!sync) {
				pthread_mutex_unlock(&f->lock);
				continue;
			}
			/* never wait while holding I/O not yet submitted */
			pthread_mutex_unlock(&f->lock);
			wb_close(&b);
			wb_submit_ready(&b);
			pthread_mutex_lock(&f->lock);
			folio_wait_wb_locked(f);
		}
		wb_mask_locked(dev, f, mask);
		while ((s = bm_find(mask, s, nb, true)) < nb) {
			size_t cleared;

			e = bm_find(mask, s, nb, false);
			cleared = bm_clear_range(f->state, nb + s, e - s);
			folio_account_dirty_locked(dev, f, -(long)cleared);
			wb_add_locked(&b, f, (uint32_t)(s << dev->cblk_shift),
				      (uint32_t)((e - s) << dev->cblk_shift));
			s = e;
		}
		pthread_mutex_unlock(&f->lock);
		wb_submit_ready(&b);
	}
	wb_close(&b);
	wb_submit_ready(&b);
	err = pc_batch_wait(&batch);
	pc_batch_destroy(&batch);
	if (sync) {
		for (i = 0; i < n; i++) {
			pthread_mutex_lock(&v[i]->lock);
			folio_wait_wb_locked(v[i]);
			pthread_mutex_unlock(&v[i]->lock);
		}
	}
	if (bytes)
		*bytes = b.bytes;
	return err ? err : b.err;
}

int wb_folios(struct pc_dev *dev, struct pc_folio **v, int n, bool wait)
{
	return wb_folios_bytes(dev, v, n, wait, NULL);
}

int wb_dev_bytes(struct pc_dev *dev, enum wb_mode mode, bool sync, uint64_t *bytes)
{
	uint64_t now = blk_now_ms(), older = 0;
	struct pc_folio **v;
	int n, err;

	if (mode == WB_EXPIRED)
		older = now > dev->pc->dirty_expire_ms ? now - dev->pc->dirty_expire_ms : 1;
	n = pc_collect(dev, 0, 0, true, older, &v);
	if (n < 0)
		return n;
	err = wb_folios_bytes(dev, v, n, sync, bytes);
	pc_put_all(v, n);
	return err;
}

int wb_dev(struct pc_dev *dev, enum wb_mode mode, bool wait)
{
	return wb_dev_bytes(dev, mode, wait, NULL);
}

int wb_range(struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	struct pc_folio **v;
	int n, err;

	n = pc_collect(dev, pos, len, true, 0, &v);
	if (n <= 0) {
		if (n == 0)
			free(v);
		return n;
	}
	err = wb_folios(dev, v, n, true);
	pc_put_all(v, n);
	return err;
}

/* -------------------------------------------------------------- flusher */

void wb_kick(struct pc_cache *pc)
{
	pthread_mutex_lock(&pc->fl_lock);
	if (!pc->fl_kick) {
		__atomic_store_n(&pc->fl_kick, true, __ATOMIC_RELAXED);
		pthread_cond_signal(&pc->fl_cond);
	}
	pthread_mutex_unlock(&pc->fl_lock);
}

static bool under_pressure(struct pc_cache *pc)
{
	uint64_t dirty = __atomic_load_n(&pc->dirty_bytes, __ATOMIC_RELAXED) +
			 __atomic_load_n(&pc->wb_bytes, __ATOMIC_RELAXED);

	return dirty > pc->dirty_background || __atomic_load_n(&pc->alloc_waiters, __ATOMIC_RELAXED);
}

/* One pass over every device; returns bytes submitted. */
static uint64_t flusher_pass(struct pc_cache *pc, bool pressure)
{
	struct list_head *pos, *n;
	uint64_t total = 0, now = blk_now_ms();

	/* the device list does not change while the flusher runs */
	list_for_each_safe(pos, n, &pc->devs) {
		struct pc_dev *dev = list_entry(pos, struct pc_dev, node);
		uint64_t bytes = 0, retry;
		int failing;

		if (!__atomic_load_n(&dev->dirty_bytes, __ATOMIC_RELAXED))
			continue;
		pthread_mutex_lock(&dev->err_lock);
		failing = dev->failing;
		retry = dev->retry_after_ms;
		pthread_mutex_unlock(&dev->err_lock);
		if (failing && now < retry)
			continue;
		wb_dev_bytes(dev, pressure ? WB_ALL : WB_EXPIRED, false, &bytes);
		total += bytes;
	}
	return total;
}

static void *flusher_main(void *arg)
{
	struct pc_cache *pc = arg;
	sigset_t all;

	/* signals belong to the thread that serves requests */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		struct timespec ts;
		bool stop, pressure;
		uint64_t wait_ms = pc->dirty_expire_ms / 5 ? pc->dirty_expire_ms / 5 : 100;

		if (wait_ms > 1000)
			wait_ms = 1000;
		pthread_mutex_lock(&pc->fl_lock);
		if (!pc->fl_kick && !pc->fl_stop) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += (time_t)(wait_ms / 1000);
			ts.tv_nsec += (long)(wait_ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&pc->fl_cond, &pc->fl_lock, &ts);
		}
		stop = pc->fl_stop;
		__atomic_store_n(&pc->fl_kick, false, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&pc->fl_lock);
		if (stop)
			break;
		do {
			pressure = under_pressure(pc);
		} while (flusher_pass(pc, pressure) && pressure && !pc->fl_stop);
	}
	return NULL;
}

int wb_flusher_start(struct pc_cache *pc)
{
	int err;

	if (pc->flusher_running)
		return 0;
	pc->fl_stop = false;
	err = pthread_create(&pc->flusher, NULL, flusher_main, pc);
	if (err)
		return -err;
	pthread_mutex_lock(&pc->lock);
	pc->flusher_running = true;
	pthread_mutex_unlock(&pc->lock);
	return 0;
}

void wb_flusher_stop(struct pc_cache *pc)
{
	if (!pc->flusher_running)
		return;
	pthread_mutex_lock(&pc->fl_lock);
	pc->fl_stop = true;
	pthread_cond_signal(&pc->fl_cond);
	pthread_mutex_unlock(&pc->fl_lock);
	pthread_join(pc->flusher, NULL);
	pthread_mutex_lock(&pc->lock);
	pc->flusher_running = false;
	pthread_mutex_unlock(&pc->lock);
}
