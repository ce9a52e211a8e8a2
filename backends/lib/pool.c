/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/pool.c - the pool of per-I/O objects (pool.h): a free list
 * through the objects' first word under one mutex, over memory filled at
 * init; malloc past it, counted. A reserve keeps allocated objects on the
 * same list, up to its target; size classes are an array of pools.
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
	pool->nr_free = nr;
	pool->wanted = nr > 0;		/* filled: refills keep it so */
	pool->align = align;
	return 0;
}

static bool pool_owns(const struct be_pool *pool, const void *obj)
{
	const char *o = obj;

	return pool->nr && o >= pool->mem && o < pool->mem + pool->nr * pool->size;
}

void be_pool_destroy(struct be_pool *pool)
{
	void *o, *next;

	if (!pool->size)
		return;		/* never filled, or destroyed already */
	/* A reserve's allocated objects are on the free list with the filled ones. */
	for (o = pool->free; o; o = next) {
		next = *(void **)o;
		if (!pool_owns(pool, o))
			free(o);
	}
	pthread_mutex_destroy(&pool->lock);
	free(pool->mem);
	memset(pool, 0, sizeof(*pool));
}

void be_pool_set_reserve(struct be_pool *pool, size_t target, size_t low,
			 void (*low_fn)(void *arg), void *arg)
{
	pool->target = target;
	pool->low = low;
	pool->low_fn = low_fn;
	pool->low_arg = arg;
}

/* Does a put keep @obj? Filled memory always; an allocated object up to the target. */
static bool keep_locked(const struct be_pool *pool, bool mine)
{
	return mine || pool->nr_free < pool->target;
}

void *be_pool_get_size(struct be_pool *pool, size_t size)
{
	void *o = NULL;

	if (size > pool->size && pool->target)
		return NULL;	/* a reserve keeps objects of one size only */
	pthread_mutex_lock(&pool->lock);
	pool->wanted = true;
	if (size <= pool->size) {
		o = pool->free;
		if (o) {
			pool->free = *(void **)o;
			pool->nr_free--;
		}
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
	void *spill = NULL;

	be_pool_put_spill(pool, obj, &spill);
	be_pool_spill_free(spill);
}

void be_pool_put_spill(struct be_pool *pool, void *obj, void **spill)
{
	bool keep;

	if (!obj)
		return;
	pthread_mutex_lock(&pool->lock);
	pool->nr_used--;
	keep = keep_locked(pool, pool_owns(pool, obj));
	if (keep) {
		*(void **)obj = pool->free;
		pool->free = obj;
		pool->nr_free++;
	}
	pthread_mutex_unlock(&pool->lock);
	if (!keep) {
		*(void **)obj = *spill;
		*spill = obj;
	}
}

void be_pool_spill_free(void *spill)
{
	while (spill) {
		void *o = spill;

		spill = *(void **)o;
		free(o);
	}
}

void *be_pool_take(struct be_pool *pool)
{
	bool low;
	void *o;

	pthread_mutex_lock(&pool->lock);
	pool->wanted = true;
	o = pool->free;
	if (o) {
		pool->free = *(void **)o;
		pool->nr_free--;
		if (++pool->nr_used > pool->max_used)
			pool->max_used = pool->nr_used;
	}
	low = pool->nr_free < pool->low || !o;
	pthread_mutex_unlock(&pool->lock);
	if (low && pool->low_fn)
		pool->low_fn(pool->low_arg);
	return o;
}

size_t be_pool_refill(struct be_pool *pool)
{
	void *got = NULL, *spill = NULL;
	size_t need, i, n = 0;

	pthread_mutex_lock(&pool->lock);
	need = pool->wanted && pool->nr_free < pool->target ? pool->target - pool->nr_free : 0;
	pthread_mutex_unlock(&pool->lock);
	for (i = 0; i < need; i++) {
		void *o = aligned_alloc(pool->align, pool->size);

		if (!o)
			break;
		/* Touched now, not on the I/O path. */
		memset(o, 0, pool->size);
		*(void **)o = got;
		got = o;
		n++;
	}
	if (!n)
		return 0;
	__atomic_add_fetch(&pool->nr_allocs, n, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pool->lock);
	while (got) {
		void *o = got;

		got = *(void **)o;
		if (keep_locked(pool, false)) {
			/* puts meanwhile may have filled it: the rest is spilled */
			*(void **)o = pool->free;
			pool->free = o;
			pool->nr_free++;
		} else {
			*(void **)o = spill;
			spill = o;
		}
	}
	pthread_mutex_unlock(&pool->lock);
	be_pool_spill_free(spill);
	return n;
}

size_t be_pool_nr_free(struct be_pool *pool)
{
	size_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->nr_free;
	pthread_mutex_unlock(&pool->lock);
	return n;
}

int be_pool_classes_init(struct be_pool_classes *pc, int nr, size_t base, size_t align,
			 size_t bytes, int nr_filled, void (*low_fn)(void *arg), void *arg)
{
	int c, ret;

	memset(pc, 0, sizeof(*pc));
	if (nr < 1 || nr > BE_POOL_CLASSES || !base)
		return -EINVAL;
	for (c = 0; c < nr; c++) {
		size_t size = base << c;
		size_t target = size < bytes ? bytes / size : 1;

		ret = be_pool_init(&pc->cls[c], c < nr_filled ? target : 0, size, align);
		if (ret) {
			while (c-- > 0)
				be_pool_destroy(&pc->cls[c]);
			return ret;
		}
		be_pool_set_reserve(&pc->cls[c], target, (target + 1) / 2, low_fn, arg);
	}
	pc->nr = nr;
	pc->base = base;
	return 0;
}

void be_pool_classes_destroy(struct be_pool_classes *pc)
{
	int c;

	for (c = 0; c < pc->nr; c++)
		be_pool_destroy(&pc->cls[c]);
	pc->nr = 0;
}

int be_pool_class(const struct be_pool_classes *pc, size_t len)
{
	int c;

	for (c = 0; c < pc->nr; c++)
		if (len <= pc->base << c)
			return c;
	return -1;
}

size_t be_pool_classes_refill(struct be_pool_classes *pc)
{
	size_t n = 0;
	int c;

	for (c = 0; c < pc->nr; c++)
		n += be_pool_refill(&pc->cls[c]);
	return n;
}

uint64_t be_pool_classes_count(struct be_pool_classes *pc, uint64_t *free_bytes, uint64_t *limit)
{
	uint64_t allocs = 0;
	int c;

	*free_bytes = *limit = 0;
	for (c = 0; c < pc->nr; c++) {
		struct be_pool *p = &pc->cls[c];

		*free_bytes += (uint64_t)be_pool_nr_free(p) * p->size;
		*limit += (uint64_t)p->target * p->size;
		allocs += __atomic_load_n(&p->nr_allocs, __ATOMIC_RELAXED);
	}
	return allocs;
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
