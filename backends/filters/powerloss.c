// SPDX-License-Identifier: MIT
/*
 * backends/filters/powerloss.c - the powerloss filter: a simulated power cut under
 * everything above the device (SQLite's test6.c crash simulation is the
 * model). It keeps an undo journal of the writes not yet covered by a flush;
 * `echo 1 > .sys/DEV/powerloss/trigger` cuts the power: volatile memory
 * above the device dies (the host's drop_volatile: blkfs's cache for the
 * device and the kernel's page cache of the file), and each unflushed write
 * is kept, dropped, or torn at a physical-block boundary, as a seeded PRNG
 * says. Until `echo 1 > .../restart` the disk is dark: writes and flushes
 * are acknowledged and dropped, reads see the post-crash state.
 *
 * The journal. Before a WRITE, DISCARD or WRITE_ZEROES goes down, the filter
 * reads the range's current contents from the layer below and keeps them
 * (an all-zero chunk is kept as "zeros", so a discard of an empty device
 * costs nothing). The entry is dropped when a FLUSH completes that was
 * submitted after the write completed: its data is durable. Memory is thus
 * the unflushed data, as a real disk's volatile cache would hold. Writes
 * that overlap one still in flight wait for it, so each entry's saved data
 * is exactly the contents left by the writes before it.
 *
 * The cut. Entries are decided in completion order from the seed (the
 * order the disk got them; backends/lib/crashmodel.h is the promise every cut
 * keeps, checked in the unit test): a write within
 * one physical block is kept or dropped (1/2 each); a longer one is kept,
 * dropped or torn (1/3 each), a torn write keeping a prefix of whole
 * physical blocks (1 to n-1 of its n). Then they are undone newest first:
 * a dropped range gets the entry's saved contents back, except where a
 * newer kept write has settled the physical block. A kept range settles
 * its physical blocks whole, since a disk writes a physical block as a
 * unit: the result is, for every physical block, its contents after some
 * prefix of the unflushed writes to it (none, some, or all of them), and
 * flushed data always survives. Nothing tears inside a physical block.
 *
 * A FLUSH still in flight at the cut fails with EIO (it never finished:
 * the data it was to cover may be gone), so a successful fsync always
 * means durable. The seed is printed to stderr (the daemon log) and kept
 * in `last_seed`; `seed` sets the next one (default: from the clock).
 *
 * States: running -> (trigger) cutting -> dark -> (restart) running.
 * Cutting: new writes are already dropped; the filter waits for writes in
 * flight, then restores. Reads pass through in every state; blocks the
 * cache read meanwhile are dropped by the drop_volatile that ends the cut.
 *
 * Snapshots are the layer below's (the calls pass through), but a reset to
 * one ends the journal: the contents it saved, and the writes it covers,
 * belong to a device state that is gone.
 *
 * Lock: pd->lock covers the state, the journal and the counters; it is
 * never held across a submit, an end_io or a host callback. A thread
 * submitting a write may wait on pd->cv (an overlapping write in flight);
 * trigger and close wait on it for writes in flight to finish.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../backends_int.h"
#include "../lib/trace.h"

#define PL_ALIGN	4096		/* saved-data buffers: fine for O_DIRECT below */

enum pl_state { PL_RUNNING, PL_CUTTING, PL_DARK };

/* A piece of an entry's saved contents: [pos, pos + len), data or zeros. */
struct pl_run {
	uint64_t pos;
	uint64_t len;
	char *data;			/* owned; NULL: the range was all zeros */
};

/* One journal entry: a WRITE, DISCARD or WRITE_ZEROES not yet flushed. */
struct pl_entry {
	uint64_t pos;
	uint64_t len;
	uint64_t done_seq;		/* lock: completion order; 0 while in flight */
	bool inflight;			/* lock: taken, not yet completed below */
	struct pl_run *runs;		/* sorted, tiling [pos, pos + len) */
	int nr_runs;
	uint64_t saved_bytes;		/* bytes of data held by runs */
	struct pl_entry *gone_next;	/* on a list of entries a flush settled */
};

/*
 * Entries and child I/Os filled at open (struct be_pool): a write takes one
 * of each without malloc. What a write saves (the old data) is as large as
 * the write, so it is allocated per write; see entry_save().
 */
#define PL_POOL	256

struct pl_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages */
	struct bt_dev *bt;		/* trace state (message notes); NULL: none */
	const struct blk_host *host;	/* may be NULL (tests, tools) */
	struct blk_geometry geo;	/* the layer below's; set at open */

	struct be_pool entry_pool;	/* struct pl_entry */
	struct be_pool io_pool;		/* struct pl_io */
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* an entry completed, or the state changed */
	enum pl_state state;		/* lock */
	bool resetting;			/* lock: a reset to a snapshot is under way */
	uint64_t gen;			/* lock: bumped at each cut; a flush from before fails */
	uint64_t done_seq;		/* lock: last completion number given */
	struct pl_entry **v;		/* lock: the journal, oldest first */
	size_t nr, cap;			/* lock */
	size_t nr_inflight;		/* lock: entries with inflight set */
	uint64_t unflushed_bytes;	/* lock: sum of entry lengths */
	uint64_t saved_bytes;		/* lock: sum of entries' saved_bytes */
	bool seed_auto;			/* lock: next seed from the clock */
	uint64_t seed;			/* lock: the next seed when !seed_auto */
	bool have_last;			/* lock */
	uint64_t last_seed;		/* lock */

	/* Counters (lock). */
	uint64_t nr_cuts, nr_kept, nr_dropped, nr_torn;
	uint64_t nr_dark_writes, restored_bytes, nr_restore_errors;
	uint64_t nr_resets;		/* the device was reset to a snapshot */
};

/* A write or flush the filter passes down as its own child. */
struct pl_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;
	struct pl_dev *pd;
	struct pl_entry *e;		/* WRITE/DISCARD/WRITE_ZEROES */
	uint64_t gen;			/* FLUSH: the generation it was submitted in */
	uint64_t upto;			/* FLUSH: the entries it covers (done_seq <= upto) */
};

/* splitmix64: any seed, 0 included, gives a good sequence. */
static uint64_t pl_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static bool is_zero(const char *p, size_t n)
{
	return !n || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static void entry_free(struct pl_dev *pd, struct pl_entry *e)
{
	int i;

	if (!e)
		return;
	for (i = 0; i < e->nr_runs; i++)
		free(e->runs[i].data);
	free(e->runs);
	be_pool_put(&pd->entry_pool, e);
}

/* ---- synchronous I/O to the layer below (journal reads, restores) ---- */

struct pl_sync {
	struct blk_io io;		/* must come first */
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool done;
	int res;
};

static void pl_sync_end_io(struct blk_io *io, int res)
{
	struct pl_sync *s = (struct pl_sync *)io;

	pthread_mutex_lock(&s->lock);
	s->res = res;
	s->done = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->lock);
}

/* One I/O to @be, waited for: 0 or -errno. */
static int pl_sync_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		      void *buf)
{
	struct iovec iov = { .iov_base = buf, .iov_len = (size_t)len };
	struct pl_sync s = {
		.io = {
			.op = op,
			.pos = pos,
			.len = len,
			.iov = buf ? &iov : NULL,
			.iovcnt = buf ? 1 : 0,
			.end_io = pl_sync_end_io,
		},
		.lock = PTHREAD_MUTEX_INITIALIZER,
		.cv = PTHREAD_COND_INITIALIZER,
	};
	int ret;

	s.io.private = &s;
	ret = blk_submit(be, &s.io);
	if (ret)
		return ret;
	pthread_mutex_lock(&s.lock);
	while (!s.done)
		pthread_cond_wait(&s.cv, &s.lock);
	pthread_mutex_unlock(&s.lock);
	pthread_mutex_destroy(&s.lock);
	pthread_cond_destroy(&s.cv);
	return s.res;
}

static uint64_t chunk_max(const struct pl_dev *pd)
{
	return pd->geo.max_io ? pd->geo.max_io : (1u << 20);
}

/* Append a run to @e; a zero run merges into a zero run before it. */
static int entry_add_run(struct pl_entry *e, uint64_t pos, uint64_t len, char *data)
{
	struct pl_run *r;

	if (!data && e->nr_runs && !e->runs[e->nr_runs - 1].data) {
		e->runs[e->nr_runs - 1].len += len;
		return 0;
	}
	r = realloc(e->runs, (size_t)(e->nr_runs + 1) * sizeof(*r));
	if (!r)
		return -ENOMEM;
	e->runs = r;
	e->runs[e->nr_runs++] = (struct pl_run){ .pos = pos, .len = len, .data = data };
	if (data)
		e->saved_bytes += len;
	return 0;
}

/*
 * Read what [e->pos, e->pos + e->len) holds now, in chunks of at most
 * max_io, into @e's runs: a chunk of zeros costs no memory.
 */
static int entry_save(struct pl_dev *pd, struct pl_entry *e)
{
	uint64_t max = chunk_max(pd), off = 0;
	/* A WRITE is one chunk (len <= max_io); only a long discard takes more. */
	uint64_t bufsz = e->len < max ? e->len : max;
	char *buf = NULL;
	int ret = 0;

	while (off < e->len) {
		uint64_t n = e->len - off < bufsz ? e->len - off : bufsz;

		if (!buf && posix_memalign((void **)&buf, PL_ALIGN, (size_t)bufsz)) {
			buf = NULL;
			ret = -ENOMEM;
			break;
		}
		ret = pl_sync_io(pd->be.next, BLK_READ, e->pos + off, n, buf);
		if (ret)
			break;
		if (is_zero(buf, (size_t)n)) {
			ret = entry_add_run(e, e->pos + off, n, NULL);
		} else {
			char *keep = buf;

			/* A short last chunk need not hold on to a whole buffer. */
			if (n < bufsz / 2) {
				if (posix_memalign((void **)&keep, PL_ALIGN, (size_t)n)) {
					ret = -ENOMEM;
					break;
				}
				memcpy(keep, buf, (size_t)n);
			} else {
				buf = NULL;	/* the run owns it now */
			}
			ret = entry_add_run(e, e->pos + off, n, keep);
			if (ret && keep != buf)
				free(keep);
		}
		if (ret)
			break;
		off += n;
	}
	free(buf);
	return ret;
}

/* ---- the journal (caller holds pd->lock) ---- */

static bool overlaps_inflight_locked(struct pl_dev *pd, uint64_t pos, uint64_t len)
{
	size_t i;

	if (!pd->nr_inflight)
		return false;
	for (i = pd->nr; i-- > 0;) {
		const struct pl_entry *e = pd->v[i];

		if (e->inflight && pos < e->pos + e->len && e->pos < pos + len)
			return true;
	}
	return false;
}

static int journal_add_locked(struct pl_dev *pd, struct pl_entry *e)
{
	if (pd->nr == pd->cap) {
		size_t cap = pd->cap ? 2 * pd->cap : 64;
		struct pl_entry **v = realloc(pd->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		pd->v = v;
		pd->cap = cap;
	}
	pd->v[pd->nr++] = e;
	e->inflight = true;
	pd->nr_inflight++;
	pd->unflushed_bytes += e->len;
	return 0;
}

/* Take @e out of the journal (it is still in flight: its I/O never went down). */
static void journal_remove_locked(struct pl_dev *pd, struct pl_entry *e)
{
	size_t i;

	for (i = 0; i < pd->nr; i++) {
		if (pd->v[i] != e)
			continue;
		memmove(&pd->v[i], &pd->v[i + 1], (pd->nr - i - 1) * sizeof(pd->v[0]));
		pd->nr--;
		break;
	}
	if (e->inflight) {
		e->inflight = false;
		pd->nr_inflight--;
	}
	pd->unflushed_bytes -= e->len;
	pd->saved_bytes -= e->saved_bytes;
	pthread_cond_broadcast(&pd->cv);
}

/*
 * A flush covering done_seq <= @upto completed: those entries are durable
 * and leave the journal, returned as a list through gone_next (*@out) for
 * the caller to free outside the lock.
 */
static void journal_prune_locked(struct pl_dev *pd, uint64_t upto, struct pl_entry **out)
{
	size_t i, j = 0;

	*out = NULL;
	for (i = 0; i < pd->nr; i++) {
		struct pl_entry *e = pd->v[i];

		if (!e->inflight && e->done_seq <= upto) {
			pd->unflushed_bytes -= e->len;
			pd->saved_bytes -= e->saved_bytes;
			e->gone_next = *out;
			*out = e;
		} else {
			pd->v[j++] = e;
		}
	}
	pd->nr = j;
}

/* ---- I/O ---- */

static void pl_write_end_io(struct blk_io *io, int res)
{
	struct pl_io *c = (struct pl_io *)io;
	struct pl_dev *pd = c->pd;
	struct blk_io *parent = c->parent;

	/*
	 * A write that failed below stays in the journal too: what it left
	 * may be anything, and its saved data puts it back if it is dropped.
	 */
	pthread_mutex_lock(&pd->lock);
	c->e->done_seq = ++pd->done_seq;
	c->e->inflight = false;
	pd->nr_inflight--;
	pthread_cond_broadcast(&pd->cv);
	pthread_mutex_unlock(&pd->lock);
	parent->done = res ? io->done : 0;
	be_pool_put(&pd->io_pool, c);
	/* Last: the cache may close the stack once this returns. */
	parent->end_io(parent, res);
}

static void pl_flush_end_io(struct blk_io *io, int res)
{
	struct pl_io *c = (struct pl_io *)io;
	struct pl_dev *pd = c->pd;
	struct blk_io *parent = c->parent;
	struct pl_entry *gone = NULL;

	pthread_mutex_lock(&pd->lock);
	if (c->gen != pd->gen)
		res = -EIO;	/* the power went while it was in flight */
	else if (!res)
		journal_prune_locked(pd, c->upto, &gone);
	pthread_mutex_unlock(&pd->lock);
	while (gone) {
		struct pl_entry *e = gone;

		gone = e->gone_next;
		entry_free(pd, e);
	}
	be_pool_put(&pd->io_pool, c);
	parent->end_io(parent, res);
}

/*
 * The disk is dark: the I/O is acknowledged and nothing happens. Called with
 * pd->lock held; drops it before the end_io.
 */
static int pl_dark_ack(struct pl_dev *pd, struct blk_io *io)
{
	if (io->op != BLK_FLUSH)
		pd->nr_dark_writes++;
	pthread_mutex_unlock(&pd->lock);
	io->end_io(io, 0);
	return 0;
}

static int pl_submit_write(struct pl_dev *pd, struct blk_io *io)
{
	struct pl_entry *e;
	struct pl_io *c;
	int ret;

	/* Taken before locking; from the pools, no malloc. */
	e = be_pool_get(&pd->entry_pool);
	c = be_pool_get(&pd->io_pool);
	if (!e || !c) {
		be_pool_put(&pd->entry_pool, e);
		be_pool_put(&pd->io_pool, c);
		return -ENOMEM;
	}
	e->pos = io->pos;
	e->len = io->len;

	pthread_mutex_lock(&pd->lock);
	/* The saved data must be what the writes before this one left. */
	while (pd->state == PL_RUNNING && overlaps_inflight_locked(pd, io->pos, io->len))
		pthread_cond_wait(&pd->cv, &pd->lock);
	if (pd->state != PL_RUNNING) {
		be_pool_put(&pd->entry_pool, e);
		be_pool_put(&pd->io_pool, c);
		return pl_dark_ack(pd, io);
	}
	ret = journal_add_locked(pd, e);
	pthread_mutex_unlock(&pd->lock);
	if (ret)
		goto out_free;

	ret = entry_save(pd, e);
	pthread_mutex_lock(&pd->lock);
	pd->saved_bytes += e->saved_bytes;
	pthread_mutex_unlock(&pd->lock);
	if (ret)
		goto out_remove;

	c->io = be_child_io(io, pl_write_end_io, c);
	c->parent = io;
	c->pd = pd;
	c->e = e;
	ret = blk_submit(pd->be.next, &c->io);
	if (!ret)
		return 0;	/* @c may be gone: the layer below may complete inline */
out_remove:
	pthread_mutex_lock(&pd->lock);
	journal_remove_locked(pd, e);
	pthread_mutex_unlock(&pd->lock);
out_free:
	entry_free(pd, e);
	be_pool_put(&pd->io_pool, c);
	return ret;
}

static int pl_submit_flush(struct pl_dev *pd, struct blk_io *io)
{
	struct pl_io *c = be_pool_get(&pd->io_pool);
	int ret;

	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&pd->lock);
	if (pd->state != PL_RUNNING) {
		be_pool_put(&pd->io_pool, c);
		return pl_dark_ack(pd, io);
	}
	/* It covers the writes completed so far, not those still in flight. */
	c->upto = pd->done_seq;
	c->gen = pd->gen;
	pthread_mutex_unlock(&pd->lock);
	c->io = (struct blk_io){
		.op = BLK_FLUSH,
		.end_io = pl_flush_end_io,
		.private = c,
	};
	c->parent = io;
	c->pd = pd;
	c->e = NULL;
	ret = blk_submit(pd->be.next, &c->io);
	if (ret)
		be_pool_put(&pd->io_pool, c);
	return ret;
}

static int pl_submit(struct blk_backend *be, struct blk_io *io)
{
	struct pl_dev *pd = (struct pl_dev *)be;

	switch (io->op) {
	case BLK_READ:
		/* In every state: dark reads see the post-crash state. */
		return blk_submit(be->next, io);
	case BLK_FLUSH:
		return pl_submit_flush(pd, io);
	default:
		return pl_submit_write(pd, io);
	}
}

/* ---- the power cut ---- */

/* Disjoint byte ranges [s, e), sorted: the physical blocks already settled. */
struct pl_ranges {
	uint64_t (*r)[2];
	size_t n, cap;
};

/* Index of the first range that ends after @pos. */
static size_t ranges_find(const struct pl_ranges *rs, uint64_t pos)
{
	size_t lo = 0, hi = rs->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (rs->r[mid][1] <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int ranges_add(struct pl_ranges *rs, uint64_t s, uint64_t e)
{
	size_t i = ranges_find(rs, s), j;

	/* Ranges touching [s, e) (ending at s counts) merge into it. */
	if (i > 0 && rs->r[i - 1][1] == s)
		i--;
	j = i;
	while (j < rs->n && rs->r[j][0] <= e) {
		if (rs->r[j][0] < s)
			s = rs->r[j][0];
		if (rs->r[j][1] > e)
			e = rs->r[j][1];
		j++;
	}
	if (j == i) {
		if (rs->n == rs->cap) {
			size_t cap = rs->cap ? 2 * rs->cap : 64;
			void *v = realloc(rs->r, cap * sizeof(rs->r[0]));

			if (!v)
				return -ENOMEM;
			rs->r = v;
			rs->cap = cap;
		}
		memmove(&rs->r[i + 1], &rs->r[i], (rs->n - i) * sizeof(rs->r[0]));
		rs->n++;
	} else if (j > i + 1) {
		memmove(&rs->r[i + 1], &rs->r[j], (rs->n - j) * sizeof(rs->r[0]));
		rs->n -= j - i - 1;
	}
	rs->r[i][0] = s;
	rs->r[i][1] = e;
	return 0;
}

/*
 * Write @e's saved contents of [s, t) (inside @e) back to the layer below;
 * adds the bytes to *@restored.
 */
static int restore_piece(struct pl_dev *pd, const struct pl_entry *e, uint64_t s, uint64_t t,
			 uint64_t *restored)
{
	uint64_t max = chunk_max(pd);
	int i, ret = 0, r;

	for (i = 0; i < e->nr_runs && s < t; i++) {
		const struct pl_run *run = &e->runs[i];
		uint64_t a = s > run->pos ? s : run->pos;
		uint64_t b = t < run->pos + run->len ? t : run->pos + run->len;

		if (a >= b)
			continue;
		if (!run->data) {
			r = pl_sync_io(pd->be.next, BLK_WRITE_ZEROES, a, b - a, NULL);
			if (r && !ret)
				ret = r;
		} else {
			uint64_t p;

			for (p = a; p < b; p += max) {
				uint64_t n = b - p < max ? b - p : max;

				r = pl_sync_io(pd->be.next, BLK_WRITE, p, n,
					       run->data + (p - run->pos));
				if (r && !ret)
					ret = r;
			}
		}
		*restored += b - a;
	}
	return ret;
}

/* Restore [s, t) of @e except where @settled says a newer write stays. */
static int restore_unsettled(struct pl_dev *pd, const struct pl_entry *e,
			     const struct pl_ranges *settled, uint64_t s, uint64_t t,
			     uint64_t *restored)
{
	size_t i = ranges_find(settled, s);
	int ret = 0, r;

	while (s < t) {
		uint64_t stop = t;

		if (i < settled->n && settled->r[i][0] <= s) {
			/* inside a settled range: skip to its end */
			s = settled->r[i][1];
			i++;
			continue;
		}
		if (i < settled->n && settled->r[i][0] < t)
			stop = settled->r[i][0];
		r = restore_piece(pd, e, s, stop, restored);
		if (r && !ret)
			ret = r;
		s = stop;
	}
	return ret;
}

/* What a cut made of one entry: the end of the prefix that stays. */
enum pl_fate { PL_KEEP, PL_DROP, PL_TEAR };

static uint64_t decide(struct pl_dev *pd, const struct pl_entry *e, uint64_t *rng,
		       enum pl_fate *fate)
{
	uint64_t pbs = pd->geo.pbs;
	uint64_t first = e->pos / pbs * pbs;
	uint64_t last = (e->pos + e->len + pbs - 1) / pbs * pbs;
	uint64_t units = (last - first) / pbs;
	uint64_t r = pl_rand(rng);

	if (units < 2) {
		*fate = r % 2 ? PL_DROP : PL_KEEP;
	} else {
		*fate = (enum pl_fate)(r % 3);
	}
	switch (*fate) {
	case PL_KEEP:
		return e->pos + e->len;
	case PL_DROP:
		return e->pos;
	case PL_TEAR:
		/* keep k of the units, 1 <= k <= units - 1: a cut strictly inside */
		return first + (1 + pl_rand(rng) % (units - 1)) * pbs;
	}
	return e->pos;
}

/*
 * Decide every entry of @v (oldest first) from @seed, then undo newest
 * first; @counts gets the fates, *@restored the bytes put back.
 * Returns 0 or the first error of the layer below.
 */
static int pl_crash(struct pl_dev *pd, struct pl_entry **v, size_t n, uint64_t seed,
		    uint64_t counts[3], uint64_t *restored)
{
	struct pl_ranges settled = { 0 };
	uint64_t *keep_end, rng = seed, pbs = pd->geo.pbs;
	size_t i;
	int ret = 0, r;

	keep_end = malloc((n ? n : 1) * sizeof(*keep_end));
	if (!keep_end)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		enum pl_fate fate;

		keep_end[i] = decide(pd, v[i], &rng, &fate);
		counts[fate]++;
	}
	for (i = n; i-- > 0;) {
		const struct pl_entry *e = v[i];
		uint64_t end = e->pos + e->len;

		if (keep_end[i] < end) {
			r = restore_unsettled(pd, e, &settled, keep_end[i], end, restored);
			if (r && !ret)
				ret = r;
		}
		if (keep_end[i] > e->pos) {
			/* the disk wrote these physical blocks whole */
			r = ranges_add(&settled, e->pos / pbs * pbs,
				       (keep_end[i] + pbs - 1) / pbs * pbs);
			if (r && !ret)
				ret = r;
		}
	}
	free(settled.r);
	free(keep_end);
	return ret;
}

static int entry_done_cmp(const void *a, const void *b)
{
	const struct pl_entry *x = *(struct pl_entry *const *)a, *y = *(struct pl_entry *const *)b;

	return x->done_seq < y->done_seq ? -1 : x->done_seq > y->done_seq;
}

static void drop_volatile(struct pl_dev *pd)
{
	if (pd->host && pd->host->drop_volatile)
		pd->host->drop_volatile(pd->host->ctx);
}

static int pl_trigger(struct pl_dev *pd)
{
	struct pl_entry **v;
	uint64_t seed, unflushed, restored = 0, counts[3] = { 0, 0, 0 };
	size_t n, i;
	int ret;

	pthread_mutex_lock(&pd->lock);
	if (pd->state != PL_RUNNING) {
		pthread_mutex_unlock(&pd->lock);
		return -EALREADY;
	}
	if (pd->resetting) {
		pthread_mutex_unlock(&pd->lock);
		return -EBUSY;
	}
	/* The instant of the cut: from here on writes go nowhere. */
	pd->state = PL_CUTTING;
	pd->gen++;
	if (pd->seed_auto)
		seed = blk_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL);
	else
		seed = pd->seed;
	pthread_cond_broadcast(&pd->cv);
	pthread_mutex_unlock(&pd->lock);
	/* a trace of the device says where in its I/O the power went */
	bt_msg(pd->bt, "powerloss: cut, seed %llu", (unsigned long long)seed);

	/* Volatile memory above the device dies first, as in a real cut. */
	drop_volatile(pd);

	pthread_mutex_lock(&pd->lock);
	/* Writes taken before the cut finish below; their fate is decided too. */
	while (pd->nr_inflight)
		pthread_cond_wait(&pd->cv, &pd->lock);
	v = pd->v;
	n = pd->nr;
	unflushed = pd->unflushed_bytes;
	pd->v = NULL;
	pd->nr = pd->cap = 0;
	pd->unflushed_bytes = 0;
	pd->saved_bytes = 0;
	pthread_mutex_unlock(&pd->lock);

	/*
	 * Decide and undo in completion order, the order the disk got them
	 * (backends/lib/crashmodel.h), not the journal's submission order: two
	 * writes to one physical block that do not overlap byte for byte may
	 * be in flight together and complete the other way round, and the
	 * block must never keep the later without the earlier.
	 */
	if (n > 1)
		qsort(v, n, sizeof(*v), entry_done_cmp);
	ret = pl_crash(pd, v, n, seed, counts, &restored);
	/* The post-crash state is what the disk holds: make it durable below. */
	if (n) {
		int r = pl_sync_io(pd->be.next, BLK_FLUSH, 0, 0, NULL);

		if (r && !ret)
			ret = r;
	}
	for (i = 0; i < n; i++)
		entry_free(pd, v[i]);
	free(v);

	pthread_mutex_lock(&pd->lock);
	pd->state = PL_DARK;
	pd->have_last = true;
	pd->last_seed = seed;
	pd->nr_cuts++;
	pd->nr_kept += counts[PL_KEEP];
	pd->nr_dropped += counts[PL_DROP];
	pd->nr_torn += counts[PL_TEAR];
	pd->restored_bytes += restored;
	if (ret)
		pd->nr_restore_errors++;
	pthread_cond_broadcast(&pd->cv);
	pthread_mutex_unlock(&pd->lock);

	blk_logl(ret ? BLK_LOG_ERR : BLK_LOG_INFO,
		"powerloss: %s: power cut, seed %llu: %zu unflushed writes (%llu bytes): "
		"%llu kept, %llu dropped, %llu torn%s%s",
		pd->dev, (unsigned long long)seed, n, (unsigned long long)unflushed,
		(unsigned long long)counts[PL_KEEP], (unsigned long long)counts[PL_DROP],
		(unsigned long long)counts[PL_TEAR], ret ? "; restoring failed: " : "",
		ret ? strerror(-ret) : "");
	bt_msg(pd->bt, "powerloss: %zu unflushed writes: %llu kept, %llu dropped, %llu torn%s", n,
	       (unsigned long long)counts[PL_KEEP], (unsigned long long)counts[PL_DROP],
	       (unsigned long long)counts[PL_TEAR], ret ? ", restoring failed" : "");
	/*
	 * Again at the end: whatever the cache read while the blocks were
	 * being put back may be neither state.
	 */
	drop_volatile(pd);
	return ret ? -EIO : 0;
}

static int pl_restart(struct pl_dev *pd)
{
	pthread_mutex_lock(&pd->lock);
	if (pd->state == PL_RUNNING) {
		pthread_mutex_unlock(&pd->lock);
		return -EALREADY;
	}
	if (pd->state == PL_CUTTING) {
		pthread_mutex_unlock(&pd->lock);
		return -EBUSY;
	}
	pthread_mutex_unlock(&pd->lock);
	/*
	 * While still dark: the cache took writes in the dark period and may
	 * hold them dirty; they must not reach the disk after the restart.
	 */
	drop_volatile(pd);
	pthread_mutex_lock(&pd->lock);
	pd->state = PL_RUNNING;
	pthread_cond_broadcast(&pd->cv);
	pthread_mutex_unlock(&pd->lock);
	blk_info("powerloss: %s: restarted", pd->dev);
	bt_msg(pd->bt, "powerloss: restarted");
	return 0;
}

/* ---- snapshots: the layer below keeps them; a reset ends the journal ---- */

/*
 * The device returns to a snapshot: the contents the journal saved, and
 * the writes it covers, are gone, so a later cut must not put them back.
 * The caller quiesced the device (blk_snap_reset()): no write or flush is
 * in flight here, which is asserted. Refused in the middle of a cut. The
 * state (running or dark) stays: a reset does not bring the power back.
 */
static int pl_snap_reset(struct blk_backend *be, const char *name)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	struct pl_entry **v;
	size_t n, i;
	int ret;

	pthread_mutex_lock(&pd->lock);
	assert(!pd->nr_inflight && "powerloss: reset with writes in flight: the device was not quiesced");
	if (pd->state == PL_CUTTING || pd->resetting) {
		pthread_mutex_unlock(&pd->lock);
		return -EBUSY;
	}
	/* No cut may start until the journal is gone (pl_trigger() refuses). */
	pd->resetting = true;
	pthread_mutex_unlock(&pd->lock);

	ret = blk_snap_reset(be->next, name);

	pthread_mutex_lock(&pd->lock);
	pd->resetting = false;
	if (ret) {
		pthread_mutex_unlock(&pd->lock);
		return ret;
	}
	v = pd->v;
	n = pd->nr;
	pd->v = NULL;
	pd->nr = pd->cap = 0;
	pd->unflushed_bytes = 0;
	pd->saved_bytes = 0;
	/* A flush from before covers nothing of the new contents either. */
	pd->gen++;
	pd->nr_resets++;
	pthread_mutex_unlock(&pd->lock);
	for (i = 0; i < n; i++)
		entry_free(pd, v[i]);
	free(v);
	return 0;
}

static const struct blk_snap_ops pl_snap_ops = {
	.create = be_filter_snap_create,
	.destroy = be_filter_snap_destroy,
	.reset = pl_snap_reset,
	.list = be_filter_snap_list,
	.save = be_filter_snap_save,
};

/* ---- open, close, geometry, stat ---- */

/* "auto" (from the clock at each cut) or a decimal seed. */
static int parse_seed(const char *s, bool *is_auto, uint64_t *seed)
{
	char *end;
	unsigned long long v;

	if (!strcasecmp(s, "auto") || !strcasecmp(s, "time") || !strcasecmp(s, "random")) {
		*is_auto = true;
		*seed = 0;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*is_auto = false;
	*seed = v;
	return 0;
}

/*
 * The device's size changes (blk_resize()). Refused during a cut or a reset,
 * and for a shrink while the journal holds writes no flush has covered (a
 * later cut would undo them past the new end); the daemon writes back and
 * flushes before it resizes, which empties the journal.
 */
static int pl_resize(struct blk_backend *be, uint64_t *size)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	int ret;

	pthread_mutex_lock(&pd->lock);
	if (pd->state != PL_RUNNING || pd->resetting ||
	    (*size && *size < pd->geo.size && pd->nr)) {
		pthread_mutex_unlock(&pd->lock);
		return -EBUSY;
	}
	pd->resetting = true;	/* no cut starts meanwhile (pl_trigger() refuses) */
	pthread_mutex_unlock(&pd->lock);

	ret = blk_resize(be->next, size);

	pthread_mutex_lock(&pd->lock);
	pd->resetting = false;
	if (!ret)
		pd->geo.size = *size;
	pthread_mutex_unlock(&pd->lock);
	return ret;
}

static struct blk_backend *pl_open(struct blk_params *p, struct blk_backend *next)
{
	struct pl_dev *pd;
	const char *s;
	bool seed_auto = true;
	uint64_t seed = 0;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the powerloss filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	s = blk_param_get(p, "seed");
	if (s && parse_seed(s, &seed_auto, &seed))
		return ERR_PTR(blk_param_error(p, "seed",
			"'%s' is not a seed (allowed: a number, or auto for one from the clock at each cut)",
			s));
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		blk_param_error(p, NULL, "cannot set up the powerloss filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	next->ops->geometry(next, &pd->geo);
	if (!pd->geo.pbs || !blk_is_pow2(pd->geo.pbs)) {
		free(pd);
		return ERR_PTR(blk_param_error(p, NULL,
			"the powerloss filter needs a power-of-two physical block size below it"));
	}
	pd->dev = p->dev ? p->dev : "?";
	pd->bt = p->dev ? bt_dev_get(p->dev) : NULL;
	pd->host = p->host;
	pd->seed_auto = seed_auto;
	pd->seed = seed;
	pd->state = PL_RUNNING;
	ret = -pthread_mutex_init(&pd->lock, NULL);
	if (ret)
		goto out_free;
	ret = -pthread_cond_init(&pd->cv, NULL);
	if (ret)
		goto out_destroy_lock;
	ret = be_pool_init(&pd->entry_pool, PL_POOL, sizeof(struct pl_entry), 64);
	if (ret)
		goto out_destroy_cv;
	ret = be_pool_init(&pd->io_pool, PL_POOL, sizeof(struct pl_io), 64);
	if (ret)
		goto out_destroy_entries;
	pd->be.ops = &powerloss_filter_ops;
	pd->be.next = next;
	return &pd->be;

out_destroy_entries:
	be_pool_destroy(&pd->entry_pool);
out_destroy_cv:
	pthread_cond_destroy(&pd->cv);
out_destroy_lock:
	pthread_mutex_destroy(&pd->lock);
out_free:
	free(pd);
	blk_param_error(p, NULL, "cannot set up the powerloss filter: %s", strerror(-ret));
	return ERR_PTR(ret);
}

/* The cache has nothing in flight at close; a cut cannot be running either. */
static void pl_close(struct blk_backend *be)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	size_t i;

	pthread_mutex_lock(&pd->lock);
	while (pd->nr_inflight || pd->state == PL_CUTTING)
		pthread_cond_wait(&pd->cv, &pd->lock);
	pthread_mutex_unlock(&pd->lock);
	for (i = 0; i < pd->nr; i++)
		entry_free(pd, pd->v[i]);
	free(pd->v);
	be_pool_destroy(&pd->io_pool);
	be_pool_destroy(&pd->entry_pool);
	pthread_cond_destroy(&pd->cv);
	pthread_mutex_destroy(&pd->lock);
	free(pd);
}

static size_t pl_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	size_t n;

	pthread_mutex_lock(&pd->lock);
	n = be_stat_printf(buf, len,
			   "powerloss_unflushed_bytes %llu\npowerloss_unflushed_writes %zu\n"
			   "powerloss_saved_bytes %llu\npowerloss_cuts %llu\n"
			   "powerloss_kept_writes %llu\npowerloss_dropped_writes %llu\n"
			   "powerloss_torn_writes %llu\npowerloss_restored_bytes %llu\n"
			   "powerloss_dark_writes %llu\npowerloss_restore_errors %llu\n"
			   "powerloss_resets %llu\n",
			   (unsigned long long)pd->unflushed_bytes, pd->nr,
			   (unsigned long long)pd->saved_bytes, (unsigned long long)pd->nr_cuts,
			   (unsigned long long)pd->nr_kept, (unsigned long long)pd->nr_dropped,
			   (unsigned long long)pd->nr_torn, (unsigned long long)pd->restored_bytes,
			   (unsigned long long)pd->nr_dark_writes,
			   (unsigned long long)pd->nr_restore_errors,
			   (unsigned long long)pd->nr_resets);
	pthread_mutex_unlock(&pd->lock);
	n += be_pool_stat(&pd->entry_pool, "powerloss_entry", buf + n, len - n);
	return n + be_pool_stat(&pd->io_pool, "powerloss_io", buf + n, len - n);
}

/* ---- live attributes: .sys/DEV/powerloss/ ---- */

static int attr_u64(char *buf, size_t len, uint64_t v)
{
	char s[24];

	snprintf(s, sizeof(s), "%llu", (unsigned long long)v);
	return be_attr_out(buf, len, s);
}

/* Writing `1` is the only action; anything else is EINVAL. */
static int action_store(const char *buf, size_t len)
{
	char s[4];

	if (be_attr_text(buf, len, s, sizeof(s)) || strcmp(s, "1"))
		return -EINVAL;
	return 0;
}

static int pl_action_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "0");
}

static int pl_trigger_store(struct blk_backend *be, const char *buf, size_t len)
{
	int ret = action_store(buf, len);

	return ret ? ret : pl_trigger((struct pl_dev *)be);
}

static int pl_restart_store(struct blk_backend *be, const char *buf, size_t len)
{
	int ret = action_store(buf, len);

	return ret ? ret : pl_restart((struct pl_dev *)be);
}

static int pl_state_show(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	enum pl_state st;

	pthread_mutex_lock(&pd->lock);
	st = pd->state;
	pthread_mutex_unlock(&pd->lock);
	return be_attr_out(buf, len, st == PL_RUNNING ? "running" : "dark");
}

static int pl_seed_show(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	bool is_auto;
	uint64_t seed;

	pthread_mutex_lock(&pd->lock);
	is_auto = pd->seed_auto;
	seed = pd->seed;
	pthread_mutex_unlock(&pd->lock);
	return is_auto ? be_attr_out(buf, len, "auto") : attr_u64(buf, len, seed);
}

static int pl_seed_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	char s[32];
	bool is_auto;
	uint64_t seed;

	if (be_attr_text(buf, len, s, sizeof(s)) || parse_seed(s, &is_auto, &seed))
		return -EINVAL;
	pthread_mutex_lock(&pd->lock);
	pd->seed_auto = is_auto;
	pd->seed = seed;
	pthread_mutex_unlock(&pd->lock);
	return 0;
}

static int pl_last_seed_show(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	bool have;
	uint64_t seed;

	pthread_mutex_lock(&pd->lock);
	have = pd->have_last;
	seed = pd->last_seed;
	pthread_mutex_unlock(&pd->lock);
	return have ? attr_u64(buf, len, seed) : be_attr_out(buf, len, "none");
}

static int pl_unflushed_show(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	uint64_t v;

	pthread_mutex_lock(&pd->lock);
	v = pd->unflushed_bytes;
	pthread_mutex_unlock(&pd->lock);
	return attr_u64(buf, len, v);
}

static const struct blk_attr pl_attrs[] = {
	{ .name = "trigger", .show = pl_action_show, .store = pl_trigger_store },
	{ .name = "restart", .show = pl_action_show, .store = pl_restart_store },
	{ .name = "state", .show = pl_state_show },
	{ .name = "seed", .show = pl_seed_show, .store = pl_seed_store },
	{ .name = "last_seed", .show = pl_last_seed_show },
	{ .name = "unflushed_bytes", .show = pl_unflushed_show },
	{ .name = NULL },
};

static const char *const pl_keys[] = { "seed", NULL };

const struct blk_backend_ops powerloss_filter_ops = {
	.name = "powerloss",
	.is_filter = true,
	.keys = pl_keys,
	.help = "powerloss: simulated power cuts (echo 1 > .sys/DEV/powerloss/trigger, then restart); "
		"powerloss.seed = N|auto",
	.open = pl_open,
	.close = pl_close,
	.geometry = be_filter_geometry,
	.resize = pl_resize,
	.submit = pl_submit,
	.stat = pl_stat,
	.attrs = pl_attrs,
	.snap = &pl_snap_ops,
};
