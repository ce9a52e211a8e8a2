/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_mapped.c - mapped direct reads (BLK_IO_MAPPED) of the
 * ram backend against in-place writes of the same pages, for
 * ThreadSanitizer (`make tsan`; plain C: Criterion cannot run under TSan).
 *
 *   stress_mapped [SECONDS]	(default 10 s)
 *
 * A cache in front of a ram device whose first BLOCKS pages are written
 * once (so later writes are in place). 2 writers rewrite each page whole
 * with one byte value, through pc_direct_write_async(); 2 readers read all
 * the pages in one direct read taking a mapping (pc_aio.map_ok: their done
 * reads the arena inside ram's end_io, as a FUSE reply does) and 1 reader
 * without (ram copies). Every page a reader gets must be one value: ram's
 * page stripes order the writers' memcpy against the readers' (TSan checks
 * that they do: a memcpy of a page racing another is a report). Exit 0, or
 * 1 on a torn page.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/backend.h"
#include "../../core/pcache.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define BLOCKS 8
#define LEN (BLOCKS * 4096)

static struct pc_dev *dev;
static volatile bool stop;	/* atomic */
static int torn;		/* atomic */
static unsigned long nr_reads, nr_mapped;	/* atomic */

struct req {
	struct pc_aio aio;	/* first */
	int calls;		/* atomic */
	ssize_t res;
	uint8_t *buf, *got;
};

static void check(const uint8_t *p, size_t len)
{
	size_t k;

	for (k = 0; k + 4096 <= len; k += 4096)
		if (memcmp(p + k, p + k + 1, 4095))
			__atomic_add_fetch(&torn, 1, __ATOMIC_RELAXED);
}

static void rdone(struct pc_aio *aio, ssize_t res)
{
	struct req *r = (struct req *)aio;
	size_t off = 0;
	unsigned int i;

	r->res = res;
	if (res > 0 && aio->map) {
		for (i = 0; i < aio->mapcnt; i++) {
			memcpy(r->got + off, aio->map[i].iov_base, aio->map[i].iov_len);
			off += aio->map[i].iov_len;
		}
		__atomic_add_fetch(&nr_mapped, 1, __ATOMIC_RELAXED);
	} else if (res > 0) {
		memcpy(r->got, r->buf, (size_t)res);
	}
	__atomic_store_n(&r->calls, 1, __ATOMIC_RELEASE);
}

static void wait_req(struct req *r)
{
	while (!__atomic_load_n(&r->calls, __ATOMIC_ACQUIRE))
		sched_yield();
}

static void *reader(void *arg)
{
	bool map_ok = arg != NULL;
	struct req r;

	memset(&r, 0, sizeof(r));
	r.buf = aligned_alloc(4096, LEN);
	r.got = malloc(LEN);
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		r.calls = 0;
		r.aio.done = rdone;
		r.aio.map_ok = map_ok;
		pc_direct_read_async(dev, &r.aio, r.buf, LEN, 0);
		wait_req(&r);
		if (r.res != LEN) {
			fprintf(stderr, "stress_mapped: read: %zd\n", r.res);
			exit(1);
		}
		check(r.got, LEN);
		__atomic_add_fetch(&nr_reads, 1, __ATOMIC_RELAXED);
	}
	free(r.buf);
	free(r.got);
	return NULL;
}

static void wdone(struct pc_aio *aio, ssize_t res)
{
	struct req *r = (struct req *)aio;

	r->res = res;
	__atomic_store_n(&r->calls, 1, __ATOMIC_RELEASE);
}

static void write_page(uint8_t *b, int blk, int v)
{
	struct req w;

	memset(&w, 0, sizeof(w));
	w.aio.done = wdone;
	memset(b, v, 4096);
	pc_direct_write_async(dev, &w.aio, b, 4096, (uint64_t)blk * 4096);
	wait_req(&w);
	if (w.res != 4096) {
		fprintf(stderr, "stress_mapped: write: %zd\n", w.res);
		exit(1);
	}
}

static void *writer(void *arg)
{
	uint8_t *b = aligned_alloc(4096, 4096);
	int v = (int)(uintptr_t)arg, blk;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		for (blk = 0; blk < BLOCKS; blk++)
			write_page(b, blk, v & 0xff);
		v += 2;
	}
	free(b);
	return NULL;
}

int main(int argc, char **argv)
{
	struct blk_params p = { .file = "stress_mapped", .line = 1, .dev = "ram0",
				.geo = { .size = 16 * MiB, .lbs = 512, .pbs = 4096, .max_io = 1 * MiB } };
	struct pc_cache_params cp = { .size = 4 * MiB, .folio_size = 64 * KiB, .min_block = 512,
				      .dirty_background = 1 * MiB, .dirty_limit = 2 * MiB,
				      .dirty_expire_ms = 1000 };
	int secs = argc > 1 ? atoi(argv[1]) : 10, i;
	pthread_t t[5];
	struct blk_backend *be;
	struct pc_cache *pc;
	uint8_t *b;
	char err[256];

	p.err = err;
	p.errlen = sizeof(err);
	be = blk_backend_find("ram")->open(&p, NULL);
	if (IS_ERR(be)) {
		fprintf(stderr, "stress_mapped: open: %s\n", err);
		return 1;
	}
	pc = pc_cache_create(&cp);
	if (IS_ERR_OR_NULL(pc))
		return 1;
	dev = pc_dev_add(pc, "ram0", be, 0);
	if (IS_ERR_OR_NULL(dev))
		return 1;
	b = aligned_alloc(4096, 4096);
	for (i = 0; i < BLOCKS; i++)
		write_page(b, i, 0xff);
	free(b);
	for (i = 0; i < 5; i++)
		pthread_create(&t[i], NULL, i < 2 ? writer : reader,
			       i < 2 ? (void *)(uintptr_t)(i + 1) : i < 4 ? (void *)1 : NULL);
	sleep((unsigned int)secs);
	__atomic_store_n(&stop, true, __ATOMIC_RELAXED);
	for (i = 0; i < 5; i++)
		pthread_join(t[i], NULL);
	pc_dev_remove(dev);
	pc_cache_destroy(pc);
	be->ops->close(be);
	printf("stress_mapped: %lu reads (%lu mapped), %d torn pages\n", nr_reads, nr_mapped, torn);
	return torn || !nr_mapped;
}
