// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_flakey.c - the flakey filter over the fake backend: the
 * up/down cycle (never, always, timed windows, restarted by a store), each
 * down-window behaviour (all fail, error_reads, error_writes, drop_writes),
 * corruption of reads and writes (corrupt_bio_byte, random with a seed that
 * replays, only inside corrupt_ranges, never in the cache's memory of a
 * write, pieces that keep the layer below's alignment), the pool, the attrs
 * and the config keys.
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

#define DEV_SIZE (64 * MiB)
#define MS 1000000ull

static struct fake_be *fb;

static void setup_align(uint32_t dma_align)
{
	const struct blk_geometry geo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 1 * MiB,
		.dma_align = dma_align,
	};

	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void setup(void)
{
	setup_align(1);
}

static void setup_512(void)
{
	setup_align(512);
}

static void teardown(void)
{
	if (fb)
		fake_destroy(fb);
	fb = NULL;
}

TestSuite(flakey, .init = setup, .fini = teardown);
TestSuite(flakey_aligned, .init = setup_512, .fini = teardown);

static void tparams_init(struct tparams *tp)
{
	filter_params_init(tp, "flakey", fake_backend(fb), "/etc/blkfs.conf", 3);
}

/* Open with up to four "key", "value" pairs (NULL ends them). */
static struct blk_backend *open_with(struct tparams *tp, const char *k1, const char *v1,
				     const char *k2, const char *v2, const char *k3,
				     const char *v3)
{
	tparams_init(tp);
	if (k1)
		tparams_add(tp, k1, v1, 4);
	if (k2)
		tparams_add(tp, k2, v2, 5);
	if (k3)
		tparams_add(tp, k3, v3, 6);
	return filter_open(tp);
}

static int wr(struct blk_backend *be, uint64_t pos, uint64_t len, int fill)
{
	return tio_do(be, BLK_WRITE, pos, len, NULL, fill, NULL);
}

static int rd(struct blk_backend *be, uint64_t pos, uint64_t len, void *out)
{
	return tio_do(be, BLK_READ, pos, len, NULL, 0, out);
}

static int op(struct blk_backend *be, enum blk_op o)
{
	return tio_do(be, o, o == BLK_FLUSH ? 0 : 0, o == BLK_FLUSH ? 0 : 4096, NULL, 0, NULL);
}

/* Bytes of the store in [pos, pos + len) that differ from @fill; the first in *@at. */
static size_t store_diff(uint64_t pos, uint64_t len, int fill, uint64_t *at)
{
	const uint8_t *s = fake_store(fb);
	size_t n = 0;
	uint64_t i;

	for (i = pos; i < pos + len; i++) {
		if (s[i] != (uint8_t)fill) {
			if (!n && at)
				*at = i;
			n++;
		}
	}
	return n;
}

static size_t buf_diff(const uint8_t *b, size_t len, int fill, uint64_t *at)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		if (b[i] != (uint8_t)fill) {
			if (!n && at)
				*at = i;
			n++;
		}
	}
	return n;
}

/* ================================================================== */

Test(flakey, registered_and_idle_by_default)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, NULL, NULL, NULL, NULL, NULL, NULL);
	uint8_t buf[4096];
	struct tio t;
	struct fake_op fo;

	cr_assert(strstr(blk_filter_names(), "flakey"));
	cr_assert_str_eq(attr_show(be, "state"), "up\n");
	cr_assert_str_eq(attr_show(be, "up_interval"), "0\n");
	cr_assert_str_eq(attr_show(be, "down_interval"), "0\n");
	cr_assert_str_eq(attr_show(be, "corrupt_bio_byte"), "off\n");
	cr_assert_str_eq(attr_show(be, "random_read_corrupt"), "0\n");
	cr_assert_str_eq(attr_show(be, "errno"), "EIO\n");
	cr_assert_str_eq(attr_show(be, "last_corruption"), "none\n");
	cr_assert_str_eq(attr_show_list(be, "corrupt_ranges"), "");
	/* never down: everything passes, the cache's own I/O (flags and all) */
	tio_init(&t, BLK_WRITE, 0, 4096, NULL, 0x11);
	t.io.flags = BLK_IO_WAITED;
	cr_assert_eq(tio_submit(be, &t), 0);
	cr_assert_eq(tio_calls(&t), 1);
	tio_free(&t);
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.flags, BLK_IO_WAITED);
	cr_assert_eq(rd(be, 0, 4096, buf), 0);
	cr_assert_eq(buf[0], 0x11);
	cr_assert_eq(op(be, BLK_FLUSH), 0);
	cr_assert_eq(stat_get(be, "flakey_down_ios"), 0);
	cr_assert_eq(stat_get(be, "flakey_down"), 0);
	/* up_interval alone does not make it go down */
	cr_assert_eq(attr_store(be, "up_interval", "1s"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x12), 0);
	cr_assert_str_eq(attr_show(be, "state"), "up\n");
	be->ops->close(be);
}

/* up 0, down N: always down; with no feature, every op fails and none goes below. */
Test(flakey, always_down_fails_everything)
{
	static const enum blk_op ops[] = { BLK_READ, BLK_WRITE, BLK_FLUSH, BLK_DISCARD,
					   BLK_WRITE_ZEROES };
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.up_interval", "0",
					   "flakey.down_interval", "180", NULL, NULL);
	size_t i;

	cr_assert_str_eq(attr_show(be, "down_interval"), "3m\n");
	cr_assert_str_eq(attr_show(be, "state"), "down\n");
	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		cr_assert_eq(op(be, ops[i]), -EIO, "%s", blk_op_name(ops[i]));
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), 0);
	cr_assert_eq(attr_store(be, "errno", "ENOSPC"), 0);
	cr_assert_eq(op(be, BLK_READ), -ENOSPC);
	cr_assert_eq(stat_get(be, "flakey_errors"), 6);
	cr_assert_eq(stat_get(be, "flakey_down_ios"), 6);
	cr_assert_eq(stat_get(be, "flakey_down"), 1);
	/* down_interval 0: up again */
	cr_assert_eq(attr_store(be, "down_interval", "0"), 0);
	cr_assert_eq(op(be, BLK_READ), 0);
	be->ops->close(be);
}

Test(flakey, error_reads_and_error_writes)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.down_interval", "1h",
					   "flakey.error_reads", "yes", NULL, NULL);

	/* up first: a store of an interval restarts the cycle, up first */
	cr_assert_eq(wr(be, 0, 4096, 0x21), 0);
	cr_assert_eq(attr_store(be, "up_interval", "0"), 0);
	cr_assert_eq(rd(be, 0, 4096, NULL), -EIO);
	cr_assert_eq(wr(be, 0, 4096, 0x22), 0);
	cr_assert_eq(store_diff(0, 4096, 0x22, NULL), 0);
	cr_assert_eq(op(be, BLK_FLUSH), 0);
	cr_assert_eq(op(be, BLK_DISCARD), 0);

	cr_assert_eq(attr_store(be, "error_reads", "no"), 0);
	cr_assert_eq(attr_store(be, "error_writes", "yes"), 0);
	cr_assert_eq(rd(be, 0, 4096, NULL), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x23), -EIO);
	cr_assert_eq(store_diff(0, 4096, 0, NULL), 0, "the discard above zeroed it; the write failed");
	cr_assert_eq(op(be, BLK_FLUSH), -EIO);
	cr_assert_eq(op(be, BLK_DISCARD), -EIO);
	cr_assert_eq(op(be, BLK_WRITE_ZEROES), -EIO);
	/* error_writes wins over drop_writes */
	cr_assert_eq(attr_store(be, "drop_writes", "1"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x24), -EIO);
	be->ops->close(be);
}

/* drop_writes: acknowledged, never written; flush still goes down. */
Test(flakey, drop_writes)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.drop_writes", "yes",
					   "flakey.down_interval", "0", NULL, NULL);
	uint8_t buf[4096];

	cr_assert_eq(wr(be, 0, 4096, 0x31), 0);
	/* switched, as xfstests does: up 0 and a down interval */
	cr_assert_eq(attr_store(be, "down_interval", "180s"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "down\n");
	fake_log_clear(fb);
	cr_assert_eq(wr(be, 0, 4096, 0x32), 0);
	cr_assert_eq(tio_do(be, BLK_WRITE_ZEROES, 0, 4096, NULL, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_DISCARD, 0, 4096, NULL, 0, NULL), 0);
	cr_assert_eq(store_diff(0, 4096, 0x31, NULL), 0);
	cr_assert_eq(op(be, BLK_FLUSH), 0);
	cr_assert_eq(rd(be, 0, 4096, buf), 0);
	cr_assert_eq(buf[0], 0x31);
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_WRITE) | FAKE_OP(BLK_DISCARD) |
				    FAKE_OP(BLK_WRITE_ZEROES)), 0);
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_FLUSH) | FAKE_OP(BLK_READ)), 2);
	cr_assert_eq(stat_get(be, "flakey_dropped_writes"), 3);
	/* back up */
	cr_assert_eq(attr_store(be, "down_interval", "0"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x33), 0);
	cr_assert_eq(store_diff(0, 4096, 0x33, NULL), 0);
	be->ops->close(be);
}

/*
 * Timed windows: up 300ms, down 300ms, from the last store. Each write aims
 * at the middle of a window; it is judged only when it certainly fell in
 * one window: between the time before its submit and the time after its
 * completion, both taken against the earliest and the latest the store
 * can have started the windows. A write this thread was too late for (a
 * busy machine) says nothing and the next window is tried; two up and two
 * down windows must be judged before the deadline.
 */
Test(flakey, up_and_down_windows)
{
	const uint64_t win = 300 * MS;
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.error_writes", "yes", NULL, NULL, NULL,
					   NULL);
	uint64_t t_store, t0, end;
	int judged[2] = { 0, 0 }, errors = 0, k;

	cr_assert_eq(attr_store(be, "up_interval", "300ms"), 0);
	t_store = blk_now_ns();
	cr_assert_eq(attr_store(be, "down_interval", "300ms"), 0);
	t0 = blk_now_ns();
	end = t0 + (uint64_t)WAIT_MS * MS;
	for (k = 0; judged[0] < 2 || judged[1] < 2; k++) {
		uint64_t mid = t0 + (uint64_t)k * win + win / 2, now = blk_now_ns(), a, b;
		int ret;

		cr_assert_lt(now, end, "after %d windows only %d up and %d down judged", k,
			     judged[0], judged[1]);
		if (now < mid)
			usleep((useconds_t)((mid - now) / 1000));
		a = blk_now_ns();
		ret = wr(be, 0, 512, 0x40 + (k & 0x3f));
		b = blk_now_ns();
		if (ret)
			errors++;
		/* the write fell between a - t0 and b - t_store after the windows began */
		if ((a - t0) / win != (b - t_store) / win)
			continue;
		cr_assert_eq(ret, (a - t0) / win % 2 ? -EIO : 0, "window %llu (%s)",
			     (unsigned long long)((a - t0) / win),
			     (a - t0) / win % 2 ? "down" : "up");
		judged[(a - t0) / win % 2]++;
	}
	cr_assert_eq(stat_get(be, "flakey_errors"), (uint64_t)errors);
	be->ops->close(be);
}

/* dm-flakey's corrupt_bio_byte: byte N (from 1) of each READ becomes VALUE. */
Test(flakey, corrupt_bio_byte_read)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.down_interval", "1", "flakey.up_interval",
					   "0", "flakey.corrupt_bio_byte", "32 r 1 0");
	uint8_t buf[8192];
	uint64_t at;

	cr_assert_str_eq(attr_show(be, "corrupt_bio_byte"), "32 r 1\n");
	fake_store_write(fb, memset(buf, 0x55, sizeof(buf)), sizeof(buf), 0);
	cr_assert_eq(rd(be, 0, 4096, buf), 0);
	cr_assert_eq(buf_diff(buf, 4096, 0x55, &at), 1);
	cr_assert_eq(at, 31);
	cr_assert_eq(buf[31], 1);
	/* the device is untouched: it is the read that lies */
	cr_assert_eq(store_diff(0, 8192, 0x55, NULL), 0);
	cr_assert_str_eq(attr_show(be, "last_corruption"), "read 31 85 1\n");
	/* writes pass untouched in r mode */
	cr_assert_eq(wr(be, 4096, 4096, 0x56), 0);
	cr_assert_eq(store_diff(4096, 4096, 0x56, NULL), 0);
	/* N beyond the I/O: nothing */
	cr_assert_eq(attr_store(be, "corrupt_bio_byte", "600 r 7"), 0);
	cr_assert_eq(rd(be, 0, 512, buf), 0);
	cr_assert_eq(buf_diff(buf, 512, 0x55, NULL), 0);
	cr_assert_eq(rd(be, 0, 1024, buf), 0);
	cr_assert_eq(buf_diff(buf, 1024, 0x55, &at), 1);
	cr_assert_eq(at, 599);
	cr_assert_eq(stat_get(be, "flakey_read_corruptions"), 2);
	/* in the up window nothing is corrupted */
	cr_assert_eq(attr_store(be, "up_interval", "1h"), 0);
	cr_assert_eq(rd(be, 0, 1024, buf), 0);
	cr_assert_eq(buf_diff(buf, 1024, 0x55, NULL), 0);

	attr_refuses(be, "corrupt_bio_byte", "0 r 1");
	attr_refuses(be, "corrupt_bio_byte", "32 x 1");
	attr_refuses(be, "corrupt_bio_byte", "32 r 256");
	attr_refuses(be, "corrupt_bio_byte", "32 r");
	attr_refuses(be, "corrupt_bio_byte", "32 r 1 32");
	attr_refuses(be, "corrupt_bio_byte", "32 r 1 0 0");
	attr_refuses(be, "corrupt_bio_byte", "-1 r 1");
	attr_refuses(be, "corrupt_bio_byte", "32 R 1");
	cr_assert_eq(attr_store(be, "corrupt_bio_byte", "off"), 0);
	cr_assert_str_eq(attr_show(be, "corrupt_bio_byte"), "off\n");
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

/* w: the device gets VALUE at byte N; the cache's buffer keeps what it had. */
Test(flakey, corrupt_bio_byte_write_spares_the_cache)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.down_interval", "1", "flakey.up_interval",
					   "0", "flakey.corrupt_bio_byte", "224 w 0");
	struct tio t;
	uint64_t at;

	tio_init(&t, BLK_WRITE, 8192, 4096, NULL, 0x66);
	cr_assert_eq(tio_submit(be, &t), 0);
	cr_assert(tio_wait(&t, WAIT_MS));
	cr_assert_eq(t.res, 0);
	cr_assert_eq(buf_diff(t.iov.iov_base, 4096, 0x66, NULL), 0, "the cache's memory changed");
	cr_assert_eq(store_diff(8192, 4096, 0x66, &at), 1);
	cr_assert_eq(at, 8192 + 223);
	cr_assert_eq(fake_store(fb)[at], 0);
	cr_assert_str_eq(attr_show(be, "last_corruption"), "write 8415 102 0\n");
	cr_assert_eq(stat_get(be, "flakey_write_corruptions"), 1);
	tio_free(&t);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

/* random_read_corrupt = 1: one byte per read changes; the seed replays the choice. */
Test(flakey, random_read_corrupt_replays)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.down_interval", "1", "flakey.up_interval",
					   "0", "flakey.seed", "1234");
	uint64_t first[16], again[16], other[16];
	uint8_t buf[65536];
	int i, differ = 0;

	cr_assert_str_eq(attr_show(be, "seed"), "1234\n");
	cr_assert_eq(attr_store(be, "random_read_corrupt", "1"), 0);
	for (i = 0; i < 16; i++) {
		cr_assert_eq(rd(be, (uint64_t)i * 65536, 65536, buf), 0);
		cr_assert_eq(buf_diff(buf, 65536, 0, &first[i]), 1, "read %d", i);
		first[i] += (uint64_t)i * 65536;
	}
	cr_assert_eq(stat_get(be, "flakey_read_corruptions"), 16);
	/* the same seed: the same bytes */
	cr_assert_eq(attr_store(be, "seed", "1234"), 0);
	for (i = 0; i < 16; i++) {
		cr_assert_eq(rd(be, (uint64_t)i * 65536, 65536, buf), 0);
		cr_assert_eq(buf_diff(buf, 65536, 0, &again[i]), 1);
		again[i] += (uint64_t)i * 65536;
		cr_assert_eq(again[i], first[i], "read %d: %llu then %llu", i,
			     (unsigned long long)first[i], (unsigned long long)again[i]);
	}
	/* another seed: other bytes */
	cr_assert_eq(attr_store(be, "seed", "99"), 0);
	for (i = 0; i < 16; i++) {
		cr_assert_eq(rd(be, (uint64_t)i * 65536, 65536, buf), 0);
		cr_assert_eq(buf_diff(buf, 65536, 0, &other[i]), 1);
		differ += other[i] + (uint64_t)i * 65536 != first[i];
	}
	cr_assert_geq(differ, 14);
	/* probability 0.25 over 400 reads: about 100 */
	cr_assert_eq(attr_store(be, "random_read_corrupt", "0.25"), 0);
	for (i = 0, differ = 0; i < 400; i++) {
		cr_assert_eq(rd(be, 0, 4096, buf), 0);
		differ += buf_diff(buf, 4096, 0, NULL) != 0;
	}
	cr_assert(differ > 50 && differ < 160, "%d of 400", differ);
	/* writes are not touched by read corruption */
	cr_assert_eq(wr(be, 0, 4096, 0x77), 0);
	cr_assert_eq(store_diff(0, 4096, 0x77, NULL), 0);
	attr_refuses(be, "random_read_corrupt", "1000000000");
	attr_refuses(be, "random_read_corrupt", "-0.5");
	be->ops->close(be);
}

/* Only inside corrupt_ranges; an I/O that misses them reads true. */
Test(flakey, corrupt_ranges)
{
	struct tparams tp;
	struct blk_backend *be;
	static uint8_t buf2[1 << 20];
	uint8_t buf[65536];
	uint64_t at;
	int i, hits2 = 0;

	tparams_init(&tp);
	tparams_add(&tp, "flakey.corrupt_ranges", "1M 512, 64M 512", 4);
	filter_open_fails(&tp, "/etc/blkfs.conf:4: flakey.corrupt_ranges: '1M 512, 64M 512' is not a list of ranges inside the device");
	be = open_with(&tp, "flakey.down_interval", "1", "flakey.up_interval", "0",
		       "flakey.corrupt_ranges", "1536K 512, 1M 512, 1M 4K");
	/* sorted and merged */
	cr_assert_str_eq(attr_show_list(be, "corrupt_ranges"), "1048576 4096\n1572864 512\n");
	cr_assert_eq(attr_store(be, "random_read_corrupt", "1"), 0);
	cr_assert_eq(attr_store(be, "seed", "5"), 0);
	for (i = 0; i < 50; i++) {
		/* 64K around 1M: the byte is in [1M, 1M + 4K) */
		cr_assert_eq(rd(be, MiB - 32 * KiB, 64 * KiB, buf), 0);
		cr_assert_eq(buf_diff(buf, 64 * KiB, 0, &at), 1);
		at += MiB - 32 * KiB;
		cr_assert(at >= MiB && at < MiB + 4096, "corrupted %llu", (unsigned long long)at);
		/* a read that covers both: in one or the other */
		cr_assert_eq(rd(be, MiB, MiB, buf2), 0);
		cr_assert_eq(buf_diff(buf2, MiB, 0, &at), 1);
		at += MiB;
		cr_assert((at >= MiB && at < MiB + 4096) || (at >= 1536 * KiB && at < 1536 * KiB + 512),
			  "corrupted %llu", (unsigned long long)at);
		hits2 += at >= 1536 * KiB;
	}
	/* uniform over the 4608 bytes: about 1 in 9 in the small range */
	cr_assert(hits2 >= 1 && hits2 <= 20, "%d of 50 in the second range", hits2);
	/* a read that misses every range: never corrupted, and draws nothing */
	cr_assert_eq(attr_store(be, "seed", "5"), 0);
	cr_assert_eq(rd(be, 0, 64 * KiB, buf), 0);
	cr_assert_eq(buf_diff(buf, 64 * KiB, 0, NULL), 0);
	cr_assert_eq(rd(be, MiB - 32 * KiB, 64 * KiB, buf), 0);
	cr_assert_eq(buf_diff(buf, 64 * KiB, 0, &at), 1);
	{
		uint64_t with_miss = at;

		cr_assert_eq(attr_store(be, "seed", "5"), 0);
		cr_assert_eq(rd(be, MiB - 32 * KiB, 64 * KiB, buf), 0);
		cr_assert_eq(buf_diff(buf, 64 * KiB, 0, &at), 1);
		cr_assert_eq(at, with_miss, "a read outside the ranges moved the stream");
	}
	/* corrupt_bio_byte too only inside */
	cr_assert_eq(attr_store(be, "random_read_corrupt", "0"), 0);
	cr_assert_eq(attr_store(be, "corrupt_bio_byte", "1 r 9"), 0);
	cr_assert_eq(rd(be, 0, 4096, buf), 0);
	cr_assert_eq(buf_diff(buf, 4096, 0, NULL), 0);
	cr_assert_eq(rd(be, 1536 * KiB, 4096, buf), 0);
	cr_assert_eq(buf[0], 9);
	/* more ranges merge in; garbage changes nothing; clear */
	cr_assert_eq(attr_store(be, "corrupt_ranges", "1536K 1K\n3M 512\n"), 0);
	cr_assert_str_eq(attr_show_list(be, "corrupt_ranges"),
			 "1048576 4096\n1572864 1024\n3145728 512\n");
	attr_refuses(be, "corrupt_ranges", "5M");
	attr_refuses(be, "corrupt_ranges", "5M 0");
	attr_refuses(be, "corrupt_ranges", "5M 1K 3");
	attr_refuses(be, "corrupt_ranges", "63M 2M");
	attr_refuses(be, "corrupt_ranges", "");
	cr_assert_eq(attr_store(be, "corrupt_ranges", "clear"), 0);
	cr_assert_str_eq(attr_show_list(be, "corrupt_ranges"), "");
	cr_assert_eq(rd(be, 0, 4096, buf), 0);
	cr_assert_eq(buf[0], 9);
	be->ops->close(be);
}

/*
 * A write over several aligned pieces, corrupted twice: the layer below
 * gets a vector that keeps its alignment (the fake checks dma_align 512),
 * the device has exactly the corrupted bytes, the cache's memory none.
 */
Test(flakey_aligned, random_write_corrupt_keeps_alignment)
{
	struct tparams tp;
	struct blk_backend *be = open_with(&tp, "flakey.down_interval", "1", "flakey.up_interval",
					   "0", "flakey.seed", "77");
	struct iovec iov[3];
	uint8_t *mem = NULL;
	int i, round;

	cr_assert_eq(posix_memalign((void **)&mem, 4096, 3 * 16384), 0);
	for (round = 0; round < 40; round++) {
		struct tio t;
		uint64_t pos = (uint64_t)round * 65536, at, n;

		memset(mem, 0x5a, 3 * 16384);
		for (i = 0; i < 3; i++)
			iov[i] = (struct iovec){ mem + i * 16384, i == 1 ? 4096 : 8192 };
		cr_assert_eq(attr_store(be, "random_write_corrupt", "1"), 0);
		if (round % 2)
			cr_assert_eq(attr_store(be, "corrupt_bio_byte", "8193 w 7"), 0);
		else
			cr_assert_eq(attr_store(be, "corrupt_bio_byte", "off"), 0);
		/* a tio without a buffer of its own (a FLUSH), made a WRITE over @iov */
		tio_init(&t, BLK_FLUSH, 0, 0, NULL, 0);
		t.io.op = BLK_WRITE;
		t.io.pos = pos;
		t.io.len = 20480;
		t.io.iov = iov;
		t.io.iovcnt = 3;
		cr_assert_eq(tio_submit(be, &t), 0);
		cr_assert(tio_wait(&t, WAIT_MS));
		cr_assert_eq(t.res, 0);
		for (i = 0; i < 3; i++)
			cr_assert_eq(buf_diff(mem + i * 16384, iov[i].iov_len, 0x5a, NULL), 0,
				     "round %d: the cache's piece %d changed", round, i);
		n = store_diff(pos, 20480, 0x5a, &at);
		if (round % 2) {
			/* byte 8193 (8192 from 0) is 7; the random one may be the same byte */
			cr_assert(n == 1 || n == 2, "round %d: %llu bytes differ", round,
				  (unsigned long long)n);
			cr_assert_eq(fake_store(fb)[pos + 8192], 7, "round %d", round);
		} else {
			cr_assert_eq(n, 1, "round %d: %llu bytes differ", round, (unsigned long long)n);
		}
	}
	cr_assert_eq(stat_get(be, "flakey_write_corruptions"), 40);
	cr_assert_eq(stat_get(be, "flakey_bounce_pool_allocs"), 0);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0, "the layer below saw a misaligned vector");
	free(mem);
}

/* More corrupted I/O in flight than the pool holds: served, counted, all complete. */
Test(flakey, pool_overflow_and_close_waits)
{
	struct tparams tp;
	struct blk_backend *be;
	struct tio t[6];
	int i;

	tparams_init(&tp);
	tparams_add(&tp, "flakey.pool", "2", 4);
	tparams_add(&tp, "flakey.up_interval", "0", 5);
	tparams_add(&tp, "flakey.down_interval", "1", 6);
	tparams_add(&tp, "flakey.random_read_corrupt", "1", 7);
	be = filter_open(&tp);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_done_reset();
	for (i = 0; i < 6; i++) {
		tio_init(&t[i], BLK_READ, (uint64_t)i * 4096, 4096, NULL, 0);
		cr_assert_eq(tio_submit(be, &t[i]), 0);
	}
	cr_assert_eq(fake_pending(fb), 6);
	cr_assert_eq(stat_get(be, "flakey_pool_allocs"), 4);
	cr_assert_eq(stat_get(be, "flakey_pool_max_used"), 6);
	cr_assert_eq(fake_complete_all(fb, true), 6);
	cr_assert(tio_done_wait(6, WAIT_MS));
	for (i = 0; i < 6; i++) {
		cr_assert_eq(tio_calls(&t[i]), 1);
		cr_assert_eq(buf_diff(t[i].iov.iov_base, 4096, 0, NULL), 1);
		tio_free(&t[i]);
	}
	be->ops->close(be);
}

Test(flakey, attrs_and_config)
{
	struct tparams tp;
	struct blk_backend *be;
	const char *const *k;
	int n = 0;

	tparams_init(&tp);
	tparams_add(&tp, "flakey.up_interval", "5", 4);
	tparams_add(&tp, "flakey.down_interval", "1500ms", 5);
	tparams_add(&tp, "flakey.error_reads", "yes", 6);
	tparams_add(&tp, "flakey.error_writes", "no", 7);
	tparams_add(&tp, "flakey.drop_writes", "on", 8);
	tparams_add(&tp, "flakey.corrupt_bio_byte", "1 w 255", 9);
	tparams_add(&tp, "flakey.random_read_corrupt", "0.001", 10);
	tparams_add(&tp, "flakey.random_write_corrupt", "1e-6", 11);
	tparams_add(&tp, "flakey.corrupt_ranges", "0 1M", 12);
	tparams_add(&tp, "flakey.errno", "EROFS", 13);
	tparams_add(&tp, "flakey.seed", "18446744073709551615", 14);
	tparams_add(&tp, "flakey.pool", "64", 15);
	be = filter_open(&tp);
	for (int i = 0; i < tp.p.n; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	for (k = blk_backend_find("flakey")->keys; *k; k++)
		n++;
	cr_assert_eq(n, tp.p.n, "a key the test does not set");
	cr_assert_str_eq(attr_show(be, "up_interval"), "5s\n");
	cr_assert_str_eq(attr_show(be, "down_interval"), "1500ms\n");
	cr_assert_str_eq(attr_show(be, "error_reads"), "1\n");
	cr_assert_str_eq(attr_show(be, "error_writes"), "0\n");
	cr_assert_str_eq(attr_show(be, "drop_writes"), "1\n");
	cr_assert_str_eq(attr_show(be, "corrupt_bio_byte"), "1 w 255\n");
	cr_assert_str_eq(attr_show(be, "random_read_corrupt"), "0.001\n");
	cr_assert_str_eq(attr_show(be, "random_write_corrupt"), "9.9999999999999995e-07\n");
	cr_assert_str_eq(attr_show_list(be, "corrupt_ranges"), "0 1048576\n");
	cr_assert_str_eq(attr_show(be, "errno"), "EROFS\n");
	cr_assert_str_eq(attr_show(be, "seed"), "18446744073709551615\n");
	cr_assert_eq(stat_get(be, "flakey_pool"), 64);
	/* shown values are taken back as they are */
	cr_assert_eq(attr_store(be, "random_write_corrupt", "9.9999999999999995e-07\n"), 0);
	cr_assert_str_eq(attr_show(be, "random_write_corrupt"), "9.9999999999999995e-07\n");
	attr_refuses(be, "up_interval", "5x");
	attr_refuses(be, "up_interval", "31d");
	attr_refuses(be, "down_interval", "-1");
	attr_refuses(be, "down_interval", "721h");
	attr_refuses(be, "error_reads", "2");
	attr_refuses(be, "drop_writes", "");
	attr_refuses(be, "errno", "EFOO");
	attr_refuses(be, "seed", "auto please");
	attr_refuses(be, "random_write_corrupt", "1.01");
	cr_assert_eq(attr_store(be, "down_interval", "720h"), 0);
	be->ops->close(be);

	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{ "flakey.up_interval", "fast", "flakey.up_interval: 'fast' is not a duration" },
		{ "flakey.down_interval", "31d", "flakey.down_interval: '31d' is not a duration" },
		{ "flakey.down_interval", "721h", "flakey.down_interval: '721h' is out of range (allowed: 0..720h)" },
		{ "flakey.error_reads", "maybe", "flakey.error_reads: 'maybe' is not yes/no" },
		{ "flakey.corrupt_bio_byte", "32 r", "flakey.corrupt_bio_byte: '32 r' is not a corruption" },
		{ "flakey.random_read_corrupt", "1000000000", "flakey.random_read_corrupt: '1000000000' is not a probability (allowed: 0 to 1, such as 0.01; dm-flakey's 1000000000 is 1)" },
		{ "flakey.errno", "EWHAT", "flakey.errno: 'EWHAT' is not an errno" },
		{ "flakey.seed", "x", "flakey.seed: 'x' is not a seed" },
		{ "flakey.pool", "70000", "flakey.pool: '70000' is not a number from 1 to 65536" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		tparams_init(&tp);
		tparams_add(&tp, bad[i].key, bad[i].value, 9);
		filter_open_fails(&tp, bad[i].want);
	}
	tparams_init(&tp);
	be = blk_backend_find("flakey")->open(&tp.p, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(tp.err, "needs a layer below"), "%s", tp.err);
}
