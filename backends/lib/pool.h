/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/pool.h - the one pool of per-I/O objects, for the cache
 * (core/submit.c's submission I/Os, core/writeback.c's writeback I/Os) and
 * for the filters' per-I/O state alike: bounded, filled and touched at open
 * (as the kernel's mempool), so the I/O path takes what it needs without
 * asking the allocator (a daemon under a loop device must make progress
 * when memory is short, reclaim writing through it). Past its size the
 * pool still serves, from malloc, and counts it: an I/O is never refused
 * for want of an object (a submitter that waited for one could be the
 * completion thread that frees it). It lives here, not in core/, because a
 * backend includes nothing from core/.
 *
 * A pool may also keep a reserve past its filled memory (powerloss's save
 * buffers and journal entries): be_pool_set_reserve() gives it a target
 * of free objects, a low-water mark and a hook. be_pool_take() then serves
 * from the free list only, never asking the allocator (for a caller that
 * holds its own lock), and calls the hook when the free objects fall below
 * the mark; whoever the hook wakes calls be_pool_refill() with no lock held
 * to allocate back up to the target. be_pool_put_spill() never frees
 * either: an object past the target goes onto a list the caller frees
 * once it has dropped its lock. Size classes (struct be_pool_classes) are
 * pools of base << c bytes, one per power of two, each with its reserve.
 *
 * Lock: pool->lock covers the free list and the in-use counts; each call
 * takes it for a few instructions and nothing else under it. It is a leaf:
 * a caller may hold its own lock around any call but be_pool_refill() and
 * the allocating gets (lock order: the caller's lock -> pool->lock), and
 * the low-water hook runs after pool->lock is dropped.
 */
#ifndef BLKFS_POOL_H
#define BLKFS_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct be_pool {
	pthread_mutex_t lock;
	char *mem;			/* nr objects of size bytes, touched at init */
	void *free;			/* lock: free objects, linked through their first word */
	size_t size, nr, align;
	uint64_t nr_allocs;		/* atomic: objects malloc'ed (pool empty, or bigger) */
	uint64_t nr_used;		/* lock: objects out now (pool and malloc) */
	uint64_t max_used;		/* lock: the most ever out at once */
	size_t nr_free;			/* lock: objects on the free list */
	bool wanted;			/* lock: asked for an object since init */
	/* The reserve (be_pool_set_reserve), set before first use. */
	size_t target;			/* free objects kept, filled memory or not */
	size_t low;			/* be_pool_take() below it calls low_fn */
	void (*low_fn)(void *arg);
	void *low_arg;
};

/**
 * be_pool_init - fill a pool
 * @pool: the pool (its old contents are ignored)
 * @nr: objects filled now (0: every get comes from malloc)
 * @size: bytes of each (at least a pointer)
 * @align: each object's alignment, a power of two (64 keeps them off each
 *	other's cache lines)
 *
 * Returns: 0 or -errno.
 */
int be_pool_init(struct be_pool *pool, size_t nr, size_t size, size_t align);
/* Free the pool (every object back first). A zeroed pool, never filled, is fine too. */
void be_pool_destroy(struct be_pool *pool);
/* An object of the pool's size, zeroed; NULL only when the pool is empty and malloc fails. */
void *be_pool_get(struct be_pool *pool);
/*
 * An object of @size bytes with its first @size bytes zeroed: from the pool
 * when @size fits its objects (the rest of the object is not cleared),
 * else from malloc (counted in nr_allocs). NULL when neither serves.
 */
void *be_pool_get_size(struct be_pool *pool, size_t size);
/* Back to the pool, or to malloc for one it did not fill (NULL: nothing). */
void be_pool_put(struct be_pool *pool, void *obj);
/**
 * be_pool_set_reserve - keep up to @target free objects, filled memory or
 * allocated, and call @low_fn(@arg) when a take leaves fewer than @low
 * @low_fn: may be NULL; runs in be_pool_take()'s thread, under whatever
 *	lock its caller holds, not under pool->lock
 *
 * Call it after be_pool_init(), before the pool is used. Objects of a pool
 * with a reserve are all of its size: be_pool_get_size() past it is NULL.
 */
void be_pool_set_reserve(struct be_pool *pool, size_t target, size_t low,
			 void (*low_fn)(void *arg), void *arg);

/**
 * be_pool_take - a free object, not zeroed, without asking the allocator
 *
 * Returns: the object (what its last user left in it), or NULL when the
 * free list is empty. Either way the pool is wanted from now on (refills
 * fill it), and @low_fn runs when fewer than the low-water mark are left.
 * Locking: may be called under the caller's lock.
 */
void *be_pool_take(struct be_pool *pool);

/**
 * be_pool_put_spill - back to the pool, without freeing
 * @spill: an object the pool does not keep (past its target, or malloc'ed
 *	   bigger) is linked onto *@spill through its first word, for
 *	   be_pool_spill_free() once the caller has dropped its lock
 */
void be_pool_put_spill(struct be_pool *pool, void *obj, void **spill);
/* Free what be_pool_put_spill() left on a spill list (NULL: nothing). */
void be_pool_spill_free(void *spill);

/**
 * be_pool_refill - allocate free objects up to the reserve's target, if the
 * pool was ever wanted (a pool nobody takes from costs no memory)
 *
 * Returns: the objects added (counted in nr_allocs).
 * Locking: allocates; call it with no lock held.
 */
size_t be_pool_refill(struct be_pool *pool);

/* Objects on the free list now. */
size_t be_pool_nr_free(struct be_pool *pool);

#define BE_POOL_CLASSES 20

/*
 * Size classes: pool c serves objects of base << c bytes (c < nr), each
 * with a reserve of @bytes worth of objects (one at least) refilled below
 * half of that.
 */
struct be_pool_classes {
	int nr;
	size_t base;
	struct be_pool cls[BE_POOL_CLASSES];
};

/**
 * be_pool_classes_init - @nr pools of @base << c bytes, aligned to @align
 * @bytes: the free memory each class keeps (its target: @bytes / size,
 *	   at least 1; its low-water mark: half the target, rounded up)
 * @nr_filled: the smallest classes filled to their target now, touched
 * @low_fn, @arg: each class's low-water hook (be_pool_set_reserve())
 *
 * Returns: 0 or -errno (nothing left allocated).
 */
int be_pool_classes_init(struct be_pool_classes *pc, int nr, size_t base, size_t align,
			 size_t bytes, int nr_filled, void (*low_fn)(void *arg), void *arg);
void be_pool_classes_destroy(struct be_pool_classes *pc);
/* The smallest class whose objects hold @len bytes; -1 when none does. */
int be_pool_class(const struct be_pool_classes *pc, size_t len);
/* be_pool_refill() on every class: the objects added. */
size_t be_pool_classes_refill(struct be_pool_classes *pc);
/* Bytes free over all classes (*@free_bytes), their targets' bytes (*@limit), nr_allocs summed. */
uint64_t be_pool_classes_count(struct be_pool_classes *pc, uint64_t *free_bytes, uint64_t *limit);

/* "PREFIX_pool N\nPREFIX_pool_allocs N\nPREFIX_pool_max_used N\n" for ->stat; the length. */
size_t be_pool_stat(struct be_pool *pool, const char *prefix, char *buf, size_t len);

#endif
