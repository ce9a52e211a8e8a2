/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_pool.c - struct be_pool (backends/lib/pool.c), the one pool
 * of per-I/O objects: the cache's submission and writeback I/Os and the
 * filters' state come from memory filled at open; taking one allocates
 * nothing while the pool has one free; past it the pool still serves, from
 * malloc, and counts it; the peak in use is kept. The cache takes objects
 * of varying size (a submission I/O with its vector): one that fits comes
 * from the pool with what it asked for zeroed, a bigger one from malloc.
 * powerloss's stocks: a reserve (take without allocating, a low-water hook,
 * refill, put that spills instead of freeing) and size classes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "../../backends/lib/pool.h"

struct obj {
	void *link;	/* the pool's, while free */
	char data[120];
};

static bool zeroed(const struct obj *o)
{
	for (size_t i = 0; i < sizeof(o->data); i++)
		if (o->data[i])
			return false;
	return !o->link;
}

Test(pool, filled_at_init_serves_past_it_and_counts)
{
	struct be_pool pool;
	struct obj *o[6];
	char stat[256];
	int i;

	cr_assert_eq(be_pool_init(&pool, 4, sizeof(struct obj), 64), 0);
	for (i = 0; i < 4; i++) {
		o[i] = be_pool_get(&pool);
		cr_assert_not_null(o[i]);
		cr_assert_eq((uintptr_t)o[i] % 64, 0, "object %d is not aligned", i);
		cr_assert(zeroed(o[i]), "object %d is not zeroed", i);
		memset(o[i]->data, 0x5a, sizeof(o[i]->data));
	}
	cr_assert_eq(pool.nr_allocs, 0, "the filled objects must come without malloc");
	o[4] = be_pool_get(&pool);
	o[5] = be_pool_get(&pool);
	cr_assert(o[4] && o[5]);
	cr_assert_eq(pool.nr_allocs, 2);
	cr_assert_eq(pool.max_used, 6);
	for (i = 0; i < 6; i++)
		be_pool_put(&pool, o[i]);
	be_pool_put(&pool, NULL);
	cr_assert_eq(pool.nr_used, 0);
	/* the four filled ones come back zeroed, without malloc */
	for (i = 0; i < 4; i++) {
		o[i] = be_pool_get(&pool);
		cr_assert(zeroed(o[i]), "reused object %d is not zeroed", i);
	}
	cr_assert_eq(pool.nr_allocs, 2);
	be_pool_stat(&pool, "t", stat, sizeof(stat));
	cr_assert_str_eq(stat, "t_pool 4\nt_pool_allocs 2\nt_pool_max_used 6\n");
	for (i = 0; i < 4; i++)
		be_pool_put(&pool, o[i]);
	be_pool_destroy(&pool);
}

Test(pool, tiny_objects_hold_the_link)
{
	struct be_pool pool;
	char *a, *b;

	cr_assert_eq(be_pool_init(&pool, 2, 1, 1), 0);
	cr_assert_geq(pool.size, sizeof(void *));
	a = be_pool_get(&pool);
	b = be_pool_get(&pool);
	cr_assert(a && b && a != b);
	be_pool_put(&pool, a);
	be_pool_put(&pool, b);
	be_pool_destroy(&pool);
}

#define THREADS 8
#define ROUNDS 20000
#define HELD 4

static void *worker(void *arg)
{
	struct be_pool *pool = arg;
	struct obj *held[HELD];
	int r, i;

	for (r = 0; r < ROUNDS; r++) {
		for (i = 0; i < HELD; i++) {
			held[i] = be_pool_get(pool);
			if (!held[i] || !zeroed(held[i]))
				return (void *)1;
			held[i]->data[0] = (char)(r | 1);
		}
		for (i = 0; i < HELD; i++)
			be_pool_put(pool, held[i]);
	}
	return NULL;
}

/* Never more than THREADS x HELD in use at once; nothing lost on the way. */
Test(pool, threads)
{
	struct be_pool pool;
	pthread_t th[THREADS];
	int i;

	cr_assert_eq(be_pool_init(&pool, 8, sizeof(struct obj), 64), 0);
	for (i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, worker, &pool), 0);
	for (i = 0; i < THREADS; i++) {
		void *r;

		cr_assert_eq(pthread_join(th[i], &r), 0);
		cr_assert_null(r, "worker %d got a bad object", i);
	}
	cr_assert_leq(pool.max_used, THREADS * HELD);
	cr_assert_eq(pool.nr_used, 0);
	be_pool_destroy(&pool);
}

/* The cache's use: objects of the size asked for, up to the pool's and past it. */
Test(pool, sized_gets_fit_or_come_from_malloc)
{
	struct be_pool pool;
	unsigned char *a, *b, *c;
	size_t i;

	cr_assert_eq(be_pool_init(&pool, 2, 200, 64), 0);
	cr_assert_eq(pool.size, 256, "the size rounds up to the alignment");
	a = be_pool_get_size(&pool, 100);
	cr_assert_not_null(a);
	memset(a, 0x77, 256);
	be_pool_put(&pool, a);
	b = be_pool_get_size(&pool, 150);
	cr_assert_eq(b, a, "the object just given back comes first");
	for (i = 0; i < 150; i++)
		cr_assert_eq(b[i], 0, "byte %zu of what was asked for is not zeroed", i);
	cr_assert_eq(pool.nr_allocs, 0);
	/* bigger than the pool's objects: malloc, counted, aligned, zeroed, freed on put */
	c = be_pool_get_size(&pool, 1000);
	cr_assert_not_null(c);
	cr_assert_eq((uintptr_t)c % 64, 0);
	for (i = 0; i < 1000; i++)
		cr_assert_eq(c[i], 0);
	memset(c, 1, 1000);
	cr_assert_eq(pool.nr_allocs, 1);
	cr_assert_eq(pool.nr_used, 2);
	be_pool_put(&pool, c);
	be_pool_put(&pool, b);
	cr_assert_eq(pool.nr_used, 0);
	be_pool_destroy(&pool);
}

/* An error path destroys a pool it never filled, and destroys twice. */
Test(pool, destroy_of_a_zeroed_pool_is_nothing)
{
	struct be_pool pool;
	void *o;

	memset(&pool, 0, sizeof(pool));
	be_pool_destroy(&pool);
	cr_assert_eq(be_pool_init(&pool, 0, 64, 64), 0);
	o = be_pool_get(&pool);
	cr_assert_not_null(o, "an empty pool serves from malloc");
	cr_assert_eq(pool.nr_allocs, 1);
	be_pool_put(&pool, o);
	be_pool_destroy(&pool);
	be_pool_destroy(&pool);
}

static int nr_low;

static void count_low(void *arg)
{
	(*(int *)arg)++;
}

/*
 * powerloss's stocks: a take never allocates (NULL when empty), the hook
 * fires below the low-water mark, a refill allocates back to the target
 * (only once the pool is wanted), and a put past the target spills instead
 * of freeing.
 */
Test(pool, reserve_take_refill_spill)
{
	struct be_pool pool;
	void *o[6], *spill = NULL, *s;
	int i, n;

	nr_low = 0;
	cr_assert_eq(be_pool_init(&pool, 0, 128, 64), 0);
	be_pool_set_reserve(&pool, 4, 2, count_low, &nr_low);
	cr_assert_eq(be_pool_refill(&pool), 0, "nobody wanted it: no memory spent");
	cr_assert_null(be_pool_take(&pool), "empty: a take does not allocate");
	cr_assert_eq(pool.nr_allocs, 0);
	cr_assert_eq(nr_low, 1, "an empty take calls the hook");
	cr_assert_eq(be_pool_refill(&pool), 4, "wanted now: filled to the target");
	cr_assert_eq(pool.nr_allocs, 4);
	cr_assert_eq(be_pool_nr_free(&pool), 4);
	cr_assert_eq(be_pool_refill(&pool), 0, "full");
	for (i = 0; i < 4; i++) {
		o[i] = be_pool_take(&pool);
		cr_assert_not_null(o[i]);
		cr_assert_eq((uintptr_t)o[i] % 64, 0);
	}
	/* 3 and 2 left: no call; 1 and 0: below 2 */
	cr_assert_eq(nr_low, 3);
	cr_assert_null(be_pool_take(&pool));
	cr_assert_eq(pool.nr_used, 4);
	/* served past the reserve from malloc, pool-sized, so it can be kept */
	o[4] = be_pool_get(&pool);
	o[5] = be_pool_get(&pool);
	cr_assert(o[4] && o[5]);
	cr_assert_eq(pool.nr_allocs, 6);
	cr_assert_null(be_pool_get_size(&pool, 129), "one size only in a pool with a reserve");
	for (i = 0; i < 6; i++)
		be_pool_put_spill(&pool, o[i], &spill);
	cr_assert_eq(be_pool_nr_free(&pool), 4, "kept up to the target");
	for (n = 0, s = spill; s; s = *(void **)s)
		n++;
	cr_assert_eq(n, 2, "the two past the target are spilled, not freed");
	be_pool_spill_free(spill);
	cr_assert_eq(pool.nr_used, 0);
	be_pool_destroy(&pool);	/* frees the kept ones: ASan would see a leak */
}

/* A filled pool with a reserve keeps its filled objects, and allocated ones up to the target. */
Test(pool, reserve_over_filled_memory)
{
	struct be_pool pool;
	void *o[3], *spill = NULL;
	int i;

	cr_assert_eq(be_pool_init(&pool, 2, 64, 64), 0);
	be_pool_set_reserve(&pool, 2, 1, NULL, NULL);
	cr_assert_eq(be_pool_refill(&pool), 0, "filled at init: at its target");
	for (i = 0; i < 3; i++)
		o[i] = be_pool_get(&pool);
	cr_assert_eq(pool.nr_allocs, 1);
	/* the allocated one comes back first: kept (under the target) */
	be_pool_put_spill(&pool, o[2], &spill);
	cr_assert_null(spill);
	/* then the filled ones: always kept, never spilled (they are not malloc'ed) */
	be_pool_put_spill(&pool, o[0], &spill);
	be_pool_put_spill(&pool, o[1], &spill);
	cr_assert_null(spill);
	cr_assert_eq(be_pool_nr_free(&pool), 3);
	be_pool_destroy(&pool);
}

/* Size classes: base << c bytes, the smallest that holds a length, targets by bytes. */
Test(pool, size_classes)
{
	struct be_pool_classes pc;
	uint64_t free_bytes, limit;
	int calls = 0;
	void *o;

	cr_assert_eq(be_pool_classes_init(&pc, 0, 4096, 4096, 1 << 16, 1, NULL, NULL), -EINVAL);
	cr_assert_eq(be_pool_classes_init(&pc, 4, 4096, 4096, 1 << 15, 1, count_low, &calls), 0);
	cr_assert_eq(be_pool_class(&pc, 1), 0);
	cr_assert_eq(be_pool_class(&pc, 4096), 0);
	cr_assert_eq(be_pool_class(&pc, 4097), 1);
	cr_assert_eq(be_pool_class(&pc, 8192), 1);
	cr_assert_eq(be_pool_class(&pc, 32768), 3);
	cr_assert_eq(be_pool_class(&pc, 32769), -1, "past the largest class");
	/* class 0 filled (8 x 4K), the others empty until wanted; class 3 keeps one */
	cr_assert_eq(pc.cls[0].target, 8);
	cr_assert_eq(pc.cls[2].target, 2);
	cr_assert_eq(pc.cls[3].target, 1, "a class bigger than the bytes still keeps one");
	cr_assert_eq(be_pool_classes_count(&pc, &free_bytes, &limit), 0);
	cr_assert_eq(free_bytes, 8 * 4096);
	cr_assert_eq(limit, 4 * 32768);
	cr_assert_eq(be_pool_classes_refill(&pc), 0, "only the filled class is wanted, and full");
	cr_assert_null(be_pool_take(&pc.cls[2]));
	cr_assert_eq(calls, 1, "each class has the hook");
	cr_assert_eq(be_pool_classes_refill(&pc), 2);
	o = be_pool_take(&pc.cls[2]);
	cr_assert_not_null(o);
	cr_assert_eq((uintptr_t)o % 4096, 0);
	cr_assert_eq(be_pool_classes_count(&pc, &free_bytes, &limit), 2);
	cr_assert_eq(free_bytes, 8 * 4096 + 16384);
	be_pool_put(&pc.cls[2], o);
	be_pool_classes_destroy(&pc);
}
