/* SPDX-License-Identifier: MIT */
/*
 * core/pcache.c - blkfs's page cache: the folio pool, the per-device folio
 * index, per-block state, and the buffered, direct and discard paths.
 * Writeback, dirty throttling and the flusher live in writeback.c, the
 * submission of backend I/O in submit.c.
 *
 * Invariants (checked by folio_sanity() under assert()):
 *  1. A folio is in exactly one of: pc->free (dev == NULL), pc->lru or
 *     pc->parked (dev != NULL, in dev->hash and on dev->folios).
 *  2. Each cache block is in one of four states, by its uptodate (U) and
 *     dirty (D) bits: empty (!U !D: nothing valid), clean (U !D), dirty
 *     (U D) and partial (!U D: only the bytes [start, end) of its record in
 *     f->part[] are valid, and they are dirty; the rest was never read).
 *     A block has a record iff it is partial, or a write of its range is
 *     in flight (PART_WB); an uptodate block never has one.
 *  3. A folio with ref > 0, nr_dirty > 0 or wb_ios > 0 is never evicted;
 *     folio memory is reused only after eviction.
 *  4. Uptodate bits and records change only under excl (fill, completing
 *     a partial block, a partial write, invalidate, discard) or by a
 *     shared writer whose copy is complete; the backend never writes into
 *     a block that holds valid bytes: reads land in empty blocks, and a
 *     partial block's missing bytes are read into a bounce buffer and
 *     copied around the valid ones.
 *  5. At most one writeback I/O covers a block at a time: a folio's dirty
 *     blocks are taken for writeback only when it has no writeback in flight
 *     (or by a background pass that skips such folios).
 *  6. pc->dirty_bytes == sum of dev->dirty_bytes == sum of nr_dirty * cblk
 *     (a partial block counts whole: it leaves as a whole block, or as
 *     whole logical blocks with rmw = device).
 *  7. Stable pages only where the stack asks (dev->stable_writes, from
 *     blk_backend_ops.stable_writes of any layer: rbd, whose librbd sends
 *     from the folio itself). On such a device the memory of a writeback
 *     I/O does not change until its end_io, as the kernel's stable_writes:
 *     a write into a folio with wb_ios > 0 waits for them to end (the
 *     kernel's folio_wait_stable(); the whole folio, not just its blocks
 *     in flight) in a device worker, or, in a non-blocking thread, returns
 *     -EAGAIN and is punted; and writeback does not start on a folio a
 *     writer is copying into (users > 0): a background pass skips it, a
 *     sync pass waits for the memcpy. Both checks are under f->lock, so a
 *     writer and a writeback I/O never overlap on one folio. On every
 *     other device (ram, aio, nbd, null) pages are not stable, as the
 *     kernel without stable_writes: a writer may copy into a block while a
 *     writeback I/O reads the same memory; the writer sets the block dirty
 *     after its copy, so it is written again and the device ends with the
 *     last data (the I/O in flight may carry a mix of both versions).
 *     ThreadSanitizer sees this as a race on the data bytes. Their cost of
 *     the rule is one predictable branch on dev->stable_writes per folio
 *     written and per folio taken for writeback.
 *  8. A write never waits for a read of a block it writes in part: the
 *     block becomes partial, or its record grows. Two shapes fall back to
 *     reading the block first, both rare: a second write to a partial block
 *     that neither overlaps nor touches its range, and a folio whose
 *     PC_PART_SLOTS records are all in use. Partial writes to a block that
 *     is not uptodate take the exclusive hold, so two of them arriving at
 *     once (FUSE may send the two halves of one write in parallel) run one
 *     after the other, and the second merges its range into the first's.
 *  9. The rest of a partial block is read only when something needs the
 *     whole block: a read of a byte not written, writeback of a block that
 *     is still partial (rmw = cache: all of it; rmw = device: to whole
 *     logical blocks), or a discard or zero-range that cuts through it.
 *
 * Block state (per cache block b of a folio; "excl" is the exclusive hold,
 * "shared" a writer's shared hold):
 *
 *   empty    --fill (excl)--------------------------------> clean
 *   empty    --write of the whole block (shared)----------> dirty
 *   empty    --write of part (excl, a record free)--------> partial
 *   partial  --write touching or overlapping its range----> partial (range grows),
 *               (excl)                                       or dirty once whole
 *   partial  --write of the whole block (shared)----------> dirty
 *   partial  --read of the block, writeback with rmw =----> dirty (the rest read
 *               cache, discard cutting through it (excl)     around the range)
 *   partial  --writeback, rmw = device---------------------> empty + PART_WB record
 *               (range completed to logical blocks)          (the record goes when the
 *                                                             write completes)
 *   empty, partial --write of a shape no record holds-----> read first, then dirty
 *   clean    --write (shared)-----------------------------> dirty
 *   dirty    --writeback submit---------------------------> clean (wb_ios > 0)
 *   wb done  --error, on_error = keep---------------------> dirty (or partial) again
 *   clean    --direct write/discard (excl)----------------> empty
 *
 * Folio lifecycle: free -> (alloc) lru -> (scan finds it dirty) parked ->
 * (writeback leaves it clean) lru -> (evicted: ref 0, clean) -> reused.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <stdio.h>

#include "../backends/lib/copy.h"
#include "../backends/lib/log.h"
#ifdef __SANITIZE_THREAD__
/* ThreadSanitizer's runtime has them; gcc 12's sanitizer headers do not declare them */
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#endif
#include "conf.h"
#include "pcache_int.h"
#include "stack.h"

#define POOL_ALIGN (2u << 20)

/* ------------------------------------------------------------------- pool */

static unsigned ilog2_u64(uint64_t v)
{
	return 63 - (unsigned)__builtin_clzll(v);
}

static void folio_part_reset(struct pc_folio *f)
{
	uint32_t i;

	for (i = 0; i < PC_PART_SLOTS; i++)
		f->part[i] = (struct pc_part){ .blk = PART_FREE };
	f->nr_part = 0;
}

struct pc_cache *pc_cache_create(const struct pc_cache_params *p)
{
	struct pc_cache *pc;
	size_t nr, i;
	char *map;
	int err;

	if (!blk_is_pow2(p->folio_size) || p->folio_size < 4096 || p->folio_size > (2u << 20))
		return ERR_PTR(-EINVAL);
	nr = p->size / p->folio_size;
	if (nr < 8 || nr > UINT32_MAX)
		return ERR_PTR(-EINVAL);

	pc = calloc(1, sizeof(*pc));
	if (!pc)
		return ERR_PTR(-ENOMEM);
	/*
	 * The two waited on with a timeout run on CLOCK_MONOTONIC: an
	 * attribute to make, which can fail (a positive errno). A cache whose
	 * bounded waits would run on the wall clock is not made at all.
	 */
	err = -blk_cond_init(&pc->free_cond);
	if (err)
		goto out_free;
	err = -blk_cond_init(&pc->fl_cond);
	if (err)
		goto out_free_cond;
	err = -ENOMEM;
	pthread_mutex_init(&pc->lock, NULL);
	pthread_cond_init(&pc->dev_cond, NULL);
	pthread_mutex_init(&pc->fl_lock, NULL);
	list_init(&pc->free);
	list_init(&pc->lru);
	list_init(&pc->parked);
	list_init(&pc->devs);
	pc->nr_folios = (uint32_t)nr;
	pc->folio_size = p->folio_size;
	pc->folio_shift = ilog2_u64(p->folio_size);
	pc->dirty_background = p->dirty_background;
	pc->dirty_limit = p->dirty_limit;
	pc->dirty_expire_ms = p->dirty_expire_ms;

	/*
	 * The pool is touched once, here: first touch of fresh memory runs at
	 * 0.35 GB/s on this machine against ~21 GB/s for memory already
	 * touched (measured here), so the write path must never fault pages in.
	 * Aligned to 2 MiB so transparent huge pages can back it.
	 */
	pc->mem_len = nr * p->folio_size;
	pc->map_len = pc->mem_len + POOL_ALIGN;
	map = mmap(NULL, pc->map_len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (map == MAP_FAILED)
		goto out_locks;
	pc->map_base = map;
	pc->mem = (char *)(((uintptr_t)map + POOL_ALIGN - 1) & ~(uintptr_t)(POOL_ALIGN - 1));
	madvise(pc->mem, pc->mem_len, MADV_HUGEPAGE);
	memset(pc->mem, 0, pc->mem_len);

	/* bitmaps sized for the smallest block (512 bytes): 2 bits per block */
	pc->bm_words = (uint32_t)BM_WORDS(2 * (p->folio_size / 512));
	pc->folios = calloc(nr, sizeof(*pc->folios));
	pc->bitmaps = calloc(nr * pc->bm_words, sizeof(unsigned long));
	if (!pc->folios || !pc->bitmaps)
		goto out_unmap;
	for (i = 0; i < nr; i++) {
		struct pc_folio *f = &pc->folios[i];

		pthread_mutex_init(&f->lock, NULL);
		pthread_cond_init(&f->wait, NULL);
		f->data = pc->mem + i * p->folio_size;
		f->state = pc->bitmaps + i * pc->bm_words;
		f->where = FOLIO_FREE;
		folio_part_reset(f);
		list_init(&f->dev_node);
		list_add_tail(&f->lru, &pc->free);
	}
	return pc;

out_unmap:
	free(pc->folios);
	free(pc->bitmaps);
	munmap(map, pc->map_len);
out_locks:
	pthread_mutex_destroy(&pc->fl_lock);
	pthread_cond_destroy(&pc->dev_cond);
	pthread_mutex_destroy(&pc->lock);
	pthread_cond_destroy(&pc->fl_cond);
out_free_cond:
	pthread_cond_destroy(&pc->free_cond);
out_free:
	free(pc);
	return ERR_PTR(err);
}

int pc_cache_start(struct pc_cache *pc)
{
	return wb_flusher_start(pc);
}

void pc_cache_stop(struct pc_cache *pc)
{
	wb_flusher_stop(pc);
}

void pc_cache_destroy(struct pc_cache *pc)
{
	uint32_t i;

	if (!pc)
		return;
	wb_flusher_stop(pc);
	assert(list_empty(&pc->devs));
	for (i = 0; i < pc->nr_folios; i++) {
		pthread_mutex_destroy(&pc->folios[i].lock);
		pthread_cond_destroy(&pc->folios[i].wait);
	}
	free(pc->folios);
	free(pc->bitmaps);
	munmap(pc->map_base, pc->map_len);
	pthread_mutex_destroy(&pc->lock);
	pthread_cond_destroy(&pc->free_cond);
	pthread_cond_destroy(&pc->dev_cond);
	pthread_mutex_destroy(&pc->fl_lock);
	pthread_cond_destroy(&pc->fl_cond);
	free(pc);
}

/* ---------------------------------------------------------------- devices */

struct pc_dev *pc_dev_add(struct pc_cache *pc, const char *name,
			  struct blk_backend *be, uint32_t cache_block)
{
	struct blk_geometry geo;
	struct pc_dev *dev;
	uint32_t cblk;
	int err;

	be->ops->geometry(be, &geo);
	if (!geo.dma_align)
		geo.dma_align = 1;
	cblk = conf_cache_block(&geo, cache_block);
	if (!blk_is_pow2(geo.lbs) || geo.lbs < 512 || !blk_is_pow2(cblk) || cblk < geo.lbs ||
	    cblk > pc->folio_size || geo.size % cblk || !geo.max_io || geo.max_io % geo.lbs)
		return ERR_PTR(-EINVAL);

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return ERR_PTR(-ENOMEM);
	dev->name = strdup(name);
	dev->hash_bits = 6;
	while ((1u << dev->hash_bits) < pc->nr_folios)
		dev->hash_bits++;
	dev->hash = calloc(1u << dev->hash_bits, sizeof(*dev->hash));
	if (!dev->name || !dev->hash) {
		free(dev->name);
		free(dev->hash);
		free(dev);
		return ERR_PTR(-ENOMEM);
	}
	dev->pc = pc;
	dev->be = be;
	dev->bt = bt_dev_get(name);
	dev->geo = geo;
	dev->cblk = cblk;
	dev->cblk_shift = ilog2_u64(cblk);
	dev->nr_blks = pc->folio_size / cblk;
	/* a physical block inside one folio can be written whole from the cache */
	if (geo.pbs > cblk && geo.pbs <= pc->folio_size)
		dev->ppb = geo.pbs / cblk;
	dev->max_io = geo.max_io;
	dev->stable_writes = stack_stable_writes(be);
	dev->read_ahead = 0;	/* off until the owner sets it (conf: 128K) */
	list_init(&dev->folios);
	pthread_mutex_init(&dev->err_lock, NULL);
	pc_stat_dev_init(dev);
	dev->err_rl = (struct blk_ratelimit)BLK_RATELIMIT_INIT(5000, 5);
	err = be_pool_init(&dev->sio_pool, PC_SIO_POOL, pc_sio_size(), 64);
	if (!err)
		err = be_pool_init(&dev->wb_pool, PC_WB_POOL, wb_io_size(wb_io_cap(dev, geo.max_io)), 64);
	if (!err)
		err = pc_workers_start(dev);
	if (err) {
		be_pool_destroy(&dev->sio_pool);
		be_pool_destroy(&dev->wb_pool);
		pthread_mutex_destroy(&dev->err_lock);
		pc_stat_dev_destroy(dev);
		free(dev->name);
		free(dev->hash);
		free(dev);
		return ERR_PTR(err);
	}

	pthread_mutex_lock(&pc->lock);
	if (pc->nr_devs == PC_MAX_DEVS) {
		pthread_mutex_unlock(&pc->lock);
		pc_workers_stop(dev);
		be_pool_destroy(&dev->sio_pool);
		be_pool_destroy(&dev->wb_pool);
		pthread_mutex_destroy(&dev->err_lock);
		pc_stat_dev_destroy(dev);
		free(dev->name);
		free(dev->hash);
		free(dev);
		return ERR_PTR(-ENOSPC);
	}
	pc->nr_devs++;
	list_add_tail(&dev->node, &pc->devs);
	pthread_mutex_unlock(&pc->lock);
	return dev;
}

static void folio_reset_locked(struct pc_cache *pc, struct pc_folio *f)
{
	memset(f->state, 0, pc->bm_words * sizeof(unsigned long));
	folio_part_reset(f);
	f->nr_dirty = 0;
	f->wb_ios = 0;
	f->users = 0;
	f->excl = false;
}

/* Take @f out of its device's index. Caller holds pc->lock. */
static void folio_detach_locked(struct pc_folio *f)
{
	struct pc_dev *dev = f->dev;
	uint32_t h = (uint32_t)((f->index * 0x9E3779B97F4A7C15ull) >> (64 - dev->hash_bits));
	struct pc_folio **pp = &dev->hash[h];

	while (*pp != f)
		pp = &(*pp)->hnext;
	*pp = f->hnext;
	f->hnext = NULL;
	list_del_init(&f->dev_node);
	__atomic_store_n(&dev->nr_folios, dev->nr_folios - 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&dev->uptodate_blks, bm_count(f->state, 0, dev->nr_blks),
			   __ATOMIC_RELAXED);
	f->dev = NULL;
}

/*
 * The devices now, each held (dev->users) so that it stays until
 * pc_devs_put(), also when pc_dev_remove() runs meanwhile: the flusher and
 * a writer without a flusher walk them without pc->lock.
 */
int pc_devs_get(struct pc_cache *pc, struct pc_dev **v)
{
	struct list_head *pos, *tmp;
	int n = 0;

	pthread_mutex_lock(&pc->lock);
	list_for_each_safe(pos, tmp, &pc->devs) {
		v[n] = list_entry(pos, struct pc_dev, node);
		v[n++]->users++;
	}
	pthread_mutex_unlock(&pc->lock);
	return n;
}

void pc_devs_put(struct pc_cache *pc, struct pc_dev **v, int n)
{
	int i;

	pthread_mutex_lock(&pc->lock);
	for (i = 0; i < n; i++)
		if (!--v[i]->users && list_empty(&v[i]->node))
			pthread_cond_broadcast(&pc->dev_cond);
	pthread_mutex_unlock(&pc->lock);
}

void pc_dev_remove(struct pc_dev *dev)
{
	struct pc_cache *pc = dev->pc;
	struct list_head *pos, *n;

	pc_workers_stop(dev);

	pthread_mutex_lock(&pc->lock);
	/* out of the list, and no one still walking it holds this device */
	list_del_init(&dev->node);
	pc->nr_devs--;
	while (dev->users)
		pthread_cond_wait(&pc->dev_cond, &pc->lock);
	list_for_each_safe(pos, n, &dev->folios) {
		struct pc_folio *f = list_entry(pos, struct pc_folio, dev_node);

		assert(!f->ref && !f->wb_ios);
		if (f->nr_dirty) {
			__atomic_sub_fetch(&pc->dirty_bytes, (uint64_t)f->nr_dirty * dev->cblk,
					   __ATOMIC_RELAXED);
		}
		folio_detach_locked(f);
		folio_reset_locked(pc, f);
		f->where = FOLIO_FREE;
		list_move_tail(&f->lru, &pc->free);
	}
	pthread_mutex_unlock(&pc->lock);
	be_pool_destroy(&dev->sio_pool);
	be_pool_destroy(&dev->wb_pool);
	pthread_mutex_destroy(&dev->err_lock);
	pc_stat_dev_destroy(dev);
	free(dev->hash);
	free(dev->name);
	free(dev);
}

int pc_dev_set_max_io(struct pc_dev *dev, uint64_t bytes)
{
	if (!bytes || bytes % dev->geo.pbs || bytes > dev->geo.max_io)
		return -EINVAL;
	__atomic_store_n(&dev->max_io, (uint32_t)bytes, __ATOMIC_RELAXED);
	return 0;
}

uint32_t pc_dev_max_io(const struct pc_dev *dev)
{
	return (uint32_t)dev_max_io(dev);
}

void pc_dev_set_policy(struct pc_dev *dev, bool rmw_device, bool on_error_drop)
{
	dev->rmw_device = rmw_device;
	dev->on_error_drop = on_error_drop;
}

void pc_dev_set_write_through(struct pc_dev *dev, bool on)
{
	__atomic_store_n(&dev->write_through, on, __ATOMIC_RELAXED);
}

bool pc_dev_write_through(const struct pc_dev *dev)
{
	return __atomic_load_n(&dev->write_through, __ATOMIC_RELAXED);
}

/* Must this write be on stable storage before its reply? */
static bool aio_sync_write(const struct pc_aio *aio)
{
	return aio->fua || pc_dev_write_through(aio->dev);
}

int pc_dev_set_read_ahead(struct pc_dev *dev, uint64_t bytes)
{
	if (bytes > (64u << 20) || bytes % 512)
		return -EINVAL;
	__atomic_store_n(&dev->read_ahead, (uint32_t)bytes, __ATOMIC_RELAXED);
	return 0;
}

uint32_t pc_dev_read_ahead(const struct pc_dev *dev)
{
	return __atomic_load_n(&dev->read_ahead, __ATOMIC_RELAXED);
}

const char *pc_dev_name(const struct pc_dev *dev)
{
	return dev->name;
}

void pc_dev_geometry(const struct pc_dev *dev, struct blk_geometry *geo)
{
	*geo = dev->geo;
}

uint32_t pc_dev_cache_block(const struct pc_dev *dev)
{
	return dev->cblk;
}

void pc_dev_stats(struct pc_dev *dev, struct pc_stats *st)
{
	pc_stat_sum(dev, st);
	st->dirty_bytes = __atomic_load_n(&dev->dirty_bytes, __ATOMIC_RELAXED);
	st->writeback_bytes = __atomic_load_n(&dev->wb_bytes, __ATOMIC_RELAXED);
	st->cached_bytes = __atomic_load_n(&dev->uptodate_blks, __ATOMIC_RELAXED) * dev->cblk;
	st->pool_fallback_allocs = __atomic_load_n(&dev->sio_pool.nr_allocs, __ATOMIC_RELAXED) +
				   __atomic_load_n(&dev->wb_pool.nr_allocs, __ATOMIC_RELAXED);
}

/* ----------------------------------------------------------------- folios */

static inline uint32_t folio_hash(const struct pc_dev *dev, uint64_t index)
{
	return (uint32_t)((index * 0x9E3779B97F4A7C15ull) >> (64 - dev->hash_bits));
}

static struct pc_folio *folio_find_locked(struct pc_dev *dev, uint64_t index)
{
	struct pc_folio *f = dev->hash[folio_hash(dev, index)];

	while (f && f->index != index)
		f = f->hnext;
	return f;
}

/*
 * folio_check(): folio_sanity() under assert(), in the test builds only
 * (-DBLKFS_FOLIO_SANITY: GNUmakefile's CHECKS=1). It walks every block of
 * the folio on every buffered write: 4096 with 2 MiB folios of 512-byte
 * blocks. tools/blkfs-checkcost (three runs of 5-7, a 2-CPU VM shared
 * with other work) put it between -6% and +15% of the daemon's CPU time
 * per GiB of fio 4k randwrite and between -12% and +36% for dd bs=4K
 * (medians): nowhere shown under the 2% the installed build may spend on a
 * check, so the installed build goes without it.
 */
#ifdef BLKFS_FOLIO_SANITY
#define folio_check(dev, f) assert(folio_sanity(dev, f))
#else
#define folio_check(dev, f) ((void)0)
#endif

#if !defined(NDEBUG) && defined(BLKFS_FOLIO_SANITY)
/* Invariants 2 and 6 for one folio. Caller holds f->lock. */
static bool folio_sanity(const struct pc_dev *dev, const struct pc_folio *f)
{
	uint32_t n = dev->nr_blks, b, i, used = 0;

	for (i = 0; i < PC_PART_SLOTS; i++) {
		const struct pc_part *p = &f->part[i];

		if (p->blk == PART_FREE)
			continue;
		used++;
		if (p->blk >= n || bm_test(f->state, p->blk) ||
		    p->start >= p->end || p->end > dev->cblk ||
		    (p->start == 0 && p->end == dev->cblk))
			return false;	/* a record of an uptodate block, or a bad range */
		if (!bm_test(f->state, n + p->blk) && !(p->flags & PART_WB))
			return false;	/* neither partial nor in flight */
		for (b = i + 1; b < PC_PART_SLOTS; b++)
			if (f->part[b].blk == p->blk)
				return false;	/* two records for one block */
	}
	if (used != f->nr_part)
		return false;
	for (b = 0; b < n; b++) {
		if (bm_test(f->state, n + b) && !bm_test(f->state, b) &&
		    !folio_part_find_locked((struct pc_folio *)f, b))
			return false;	/* dirty, not uptodate, no record of what is valid */
	}
	return bm_count(f->state, n, n) == f->nr_dirty;
}
#endif

#ifdef BLKFS_TEST_HOOKS
struct pc_test_hooks pc_test_hooks;
#define PC_TEST_HOOK(name, ...) \
	do { if (pc_test_hooks.name) pc_test_hooks.name(__VA_ARGS__); } while (0)
#else
#define PC_TEST_HOOK(name, ...) do { } while (0)
#endif

/*
 * The last put of a folio wakes a thread that waits for one
 * (pc_wait_for_folio_locked()) without taking pc->lock when none waits.
 * No wake-up is lost: the put drops the reference and then reads
 * alloc_waiters; a waiter raises alloc_waiters and then, under pc->lock,
 * looks again for a folio nobody holds before it waits (folio_reusable_locked()).
 * Both sides sequentially consistent, so one of them sees the other: the
 * waiter sees the reference gone, or the put sees the waiter and
 * broadcasts under pc->lock, which the waiter holds until it waits.
 */
void folio_put(struct pc_folio *f)
{
	struct pc_dev *dev = f->dev;
	int ref = __atomic_sub_fetch(&f->ref, 1, __ATOMIC_SEQ_CST);
	bool waiters;

	assert(ref >= 0);
	if (ref || !dev)
		return;
	waiters = __atomic_load_n(&dev->pc->alloc_waiters, __ATOMIC_SEQ_CST);
	PC_TEST_HOOK(put_idle, f);
	if (waiters) {
		pthread_mutex_lock(&dev->pc->lock);
		pthread_cond_broadcast(&dev->pc->free_cond);
		pthread_mutex_unlock(&dev->pc->lock);
	}
}

void folio_unpark(struct pc_cache *pc, struct pc_folio *f)
{
	pthread_mutex_lock(&pc->lock);
	if (f->where == FOLIO_PARKED) {
		pthread_mutex_lock(&f->lock);
		if (!f->nr_dirty && !f->wb_ios) {
			list_move_tail(&f->lru, &pc->lru);
			f->where = FOLIO_LRU;
		}
		pthread_mutex_unlock(&f->lock);
	}
	if (pc->alloc_waiters)
		pthread_cond_broadcast(&pc->free_cond);
	pthread_mutex_unlock(&pc->lock);
}

void folio_account_dirty_locked(struct pc_dev *dev, struct pc_folio *f, long nr)
{
	uint64_t bytes;

	if (!nr)
		return;
	if (nr > 0) {
		if (!f->nr_dirty)
			f->dirtied_ms = blk_now_ms();
		f->nr_dirty += (uint32_t)nr;
		bytes = (uint64_t)nr << dev->cblk_shift;
		__atomic_add_fetch(&dev->dirty_bytes, bytes, __ATOMIC_RELAXED);
		__atomic_add_fetch(&dev->pc->dirty_bytes, bytes, __ATOMIC_RELAXED);
	} else {
		assert(f->nr_dirty >= (uint32_t)-nr);
		f->nr_dirty -= (uint32_t)-nr;
		bytes = (uint64_t)-nr << dev->cblk_shift;
		__atomic_sub_fetch(&dev->dirty_bytes, bytes, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&dev->pc->dirty_bytes, bytes, __ATOMIC_RELAXED);
	}
}

static void folio_wait_locked(struct pc_folio *f)
{
	f->waiters++;
	pthread_cond_wait(&f->wait, &f->lock);
	f->waiters--;
}

static void folio_wake_locked(struct pc_folio *f)
{
	if (f->waiters)
		pthread_cond_broadcast(&f->wait);
}

void folio_wait_wb_locked(struct pc_folio *f)
{
	while (f->wb_ios)
		folio_wait_locked(f);
}

void folio_wait_idle_locked(const struct pc_dev *dev, struct pc_folio *f)
{
	while (f->wb_ios || folio_wb_blocked_locked(dev, f))
		folio_wait_locked(f);
}

/* Exclusive hold: no shared writer copying, no other exclusive holder. */
void folio_excl_begin_locked(struct pc_folio *f)
{
	while (f->excl || f->users)
		folio_wait_locked(f);
	f->excl = true;
}

void folio_excl_end_locked(struct pc_folio *f)
{
	assert(f->excl);
	f->excl = false;
	folio_wake_locked(f);
}

/*
 * Find a folio to reuse: the free list first, then the least recently used
 * clean folio nobody holds. Dirty folios met on the way are parked, so the
 * scan does not meet them again until writeback leaves them clean.
 */
static struct pc_folio *folio_alloc_locked(struct pc_cache *pc)
{
	struct list_head *pos, *n;
	struct pc_folio *f;

	if (!list_empty(&pc->free)) {
		f = list_first_entry(&pc->free, struct pc_folio, lru);
		list_del_init(&f->lru);
		return f;
	}
	list_for_each_safe(pos, n, &pc->lru) {
		bool busy;

		f = list_entry(pos, struct pc_folio, lru);
		if (__atomic_load_n(&f->ref, __ATOMIC_ACQUIRE))
			continue;
		pthread_mutex_lock(&f->lock);
		busy = f->nr_dirty || f->wb_ios;
		pthread_mutex_unlock(&f->lock);
		if (busy) {
			list_move_tail(&f->lru, &pc->parked);
			f->where = FOLIO_PARKED;
			continue;
		}
		list_del_init(&f->lru);
		folio_detach_locked(f);
		folio_reset_locked(pc, f);
		return f;
	}
	return NULL;
}

/*
 * Is there a folio folio_alloc_locked() may take now: a free one, or one
 * on the LRU that nobody holds (dirty or not: the next scan parks a dirty
 * one)? Called after raising alloc_waiters (see folio_put()). Caller holds
 * pc->lock.
 */
static bool folio_reusable_locked(struct pc_cache *pc)
{
	struct pc_folio *f;

	if (!list_empty(&pc->free))
		return true;
	list_for_each_entry(f, &pc->lru, lru)
		if (!__atomic_load_n(&f->ref, __ATOMIC_SEQ_CST))
			return true;
	return false;
}

/*
 * Wait on free_cond for @ms at most: the bound covers what signals no one
 * (a device's writes failing, dirty data dropping); a folio freed by its
 * last put or turned clean by writeback wakes the waiter at once. A test
 * build can make the wait unbounded (pc_test_hooks.no_poll), to show that
 * the wake-ups alone suffice.
 */
/*
 * The bounds: without a flusher, the waiter itself wrote back and found
 * nothing to write (every folio is held by another thread, which gives it
 * back within a request): a short look again. With the flusher, writeback
 * is under way and its folios free themselves and wake the waiter: the
 * bound only covers the rare wake-up nobody sends. Both were chosen with
 * the first folio allocator, not measured; a test build runs with no
 * bound at all (no_poll) and the suites pass.
 */
#define PC_WAIT_HELD_MS 10		/* no flusher, nothing to write */
#define PC_WAIT_WRITEBACK_MS 100	/* the flusher is writing back */

static void pc_wait_free_locked(struct pc_cache *pc, unsigned int ms)
{
#ifdef BLKFS_TEST_HOOKS
	if (pc_test_hooks.no_poll) {
		pthread_cond_wait(&pc->free_cond, &pc->lock);
		return;
	}
#endif
	blk_cond_wait_ms(&pc->free_cond, &pc->lock, ms);
}

/*
 * No folio is free or clean: get writeback going and wait for it. Caller
 * holds pc->lock; it is dropped and retaken. Returns -errno when waiting
 * cannot help (the dirty data belongs to @dev and its writes fail).
 */
static int pc_wait_for_folio_locked(struct pc_cache *pc, struct pc_dev *dev)
{
	uint64_t bytes;
	int err;

	if (!__atomic_load_n(&pc->flusher_running, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&pc->lock);
		err = wb_all_sync(pc, dev, &bytes);
		pthread_mutex_lock(&pc->lock);
		if (err && wb_dev_failing(dev))
			return err;	/* our own data cannot leave: waiting would loop forever */
		if (!bytes) {
			/* nothing to write: folios are held by other threads */
			__atomic_add_fetch(&pc->alloc_waiters, 1, __ATOMIC_SEQ_CST);
			PC_TEST_HOOK(before_wait, pc);
			if (!folio_reusable_locked(pc))
				pc_wait_free_locked(pc, PC_WAIT_HELD_MS);
			__atomic_sub_fetch(&pc->alloc_waiters, 1, __ATOMIC_RELAXED);
		}
		return 0;
	}
	__atomic_add_fetch(&pc->alloc_waiters, 1, __ATOMIC_SEQ_CST);
	wb_kick(pc);
	PC_TEST_HOOK(before_wait, pc);
	if (!folio_reusable_locked(pc))
		pc_wait_free_locked(pc, PC_WAIT_WRITEBACK_MS);
	__atomic_sub_fetch(&pc->alloc_waiters, 1, __ATOMIC_RELAXED);
	if (list_empty(&pc->free) && list_empty(&pc->lru) && (err = wb_dev_failing(dev)))
		return err;
	return 0;
}

/*
 * Get a referenced folio for @index, creating it (all blocks not uptodate)
 * if it is not cached. With !@may_wait, returns NULL instead of waiting for
 * writeback to free one (the caller holds other folios).
 */
static struct pc_folio *folio_get_or_create(struct pc_dev *dev, uint64_t index,
					    bool may_wait, int *errp)
{
	struct pc_cache *pc = dev->pc;
	struct pc_folio *f;
	uint32_t h;
	int err;

	pthread_mutex_lock(&pc->lock);
	for (;;) {
		f = folio_find_locked(dev, index);
		if (f) {
			folio_get(f);
			if (f->where == FOLIO_LRU)
				list_move_tail(&f->lru, &pc->lru);
			break;
		}
		f = folio_alloc_locked(pc);
		if (f) {
			f->dev = dev;
			f->index = index;
			f->ref = 1;
			h = folio_hash(dev, index);
			f->hnext = dev->hash[h];
			dev->hash[h] = f;
			list_add_tail(&f->dev_node, &dev->folios);
			/* the fence: see dev_cached_any() */
			__atomic_store_n(&dev->nr_folios, dev->nr_folios + 1, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			f->where = FOLIO_LRU;
			list_add_tail(&f->lru, &pc->lru);
			break;
		}
		if (!may_wait)
			break;
		err = pc_wait_for_folio_locked(pc, dev);
		if (err) {
			*errp = err;
			break;
		}
	}
	pthread_mutex_unlock(&pc->lock);
	return f;
}

static int folio_cmp(const void *a, const void *b)
{
	const struct pc_folio *x = *(struct pc_folio *const *)a;
	const struct pc_folio *y = *(struct pc_folio *const *)b;

	return x->index < y->index ? -1 : x->index > y->index;
}

int pc_collect(struct pc_dev *dev, uint64_t pos, uint64_t len, bool only_dirty_or_wb,
	       uint64_t older_than_ms, struct pc_folio ***out)
{
	struct pc_cache *pc = dev->pc;
	struct pc_folio **v, *f;
	struct list_head *p, *n;
	uint64_t first = pos >> pc->folio_shift, last = 0, i;
	size_t cap, nr = 0;
	bool by_index;

	if (len)
		last = (pos + len - 1) >> pc->folio_shift;
	pthread_mutex_lock(&pc->lock);
	if (!dev->nr_folios) {
		/* the O_DIRECT path asks on every request: nothing cached, nothing to do */
		pthread_mutex_unlock(&pc->lock);
		*out = NULL;
		return 0;
	}
	by_index = len && last - first + 1 < dev->nr_folios;
	cap = by_index ? last - first + 1 : dev->nr_folios;
	v = malloc((cap ? cap : 1) * sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&pc->lock);
		return -ENOMEM;
	}
	if (by_index) {
		for (i = first; i <= last; i++) {
			f = folio_find_locked(dev, i);
			if (f)
				v[nr++] = f;
		}
	} else {
		list_for_each_safe(p, n, &dev->folios) {
			f = list_entry(p, struct pc_folio, dev_node);
			if (!len || (f->index >= first && f->index <= last))
				v[nr++] = f;
		}
	}
	if (only_dirty_or_wb) {
		size_t k = 0;

		for (i = 0; i < nr; i++) {
			bool keep;

			f = v[i];
			pthread_mutex_lock(&f->lock);
			keep = f->wb_ios || (f->nr_dirty && (!older_than_ms ||
							     f->dirtied_ms <= older_than_ms));
			pthread_mutex_unlock(&f->lock);
			if (keep)
				v[k++] = f;
		}
		nr = k;
	}
	for (i = 0; i < nr; i++)
		folio_get(v[i]);
	pthread_mutex_unlock(&pc->lock);
	if (!by_index)
		qsort(v, nr, sizeof(*v), folio_cmp);
	*out = v;
	return (int)nr;
}

void pc_put_all(struct pc_folio **v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		folio_put(v[i]);
	free(v);
}

/* -------------------------------------------------------------- errseq */

/*
 * errseq, as the kernel's lib/errseq.c: the low 12 bits hold the last
 * errno, bit 12 says someone has seen it, the rest count errors.
 */
#define ERRSEQ_ERRMASK 0xfffu
#define ERRSEQ_SEEN 0x1000u
#define ERRSEQ_CTR_INC 0x2000u

void pc_errseq_set(struct pc_dev *dev, int err)
{
	pc_errseq_t old, new;

	assert(err < 0 && -err <= (int)ERRSEQ_ERRMASK);
	pthread_mutex_lock(&dev->err_lock);
	old = dev->wb_err;
	new = (old & ~(ERRSEQ_ERRMASK | ERRSEQ_SEEN)) | (pc_errseq_t)-err;
	if (old & ERRSEQ_SEEN || !old)
		new += ERRSEQ_CTR_INC;
	dev->wb_err = new;
	pthread_mutex_unlock(&dev->err_lock);
}

pc_errseq_t pc_errseq_sample(struct pc_dev *dev)
{
	pc_errseq_t v;

	pthread_mutex_lock(&dev->err_lock);
	v = dev->wb_err;
	pthread_mutex_unlock(&dev->err_lock);
	/* an error nobody has seen yet is reported to this opener too */
	return (v & ERRSEQ_SEEN) ? v : 0;
}

static int errseq_check_and_advance(struct pc_dev *dev, pc_errseq_t *since)
{
	int err = 0;

	pthread_mutex_lock(&dev->err_lock);
	if (dev->wb_err != *since) {
		dev->wb_err |= ERRSEQ_SEEN;
		*since = dev->wb_err;
		err = -(int)(dev->wb_err & ERRSEQ_ERRMASK);
	}
	pthread_mutex_unlock(&dev->err_lock);
	return err;
}

/* ------------------------------------------------------------ write path */

/* Read bytes [off, off+len) of @f's range of the device into @buf (rmw: counted so). */
static int folio_read_bytes(struct pc_dev *dev, struct pc_folio *f, uint32_t off, uint32_t len,
			    char *buf)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	STAT_ADD(dev, rmw_read_bytes, len);
	return pc_submit_split_wait(dev, BLK_READ, folio_pos(dev->pc, f) + off, len, &iov, 1);
}

/* Read cache blocks [blk, blk+nr) of @f into @buf (rmw: counted so). */
int folio_read_span(struct pc_dev *dev, struct pc_folio *f, uint32_t blk, uint32_t nr, char *buf)
{
	return folio_read_bytes(dev, f, blk << dev->cblk_shift, nr << dev->cblk_shift, buf);
}

/* Read whole cache blocks [blk, blk+nr) of @f from the backend. */
int folio_read_blocks(struct pc_dev *dev, struct pc_folio *f, uint32_t blk, uint32_t nr)
{
	STAT_ADD(dev, cache_misses, nr);
	return folio_read_span(dev, f, blk, nr, f->data + ((size_t)blk << dev->cblk_shift));
}

void folio_part_drop_locked(struct pc_folio *f, uint32_t b0, uint32_t b1)
{
	uint32_t i;

	for (i = 0; f->nr_part && i < PC_PART_SLOTS; i++)
		if (f->part[i].blk >= b0 && f->part[i].blk < b1 && f->part[i].blk != PART_FREE)
			folio_part_free_locked(f, &f->part[i]);
}

/*
 * Record that bytes [s, e) of block @b of @f are valid (written). An
 * uptodate block needs nothing; a record that exists grows (the caller
 * made sure the two ranges touch); a new one takes a free slot (the caller
 * made sure there is one). A record that comes to cover the whole block
 * makes it uptodate. Returns 1 if the block turned uptodate, else 0.
 * Caller holds f->lock.
 */
static int folio_part_merge_locked(struct pc_dev *dev, struct pc_folio *f, uint32_t b,
				   uint32_t s, uint32_t e)
{
	struct pc_part *p;
	uint32_t i;

	if (bm_test(f->state, b))
		return 0;
	p = folio_part_find_locked(f, b);
	if (p) {
		assert(s <= p->end && e >= p->start);
		p->start = s < p->start ? s : p->start;
		p->end = e > p->end ? e : p->end;
	} else {
		for (i = 0; f->part[i].blk != PART_FREE; i++)
			assert(i + 1 < PC_PART_SLOTS);
		p = &f->part[i];
		*p = (struct pc_part){ .blk = b, .start = s, .end = e };
		f->nr_part++;
	}
	if (p->start || p->end != dev->cblk)
		return 0;
	folio_part_free_locked(f, p);
	bm_set_range(f->state, b, 1);
	return 1;
}

/*
 * Bytes [off, off+n) of @f were written: blocks covered whole turn
 * uptodate (their records go), a head or tail block covered in part keeps
 * or grows its record, and every block touched turns dirty, all under one
 * acquisition of f->lock. Caller holds f->lock.
 */
static void folio_set_written_locked(struct pc_dev *dev, struct pc_folio *f,
				     uint32_t off, uint32_t n)
{
	uint32_t sh = dev->cblk_shift, mask = dev->cblk - 1, end = off + n;
	uint32_t first = off >> sh, last = (end - 1) >> sh;
	uint32_t whole0 = (off + mask) >> sh, whole1 = end >> sh;	/* [whole0, whole1) */
	size_t up = 0, dirty;

	if (whole0 < whole1) {
		folio_part_drop_locked(f, whole0, whole1);
		up += bm_set_range(f->state, whole0, whole1 - whole0);
	}
	if (first < whole0)
		up += (size_t)folio_part_merge_locked(dev, f, first, off & mask,
						      first == last && (end & mask) ? end & mask :
						      dev->cblk);
	if (last >= whole1 && !(last == first && first < whole0))	/* not the head again */
		up += (size_t)folio_part_merge_locked(dev, f, last, 0, end & mask);
	dirty = bm_set_range(f->state, dev->nr_blks + first, last - first + 1);
	if (up)
		__atomic_add_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
	folio_account_dirty_locked(dev, f, (long)dirty);
	folio_check(dev, f);
}

/* A head or tail block of a write that it covers in part, and is not uptodate. */
struct part_edge {
	uint32_t blk, s, e;	/* the bytes of the write inside the block */
	bool read;		/* no record can hold it: read the block first */
};

/*
 * The partial blocks of writing [off, off+n) into @f that are not
 * uptodate (0, 1 or 2), and whether each can be recorded (invariant 8).
 * Caller holds f->lock.
 */
static int folio_part_edges_locked(struct pc_dev *dev, struct pc_folio *f, uint32_t off,
				   uint32_t n, struct part_edge *edge)
{
	uint32_t sh = dev->cblk_shift, mask = dev->cblk - 1, end = off + n;
	uint32_t first = off >> sh, last = (end - 1) >> sh;
	uint32_t slots = PC_PART_SLOTS - f->nr_part;
	int nr = 0, i;

	if ((off & mask) && !bm_test(f->state, first))
		edge[nr++] = (struct part_edge){ .blk = first, .s = off & mask,
						 .e = first == last && (end & mask) ? end & mask : dev->cblk };
	if ((end & mask) && !bm_test(f->state, last) && !(first == last && (off & mask)))
		edge[nr++] = (struct part_edge){ .blk = last, .s = 0, .e = end & mask };
	for (i = 0; i < nr; i++) {
		struct pc_part *p = folio_part_find_locked(f, edge[i].blk);

		if (p)
			edge[i].read = edge[i].s > p->end || edge[i].e < p->start;
		else if (slots)
			slots--;
		else
			edge[i].read = true;
	}
	return nr;
}

/*
 * A writer's copy into folio memory. Invariant 7: on a device without
 * stable_writes, writeback already in flight may be reading these bytes;
 * the writer marks them dirty after the copy, so they go out again and the
 * device ends with the last data. That race on the data bytes is by design,
 * so ThreadSanitizer is told to look away for the copy (the streaming stores of copy_big() it never sees; the
 * memcpy of a small or unaligned copy it would).
 */
static void folio_copy_in(void *dst, const void *src, size_t n)
{
#ifdef __SANITIZE_THREAD__
	__tsan_ignore_thread_begin();
#endif
	copy_big(dst, src, n);
#ifdef __SANITIZE_THREAD__
	__tsan_ignore_thread_end();
#endif
}

/*
 * Invariant 7: on a stable_writes device, is @f's memory still being read
 * by a writeback I/O? Devices without the flag pay this one branch.
 * Caller holds f->lock.
 */
static inline bool folio_stable_busy_locked(const struct pc_dev *dev, const struct pc_folio *f)
{
	return __builtin_expect(dev->stable_writes, 0) && f->wb_ios;
}

static void folio_wait_stable_locked(const struct pc_dev *dev, struct pc_folio *f)
{
	while (folio_stable_busy_locked(dev, f))
		folio_wait_locked(f);
}

/*
 * Copy @n bytes into @f at @off. With @nowait (a non-blocking thread,
 * pcache.h's rules), -EAGAIN instead of waiting for an exclusive holder,
 * for writeback to end on a stable_writes device (invariant 7), or
 * reading a block first; waiting for other writers' copies is allowed.
 */
static int folio_write(struct pc_dev *dev, struct pc_folio *f, const char *src,
		       uint32_t off, uint32_t n, bool nowait)
{
	struct part_edge edge[2];
	int nr, i, err = 0;

	pthread_mutex_lock(&f->lock);
	/*
	 * An exclusive holder may be dropping the very blocks we look at; on a
	 * stable_writes device a writeback I/O may be reading them (the
	 * kernel's folio_wait_stable()): a device worker waits for its end, a
	 * non-blocking thread punts. Writeback does not start while we copy
	 * (folio_wb_blocked_locked()), so the check holds until we are done.
	 */
	while (f->excl || folio_stable_busy_locked(dev, f)) {
		if (nowait) {
			pthread_mutex_unlock(&f->lock);
			return -EAGAIN;
		}
		folio_wait_locked(f);
	}
	if (!folio_part_edges_locked(dev, f, off, n, edge)) {
		/*
		 * Whole blocks, or partial blocks already uptodate: copy under a
		 * shared hold, so writers of other blocks run in parallel, then
		 * set uptodate and dirty together.
		 */
		f->users++;
		pthread_mutex_unlock(&f->lock);
		PC_TEST_HOOK(copy_begin, f);
		folio_copy_in(f->data + off, src, n);
		pthread_mutex_lock(&f->lock);
		f->users--;
		folio_set_written_locked(dev, f, off, n);
		if (!f->users)
			folio_wake_locked(f);
		pthread_mutex_unlock(&f->lock);
		return 0;
	}

	/*
	 * A block written in part that is not uptodate: exclusive, so that two
	 * such writes to one block (the halves of one FUSE write) take turns
	 * and the second sees the first's record. Nothing is read unless the
	 * shape cannot be recorded (invariant 8). Waiting for the shared
	 * writers to finish their copies is bounded work, allowed with @nowait.
	 */
	if (!nowait) {
		for (;;) {
			folio_excl_begin_locked(f);
			if (!folio_stable_busy_locked(dev, f))
				break;	/* none starts now that we hold it (invariant 7) */
			/*
			 * A writeback started while we waited for the copies:
			 * wait for its end without the hold, which the
			 * flusher's wb_prepare() would otherwise wait behind.
			 */
			folio_excl_end_locked(f);
			folio_wait_stable_locked(dev, f);
		}
	} else {
		while (f->users)
			folio_wait_locked(f);
		if (f->excl || folio_stable_busy_locked(dev, f)) {
			/* taken, or a writeback started, while we waited for the copies */
			pthread_mutex_unlock(&f->lock);
			return -EAGAIN;
		}
		f->excl = true;
	}
	nr = folio_part_edges_locked(dev, f, off, n, edge);
	for (i = 0; nowait && i < nr; i++) {
		if (edge[i].read) {
			folio_excl_end_locked(f);
			pthread_mutex_unlock(&f->lock);
			return -EAGAIN;
		}
	}
	pthread_mutex_unlock(&f->lock);

	for (i = 0; i < nr && !err; i++) {
		if (!edge[i].read)
			continue;
		pthread_mutex_lock(&f->lock);
		if (folio_part_find_locked(f, edge[i].blk)) {
			pthread_mutex_unlock(&f->lock);
			err = folio_complete_parts(dev, f, edge[i].blk, edge[i].blk, true);
		} else {
			pthread_mutex_unlock(&f->lock);
			err = folio_read_blocks(dev, f, edge[i].blk, 1);
			if (!err) {
				pthread_mutex_lock(&f->lock);
				bm_set_range(f->state, edge[i].blk, 1);
				pthread_mutex_unlock(&f->lock);
				__atomic_add_fetch(&dev->uptodate_blks, 1, __ATOMIC_RELAXED);
			}
		}
	}
	if (err)
		STAT_ADD(dev, read_errors, 1);
	else
		folio_copy_in(f->data + off, src, n);

	pthread_mutex_lock(&f->lock);
	if (!err)
		folio_set_written_locked(dev, f, off, n);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	return err;
}

/*
 * Complete a partial block's edges to whole logical blocks (rmw = device):
 * read the logical blocks that hold its range's ends and copy in what the
 * range lacks. Caller holds the exclusive hold.
 */
static int folio_complete_edges(struct pc_dev *dev, struct pc_folio *f, uint32_t b, char *scratch)
{
	uint32_t lbs = dev->geo.lbs, base = b << dev->cblk_shift;
	uint32_t s, e, lo, hi, s_up, e_down;
	struct pc_part *p;
	int err = 0, up;

	pthread_mutex_lock(&f->lock);
	p = folio_part_find_locked(f, b);
	s = p->start;
	e = p->end;
	pthread_mutex_unlock(&f->lock);
	lo = s & ~(lbs - 1);
	hi = (e + lbs - 1) & ~(lbs - 1);
	s_up = (s + lbs - 1) & ~(lbs - 1);
	e_down = e & ~(lbs - 1);
	if (lo == s && hi == e)
		return 0;
	if (hi - lo <= 2 * lbs || s_up >= e_down) {
		/* both ends in one read */
		err = folio_read_bytes(dev, f, base + lo, hi - lo, scratch);
		if (!err) {
			memcpy(f->data + base + lo, scratch, s - lo);
			memcpy(f->data + base + e, scratch + (e - lo), hi - e);
		}
	} else {
		if (lo != s) {
			err = folio_read_bytes(dev, f, base + lo, lbs, scratch);
			if (!err)
				memcpy(f->data + base + lo, scratch, s - lo);
		}
		if (!err && hi != e) {
			err = folio_read_bytes(dev, f, base + e_down, lbs, scratch);
			if (!err)
				memcpy(f->data + base + e, scratch + (e - e_down), hi - e);
		}
	}
	if (err)
		return err;
	pthread_mutex_lock(&f->lock);
	up = folio_part_merge_locked(dev, f, b, lo, hi);
	pthread_mutex_unlock(&f->lock);
	if (up)
		__atomic_add_fetch(&dev->uptodate_blks, 1, __ATOMIC_RELAXED);
	return 0;
}

int folio_complete_parts(struct pc_dev *dev, struct pc_folio *f, uint32_t b0, uint32_t b1,
			 bool whole)
{
	uint32_t sh = dev->cblk_shift, cb = dev->cblk, b;
	char *scratch = NULL;
	int err = 0, ret;

	assert(f->excl);
	for (b = b0; b <= b1; b++) {
		struct pc_part *p;
		uint32_t s, e;

		pthread_mutex_lock(&f->lock);
		p = folio_part_find_locked(f, b);
		s = p ? p->start : 0;
		e = p ? p->end : 0;
		pthread_mutex_unlock(&f->lock);
		if (!p)
			continue;
		if (!scratch && !(scratch = pc_rmw_buf()))
			return -ENOMEM;
		if (!whole) {
			ret = folio_complete_edges(dev, f, b, scratch);
			err = err ? err : ret;
			continue;
		}
		/* the whole block into the bounce buffer, then what the range lacks */
		ret = folio_read_span(dev, f, b, 1, scratch);
		if (ret) {
			err = err ? err : ret;
			continue;
		}
		memcpy(f->data + ((size_t)b << sh), scratch, s);
		memcpy(f->data + ((size_t)b << sh) + e, scratch + e, cb - e);
		pthread_mutex_lock(&f->lock);
		(void)folio_part_merge_locked(dev, f, b, 0, cb);	/* turns uptodate */
		folio_check(dev, f);
		pthread_mutex_unlock(&f->lock);
		__atomic_add_fetch(&dev->uptodate_blks, 1, __ATOMIC_RELAXED);
	}
	return err;
}

/*
 * Copy [pos + *done, pos + len) of @buf into the cache, folio by folio,
 * advancing *done. Returns 0 when all of it is in, -errno on an error (the
 * folio that failed was not changed), or with @nowait -EAGAIN where it
 * would wait: dirty throttling, a free folio, an exclusive holder, a read.
 */
static int write_range(struct pc_dev *dev, const char *src, size_t len, uint64_t pos,
		       size_t *done, bool nowait)
{
	struct pc_cache *pc = dev->pc;
	int err = 0;

	while (*done < len) {
		uint64_t cur = pos + *done;
		uint32_t off = (uint32_t)(cur & (pc->folio_size - 1));
		uint32_t n = pc->folio_size - off;
		struct pc_folio *f;

		if (n > len - *done)
			n = (uint32_t)(len - *done);
		err = wb_balance_dirty(dev, *done == 0, nowait);	/* one pause per request */
		if (err)
			break;
		f = folio_get_or_create(dev, cur >> pc->folio_shift, !nowait, &err);
		if (!f) {
			err = nowait && !err ? -EAGAIN : err;
			break;
		}
		err = folio_write(dev, f, src + *done, off, n, nowait);
		folio_put(f);
		if (err)
			break;
		*done += n;
	}
	return err;
}

static void write_finish(struct pc_aio *aio, int err)
{
	STAT_ADD(aio->dev, user_write_bytes, aio->progress);
	if (aio->progress && aio_sync_write(aio)) {
		/* write through: what it wrote goes to the device and is flushed first */
		aio->op = PC_AIO_WSYNC;
		aio->res = (ssize_t)aio->progress;
		pc_punt(aio);
		return;
	}
	aio->done(aio, aio->progress ? (ssize_t)aio->progress : err);
}

/* A write through, in a worker: its range written back, then the flush. */
static ssize_t write_sync_blocking(struct pc_dev *dev, uint64_t pos, uint64_t len, ssize_t res)
{
	int err = wb_range(dev, pos, len);

	if (!err)
		err = pc_submit_wait(dev, BLK_FLUSH, 0, 0, NULL, 0);
	if (err) {
		/* the data stays dirty (or was dropped, by policy); the next fsync also hears */
		pc_errseq_set(dev, err);
		return err;
	}
	STAT_ADD(dev, write_through_writes, 1);
	return res;
}

void pc_write_async(struct pc_dev *dev, struct pc_aio *aio, const void *buf, size_t len,
		    uint64_t pos)
{
	int err;

	if (pos >= dev->geo.size) {
		aio->done(aio, len ? -ENOSPC : 0);
		return;
	}
	if (len > dev->geo.size - pos)
		len = dev->geo.size - pos;
	STAT_ADD(dev, user_writes, 1);
	pc_aio_init(aio, dev, PC_AIO_WRITE, pos, len);
	aio->wbuf = buf;
	err = write_range(dev, buf, len, pos, &aio->progress, true);
	if (err == -EAGAIN)
		pc_punt(aio);
	else
		write_finish(aio, err);
}

/* ------------------------------------------------------------- read path */

/*
 * Per-thread buffers, touched once and reused: the bounce buffer of reads
 * that cannot pin all their folios at once and of unaligned O_DIRECT, and
 * the scratch buffer of reads that complete partial blocks (rmw). Two,
 * because an rmw read can happen while a bounced read is half copied
 * (completing a partial block on the way, or writing back for a folio).
 */
enum { BUF_BOUNCE, BUF_RMW, NR_THREAD_BUFS };
static pthread_key_t thread_buf_key[NR_THREAD_BUFS];
static pthread_once_t thread_buf_once = PTHREAD_ONCE_INIT;

static void thread_buf_key_init(void)
{
	int i;

	for (i = 0; i < NR_THREAD_BUFS; i++)
		if (pthread_key_create(&thread_buf_key[i], free))
			abort();
}

static char *thread_buf(int which)
{
	char *b;

	pthread_once(&thread_buf_once, thread_buf_key_init);
	b = pthread_getspecific(thread_buf_key[which]);
	if (!b) {
		if (posix_memalign((void **)&b, 65536, PC_READ_MAX))
			return NULL;
		memset(b, 0, PC_READ_MAX);	/* touched once, reused */
		if (pthread_setspecific(thread_buf_key[which], b)) {
			free(b);	/* not kept: the next call would leak another */
			return NULL;
		}
	}
	return b;
}

char *pc_bounce_buf(void)
{
	return thread_buf(BUF_BOUNCE);
}

char *pc_rmw_buf(void)
{
	return thread_buf(BUF_RMW);
}

/* The blocks of folio @f that [pos, pos+len) touches: [*b0, *b1]. */
static void folio_block_span(const struct pc_dev *dev, const struct pc_folio *f,
			     uint64_t pos, uint64_t len, uint32_t *b0, uint32_t *b1)
{
	uint64_t fpos = folio_pos(dev->pc, f), fend = fpos + dev->pc->folio_size;
	uint64_t s = pos > fpos ? pos : fpos;
	uint64_t e = pos + len < fend ? pos + len : fend;

	*b0 = (uint32_t)((s - fpos) >> dev->cblk_shift);
	*b1 = (uint32_t)((e - 1 - fpos) >> dev->cblk_shift);
}

/*
 * Make the blocks of [pos, pos+len) uptodate in the folios @v (consecutive
 * indexes, ascending): contiguous missing blocks, also across folios, go to
 * the backend as one read, split at max_io by slicing the vector.
 */
/* Folios one fill may cover: a request plus its readahead. */
#define PC_FILL_MAX (2 * PC_READ_IOV)

static int folios_fill(struct pc_dev *dev, struct pc_folio **v, int n, uint64_t pos, uint64_t len)
{
	bool need[PC_FILL_MAX];
	uint32_t b0, b1, hits = 0, misses = 0;
	struct iovec *iov = NULL;
	struct pc_batch batch;
	uint64_t run_pos = 0, run_len = 0;
	int i, iovcnt = 0, run_iov = 0, nr_need = 0, err = 0;

	assert(n <= (int)PC_FILL_MAX);
	for (i = 0; i < n; i++) {
		struct pc_folio *f = v[i];
		size_t up;

		folio_block_span(dev, f, pos, len, &b0, &b1);
		pthread_mutex_lock(&f->lock);
		up = bm_count(f->state, b0, b1 - b0 + 1);
		pthread_mutex_unlock(&f->lock);
		hits += (uint32_t)up;
		need[i] = up != b1 - b0 + 1;
		nr_need += need[i];
	}
	if (!nr_need) {
		STAT_ADD(dev, cache_hits, hits);
		return 0;
	}

	/* exclusive holds, in ascending index order (the lock order for excl) */
	for (i = 0; i < n; i++) {
		if (!need[i])
			continue;
		pthread_mutex_lock(&v[i]->lock);
		folio_excl_begin_locked(v[i]);
		pthread_mutex_unlock(&v[i]->lock);
	}
	/*
	 * Partial blocks first: their valid bytes must not be read over, so
	 * what they lack comes through a bounce buffer (invariant 4); one read
	 * each, the rest below in as few reads as the runs allow.
	 */
	for (i = 0; i < n && !err; i++) {
		if (!need[i] || !__atomic_load_n(&v[i]->nr_part, __ATOMIC_RELAXED))
			continue;
		folio_block_span(dev, v[i], pos, len, &b0, &b1);
		err = folio_complete_parts(dev, v[i], b0, b1, true);
	}
	if (err)
		goto out_release;
	/* at most one slice per run per folio; runs within a folio alternate */
	iov = malloc(sizeof(*iov) * (size_t)n * (dev->nr_blks / 2 + 1));
	if (!iov) {
		err = -ENOMEM;
		goto out_release;
	}

	/* runs of missing blocks; under excl the uptodate bits cannot change */
	pc_batch_init(&batch);
	for (i = 0; i < n; i++) {
		struct pc_folio *f = v[i];
		uint32_t b, e;

		folio_block_span(dev, f, pos, len, &b0, &b1);
		for (b = b0; b <= b1; b = e) {
			uint64_t p;

			pthread_mutex_lock(&f->lock);
			b = (uint32_t)bm_find(f->state, b, b1 + 1, false);
			e = (uint32_t)bm_find(f->state, b, b1 + 1, true);
			pthread_mutex_unlock(&f->lock);
			if (b > b1)
				break;
			misses += e - b;
			p = folio_pos(dev->pc, f) + ((uint64_t)b << dev->cblk_shift);
			if (run_len && run_pos + run_len != p) {
				pc_submit_split(dev, BLK_READ, run_pos, run_len, iov + run_iov,
						iovcnt - run_iov, &batch);
				run_iov = iovcnt;
				run_len = 0;
			}
			if (!run_len)
				run_pos = p;
			iov[iovcnt].iov_base = f->data + ((size_t)b << dev->cblk_shift);
			iov[iovcnt].iov_len = (size_t)(e - b) << dev->cblk_shift;
			run_len += iov[iovcnt].iov_len;
			iovcnt++;
		}
	}
	if (run_len)
		pc_submit_split(dev, BLK_READ, run_pos, run_len, iov + run_iov, iovcnt - run_iov,
				&batch);
	err = pc_batch_wait(&batch);
	pc_batch_destroy(&batch);
	free(iov);
	STAT_ADD(dev, cache_misses, misses);
	/* blocks found uptodate: counted before the holds (fills by others since are hits too) */
	STAT_ADD(dev, cache_hits, hits);

out_release:
	for (i = 0; i < n; i++) {
		struct pc_folio *f = v[i];
		size_t up;

		if (!need[i])
			continue;
		folio_block_span(dev, f, pos, len, &b0, &b1);
		pthread_mutex_lock(&f->lock);
		if (!err) {
			up = bm_set_range(f->state, b0, b1 - b0 + 1);
			__atomic_add_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
		}
		folio_excl_end_locked(f);
		pthread_mutex_unlock(&f->lock);
	}
	if (err)
		STAT_ADD(dev, read_errors, 1);
	return err;
}

static bool folios_uptodate(struct pc_dev *dev, struct pc_folio **v, int n, uint64_t pos,
			    uint64_t len)
{
	uint32_t b0, b1;
	bool up = true;
	int i;

	for (i = 0; i < n && up; i++) {
		folio_block_span(dev, v[i], pos, len, &b0, &b1);
		pthread_mutex_lock(&v[i]->lock);
		up = bm_all(v[i]->state, b0, b1 - b0 + 1, true);
		pthread_mutex_unlock(&v[i]->lock);
	}
	return up;
}

/*
 * Fill the request's folios. A sequential reader (this read starts where
 * the last one ended) that misses gets read_ahead bytes more in the same
 * backend read, into folios it does not pin; a random reader gets only what
 * it asked for.
 */
static int pc_read_fill(struct pc_dev *dev, struct pc_folio **v, int n, uint64_t pos, uint64_t len,
			bool seq)
{
	struct pc_cache *pc = dev->pc;
	uint64_t ra = __atomic_load_n(&dev->read_ahead, __ATOMIC_RELAXED);
	uint64_t end = pos + len, ra_end, idx;
	struct pc_folio *all[PC_FILL_MAX];
	int nr = n, i, err = 0;

	if (!ra || !seq || end >= dev->geo.size || folios_uptodate(dev, v, n, pos, len))
		return folios_fill(dev, v, n, pos, len);
	ra_end = end + ra < dev->geo.size ? end + ra : dev->geo.size;
	memcpy(all, v, sizeof(*v) * (size_t)n);
	for (idx = ((end - 1) >> pc->folio_shift) + 1;
	     idx <= (ra_end - 1) >> pc->folio_shift && nr < (int)PC_FILL_MAX; idx++) {
		/* never wait for readahead: take what the cache has to spare */
		struct pc_folio *f = folio_get_or_create(dev, idx, false, &err);

		if (!f)
			break;
		all[nr++] = f;
	}
	if (nr > n)
		ra_end = (all[nr - 1]->index + 1) << pc->folio_shift < ra_end ?
			 (all[nr - 1]->index + 1) << pc->folio_shift : ra_end;
	else
		ra_end = end;
	err = folios_fill(dev, all, nr, pos, ra_end - pos);
	if (!err)
		STAT_ADD(dev, readahead_bytes, ra_end - end);
	for (i = n; i < nr; i++)
		folio_put(all[i]);
	return err;
}

void pc_read_end(struct pc_read *rd)
{
	int i;

	for (i = 0; i < rd->nr_folios; i++)
		folio_put(rd->folios[i]);
	rd->nr_folios = 0;
	rd->iovcnt = 0;
}

/* Slow path: one folio at a time through the per-thread bounce buffer. */
static ssize_t pc_read_bounce(struct pc_dev *dev, struct pc_read *rd, size_t len, uint64_t pos)
{
	struct pc_cache *pc = dev->pc;
	char *buf = pc_bounce_buf();
	size_t done = 0;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	while (done < len) {
		uint64_t cur = pos + done;
		uint32_t off = (uint32_t)(cur & (pc->folio_size - 1));
		size_t n = pc->folio_size - off;
		struct pc_folio *f;

		if (n > len - done)
			n = len - done;
		f = folio_get_or_create(dev, cur >> pc->folio_shift, true, &err);
		if (!f)
			return err;
		err = folios_fill(dev, &f, 1, cur, n);
		if (!err)
			memcpy(buf + done, f->data + off, n);
		folio_put(f);
		if (err)
			return err;
		done += n;
	}
	rd->iov[0].iov_base = buf;
	rd->iov[0].iov_len = len;
	rd->iovcnt = 1;
	return (ssize_t)len;
}

/* A read's result: slices of its folios' memory (pinned in @rd->folios). */
static void read_iov_build(struct pc_dev *dev, struct pc_read *rd, size_t len, uint64_t pos)
{
	struct pc_cache *pc = dev->pc;
	int i;

	rd->iovcnt = 0;
	for (i = 0; i < rd->nr_folios; i++) {
		struct pc_folio *f = rd->folios[i];
		uint64_t fpos = folio_pos(pc, f);
		uint64_t s = pos > fpos ? pos : fpos;
		uint64_t e = pos + len < fpos + pc->folio_size ? pos + len : fpos + pc->folio_size;
		char *base = f->data + (s - fpos);

		/* neighbours in the pool often sit side by side in memory too */
		if (rd->iovcnt && (char *)rd->iov[rd->iovcnt - 1].iov_base +
				  rd->iov[rd->iovcnt - 1].iov_len == base) {
			rd->iov[rd->iovcnt - 1].iov_len += e - s;
		} else {
			rd->iov[rd->iovcnt].iov_base = base;
			rd->iov[rd->iovcnt].iov_len = e - s;
			rd->iovcnt++;
		}
	}
}

/* Is this read sequential (it starts where the device's last one ended)? Once per request. */
static bool read_is_seq(struct pc_dev *dev, uint64_t pos, size_t len)
{
	return __atomic_exchange_n(&dev->ra_next, pos + len, __ATOMIC_RELAXED) == pos;
}

/* The blocking read: pc_read_begin() and a worker's punted read. */
static ssize_t read_blocking(struct pc_dev *dev, struct pc_read *rd, size_t len, uint64_t pos,
			     bool seq)
{
	struct pc_cache *pc = dev->pc;
	uint64_t first, last, i;
	int err = 0, n;

	rd->iovcnt = 0;
	rd->nr_folios = 0;
	first = pos >> pc->folio_shift;
	last = (pos + len - 1) >> pc->folio_shift;
	n = (int)(last - first + 1);
	for (i = 0; i < (uint64_t)n; i++) {
		struct pc_folio *f = folio_get_or_create(dev, first + i, i == 0, &err);

		if (!f) {
			pc_read_end(rd);
			if (i == 0)
				return err;
			/* the cache cannot hold all of them at once right now */
			return pc_read_bounce(dev, rd, len, pos);
		}
		rd->folios[rd->nr_folios++] = f;
	}
	err = pc_read_fill(dev, rd->folios, n, pos, len, seq);
	if (err) {
		pc_read_end(rd);
		return err;
	}
	read_iov_build(dev, rd, len, pos);
	return (ssize_t)len;
}

/* Clamp a read to the device and PC_READ_MAX; 0 when nothing is left. */
static size_t read_clamp(struct pc_dev *dev, size_t len, uint64_t pos)
{
	if (pos >= dev->geo.size)
		return 0;
	if (len > PC_READ_MAX)
		len = PC_READ_MAX;
	if (len > dev->geo.size - pos)
		len = dev->geo.size - pos;
	return len;
}

ssize_t pc_read_begin(struct pc_dev *dev, struct pc_read *rd, size_t len, uint64_t pos)
{
	rd->iovcnt = 0;
	rd->nr_folios = 0;
	len = read_clamp(dev, len, pos);
	if (!len)
		return 0;
	STAT_ADD(dev, user_reads, 1);
	STAT_ADD(dev, user_read_bytes, len);
	return read_blocking(dev, rd, len, pos, read_is_seq(dev, pos, len));
}

/* Folio @i of an asynchronous read's fill: the request's, then the readahead ones. */
static struct pc_folio *aio_folio(struct pc_aio *aio, int i)
{
	return i < aio->rd->nr_folios ? aio->rd->folios[i] : aio->ra[i - aio->rd->nr_folios];
}

static void aio_put_ra(struct pc_aio *aio)
{
	int i;

	for (i = 0; i < aio->nr_ra; i++)
		folio_put(aio->ra[i]);
	aio->nr_ra = 0;
}

/* An asynchronous fill ended: the blocks turn uptodate, the holds go, the reply. */
static void read_fill_end(struct pc_batch *b)
{
	struct pc_aio *aio = (struct pc_aio *)((char *)b - offsetof(struct pc_aio, batch));
	struct pc_dev *dev = aio->dev;
	int err = pc_batch_err(b), n = aio->rd->nr_folios + aio->nr_ra, i;
	uint32_t b0, b1;

	for (i = 0; i < n; i++) {
		struct pc_folio *f = aio_folio(aio, i);
		size_t up;

		if (!(aio->need[i / 64] & (1ul << (i % 64))))
			continue;
		folio_block_span(dev, f, aio->fill_pos, aio->fill_len, &b0, &b1);
		pthread_mutex_lock(&f->lock);
		if (!err) {
			up = bm_set_range(f->state, b0, b1 - b0 + 1);
			__atomic_add_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
		}
		folio_excl_end_locked(f);
		pthread_mutex_unlock(&f->lock);
	}
	if (!err && aio->fill_pos + aio->fill_len > aio->pos + aio->len)
		STAT_ADD(dev, readahead_bytes, aio->fill_pos + aio->fill_len - aio->pos - aio->len);
	aio_put_ra(aio);
	if (err) {
		STAT_ADD(dev, read_errors, 1);
		pc_read_end(aio->rd);
		aio->done(aio, err);
		return;
	}
	read_iov_build(dev, aio->rd, aio->len, aio->pos);
	aio->done(aio, (ssize_t)aio->len);
}

/*
 * Fill the missing blocks of an asynchronous read's folios without waiting
 * (rule R3): every exclusive hold is tried, not waited for; a folio held
 * by someone, a partial block to complete, or more read runs than the aio
 * has room for, and it backs off with -EAGAIN (everything released, for a
 * worker to do it the blocking way). Returns 0 when it ended here (nothing
 * was missing), 1 when the reads are in flight (read_fill_end() replies).
 */
static int read_fill_async(struct pc_dev *dev, struct pc_aio *aio)
{
	struct { uint64_t pos, len; int iov; } run[PC_AIO_IOV];
	int n = aio->rd->nr_folios + aio->nr_ra, i, j, nr_run = 0, iovcnt = 0;
	uint32_t b0, b1, b, e, hits = 0, misses = 0;
	bool busy = false;

	memset(aio->need, 0, sizeof(aio->need));
	for (i = 0; i < n && !busy; i++) {
		struct pc_folio *f = aio_folio(aio, i);
		size_t up;

		folio_block_span(dev, f, aio->fill_pos, aio->fill_len, &b0, &b1);
		pthread_mutex_lock(&f->lock);
		up = bm_count(f->state, b0, b1 - b0 + 1);
		if (up != b1 - b0 + 1) {
			if (f->excl || f->users || f->nr_part) {
				busy = true;
			} else {
				f->excl = true;
				aio->need[i / 64] |= 1ul << (i % 64);
			}
		}
		pthread_mutex_unlock(&f->lock);
		if (i < aio->rd->nr_folios)
			hits += (uint32_t)up;
	}
	/* runs of missing blocks; under excl the uptodate bits cannot change */
	for (i = 0; i < n && !busy; i++) {
		struct pc_folio *f = aio_folio(aio, i);

		if (!(aio->need[i / 64] & (1ul << (i % 64))))
			continue;
		folio_block_span(dev, f, aio->fill_pos, aio->fill_len, &b0, &b1);
		for (b = b0; b <= b1 && !busy; b = e) {
			uint64_t p;

			/* the dirty bits in the same words change under the lock */
			pthread_mutex_lock(&f->lock);
			b = (uint32_t)bm_find(f->state, b, b1 + 1, false);
			e = (uint32_t)bm_find(f->state, b, b1 + 1, true);
			pthread_mutex_unlock(&f->lock);
			if (b > b1)
				break;
			if (iovcnt == PC_AIO_IOV) {
				busy = true;
				break;
			}
			misses += e - b;
			p = folio_pos(dev->pc, f) + ((uint64_t)b << dev->cblk_shift);
			if (!nr_run || run[nr_run - 1].pos + run[nr_run - 1].len != p)
				run[nr_run++] = (typeof(run[0])){ .pos = p, .len = 0, .iov = iovcnt };
			aio->iov[iovcnt].iov_base = f->data + ((size_t)b << dev->cblk_shift);
			aio->iov[iovcnt].iov_len = (size_t)(e - b) << dev->cblk_shift;
			run[nr_run - 1].len += aio->iov[iovcnt].iov_len;
			iovcnt++;
		}
	}
	if (busy) {
		for (i = 0; i < n; i++) {
			struct pc_folio *f = aio_folio(aio, i);

			if (!(aio->need[i / 64] & (1ul << (i % 64))))
				continue;
			pthread_mutex_lock(&f->lock);
			folio_excl_end_locked(f);
			pthread_mutex_unlock(&f->lock);
		}
		return -EAGAIN;
	}
	STAT_ADD(dev, cache_hits, hits);
	if (!nr_run)
		return 0;
	STAT_ADD(dev, cache_misses, misses);
	pc_batch_init_async(&aio->batch, read_fill_end);
	for (j = 0; j < nr_run; j++)
		pc_submit_split(dev, BLK_READ, run[j].pos, run[j].len, aio->iov + run[j].iov,
				(j + 1 < nr_run ? run[j + 1].iov : iovcnt) - run[j].iov, &aio->batch);
	pc_batch_done(&aio->batch, 0);	/* the bias: read_fill_end() may run now */
	return 1;
}

/*
 * The non-blocking part of an asynchronous read: pin the folios without
 * waiting for one, serve it at once when cached, else start the fill.
 * Returns 0 (served: the caller replies), 1 (in flight), -EAGAIN (nothing
 * held: punt it).
 */
static int read_try(struct pc_dev *dev, struct pc_aio *aio)
{
	struct pc_cache *pc = dev->pc;
	struct pc_read *rd = aio->rd;
	uint64_t first = aio->pos >> pc->folio_shift;
	uint64_t last = (aio->pos + aio->len - 1) >> pc->folio_shift, i;
	uint64_t end = aio->pos + aio->len, ra, ra_end;
	int err = 0, ret;

	for (i = first; i <= last; i++) {
		struct pc_folio *f = folio_get_or_create(dev, i, false, &err);

		if (!f) {
			pc_read_end(rd);
			return -EAGAIN;
		}
		rd->folios[rd->nr_folios++] = f;
	}
	aio->fill_pos = aio->pos;
	aio->fill_len = aio->len;
	ra = __atomic_load_n(&dev->read_ahead, __ATOMIC_RELAXED);
	if (folios_uptodate(dev, rd->folios, rd->nr_folios, aio->pos, aio->len)) {
		STAT_ADD(dev, cache_hits, ((end - 1) >> dev->cblk_shift) -
					  (aio->pos >> dev->cblk_shift) + 1);
		read_iov_build(dev, rd, aio->len, aio->pos);
		return 0;
	}
	if (ra && aio->ra_seq && end < dev->geo.size) {
		/* never wait for readahead: take what the cache has to spare */
		ra_end = end + ra < dev->geo.size ? end + ra : dev->geo.size;
		for (i = last + 1; i <= (ra_end - 1) >> pc->folio_shift && aio->nr_ra < PC_AIO_RA; i++) {
			struct pc_folio *f = folio_get_or_create(dev, i, false, &err);

			if (!f)
				break;
			aio->ra[aio->nr_ra++] = f;
		}
		if (aio->nr_ra) {
			uint64_t lim = (aio->ra[aio->nr_ra - 1]->index + 1) << pc->folio_shift;

			aio->fill_len = (lim < ra_end ? lim : ra_end) - aio->pos;
		}
	}
	ret = read_fill_async(dev, aio);
	if (ret < 0) {
		aio_put_ra(aio);
		pc_read_end(rd);
		return ret;
	}
	if (!ret)
		read_iov_build(dev, rd, aio->len, aio->pos);	/* filled by someone meanwhile */
	return ret;
}

void pc_read_async(struct pc_dev *dev, struct pc_aio *aio, struct pc_read *rd, size_t len,
		   uint64_t pos)
{
	int ret;

	rd->iovcnt = 0;
	rd->nr_folios = 0;
	len = read_clamp(dev, len, pos);
	if (!len) {
		aio->done(aio, 0);
		return;
	}
	STAT_ADD(dev, user_reads, 1);
	STAT_ADD(dev, user_read_bytes, len);
	pc_aio_init(aio, dev, PC_AIO_READ, pos, len);
	aio->rd = rd;
	aio->ra_seq = read_is_seq(dev, pos, len);
	ret = read_try(dev, aio);
	if (ret == -EAGAIN)
		pc_punt(aio);
	else if (!ret)
		aio->done(aio, (ssize_t)len);
}

/* --------------------------------------------------------- direct I/O */

/*
 * Call @fn on every cached folio of @dev overlapping [pos, pos+len), each
 * referenced for the call, without allocating: what must happen after the
 * backend changed (a direct write landed) cannot be allowed to fail.
 * Small ranges are looked up folio by folio; large ones walk the device's
 * folio list, a referenced folio keeping its place in it (folios are
 * detached only when nobody references them).
 */
static void pc_for_each_folio(struct pc_dev *dev, uint64_t pos, uint64_t len,
			      void (*fn)(struct pc_dev *, struct pc_folio *, void *), void *arg)
{
	struct pc_cache *pc = dev->pc;
	uint64_t first = pos >> pc->folio_shift, last = (pos + len - 1) >> pc->folio_shift, i;
	struct pc_folio *f, *next;

	pthread_mutex_lock(&pc->lock);
	if (!dev->nr_folios || !len) {
		pthread_mutex_unlock(&pc->lock);
		return;
	}
	if (last - first < dev->nr_folios) {
		pthread_mutex_unlock(&pc->lock);
		for (i = first; i <= last; i++) {
			pthread_mutex_lock(&pc->lock);
			f = folio_find_locked(dev, i);
			if (f)
				folio_get(f);
			pthread_mutex_unlock(&pc->lock);
			if (!f)
				continue;
			fn(dev, f, arg);
			folio_put(f);
		}
		return;
	}
	f = list_empty(&dev->folios) ? NULL : list_first_entry(&dev->folios, struct pc_folio, dev_node);
	if (f)
		folio_get(f);
	pthread_mutex_unlock(&pc->lock);
	while (f) {
		if (f->index >= first && f->index <= last)
			fn(dev, f, arg);
		pthread_mutex_lock(&pc->lock);
		next = f->dev_node.next == &dev->folios ? NULL :
		       list_entry(f->dev_node.next, struct pc_folio, dev_node);
		if (next)
			folio_get(next);
		pthread_mutex_unlock(&pc->lock);
		folio_put(f);
		f = next;
	}
}

struct inval_arg {
	uint64_t pos, len;
};

/* The clearing itself: f->lock held, and nobody else holds @f (excl or shared). */
static void folio_invalidate_locked(struct pc_dev *dev, struct pc_folio *f,
				    const struct inval_arg *a)
{
	uint32_t b0, b1, b;
	size_t gone = 0;

	folio_block_span(dev, f, a->pos, a->len, &b0, &b1);
	for (b = b0; b <= b1; b++) {
		if (bm_test(f->state, b) && !bm_test(f->state, dev->nr_blks + b))
			gone += bm_clear_range(f->state, b, 1);
	}
	__atomic_sub_fetch(&dev->uptodate_blks, gone, __ATOMIC_RELAXED);
}

static void folio_invalidate(struct pc_dev *dev, struct pc_folio *f, void *arg)
{
	pthread_mutex_lock(&f->lock);
	folio_excl_begin_locked(f);
	folio_invalidate_locked(dev, f, arg);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
}

/*
 * Drop cached copies of [pos, pos+len) after the backend changed under the
 * cache (direct write, failed discard): blocks overlapping the range stop
 * being uptodate, unless a buffered write dirtied them again meanwhile
 * (that data is newer and stays). Cannot fail: a stale copy left behind
 * would be served to readers as the device's data.
 */
static void pc_invalidate_range(struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	struct inval_arg a = { pos, len };

	pc_for_each_folio(dev, pos, len, folio_invalidate, &a);
}

/*
 * Does the cache hold any folio of @dev? Without pc->lock (the cache-wide
 * mutex every request would otherwise take), for the direct I/O paths,
 * which mostly run on devices the cache holds nothing of.
 *
 * A direct write must drop the cached copies that appeared while it ran:
 * a buffered read that made a folio and read the device before the write
 * reached it would keep the old data, and serve it (the kernel too
 * invalidates the page cache after a direct write, not only before). Its
 * end asks here after the backend completed it. This is the store-buffer
 * pattern, with a full fence on each side: the folio's maker stores
 * nr_folios, then fences, then reads the device (folio_get_or_create(),
 * then a miss read); the writer's data reached the device, then it fences, then
 * loads nr_folios. Of the two fences one comes first: if the maker's, the
 * load sees the folio and the write's end drops it (or a worker does); if
 * the writer's, the maker's read comes after the write's data and reads
 * it. Either way no stale copy stays. A folio made and freed again meanwhile
 * took its stale data with it.
 */
static bool dev_cached_any(struct pc_dev *dev)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return __atomic_load_n(&dev->nr_folios, __ATOMIC_RELAXED) != 0;
}

/*
 * Is any folio of [pos, pos+len) cached, and is one of them dirty or under
 * writeback (*dirty)? Without allocating or waiting, for the non-blocking
 * direct I/O paths; a range too long to look at folio by folio counts as
 * both. Without pc->lock when the device has nothing cached.
 */
static bool range_cached(struct pc_dev *dev, uint64_t pos, uint64_t len, bool *dirty)
{
	struct pc_cache *pc = dev->pc;
	uint64_t first = pos >> pc->folio_shift, last = (pos + len - 1) >> pc->folio_shift, i;
	bool cached = false;

	*dirty = false;
	if (!dev_cached_any(dev))
		return false;
	pthread_mutex_lock(&pc->lock);
	if (!dev->nr_folios) {
		pthread_mutex_unlock(&pc->lock);
		return false;
	}
	if (last - first >= 1024) {
		pthread_mutex_unlock(&pc->lock);
		*dirty = true;
		return true;
	}
	for (i = first; i <= last && !*dirty; i++) {
		struct pc_folio *f = folio_find_locked(dev, i);

		if (!f)
			continue;
		cached = true;
		pthread_mutex_lock(&f->lock);
		*dirty = f->nr_dirty || f->wb_ios;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_unlock(&pc->lock);
	return cached;
}

#define INVAL_NOWAIT_FOLIOS 16	/* a longer range is a worker's */

/*
 * pc_invalidate_range() without waiting, for a completion (rule R1): each
 * folio of the range that nobody holds is invalidated under its lock alone
 * (a holder needs that lock to begin). False when a folio is held or the
 * range is long and partly cached: the caller punts the whole range to a
 * worker (invalidating a block twice is harmless).
 */
static bool pc_invalidate_range_nowait(struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	struct pc_cache *pc = dev->pc;
	uint64_t first = pos >> pc->folio_shift, last = (pos + len - 1) >> pc->folio_shift, i;
	struct inval_arg a = { pos, len };
	struct pc_folio *f;
	bool ok = true;

	if (last - first >= INVAL_NOWAIT_FOLIOS) {
		bool dirty;

		/* a worker's, unless nothing of it is cached */
		return !range_cached(dev, pos, len, &dirty);
	}
	for (i = first; i <= last && ok; i++) {
		pthread_mutex_lock(&pc->lock);
		f = folio_find_locked(dev, i);
		if (f)
			folio_get(f);
		pthread_mutex_unlock(&pc->lock);
		if (!f)
			continue;
		pthread_mutex_lock(&f->lock);
		ok = !f->excl && !f->users;
		if (ok)
			folio_invalidate_locked(dev, f, &a);
		pthread_mutex_unlock(&f->lock);
		folio_put(f);
	}
	return ok;
}

static int check_direct(const struct pc_dev *dev, uint64_t pos, size_t len)
{
	return ((pos | len) & (dev->geo.lbs - 1)) ? -EINVAL : 0;
}

/* Copy through an aligned buffer when the backend needs alignment the caller's lacks. */
static bool needs_bounce(const struct pc_dev *dev, const void *buf)
{
	return ((uintptr_t)buf & (dev->geo.dma_align - 1)) != 0;
}

/* The blocking direct write, after the checks: pc_direct_write() and a worker's. */
static ssize_t direct_write_blocking(struct pc_dev *dev, const void *buf, size_t len, uint64_t pos)
{
	struct iovec iov;
	size_t done = 0;
	uint64_t ok;
	int err;

	/* dirty cached data must not land after (and over) this write */
	err = wb_range(dev, pos, len);
	if (err)
		return err;
	while (done < len) {
		size_t n = len - done;

		iov.iov_base = (char *)buf + done;
		if (needs_bounce(dev, iov.iov_base)) {
			char *b = pc_bounce_buf();

			if (!b) {
				err = -ENOMEM;
				break;
			}
			if (n > PC_READ_MAX)
				n = PC_READ_MAX;
			memcpy(b, iov.iov_base, n);
			iov.iov_base = b;
			STAT_ADD(dev, direct_copy_bytes, n);
		}
		iov.iov_len = n;
		err = pc_submit_split_wait_ok(dev, BLK_WRITE, pos + done, n, &iov, 1, &ok);
		done += ok;	/* a partial completion: what reached the device counts */
		if (err)
			break;
	}
	/* also after a failure: part of it may have reached the device */
	pc_invalidate_range(dev, pos, len);
	STAT_ADD(dev, direct_write_bytes, done);
	return done ? (ssize_t)done : err;
}

static ssize_t direct_read_blocking(struct pc_dev *dev, void *buf, size_t len, uint64_t pos)
{
	struct iovec iov;
	size_t done = 0;
	uint64_t ok;
	int err;

	err = wb_range(dev, pos, len);
	if (err)
		return err;
	while (done < len) {
		size_t n = len - done;
		bool bounce = needs_bounce(dev, (char *)buf + done);

		iov.iov_base = (char *)buf + done;
		if (bounce) {
			iov.iov_base = pc_bounce_buf();
			if (!iov.iov_base) {
				err = -ENOMEM;
				break;
			}
			if (n > PC_READ_MAX)
				n = PC_READ_MAX;
		}
		iov.iov_len = n;
		err = pc_submit_split_wait_ok(dev, BLK_READ, pos + done, n, &iov, 1, &ok);
		if (bounce) {
			memcpy((char *)buf + done, iov.iov_base, ok);
			STAT_ADD(dev, direct_copy_bytes, ok);
		}
		done += ok;	/* a partial completion: what was read is the reply */
		if (err)
			break;
	}
	STAT_ADD(dev, direct_read_bytes, done);
	return done ? (ssize_t)done : err;
}

static void dwrite_finish(struct pc_aio *aio)
{
	if (aio->res > 0)
		STAT_ADD(aio->dev, direct_write_bytes, (uint64_t)aio->res);
	aio->done(aio, aio->res);
}

/* A direct write through: the flush after it (in a worker: rule R1). */
static ssize_t dwrite_flush(struct pc_aio *aio, ssize_t res)
{
	int err;

	if (res <= 0 || !aio_sync_write(aio))
		return res;
	err = pc_submit_wait(aio->dev, BLK_FLUSH, 0, 0, NULL, 0);
	if (err) {
		pc_errseq_set(aio->dev, err);
		return err;
	}
	STAT_ADD(aio->dev, write_through_writes, 1);
	return res;
}

/*
 * An asynchronous direct write ended. Cached copies of the range must go,
 * and dropping one can wait for a folio's exclusive holder, perhaps a read
 * whose completion needs this very thread (rule R1): when anything of the
 * range is cached, a worker does it.
 */
static void dwrite_end(struct pc_batch *b)
{
	struct pc_aio *aio = (struct pc_aio *)((char *)b - offsetof(struct pc_aio, batch));
	int err = pc_batch_err(b);

	/* a partial completion: the bytes that reached the device, a short write */
	uint64_t ok = err ? pc_batch_ok_bytes(b, aio->pos) : aio->len;

	aio->res = ok ? (ssize_t)ok : err;
	/*
	 * A clean cached copy nobody holds is dropped here, so a direct write
	 * over cached data is still answered by the thread the device
	 * completed it in (for ram: the one that received it). Nothing cached
	 * of the device (dev_cached_any(): a folio made during the write is
	 * seen): nothing to drop, no lock taken.
	 */
	if ((dev_cached_any(aio->dev) &&
	     !pc_invalidate_range_nowait(aio->dev, aio->pos, aio->len)) ||
	    (aio->res > 0 && aio_sync_write(aio))) {
		aio->op = PC_AIO_INVAL;
		pc_punt(aio);
		return;
	}
	dwrite_finish(aio);
}

static void dread_end(struct pc_batch *b)
{
	struct pc_aio *aio = (struct pc_aio *)((char *)b - offsetof(struct pc_aio, batch));
	int err = pc_batch_err(b);
	/* a partial completion: what was read before the failure, a short read */
	uint64_t ok = err ? pc_batch_ok_bytes(b, aio->pos) : aio->len;

	STAT_ADD(aio->dev, direct_read_bytes, ok);
	if (aio->map)	/* inside the backend's end_io: done replies from its memory */
		STAT_ADD(aio->dev, direct_read_mapped, 1);
	aio->done(aio, ok ? (ssize_t)ok : err);
}

/* Start a direct I/O over the caller's buffer; @end replies. */
static void direct_submit(struct pc_aio *aio, enum blk_op op, void *buf,
			  void (*end)(struct pc_batch *b))
{
	struct pc_dev *dev = aio->dev;
	/* a synchronous caller sleeps until the end anyway: the backend may use its thread */
	unsigned int flags = aio->waited ? BLK_IO_WAITED : 0;
	/*
	 * A read its caller can answer from the backend's memory, unsplit,
	 * straight to a backend (a filter would end it outside the mapping's
	 * life): the backend may map instead of copying (submit.c, mapped
	 * reads).
	 */
	bool mapped = op == BLK_READ && aio->map_ok && !dev->be->ops->is_filter &&
		      aio->len <= dev_max_io(dev);

	aio->iov[0].iov_base = buf;
	aio->iov[0].iov_len = aio->len;
	pc_batch_init_async(&aio->batch, end);
	if (mapped) {
		flags |= BLK_IO_MAPPED;
		pc_map_inline_begin(aio);
	}
	pc_submit_split_embed(dev, op, aio->pos, aio->len, aio->iov, 1, &aio->batch, flags,
			      &aio->sio);
	/* the end ran inside the backend's end_io, which dropped the bias: @aio may be gone */
	if (mapped && pc_map_inline_end())
		return;
	pc_batch_done(&aio->batch, 0);
}

/* Both directions, once the range is checked and inside the device. */
static void direct_async(struct pc_dev *dev, struct pc_aio *aio, enum pc_aio_op op, void *buf,
			 size_t len, uint64_t pos)
{
	bool write = op == PC_AIO_DWRITE, dirty;

	if (len > dev->geo.size - pos)
		len = dev->geo.size - pos;
	pc_aio_init(aio, dev, op, pos, len);
	if (write)
		aio->wbuf = buf;
	else
		aio->rbuf = buf;
	/* dirty data to write back first, or a buffer the backend cannot take: a worker's */
	if (needs_bounce(dev, buf) || (range_cached(dev, pos, len, &dirty) && dirty)) {
		pc_punt(aio);
		return;
	}
	direct_submit(aio, write ? BLK_WRITE : BLK_READ, buf, write ? dwrite_end : dread_end);
}

void pc_direct_write_async(struct pc_dev *dev, struct pc_aio *aio, const void *buf, size_t len,
			   uint64_t pos)
{
	int err = check_direct(dev, pos, len);

	if (err || pos >= dev->geo.size || !len)
		aio->done(aio, err ? err : len ? -ENOSPC : 0);
	else
		direct_async(dev, aio, PC_AIO_DWRITE, (void *)buf, len, pos);
}

void pc_direct_read_async(struct pc_dev *dev, struct pc_aio *aio, void *buf, size_t len,
			  uint64_t pos)
{
	int err = check_direct(dev, pos, len);

	aio->map = NULL;
	aio->mapcnt = 0;
	if (err || pos >= dev->geo.size || !len)
		aio->done(aio, err);
	else
		direct_async(dev, aio, PC_AIO_DREAD, buf, len, pos);
}

/* ------------------------------------------------- discard, write-zeroes */

struct zero_arg {
	uint64_t pos, end;	/* the range being zeroed */
	int err;		/* zr_complete_edge: the read's result */
};

/* Under excl: complete a partial block cut by the range (see pc_zero_range). */
static void folio_complete_cut(struct pc_dev *dev, struct pc_folio *f, void *arg)
{
	struct zero_arg *a = arg;
	uint32_t b0, b1;
	int err;

	folio_block_span(dev, f, a->pos, a->end - a->pos, &b0, &b1);
	pthread_mutex_lock(&f->lock);
	folio_excl_begin_locked(f);
	pthread_mutex_unlock(&f->lock);
	err = folio_complete_parts(dev, f, b0, b1, true);
	pthread_mutex_lock(&f->lock);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	if (err && !a->err)
		a->err = err;
}

/*
 * Blocks of @f wholly inside the range lose their data, dirty or not (it
 * is superseded); a block the range cuts through keeps its bytes outside
 * the range and gets zeros inside, dirty or clean as it was.
 */
static void folio_zero(struct pc_dev *dev, struct pc_folio *f, void *arg)
{
	struct zero_arg *a = arg;
	uint32_t sh = dev->cblk_shift, cb = dev->cblk, nb = dev->nr_blks, b0, b1, b;
	uint64_t fpos = folio_pos(dev->pc, f);
	size_t gone = 0, dirty = 0;
	bool clean;

	folio_block_span(dev, f, a->pos, a->end - a->pos, &b0, &b1);
	pthread_mutex_lock(&f->lock);
	folio_excl_begin_locked(f);
	/* writeback that read the old bytes must land before the backend op */
	folio_wait_wb_locked(f);
	for (b = b0; b <= b1; b++) {
		uint64_t bpos = fpos + ((uint64_t)b << sh);
		uint32_t zs = a->pos > bpos ? (uint32_t)(a->pos - bpos) : 0;
		uint32_t ze = a->end < bpos + cb ? (uint32_t)(a->end - bpos) : cb;
		struct pc_part *p = folio_part_find_locked(f, b);

		if (!zs && ze == cb) {
			dirty += bm_clear_range(f->state, nb + b, 1);
			gone += bm_clear_range(f->state, b, 1);
			if (p)
				folio_part_free_locked(f, p);
		} else if (bm_test(f->state, b)) {
			memset(f->data + ((size_t)b << sh) + zs, 0, ze - zs);
		} else if (p && p->start >= zs && p->end <= ze) {
			/* a write that came meanwhile, all of it inside the range */
			dirty += bm_clear_range(f->state, nb + b, 1);
			folio_part_free_locked(f, p);
		} else if (p) {
			/*
			 * A write that came since pc_zero_range() completed this block,
			 * partly outside the range: complete it now, or its writeback
			 * could read the old bytes of the range before the zeros land.
			 */
			pthread_mutex_unlock(&f->lock);
			if (!folio_complete_parts(dev, f, b, b, true))
				memset(f->data + ((size_t)b << sh) + zs, 0, ze - zs);
			pthread_mutex_lock(&f->lock);
		}
	}
	folio_account_dirty_locked(dev, f, -(long)dirty);
	folio_check(dev, f);
	clean = !f->nr_dirty;
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	__atomic_sub_fetch(&dev->uptodate_blks, gone, __ATOMIC_RELAXED);
	if (clean && dirty)
		folio_unpark(dev->pc, f);
}

/*
 * Discard or zero [pos, pos+len), as the kernel's blkdev_fallocate() does
 * with truncate_bdev_range(): the cached data of the range goes before the
 * backend op, and a cache block the range cuts through (the cache block
 * can be larger than the logical block) is zeroed in the cache over the
 * range instead of being written back first. So nothing here can fail to
 * write, and no later writeback can bring old bytes back into the range.
 * A partial block cut through is completed first: its writeback would
 * read its rest from the device, perhaps before the zeros are there; a
 * failed read fails the call before anything changed.
 */
static int pc_zero_range(struct pc_dev *dev, enum blk_op op, uint64_t pos, uint64_t len)
{
	uint64_t mask = dev->cblk - 1, end = pos + len;
	uint64_t head = pos & ~mask, tail = end & ~mask;
	struct zero_arg a = { .pos = pos, .end = end };
	int err;

	if ((pos | len) & (dev->geo.lbs - 1) || pos > dev->geo.size || len > dev->geo.size - pos)
		return -EINVAL;
	if (!len)
		return 0;
	if (pos & mask)
		pc_for_each_folio(dev, head, dev->cblk, folio_complete_cut, &a);
	if ((end & mask) && (tail != head || !(pos & mask)))
		pc_for_each_folio(dev, tail, dev->cblk, folio_complete_cut, &a);
	if (a.err)
		return a.err;
	pc_for_each_folio(dev, pos, len, folio_zero, &a);

	err = pc_submit_wait(dev, op, pos, len, NULL, 0);
	if (err) {
		/* the zeros of the cut blocks may not be on the device: drop clean copies */
		if (pos & mask)
			pc_invalidate_range(dev, head, dev->cblk);
		if (end & mask)
			pc_invalidate_range(dev, tail, dev->cblk);
	}
	return err;
}

static void folio_drop(struct pc_dev *dev, struct pc_folio *f, void *arg)
{
	size_t up, dirty;

	(void)arg;
	pthread_mutex_lock(&f->lock);
	folio_excl_begin_locked(f);
	dirty = bm_clear_range(f->state, dev->nr_blks, dev->nr_blks);
	up = bm_clear_range(f->state, 0, dev->nr_blks);
	folio_part_drop_locked(f, 0, dev->nr_blks);
	folio_account_dirty_locked(dev, f, -(long)dirty);
	folio_excl_end_locked(f);
	pthread_mutex_unlock(&f->lock);
	__atomic_sub_fetch(&dev->uptodate_blks, up, __ATOMIC_RELAXED);
	STAT_ADD(dev, dropped_bytes, (uint64_t)dirty << dev->cblk_shift);
	if (dirty)
		folio_unpark(dev->pc, f);
}

void pc_dev_drop_clean(struct pc_dev *dev)
{
	pc_invalidate_range(dev, 0, dev->geo.size);
}

int pc_dev_set_size(struct pc_dev *dev, uint64_t size)
{
	uint64_t old = dev->geo.size;
	struct zero_arg a = { .pos = size, .end = old };

	if (!size || size % dev->cblk)
		return -EINVAL;
	/* what lies past the new end is gone: blocks whole, since size is cblk-aligned */
	if (size < old)
		pc_for_each_folio(dev, size, old - size, folio_zero, &a);
	dev->geo.size = size;
	return 0;
}

/* pc_dev_shrink_drop(): the dirty bytes of [pos, end) are counted into bytes */
struct dirty_arg {
	uint64_t pos, end, bytes;
};

static void folio_count_dirty(struct pc_dev *dev, struct pc_folio *f, void *arg)
{
	struct dirty_arg *a = arg;
	uint32_t b0, b1, b;

	folio_block_span(dev, f, a->pos, a->end - a->pos, &b0, &b1);
	pthread_mutex_lock(&f->lock);
	for (b = b0; b <= b1; b++)
		if (bm_test(f->state, dev->nr_blks + b))
			a->bytes += dev->cblk;
	pthread_mutex_unlock(&f->lock);
}

int pc_dev_shrink_drop(struct pc_dev *dev, uint64_t size, uint64_t *dropped)
{
	struct dirty_arg a = { .pos = size, .end = dev->geo.size };
	int ret;

	*dropped = 0;
	if (!size || size % dev->cblk || size >= dev->geo.size)
		return pc_dev_set_size(dev, size);
	pc_for_each_folio(dev, a.pos, a.end - a.pos, folio_count_dirty, &a);
	ret = pc_dev_set_size(dev, size);
	if (ret)
		return ret;
	STAT_ADD(dev, dropped_bytes, a.bytes);
	*dropped = a.bytes;
	return 0;
}

void pc_dev_drop_all(struct pc_dev *dev)
{
	pc_for_each_folio(dev, 0, dev->geo.size, folio_drop, NULL);
}

static bool zero_range_ok(const struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	return !((pos | len) & (dev->geo.lbs - 1)) && pos <= dev->geo.size &&
	       len <= dev->geo.size - pos;
}

/* Discard and zero-range read and write back what their ends cut: always a worker's. */
static void zero_async(struct pc_dev *dev, struct pc_aio *aio, enum pc_aio_op op, uint64_t pos,
		       uint64_t len)
{
	if (!zero_range_ok(dev, pos, len) || !len) {
		aio->done(aio, zero_range_ok(dev, pos, len) ? 0 : -EINVAL);
		return;
	}
	pc_aio_init(aio, dev, op, pos, len);
	pc_punt(aio);
}

void pc_discard_async(struct pc_dev *dev, struct pc_aio *aio, uint64_t pos, uint64_t len)
{
	zero_async(dev, aio, PC_AIO_DISCARD, pos, len);
}

void pc_write_zeroes_async(struct pc_dev *dev, struct pc_aio *aio, uint64_t pos, uint64_t len)
{
	zero_async(dev, aio, PC_AIO_ZEROES, pos, len);
}

/* ------------------------------------------------------------- fsync */

/*
 * Write every dirty block of @dev, wait for writeback in flight, flush, and
 * give each of the @n fsyncs @v its result: one pass serves every fsync
 * that was queued before it began.
 */
static void fsync_blocking(struct pc_dev *dev, struct pc_aio **v, int n)
{
	int err, ferr, ret, i;

	err = wb_dev(dev, WB_ALL, true);
	ferr = pc_submit_wait(dev, BLK_FLUSH, 0, 0, NULL, 0);
	if (ferr)
		pc_errseq_set(dev, ferr);
	for (i = 0; i < n; i++) {
		ret = errseq_check_and_advance(dev, v[i]->since);
		v[i]->done(v[i], ret ? ret : err ? err : ferr);
	}
}

static void fsync_flush_end(struct pc_batch *b)
{
	struct pc_aio *aio = (struct pc_aio *)((char *)b - offsetof(struct pc_aio, batch));
	int ferr = pc_batch_err(b), ret;

	if (ferr)
		pc_errseq_set(aio->dev, ferr);
	ret = errseq_check_and_advance(aio->dev, aio->since);
	aio->done(aio, ret ? ret : ferr);
}

void pc_fsync_async(struct pc_dev *dev, struct pc_aio *aio, pc_errseq_t *since)
{
	pc_aio_init(aio, dev, PC_AIO_FSYNC, 0, 0);
	aio->since = since;
	if (__atomic_load_n(&dev->dirty_bytes, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&dev->wb_bytes, __ATOMIC_ACQUIRE)) {
		pc_punt(aio);
		return;
	}
	/* nothing to write or wait for: just the flush */
	pc_batch_init_async(&aio->batch, fsync_flush_end);
	pc_submit_nodata(dev, BLK_FLUSH, 0, 0, &aio->batch);
	pc_batch_done(&aio->batch, 0);
}

int pc_discard(struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	return pc_zero_range(dev, BLK_DISCARD, pos, len);
}

int pc_write_zeroes(struct pc_dev *dev, uint64_t pos, uint64_t len)
{
	return pc_zero_range(dev, BLK_WRITE_ZEROES, pos, len);
}

/* ------------------------------------------------- punted requests */

void pc_aio_run(struct pc_aio **v, int n)
{
	struct pc_aio *aio = v[0];
	struct pc_dev *dev = aio->dev;
	int err;

	switch (aio->op) {
	case PC_AIO_READ:
		aio->done(aio, read_blocking(dev, aio->rd, aio->len, aio->pos, aio->ra_seq));
		break;
	case PC_AIO_WRITE:
		err = write_range(dev, aio->wbuf, aio->len, aio->pos, &aio->progress, false);
		write_finish(aio, err);
		break;
	case PC_AIO_DREAD:
		aio->done(aio, direct_read_blocking(dev, aio->rbuf, aio->len, aio->pos));
		break;
	case PC_AIO_DWRITE:
		aio->done(aio, dwrite_flush(aio, direct_write_blocking(dev, aio->wbuf, aio->len,
								       aio->pos)));
		break;
	case PC_AIO_INVAL:
		pc_invalidate_range(dev, aio->pos, aio->len);
		aio->res = dwrite_flush(aio, aio->res);
		dwrite_finish(aio);
		break;
	case PC_AIO_WSYNC:
		aio->done(aio, write_sync_blocking(dev, aio->pos, aio->progress, aio->res));
		break;
	case PC_AIO_FSYNC:
		fsync_blocking(dev, v, n);
		break;
	case PC_AIO_DISCARD:
		aio->done(aio, pc_zero_range(dev, BLK_DISCARD, aio->pos, aio->len));
		break;
	case PC_AIO_ZEROES:
		aio->done(aio, pc_zero_range(dev, BLK_WRITE_ZEROES, aio->pos, aio->len));
		break;
	}
}

int pc_dev_sync_final(struct pc_dev *dev, int attempts, const uint64_t *deadline_ms,
		      uint64_t *lost)
{
	int err = 0, i;

	for (i = 0; i < attempts; i++) {
		useconds_t backoff = (useconds_t)(100000u << (i < 5 ? i : 5));
		uint64_t dl;

		err = wb_dev(dev, WB_ALL, true);
		if (!err || i + 1 == attempts)
			break;
		/*
		 * A retry that could only start after the caller's deadline
		 * is not made: the data is reported lost with the error it
		 * got, rather than abandoned in the middle of a round.
		 */
		dl = deadline_ms ? __atomic_load_n(deadline_ms, __ATOMIC_ACQUIRE) : 0;
		if (dl && blk_now_ms() + backoff / 1000 >= dl)
			break;
		usleep(backoff);
	}
	if (!err)
		err = pc_submit_wait(dev, BLK_FLUSH, 0, 0, NULL, 0);
	*lost = __atomic_load_n(&dev->dirty_bytes, __ATOMIC_RELAXED);
	return err;
}
