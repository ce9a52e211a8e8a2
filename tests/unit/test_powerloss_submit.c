// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_powerloss_submit.c - what the powerloss filter's submit()
 * may do in the cache's thread: it neither waits for the layer below (the
 * read of the old contents, an overlapping write in flight) nor asks the
 * allocator once its stocks are filled. The fake below holds every I/O
 * (FAKE_MANUAL); a watchdog thread ends the wait of a submit() that blocks
 * anyway, so such a filter fails the test instead of hanging it. The crash
 * model itself is test_powerloss.c's.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"
#include "fake_backend.h"
#include "helpers.h"

static struct fake_be *fb;

static void setup(void)
{
	const struct blk_geometry geo = {
		.size = 4 * MiB, .lbs = 512, .pbs = 4096, .max_io = 64 * KiB,
	};

	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void teardown(void)
{
	fake_destroy(fb);
	fb = NULL;
}

TestSuite(powerloss_submit, .init = setup, .fini = teardown);

static struct blk_backend *pl_open(void)
{
	struct tparams tp;

	filter_params_init(&tp, "powerloss", fake_backend(fb), "/etc/blkfs.conf", 2);
	return filter_open(&tp);
}

/* ---- the watchdog ---- */

struct watchdog {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* blk_cond_init: the wait is timed */
	bool done;			/* lock: the submits returned */
	bool fired;			/* lock: they had not after WAIT_MS */
};

/*
 * Wait WAIT_MS for the test thread's submits to return; if they have not,
 * say so and complete whatever the fake holds until they do (a submit()
 * that waits for the layer below then returns, and the test fails).
 */
static void *watchdog_main(void *p)
{
	struct watchdog *wd = p;
	uint64_t end = blk_now_ns() + WAIT_MS * 1000000ull;

	pthread_mutex_lock(&wd->lock);
	while (!wd->done && blk_now_ns() < end)
		blk_cond_wait_until(&wd->cv, &wd->lock, end);
	if (!wd->done) {
		wd->fired = true;
		fake_set_mode(fb, FAKE_INLINE);
	}
	while (!wd->done) {
		pthread_mutex_unlock(&wd->lock);
		fake_complete_all(fb, false);
		usleep(1000);	/* not a verdict: only frees a blocked submitter */
		pthread_mutex_lock(&wd->lock);
	}
	pthread_mutex_unlock(&wd->lock);
	return NULL;
}

static void watchdog_start(struct watchdog *wd)
{
	*wd = (struct watchdog){ .done = false };
	cr_assert_eq(pthread_mutex_init(&wd->lock, NULL), 0);
	cr_assert_eq(blk_cond_init(&wd->cv), 0);
	cr_assert_eq(pthread_create(&wd->thread, NULL, watchdog_main, wd), 0);
}

/* The submits returned: true if the watchdog had to free them. */
static bool watchdog_stop(struct watchdog *wd)
{
	bool fired;

	pthread_mutex_lock(&wd->lock);
	wd->done = true;
	pthread_cond_signal(&wd->cv);
	pthread_mutex_unlock(&wd->lock);
	pthread_join(wd->thread, NULL);
	fired = wd->fired;
	pthread_cond_destroy(&wd->cv);
	pthread_mutex_destroy(&wd->lock);
	return fired;
}

/* ---- tests ---- */

/*
 * Two overlapping writes submitted back to back from one thread, nothing
 * completing below: both submits return at once. The second reads the old
 * contents only after the first completed (its saved data is what the
 * first left) and completes after it.
 */
Test(powerloss_submit, an_overlapping_write_waits_in_the_filter_not_in_submit)
{
	struct blk_backend *be = pl_open();
	uint8_t a[8192], b[4096];
	struct watchdog wd;
	struct tio w1, w2;
	bool fired;

	memset(a, 0x61, sizeof(a));
	memset(b, 0x62, sizeof(b));
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&w1, BLK_WRITE, 0, sizeof(a), a, 0xee);
	tio_init(&w2, BLK_WRITE, 4096, sizeof(b), b, 0xee);
	watchdog_start(&wd);
	cr_assert_eq(tio_submit(be, &w1), 0);
	cr_assert_eq(tio_submit(be, &w2), 0);
	fired = watchdog_stop(&wd);
	cr_assert(!fired, "submit() waited for the layer below (the old-data read, or the "
		  "overlapping write in flight)");

	/* Only w1's old-data read is below; w2 has not read. */
	cr_assert_eq(fake_pending(fb), 1);
	cr_assert_eq(fake_pending_ops(fb, FAKE_OP(BLK_READ)), 1);
	cr_assert(fake_complete_one(fb, 0));			/* w1's read: w1 goes down */
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert_eq(fake_pending_ops(fb, FAKE_OP(BLK_WRITE)), 1);
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_READ)), 1);
	cr_assert_eq(tio_calls(&w1) + tio_calls(&w2), 0);

	cr_assert(fake_complete_one(fb, 0));			/* w1 completes: w2 reads */
	cr_assert(tio_wait(&w1, WAIT_MS));
	cr_assert_eq(w1.res, 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert_eq(fake_pending_ops(fb, FAKE_OP(BLK_READ)), 1);
	cr_assert_eq(tio_calls(&w2), 0);
	cr_assert(fake_complete_one(fb, 0));			/* w2's read */
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert_eq(tio_calls(&w2), 0);
	cr_assert(fake_complete_one(fb, 0));			/* w2 */
	cr_assert(tio_wait(&w2, WAIT_MS));
	cr_assert_eq(w2.res, 0);
	cr_assert_geq(w2.done_ns, w1.done_ns);

	cr_assert_eq(fake_overlaps(fb), 0);
	cr_assert_eq(fake_store(fb)[0], 0x61);
	cr_assert_eq(fake_store(fb)[4096], 0x62);
	cr_assert_eq(stat_get(be, "powerloss_blocked_writes"), 1);
	/* w2 saved what w1 left: data, not the zeros from before w1 */
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 4096);
	fake_set_mode(fb, FAKE_INLINE);
	be->ops->close(be);
	tio_free(&w1);
	tio_free(&w2);
}

#define NR_BURST	64
#define NR_BIG		320	/* more than the page class's stock (1 MiB / 4K) */

/* Submit @n 4K writes over [0, n * 4K) with nothing completing; false if submit() waited. */
static bool burst(struct blk_backend *be, struct tio *t, size_t n, const uint8_t *data)
{
	struct watchdog wd;
	size_t i;

	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	watchdog_start(&wd);
	for (i = 0; i < n; i++) {
		tio_init(&t[i], BLK_WRITE, i * 4096, 4096, data, 0xee);
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	return !watchdog_stop(&wd);
}

/* Let everything held below complete; all @n writes succeed. */
static void release(struct tio *t, size_t n)
{
	size_t i;

	fake_set_mode(fb, FAKE_INLINE);
	fake_complete_all(fb, false);
	cr_assert(tio_done_wait(n, WAIT_MS));
	for (i = 0; i < n; i++) {
		cr_assert_eq(t[i].res, 0);
		tio_free(&t[i]);
	}
}

static int flush(struct blk_backend *be)
{
	return tio_do(be, BLK_FLUSH, 0, 0, NULL, 0, NULL);
}

/*
 * The old contents of a write live in buffers from a stock filled at open:
 * rounds of writes over data, each ended by a flush, take them and give
 * them back, and nothing is allocated. A burst past the stock is served
 * (counted as misses, no submit waits), and what comes back past the
 * stock's bound is freed: the free save memory never exceeds the bound.
 */
Test(powerloss_submit, save_memory_is_a_bounded_stock_that_flushes_refill)
{
	struct blk_backend *be = pl_open();
	static struct tio t[NR_BIG];
	uint64_t limit, full;
	uint8_t data[4096];
	int round;

	limit = stat_get(be, "powerloss_save_pool_limit");
	full = stat_get(be, "powerloss_save_pool_bytes");
	cr_assert_gt(limit, 0);
	cr_assert_leq(full, limit);
	cr_assert_geq(full, NR_BURST * 4096, "the page class is filled at open");

	/* Data to save: written over zeros (a zero save gives its buffer back). */
	memset(data, 0x5a, sizeof(data));
	cr_assert(burst(be, t, NR_BURST, data), "submit() waited for the layer below");
	release(t, NR_BURST);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 0);
	cr_assert_eq(flush(be), 0);

	for (round = 0; round < 8; round++) {
		memset(data, 0x10 + round, sizeof(data));
		cr_assert(burst(be, t, NR_BURST, data), "round %d: submit() waited", round);
		cr_assert_eq(stat_get(be, "powerloss_save_pool_bytes"), full - NR_BURST * 4096,
			     "round %d: the saves hold stock buffers", round);
		release(t, NR_BURST);
		cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), NR_BURST * 4096);
		cr_assert_eq(flush(be), 0);
		cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 0);
		cr_assert_eq(stat_get(be, "powerloss_save_pool_bytes"), full,
			     "round %d: the flush gave the buffers back", round);
	}
	cr_assert_eq(stat_get(be, "powerloss_save_allocs"), 0,
		     "the buffers went round: nothing allocated once the stock was filled");
	cr_assert_eq(stat_get(be, "powerloss_save_pool_misses"), 0);

	/* Past the stock: served all the same (allocated); the bound holds. */
	cr_assert(burst(be, t, NR_BIG, data), "submit() waited");
	release(t, NR_BIG);
	cr_assert_eq(flush(be), 0);
	memset(data, 0x77, sizeof(data));
	cr_assert(burst(be, t, NR_BIG, data), "a burst past the stock: submit() waited");
	cr_assert_leq(stat_get(be, "powerloss_save_pool_bytes"), limit);
	release(t, NR_BIG);
	cr_assert_gt(stat_get(be, "powerloss_save_allocs"), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), NR_BIG * 4096);
	cr_assert_eq(flush(be), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 0);
	cr_assert_leq(stat_get(be, "powerloss_save_pool_bytes"), limit);
	be->ops->close(be);
}
