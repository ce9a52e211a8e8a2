/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_shaping.c - the I/O shaping rules of core/ against the
 * fake backend's op log: merge (contiguous dirty blocks across folios become
 * one write), split (at max_io, by slicing, live max_io changes), widen
 * (whole physical blocks when the cache holds them; rmw = cache reads the
 * missing part once, rmw = device sends the write as is), never-write-clean,
 * sub-folio dirty tracking (write amplification), on_error = drop, and
 * readahead.
 *
 * As in test_pcache.c the flusher is never started: the cache writes back
 * only in the calling thread (pc_fsync(), or when a writer needs a folio),
 * and the fake completes I/O inline, so the op log is exactly what the
 * rules say must reach the backend, in order. The fixture is
 * cache_fixture.h's, shared with test_pcache.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define W FAKE_OP(BLK_WRITE)
#define R FAKE_OP(BLK_READ)

/* ---- data ---- */

/* Fail at the first byte of @got that is not generation @gen. */
static void expect_gen(const uint8_t *got, size_t len, uint64_t pos, unsigned int gen,
		       const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (got[i] != pat(pos + i, gen))
			cr_assert_fail("%s: byte at %llu is 0x%02x, expected 0x%02x (generation %u)",
				       what, (unsigned long long)(pos + i), got[i],
				       pat(pos + i, gen), gen);
}

/* pc_read of exactly @len bytes (the cache never reads short inside the device). */
static void do_read(void *buf, size_t len, uint64_t pos)
{
	ssize_t r = pc_read(dev, buf, len, pos);

	cr_assert_eq(r, (ssize_t)len, "pc_read(pos %llu, len %zu) = %zd",
		     (unsigned long long)pos, len, r);
}

static void fsync_ok(const char *what)
{
	int ret = do_fsync();

	cr_assert_eq(ret, 0, "%s: fsync = %d; %s", what, ret, log_text());
}

static struct pc_stats stats(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st;
}

/* ---- the op log ---- */

/* The ops of @mask since the last clear are exactly @exp, in this order. */
static void expect_seq(unsigned int mask, const struct rng *exp, size_t n, const char *what)
{
	struct rng got[256];
	size_t k = ops_of(mask, got, 256);
	size_t i;

	cr_assert_leq(n, 256);
	if (k != n)
		cr_assert_fail("%s: %zu %s ops, expected %zu; %s", what, k,
			       mask == W ? "WRITE" : "READ", n, log_text());
	for (i = 0; i < n; i++)
		if (got[i].pos != exp[i].pos || got[i].len != exp[i].len)
			cr_assert_fail("%s: op %zu is (%llu,+%llu), expected (%llu,+%llu); %s",
				       what, i, (unsigned long long)got[i].pos,
				       (unsigned long long)got[i].len,
				       (unsigned long long)exp[i].pos,
				       (unsigned long long)exp[i].len, log_text());
}

/*
 * The WRITEs since the last clear tile [pos, pos+len) in order, each at
 * most @max; every one but the last exactly @max (a contiguous run is cut
 * only at max_io). Returns how many.
 */
static size_t expect_tiled(uint64_t pos, uint64_t len, uint64_t max, const char *what)
{
	struct rng got[512];
	size_t k = ops_of(W, got, 512), i;
	uint64_t at = pos;

	cr_assert_leq(k, 512, "%s: %zu writes", what, k);
	for (i = 0; i < k; i++) {
		if (got[i].pos != at)
			cr_assert_fail("%s: write %zu at %llu, expected %llu (gap, overlap or out of order); %s",
				       what, i, (unsigned long long)got[i].pos,
				       (unsigned long long)at, log_text());
		if (got[i].len > max || (i + 1 < k && got[i].len != max))
			cr_assert_fail("%s: write %zu has len %llu with max_io %llu; %s", what, i,
				       (unsigned long long)got[i].len, (unsigned long long)max,
				       log_text());
		at += got[i].len;
	}
	cr_assert_eq(at, pos + len, "%s: writes end at %llu, expected %llu; %s", what,
		     (unsigned long long)at, (unsigned long long)(pos + len), log_text());
	cr_assert_eq(k, (size_t)((len + max - 1) / max), "%s: %zu writes; %s", what, k, log_text());
	return k;
}

/* Every WRITE since the last clear has pos and len multiples of @align. */
static size_t expect_writes_aligned(uint64_t align, const char *what)
{
	size_t len = fake_log_len(fb), n = 0;
	struct fake_op e;

	for (size_t i = 0; i < len && fake_log_get(fb, i, &e); i++) {
		if (e.op != BLK_WRITE)
			continue;
		n++;
		if (e.pos % align || e.len % align)
			cr_assert_fail("%s: WRITE (%llu,+%llu) is not aligned to %llu; %s", what,
				       (unsigned long long)e.pos, (unsigned long long)e.len,
				       (unsigned long long)align, log_text());
	}
	return n;
}

/* xorshift64*: the tests' fixed-seed random numbers. */
static uint64_t rnd_state;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state >> 12;
	rnd_state ^= rnd_state << 25;
	rnd_state ^= rnd_state >> 27;
	return rnd_state * 0x2545F4914F6CDD1Dull;
}

/* ======================================================================
 * merge: contiguous dirty blocks across folio boundaries -> one write,
 * cut only at max_io, for every folio size
 * ====================================================================== */

static const uint32_t folio_sizes[] = { 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 2 * MiB };

static void merge_case(uint32_t folio)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);
	char what[96];

	setup(&g, 16 * MiB, folio, 0);
	store_fill(0, dev_size, 1);

	/* 60K across the 2 MiB boundary: within max_io, one write however many folios */
	cr_assert_eq(pc_dev_set_max_io(dev, 64 * KiB), 0);
	do_write(2 * MiB - 28 * KiB, 60 * KiB, 2);
	fake_log_clear(fb);
	snprintf(what, sizeof(what), "folio %u: 60K run across folios, max_io 64K", folio);
	fsync_ok(what);
	{
		struct rng e[] = { { 2 * MiB - 28 * KiB, 60 * KiB } };
		expect_seq(W, e, 1, what);
	}

	/* 1064K from 20K below a 2 MiB boundary, max_io 48K: cut at 48K, nowhere else */
	cr_assert_eq(pc_dev_set_max_io(dev, 48 * KiB), 0);
	do_write(6 * MiB - 20 * KiB, 1 * MiB, 3);
	do_write(7 * MiB - 20 * KiB, 40 * KiB, 3);
	fake_log_clear(fb);
	snprintf(what, sizeof(what), "folio %u: 1064K run, max_io 48K", folio);
	fsync_ok(what);
	expect_tiled(6 * MiB - 20 * KiB, 1064 * KiB, 48 * KiB, what);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s: reads; %s", what, log_text());

	/* two runs that touch only across a folio boundary are still one run */
	do_write(10 * MiB - 4 * KiB, 4 * KiB, 4);
	do_write(10 * MiB, 4 * KiB, 4);
	fake_log_clear(fb);
	snprintf(what, sizeof(what), "folio %u: 4K + 4K meeting at a folio boundary", folio);
	fsync_ok(what);
	{
		struct rng e[] = { { 10 * MiB - 4 * KiB, 8 * KiB } };
		expect_seq(W, e, 1, what);
	}
	verify_store(0, dev_size);
	cr_assert_eq(stats().writeback_copy_bytes, 0);
}

TEST_FIX(merge, folio_4k) { merge_case(4 * KiB); }
TEST_FIX(merge, folio_16k) { merge_case(16 * KiB); }
TEST_FIX(merge, folio_64k) { merge_case(64 * KiB); }
TEST_FIX(merge, folio_256k) { merge_case(256 * KiB); }
TEST_FIX(merge, folio_2m) { merge_case(2 * MiB); }

/* ======================================================================
 * split: at max_io, by slicing folio memory; max_io changes live
 * ====================================================================== */

/*
 * A 4 MiB dirty run with max_io 64K: exactly 64 writes of 64K, in order,
 * nothing copied, and the cuts counted in split_ios as for any other I/O
 * the cache cuts at max_io (a 4 MiB direct write cut into 64 pieces counts
 * 63: the reference).
 */
TEST_FIX(split, run_4m_max_io_64k)
{
	char msg[512] = "";
	size_t o = 0;
	bool bad = false;
	uint64_t direct_splits = 0;

	for (size_t k = 0; k < sizeof(folio_sizes) / sizeof(folio_sizes[0]); k++) {
		uint32_t folio = folio_sizes[k];
		struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);
		struct rng e[64];
		struct pc_stats st0, st;
		char what[64];
		uint8_t *b;

		setup(&g, 16 * MiB, folio, 0);
		cr_assert_eq(pc_dev_set_max_io(dev, 64 * KiB), 0);
		for (uint64_t p = 0; p < 4 * MiB; p += 1 * MiB)
			do_write(p, 1 * MiB, 2);
		fake_log_clear(fb);
		st0 = stats();
		snprintf(what, sizeof(what), "folio %u: 4 MiB run, max_io 64K", folio);
		fsync_ok(what);
		for (int i = 0; i < 64; i++)
			e[i] = (struct rng){ (uint64_t)i * 64 * KiB, 64 * KiB };
		expect_seq(W, e, 64, what);
		st = stats();
		cr_assert_eq(st.writeback_copy_bytes, 0, "%s: writeback_copy_bytes %llu", what,
			     (unsigned long long)st.writeback_copy_bytes);
		cr_assert_eq(st.backend_write_bytes - st0.backend_write_bytes, 4 * MiB);
		verify_store(0, 4 * MiB);
		if (st.split_ios - st0.split_ios != 63) {
			bad = true;
			o += (size_t)snprintf(msg + o, sizeof(msg) - o, " folio %u: %llu;", folio,
					      (unsigned long long)(st.split_ios - st0.split_ios));
		}
		if (k == 0) {
			/* the reference: a direct write of 4 MiB, cut by pc_submit_split() */
			b = talloc(4 * MiB);
			fill(b, 4 * MiB, 8 * MiB, 3);
			st0 = stats();
			cr_assert_eq(pc_direct_write(dev, b, 4 * MiB, 8 * MiB), (ssize_t)(4 * MiB));
			direct_splits = stats().split_ios - st0.split_ios;
		}
		teardown();
	}
	cr_assert(!bad, "split_ios after writeback of one 4 MiB run cut into 64 writes of 64K "
		  "(expected 63, as a 4 MiB direct write counts %llu):%s",
		  (unsigned long long)direct_splits, msg);
	cr_assert_eq(direct_splits, 63);
}

TEST_FIX(split, live_max_io_change)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 16 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_max_io(dev), 1 * MiB);
	do_write(0, 1 * MiB, 2);
	fake_log_clear(fb);
	fsync_ok("max_io 1M");
	{
		struct rng e[] = { { 0, 1 * MiB } };
		expect_seq(W, e, 1, "1 MiB run with max_io 1M");
	}

	/* 16K while dirty data waits: the next fsync's writes are <= 16K */
	do_write(2 * MiB, 200 * KiB, 3);
	cr_assert_eq(pc_dev_set_max_io(dev, 16 * KiB), 0);
	cr_assert_eq(pc_dev_max_io(dev), 16 * KiB);
	fake_log_clear(fb);
	fsync_ok("max_io 16K");
	expect_tiled(2 * MiB, 200 * KiB, 16 * KiB, "200K run after max_io 1M -> 16K");

	/* reads are cut at the live value too */
	fake_log_clear(fb);
	{
		uint8_t *b = talloc(64 * KiB);

		do_read(b, 64 * KiB, 8 * MiB);
	}
	cr_assert_eq(fake_log_count(fb, R), 4, "64K read with max_io 16K; %s", log_text());

	/* and back */
	cr_assert_eq(pc_dev_set_max_io(dev, 1 * MiB), 0);
	do_write(4 * MiB, 1 * MiB, 4);
	fake_log_clear(fb);
	fsync_ok("max_io 1M again");
	{
		struct rng e[] = { { 4 * MiB, 1 * MiB } };
		expect_seq(W, e, 1, "1 MiB run after max_io 16K -> 1M");
	}
	verify_store(0, dev_size);
}

TEST_FIX(split, invalid_max_io_changes_nothing)
{
	/* 512/4096, backend max_io 256K */
	struct blk_geometry g = geo_of(16 * MiB, 512, 4096, 256 * KiB);
	const uint64_t bad[] = {
		0, 512, 1000, 6 * KiB, 64 * KiB + 512, 256 * KiB + 4 * KiB, 512 * KiB,
		1 * MiB, 1ull << 32, (1ull << 32) + 64 * KiB, UINT64_MAX,
	};

	setup(&g, 16 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_max_io(dev), 256 * KiB);
	/* the limits themselves are fine */
	cr_assert_eq(pc_dev_set_max_io(dev, 4 * KiB), 0, "max_io = pbs");
	cr_assert_eq(pc_dev_max_io(dev), 4 * KiB);
	cr_assert_eq(pc_dev_set_max_io(dev, 256 * KiB), 0, "max_io = the backend's");
	cr_assert_eq(pc_dev_set_max_io(dev, 64 * KiB), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = pc_dev_set_max_io(dev, bad[i]);

		cr_assert_eq(ret, -EINVAL, "pc_dev_set_max_io(%llu) = %d, expected -EINVAL",
			     (unsigned long long)bad[i], ret);
		cr_assert_eq(pc_dev_max_io(dev), 64 * KiB, "pc_dev_set_max_io(%llu) changed max_io to %u",
			     (unsigned long long)bad[i], pc_dev_max_io(dev));
	}
	do_write(1 * MiB, 200 * KiB, 2);
	fake_log_clear(fb);
	fsync_ok("after invalid max_io values");
	expect_tiled(1 * MiB, 200 * KiB, 64 * KiB, "200K run, max_io 64K after invalid values");
	verify_store(0, dev_size);
}

/* ======================================================================
 * never-write-clean: only dirty blocks leave (or a widened physical block)
 * ====================================================================== */

TEST_FIX(clean, block_4k_in_folio_2m)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);
	struct pc_stats st;

	setup(&g, 16 * MiB, 2 * MiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	do_write(2 * MiB + 100 * KiB, 4096, 2);
	fake_log_clear(fb);
	fsync_ok("4K in a 2M folio");
	{
		struct rng e[] = { { 2 * MiB + 100 * KiB, 4096 } };
		expect_seq(W, e, 1, "4K dirty in a 2M folio");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	st = stats();
	cr_assert_eq(st.backend_write_bytes, 4096);
	cr_assert_eq(st.user_write_bytes, 4096);
	verify_store(0, dev_size);
}

/* A whole 2M folio uptodate and clean; three dirty spots: three writes. */
TEST_FIX(clean, uptodate_clean_blocks_never_written_4k)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);
	uint8_t *b;

	setup(&g, 16 * MiB, 2 * MiB, 0);
	store_fill(0, dev_size, 1);
	b = talloc(2 * MiB);
	do_read(b, 2 * MiB, 2 * MiB);
	expect_gen(b, 2 * MiB, 2 * MiB, 1, "read of the folio");
	do_write(2 * MiB + 8 * KiB, 4 * KiB, 2);
	do_write(3 * MiB, 4 * KiB, 2);
	do_write(4 * MiB - 8 * KiB, 8 * KiB, 2);
	fake_log_clear(fb);
	fsync_ok("three dirty spots in a clean uptodate folio");
	{
		struct rng e[] = { { 2 * MiB + 8 * KiB, 4 * KiB }, { 3 * MiB, 4 * KiB },
				   { 4 * MiB - 8 * KiB, 8 * KiB } };
		expect_seq(W, e, 3, "dirty spots among clean uptodate blocks");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	verify_store(0, dev_size);
}

/* pbs = cache block = lbs = 512: no widening, each dirty sector alone. */
TEST_FIX(clean, uptodate_clean_blocks_never_written_512)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	uint8_t *b;

	setup(&g, 16 * MiB, 64 * KiB, 512);
	store_fill(0, dev_size, 1);
	b = talloc(64 * KiB);
	do_read(b, 64 * KiB, 64 * KiB);
	do_write(64 * KiB + 512, 512, 2);
	do_write(64 * KiB + 4 * KiB + 1024, 512, 2);
	do_write(128 * KiB - 512, 512, 2);
	fake_log_clear(fb);
	fsync_ok("512-byte sectors, pbs 512");
	{
		struct rng e[] = { { 64 * KiB + 512, 512 }, { 64 * KiB + 5 * KiB, 512 },
				   { 128 * KiB - 512, 512 } };
		expect_seq(W, e, 3, "dirty sectors among clean uptodate ones, pbs 512");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	verify_store(0, dev_size);
}

/* 512/4096 with the 4K cache block (pbs = cache block): the dirty block, nothing around it. */
TEST_FIX(clean, pbs_equal_to_cache_block)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 4096, 1 * MiB);
	uint8_t *b;

	setup(&g, 16 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	store_fill(0, dev_size, 1);
	b = talloc(64 * KiB);
	do_read(b, 64 * KiB, 0);
	do_write(4 * KiB + 1024, 512, 2);
	do_write(40 * KiB, 4 * KiB, 2);
	fake_log_clear(fb);
	fsync_ok("pbs = cache block");
	{
		struct rng e[] = { { 4 * KiB, 4 * KiB }, { 40 * KiB, 4 * KiB } };
		expect_seq(W, e, 2, "pbs = cache block = 4K");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	verify_store(0, dev_size);
}

/* ======================================================================
 * widen: lbs 512 / pbs 4096, cache block forced to 512
 * ====================================================================== */

static void setup_512_4096(uint32_t folio)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 4096, 1 * MiB);

	setup(&g, 16 * MiB, folio, 512);
	cr_assert_eq(pc_dev_cache_block(dev), 512);
	store_fill(0, dev_size, 1);
}

/* The other 7 sectors uptodate: the whole physical block goes, nothing is read. */
static void widen_uptodate_case(uint32_t folio)
{
	uint8_t *b;
	struct pc_stats st0, st;

	setup_512_4096(folio);
	b = talloc(4096);
	do_read(b, 4096, 8 * KiB);
	fake_log_clear(fb);
	st0 = stats();
	do_write(9 * KiB, 512, 2);
	fsync_ok("512 in an uptodate physical block");
	{
		struct rng e[] = { { 8 * KiB, 4096 } };
		expect_seq(W, e, 1, "512 into an uptodate 4K physical block");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "widening needed no read; %s", log_text());
	st = stats();
	cr_assert_eq(st.rmw_read_bytes, st0.rmw_read_bytes);
	cr_assert_eq(st.partial_pblk_writes, st0.partial_pblk_writes);
	verify_store(0, dev_size);
}

TEST_FIX(widen, uptodate_rest_folio_64k) { widen_uptodate_case(64 * KiB); }
TEST_FIX(widen, uptodate_rest_folio_4k) { widen_uptodate_case(4 * KiB); }

/* rmw = cache, the rest not uptodate: one read of the missing part, one 4K write. */
TEST_FIX(widen, rmw_cache_head_sector)
{
	struct pc_stats st;
	struct fake_op e0, e1;

	setup_512_4096(64 * KiB);
	fake_log_clear(fb);
	do_write(8 * KiB, 512, 2);
	cr_assert_eq(fake_log_len(fb), 0, "a whole-cache-block write read something; %s",
		     log_text());
	fsync_ok("rmw = cache, sector 0");
	{
		struct rng r[] = { { 8 * KiB + 512, 3584 } };
		struct rng w[] = { { 8 * KiB, 4096 } };

		expect_seq(R, r, 1, "rmw read of sectors 1-7");
		expect_seq(W, w, 1, "widened write");
	}
	cr_assert(fake_log_get(fb, 0, &e0) && fake_log_get(fb, 1, &e1));
	cr_assert(e0.op == BLK_READ && e1.op == BLK_WRITE, "read, then write; %s", log_text());
	st = stats();
	cr_assert_eq(st.rmw_read_bytes, 3584, "rmw_read_bytes %llu",
		     (unsigned long long)st.rmw_read_bytes);
	verify_store(0, dev_size);
}

/*
 * The dirty sector in the middle: the missing part is two pieces (sectors
 * 0-1 and 3-7), still read in one backend read of that physical block
 * (the issue: "reads the missing part of the physical block once").
 */
TEST_FIX(widen, rmw_cache_middle_sector_one_read)
{
	struct rng r[4];
	struct pc_stats st;
	size_t n;

	setup_512_4096(64 * KiB);
	fake_log_clear(fb);
	do_write(9 * KiB, 512, 2);
	fsync_ok("rmw = cache, sector 2");
	{
		struct rng w[] = { { 8 * KiB, 4096 } };

		expect_seq(W, w, 1, "widened write");
	}
	n = ops_of(R, r, 4);
	for (size_t i = 0; i < n && i < 4; i++)
		cr_assert(r[i].pos >= 8 * KiB && r[i].pos + r[i].len <= 12 * KiB,
			  "rmw read outside the physical block; %s", log_text());
	st = stats();
	cr_assert(st.rmw_read_bytes >= 3584 && st.rmw_read_bytes <= 4096, "rmw_read_bytes %llu",
		  (unsigned long long)st.rmw_read_bytes);
	verify_store(0, dev_size);
	cr_assert_eq(n, 1, "rmw = cache read the missing part of one physical block in %zu "
		     "reads, expected 1; %s", n, log_text());
}

/* rmw = device: the 512-byte write goes as it is; nothing is read. */
TEST_FIX(widen, rmw_device_sends_as_is)
{
	struct pc_stats st;

	setup_512_4096(64 * KiB);
	pc_dev_set_policy(dev, true, false);
	fake_log_clear(fb);
	do_write(9 * KiB, 512, 2);
	fsync_ok("rmw = device");
	{
		struct rng w[] = { { 9 * KiB, 512 } };

		expect_seq(W, w, 1, "rmw = device: the sector as is");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	st = stats();
	cr_assert_eq(st.partial_pblk_writes, 1, "partial_pblk_writes %llu",
		     (unsigned long long)st.partial_pblk_writes);
	cr_assert_eq(st.rmw_read_bytes, 0);

	/* 1K straddling two physical blocks: still as is, two partial blocks */
	fake_log_clear(fb);
	do_write(20 * KiB - 512, 1024, 3);
	fsync_ok("rmw = device, across a pblk boundary");
	{
		struct rng w[] = { { 20 * KiB - 512, 1024 } };

		expect_seq(W, w, 1, "rmw = device: 1K across two physical blocks");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(stats().partial_pblk_writes, 3);
	expect_writes_aligned(512, "rmw = device");
	verify_store(0, dev_size);
}

/* rmw = device still widens where the cache holds the whole physical block. */
TEST_FIX(widen, rmw_device_widens_when_uptodate)
{
	uint8_t *b;

	setup_512_4096(64 * KiB);
	pc_dev_set_policy(dev, true, false);
	b = talloc(4096);
	do_read(b, 4096, 8 * KiB);
	fake_log_clear(fb);
	do_write(9 * KiB, 512, 2);
	fsync_ok("rmw = device, uptodate block");
	{
		struct rng w[] = { { 8 * KiB, 4096 } };

		expect_seq(W, w, 1, "rmw = device, the rest uptodate: widened");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(stats().partial_pblk_writes, 0);
	verify_store(0, dev_size);
}

/* Two dirty sectors with uptodate sectors between: one widened write, not two. */
TEST_FIX(widen, two_dirty_sectors_one_write)
{
	uint8_t *b;

	setup_512_4096(64 * KiB);
	b = talloc(4096);
	do_read(b, 4096, 8 * KiB);
	do_write(8 * KiB + 512, 512, 2);
	do_write(8 * KiB + 2560, 512, 2);
	fake_log_clear(fb);
	fsync_ok("two dirty sectors");
	{
		struct rng e[] = { { 8 * KiB, 4096 } };
		expect_seq(W, e, 1, "sectors 1 and 5 dirty, the rest uptodate");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	verify_store(0, dev_size);
}

/* Dirty sectors on both sides of a physical block boundary: widened and merged. */
TEST_FIX(widen, neighbours_merged)
{
	uint8_t *b;

	setup_512_4096(64 * KiB);
	b = talloc(8192);
	do_read(b, 8192, 8 * KiB);
	do_write(12 * KiB - 512, 512, 2);
	do_write(12 * KiB, 512, 2);
	fake_log_clear(fb);
	fsync_ok("sectors 7 and 8");
	{
		struct rng e[] = { { 8 * KiB, 8 * KiB } };
		expect_seq(W, e, 1, "dirty sectors either side of a pblk boundary");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	verify_store(0, dev_size);
}

/* Across a folio boundary with 4K folios (pbs = folio): both blocks whole, one write. */
TEST_FIX(widen, across_folios_rmw_cache)
{
	setup_512_4096(4 * KiB);
	do_write(12 * KiB - 1024, 2048, 2);
	fake_log_clear(fb);
	fsync_ok("2K across a folio boundary");
	{
		struct rng e[] = { { 8 * KiB, 8 * KiB } };
		expect_seq(W, e, 1, "2K across two 4K folios, rmw = cache");
	}
	expect_writes_aligned(4096, "across folios");
	cr_assert_eq(stats().rmw_read_bytes, 6 * KiB);
	verify_store(0, dev_size);
}

/* ======================================================================
 * 512-byte random writes on 512/4096: only whole physical blocks leave
 * ====================================================================== */

static void random_512_case(uint32_t folio)
{
	struct blk_geometry g = geo_of(8 * MiB, 512, 4096, 1 * MiB);
	struct pc_stats st0, st;
	size_t nw;

	setup(&g, 16 * MiB, folio, 512);
	store_fill(0, dev_size, 1);
	rnd_state = 0x5eed0001;
	fake_log_clear(fb);
	st0 = stats();
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < 400; i++) {
			/* a quarter land in one hot 64K, so sectors meet in physical blocks */
			uint64_t sec = (i % 4) ? rnd() % (dev_size / 512) : 2048 + rnd() % 128;
			size_t len = 512 * (1 + (size_t)(rnd() % 3 == 0));

			if (sec * 512 + len > dev_size)
				sec = dev_size / 512 - len / 512;
			do_write(sec * 512, len, (unsigned int)(2 + round));
		}
		fsync_ok("512-byte random writes");
	}
	nw = expect_writes_aligned(4096, "512-byte random writes, rmw = cache");
	cr_assert_gt(nw, 0);
	st = stats();
	cr_assert_gt(st.rmw_read_bytes, 0, "rmw_read_bytes not reported");
	/* nobody read: every backend read was a read-modify-write */
	cr_assert_eq(st.rmw_read_bytes - st0.rmw_read_bytes, fake_log_bytes(fb, R),
		     "rmw_read_bytes %llu, the fake read %llu",
		     (unsigned long long)(st.rmw_read_bytes - st0.rmw_read_bytes),
		     (unsigned long long)fake_log_bytes(fb, R));
	cr_assert_eq(st.partial_pblk_writes, 0);
	verify_store(0, dev_size);
}

TEST_FIX(random512, folio_4k) { random_512_case(4 * KiB); }
TEST_FIX(random512, folio_64k) { random_512_case(64 * KiB); }
TEST_FIX(random512, folio_2m) { random_512_case(2 * MiB); }

/* ======================================================================
 * sub-folio dirty tracking: backend bytes = user bytes for 4K random writes
 * ====================================================================== */

static void amplification_case(uint32_t folio)
{
	struct blk_geometry g = geo_of(1 * GiB, 4096, 4096, 1 * MiB);
	const size_t nblk = 1 * GiB / 4096, nw = 2000;
	uint64_t *blk = talloc(nw * sizeof(*blk));
	uint8_t *seen = talloc(nblk);
	uint8_t b[4096];
	struct pc_stats st;
	double ratio;

	/* 128 MiB cache: 64K folios all fit, 2M folios are evicted (writeback under pressure) */
	setup(&g, 128 * MiB, folio, 0);

	/* 2000 distinct blocks: nothing overlaps, so backend bytes = user bytes exactly */
	rnd_state = 0x5eed0002;
	for (size_t i = 0; i < nw; i++) {
		uint64_t x;

		do
			x = rnd() % nblk;
		while (seen[x]);
		seen[x] = 1;
		blk[i] = x;
		do_write(x * 4096, 4096, 2);
	}
	fsync_ok("2000 random 4K writes");
	st = stats();
	cr_assert_eq(st.user_write_bytes, nw * 4096);
	cr_assert_eq(fake_total_count(fb, R), 0, "whole-block writes read something");
	cr_assert_eq(st.dirty_bytes, 0);
	ratio = (double)st.backend_write_bytes / (double)st.user_write_bytes;
	cr_assert_eq(st.backend_write_bytes, st.user_write_bytes,
		     "folio %u: backend_write_bytes %llu, user_write_bytes %llu (ratio %.4f)",
		     folio, (unsigned long long)st.backend_write_bytes,
		     (unsigned long long)st.user_write_bytes, ratio);
	for (size_t i = 0; i < nw; i++) {
		fake_store_read(fb, b, 4096, blk[i] * 4096);
		expect_gen(b, 4096, blk[i] * 4096, 2, "backend store");
	}

	/* then 2000 more anywhere, overlaps allowed: the ratio stays <= 1.02 */
	for (size_t i = 0; i < nw; i++)
		do_write((rnd() % nblk) * 4096, 4096, 3);
	fsync_ok("2000 more random 4K writes");
	st = stats();
	ratio = (double)st.backend_write_bytes / (double)st.user_write_bytes;
	cr_assert_leq(ratio, 1.02, "folio %u: backend_write_bytes %llu / user_write_bytes %llu = %.4f",
		      folio, (unsigned long long)st.backend_write_bytes,
		      (unsigned long long)st.user_write_bytes, ratio);
	cr_assert_eq(st.writeback_copy_bytes, 0);
}

TEST_FIX(amplification, random_4k_folio_64k) { amplification_case(64 * KiB); }
TEST_FIX(amplification, random_4k_folio_2m) { amplification_case(2 * MiB); }

/* ======================================================================
 * on_error = drop: a failed write is counted and dropped, not retried
 * ====================================================================== */

TEST_FIX(on_error, drop_not_retried)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .countdown = 1, .err = -EIO };
	pc_errseq_t a, b;
	struct pc_stats st;
	int ret;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	pc_dev_set_policy(dev, false, true);
	a = pc_errseq_sample(dev);		/* two openers */
	b = pc_errseq_sample(dev);
	do_write(64 * KiB, 16 * KiB, 2);
	fake_fault_set(fb, &ft);
	fake_log_clear(fb);
	ret = pc_fsync(dev, &a);
	cr_assert_eq(ret, -EIO, "fsync over a failed write = %d; %s", ret, log_text());
	cr_assert_eq(fake_fault_hits(fb), 1);
	st = stats();
	cr_assert_eq(st.dropped_bytes, 16 * KiB, "dropped_bytes %llu",
		     (unsigned long long)st.dropped_bytes);
	cr_assert_eq(st.dirty_bytes, 0, "dropped blocks are still dirty");
	cr_assert_geq(st.writeback_errors, 1);

	/* the other opener's next fsync reports it once, and writes nothing */
	fake_log_clear(fb);
	ret = pc_fsync(dev, &b);
	cr_assert_eq(ret, -EIO, "the other opener's fsync = %d", ret);
	cr_assert_eq(fake_log_count(fb, W), 0, "a dropped write was retried; %s", log_text());
	ret = pc_fsync(dev, &b);
	cr_assert_eq(ret, 0, "reported twice to the same opener");
	ret = pc_fsync(dev, &a);
	cr_assert_eq(ret, 0, "reported twice to the first opener");
	cr_assert_eq(fake_log_count(fb, W), 0, "a dropped write was retried; %s", log_text());
	cr_assert_eq(fake_store(fb)[64 * KiB], 0, "failed data reached the store");
	cr_assert_eq(stats().dropped_bytes, 16 * KiB);

	/* the device works again: new writes go out as usual */
	do_write(128 * KiB, 4 * KiB, 3);
	fake_log_clear(fb);
	cr_assert_eq(pc_fsync(dev, &a), 0);
	{
		struct rng e[] = { { 128 * KiB, 4 * KiB } };
		expect_seq(W, e, 1, "a new write after the drop");
	}
}

/* The same failure with keep (set explicitly): the blocks stay dirty and go next time. */
TEST_FIX(on_error, keep_retries)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .countdown = 1, .err = -EIO };
	pc_errseq_t a;
	struct pc_stats st;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	pc_dev_set_policy(dev, true, true);
	pc_dev_set_policy(dev, false, false);
	a = pc_errseq_sample(dev);
	do_write(64 * KiB, 16 * KiB, 2);
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_fsync(dev, &a), -EIO);
	st = stats();
	cr_assert_eq(st.dropped_bytes, 0);
	cr_assert_eq(st.dirty_bytes, 16 * KiB);
	fake_log_clear(fb);
	cr_assert_eq(pc_fsync(dev, &a), 0);
	{
		struct rng e[] = { { 64 * KiB, 16 * KiB } };
		expect_seq(W, e, 1, "keep: the failed write again");
	}
	verify_store(0, dev_size);
}

/* ======================================================================
 * readahead
 * ====================================================================== */

static void setup_ra(void)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 16 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
}

/* 4K reads over [start, start+len), checking the data against the model. */
static void read_seq_4k(uint64_t start, uint64_t len)
{
	uint8_t b[4096];

	for (uint64_t p = start; p < start + len; p += 4096) {
		do_read(b, 4096, p);
		expect_same(b, model + p, 4096, p, "sequential read");
	}
}

TEST_FIX(readahead, sequential_4k)
{
	struct pc_stats st;
	size_t nr;

	setup_ra();
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	cr_assert_eq(pc_dev_read_ahead(dev), 128 * KiB);
	read_seq_4k(0, 1 * MiB);
	nr = fake_log_count(fb, R);
	st = stats();
	/* about 1 MiB / (4K + 128K) = 8 */
	cr_assert(nr >= 7 && nr <= 12, "%zu backend reads for 256 sequential 4K reads; %s", nr,
		  log_text());
	cr_assert_geq(st.readahead_bytes, 7 * 128 * KiB, "readahead_bytes %llu",
		      (unsigned long long)st.readahead_bytes);
	cr_assert_eq(st.user_read_bytes, 1 * MiB);
	cr_assert_eq(fake_log_count(fb, W), 0);
}

TEST_FIX(readahead, random_4k_none)
{
	uint64_t prev_end = 0, pos;
	uint8_t b[4096], *seen;
	struct pc_stats st;
	const int n = 200;

	setup_ra();
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	seen = talloc(dev_size / 4096);
	rnd_state = 0x5eed0003;
	for (int i = 0; i < n; i++) {
		/* distinct blocks, never where the last read ended (that is sequential) */
		do
			pos = (rnd() % (dev_size / 4096)) * 4096;
		while (seen[pos / 4096] || pos == prev_end);
		seen[pos / 4096] = 1;
		do_read(b, 4096, pos);
		expect_same(b, model + pos, 4096, pos, "random read");
		prev_end = pos + 4096;
	}
	st = stats();
	cr_assert_eq(fake_log_count(fb, R), (size_t)n, "random reads got readahead; %s",
		     log_text());
	cr_assert_eq(fake_log_bytes(fb, R), (uint64_t)n * 4096);
	cr_assert_eq(st.readahead_bytes, 0);
}

TEST_FIX(readahead, off)
{
	setup_ra();
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	cr_assert_eq(pc_dev_set_read_ahead(dev, 0), 0);
	cr_assert_eq(pc_dev_read_ahead(dev), 0);
	read_seq_4k(0, 1 * MiB);
	cr_assert_eq(fake_log_count(fb, R), 256, "read_ahead 0; %s", log_text());
	cr_assert_eq(stats().readahead_bytes, 0);
}

TEST_FIX(readahead, invalid_values)
{
	const uint64_t bad[] = { 1, 1000, 4096 + 100, 64 * MiB + 512, 1ull << 32, UINT64_MAX };

	setup_ra();
	cr_assert_eq(pc_dev_set_read_ahead(dev, 64 * MiB), 0);
	cr_assert_eq(pc_dev_set_read_ahead(dev, 512), 0);
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(pc_dev_set_read_ahead(dev, bad[i]), -EINVAL, "read_ahead %llu",
			     (unsigned long long)bad[i]);
		cr_assert_eq(pc_dev_read_ahead(dev), 128 * KiB, "read_ahead %llu changed it",
			     (unsigned long long)bad[i]);
	}
}

/* Readahead fills only blocks that are not uptodate: a dirty block in its way survives. */
TEST_FIX(readahead, keeps_dirty_blocks)
{
	setup_ra();
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	do_write(64 * KiB, 4096, 2);
	do_write(100 * KiB, 512 * 2, 3);	/* partial: its block is read, then dirty */
	fake_log_clear(fb);
	read_seq_4k(0, 512 * KiB);
	cr_assert_gt(stats().readahead_bytes, 0);
	cr_assert_eq(fake_log_count_range(fb, R, 64 * KiB, 4096), 0,
		     "a dirty block was read over; %s", log_text());
	fsync_ok("after readahead over dirty blocks");
	verify_store(0, dev_size);
}

/* Sequential reads to the very end: readahead never goes past it. */
TEST_FIX(readahead, stops_at_the_end)
{
	struct blk_geometry g = geo_of(1 * MiB + 12 * KiB, 4096, 4096, 1 * MiB);
	uint8_t b[4096];

	setup(&g, 16 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	cr_assert_eq(pc_dev_set_read_ahead(dev, 128 * KiB), 0);
	for (uint64_t p = 0; p < dev_size; p += 4096) {
		do_read(b, 4096, p);
		expect_same(b, model + p, 4096, p, "read near the end");
	}
	cr_assert_eq(pc_read(dev, b, 4096, dev_size), 0);
	cr_assert_leq(fake_log_count(fb, R), 12, "%s", log_text());
	cr_assert_eq(fake_violations(fb), 0, "%s", log_text());
}
