// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_slots.c - fuse/slots.c: a device's request slots.
 *
 * Take and give back (the counts), a taker that waits while all are taken,
 * a freeze that holds new takers and waits for those in flight to come
 * back, a freeze that times out (its takers let go), drain and its bounded
 * form; a plugged taker (backends/lib/plug.h) that flushes its plug before
 * it sleeps, for a slot or on a frozen pool; take and give back without the lock, and all of it at once from
 * several threads (the stress). Each verdict is the pool's state (bf_slots_stats()), waited for by
 * polling it, never a sleep: a blocked thread is known blocked by the
 * pool's own count of waiters, a freeze by its frozen flag.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

#include "../../backends/lib/clock.h"
#include "../../fuse/slots.h"
#include "helpers.h"

#define NR 4

static struct bf_slots pool;
static struct bf_slot entries[NR];

static void pool_make(int n)
{
	int i;

	cr_assert_eq(bf_slots_init(&pool), 0);
	for (i = 0; i < n; i++)
		bf_slots_add(&pool, &entries[i]);
}

static struct bf_slots_stats stats(void)
{
	struct bf_slots_stats st;

	bf_slots_stats(&pool, &st);
	return st;
}

/* Poll until @n threads wait in bf_slots_get() (the test's timeout bounds it). */
static void until_waiters(uint64_t n)
{
	while (stats().waiters != n)
		sched_yield();
}

static void until_frozen(bool frozen)
{
	while (stats().frozen != frozen)
		sched_yield();
}

static bool is_entry(struct bf_slot *s)
{
	return s >= entries && s < entries + NR;
}

static void *getter(void *arg)
{
	(void)arg;
	return bf_slots_get(&pool, NULL);
}

/* A taker that says whether bf_slots_get() waited. */
struct wgetter {
	pthread_t t;
	struct bf_slot *got;
	bool waited;
};

static void *wgetter_fn(void *arg)
{
	struct wgetter *w = arg;

	w->waited = false;
	w->got = bf_slots_get(&pool, &w->waited);
	return NULL;
}

struct freezer {
	pthread_t t;
	unsigned int timeout_ms;
	int ret;
};

static void *freezer_fn(void *arg)
{
	struct freezer *f = arg;

	f->ret = bf_slots_freeze(&pool, f->timeout_ms);
	return NULL;
}

static void *drainer(void *arg)
{
	(void)arg;
	bf_slots_drain(&pool);
	return NULL;
}

Test(slots, get_put_counts, .timeout = 30)
{
	struct bf_slot *a, *b, *c;
	struct bf_slots_stats st;

	pool_make(3);
	a = bf_slots_get(&pool, NULL);
	b = bf_slots_get(&pool, NULL);
	c = bf_slots_get(&pool, NULL);
	cr_assert(is_entry(a) && is_entry(b) && is_entry(c));
	cr_assert(a != b && b != c && a != c);
	st = stats();
	cr_assert_eq(st.in_use, 3);
	cr_assert_eq(st.peak, 3);
	cr_assert_eq(st.nr, 3);
	cr_assert_eq(st.waits, 0);
	bf_slots_put(&pool, b);
	cr_assert_eq(stats().in_use, 2);
	cr_assert_eq(bf_slots_get(&pool, NULL), b, "the slot given back is the next taken");
	bf_slots_put(&pool, a);
	bf_slots_put(&pool, b);
	bf_slots_put(&pool, c);
	st = stats();
	cr_assert_eq(st.in_use, 0);
	cr_assert_eq(st.peak, 3);
	bf_slots_destroy(&pool);
}

Test(slots, get_waits_when_all_taken, .timeout = 30)
{
	struct bf_slot *a;
	void *got;
	pthread_t t;

	pool_make(1);
	a = bf_slots_get(&pool, NULL);
	cr_assert_eq(pthread_create(&t, NULL, getter, NULL), 0);
	until_waiters(1);
	cr_assert_eq(stats().waits, 1);
	cr_assert_eq(stats().in_use, 1);
	bf_slots_put(&pool, a);
	pthread_join(t, &got);
	cr_assert_eq(got, a);
	cr_assert_eq(stats().waiters, 0);
	cr_assert_eq(stats().in_use, 1);
	bf_slots_put(&pool, got);
	bf_slots_destroy(&pool);
}

/*
 * bf_slots_get()'s @waited: false for a slot free at once, true for one
 * waited for (all taken, or frozen): the FUSE level shares its start with
 * the device level only when false (issue 39).
 */
Test(slots, get_says_whether_it_waited, .timeout = 30)
{
	struct freezer f = { .timeout_ms = 600000, .ret = 1 };
	struct wgetter w;
	struct bf_slot *a, *b;
	bool waited = true;

	pool_make(2);
	a = bf_slots_get(&pool, &waited);
	cr_assert_not(waited, "a slot free at once, yet it says it waited");
	waited = true;
	b = bf_slots_get(&pool, &waited);
	cr_assert_not(waited, "the last free slot, yet it says it waited");
	/* all taken: the taker waits until one is given back */
	cr_assert_eq(pthread_create(&w.t, NULL, wgetter_fn, &w), 0);
	until_waiters(1);
	bf_slots_put(&pool, a);
	pthread_join(w.t, NULL);
	cr_assert_eq(w.got, a);
	cr_assert(w.waited, "it waited for a slot given back, yet says it did not");
	/* a slot free, but the pool frozen: the taker waits for the thaw */
	bf_slots_put(&pool, w.got);
	bf_slots_put(&pool, b);
	cr_assert_eq(pthread_create(&f.t, NULL, freezer_fn, &f), 0);
	pthread_join(f.t, NULL);
	cr_assert_eq(f.ret, 0);
	cr_assert_eq(pthread_create(&w.t, NULL, wgetter_fn, &w), 0);
	until_waiters(1);
	bf_slots_thaw(&pool);
	pthread_join(w.t, NULL);
	cr_assert(is_entry(w.got));
	cr_assert(w.waited, "it waited for the thaw, yet says it did not");
	bf_slots_put(&pool, w.got);
	/* free again: no wait */
	waited = true;
	a = bf_slots_get(&pool, &waited);
	cr_assert_not(waited);
	bf_slots_put(&pool, a);
	bf_slots_destroy(&pool);
}

Test(slots, freeze_waits_for_slots_to_drain, .timeout = 30)
{
	struct freezer f = { .timeout_ms = 600000, .ret = 1 };
	struct bf_slot *a;
	void *got;
	pthread_t g;

	pool_make(2);
	a = bf_slots_get(&pool, NULL);
	cr_assert_eq(pthread_create(&f.t, NULL, freezer_fn, &f), 0);
	until_frozen(true);
	/* a slot is free, yet a new taker waits: the pool is frozen */
	cr_assert_eq(pthread_create(&g, NULL, getter, NULL), 0);
	until_waiters(1);
	cr_assert_eq(stats().in_use, 1);
	cr_assert_eq(f.ret, 1, "the freeze returned with a slot in flight");
	bf_slots_put(&pool, a);	/* the last in flight: the freeze ends, frozen */
	pthread_join(f.t, NULL);
	cr_assert_eq(f.ret, 0);
	cr_assert(stats().frozen);
	cr_assert_eq(stats().in_use, 0);
	cr_assert_eq(stats().waiters, 1, "a taker got a slot while frozen");
	bf_slots_thaw(&pool);
	pthread_join(g, &got);
	cr_assert(is_entry(got));
	cr_assert_eq(stats().in_use, 1);
	bf_slots_put(&pool, got);
	bf_slots_destroy(&pool);
}

Test(slots, freeze_without_slots_in_flight, .timeout = 30)
{
	pool_make(2);
	cr_assert_eq(bf_slots_freeze(&pool, 0), 0);
	cr_assert(stats().frozen);
	bf_slots_thaw(&pool);
	cr_assert(!stats().frozen);
	bf_slots_destroy(&pool);
}

Test(slots, freeze_timeout_lets_takers_go, .timeout = 30)
{
	struct freezer f = { .timeout_ms = 50, .ret = 1 };
	struct bf_slot *a;
	void *got;
	pthread_t g;

	pool_make(2);
	a = bf_slots_get(&pool, NULL);	/* never given back while the freeze waits */
	cr_assert_eq(pthread_create(&f.t, NULL, freezer_fn, &f), 0);
	until_frozen(true);
	cr_assert_eq(pthread_create(&g, NULL, getter, NULL), 0);
	/* the taker waits for the freeze, or the freeze already timed out */
	pthread_join(f.t, NULL);
	cr_assert_eq(f.ret, -ETIMEDOUT);
	cr_assert(!stats().frozen, "a freeze that timed out left the pool frozen");
	pthread_join(g, &got);	/* released by the freeze's end */
	cr_assert(is_entry(got) && got != a);
	cr_assert_eq(stats().in_use, 2);
	bf_slots_put(&pool, a);
	bf_slots_put(&pool, got);
	bf_slots_destroy(&pool);
}

Test(slots, drain, .timeout = 30)
{
	struct bf_slot *a, *b;
	pthread_t t;

	pool_make(2);
	cr_assert_eq(bf_slots_drain_ms(&pool, 0), 0);
	a = bf_slots_get(&pool, NULL);
	b = bf_slots_get(&pool, NULL);
	cr_assert_eq(bf_slots_drain_ms(&pool, 10), 2, "drain_ms: the slots still in use");
	cr_assert_eq(pthread_create(&t, NULL, drainer, NULL), 0);
	bf_slots_put(&pool, a);
	cr_assert_eq(bf_slots_drain_ms(&pool, 10), 1);
	bf_slots_put(&pool, b);
	pthread_join(t, NULL);	/* returns only with none in use */
	cr_assert_eq(stats().in_use, 0);
	bf_slots_destroy(&pool);
}

/*
 * A taker and a giver with a slot free and nobody waiting never take the
 * pool's lock: held here, they still go through.
 */
static bool lockless_done;

static void *get_put_many(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < 1000; i++)
		bf_slots_put(&pool, bf_slots_get(&pool, NULL));
	__atomic_store_n(&lockless_done, true, __ATOMIC_RELEASE);
	return NULL;
}

Test(slots, get_put_without_the_lock, .timeout = 30)
{
	uint64_t end;
	bool done;
	pthread_t t;

	pool_make(2);
	lockless_done = false;
	pthread_mutex_lock(&pool.lock);
	cr_assert_eq(pthread_create(&t, NULL, get_put_many, NULL), 0);
	end = blk_now_ms() + 5000;
	while (!(done = __atomic_load_n(&lockless_done, __ATOMIC_ACQUIRE)) && blk_now_ms() < end)
		sched_yield();
	pthread_mutex_unlock(&pool.lock);
	pthread_join(t, NULL);
	cr_assert(done, "get and put waited for the pool's lock with a slot free");
	cr_assert_eq(stats().in_use, 0);
	cr_assert_eq(stats().peak, 1);
	cr_assert_eq(stats().waits, 0);
	bf_slots_destroy(&pool);
}

Test(slots, add_past_the_most, .timeout = 30)
{
	static struct bf_slot many[BF_SLOTS_MAX + 1];
	struct bf_slots_stats st;
	uint32_t i;

	cr_assert_eq(bf_slots_init(&pool), 0);
	for (i = 0; i < BF_SLOTS_MAX; i++)
		cr_assert_eq(bf_slots_add(&pool, &many[i]), 0);
	cr_assert_eq(bf_slots_add(&pool, &many[BF_SLOTS_MAX]), -ENOSPC);
	st = stats();
	cr_assert_eq(st.nr, BF_SLOTS_MAX);
	cr_assert_eq(st.in_use, 0);
	/* every entry comes out once, the last added first */
	for (i = BF_SLOTS_MAX; i-- > 0;)
		cr_assert_eq(bf_slots_get(&pool, NULL), &many[i]);
	cr_assert_eq(stats().in_use, BF_SLOTS_MAX);
	for (i = 0; i < BF_SLOTS_MAX; i++)
		bf_slots_put(&pool, &many[i]);
	bf_slots_destroy(&pool);
}

/*
 * A plugged taker (a ring queue thread serving a batch: backends/lib/plug.h)
 * whose own plug holds the work that would give a slot back: bf_slots_get()
 * must flush the plug before it sleeps, or it waits for itself forever (the
 * kernel flushes a task's plug when it schedules). The work held is a
 * callback deferred to the plug that gives a slot back, as an I/O held by
 * aio's plug ends its request. Without the flush the taker sleeps; the test
 * sees it after PLUG_WAIT_MS, gives a slot back itself to let it go, and
 * fails.
 */
#include "../../backends/lib/plug.h"

#define PLUG_WAIT_MS 3000u

struct plugged_taker {
	pthread_t t;
	struct bf_slot *mine[NR];	/* the slots it took before the wait */
	int nr;				/* how many it takes (all: NR) */
	struct bf_slot *back;		/* the slot its deferred work gives back */
	int deferred;			/* blk_plug_defer() of that work: 1 */
	int puts;			/* that work's runs */
	int puts_before_return;		/* its runs when bf_slots_get() returned */
	bool plugged_after;		/* blk_plugged() when bf_slots_get() returned */
	struct bf_slot *got;
	bool waited;
	int ready, go, done;		/* atomic */
};

static void plugged_put_back(void *data)
{
	struct plugged_taker *p = data;

	p->puts++;
	bf_slots_put(&pool, p->back);
}

static void *plugged_taker_fn(void *arg)
{
	struct plugged_taker *p = arg;
	struct blk_plug plug;
	int i;

	blk_plug_start(&plug);
	for (i = 0; i < p->nr; i++)
		p->mine[i] = bf_slots_get(&pool, NULL);
	p->back = p->mine[p->nr - 1];
	p->deferred = blk_plug_defer(plugged_put_back, p);
	__atomic_store_n(&p->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&p->go, __ATOMIC_ACQUIRE))
		sched_yield();
	p->got = bf_slots_get(&pool, &p->waited);
	p->puts_before_return = p->puts;
	p->plugged_after = blk_plugged();
	blk_plug_finish(&plug);
	__atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(slots, a_plugged_taker_flushes_before_it_waits, .timeout = 30)
{
	struct plugged_taker p = { .nr = NR };
	bool done;
	int i;

	pool_make(NR);
	cr_assert_eq(pthread_create(&p.t, NULL, plugged_taker_fn, &p), 0);
	cr_assert(flag_wait(&p.ready, PLUG_WAIT_MS));
	cr_assert_eq(p.deferred, 1);
	cr_assert_eq(stats().in_use, NR);
	__atomic_store_n(&p.go, 1, __ATOMIC_RELEASE);
	done = flag_wait(&p.done, PLUG_WAIT_MS);
	if (!done) {
		/* it sleeps on the slot its own plug holds: let it go, then fail */
		bf_slots_put(&pool, p.mine[0]);
		pthread_join(p.t, NULL);
		cr_assert_fail("a plugged bf_slots_get() slept %u ms on the slot its own plug "
			       "held back: no blk_plug_flush() before the wait", PLUG_WAIT_MS);
	}
	pthread_join(p.t, NULL);
	cr_assert_eq(p.puts, 1, "the deferred work ran %d times", p.puts);
	cr_assert_eq(p.puts_before_return, 1, "the plug was not flushed inside bf_slots_get()");
	cr_assert_eq(p.got, p.back, "not the slot the flush gave back");
	cr_assert(p.waited, "all were taken, yet it says it did not wait");
	cr_assert(p.plugged_after, "the flush ended the taker's plug");
	for (i = 0; i < NR; i++)
		bf_slots_put(&pool, p.mine[i]);
	cr_assert_eq(stats().in_use, 0);
	bf_slots_destroy(&pool);
}

/*
 * The same on a frozen pool: a freeze waits for the slots in flight, one of
 * them held back by the plugged taker that now waits for the thaw. The
 * flush lets the freeze end; without it the freeze times out
 * (PLUG_WAIT_MS) and the test fails on its -ETIMEDOUT.
 */
Test(slots, a_plugged_taker_of_a_frozen_pool_flushes, .timeout = 30)
{
	struct plugged_taker p = { .nr = 1 };
	struct freezer f = { .timeout_ms = PLUG_WAIT_MS, .ret = 1 };

	pool_make(2);
	cr_assert_eq(pthread_create(&p.t, NULL, plugged_taker_fn, &p), 0);
	cr_assert(flag_wait(&p.ready, PLUG_WAIT_MS));
	cr_assert_eq(p.deferred, 1);
	cr_assert_eq(pthread_create(&f.t, NULL, freezer_fn, &f), 0);
	until_frozen(true);
	__atomic_store_n(&p.go, 1, __ATOMIC_RELEASE);
	pthread_join(f.t, NULL);
	if (f.ret) {
		pthread_join(p.t, NULL);	/* the timed-out freeze let it go */
		cr_assert_fail("the freeze waited %u ms for the slot a frozen plugged "
			       "bf_slots_get() held back in its plug (%d): no blk_plug_flush() "
			       "before the wait", PLUG_WAIT_MS, f.ret);
	}
	cr_assert_eq(p.puts, 1, "the freeze ended without the deferred work");
	cr_assert_eq(stats().in_use, 0);
	until_waiters(1);
	bf_slots_thaw(&pool);
	pthread_join(p.t, NULL);
	cr_assert(is_entry(p.got));
	cr_assert(p.waited);
	cr_assert_eq(p.puts_before_return, 1);
	bf_slots_put(&pool, p.got);
	bf_slots_destroy(&pool);
}

/*
 * Stress: STRESS_TAKERS threads take and give back STRESS_ROUNDS slots each
 * from a pool of STRESS_SLOTS (most takes find none free, or race for the
 * last one), while one thread freezes and thaws in a loop and another
 * drains. A slot handed out twice shows in its owner flag; a take while
 * frozen in stress_frozen; a lost wake-up as the test's timeout.
 */
#define STRESS_TAKERS 4
#define STRESS_ROUNDS 200000
#define STRESS_SLOTS 3

static int stress_owner[STRESS_SLOTS];	/* atomic: 1 while the slot is taken */
static int stress_frozen;		/* atomic: 1 between a freeze's return and the thaw */
static int stress_stop;			/* atomic: the takers are done */
static int stress_twice, stress_while_frozen, stress_not_owned;	/* atomic: errors seen */
static unsigned long stress_freezes, stress_drains;

static void *stress_taker(void *arg)
{
	int i;

	(void)arg;
	for (i = 0; i < STRESS_ROUNDS; i++) {
		struct bf_slot *slot = bf_slots_get(&pool, NULL);
		long n = slot - entries;

		if (__atomic_load_n(&stress_frozen, __ATOMIC_SEQ_CST))
			__atomic_fetch_add(&stress_while_frozen, 1, __ATOMIC_RELAXED);
		if (n < 0 || n >= STRESS_SLOTS ||
		    __atomic_exchange_n(&stress_owner[n], 1, __ATOMIC_RELAXED)) {
			__atomic_fetch_add(&stress_twice, 1, __ATOMIC_RELAXED);
			continue;	/* not ours to give back */
		}
		if (!(i % 64))
			sched_yield();
		if (!__atomic_exchange_n(&stress_owner[n], 0, __ATOMIC_RELAXED))
			__atomic_fetch_add(&stress_not_owned, 1, __ATOMIC_RELAXED);
		bf_slots_put(&pool, slot);
	}
	return NULL;
}

static void *stress_freezer(void *arg)
{
	int i, n;

	(void)arg;
	while (!__atomic_load_n(&stress_stop, __ATOMIC_ACQUIRE)) {
		if (bf_slots_freeze(&pool, 10000))
			continue;
		__atomic_store_n(&stress_frozen, 1, __ATOMIC_SEQ_CST);
		/* hold it a while, long enough for takers to come and wait */
		for (i = 0; i < 20; i++) {
			for (n = 0; n < STRESS_SLOTS; n++)
				if (__atomic_load_n(&stress_owner[n], __ATOMIC_RELAXED))
					__atomic_fetch_add(&stress_while_frozen, 1,
							   __ATOMIC_RELAXED);
			sched_yield();
		}
		if (stats().in_use)
			__atomic_fetch_add(&stress_while_frozen, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&stress_frozen, 0, __ATOMIC_SEQ_CST);
		bf_slots_thaw(&pool);
		stress_freezes++;
		for (i = 0; i < 50; i++)
			sched_yield();
	}
	return NULL;
}

static void *stress_drainer(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&stress_stop, __ATOMIC_ACQUIRE)) {
		if (stress_drains % 2)
			bf_slots_drain(&pool);	/* returns at the latest in a freeze */
		else
			bf_slots_drain_ms(&pool, 1);
		stress_drains++;
		sched_yield();
	}
	return NULL;
}

Test(slots, stress_takers_freeze_drain, .timeout = 120)
{
	pthread_t takers[STRESS_TAKERS], freezer, drainer;
	struct bf_slots_stats st;
	int i;

	pool_make(STRESS_SLOTS);
	for (i = 0; i < STRESS_TAKERS; i++)
		cr_assert_eq(pthread_create(&takers[i], NULL, stress_taker, NULL), 0);
	cr_assert_eq(pthread_create(&freezer, NULL, stress_freezer, NULL), 0);
	cr_assert_eq(pthread_create(&drainer, NULL, stress_drainer, NULL), 0);
	for (i = 0; i < STRESS_TAKERS; i++)
		pthread_join(takers[i], NULL);
	__atomic_store_n(&stress_stop, 1, __ATOMIC_RELEASE);
	pthread_join(freezer, NULL);
	pthread_join(drainer, NULL);
	st = stats();
	cr_assert_eq(stress_twice, 0, "a slot handed out twice (%d times)", stress_twice);
	cr_assert_eq(stress_not_owned, 0, "a slot given back that its taker no longer owned");
	cr_assert_eq(stress_while_frozen, 0, "a slot taken while frozen (%d times)",
		     stress_while_frozen);
	cr_assert_gt(stress_freezes, 0);
	cr_assert_gt(stress_drains, 0);
	cr_assert_eq(st.in_use, 0);
	cr_assert_eq(st.waiters, 0);
	cr_assert(!st.frozen);
	cr_assert_eq(st.peak, STRESS_SLOTS);
	cr_assert_gt(st.waits, 0, "no taker ever waited: the stress did not stress");
	cr_log_info("slots stress: %lu freezes, %lu drains, %llu waits", stress_freezes,
		    stress_drains, (unsigned long long)st.waits);
	bf_slots_destroy(&pool);
}

/*
 * fuse/opens.c, the other table of slots fuse/ keeps: the OPENs in flight,
 * whose replies get FOPEN_PARALLEL_DIRECT_WRITES. More in flight than its
 * first 64 entries: none is forgotten, none loses the flag.
 */
#include <linux/fuse.h>

#include "../../fuse/opens.h"

#define MANY_OPENS 300

Test(open_slots, more_in_flight_than_first_table, .timeout = 30)
{
	uint64_t u;

	bf_opens_free();
	for (u = 1; u <= MANY_OPENS; u++)
		bf_opens_note(FUSE_OPEN, u * 2);
	bf_opens_note(FUSE_READ, 1);	/* not an OPEN: not remembered */
	cr_assert_eq(bf_opens_pending(), MANY_OPENS);
	cr_assert(!bf_opens_forget(1));
	for (u = 1; u <= MANY_OPENS; u++)
		cr_assert(bf_opens_forget(u * 2), "OPEN %llu of %d in flight lost its flag",
			  (unsigned long long)u, MANY_OPENS);
	cr_assert(!bf_opens_forget(2), "a reply passes once");
	cr_assert_eq(bf_opens_pending(), 0);
	cr_assert_eq(bf_opens_lost(), 0);
	bf_opens_free();
}

Test(open_slots, failed_opens_leave_no_entry, .timeout = 30)
{
	uint64_t u;

	bf_opens_free();
	/* each OPEN's reply (an error: forgotten as rawio.c does) before the next */
	for (u = 1; u <= MANY_OPENS; u++) {
		bf_opens_note(FUSE_OPEN, u);
		cr_assert(bf_opens_forget(u));
	}
	cr_assert_eq(bf_opens_pending(), 0);
	bf_opens_note(FUSE_OPEN, 7777);
	cr_assert(bf_opens_forget(7777));
	bf_opens_free();
}
