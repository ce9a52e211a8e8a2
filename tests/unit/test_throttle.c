// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_throttle.c - the throttle filter over the fake backend:
 * the token bucket (each I/O pays for its bytes, bursts, large I/O waits
 * for what the bucket lacks, per direction and shared, data ops only), the
 * queue depth (at most N below, the rest in submission order, a deeper
 * queue stored live, a long queue drained by inline completions without
 * recursion), latency growing with the I/Os in flight, close with I/O held
 * and queued, the pool, the attrs and the config keys.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "fake_backend.h"
#include "helpers.h"

#define DEV_SIZE (256 * MiB)
#define MS 1000000ull

static struct fake_be *fb;

static void setup(void)
{
	const struct blk_geometry geo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 1 * MiB,
	};

	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void teardown(void)
{
	if (fb)
		fake_destroy(fb);
	fb = NULL;
}

TestSuite(throttle, .init = setup, .fini = teardown, .timeout = 180);

static struct blk_backend *open_with(struct tparams *tp, const char *k1, const char *v1,
				     const char *k2, const char *v2)
{
	filter_params_init(tp, "throttle", fake_backend(fb), "/etc/blkfs.conf", 3);
	if (k1)
		tparams_add(tp, k1, v1, 4);
	if (k2)
		tparams_add(tp, k2, v2, 5);
	return filter_open(tp);
}

/*
 * How many I/Os costing @cost_ns each the bucket can have paid for since
 * @t0: the most that may have gone down by now. A check against it holds
 * however late this thread runs on a busy machine (a fixed count would
 * fail once the thread is held up longer than one I/O's cost).
 */
static size_t paid_since(uint64_t t0, uint64_t cost_ns)
{
	return (size_t)((blk_now_ns() - t0) / cost_ns);
}

/* ================================================================== */

/* Nothing configured: the cache's own I/O goes down, flags and all. */
Test(throttle, idle_passes_through)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, NULL, NULL, NULL, NULL);
	struct fake_op fo;
	struct tio t;

	cr_assert(strstr(blk_filter_names(), "throttle"));
	cr_assert_str_eq(attr_show(be, "mbps"), "0\n");
	cr_assert_str_eq(attr_show(be, "queue_depth"), "0\n");
	cr_assert_str_eq(attr_show(be, "latency_per_inflight"), "0\n");
	tio_init(&t, BLK_READ, 0, MiB, NULL, 0);
	t.io.flags = BLK_IO_WAITED;
	cr_assert_eq(tio_submit(be, &t), 0);
	cr_assert_eq(tio_calls(&t), 1);
	tio_free(&t);
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.flags, BLK_IO_WAITED);
	cr_assert_eq(stat_get(be, "throttle_pool_max_used"), 0);
	be->ops->close(be);
}

/*
 * read_mbps = 100, no burst: ten 1 MiB reads at once go down 10 ms apart,
 * each once its bytes are paid for. The layer below completes by hand, so
 * only the filter's pacing is timed (a copy of 1 MiB per read would add its
 * own time on a busy machine).
 */
Test(throttle, bucket_paces_reads)
{
	struct tparams tp;
	uint64_t t_open = blk_now_ns();
	struct blk_backend *be = open_with(&tp, "throttle.read_mbps", "100", NULL, NULL);
	struct tio t[10], w;
	uint64_t t0, at[11];
	struct fake_op fo;
	size_t n, e;
	int i;

	for (i = 0; i < 10; i++) {
		tio_init(&t[i], BLK_READ, (uint64_t)i * MiB, MiB, NULL, 0);
		t[i].io.flags = BLK_IO_WAITED;
	}
	tio_init(&w, BLK_WRITE, 0, MiB, NULL, 1);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < 10; i++)
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	t0 = t[0].submit_ns;
	/* even the first pays for its bytes: no more below than paid for (10 ms each) */
	n = fake_pending(fb);
	cr_assert_leq(n, paid_since(t_open, 10 * MS), "%zu reads below after %llu ns", n,
		      (unsigned long long)(blk_now_ns() - t_open));
	/* writes are another direction: at once */
	cr_assert_eq(tio_submit(be, &w), 0);
	cr_assert_eq(fake_total_count(fb, FAKE_OP(BLK_WRITE)), 1, "the write was held");
	for (i = 2; i <= 11; i++) {
		cr_assert(fake_wait_pending(fb, (size_t)i, WAIT_MS), "read %d never went down", i - 2);
		at[i - 1] = blk_now_ns() - t0;
	}
	for (i = 1; i <= 10; i++)
		cr_assert_geq(at[i], (uint64_t)i * 10 * MS, "read %d went down at %llu ns", i - 1,
			      (unsigned long long)at[i]);
	/*
	 * In the order they came, from the timer thread: not BLK_IO_WAITED
	 * (the write is among them wherever this thread's submit fell).
	 */
	for (e = 0, i = 0; e < 11; e++) {
		cr_assert(fake_log_get(fb, e, &fo));
		if (fo.op == BLK_WRITE)
			continue;
		cr_assert_eq(fo.op, BLK_READ);
		cr_assert_eq(fo.pos, (uint64_t)i * MiB, "entry %zu: read %d out of order", e, i);
		cr_assert_eq(fo.flags, 0);
		i++;
	}
	cr_assert_eq(i, 10);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(fake_complete_all(fb, false), 11);
	cr_assert(tio_done_wait(11, WAIT_MS));
	for (i = 0; i < 10; i++) {
		cr_assert_eq(t[i].res, 0);
		tio_free(&t[i]);
	}
	tio_free(&w);
	cr_assert_eq(stat_get(be, "throttle_bw_waits"), 10);
	cr_assert_geq(stat_get(be, "throttle_bw_wait_us"), 100 * 1000);
	/* no data, no charge */
	cr_assert_eq(tio_do(be, BLK_FLUSH, 0, 0, NULL, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_DISCARD, 0, 64 * MiB, NULL, 0, NULL), 0);
	be->ops->close(be);
}

/* A burst passes at once after an idle spell; an I/O larger than it waits for the rest. */
Test(throttle, burst_and_large_io)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.read_mbps", "100", "throttle.burst", "4M");
	struct tio t[6];
	uint64_t lat, t1;
	size_t n;
	int i;

	for (i = 0; i < 6; i++)
		tio_init(&t[i], BLK_READ, (uint64_t)i * MiB, MiB, NULL, 0);
	/* manual: the layer below only counts, so the pacing is the filter's alone */
	fake_set_mode(fb, FAKE_MANUAL);
	usleep(50 * 1000);	/* the bucket fills (40 ms of 100 MiB/s; longer is no harm) */
	tio_done_reset();
	t1 = blk_now_ns();
	for (i = 0; i < 6; i++)
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	/* the burst of 4 MiB at once, and no more than 10 ms each paid since */
	n = fake_pending(fb);
	cr_assert(n >= 4 && n <= 4 + paid_since(t1, 10 * MS), "%zu below %llu ns after the burst",
		  n, (unsigned long long)(blk_now_ns() - t1));
	cr_assert(fake_wait_pending(fb, 6, WAIT_MS));
	cr_assert_geq(blk_now_ns() - t[0].submit_ns, 20 * MS);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(fake_complete_all(fb, false), 6);
	cr_assert(tio_done_wait(6, WAIT_MS));
	for (i = 0; i < 6; i++)
		tio_free(&t[i]);

	/* burst 64K, idle: a 1 MiB read waits for the 960K the bucket lacks (9.4 ms) */
	cr_assert_eq(attr_store(be, "burst", "64K"), 0);
	usleep(50 * 1000);
	tio_init(&t[0], BLK_READ, 0, MiB, NULL, 0);
	cr_assert_eq(tio_submit(be, &t[0]), 0);
	cr_assert(tio_wait(&t[0], WAIT_MS));
	lat = t[0].done_ns - t[0].submit_ns;
	cr_assert_geq(lat, 9 * MS, "%llu ns", (unsigned long long)lat);
	tio_free(&t[0]);
	/* a 64K read right after an idle spell goes at once */
	usleep(20 * 1000);
	tio_init(&t[0], BLK_READ, 0, 64 * KiB, NULL, 0);
	cr_assert_eq(tio_submit(be, &t[0]), 0);
	cr_assert_eq(tio_calls(&t[0]), 1);
	tio_free(&t[0]);
	be->ops->close(be);
}

/* mbps covers both directions at once; a direction's own cap adds to it. */
Test(throttle, shared_and_per_direction)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.mbps", "200", NULL, NULL);
	struct tio t[10];
	uint64_t t0;
	int i;

	for (i = 0; i < 10; i++)
		tio_init(&t[i], i % 2 ? BLK_WRITE : BLK_READ, (uint64_t)i * MiB, MiB, NULL, 1);
	tio_done_reset();
	for (i = 0; i < 10; i++)
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	t0 = t[0].submit_ns;
	cr_assert(tio_done_wait(10, WAIT_MS));
	/* 10 MiB at 200 MiB/s: 50 ms, whichever direction */
	cr_assert_geq(t[9].done_ns - t0, 50 * MS);
	for (i = 0; i < 10; i++)
		tio_free(&t[i]);
	/* and write_mbps 50 on top: writes at 50, reads still at 200 */
	cr_assert_eq(attr_store(be, "write_mbps", "50"), 0);
	for (i = 0; i < 4; i++)
		tio_init(&t[i], i < 2 ? BLK_WRITE : BLK_READ, (uint64_t)i * MiB, MiB, NULL, 1);
	usleep(100 * 1000);
	tio_done_reset();
	for (i = 0; i < 4; i++)
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	cr_assert(tio_done_wait(4, WAIT_MS));
	/* writes: 2 MiB at 50 MiB/s; the reads pay only the shared 200 (20 ms for all four) */
	cr_assert_geq(t[1].done_ns - t[0].submit_ns, 40 * MS, "the second write");
	cr_assert_lt(t[3].done_ns, t[1].done_ns, "the reads waited for the writes' cap");
	for (i = 0; i < 4; i++)
		tio_free(&t[i]);
	be->ops->close(be);
}

/* queue_depth 2: two below, the rest wait, and go in the order they came. */
Test(throttle, queue_depth_in_order)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.queue_depth", "2", NULL, NULL);
	struct tio t[8];
	struct fake_op fo;
	int i;

	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < 8; i++) {
		tio_init(&t[i], i % 3 ? BLK_WRITE : BLK_READ, (uint64_t)i * 4096, 4096, NULL, 1);
		t[i].io.flags = BLK_IO_WAITED;
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	cr_assert_eq(fake_pending(fb), 2);
	cr_assert_str_eq(attr_show(be, "inflight"), "2\n");
	cr_assert_str_eq(attr_show(be, "queued"), "6\n");
	/* newest first below: still the oldest waiting goes next */
	cr_assert(fake_complete_one(fb, 1));
	cr_assert_eq(fake_pending(fb), 2);
	cr_assert(fake_complete_one(fb, 0));
	cr_assert_eq(fake_pending(fb), 2);
	/* a deeper queue, stored live, lets the waiting ones go now */
	cr_assert_eq(attr_store(be, "queue_depth", "5"), 0);
	cr_assert_eq(fake_pending(fb), 5);
	cr_assert_str_eq(attr_show(be, "queued"), "1\n");
	cr_assert_eq(attr_store(be, "queue_depth", "0"), 0);
	cr_assert_eq(fake_pending(fb), 6);
	cr_assert_eq(fake_complete_all(fb, false), 6);
	cr_assert(tio_done_wait(8, WAIT_MS));
	for (i = 0; i < 8; i++) {
		cr_assert(fake_log_get(fb, (size_t)i, &fo));
		cr_assert_eq(fo.pos, (uint64_t)i * 4096, "entry %d went down out of order", i);
		/* the first two went down from the submitter, the rest from a dispatcher */
		cr_assert_eq(fo.flags, i < 2 ? BLK_IO_WAITED : 0u, "entry %d", i);
		cr_assert_eq(tio_calls(&t[i]), 1);
		tio_free(&t[i]);
	}
	cr_assert_eq(stat_get(be, "throttle_queued_ios"), 6);
	cr_assert_eq(stat_get(be, "throttle_max_inflight"), 6);
	be->ops->close(be);
}

/* The stack depth of each completion: the lowest and highest frame seen. */
static void (*tio_end)(struct blk_io *, int);
static uintptr_t sp_lo = UINTPTR_MAX, sp_hi;

static void depth_end_io(struct blk_io *io, int res)
{
	volatile char here;
	uintptr_t sp = (uintptr_t)&here;

	if (sp < sp_lo)
		sp_lo = sp;
	if (sp > sp_hi)
		sp_hi = sp;
	tio_end(io, res);
}

/*
 * A queue of 20000 behind queue_depth 1, then completions inline: each
 * completion dispatches the next from inside the layer below; one loop
 * does it all (no recursion: every completion runs at about the same
 * stack depth), in order, one at a time.
 */
Test(throttle, long_queue_drains_without_recursion)
{
	enum { N = 20000 };
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.queue_depth", "1", NULL, NULL);
	struct tio *t = calloc(N, sizeof(*t));
	int i;

	cr_assert_not_null(t);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < N; i++) {
		tio_init(&t[i], BLK_WRITE, (uint64_t)(i % 4096) * 4096, 4096, NULL, 1);
		tio_end = t[i].io.end_io;
		t[i].io.end_io = depth_end_io;
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	cr_assert_eq(fake_pending(fb), 1);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert(fake_complete_one(fb, 0));
	cr_assert(tio_done_wait(N, WAIT_MS), "%lu of %d", tio_done(), N);
	cr_assert_lt(sp_hi - sp_lo, 64 * KiB, "completions ran %llu bytes of stack apart",
		     (unsigned long long)(sp_hi - sp_lo));
	cr_assert_eq(stat_get(be, "throttle_max_inflight"), 1);
	cr_assert_eq(fake_total_count(fb, FAKE_OP(BLK_WRITE)), N);
	for (i = 0; i < N; i++)
		tio_free(&t[i]);
	free(t);
	be->ops->close(be);
}

/* latency_per_inflight 40ms: the k-th I/O in flight waits k-1 times that first. */
Test(throttle, latency_grows_with_inflight)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.latency_per_inflight", "40ms", NULL,
					   NULL);
	struct tio t[3];
	uint64_t t0, at;
	size_t n;
	int i;

	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < 3; i++) {
		tio_init(&t[i], BLK_READ, (uint64_t)i * 4096, 4096, NULL, 0);
		cr_assert_eq(tio_submit(be, &t[i]), 0);
		if (!i)
			cr_assert_eq(fake_pending(fb), 1, "the first waits for nobody");
	}
	t0 = t[0].submit_ns;
	/* the others wait 40 ms each: no more below than that allows */
	n = fake_pending(fb);
	cr_assert_leq(n, 1 + paid_since(t0, 40 * MS), "%zu below after %llu ns", n,
		      (unsigned long long)(blk_now_ns() - t0));
	cr_assert(fake_wait_pending(fb, 2, WAIT_MS));
	at = blk_now_ns() - t0;
	cr_assert_geq(at, 40 * MS, "the second passed after %llu ns", (unsigned long long)at);
	cr_assert(fake_wait_pending(fb, 3, WAIT_MS));
	at = blk_now_ns() - t0;
	cr_assert_geq(at, 80 * MS, "the third passed after %llu ns", (unsigned long long)at);
	cr_assert_eq(stat_get(be, "throttle_contended_ios"), 2);
	cr_assert_geq(stat_get(be, "throttle_contend_us"), 120000);
	cr_assert_eq(fake_complete_all(fb, false), 3);
	cr_assert(tio_done_wait(3, WAIT_MS));
	/* alone again: no wait */
	tio_free(&t[0]);
	tio_init(&t[0], BLK_READ, 0, 4096, NULL, 0);
	cr_assert_eq(tio_submit(be, &t[0]), 0);
	cr_assert_eq(fake_pending(fb), 1);
	cr_assert_eq(fake_complete_all(fb, false), 1);
	for (i = 0; i < 3; i++)
		tio_free(&t[i]);
	be->ops->close(be);
}

/* Close with I/O held by the bucket and queued: everything completes once, then close returns. */
Test(throttle, close_with_io_held_and_queued)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.queue_depth", "1", "throttle.read_mbps",
					   "1");
	struct tio *t = calloc(40, sizeof(*t));
	uint64_t t0;
	int i;

	cr_assert_not_null(t);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 500);
	tio_done_reset();
	for (i = 0; i < 40; i++) {
		/*
		 * reads at 1 MiB/s: 1 MiB each; the 20 would take 20 s, so a
		 * close that waited for the bucket stands out from one that
		 * is only slow on a busy machine
		 */
		tio_init(&t[i], i % 2 ? BLK_WRITE : BLK_READ, (uint64_t)i * MiB, MiB, NULL, 1);
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	t0 = blk_now_ns();
	be->ops->close(be);
	cr_assert_lt(blk_now_ns() - t0, 10000 * MS, "close waited for the bucket: %llu ns",
		     (unsigned long long)(blk_now_ns() - t0));
	cr_assert_eq(tio_done(), 40);
	for (i = 0; i < 40; i++) {
		cr_assert_eq(tio_calls(&t[i]), 1);
		cr_assert_eq(t[i].res, 0);
		tio_free(&t[i]);
	}
	free(t);
	cr_assert_eq(fake_pending(fb), 0);
}

Test(throttle, pool_overflow)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "throttle.pool", "2", "throttle.queue_depth", "1");
	struct tio t[6];
	int i;

	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < 6; i++) {
		tio_init(&t[i], BLK_WRITE, (uint64_t)i * 4096, 4096, NULL, 1);
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	cr_assert_eq(stat_get(be, "throttle_pool_allocs"), 4);
	for (i = 0; i < 6; i++) {
		cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
		cr_assert(fake_complete_one(fb, 0));
	}
	cr_assert(tio_done_wait(6, WAIT_MS));
	for (i = 0; i < 6; i++)
		tio_free(&t[i]);
	be->ops->close(be);
}

Test(throttle, attrs_and_config)
{
	struct tparams tp;
	struct blk_backend *be;
	int n = 0;

	filter_params_init(&tp, "throttle", fake_backend(fb), "/etc/blkfs.conf", 3);
	tparams_add(&tp, "throttle.mbps", "500", 4);
	tparams_add(&tp, "throttle.read_mbps", "100", 5);
	tparams_add(&tp, "throttle.write_mbps", "50", 6);
	tparams_add(&tp, "throttle.burst", "1M", 7);
	tparams_add(&tp, "throttle.queue_depth", "4", 8);
	tparams_add(&tp, "throttle.latency_per_inflight", "250us", 9);
	tparams_add(&tp, "throttle.pool", "32", 10);
	be = filter_open(&tp);
	for (int i = 0; i < tp.p.n; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	for (const char *const *k = blk_backend_find("throttle")->keys; *k; k++)
		n++;
	cr_assert_eq(n, tp.p.n, "a key the test does not set");
	cr_assert_str_eq(attr_show(be, "mbps"), "500\n");
	cr_assert_str_eq(attr_show(be, "read_mbps"), "100\n");
	cr_assert_str_eq(attr_show(be, "write_mbps"), "50\n");
	cr_assert_str_eq(attr_show(be, "burst"), "1048576\n");
	cr_assert_str_eq(attr_show(be, "queue_depth"), "4\n");
	cr_assert_str_eq(attr_show(be, "latency_per_inflight"), "250us\n");
	cr_assert_str_eq(attr_show(be, "inflight"), "0\n");
	cr_assert_eq(stat_get(be, "throttle_pool"), 32);
	attr_refuses(be, "mbps", "-1");
	attr_refuses(be, "mbps", "1000001");
	attr_refuses(be, "mbps", "100MB");
	attr_refuses(be, "read_mbps", "");
	attr_refuses(be, "burst", "1X");
	attr_refuses(be, "queue_depth", "65537");
	attr_refuses(be, "latency_per_inflight", "5");
	attr_refuses(be, "latency_per_inflight", "2s");
	cr_assert_eq(attr_store(be, "latency_per_inflight", "1s\n"), 0);
	cr_assert_str_eq(attr_show(be, "latency_per_inflight"), "1s\n");
	be->ops->close(be);

	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{ "throttle.mbps", "fast", "throttle.mbps: 'fast' is not a number from 0 to 1000000" },
		{ "throttle.write_mbps", "1000001", "throttle.write_mbps: '1000001' is not a number" },
		{ "throttle.burst", "1Q", "throttle.burst: '1Q' is not a size" },
		{ "throttle.queue_depth", "x", "throttle.queue_depth: 'x' is not a number from 0 to 65536" },
		{ "throttle.latency_per_inflight", "50", "throttle.latency_per_inflight: '50' is not a duration" },
		{ "throttle.latency_per_inflight", "2s", "throttle.latency_per_inflight: '2s' is out of range (allowed: 0..1s)" },
		{ "throttle.pool", "0", "throttle.pool: '0' is not a number from 1 to 65536" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		filter_params_init(&tp, "throttle", fake_backend(fb), "/etc/blkfs.conf", 3);
		tparams_add(&tp, bad[i].key, bad[i].value, 9);
		filter_open_fails(&tp, bad[i].want);
	}
	filter_params_init(&tp, "throttle", fake_backend(fb), "/etc/blkfs.conf", 3);
	be = blk_backend_find("throttle")->open(&tp.p, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(tp.err, "needs a layer below"), "%s", tp.err);
}
