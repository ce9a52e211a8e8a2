/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_powerloss.c - the powerloss filter's submit and
 * completion paths under many threads, for ThreadSanitizer (`make tsan`).
 *
 *   stress_powerloss [SECONDS] [SEED]	(default 10 s, seed 1)
 *
 * The filter over the fake backend, which completes late and out of order
 * from its own thread (FAKE_DEFERRED): 4 writers keep up to 8 writes each
 * in flight over one 64 KiB region (so writes overlap and wait for each
 * other in the filter), now and then a flush, a write-zeroes, or a
 * discard longer than one read (the worker's path); a control thread cuts
 * the power, restarts and stores seeds meanwhile. Every I/O must end
 * exactly once, and the layer below must never get a write while an
 * overlapping one is still in flight there (the filter orders them). Exit 0
 * on success, 1 otherwise (TSan reports fail `make tsan` through
 * halt_on_error).
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"
#include "../unit/fake_backend.h"

#define NR_WRITERS	4
#define DEPTH		8
#define REGION		(64 * 1024)
#define DEV_SIZE	(4 * 1024 * 1024)

struct writer;

struct sio {
	struct blk_io io;		/* must come first */
	struct iovec iov;
	char *buf;
	struct writer *w;
	int calls;			/* atomic */
};

struct writer {
	pthread_t thread;
	struct blk_backend *be;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int inflight;			/* lock */
	uint64_t rng;
	uint64_t nr_done;		/* lock */
	struct sio io[DEPTH];
};

static int stop;			/* atomic */
static int failed;			/* atomic */

static uint64_t xs(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void fail(const char *msg)
{
	fprintf(stderr, "stress_powerloss: %s\n", msg);
	__atomic_store_n(&failed, 1, __ATOMIC_SEQ_CST);
}

static void sio_end_io(struct blk_io *io, int res)
{
	struct sio *s = (struct sio *)io;
	struct writer *w = s->w;

	if (__atomic_add_fetch(&s->calls, 1, __ATOMIC_ACQ_REL) != 1)
		fail("an end_io ran twice");
	if (res && res != -EIO)
		fail("an I/O failed with something else than EIO");
	pthread_mutex_lock(&w->lock);
	w->inflight--;
	w->nr_done++;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->lock);
}

/* The first free slot of @w (waits for one). */
static struct sio *slot_get(struct writer *w)
{
	int i;

	pthread_mutex_lock(&w->lock);
	while (w->inflight == DEPTH)
		pthread_cond_wait(&w->cv, &w->lock);
	for (i = 0; i < DEPTH; i++) {
		if (__atomic_load_n(&w->io[i].calls, __ATOMIC_ACQUIRE) == 1 || !w->io[i].w)
			break;
	}
	w->inflight++;
	pthread_mutex_unlock(&w->lock);
	if (i == DEPTH) {
		fail("no free slot though fewer than DEPTH in flight");
		return NULL;
	}
	return &w->io[i];
}

static void *writer_main(void *p)
{
	struct writer *w = p;

	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED) && !__atomic_load_n(&failed, __ATOMIC_RELAXED)) {
		struct sio *s = slot_get(w);
		uint64_t r = xs(&w->rng);
		uint64_t pos = (xs(&w->rng) % (REGION / 512)) * 512;
		uint64_t len = (1 + xs(&w->rng) % 32) * 512;
		int ret;

		if (!s)
			break;
		if (pos + len > REGION)
			len = REGION - pos;
		s->w = w;
		s->calls = 0;
		s->io = (struct blk_io){ .end_io = sio_end_io, .private = s };
		switch (r % 16) {
		case 0:
			s->io.op = BLK_FLUSH;
			break;
		case 1:
			s->io.op = BLK_WRITE_ZEROES;
			s->io.pos = pos;
			s->io.len = len;
			break;
		case 2:
			/* longer than one read: the worker saves it */
			s->io.op = BLK_DISCARD;
			s->io.pos = 0;
			s->io.len = REGION * 4;
			break;
		default:
			memset(s->buf, (int)(r >> 8) | 1, len);
			s->iov = (struct iovec){ .iov_base = s->buf, .iov_len = len };
			s->io.op = BLK_WRITE;
			s->io.pos = pos;
			s->io.len = len;
			s->io.iov = &s->iov;
			s->io.iovcnt = 1;
			break;
		}
		ret = blk_submit(w->be, &s->io);
		if (ret) {
			/* not taken: no end_io will come */
			pthread_mutex_lock(&w->lock);
			w->inflight--;
			s->calls = 1;
			pthread_mutex_unlock(&w->lock);
			if (ret != -ENOMEM)
				fail("submit refused an I/O");
		}
	}
	pthread_mutex_lock(&w->lock);
	while (w->inflight)
		pthread_cond_wait(&w->cv, &w->lock);
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static const struct blk_attr *attr(struct blk_backend *be, const char *name)
{
	const struct blk_attr *a;

	for (a = be->ops->attrs; a->name; a++)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

static int store(struct blk_backend *be, const char *name, const char *v)
{
	return attr(be, name)->store(be, v, strlen(v));
}

int main(int argc, char **argv)
{
	unsigned int secs = argc > 1 ? (unsigned int)atoi(argv[1]) : 10;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	const struct blk_geometry geo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 64 * 1024,
	};
	struct writer w[NR_WRITERS];
	struct fake_be *fb = fake_create(&geo);
	const struct blk_backend_ops *ops = blk_backend_find("powerloss");
	char err[512] = "";
	struct blk_params p = {
		.prefix = "powerloss.", .file = "stress", .line = 1, .dev = "pl0",
		.err = err, .errlen = sizeof(err),
	};
	struct blk_backend *be;
	uint64_t end, rng = seed, cuts = 0, done = 0;
	int i, j;

	if (!fb || !ops)
		return 1;
	fake_set_quiet(fb, true);
	fake_set_seed(fb, (unsigned int)seed);
	fake_set_delay(fb, 200);
	fake_set_mode(fb, FAKE_DEFERRED);
	be = ops->open(&p, fake_backend(fb));
	if (IS_ERR(be)) {
		fprintf(stderr, "stress_powerloss: open: %s\n", err);
		return 1;
	}
	for (i = 0; i < NR_WRITERS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].be = be;
		w[i].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i + 1;
		pthread_mutex_init(&w[i].lock, NULL);
		pthread_cond_init(&w[i].cv, NULL);
		for (j = 0; j < DEPTH; j++) {
			w[i].io[j].buf = malloc(REGION);
			if (!w[i].io[j].buf)
				return 1;
		}
		pthread_create(&w[i].thread, NULL, writer_main, &w[i]);
	}
	/* The control thread: cuts, restarts and seeds while the writers write. */
	end = blk_now_ns() + (uint64_t)secs * 1000000000ull;
	while (blk_now_ns() < end && !__atomic_load_n(&failed, __ATOMIC_RELAXED)) {
		char s[24];

		usleep(5000 + (useconds_t)(xs(&rng) % 20000));
		snprintf(s, sizeof(s), "%llu", (unsigned long long)(xs(&rng) % 1000));
		if (store(be, "seed", xs(&rng) % 4 ? s : "random"))
			fail("seed store");
		if (store(be, "trigger", "1") && !__atomic_load_n(&failed, __ATOMIC_RELAXED))
			fail("trigger");
		cuts++;
		usleep((useconds_t)(xs(&rng) % 3000));
		if (store(be, "restart", "1"))
			fail("restart");
	}
	__atomic_store_n(&stop, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < NR_WRITERS; i++) {
		pthread_join(w[i].thread, NULL);
		done += w[i].nr_done;
	}
	ops->close(be);
	if (fake_violations(fb))
		fail("the layer below saw an I/O that breaks the contract");
	if (fake_overlaps(fb))
		fail("a write went down while an overlapping one was in flight");
	printf("stress_powerloss: %llu I/Os, %llu cuts, %u overlapping writes below\n",
	       (unsigned long long)done, (unsigned long long)cuts, fake_overlaps(fb));
	for (i = 0; i < NR_WRITERS; i++) {
		for (j = 0; j < DEPTH; j++)
			free(w[i].io[j].buf);
		pthread_mutex_destroy(&w[i].lock);
		pthread_cond_destroy(&w[i].cv);
	}
	fake_destroy(fb);
	return __atomic_load_n(&failed, __ATOMIC_SEQ_CST);
}
