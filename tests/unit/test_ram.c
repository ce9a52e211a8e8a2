// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ram.c - the ram and null backends through the contract
 * (backend.h), the backend registry, and the blk_param_* helpers.
 * Backends are opened from hand-built struct blk_params, as core/ would
 * after parsing a config.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "helpers.h"

#define TiB (1ull << 40)

struct test_io {
	struct blk_io io;	/* must come first */
	int calls;
	int res;
};

static void test_end_io(struct blk_io *io, int res)
{
	struct test_io *t = (struct test_io *)io;

	t->calls++;
	t->res = res;
}

/* Submit and return end_io's result; every op here completes inline. */
static int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		 const struct iovec *iov, int iovcnt)
{
	struct test_io t = {
		.io = { .op = op, .pos = pos, .len = len, .iov = iov, .iovcnt = iovcnt,
			.end_io = test_end_io },
	};
	int ret = blk_submit(be, &t.io);

	cr_assert_eq(ret, 0, "submit op %d pos %llu len %llu: %d", op,
		     (unsigned long long)pos, (unsigned long long)len, ret);
	cr_assert_eq(t.calls, 1, "end_io called %d times", t.calls);
	return t.res;
}

static int do_rw(struct blk_backend *be, enum blk_op op, uint64_t pos, void *buf, uint64_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return do_io(be, op, pos, len, &iov, 1);
}

struct test_dev {
	struct blk_params p;
	char err[256];
};

static struct blk_backend *open_geo(struct test_dev *td, const char *backend,
				    uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io)
{
	const struct blk_backend_ops *ops = blk_backend_find(backend);

	cr_assert_not_null(ops, "backend %s", backend);
	memset(td, 0, sizeof(*td));
	td->p.file = "test.conf";
	td->p.line = 3;
	td->p.dev = "ram0";
	td->p.geo.size = size;
	td->p.geo.lbs = lbs;
	td->p.geo.pbs = pbs;
	td->p.geo.max_io = max_io;
	td->p.err = td->err;
	td->p.errlen = sizeof(td->err);
	return ops->open(&td->p, NULL);
}

static struct blk_backend *open_ok(struct test_dev *td, const char *backend,
				   uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io)
{
	struct blk_backend *be = open_geo(td, backend, size, lbs, pbs, max_io);

	cr_assert(!IS_ERR_OR_NULL(be), "open %s: %s", backend, td->err);
	return be;
}

/* ---- registry ---- */

Test(registry, find_and_names)
{
	cr_assert_not_null(blk_backend_find("ram"));
	cr_assert_str_eq(blk_backend_find("ram")->name, "ram");
	cr_assert_str_eq(blk_backend_find("null")->name, "null");
	cr_assert_null(blk_backend_find("nope"));
	cr_assert_null(blk_backend_find(""));
	cr_assert_null(blk_backend_find(NULL));
	cr_assert_not_null(blk_backend_find("ram")->keys);
	cr_assert_null(blk_backend_find("ram")->keys[0]);
	cr_assert(!blk_backend_find("ram")->is_filter);
}

/* Every name listed is found, and on the right list. */
static void check_name_list(const char *list, bool filters)
{
	char buf[256], *save = NULL, *name;
	int n = 0;

	cr_assert_lt(strlen(list), sizeof(buf));
	strcpy(buf, list);
	for (name = strtok_r(buf, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
		const struct blk_backend_ops *ops = blk_backend_find(name);

		cr_assert_not_null(ops, "\"%s\" listed but not found", name);
		cr_assert_eq(ops->is_filter, filters, "%s", name);
		n++;
	}
	if (!filters)
		cr_assert_geq(n, 2);
}

Test(registry, name_lists)
{
	const char *b = blk_backend_names();

	cr_assert_eq(strncmp(b, "ram, null", 9), 0, "backends: \"%s\"", b);
	check_name_list(b, false);
	check_name_list(blk_filter_names(), true);
	cr_assert_eq(blk_backend_names(), b, "a static string");
}

/* ---- ram: open and geometry ---- */

Test(ram, geometry_defaults)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 0, 0, 0);
	struct blk_geometry g;

	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1 * MiB);
	cr_assert_eq(g.lbs, 512);
	cr_assert_eq(g.pbs, 512);
	cr_assert_eq(g.io_min, 512);
	cr_assert_eq(g.max_io, 1 * MiB);
	cr_assert_eq(g.io_opt, 1 * MiB);
	cr_assert_eq(g.dma_align, 1);
	be->ops->close(be);

	be = open_ok(&td, "ram", 64 * MiB, 4096, 16384, 256 * KiB);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.lbs, 4096);
	cr_assert_eq(g.pbs, 16384);
	cr_assert_eq(g.io_min, 16384);
	cr_assert_eq(g.max_io, 256 * KiB);
	cr_assert_eq(g.io_opt, 256 * KiB);
	be->ops->close(be);
}

Test(ram, needs_a_size)
{
	struct test_dev td;
	struct blk_backend *be = open_geo(&td, "ram", 0, 512, 512, 0);

	cr_assert(IS_ERR(be));
	cr_assert_eq(PTR_ERR(be), -EINVAL);
	cr_assert_str_eq(td.err, "test.conf:3: size: the ram backend needs a size");
}

Test(ram, size_not_multiple_of_lbs)
{
	struct test_dev td;
	struct blk_param v[] = { { .key = "size", .value = "1000", .line = 5 } };
	struct blk_backend *be;

	memset(&td, 0, sizeof(td));
	td.p = (struct blk_params){ .file = "test.conf", .line = 3, .dev = "ram0",
		.geo = { .size = 1000, .lbs = 512 }, .v = v, .n = 1,
		.err = td.err, .errlen = sizeof(td.err) };
	be = blk_backend_find("ram")->open(&td.p, NULL);
	cr_assert(IS_ERR(be));
	cr_assert_str_eq(td.err,
		"test.conf:5: size: 1000 is not a multiple of logical_block_size (512)");
}

/* ---- ram: data ---- */

Test(ram, never_written_reads_zero)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 8 * MiB, 512, 4096, 0);
	unsigned char *buf = malloc(1 * MiB);

	memset(buf, 0xaa, 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_READ, 3 * MiB - 512, buf, 1 * MiB), 0);
	cr_assert(all_zero(buf, 1 * MiB));
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	cr_assert_eq(stat_get(be, "slab_bytes"), 0);
	free(buf);
	be->ops->close(be);
}

Test(ram, page_edges_and_iovecs)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 512, 512, 0);
	unsigned char w[3072], r[8192], pat[3072];
	struct iovec wv[3] = {
		{ .iov_base = w, .iov_len = 100 },
		{ .iov_base = w + 100, .iov_len = 0 },
		{ .iov_base = w + 100, .iov_len = 2972 },
	};
	struct iovec rv[4] = {
		{ .iov_base = r, .iov_len = 1 },
		{ .iov_base = r + 1, .iov_len = 4095 },
		{ .iov_base = r + 4096, .iov_len = 3000 },
		{ .iov_base = r + 7096, .iov_len = 1096 },
	};

	/* 3 KiB straddling the edge between pages 0 and 1. */
	fill_pattern(pat, sizeof(pat), 4096 - 1024, 1);
	memcpy(w, pat, sizeof(w));
	cr_assert_eq(do_io(be, BLK_WRITE, 4096 - 1024, sizeof(w), wv, 3), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 8192);
	cr_assert_eq(stat_get(be, "arena_pages"), 2);

	memset(r, 0xaa, sizeof(r));
	cr_assert_eq(do_io(be, BLK_READ, 0, sizeof(r), rv, 4), 0);
	cr_assert(all_zero(r, 3072));
	cr_assert_arr_eq(r + 3072, pat, sizeof(pat));
	cr_assert(all_zero(r + 6144, 2048));

	/* One sector on each side of the edge, overwriting in place. */
	memset(w, 0x5c, 1024);
	cr_assert_eq(do_rw(be, BLK_WRITE, 4096 - 512, w, 1024), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 4096 - 1024, r, 3072), 0);
	cr_assert_arr_eq(r, pat, 512);
	cr_assert(r[512] == 0x5c && r[1535] == 0x5c);
	cr_assert_arr_eq(r + 1536, pat + 1536, 1536);
	cr_assert_eq(stat_get(be, "arena_bytes"), 8192);

	/* The last sector of the device. */
	memset(w, 0x77, 512);
	cr_assert_eq(do_rw(be, BLK_WRITE, 1 * MiB - 512, w, 512), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 1 * MiB - 4096, r, 4096), 0);
	cr_assert(all_zero(r, 3584));
	cr_assert(r[3584] == 0x77 && r[4095] == 0x77);
	be->ops->close(be);
}

/* A 1 MiB write across a leaf boundary (2 MiB), in odd-sized segments. */
Test(ram, large_write_across_leaves)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 16 * MiB, 4096, 16384, 1 * MiB);
	unsigned char *w = malloc(1 * MiB), *r = malloc(1 * MiB);
	uint64_t pos = 2 * MiB - 512 * KiB;
	struct iovec wv[5];
	size_t cut[] = { 0, 1, 4097, 300000, 300001, 1 * MiB };
	int i;

	fill_pattern(w, 1 * MiB, pos, 2);
	for (i = 0; i < 5; i++) {
		wv[i].iov_base = w + cut[i];
		wv[i].iov_len = cut[i + 1] - cut[i];
	}
	cr_assert_eq(do_io(be, BLK_WRITE, pos, 1 * MiB, wv, 5), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_READ, pos, r, 1 * MiB), 0);
	cr_assert_arr_eq(r, w, 1 * MiB);
	free(w);
	free(r);
	be->ops->close(be);
}

Test(ram, flush_completes)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 512, 512, 0);

	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	be->ops->close(be);
}

static void check_zeroing_op(enum blk_op op)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 4 * MiB, 512, 4096, 0);
	unsigned char *w = malloc(64 * KiB), *r = malloc(64 * KiB);

	fill_pattern(w, 64 * KiB, 0, 3);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 64 * KiB), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 64 * KiB);

	/* Two whole pages go, and their memory with them. */
	cr_assert_eq(do_io(be, op, 4096, 8192, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 64 * KiB - 8192);
	cr_assert_eq(stat_get(be, "arena_pages"), 14);

	/* Part of a page: zeroed, kept. */
	cr_assert_eq(do_io(be, op, 16384 + 512, 1024, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 64 * KiB - 8192);

	/* Tail of page 5, all of page 6, head of page 7. */
	cr_assert_eq(do_io(be, op, 6 * 4096 - 1536, 4096 + 2048, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_pages"), 13);

	/* A range of never-written pages, and one beyond the data. */
	cr_assert_eq(do_io(be, op, 1 * MiB, 3 * MiB, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_pages"), 13);

	memset(r, 0xaa, 64 * KiB);
	cr_assert_eq(do_rw(be, BLK_READ, 0, r, 64 * KiB), 0);
	cr_assert_arr_eq(r, w, 4096);
	cr_assert(all_zero(r + 4096, 8192));
	cr_assert_arr_eq(r + 12288, w + 12288, 4096 + 512);
	cr_assert(all_zero(r + 16384 + 512, 1024));
	cr_assert_arr_eq(r + 16384 + 1536, w + 16384 + 1536, 4096 - 1536 + 4096 - 1536);
	cr_assert(all_zero(r + 6 * 4096 - 1536, 4096 + 2048));
	cr_assert_arr_eq(r + 7 * 4096 + 512, w + 7 * 4096 + 512, 64 * KiB - 7 * 4096 - 512);

	/* Rewriting a freed page reuses memory and reads back whole. */
	cr_assert_eq(do_rw(be, BLK_WRITE, 4096 + 1024, w, 512), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 4096, r, 4096), 0);
	cr_assert(all_zero(r, 1024));
	cr_assert_arr_eq(r + 1024, w, 512);
	cr_assert(all_zero(r + 1536, 4096 - 1536));

	/* Everything. */
	cr_assert_eq(do_io(be, op, 0, 4 * MiB, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	cr_assert_eq(stat_get(be, "node_bytes"), 4096);
	free(w);
	free(r);
	be->ops->close(be);
}

Test(ram, discard_frees_and_zeroes)
{
	check_zeroing_op(BLK_DISCARD);
}

Test(ram, write_zeroes_frees_and_zeroes)
{
	check_zeroing_op(BLK_WRITE_ZEROES);
}

/* Slabs whose pages are all free go back to the system. */
Test(ram, slabs_returned)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 64 * MiB, 512, 4096, 1 * MiB);
	unsigned char *w = malloc(1 * MiB);
	uint64_t pos;

	memset(w, 0x3c, 1 * MiB);
	for (pos = 0; pos < 16 * MiB; pos += 1 * MiB)
		cr_assert_eq(do_rw(be, BLK_WRITE, pos, w, 1 * MiB), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 16 * MiB);
	cr_assert_geq(stat_get(be, "slab_bytes"), 16 * MiB);
	cr_assert_leq(stat_get(be, "slab_bytes"), 18 * MiB);

	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 64 * MiB, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	cr_assert_leq(stat_get(be, "slab_bytes"), 2 * MiB);

	/* And the arena works after that. */
	cr_assert_eq(do_rw(be, BLK_WRITE, 5 * MiB, w, 1 * MiB), 0);
	memset(w, 0, 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_READ, 5 * MiB, w, 1 * MiB), 0);
	cr_assert(w[0] == 0x3c && w[1 * MiB - 1] == 0x3c);
	free(w);
	be->ops->close(be);
}

/* 16 TiB: opens at once, holds only what is written. */
Test(ram, sixteen_tib)
{
	struct test_dev td;
	double t0 = now_s();
	struct blk_backend *be = open_ok(&td, "ram", 16 * TiB, 512, 4096, 0);
	unsigned char w[8192], r[8192];

	cr_assert_lt(now_s() - t0, 0.1);
	fill_pattern(w, sizeof(w), 0, 4);
	cr_assert_eq(do_rw(be, BLK_WRITE, 16 * TiB - 4096, w, 4096), 0);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w + 4096, 4096), 0);
	cr_assert_eq(do_rw(be, BLK_WRITE, 8 * TiB + 512, w, 1024), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 3 * 4096);
	cr_assert_leq(stat_get(be, "node_bytes"), 16 * 4096);

	cr_assert_eq(do_rw(be, BLK_READ, 16 * TiB - 8192, r, 8192), 0);
	cr_assert(all_zero(r, 4096));
	cr_assert_arr_eq(r + 4096, w, 4096);
	cr_assert_eq(do_rw(be, BLK_READ, 0, r, 4096), 0);
	cr_assert_arr_eq(r, w + 4096, 4096);
	cr_assert_eq(do_rw(be, BLK_READ, 8 * TiB, r, 4096), 0);
	cr_assert(all_zero(r, 512));
	cr_assert_arr_eq(r + 512, w, 1024);
	cr_assert(all_zero(r + 1536, 4096 - 1536));

	/* Discarding the whole device visits only the nodes that exist. */
	t0 = now_s();
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 16 * TiB, NULL, 0), 0);
	cr_assert_lt(now_s() - t0, 0.5);
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	cr_assert_eq(stat_get(be, "node_bytes"), 4096);
	be->ops->close(be);
}

/*
 * Random I/O against a model: writes, reads, discards and write-zeroes of
 * random lbs-aligned ranges, each data op in 1-5 random segments.
 */
Test(ram, random_against_model)
{
	const uint64_t size = 6 * MiB, max_io = 256 * KiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, max_io);
	unsigned char *model = calloc(1, size), *buf = malloc(max_io);
	unsigned int seed = 12345;
	int step;

	for (step = 0; step < 3000; step++) {
		int kind = rand_r(&seed) % 8;
		uint64_t len = (uint64_t)(rand_r(&seed) % (max_io / 512) + 1) * 512;
		uint64_t pos = (uint64_t)(rand_r(&seed) % (size / 512)) * 512;
		struct iovec iov[5];
		int nseg = rand_r(&seed) % 5 + 1, i;
		size_t off = 0;

		if (kind >= 6)
			len *= 4;	/* longer discards */
		if (pos + len > size)
			len = size - pos;
		for (i = 0; i < nseg; i++) {
			size_t seg = i == nseg - 1 ? len - off : rand_r(&seed) % (len - off + 1);

			iov[i].iov_base = buf + off;
			iov[i].iov_len = seg;
			off += seg;
		}
		switch (kind) {
		case 0: case 1: case 2:
			fill_pattern(buf, len, pos, step);
			memcpy(model + pos, buf, len);
			cr_assert_eq(do_io(be, BLK_WRITE, pos, len, iov, nseg), 0);
			break;
		case 3: case 4: case 5:
			memset(buf, 0xaa, len);
			cr_assert_eq(do_io(be, BLK_READ, pos, len, iov, nseg), 0);
			cr_assert_arr_eq(buf, model + pos, len, "step %d read %llu+%llu", step,
					 (unsigned long long)pos, (unsigned long long)len);
			break;
		default:
			memset(model + pos, 0, len);
			cr_assert_eq(do_io(be, kind == 6 ? BLK_DISCARD : BLK_WRITE_ZEROES,
					   pos, len, NULL, 0), 0);
			break;
		}
	}
	for (uint64_t pos = 0; pos < size; pos += max_io) {
		cr_assert_eq(do_rw(be, BLK_READ, pos, buf, max_io), 0);
		cr_assert_arr_eq(buf, model + pos, max_io);
	}
	cr_assert_leq(stat_get(be, "arena_bytes"), size);
	free(model);
	free(buf);
	be->ops->close(be);
}

/*
 * Concurrency. The device (1 TiB, lbs 512):
 *   [0, 512K)      shared: every thread writes, reads, discards, zeroes at
 *                  random; contents are not checked, only survival;
 *   [768K, 1M)     private: thread t owns 32K it writes and checks;
 *   [512G, +256K)  interleaved: in every page, thread t owns sector t. In
 *                  each round the pages are discarded (which frees their
 *                  leaf and the nodes above it: nothing else lives under
 *                  them), then every thread writes its sectors at once,
 *                  racing to insert the same nodes and pages, then all of
 *                  it is checked.
 */
#define CT_THREADS	4
#define CT_ROUNDS	200
#define CT_SHARED	(512 * KiB)
#define CT_INTER	(512ull << 30)
#define CT_INTER_LEN	(256 * KiB)
#define CT_PRIV		(768 * KiB)
#define CT_PRIV_LEN	(32 * KiB)

struct ct_ctx {
	struct blk_backend *be;
	pthread_barrier_t barrier;
	int failures;
};

struct ct_thread {
	struct ct_ctx *ctx;
	int id;
};

static int ct_io(struct blk_backend *be, enum blk_op op, uint64_t pos, void *buf,
		 uint64_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct test_io t = {
		.io = { .op = op, .pos = pos, .len = len, .iov = buf ? &iov : NULL,
			.iovcnt = buf ? 1 : 0, .end_io = test_end_io },
	};

	/* No cr_assert off the main thread: count failures instead. */
	if (blk_submit(be, &t.io) || t.calls != 1)
		return -1;
	return t.res;
}

static unsigned char ct_byte(int id, int round, uint64_t pos)
{
	return (unsigned char)(id * 61 + round * 7 + (pos >> 9) + 1);
}

static void *ct_thread_fn(void *arg)
{
	struct ct_thread *th = arg;
	struct ct_ctx *ctx = th->ctx;
	unsigned char *buf = malloc(128 * KiB), *exp = malloc(128 * KiB);
	unsigned int seed = 1000 + th->id;
	int fail = 0, round;

	for (round = 0; round < CT_ROUNDS; round++) {
		uint64_t p, len, pos;
		int i;

		/* Shared region: anything goes. */
		for (i = 0; i < 8; i++) {
			int kind = rand_r(&seed) % 4;

			len = (uint64_t)(rand_r(&seed) % 64 + 1) * 512;
			pos = (uint64_t)(rand_r(&seed) % ((CT_SHARED - len) / 512 + 1)) * 512;
			if (kind == 0)
				memset(buf, th->id + 1, len);
			if (ct_io(ctx->be, kind == 0 ? BLK_WRITE : kind == 1 ? BLK_READ :
				  kind == 2 ? BLK_DISCARD : BLK_WRITE_ZEROES,
				  pos, kind < 2 ? buf : NULL, len))
				fail++;
		}

		/* Private region: written and checked by this thread alone. */
		pos = CT_PRIV + th->id * CT_PRIV_LEN;
		for (p = 0; p < CT_PRIV_LEN; p++)
			exp[p] = ct_byte(th->id, round, p);
		if (ct_io(ctx->be, BLK_WRITE, pos, exp, CT_PRIV_LEN) ||
		    ct_io(ctx->be, BLK_READ, pos, buf, CT_PRIV_LEN) ||
		    memcmp(buf, exp, CT_PRIV_LEN))
			fail++;

		/* Interleaved region: discard, then race to fill the same pages. */
		pthread_barrier_wait(&ctx->barrier);
		if (th->id == 0 && ct_io(ctx->be, BLK_DISCARD, CT_INTER, NULL, CT_INTER_LEN))
			fail++;
		pthread_barrier_wait(&ctx->barrier);
		for (p = 0; p < CT_INTER_LEN; p += 4096) {
			uint64_t s = CT_INTER + p + th->id * 512;

			memset(buf, ct_byte(th->id, round, s), 512);
			if (ct_io(ctx->be, BLK_WRITE, s, buf, 512))
				fail++;
		}
		pthread_barrier_wait(&ctx->barrier);
		for (pos = CT_INTER; pos < CT_INTER + CT_INTER_LEN; pos += 128 * KiB) {
			if (ct_io(ctx->be, BLK_READ, pos, buf, 128 * KiB))
				fail++;
			for (p = 0; p < 128 * KiB; p++) {
				int owner = (p & 4095) >> 9;
				unsigned char want = owner < CT_THREADS ?
					ct_byte(owner, round, pos + (p & ~511ull)) : 0;

				if (buf[p] != want) {
					fail++;
					break;
				}
			}
		}
		pthread_barrier_wait(&ctx->barrier);
	}
	free(buf);
	free(exp);
	__atomic_add_fetch(&ctx->failures, fail, __ATOMIC_RELAXED);
	return NULL;
}

Test(ram, concurrent_overlapping)
{
	struct test_dev td;
	struct ct_ctx ctx = { .be = open_ok(&td, "ram", 1 * TiB, 512, 4096, 128 * KiB) };
	struct ct_thread th[CT_THREADS];
	pthread_t tid[CT_THREADS];
	int i;

	pthread_barrier_init(&ctx.barrier, NULL, CT_THREADS);
	for (i = 0; i < CT_THREADS; i++) {
		th[i] = (struct ct_thread){ .ctx = &ctx, .id = i };
		cr_assert_eq(pthread_create(&tid[i], NULL, ct_thread_fn, &th[i]), 0);
	}
	for (i = 0; i < CT_THREADS; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&ctx.barrier);
	cr_assert_eq(ctx.failures, 0);

	/* The page count survived the races: discard all, and nothing is left. */
	cr_assert_leq(stat_get(ctx.be, "arena_bytes"), 1 * MiB + CT_INTER_LEN);
	cr_assert_eq(do_io(ctx.be, BLK_DISCARD, 0, 1 * TiB, NULL, 0), 0);
	cr_assert_eq(stat_get(ctx.be, "arena_bytes"), 0);
	cr_assert_eq(stat_get(ctx.be, "arena_pages"), 0);
	cr_assert_eq(stat_get(ctx.be, "node_bytes"), 4096);
	cr_assert_leq(stat_get(ctx.be, "slab_bytes"), 2 * MiB);
	ctx.be->ops->close(ctx.be);
}

/* The contract is asserted: a write not aligned to lbs aborts. */
Test(ram, misaligned_write_asserts, .signal = SIGABRT)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 4096, 4096, 0);
	unsigned char buf[4096];

	do_rw(be, BLK_WRITE, 512, buf, 4096);
}

Test(ram, write_past_max_io_asserts, .signal = SIGABRT)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 512, 512, 4096);
	unsigned char buf[8192];

	do_rw(be, BLK_WRITE, 0, buf, 8192);
}

/* ---- null ---- */

Test(null, reads_zero_writes_dropped)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "null", 1 * TiB, 512, 4096, 0);
	unsigned char w[8192], r[8192];
	struct iovec rv[2] = {
		{ .iov_base = r, .iov_len = 1000 },
		{ .iov_base = r + 1000, .iov_len = 7192 },
	};
	struct blk_geometry g;

	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1 * TiB);
	cr_assert_eq(g.pbs, 4096);
	cr_assert_eq(g.dma_align, 1);
	memset(w, 0x11, sizeof(w));
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, sizeof(w)), 0);
	memset(r, 0xaa, sizeof(r));
	cr_assert_eq(do_io(be, BLK_READ, 0, sizeof(r), rv, 2), 0);
	cr_assert(all_zero(r, sizeof(r)));
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 1 * TiB, NULL, 0), 0);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 4096, 512, NULL, 0), 0);
	be->ops->close(be);
}

Test(null, needs_a_size)
{
	struct test_dev td;
	struct blk_backend *be = open_geo(&td, "null", 0, 0, 0, 0);

	cr_assert(IS_ERR(be));
	cr_assert_str_eq(td.err, "test.conf:3: size: the null backend needs a size");
}

/* ---- params ---- */

Test(params, parse_size)
{
	static const struct { const char *s; int ret; uint64_t v; } cases[] = {
		{ "0", 0, 0 },
		{ "1", 0, 1 },
		{ "512", 0, 512 },
		{ "1K", 0, 1024 },
		{ "1k", 0, 1024 },
		{ "1KiB", 0, 1024 },
		{ "4m", 0, 4 << 20 },
		{ "2MiB", 0, 2 << 20 },
		{ "3G", 0, 3ull << 30 },
		{ "1gib", -EINVAL, 0 },
		{ "1giB", 0, 1ull << 30 },
		{ "16T", 0, 16ull << 40 },
		{ "16TiB", 0, 16ull << 40 },
		{ "0T", 0, 0 },
		{ "007", 0, 7 },
		{ "16777215T", 0, 16777215ull << 40 },
		{ "16777216T", -ERANGE, 0 },
		{ "18446744073709551615", 0, UINT64_MAX },
		{ "18446744073709551616", -ERANGE, 0 },
		{ "99999999999999999999999", -ERANGE, 0 },
		{ "18014398509481984K", -ERANGE, 0 },
		{ "", -EINVAL, 0 },
		{ "K", -EINVAL, 0 },
		{ "1KB", -EINVAL, 0 },
		{ "1KB?", -EINVAL, 0 },
		{ "1Ki", -EINVAL, 0 },
		{ "1KiBx", -EINVAL, 0 },
		{ "1P", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 },
		{ "+1", -EINVAL, 0 },
		{ " 1", -EINVAL, 0 },
		{ "1 ", -EINVAL, 0 },
		{ "1 K", -EINVAL, 0 },
		{ "1.5K", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
		{ "1KK", -EINVAL, 0 },
	};
	size_t i;
	uint64_t v;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		v = 0xdeadbeef;
		cr_assert_eq(blk_parse_size(cases[i].s, &v), cases[i].ret, "\"%s\"", cases[i].s);
		if (!cases[i].ret)
			cr_assert_eq(v, cases[i].v, "\"%s\" gave %llu", cases[i].s,
				     (unsigned long long)v);
		else
			cr_assert_eq(v, 0xdeadbeef, "\"%s\" wrote *out", cases[i].s);
	}
	cr_assert_eq(blk_parse_size(NULL, &v), -EINVAL);
}

struct param_fixture {
	struct blk_param v[4];
	struct blk_params p;
	char err[128];
};

static void param_setup(struct param_fixture *f)
{
	memset(f, 0, sizeof(*f));
	f->v[0] = (struct blk_param){ .key = "path", .value = "/dev/sdb1", .line = 8 };
	f->v[1] = (struct blk_param){ .key = "queue_depth", .value = "12x", .line = 9 };
	f->v[2] = (struct blk_param){ .key = "direct", .value = "Off", .line = 10 };
	f->v[3] = (struct blk_param){ .key = "big", .value = "16777216T", .line = 11 };
	f->p = (struct blk_params){ .file = "blkfs.conf", .line = 7, .dev = "disk0",
		.v = f->v, .n = 4, .err = f->err, .errlen = sizeof(f->err) };
}

Test(params, get_marks_used)
{
	struct param_fixture f;

	param_setup(&f);
	cr_assert_null(blk_param_get(&f.p, "nope"));
	cr_assert_null(blk_param_get(&f.p, NULL));
	cr_assert(!f.v[0].used && !f.v[1].used);
	cr_assert_str_eq(blk_param_get(&f.p, "path"), "/dev/sdb1");
	cr_assert(f.v[0].used);
	cr_assert(!f.v[1].used && !f.v[2].used);
	cr_assert_eq(blk_param_line(&f.p, "queue_depth"), 9);
	cr_assert(!f.v[1].used, "blk_param_line does not mark used");
	cr_assert_eq(blk_param_line(&f.p, "nope"), 7);
	cr_assert_eq(blk_param_line(&f.p, NULL), 7);
}

/* A filter's keys are "NAME.key" in the config; the filter asks for "key". */
Test(params, filter_prefix)
{
	struct blk_param v[] = {
		{ .key = "delay.write", .value = "10ms", .line = 12 },
		{ .key = "write", .value = "plain", .line = 13 },
		{ .key = "delay.", .value = "empty", .line = 14 },
	};
	char err[128];
	struct blk_params p = { .prefix = "delay.", .file = "blkfs.conf", .line = 7,
		.dev = "disk0", .v = v, .n = 3, .err = err, .errlen = sizeof(err) };

	cr_assert_str_eq(blk_param_get(&p, "write"), "10ms");
	cr_assert(v[0].used && !v[1].used);
	cr_assert_null(blk_param_get(&p, "delay.write"));
	cr_assert_eq(blk_param_line(&p, "write"), 12);
	cr_assert_eq(blk_param_line(&p, "read"), 7);
	blk_param_error(&p, "write", "bad");
	cr_assert_str_eq(err, "blkfs.conf:12: delay.write: bad");
	blk_param_error(&p, "read", "missing");
	cr_assert_str_eq(err, "blkfs.conf:7: delay.read: missing");
	blk_param_error(&p, NULL, "oops");
	cr_assert_str_eq(err, "blkfs.conf:7: [device disk0]: oops");
}

Test(params, error_format)
{
	struct param_fixture f;

	param_setup(&f);
	cr_assert_eq(blk_param_error(&f.p, "queue_depth", "'%s' is not a number", "12x"),
		     -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:9: queue_depth: '12x' is not a number");
	cr_assert_eq(blk_param_error(&f.p, "path", "missing"), -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:8: path: missing");
	cr_assert_eq(blk_param_error(&f.p, "size", "the ram backend needs a size"), -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:7: size: the ram backend needs a size");
	cr_assert_eq(blk_param_error(&f.p, NULL, "no backend %d", 5), -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:7: [device disk0]: no backend 5");

	/* Truncated, still a string. */
	f.p.errlen = 16;
	cr_assert_eq(blk_param_error(&f.p, "path", "a long message"), -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:8: p");
	f.p.errlen = 5;
	cr_assert_eq(blk_param_error(&f.p, "path", "x"), -EINVAL);
	cr_assert_str_eq(f.err, "blkf");

	/* No buffer: still -EINVAL. */
	f.p.err = NULL;
	f.p.errlen = 0;
	cr_assert_eq(blk_param_error(&f.p, "path", "x"), -EINVAL);
}

Test(params, size_and_bool)
{
	struct param_fixture f;
	uint64_t v;
	bool b;

	param_setup(&f);
	cr_assert_eq(blk_param_size(&f.p, "absent", 4096, &v), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(blk_param_size(&f.p, "queue_depth", 1, &v), -EINVAL);
	cr_assert(f.v[1].used);
	cr_assert_str_eq(f.err, "blkfs.conf:9: queue_depth: '12x' is not a size "
			 "(digits with an optional K, M, G or T suffix, binary as dd)");
	cr_assert_eq(blk_param_size(&f.p, "big", 1, &v), -EINVAL);
	cr_assert_str_eq(f.err, "blkfs.conf:11: big: '16777216T' is too large");

	cr_assert_eq(blk_param_bool(&f.p, "direct", true, &b), 0);
	cr_assert(!b);
	cr_assert(f.v[2].used);
	cr_assert_eq(blk_param_bool(&f.p, "absent", true, &b), 0);
	cr_assert(b);
	cr_assert_eq(blk_param_bool(&f.p, "path", true, &b), -EINVAL);
	cr_assert_str_eq(f.err,
		"blkfs.conf:8: path: '/dev/sdb1' is not yes/no/true/false/1/0/on/off");
}

Test(params, uint)
{
	struct blk_param v[] = {
		{ .key = "queue_depth", .value = "64", .line = 8 },
		{ .key = "zero", .value = "0", .line = 9 },
		{ .key = "signed", .value = "-1", .line = 10 },
		{ .key = "junk", .value = "12x", .line = 11 },
		{ .key = "huge", .value = "99999999999999999999", .line = 12 },
		{ .key = "plus", .value = "+5", .line = 13 },
	};
	char err[128];
	struct blk_params p = { .file = "blkfs.conf", .line = 7, .dev = "disk0",
		.v = v, .n = 6, .err = err, .errlen = sizeof(err) };
	unsigned int u;

	cr_assert_eq(blk_param_uint(&p, "absent", 32, 1, 1024, &u), 0);
	cr_assert_eq(u, 32);
	cr_assert_eq(blk_param_uint(&p, "queue_depth", 32, 1, 1024, &u), 0);
	cr_assert_eq(u, 64);
	cr_assert(v[0].used);
	cr_assert_eq(blk_param_uint(&p, "queue_depth", 32, 1, 63, &u), -EINVAL);
	cr_assert_str_eq(err, "blkfs.conf:8: queue_depth: '64' is not a number from 1 to 63");
	cr_assert_eq(blk_param_uint(&p, "zero", 32, 1, 1024, &u), -EINVAL);
	cr_assert_eq(blk_param_uint(&p, "zero", 32, 0, 1024, &u), 0);
	cr_assert_eq(u, 0);
	cr_assert_eq(blk_param_uint(&p, "signed", 32, 0, 1024, &u), -EINVAL);
	cr_assert_eq(blk_param_uint(&p, "junk", 32, 1, 1024, &u), -EINVAL);
	cr_assert_str_eq(err, "blkfs.conf:11: junk: '12x' is not a number from 1 to 1024");
	cr_assert_eq(blk_param_uint(&p, "huge", 32, 0, 4294967295u, &u), -EINVAL);
	cr_assert_eq(blk_param_uint(&p, "plus", 32, 0, 1024, &u), -EINVAL);
}

Test(params, parse_bool)
{
	static const char *const yes[] = { "yes", "TRUE", "1", "On" };
	static const char *const no[] = { "no", "False", "0", "OFF" };
	static const char *const bad[] = { "", "2", "y", "yes ", "onn" };
	bool b;
	size_t i;

	for (i = 0; i < 4; i++) {
		b = false;
		cr_assert_eq(blk_parse_bool(yes[i], &b), 0, "%s", yes[i]);
		cr_assert(b, "%s", yes[i]);
		cr_assert_eq(blk_parse_bool(no[i], &b), 0, "%s", no[i]);
		cr_assert(!b, "%s", no[i]);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		b = true;
		cr_assert_eq(blk_parse_bool(bad[i], &b), -EINVAL, "'%s'", bad[i]);
		cr_assert(b, "'%s' wrote *out", bad[i]);
	}
}
