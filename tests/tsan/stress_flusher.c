/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_flusher.c - the background flusher started and stopped
 * over and over while writers keep the cache above its dirty background
 * level, for ThreadSanitizer (`make tsan`).
 *
 *   stress_flusher [SECONDS] [SEED]	(default 10 s, seed 1)
 *
 * One small cache (2 MiB of 64 KiB folios, dirty limit 512 KiB) in front of
 * the fake backend in deferred mode. Three writers, each owning a region,
 * write at random offsets and lengths (so the flusher is under pressure
 * and loops), fsync now and then, and read back what they wrote; the
 * cache's owner thread (this one) calls pc_cache_start() and
 * pc_cache_stop() in a loop with pauses of 0-2 ms between: a stop lands
 * while the flusher waits, while it loops under pressure, and while it is
 * inside a pass; writers throttled by the dirty limit see it come and go.
 * At the end every region equals its model, on the backend too, and the
 * fake saw no I/O that breaks backend.h. Exit 0 on success, 1 on a
 * mismatch (a TSan report fails `make tsan` through halt_on_error).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"
#include "../../core/pcache.h"
#include "../unit/fake_backend.h"

#define KiB (1024ull)
#define MiB (1024ull * KiB)
#define DEV_SIZE	(6 * MiB)
#define NR_WRITERS	3
#define REGION		(DEV_SIZE / NR_WRITERS)
#define MAX_LEN		(96 * KiB)

static struct pc_dev *dev;
static struct fake_be *fb;
static uint8_t *model;
static atomic_bool done;
static atomic_int failures;
static uint64_t seed = 1;

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

struct writer {
	pthread_t tid;
	int idx;
	uint64_t rng, writes;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	uint8_t *buf = malloc(MAX_LEN), *back = malloc(MAX_LEN);
	uint64_t base = (uint64_t)w->idx * REGION;

	if (!buf || !back)
		abort();
	while (!atomic_load(&done)) {
		uint64_t len = 1 + rnd(&w->rng) % MAX_LEN;
		uint64_t pos = base + rnd(&w->rng) % (REGION - len);
		uint64_t i;

		for (i = 0; i < len; i++)
			buf[i] = (uint8_t)rnd(&w->rng);
		if (pc_write(dev, buf, len, pos) != (ssize_t)len) {
			fprintf(stderr, "stress_flusher: FAIL: write %" PRIu64 "+%" PRIu64 "\n", pos, len);
			atomic_fetch_add(&failures, 1);
			break;
		}
		memcpy(model + pos, buf, len);
		if (pc_read(dev, back, len, pos) != (ssize_t)len || memcmp(back, buf, len)) {
			fprintf(stderr, "stress_flusher: FAIL: read back %" PRIu64 "+%" PRIu64 "\n", pos, len);
			atomic_fetch_add(&failures, 1);
			break;
		}
		if (rnd(&w->rng) % 64 == 0) {
			pc_errseq_t since = pc_errseq_sample(dev);

			if (pc_fsync(dev, &since)) {
				fprintf(stderr, "stress_flusher: FAIL: fsync\n");
				atomic_fetch_add(&failures, 1);
				break;
			}
		}
		w->writes++;
	}
	free(buf);
	free(back);
	return NULL;
}

int main(int argc, char **argv)
{
	struct pc_cache_params cp = {
		.size = 2 * MiB,
		.folio_size = 64 * KiB,
		.min_block = 512,
		.dirty_background = 256 * KiB,
		.dirty_limit = 512 * KiB,
		.dirty_expire_ms = 20,
	};
	struct blk_geometry geo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 128 * KiB, .dma_align = 512,
	};
	struct writer ws[NR_WRITERS];
	pc_errseq_t since;
	uint64_t end, cycles = 0, writes = 0, x;
	struct pc_cache *pc;
	unsigned seconds;
	uint8_t *buf;
	int i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 10;
	if (argc > 2)
		seed = strtoull(argv[2], NULL, 0);
	if (!seed)
		seed = 1;
	x = seed;
	printf("stress_flusher: %u s, seed %" PRIu64 "\n", seconds, seed);
	pc = pc_cache_create(&cp);
	fb = fake_create(&geo);
	model = calloc(1, DEV_SIZE);
	buf = malloc(DEV_SIZE);
	if (IS_ERR_OR_NULL(pc) || !fb || !model || !buf)
		return 1;
	fake_set_seed(fb, (unsigned)seed);
	fake_set_delay(fb, 100);
	fake_set_mode(fb, FAKE_DEFERRED);
	dev = pc_dev_add(pc, "fk", fake_backend(fb), 512);
	if (IS_ERR_OR_NULL(dev))
		return 1;
	for (i = 0; i < NR_WRITERS; i++) {
		ws[i] = (struct writer){ .idx = i, .rng = seed * 1000003 + (uint64_t)i + 1 };
		pthread_create(&ws[i].tid, NULL, writer_main, &ws[i]);
	}
	end = blk_now_ns() + (uint64_t)seconds * 1000000000u;
	while (blk_now_ns() < end && !atomic_load(&failures)) {
		if (pc_cache_start(pc)) {
			fprintf(stderr, "stress_flusher: FAIL: pc_cache_start\n");
			atomic_fetch_add(&failures, 1);
			break;
		}
		usleep((useconds_t)(rnd(&x) % 2000));
		pc_cache_stop(pc);
		usleep((useconds_t)(rnd(&x) % 500));
		cycles++;
	}
	atomic_store(&done, true);
	for (i = 0; i < NR_WRITERS; i++) {
		pthread_join(ws[i].tid, NULL);
		writes += ws[i].writes;
	}
	since = pc_errseq_sample(dev);
	if (pc_fsync(dev, &since)) {
		fprintf(stderr, "stress_flusher: FAIL: final fsync\n");
		atomic_fetch_add(&failures, 1);
	}
	if (pc_read(dev, buf, DEV_SIZE, 0) != (ssize_t)DEV_SIZE || memcmp(buf, model, DEV_SIZE)) {
		fprintf(stderr, "stress_flusher: FAIL: the device through the cache is not the model\n");
		atomic_fetch_add(&failures, 1);
	}
	if (memcmp(fake_store(fb), model, DEV_SIZE)) {
		fprintf(stderr, "stress_flusher: FAIL: the backend is not the model\n");
		atomic_fetch_add(&failures, 1);
	}
	if (fake_violations(fb)) {
		fprintf(stderr, "stress_flusher: FAIL: %zu I/Os broke backend.h\n",
			(size_t)fake_violations(fb));
		atomic_fetch_add(&failures, 1);
	}
	printf("stress_flusher: %" PRIu64 " flusher starts and stops, %" PRIu64 " writes\n",
	       cycles, writes);
	pc_cache_stop(pc);
	pc_dev_remove(dev);
	pc_cache_destroy(pc);
	fake_destroy(fb);
	free(model);
	free(buf);
	return atomic_load(&failures) ? 1 : 0;
}
