/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_nomem.c - core/ when memory runs out, SQLite's malloc
 * failure loop: an operation runs again and again with its k-th
 * allocation failing (k = 1, 2, ... until it runs through without one),
 * and after each run the cache must still agree with the device, whatever
 * the operation returned. This binary is linked with -Wl,--wrap=malloc and
 * --wrap=calloc (GNUmakefile): every allocation of libblkfs.a and of the
 * test objects passes through the wrappers below; Criterion's own do not.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);

static int countdown;	/* atomic; > 0: the countdown-th allocation from now fails */
static int failed;	/* atomic: allocations failed since armed */

static bool fail_now(void)
{
	int left = __atomic_load_n(&countdown, __ATOMIC_SEQ_CST);

	while (left > 0) {
		if (__atomic_compare_exchange_n(&countdown, &left, left - 1, false,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			if (left == 1) {
				__atomic_add_fetch(&failed, 1, __ATOMIC_SEQ_CST);
				return true;
			}
			return false;
		}
	}
	return false;
}

void *__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return fail_now() ? NULL : __real_calloc(n, size);
}

static void arm(int k)
{
	__atomic_store_n(&failed, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&countdown, k, __ATOMIC_SEQ_CST);
}

/* Disarm; true if an allocation failed while armed. */
static bool disarm(void)
{
	__atomic_store_n(&countdown, 0, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&failed, __ATOMIC_SEQ_CST) != 0;
}

/* What the cache serves for [pos, pos+len) is what the device holds. */
static void expect_cache_is_device(uint64_t pos, size_t len, const char *what, int k)
{
	uint8_t *c = talloc(len), *d = talloc(len);

	cr_assert_eq(pc_read(dev, c, len, pos), (ssize_t)len);
	fake_store_read(fb, d, len, pos);
	for (size_t i = 0; i < len; i++)
		cr_assert_eq(c[i], d[i], "%s, allocation %d failing: the cache serves 0x%02x at %llu, "
			     "the device holds 0x%02x", what, k, c[i], (unsigned long long)(pos + i), d[i]);
	tfree(c);
	tfree(d);
}

/*
 * An O_DIRECT write over cached blocks: whatever it returns, a buffered read
 * afterwards must see what the device holds. (The invalidation after the
 * write used to allocate, and its -ENOMEM was ignored: the old, clean copy
 * kept being served.)
 */
Test(nomem, direct_write_leaves_no_stale_copy, .fini = teardown, .timeout = 180)
{
	struct blk_geometry g = geo_of(4 * MiB, 4096, 4096, 1 * MiB);
	uint8_t *buf, *old = malloc(64 * KiB);
	int k;

	for (k = 1;; k++) {
		ssize_t r;
		bool hit;

		setup(&g, 8 * MiB, 64 * KiB, 0);
		store_fill(0, dev_size, 1);
		cr_assert_eq(pc_read(dev, old, 64 * KiB, 128 * KiB), (ssize_t)(64 * KiB));
		buf = talloc(64 * KiB);
		fill(buf, 64 * KiB, 128 * KiB, 2);
		arm(k);
		r = pc_direct_write(dev, buf, 64 * KiB, 128 * KiB);
		hit = disarm();
		cr_assert(r == (ssize_t)(64 * KiB) || r < 0, "direct write returned %zd", r);
		expect_cache_is_device(128 * KiB, 64 * KiB, "direct write", k);
		teardown();
		if (!hit)
			break;
		cr_assert_lt(k, 100, "still failing allocations after 100 runs");
	}
	/*
	 * The per-I/O state now comes from preallocated pools: the write may
	 * allocate nothing at all (k = 1 then ran without a failure), and on
	 * the code that allocated in the invalidation this failed at k = 3.
	 */
	free(old);
}

/*
 * A discard over dirty and clean cached blocks, cutting cache blocks at
 * both ends: whatever it returns, the cache agrees with the device once the
 * dirty data is written, and when it succeeded the range reads as zeros.
 */
Test(nomem, discard_leaves_cache_and_device_agreeing, .fini = teardown, .timeout = 180)
{
	struct blk_geometry g = geo_of(4 * MiB, 512, 512, 1 * MiB);
	uint8_t *z = calloc(1, 40 * KiB), *got = malloc(40 * KiB);
	int k, ret;

	for (k = 1;; k++) {
		bool hit;

		setup(&g, 8 * MiB, 64 * KiB, 0);
		cr_assert_eq(pc_dev_cache_block(dev), 4096);
		store_fill(0, dev_size, 1);
		cr_assert_eq(pc_read(dev, got, 40 * KiB, 0), (ssize_t)(40 * KiB));	/* clean */
		do_write(8 * KiB + 100, 20 * KiB, 2);				/* dirty, partial ends */
		arm(k);
		ret = pc_discard(dev, 4 * KiB + 512, 30 * KiB);
		hit = disarm();
		if (!ret) {
			cr_assert_eq(pc_read(dev, got, 30 * KiB, 4 * KiB + 512), (ssize_t)(30 * KiB));
			cr_assert(!memcmp(got, z, 30 * KiB), "allocation %d failing: a discarded byte "
				  "reads back non-zero", k);
		}
		cr_assert_eq(pc_fsync(dev, &(pc_errseq_t){ 0 }), 0);
		expect_cache_is_device(0, 40 * KiB, "discard", k);
		if (!ret) {
			fake_store_read(fb, got, 30 * KiB, 4 * KiB + 512);
			cr_assert(!memcmp(got, z, 30 * KiB), "allocation %d failing: the discard "
				  "returned 0 and the device holds old bytes", k);
		}
		teardown();
		if (!hit)
			break;
		cr_assert_lt(k, 100, "still failing allocations after 100 runs");
	}
	free(z);
	free(got);
}
