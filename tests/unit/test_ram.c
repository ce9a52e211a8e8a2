// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ram.c - the ram and null backends through the contract
 * (backend.h): data, snapshots (struct blk_snap_ops), images saved and
 * loaded, the reserve; the backend registry, and the blk_param_* helpers.
 * Backends are opened from hand-built struct blk_params, as core/ would
 * after parsing a config.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <inttypes.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../backends/backends_int.h"
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
	struct blk_param v[4];
	char err[512];
};

/*
 * Open @backend with this geometry and the config keys @kv (NULL-terminated
 * key, value pairs, on lines 4, 5, ...; NULL for none).
 */
static struct blk_backend *open_geo_kv(struct test_dev *td, const char *backend,
				       uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io,
				       const char *const *kv)
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
	td->p.v = td->v;
	for (; kv && kv[0]; kv += 2) {
		cr_assert_lt(td->p.n, 4);
		td->v[td->p.n] = (struct blk_param){ .key = kv[0], .value = kv[1],
						    .line = 4 + td->p.n };
		td->p.n++;
	}
	return ops->open(&td->p, NULL);
}

static struct blk_backend *open_geo(struct test_dev *td, const char *backend,
				    uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io)
{
	return open_geo_kv(td, backend, size, lbs, pbs, max_io, NULL);
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
	cr_assert_str_eq(blk_backend_find("ram")->keys[0], "image");
	cr_assert_str_eq(blk_backend_find("ram")->keys[1], "reserve");
	cr_assert_str_eq(blk_backend_find("ram")->keys[2], "clone");
	cr_assert_null(blk_backend_find("ram")->keys[3]);
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
	/* The index went with the data, root included: an empty tree is no node. */
	cr_assert_eq(stat_get(be, "node_bytes"), 0);
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

/*
 * Poll @be's counter @name until it is at most @max. The arena thread
 * unmaps and refills in the background, so this waits for it; the deadline
 * (60 s) is only for a thread that never gets there, and giving up fails
 * the test with the last value seen.
 */
static void stat_wait_leq(struct blk_backend *be, const char *name, uint64_t max)
{
	uint64_t v = stat_get(be, name), t0 = blk_now_ms();

	while (v > max && blk_now_ms() - t0 < 60000) {
		usleep(10 * 1000);
		v = stat_get(be, name);
	}
	cr_assert_leq(v, max, "%s still %" PRIu64 " after %" PRIu64 " ms (want at most %" PRIu64
		      "; slab_bytes %" PRIu64 ", slab_spare_bytes %" PRIu64 ")", name, v,
		      blk_now_ms() - t0, max, stat_get(be, "slab_bytes"),
		      stat_get(be, "slab_spare_bytes"));
}

/* The same until @name is at least @min. */
static void stat_wait_geq(struct blk_backend *be, const char *name, uint64_t min)
{
	uint64_t v = stat_get(be, name), t0 = blk_now_ms();

	while (v < min && blk_now_ms() - t0 < 60000) {
		usleep(10 * 1000);
		v = stat_get(be, name);
	}
	cr_assert_geq(v, min, "%s still %" PRIu64 " after %" PRIu64 " ms (want at least %" PRIu64
		      ")", name, v, blk_now_ms() - t0, min);
}

/* Slabs whose pages are all free go back to the system (the reserve off). */
Test(ram, slabs_returned)
{
	static const char *const kv[] = { "reserve", "0", NULL };
	struct test_dev td;
	struct blk_backend *be = open_geo_kv(&td, "ram", 64 * MiB, 512, 4096, 1 * MiB, kv);
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
	/* The arena thread unmaps them soon after (all but the current slab). */
	stat_wait_leq(be, "slab_bytes", 2 * MiB);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 0);
	cr_assert_eq(stat_get(be, "reserve_misses"), 0);

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
	/* The index went with the data, root included: an empty tree is no node. */
	cr_assert_eq(stat_get(be, "node_bytes"), 0);
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
	cr_assert_eq(stat_get(ctx.be, "node_bytes"), 0);
	/* The current slab and the reserve's (8M) stay; the rest is unmapped soon. */
	stat_wait_leq(ctx.be, "slab_bytes", 2 * MiB + 8 * MiB);
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

/* ---- ram: snapshots ---- */

/*
 * The device's contents as a model: a version per 512-byte sector (0:
 * never written or zeroed), whose bytes are fill_pattern(sector, version).
 * A snapshot's model is a copy of the versions (2 bytes a sector).
 */
struct vmodel {
	uint64_t size;
	uint16_t *ver;
};

static void vm_init(struct vmodel *m, uint64_t size)
{
	m->size = size;
	m->ver = calloc(size / 512, sizeof(*m->ver));
	cr_assert_not_null(m->ver);
}

static uint16_t *vm_copy(const struct vmodel *m)
{
	uint16_t *c = malloc(m->size / 512 * sizeof(*c));

	cr_assert_not_null(c);
	memcpy(c, m->ver, m->size / 512 * sizeof(*c));
	return c;
}

/* The expected bytes of [pos, pos + len) (sector-aligned) under versions @ver. */
static void vm_expect(const uint16_t *ver, uint64_t pos, uint64_t len, unsigned char *out)
{
	uint64_t s;

	for (s = 0; s < len; s += 512) {
		uint16_t v = ver[(pos + s) / 512];

		if (v)
			fill_pattern(out + s, 512, pos + s, v);
		else
			memset(out + s, 0, 512);
	}
}

/* Every device of these tests takes I/O of this much (max_io). */
#define VM_IO	(256 * KiB)

/* Write [pos, pos + len) at version @v, in the device and the model. */
static void vm_write(struct blk_backend *be, struct vmodel *m, uint64_t pos, uint64_t len,
		     uint16_t v)
{
	unsigned char *buf = malloc(len);
	uint64_t s;

	cr_assert_not_null(buf);
	for (s = 0; s < len; s += 512)
		m->ver[(pos + s) / 512] = v;
	vm_expect(m->ver, pos, len, buf);
	for (s = 0; s < len; s += VM_IO) {
		uint64_t n = len - s < VM_IO ? len - s : VM_IO;

		cr_assert_eq(do_rw(be, BLK_WRITE, pos + s, buf + s, n), 0, "write %llu+%llu",
			     (unsigned long long)(pos + s), (unsigned long long)n);
	}
	free(buf);
}

static void vm_zero(struct blk_backend *be, struct vmodel *m, enum blk_op op, uint64_t pos,
		    uint64_t len)
{
	memset(&m->ver[pos / 512], 0, len / 512 * sizeof(*m->ver));
	cr_assert_eq(do_io(be, op, pos, len, NULL, 0), 0);
}

/* The device reads as @ver says, all of it. */
static void vm_check(struct blk_backend *be, const uint16_t *ver, uint64_t size, const char *what)
{
	const uint64_t chunk = VM_IO;
	unsigned char *got = malloc(chunk), *want = malloc(chunk);
	uint64_t pos;

	cr_assert(got && want);
	for (pos = 0; pos < size; pos += chunk) {
		uint64_t n = size - pos < chunk ? size - pos : chunk;

		memset(got, 0xee, n);
		cr_assert_eq(do_rw(be, BLK_READ, pos, got, n), 0);
		vm_expect(ver, pos, n, want);
		if (memcmp(got, want, n)) {
			uint64_t i = 0;

			while (got[i] == want[i])
				i++;
			cr_assert_fail("%s: differs at byte %llu (version %u there)", what,
				       (unsigned long long)(pos + i), ver[(pos + i) / 512]);
		}
	}
	free(got);
	free(want);
}

/* Pages (4 KiB) holding a sector of a version other than 0. */
static uint64_t vm_pages(const uint16_t *ver, uint64_t size)
{
	uint64_t pg, n = 0, s;

	for (pg = 0; pg < (size + 4095) / 4096; pg++)
		for (s = pg * 8; s < pg * 8 + 8 && s < size / 512; s++)
			if (ver[s]) {
				n++;
				break;
			}
	return n;
}

/* A temp directory for image files; removed with its files by tmp_done(). */
struct tmpdir {
	char dir[64];
	char path[128];
};

static const char *tmp_init(struct tmpdir *t, const char *name)
{
	snprintf(t->dir, sizeof(t->dir), "/tmp/blkfs-unit-XXXXXX");
	cr_assert_not_null(mkdtemp(t->dir));
	snprintf(t->path, sizeof(t->path), "%s/%s", t->dir, name);
	return t->path;
}

static void tmp_done(struct tmpdir *t)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", t->dir);
	cr_assert_eq(system(cmd), 0);
}

/* The file at @path is a raw image of @size bytes that reads as @ver says. */
static void file_check(const char *path, const uint16_t *ver, uint64_t size, const char *what)
{
	const uint64_t chunk = 1 * MiB;
	unsigned char *got = malloc(chunk), *want = malloc(chunk);
	struct stat st;
	uint64_t pos;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq((uint64_t)st.st_size, size, "%s: size %lld", what, (long long)st.st_size);
	for (pos = 0; pos < size; pos += chunk) {
		uint64_t n = size - pos < chunk ? size - pos : chunk;

		cr_assert_eq(pread(fd, got, n, (off_t)pos), (ssize_t)n);
		vm_expect(ver, pos, n, want);
		cr_assert(!memcmp(got, want, n), "%s: differs in [%llu, +%llu)", what,
			  (unsigned long long)pos, (unsigned long long)n);
	}
	close(fd);
	free(got);
	free(want);
}

/* The snapshot @name holds what @ver says (saved to a file and read back). */
static void snap_check(struct blk_backend *be, const char *name, const uint16_t *ver,
		       uint64_t size)
{
	struct tmpdir t;
	const char *path = tmp_init(&t, "snap.img");

	cr_assert_eq(blk_snap_save(be, name, path), 0, "save %s", name ? name : "(device)");
	file_check(path, ver, size, name ? name : "the device");
	tmp_done(&t);
}

static struct blk_snap_info *snap_info(struct blk_backend *be, const char *name)
{
	static struct blk_snap_info v[BLK_SNAP_MAX];
	int i, n = blk_snap_list(be, v, BLK_SNAP_MAX);

	cr_assert_geq(n, 0);
	for (i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	cr_assert_fail("no snapshot %s in the list", name);
	return NULL;
}

Test(snap, names)
{
	static const char *const good[] = { "a", "base", "v1.2", "fresh_fs", "x-y", "a+b",
					    "user@host", "t:1", "A9" };
	static const char *const bad[] = { "", ".", ".hidden", "-x", "a b", "a/b", "a\nb",
					   "\xc3\xa9", "a*", "a\"" };
	char longest[BLK_SNAP_NAME_MAX + 2];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		cr_assert(blk_snap_name_valid(good[i]), "'%s'", good[i]);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert(!blk_snap_name_valid(bad[i]), "'%s'", bad[i]);
	cr_assert(!blk_snap_name_valid(NULL));
	memset(longest, 'n', sizeof(longest));
	longest[BLK_SNAP_NAME_MAX] = 0;
	cr_assert(blk_snap_name_valid(longest));
	longest[BLK_SNAP_NAME_MAX] = 'n';
	longest[BLK_SNAP_NAME_MAX + 1] = 0;
	cr_assert(!blk_snap_name_valid(longest));
}

Test(snap, bad_calls)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 512, 4096, 0);

	cr_assert_eq(blk_snap_create(be, "a b"), -EINVAL);
	cr_assert_eq(blk_snap_create(be, ""), -EINVAL);
	cr_assert_eq(blk_snap_create(be, "s"), 0);
	cr_assert_eq(blk_snap_create(be, "s"), -EEXIST);
	cr_assert_eq(blk_snap_reset(be, "t"), -ENOENT);
	cr_assert_eq(blk_snap_destroy(be, "t"), -ENOENT);
	cr_assert_eq(blk_snap_save(be, "t", "/tmp/never-made.img"), -ENOENT);
	cr_assert_eq(blk_snap_reset(be, "../x"), -EINVAL);
	cr_assert_eq(blk_snap_destroy(be, ".x"), -EINVAL);
	cr_assert_eq(blk_snap_save(be, "s", ""), -EINVAL);
	cr_assert_eq(access("/tmp/never-made.img", F_OK), -1);
	cr_assert_eq(blk_snap_list(be, NULL, 0), 1);
	cr_assert_eq(blk_snap_destroy(be, "s"), 0);
	cr_assert_eq(blk_snap_list(be, NULL, 0), 0);
	be->ops->close(be);

	/* Backends without snapshots say so. */
	be = open_ok(&td, "null", 1 * MiB, 512, 4096, 0);
	cr_assert_eq(blk_snap_create(be, "s"), -EOPNOTSUPP);
	cr_assert_eq(blk_snap_list(be, NULL, 0), -EOPNOTSUPP);
	cr_assert_eq(blk_snap_reset(be, "s"), -EOPNOTSUPP);
	cr_assert_eq(blk_snap_destroy(be, "s"), -EOPNOTSUPP);
	cr_assert_eq(blk_snap_save(be, NULL, "/tmp/x.img"), -EOPNOTSUPP);
	be->ops->close(be);
}

/*
 * Snapshot, then write: the snapshot keeps what it had, the device changes,
 * and each shared page is copied once, on its first write (a later write
 * to it copies nothing). Writes of every shape: a sector inside a page, a
 * range across pages, 1 MiB across a leaf (2 MiB), new ground, a discard
 * and write-zeroes partly inside pages.
 */
Test(snap, write_after_snapshot)
{
	const uint64_t size = 8 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 1 * MiB);
	uint64_t arena, nodes, cow;
	struct vmodel m;
	uint16_t *a;

	vm_init(&m, size);
	vm_write(be, &m, 0, 1 * MiB, 1);
	vm_write(be, &m, 1 * MiB, 1 * MiB, 2);
	vm_write(be, &m, 2 * MiB, 1 * MiB, 3);
	vm_write(be, &m, 5 * MiB + 512, 512, 4);
	arena = stat_get(be, "arena_bytes");
	nodes = stat_get(be, "node_bytes");
	cr_assert_eq(arena, 3 * MiB + 4096);

	cr_assert_eq(blk_snap_create(be, "a"), 0);
	a = vm_copy(&m);
	/* Nothing copied, no data memory, no index memory. */
	cr_assert_eq(stat_get(be, "arena_bytes"), arena);
	cr_assert_eq(stat_get(be, "node_bytes"), nodes);
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), 0);

	vm_write(be, &m, 4096 + 512, 512, 10);		/* 1 page */
	vm_write(be, &m, 3 * 4096 - 1024, 2048, 11);	/* 2 pages */
	vm_write(be, &m, 2 * MiB - 512 * KiB, 1 * MiB, 12);	/* 256 pages, 2 leaves */
	vm_write(be, &m, 6 * MiB, 8192, 13);		/* new: 2 pages, no copy */
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), 1 + 2 + 256);
	vm_zero(be, &m, BLK_DISCARD, 512 * KiB + 1024, 64 * KiB);	/* 2 partial pages copied */
	vm_zero(be, &m, BLK_WRITE_ZEROES, 5 * MiB, 4096);	/* a whole page: dropped */
	cow = stat_get(be, "snapshot_cow_pages");
	cr_assert_eq(cow, 1 + 2 + 256 + 2);

	vm_check(be, m.ver, size, "the device after writes");
	snap_check(be, "a", a, size);

	/* The same pages again: the device's own now, written in place. */
	vm_write(be, &m, 4096, 4096, 20);
	vm_write(be, &m, 2 * MiB - 512 * KiB, 1 * MiB, 21);
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), cow);
	vm_check(be, m.ver, size, "the device after rewrites");
	snap_check(be, "a", a, size);

	/*
	 * Memory: the snapshot's pages, the device's copies and its 2 new
	 * pages (what the device dropped is still the snapshot's).
	 */
	cr_assert_eq(stat_get(be, "arena_bytes"), (vm_pages(a, size) + cow + 2) * 4096);
	free(a);
	free(m.ver);
	be->ops->close(be);
}

/* Reset: the device equals the snapshot, again and again; the snapshot stays. */
Test(snap, reset)
{
	const uint64_t size = 16 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 4096, 4096, 1 * MiB);
	struct vmodel m;
	uint16_t *a;
	int round;

	vm_init(&m, size);
	vm_write(be, &m, 0, 4 * MiB, 1);
	vm_write(be, &m, 12 * MiB, 64 * KiB, 2);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	a = vm_copy(&m);

	for (round = 0; round < 4; round++) {
		vm_write(be, &m, (uint64_t)round * MiB, 2 * MiB, (uint16_t)(100 + round));
		vm_write(be, &m, 8 * MiB, 1 * MiB, (uint16_t)(200 + round));
		vm_zero(be, &m, BLK_DISCARD, 12 * MiB, 4096);
		vm_check(be, m.ver, size, "before the reset");
		cr_assert_gt(stat_get(be, "arena_bytes"), vm_pages(a, size) * 4096);

		cr_assert_eq(blk_snap_reset(be, "a"), 0);
		memcpy(m.ver, a, size / 512 * sizeof(*a));
		vm_check(be, a, size, "after the reset");
		/* What was written since is freed: only the snapshot's pages are left. */
		cr_assert_eq(stat_get(be, "arena_bytes"), vm_pages(a, size) * 4096);
	}
	/* A reset to a snapshot of the empty device empties it. */
	be->ops->close(be);
	be = open_ok(&td, "ram", size, 4096, 4096, 1 * MiB);
	cr_assert_eq(blk_snap_create(be, "empty"), 0);
	vm_write(be, &m, 0, 1 * MiB, 7);
	cr_assert_eq(blk_snap_reset(be, "empty"), 0);
	memset(m.ver, 0, size / 512 * sizeof(*m.ver));
	vm_check(be, m.ver, size, "after a reset to empty");
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	cr_assert_eq(stat_get(be, "node_bytes"), 0);
	free(a);
	free(m.ver);
	be->ops->close(be);
}

/*
 * Delete: the memory only the snapshot held goes, the device is untouched
 * (also when it was reset to it), and once no snapshot is left the device
 * owns everything again: writes copy nothing.
 */
Test(snap, destroy)
{
	const uint64_t size = 8 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 1 * MiB);
	struct blk_snap_info v[4];
	struct vmodel m;
	uint64_t cow;

	vm_init(&m, size);
	vm_write(be, &m, 0, 2 * MiB, 1);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	vm_write(be, &m, 0, 1 * MiB, 2);
	cr_assert_eq(blk_snap_create(be, "b"), 0);
	vm_write(be, &m, 512 * KiB, 1 * MiB, 3);
	cr_assert_eq(blk_snap_list(be, v, 4), 2);
	cr_assert_str_eq(v[0].name, "a");
	cr_assert_str_eq(v[1].name, "b");

	cr_assert_eq(blk_snap_destroy(be, "a"), 0);
	cr_assert_eq(blk_snap_destroy(be, "a"), -ENOENT);
	cr_assert_eq(blk_snap_list(be, v, 4), 1);
	cr_assert_str_eq(v[0].name, "b");
	vm_check(be, m.ver, size, "after deleting a");
	/* a's own pages (the first 1 MiB of version 1) are gone. */
	cr_assert_eq(stat_get(be, "arena_bytes"), 2 * MiB + 1 * MiB);

	/* Reset to b, delete b: the device keeps b's contents. */
	cr_assert_eq(blk_snap_reset(be, "b"), 0);
	cr_assert_eq(blk_snap_destroy(be, "b"), 0);
	memset(m.ver, 0, size / 512 * sizeof(*m.ver));
	vm_write(be, &m, 1 * MiB, 1 * MiB, 1);
	vm_write(be, &m, 0, 1 * MiB, 2);
	vm_check(be, m.ver, size, "after deleting the snapshot it was reset to");
	cr_assert_eq(stat_get(be, "arena_bytes"), 2 * MiB);

	/* No tree besides the device's: every count is 1 again, nothing to copy. */
	cow = stat_get(be, "snapshot_cow_pages");
	vm_write(be, &m, 4096, 64 * KiB, 5);
	vm_zero(be, &m, BLK_DISCARD, 1 * MiB + 512, 4096);
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), cow);
	vm_check(be, m.ver, size, "writes after the last delete");
	free(m.ver);
	be->ops->close(be);
}

/*
 * Memory each snapshot holds alone, exactly. 64 MiB: a root and one leaf
 * per 2 MiB written.
 */
Test(snap, accounting)
{
	const uint64_t size = 64 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 1 * MiB);
	struct blk_snap_info *i;
	struct vmodel m;
	int k;

	vm_init(&m, size);
	vm_write(be, &m, 0, 8 * MiB, 1);		/* 2048 pages in 4 leaves */
	cr_assert_eq(stat_get(be, "node_bytes"), 5 * 4096);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	i = snap_info(be, "a");
	cr_assert_eq(i->data_bytes, 8 * MiB);
	cr_assert_eq(i->own_bytes, 0, "all shared: %llu", (unsigned long long)i->own_bytes);
	cr_assert_geq(i->created, (uint64_t)time(NULL) - 5);

	/* 10 pages of leaf 0: the device copies the root, leaf 0 and the pages. */
	for (k = 0; k < 10; k++)
		vm_write(be, &m, (uint64_t)k * 8192, 4096, 2);
	cr_assert_eq(stat_get(be, "snapshot_cow_nodes"), 2);
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), 10);
	cr_assert_eq(stat_get(be, "node_bytes"), 7 * 4096);
	cr_assert_eq(stat_get(be, "arena_bytes"), 8 * MiB + 10 * 4096);
	i = snap_info(be, "a");
	cr_assert_eq(i->own_bytes, 2 * 4096 + 10 * 4096, "a: %llu", (unsigned long long)i->own_bytes);
	cr_assert_eq(i->data_bytes, 8 * MiB);

	/* b of the device now; then a page of leaf 1 (shared by a and b). */
	cr_assert_eq(blk_snap_create(be, "b"), 0);
	cr_assert_eq(snap_info(be, "b")->own_bytes, 0);
	vm_write(be, &m, 2 * MiB, 4096, 3);
	cr_assert_eq(snap_info(be, "a")->own_bytes, 12 * 4096);
	/* b alone holds its root: leaf 1 is a's and b's, leaf 0's copy b's and the device's. */
	cr_assert_eq(snap_info(be, "b")->own_bytes, 4096);
	cr_assert_eq(stat_get(be, "node_bytes"), 9 * 4096);

	/* Deleting a frees exactly what it held alone. */
	cr_assert_eq(blk_snap_destroy(be, "a"), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 8 * MiB + 10 * 4096 + 4096 - 10 * 4096);
	cr_assert_eq(stat_get(be, "node_bytes"), 7 * 4096);
	/* Now b holds its root and leaf 1 (the device copied it) and its page. */
	cr_assert_eq(snap_info(be, "b")->own_bytes, 3 * 4096);
	cr_assert_eq(blk_snap_destroy(be, "b"), 0);
	cr_assert_eq(stat_get(be, "arena_bytes"), 8 * MiB);
	cr_assert_eq(stat_get(be, "node_bytes"), 5 * 4096);
	vm_check(be, m.ver, size, "the device");
	free(m.ver);
	be->ops->close(be);
}

/*
 * Many snapshots: 64 of a device that keeps changing, each checked after a
 * reset to it in a random order, then deleted in a random order; the limit.
 */
Test(snap, many)
{
	const uint64_t size = 16 * MiB;
	const int nr = 64;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 256 * KiB);
	uint16_t *ver[64];
	int order[64], i, j, live = 0;
	unsigned int seed = 4242;
	struct vmodel m;
	char name[16];

	vm_init(&m, size);
	for (i = 0; i < nr; i++) {
		for (j = 0; j < 8; j++) {
			uint64_t pos = (uint64_t)(rand_r(&seed) % (size / 4096)) * 4096;

			vm_write(be, &m, pos, 4096, (uint16_t)(i * 10 + 1));
		}
		vm_write(be, &m, (uint64_t)(rand_r(&seed) % (size / 512)) * 512, 512,
			 (uint16_t)(i * 10 + 2));
		if (i % 7 == 3)
			vm_zero(be, &m, BLK_DISCARD, (uint64_t)(rand_r(&seed) % 16) * MiB, 1 * MiB);
		snprintf(name, sizeof(name), "s%03d", i);
		cr_assert_eq(blk_snap_create(be, name), 0);
		ver[i] = vm_copy(&m);
		order[i] = i;
	}
	cr_assert_eq(blk_snap_list(be, NULL, 0), nr);
	{
		static struct blk_snap_info v[64];

		cr_assert_eq(blk_snap_list(be, v, nr), nr);
		for (i = 0; i < nr; i++) {
			snprintf(name, sizeof(name), "s%03d", i);
			cr_assert_str_eq(v[i].name, name, "oldest first");
			cr_assert_eq(v[i].data_bytes, vm_pages(ver[i], size) * 4096);
		}
	}
	for (i = nr - 1; i > 0; i--) {
		j = rand_r(&seed) % (i + 1);
		int t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	for (i = 0; i < nr; i++) {
		snprintf(name, sizeof(name), "s%03d", order[i]);
		cr_assert_eq(blk_snap_reset(be, name), 0);
		vm_check(be, ver[order[i]], size, name);
		/* Writes after a reset land in the device only. */
		vm_write(be, &m, (uint64_t)(rand_r(&seed) % (size / 4096)) * 4096, 4096, 999);
	}
	for (i = nr - 1; i > 0; i--) {
		j = rand_r(&seed) % (i + 1);
		int t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	live = nr;
	for (i = 0; i < nr; i++) {
		snprintf(name, sizeof(name), "s%03d", order[i]);
		cr_assert_eq(blk_snap_destroy(be, name), 0);
		live--;
		cr_assert_eq(blk_snap_list(be, NULL, 0), live);
		if (i % 16 == 15 && live) {
			/* The others are intact: reset to one of those left. */
			snprintf(name, sizeof(name), "s%03d", order[nr - 1]);
			cr_assert_eq(blk_snap_reset(be, name), 0);
			vm_check(be, ver[order[nr - 1]], size, name);
			memcpy(m.ver, ver[order[nr - 1]], size / 512 * sizeof(*m.ver));
		}
	}
	/* Every count back to 1: only the device's pages are held. */
	cr_assert_eq(stat_get(be, "arena_bytes"), vm_pages(m.ver, size) * 4096);
	vm_check(be, m.ver, size, "the device at the end");
	for (i = 0; i < nr; i++)
		free(ver[i]);

	/* The limit: BLK_SNAP_MAX of them, then no more. */
	for (i = 0; i < BLK_SNAP_MAX; i++) {
		snprintf(name, sizeof(name), "m%d", i);
		cr_assert_eq(blk_snap_create(be, name), 0);
	}
	cr_assert_eq(blk_snap_create(be, "one-more"), -EMLINK);
	cr_assert_eq(blk_snap_list(be, NULL, 0), BLK_SNAP_MAX);
	cr_assert_eq(stat_get(be, "arena_bytes"), vm_pages(m.ver, size) * 4096);
	free(m.ver);
	be->ops->close(be);
}

/*
 * Threads writing the same shared pages at once, as copy-on-write races:
 * in each round a snapshot is taken, then 4 writers each write their own
 * sector of every page of a shared region (all racing to copy the same
 * leaf and pages), a full page and a discard in a region of their own,
 * while 2 readers check the sectors no one writes (a copy must carry them
 * over whole, whichever page a reader finds). Then, with the threads
 * waiting (the device quiesced), every page was copied exactly once, the
 * device holds the new data, and a reset brings back the old.
 */
#define CW_WRITERS	4
#define CW_READERS	2
#define CW_ROUNDS	60
#define CW_SHARED	(1ull << 30)	/* 256 KiB, 64 pages, in one leaf */
#define CW_SHARED_LEN	(256 * KiB)
#define CW_PRIV		(3ull << 30)	/* writer w: 64 KiB from here + w MiB */

struct cw_ctx {
	struct blk_backend *be;
	pthread_barrier_t start, done;
	int round;		/* set by main between rounds */
	int writers_done;	/* atomic: writers through with the round */
	bool stop;		/* atomic: readers stop (the writers are done) */
	int failures;
};

struct cw_thread {
	struct cw_ctx *ctx;
	int id;
};

static unsigned char cw_byte(int who, int round, uint64_t pos)
{
	return (unsigned char)(who * 31 + round * 7 + (pos >> 9) + 1);
}

static void *cw_writer(void *arg)
{
	struct cw_thread *th = arg;
	struct cw_ctx *ctx = th->ctx;
	unsigned char *buf = malloc(64 * KiB);
	int fail = 0;

	for (;;) {
		uint64_t p, priv = CW_PRIV + (uint64_t)th->id * MiB;
		int round;

		pthread_barrier_wait(&ctx->start);
		round = ctx->round;
		if (round < 0)
			break;
		for (p = 0; p < CW_SHARED_LEN; p += 4096) {
			uint64_t s = CW_SHARED + p + (uint64_t)th->id * 512;

			memset(buf, cw_byte(th->id, round, s), 512);
			if (ct_io(ctx->be, BLK_WRITE, s, buf, 512))
				fail++;
		}
		/* Its own region: a whole shared page rewritten, a discard of another. */
		memset(buf, cw_byte(th->id + 10, round, priv), 4096);
		if (ct_io(ctx->be, BLK_WRITE, priv, buf, 4096) ||
		    ct_io(ctx->be, BLK_DISCARD, priv + 4096, NULL, 4096))
			fail++;
		__atomic_add_fetch(&ctx->writers_done, 1, __ATOMIC_RELEASE);
		pthread_barrier_wait(&ctx->done);
	}
	free(buf);
	__atomic_add_fetch(&ctx->failures, fail, __ATOMIC_RELAXED);
	return NULL;
}

/* Sectors 4..7 of each page are nobody's this round: they stay as they were. */
static void *cw_reader(void *arg)
{
	struct cw_thread *th = arg;
	struct cw_ctx *ctx = th->ctx;
	unsigned char *buf = malloc(CW_SHARED_LEN);
	int fail = 0;

	for (;;) {
		int round;

		pthread_barrier_wait(&ctx->start);
		round = ctx->round;
		if (round < 0)
			break;
		do {
			uint64_t p, i;

			if (ct_io(ctx->be, BLK_READ, CW_SHARED, buf, CW_SHARED_LEN)) {
				fail++;
				break;
			}
			for (p = 0; p < CW_SHARED_LEN; p += 4096)
				for (i = 2048; i < 4096; i++)
					if (buf[p + i] != cw_byte(9, 0, CW_SHARED + p + (i & ~511ull))) {
						fail++;
						break;
					}
		} while (!__atomic_load_n(&ctx->stop, __ATOMIC_ACQUIRE));
		pthread_barrier_wait(&ctx->done);
	}
	free(buf);
	__atomic_add_fetch(&ctx->failures, fail, __ATOMIC_RELAXED);
	return NULL;
}

/* Writer @w's own two pages after round @round (0: as written at the start). */
static void cw_priv_check(struct blk_backend *be, int w, int round, const char *what)
{
	uint64_t priv = CW_PRIV + (uint64_t)w * MiB, i;
	unsigned char got[8192];

	cr_assert_eq(do_rw(be, BLK_READ, priv, got, sizeof(got)), 0);
	for (i = 0; i < sizeof(got); i++) {
		unsigned char b = round ? (i < 4096 ? cw_byte(w + 10, round, priv) : 0) :
					  cw_byte(9, 0, CW_SHARED + (i & ~511ull));

		cr_assert(got[i] == b, "%s: writer %d's page, byte %llu: %u, want %u", what, w,
			  (unsigned long long)i, got[i], b);
	}
}

Test(snap, concurrent_copy_on_write, .timeout = 300)
{
	struct test_dev td;
	struct cw_ctx ctx = { .be = open_ok(&td, "ram", 4 * GiB, 512, 4096, CW_SHARED_LEN) };
	struct cw_thread th[CW_WRITERS + CW_READERS];
	pthread_t tid[CW_WRITERS + CW_READERS];
	unsigned char *buf = malloc(CW_SHARED_LEN), *want = malloc(CW_SHARED_LEN);
	int i, round, nthr = CW_WRITERS + CW_READERS;
	uint64_t p, s, cow;

	/* Every sector of the shared region starts as "nobody's, round 0". */
	for (p = 0; p < CW_SHARED_LEN; p += 512)
		memset(want + p, cw_byte(9, 0, CW_SHARED + p), 512);
	cr_assert_eq(do_rw(ctx.be, BLK_WRITE, CW_SHARED, want, CW_SHARED_LEN), 0);
	for (i = 0; i < CW_WRITERS; i++)
		cr_assert_eq(do_rw(ctx.be, BLK_WRITE, CW_PRIV + (uint64_t)i * MiB, want, 8192), 0);

	pthread_barrier_init(&ctx.start, NULL, nthr + 1);
	pthread_barrier_init(&ctx.done, NULL, nthr + 1);
	for (i = 0; i < nthr; i++) {
		th[i] = (struct cw_thread){ .ctx = &ctx, .id = i };
		cr_assert_eq(pthread_create(&tid[i], NULL, i < CW_WRITERS ? cw_writer : cw_reader,
					    &th[i]), 0);
	}
	for (round = 1; round <= CW_ROUNDS; round++) {
		bool reset = round % 2;

		cr_assert_eq(blk_snap_create(ctx.be, "r"), 0);
		cow = stat_get(ctx.be, "snapshot_cow_pages");
		ctx.round = round;
		__atomic_store_n(&ctx.writers_done, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&ctx.stop, false, __ATOMIC_RELEASE);
		pthread_barrier_wait(&ctx.start);
		/* The writers finish, then the readers stop. */
		while (__atomic_load_n(&ctx.writers_done, __ATOMIC_ACQUIRE) < CW_WRITERS)
			usleep(100);
		__atomic_store_n(&ctx.stop, true, __ATOMIC_RELEASE);
		pthread_barrier_wait(&ctx.done);
		cr_assert_eq(ctx.failures, 0, "round %d", round);

		/* Each shared page copied once, whoever won the race. */
		cr_assert_eq(stat_get(ctx.be, "snapshot_cow_pages"), cow + 64 + CW_WRITERS,
			     "round %d: %llu copies", round,
			     (unsigned long long)(stat_get(ctx.be, "snapshot_cow_pages") - cow));
		cr_assert_eq(do_rw(ctx.be, BLK_READ, CW_SHARED, buf, CW_SHARED_LEN), 0);
		for (p = 0; p < CW_SHARED_LEN; p += 4096)
			for (s = 0; s < 4096; s += 512) {
				unsigned char b = s < CW_WRITERS * 512 ?
					cw_byte((int)(s / 512), round, CW_SHARED + p + s) :
					cw_byte(9, 0, CW_SHARED + p + s);

				cr_assert(buf[p + s] == b && buf[p + s + 511] == b,
					  "round %d: page %llu sector %llu", round,
					  (unsigned long long)(p / 4096), (unsigned long long)(s / 512));
			}
		for (i = 0; i < CW_WRITERS; i++)
			cw_priv_check(ctx.be, i, round, "after the round");
		if (reset) {
			cr_assert_eq(blk_snap_reset(ctx.be, "r"), 0);
			/* Odd rounds reset: the round before kept its writes (or the start). */
			for (i = 0; i < CW_WRITERS; i++)
				cw_priv_check(ctx.be, i, round - 1, "after the reset");
			cr_assert_eq(do_rw(ctx.be, BLK_READ, CW_SHARED, buf, CW_SHARED_LEN), 0);
			/* The first round's snapshot had sectors 0-3 from round 0's write. */
			for (p = 0; p < CW_SHARED_LEN; p += 512) {
				unsigned char b = (p & 4095) < CW_WRITERS * 512 && round > 1 ?
					cw_byte((int)((p & 4095) / 512), round - 1, CW_SHARED + p) :
					cw_byte(9, 0, CW_SHARED + p);

				cr_assert(buf[p] == b, "round %d: reset: sector %llu", round,
					  (unsigned long long)(p / 512));
			}
		}
		cr_assert_eq(blk_snap_destroy(ctx.be, "r"), 0);
		if (reset) {
			/* Back to the state before the round's writes: do them again, plainly. */
			for (i = 0; i < CW_WRITERS; i++) {
				uint64_t priv = CW_PRIV + (uint64_t)i * MiB;

				for (p = 0; p < CW_SHARED_LEN; p += 4096) {
					memset(buf, cw_byte(i, round, CW_SHARED + p + i * 512), 512);
					cr_assert_eq(do_rw(ctx.be, BLK_WRITE, CW_SHARED + p + i * 512,
							   buf, 512), 0);
				}
				memset(buf, cw_byte(i + 10, round, priv), 4096);
				cr_assert_eq(do_rw(ctx.be, BLK_WRITE, priv, buf, 4096), 0);
				cr_assert_eq(do_io(ctx.be, BLK_DISCARD, priv + 4096, 4096, NULL, 0), 0);
			}
		}
	}
	ctx.round = -1;
	pthread_barrier_wait(&ctx.start);
	for (i = 0; i < nthr; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&ctx.start);
	pthread_barrier_destroy(&ctx.done);
	cr_assert_eq(ctx.failures, 0);
	/* Nothing leaked: with no snapshot, only the device's pages are held. */
	cr_assert_eq(stat_get(ctx.be, "arena_bytes"), CW_SHARED_LEN + CW_WRITERS * 4096);
	free(buf);
	free(want);
	ctx.be->ops->close(ctx.be);
}

/*
 * A reset with I/O in flight is a bug of the caller (it must quiesce the
 * device): the backend asserts. An I/O is held inside the backend by
 * reading into a page that userfaultfd keeps missing.
 */
struct uffd_reader {
	struct blk_backend *be;
	void *page;
};

static void *uffd_read_fn(void *arg)
{
	struct uffd_reader *r = arg;

	ct_io(r->be, BLK_READ, 0, r->page, 4096);
	return NULL;
}

Test(snap, reset_with_io_in_flight_asserts)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 1 * MiB, 512, 4096, 0);
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg;
	struct uffdio_zeropage zp;
	struct uffd_reader r = { .be = be };
	struct pollfd pfd;
	unsigned char w[4096] = { 1 };
	pthread_t tid;
	int uffd, status;
	pid_t pid;

	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 4096), 0);
	cr_assert_eq(blk_snap_create(be, "s"), 0);
	/* User-mode faults only: what an unprivileged process may ask for. */
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api))
		cr_skip_test("userfaultfd unavailable: %s", strerror(errno));
	r.page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r.page, MAP_FAILED);
	reg = (struct uffdio_register){ .range = { .start = (uintptr_t)r.page, .len = 4096 },
					.mode = UFFDIO_REGISTER_MODE_MISSING };
	cr_assert_eq(ioctl(uffd, UFFDIO_REGISTER, &reg), 0, "%s", strerror(errno));
	cr_assert_eq(pthread_create(&tid, NULL, uffd_read_fn, &r), 0);
	/* The read faults on the page, inside the backend: it is in flight. */
	pfd = (struct pollfd){ .fd = uffd, .events = POLLIN };
	cr_assert_eq(poll(&pfd, 1, 5000), 1, "the read never faulted");

	/* The reset, in a child (it must abort), while the read is held. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		blk_snap_reset(be, "s");
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
		  "the reset did not abort: status %#x", status);

	/* Let the read finish; with nothing in flight the reset is fine. */
	zp = (struct uffdio_zeropage){ .range = { .start = (uintptr_t)r.page, .len = 4096 } };
	cr_assert_eq(ioctl(uffd, UFFDIO_ZEROPAGE, &zp), 0, "%s", strerror(errno));
	pthread_join(tid, NULL);
	cr_assert_eq(blk_snap_reset(be, "s"), 0);
	close(uffd);
	be->ops->close(be);
}

/* [pos, pos + len) of the device reads as @ver says. */
static void vm_check_range(struct blk_backend *be, const uint16_t *ver, uint64_t pos,
			   uint64_t len, const char *what)
{
	unsigned char *got = malloc(len), *want = malloc(len);

	uint64_t o;

	cr_assert(got && want);
	for (o = 0; o < len; o += VM_IO)
		cr_assert_eq(do_rw(be, BLK_READ, pos + o, got + o, len - o < VM_IO ? len - o : VM_IO), 0);
	vm_expect(ver, pos, len, want);
	cr_assert(!memcmp(got, want, len), "%s: [%llu, +%llu) differs", what,
		  (unsigned long long)pos, (unsigned long long)len);
	free(got);
	free(want);
}

static uint64_t geo_size(struct blk_backend *be)
{
	struct blk_geometry g;

	be->ops->geometry(be, &g);
	return g.size;
}

/*
 * blk_resize() on ram: a grow past what the root covers adds levels to the
 * device's tree and to the snapshot's (both still read right, the snapshot
 * resets right); a shrink is refused while a snapshot exists, then drops the
 * pages past the end and zeros the tail of the last one, so a grow after it
 * reads zeros there; bad sizes change nothing.
 */
Test(ram, resize)
{
	const uint64_t big = 2 * GiB + 64 * KiB;	/* past the 1 GiB two levels cover */
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 4 * MiB, 512, 512, 256 * KiB);
	uint64_t size;
	struct vmodel m;
	uint16_t *a;

	vm_init(&m, big);
	vm_write(be, &m, 0, 4 * MiB, 1);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	a = vm_copy(&m);

	size = 1000;
	cr_assert_eq(blk_resize(be, &size), -EINVAL);
	size = 0;
	cr_assert_eq(blk_resize(be, &size), -EINVAL, "auto: ram has no size of its own");
	cr_assert_eq(geo_size(be), 4 * MiB);

	size = big;
	cr_assert_eq(blk_resize(be, &size), 0);
	cr_assert_eq(size, big);
	cr_assert_eq(geo_size(be), big);
	vm_check_range(be, m.ver, 0, 4 * MiB, "the old data after the grow");
	vm_write(be, &m, big - 1 * MiB, 1 * MiB, 2);
	vm_write(be, &m, 1 * MiB, 64 * KiB, 3);
	vm_check_range(be, m.ver, big - 1 * MiB, 1 * MiB, "written at the new end");
	vm_check_range(be, m.ver, 1 * GiB - 64 * KiB, 128 * KiB, "never written");
	vm_check_range(be, m.ver, 0, 4 * MiB, "the old data");

	/* the snapshot's tree got the levels too: a reset reads it right */
	cr_assert_eq(blk_snap_reset(be, "a"), 0);
	memcpy(m.ver, a, big / 512 * sizeof(*a));
	vm_check_range(be, m.ver, 0, 4 * MiB, "after the reset");
	vm_check_range(be, m.ver, big - 1 * MiB, 1 * MiB, "the new end after the reset");

	/* a shrink would drop what the snapshot may bring back */
	size = 3 * MiB;
	cr_assert_eq(blk_resize(be, &size), -EBUSY);
	cr_assert_eq(geo_size(be), big);
	cr_assert_eq(blk_snap_destroy(be, "a"), 0);

	/* into the middle of a page */
	size = 3 * MiB + 1536;
	cr_assert_eq(blk_resize(be, &size), 0);
	cr_assert_eq(geo_size(be), 3 * MiB + 1536);
	vm_check_range(be, m.ver, 0, 3 * MiB + 1536, "below the new end");
	cr_assert_leq(stat_get(be, "arena_bytes"), 3 * MiB + 4096);
	size = 8 * MiB;
	cr_assert_eq(blk_resize(be, &size), 0);
	memset(&m.ver[(3 * MiB + 1536) / 512], 0, (big - 3 * MiB - 1536) / 512 * sizeof(*m.ver));
	vm_check_range(be, m.ver, 0, 8 * MiB, "after the shrink and the grow");
	free(a);
	free(m.ver);
	be->ops->close(be);
}

/*
 * blk_resize() through a filter stack: each layer passes it down and takes
 * the new size; a layer without it (none here) would refuse the whole call.
 */
Test(ram, resize_through_filters)
{
	const struct blk_backend_ops *ops[] = { blk_backend_find("delay"),
						blk_backend_find("fault"), blk_backend_find("flakey"),
						blk_backend_find("throttle"),
						blk_backend_find("powerloss") };
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 4 * MiB, 4096, 4096, 256 * KiB), *top = be;
	struct blk_params fp;
	uint64_t size;
	unsigned char buf[4096];
	size_t i;

	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct blk_backend *f;
		char prefix[32];

		cr_assert_not_null(ops[i]);
		fp = td.p;
		fp.n = 0;
		snprintf(prefix, sizeof(prefix), "%s.", ops[i]->name);
		fp.prefix = prefix;
		f = ops[i]->open(&fp, top);
		cr_assert(!IS_ERR_OR_NULL(f), "open %s: %s", ops[i]->name, td.err);
		f->next = top;
		top = f;
	}
	size = 12 * MiB;
	cr_assert_eq(blk_resize(top, &size), 0);
	cr_assert_eq(geo_size(top), 12 * MiB);
	memset(buf, 0x5a, sizeof(buf));
	cr_assert_eq(do_rw(top, BLK_WRITE, 12 * MiB - 4096, buf, 4096), 0);
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(do_rw(top, BLK_READ, 12 * MiB - 4096, buf, 4096), 0);
	cr_assert_eq(buf[100], 0x5a);
	while (top) {
		struct blk_backend *next = top->next;

		top->ops->close(top);
		top = next;
	}
}

/* Filters pass the snapshot calls down: a stack of all four over ram. */
Test(snap, through_filters)
{
	struct test_dev td;
	struct blk_backend *ram = open_ok(&td, "ram", 8 * MiB, 512, 4096, 1 * MiB);
	struct tparams tl, td2, tf, tpl;
	struct blk_backend *be;
	struct blk_snap_info v[2];
	struct tmpdir t;
	char trace[128];
	struct vmodel m;
	uint16_t *a;

	tmp_init(&t, "x");
	snprintf(trace, sizeof(trace), "%s/trace", t.dir);
	filter_params_init(&tpl, "powerloss", ram, "test.conf", 3);
	be = filter_open(&tpl);
	filter_params_init(&tf, "fault", be, "test.conf", 3);
	be = filter_open(&tf);
	filter_params_init(&td2, "delay", be, "test.conf", 3);
	be = filter_open(&td2);
	filter_params_init(&tl, "log", be, "test.conf", 3);
	tparams_add(&tl, "log.path", trace, 4);
	be = filter_open(&tl);

	vm_init(&m, 8 * MiB);
	vm_write(be, &m, 0, 1 * MiB, 1);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	a = vm_copy(&m);
	vm_write(be, &m, 512 * KiB, 1 * MiB, 2);
	cr_assert_eq(blk_snap_list(be, v, 2), 1);
	cr_assert_str_eq(v[0].name, "a");
	snap_check(be, "a", a, 8 * MiB);
	cr_assert_eq(blk_snap_reset(be, "a"), 0);
	vm_check(be, a, 8 * MiB, "after a reset through the filters");
	cr_assert_eq(stat_get(be->next->next->next, "powerloss_resets"), 1);
	cr_assert_eq(blk_snap_destroy(be, "a"), 0);
	cr_assert_eq(blk_snap_list(ram, NULL, 0), 0);
	while (be) {
		struct blk_backend *next = be->next;

		be->ops->close(be);
		be = next;
	}
	tmp_done(&t);
	free(a);
	free(m.ver);
}

/* ---- ram: save and image ---- */

/* Save: a raw image of the device's size, holes where nothing (or zeros) is. */
Test(image, save_sparse)
{
	const uint64_t size = 64 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 1 * MiB);
	unsigned char zeros[4096] = { 0 };
	struct tmpdir t;
	const char *path = tmp_init(&t, "dev.img");
	struct vmodel m;
	struct stat st;
	off_t data;
	int fd;

	vm_init(&m, size);
	vm_write(be, &m, 8 * MiB, 1 * MiB, 1);
	vm_write(be, &m, 40 * MiB + 512, 512, 2);
	vm_write(be, &m, size - 4096, 4096, 3);
	/* A page written with zeros holds memory but reads as zeros: a hole. */
	cr_assert_eq(do_rw(be, BLK_WRITE, 20 * MiB, zeros, 4096), 0);

	cr_assert_eq(blk_snap_save(be, NULL, path), 0);
	file_check(path, m.ver, size, "the saved device");
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	/* As big on disk as the data (a file system may round up a little). */
	cr_assert_leq((uint64_t)st.st_blocks * 512, 1 * MiB + 2 * 4096 + 256 * KiB,
		      "%lld bytes on disk", (long long)st.st_blocks * 512);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	data = lseek(fd, 0, SEEK_DATA);
	cr_assert_geq(data, 8 * MiB - 64 * KiB, "the first data at %lld", (long long)data);
	data = lseek(fd, 20 * MiB, SEEK_DATA);
	cr_assert_gt(data, 20 * MiB, "the zero page was stored");
	close(fd);
	/* No temporary file left beside it. */
	{
		char cmd[160];

		snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 1", t.dir);
		cr_assert_eq(system(cmd), 0);
	}

	/* Saving again replaces the file whole. */
	vm_zero(be, &m, BLK_DISCARD, 8 * MiB, 1 * MiB);
	cr_assert_eq(blk_snap_save(be, NULL, path), 0);
	file_check(path, m.ver, size, "saved again");

	/* A directory that is not there: the error, and nothing made. */
	cr_assert_eq(blk_snap_save(be, NULL, "/tmp/blkfs-no-such-dir/x.img"), -ENOENT);
	tmp_done(&t);
	free(m.ver);
	be->ops->close(be);
}

/* A snapshot saves as it was taken while the device moves on; save never copies. */
Test(image, save_snapshot)
{
	const uint64_t size = 8 * MiB;
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", size, 512, 4096, 1 * MiB);
	struct vmodel m;
	uint16_t *a;
	uint64_t arena;

	vm_init(&m, size);
	vm_write(be, &m, 0, 3 * MiB, 1);
	cr_assert_eq(blk_snap_create(be, "a"), 0);
	a = vm_copy(&m);
	vm_write(be, &m, 1 * MiB, 4 * MiB, 2);
	arena = stat_get(be, "arena_bytes");
	snap_check(be, "a", a, size);
	snap_check(be, NULL, m.ver, size);
	cr_assert_eq(stat_get(be, "arena_bytes"), arena);
	/* The save's own hold on the device is gone: writes copy nothing new. */
	cr_assert_eq(blk_snap_destroy(be, "a"), 0);
	arena = stat_get(be, "snapshot_cow_pages");
	vm_write(be, &m, 0, 1 * MiB, 3);
	cr_assert_eq(stat_get(be, "snapshot_cow_pages"), arena);
	free(a);
	free(m.ver);
	be->ops->close(be);
}

/* A file of @size bytes with data at some places: what ver says. */
static void image_make(const char *path, const uint16_t *ver, uint64_t size, mode_t mode)
{
	unsigned char buf[512];
	uint64_t s;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fchmod(fd, mode), 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	for (s = 0; s < size / 512; s++) {
		if (!ver[s])
			continue;
		fill_pattern(buf, 512, s * 512, ver[s]);
		cr_assert_eq(pwrite(fd, buf, 512, (off_t)(s * 512)), 512);
	}
	close(fd);
}

static struct blk_backend *open_image(struct test_dev *td, uint64_t size, const char *image,
				      const char *file)
{
	const char *kv[] = { "image", image, NULL };
	struct blk_backend *be = open_geo_kv(td, "ram", size, 0, 0, 0, kv);

	if (file)
		td->p.file = file;
	return be;
}

/*
 * image = FILE: the device starts as the file, holding memory only for the
 * pages that are not all zeros (holes and zeros written out cost nothing).
 */
Test(image, load)
{
	const uint64_t isize = 10 * MiB - 1536;	/* not a multiple of 4K */
	struct test_dev td;
	struct tmpdir t;
	const char *path = tmp_init(&t, "golden.img");
	struct blk_geometry g;
	struct blk_backend *be;
	struct vmodel m;
	unsigned char zeros[8192] = { 0 };
	int fd;

	vm_init(&m, 16 * MiB);
	for (uint64_t s = 1 * MiB / 512; s < (1 * MiB + 64 * KiB) / 512; s++)
		m.ver[s] = 1;
	m.ver[(5 * MiB + 4096) / 512 + 3] = 2;
	m.ver[isize / 512 - 1] = 3;		/* the last sector */
	image_make(path, m.ver, isize, 0600);
	/* Zeros written out, not a hole: must not cost memory either. */
	fd = open(path, O_WRONLY);
	cr_assert_eq(pwrite(fd, zeros, sizeof(zeros), 7 * MiB), (ssize_t)sizeof(zeros));
	close(fd);

	/* No size: the image's, rounded up to the logical block size (512). */
	be = open_image(&td, 0, path, NULL);
	cr_assert(!IS_ERR(be), "%s", td.err);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, isize);
	cr_assert_eq(g.lbs, 512);
	vm_check(be, m.ver, isize, "loaded without size");
	cr_assert_eq(stat_get(be, "arena_bytes"), (16 + 1 + 1) * 4096);
	be->ops->close(be);

	/* A larger size: the rest reads as zeros. */
	be = open_image(&td, 16 * MiB, path, NULL);
	cr_assert(!IS_ERR(be), "%s", td.err);
	vm_check(be, m.ver, 16 * MiB, "loaded into 16M");
	be->ops->close(be);

	/* Round trip: save, load, same. */
	be = open_image(&td, 16 * MiB, path, NULL);
	vm_write(be, &m, 12 * MiB, 8192, 4);
	snprintf(t.path, sizeof(t.path), "%s/again.img", t.dir);
	cr_assert_eq(blk_snap_save(be, NULL, t.path), 0);
	be->ops->close(be);
	be = open_image(&td, 0, t.path, NULL);
	cr_assert(!IS_ERR(be), "%s", td.err);
	vm_check(be, m.ver, 16 * MiB, "saved and loaded");
	be->ops->close(be);
	tmp_done(&t);
	free(m.ver);
}

/* Relative to the config file's directory, as the aio backend's path. */
Test(image, relative_path)
{
	struct test_dev td;
	struct tmpdir t;
	const char *path = tmp_init(&t, "rel.img");
	char conf[128];
	struct blk_backend *be;
	struct vmodel m;

	vm_init(&m, 1 * MiB);
	m.ver[3] = 5;
	image_make(path, m.ver, 1 * MiB, 0600);
	snprintf(conf, sizeof(conf), "%s/blkfs.conf", t.dir);
	{
		const char *kv[] = { "image", "rel.img", NULL };

		memset(&td, 0, sizeof(td));
		be = open_geo_kv(&td, "ram", 0, 0, 0, 0, kv);	/* relative to ./ : not there */
		cr_assert(IS_ERR(be));
		cr_assert(strstr(td.err, "test.conf:4: image: cannot open rel.img: No such file"),
			  "%s", td.err);
	}
	{
		const struct blk_backend_ops *ops = blk_backend_find("ram");
		struct blk_param v[] = { { .key = "image", .value = "rel.img", .line = 9 } };
		char err[256];
		struct blk_params p = { .file = conf, .line = 7, .dev = "ram0", .v = v, .n = 1,
					.err = err, .errlen = sizeof(err) };

		be = ops->open(&p, NULL);
		cr_assert(!IS_ERR(be), "%s", err);
		vm_check(be, m.ver, 1 * MiB, "relative image");
		be->ops->close(be);
	}
	tmp_done(&t);
	free(m.ver);
}

/* What is refused, with FILE:LINE: KEY: and a message that says what is allowed. */
Test(image, errors)
{
	struct test_dev td;
	struct tmpdir t;
	const char *path = tmp_init(&t, "big.img");
	struct blk_backend *be;
	struct vmodel m;
	char want[512];

	vm_init(&m, 8 * MiB);
	m.ver[0] = 1;
	image_make(path, m.ver, 8 * MiB, 0600);

	be = open_image(&td, 4 * MiB, path, NULL);
	cr_assert(IS_ERR(be));
	snprintf(want, sizeof(want),
		 "test.conf:4: image: %s holds 8388608 bytes, more than the device's size 4194304 (allowed: an image no larger than size",
		 path);
	cr_assert(!strncmp(td.err, want, strlen(want)), "%s", td.err);

	snprintf(t.path, sizeof(t.path), "%s/empty.img", t.dir);
	image_make(t.path, m.ver, 0, 0600);
	be = open_image(&td, 0, t.path, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(td.err, "is empty, and the device has no size"), "%s", td.err);
	/* An empty image with a size is an empty device. */
	be = open_image(&td, 1 * MiB, t.path, NULL);
	cr_assert(!IS_ERR(be), "%s", td.err);
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);
	be->ops->close(be);

	be = open_image(&td, 0, t.dir, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(td.err, "is not a regular file or a block device"), "%s", td.err);

	be = open_image(&td, 0, "", NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(td.err, "test.conf:4: image: is empty"), "%s", td.err);

	/* Writable by others: refused as root, taken otherwise. */
	snprintf(t.path, sizeof(t.path), "%s/open.img", t.dir);
	image_make(t.path, m.ver, 1 * MiB, 0666);
	be = open_image(&td, 0, t.path, NULL);
	if (geteuid() == 0) {
		cr_assert(IS_ERR(be));
		cr_assert(strstr(td.err, "is writable by users other than root (mode 0666, owner uid 0); refused when running as root"),
			  "%s", td.err);
		cr_assert_eq(chmod(t.path, 0644), 0);
		cr_assert_eq(chown(t.path, 1, 0), 0);
		be = open_image(&td, 0, t.path, NULL);
		cr_assert(IS_ERR(be));
		cr_assert(strstr(td.err, "owner uid 1"), "%s", td.err);
		cr_assert_eq(chown(t.path, 0, 0), 0);
		be = open_image(&td, 0, t.path, NULL);
	}
	cr_assert(!IS_ERR(be), "%s", td.err);
	be->ops->close(be);
	tmp_done(&t);
	free(m.ver);
}

/* ---- ram: the reserve ---- */

/*
 * reserve: empty until the first write; then kept full by the arena thread,
 * so writes that need new slabs take them from it; a discard gives slabs
 * back to it first.
 */
Test(reserve, filled_and_used)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 64 * MiB, 512, 4096, 1 * MiB);
	unsigned char *w = malloc(1 * MiB);
	int i;

	memset(w, 0x5a, 1 * MiB);
	usleep(50 * 1000);
	cr_assert_eq(stat_get(be, "slab_bytes"), 0, "a device never written holds nothing");
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 4096), 0);
	stat_wait_geq(be, "slab_spare_bytes", 8 * MiB);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 8 * MiB);
	/* 6 MiB more: 3 slabs, all from the reserve, whatever the thread does meanwhile. */
	for (i = 0; i < 6; i++)
		cr_assert_eq(do_rw(be, BLK_WRITE, (uint64_t)(i + 1) * MiB, w, 1 * MiB), 0);
	cr_assert_eq(stat_get(be, "reserve_misses"), 0);
	/* Everything discarded: up to 8M stay in the reserve, the rest goes. */
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 64 * MiB, NULL, 0), 0);
	stat_wait_leq(be, "slab_bytes", 2 * MiB + 8 * MiB);
	cr_assert_leq(stat_get(be, "slab_spare_bytes"), 8 * MiB);

	free(w);
	be->ops->close(be);
}

/*
 * The arena thread maps and touches a reserve slab with alloc_lock dropped;
 * a discard meanwhile fills the reserve from the slabs it empties. The
 * hook holds the thread in that window (after the map, before it takes the
 * lock again) while the discard runs: the slab it then brings has no room
 * and must be released, not pushed, or the reserve holds a slab more than
 * its size each time the race is won.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct blk_backend *be;	/* the device whose thread is held */
	bool armed, held, go;
} race = { .lock = PTHREAD_MUTEX_INITIALIZER };	/* cv: blk_cond_init() in the test */

static void race_hook(struct blk_backend *be)
{
	pthread_mutex_lock(&race.lock);
	if (race.armed && be == race.be) {
		race.armed = false;
		race.held = true;
		pthread_cond_broadcast(&race.cv);
		while (!race.go)
			pthread_cond_wait(&race.cv, &race.lock);
	}
	pthread_mutex_unlock(&race.lock);
}

Test(reserve, refill_racing_a_discard)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 64 * MiB, 512, 4096, 1 * MiB);
	unsigned char *w = malloc(1 * MiB);
	uint64_t t0, spare, slabs;
	int i;

	cr_assert_not_null(w);
	memset(w, 0x5a, 1 * MiB);
	cr_assert_eq(blk_cond_init(&race.cv), 0);	/* its timed wait on CLOCK_MONOTONIC */
	ram_test_slab_mapped = race_hook;
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 4096), 0);
	stat_wait_geq(be, "slab_spare_bytes", 8 * MiB);

	/* The next refill is held between its map and its push. */
	pthread_mutex_lock(&race.lock);
	race.be = be;
	race.armed = true;
	pthread_mutex_unlock(&race.lock);
	/* 16 MiB: the reserve's 4 slabs taken (which wakes the thread), 4 more mapped here. */
	for (i = 0; i < 16; i++)
		cr_assert_eq(do_rw(be, BLK_WRITE, (uint64_t)(i + 1) * MiB, w, 1 * MiB), 0);
	pthread_mutex_lock(&race.lock);
	t0 = blk_now_ms();
	while (!race.held && blk_now_ms() - t0 < 60000)
		blk_cond_wait_ms(&race.cv, &race.lock, 1000);
	cr_assert(race.held, "the arena thread did not refill the reserve in 60 s (slab_spare_bytes "
		  "%" PRIu64 ")", stat_get(be, "slab_spare_bytes"));
	pthread_mutex_unlock(&race.lock);

	/* The discard empties every slab: the reserve fills from them, the rest is released. */
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 64 * MiB, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 8 * MiB);

	pthread_mutex_lock(&race.lock);
	race.go = true;
	pthread_cond_broadcast(&race.cv);
	pthread_mutex_unlock(&race.lock);
	/*
	 * The thread now either pushes its slab (the reserve is over its size
	 * at once) or releases it, and unmaps it with the discard's others:
	 * wait for whichever comes first.
	 */
	t0 = blk_now_ms();
	for (;;) {
		spare = stat_get(be, "slab_spare_bytes");
		slabs = stat_get(be, "slab_bytes");
		if (spare > 8 * MiB || slabs <= 2 * MiB + 8 * MiB || blk_now_ms() - t0 > 60000)
			break;
		usleep(1000);
	}
	cr_assert_leq(spare, 8 * MiB, "the reserve of 8 MiB holds %" PRIu64 " bytes (slab_bytes %"
		      PRIu64 ")", spare, slabs);
	cr_assert_leq(slabs, 2 * MiB + 8 * MiB, "slab_bytes %" PRIu64 " after %" PRIu64 " ms "
		      "(slab_spare_bytes %" PRIu64 ")", slabs, blk_now_ms() - t0, spare);
	cr_assert_eq(stat_get(be, "arena_bytes"), 0);

	ram_test_slab_mapped = NULL;
	free(w);
	be->ops->close(be);
}

/* The process's address space, in bytes (VmSize). */
static uint64_t vm_size(void)
{
	char line[256];
	uint64_t kb = 0;
	FILE *f = fopen("/proc/self/status", "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %" SCNu64, &kb) == 1)
			break;
	fclose(f);
	cr_assert_gt(kb, 0);
	return kb * 1024;
}

/*
 * A slab a discard empties goes back into the reserve, touched, with its
 * old data: a page of it must still read as zeros where nothing was
 * written. The arena thread is kept from refilling the reserve (no address
 * space left for a new slab), so that the writes after the discard take
 * exactly those slabs.
 */
Test(reserve, reused_slabs_hold_old_data)
{
	struct test_dev td;
	struct blk_backend *be = open_ok(&td, "ram", 64 * MiB, 512, 4096, 1 * MiB);
	unsigned char *w = malloc(1 * MiB);
	struct rlimit rl;
	uint64_t p;
	int i;

	cr_assert_not_null(w);
	memset(w, 0x5a, 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 4096), 0);
	stat_wait_geq(be, "slab_spare_bytes", 8 * MiB);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 8 * MiB);
	/* From here on no new slab can be mapped (a slab needs 4 MiB to align). */
	rl.rlim_cur = rl.rlim_max = vm_size() + 1 * MiB;
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
	/* 6 MiB of old data into reserve slabs (3 of them), then all discarded. */
	for (i = 0; i < 6; i++)
		cr_assert_eq(do_rw(be, BLK_WRITE, (uint64_t)(i + 1) * MiB, w, 1 * MiB), 0);
	cr_assert_eq(stat_get(be, "reserve_misses"), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 64 * MiB, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 8 * MiB, "the emptied slabs are back");

	/* A sector into each of 2048 new pages: freed pages, then the reused slabs. */
	for (i = 0; i < 2048; i++)
		cr_assert_eq(do_rw(be, BLK_WRITE, 32 * MiB + (uint64_t)i * 4096 + 512, w, 512), 0);
	for (i = 0; i < 8; i++) {
		memset(w, 0xee, 1 * MiB);
		cr_assert_eq(do_rw(be, BLK_READ, 32 * MiB + (uint64_t)i * MiB, w, 1 * MiB), 0);
		for (p = 0; p < 1 * MiB; p += 4096) {
			cr_assert(all_zero(w + p, 512), "page %llu", (unsigned long long)p);
			cr_assert(w[p + 512] == 0x5a && w[p + 1023] == 0x5a);
			cr_assert(all_zero(w + p + 1024, 4096 - 1024), "MiB %d page %llu", i,
				  (unsigned long long)p / 4096);
		}
	}
	free(w);
	be->ops->close(be);
}

Test(reserve, config)
{
	static const char *const big[] = { "reserve", "2G", NULL };
	static const char *const bad[] = { "reserve", "lots", NULL };
	static const char *const odd[] = { "reserve", "3M", NULL };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char w[4096] = { 1 };

	be = open_geo_kv(&td, "ram", 64 * MiB, 512, 4096, 0, big);
	cr_assert(IS_ERR(be));
	cr_assert_str_eq(td.err, "test.conf:4: reserve: 2147483648 is too large (allowed: 0 to turn it off, up to 1G; rounded up to 2M)");
	be = open_geo_kv(&td, "ram", 64 * MiB, 512, 4096, 0, bad);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(td.err, "test.conf:4: reserve: 'lots' is not a size"), "%s", td.err);
	/* 3M: two slabs. */
	be = open_geo_kv(&td, "ram", 64 * MiB, 512, 4096, 0, odd);
	cr_assert(!IS_ERR(be), "%s", td.err);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, w, 4096), 0);
	stat_wait_geq(be, "slab_spare_bytes", 4 * MiB);
	usleep(20 * 1000);
	cr_assert_eq(stat_get(be, "slab_spare_bytes"), 4 * MiB);
	be->ops->close(be);
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

/* ---- ram: clones (clone = DEV@SNAP) ---- */

/* Open ram device @name: @size (0: none given) and the keys @kv, as open_geo_kv. */
static struct blk_backend *open_named(struct test_dev *td, const char *name, uint64_t size,
				      const char *const *kv)
{
	struct blk_backend *be = open_geo_kv(td, "ram", size, size ? 512 : 0, size ? 4096 : 0,
					     size ? VM_IO : 0, kv);

	td->p.dev = name;	/* kept for messages only; the registry copied it at open */
	return be;
}

static struct blk_backend *open_origin(struct test_dev *td, const char *name, uint64_t size)
{
	struct blk_backend *be;
	const struct blk_backend_ops *ops = blk_backend_find("ram");

	memset(td, 0, sizeof(*td));
	td->p.file = "test.conf";
	td->p.line = 3;
	td->p.dev = name;
	td->p.geo = (struct blk_geometry){ .size = size, .lbs = 512, .pbs = 4096, .max_io = VM_IO };
	td->p.err = td->err;
	td->p.errlen = sizeof(td->err);
	td->p.v = td->v;
	be = ops->open(&td->p, NULL);
	cr_assert(!IS_ERR_OR_NULL(be), "open %s: %s", name, td->err);
	return be;
}

static struct blk_backend *open_clone(struct test_dev *td, const char *name, const char *spec)
{
	const char *kv[] = { "clone", spec, NULL };
	const struct blk_backend_ops *ops = blk_backend_find("ram");
	struct blk_backend *be;

	memset(td, 0, sizeof(*td));
	td->p.file = "test.conf";
	td->p.line = 3;
	td->p.dev = name;
	td->p.err = td->err;
	td->p.errlen = sizeof(td->err);
	td->p.v = td->v;
	td->v[0] = (struct blk_param){ .key = kv[0], .value = kv[1], .line = 4 };
	td->p.n = 1;
	be = ops->open(&td->p, NULL);
	cr_assert(!IS_ERR_OR_NULL(be), "open %s clone=%s: %s", name, spec, td->err);
	return be;
}

/*
 * Isolation both ways: a clone reads its origin's snapshot, not what the
 * origin wrote before or after it was taken; the origin and the snapshot
 * never see what the clone writes, nor the clone what the origin writes.
 */
Test(clone, isolation_both_ways)
{
	const uint64_t size = 8 * MiB;
	struct test_dev to, tc;
	struct blk_backend *o = open_origin(&to, "cl-origin", size), *c;
	struct blk_geometry go, gc;
	struct vmodel mo, mc;
	uint16_t *snap;

	vm_init(&mo, size);
	vm_write(o, &mo, 0, 2 * MiB, 1);
	vm_write(o, &mo, 4 * MiB + 512, 1024, 2);
	cr_assert_eq(blk_snap_create(o, "s"), 0);
	snap = vm_copy(&mo);
	vm_write(o, &mo, 1 * MiB, 4096, 3);		/* after the snapshot: not the clone's */

	c = open_clone(&tc, "cl-clone", "cl-origin@s");
	o->ops->geometry(o, &go);
	c->ops->geometry(c, &gc);
	cr_assert_eq(gc.size, go.size);
	cr_assert_eq(gc.lbs, go.lbs);
	cr_assert_eq(gc.pbs, go.pbs);
	mc.size = size;
	mc.ver = vm_copy(&(struct vmodel){ .size = size, .ver = snap });
	vm_check(c, mc.ver, size, "the clone as taken");

	vm_write(c, &mc, 0, 8192, 10);			/* shared pages: copied */
	vm_write(c, &mc, 1 * MiB - 512, 4096, 11);	/* across two pages, one the origin rewrote */
	vm_write(c, &mc, 6 * MiB, 4096, 12);		/* never written anywhere */
	vm_zero(c, &mc, BLK_DISCARD, 4 * MiB, 4096);	/* a shared page dropped by the clone */
	vm_write(o, &mo, 2 * 4096, 4096, 4);		/* the origin, after the clone */
	vm_zero(o, &mo, BLK_WRITE_ZEROES, 1 * MiB + 8192, 8192);

	vm_check(c, mc.ver, size, "the clone");
	vm_check(o, mo.ver, size, "the origin");
	snap_check(o, "s", snap, size);
	cr_assert_eq(stat_get(c, "arena_devices"), 2);
	cr_assert_eq(stat_get(o, "arena_devices"), 2);

	/* The clone's own snapshots and resets stay its own. */
	cr_assert_eq(blk_snap_create(c, "c1"), 0);
	vm_write(c, &mc, 0, 4096, 13);
	cr_assert_eq(blk_snap_reset(c, "c1"), 0);
	mc.ver[0] = 10;
	for (int i = 1; i < 8; i++)
		mc.ver[i] = 10;
	vm_check(c, mc.ver, size, "the clone after its reset");
	vm_check(o, mo.ver, size, "the origin after the clone's reset");
	cr_assert_eq(blk_snap_reset(o, "s"), 0);
	vm_check(o, snap, size, "the origin reset to s");
	vm_check(c, mc.ver, size, "the clone after the origin's reset");

	c->ops->close(c);
	vm_check(o, snap, size, "the origin after the clone closed");
	cr_assert_eq(stat_get(o, "arena_devices"), 1);
	o->ops->close(o);
	free(snap);
	free(mo.ver);
	free(mc.ver);
}

/* A clone costs no data memory; each page it writes costs one. */
Test(clone, memory_only_for_written_pages)
{
	const uint64_t size = 64 * MiB;
	struct test_dev to, tc;
	struct blk_backend *o = open_origin(&to, "mem-origin", size), *c;
	uint64_t pages, nodes;
	struct vmodel mo, mc;

	vm_init(&mo, size);
	vm_write(o, &mo, 0, 32 * MiB, 1);
	cr_assert_eq(blk_snap_create(o, "s"), 0);
	pages = stat_get(o, "arena_pages");
	nodes = stat_get(o, "arena_nodes");
	cr_assert_eq(pages, 32 * MiB / 4096);

	c = open_clone(&tc, "mem-clone", "mem-origin@s");
	cr_assert_eq(stat_get(c, "arena_pages"), pages, "a clone copies nothing");
	cr_assert_eq(stat_get(c, "arena_nodes"), nodes, "nor any index");
	mc.size = size;
	mc.ver = vm_copy(&mo);
	vm_write(c, &mc, 5 * MiB, 4096, 2);		/* one shared page */
	vm_write(c, &mc, 40 * MiB, 4096, 3);		/* one new page */
	cr_assert_eq(stat_get(c, "arena_pages"), pages + 2);
	cr_assert_eq(stat_get(c, "snapshot_cow_pages"), 1);
	cr_assert_eq(stat_get(o, "snapshot_cow_pages"), 0);
	/* Index: the root and one leaf copied, one leaf (and what is above it) added. */
	cr_assert_leq(stat_get(c, "arena_nodes"), nodes + 4);
	vm_write(c, &mc, 5 * MiB, 4096, 4);		/* its own now: in place */
	cr_assert_eq(stat_get(c, "arena_pages"), pages + 2);
	vm_check(c, mc.ver, size, "the clone");

	/* The clone's close frees what it alone held, and only that. */
	c->ops->close(c);
	cr_assert_eq(stat_get(o, "arena_pages"), pages);
	cr_assert_eq(stat_get(o, "arena_nodes"), nodes);
	vm_check(o, mo.ver, size, "the origin");
	o->ops->close(o);
	free(mo.ver);
	free(mc.ver);
}

/* The origin goes first: the clone keeps every page it reads, shared or not. */
Test(clone, origin_removed_first)
{
	const uint64_t size = 16 * MiB;
	struct test_dev to, tc, t2;
	struct blk_backend *o = open_origin(&to, "rm-origin", size), *c, *c2;
	struct vmodel mo, mc;

	vm_init(&mo, size);
	vm_write(o, &mo, 0, 4 * MiB, 1);
	vm_write(o, &mo, 9 * MiB, 8192, 2);
	cr_assert_eq(blk_snap_create(o, "s"), 0);
	c = open_clone(&tc, "rm-clone", "rm-origin@s");
	mc.size = size;
	mc.ver = vm_copy(&mo);
	vm_write(o, &mo, 0, 1 * MiB, 3);		/* the origin's own pages, after */
	vm_write(c, &mc, 2 * MiB, 4096, 4);
	cr_assert_eq(blk_snap_create(o, "t"), 0);
	o->ops->close(o);

	cr_assert_eq(stat_get(c, "arena_devices"), 1);
	/* The snapshot's pages the clone did not overwrite, and no more. */
	cr_assert_eq(stat_get(c, "arena_pages"), vm_pages(mc.ver, size));
	vm_check(c, mc.ver, size, "the clone after its origin closed");
	vm_write(c, &mc, 0, 2 * MiB, 5);		/* shared no more: written in place */
	vm_zero(c, &mc, BLK_DISCARD, 9 * MiB, 4096);
	vm_check(c, mc.ver, size, "the clone, written after");
	cr_assert_eq(stat_get(c, "arena_pages"), vm_pages(mc.ver, size));

	/* The origin's name is free: a clone of it no longer finds it. */
	memset(&t2, 0, sizeof(t2));
	{
		const char *kv[] = { "clone", "rm-origin@s", NULL };

		c2 = open_named(&t2, "rm-clone2", 0, kv);
		cr_assert(IS_ERR(c2));
		cr_assert(strstr(t2.err, "no ram device named rm-origin"), "%s", t2.err);
	}
	c->ops->close(c);
	free(mo.ver);
	free(mc.ver);
}

/* A clone of a clone shares the one arena; any order of closes works. */
Test(clone, chain_and_any_close_order)
{
	const uint64_t size = 8 * MiB;
	struct test_dev to, t1, t2;
	struct blk_backend *o = open_origin(&to, "ch-origin", size), *c1, *c2;
	struct vmodel mo, m1, m2;

	vm_init(&mo, size);
	vm_write(o, &mo, 0, 1 * MiB, 1);
	cr_assert_eq(blk_snap_create(o, "s"), 0);
	c1 = open_clone(&t1, "ch-c1", "ch-origin@s");
	m1.size = size;
	m1.ver = vm_copy(&mo);
	vm_write(c1, &m1, 4096, 4096, 2);
	cr_assert_eq(blk_snap_create(c1, "t"), 0);
	c2 = open_clone(&t2, "ch-c2", "ch-c1@t");
	m2.size = size;
	m2.ver = vm_copy(&m1);
	cr_assert_eq(stat_get(o, "arena_devices"), 3);
	/* The snapshot the first clone came from may go: the clone holds its pages. */
	cr_assert_eq(blk_snap_destroy(o, "s"), 0);
	vm_write(o, &mo, 0, 8192, 3);
	vm_write(c2, &m2, 0, 4096, 4);
	vm_write(c1, &m1, 8192, 4096, 5);
	vm_check(o, mo.ver, size, "the origin");
	vm_check(c1, m1.ver, size, "the first clone");
	vm_check(c2, m2.ver, size, "the clone of the clone");
	c1->ops->close(c1);			/* the middle one first */
	vm_check(o, mo.ver, size, "the origin, the first clone closed");
	vm_check(c2, m2.ver, size, "the second clone, the first closed");
	o->ops->close(o);
	vm_check(c2, m2.ver, size, "the second clone alone");
	cr_assert_eq(stat_get(c2, "arena_pages"), vm_pages(m2.ver, size));
	c2->ops->close(c2);
	free(mo.ver);
	free(m1.ver);
	free(m2.ver);
}

Test(clone, errors)
{
	const uint64_t size = 8 * MiB;
	struct test_dev to, tc;
	struct blk_backend *o = open_origin(&to, "er-origin", size), *c;
	static const struct {
		const char *kv[5];
		uint64_t size;
		const char *msg;
	} bad[] = {
		{ { "clone", "er-origin", NULL }, 0, "is not DEV@SNAP" },
		{ { "clone", "@s", NULL }, 0, "is not DEV@SNAP" },
		{ { "clone", "er-origin@", NULL }, 0, "is not DEV@SNAP" },
		{ { "clone", "er-origin@.x", NULL }, 0, "is not a snapshot name" },
		{ { "clone", "nosuch@s", NULL }, 0, "no ram device named nosuch" },
		{ { "clone", "er-origin@nosnap", NULL }, 0, "has no snapshot named nosnap" },
		{ { "clone", "er-origin@s", NULL }, 16 * MiB, "is not the size of er-origin" },
		{ { "clone", "er-origin@s", "image", "/dev/null", NULL }, 0, "cannot go with image" },
		{ { "clone", "er-origin@s", "reserve", "0", NULL }, 0, "cannot go with reserve" },
	};
	size_t i;

	cr_assert_eq(blk_snap_create(o, "s"), 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = open_named(&tc, "er-clone", bad[i].size, bad[i].kv);
		cr_assert(IS_ERR(c), "case %zu opened", i);
		cr_assert(strstr(tc.err, bad[i].msg), "case %zu: %s", i, tc.err);
	}
	cr_assert_eq(stat_get(o, "arena_devices"), 1);
	/* A shrink is refused while a clone shares the arena; a grow is not. */
	c = open_clone(&tc, "er-clone", "er-origin@s");
	{
		uint64_t s = 4 * MiB;

		cr_assert_eq(blk_resize(c, &s), -EBUSY);
		s = 4 * GiB;
		cr_assert_eq(blk_resize(c, &s), 0);
	}
	c->ops->close(c);
	o->ops->close(o);
}

/*
 * Writers of an origin and of two clones copy the same shared pages at
 * once, while the origin's snapshots come and go and a clone resets: a
 * count shared by two devices' trees moves under both (ar->lock is the
 * arena's, not a device's). Each device has one writer, so its model is
 * exact; every device and the snapshot read as their models at the end.
 */
#define XC_SIZE		(32 * MiB)
#define XC_WRITES	3000

struct xc_dev {
	struct blk_backend *be;
	struct vmodel m;
	unsigned int seed;
	uint16_t ver;
};

static void *xc_writer(void *arg)
{
	struct xc_dev *x = arg;
	int i;

	for (i = 0; i < XC_WRITES; i++) {
		uint64_t pos = (uint64_t)(rand_r(&x->seed) % (XC_SIZE / 512 - 16)) * 512;
		uint64_t len = (uint64_t)(1 + rand_r(&x->seed) % 16) * 512;

		vm_write(x->be, &x->m, pos, len, (uint16_t)(x->ver + i % 100));
	}
	return NULL;
}

Test(clone, concurrent_across_devices, .timeout = 300)
{
	struct test_dev to, t1, t2;
	struct xc_dev x[3];
	pthread_t tid[3];
	uint16_t *snap;
	int i, round;

	x[0].be = open_origin(&to, "xc-origin", XC_SIZE);
	vm_init(&x[0].m, XC_SIZE);
	vm_write(x[0].be, &x[0].m, 0, XC_SIZE, 1);
	cr_assert_eq(blk_snap_create(x[0].be, "s"), 0);
	snap = vm_copy(&x[0].m);
	x[1].be = open_clone(&t1, "xc-c1", "xc-origin@s");
	x[2].be = open_clone(&t2, "xc-c2", "xc-origin@s");
	for (i = 0; i < 3; i++) {
		x[i].m.size = XC_SIZE;
		if (i)
			x[i].m.ver = vm_copy(&x[0].m);
		x[i].seed = 77u + (unsigned int)i;
		x[i].ver = (uint16_t)(100 * (i + 1));
	}
	for (i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&tid[i], NULL, xc_writer, &x[i]), 0);
	for (round = 0; round < 200; round++) {
		char name[16], prev[16];

		snprintf(name, sizeof(name), "x%d", round);
		snprintf(prev, sizeof(prev), "x%d", round - 1);
		cr_assert_eq(blk_snap_create(x[0].be, name), 0);
		if (round)
			cr_assert_eq(blk_snap_destroy(x[0].be, prev), 0);
		cr_assert_eq(blk_snap_create(x[2].be, "c"), 0);
		cr_assert_eq(blk_snap_destroy(x[2].be, "c"), 0);
		usleep(500);
	}
	for (i = 0; i < 3; i++)
		pthread_join(tid[i], NULL);
	for (i = 0; i < 3; i++)
		vm_check(x[i].be, x[i].m.ver, XC_SIZE, i ? "a clone" : "the origin");
	snap_check(x[0].be, "s", snap, XC_SIZE);
	/* The snapshot the clones came from goes; they keep their pages. */
	cr_assert_eq(blk_snap_destroy(x[0].be, "s"), 0);
	x[0].be->ops->close(x[0].be);
	vm_check(x[1].be, x[1].m.ver, XC_SIZE, "the first clone, its origin closed");
	vm_check(x[2].be, x[2].m.ver, XC_SIZE, "the second clone, its origin closed");
	x[1].be->ops->close(x[1].be);
	x[2].be->ops->close(x[2].be);
	for (i = 0; i < 3; i++)
		free(x[i].m.ver);
	free(snap);
}

/*
 * The arena's lock under load: threads write and read back their own
 * ranges of an origin and of a clone (READ and WRITE, the lock shared, a
 * read claim per thread) while the main thread resets a second clone of
 * the same arena again and again (the lock exclusive; the reset asserts
 * that no I/O of that clone is inside, which must not count the other
 * devices' I/O in the one lock), writes it, and takes and drops
 * snapshots of the busy devices (the lock exclusive, counts of pages the
 * writers are copying dropped under it). A writer that came in while a
 * tree was dropped or a count moved without a locked instruction would
 * read freed or reused pages: each thread checks what it reads back, and
 * every device and snapshot reads as its model at the end.
 */
#define RX_SIZE		(16 * MiB)
#define RX_THREADS	4		/* two per busy device, each its own half */
#define RX_ROUNDS	300

struct rx_thread {
	struct blk_backend *be;
	uint16_t *ver;		/* the device's model; this thread's half only */
	uint64_t base;		/* its half: [base, base + RX_SIZE / 2) */
	unsigned int seed;
	uint16_t v;
	bool *stop;		/* atomic */
	int fail;
	long ios;
};

static void *rx_thread_fn(void *arg)
{
	struct rx_thread *t = arg;
	unsigned char *buf = malloc(64 * KiB), *want = malloc(64 * KiB);

	while (!__atomic_load_n(t->stop, __ATOMIC_ACQUIRE) || t->ios < 200) {
		uint64_t len = (uint64_t)(1 + rand_r(&t->seed) % 128) * 512;
		uint64_t pos = t->base + (uint64_t)(rand_r(&t->seed) % ((RX_SIZE / 2 - len) / 512 + 1)) * 512;
		uint64_t s;

		if (rand_r(&t->seed) % 2) {
			t->v = (uint16_t)(t->v % 60000 + 1);
			for (s = 0; s < len; s += 512)
				t->ver[(pos + s) / 512] = t->v;
			vm_expect(t->ver, pos, len, buf);
			if (ct_io(t->be, BLK_WRITE, pos, buf, len))
				t->fail++;
		}
		memset(buf, 0xee, len);
		vm_expect(t->ver, pos, len, want);
		if (ct_io(t->be, BLK_READ, pos, buf, len) || memcmp(buf, want, len))
			t->fail++;
		t->ios++;
	}
	free(buf);
	free(want);
	return NULL;
}

Test(clone, reset_under_other_devices_io, .timeout = 300)
{
	struct test_dev to, t1, t2;
	struct blk_backend *o, *c1, *c2;
	struct vmodel mo, m1, m2;
	struct rx_thread th[RX_THREADS];
	pthread_t tid[RX_THREADS];
	struct blk_snap_info info[4];
	uint16_t *base, *c2base;
	bool stop = false;
	unsigned int seed = 5;
	int i, round;

	o = open_origin(&to, "rx-origin", RX_SIZE);
	vm_init(&mo, RX_SIZE);
	vm_write(o, &mo, 0, RX_SIZE, 1);
	cr_assert_eq(blk_snap_create(o, "s"), 0);
	base = vm_copy(&mo);
	c1 = open_clone(&t1, "rx-c1", "rx-origin@s");
	c2 = open_clone(&t2, "rx-c2", "rx-origin@s");
	m1 = (struct vmodel){ .size = RX_SIZE, .ver = vm_copy(&mo) };
	m2 = (struct vmodel){ .size = RX_SIZE, .ver = vm_copy(&mo) };
	/* The second clone's base: a few pages of its own over the origin's. */
	vm_write(c2, &m2, 1 * MiB, 64 * KiB, 500);
	vm_write(c2, &m2, 9 * MiB + 512, 3 * 512, 501);
	cr_assert_eq(blk_snap_create(c2, "b"), 0);
	c2base = vm_copy(&m2);

	for (i = 0; i < RX_THREADS; i++) {
		th[i] = (struct rx_thread){
			.be = i < 2 ? o : c1, .ver = i < 2 ? mo.ver : m1.ver,
			.base = (uint64_t)(i % 2) * (RX_SIZE / 2), .seed = 100u + (unsigned int)i,
			.v = (uint16_t)(1000 * (i + 1)), .stop = &stop,
		};
		cr_assert_eq(pthread_create(&tid[i], NULL, rx_thread_fn, &th[i]), 0);
	}
	for (round = 0; round < RX_ROUNDS; round++) {
		uint64_t pos = (uint64_t)(rand_r(&seed) % (RX_SIZE / 4096)) * 4096;

		/* Only this thread does I/O on c2: it is quiesced for its reset. */
		cr_assert_eq(blk_snap_reset(c2, "b"), 0, "round %d", round);
		memcpy(m2.ver, c2base, RX_SIZE / 512 * sizeof(*m2.ver));
		vm_check_range(c2, m2.ver, 1 * MiB - 4096, 72 * KiB, "c2 after a reset");
		vm_check_range(c2, m2.ver, pos, 4096, "c2 after a reset");
		vm_write(c2, &m2, pos, 8192 > RX_SIZE - pos ? 4096 : 8192, (uint16_t)(600 + round));
		vm_check_range(c2, m2.ver, pos, 4096, "c2 after a write");
		/* Snapshots of the busy devices come and go under their I/O. */
		cr_assert_eq(blk_snap_create(o, "t"), 0);
		cr_assert_eq(blk_snap_create(c1, "t"), 0);
		cr_assert_eq(blk_snap_list(o, info, 4), 2);
		usleep(200);
		cr_assert_eq(blk_snap_destroy(c1, "t"), 0);
		cr_assert_eq(blk_snap_destroy(o, "t"), 0);
		/* The other devices' I/O gets going again before the next reset. */
		usleep(500);
	}
	__atomic_store_n(&stop, true, __ATOMIC_RELEASE);
	for (i = 0; i < RX_THREADS; i++) {
		pthread_join(tid[i], NULL);
		cr_assert_eq(th[i].fail, 0, "thread %d: %d of %ld I/Os failed or read wrong", i,
			     th[i].fail, th[i].ios);
	}
	vm_check(o, mo.ver, RX_SIZE, "the origin");
	vm_check(c1, m1.ver, RX_SIZE, "the first clone");
	vm_check(c2, m2.ver, RX_SIZE, "the second clone");
	snap_check(o, "s", base, RX_SIZE);
	snap_check(c2, "b", c2base, RX_SIZE);
	c2->ops->close(c2);
	c1->ops->close(c1);
	o->ops->close(o);
	free(mo.ver);
	free(m1.ver);
	free(m2.ver);
	free(base);
	free(c2base);
}

/*
 * Threads that do a few I/Os and exit, while snapshots come and go: each
 * leaves a read claim record behind at its exit, freed while a writer of
 * the lock may be walking the records (use after free: the sanitizer
 * build), and each new thread makes one, on a list a writer walks.
 */
#define CG_ROUNDS	100

Test(clone, io_threads_come_and_go, .timeout = 300)
{
	struct test_dev to;
	struct blk_backend *o = open_origin(&to, "cg-origin", RX_SIZE);
	struct rx_thread th[2];
	pthread_t tid[2];
	struct vmodel m;
	bool stop = true;
	int i, round;

	vm_init(&m, RX_SIZE);
	for (round = 0; round < CG_ROUNDS; round++) {
		for (i = 0; i < 2; i++) {
			th[i] = (struct rx_thread){
				.be = o, .ver = m.ver, .base = (uint64_t)i * (RX_SIZE / 2),
				.seed = 7u * (unsigned int)round + (unsigned int)i,
				.v = (uint16_t)(100 * round + 10 * i + 1), .stop = &stop, .ios = 180,
			};
			cr_assert_eq(pthread_create(&tid[i], NULL, rx_thread_fn, &th[i]), 0);
		}
		cr_assert_eq(blk_snap_create(o, "t"), 0);
		cr_assert_eq(blk_snap_destroy(o, "t"), 0);
		for (i = 0; i < 2; i++) {
			pthread_join(tid[i], NULL);
			cr_assert_eq(th[i].fail, 0, "round %d thread %d", round, i);
		}
	}
	vm_check(o, m.ver, RX_SIZE, "the origin");
	o->ops->close(o);
	free(m.ver);
}
