// SPDX-License-Identifier: MIT
/*
 * tests/unit/cache_fixture.c - see cache_fixture.h.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cache_fixture.h"
#include "helpers.h"

struct fake_be *fb;
struct pc_cache *pc;
struct pc_dev *dev;
uint64_t dev_size;
uint8_t *model;
struct fake_be *fb_b;
struct pc_dev *dev_b;

struct blk_geometry geo_of(uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io)
{
	struct blk_geometry g = {
		.size = size,
		.lbs = lbs,
		.pbs = pbs,
		.io_min = pbs,
		.io_opt = max_io,
		.max_io = max_io,
		.dma_align = lbs < 4096 ? lbs : 4096,
	};
	return g;
}

static struct pc_cache_params cache_params(uint64_t size, uint32_t folio, uint64_t dirty_limit)
{
	struct pc_cache_params p = {
		.size = size,
		.folio_size = folio,
		.min_block = 512,
		.dirty_background = dirty_limit / 2,
		.dirty_limit = dirty_limit,
		.dirty_expire_ms = 60000,
	};
	return p;
}

static struct pc_cache *cache_create(const struct pc_cache_params *p)
{
	struct pc_cache *c = pc_cache_create(p);

	cr_assert(!IS_ERR_OR_NULL(c), "pc_cache_create(size %llu, folio %u): %ld",
		  (unsigned long long)p->size, p->folio_size, IS_ERR(c) ? PTR_ERR(c) : 0L);
	return c;
}

struct pc_cache *cache_new(uint64_t size, uint32_t folio, uint64_t dirty_limit)
{
	struct pc_cache_params p = cache_params(size, folio, dirty_limit);

	return cache_create(&p);
}

void setup_params(const struct blk_geometry *g, const struct pc_cache_params *p,
		  uint32_t cache_block)
{
	fb = fake_create(g);
	cr_assert_not_null(fb);
	pc = cache_create(p);
	dev = pc_dev_add(pc, "t0", fake_backend(fb), cache_block);
	cr_assert(!IS_ERR_OR_NULL(dev), "pc_dev_add(folio %u, cache_block %u): %ld",
		  p->folio_size, cache_block, IS_ERR(dev) ? PTR_ERR(dev) : 0L);
	dev_size = g->size;
	if (dev_size <= 64 * MiB) {
		model = calloc(1, dev_size);
		cr_assert_not_null(model);
	}
}

void setup(const struct blk_geometry *g, uint64_t cache_size, uint32_t folio,
	   uint32_t cache_block)
{
	struct pc_cache_params p = cache_params(cache_size, folio, cache_size);

	setup_params(g, &p, cache_block);
}

/* ---- test memory ---- */

static pthread_mutex_t talloc_lock = PTHREAD_MUTEX_INITIALIZER;
static void **tallocs;
static size_t nr_tallocs, cap_tallocs;

void *talloc(size_t len)
{
	size_t n = len ? (len + 4095) & ~(size_t)4095 : 4096;
	void *p = aligned_alloc(4096, n);

	cr_assert_not_null(p);
	memset(p, 0, n);
	pthread_mutex_lock(&talloc_lock);
	if (nr_tallocs == cap_tallocs) {
		cap_tallocs = cap_tallocs ? 2 * cap_tallocs : 64;
		tallocs = realloc(tallocs, cap_tallocs * sizeof(*tallocs));
	}
	tallocs[nr_tallocs++] = p;
	pthread_mutex_unlock(&talloc_lock);
	return p;
}

void tfree(void *p)
{
	pthread_mutex_lock(&talloc_lock);
	for (size_t i = nr_tallocs; i-- > 0;) {
		if (tallocs[i] == p) {
			tallocs[i] = tallocs[--nr_tallocs];
			break;
		}
	}
	pthread_mutex_unlock(&talloc_lock);
	free(p);
}

static void tfree_all(void)
{
	pthread_mutex_lock(&talloc_lock);
	for (size_t i = 0; i < nr_tallocs; i++)
		free(tallocs[i]);
	free(tallocs);
	tallocs = NULL;
	nr_tallocs = cap_tallocs = 0;
	pthread_mutex_unlock(&talloc_lock);
}

char *log_text(void)
{
	static char buf[16384];
	char *big = NULL;
	size_t len = 0, n;
	FILE *f = open_memstream(&big, &len);

	buf[0] = 0;
	if (!f)
		return buf;
	fake_log_dump(fb, f);
	fclose(f);
	if (len < sizeof(buf)) {
		memcpy(buf, big, len + 1);
	} else {
		/* the first line (counts) and the last ops */
		n = (size_t)(strchr(big, '\n') - big) + 1;
		if (n > 200)
			n = 200;
		memcpy(buf, big, n);
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "  ...\n");
		memcpy(buf + n, big + len - (sizeof(buf) - n - 1), sizeof(buf) - n - 1);
		buf[sizeof(buf) - 1] = 0;
	}
	free(big);
	return buf;
}

size_t ops_of(unsigned int mask, struct rng *out, size_t max)
{
	size_t n = 0, len = fake_log_len(fb);
	struct fake_op e;

	for (size_t i = 0; i < len && fake_log_get(fb, i, &e); i++) {
		if (!(mask & FAKE_OP(e.op)))
			continue;
		if (n < max)
			out[n] = (struct rng){ e.pos, e.len };
		n++;
	}
	return n;
}

void teardown(void)
{
	if (fb) {
		cr_expect_eq(fake_violations(fb), 0, "the cache broke the backend contract:\n%s",
			     log_text());
		cr_expect_eq(fake_pending(fb), 0, "I/O still pending at teardown");
	}
	if (dev && !IS_ERR(dev))
		pc_dev_remove(dev);
	if (dev_b && !IS_ERR(dev_b))
		pc_dev_remove(dev_b);
	if (pc && !IS_ERR(pc))
		pc_cache_destroy(pc);
	fake_destroy(fb);
	fake_destroy(fb_b);
	free(model);
	tfree_all();
	fb = NULL;
	fb_b = NULL;
	dev_b = NULL;
	pc = NULL;
	dev = NULL;
	model = NULL;
}

/* ---- data ---- */

void fill(uint8_t *buf, size_t len, uint64_t pos, unsigned int gen)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pat(pos + i, gen);
}

void expect_same(const uint8_t *got, const uint8_t *exp, size_t len, uint64_t pos,
		 const char *what)
{
	if (memcmp(got, exp, len) == 0)
		return;
	for (size_t i = 0; i < len; i++) {
		if (got[i] != exp[i])
			cr_assert_fail("%s: byte at %llu is 0x%02x, expected 0x%02x",
				       what, (unsigned long long)(pos + i), got[i], exp[i]);
	}
}

void store_fill(uint64_t pos, size_t len, unsigned int gen)
{
	uint8_t *b = talloc(len);

	fill(b, len, pos, gen);
	fake_store_write(fb, b, len, pos);
	if (model)
		memcpy(model + pos, b, len);
	tfree(b);
}

void do_write(uint64_t pos, size_t len, unsigned int gen)
{
	uint8_t *b = talloc(len);
	ssize_t r;

	fill(b, len, pos, gen);
	r = pc_write(dev, b, len, pos);
	cr_assert_eq(r, (ssize_t)len, "pc_write(pos %llu, len %zu) = %zd",
		     (unsigned long long)pos, len, r);
	if (model)
		memcpy(model + pos, b, len);
	tfree(b);
}

void verify_store(uint64_t pos, size_t len)
{
	expect_same(fake_store(fb) + pos, model + pos, len, pos, "backend store");
}

int do_fsync(void)
{
	pc_errseq_t seq = pc_errseq_sample(dev);

	return pc_fsync(dev, &seq);
}
