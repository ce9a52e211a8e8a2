/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/pool.c - the pool of per-I/O objects (pool.h): a free list
 * through the objects' first word under one mutex, over memory filled at
 * init; malloc past it, counted.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

int be_pool_init(struct be_pool *pool, size_t nr, size_t size, size_t align)
{
	size_t i;
	int ret;

	memset(pool, 0, sizeof(*pool));
	if (align < sizeof(void *))
		align = sizeof(void *);
	size = (size < sizeof(void *) ? sizeof(void *) : size);
	size = (size + align - 1) & ~(align - 1);
	if (nr) {
		pool->mem = aligned_alloc(align, nr * size);
		if (!pool->mem)
			return -ENOMEM;
		/* Touched now, not on the I/O path (first touch is slow here). */
		memset(pool->mem, 0, nr * size);
		for (i = nr; i-- > 0;) {
			void *o = pool->mem + i * size;

			*(void **)o = pool->free;
			pool->free = o;
		}
	}
	ret = -pthread_mutex_init(&pool->lock, NULL);
	if (ret) {
		free(pool->mem);
		memset(pool, 0, sizeof(*pool));
		return ret;
	}
	pool->size = size;
	pool->nr = nr;
	pool->align = align;
	return 0;
}

void be_pool_destroy(struct be_pool *pool)
{
	if (!pool->size)
		return;		/* never filled, or destroyed already */
	pthread_mutex_destroy(&pool->lock);
	free(pool->mem);
	memset(pool, 0, sizeof(*pool));
}

static bool pool_owns(const struct be_pool *pool, const void *obj)
{
	const char *o = obj;

	return pool->nr && o >= pool->mem && o < pool->mem + pool->nr * pool->size;
}

void *be_pool_get_size(struct be_pool *pool, size_t size)
{
	void *o = NULL;

	pthread_mutex_lock(&pool->lock);
	if (size <= pool->size) {
		o = pool->free;
		if (o)
			pool->free = *(void **)o;
	}
	if (++pool->nr_used > pool->max_used)
		pool->max_used = pool->nr_used;
	pthread_mutex_unlock(&pool->lock);
	if (!o) {
		/* Empty, or too big: serve anyway, and say so in the counters. */
		size_t n = size < pool->size ? pool->size : (size + pool->align - 1) & ~(pool->align - 1);

		__atomic_add_fetch(&pool->nr_allocs, 1, __ATOMIC_RELAXED);
		o = aligned_alloc(pool->align, n);
		if (!o) {
			pthread_mutex_lock(&pool->lock);
			pool->nr_used--;
			pthread_mutex_unlock(&pool->lock);
			return NULL;
		}
	}
	memset(o, 0, size);
	return o;
}

void *be_pool_get(struct be_pool *pool)
{
	return be_pool_get_size(pool, pool->size);
}

void be_pool_put(struct be_pool *pool, void *obj)
{
	bool mine;

	if (!obj)
		return;
	mine = pool_owns(pool, obj);
	pthread_mutex_lock(&pool->lock);
	pool->nr_used--;
	if (mine) {
		*(void **)obj = pool->free;
		pool->free = obj;
	}
	pthread_mutex_unlock(&pool->lock);
	if (!mine)
		free(obj);
}

size_t be_pool_stat(struct be_pool *pool, const char *prefix, char *buf, size_t len)
{
	uint64_t max_used;
	int n;

	if (!len)
		return 0;
	pthread_mutex_lock(&pool->lock);
	max_used = pool->max_used;
	pthread_mutex_unlock(&pool->lock);
	n = snprintf(buf, len, "%s_pool %zu\n%s_pool_allocs %llu\n%s_pool_max_used %llu\n",
		     prefix, pool->nr, prefix,
		     (unsigned long long)__atomic_load_n(&pool->nr_allocs, __ATOMIC_RELAXED),
		     prefix, (unsigned long long)max_used);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : len - 1;
}
