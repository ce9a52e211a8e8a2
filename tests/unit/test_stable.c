/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_stable.c - stable pages (core/pcache.c, invariant 7).
 * On a device whose stack asks for stable writes (blk_backend_ops.
 * stable_writes, as rbd without librbd's copy) the memory of a writeback
 * I/O does not change until its end_io: a rewrite of a folio under
 * writeback waits for its end in a device worker (the non-blocking entry
 * punts, never waits), and writeback does not start on a folio while a
 * writer copies into it. The fake backend holds the write (manual mode)
 * and shows the memory it would store. On a device without the flag the
 * rewrite copies in at once, as before: the held I/O carries the new data
 * and the block, dirty again, is written again.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/lib/clock.h"
#include "../../backends/lib/log.h"
#include "../../core/pcache.h"
#include "../../core/pcache_int.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define FOLIO (64 * KiB)
#define LEN FOLIO		/* one folio written, rewritten */
/* How long a test looks for something that must not happen (a wait that should hold). */
#define HOLD_MS 300u

/* The fixture's device "t0" on a fake that asks for stable writes, or not. */
static void setup_stable(bool stable)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 4096, 1 * MiB);

	fb = fake_create(&g);
	cr_assert_not_null(fb);
	fake_set_stable_writes(fb, stable);
	pc = cache_new(16 * FOLIO, FOLIO, 16 * FOLIO);
	dev = pc_dev_add(pc, "t0", fake_backend(fb), 0);
	cr_assert(!IS_ERR_OR_NULL(dev), "pc_dev_add: %ld", IS_ERR(dev) ? PTR_ERR(dev) : 0L);
	dev_size = g.size;
	model = calloc(1, dev_size);
	cr_assert_not_null(model);
}

/*
 * A test that failed with the write still held: let it go (and anything
 * after it) so that the threads the test started end and teardown can
 * remove the device; the hold was the test's, not the cache's.
 */
static void fini(void)
{
	if (fb) {
		fake_set_mode(fb, FAKE_INLINE);
		fake_complete_all(fb, false);
	}
#ifdef BLKFS_TEST_HOOKS
	memset(&pc_test_hooks, 0, sizeof(pc_test_hooks));
#endif
	teardown();
}

struct job {
	pthread_t tid;
	uint64_t pos;
	size_t len;
	unsigned int gen;
	uint8_t *buf;
	ssize_t ret;
	atomic_bool done;
};

static void *fsync_main(void *arg)
{
	struct job *j = arg;

	j->ret = do_fsync();
	atomic_store(&j->done, true);
	return NULL;
}

static void *write_main(void *arg)
{
	struct job *j = arg;

	j->ret = pc_write(dev, j->buf, j->len, j->pos);
	atomic_store(&j->done, true);
	return NULL;
}

static void job_start(struct job *j, void *(*fn)(void *), uint64_t pos, size_t len,
		      unsigned int gen)
{
	j->pos = pos;
	j->len = len;
	j->gen = gen;
	j->ret = -1;
	j->buf = NULL;
	atomic_store(&j->done, false);
	if (len) {
		j->buf = talloc(len);
		fill(j->buf, len, pos, gen);
	}
	cr_assert_eq(pthread_create(&j->tid, NULL, fn, j), 0);
}

/* Wait (at most WAIT_MS) for @j to end; fails the test if it does not. */
static void job_join(struct job *j, const char *what)
{
	uint64_t end = blk_now_ns() + (uint64_t)WAIT_MS * 1000000u;

	while (!atomic_load(&j->done) && blk_now_ns() < end)
		usleep(1000);
	cr_assert(atomic_load(&j->done), "%s did not end", what);
	pthread_join(j->tid, NULL);
}

/* The memory of the one pending WRITE, which must be [0, LEN). */
static void held_write_data(uint8_t *buf)
{
	uint64_t pos = UINT64_MAX;

	cr_assert_eq(fake_pending_ops(fb, FAKE_OP(BLK_WRITE)), 1, "%s", log_text());
	cr_assert_eq(fake_pending_data(fb, 0, buf, LEN, &pos), LEN);
	cr_assert_eq(pos, 0);
}

/*
 * Write generation 1 to [0, LEN), start an fsync whose writeback the fake
 * holds, and check that the held write carries generation 1. Returns the
 * fsync's job.
 */
static void hold_writeback(struct job *fs, uint8_t *want1)
{
	uint8_t *got = talloc(LEN);

	do_write(0, LEN, 1);
	fill(want1, LEN, 0, 1);
	fake_set_mode(fb, FAKE_MANUAL);
	job_start(fs, fsync_main, 0, 0, 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS), "the fsync's writeback never reached the fake");
	held_write_data(got);
	expect_same(got, want1, LEN, 0, "the held write before the rewrite");
	tfree(got);
}

/* Let the held write go, the rest inline; the fsync ends well. */
static void release_writeback(struct job *fs)
{
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert(fake_complete_one(fb, 0));
	job_join(fs, "the fsync");
	cr_assert_eq(fs->ret, 0);
}

/*
 * The promise: a rewrite of the whole folio while its writeback is held
 * waits, the memory the backend holds stays generation 1 to its end, the
 * device gets generation 1 whole from it, then generation 2 whole.
 */
Test(stable, rewrite_waits_for_held_writeback, .fini = fini, .timeout = 180)
{
	uint8_t *want1 = talloc(LEN), *got = talloc(LEN);
	static struct job fs, wr;

	setup_stable(true);
	hold_writeback(&fs, want1);

	job_start(&wr, write_main, 0, LEN, 2);
	usleep(HOLD_MS * 1000);
	cr_assert(!atomic_load(&wr.done),
		  "a rewrite of a folio under writeback on a stable_writes device did not wait");
	held_write_data(got);
	expect_same(got, want1, LEN, 0, "the held write's memory after a rewrite (stable)");

	release_writeback(&fs);
	/* the held write stored generation 1, whole */
	expect_same(fake_store(fb), want1, LEN, 0, "the store after the held write");
	job_join(&wr, "the rewrite");
	cr_assert_eq(wr.ret, (ssize_t)LEN);
	memcpy(model, wr.buf, LEN);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, LEN);
}

/*
 * A rewrite of part of the folio (one 512-byte sector, inside a block
 * that is uptodate) waits the same way: the folio is the unit, as the
 * kernel's folio_wait_stable().
 */
Test(stable, partial_rewrite_waits, .fini = fini, .timeout = 180)
{
	uint8_t *want1 = talloc(LEN), *got = talloc(LEN);
	static struct job fs, wr;

	setup_stable(true);
	hold_writeback(&fs, want1);

	job_start(&wr, write_main, 8 * KiB + 512, 512, 2);
	usleep(HOLD_MS * 1000);
	cr_assert(!atomic_load(&wr.done), "a partial rewrite under writeback did not wait");
	held_write_data(got);
	expect_same(got, want1, LEN, 0, "the held write's memory after a partial rewrite");

	release_writeback(&fs);
	expect_same(fake_store(fb), want1, LEN, 0, "the store after the held write");
	job_join(&wr, "the rewrite");
	cr_assert_eq(wr.ret, 512);
	memcpy(model + wr.pos, wr.buf, wr.len);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, LEN);
}

struct async_write {
	struct pc_aio aio;
	atomic_bool done;
	ssize_t res;
};

static void async_done(struct pc_aio *aio, ssize_t res)
{
	struct async_write *a = (struct async_write *)aio;

	a->res = res;
	atomic_store(&a->done, true);
}

/*
 * The entry a FUSE thread calls never waits for the writeback: it returns
 * at once with the write punted to a device worker, which answers once
 * the writeback has ended.
 */
Test(stable, nonblocking_write_punts, .fini = fini, .timeout = 180)
{
	uint8_t *want1 = talloc(LEN), *buf = talloc(LEN), *got = talloc(LEN);
	static struct async_write a = { .aio = { .done = async_done } };
	static struct job fs;
	uint64_t t0, took_ms;

	setup_stable(true);
	hold_writeback(&fs, want1);

	fill(buf, LEN, 0, 2);
	t0 = blk_now_ns();
	pc_write_async(dev, &a.aio, buf, LEN, 0);
	took_ms = (blk_now_ns() - t0) / 1000000u;
	cr_assert_lt(took_ms, (uint64_t)HOLD_MS, "pc_write_async waited %llu ms",
		     (unsigned long long)took_ms);
	usleep(HOLD_MS * 1000);
	cr_assert(!atomic_load(&a.done), "the punted rewrite ended while the writeback was held");
	held_write_data(got);
	expect_same(got, want1, LEN, 0, "the held write's memory after an async rewrite");

	release_writeback(&fs);
	expect_same(fake_store(fb), want1, LEN, 0, "the store after the held write");
	for (t0 = blk_now_ns(); !atomic_load(&a.done) &&
	     blk_now_ns() - t0 < (uint64_t)WAIT_MS * 1000000u;)
		usleep(1000);
	cr_assert(atomic_load(&a.done), "the punted rewrite never ended");
	cr_assert_eq(a.res, (ssize_t)LEN);
	memcpy(model, buf, LEN);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, LEN);
}

/*
 * Without the flag, as before: the rewrite copies in at once while the
 * write is held, the held I/O carries the new data, and the block, dirty
 * again, is written again.
 */
Test(stable, not_stable_copies_at_once, .fini = fini, .timeout = 180)
{
	uint8_t *want1 = talloc(LEN), *want2 = talloc(LEN), *got = talloc(LEN);
	static struct job fs, wr;

	setup_stable(false);
	hold_writeback(&fs, want1);

	job_start(&wr, write_main, 0, LEN, 2);
	job_join(&wr, "the rewrite on a device without stable_writes");
	cr_assert_eq(wr.ret, (ssize_t)LEN);
	fill(want2, LEN, 0, 2);
	held_write_data(got);
	expect_same(got, want2, LEN, 0, "the held write's memory after a rewrite (not stable)");

	release_writeback(&fs);
	memcpy(model, want2, LEN);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, LEN);
}

/* ---- writeback does not start while a writer copies (the copy_begin hook) ---- */
#ifdef BLKFS_TEST_HOOKS

static atomic_bool hook_armed;
static atomic_size_t writes_in_copy;	/* WRITEs submitted while the writer was in its copy */
static struct job hook_fs;

static void copy_begin(struct pc_folio *f)
{
	(void)f;
	if (!atomic_exchange(&hook_armed, false))
		return;
	/* a background pass, in the writer's thread: must skip the folio */
	(void)wb_dev(dev, WB_ALL, false);
	/* a sync pass (fsync, in a device worker): must wait for the copy */
	job_start(&hook_fs, fsync_main, 0, 0, 0);
	usleep(HOLD_MS * 1000);
	atomic_store(&writes_in_copy, fake_total_count(fb, FAKE_OP(BLK_WRITE)));
}

static void copy_blocks_writeback(bool stable)
{
	uint8_t *buf = talloc(LEN);
	uint64_t before;

	setup_stable(stable);
	do_write(0, LEN, 1);		/* dirty, generation 1 */
	before = fake_total_count(fb, FAKE_OP(BLK_WRITE));
	pc_test_hooks.copy_begin = copy_begin;
	atomic_store(&hook_armed, true);
	fill(buf, LEN, 0, 2);
	cr_assert_eq(pc_write(dev, buf, LEN, 0), (ssize_t)LEN);
	cr_assert(!atomic_load(&hook_armed), "the writer's copy never reached the hook");
	job_join(&hook_fs, "the fsync started during the copy");
	cr_assert_eq(hook_fs.ret, 0);
	memcpy(model, buf, LEN);
	if (stable) {
		cr_assert_eq(atomic_load(&writes_in_copy), before,
			     "writeback started on a folio a writer was copying into:\n%s",
			     log_text());
		/* the fsync waited for the copy, then wrote generation 2 whole */
		verify_store(0, LEN);
	} else {
		cr_assert_gt(atomic_load(&writes_in_copy), before,
			     "without stable_writes writeback should not wait for a copy");
		cr_assert_eq(do_fsync(), 0);
		verify_store(0, LEN);
	}
}

Test(stable, writeback_waits_for_copy, .fini = fini, .timeout = 180)
{
	copy_blocks_writeback(true);
}

Test(stable, not_stable_writeback_during_copy, .fini = fini, .timeout = 180)
{
	copy_blocks_writeback(false);
}
#else
Test(stable, writeback_waits_for_copy)
{
	cr_skip("needs the test hooks of core/ (CHECKS=1)");
}
#endif
