/* SPDX-License-Identifier: MIT */
/*
 * core/writeback.c - dirty data on its way out: writeback of dirty blocks
 * (runs of contiguous dirty blocks, also across folios, become one I/O,
 * submitted through submit.c), dirty throttling of writers, and the
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

#include "../backends/lib/log.h"
#include "pcache_int.h"


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

/* Segments a writeback I/O of @max_io bytes can have (a run across folios). */
uint32_t wb_io_cap(const struct pc_dev *dev, uint64_t max_io)
{
	return (uint32_t)(max_io / dev->pc->folio_size) + 2;
}

size_t wb_io_size(uint32_t cap)
{
	return sizeof(struct wb_io) + cap * (sizeof(struct wb_seg) + sizeof(struct iovec));
}

static struct wb_io *wb_io_alloc(struct pc_dev *dev, uint64_t max_io)
{
	uint32_t cap = wb_io_cap(dev, max_io);
	struct wb_io *w = be_pool_get_size(&dev->wb_pool, wb_io_size(cap));

	if (!w)
		return NULL;
	w->dev = dev;
	w->cap = (int)cap;
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
		pc_trace_issue(b->dev, &w->io, w->nsegs > 1 || w->io.len > b->dev->cblk);
		ret = pc_submit_first_hop(b->dev->be, b->dev->name, &w->io);
		if (ret < 0)
			wb_end_io(&w->io, ret);
	}
}

/*
 * Trace the cache blocks of [pos, pos+len) joining a writeback I/O as the
 * kernel shows bios joining a request: each block is queued (Q), and each
 * one after the I/O's first is merged into it (M), so a run of N blocks
 * written as one I/O shows N-1 merges.
 */
static void wb_trace_add(struct pc_dev *dev, uint64_t pos, uint64_t len, bool merged)
{
	uint32_t cat = BT_TC_WRITE;
	uint64_t end = pos + len;

	while (pos < end) {
		uint64_t n = dev->cblk - (pos & (dev->cblk - 1));

		if (n > end - pos)
			n = end - pos;
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_QUEUE | BT_TC_ACT(cat), pos, n, 0, NULL, 0, 0);
		if (merged)
			bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_BACKMERGE | BT_TC_ACT(cat), pos, n, 0,
				 NULL, 0, 0);
		merged = true;
		pos += n;
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
			/*
			 * the run goes on in a new I/O: a split at max_io,
			 * which the trace shows as the X it counts as
			 */
			if (w->io.pos + w->io.len == p) {
				STAT_ADD(dev, split_ios, 1);
				if (bt_on(dev->bt, BT_LEVEL_DEV))
					bt_split(dev->bt, BT_TC_WRITE, w->io.pos, w->io.len, p);
			}
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
		if (bt_on(dev->bt, BT_LEVEL_DEV))
			wb_trace_add(dev, p, take, w->io.len != 0);
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

/* Record the result of writing back (or reading for) [pos, pos+len). */
static void wb_note_result(struct pc_dev *dev, uint64_t pos, uint64_t len, int res)
{
	uint64_t now = blk_now_ms();
	bool log;

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
			dev->name, (unsigned long long)len, (unsigned long long)pos,
			strerror(-res),
			dev->on_error_drop ? "dropped (on_error = drop)" : "the data stays dirty");
}

/*
 * Write-back I/O @w ended: its blocks leave writeback; on success a
 * partial block's in-flight record goes (or stays, if written again
 * meanwhile); a failure puts the blocks back in the dirty set
 * (on_error = keep) or drops them (counted).
 */
static void wb_end_seg_locked(struct pc_dev *dev, struct wb_seg *s, int res, uint64_t ok_end)
{
	struct pc_folio *f = s->f;
	uint32_t sh = dev->cblk_shift, end = s->off + s->len;
	uint32_t b0 = s->off >> sh, b1 = (end - 1) >> sh, b;
	uint64_t fpos = folio_pos(dev->pc, f), dropped = 0;
	size_t nr = 0;

	for (b = b0; b <= b1; b++) {
		uint32_t part_end = (b + 1) << sh < end ? (b + 1) << sh : end;
		uint32_t part_start = b << sh > s->off ? b << sh : s->off;
		/* a partial completion: the blocks before the failure made it */
		bool failed = res && fpos + part_end > ok_end;
		struct pc_part *p = folio_part_find_locked(f, b);

		if (failed && !dev->on_error_drop) {
			/* keep: back into the dirty set (only blocks still cached, whole or partial) */
			if (bm_test(f->state, b) || p)
				nr += bm_set_range(f->state, dev->nr_blks + b, 1);
		} else if (failed) {
			dropped += part_end - part_start;
		}
		if (p && (p->flags & PART_WB)) {
			p->flags &= ~PART_WB;
			if (!bm_test(f->state, dev->nr_blks + b))
				folio_part_free_locked(f, p);	/* the device has it: read it from there */
		}
	}
	folio_account_dirty_locked(dev, f, (long)nr);
	if (dropped)
		STAT_ADD(dev, dropped_bytes, dropped);
}

static void wb_end_io(struct blk_io *io, int res)
{
	struct wb_io *w = io->private;
	struct pc_dev *dev = w->dev;
	struct pc_batch *batch;
	int i;

	for (i = 0; i < w->nsegs; i++) {
		struct wb_seg *s = &w->segs[i];
		struct pc_folio *f = s->f;
		bool clean;

		pthread_mutex_lock(&f->lock);
		wb_end_seg_locked(dev, s, res, w->io.pos + (res ? io->done : w->io.len));
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
	if (bt_on(dev->bt, BT_LEVEL_DEV))
		bt_event(dev->bt, BT_LEVEL_DEV, BT_ACT_COMPLETE | BT_TC_ACT(BT_TC_WRITE), w->io.pos,
			 w->io.len, res, NULL, 0, 0);
	acct_end(dev, BLK_WRITE, w->io.len, w->start_ns, res);
	wb_note_result(dev, w->io.pos, w->io.len, res);
	batch = w->batch;
	be_pool_put(&dev->wb_pool, w);
	if (batch)
		pc_batch_done(batch, res);
}

/*
 * The whole dirty blocks of @f to write, into @mask: the dirty uptodate
 * ones, widened to whole physical blocks where the cache holds the rest
 * uptodate, so the device never has to read-modify-write. Partial blocks
 * are not in it (see wb_next_part_locked). Caller holds f->lock.
 */
static void wb_mask_locked(struct pc_dev *dev, struct pc_folio *f, unsigned long *mask)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb, p;
	size_t i;

	bm_copy(mask, f->state, nb, nb);
	if (f->nr_part)		/* a partial block is dirty, not uptodate */
		for (i = 0; i < BM_WORDS(nb); i++)
			mask[i] &= f->state[i];
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

/*
 * rmw = device: the first partial dirty block of @f at or after @from
 * whose range can go out now (its whole logical blocks), or nr_blks.
 * Caller holds f->lock.
 */
static uint32_t wb_next_part_locked(struct pc_dev *dev, struct pc_folio *f, uint32_t from)
{
	uint32_t best = dev->nr_blks, i;

	for (i = 0; f->nr_part && i < PC_PART_SLOTS; i++) {
		const struct pc_part *p = &f->part[i];

		if (p->blk != PART_FREE && p->blk >= from && p->blk < best &&
		    bm_test(f->state, dev->nr_blks + p->blk))
			best = p->blk;
	}
	return best;
}

/*
 * Send the whole logical blocks of partial block @b's range (rmw = device);
 * the block leaves the dirty set if that was all of it, and its record
 * stays, marked in flight, until the write ends. Caller holds f->lock.
 */
static void wb_add_part_locked(struct wb_builder *bld, struct pc_folio *f, uint32_t b)
{
	struct pc_dev *dev = bld->dev;
	struct pc_part *p = folio_part_find_locked(f, b);
	uint32_t lbs = dev->geo.lbs;
	uint32_t lo = (p->start + lbs - 1) & ~(lbs - 1), hi = p->end & ~(lbs - 1);

	if (lo >= hi)
		return;		/* a write came since wb_prepare(): the next pass */
	if (lo == p->start && hi == p->end) {
		bm_clear_range(f->state, dev->nr_blks + b, 1);
		folio_account_dirty_locked(dev, f, -1);
	}
	p->flags |= PART_WB;
	STAT_ADD(dev, partial_pblk_writes, 1);
	wb_add_locked(bld, f, (b << dev->cblk_shift) + lo, hi - lo);
}

/* Does physical block @p (first cache block) of @f need its missing part read? */
static bool pblk_needs_rmw(const struct pc_dev *dev, const struct pc_folio *f, uint32_t p)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb;

	return !bm_all(f->state, nb + p, ppb, false) && !bm_all(f->state, p, ppb, true);
}

/*
 * Must @f read before its dirty data can go out the way the policy wants:
 * a partial block (all of it with rmw = cache, its range's ends with
 * rmw = device), or (rmw = cache) a physical block partly dirty whose rest
 * is not cached? Caller holds f->lock.
 */
static bool wb_prep_needed_locked(struct pc_dev *dev, struct pc_folio *f, bool parts)
{
	uint32_t nb = dev->nr_blks, lbs = dev->geo.lbs, i, p;

	for (i = 0; parts && f->nr_part && i < PC_PART_SLOTS; i++) {
		const struct pc_part *r = &f->part[i];

		if (r->blk == PART_FREE || !bm_test(f->state, nb + r->blk))
			continue;
		if (!dev->rmw_device || (r->start | r->end) & (lbs - 1))
			return true;
	}
	if (!dev->ppb || dev->rmw_device)
		return false;
	for (p = 0; p < nb; p += dev->ppb)
		if (pblk_needs_rmw(dev, f, p))
			return true;
	return false;
}

/*
 * Read the missing blocks of @f's partly dirty physical blocks, so
 * writeback can send whole physical blocks (rmw = cache). Neighbouring
 * physical blocks that need it share one read: from the first missing
 * block to the last, into a bounce buffer, of which only the missing
 * blocks are copied in (the ones between may be dirty, and a partial
 * block whose completion failed keeps its bytes). Caller holds excl.
 */
static int wb_rmw_fill(struct pc_dev *dev, struct pc_folio *f)
{
	uint32_t nb = dev->nr_blks, ppb = dev->ppb, sh = dev->cblk_shift;
	uint32_t max_blks = PC_READ_MAX >> sh, p, q, b0, b1, b;
	char *scratch = pc_rmw_buf();
	size_t up = 0;
	int err = 0, ret;

	if (!scratch)
		return -ENOMEM;
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
		ret = folio_read_span(dev, f, b0, b1 - b0, scratch);
		if (ret) {
			err = err ? err : ret;
			continue;
		}
		pthread_mutex_lock(&f->lock);
		for (b = b0; b < b1; b++) {
			if (bm_test(f->state, b) || folio_part_find_locked(f, b))
				continue;
			memcpy(f->data + ((size_t)b << sh), scratch + ((size_t)(b - b0) << sh),
			       (size_t)1 << sh);
			up += bm_set_range(f->state, b, 1);
		}
		pthread_mutex_unlock(&f->lock);
	}
	__atomic_add_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
	return err;
}

/*
 * A read that writeback needed failed: the blocks stay dirty (or, with
 * on_error = drop, the partial ones are dropped), and the error is the
 * device's writeback error like a failed write. Caller holds f->lock.
 */
static void wb_prep_failed_locked(struct pc_dev *dev, struct pc_folio *f)
{
	uint32_t i, nr = 0;

	if (!dev->on_error_drop)
		return;
	for (i = 0; f->nr_part && i < PC_PART_SLOTS; i++) {
		struct pc_part *p = &f->part[i];

		if (p->blk == PART_FREE || !bm_test(f->state, dev->nr_blks + p->blk) ||
		    (p->flags & PART_WB))
			continue;
		bm_clear_range(f->state, dev->nr_blks + p->blk, 1);
		folio_part_free_locked(f, p);
		nr++;
	}
	folio_account_dirty_locked(dev, f, -(long)nr);
	STAT_ADD(dev, dropped_bytes, (uint64_t)nr << dev->cblk_shift);
}

/*
 * Make @f's dirty data ready to go out (invariant 9): with @parts,
 * complete its partial blocks, and with rmw = cache its partly dirty
 * physical blocks, under the exclusive hold. Returns 0 or the read error
 * (already recorded as a writeback error).
 */
static int wb_prepare(struct pc_dev *dev, struct pc_folio *f, bool parts)
{
	uint64_t pos = folio_pos(dev->pc, f);
	int err = 0, ret = 0;

	pthread_mutex_lock(&f->lock);
	if (!wb_prep_needed_locked(dev, f, parts)) {
		pthread_mutex_unlock(&f->lock);
		return 0;
	}
	folio_excl_begin_locked(f);
	pthread_mutex_unlock(&f->lock);
	if (parts)
		err = folio_complete_parts(dev, f, 0, dev->nr_blks - 1, !dev->rmw_device);
	if (dev->ppb && !dev->rmw_device)
		ret = wb_rmw_fill(dev, f);
	err = err ? err : ret;
	pthread_mutex_lock(&f->lock);
	if (err)
		wb_prep_failed_locked(dev, f);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	if (err) {
		STAT_ADD(dev, read_errors, 1);
		wb_note_result(dev, pos, dev->pc->folio_size, err);
	}
	return err;
}

/* Has @f held dirty data longer than dirty_expire? */
static bool folio_expired(const struct pc_cache *pc, struct pc_folio *f, uint64_t now)
{
	uint64_t since;

	pthread_mutex_lock(&f->lock);
	since = f->nr_dirty ? f->dirtied_ms : now;
	pthread_mutex_unlock(&f->lock);
	return since + pc->dirty_expire_ms <= now;
}

/*
 * Write the dirty blocks of @v (sorted by index). With @sync, a folio under
 * writeback is waited for (its new dirty blocks must not race the old
 * write to the device) and the call returns once everything it and others
 * had in flight on these folios is done; without, such folios are skipped.
 */
static int wb_folios_bytes(struct pc_dev *dev, struct pc_folio **v, int n, bool sync, uint64_t *bytes)
{
	unsigned long mask[BM_WORDS(2u << 20 >> 9)];
	uint32_t nb = dev->nr_blks;
	struct wb_builder b = { .dev = dev, .max_io = dev_max_io(dev) };
	struct pc_batch batch;
	uint64_t now = blk_now_ms();
	int i, err, prep_err = 0, ret;

	/*
	 * First the reads writeback needs, for all the folios, so that
	 * building the I/Os below never stops to read and runs still merge
	 * across folios. A background pass leaves young partial blocks alone
	 * (the rest of a write split in two FUSE requests is usually on its
	 * way) unless someone waits for a folio.
	 */
	for (i = 0; i < n; i++) {
		bool parts = sync || __atomic_load_n(&dev->pc->alloc_waiters, __ATOMIC_RELAXED) ||
			     folio_expired(dev->pc, v[i], now);

		ret = wb_prepare(dev, v[i], parts);
		prep_err = prep_err ? prep_err : ret;
	}

	pc_batch_init(&batch);
	b.batch = &batch;
	b.ready_tail = &b.ready;
	for (i = 0; i < n; i++) {
		struct pc_folio *f = v[i];
		uint32_t s = 0, e, ps, pfrom = 0;

		pthread_mutex_lock(&f->lock);
		/*
		 * Under writeback already (invariant 5), or held exclusively: its
		 * holder may be changing what the blocks hold (a discard zeroing
		 * them must not see an older copy leave after it). On a
		 * stable_writes device also while a writer copies into it
		 * (invariant 7): the I/O would carry memory still changing. A
		 * background pass skips it, a sync pass waits for the memcpy.
		 */
		if (f->wb_ios || folio_wb_blocked_locked(dev, f)) {
			if (!sync) {
				pthread_mutex_unlock(&f->lock);
				continue;
			}
			/* never wait while holding I/O not yet submitted */
			pthread_mutex_unlock(&f->lock);
			wb_close(&b);
			wb_submit_ready(&b);
			pthread_mutex_lock(&f->lock);
			folio_wait_idle_locked(dev, f);
		}
		wb_mask_locked(dev, f, mask);
		for (;;) {
			size_t cleared;

			s = (uint32_t)bm_find(mask, s, nb, true);
			ps = dev->rmw_device ? wb_next_part_locked(dev, f, pfrom) : nb;
			if (ps < s) {
				wb_add_part_locked(&b, f, ps);
				pfrom = ps + 1;
				continue;
			}
			if (s >= nb)
				break;
			e = (uint32_t)bm_find(mask, s, nb, false);
			cleared = bm_clear_range(f->state, nb + s, e - s);
			folio_account_dirty_locked(dev, f, -(long)cleared);
			wb_add_locked(&b, f, s << dev->cblk_shift, (e - s) << dev->cblk_shift);
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
	return err ? err : b.err ? b.err : prep_err;
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

/* ------------------------------------------------------ dirty throttling */

/* -errno of a device whose writeback keeps failing, else 0 (dev->failing holds errno). */
int wb_dev_failing(struct pc_dev *dev)
{
	int err;

	pthread_mutex_lock(&dev->err_lock);
	err = dev->failing;
	pthread_mutex_unlock(&dev->err_lock);
	return -err;
}

/* Dirty bytes that belong to devices whose writeback keeps failing. */
static uint64_t stuck_dirty_bytes(struct pc_cache *pc)
{
	struct list_head *pos, *n;
	uint64_t stuck = 0;

	list_for_each_safe(pos, n, &pc->devs) {
		struct pc_dev *d = list_entry(pos, struct pc_dev, node);

		if (wb_dev_failing(d))
			stuck += __atomic_load_n(&d->dirty_bytes, __ATOMIC_RELAXED);
	}
	return stuck;
}

/*
 * Without a flusher thread the caller writes back itself (unit tests).
 * Returns the first error of @dev's own writeback (another device's failure
 * is not this caller's), and in @bytes what was written.
 */
int wb_all_sync(struct pc_cache *pc, struct pc_dev *dev, uint64_t *bytes)
{
	struct pc_dev *devs[PC_MAX_DEVS];
	int nr = pc_devs_get(pc, devs), i, err = 0, ret;

	*bytes = 0;
	for (i = 0; i < nr; i++) {
		uint64_t b = 0;

		if (!__atomic_load_n(&devs[i]->dirty_bytes, __ATOMIC_RELAXED))
			continue;
		ret = wb_dev_bytes(devs[i], WB_ALL, true, &b);
		*bytes += b;
		if (ret && devs[i] == dev && !err)
			err = ret;
	}
	pc_devs_put(pc, devs, nr);
	return err;
}

/*
 * The bound of a writer's wait over the dirty limit. What lowers the dirty
 * bytes mostly wakes it: writeback turning a folio clean (folio_unpark())
 * and dropped data. The bound covers what wakes no one: a device's writes
 * beginning to fail (the writer must get the errno, not wait on), the end
 * of a writeback whose folio was dirtied again meanwhile (wb_bytes falls,
 * no folio turns clean). Those are rare, so
 * the bound costs latency only there; 50 ms is 5 times the longest pause
 * below the limit (10 ms, wb_balance_dirty()), so a writer held here
 * re-checks less often than one paced there. Chosen with the first
 * throttle (7a8a4ee), not measured: its cost is a wake-up per 50 ms per
 * throttled writer.
 */
#define WB_THROTTLE_POLL_MS 50

/*
 * Writers are slowed when dirty data passes the limit; the flusher starts
 * at the background level. A device whose writeback keeps failing gets its
 * errno instead of a wait that could last forever.
 */
int wb_balance_dirty(struct pc_dev *dev, bool may_pause, bool nowait)
{
	struct pc_cache *pc = dev->pc;
	uint64_t dirty;
	int err;

	for (;;) {
		dirty = __atomic_load_n(&pc->dirty_bytes, __ATOMIC_RELAXED) +
			__atomic_load_n(&pc->wb_bytes, __ATOMIC_RELAXED);
		if (dirty > pc->dirty_background &&
		    __atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE) &&
		    !__atomic_load_n(&pc->fl_kick, __ATOMIC_RELAXED))
			wb_kick(pc);
		if (dirty <= pc->dirty_limit) {
			uint64_t setpoint = (pc->dirty_background + pc->dirty_limit) / 2;

			/*
			 * Between the setpoint and the limit, a short pause that
			 * grows with the excess (as balance_dirty_pages): a writer
			 * that outruns the backend slows to its speed smoothly
			 * instead of running into the limit and stopping.
			 */
			if (may_pause && dirty > setpoint &&
			    __atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE)) {
				if (nowait)
					return -EAGAIN;
				usleep((useconds_t)(200 + 9800 * (dirty - setpoint) /
						   (pc->dirty_limit - setpoint + 1)));
			}
			return 0;
		}
		err = wb_dev_failing(dev);
		if (err && __atomic_load_n(&dev->dirty_bytes, __ATOMIC_RELAXED))
			return err;
		pthread_mutex_lock(&pc->lock);
		/* data that cannot leave does not hold up healthy devices */
		if (dirty - stuck_dirty_bytes(pc) <= pc->dirty_limit) {
			pthread_mutex_unlock(&pc->lock);
			return 0;
		}
		if (nowait) {
			pthread_mutex_unlock(&pc->lock);
			return -EAGAIN;
		}
		if (!__atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE)) {
			uint64_t bytes;

			pthread_mutex_unlock(&pc->lock);
			err = wb_all_sync(pc, dev, &bytes);
			if (err && wb_dev_failing(dev))
				return err;
			if (!bytes)
				return 0;	/* nothing this thread can write: go on */
			continue;
		}
		__atomic_add_fetch(&pc->alloc_waiters, 1, __ATOMIC_RELAXED);
		blk_cond_wait_ms(&pc->free_cond, &pc->lock, WB_THROTTLE_POLL_MS);
		__atomic_sub_fetch(&pc->alloc_waiters, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&pc->lock);
	}
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
	struct pc_dev *devs[PC_MAX_DEVS];
	uint64_t total = 0, now = blk_now_ms();
	int nr = pc_devs_get(pc, devs), i;

	for (i = 0; i < nr; i++) {
		struct pc_dev *dev = devs[i];
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
		/*
		 * A failure is already the device's writeback error (errseq,
		 * failing, the log) for the next fsync; an allocation failure
		 * leaves the data dirty for the next pass.
		 */
		(void)wb_dev_bytes(dev, pressure ? WB_ALL : WB_EXPIRED, false, &bytes);
		total += bytes;
	}
	pc_devs_put(pc, devs, nr);
	return total;
}

/* Has wb_flusher_stop() asked the flusher to end? fl_stop is fl_lock's. */
static bool flusher_stopping(struct pc_cache *pc)
{
	bool stop;

	pthread_mutex_lock(&pc->fl_lock);
	stop = pc->fl_stop;
	pthread_mutex_unlock(&pc->fl_lock);
	return stop;
}

static void *flusher_main(void *arg)
{
	struct pc_cache *pc = arg;
	sigset_t all;

	/* signals belong to the thread that serves requests */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		bool stop, pressure;
		uint64_t wait_ms = pc->dirty_expire_ms / 5 ? pc->dirty_expire_ms / 5 : 100;

		if (wait_ms > 1000)
			wait_ms = 1000;
		pthread_mutex_lock(&pc->fl_lock);
		if (!pc->fl_kick && !pc->fl_stop)
			blk_cond_wait_ms(&pc->fl_cond, &pc->fl_lock, wait_ms);
		stop = pc->fl_stop;
		__atomic_store_n(&pc->fl_kick, false, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&pc->fl_lock);
		if (stop)
			break;
		do {
			pressure = under_pressure(pc);
		} while (flusher_pass(pc, pressure) && pressure && !flusher_stopping(pc));
	}
	return NULL;
}

int wb_flusher_start(struct pc_cache *pc)
{
	int err;

	if (__atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&pc->fl_lock);
	pc->fl_stop = false;
	pthread_mutex_unlock(&pc->fl_lock);
	err = pthread_create(&pc->flusher, NULL, flusher_main, pc);
	if (err)
		return -err;
	__atomic_store_n(&pc->flusher_running, true, __ATOMIC_RELEASE);
	return 0;
}

void wb_flusher_stop(struct pc_cache *pc)
{
	if (!__atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&pc->fl_lock);
	pc->fl_stop = true;
	pthread_cond_signal(&pc->fl_cond);
	pthread_mutex_unlock(&pc->fl_lock);
	pthread_join(pc->flusher, NULL);
	__atomic_store_n(&pc->flusher_running, false, __ATOMIC_RELEASE);
}
