/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_tlslots.c - the per-thread slot tables (backends/lib/tlslots.h)
 * as their users count with them: many threads count in blocks of their own
 * while a reader sums, threads exit (their blocks folded), and the sum is
 * exact: no count lost, none counted twice. An owner that goes away leaves
 * its blocks orphaned: a newer owner with the same id gets blocks of its
 * own, and an orphan's counts reach no one.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "../../backends/lib/tlslots.h"

#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELAXED)

struct owner;

struct blk {
	struct blk *next;	/* t_lock: o->blocks */
	struct owner *o;	/* atomic, written under t_lock: NULL once orphaned */
	uint64_t n;		/* its thread's: OWNED_ADD */
};

struct owner {
	struct blk *blocks;	/* t_lock */
	uint64_t shared;	/* atomic: exited threads' counts */
	uint32_t id;
};

static pthread_mutex_t t_lock = PTHREAD_MUTEX_INITIALIZER;

static void t_attach(void *b, void *o)
{
	struct blk *k = b;
	struct owner *ow = o;

	__atomic_store_n(&k->o, ow, __ATOMIC_RELAXED);
	k->next = ow->blocks;
	ow->blocks = k;
}

static void t_fold(void *b)
{
	struct blk *k = b, **pp;
	struct owner *o = k->o;

	if (!o)
		return;
	for (pp = &o->blocks; *pp != k; pp = &(*pp)->next)
		;
	*pp = k->next;
	__atomic_add_fetch(&o->shared, k->n, __ATOMIC_RELAXED);
}

static struct tls_kind t_kind = TLS_KIND_INIT(&t_lock, sizeof(struct blk), t_attach, t_fold);
static __thread struct tls_table t_tt;

static void owner_init(struct owner *o)
{
	o->blocks = NULL;
	o->shared = 0;
	pthread_mutex_lock(&t_lock);
	o->id = tls_id_get_locked(&t_kind);
	pthread_mutex_unlock(&t_lock);
	cr_assert_neq(o->id, TLS_NO_ID);
}

static void owner_gone(struct owner *o)
{
	struct blk *k;

	pthread_mutex_lock(&t_lock);
	for (k = o->blocks; k; k = k->next)
		__atomic_store_n(&k->o, NULL, __ATOMIC_RELAXED);
	o->blocks = NULL;
	tls_id_put_locked(&t_kind, o->id);
	pthread_mutex_unlock(&t_lock);
}

static void count(struct owner *o, uint64_t v)
{
	struct blk *k = tls_slot(&t_tt, o->id);

	if (!k || __atomic_load_n(&k->o, __ATOMIC_RELAXED) != o)
		k = tls_slot_make(&t_kind, &t_tt, o->id, o);
	if (k)
		OWNED_ADD(&k->n, v);
	else
		__atomic_add_fetch(&o->shared, v, __ATOMIC_RELAXED);
}

/* What a reader sees: the shared counts and every listed block, under the lock. */
static uint64_t sum(struct owner *o)
{
	uint64_t n;
	struct blk *k;

	pthread_mutex_lock(&t_lock);
	n = __atomic_load_n(&o->shared, __ATOMIC_RELAXED);
	for (k = o->blocks; k; k = k->next)
		n += __atomic_load_n(&k->n, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&t_lock);
	return n;
}

#define NR_OWNERS 3
#define NR_THREADS 8
#define WAVES 6
#define PER_THREAD 20000u

static struct owner owners[NR_OWNERS];
static int counting;		/* atomic: threads still counting */

static void *counter_main(void *arg)
{
	unsigned i;
	int j;

	(void)arg;
	for (i = 0; i < PER_THREAD; i++)
		for (j = 0; j < NR_OWNERS; j++)
			count(&owners[j], (uint64_t)j + 1);
	return NULL;
}

static void *reader_main(void *arg)
{
	uint64_t last[NR_OWNERS] = { 0 };
	int j;

	(void)arg;
	while (__atomic_load_n(&counting, __ATOMIC_ACQUIRE))
		for (j = 0; j < NR_OWNERS; j++) {
			uint64_t n = sum(&owners[j]);

			/* a block folded at its thread's exit is counted once: never back */
			cr_assert_geq(n, last[j], "owner %d: %llu after %llu", j,
				      (unsigned long long)n, (unsigned long long)last[j]);
			last[j] = n;
		}
	return NULL;
}

/* Waves of threads count, a reader sums meanwhile, each thread exits: the sum is exact. */
Test(tlslots, many_threads_count_none_lost)
{
	pthread_t th[NR_THREADS], rd;
	int w, i, j;

	for (j = 0; j < NR_OWNERS; j++)
		owner_init(&owners[j]);
	__atomic_store_n(&counting, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_create(&rd, NULL, reader_main, NULL), 0);
	for (w = 0; w < WAVES; w++) {
		for (i = 0; i < NR_THREADS; i++)
			cr_assert_eq(pthread_create(&th[i], NULL, counter_main, NULL), 0);
		for (i = 0; i < NR_THREADS; i++)
			pthread_join(th[i], NULL);
	}
	__atomic_store_n(&counting, 0, __ATOMIC_RELEASE);
	pthread_join(rd, NULL);
	for (j = 0; j < NR_OWNERS; j++) {
		uint64_t want = (uint64_t)WAVES * NR_THREADS * PER_THREAD * (uint64_t)(j + 1);

		cr_assert_eq(sum(&owners[j]), want, "owner %d: %llu, want %llu", j,
			     (unsigned long long)sum(&owners[j]), (unsigned long long)want);
		/* every thread exited: its block folded and unlisted */
		cr_assert_null(owners[j].blocks);
		cr_assert_eq(owners[j].shared, want);
	}
	for (j = 0; j < NR_OWNERS; j++)
		owner_gone(&owners[j]);
}

/* ---- orphans ---- */

static struct owner o_old, o_new;
static pthread_barrier_t bar;

static void *orphan_main(void *arg)
{
	(void)arg;
	count(&o_old, 5);
	pthread_barrier_wait(&bar);	/* main: o_old goes, o_new takes its id */
	pthread_barrier_wait(&bar);
	count(&o_new, 7);
	return NULL;
}

Test(tlslots, orphan_of_an_owner_gone)
{
	pthread_t th;
	uint32_t id;

	cr_assert_eq(pthread_barrier_init(&bar, NULL, 2), 0);
	owner_init(&o_old);
	id = o_old.id;
	cr_assert_eq(pthread_create(&th, NULL, orphan_main, NULL), 0);
	pthread_barrier_wait(&bar);
	cr_assert_eq(sum(&o_old), 5);
	owner_gone(&o_old);
	owner_init(&o_new);
	/* the lowest free id: the one just freed */
	cr_assert_eq(o_new.id, id);
	pthread_barrier_wait(&bar);
	pthread_join(th, NULL);
	/* the new owner has its own count only, folded at the thread's exit */
	cr_assert_eq(sum(&o_new), 7, "new owner: %llu", (unsigned long long)sum(&o_new));
	cr_assert_null(o_new.blocks);
	/* the orphan's count went nowhere: its owner had gone */
	cr_assert_eq(o_old.shared, 0);
	owner_gone(&o_new);
	pthread_barrier_destroy(&bar);
}

Test(tlslots, ids_lowest_free_then_none)
{
	uint32_t *ids = malloc(TLS_IDS * sizeof(*ids));
	uint32_t i, extra;

	cr_assert_not_null(ids);
	pthread_mutex_lock(&t_lock);
	for (i = 0; i < TLS_IDS; i++) {
		ids[i] = tls_id_get_locked(&t_kind);
		cr_assert_eq(ids[i], i);
	}
	cr_assert_eq(tls_id_get_locked(&t_kind), TLS_NO_ID);
	tls_id_put_locked(&t_kind, 100);
	extra = tls_id_get_locked(&t_kind);
	cr_assert_eq(extra, 100);
	for (i = 0; i < TLS_IDS; i++)
		tls_id_put_locked(&t_kind, ids[i]);
	pthread_mutex_unlock(&t_lock);
	free(ids);
	/* a slot of no id: none made, the caller counts in the shared counts */
	cr_assert_null(tls_slot(&t_tt, TLS_NO_ID));
	cr_assert_null(tls_slot_make(&t_kind, &t_tt, TLS_NO_ID, &o_old));
}
