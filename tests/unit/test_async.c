/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_async.c - the cache's asynchronous entry points (struct
 * pc_aio) against the fake backend: each returns before the device
 * answers, errors reach the completion, requests that would wait go to the
 * device's workers, and the cycles pcache.h names (rules R1-R4) do not
 * close. A test of a rule hangs, and so fails under its timeout, on a
 * design that breaks the rule: the test thread itself is the only one
 * that completes I/O (FAKE_MANUAL), so a thread that waits where the rule
 * says it must not never gets its I/O completed.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define W FAKE_OP(BLK_WRITE)
#define R FAKE_OP(BLK_READ)
#define F FAKE_OP(BLK_FLUSH)
#define D FAKE_OP(BLK_DISCARD)
#define TEST_FIX_SLOW(suite, name) Test(suite, name, .fini = teardown, .timeout = 180)

static void model_fill_gen(uint64_t pos, size_t len, unsigned int gen)
{
	fill(model + pos, len, pos, gen);
}

/* Read [pos, pos+len) through the cache (synchronously) and compare with the model. */
static void verify_cache(uint64_t pos, size_t len)
{
	uint8_t *b = talloc(len);

	cr_assert_eq(pc_read(dev, b, len, pos), (ssize_t)len);
	expect_same(b, model + pos, len, pos, "cache read");
	tfree(b);
}

/* One asynchronous request a test issues and watches. */
struct areq {
	struct pc_aio aio;	/* first */
	struct pc_read rd;
	bool read;		/* a buffered read: done copies the data to @copy */
	uint8_t *copy;
	int calls;		/* atomic */
	ssize_t res;
	struct pc_dev *chain_dev;	/* done starts @chain (a completion that triggers I/O) */
	struct areq *chain;
	uint64_t chain_pos;
};

static void areq_done(struct pc_aio *aio, ssize_t res)
{
	struct areq *a = (struct areq *)aio;

	if (a->read && res > 0) {
		uint8_t *dst = a->copy;

		for (int i = 0; i < a->rd.iovcnt; i++) {
			memcpy(dst, a->rd.iov[i].iov_base, a->rd.iov[i].iov_len);
			dst += a->rd.iov[i].iov_len;
		}
		pc_read_end(&a->rd);
	}
	a->res = res;
	__atomic_add_fetch(&a->calls, 1, __ATOMIC_SEQ_CST);
	if (a->chain)
		pc_read_async(a->chain_dev, &a->chain->aio, &a->chain->rd, 4096, a->chain_pos);
}

static struct areq *areq_new(void)
{
	struct areq *a = talloc(sizeof(*a));

	a->aio.done = areq_done;
	a->aio.waited = false;
	return a;
}

static int calls(struct areq *a)
{
	return __atomic_load_n(&a->calls, __ATOMIC_SEQ_CST);
}

static void read_async(struct areq *a, size_t len, uint64_t pos)
{
	a->read = true;
	a->copy = talloc(len);
	pc_read_async(dev, &a->aio, &a->rd, len, pos);
}

/* Wait up to @ms for @a's completion; false (and says so) if it did not come. */
static bool done_within(struct areq *a, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000;

	while (!calls(a) && blk_now_ns() < end)
		usleep(1000);
	if (calls(a))
		return true;
	cr_log_error("done_within: no completion after %u ms; %zu I/Os pending below", ms,
		     fake_pending(fb));
	return false;
}

/* Complete whatever is pending until @a is done; false (and says so) after @ms. */
static bool drive(struct areq *a, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000;

	while (!calls(a) && blk_now_ns() < end) {
		fake_complete_all(fb, false);
		usleep(2000);
	}
	if (calls(a))
		return true;
	cr_log_error("drive: no completion after %u ms; %zu I/Os pending below", ms,
		     fake_pending(fb));
	return false;
}

static uint64_t punted(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st.punted_requests;
}

/* Wait until @n requests have been handed to the workers; false (saying how many) after @ms. */
static bool punted_reaches(uint64_t n, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000;

	while (punted() < n && blk_now_ns() < end)
		usleep(1000);
	if (punted() >= n)
		return true;
	cr_log_error("punted_reaches: %llu of %llu punted after %u ms",
		     (unsigned long long)punted(), (unsigned long long)n, ms);
	return false;
}

static void setup_4k(uint64_t cache, uint32_t folio)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, cache, folio, 0);
	store_fill(0, dev_size, 1);
	memcpy(model, fake_store(fb), dev_size);
}

/* ======================================================================
 * Each entry point returns before the device answers
 * ====================================================================== */

TEST_FIX(async, read_miss_returns_before_the_device)
{
	struct areq *a = areq_new();

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	read_async(a, 8192, 3 * 4096);
	cr_assert_eq(calls(a), 0, "done ran before the device answered");
	cr_assert_eq(fake_pending_ops(fb, R), 1);
	cr_assert(fake_complete_op(fb, R));
	cr_assert(done_within(a, WAIT_MS));
	cr_assert_eq(calls(a), 1);
	cr_assert_eq(a->res, 8192);
	expect_same(a->copy, model + 3 * 4096, 8192, 3 * 4096, "async read");
	cr_assert_eq(punted(), 0, "a read with free folios went to a worker");
	/* a hit ends in the call */
	a = areq_new();
	read_async(a, 4096, 3 * 4096);
	cr_assert_eq(calls(a), 1);
	expect_same(a->copy, model + 3 * 4096, 4096, 3 * 4096, "async hit");
}

TEST_FIX(async, direct_io_returns_before_the_device)
{
	struct areq *r = areq_new(), *w = areq_new();
	uint8_t *rb = talloc(64 * KiB), *wb = talloc(64 * KiB);

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	fill(wb, 64 * KiB, 1 * MiB, 2);
	pc_direct_write_async(dev, &w->aio, wb, 64 * KiB, 1 * MiB);
	pc_direct_read_async(dev, &r->aio, rb, 64 * KiB, 2 * MiB);
	cr_assert_eq(calls(w) + calls(r), 0);
	cr_assert_eq(fake_pending_ops(fb, R | W), 2);
	fake_complete_all(fb, true);
	cr_assert(done_within(w, WAIT_MS) && done_within(r, WAIT_MS));
	cr_assert_eq(w->res, 64 * KiB);
	cr_assert_eq(r->res, 64 * KiB);
	model_fill_gen(1 * MiB, 64 * KiB, 2);
	expect_same(rb, model + 2 * MiB, 64 * KiB, 2 * MiB, "async direct read");
	verify_store(0, dev_size);
	cr_assert_eq(punted(), 0);
}

/*
 * A direct write over blocks the cache holds clean: the completion drops
 * the stale copies itself when no folio of the range is held (no worker,
 * the reply from the completing thread), and punts only when one is held
 * (rule R1: it never waits for the hold).
 */
TEST_FIX(async, direct_write_over_clean_cache_completes_in_place)
{
	struct areq *w = areq_new(), *w2 = areq_new(), *r = areq_new();
	uint8_t *wb = talloc(8192);

	setup_4k(8 * MiB, 64 * KiB);
	verify_cache(64 * KiB, 16 * KiB);	/* a part of folio 1 cached, clean */
	verify_cache(0, 64 * KiB);		/* folio 0 cached, clean */
	fake_set_mode(fb, FAKE_MANUAL);
	fill(wb, 8192, 4096, 2);
	pc_direct_write_async(dev, &w->aio, wb, 8192, 4096);
	cr_assert_eq(calls(w), 0);
	cr_assert(fake_complete_op(fb, W));	/* the completion runs here */
	cr_assert_eq(calls(w), 1, "the direct write's done did not run in its completion");
	cr_assert_eq(w->res, 8192);
	cr_assert_eq(punted(), 0, "a direct write over a clean, unheld folio went to a worker");
	model_fill_gen(4096, 8192, 2);

	/* a read miss of folio 1's uncached blocks holds it while the device fills them */
	read_async(r, 4096, 64 * KiB + 32 * KiB);	/* an uncached block of folio 1: held */
	cr_assert_eq(fake_pending_ops(fb, R), 1);
	fill(wb, 8192, 64 * KiB, 3);
	pc_direct_write_async(dev, &w2->aio, wb, 8192, 64 * KiB);
	cr_assert(fake_complete_op(fb, W));
	cr_assert(punted_reaches(1, 5000), "a direct write over a held folio was not punted");
	cr_assert(fake_complete_op(fb, R));
	cr_assert(done_within(r, 5000) && done_within(w2, 5000));
	cr_assert_eq(w2->res, 8192);
	model_fill_gen(64 * KiB, 8192, 3);

	fake_set_mode(fb, FAKE_INLINE);
	verify_cache(0, 128 * KiB);		/* no stale copy served */
	verify_store(0, dev_size);
}

/*
 * A direct write begun with nothing of the device cached (no lock taken to
 * learn it), and a buffered read of its range that caches the old data
 * while the write is at the device: the write's end still drops that copy.
 */
TEST_FIX(async, direct_write_drops_a_copy_cached_during_it)
{
	struct areq *w = areq_new(), *r = areq_new();
	uint8_t *wb = talloc(8192);

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	fill(wb, 8192, 4096, 2);
	pc_direct_write_async(dev, &w->aio, wb, 8192, 4096);
	cr_assert_eq(fake_pending_ops(fb, W), 1);
	read_async(r, 4096, 4096);
	cr_assert_eq(fake_pending_ops(fb, R), 1);
	cr_assert(fake_complete_op(fb, R));	/* the device's old data, cached */
	cr_assert(done_within(r, 5000));
	cr_assert_eq(r->res, 4096);
	expect_same(r->copy, model + 4096, 4096, 4096, "the read before the write landed");
	cr_assert(fake_complete_op(fb, W));
	cr_assert(done_within(w, 5000));
	cr_assert_eq(w->res, 8192);
	model_fill_gen(4096, 8192, 2);
	fake_set_mode(fb, FAKE_INLINE);
	verify_cache(0, 64 * KiB);		/* no stale copy served */
	verify_store(0, dev_size);
}

/*
 * An unsplit direct I/O carries its backend I/O in its request: more of
 * them in flight than the device's pool of submission I/Os (256) takes
 * nothing from it, and nothing falls back to malloc.
 */
TEST_FIX(async, unsplit_direct_io_takes_no_pool_entry)
{
	enum { N = 300 };
	struct areq *a[N];
	uint8_t *buf = talloc((size_t)N * 4096);
	struct pc_stats st;
	int i;

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	for (i = 0; i < N; i++) {
		a[i] = areq_new();
		if (i & 1) {
			fill(buf + (size_t)i * 4096, 4096, (uint64_t)i * 4096, 2);
			pc_direct_write_async(dev, &a[i]->aio, buf + (size_t)i * 4096, 4096,
					      (uint64_t)i * 4096);
		} else {
			pc_direct_read_async(dev, &a[i]->aio, buf + (size_t)i * 4096, 4096,
					     (uint64_t)i * 4096);
		}
	}
	cr_assert_eq(fake_pending_ops(fb, R | W), N);
	fake_complete_all(fb, true);
	for (i = 0; i < N; i++) {
		cr_assert(done_within(a[i], WAIT_MS));
		cr_assert_eq(a[i]->res, 4096);
		if (i & 1)
			model_fill_gen((uint64_t)i * 4096, 4096, 2);
		else
			expect_same(buf + (size_t)i * 4096, model + (size_t)i * 4096, 4096,
				    (uint64_t)i * 4096, "direct read");
	}
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.pool_fallback_allocs, 0, "%llu submission I/Os from malloc",
		     (unsigned long long)st.pool_fallback_allocs);
	cr_assert_eq(st.backend_read_ios, N / 2);
	cr_assert_eq(st.backend_write_ios, N / 2);
	verify_store(0, dev_size);
}

TEST_FIX(async, fsync_of_a_clean_device_is_one_flush)
{
	struct areq *a = areq_new();
	pc_errseq_t since = 0;

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	pc_fsync_async(dev, &a->aio, &since);
	cr_assert_eq(calls(a), 0);
	cr_assert_eq(fake_pending_ops(fb, F), 1);
	cr_assert(fake_complete_op(fb, F));
	cr_assert(done_within(a, WAIT_MS));
	cr_assert_eq(a->res, 0);
	cr_assert_eq(punted(), 0);
}

TEST_FIX(async, fsync_with_dirty_data_goes_to_a_worker)
{
	struct areq *a = areq_new();
	pc_errseq_t since = 0;

	setup_4k(8 * MiB, 64 * KiB);
	do_write(100 * 4096, 256 * KiB, 2);
	fake_set_mode(fb, FAKE_MANUAL);
	pc_fsync_async(dev, &a->aio, &since);
	cr_assert_eq(calls(a), 0, "fsync with dirty data ended in the call");
	cr_assert(drive(a, WAIT_MS), "fsync never ended");
	cr_assert_eq(a->res, 0);
	cr_assert_eq(punted(), 1);
	verify_store(0, dev_size);
}

/* Writes past dirty_limit are throttled by a worker, not in the caller. */
TEST_FIX(async, throttled_writes_go_to_a_worker)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);
	struct pc_cache_params p = {
		.size = 2 * MiB, .folio_size = 64 * KiB, .min_block = 512,
		.dirty_background = 256 * KiB, .dirty_limit = 512 * KiB, .dirty_expire_ms = 60000,
	};
	struct areq *a[32];
	uint8_t *buf = talloc(64 * KiB * 32);
	int i;

	setup_params(&g, &p, 0);
	fake_set_mode(fb, FAKE_MANUAL);
	for (i = 0; i < 32; i++) {
		a[i] = areq_new();
		fill(buf + i * 64 * KiB, 64 * KiB, (uint64_t)i * 64 * KiB, 2);
		pc_write_async(dev, &a[i]->aio, buf + i * 64 * KiB, 64 * KiB, (uint64_t)i * 64 * KiB);
	}
	cr_assert_gt(punted(), 0, "2 MiB through a 512 KiB dirty limit, and nothing waited");
	for (i = 0; i < 32; i++) {
		cr_assert(drive(a[i], WAIT_MS), "write %d never ended", i);
		cr_assert_eq(a[i]->res, 64 * KiB, "write %d: %zd", i, a[i]->res);
	}
	model_fill_gen(0, 2 * MiB, 2);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* ======================================================================
 * Errors reach the completion
 * ====================================================================== */

static ssize_t with_fault(unsigned int op_mask, void (*start)(struct areq *))
{
	struct fake_fault ft = { .op_mask = op_mask, .err = -EIO, .persistent = true };
	struct areq *a = areq_new();

	fake_fault_set(fb, &ft);
	start(a);
	cr_assert(done_within(a, WAIT_MS));
	fake_fault_clear(fb);
	cr_assert_eq(calls(a), 1);
	return a->res;
}

static void start_read(struct areq *a) { read_async(a, 4096, 5 * MiB); }
static void start_dread(struct areq *a)
{
	pc_direct_read_async(dev, &a->aio, talloc(4096), 4096, 6 * MiB);
}
static void start_dwrite(struct areq *a)
{
	pc_direct_write_async(dev, &a->aio, talloc(4096), 4096, 7 * MiB);
}
static pc_errseq_t err_since;
static void start_fsync(struct areq *a) { pc_fsync_async(dev, &a->aio, &err_since); }
static void start_discard(struct areq *a) { pc_discard_async(dev, &a->aio, 8 * MiB, 64 * KiB); }
static void start_write_and_fsync(struct areq *a)
{
	do_write(9 * MiB, 8192, 3);
	pc_fsync_async(dev, &a->aio, &err_since);
}

TEST_FIX(async, errors_reach_done)
{
	setup_4k(16 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_DEFERRED);
	cr_assert_eq(with_fault(R, start_read), -EIO, "buffered read");
	cr_assert_eq(with_fault(R, start_dread), -EIO, "direct read");
	cr_assert_eq(with_fault(W, start_dwrite), -EIO, "direct write");
	cr_assert_eq(with_fault(F, start_fsync), -EIO, "fsync's flush");
	cr_assert_eq(with_fault(D, start_discard), -EIO, "discard");
	cr_assert_eq(with_fault(W, start_write_and_fsync), -EIO, "fsync's writeback");
	/* and the device works afterwards */
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
}

/* ======================================================================
 * Many requests parked on one folio; a completion that starts another
 * ====================================================================== */

TEST_FIX_SLOW(async, many_parked_over_one_folio)
{
	struct areq *r[64], *w[16];
	uint8_t *buf = talloc(16 * 100);
	int i;

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	/* 64 reads of the 16 blocks of one cold folio: one fill, the others wait for it */
	for (i = 0; i < 64; i++) {
		r[i] = areq_new();
		read_async(r[i], 4096, 64 * KiB + (uint64_t)(i % 16) * 4096);
	}
	/* and 16 writes into it meanwhile, partial ones included */
	for (i = 0; i < 16; i++) {
		w[i] = areq_new();
		fill(buf + i * 100, 100, 64 * KiB + (uint64_t)i * 4096 + 1000, 2);
		pc_write_async(dev, &w[i]->aio, buf + i * 100, 100, 64 * KiB + (uint64_t)i * 4096 + 1000);
	}
	cr_assert(punted_reaches(63 + 16, WAIT_MS), "punted %llu", (unsigned long long)punted());
	cr_assert_eq(fake_wait_quiet(fb, 100, 5000), 1, "more than the one fill reached the device");
	for (i = 0; i < 64; i++)
		cr_assert_eq(calls(r[i]), 0);
	cr_assert(fake_complete_op(fb, R));
	for (i = 0; i < 64; i++) {
		cr_assert(drive(r[i], WAIT_MS), "read %d never ended", i);
		cr_assert_eq(r[i]->res, 4096);
	}
	for (i = 0; i < 16; i++) {
		cr_assert(drive(w[i], WAIT_MS), "write %d never ended", i);
		cr_assert_eq(w[i]->res, 100);
	}
	/* each read saw the block before or after the write into it, never a mix */
	for (i = 0; i < 64; i++) {
		uint64_t pos = 64 * KiB + (uint64_t)(i % 16) * 4096;
		uint8_t after[4096];

		memcpy(after, model + pos, 4096);
		fill(after + 1000, 100, pos + 1000, 2);
		if (memcmp(r[i]->copy, model + pos, 4096))
			expect_same(r[i]->copy, after, 4096, pos, "read racing a write");
	}
	for (i = 0; i < 16; i++)
		model_fill_gen(64 * KiB + (uint64_t)i * 4096 + 1000, 100, 2);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* A completion that starts the next request, 200 deep, completions late and shuffled. */
TEST_FIX_SLOW(async, completion_starts_the_next_request)
{
	enum { N = 200 };
	struct areq *a[N];
	int i;

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_DEFERRED);
	for (i = 0; i < N; i++) {
		a[i] = areq_new();
		a[i]->read = true;
		a[i]->copy = talloc(4096);
	}
	for (i = 0; i + 1 < N; i++) {
		a[i]->chain = a[i + 1];
		a[i]->chain_dev = dev;
		a[i]->chain_pos = (uint64_t)(i + 1) * 64 * KiB % dev_size;
	}
	pc_read_async(dev, &a[0]->aio, &a[0]->rd, 4096, 0);
	cr_assert(done_within(a[N - 1], WAIT_MS), "the chain stopped");
	for (i = 0; i < N; i++) {
		uint64_t pos = (uint64_t)i * 64 * KiB % dev_size;

		cr_assert_eq(a[i]->res, 4096);
		expect_same(a[i]->copy, model + pos, 4096, pos, "chained read");
	}
}

/* ======================================================================
 * The rules of pcache.h, each with the cycle it breaks
 * ====================================================================== */

/*
 * R1: a completion never waits. A direct write over a cached folio ends
 * while a read fills the same folio (holding it exclusively), and this test
 * thread is the only one that completes I/O: if the write's completion
 * waited for the folio to drop its cached copy, fake_complete_op() would
 * never return and the read's completion would never run.
 */
TEST_FIX(rules, r1_completion_does_not_wait_for_a_fill)
{
	struct areq *rd = areq_new(), *dw = areq_new();
	uint8_t *wb = talloc(4096), buf[4096];

	setup_4k(8 * MiB, 64 * KiB);
	cr_assert_eq(pc_read(dev, buf, 4096, 0), 4096);	/* block 0 cached, clean */
	fake_set_mode(fb, FAKE_MANUAL);
	read_async(rd, 4096, 5 * 4096);			/* fills block 5: folio 0 held */
	cr_assert_eq(fake_pending_ops(fb, R), 1);
	fill(wb, 4096, 0, 2);
	pc_direct_write_async(dev, &dw->aio, wb, 4096, 0);	/* over the cached block 0 */
	cr_assert_eq(fake_pending_ops(fb, W), 1);
	cr_assert(fake_complete_op(fb, W));		/* must return */
	cr_assert_eq(calls(dw), 0, "the stale copy is dropped only after the fill");
	cr_assert(fake_complete_op(fb, R));
	cr_assert(done_within(rd, WAIT_MS) && done_within(dw, WAIT_MS));
	cr_assert_eq(rd->res, 4096);
	cr_assert_eq(dw->res, 4096);
	model_fill_gen(0, 4096, 2);
	expect_same(rd->copy, model + 5 * 4096, 4096, 5 * 4096, "the fill");
	fake_set_mode(fb, FAKE_INLINE);
	verify_cache(0, 64 * KiB);	/* block 0: the direct write's data, not the old copy */
}

/*
 * R2: a punted request holds no folio. The cache has 8 folios: 7 are held
 * by reads in flight, the workers are busy, and a read of two folios takes
 * the 8th, finds no 9th and is punted. Holding nothing, it leaves the 8th
 * to the next read, which starts at once; holding it, that read too would
 * have to wait for a worker (and with every folio held by requests queued
 * behind busy workers, nothing would ever free one).
 */
TEST_FIX(rules, r2_punted_request_holds_no_folio)
{
	struct areq *blk[4], *pin[7], *two = areq_new(), *next = areq_new();
	int i;

	setup_4k(8 * 4 * KiB, 4 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	for (i = 0; i < 4; i++) {	/* every worker waits for a discard */
		blk[i] = areq_new();
		pc_discard_async(dev, &blk[i]->aio, 8 * MiB + (uint64_t)i * 4096, 4096);
	}
	cr_assert(fake_wait_pending(fb, 4, WAIT_MS));
	for (i = 0; i < 7; i++) {
		pin[i] = areq_new();
		read_async(pin[i], 4096, (uint64_t)i * 4096);
	}
	cr_assert_eq(fake_pending_ops(fb, R), 7);
	read_async(two, 8192, 100 * 4096);
	cr_assert_eq(punted(), 5, "the two-folio read should have been punted");
	read_async(next, 4096, 200 * 4096);
	cr_assert_eq(punted(), 5, "the next read had to wait: the punted read kept a folio");
	cr_assert_eq(fake_pending_ops(fb, R), 8);
	for (i = 0; i < 7; i++)
		cr_assert(drive(pin[i], WAIT_MS));
	cr_assert(drive(next, WAIT_MS) && drive(two, WAIT_MS));
	for (i = 0; i < 4; i++)
		cr_assert(drive(blk[i], WAIT_MS));
	expect_same(two->copy, model + 100 * 4096, 8192, 100 * 4096, "the punted read");
}

/*
 * R3: a non-blocking thread never waits for a folio's exclusive hold. A fill
 * holds folio 1 (its read pending); a partial write, a whole-block write and
 * a read of other blocks of that folio must all return at once (punted).
 * If one waited, this thread would never get to complete the fill.
 */
TEST_FIX(rules, r3_caller_never_waits_for_a_hold)
{
	struct areq *fillr = areq_new(), *pw = areq_new(), *ww = areq_new(), *rr = areq_new();
	uint8_t *p = talloc(100), *whole = talloc(4096);

	setup_4k(8 * MiB, 64 * KiB);
	fake_set_mode(fb, FAKE_MANUAL);
	read_async(fillr, 4096, 64 * KiB + 3 * 4096);
	cr_assert_eq(fake_pending_ops(fb, R), 1);
	fill(p, 100, 64 * KiB + 7 * 4096 + 10, 2);
	pc_write_async(dev, &pw->aio, p, 100, 64 * KiB + 7 * 4096 + 10);
	fill(whole, 4096, 64 * KiB + 12 * 4096, 2);
	pc_write_async(dev, &ww->aio, whole, 4096, 64 * KiB + 12 * 4096);
	read_async(rr, 4096, 64 * KiB + 9 * 4096);
	cr_assert_eq(calls(pw) + calls(ww) + calls(rr), 0);
	cr_assert(fake_complete_op(fb, R));
	cr_assert(drive(fillr, WAIT_MS) && drive(pw, WAIT_MS) && drive(ww, WAIT_MS) && drive(rr, WAIT_MS));
	cr_assert_eq(pw->res, 100);
	cr_assert_eq(ww->res, 4096);
	model_fill_gen(64 * KiB + 7 * 4096 + 10, 100, 2);
	model_fill_gen(64 * KiB + 12 * 4096, 4096, 2);
	expect_same(rr->copy, model + 64 * KiB + 9 * 4096, 4096, 64 * KiB + 9 * 4096, "read");
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/*
 * R4: a worker never waits for another request of its device's queue. Three
 * workers wait for discards this test does not complete yet, the fourth
 * runs an fsync, and a direct write (dirty data in its range: punted) queues
 * behind them. The fsync must end once its own writes and flush do.
 */
TEST_FIX(rules, r4_fsync_does_not_wait_for_the_queue)
{
	struct areq *blk[3], *fs = areq_new(), *dw = areq_new();
	uint8_t *wb = talloc(4096);
	pc_errseq_t since = 0;
	uint64_t end;
	int i;

	setup_4k(8 * MiB, 64 * KiB);
	do_write(1 * MiB, 64 * KiB, 2);
	fake_set_mode(fb, FAKE_MANUAL);
	for (i = 0; i < 3; i++) {
		blk[i] = areq_new();
		pc_discard_async(dev, &blk[i]->aio, 8 * MiB + (uint64_t)i * 4096, 4096);
	}
	cr_assert(fake_wait_pending(fb, 3, WAIT_MS));
	pc_fsync_async(dev, &fs->aio, &since);
	fill(wb, 4096, 1 * MiB, 3);
	pc_direct_write_async(dev, &dw->aio, wb, 4096, 1 * MiB);
	cr_assert(punted_reaches(5, WAIT_MS));
	for (end = blk_now_ns() + WAIT_MS * 1000000ull; !calls(fs) && blk_now_ns() < end;) {
		fake_complete_op(fb, W | F);
		usleep(1000);
	}
	cr_assert_eq(calls(fs), 1, "the fsync waited for requests queued behind it");
	cr_assert_eq(fs->res, 0);
	cr_assert_eq(fake_pending_ops(fb, D), 3, "the discards were not completed");
	for (i = 0; i < 3; i++)
		cr_assert(drive(blk[i], WAIT_MS));
	cr_assert(drive(dw, WAIT_MS));
	cr_assert_eq(dw->res, 4096);
	model_fill_gen(1 * MiB, 64 * KiB, 2);
	model_fill_gen(1 * MiB, 4096, 3);
	memset(model + 8 * MiB, 0, 3 * 4096);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* ======================================================================
 * Write through: a write with fua (O_DSYNC), or any write to a device in
 * write-through mode, ends only after its WRITE and a FLUSH did
 * ====================================================================== */

static void fua_case(bool device_mode, bool direct)
{
	struct areq *a = areq_new();
	uint8_t *buf = talloc(8192);

	setup_4k(8 * MiB, 64 * KiB);
	if (device_mode)
		pc_dev_set_write_through(dev, true);
	else
		a->aio.fua = true;
	fake_set_mode(fb, FAKE_MANUAL);
	fill(buf, 8192, 1 * MiB, 2);
	if (direct)
		pc_direct_write_async(dev, &a->aio, buf, 8192, 1 * MiB);
	else
		pc_write_async(dev, &a->aio, buf, 8192, 1 * MiB);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert_eq(fake_pending_ops(fb, F), 0, "the flush went out before the write ended");
	cr_assert(fake_complete_op(fb, W));
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS), "no flush after the write");
	cr_assert_eq(fake_pending_ops(fb, F), 1);
	cr_assert_eq(calls(a), 0, "done before the flush");
	cr_assert(fake_complete_op(fb, F));
	cr_assert(done_within(a, WAIT_MS));
	cr_assert_eq(a->res, 8192);
	model_fill_gen(1 * MiB, 8192, 2);
	verify_store(0, dev_size);
	/* and the error of that flush is the write's */
	{
		struct fake_fault ft = { .op_mask = F, .err = -EIO };
		struct areq *b = areq_new();

		fake_set_mode(fb, FAKE_INLINE);
		fake_fault_set(fb, &ft);
		b->aio.fua = a->aio.fua;
		if (direct)
			pc_direct_write_async(dev, &b->aio, buf, 8192, 2 * MiB);
		else
			pc_write_async(dev, &b->aio, buf, 8192, 2 * MiB);
		cr_assert(done_within(b, WAIT_MS));
		cr_assert_eq(b->res, -EIO);
	}
}

TEST_FIX(write_through, fua_buffered) { fua_case(false, false); }
TEST_FIX(write_through, fua_direct) { fua_case(false, true); }
TEST_FIX(write_through, device_buffered) { fua_case(true, false); }
TEST_FIX(write_through, device_direct) { fua_case(true, true); }

/* ======================================================================
 * Partial completions (backend.h): an I/O that completes up to a bad
 * block and fails from it
 * ====================================================================== */

static uint64_t dirty_now(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st.dirty_bytes;
}

/* O_DIRECT reads and writes come back short, ending where the failure is. */
TEST_FIX(partial_io, direct_io_is_short)
{
	struct fake_fault ft = { .op_mask = R | W, .pos = 1 * MiB + 16 * KiB, .len = 4096,
				 .err = -EIO, .persistent = true, .partial = true };
	uint8_t *buf = talloc(64 * KiB);

	setup_4k(8 * MiB, 64 * KiB);
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_direct_read(dev, buf, 64 * KiB, 1 * MiB), 16 * KiB);
	expect_same(buf, model + 1 * MiB, 16 * KiB, 1 * MiB, "the part before the bad block");
	fill(buf, 64 * KiB, 1 * MiB, 2);
	cr_assert_eq(pc_direct_write(dev, buf, 64 * KiB, 1 * MiB), 16 * KiB);
	model_fill_gen(1 * MiB, 16 * KiB, 2);
	/* from the bad block on: the error itself */
	cr_assert_eq(pc_direct_read(dev, buf, 4096, 1 * MiB + 16 * KiB), -EIO);
	/* a buffered read (the kernel's page cache may be filling pages) gets EIO */
	cr_assert_eq(pc_read(dev, buf, 64 * KiB, 1 * MiB), -EIO);
	fake_fault_clear(fb);
	verify_store(0, dev_size);
	verify_cache(1 * MiB, 64 * KiB);
}

/* Writeback: the blocks before the failure turn clean, the rest stays dirty. */
TEST_FIX(partial_io, writeback_keeps_what_failed)
{
	struct fake_fault ft = { .op_mask = W, .pos = 1 * MiB + 16 * KiB, .len = 4096,
				 .err = -EIO, .persistent = true, .partial = true };

	setup_4k(8 * MiB, 64 * KiB);
	do_write(1 * MiB, 64 * KiB, 2);
	fake_fault_set(fb, &ft);
	cr_assert_eq(do_fsync(), -EIO);
	cr_assert_eq(dirty_now(), 48 * KiB, "dirty %llu: the 16 KiB before the bad block are "
		     "on the device", (unsigned long long)dirty_now());
	cr_assert(!memcmp(fake_store(fb) + 1 * MiB, model + 1 * MiB, 16 * KiB));
	fake_fault_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(dirty_now(), 0);
	verify_store(0, dev_size);
}
