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
 * Lock: pool->lock covers the free list and the in-use counts; each call
 * takes it for a few instructions and nothing else under it.
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
/* "PREFIX_pool N\nPREFIX_pool_allocs N\nPREFIX_pool_max_used N\n" for ->stat; the length. */
size_t be_pool_stat(struct be_pool *pool, const char *prefix, char *buf, size_t len);

#endif
