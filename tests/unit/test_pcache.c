/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_pcache.c - core/ (the page cache) against the fake backend,
 * through core/pcache.h only.
 *
 * The flusher is not started except in the flusher suite: without it the
 * cache writes back only in the calling thread (at pc_fsync() or under
 * pressure), so the fake's op log is deterministic and the tests can say
 * exactly which I/O must reach the backend. The fixture is
 * cache_fixture.h's, shared with test_shaping.c.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/lib/clock.h"
#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define W FAKE_OP(BLK_WRITE)
#define R FAKE_OP(BLK_READ)
#define F FAKE_OP(BLK_FLUSH)

static void model_fill(uint64_t pos, size_t len, unsigned int gen)
{
	if (model)
		fill(model + pos, len, pos, gen);
}

/* ---- I/O helpers ---- */

/* pc_read until @len bytes or EOF/error, like a loop around read(2). */
static ssize_t read_full(void *buf, size_t len, uint64_t pos)
{
	size_t done = 0;

	while (done < len) {
		ssize_t r = pc_read(dev, (uint8_t *)buf + done, len - done, pos + done);

		if (r < 0)
			return r;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

/* Read [pos, pos+len) through the cache and compare with the model. */
static void verify_cache(uint64_t pos, size_t len)
{
	uint8_t *b = talloc(len);
	ssize_t r;

	cr_assert_not_null(b);
	r = read_full(b, len, pos);
	cr_assert_eq(r, (ssize_t)len, "read(pos %llu, len %zu) = %zd",
		     (unsigned long long)pos, len, r);
	expect_same(b, model + pos, len, pos, "cache read");
	tfree(b);
}

/* ---- log checks ---- */

static int rng_cmp(const void *a, const void *b)
{
	const struct rng *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Logged ops of @mask, sorted by pos; returns how many (at most @max). */
static size_t logged(unsigned int mask, struct rng *out, size_t max)
{
	size_t n = ops_of(mask, out, max);

	qsort(out, n < max ? n : max, sizeof(*out), rng_cmp);
	return n;
}

/* The ops of @mask since the last log clear are exactly @exp (in any order). */
static void expect_ops(unsigned int mask, const struct rng *exp, size_t n, const char *what)
{
	struct rng got[512], want[64];
	size_t k = logged(mask, got, 512);
	bool ok = k == n;

	cr_assert(n <= 64);
	memcpy(want, exp, n * sizeof(*exp));
	qsort(want, n, sizeof(*want), rng_cmp);
	for (size_t i = 0; ok && i < n; i++)
		ok = got[i].pos == want[i].pos && got[i].len == want[i].len;
	if (!ok) {
		char e[1024] = "";
		size_t o = 0;

		for (size_t i = 0; i < n && o < sizeof(e) - 40; i++)
			o += (size_t)snprintf(e + o, sizeof(e) - o, " (%llu,+%llu)",
					      (unsigned long long)want[i].pos,
					      (unsigned long long)want[i].len);
		cr_assert_fail("%s: expected %zu ops:%s\ngot %zu; %s", what, n, e, k, log_text());
	}
}

/* After a pc_fsync(): one FLUSH, after every WRITE, with no WRITE in flight. */
static void expect_flush_last(const char *what)
{
	size_t len = fake_log_len(fb);
	struct fake_op e;
	long flush = -1;

	for (size_t i = 0; i < len && fake_log_get(fb, i, &e); i++) {
		if (e.op == BLK_FLUSH) {
			cr_assert_eq(flush, -1, "%s: more than one FLUSH; %s", what, log_text());
			flush = (long)i;
			cr_assert_eq(e.inflight_writes, 0,
				     "%s: FLUSH submitted with writes in flight; %s", what, log_text());
		} else if (e.op == BLK_WRITE) {
			cr_assert_eq(flush, -1, "%s: WRITE after the FLUSH; %s", what, log_text());
		}
	}
	cr_assert_neq(flush, -1, "%s: no FLUSH; %s", what, log_text());
}

/* The cache's counters agree with what the fake was given since creation. */
static void expect_stats_match_log(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	cr_expect_eq(st.backend_write_ios, fake_total_count(fb, W), "backend_write_ios %llu, fake %llu",
		     (unsigned long long)st.backend_write_ios,
		     (unsigned long long)fake_total_count(fb, W));
	cr_expect_eq(st.backend_write_bytes, fake_total_bytes(fb, W), "backend_write_bytes %llu, fake %llu",
		     (unsigned long long)st.backend_write_bytes,
		     (unsigned long long)fake_total_bytes(fb, W));
	cr_expect_eq(st.backend_read_ios, fake_total_count(fb, R), "backend_read_ios %llu, fake %llu",
		     (unsigned long long)st.backend_read_ios,
		     (unsigned long long)fake_total_count(fb, R));
	cr_expect_eq(st.backend_read_bytes, fake_total_bytes(fb, R), "backend_read_bytes %llu, fake %llu",
		     (unsigned long long)st.backend_read_bytes,
		     (unsigned long long)fake_total_bytes(fb, R));
	cr_expect_eq(st.backend_flushes, fake_total_count(fb, F), "backend_flushes %llu, fake %llu",
		     (unsigned long long)st.backend_flushes,
		     (unsigned long long)fake_total_count(fb, F));
	cr_expect_eq(st.writeback_copy_bytes, 0);
}

static uint64_t dirty_bytes(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st.dirty_bytes;
}

#define TEST_FIX_SLOW(suite, name) Test(suite, name, .fini = teardown, .timeout = 180)

/* ======================================================================
 * The fake itself: a test that trusts a broken fake proves nothing.
 * ====================================================================== */

struct fio {
	struct blk_io io;
	struct iovec iov[2];
	int res;
	int calls;
};

static void fio_end(struct blk_io *io, int res)
{
	struct fio *f = (struct fio *)io;

	__atomic_store_n(&f->res, res, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&f->calls, 1, __ATOMIC_SEQ_CST);
}

static void fio_init(struct fio *f, enum blk_op op, uint64_t pos, uint64_t len, void *buf)
{
	memset(f, 0, sizeof(*f));
	f->io.op = op;
	f->io.pos = pos;
	f->io.len = len;
	f->io.end_io = fio_end;
	f->res = 1;
	if (buf) {
		f->iov[0].iov_base = buf;
		f->iov[0].iov_len = len;
		f->io.iov = f->iov;
		f->io.iovcnt = 1;
	}
}

Test(fake, inline_data_log_and_faults, .timeout = 180)
{
	struct blk_geometry g = geo_of(1 * MiB, 512, 512, 8 * KiB);
	static uint8_t wbuf[4096] __attribute__((aligned(4096)));
	static uint8_t rbuf[4096] __attribute__((aligned(4096)));
	struct fake_fault ft = { .op_mask = W, .countdown = 2, .err = -EIO };
	struct fio a, b;
	struct fake_op e;

	fb = fake_create(&g);
	cr_assert_not_null(fb);
	fill(wbuf, 4096, 8192, 3);
	fio_init(&a, BLK_WRITE, 8192, 4096, wbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.calls, 1);
	cr_assert_eq(a.res, 0);
	fio_init(&b, BLK_READ, 8192, 4096, rbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &b.io), 0);
	cr_assert_eq(memcmp(rbuf, wbuf, 4096), 0);
	cr_assert_eq(fake_log_len(fb), 2);
	cr_assert(fake_log_get(fb, 0, &e));
	cr_assert(e.op == BLK_WRITE && e.pos == 8192 && e.len == 4096 && e.done && e.seq == 0);
	cr_assert_eq(fake_log_count(fb, W), 1);
	cr_assert_eq(fake_log_count_range(fb, FAKE_DATA, 8192 + 4095, 1), 2);
	cr_assert_eq(fake_log_find(fb, 0, R, 8192, 4096), 1);

	/* countdown 2: the second write fails and is not applied */
	fake_fault_set(fb, &ft);
	fill(wbuf, 4096, 0, 4);
	fio_init(&a, BLK_WRITE, 0, 4096, wbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.res, 0);
	fill(wbuf, 4096, 4096, 5);
	fio_init(&a, BLK_WRITE, 4096, 4096, wbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.res, -EIO);
	cr_assert_eq(fake_store(fb)[4096], 0, "a failed write changed the store");
	cr_assert_eq(fake_fault_hits(fb), 1);
	/* transient: the next one succeeds */
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.res, 0);
	cr_assert_eq(fake_store(fb)[4096], pat(4096, 5));
	/* persistent read fault on a range: poison, every time, only there */
	ft = (struct fake_fault){ .op_mask = R, .pos = 0, .len = 512, .err = EIO,
				  .persistent = true };
	fake_fault_set(fb, &ft);
	for (int i = 0; i < 2; i++) {
		fio_init(&b, BLK_READ, 0, 4096, rbuf);
		cr_assert_eq(blk_submit(fake_backend(fb), &b.io), 0);
		cr_assert_eq(b.res, -EIO);
		cr_assert_eq(rbuf[0], 0xEE);
	}
	fio_init(&b, BLK_READ, 4096, 4096, rbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &b.io), 0);
	cr_assert_eq(b.res, 0);
	fake_fault_clear(fb);
	fio_init(&b, BLK_READ, 0, 4096, rbuf);
	cr_assert_eq(blk_submit(fake_backend(fb), &b.io), 0);
	cr_assert_eq(b.res, 0);
	cr_assert_eq(rbuf[0], pat(0, 4));
	cr_assert_eq(fake_violations(fb), 0);

	/*
	 * contract violations are counted, not applied (past blk_submit(),
	 * whose check would abort first: test_contract.c)
	 */
	fake_set_quiet(fb, true);
	fio_init(&a, BLK_WRITE, 100, 512, wbuf);		/* misaligned */
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	cr_assert_eq(a.res, -EIO);
	fio_init(&a, BLK_WRITE, 0, 16 * KiB, wbuf);		/* > max_io (and iov sum) */
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	fio_init(&a, BLK_WRITE, 1 * MiB - 512, 1024, wbuf);	/* past the end */
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	fio_init(&a, BLK_WRITE, 0, 1024, wbuf);
	a.iov[0].iov_len = 512;				/* iov sum != len */
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	fio_init(&a, BLK_WRITE, 0, 512, wbuf + 1);		/* dma_align */
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	fio_init(&a, BLK_FLUSH, 512, 0, NULL);
	fake_backend(fb)->ops->submit(fake_backend(fb), &a.io);
	cr_assert_eq(fake_violations(fb), 6);
	fake_log_clear(fb);
	cr_assert_eq(fake_log_len(fb), 0);
	fake_destroy(fb);
	fb = NULL;
}

Test(fake, manual_and_deferred, .timeout = 180)
{
	struct blk_geometry g = geo_of(1 * MiB, 512, 512, 64 * KiB);
	static uint8_t bufs[16][512] __attribute__((aligned(512)));
	struct fio io[16];
	struct fake_op e;

	fb = fake_create(&g);
	cr_assert_not_null(fb);
	fake_set_mode(fb, FAKE_MANUAL);
	for (int i = 0; i < 4; i++) {
		fill(bufs[i], 512, 0, (unsigned int)i + 1);
		fio_init(&io[i], BLK_WRITE, 0, 512, bufs[i]);	/* all on block 0 */
		cr_assert_eq(blk_submit(fake_backend(fb), &io[i].io), 0);
	}
	cr_assert_eq(fake_pending(fb), 4);
	cr_assert_eq(fake_overlaps(fb), 3);
	cr_assert_eq(io[0].calls, 0);
	cr_assert_eq(fake_store(fb)[0], 0, "data moved before completion");
	cr_assert_eq(fake_complete_all(fb, true), 4);
	/* newest first: the oldest write lands last */
	cr_assert_eq(fake_store(fb)[0], pat(0, 1));
	cr_assert(fake_log_get(fb, 3, &e));
	cr_assert_eq(e.done_seq, 0);
	cr_assert_eq(e.inflight_writes, 3);

	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 50);
	for (int i = 0; i < 16; i++) {
		fill(bufs[i], 512, (uint64_t)i * 512, 7);
		fio_init(&io[i], BLK_WRITE, (uint64_t)i * 512, 512, bufs[i]);
		cr_assert_eq(blk_submit(fake_backend(fb), &io[i].io), 0);
	}
	for (int i = 0; i < 16; i++)
		while (!__atomic_load_n(&io[i].calls, __ATOMIC_SEQ_CST))
			usleep(100);
	cr_assert_eq(fake_pending(fb), 0);
	for (int i = 0; i < 16; i++)
		cr_assert_eq(fake_store(fb)[i * 512 + 7], pat((uint64_t)i * 512 + 7, 7));
	cr_assert_eq(fake_violations(fb), 0);
	fake_destroy(fb);
	fb = NULL;
}

Test(fake, lazy_large_store, .timeout = 180)
{
	struct blk_geometry g = geo_of(4 * GiB, 4096, 4096, 1 * MiB);
	static uint8_t buf[4096] __attribute__((aligned(4096)));
	struct fio a;

	fb = fake_create(&g);
	cr_assert_not_null(fb);
	fill(buf, 4096, 4 * GiB - 4096, 9);
	fio_init(&a, BLK_WRITE, 4 * GiB - 4096, 4096, buf);
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.res, 0);
	fio_init(&a, BLK_DISCARD, 0, 4 * GiB, NULL);
	cr_assert_eq(blk_submit(fake_backend(fb), &a.io), 0);
	cr_assert_eq(a.res, 0);
	cr_assert_eq(fake_store(fb)[4 * GiB - 1], 0);
	cr_assert_eq(fake_violations(fb), 0);
	fake_destroy(fb);
	fb = NULL;
}

/* ======================================================================
 * Per-block state at word and folio edges: 512-byte cache blocks in 64K
 * folios are 128 blocks, two bitmap words per half. Checked by what
 * pc_fsync() sends to the backend.
 * ====================================================================== */

#define B512(folio, blk) ((uint64_t)(folio) * 64 * KiB + (uint64_t)(blk) * 512)

/* Clear the log, run the writes, fsync, and expect exactly these WRITEs. */
static void bits_case(const struct rng *writes, size_t nw, const struct rng *exp, size_t ne,
		      const char *what)
{
	fake_log_clear(fb);
	for (size_t i = 0; i < nw; i++)
		do_write(writes[i].pos, writes[i].len, (unsigned int)(i + 2));
	cr_assert_eq(fake_log_count(fb, FAKE_ANY), 0,
		     "%s: backend I/O before fsync; %s", what, log_text());
	cr_assert_eq(do_fsync(), 0, "%s: fsync", what);
	expect_ops(W, exp, ne, what);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s: reads; %s", what, log_text());
	expect_flush_last(what);
	cr_assert_eq(dirty_bytes(), 0, "%s: dirty after fsync", what);
}

TEST_FIX(bits, write_edges_512_in_64k)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 512);
	cr_assert_eq(pc_dev_cache_block(dev), 512);

	{	/* bit 63 alone, then bit 64 alone */
		struct rng w[] = { { B512(0, 63), 512 } };
		bits_case(w, 1, w, 1, "block 63");
	}
	{
		struct rng w[] = { { B512(0, 64), 512 } };
		bits_case(w, 1, w, 1, "block 64");
	}
	{	/* one write across the word edge */
		struct rng w[] = { { B512(1, 63), 1024 } };
		bits_case(w, 1, w, 1, "blocks 63-64");
	}
	{	/* last block of a folio and first of the next: one I/O */
		struct rng w[] = { { B512(2, 127), 1024 } };
		bits_case(w, 1, w, 1, "blocks 127 | 0 across folios");
	}
	{	/* two separate writes at the two edges of the same folio */
		struct rng w[] = { { B512(4, 0), 512 }, { B512(4, 127), 512 } };
		bits_case(w, 2, w, 2, "blocks 0 and 127");
	}
	{	/* a gap at bit 64 splits the run */
		struct rng w[] = { { B512(5, 62), 1024 }, { B512(5, 65), 512 } };
		bits_case(w, 2, w, 2, "blocks 62-63 and 65");
	}
	{	/* a whole folio and the first word of the next */
		struct rng w[] = { { B512(6, 0), 64 * KiB }, { B512(7, 0), 32 * KiB } };
		struct rng e[] = { { B512(6, 0), 96 * KiB } };
		bits_case(w, 2, e, 1, "folio 6 + first word of folio 7");
	}
	{	/* overlapping writes around the word edge merge */
		struct rng w[] = { { B512(8, 60), 2048 }, { B512(8, 63), 2560 } };
		struct rng e[] = { { B512(8, 60), 8 * 512 } };
		bits_case(w, 2, e, 1, "blocks 60-63 + 63-67");
	}
	{	/* every block but 64 */
		struct rng w[] = { { B512(9, 0), 64 * 512 }, { B512(9, 65), 63 * 512 } };
		bits_case(w, 2, w, 2, "all but block 64");
	}
	{	/* every block but 63 and 127, plus the next folio's first */
		struct rng w[] = { { B512(10, 0), 63 * 512 }, { B512(10, 64), 63 * 512 },
				   { B512(11, 0), 512 } };
		struct rng e[] = { { B512(10, 0), 63 * 512 }, { B512(10, 64), 63 * 512 },
				   { B512(11, 0), 512 } };
		bits_case(w, 3, e, 3, "all but 63 and 127");
	}
	{	/* the last block of the device */
		struct rng w[] = { { 4 * MiB - 512, 512 } };
		bits_case(w, 1, w, 1, "last block of the device");
	}
	verify_store(0, dev_size);
	verify_cache(0, dev_size);
	expect_stats_match_log();
}

/* Uptodate bits at the word edge: a read fetches only the blocks around them. */
TEST_FIX(bits, read_around_uptodate_63_64)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	uint64_t f = B512(3, 0);
	uint8_t *b = talloc(64 * KiB);

	setup(&g, 8 * MiB, 64 * KiB, 512);
	store_fill(0, dev_size, 1);
	do_write(B512(3, 63), 1024, 2);		/* blocks 63, 64: uptodate, dirty */
	do_write(B512(3, 127), 512, 3);		/* the last block too */
	fake_log_clear(fb);
	cr_assert_eq(read_full(b, 64 * KiB, f), (ssize_t)(64 * KiB));
	expect_same(b, model + f, 64 * KiB, f, "folio 3");
	cr_assert_eq(fake_log_count_range(fb, R, f, 64 * KiB), 2,
		     "expected 2 reads ([0,63) and [65,127)); %s", log_text());
	cr_assert_eq(fake_log_count_range(fb, R, B512(3, 63), 1024), 0, "read over dirty blocks; %s",
		     log_text());
	cr_assert_eq(fake_log_count_range(fb, R, B512(3, 127), 512), 0, "read over dirty block; %s",
		     log_text());
	cr_assert_neq(fake_log_find(fb, 0, R, f, 63 * 512), -1, "no read of [0,63); %s",
		      log_text());
	tfree(b);
}

/* ======================================================================
 * The cache block (set_init_blocksize rule) and odd device sizes
 * ====================================================================== */

static uint32_t cache_block_of(uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t forced)
{
	struct blk_geometry g = geo_of(size, lbs, lbs, 1 * MiB);
	struct fake_be *f;
	struct pc_cache *c;
	struct pc_dev *d;
	uint32_t cb;

	g.pbs = pbs;
	g.io_min = pbs;
	f = fake_create(&g);
	cr_assert_not_null(f);
	c = cache_new(2 * MiB, 64 * KiB, 2 * MiB);
	d = pc_dev_add(c, "cb", fake_backend(f), forced);
	cr_assert(!IS_ERR_OR_NULL(d), "pc_dev_add(size %llu, lbs %u, pbs %u, forced %u): %ld",
		  (unsigned long long)size, lbs, pbs, forced, IS_ERR(d) ? PTR_ERR(d) : 0L);
	cb = pc_dev_cache_block(d);
	pc_dev_remove(d);
	pc_cache_destroy(c);
	fake_destroy(f);
	return cb;
}

/*
 * pc_dev_add() applies the rule (conf_cache_block(), tested in test_conf.c)
 * to the backend's geometry, and a forced size wins: one case per branch.
 */
Test(cache_block, dev_add_applies_rule, .timeout = 180)
{
	static const struct {
		uint64_t size;
		uint32_t lbs, pbs, forced, want;
	} t[] = {
		{ 1 * GiB, 512, 4096, 0, 4096 },	/* doubled up to 4096 */
		{ 1 * GiB + 1024, 512, 512, 0, 1024 },	/* stopped by the size */
		{ 1 * GiB, 64 * KiB, 64 * KiB, 0, 64 * KiB },	/* never below lbs */
		{ 1 * GiB, 512, 4096, 1024, 1024 },	/* forced wins */
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		uint32_t cb = cache_block_of(t[i].size, t[i].lbs, t[i].pbs, t[i].forced);

		cr_assert_eq(cb, t[i].want, "size %llu lbs %u forced %u: cache block %u, want %u",
			     (unsigned long long)t[i].size, t[i].lbs, t[i].forced, cb, t[i].want);
	}
}

TEST_FIX(cache_block, odd_size_512_write_is_512)
{
	struct blk_geometry g = geo_of(1 * GiB + 512, 512, 512, 1 * MiB);
	static uint8_t buf[512];

	setup(&g, 4 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 512);
	fake_log_clear(fb);
	fill(buf, 512, 9 * 512, 2);
	cr_assert_eq(pc_write(dev, buf, 512, 9 * 512), 512);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 9 * 512, 512 } };
		expect_ops(W, e, 1, "512-byte write at block 9");
	}
	cr_assert_eq(fake_log_count(fb, R), 0, "a full-block write read; %s", log_text());
	expect_same(fake_store(fb) + 9 * 512, buf, 512, 9 * 512, "store");
	/* the very last block of the odd-sized device */
	fake_log_clear(fb);
	fill(buf, 512, g.size - 512, 3);
	cr_assert_eq(pc_write(dev, buf, 512, g.size - 512), 512);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { g.size - 512, 512 } };
		expect_ops(W, e, 1, "last block");
	}
	expect_same(fake_store(fb) + g.size - 512, buf, 512, g.size - 512, "store, last block");
	/* a partial write reads nothing; its writeback reads that block only */
	fake_log_clear(fb);
	cr_assert_eq(pc_write(dev, buf, 100, g.size - 1024 + 10), 100);
	cr_assert_eq(fake_log_count(fb, R), 0, "a partial write read; %s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { g.size - 1024, 512 } };
		expect_ops(R, e, 1, "writeback of the partial next-to-last block");
		expect_ops(W, e, 1, "writeback of the partial next-to-last block");
	}
}

TEST_FIX(cache_block, folio_smaller_than_block_is_einval)
{
	struct blk_geometry g = geo_of(16 * MiB, 64 * KiB, 64 * KiB, 1 * MiB);
	struct pc_dev *d;

	fb = fake_create(&g);
	pc = cache_new(1 * MiB, 16 * KiB, 1 * MiB);
	d = pc_dev_add(pc, "big", fake_backend(fb), 0);
	cr_assert(IS_ERR(d), "a 64K-block device in 16K folios was accepted");
	cr_assert_eq(PTR_ERR(d), -EINVAL);
}

/* pc_dev_remove() drops dirty data: it writes nothing. */
TEST_FIX(cache_block, remove_writes_nothing)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 1 * MiB, 64 * KiB, 0);
	do_write(0, 100 * KiB, 2);
	fake_log_clear(fb);
	pc_dev_remove(dev);
	dev = NULL;
	cr_assert_eq(fake_log_count(fb, W | F), 0, "%s", log_text());
	cr_assert_eq(fake_store(fb)[0], 0);
}

Test(cache_block, cache_needs_8_folios, .timeout = 180)
{
	struct pc_cache_params p = {
		.size = 7 * 64 * KiB, .folio_size = 64 * KiB, .min_block = 512,
		.dirty_background = 64 * KiB, .dirty_limit = 128 * KiB, .dirty_expire_ms = 1000,
	};
	struct pc_cache *c = pc_cache_create(&p);

	cr_assert(IS_ERR_OR_NULL(c), "a 7-folio cache was created");
	p.size = 8 * 64 * KiB;
	c = pc_cache_create(&p);
	cr_assert(!IS_ERR_OR_NULL(c), "an 8-folio cache was refused: %ld", PTR_ERR(c));
	pc_cache_destroy(c);
}

TEST_FIX(cache_block, dev_info)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 128 * KiB), got;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	cr_assert_str_eq(pc_dev_name(dev), "t0");
	pc_dev_geometry(dev, &got);
	cr_assert_eq(got.size, g.size);
	cr_assert_eq(got.lbs, g.lbs);
	cr_assert_eq(got.max_io, g.max_io);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
}

/* ======================================================================
 * Logical block sizes 512, 4096, 16K, 64K with matching folio sizes
 * ====================================================================== */

static void lbs_case(uint32_t lbs, uint32_t folio, uint32_t want_cb)
{
	uint32_t unit = lbs < 4096 ? 4096 : lbs;
	struct blk_geometry g = geo_of(256ull * unit, lbs, lbs, 4 * unit);
	uint64_t cache = 16ull * folio > 2 * MiB ? 16ull * folio : 2 * MiB;
	uint32_t cb;
	uint8_t *buf;

	setup(&g, cache, folio, 0);
	cb = pc_dev_cache_block(dev);
	cr_assert_eq(cb, want_cb, "lbs %u: cache block %u, want %u", lbs, cb, want_cb);
	store_fill(0, dev_size, 1);

	/* full block: no read */
	fake_log_clear(fb);
	do_write(3ull * cb, cb, 2);
	/* inside one block, and across the edge of blocks 7 and 8: no read either */
	do_write(5ull * cb + cb / 4, cb / 2, 3);
	do_write(8ull * cb - 100, 200, 4);
	cr_assert_eq(fake_log_count(fb, R), 0, "a write read; %s", log_text());

	/* writeback completes the three partial blocks, one read each, and nothing else */
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 5ull * cb, cb }, { 7ull * cb, cb }, { 8ull * cb, cb } };
		expect_ops(R, e, 3, "writeback of the partial blocks 5, 7, 8");
	}
	{
		struct rng e[] = { { 3ull * cb, cb }, { 5ull * cb, cb }, { 7ull * cb, 2ull * cb } };
		expect_ops(W, e, 3, "fsync after the three writes");
	}
	expect_flush_last("fsync");
	verify_store(0, dev_size);

	/* unaligned reads across blocks and folios */
	buf = talloc(3ull * folio + 777);
	cr_assert_not_null(buf);
	for (uint64_t pos = 1; pos + 3ull * folio + 777 < dev_size; pos += 5ull * folio + 333) {
		cr_assert_eq(read_full(buf, 3ull * folio + 777, pos), (ssize_t)(3ull * folio + 777));
		expect_same(buf, model + pos, 3ull * folio + 777, pos, "unaligned read");
	}
	tfree(buf);
	expect_stats_match_log();

	/* direct I/O must be lbs-aligned */
	buf = talloc(2ull * lbs);
	cr_assert_eq(pc_direct_read(dev, buf, lbs, lbs / 2), -EINVAL);
	cr_assert_eq(pc_direct_read(dev, buf, lbs / 2, 0), -EINVAL);
	cr_assert_eq(pc_direct_write(dev, buf, lbs, lbs / 2), -EINVAL);
	cr_assert_eq(pc_direct_write(dev, buf, lbs + lbs / 2, 0), -EINVAL);
	cr_assert_eq(pc_direct_read(dev, buf, 2ull * lbs, 7ull * cb), (ssize_t)(2 * lbs));
	expect_same(buf, model + 7ull * cb, 2ull * lbs, 7ull * cb, "direct read");
	tfree(buf);
}

TEST_FIX(lbs, lbs_512_folio_4k) { lbs_case(512, 4 * KiB, 4096); }
TEST_FIX(lbs, lbs_4k_folio_4k) { lbs_case(4096, 4 * KiB, 4096); }
TEST_FIX(lbs, lbs_4k_folio_64k) { lbs_case(4096, 64 * KiB, 4096); }
TEST_FIX(lbs, lbs_16k_folio_64k) { lbs_case(16 * KiB, 64 * KiB, 16 * KiB); }
TEST_FIX(lbs, lbs_64k_folio_64k) { lbs_case(64 * KiB, 64 * KiB, 64 * KiB); }
TEST_FIX(lbs, lbs_64k_folio_256k) { lbs_case(64 * KiB, 256 * KiB, 64 * KiB); }

/* ======================================================================
 * Partial blocks: a write never waits on a read of a block it writes in
 * part (invariant 8); the rest is read only when the whole block is needed
 * (invariant 9): by a reader, by writeback, by a discard cutting it.
 * ====================================================================== */

static uint64_t rmw_read_bytes(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st.rmw_read_bytes;
}

/* A partial write, then the rest of the block: nothing is ever read. */
TEST_FIX(partial, then_rest_reads_nothing)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(4096 + 904, 3192, 2);		/* the tail of block 1 */
	do_write(4096, 904, 3);			/* its head: the block is whole */
	do_write(9 * 4096 + 100, 8000, 4);	/* head of 9, tail of 11 ... */
	do_write(9 * 4096, 100, 5);		/* ... and their rest, */
	do_write(9 * 4096 + 8100, 4188, 6);	/* tail first */
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	{
		struct rng e[] = { { 4096, 4096 }, { 9 * 4096, 3 * 4096 } };
		expect_ops(W, e, 2, "fsync");
	}
	cr_assert_eq(rmw_read_bytes(), 0);
	verify_store(0, dev_size);
	verify_cache(0, 64 * KiB);
}

/* Reading the part not written: one read of that block, bytes merged around the write. */
TEST_FIX(partial, read_of_unwritten_part_one_read)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	uint8_t buf[4096];

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(5 * 4096 + 100, 100, 2);
	fake_log_clear(fb);
	cr_assert_eq(pc_read(dev, buf, 100, 5 * 4096), 100);	/* bytes not written */
	expect_same(buf, model + 5 * 4096, 100, 5 * 4096, "unwritten bytes");
	{
		struct rng e[] = { { 5 * 4096, 4096 } };
		expect_ops(R, e, 1, "read of the unwritten part");
	}
	cr_assert_eq(pc_read(dev, buf, 4096, 5 * 4096), 4096);	/* the whole block, merged */
	expect_same(buf, model + 5 * 4096, 4096, 5 * 4096, "merged block");
	cr_assert_eq(fake_log_count(fb, R), 1, "%s", log_text());
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, R), 0, "the completed block was read again; %s", log_text());
	{
		struct rng e[] = { { 5 * 4096, 4096 } };
		expect_ops(W, e, 1, "fsync");
	}
	verify_store(0, dev_size);
}

/* Writeback of a block still partial: one read, the whole, correct block written. */
TEST_FIX(partial, writeback_reads_once)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(7 * 4096 + 1000, 100, 2);
	do_write(7 * 4096 + 1100, 50, 3);	/* touching: the record grows */
	do_write(7 * 4096 + 990, 20, 4);	/* overlapping its start */
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 7 * 4096, 4096 } };
		expect_ops(R, e, 1, "writeback's read");
		expect_ops(W, e, 1, "writeback");
	}
	cr_assert_eq(rmw_read_bytes(), 4096);
	expect_flush_last("fsync");
	verify_store(0, dev_size);
	verify_cache(0, 64 * KiB);
}

/*
 * The read writeback needs fails: fsync reports it, the data stays dirty
 * and cached, and once the fault clears a retry writes the right bytes.
 */
TEST_FIX(partial, writeback_read_error_keeps_data)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = R, .err = -EIO, .persistent = true };
	struct pc_stats st;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_fault_set(fb, &ft);
	do_write(5000, 100, 2);		/* pc_write succeeds: it reads nothing */
	cr_assert_eq(fake_fault_hits(fb), 0);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), -EIO);
	cr_assert_geq(fake_fault_hits(fb), 1);
	cr_assert_eq(fake_log_count(fb, W), 0, "a block written without its rest; %s", log_text());
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dirty_bytes, 4096, "the partial block is no longer dirty");
	cr_assert_geq(st.writeback_errors, 1);
	cr_assert_eq(do_fsync(), -EIO, "a second fsync while the fault lasts");
	fake_fault_clear(fb);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 4096, 4096 } };
		expect_ops(W, e, 1, "the retry");
	}
	verify_store(0, dev_size);
	verify_cache(0, 64 * KiB);
}

/*
 * The shape a record cannot hold: a second write to a partial block that
 * neither touches nor overlaps the first reads the block (once), as the
 * only write that waits for a read.
 */
TEST_FIX(partial, disjoint_second_write_reads_block)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(1000, 100, 2);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	do_write(3000, 1000, 3);
	{
		struct rng e[] = { { 0, 4096 } };
		expect_ops(R, e, 1, "a disjoint second write");
	}
	verify_cache(0, 4096);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	{
		struct rng e[] = { { 0, 4096 } };
		expect_ops(W, e, 1, "fsync");
	}
	verify_store(0, 8192);
}

/* A folio holds PC_PART_SLOTS (4) partial blocks; the fifth one's write reads its block. */
TEST_FIX(partial, fifth_partial_block_of_a_folio_reads)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	for (uint64_t b = 0; b < 4; b++)
		do_write(b * 2 * 4096 + 10, 10, 2);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	do_write(9 * 4096 + 10, 10, 3);
	{
		struct rng e[] = { { 9 * 4096, 4096 } };
		expect_ops(R, e, 1, "the fifth partial block");
	}
	/* the next folio has records of its own */
	do_write(64 * KiB + 10, 10, 4);
	cr_assert_eq(fake_log_count(fb, R), 1, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* Partial blocks at the head and tail of one write; the body never reads. */
TEST_FIX(partial, head_and_tail_read_at_writeback)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	/* head partial in block 16, body 17-18, tail partial in block 19 */
	do_write(16 * 4096 + 2048, 3 * 4096, 2);
	/* head in the last block of folio 1, tail in the first of folio 2 */
	do_write(2 * 64 * KiB - 10, 20, 3);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 16 * 4096, 4096 }, { 19 * 4096, 4096 },
				   { 2 * 64 * KiB - 4096, 4096 }, { 2 * 64 * KiB, 4096 } };
		expect_ops(R, e, 4, "writeback's reads");
	}
	{
		struct rng e[] = { { 16 * 4096, 4 * 4096 }, { 2 * 64 * KiB - 4096, 8192 } };
		expect_ops(W, e, 2, "fsync");
	}
	verify_store(0, dev_size);
	verify_cache(0, 256 * KiB);
}

/* 512-byte cache blocks in 4K folios: a write across a folio edge is two partial blocks. */
TEST_FIX(partial, block_512_in_4k_folio)
{
	struct blk_geometry g = geo_of(2 * MiB, 512, 512, 1 * MiB);

	setup(&g, 1 * MiB, 4 * KiB, 512);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(1000, 10, 2);
	do_write(4096 - 1, 2, 3);	/* last byte of folio 0, first of folio 1 */
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 512, 512 }, { 4096 - 512, 512 }, { 4096, 512 } };
		expect_ops(R, e, 3, "writeback's reads");
	}
	{
		struct rng e[] = { { 512, 512 }, { 4096 - 512, 1024 } };
		expect_ops(W, e, 2, "fsync");
	}
	verify_store(0, dev_size);
	verify_cache(0, 16 * KiB);
}

/*
 * rmw = device: a partial block goes out as the whole logical blocks its
 * range covers, completed at its ends by reading just those logical blocks;
 * the rest of the physical block is the device's business.
 */
TEST_FIX(partial, rmw_device_completes_logical_blocks)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	pc_dev_set_policy(dev, true, false);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(100, 900, 2);			/* block 0: [100, 1000) */
	do_write(4096 + 1000, 2000, 3);		/* block 1: [1000, 3000) */
	do_write(2 * 4096 + 1024, 1024, 4);	/* block 2: [1024, 2048), aligned */
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 0, 1024 }, { 4096 + 512, 512 }, { 4096 + 2560, 512 } };
		expect_ops(R, e, 3, "the ends' logical blocks");
	}
	{
		struct rng e[] = { { 0, 1024 }, { 4096 + 512, 2560 }, { 2 * 4096 + 1024, 1024 } };
		expect_ops(W, e, 3, "whole logical blocks");
	}
	verify_store(0, dev_size);
	/* the blocks are not uptodate afterwards: a read takes them from the device */
	verify_cache(0, 64 * KiB);
	expect_stats_match_log();
}

/*
 * The two halves of one write (the kernel cuts a write from a buffer that is
 * not page-aligned into two FUSE requests, and they may run at once) meet in
 * one block: neither waits for a read, and the block ends whole.
 */
struct half {
	pthread_t t;
	pthread_barrier_t *start;	/* each write's two halves start together */
	uint64_t pos;
	size_t len;
	unsigned int gen;
	int blocks;
	ssize_t ret;
};

static void *half_main(void *arg)
{
	struct half *h = arg;
	uint8_t *buf = malloc(h->len);

	h->ret = 0;
	for (int i = 0; i < h->blocks; i++) {
		uint64_t pos = h->pos + (uint64_t)i * 8192;
		ssize_t r;

		pthread_barrier_wait(h->start);
		if (!buf)
			continue;
		fill(buf, h->len, pos, h->gen);
		r = pc_write(dev, buf, h->len, pos);
		if (r != (ssize_t)h->len) {
			h->ret = r;
			break;
		}
	}
	free(buf);
	return NULL;
}

TEST_FIX(partial, halves_in_parallel_read_nothing)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 1 * MiB);
	pthread_barrier_t start;
	struct half a = { .start = &start, .pos = 0, .len = 4096 + 1000, .gen = 2, .blocks = 400 };
	struct half b = { .start = &start, .pos = 4096 + 1000, .len = 3096, .gen = 2, .blocks = 400 };

	pthread_barrier_init(&start, NULL, 2);
	setup(&g, 16 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	pthread_create(&a.t, NULL, half_main, &a);
	pthread_create(&b.t, NULL, half_main, &b);
	pthread_join(a.t, NULL);
	pthread_join(b.t, NULL);
	pthread_barrier_destroy(&start);
	cr_assert_eq(a.ret, 0);
	cr_assert_eq(b.ret, 0);
	for (int i = 0; i < 400; i++)
		model_fill((uint64_t)i * 8192, 8192, 2);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	cr_assert_eq(rmw_read_bytes(), 0);
	verify_store(0, dev_size);
}

TEST_FIX(partial, full_overwrite_never_reads)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_log_clear(fb);
	do_write(20 * 4096, 4096, 2);			/* one block */
	do_write(2 * 64 * KiB, 64 * KiB, 3);		/* a whole folio */
	do_write(4 * 64 * KiB - 4096, 12 * KiB, 4);	/* across a folio edge */
	do_write(1 * MiB, 1 * MiB, 5);			/* many folios */
	do_write(2 * MiB, 4096, 6);
	do_write(2 * MiB, 4096, 7);			/* again */
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	/* reading the folio around block 20 fetches only the other blocks */
	verify_cache(0, 64 * KiB * 2);
	cr_assert_eq(fake_log_count_range(fb, R, 20 * 4096, 4096), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

TEST_FIX(partial, uptodate_block_no_read)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	uint8_t buf[4096];

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	cr_assert_eq(read_full(buf, sizeof(buf), 10 * 4096), 4096);
	fake_log_clear(fb);
	do_write(10 * 4096 + 1, 10, 2);
	do_write(10 * 4096 + 4095, 1, 3);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());
	/* a piecewise fill of the next block: at most one read (none if read ahead) */
	for (int i = 0; i < 4096; i += 512)
		do_write(11 * 4096 + (uint64_t)i, 512, 4);
	cr_assert_leq(fake_log_count(fb, R), 1, "%s", log_text());
	verify_cache(9 * 4096, 4 * 4096);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 10 * 4096, 2 * 4096 } };
		expect_ops(W, e, 1, "fsync");
	}
	verify_store(0, dev_size);
}

/* ======================================================================
 * Reads: hits, merged misses, splits at max_io, byte-exact data
 * ====================================================================== */

/* ======================================================================
 * Statistics counted per thread: summed by readers, kept when a thread exits
 * ====================================================================== */

struct stat_thread {
	struct pc_dev *dev;
	uint64_t pos;
	int go;			/* 1: it read; 2: it may exit */
};

/* One uncached 4 KiB read (a backend read), then wait for leave to exit. */
static void *stat_reader(void *arg)
{
	struct stat_thread *a = arg;
	uint8_t buf[4096];

	cr_assert_eq(pc_read(a->dev, buf, sizeof(buf), a->pos), (ssize_t)sizeof(buf));
	__atomic_store_n(&a->go, 1, __ATOMIC_RELEASE);
	while (__atomic_load_n(&a->go, __ATOMIC_ACQUIRE) != 2)
		usleep(1000);
	return NULL;
}

static void stat_read_in_thread(struct pc_dev *d, uint64_t pos, bool wait_exit)
{
	struct stat_thread a = { .dev = d, .pos = pos };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, stat_reader, &a), 0);
	while (!__atomic_load_n(&a.go, __ATOMIC_ACQUIRE))
		usleep(1000);
	__atomic_store_n(&a.go, 2, __ATOMIC_RELEASE);
	if (wait_exit)
		cr_assert_eq(pthread_join(t, NULL), 0);
	else
		cr_assert_eq(pthread_detach(t), 0);
}

TEST_FIX(stats, summed_across_threads_and_kept_at_exit)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_stats st;
	uint8_t buf[4096];

	setup(&g, 8 * MiB, 64 * KiB, 0);
	stat_read_in_thread(dev, 0, true);
	stat_read_in_thread(dev, 64 * KiB, true);
	cr_assert_eq(pc_read(dev, buf, sizeof(buf), 128 * KiB), (ssize_t)sizeof(buf));
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.backend_read_ios, 3, "an exited thread's counts are kept: %llu",
		     (unsigned long long)st.backend_read_ios);
	cr_assert_eq(st.user_reads, 3);
	cr_assert_eq(st.user_read_bytes, 3 * 4096);
	cr_assert_eq(st.in_flight, 0);
	cr_assert_gt(st.time_in_queue_ns, 0);
	cr_assert_eq(st.read_ticks_ns, st.time_in_queue_ns);
}

/* A device removed while a thread that counted on it lives: the next device starts at 0. */
TEST_FIX(stats, a_new_device_starts_from_zero)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_dev *d2, *d3;
	struct stat_thread a = { .pos = 0 };
	struct pc_stats st;
	uint8_t buf[4096];
	pthread_t t;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	d2 = pc_dev_add(pc, "t2", fake_backend(fb), 0);
	cr_assert(!IS_ERR_OR_NULL(d2));
	a.dev = d2;
	cr_assert_eq(pthread_create(&t, NULL, stat_reader, &a), 0);
	while (!__atomic_load_n(&a.go, __ATOMIC_ACQUIRE))
		usleep(1000);
	cr_assert_eq(pc_read(d2, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	pc_dev_remove(d2);
	d3 = pc_dev_add(pc, "t3", fake_backend(fb), 0);
	cr_assert(!IS_ERR_OR_NULL(d3));
	pc_dev_stats(d3, &st);
	cr_assert_eq(st.backend_read_ios, 0);
	cr_assert_eq(pc_read(d3, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	/* the thread that counted on the removed device exits now */
	__atomic_store_n(&a.go, 2, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(t, NULL), 0);
	pc_dev_stats(d3, &st);
	cr_assert_eq(st.backend_read_ios, 1, "%llu", (unsigned long long)st.backend_read_ios);
	cr_assert_eq(st.user_reads, 1);
	cr_assert_eq(st.in_flight, 0);
	pc_dev_remove(d3);
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.backend_read_ios, 0, "another device's counts stay its own");
}

struct stat_load {
	int stop;
	uint64_t reads;
};

static void *stat_load_main(void *arg)
{
	struct stat_load *l = arg;
	uint8_t buf[4096];
	uint64_t pos = 0;

	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		cr_assert_eq(pc_read(dev, buf, sizeof(buf), pos), (ssize_t)sizeof(buf));
		pos = (pos + 64 * KiB) % (64 * MiB);
		l->reads++;
	}
	return NULL;
}

/* Busy time and the counts never go backwards while threads count and exit. */
TEST_FIX(stats, busy_time_never_goes_back)
{
	struct blk_geometry g = geo_of(64 * MiB, 4096, 4096, 1 * MiB);
	struct stat_load l[2] = { { 0 } };
	pthread_t t[2];
	struct pc_stats st;
	uint64_t last_ticks = 0, last_q = 0, end;
	int i, round;

	/* a cache of 1 MiB over 64 MiB: reads miss; ended by the fake's completer thread */
	setup(&g, 1 * MiB, 64 * KiB, 0);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 200);
	for (round = 0; round < 4; round++) {
		for (i = 0; i < 2; i++) {
			l[i].stop = 0;
			cr_assert_eq(pthread_create(&t[i], NULL, stat_load_main, &l[i]), 0);
		}
		end = blk_now_ns() + 50 * 1000000ull;
		while (blk_now_ns() < end) {
			pc_dev_stats(dev, &st);
			cr_assert_geq(st.io_ticks_ns, last_ticks, "busy time went back by %llu ns",
				      (unsigned long long)(last_ticks - st.io_ticks_ns));
			cr_assert_geq(st.time_in_queue_ns, last_q);
			last_ticks = st.io_ticks_ns;
			last_q = st.time_in_queue_ns;
		}
		for (i = 0; i < 2; i++) {
			__atomic_store_n(&l[i].stop, 1, __ATOMIC_RELEASE);
			cr_assert_eq(pthread_join(t[i], NULL), 0);
		}
	}
	pc_dev_stats(dev, &st);
	cr_assert_geq(st.io_ticks_ns, last_ticks);
	cr_assert_gt(st.io_ticks_ns, 0);
	cr_assert_eq(st.in_flight, 0);
	cr_assert_eq(st.user_reads, l[0].reads + l[1].reads);
	cr_assert_gt(st.backend_read_ios, 0);
	cr_assert_leq(st.backend_read_ios, st.user_reads);
}

TEST_FIX(reads, hits_and_misses)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_stats a, b, c;
	uint8_t *buf = talloc(64 * KiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	pc_dev_stats(dev, &a);
	cr_assert_eq(read_full(buf, 64 * KiB, 256 * KiB), (ssize_t)(64 * KiB));
	expect_same(buf, model + 256 * KiB, 64 * KiB, 256 * KiB, "first read");
	pc_dev_stats(dev, &b);
	cr_assert_eq(fake_log_count_range(fb, R, 256 * KiB, 64 * KiB), 1,
		     "16 missing blocks not merged into one read; %s", log_text());
	cr_expect_eq(b.cache_hits - a.cache_hits, 0);
	cr_expect_geq(b.cache_misses - a.cache_misses, 16, "misses %llu",
		      (unsigned long long)(b.cache_misses - a.cache_misses));

	fake_log_clear(fb);
	memset(buf, 0, 64 * KiB);
	cr_assert_eq(read_full(buf, 64 * KiB, 256 * KiB), (ssize_t)(64 * KiB));
	expect_same(buf, model + 256 * KiB, 64 * KiB, 256 * KiB, "second read");
	pc_dev_stats(dev, &c);
	cr_assert_eq(fake_log_count_range(fb, R, 256 * KiB, 64 * KiB), 0, "cached blocks re-read; %s",
		     log_text());
	cr_expect_eq(c.cache_hits - b.cache_hits, 16, "hits %llu",
		     (unsigned long long)(c.cache_hits - b.cache_hits));
	cr_expect_eq(c.cache_misses - b.cache_misses, 0);
	cr_expect_eq(c.user_read_bytes - a.user_read_bytes, 128 * KiB);
	/* unaligned reads inside cached blocks: still hits, no I/O */
	for (uint64_t p = 256 * KiB + 1; p < 320 * KiB - 100; p += 999) {
		cr_assert_eq(pc_read(dev, buf, 100, p), 100);
		expect_same(buf, model + p, 100, p, "small read");
	}
	cr_assert_eq(fake_log_count_range(fb, R, 256 * KiB, 64 * KiB), 0, "%s", log_text());
	tfree(buf);
}

TEST_FIX(reads, missing_runs_merged_around_uptodate)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	uint64_t base = 512 * KiB;
	uint8_t buf[32 * 1024];
	struct pc_stats a, b;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(base + 2 * 4096, 4096, 2);
	do_write(base + 5 * 4096, 4096, 3);
	fake_log_clear(fb);
	pc_dev_stats(dev, &a);
	cr_assert_eq(read_full(buf, sizeof(buf), base), (ssize_t)sizeof(buf));
	pc_dev_stats(dev, &b);
	expect_same(buf, model + base, sizeof(buf), base, "read around dirty blocks");
	/* 8 blocks asked for: 2 served from the cache, 6 fetched */
	cr_expect_eq(b.cache_hits - a.cache_hits, 2, "cache_hits +%llu, want +2",
		     (unsigned long long)(b.cache_hits - a.cache_hits));
	cr_expect_eq(b.cache_misses - a.cache_misses, 6, "cache_misses +%llu, want +6",
		     (unsigned long long)(b.cache_misses - a.cache_misses));
	cr_assert_eq(fake_log_count_range(fb, R, base, sizeof(buf)), 3,
		     "expected reads of [0,2) [3,5) [6,8); %s", log_text());
	cr_assert_eq(fake_log_count_range(fb, R, base + 2 * 4096, 4096), 0, "%s", log_text());
	cr_assert_eq(fake_log_count_range(fb, R, base + 5 * 4096, 4096), 0, "%s", log_text());
	cr_assert_neq(fake_log_find(fb, 0, R, base, 2 * 4096), -1, "%s", log_text());
	cr_assert_neq(fake_log_find(fb, 0, R, base + 3 * 4096, 2 * 4096), -1, "%s", log_text());
	/* the dirty blocks are still dirty, and only they are written */
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { base + 2 * 4096, 4096 }, { base + 5 * 4096, 4096 } };
		expect_ops(W, e, 2, "fsync");
	}
	verify_store(0, dev_size);
}

TEST_FIX(reads, split_at_max_io)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 8 * KiB);
	uint8_t *buf = talloc(1 * MiB);
	struct pc_stats st;
	struct fake_op e;
	size_t n;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	cr_assert_eq(read_full(buf, 64 * KiB, 64 * KiB), (ssize_t)(64 * KiB));
	expect_same(buf, model + 64 * KiB, 64 * KiB, 64 * KiB, "64K read");
	cr_assert_eq(fake_log_count_range(fb, R, 64 * KiB, 64 * KiB), 8,
		     "a 64K miss with max_io 8K is 8 reads; %s", log_text());
	fake_log_clear(fb);
	cr_assert_eq(read_full(buf, 1 * MiB, 2 * MiB + 4096), (ssize_t)(1 * MiB));
	expect_same(buf, model + 2 * MiB + 4096, 1 * MiB, 2 * MiB + 4096, "1M read");
	n = fake_log_len(fb);
	for (size_t i = 0; i < n; i++) {
		cr_assert(fake_log_get(fb, i, &e));
		cr_assert_leq(e.len, 8 * KiB);
	}
	cr_assert_leq(fake_log_count_range(fb, R, 2 * MiB + 4096, 1 * MiB), 1 * MiB / (8 * KiB) + 1,
		      "%s", log_text());
	pc_dev_stats(dev, &st);
	cr_expect_gt(st.split_ios, 0);
	tfree(buf);
}

TEST_FIX(reads, random_byte_exact)
{
	struct blk_geometry g = geo_of(8 * MiB, 512, 512, 64 * KiB);
	uint8_t *buf = talloc(300 * KiB);
	unsigned int seed = 7;

	setup(&g, 2 * MiB, 16 * KiB, 0);
	store_fill(0, dev_size, 1);
	for (int i = 0; i < 20; i++) {
		uint64_t pos = (uint64_t)rand_r(&seed) % (dev_size - 40000);

		do_write(pos, (size_t)rand_r(&seed) % 40000 + 1, (unsigned int)i + 2);
	}
	for (int i = 0; i < 300; i++) {
		size_t len = (size_t)rand_r(&seed) % (300 * KiB) + 1;
		uint64_t pos = (uint64_t)rand_r(&seed) % (dev_size - len + 1);

		cr_assert_eq(read_full(buf, len, pos), (ssize_t)len);
		expect_same(buf, model + pos, len, pos, "random read");
	}
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	tfree(buf);
}

TEST_FIX(reads, read_begin_iovecs)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_read *rd = talloc(sizeof(*rd));
	uint64_t pos = 1000;
	size_t total = 0;
	ssize_t r;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(300 * KiB + 5, 10000, 2);
	r = pc_read_begin(dev, rd, 2 * MiB, pos);
	cr_assert_gt(r, 0, "pc_read_begin = %zd", r);
	cr_assert_leq(r, (ssize_t)PC_READ_MAX);
	cr_assert_leq(rd->iovcnt, PC_READ_IOV);
	for (int i = 0; i < rd->iovcnt; i++) {
		expect_same(rd->iov[i].iov_base, model + pos + total, rd->iov[i].iov_len,
			    pos + total, "read_begin iovec");
		total += rd->iov[i].iov_len;
	}
	cr_assert_eq(total, (size_t)r, "iovecs add up to %zu, returned %zd", total, r);
	pc_read_end(rd);
	/* at and past the end: 0; across it: shortened */
	cr_assert_eq(pc_read_begin(dev, rd, 4096, dev_size), 0);
	cr_assert_eq(pc_read_begin(dev, rd, 4096, dev_size + 8192), 0);
	r = pc_read_begin(dev, rd, 8192, dev_size - 100);
	cr_assert_eq(r, 100);
	pc_read_end(rd);
	tfree(rd);
}

struct bg_writer {
	pthread_t t;
	uint64_t pos, len;
	unsigned int gen;
	ssize_t ret;
	bool done;
};

static void *bg_writer_main(void *arg)
{
	struct bg_writer *w = arg;
	uint8_t *b = malloc(4096);

	w->ret = 0;
	for (uint64_t p = w->pos; p < w->pos + w->len; p += 4096) {
		ssize_t r;

		fill(b, 4096, p, w->gen);
		r = pc_write(dev, b, 4096, p);
		if (r != 4096) {
			w->ret = r < 0 ? r : -EIO;
			break;
		}
	}
	free(b);
	__atomic_store_n(&w->done, true, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Folios held by pc_read_begin() are neither evicted nor reused until pc_read_end(). */
TEST_FIX(reads, held_folios_survive_pressure)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct pc_read *rd = talloc(sizeof(*rd));
	struct bg_writer w = { .pos = 1 * MiB, .len = 512 * KiB, .gen = 3 };
	size_t off = 0;
	ssize_t r;

	setup(&g, 8 * 4 * KiB, 4 * KiB, 0);
	store_fill(0, dev_size, 1);
	r = pc_read_begin(dev, rd, 16 * KiB, 8 * KiB);
	cr_assert_eq(r, (ssize_t)(16 * KiB), "pc_read_begin = %zd", r);
	pthread_create(&w.t, NULL, bg_writer_main, &w);
	for (uint64_t end = blk_now_ns() + WAIT_MS * 1000000ull;
	     !__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) && blk_now_ns() < end;)
		usleep(10 * 1000);
	cr_assert(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST),
		  "a writer using the other half of the cache is stuck");
	pthread_join(w.t, NULL);
	cr_assert_eq(w.ret, 0, "background writes: %zd", w.ret);
	for (int i = 0; i < rd->iovcnt; i++) {
		expect_same(rd->iov[i].iov_base, model + 8 * KiB + off, rd->iov[i].iov_len,
			    8 * KiB + off, "held iovec after pressure");
		off += rd->iov[i].iov_len;
	}
	pc_read_end(rd);
	model_fill(w.pos, w.len, w.gen);
	verify_cache(0, 2 * MiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	tfree(rd);
}

/* A 1 MiB request through an 8-folio cache: served (whole or in part), no deadlock. */
TEST_FIX(reads, read_begin_larger_than_cache)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct pc_read *rd = talloc(sizeof(*rd));
	size_t total = 0;
	ssize_t r;

	setup(&g, 8 * 4 * KiB, 4 * KiB, 0);
	store_fill(0, dev_size, 1);
	r = pc_read_begin(dev, rd, PC_READ_MAX, 4096);
	cr_assert_gt(r, 0, "pc_read_begin = %zd", r);
	cr_assert_leq(r, (ssize_t)PC_READ_MAX);
	for (int i = 0; i < rd->iovcnt; i++) {
		expect_same(rd->iov[i].iov_base, model + 4096 + total, rd->iov[i].iov_len,
			    4096 + total, "iovec");
		total += rd->iov[i].iov_len;
	}
	cr_assert_eq(total, (size_t)r);
	pc_read_end(rd);
	verify_cache(0, 2 * MiB);	/* pc_read loops the same way */
	tfree(rd);
}

TEST_FIX(reads, read_error_not_cached)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = R, .err = -EIO };
	uint8_t buf[64 * 1024];
	struct pc_stats st;
	ssize_t r;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(64 * KiB, 4096, 2);		/* dirty block 0 of folio 1 */
	fake_fault_set(fb, &ft);
	r = pc_read(dev, buf, sizeof(buf), 64 * KiB);
	/* -EIO, or a short read of what precedes the failed blocks */
	cr_assert(r == -EIO || (r > 0 && r < (ssize_t)sizeof(buf)),
		  "pc_read over a failed backend read = %zd; %s", r, log_text());
	if (r > 0)
		expect_same(buf, model + 64 * KiB, (size_t)r, 64 * KiB, "short read");
	pc_dev_stats(dev, &st);
	cr_expect_geq(st.read_errors, 1);
	/* not cached as uptodate: the next read fetches again and sees real data */
	verify_cache(64 * KiB, 64 * KiB);
	cr_assert_eq(fake_fault_hits(fb), 1);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 64 * KiB, 4096 } };
		expect_ops(W, e, 1, "the dirty block survived the failed read");
	}
	verify_store(0, dev_size);
}

/* ======================================================================
 * Eviction: far more data than the cache holds
 * ====================================================================== */

static void write_seq(uint64_t start, uint64_t end, size_t chunk, unsigned int gen)
{
	for (uint64_t p = start; p < end; p += chunk)
		do_write(p, p + chunk <= end ? chunk : end - p, gen);
}

static void read_seq(uint64_t start, uint64_t end, size_t chunk)
{
	for (uint64_t p = start; p < end; p += chunk)
		verify_cache(p, p + chunk <= end ? chunk : end - p);
}

TEST_FIX(eviction, tiny_cache_sequential)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 128 * KiB);
	struct pc_stats st;

	setup(&g, 8 * 64 * KiB, 64 * KiB, 0);
	write_seq(1000, dev_size - 3000, 100 * KiB + 7, 2);
	read_seq(0, dev_size, 77 * KiB);
	pc_dev_stats(dev, &st);
	cr_assert_leq(st.cached_bytes, 8 * 64 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	cr_assert_eq(dirty_bytes(), 0);
	/* overwrite everything again, read it back in reverse order */
	write_seq(0, dev_size, 200 * KiB, 3);
	for (uint64_t p = dev_size; p > 0; p -= 64 * KiB)
		verify_cache(p - 64 * KiB, 64 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	expect_stats_match_log();
}

TEST_FIX(eviction, tiny_cache_4k_folios_random)
{
	struct blk_geometry g = geo_of(2 * MiB, 512, 512, 16 * KiB);
	uint8_t *buf = talloc(64 * KiB);
	unsigned int seed = 99;

	setup(&g, 8 * 4 * KiB, 4 * KiB, 512);
	store_fill(0, dev_size, 1);
	for (int i = 0; i < 3000; i++) {
		size_t len = (size_t)rand_r(&seed) % (20 * KiB) + 1;
		uint64_t pos = (uint64_t)rand_r(&seed) % (dev_size - len + 1);

		if (rand_r(&seed) % 3) {
			do_write(pos, len, (unsigned int)i + 2);
		} else {
			cr_assert_eq(read_full(buf, len, pos), (ssize_t)len);
			expect_same(buf, model + pos, len, pos, "random read");
		}
		if (i % 1000 == 999)
			cr_assert_eq(do_fsync(), 0);
	}
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	verify_cache(0, dev_size);
	tfree(buf);
}

/* One request larger than the whole cache, both ways. */
TEST_FIX(eviction, request_larger_than_cache)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);

	setup(&g, 8 * 4 * KiB, 4 * KiB, 0);
	do_write(4096 + 100, 1 * MiB, 2);
	verify_cache(0, 2 * MiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/*
 * Without the flusher, a writer that finds the cache full writes back and
 * goes on: cost stays linear in bytes, no sleeping per refill. 1024 4K writes
 * through an 8-folio cache refill it 128 times.
 */
TEST_FIX(eviction, refill_without_flusher_does_not_stall)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 1 * MiB);
	double t0, t;

	setup(&g, 8 * 4 * KiB, 4 * KiB, 0);
	t0 = now_s();
	write_seq(0, 4 * MiB, 4096, 2);
	t = now_s() - t0;
	/*
	 * A time, since the writer blocks anyway (on the workers): 0.02 s
	 * quiet, so 5 s is far from what a busy machine takes, and is still
	 * passed only by less than 40 ms of sleep per refill.
	 */
	cr_expect_lt(t, 5.0, "1024 4K writes through 8 folios took %.2f s (%.1f ms per refill)",
		     t, t * 1000 / 128);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* Two devices of different block sizes share the pool. */
TEST_FIX(eviction, two_devices_share_the_pool)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 256 * KiB);
	struct blk_geometry g2 = geo_of(4 * MiB + 512, 512, 512, 64 * KiB);
	struct fake_be *fb2;
	struct pc_dev *dev2;
	uint8_t *buf = talloc(64 * KiB), *exp = talloc(64 * KiB);

	setup(&g, 16 * 16 * KiB, 16 * KiB, 0);
	fb2 = fake_create(&g2);
	dev2 = pc_dev_add(pc, "t1", fake_backend(fb2), 0);
	cr_assert(!IS_ERR_OR_NULL(dev2));
	cr_assert_eq(pc_dev_cache_block(dev2), 512);
	for (uint64_t p = 0; p < 4 * MiB; p += 64 * KiB) {
		do_write(p, 64 * KiB, 2);
		fill(buf, 64 * KiB, p, 3);
		cr_assert_eq(pc_write(dev2, buf, 64 * KiB, p), (ssize_t)(64 * KiB));
	}
	for (uint64_t p = 0; p < 4 * MiB; p += 64 * KiB) {
		verify_cache(p, 64 * KiB);
		cr_assert_eq(pc_read(dev2, buf, 64 * KiB, p), (ssize_t)(64 * KiB));
		fill(exp, 64 * KiB, p, 3);
		expect_same(buf, exp, 64 * KiB, p, "second device");
	}
	cr_assert_eq(do_fsync(), 0);
	{
		pc_errseq_t s2 = pc_errseq_sample(dev2);

		cr_assert_eq(pc_fsync(dev2, &s2), 0);
	}
	verify_store(0, dev_size);
	fill(exp, 64 * KiB, 4 * MiB - 64 * KiB, 3);
	expect_same(fake_store(fb2) + 4 * MiB - 64 * KiB, exp, 64 * KiB, 4 * MiB - 64 * KiB,
		    "second device store");
	cr_assert_eq(fake_violations(fb2), 0);
	pc_dev_remove(dev2);
	fake_destroy(fb2);
	tfree(buf);
	tfree(exp);
}

/* ======================================================================
 * fsync: exactly the dirty blocks, merged across folios, split at max_io
 * ====================================================================== */

TEST_FIX(fsync, merged_across_folios)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);

	setup(&g, 4 * MiB, 16 * KiB, 0);
	fake_log_clear(fb);
	do_write(8 * KiB, 48 * KiB, 2);		/* folios 0 (half), 1, 2, 3 (half) */
	cr_assert_eq(fake_log_len(fb), 0, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 8 * KiB, 48 * KiB } };
		expect_ops(W, e, 1, "48K across four folios");
	}
	expect_flush_last("fsync");
	verify_store(0, dev_size);
	expect_stats_match_log();
}

TEST_FIX(fsync, split_at_max_io)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct rng got[64];
	uint64_t end = 0;
	size_t n;

	setup(&g, 4 * MiB, 16 * KiB, 0);
	fake_log_clear(fb);
	do_write(0, 200 * KiB, 2);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 0, 64 * KiB }, { 64 * KiB, 64 * KiB }, { 128 * KiB, 64 * KiB },
				   { 192 * KiB, 8 * KiB } };
		expect_ops(W, e, 4, "200K with max_io 64K");
	}
	expect_flush_last("fsync");
	/* a run that does not start on a max_io boundary */
	fake_log_clear(fb);
	do_write(1 * MiB + 4 * KiB, 128 * KiB, 3);
	cr_assert_eq(do_fsync(), 0);
	n = logged(W, got, 64);
	cr_assert_leq(n, 3, "%s", log_text());
	end = 1 * MiB + 4 * KiB;
	for (size_t i = 0; i < n; i++) {
		cr_assert_eq(got[i].pos, end, "gap or overlap; %s", log_text());
		cr_assert_leq(got[i].len, 64 * KiB);
		end += got[i].len;
	}
	cr_assert_eq(end, 1 * MiB + 132 * KiB, "%s", log_text());
	verify_store(0, dev_size);
	expect_stats_match_log();
}

TEST_FIX(fsync, only_dirty_blocks)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	uint8_t buf[4096];

	setup(&g, 4 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	/* blocks 1 and 3 uptodate and clean, 0, 2, 4 dirty */
	cr_assert_eq(read_full(buf, 4096, 4096), 4096);
	cr_assert_eq(read_full(buf, 4096, 3 * 4096), 4096);
	do_write(0, 4096, 2);
	do_write(2 * 4096, 4096, 3);
	do_write(4 * 4096, 4096, 4);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { 0, 4096 }, { 2 * 4096, 4096 }, { 4 * 4096, 4096 } };
		expect_ops(W, e, 3, "dirty 0, 2, 4 around clean 1, 3");
	}
	expect_flush_last("fsync");
	/* nothing dirty: no write (a flush is allowed) */
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, W), 0, "%s", log_text());
	cr_assert_leq(fake_log_count(fb, F), 1);
	cr_assert_eq(fake_log_count(fb, R), 0);
	verify_store(0, dev_size);
	expect_stats_match_log();
}

TEST_FIX(fsync, deferred_out_of_order)
{
	struct blk_geometry g = geo_of(8 * MiB, 512, 512, 32 * KiB);

	setup(&g, 4 * MiB, 16 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 300);
	for (int i = 0; i < 40; i++)
		do_write((uint64_t)i * 48 * KiB + 100, 20 * KiB + (size_t)i * 512, (unsigned int)i + 2);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	expect_flush_last("deferred fsync");
	cr_assert_eq(fake_pending(fb), 0, "fsync returned with I/O in flight");
	verify_store(0, dev_size);
	verify_cache(0, dev_size);
	cr_assert_eq(fake_overlaps(fb), 0);
}

struct fsync_thread {
	pthread_t t;
	int ret;
	bool done;
};

static void *fsync_main(void *arg)
{
	struct fsync_thread *ft = arg;

	ft->ret = do_fsync();
	__atomic_store_n(&ft->done, true, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Complete everything the cache submits, newest first, until @done. */
static void complete_reverse_until(const bool *done)
{
	for (int rounds = 0; !__atomic_load_n(done, __ATOMIC_SEQ_CST); rounds++) {
		cr_assert_lt(rounds, 2000, "the cache never finished; %s", log_text());
		fake_wait_quiet(fb, 20, 1000);
		fake_complete_all(fb, true);
	}
}

TEST_FIX(fsync, manual_reverse_completion)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 16 * KiB);
	struct fsync_thread ft = { 0 };

	setup(&g, 4 * MiB, 16 * KiB, 0);
	for (int i = 0; i < 10; i++)
		do_write((uint64_t)i * 100 * KiB, 48 * KiB, (unsigned int)i + 2);
	fake_set_mode(fb, FAKE_MANUAL);
	fake_log_clear(fb);
	pthread_create(&ft.t, NULL, fsync_main, &ft);
	cr_assert(fake_wait_pending(fb, 1, 5000), "fsync submitted nothing");
	complete_reverse_until(&ft.done);
	pthread_join(ft.t, NULL);
	cr_assert_eq(ft.ret, 0);
	expect_flush_last("fsync with reverse completions");
	cr_assert_eq(fake_log_bytes(fb, W), 480 * KiB, "%s", log_text());
	fake_set_mode(fb, FAKE_INLINE);
	verify_store(0, dev_size);
}

struct write_thread {
	pthread_t t;
	uint64_t pos;
	size_t len;
	unsigned int gen;
	ssize_t ret;
	bool done;
};

static void *write_main(void *arg)
{
	struct write_thread *wt = arg;
	uint8_t *b = malloc(wt->len);

	fill(b, wt->len, wt->pos, wt->gen);
	wt->ret = pc_write(dev, b, wt->len, wt->pos);
	free(b);
	__atomic_store_n(&wt->done, true, __ATOMIC_SEQ_CST);
	return NULL;
}

struct zero_arg {
	pthread_t t;
	int ret;
	bool done;
};

static void *discard_main(void *arg)
{
	struct zero_arg *z = arg;

	z->ret = pc_discard(dev, 0, 64 * KiB);
	__atomic_store_n(&z->done, true, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * A write to blocks under writeback: whatever the cache does (wait for the
 * writeback or redirty), the new data must not be lost when the old
 * writeback completes, and must reach the backend at the next fsync.
 */
TEST_FIX(fsync, write_during_writeback)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct fsync_thread ft = { 0 };
	struct write_thread wt = { .pos = 8 * KiB, .len = 16 * KiB, .gen = 3 };
	bool both = false;

	setup(&g, 4 * MiB, 16 * KiB, 0);
	do_write(0, 64 * KiB, 2);
	fake_set_mode(fb, FAKE_MANUAL);
	pthread_create(&ft.t, NULL, fsync_main, &ft);
	cr_assert(fake_wait_pending(fb, 1, 5000), "fsync submitted nothing");
	fake_wait_quiet(fb, 50, 2000);
	pthread_create(&wt.t, NULL, write_main, &wt);
	usleep(50 * 1000);	/* let the writer reach the folio (or block on it) */
	for (int rounds = 0; !both; rounds++) {
		cr_assert_lt(rounds, 2000, "never finished; %s", log_text());
		fake_wait_quiet(fb, 20, 1000);
		fake_complete_all(fb, true);
		both = __atomic_load_n(&ft.done, __ATOMIC_SEQ_CST) &&
		       __atomic_load_n(&wt.done, __ATOMIC_SEQ_CST);
	}
	pthread_join(ft.t, NULL);
	pthread_join(wt.t, NULL);
	cr_assert_eq(ft.ret, 0);
	cr_assert_eq(wt.ret, (ssize_t)wt.len);
	model_fill(wt.pos, wt.len, wt.gen);
	fake_set_mode(fb, FAKE_INLINE);
	verify_cache(0, 64 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	cr_assert_eq(dirty_bytes(), 0);
	cr_assert_eq(fake_overlaps(fb), 0, "a block was written while its last write was in flight");
}

/*
 * Blocks redirtied while their write is in flight must not be written again
 * until that write completes: on a device that completes out of order, the
 * older write could land last and leave stale data behind a clean cache.
 */
TEST_FIX(fsync, no_second_write_over_one_in_flight)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct fsync_thread f1 = { 0 }, f2 = { 0 };
	struct write_thread wt = { .pos = 0, .len = 16 * KiB, .gen = 3 };

	setup(&g, 4 * MiB, 16 * KiB, 0);
	do_write(0, 64 * KiB, 2);
	fake_set_mode(fb, FAKE_MANUAL);
	pthread_create(&f1.t, NULL, fsync_main, &f1);
	cr_assert(fake_wait_pending(fb, 1, 5000), "fsync submitted nothing");
	fake_wait_quiet(fb, 50, 2000);
	pthread_create(&wt.t, NULL, write_main, &wt);	/* may wait for the writeback */
	fake_wait_quiet(fb, 50, 2000);
	pthread_create(&f2.t, NULL, fsync_main, &f2);	/* must wait for it */
	fake_wait_quiet(fb, 100, 2000);
	cr_assert_eq(fake_overlaps(fb), 0, "a write was submitted over one in flight; %s",
		     log_text());
	for (int rounds = 0; !(__atomic_load_n(&f1.done, __ATOMIC_SEQ_CST) &&
			       __atomic_load_n(&f2.done, __ATOMIC_SEQ_CST) &&
			       __atomic_load_n(&wt.done, __ATOMIC_SEQ_CST)); rounds++) {
		cr_assert_lt(rounds, 2000, "never finished; %s", log_text());
		fake_complete_all(fb, true);
		fake_wait_quiet(fb, 20, 1000);
	}
	pthread_join(f1.t, NULL);
	pthread_join(f2.t, NULL);
	pthread_join(wt.t, NULL);
	cr_assert_eq(f1.ret, 0);
	cr_assert_eq(f2.ret, 0);
	cr_assert_eq(wt.ret, (ssize_t)wt.len);
	model_fill(wt.pos, wt.len, wt.gen);
	cr_assert_eq(fake_overlaps(fb), 0, "%s", log_text());
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/* The counters and the op log tell the same story. */
TEST_FIX(fsync, stats_gauges)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_stats st;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	do_write(100, 10000, 2);	/* blocks 0..2 */
	do_write(1 * MiB, 64 * KiB, 3);
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dirty_bytes, 3 * 4096 + 64 * KiB, "dirty_bytes %llu",
		     (unsigned long long)st.dirty_bytes);
	cr_assert_eq(st.user_write_bytes, 10000 + 64 * KiB);
	cr_assert_eq(st.user_writes, 2);
	/* the partial blocks 0 and 2 are dirty, not uptodate (cached_bytes counts uptodate) */
	cr_assert_eq(st.cached_bytes, 4096 + 64 * KiB, "cached_bytes %llu",
		     (unsigned long long)st.cached_bytes);
	cr_assert_eq(do_fsync(), 0);
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dirty_bytes, 0);
	cr_assert_eq(st.writeback_bytes, 0);
	cr_assert_eq(st.backend_write_bytes, 3 * 4096 + 64 * KiB);
	cr_assert_eq(st.backend_flushes, 1);
	expect_stats_match_log();
}

/* ======================================================================
 * Writeback errors: blocks stay dirty, the error is reported once (errseq)
 * ====================================================================== */

TEST_FIX(errors, failed_write_stays_dirty_reported_once)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .countdown = 1, .err = -EIO };
	pc_errseq_t seq;
	struct pc_stats st;
	int ret;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	seq = pc_errseq_sample(dev);		/* "open" */
	do_write(64 * KiB, 16 * KiB, 2);
	fake_fault_set(fb, &ft);
	ret = pc_fsync(dev, &seq);
	cr_assert_eq(ret, -EIO, "fsync over a failed write = %d; %s", ret, log_text());
	cr_assert_eq(fake_fault_hits(fb), 1);
	cr_assert_eq(fake_store(fb)[64 * KiB], 0, "failed data reached the store");
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dirty_bytes, 16 * KiB, "blocks of the failed write are not dirty");
	cr_expect_geq(st.writeback_errors, 1);
	verify_cache(64 * KiB, 16 * KiB);	/* the data is still in the cache */

	/* the fault was transient: the next fsync writes the data and returns 0 */
	fake_log_clear(fb);
	ret = pc_fsync(dev, &seq);
	cr_assert_eq(ret, 0, "second fsync = %d (the error was already reported)", ret);
	{
		struct rng e[] = { { 64 * KiB, 16 * KiB } };
		expect_ops(W, e, 1, "rewrite of the failed blocks");
	}
	expect_flush_last("second fsync");
	verify_store(0, dev_size);
	cr_assert_eq(dirty_bytes(), 0);
	fake_log_clear(fb);
	cr_assert_eq(pc_fsync(dev, &seq), 0);
	cr_assert_eq(fake_log_count(fb, W), 0, "%s", log_text());
}

TEST_FIX(errors, persistent_fault_until_cleared)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .err = -ENOSPC, .persistent = true };
	pc_errseq_t seq;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	seq = pc_errseq_sample(dev);
	do_write(0, 8 * KiB, 2);
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_fsync(dev, &seq), -ENOSPC);
	/* still failing: this call's own writes fail again */
	cr_assert_eq(pc_fsync(dev, &seq), -ENOSPC, "%s", log_text());
	cr_assert_eq(dirty_bytes(), 8 * KiB);
	fake_fault_clear(fb);
	cr_assert_eq(pc_fsync(dev, &seq), 0);
	verify_store(0, dev_size);
}

TEST_FIX(errors, each_opener_sees_it_once)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO };
	pc_errseq_t a, b, c;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	a = pc_errseq_sample(dev);
	b = pc_errseq_sample(dev);
	do_write(0, 4096, 2);
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_fsync(dev, &a), -EIO);
	/* b has not seen it: reported to b although b's own writes succeed */
	cr_assert_eq(pc_fsync(dev, &b), -EIO);
	verify_store(0, dev_size);
	cr_assert_eq(pc_fsync(dev, &b), 0);
	cr_assert_eq(pc_fsync(dev, &a), 0);
	/* an opener after the error was seen starts clean */
	c = pc_errseq_sample(dev);
	cr_assert_eq(pc_fsync(dev, &c), 0);
}

TEST_FIX(errors, flush_failure)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = F, .err = -EIO };
	pc_errseq_t seq;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	seq = pc_errseq_sample(dev);
	do_write(0, 4096, 2);
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_fsync(dev, &seq), -EIO, "%s", log_text());
	verify_store(0, dev_size);	/* the write itself went through */
	fake_log_clear(fb);
	cr_assert_eq(pc_fsync(dev, &seq), 0);
}

/* A write fails under memory pressure (no fsync involved); fsync reports it. */
TEST_FIX(errors, failure_under_pressure_reported_by_fsync)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 64 * KiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO };
	pc_errseq_t seq;
	uint8_t *buf = talloc(64 * KiB);
	int ret;

	setup(&g, 8 * 64 * KiB, 64 * KiB, 0);
	seq = pc_errseq_sample(dev);
	fake_fault_set(fb, &ft);
	for (uint64_t p = 0; p < 4 * MiB; p += 64 * KiB) {
		ssize_t r;

		fill(buf, 64 * KiB, p, 2);
		r = pc_write(dev, buf, 64 * KiB, p);
		/* the sticky error may surface here once dirty data is at the limit */
		cr_assert(r == (ssize_t)(64 * KiB) || r == -EIO, "pc_write = %zd", r);
		if (r > 0)
			memcpy(model + p, buf, 64 * KiB);
	}
	cr_assert_eq(fake_fault_hits(fb), 1, "no writeback under pressure? %s", log_text());
	ret = pc_fsync(dev, &seq);
	cr_assert_eq(ret, -EIO, "fsync after a failed background write = %d", ret);
	cr_assert_eq(pc_fsync(dev, &seq), 0);
	verify_store(0, dev_size);
	tfree(buf);
}

/* Writeback that keeps failing must not make writers wait forever. */
TEST_FIX(errors, failing_device_does_not_hang_writers)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO, .persistent = true };
	pc_errseq_t seq;
	uint8_t buf[4096];
	int nr_err = 0, ret;

	setup(&g, 8 * 4 * KiB, 4 * KiB, 0);
	seq = pc_errseq_sample(dev);
	fake_fault_set(fb, &ft);
	for (uint64_t p = 0; p < 1 * MiB; p += 4096) {
		ssize_t r;

		fill(buf, 4096, p, 2);
		r = pc_write(dev, buf, 4096, p);
		cr_assert(r == 4096 || r == -EIO, "pc_write = %zd", r);
		if (r > 0)
			memcpy(model + p, buf, 4096);
		else
			nr_err++;
	}
	cr_assert_gt(nr_err, 0, "1 MiB written into a 32K cache whose writeback fails");
	fake_fault_clear(fb);
	ret = pc_fsync(dev, &seq);
	cr_assert_eq(ret, -EIO, "first fsync after the failures = %d", ret);
	cr_assert_eq(pc_fsync(dev, &seq), 0);
	verify_store(0, dev_size);
	verify_cache(0, 1 * MiB);
}

/*
 * Data that cannot leave one device does not hold up another: the healthy
 * device's writes all succeed in full while the failing device's dirty
 * data sits in the cache. (Run with and without the flusher.)
 */
static void failing_neighbour_case(bool flusher)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 64 * KiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO, .persistent = true };
	uint8_t *buf = talloc(64 * KiB), *exp = talloc(64 * KiB);
	pc_errseq_t s1, s2;
	char bad[256] = "";
	int ret;

	setup(&g, 16 * 16 * KiB, 16 * KiB, 0);
	s1 = pc_errseq_sample(dev);
	fb_b = fake_create(&g);
	dev_b = pc_dev_add(pc, "t1", fake_backend(fb_b), 0);
	cr_assert(!IS_ERR_OR_NULL(dev_b));
	if (flusher)
		cr_assert_eq(pc_cache_start(pc), 0);
	fake_fault_set(fb, &ft);
	do_write(0, 96 * KiB, 2);		/* 6 of 16 folios: dirty and stuck */
	for (uint64_t p = 0; p < 2 * MiB; ) {
		ssize_t r;

		fill(buf, 64 * KiB, p, 3);
		r = pc_write(dev_b, buf, 64 * KiB, p);
		if (r != (ssize_t)(64 * KiB)) {
			size_t o = strlen(bad);

			if (o < sizeof(bad) - 48)
				snprintf(bad + o, sizeof(bad) - o, "%s(64K at %llu) = %zd",
					 o ? ", " : "healthy device: pc_write", (unsigned long long)p, r);
		}
		/* go on from where it stopped, to see all of it */
		p += r > 0 ? (uint64_t)r : 64 * KiB;
	}
	cr_assert_eq(bad[0], 0, "%s", bad);
	s2 = pc_errseq_sample(dev_b);
	cr_assert_eq(pc_fsync(dev_b, &s2), 0);
	for (uint64_t p = 0; p < 2 * MiB; p += 64 * KiB) {
		fill(exp, 64 * KiB, p, 3);
		expect_same(fake_store(fb_b) + p, exp, 64 * KiB, p, "healthy device store");
	}
	/* the failing device's data is still there, and goes out once it heals */
	verify_cache(0, 96 * KiB);
	fake_fault_clear(fb);
	ret = pc_fsync(dev, &s1);
	cr_assert_eq(ret, -EIO, "fsync of the healed device = %d (its writes failed)", ret);
	cr_assert_eq(pc_fsync(dev, &s1), 0);
	verify_store(0, dev_size);
	cr_assert_eq(fake_violations(fb_b), 0);
	tfree(buf);
	tfree(exp);
}

TEST_FIX(errors, failing_device_does_not_block_others)
{
	failing_neighbour_case(false);
}

TEST_FIX(errors, sync_final)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO, .persistent = true };
	uint64_t lost = 0;
	int ret;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	do_write(0, 12 * KiB, 2);
	do_write(1 * MiB, 4 * KiB, 3);
	fake_fault_set(fb, &ft);
	ret = pc_dev_sync_final(dev, 2, NULL, &lost);
	cr_assert_eq(ret, -EIO);
	cr_assert_eq(lost, 16 * KiB, "lost %llu", (unsigned long long)lost);
	fake_fault_clear(fb);
	ret = pc_dev_sync_final(dev, 2, NULL, &lost);
	cr_assert_eq(ret, 0);
	cr_assert_eq(lost, 0);
	verify_store(0, dev_size);
}

/*
 * A deadline cuts the retries short, never the first round: with 5
 * attempts the backoff alone is 1.5 s; a deadline 150 ms away allows the
 * first retry (100 ms) and not the second (200 ms more). A deadline far
 * away changes nothing.
 */
TEST_FIX(errors, sync_final_deadline)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO, .persistent = true };
	uint64_t lost = 0, t0, took, deadline;
	int ret;

	setup(&g, 4 * MiB, 64 * KiB, 0);
	do_write(0, 12 * KiB, 2);
	fake_fault_set(fb, &ft);
	t0 = blk_now_ms();
	deadline = t0 + 150;
	ret = pc_dev_sync_final(dev, 5, &deadline, &lost);
	took = blk_now_ms() - t0;
	cr_assert_eq(ret, -EIO);
	cr_assert_eq(lost, 12 * KiB, "lost %llu", (unsigned long long)lost);
	cr_assert(took >= 100 && took < 300, "took %llu ms", (unsigned long long)took);
	cr_assert_eq(fake_fault_hits(fb), 2, "rounds: %u", fake_fault_hits(fb));

	/* an expired deadline: one round, no backoff */
	deadline = 1;
	t0 = blk_now_ms();
	ret = pc_dev_sync_final(dev, 5, &deadline, &lost);
	cr_assert_eq(ret, -EIO);
	cr_assert(blk_now_ms() - t0 < 100);
	cr_assert_eq(fake_fault_hits(fb), 3);

	/* far away: the retries as without one, and they succeed once the fault goes */
	fake_fault_clear(fb);
	deadline = blk_now_ms() + 60000;
	ret = pc_dev_sync_final(dev, 5, &deadline, &lost);
	cr_assert_eq(ret, 0);
	cr_assert_eq(lost, 0);
	verify_store(0, dev_size);
}

/* ======================================================================
 * Concurrency: many writers, late and out-of-order completions
 * ====================================================================== */

/*
 * Writes are 8-byte aligned and stamped: the word at byte address a written
 * by write #id holds (id << 32 | a >> 3). In the shared region two threads
 * overwrite each other, so the final word may come from either; but it must
 * come from a write that covered it, and from the last such write of its
 * thread (an older write landing after a newer one is lost data).
 */
#define CONC_THREADS 4
#define CONC_PRIVATE 2		/* threads 0, 1: private regions; 2, 3: shared */

struct conc {
	uint64_t region_len;	/* per private region; the shared one is twice this */
	int nr_writes;
	size_t max_len;
	/* shared region: last write id of each thread over each word */
	uint32_t *last[CONC_THREADS];
	uint32_t next_id;	/* atomic */
	uint32_t *owner;	/* write id -> thread */
	bool stop_fsync;
};

struct conc_thread {
	pthread_t t;
	int idx;
	struct conc *c;
	uint8_t *priv;		/* private model */
	char err[256];
	int fsyncs;
};

static struct conc conc;

static void stamp(uint8_t *buf, uint64_t pos, size_t len, uint32_t id)
{
	for (size_t o = 0; o < len; o += 8) {
		uint64_t v = (uint64_t)id << 32 | (uint32_t)((pos + o) >> 3);

		memcpy(buf + o, &v, 8);
	}
}

static void *conc_writer(void *arg)
{
	struct conc_thread *ct = arg;
	struct conc *c = ct->c;
	bool shared = ct->idx >= CONC_PRIVATE;
	uint64_t base = shared ? CONC_PRIVATE * c->region_len : (uint64_t)ct->idx * c->region_len;
	uint64_t rlen = shared ? 2 * c->region_len : c->region_len;
	unsigned int seed = 1000u + (unsigned int)ct->idx;
	uint8_t *buf = malloc(c->max_len), *rbuf = malloc(c->max_len);

	for (int i = 0; i < c->nr_writes && !ct->err[0]; i++) {
		size_t len = ((size_t)rand_r(&seed) % (c->max_len / 8) + 1) * 8;
		uint64_t pos = base + ((uint64_t)rand_r(&seed) % ((rlen - len) / 8 + 1)) * 8;
		uint32_t id = __atomic_add_fetch(&c->next_id, 1, __ATOMIC_SEQ_CST);
		ssize_t r;

		c->owner[id] = (uint32_t)ct->idx;
		stamp(buf, pos, len, id);
		r = pc_write(dev, buf, len, pos);
		if (r != (ssize_t)len) {
			snprintf(ct->err, sizeof(ct->err), "pc_write(%llu, %zu) = %zd",
				 (unsigned long long)pos, len, r);
			break;
		}
		if (shared) {
			for (uint64_t w = (pos - base) / 8; w < (pos - base + len) / 8; w++)
				c->last[ct->idx][w] = id;
		} else {
			memcpy(ct->priv + (pos - base), buf, len);
		}
		/* read back some of the own region and check it */
		if (!shared && i % 4 == 0) {
			size_t rl = ((size_t)rand_r(&seed) % c->max_len) + 1;
			uint64_t rp = base + (uint64_t)rand_r(&seed) % (rlen - rl + 1);
			size_t done = 0;

			while (done < rl) {
				r = pc_read(dev, rbuf + done, rl - done, rp + done);
				if (r <= 0)
					break;
				done += (size_t)r;
			}
			if (done != rl) {
				snprintf(ct->err, sizeof(ct->err), "pc_read(%llu, %zu) = %zd",
					 (unsigned long long)rp, rl, r);
				break;
			}
			if (memcmp(rbuf, ct->priv + (rp - base), rl)) {
				for (size_t k = 0; k < rl; k++)
					if (rbuf[k] != ct->priv[rp - base + k]) {
						snprintf(ct->err, sizeof(ct->err),
							 "read-back of own region: byte %llu differs",
							 (unsigned long long)(rp + k));
						break;
					}
				break;
			}
		}
	}
	free(buf);
	free(rbuf);
	return NULL;
}

static void *conc_fsyncer(void *arg)
{
	struct conc_thread *ct = arg;
	pc_errseq_t seq = pc_errseq_sample(dev);

	while (!__atomic_load_n(&ct->c->stop_fsync, __ATOMIC_SEQ_CST)) {
		int ret = pc_fsync(dev, &seq);

		if (ret) {
			snprintf(ct->err, sizeof(ct->err), "pc_fsync = %d", ret);
			break;
		}
		ct->fsyncs++;
		usleep(2000);
	}
	return NULL;
}

static void conc_run(uint32_t folio, uint32_t cache_block, uint64_t cache_size, unsigned int delay_us)
{
	struct blk_geometry g = geo_of(8 * MiB, 512, 512, 64 * KiB);
	struct conc_thread ct[CONC_THREADS + 1];
	struct conc *c = &conc;
	uint64_t sbase, swords;
	uint8_t *store;

	setup(&g, cache_size, folio, cache_block);
	memset(c, 0, sizeof(*c));
	c->region_len = 2 * MiB;
	c->nr_writes = 400;
	c->max_len = 24 * KiB;
	c->owner = talloc(((size_t)CONC_THREADS * (size_t)c->nr_writes + 2) * sizeof(uint32_t));
	swords = 2 * c->region_len / 8;
	for (int t = 0; t < CONC_THREADS; t++)
		c->last[t] = talloc((swords) * sizeof(uint32_t));
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, delay_us);
	fake_set_seed(fb, 42);

	memset(ct, 0, sizeof(ct));
	for (int t = 0; t <= CONC_THREADS; t++) {
		ct[t].idx = t;
		ct[t].c = c;
		if (t < CONC_PRIVATE)
			ct[t].priv = talloc(c->region_len);
		pthread_create(&ct[t].t, NULL, t < CONC_THREADS ? conc_writer : conc_fsyncer, &ct[t]);
	}
	for (int t = 0; t < CONC_THREADS; t++)
		pthread_join(ct[t].t, NULL);
	__atomic_store_n(&c->stop_fsync, true, __ATOMIC_SEQ_CST);
	pthread_join(ct[CONC_THREADS].t, NULL);
	for (int t = 0; t <= CONC_THREADS; t++)
		cr_assert_eq(ct[t].err[0], 0, "thread %d: %s", t, ct[t].err);

	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_pending(fb), 0, "fsync returned with I/O in flight");
	cr_assert_eq(dirty_bytes(), 0);

	/* private regions: exact */
	store = fake_store(fb);
	for (int t = 0; t < CONC_PRIVATE; t++)
		expect_same(store + (uint64_t)t * c->region_len, ct[t].priv, c->region_len,
			    (uint64_t)t * c->region_len, "private region in the store");
	/* shared region: each word from the last write of some thread that covered it */
	sbase = CONC_PRIVATE * c->region_len;
	for (uint64_t w = 0; w < swords; w++) {
		uint64_t v, a = sbase + w * 8;
		uint32_t id, any = 0;

		memcpy(&v, store + a, 8);
		for (int t = CONC_PRIVATE; t < CONC_THREADS; t++)
			any |= c->last[t][w];
		if (!v) {
			cr_assert_eq(any, 0, "word at %llu was written but is zero",
				     (unsigned long long)a);
			continue;
		}
		id = (uint32_t)(v >> 32);
		cr_assert_eq((uint32_t)v, (uint32_t)(a >> 3), "word at %llu holds another address",
			     (unsigned long long)a);
		cr_assert(id > 0 && id <= c->next_id, "word at %llu: bad id %u",
			  (unsigned long long)a, id);
		cr_assert_geq(c->owner[id], CONC_PRIVATE, "word at %llu from a private writer",
			      (unsigned long long)a);
		cr_assert_eq(c->last[c->owner[id]][w], id,
			     "word at %llu holds write %u, but thread %u wrote it last with %u "
			     "(stale data)", (unsigned long long)a, id, c->owner[id],
			     c->last[c->owner[id]][w]);
	}
	/* the cache and the backend agree byte for byte */
	memcpy(model, store, dev_size);
	verify_cache(0, dev_size);
	cr_assert_eq(fake_overlaps(fb), 0,
		     "%u writes were submitted over a block still being written",
		     fake_overlaps(fb));
	for (int t = 0; t < CONC_THREADS; t++)
		tfree(c->last[t]);
	for (int t = 0; t < CONC_PRIVATE; t++)
		tfree(ct[t].priv);
	tfree(c->owner);
}

TEST_FIX_SLOW(concurrency, deferred_writers_4k_blocks)
{
	conc_run(16 * KiB, 0, 1 * MiB, 100);
}

TEST_FIX_SLOW(concurrency, deferred_writers_512_blocks_4k_folios)
{
	conc_run(4 * KiB, 512, 256 * KiB, 50);
}

TEST_FIX_SLOW(concurrency, deferred_writers_64k_folios_big_cache)
{
	conc_run(64 * KiB, 0, 16 * MiB, 200);
}

/*
 * Read-modify-write races: two writers fill different bytes of the same
 * fresh blocks (each needs the block read first) while a reader fetches the
 * same blocks and an fsync thread writes them back, with late out-of-order
 * completions and eviction. Disjoint bytes make the result deterministic;
 * the reader may see each written byte old or new, nothing else.
 */
#define RMW_BLOCKS 256

#define RMW_WRITERS 4	/* writer k fills bytes [200k, 200k+100) of every block */

struct rmw_thread {
	pthread_t t;
	int kind;		/* < RMW_WRITERS: writer; then a reader and an fsync thread */
	bool *stop;
	char err[200];
};

static void *rmw_main(void *arg)
{
	struct rmw_thread *rt = arg;
	uint8_t buf[16 * 1024];
	unsigned int seed = 5;

	if (rt->kind < RMW_WRITERS) {
		uint64_t off = 200 * (uint64_t)rt->kind;

		/* all in the same order: they meet on every block */
		for (int k = 0; k < RMW_BLOCKS; k++) {
			uint64_t p = (uint64_t)k * 4096 + off;
			ssize_t r;

			fill(buf, 100, p, 2 + (unsigned int)rt->kind);
			r = pc_write(dev, buf, 100, p);
			if (r != 100) {
				snprintf(rt->err, sizeof(rt->err), "pc_write(%llu) = %zd",
					 (unsigned long long)p, r);
				break;
			}
		}
	} else if (rt->kind == RMW_WRITERS) {
		while (!__atomic_load_n(rt->stop, __ATOMIC_SEQ_CST) && !rt->err[0]) {
			uint64_t p = ((uint64_t)rand_r(&seed) % (RMW_BLOCKS - 3)) * 4096;
			ssize_t r = pc_read(dev, buf, sizeof(buf), p);

			if (r != (ssize_t)sizeof(buf)) {
				snprintf(rt->err, sizeof(rt->err), "pc_read = %zd", r);
				break;
			}
			for (size_t i = 0; i < sizeof(buf); i++) {
				uint64_t a = p + i, o = a % 4096;
				uint8_t v = buf[i];
				bool ok = v == pat(a, 1) ||
					  (o < 200 * RMW_WRITERS && o % 200 < 100 &&
					   v == pat(a, 2 + (unsigned int)(o / 200)));

				if (!ok) {
					snprintf(rt->err, sizeof(rt->err),
						 "reader: byte %llu is 0x%02x: neither old nor new",
						 (unsigned long long)a, v);
					break;
				}
			}
		}
	} else {
		pc_errseq_t seq = pc_errseq_sample(dev);

		while (!__atomic_load_n(rt->stop, __ATOMIC_SEQ_CST)) {
			int ret = pc_fsync(dev, &seq);

			if (ret) {
				snprintf(rt->err, sizeof(rt->err), "pc_fsync = %d", ret);
				break;
			}
			usleep(1000);
		}
	}
	return NULL;
}

TEST_FIX_SLOW(concurrency, partial_writes_race_reads_of_same_blocks)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 32 * KiB);
	struct rmw_thread rt[RMW_WRITERS + 2];
	bool stop = false;

	setup(&g, 32 * 16 * KiB, 16 * KiB, 0);
	store_fill(0, dev_size, 1);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 100);
	memset(rt, 0, sizeof(rt));
	for (int i = 0; i < RMW_WRITERS + 2; i++) {
		rt[i].kind = i;
		rt[i].stop = &stop;
		pthread_create(&rt[i].t, NULL, rmw_main, &rt[i]);
	}
	for (int i = 0; i < RMW_WRITERS; i++)
		pthread_join(rt[i].t, NULL);
	__atomic_store_n(&stop, true, __ATOMIC_SEQ_CST);
	pthread_join(rt[RMW_WRITERS].t, NULL);
	pthread_join(rt[RMW_WRITERS + 1].t, NULL);
	for (int i = 0; i < RMW_WRITERS + 2; i++)
		cr_assert_eq(rt[i].err[0], 0, "thread %d: %s", i, rt[i].err);
	for (int k = 0; k < RMW_BLOCKS; k++)
		for (int w = 0; w < RMW_WRITERS; w++)
			model_fill((uint64_t)k * 4096 + 200 * (uint64_t)w, 100, 2 + (unsigned int)w);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	verify_cache(0, dev_size);
	cr_assert_eq(fake_overlaps(fb), 0);
}

/* ======================================================================
 * Bounds, direct I/O, discard
 * ====================================================================== */

TEST_FIX(bounds, write_and_read_at_the_end)
{
	struct blk_geometry g = geo_of(1 * MiB, 4096, 4096, 64 * KiB);
	uint8_t buf[8192];
	ssize_t r;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	fill(buf, sizeof(buf), dev_size, 2);
	cr_assert_eq(pc_write(dev, buf, 4096, dev_size), -ENOSPC);
	cr_assert_eq(pc_write(dev, buf, 1, dev_size), -ENOSPC);
	cr_assert_eq(pc_write(dev, buf, 4096, dev_size + 8192), -ENOSPC);
	fake_log_clear(fb);
	fill(buf, sizeof(buf), dev_size - 4096, 2);
	r = pc_write(dev, buf, 8192, dev_size - 4096);
	cr_assert_eq(r, 4096, "write across the end = %zd", r);
	model_fill(dev_size - 4096, 4096, 2);
	fill(buf, 100, dev_size - 50, 3);
	r = pc_write(dev, buf, 100, dev_size - 50);
	cr_assert_eq(r, 50, "unaligned write across the end = %zd", r);
	model_fill(dev_size - 50, 50, 3);
	cr_assert_eq(fake_log_count(fb, R), 0, "%s", log_text());

	cr_assert_eq(pc_read(dev, buf, 4096, dev_size), 0);
	cr_assert_eq(pc_read(dev, buf, 1, dev_size + 1), 0);
	cr_assert_eq(pc_read(dev, buf, 4096, dev_size + 1 * GiB), 0);
	r = pc_read(dev, buf, 8192, dev_size - 100);
	cr_assert_eq(r, 100);
	expect_same(buf, model + dev_size - 100, 100, dev_size - 100, "read across the end");
	cr_assert_eq(do_fsync(), 0);
	{
		struct rng e[] = { { dev_size - 4096, 4096 } };
		expect_ops(W, e, 1, "fsync of the last block");
	}
	verify_store(0, dev_size);
	/* 0-byte requests */
	cr_assert_eq(pc_read(dev, buf, 0, 0), 0);
	cr_assert_geq(pc_write(dev, buf, 0, 0), 0);
}

TEST_FIX(bounds, direct_io_rules_and_split)
{
	struct blk_geometry g = geo_of(1 * MiB, 512, 512, 64 * KiB);
	uint8_t *buf = talloc(256 * KiB);
	struct rng got[16];
	ssize_t r;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	cr_assert_eq(pc_direct_write(dev, buf, 512, 100), -EINVAL);
	cr_assert_eq(pc_direct_write(dev, buf, 100, 512), -EINVAL);
	cr_assert_eq(pc_direct_read(dev, buf, 512, 256), -EINVAL);
	cr_assert_eq(pc_direct_read(dev, buf, 1000, 0), -EINVAL);
	cr_assert_eq(pc_direct_write(dev, buf, 512, dev_size), -ENOSPC);
	cr_assert_eq(pc_direct_read(dev, buf, 512, dev_size), 0);
	fill(buf, 4096, dev_size - 512, 2);
	cr_assert_eq(pc_direct_write(dev, buf, 4096, dev_size - 512), 512);
	model_fill(dev_size - 512, 512, 2);
	cr_assert_eq(pc_direct_read(dev, buf, 4096, dev_size - 512), 512);
	expect_same(buf, model + dev_size - 512, 512, dev_size - 512, "direct read at the end");

	/* 256K with max_io 64K: four I/Os each way, straight to the backend */
	fake_log_clear(fb);
	fill(buf, 256 * KiB, 512, 3);
	r = pc_direct_write(dev, buf, 256 * KiB, 512);
	cr_assert_eq(r, (ssize_t)(256 * KiB));
	model_fill(512, 256 * KiB, 3);
	cr_assert_eq(logged(W, got, 16), 4, "%s", log_text());
	/* pieces of a split go out together: none is marked for the caller's thread */
	for (size_t i = 0; i < fake_log_len(fb); i++) {
		struct fake_op fo;

		cr_assert(fake_log_get(fb, i, &fo));
		cr_assert_eq(fo.flags, 0, "split piece %zu flagged %#x", i, fo.flags);
	}
	verify_store(0, dev_size);
	/* one piece: the caller waits for it anyway (BLK_IO_WAITED) */
	fake_log_clear(fb);
	cr_assert_eq(pc_direct_write(dev, buf, 64 * KiB, 512), (ssize_t)(64 * KiB));
	cr_assert_eq(fake_log_len(fb), 1, "%s", log_text());
	{
		struct fake_op fo;

		cr_assert(fake_log_get(fb, 0, &fo));
		cr_assert_eq(fo.flags, BLK_IO_WAITED);
	}
	memset(buf, 0, 256 * KiB);
	r = pc_direct_read(dev, buf, 256 * KiB, 512);
	cr_assert_eq(r, (ssize_t)(256 * KiB));
	cr_assert_eq(logged(R, got, 16), 4, "%s", log_text());
	expect_same(buf, model + 512, 256 * KiB, 512, "direct read");
	verify_cache(0, dev_size);
	tfree(buf);
}

TEST_FIX(bounds, direct_write_after_buffered)
{
	struct blk_geometry g = geo_of(1 * MiB, 512, 512, 64 * KiB);
	uint8_t *buf = talloc(64 * KiB);
	long wb, dw;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(0, 64 * KiB, 2);		/* dirty, cached */
	do_write(100 * KiB + 7, 100, 3);	/* a partial block, dirty */
	fake_log_clear(fb);
	fill(buf, 8 * KiB, 4 * KiB + 512, 4);
	cr_assert_eq(pc_direct_write(dev, buf, 8 * KiB, 4 * KiB + 512), (ssize_t)(8 * KiB));
	model_fill(4 * KiB + 512, 8 * KiB, 4);
	/* the dirty data under it went out first, then the direct data */
	wb = fake_log_find_overlap(fb, 0, W, 4 * KiB + 512, 8 * KiB);
	dw = fake_log_find(fb, 0, W, 4 * KiB + 512, 8 * KiB);
	cr_assert_neq(dw, -1, "%s", log_text());
	cr_assert(wb == dw || wb < dw, "%s", log_text());
	cr_assert_eq(fake_log_find_overlap(fb, (size_t)dw + 1, W, 4 * KiB + 512, 8 * KiB), -1,
		     "cached data written over the direct write; %s", log_text());
	/* both paths agree */
	verify_cache(0, 128 * KiB);
	memset(buf, 0, 64 * KiB);
	cr_assert_eq(pc_direct_read(dev, buf, 64 * KiB, 0), (ssize_t)(64 * KiB));
	expect_same(buf, model, 64 * KiB, 0, "direct read after direct write");
	/* a direct write over the dirty partial block too */
	fill(buf, 4096, 100 * KiB - 512, 5);
	cr_assert_eq(pc_direct_write(dev, buf, 4096, 100 * KiB - 512), 4096);
	model_fill(100 * KiB - 512, 4096, 5);
	verify_cache(96 * KiB, 8 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	tfree(buf);
}

/* The daemon never sees the user's buffer address: any buffer must work. */
TEST_FIX(bounds, direct_io_misaligned_buffer)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 64 * KiB);
	uint8_t *mem = talloc(256 * KiB + 8), *buf = mem + 3;

	g.dma_align = 4096;
	setup(&g, 1 * MiB, 16 * KiB, 0);
	fill(buf, 200 * KiB, 1536, 2);
	cr_assert_eq(pc_direct_write(dev, buf, 200 * KiB, 1536), (ssize_t)(200 * KiB));
	model_fill(1536, 200 * KiB, 2);
	verify_store(0, dev_size);
	memset(mem, 0, 256 * KiB + 8);
	cr_assert_eq(pc_direct_read(dev, buf, 200 * KiB, 1536), (ssize_t)(200 * KiB));
	expect_same(buf, model + 1536, 200 * KiB, 1536, "direct read into a misaligned buffer");
	verify_cache(0, 256 * KiB);
	tfree(mem);
}

TEST_FIX(bounds, direct_read_sees_dirty_data)
{
	struct blk_geometry g = geo_of(1 * MiB, 4096, 4096, 64 * KiB);
	uint8_t *buf = talloc(64 * KiB);

	setup(&g, 1 * MiB, 16 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(10 * KiB, 20 * KiB, 2);
	cr_assert_eq(pc_direct_read(dev, buf, 64 * KiB, 0), (ssize_t)(64 * KiB));
	expect_same(buf, model, 64 * KiB, 0, "direct read of dirty cached data");
	verify_cache(0, 64 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
	tfree(buf);
}

/*
 * Discarding blocks whose write is in flight: the discard must reach the
 * backend after that write completes, or the old data lands over the zeros.
 */
TEST_FIX(bounds, discard_waits_for_writeback_in_flight)
{
	struct blk_geometry g = geo_of(1 * MiB, 4096, 4096, 64 * KiB);
	struct fsync_thread ft = { 0 };
	struct zero_arg zt = { 0 };
	struct fake_op e;
	size_t n;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	do_write(0, 64 * KiB, 2);
	fake_set_mode(fb, FAKE_MANUAL);
	pthread_create(&ft.t, NULL, fsync_main, &ft);
	cr_assert(fake_wait_pending(fb, 1, 5000), "fsync submitted nothing");
	fake_wait_quiet(fb, 50, 2000);
	pthread_create(&zt.t, NULL, discard_main, &zt);
	fake_wait_quiet(fb, 100, 2000);
	for (int rounds = 0; !(__atomic_load_n(&ft.done, __ATOMIC_SEQ_CST) &&
			       __atomic_load_n(&zt.done, __ATOMIC_SEQ_CST)); rounds++) {
		cr_assert_lt(rounds, 2000, "never finished; %s", log_text());
		fake_complete_all(fb, true);
		fake_wait_quiet(fb, 20, 1000);
	}
	pthread_join(ft.t, NULL);
	pthread_join(zt.t, NULL);
	cr_assert_eq(zt.ret, 0);
	memset(model, 0, 64 * KiB);
	n = fake_log_len(fb);
	for (size_t i = 0; i < n; i++) {
		cr_assert(fake_log_get(fb, i, &e));
		if (e.op == BLK_DISCARD)
			cr_assert_eq(e.inflight_writes, 0,
				     "DISCARD submitted while a write of the range was in flight; %s",
				     log_text());
	}
	fake_set_mode(fb, FAKE_INLINE);
	verify_cache(0, 128 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

static void zero_case(bool discard)
{
	struct blk_geometry g = geo_of(2 * MiB, 512, 512, 64 * KiB);
	uint8_t *buf = talloc(128 * KiB);
	unsigned int op = discard ? FAKE_OP(BLK_DISCARD) : FAKE_OP(BLK_WRITE_ZEROES);
	int (*zero)(struct pc_dev *, uint64_t, uint64_t) = discard ? pc_discard : pc_write_zeroes;
	long z;

	setup(&g, 1 * MiB, 16 * KiB, 0);
	do_write(0, 1 * MiB, 2);
	cr_assert_eq(do_fsync(), 0);
	/* clean cached data */
	fake_log_clear(fb);
	cr_assert_eq(zero(dev, 64 * KiB, 128 * KiB), 0);
	memset(model + 64 * KiB, 0, 128 * KiB);
	cr_assert_geq(fake_log_count_range(fb, op, 64 * KiB, 128 * KiB), 1, "%s", log_text());
	verify_cache(0, 1 * MiB);
	cr_assert_eq(pc_direct_read(dev, buf, 128 * KiB, 64 * KiB), (ssize_t)(128 * KiB));
	expect_same(buf, model + 64 * KiB, 128 * KiB, 64 * KiB, "direct read after zeroing");
	verify_store(0, dev_size);
	/* dirty cached data: must not come back at fsync */
	do_write(1 * MiB, 64 * KiB, 3);
	do_write(1 * MiB + 70 * KiB + 3, 1000, 4);
	do_write(1 * MiB + 80 * KiB, 4096, 5);	/* the cache block the range ends in */
	fake_log_clear(fb);
	cr_assert_eq(zero(dev, 1 * MiB + 16 * KiB, 64 * KiB + 512), 0);
	memset(model + 1 * MiB + 16 * KiB, 0, 64 * KiB + 512);
	verify_cache(1 * MiB, 128 * KiB);
	z = fake_log_find_overlap(fb, 0, op, 1 * MiB + 16 * KiB, 64 * KiB + 512);
	cr_assert_neq(z, -1, "%s", log_text());
	cr_assert_eq(do_fsync(), 0);
	/*
	 * Blocks wholly inside the range are never written after it; the cache
	 * block the range ends in (4K, logical blocks 512) was zeroed in the
	 * cache over the range and may go out with those zeros.
	 */
	cr_assert_eq(fake_log_find_overlap(fb, (size_t)z + 1, W, 1 * MiB + 16 * KiB, 64 * KiB),
		     -1, "dirty data written over the zeroed range; %s", log_text());
	verify_store(0, dev_size);
	/* ranges must be lbs-aligned and inside */
	cr_assert_lt(zero(dev, 100, 512), 0);
	cr_assert_lt(zero(dev, 0, 100), 0);
	cr_assert_lt(zero(dev, dev_size - 512, 1024), 0);
	tfree(buf);
}

/*
 * A discard that cuts through cache blocks (4K, logical blocks 512) whose
 * writeback fails. It used to write the cut blocks back first, ignore the
 * failure, leave the still-dirty blocks cached, return 0, and serve (and
 * later write) the old bytes of the range. Now the cut blocks are zeroed in
 * the cache over the range, as truncate_bdev_range() does: the range reads
 * as zeros at once, and no retry brings the old bytes back.
 */
TEST_FIX(bounds, discard_cut_blocks_failing_writeback)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	struct fake_fault ft = { .op_mask = W, .err = -EIO, .persistent = true };

	setup(&g, 8 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	store_fill(0, dev_size, 1);
	do_write(0, 16 * KiB, 2);			/* blocks 0-3 dirty */
	fake_fault_set(fb, &ft);
	cr_assert_eq(pc_discard(dev, 512, 4608), 0);	/* [512, 5120): cuts blocks 0 and 1 */
	memset(model + 512, 0, 4608);
	verify_cache(0, 16 * KiB);
	cr_assert_eq(do_fsync(), -EIO, "the blocks' write failure belongs to fsync");
	fake_fault_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, 64 * KiB);
	verify_cache(0, 16 * KiB);
}

/*
 * A partial block the range cuts through keeps bytes outside it: it is
 * completed (its rest read) before anything changes, and when that read
 * fails the call fails with the error and changes nothing.
 */
TEST_FIX(bounds, discard_cut_partial_block_read_fails)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	struct fake_fault ft = { .op_mask = R, .err = -EIO, .persistent = true };
	struct pc_stats st;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	store_fill(0, dev_size, 1);
	do_write(100, 100, 2);				/* block 0 partial: [100, 200) */
	fake_fault_set(fb, &ft);
	fake_log_clear(fb);
	cr_assert_eq(pc_discard(dev, 1024, 4096), -EIO);	/* [1024, 5120) */
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_DISCARD)), 0, "%s", log_text());
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dirty_bytes, 4096);
	fake_fault_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, 64 * KiB);
	/* and with the read working, the same discard keeps [100, 200) */
	do_write(100, 100, 3);
	cr_assert_eq(pc_discard(dev, 1024, 4096), 0);
	memset(model + 1024, 0, 4096);
	verify_cache(0, 16 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, 64 * KiB);
}

/* A device that grows and shrinks: the new end holds, data past it is gone. */
TEST_FIX(bounds, set_size_grow_and_shrink)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	struct blk_geometry got;
	uint8_t buf[8192];

	setup(&g, 8 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_cache_block(dev), 4096);
	cr_assert_eq(pc_dev_set_size(dev, 3 * MiB + 512), -EINVAL, "not a cache block multiple");
	cr_assert_eq(pc_dev_set_size(dev, 0), -EINVAL);
	do_write(2 * MiB - 8192, 16384, 2);		/* across the future end, dirty */
	cr_assert_eq(pc_dev_set_size(dev, 2 * MiB), 0);
	memset(model + 2 * MiB, 0, 8192);	/* dropped, never written: the device's zeros */
	pc_dev_geometry(dev, &got);
	cr_assert_eq(got.size, 2 * MiB);
	cr_assert_eq(pc_write(dev, buf, 100, 2 * MiB), -ENOSPC);
	cr_assert_eq(pc_read(dev, buf, 8192, 2 * MiB - 4096), 4096, "read across the new end");
	cr_assert_eq(do_fsync(), 0);
	/* only what lies inside went out */
	cr_assert_eq(fake_log_find_overlap(fb, 0, W, 2 * MiB, 8192), -1, "%s", log_text());
	verify_store(0, 2 * MiB);
	/* grow again: the old space reads as the device holds it */
	cr_assert_eq(pc_dev_set_size(dev, 4 * MiB), 0);
	cr_assert_eq(pc_read(dev, buf, 8192, 2 * MiB), 8192);
	expect_same(buf, model + 2 * MiB, 8192, 2 * MiB, "past the old end after growing");
	do_write(4 * MiB - 4096, 4096, 3);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

/*
 * A shrink the storage already made (pc_dev_shrink_drop): the dirty blocks
 * past the new end are dropped and counted, the dirty ones inside stay.
 */
TEST_FIX(bounds, shrink_drop_counts_dirty)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	struct pc_stats st;
	uint64_t dropped = 1;

	setup(&g, 8 * MiB, 64 * KiB, 0);
	cr_assert_eq(pc_dev_shrink_drop(dev, 3 * MiB + 512, &dropped), -EINVAL);
	cr_assert_eq(dropped, 0);
	do_write(2 * MiB - 8192, 16384, 2);	/* 8 KiB inside, 8 KiB past the new end */
	do_write(3 * MiB, 4096, 3);		/* past it */
	cr_assert_eq(pc_dev_shrink_drop(dev, 2 * MiB, &dropped), 0);
	cr_assert_eq(dropped, 8192 + 4096);
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dropped_bytes, 8192 + 4096);
	cr_assert_eq(st.dirty_bytes, 8192, "the dirty blocks inside stay");
	memset(model + 2 * MiB, 0, 8192);	/* dropped, never written */
	memset(model + 3 * MiB, 0, 4096);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_find_overlap(fb, 0, W, 2 * MiB, 2 * MiB), -1, "%s", log_text());
	verify_store(0, 2 * MiB);
	/* a grow through it drops nothing */
	cr_assert_eq(pc_dev_shrink_drop(dev, 4 * MiB, &dropped), 0);
	cr_assert_eq(dropped, 0);
	pc_dev_stats(dev, &st);
	cr_assert_eq(st.dropped_bytes, 8192 + 4096);
}

TEST_FIX(bounds, discard_reads_zeros) { zero_case(true); }
TEST_FIX(bounds, write_zeroes_reads_zeros) { zero_case(false); }

/* ======================================================================
 * The background flusher (the only tests that start it)
 * ====================================================================== */

/* Dirty or under writeback (a block leaves the dirty gauge when its write starts). */
static uint64_t unwritten_bytes(void)
{
	struct pc_stats st;

	pc_dev_stats(dev, &st);
	return st.dirty_bytes + st.writeback_bytes;
}

/* Wait up to @timeout_ms until at most @at_most bytes are unwritten; false (and says so) if not. */
static bool wait_clean(uint64_t at_most, unsigned int timeout_ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)timeout_ms * 1000000, left;

	while ((left = unwritten_bytes()) > at_most && blk_now_ns() < end)
		usleep(10 * 1000);
	if (left <= at_most)
		return true;
	cr_log_error("wait_clean: %llu bytes unwritten after %u ms (want at most %llu)",
		     (unsigned long long)left, timeout_ms, (unsigned long long)at_most);
	return false;
}

TEST_FIX(flusher, expired_data_written)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	struct pc_cache_params p = {
		.size = 4 * MiB, .folio_size = 64 * KiB, .min_block = 512,
		.dirty_background = 2 * MiB, .dirty_limit = 3 * MiB, .dirty_expire_ms = 100,
	};

	setup_params(&g, &p, 0);
	cr_assert_eq(pc_cache_start(pc), 0);
	do_write(4096 + 10, 64 * KiB, 2);
	cr_assert(wait_clean(0, WAIT_MS), "the flusher did not write expired data");
	verify_store(0, dev_size);
	fake_log_clear(fb);
	cr_assert_eq(do_fsync(), 0);
	cr_assert_eq(fake_log_count(fb, W), 0, "%s", log_text());
}

TEST_FIX(flusher, above_background)
{
	struct blk_geometry g = geo_of(8 * MiB, 4096, 4096, 256 * KiB);
	struct pc_cache_params p = {
		.size = 4 * MiB, .folio_size = 64 * KiB, .min_block = 512,
		.dirty_background = 512 * KiB, .dirty_limit = 2 * MiB, .dirty_expire_ms = 600000,
	};

	setup_params(&g, &p, 0);
	fake_set_mode(fb, FAKE_DEFERRED);
	cr_assert_eq(pc_cache_start(pc), 0);
	write_seq(0, 6 * MiB, 128 * KiB, 2);	/* writers throttle at the limit */
	cr_assert(wait_clean(512 * KiB, WAIT_MS), "dirty stays at %llu above background",
		  (unsigned long long)unwritten_bytes());
	read_seq(0, 6 * MiB, 256 * KiB);
	cr_assert_eq(do_fsync(), 0);
	verify_store(0, dev_size);
}

TEST_FIX(flusher, failing_device_does_not_block_others)
{
	failing_neighbour_case(true);
}
