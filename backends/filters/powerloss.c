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
 * (an all-zero piece is kept as "zeros", so a discard of an empty device
 * costs nothing). The entry is dropped when a FLUSH completes that was
 * submitted after the write completed: its data is durable. Memory is thus
 * the unflushed data, as a real disk's volatile cache would hold. Writes
 * that overlap one not yet completed wait for it, so each entry's saved
 * data is exactly the contents left by the writes before it.
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
 * in `last_seed`; `seed` sets the next one (default: from the clock). The
 * stream is kit/seed.h's be_rand() (splitmix64) from the seed, one draw per
 * entry and one more for a tear: a seed recorded by an older blkfs
 * replays the same cut.
 *
 * States: running -> (trigger) cutting -> dark -> (restart) running.
 * Cutting: new writes are already dropped; the filter waits for writes in
 * flight, then restores. Reads pass through in every state; blocks the
 * cache read meanwhile are dropped by the drop_volatile that ends the cut.
 *
 * The knobs are one list (POWERLOSS_KNOBS, backends/kit/knobs.h): the key
 * seed (a number, or auto, the default, for one from the clock at each cut;
 * its file shows "auto" or the number), the actions trigger and restart
 * (write 1), and to read: state (running or dark), last_seed (the seed of
 * the last cut, or none) and unflushed_bytes.
 *
 * Snapshots are the layer below's (the calls pass through), but a reset to
 * one ends the journal: the contents it saved, and the writes it covers,
 * belong to a device state that is gone.
 *
 * A write's path. submit() never sleeps: it takes the write's state from
 * the io pool, an entry and page-aligned save buffers from the stocks
 * (backends/lib/pool.h's reserves, which the worker fills ahead), and passes down the read of the old
 * contents; whoever comes second of that submit and the read's end_io goes
 * on (a read that completes inside submit(), as ram's does, leaves the
 * write to the submitting thread, which keeps BLK_IO_WAITED). A write
 * overlapping an earlier one not yet completed waits on that one's waiters
 * list, not in the submitting thread; the earlier one's end_io starts it.
 * The writes go down in the order they were submitted, each once its old
 * contents are saved, so the layer below sees them as the cache sent them
 * (as when the save was synchronous). One thread at a time does that and
 * the starts an end_io released: the runner (flat combining; a chain of
 * overlapping writes does not recurse). A DISCARD/WRITE_ZEROES longer than
 * one read (its old contents are read piece by piece, waited for) goes to
 * the device's worker thread. Every path ends the cache's I/O last, and
 * close() waits for the runner: the cache may close the stack once its
 * last end_io has returned. Backends and filters all take a submit from an
 * end_io (aio, nbd and rbd say so), which the chaining needs.
 *
 * Save memory. A write of n bytes saves its old contents in buffers of
 * PL_PAGE << c bytes, one per set bit of n in pages (and a page for a tail
 * under a page), so nothing is rounded up; an all-zero buffer goes back at
 * once. Each class (struct be_pool_classes) keeps at most PL_STOCK_BYTES
 * free (one buffer at least; the page class and the entries are filled at
 * open); the worker fills a class used below half of that (the pools'
 * low-water hook wakes it), a buffer coming back past it is freed outside
 * the lock.
 * The journal's saved data is the unflushed data and not bounded (a disk
 * never written back would hold it all): with flushes the buffers go round
 * and submit() allocates nothing; writes without flushes faster than the
 * worker fills are served from the allocator anyway and counted
 * (powerloss_save_pool_misses), as struct be_pool does, with no lock
 * held. Nothing is allocated under pd->lock: a write over 1 MiB (max_io
 * above it) gets its runs array before it (powerloss_locked_allocs would
 * count one that did not, and stays 0).
 *
 * Lock: pd->lock covers the state, the journal, the lists of writes
 * (active, ready, the worker's queue, each one's waiters) and the
 * counters; it is never held across a submit, an end_io or a host
 * callback, nor across an allocation. The stocks' pools take their own
 * leaf locks inside it (pd->lock -> pool->lock). No thread waits on pd->cv but trigger and close, for writes in
 * flight to finish; the worker waits on pd->wcv for work. No wait here is
 * timed.
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
#include "../kit/knobs.h"
#include "../lib/pool.h"
#include "../kit/ranges.h"
#include "../lib/trace.h"

#define PL_PAGE		4096		/* save buffers: page-aligned, fine for O_DIRECT below */
#define PL_CLASSES	BE_POOL_CLASSES	/* buffer classes: PL_PAGE << c; max_io < 4 GiB */
#define PL_PIECES	(PL_CLASSES + 1)	/* one per class, and a tail under a page */
#define PL_RUNS_INLINE	9		/* runs in the entry: every write up to 1 MiB;
					 * a longer one's are allocated before pd->lock */
#define PL_STOCK_BYTES	(1u << 20)	/* free save memory kept per class */
#define PL_ENTRIES	256		/* free entries kept */
#define PL_POOL		256		/* struct pl_io filled at open: writes and flushes in flight */

enum pl_state { PL_RUNNING, PL_CUTTING, PL_DARK };

/* A piece of an entry's saved contents: [pos, pos + len), data or zeros. */
struct pl_run {
	uint64_t pos;
	uint64_t len;
	char *data;			/* owned; NULL: the range was all zeros */
	int cls;			/* data's class in pd->bufs; -1: sized to len, freed */
};

/* One journal entry: a WRITE, DISCARD or WRITE_ZEROES not yet flushed. */
struct pl_entry {
	struct list_head node;		/* lock: on pd->journal (oldest first) or a local list */
	uint64_t pos;
	uint64_t len;
	uint64_t done_seq;		/* lock: completion order; 0 while in flight */
	bool inflight;			/* lock: taken, not yet completed below */
	struct pl_run *runs;		/* sorted, tiling [pos, pos + len); runs_inline or malloc'ed */
	int nr_runs, cap_runs;
	uint64_t saved_bytes;		/* bytes of data held by runs */
	struct pl_run runs_inline[PL_RUNS_INLINE];
};

struct pl_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages */
	struct bt_dev *bt;		/* trace state (message notes); NULL: none */
	const struct blk_host *host;	/* may be NULL (tests, tools) */
	struct blk_geometry geo;	/* the layer below's; set at open */

	struct be_pool io_pool;		/* struct pl_io: bounded by what is in flight */
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* an entry completed, or the state changed */
	pthread_cond_t wcv;		/* to the worker: work queued, a refill, stop */
	pthread_t worker;
	enum pl_state state;		/* lock */
	bool resetting;			/* lock: a reset to a snapshot is under way */
	uint64_t gen;			/* lock: bumped at each cut; a flush from before fails */
	uint64_t done_seq;		/* lock: last completion number given */
	struct list_head journal;	/* lock: struct pl_entry, oldest first */
	size_t nr;			/* lock: entries on it */
	size_t nr_inflight;		/* lock: entries with inflight set */
	uint64_t unflushed_bytes;	/* lock: sum of entry lengths */
	uint64_t saved_bytes;		/* lock: sum of entries' saved_bytes */
	bool seed_auto;			/* lock: next seed from the clock */
	uint64_t seed;			/* lock: the next seed when !seed_auto */
	bool have_last;			/* lock */
	uint64_t last_seed;		/* lock */

	/* Writes taken and not yet ended (struct pl_io), lock. */
	struct list_head active;	/* submission order: blocked, queued or in flight */
	struct list_head pending;	/* submission order: not yet passed down */
	struct list_head ready;		/* unblocked, for the runner */
	struct list_head workq;		/* for the worker */
	bool running;			/* lock: a thread runs pd->ready */
	bool refill;			/* lock: the worker has stocks to fill */
	bool stop;			/* lock: the worker exits */
	struct be_pool_classes bufs;	/* save buffers: a class up to the largest read */
	struct be_pool epool;		/* struct pl_entry */

	/* Counters (lock). */
	uint64_t nr_cuts, nr_kept, nr_dropped, nr_torn;
	uint64_t nr_dark_writes, restored_bytes, nr_restore_errors;
	uint64_t nr_resets;		/* the device was reset to a snapshot */
	uint64_t nr_blocked;		/* writes that waited for an overlapping one */
	uint64_t nr_worker;		/* writes the worker started */
	uint64_t nr_locked_allocs;	/* allocations under pd->lock: 0 (a check, in stat) */
	uint64_t nr_misses;		/* writes the stocks could not serve */
};

/* A write or flush the filter passes down as its own child. */
struct pl_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io rio;		/* WRITE/...: the read of the old contents */
	struct blk_io *parent;
	struct pl_dev *pd;
	struct pl_entry *e;		/* WRITE/...: lock until journaled */
	uint64_t gen;			/* the generation it was submitted in */
	uint64_t upto;			/* FLUSH: the entries it covers (done_seq <= upto) */
	struct list_head anode;		/* lock: on pd->active */
	struct list_head pnode;		/* lock: on pd->pending until it goes down */
	bool save_ready;		/* lock: its old contents are saved */
	struct list_head waiters;	/* lock: writes waiting for this one to end */
	struct list_head wnode;		/* lock: on a blocker's waiters, pd->ready or pd->workq */
	int stage;			/* atomic: the read's submitter and its end_io meet */
	int read_res;			/* the read's result, before stage */
	bool have_bufs;			/* iov[] holds the save buffers */
	int npieces;
	struct iovec iov[PL_PIECES];	/* the save buffers, largest first */
	int cls[PL_PIECES];
};

/* Where a write is started from: what it may do there. */
enum pl_ctx {
	PL_IN_SUBMIT,			/* the cache's submit(): no wait, no allocation */
	PL_IN_RUNNER,			/* an end_io's runner: the same */
	PL_IN_WORKER,			/* the worker: may allocate and wait for reads */
};

static bool is_zero(const char *p, size_t n)
{
	return !n || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static uint64_t chunk_max(const struct pl_dev *pd)
{
	return pd->geo.max_io ? pd->geo.max_io : (1u << 20);
}

/* ---- stocks (pd->bufs, pd->epool; taken and given back under pd->lock) ---- */

static void kick_refill_locked(struct pl_dev *pd)
{
	if (!pd->refill) {
		pd->refill = true;
		pthread_cond_signal(&pd->wcv);
	}
}

/*
 * The pools' low-water hook: be_pool_take() runs it in its caller's
 * thread, and every take here is under pd->lock.
 */
static void pl_pool_low(void *arg)
{
	kick_refill_locked(arg);
}

/* Fill every wanted stock to its target (the worker, no lock held). */
static void stocks_refill(struct pl_dev *pd)
{
	be_pool_refill(&pd->epool);
	be_pool_classes_refill(&pd->bufs);
}

/* Give @e's memory back: its buffers and itself to the stocks, the rest onto *@spill. */
static void entry_put_locked(struct pl_dev *pd, struct pl_entry *e, void **spill)
{
	int i;

	for (i = 0; i < e->nr_runs; i++) {
		struct pl_run *r = &e->runs[i];

		if (!r->data)
			continue;
		if (r->cls >= 0) {
			be_pool_put_spill(&pd->bufs.cls[r->cls], r->data, spill);
		} else {
			*(void **)r->data = *spill;
			*spill = r->data;
		}
	}
	if (e->runs != e->runs_inline) {
		*(void **)e->runs = *spill;
		*spill = e->runs;
	}
	be_pool_put_spill(&pd->epool, e, spill);
}

/* Free a list of entries (off the journal). */
static void entries_free(struct pl_dev *pd, struct list_head *list)
{
	void *spill = NULL;

	if (list_empty(list))
		return;
	pthread_mutex_lock(&pd->lock);
	while (!list_empty(list)) {
		struct pl_entry *e = list_first_entry(list, struct pl_entry, node);

		list_del_init(&e->node);
		entry_put_locked(pd, e, &spill);
	}
	pthread_mutex_unlock(&pd->lock);
	be_pool_spill_free(spill);
}

/* @w's save buffers back to the stocks (not yet in runs). */
static void bufs_put_locked(struct pl_dev *pd, struct pl_io *w, void **spill)
{
	int i;

	if (!w->have_bufs)
		return;
	for (i = 0; i < w->npieces; i++)
		be_pool_put_spill(&pd->bufs.cls[w->cls[i]], w->iov[i].iov_base, spill);
	w->have_bufs = false;
}

/* What a write took and did not journal: its entry and buffers go back. */
static void res_put_locked(struct pl_dev *pd, struct pl_io *w, void **spill)
{
	bufs_put_locked(pd, w, spill);
	if (w->e) {
		w->e->nr_runs = 0;
		w->e->runs = w->e->runs_inline;
		be_pool_put_spill(&pd->epool, w->e, spill);
		w->e = NULL;
	}
}

/*
 * Split a write of @len bytes into save buffers: one of PL_PAGE << c bytes
 * for each bit c of its length in pages, largest first, and one page for a
 * tail shorter than a page. Nothing is rounded up.
 */
static void pieces_init(struct pl_dev *pd, struct pl_io *w, uint64_t len)
{
	uint64_t pages = len / PL_PAGE, tail = len % PL_PAGE;
	int c, n = 0;

	for (c = PL_CLASSES - 1; c >= 0; c--) {
		if (pages & (1ull << c))
			w->iov[n++].iov_len = (size_t)PL_PAGE << c;
	}
	if (tail)
		w->iov[n++].iov_len = (size_t)tail;
	w->npieces = n;
	for (c = 0; c < n; c++) {
		/* a class for each size up to max_io (stocks_init()) */
		w->cls[c] = be_pool_class(&pd->bufs, w->iov[c].iov_len);
		assert(w->cls[c] >= 0);
	}
}

/*
 * @w's save buffers from the stocks: all of them, or none and false. Each
 * class is asked even after one came up empty, so that every class this
 * write needs is wanted and refilled (the pools' hook kicks the worker).
 * Never allocates; what goes back past a target lands on *@spill.
 */
static bool bufs_take_locked(struct pl_dev *pd, struct pl_io *w, void **spill)
{
	bool ok = true;
	int i;

	for (i = 0; i < w->npieces; i++) {
		w->iov[i].iov_base = be_pool_take(&pd->bufs.cls[w->cls[i]]);
		if (!w->iov[i].iov_base)
			ok = false;
	}
	if (ok) {
		w->have_bufs = true;
		return true;
	}
	for (i = 0; i < w->npieces; i++) {
		be_pool_put_spill(&pd->bufs.cls[w->cls[i]], w->iov[i].iov_base, spill);
		w->iov[i].iov_base = NULL;
	}
	return false;
}

/* ---- synchronous I/O to the layer below (long saves, restores) ---- */

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

/* One I/O to @be, waited for: 0 or -errno. Only the worker and the cut wait so. */
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

/*
 * Append a run to @e; a zero run merges into a zero run before it. Past
 * the runs in the entry (a long discard's save) the array grows: only
 * where allocating is allowed. @locked: the caller holds pd->lock, where
 * nothing is allocated (save_done() sizes the array before it takes the
 * lock); a growth there anyway is counted in nr_locked_allocs, which the
 * unit test of a write over 1 MiB checks is 0.
 */
static int entry_add_run(struct pl_dev *pd, struct pl_entry *e, uint64_t pos, uint64_t len,
			 char *data, int cls, bool locked)
{
	if (!data && e->nr_runs && !e->runs[e->nr_runs - 1].data) {
		e->runs[e->nr_runs - 1].len += len;
		return 0;
	}
	if (e->nr_runs == e->cap_runs) {
		int cap = 2 * e->cap_runs;

		/* start_write() gives every entry its inline runs: never empty. */
		assert(cap > 0);
		struct pl_run *r = malloc((size_t)cap * sizeof(*r));

		if (locked)
			pd->nr_locked_allocs++;
		if (!r)
			return -ENOMEM;
		memcpy(r, e->runs, (size_t)e->nr_runs * sizeof(*r));
		if (e->runs != e->runs_inline)
			free(e->runs);
		e->runs = r;
		e->cap_runs = cap;
	}
	e->runs[e->nr_runs++] = (struct pl_run){ .pos = pos, .len = len, .data = data, .cls = cls };
	if (data)
		e->saved_bytes += len;
	return 0;
}

/*
 * The worker's save of a DISCARD/WRITE_ZEROES longer than one read: what
 * [e->pos, e->pos + e->len) holds now, in chunks of at most max_io, into
 * @e's runs; a chunk of zeros costs no memory.
 */
static int entry_save_long(struct pl_dev *pd, struct pl_entry *e)
{
	uint64_t max = chunk_max(pd), off = 0;
	char *buf = NULL;
	int ret = 0;

	while (off < e->len) {
		uint64_t n = e->len - off < max ? e->len - off : max;

		if (!buf && posix_memalign((void **)&buf, PL_PAGE, (size_t)max)) {
			buf = NULL;
			ret = -ENOMEM;
			break;
		}
		ret = pl_sync_io(pd->be.next, BLK_READ, e->pos + off, n, buf);
		if (ret)
			break;
		if (is_zero(buf, (size_t)n)) {
			ret = entry_add_run(pd, e, e->pos + off, n, NULL, -1, false);
		} else {
			char *keep = buf;

			/* A short last chunk need not hold on to a whole buffer. */
			if (n < max / 2) {
				if (posix_memalign((void **)&keep, PL_PAGE, (size_t)n)) {
					ret = -ENOMEM;
					break;
				}
				memcpy(keep, buf, (size_t)n);
			} else {
				buf = NULL;	/* the run owns it now */
			}
			ret = entry_add_run(pd, e, e->pos + off, n, keep, -1, false);
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

static void journal_add_locked(struct pl_dev *pd, struct pl_entry *e)
{
	list_add_tail(&e->node, &pd->journal);
	pd->nr++;
	e->inflight = true;
	pd->nr_inflight++;
	pd->unflushed_bytes += e->len;
}

/* Take @e out of the journal (it is still in flight: its I/O never went down). */
static void journal_remove_locked(struct pl_dev *pd, struct pl_entry *e)
{
	list_del_init(&e->node);
	pd->nr--;
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
 * and leave the journal, onto @out for the caller to free outside the lock.
 */
static void journal_prune_locked(struct pl_dev *pd, uint64_t upto, struct list_head *out)
{
	struct list_head *p, *n;

	list_for_each_safe(p, n, &pd->journal) {
		struct pl_entry *e = list_entry(p, struct pl_entry, node);

		if (!e->inflight && e->done_seq <= upto) {
			pd->unflushed_bytes -= e->len;
			pd->saved_bytes -= e->saved_bytes;
			pd->nr--;
			list_move_tail(&e->node, out);
		}
	}
}

/* The whole journal onto @out (the cut, a reset, close). */
static void journal_take_locked(struct pl_dev *pd, struct list_head *out)
{
	list_splice_tail_init(&pd->journal, out);
	pd->nr = 0;
	pd->unflushed_bytes = 0;
	pd->saved_bytes = 0;
}

/* ---- the order of overlapping writes (pd->lock) ---- */

static bool w_overlaps(const struct pl_io *a, const struct pl_io *b)
{
	return a->parent->pos < b->parent->pos + b->parent->len &&
	       b->parent->pos < a->parent->pos + a->parent->len;
}

/* The newest write taken before @w, not yet ended, that overlaps it; NULL: none. */
static struct pl_io *blocker_locked(struct pl_dev *pd, struct pl_io *w)
{
	struct list_head *p;

	for (p = w->anode.prev; p != &pd->active; p = p->prev) {
		struct pl_io *b = list_entry(p, struct pl_io, anode);

		if (w_overlaps(b, w))
			return b;
	}
	return NULL;
}

/*
 * @w has ended (or will, without going down): off the lists; each write
 * that waited for it waits for the next earlier overlapping one, or is
 * ready.
 */
static void w_finish_locked(struct pl_dev *pd, struct pl_io *w)
{
	list_del_init(&w->anode);
	list_del_init(&w->pnode);
	while (!list_empty(&w->waiters)) {
		struct pl_io *x = list_first_entry(&w->waiters, struct pl_io, wnode);
		struct pl_io *b;

		list_del_init(&x->wnode);
		b = blocker_locked(pd, x);
		list_add_tail(&x->wnode, b ? &b->waiters : &pd->ready);
	}
}

/* Work for the runner: a write to start, or the next to go down is saved. */
static bool need_run_locked(const struct pl_dev *pd)
{
	return !pd->running &&
	       (!list_empty(&pd->ready) ||
		(!list_empty(&pd->pending) &&
		 list_first_entry(&pd->pending, struct pl_io, pnode)->save_ready));
}

static void start_write(struct pl_dev *pd, struct pl_io *w, enum pl_ctx ctx, bool admit);
static void alloc_start(struct pl_dev *pd, struct pl_io *w, enum pl_ctx ctx);
static void submit_write(struct pl_dev *pd, struct pl_io *w, bool waited);

/*
 * The runner, one thread at a time (flat combining: what another thread
 * finds to do while it runs is left to it, so a chain of overlapping
 * writes does not recurse). It passes the writes down in the order they
 * were submitted, each once its old contents are saved (the layer below
 * sees them in the order the cache gave them, as when the save was
 * synchronous), and starts the writes an end_io released. @self: the
 * write whose submit() runs in this thread (it keeps BLK_IO_WAITED).
 * Called without pd->lock. close() waits for the runner: an end_io it
 * calls may be the cache's last.
 *
 * Every function of this engine that takes pd->lock is called without it
 * and returns without it (the _locked helpers keep it, and call none of
 * them): the runner, an end_io and start_write() call each other in a
 * circle that pd->running bounds, and a lock held across a call in that
 * circle is one clang's analyzer cannot follow to its release.
 */
static void run(struct pl_dev *pd, struct pl_io *self)
{
	pthread_mutex_lock(&pd->lock);
	if (!need_run_locked(pd)) {
		pthread_mutex_unlock(&pd->lock);
		return;
	}
	pd->running = true;
	for (;;) {
		struct pl_io *w = list_first_entry_or_null(&pd->pending, struct pl_io, pnode);

		if (w && w->save_ready) {
			bool mine = w == self;

			if (mine)
				self = NULL;
			list_del_init(&w->pnode);
			pthread_mutex_unlock(&pd->lock);
			submit_write(pd, w, mine);
			pthread_mutex_lock(&pd->lock);
			continue;
		}
		w = list_first_entry_or_null(&pd->ready, struct pl_io, wnode);
		if (!w)
			break;
		list_del_init(&w->wnode);
		pthread_mutex_unlock(&pd->lock);
		start_write(pd, w, PL_IN_RUNNER, false);
		pthread_mutex_lock(&pd->lock);
	}
	pd->running = false;
	pthread_cond_broadcast(&pd->cv);
	pthread_mutex_unlock(&pd->lock);
}

/*
 * End @w's parent with @res after w_finish_locked(), without pd->lock:
 * what became ready runs first, the end_io is last.
 */
static void w_end(struct pl_dev *pd, struct pl_io *w, int res)
{
	struct blk_io *parent = w->parent;

	be_pool_put(&pd->io_pool, w);
	run(pd, NULL);
	/* Last: the cache may close the stack once this returns. */
	parent->end_io(parent, res);
}

/* @w's write never went down (its save failed, or its submit): not journaled, ended. */
static void w_fail(struct pl_dev *pd, struct pl_io *w, int res)
{
	struct pl_entry *e = w->e;
	void *spill = NULL;

	pthread_mutex_lock(&pd->lock);
	if (e && !list_empty(&e->node)) {
		journal_remove_locked(pd, e);
		entry_put_locked(pd, e, &spill);
		w->e = NULL;
	}
	res_put_locked(pd, w, &spill);
	w_finish_locked(pd, w);
	pthread_mutex_unlock(&pd->lock);
	w_end(pd, w, res);
	be_pool_spill_free(spill);
}

/* ---- I/O ---- */

static void pl_write_end_io(struct blk_io *io, int res)
{
	struct pl_io *w = (struct pl_io *)io;
	struct pl_dev *pd = w->pd;

	/*
	 * A write that failed below stays in the journal too: what it left
	 * may be anything, and its saved data puts it back if it is dropped.
	 */
	pthread_mutex_lock(&pd->lock);
	w->e->done_seq = ++pd->done_seq;
	w->e->inflight = false;
	pd->nr_inflight--;
	pthread_cond_broadcast(&pd->cv);
	w_finish_locked(pd, w);
	w->parent->done = res ? io->done : 0;
	pthread_mutex_unlock(&pd->lock);
	w_end(pd, w, res);
}

/* The old contents are saved and every earlier write went down: this one goes. */
static void submit_write(struct pl_dev *pd, struct pl_io *w, bool waited)
{
	int ret;

	w->io = be_child_io(w->parent, pl_write_end_io, w);
	if (!waited)
		w->io.flags &= ~BLK_IO_WAITED;	/* not the submitter's thread */
	ret = blk_submit(pd->be.next, &w->io);
	if (ret)
		w_fail(pd, w, ret);
	/* else @w may be gone: the layer below may complete inline */
}

/*
 * The read of @w's old contents completed: keep what is not zeros; the
 * write waits for its turn (run()). @waited: in @w's own submit().
 */
static void save_done(struct pl_dev *pd, struct pl_io *w, bool waited)
{
	struct pl_entry *e = w->e;
	struct pl_run *runs = NULL;
	uint64_t pos = e->pos;
	void *spill = NULL;
	int i, ret = 0;

	if (w->read_res) {
		w_fail(pd, w, w->read_res);
		return;
	}
	/*
	 * A write over 1 MiB (max_io above it) has more pieces than the
	 * entry's inline runs, each piece a run at most: the array is
	 * allocated now, before pd->lock. The entry's runs are this write's
	 * own until save_ready (start_write() set them up).
	 */
	if (w->npieces > e->cap_runs) {
		runs = malloc((size_t)w->npieces * sizeof(*runs));
		if (!runs) {
			w_fail(pd, w, -ENOMEM);
			return;
		}
	}
	pthread_mutex_lock(&pd->lock);
	if (runs) {
		assert(!e->nr_runs && e->runs == e->runs_inline);
		e->runs = runs;		/* entry_put_locked() frees it */
		e->cap_runs = w->npieces;
	}
	for (i = 0; i < w->npieces; i++) {
		char *buf = w->iov[i].iov_base;
		size_t n = w->iov[i].iov_len;

		if (!ret && !is_zero(buf, n)) {
			ret = entry_add_run(pd, e, pos, n, buf, w->cls[i], true);
			if (!ret)
				buf = NULL;	/* the run owns it */
		} else if (!ret) {
			ret = entry_add_run(pd, e, pos, n, NULL, -1, true);
		}
		if (buf)
			be_pool_put_spill(&pd->bufs.cls[w->cls[i]], buf, &spill);
		pos += n;
	}
	w->have_bufs = false;
	pd->saved_bytes += e->saved_bytes;
	if (ret) {
		pthread_mutex_unlock(&pd->lock);
		be_pool_spill_free(spill);
		w_fail(pd, w, ret);
		return;
	}
	w->save_ready = true;
	pthread_mutex_unlock(&pd->lock);
	run(pd, waited ? w : NULL);
	be_pool_spill_free(spill);
}

/* Whoever comes second of the read's submitter and its end_io goes on. */
static void pl_save_end_io(struct blk_io *io, int res)
{
	struct pl_io *w = io->private;

	w->read_res = res;
	if (__atomic_exchange_n(&w->stage, 1, __ATOMIC_ACQ_REL))
		save_done(w->pd, w, false);
}

static void submit_read(struct pl_dev *pd, struct pl_io *w, bool waited)
{
	int ret;

	w->rio = (struct blk_io){
		.op = BLK_READ,
		.flags = waited ? BLK_IO_WAITED : 0,
		.pos = w->parent->pos,
		.len = w->parent->len,
		.iov = w->iov,
		.iovcnt = w->npieces,
		.end_io = pl_save_end_io,
		.private = w,
	};
	w->stage = 0;
	ret = blk_submit(pd->be.next, &w->rio);
	if (ret) {
		w_fail(pd, w, ret);
		return;
	}
	/* Second: the read completed inside submit (ram); the write goes from here. */
	if (__atomic_exchange_n(&w->stage, 1, __ATOMIC_ACQ_REL))
		save_done(pd, w, waited);
}

/*
 * Start @w from @ctx, without pd->lock. @admit: @w is new, from submit():
 * it takes its place in the order first, and waits there behind the
 * newest earlier write that overlaps it, if any; otherwise @w is unblocked
 * and on pd->active. Dark, or from before a cut: acknowledged and dropped.
 * Without an entry and buffers from the stocks it allocates them here
 * (counted); a long save goes to the worker.
 */
static void start_write(struct pl_dev *pd, struct pl_io *w, enum pl_ctx ctx, bool admit)
{
	bool lng = w->parent->len > chunk_max(pd);
	bool waited = ctx == PL_IN_SUBMIT && (w->parent->flags & BLK_IO_WAITED);
	struct pl_entry *e;
	void *spill = NULL;
	int ret;

	pthread_mutex_lock(&pd->lock);
	if (admit) {
		struct blk_io *io = w->parent;
		struct pl_io *b;

		if (pd->state != PL_RUNNING) {
			/* The disk is dark: acknowledged, nothing happens. */
			pd->nr_dark_writes++;
			pthread_mutex_unlock(&pd->lock);
			be_pool_put(&pd->io_pool, w);
			io->end_io(io, 0);
			return;
		}
		w->gen = pd->gen;
		list_add_tail(&w->anode, &pd->active);
		list_add_tail(&w->pnode, &pd->pending);
		/* The saved data must be what the writes before this one left. */
		b = blocker_locked(pd, w);
		if (b) {
			list_add_tail(&w->wnode, &b->waiters);
			pd->nr_blocked++;
			pthread_mutex_unlock(&pd->lock);
			return;
		}
	}
	if (w->gen != pd->gen || pd->state != PL_RUNNING) {
		res_put_locked(pd, w, &spill);
		pd->nr_dark_writes++;
		w_finish_locked(pd, w);
		pthread_mutex_unlock(&pd->lock);
		w_end(pd, w, 0);
		be_pool_spill_free(spill);
		return;
	}
	if (!w->e)
		w->e = be_pool_take(&pd->epool);
	if (!lng && !w->have_bufs)
		bufs_take_locked(pd, w, &spill);
	if (ctx != PL_IN_WORKER && lng) {
		list_add_tail(&w->wnode, &pd->workq);
		pthread_cond_signal(&pd->wcv);
		pthread_mutex_unlock(&pd->lock);
		be_pool_spill_free(spill);
		return;
	}
	if (!w->e || (!lng && !w->have_bufs)) {
		/*
		 * The stocks ran dry faster than the worker fills them (writes
		 * without flushes): served anyway and counted, as struct
		 * be_pool does. A write handed to the worker here would end
		 * after a hop for want of memory the journal keeps anyway.
		 */
		pd->nr_misses++;
		pthread_mutex_unlock(&pd->lock);
		be_pool_spill_free(spill);
		alloc_start(pd, w, ctx);
		return;
	}
	e = w->e;
	memset(e, 0, sizeof(*e));
	list_init(&e->node);
	e->pos = w->parent->pos;
	e->len = w->parent->len;
	e->runs = e->runs_inline;
	e->cap_runs = PL_RUNS_INLINE;
	journal_add_locked(pd, e);
	pthread_mutex_unlock(&pd->lock);
	be_pool_spill_free(spill);

	if (!lng) {
		submit_read(pd, w, waited);
		return;
	}
	ret = entry_save_long(pd, e);
	if (ret) {
		w_fail(pd, w, ret);
		return;
	}
	pthread_mutex_lock(&pd->lock);
	pd->saved_bytes += e->saved_bytes;
	w->save_ready = true;
	pthread_mutex_unlock(&pd->lock);
	run(pd, NULL);
}

/*
 * Allocate what the stocks lacked, with no lock held (be_pool_get() serves
 * from a refilled stock, or from malloc, counted), then start @w from @ctx.
 */
static void alloc_start(struct pl_dev *pd, struct pl_io *w, enum pl_ctx ctx)
{
	bool lng = w->parent->len > chunk_max(pd);
	int i;

	if (!w->e)
		w->e = be_pool_get(&pd->epool);
	if (!lng && !w->have_bufs) {
		for (i = 0; i < w->npieces; i++) {
			w->iov[i].iov_base = be_pool_get(&pd->bufs.cls[w->cls[i]]);
			if (!w->iov[i].iov_base)
				break;
		}
		if (i == w->npieces) {
			w->have_bufs = true;
		} else {
			while (i-- > 0)
				be_pool_put(&pd->bufs.cls[w->cls[i]], w->iov[i].iov_base);
		}
	}
	pthread_mutex_lock(&pd->lock);
	if (!w->e || (!lng && !w->have_bufs)) {
		void *spill = NULL;

		res_put_locked(pd, w, &spill);
		w_finish_locked(pd, w);
		pthread_mutex_unlock(&pd->lock);
		w_end(pd, w, -ENOMEM);
		be_pool_spill_free(spill);
		return;
	}
	pthread_mutex_unlock(&pd->lock);
	start_write(pd, w, ctx, false);
}

/*
 * The device's worker: starts the writes the stocks could not serve and
 * long saves (it may allocate and wait for reads below, which never need
 * it), and fills the stocks ahead of submit().
 */
static void *pl_worker_main(void *arg)
{
	struct pl_dev *pd = arg;

	pthread_mutex_lock(&pd->lock);
	for (;;) {
		if (!list_empty(&pd->workq)) {
			struct pl_io *w = list_first_entry(&pd->workq, struct pl_io, wnode);

			list_del_init(&w->wnode);
			pd->nr_worker++;
			pthread_mutex_unlock(&pd->lock);
			alloc_start(pd, w, PL_IN_WORKER);
			pthread_mutex_lock(&pd->lock);
			continue;
		}
		if (pd->refill) {
			pd->refill = false;
			pthread_mutex_unlock(&pd->lock);
			stocks_refill(pd);
			pthread_mutex_lock(&pd->lock);
			continue;
		}
		if (pd->stop)
			break;
		pthread_cond_wait(&pd->wcv, &pd->lock);
	}
	pthread_mutex_unlock(&pd->lock);
	return NULL;
}

static void pl_flush_end_io(struct blk_io *io, int res)
{
	struct pl_io *c = (struct pl_io *)io;
	struct pl_dev *pd = c->pd;
	struct blk_io *parent = c->parent;
	LIST_HEAD(gone);

	pthread_mutex_lock(&pd->lock);
	if (c->gen != pd->gen)
		res = -EIO;	/* the power went while it was in flight */
	else if (!res)
		journal_prune_locked(pd, c->upto, &gone);
	pthread_mutex_unlock(&pd->lock);
	entries_free(pd, &gone);
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
	struct pl_io *w = be_pool_get(&pd->io_pool);

	if (!w)
		return -ENOMEM;
	w->parent = io;
	w->pd = pd;
	list_init(&w->anode);
	list_init(&w->waiters);
	list_init(&w->wnode);
	list_init(&w->pnode);
	if (io->len <= chunk_max(pd))
		pieces_init(pd, w, io->len);
	start_write(pd, w, PL_IN_SUBMIT, true);
	return 0;
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
			     const struct be_range_set *settled, uint64_t s, uint64_t t,
			     uint64_t *restored)
{
	size_t i = be_range_set_find(settled, s);
	int ret = 0, r;

	while (s < t) {
		uint64_t stop = t;

		if (i < settled->n && settled->v[i].pos <= s) {
			/* inside a settled range: skip to its end */
			s = settled->v[i].pos + settled->v[i].len;
			i++;
			continue;
		}
		if (i < settled->n && settled->v[i].pos < t)
			stop = settled->v[i].pos;
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
	uint64_t r = be_rand(rng);

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
		return first + (1 + be_rand(rng) % (units - 1)) * pbs;
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
	struct be_range_set settled = { 0 };	/* the physical blocks already settled */
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
			uint64_t a = e->pos / pbs * pbs;

			r = be_range_set_add(&settled, a, (keep_end[i] + pbs - 1) / pbs * pbs - a);
			if (r && !ret)
				ret = r;
		}
	}
	be_range_set_destroy(&settled);
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
	struct pl_entry **v = NULL;
	uint64_t seed, unflushed, restored = 0, counts[3] = { 0, 0, 0 };
	LIST_HEAD(cut);
	struct pl_entry *e;
	size_t n, i = 0;
	int ret = 0;

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
		seed = be_seed_from_clock();
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
	n = pd->nr;
	unflushed = pd->unflushed_bytes;
	journal_take_locked(pd, &cut);
	pthread_mutex_unlock(&pd->lock);
	/*
	 * Writes that waited behind these, or for the worker, were taken
	 * before the cut too: they start in a past generation and are
	 * acknowledged and dropped there, never written after a restart.
	 */
	if (n) {
		v = malloc(n * sizeof(*v));
		if (!v)
			ret = -ENOMEM;
	}
	if (v) {
		list_for_each_entry(e, &cut, node)
			v[i++] = e;
		/* pd->nr counts the journal's entries (the analyzer cannot see it). */
		assert(i == n);
	}

	/*
	 * Decide and undo in completion order, the order the disk got them
	 * (backends/lib/crashmodel.h), not the journal's submission order: two
	 * writes to one physical block that do not overlap byte for byte may
	 * be in flight together and complete the other way round, and the
	 * block must never keep the later without the earlier.
	 */
	if (v && n > 1)
		qsort(v, n, sizeof(*v), entry_done_cmp);
	if (!ret)
		ret = pl_crash(pd, v, n, seed, counts, &restored);
	/* The post-crash state is what the disk holds: make it durable below. */
	if (n) {
		int r = pl_sync_io(pd->be.next, BLK_FLUSH, 0, 0, NULL);

		if (r && !ret)
			ret = r;
	}
	entries_free(pd, &cut);
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
	LIST_HEAD(gone);
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
	journal_take_locked(pd, &gone);
	/* A flush from before covers nothing of the new contents either. */
	pd->gen++;
	pd->nr_resets++;
	pthread_mutex_unlock(&pd->lock);
	entries_free(pd, &gone);
	return 0;
}

static const struct blk_snap_ops pl_snap_ops = {
	.create = be_filter_snap_create,
	.destroy = be_filter_snap_destroy,
	.reset = pl_snap_reset,
	.list = be_filter_snap_list,
	.save = be_filter_snap_save,
};

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

/* An action's file reads 0. */
static int pl_action_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "0");
}

#define attr_trigger_show	pl_action_show
#define attr_restart_show	pl_action_show

static int attr_trigger_store(struct blk_backend *be, const char *buf, size_t len)
{
	int ret = action_store(buf, len);

	return ret ? ret : pl_trigger((struct pl_dev *)be);
}

static int attr_restart_store(struct blk_backend *be, const char *buf, size_t len)
{
	int ret = action_store(buf, len);

	return ret ? ret : pl_restart((struct pl_dev *)be);
}

/* A cut under way reads dark already: writes go nowhere from its first instant. */
static int attr_state_show(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	enum pl_state st;

	pthread_mutex_lock(&pd->lock);
	st = pd->state;
	pthread_mutex_unlock(&pd->lock);
	return be_attr_out(buf, len, st == PL_RUNNING ? "running" : "dark");
}

static int attr_seed_show(struct blk_backend *be, char *buf, size_t len)
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

static int attr_seed_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	char s[32];
	bool is_auto;
	uint64_t seed;

	if (be_attr_text(buf, len, s, sizeof(s)) || be_parse_seed(s, &is_auto, &seed))
		return -EINVAL;
	pthread_mutex_lock(&pd->lock);
	pd->seed_auto = is_auto;
	pd->seed = seed;
	pthread_mutex_unlock(&pd->lock);
	return 0;
}

static int attr_last_seed_show(struct blk_backend *be, char *buf, size_t len)
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

/*
 * seed is the one key, and the filter's own (not bk_type_seed, whose auto
 * draws one seed at open and shows it): auto here is a fresh seed from the
 * clock at each cut, so the file shows "auto" until a number is stored, and
 * last_seed says which seed the last cut used. The rest are the actions and
 * the state.
 */
#define POWERLOSS_KNOBS(K)										\
	K(trigger,   none, be,        0, 0, 0, "1", ACT, NULL)						\
	K(restart,   none, be,        0, 0, 0, "1", ACT, NULL)						\
	K(state,     none, state,     0, 0, 0, "running or dark", OWNRO, NULL)			\
	K(seed,      none, seed,      0, 0, 0, "a number, or auto for one from the clock at each cut",	\
	  OWN, NULL)											\
	K(last_seed, none, last_seed, 0, 0, 0, "a seed, or none", OWNRO, NULL)				\
	K(unflushed_bytes, u64, unflushed_bytes, 0, UINT64_MAX, 0, "bytes", RO, NULL)

BK_DEFINE(powerloss, struct pl_dev, lock, NULL, POWERLOSS_KNOBS);

/* The seed's key, the OWN row: auto when absent. */
static int seed_param(struct blk_params *p, struct pl_dev *pd)
{
	const char *s = blk_param_get(p, "seed");

	pd->seed_auto = true;
	if (s && be_parse_seed(s, &pd->seed_auto, &pd->seed))
		return blk_param_error(p, "seed", "'%s' is not a seed (allowed: %s)", s,
				       bk_knobs[bk_i_seed].unit);
	return 0;
}

/* ---- open, close, geometry, stat ---- */

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

/*
 * The stocks: a class for each buffer size a read up to max_io uses, and
 * the entries. Filled at open, touched now: the entries and the page class
 * (a 4K write's). The larger classes fill when first wanted.
 */
static int stocks_init(struct pl_dev *pd)
{
	uint64_t max = chunk_max(pd);
	int nr_cls = 1, ret;

	while (nr_cls < PL_CLASSES && ((uint64_t)PL_PAGE << nr_cls) <= max)
		nr_cls++;
	ret = be_pool_classes_init(&pd->bufs, nr_cls, PL_PAGE, PL_PAGE, PL_STOCK_BYTES, 1,
				   pl_pool_low, pd);
	if (ret)
		return ret;
	ret = be_pool_init(&pd->epool, PL_ENTRIES, sizeof(struct pl_entry), 64);
	if (ret) {
		be_pool_classes_destroy(&pd->bufs);
		return ret;
	}
	be_pool_set_reserve(&pd->epool, PL_ENTRIES, (PL_ENTRIES + 1) / 2, pl_pool_low, pd);
	return 0;
}

static void stocks_free(struct pl_dev *pd)
{
	be_pool_destroy(&pd->epool);
	be_pool_classes_destroy(&pd->bufs);
}

static struct blk_backend *pl_open(struct blk_params *p, struct blk_backend *next)
{
	struct pl_dev *pd;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the powerloss filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	pd = calloc(1, sizeof(*pd));
	if (!pd) {
		blk_param_error(p, NULL, "cannot set up the powerloss filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	ret = bk_params(&bk_table, p, &pd->be);
	if (!ret)
		ret = seed_param(p, pd);
	if (ret) {
		free(pd);
		return ERR_PTR(ret);
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
	pd->state = PL_RUNNING;
	ret = -pthread_mutex_init(&pd->lock, NULL);
	if (ret)
		goto out_free;
	ret = -pthread_cond_init(&pd->cv, NULL);
	if (ret)
		goto out_destroy_lock;
	ret = -pthread_cond_init(&pd->wcv, NULL);
	if (ret)
		goto out_destroy_cv;
	ret = be_pool_init(&pd->io_pool, PL_POOL, sizeof(struct pl_io), 64);
	if (ret)
		goto out_destroy_wcv;
	list_init(&pd->journal);
	list_init(&pd->active);
	list_init(&pd->ready);
	list_init(&pd->pending);
	list_init(&pd->workq);
	ret = stocks_init(pd);
	if (ret)
		goto out_destroy_pool;
	ret = -pthread_create(&pd->worker, NULL, pl_worker_main, pd);
	if (ret)
		goto out_free_stocks;
	pd->be.ops = &powerloss_filter_ops;
	pd->be.next = next;
	return &pd->be;

out_free_stocks:
	stocks_free(pd);
out_destroy_pool:
	be_pool_destroy(&pd->io_pool);
out_destroy_wcv:
	pthread_cond_destroy(&pd->wcv);
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
	LIST_HEAD(gone);

	pthread_mutex_lock(&pd->lock);
	while (pd->nr_inflight || pd->state == PL_CUTTING || pd->running)
		pthread_cond_wait(&pd->cv, &pd->lock);
	assert(list_empty(&pd->active) && "powerloss: closed with writes not ended");
	journal_take_locked(pd, &gone);
	pd->stop = true;
	pthread_cond_signal(&pd->wcv);
	pthread_mutex_unlock(&pd->lock);
	pthread_join(pd->worker, NULL);
	entries_free(pd, &gone);
	stocks_free(pd);
	be_pool_destroy(&pd->io_pool);
	pthread_cond_destroy(&pd->wcv);
	pthread_cond_destroy(&pd->cv);
	pthread_mutex_destroy(&pd->lock);
	free(pd);
}

static size_t pl_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct pl_dev *pd = (struct pl_dev *)be;
	uint64_t pool_bytes, pool_limit, save_allocs;
	size_t n;

	/* entries and buffers allocated past what was filled at open */
	save_allocs = be_pool_classes_count(&pd->bufs, &pool_bytes, &pool_limit) +
		      __atomic_load_n(&pd->epool.nr_allocs, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pd->lock);
	n = be_stat_printf(buf, len,
			   "powerloss_unflushed_bytes %llu\npowerloss_unflushed_writes %zu\n"
			   "powerloss_saved_bytes %llu\npowerloss_cuts %llu\n"
			   "powerloss_kept_writes %llu\npowerloss_dropped_writes %llu\n"
			   "powerloss_torn_writes %llu\npowerloss_restored_bytes %llu\n"
			   "powerloss_dark_writes %llu\npowerloss_restore_errors %llu\n"
			   "powerloss_resets %llu\npowerloss_blocked_writes %llu\n"
			   "powerloss_worker_writes %llu\npowerloss_save_allocs %llu\n"
			   "powerloss_save_pool_bytes %llu\npowerloss_save_pool_limit %llu\n"
			   "powerloss_save_pool_misses %llu\npowerloss_locked_allocs %llu\n",
			   (unsigned long long)pd->unflushed_bytes, pd->nr,
			   (unsigned long long)pd->saved_bytes, (unsigned long long)pd->nr_cuts,
			   (unsigned long long)pd->nr_kept, (unsigned long long)pd->nr_dropped,
			   (unsigned long long)pd->nr_torn, (unsigned long long)pd->restored_bytes,
			   (unsigned long long)pd->nr_dark_writes,
			   (unsigned long long)pd->nr_restore_errors,
			   (unsigned long long)pd->nr_resets, (unsigned long long)pd->nr_blocked,
			   (unsigned long long)pd->nr_worker, (unsigned long long)save_allocs,
			   (unsigned long long)pool_bytes, (unsigned long long)pool_limit,
			   (unsigned long long)pd->nr_misses,
			   (unsigned long long)pd->nr_locked_allocs);
	pthread_mutex_unlock(&pd->lock);
	return n + be_pool_stat(&pd->io_pool, "powerloss_io", buf + n, len - n);
}

const struct blk_backend_ops powerloss_filter_ops = {
	.name = "powerloss",
	.is_filter = true,
	.keys = powerloss_keys,
	.help = "powerloss: simulated power cuts (echo 1 > .sys/DEV/powerloss/trigger, then restart); "
		"powerloss.seed = N|auto",
	.open = pl_open,
	.close = pl_close,
	.geometry = be_filter_geometry,
	.resize = pl_resize,
	.submit = pl_submit,
	.stat = pl_stat,
	.attrs = powerloss_attrs,
	.snap = &pl_snap_ops,
};
