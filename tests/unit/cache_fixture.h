/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/cache_fixture.h - the fixture of the tests of core/ over the
 * fake backend (test_pcache.c, test_shaping.c): one cache, a device on a
 * fake (and a second one for tests that need it), a model of what the
 * device must hold, and test memory freed at teardown even when an
 * assertion cuts a test short. Each test runs in its own process
 * (Criterion), so the fixture lives in these globals; teardown() checks
 * that the cache kept the backend contract and left no I/O pending.
 */
#ifndef BLKFS_TEST_CACHE_FIXTURE_H
#define BLKFS_TEST_CACHE_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../../core/pcache.h"
#include "fake_backend.h"

extern struct fake_be *fb;
extern struct pc_cache *pc;
extern struct pc_dev *dev;
extern uint64_t dev_size;
extern uint8_t *model;		/* expected device contents, when small enough */
extern struct fake_be *fb_b;	/* a second device, for tests that need one */
extern struct pc_dev *dev_b;

/* io_min = @pbs, io_opt = @max_io, dma_align = @lbs up to 4096. */
struct blk_geometry geo_of(uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io);
/* A cache of @size bytes in @folio-byte folios; dirty_background = @dirty_limit / 2. */
struct pc_cache *cache_new(uint64_t size, uint32_t folio, uint64_t dirty_limit);
/*
 * A device "t0" of geometry @g on a new fake (fb, dev) behind a new cache
 * (pc) made with @p; @cache_block 0 = the set_init_blocksize rule. model
 * is allocated (zeroed) for a device of up to 64 MiB.
 */
void setup_params(const struct blk_geometry *g, const struct pc_cache_params *p,
		  uint32_t cache_block);
/*
 * The same with cache_new()'s parameters and the whole cache as dirty
 * limit: nothing is written back before the test asks, unless a writer
 * runs out of folios.
 */
void setup(const struct blk_geometry *g, uint64_t cache_size, uint32_t folio,
	   uint32_t cache_block);
void teardown(void);

#define TEST_FIX(suite, name) Test(suite, name, .fini = teardown, .timeout = 60)

/* Zeroed, 4096-aligned (usable for direct I/O), freed at teardown at the latest. */
void *talloc(size_t len);
void tfree(void *p);

/* The fake's log (ops since the last clear), for failure messages; the tail if long. */
char *log_text(void);

/* An op's range, as the fake logged it. */
struct rng {
	uint64_t pos, len;
};

/* Logged ops of @mask in submission order; returns how many (up to @max stored). */
size_t ops_of(unsigned int mask, struct rng *out, size_t max);

/* Byte @pos of generation @gen; generation 0 is the zeroed device; never 0 otherwise. */
static inline uint8_t pat(uint64_t pos, unsigned int gen)
{
	uint64_t x;

	if (!gen)
		return 0;
	x = (pos + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)gen * 0xBF58476D1CE4E5B9ull;
	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	return (uint8_t)(x >> 56) | 1;	/* never 0: a zero byte is never data */
}

void fill(uint8_t *buf, size_t len, uint64_t pos, unsigned int gen);
/* Fail with the first differing offset. */
void expect_same(const uint8_t *got, const uint8_t *exp, size_t len, uint64_t pos,
		 const char *what);
/* Put generation @gen into the fake's store directly, as if already on disk. */
void store_fill(uint64_t pos, size_t len, unsigned int gen);
/* pc_write generation @gen at @pos, all of it, and into the model. */
void do_write(uint64_t pos, size_t len, unsigned int gen);
/* Compare the fake's store with the model. */
void verify_store(uint64_t pos, size_t len);
/* pc_fsync() as a descriptor opened now would. */
int do_fsync(void);

#endif
