/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_folio_wait.c - a thread that waits for a free folio is
 * woken by the last put of one, every time, with the bounded polls of the
 * wait turned off (pc_test_hooks.no_poll, a test build's hook). The hooks
 * step into the race window on purpose: every folio of the cache is held
 * by a read parked in the fake backend; a ninth read finds none and, at
 * the moment between its scan and its wait (before_wait, pc->lock held),
 * the oldest parked read is completed and its reader drops the folio
 * (put_idle): the put must not miss the waiter. Before the fix the put
 * read alloc_waiters before the waiter raised it and woke no one, and only
 * the 10/100 ms polls ended the wait: with them off, it never ends.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/lib/clock.h"
#include "../../backends/lib/log.h"
#include "../../core/pcache.h"
#include "../../core/pcache_int.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define FOLIO (128 * KiB)
#define NR_FOLIOS 8		/* a 1 MiB cache: the smallest */
#define HOOK_WAIT_MS 10000u	/* the hook's own bound: fails, never hangs */

static pthread_mutex_t hk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hk_cond;
static atomic_bool armed, in_window, put_seen;

struct reader {
	pthread_t tid;
	uint64_t pos;
	ssize_t ret;
	uint8_t *buf;
	atomic_bool done;
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	r->ret = pc_read(dev, r->buf, 4096, r->pos);
	atomic_store(&r->done, true);
	return NULL;
}

/* hk_lock held: wait until @flag is set, at most @ms. */
static bool hk_wait_locked(atomic_bool *flag, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000u;

	while (!atomic_load(flag))
		if (blk_cond_wait_until(&hk_cond, &hk_lock, end) && !atomic_load(flag))
			return false;
	return true;
}

static void hk_set(atomic_bool *flag)
{
	pthread_mutex_lock(&hk_lock);
	atomic_store(flag, true);
	pthread_cond_broadcast(&hk_cond);
	pthread_mutex_unlock(&hk_lock);
}

/* The waiter, pc->lock held, its scan having found no folio: let one go now. */
static void before_wait(struct pc_cache *c)
{
	bool seen;

	(void)c;
	if (!atomic_exchange(&armed, false))
		return;
	hk_set(&in_window);
	pthread_mutex_lock(&hk_lock);
	seen = hk_wait_locked(&put_seen, HOOK_WAIT_MS);
	pthread_mutex_unlock(&hk_lock);
	if (!seen)
		fprintf(stderr, "test_folio_wait: the held folio was not put within %u ms\n",
			HOOK_WAIT_MS);
}

static void put_idle(struct pc_folio *f)
{
	(void)f;
	if (atomic_load(&in_window) && !atomic_load(&put_seen))
		hk_set(&put_seen);
}

static void hooks_off(void)
{
	memset(&pc_test_hooks, 0, sizeof(pc_test_hooks));
	teardown();
}

static void last_put_wakes(bool flusher)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 128 * KiB);
	struct reader r[NR_FOLIOS + 1];
	int i;

	cr_assert_eq(blk_cond_init(&hk_cond), 0);
	setup(&g, NR_FOLIOS * FOLIO, FOLIO, 0);
	if (flusher)
		cr_assert_eq(pc_cache_start(pc), 0);
	fake_set_mode(fb, FAKE_MANUAL);
	pc_test_hooks.no_poll = true;
	pc_test_hooks.before_wait = before_wait;
	pc_test_hooks.put_idle = put_idle;

	/* every folio held by a read parked below */
	for (i = 0; i < NR_FOLIOS; i++) {
		r[i] = (struct reader){ .pos = (uint64_t)i * FOLIO, .buf = talloc(4096) };
		cr_assert_eq(pthread_create(&r[i].tid, NULL, reader_main, &r[i]), 0);
	}
	cr_assert(fake_wait_pending(fb, NR_FOLIOS, WAIT_MS), "the %d reads did not reach the fake",
		  NR_FOLIOS);
	/* a ninth read: no folio; in its window, the oldest parked read ends and drops its folio */
	atomic_store(&armed, true);
	r[NR_FOLIOS] = (struct reader){ .pos = (uint64_t)NR_FOLIOS * FOLIO, .buf = talloc(4096) };
	cr_assert_eq(pthread_create(&r[NR_FOLIOS].tid, NULL, reader_main, &r[NR_FOLIOS]), 0);
	pthread_mutex_lock(&hk_lock);
	cr_assert(hk_wait_locked(&in_window, WAIT_MS), "the ninth read never waited for a folio");
	pthread_mutex_unlock(&hk_lock);
	/* the oldest parked read, whichever reader's it is, ends and drops its folio */
	cr_assert(fake_complete_one(fb, 0));
	pthread_mutex_lock(&hk_lock);
	cr_assert(hk_wait_locked(&put_seen, WAIT_MS), "the read that ended did not put its folio");
	pthread_mutex_unlock(&hk_lock);
	/* the waiter must take the folio and read: its I/O reaches the fake */
	cr_assert(fake_wait_pending(fb, NR_FOLIOS, WAIT_MS),
		  "the waiter for a folio was not woken by the last put (a lost wake-up)");
	fake_complete_all(fb, false);
	for (i = 0; i <= NR_FOLIOS; i++) {
		pthread_join(r[i].tid, NULL);
		cr_assert_eq(r[i].ret, 4096, "read %d: %zd", i, r[i].ret);
	}
	memset(&pc_test_hooks, 0, sizeof(pc_test_hooks));
	if (flusher)
		pc_cache_stop(pc);
}

Test(folio_wait, last_put_wakes_the_waiter, .fini = hooks_off, .timeout = 180)
{
	last_put_wakes(false);
}

Test(folio_wait, last_put_wakes_the_waiter_with_the_flusher, .fini = hooks_off, .timeout = 180)
{
	last_put_wakes(true);
}
