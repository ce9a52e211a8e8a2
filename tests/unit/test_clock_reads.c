/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_clock_reads.c - how many times a request reads the clock
 * (issue 39), counted by interposing clock_gettime(2) (CLOCK_MONOTONIC
 * calls of this thread only). A request is driven as fuse/devfile.c drives
 * one: bt_req_begin() at receipt, the cache's asynchronous form, and the
 * reply's bt_req_end_tok() with the request's struct pc_aio when it is
 * answered in its handler's thread (the fake completes inline). An unsplit
 * direct I/O answered inline shares the device level's end with the FUSE
 * level's: 3 reads, not 4. An end stamp is only ever taken by the request
 * that set it: a later request in the same slot (same struct pc_aio) reads
 * the clock, and so does a reply sent outside the handler.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <time.h>

#include "../../backends/lib/trace.h"
#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

static __thread bool counting;
static __thread unsigned int reads;

/* Every clock_gettime of the process comes here (the binary defines it): counted, passed on. */
int clock_gettime(clockid_t clk, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "clock_gettime");
	if (counting && clk == CLOCK_MONOTONIC)
		reads++;
	return real(clk, ts);
}

/* A request as devfile.c's struct bf_req has it. */
struct treq {
	struct pc_aio aio;	/* first */
	struct bt_dev *bt;
	enum blk_op op;
	uint64_t pos, len, start;
	ssize_t res;
	int calls;
};

/* The request whose handler this thread runs (devfile.c's req_here). */
static __thread const struct treq *here;

static void treq_done(struct pc_aio *aio, ssize_t res)
{
	struct treq *r = (struct treq *)aio;

	bt_req_end_tok(r->bt, r->op, r->pos, r->len, 1, r->start, (long)res,
		       here == r ? &r->aio : NULL);
	r->res = res;
	r->calls++;
}

static struct treq *treq_new(void)
{
	struct treq *r = talloc(sizeof(*r));

	r->aio.done = treq_done;
	r->aio.waited = false;
	r->bt = bt_dev_get("t0");	/* the fixture's device: the cache's own */
	cr_assert_not_null(r->bt);
	return r;
}

/* Receive, start and (the fake being inline) answer one request; the clock reads it took. */
static unsigned int run(struct treq *r, enum blk_op op, bool direct, void *buf, uint64_t len,
			uint64_t pos)
{
	reads = 0;
	counting = true;
	r->op = op;
	r->pos = pos;
	r->len = len;
	r->calls = 0;
	r->start = bt_req_begin(r->bt, op, pos, len, 1);
	here = r;
	if (op == BLK_WRITE && direct)
		pc_direct_write_async(dev, &r->aio, buf, len, pos);
	else if (op == BLK_WRITE)
		pc_write_async(dev, &r->aio, buf, len, pos);
	else
		pc_direct_read_async(dev, &r->aio, buf, len, pos);
	here = NULL;
	counting = false;
	cr_assert_eq(r->calls, 1, "the request was not answered in its handler");
	cr_assert_eq(r->res, (ssize_t)len);
	return reads;
}

static void setup_dev(void)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
}

/* The FUSE level's latency sum of @op against the device level's. */
static void sums(unsigned int op, uint64_t *fuse, uint64_t *devl)
{
	struct blk_hist h;
	struct bt_dev *bt = bt_dev_get("t0");

	bt_hist_snap(bt, BT_LEVEL_FUSE, op, &h);
	*fuse = h.sum_ns;
	bt_hist_snap(bt, BT_LEVEL_DEV, op, &h);
	*devl = h.sum_ns;
}

TEST_FIX(clock_reads, unsplit_direct_io_inline_reads_three)
{
	struct treq *r = treq_new();
	uint8_t *buf = talloc(64 * KiB);
	uint64_t f, d;
	unsigned int n;
	int i;

	setup_dev();
	run(r, BLK_WRITE, true, buf, 4096, 0);	/* the thread's first: its blocks are made */
	for (i = 0; i < 4; i++) {
		n = run(r, BLK_WRITE, true, buf, 4096, 4096 * (uint64_t)(i + 1));
		cr_assert_eq(n, 3, "direct write %d: %u clock reads (the FUSE level's begin, the "
			     "device level's begin and end, which is the reply's too)", i, n);
		n = run(r, BLK_READ, true, buf, 64 * KiB, 64 * KiB * (uint64_t)i);
		cr_assert_eq(n, 3, "direct read %d: %u clock reads", i, n);
	}
	/* one end for both levels: the FUSE level's time holds the device level's */
	sums(BT_OP_WRITE, &f, &d);
	cr_assert_geq(f, d, "FUSE level writes %llu ns < device level %llu ns",
		      (unsigned long long)f, (unsigned long long)d);
	sums(BT_OP_READ, &f, &d);
	cr_assert_geq(f, d, "FUSE level reads %llu ns < device level %llu ns",
		      (unsigned long long)f, (unsigned long long)d);
}

/* A request the cache refuses at once (a misaligned direct write): the clock reads it took. */
static unsigned int run_refused(struct treq *r, uint8_t *buf)
{
	reads = 0;
	counting = true;
	r->calls = 0;
	r->op = BLK_WRITE;
	r->pos = 100;
	r->len = 4096;
	r->start = bt_req_begin(r->bt, BLK_WRITE, 100, 4096, 1);
	here = r;
	pc_direct_write_async(dev, &r->aio, buf, 4096, 100);
	here = NULL;
	counting = false;
	cr_assert_eq(r->calls, 1);
	cr_assert_eq(r->res, -EINVAL);
	return reads;
}

/*
 * A stamp is only ever taken by the request that set it: the same slot's
 * next request, one that reaches no device (refused at once), reads the
 * clock at its end as any such request does, and a reply sent outside the
 * handler (parked) reads it too.
 */
TEST_FIX(clock_reads, stale_stamp_is_never_taken)
{
	struct treq *r = treq_new(), *other = treq_new();
	uint8_t *buf = talloc(64 * KiB);
	unsigned int n, plain;

	setup_dev();
	run(r, BLK_WRITE, true, buf, 4096, 0);
	/* a direct write whose device end leaves a stamp, not answered in its handler */
	counting = true;
	reads = 0;
	r->calls = 0;
	r->op = BLK_WRITE;
	r->pos = 8192;
	r->len = 4096;
	r->start = bt_req_begin(r->bt, BLK_WRITE, 8192, 4096, 1);
	pc_direct_write_async(dev, &r->aio, buf, 4096, 8192);	/* here is NULL: parked */
	counting = false;
	cr_assert_eq(r->calls, 1);
	cr_assert_eq(reads, 4, "a reply outside its handler: %u clock reads, not 4", reads);
	/* its end stamp is left: the same slot's next request never takes it */
	n = run_refused(r, buf);
	plain = run_refused(other, buf);
	cr_assert_eq(n, plain, "a refused request in the same slot: %u clock reads, not %u as in "
		     "another (it took the stale stamp for its end)", n, plain);
	cr_assert_eq(plain, 2, "a refused request: %u clock reads, not 2 (its begin and end)", plain);
}
