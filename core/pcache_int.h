/* SPDX-License-Identifier: MIT */
/*
 * core/pcache_int.h - private structures of the page cache, shared by
 * pcache.c (index, folios, read/write paths), writeback.c (writeback,
 * throttling, flusher), submit.c (backend I/O, batches, accounting) and
 * aio.c (asynchronous requests and the device's workers). Each group of
 * declarations below names the file that defines it. The lock order is in
 * pcache.h.
 */
#ifndef BLKFS_PCACHE_INT_H
#define BLKFS_PCACHE_INT_H

#include <pthread.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/list.h"
#include "../backends/lib/pool.h"
#include "../backends/lib/trace.h"
#include "bitmap.h"
#include "pcache.h"

/* Where a folio is filed; protected by pc->lock. */
enum folio_list {
	FOLIO_FREE,	/* on pc->free: no device */
	FOLIO_LRU,	/* on pc->lru: candidate for eviction */
	FOLIO_PARKED,	/* on pc->parked: found dirty or under writeback by a scan */
};

/*
 * A block that holds only some valid bytes: the bytes [start, end) of cache
 * block blk were written and are newer than the device; the rest of the
 * block is not known (it was never read). Such a block is dirty and not
 * uptodate (pcache.c, invariant 2). PART_WB: a write of [start, end) to the
 * device is in flight (rmw = device sends it without the rest); the record
 * stays until it completes, so that a read of the block keeps those bytes.
 * Protected by f->lock. A record is made or grows only under the exclusive
 * hold (a partial write, completing the block); it goes under f->lock alone
 * when a write covers the whole block or its in-flight write ends.
 */
#define PC_PART_SLOTS 4		/* partial blocks one folio can hold at once */
#define PART_FREE UINT32_MAX	/* pc_part.blk of an unused record */
#define PART_WB 1u
struct pc_part {
	uint32_t blk;
	uint32_t start, end;	/* bytes within the block, 0 <= start < end <= cblk */
	uint32_t flags;
};

struct pc_folio {
	/* protected by pc->lock */
	struct pc_dev *dev;		/* NULL when free */
	uint64_t index;			/* device offset / folio_size */
	struct pc_folio *hnext;		/* dev->hash chain */
	struct list_head lru;		/* pc->free, pc->lru or pc->parked */
	struct list_head dev_node;	/* dev->folios */
	enum folio_list where;
	int ref;			/* atomic; taken under pc->lock or from a ref */

	/* protected by lock */
	pthread_mutex_t lock;
	pthread_cond_t wait;		/* excl, users, wb_ios changes */
	uint32_t users;			/* shared holders copying data in */
	bool excl;			/* exclusive holder: fill, RMW, invalidate */
	uint32_t waiters;
	uint32_t wb_ios;		/* writeback segments in flight */
	uint32_t nr_dirty;		/* dirty blocks, partial ones included */
	uint64_t dirtied_ms;		/* when nr_dirty went 0 -> >0 */
	unsigned long *state;		/* bits [0,n) uptodate, [n,2n) dirty */
	uint32_t nr_part;		/* records in use in part[] */
	struct pc_part part[PC_PART_SLOTS];

	char *data;			/* folio_size bytes of pool memory */
};

#define PC_SIO_IOV 32		/* slices a pooled submission I/O holds */
#define PC_SIO_POOL 256		/* submission I/Os per device in the pool */
#define PC_WB_POOL 64		/* writeback I/Os per device in the pool */

/*
 * Threads per device for punted requests (pcache.h's rules: they may wait).
 * Several, so that an fsync writing back does not hold up a throttled
 * writer or a read that waits for a folio.
 */
#define PC_DEV_WORKERS 4

struct pc_dev {
	struct pc_cache *pc;
	char *name;
	struct blk_backend *be;
	struct bt_dev *bt;		/* its trace state (never freed; NULL: none) */
	struct blk_geometry geo;
	uint32_t cblk;			/* cache block size */
	uint32_t cblk_shift;
	uint32_t nr_blks;		/* cache blocks per folio */

	/* protected by pc->lock */
	struct pc_folio **hash;
	uint32_t hash_bits;
	struct list_head folios;
	uint64_t nr_folios;		/* written under pc->lock by atomic stores; read
					 * without it by dev_cached_any() */
	struct list_head node;		/* pc->devs; empty once removed */
	uint32_t users;			/* pc_devs_get() holds on it */

	/* protected by err_lock */
	pthread_mutex_t err_lock;
	pc_errseq_t wb_err;
	int failing;			/* errno of the last failed writeback; 0 after a success */
	uint32_t nr_fails;		/* consecutive failed writeback passes */
	uint64_t retry_after_ms;	/* the flusher leaves a failing device alone until then */
	struct blk_ratelimit err_rl;

	struct pc_stats st;		/* atomic counters; gauges computed in pc_dev_stats() */
	uint32_t max_io;		/* atomic: live max_sectors_kb * 1024 */
	uint32_t read_ahead;		/* atomic: live read_ahead_kb * 1024 */
	uint64_t ra_next;		/* atomic: where the last buffered read ended */
	uint32_t ppb;			/* cache blocks per physical block when writes are
					 * widened to it (pbs > cblk, pbs <= folio), else 0 */
	/*
	 * Set in pc_dev_add(), before serving: a layer of the stack reads a
	 * WRITE's memory until its end_io (core/stack.c:stack_stable_writes()),
	 * so a folio under writeback is not written into (pcache.c, invariant 7).
	 */
	bool stable_writes;
	bool rmw_device;		/* set before serving */
	bool write_through;		/* atomic: queue/write_cache */
	bool on_error_drop;		/* set before serving */

	/* protected by wq_lock: requests punted to the device's workers (aio.c) */
	pthread_mutex_t wq_lock;
	pthread_cond_t wq_cond;
	struct pc_aio *wq_head, **wq_tail;
	bool wq_stop;
	uint32_t wq_busy;		/* workers running an item */
	int nr_workers;
	pthread_t workers[PC_DEV_WORKERS];

	struct be_pool sio_pool;	/* submit.c's per-I/O state */
	struct be_pool wb_pool;		/* writeback I/Os */

	/*
	 * Per-thread counts (submit.c): each thread counts in a block of its
	 * own (struct pc_stat_tl), found through its table at stat_id, listed
	 * here for readers; st keeps what exited threads counted. Busy time
	 * as the kernel's update_io_ticks(): whoever moves acct_stamp_ns adds
	 * to st.io_ticks_ns; in flight is the sum of the blocks' counts.
	 */
	uint32_t stat_id;		/* set before serving; PC_STAT_NO_ID: shared counts */
	struct pc_stat_tl *stat_tl;	/* stat_lock (submit.c): this device's blocks */
	uint64_t acct_in_flight;	/* atomic: what exited threads began less ended */
	uint64_t acct_stamp_ns;		/* atomic: the last move of st.io_ticks_ns */
	uint64_t acct_ticks_shown;	/* atomic: the most pc_dev_stats() reported */
	uint64_t dirty_bytes;		/* atomic */
	uint64_t wb_bytes;		/* atomic */
	uint64_t uptodate_blks;		/* atomic */
};

struct pc_cache {
	pthread_mutex_t lock;
	pthread_cond_t free_cond;	/* a folio became free or clean; dirty dropped */
	pthread_cond_t dev_cond;	/* a removed device's last user let go */
	int nr_devs;
	struct list_head free, lru, parked;
	struct list_head devs;
	uint32_t alloc_waiters;		/* threads waiting for a folio or dirty room */

	char *mem;			/* the pool, 2 MiB aligned */
	size_t mem_len;
	char *map_base;			/* the mapping behind it */
	size_t map_len;
	struct pc_folio *folios;
	unsigned long *bitmaps;
	uint32_t nr_folios;
	uint32_t folio_size;
	uint32_t folio_shift;
	uint32_t bm_words;		/* per folio */

	uint64_t dirty_bytes;		/* atomic: all devices */
	uint64_t wb_bytes;		/* atomic: all devices */
	uint64_t dirty_background, dirty_limit;
	uint32_t dirty_expire_ms;

	/* flusher */
	pthread_t flusher;
	bool flusher_running;		/* atomic; written by wb_flusher_start/stop only */
	pthread_mutex_t fl_lock;
	pthread_cond_t fl_cond;
	bool fl_kick;			/* fl_lock */
	bool fl_stop;			/* fl_lock */
};

static inline uint64_t folio_pos(const struct pc_cache *pc, const struct pc_folio *f)
{
	return f->index << pc->folio_shift;
}

static inline void folio_get(struct pc_folio *f)
{
	__atomic_add_fetch(&f->ref, 1, __ATOMIC_RELAXED);
}

/* pcache.c: folios (references, holds, block state, reads), buffers, the device list */
void folio_put(struct pc_folio *f);
/* Move a folio that turned clean from the parked list back to the LRU. */
void folio_unpark(struct pc_cache *pc, struct pc_folio *f);
/* Account blocks that turned dirty (nr > 0) or clean (nr < 0). Caller holds f->lock. */
void folio_account_dirty_locked(struct pc_dev *dev, struct pc_folio *f, long nr);
/* Exclusive hold of @f's blocks (fill, read-modify-write, invalidate). Caller holds f->lock. */
void folio_excl_begin_locked(struct pc_folio *f);
void folio_excl_end_locked(struct pc_folio *f);
/* Wait until no writeback I/O is in flight on @f. Caller holds f->lock. */
void folio_wait_wb_locked(struct pc_folio *f);
/*
 * ... and writeback may start on it (folio_wb_blocked_locked(): nobody
 * holds @f exclusively, and on a stable_writes device no writer is copying
 * into it). Caller holds f->lock.
 */
void folio_wait_idle_locked(const struct pc_dev *dev, struct pc_folio *f);

/*
 * Invariant 7, stable_writes: may writeback not start on @f now? On a
 * stable device a writer copying into @f (a shared holder, or an exclusive
 * one, which writeback waits for anyway) keeps it out; on others only the
 * exclusive holder does. One predictable branch for the devices without.
 * Caller holds f->lock.
 */
static inline bool folio_wb_blocked_locked(const struct pc_dev *dev, const struct pc_folio *f)
{
	return f->excl || (__builtin_expect(dev->stable_writes, 0) && f->users);
}

/* The record of cache block @blk of @f, or NULL. Caller holds f->lock. */
static inline struct pc_part *folio_part_find_locked(struct pc_folio *f, uint32_t blk)
{
	uint32_t i;

	if (!f->nr_part)
		return NULL;
	for (i = 0; i < PC_PART_SLOTS; i++)
		if (f->part[i].blk == blk)
			return &f->part[i];
	return NULL;
}

static inline void folio_part_free_locked(struct pc_folio *f, struct pc_part *p)
{
	p->blk = PART_FREE;
	p->flags = 0;
	f->nr_part--;
}

/* Drop the records of blocks [b0, b1). Caller holds f->lock and the exclusive hold. */
void folio_part_drop_locked(struct pc_folio *f, uint32_t b0, uint32_t b1);

/*
 * Complete the partial blocks among [b0, b1] of @f by reading what they
 * lack from the device (never over the bytes they hold): @whole makes
 * them uptodate; otherwise only their ranges' edges are completed to whole
 * logical blocks (rmw = device). Counted in rmw_read_bytes. Caller holds
 * the exclusive hold, not f->lock. Returns 0 or the first read error (a
 * block whose read failed is left as it was).
 */
int folio_complete_parts(struct pc_dev *dev, struct pc_folio *f, uint32_t b0, uint32_t b1,
			 bool whole);

/* Read whole cache blocks [blk, blk+nr) of @f (caller holds excl); counted as rmw. */
int folio_read_blocks(struct pc_dev *dev, struct pc_folio *f, uint32_t blk, uint32_t nr);

/* Read cache blocks [blk, blk+nr) of @f into @buf instead of the folio (rmw). */
int folio_read_span(struct pc_dev *dev, struct pc_folio *f, uint32_t blk, uint32_t nr, char *buf);
/* The calling thread's PC_READ_MAX-byte bounce buffer, 64K-aligned. */
char *pc_bounce_buf(void);
/* Another one, for the reads that complete partial blocks (rmw). */
char *pc_rmw_buf(void);

/* The devices, each held until pc_devs_put() (at most PC_MAX_DEVS). Takes pc->lock. */
int pc_devs_get(struct pc_cache *pc, struct pc_dev **v);
void pc_devs_put(struct pc_cache *pc, struct pc_dev **v, int n);

/* Collect referenced folios of @dev overlapping [pos, pos+len) (all if len == 0), sorted. */
int pc_collect(struct pc_dev *dev, uint64_t pos, uint64_t len, bool only_dirty_or_wb,
	       uint64_t older_than_ms, struct pc_folio ***out);
void pc_put_all(struct pc_folio **v, int n);

/* writeback.c */
enum wb_mode { WB_ALL, WB_EXPIRED };
/* Write the dirty blocks of @v (sorted by index); wait if @wait. Returns 0 or -errno. */
int wb_folios(struct pc_dev *dev, struct pc_folio **v, int n, bool wait);
int wb_dev(struct pc_dev *dev, enum wb_mode mode, bool wait);
/* The same, reporting the bytes it submitted. */
int wb_dev_bytes(struct pc_dev *dev, enum wb_mode mode, bool sync, uint64_t *bytes);
int wb_range(struct pc_dev *dev, uint64_t pos, uint64_t len);
void wb_kick(struct pc_cache *pc);
/* -errno of a device whose writeback keeps failing, else 0. */
int wb_dev_failing(struct pc_dev *dev);
/* Without a flusher: write back every device in the caller (see writeback.c). */
int wb_all_sync(struct pc_cache *pc, struct pc_dev *dev, uint64_t *bytes);
/*
 * Slow or stop a writer as dirty data nears dirty_limit. Returns 0 or
 * -errno; with @nowait, -EAGAIN where it would pause or wait.
 */
int wb_balance_dirty(struct pc_dev *dev, bool may_pause, bool nowait);
#ifdef BLKFS_TEST_HOOKS
/*
 * Test builds only (-DBLKFS_TEST_HOOKS, GNUmakefile's CHECKS=1): points where
 * a unit test steps into a race window of core/pcache.c to make it happen
 * every time. NULL or false: nothing changes.
 */
struct pc_test_hooks {
	/* waits for a free folio are unbounded: only a wake-up ends them */
	bool no_poll;
	/* a thread about to wait for a free folio, pc->lock held, after its scan found none */
	void (*before_wait)(struct pc_cache *pc);
	/* folio_put() dropped the last reference, before it looks for waiters to wake */
	void (*put_idle)(struct pc_folio *f);
	/* a writer holds @f shared (users > 0), no lock held, and is about to copy in */
	void (*copy_begin)(struct pc_folio *f);
};
extern struct pc_test_hooks pc_test_hooks;
#endif

int wb_flusher_start(struct pc_cache *pc);
void wb_flusher_stop(struct pc_cache *pc);

/* aio.c */
void pc_aio_init(struct pc_aio *aio, struct pc_dev *dev, enum pc_aio_op op, uint64_t pos,
		 size_t len);
/* Hand @aio to its device's workers (rule R2: it holds nothing). */
void pc_punt(struct pc_aio *aio);
/* Start and stop a device's workers (pc_dev_add, pc_dev_remove). */
int pc_workers_start(struct pc_dev *dev);
void pc_workers_stop(struct pc_dev *dev);

/* pcache.c */
/* A worker runs punted requests @v (n > 1: fsyncs queued together). */
void pc_aio_run(struct pc_aio **v, int n);
void pc_errseq_set(struct pc_dev *dev, int err);

/* submit.c */
/* The object the pool of submission I/Os holds. */
size_t pc_sio_size(void);
/* writeback.c: a writeback I/O's segments for @max_io, and its size. */
uint32_t wb_io_cap(const struct pc_dev *dev, uint64_t max_io);
size_t wb_io_size(uint32_t cap);

/* submit.c: batches, submission split at max_io, accounting, the trace of each I/O */
void pc_batch_init(struct pc_batch *b);
/* An asynchronous batch: @end runs when the last I/O ends; the caller's +1 bias is taken. */
void pc_batch_init_async(struct pc_batch *b, void (*end)(struct pc_batch *b));
int pc_batch_err(struct pc_batch *b);
void pc_batch_add(struct pc_batch *b);
void pc_batch_done(struct pc_batch *b, int res);
void pc_batch_done_at(struct pc_batch *b, int res, uint64_t fail_pos);
uint64_t pc_batch_ok_bytes(struct pc_batch *b, uint64_t pos);
int pc_batch_wait(struct pc_batch *b);
void pc_batch_destroy(struct pc_batch *b);

/* Submit a FLUSH, DISCARD or WRITE_ZEROES into @batch. */
void pc_submit_nodata(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		      struct pc_batch *batch);
/* Submit one I/O and wait for it. */
int pc_submit_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		   const struct iovec *iov, int iovcnt);
/*
 * Submit a data I/O over @iov, split at max_io by slicing the vector (no
 * copy), adding each piece to @batch. @iov must live until the batch ends.
 */
void pc_submit_split(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
		     const struct iovec *iov, int iovcnt, struct pc_batch *batch);
/* The same with blk_io.flags (BLK_IO_WAITED when the range is one I/O). */
void pc_submit_split_flags(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			   const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			   unsigned int flags);
/*
 * The same, in @embed (the request's own, not the pool's) when the range is
 * one I/O and @iov is exactly it: an unsplit direct I/O. @embed lives until
 * the batch ends.
 */
void pc_submit_split_embed(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			   const struct iovec *iov, int iovcnt, struct pc_batch *batch,
			   unsigned int flags, struct pc_sio *embed);
/*
 * Mapped reads (submit.c): pc_map_inline_begin(@aio) before an unsplit
 * BLK_IO_MAPPED read of @aio is submitted in this thread; after submit,
 * pc_map_inline_end() is true when the backend ended it inside submit()
 * with a mapping and the batch's end has already run there (the
 * submitter's bias dropped with it): the submitter then touches @aio no
 * more. False: drop the bias as usual.
 */
void pc_map_inline_begin(struct pc_aio *aio);
bool pc_map_inline_end(void);
/* The same, waiting for it; _ok also says how many bytes from @pos completed. */
int pc_submit_split_wait_ok(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			    const struct iovec *iov, int iovcnt, uint64_t *ok);
int pc_submit_split_wait(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len,
			 const struct iovec *iov, int iovcnt);
/**
 * pc_submit_first_hop - blk_submit() of an I/O the cache made, to the top of
 * its device's stack, checked first in every build
 * @be: the top layer (dev->be)
 * @name: the device's name, for the log
 * @io: the I/O
 *
 * The installed build's one check (GNUmakefile's CHECKS=0 checks nothing at
 * blk_submit()): blk_io_valid() against @be's geometry. An I/O that breaks
 * it is not submitted: -EIO, and a line in the log (rate-limited). Every
 * I/O the cache hands to the device goes through here.
 *
 * Returns: what blk_submit() returns, or -EIO (the I/O was not taken: the
 * caller ends it, as after any failed submit).
 */
int pc_submit_first_hop(struct blk_backend *be, const char *name, struct blk_io *io);
/* Account a backend I/O: acct_begin() at submit, acct_end() at completion. */
uint64_t acct_begin(struct pc_dev *dev);
void acct_end(struct pc_dev *dev, enum blk_op op, uint64_t len, uint64_t start_ns, int res);
/* Trace D for @io as it goes to the backend (submit.c; writeback too), I first if @merged. */
void pc_trace_issue(struct pc_dev *dev, const struct blk_io *io, bool merged);

/*
 * One thread's counts of one device: written by that thread alone (plain
 * loads and stores through relaxed atomics, no locked instruction, so that
 * a reader may sum them meanwhile), summed with dev->st by pc_dev_stats(),
 * folded into dev->st when the thread exits (a thread's counts outlive it).
 * Cache-line aligned: no false sharing with another thread's block.
 */
struct pc_stat_tl {
	struct pc_stat_tl *next;	/* stat_lock: dev->stat_tl */
	struct pc_dev *dev;		/* atomic, written under stat_lock: NULL once removed */
	/*
	 * backend I/Os begun here less ended here (modulo 2^64: an I/O may
	 * end in another thread); the sum over the blocks is the device's
	 * in flight, as the kernel sums its per-CPU in-flight counts
	 */
	uint64_t in_flight;
	struct pc_stats st;		/* the counters (gauges unused) */
};

#define PC_STAT_NO_ID UINT32_MAX

/* The calling thread's block for @dev, made on first use; NULL: count in dev->st. */
struct pc_stat_tl *pc_stat_tl_get(struct pc_dev *dev);
/* A device's id for the per-thread tables (pc_dev_add), and its end (pc_dev_remove). */
void pc_stat_dev_init(struct pc_dev *dev);
void pc_stat_dev_destroy(struct pc_dev *dev);
/* @dev's counters: dev->st plus every live thread's block (pc_dev_stats). */
void pc_stat_sum(struct pc_dev *dev, struct pc_stats *st);

#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELAXED)

/* Count @v in @field of @dev: in the thread's block, or shared when it has none. */
#define STAT_ADD_TL(t, dev, field, v) do {					\
	struct pc_stat_tl *t_ = (t);						\
										\
	if (__builtin_expect(t_ != NULL, 1))					\
		OWNED_ADD(&t_->st.field, (v));					\
	else									\
		__atomic_add_fetch(&(dev)->st.field, (v), __ATOMIC_RELAXED);	\
} while (0)

#define STAT_ADD(dev, field, v) STAT_ADD_TL(pc_stat_tl_get(dev), (dev), field, (v))

static inline uint64_t dev_max_io(const struct pc_dev *dev)
{
	return __atomic_load_n(&dev->max_io, __ATOMIC_RELAXED);
}

#endif
