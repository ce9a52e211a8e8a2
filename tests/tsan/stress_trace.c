/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_trace.c - the FUSE level's accounting (bt_req_begin,
 * bt_req_end in backends/lib/trace.c) from many threads at once, for
 * ThreadSanitizer (`make tsan`) and as the microbenchmark of its cost per
 * request (BENCHMARKS.md, "Tracing cost").
 *
 *   stress_trace [SECONDS] [THREADS] [-t]	(default 10 s, 2 threads)
 *
 * Each thread keeps 4 requests of one device in flight for SECONDS: it
 * ends its oldest and begins a new one, as request threads do, and every
 * 8th request it ends is one begun by the next thread (a reply sent from
 * another thread than the one that received it, as a parked request's).
 * One reader takes bt_fuse_counts() meanwhile: in flight never above what
 * the threads hold, busy time never going back nor past the wall clock.
 * -t also runs two trace sessions on the level: one into /dev/null, one
 * into a pipe nobody reads (a stalled reader: its buffer fills, it drops,
 * its writer polls; its stop must return within a second).
 * At the end: nothing in flight, as many writes counted as were ended, in
 * the histogram too, and a busy time within 10% of the run (the device
 * was never idle). Prints the cost per request (begin + end) with the
 * threads running at once (the threads' CPU time over the requests they
 * ended: time other work took from them does not count). Exit 0 on success, 1 on a mismatch.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/lib/clock.h"
#include "../../backends/lib/trace.h"

#define DEPTH 4
#define MAX_THREADS 64

struct worker {
	pthread_t t;
	int id;
	uint64_t done;
	uint64_t cpu_ns;		/* the thread's CPU time */
	/* starts handed to the next thread to end (its "parked" requests) */
	uint64_t handed[DEPTH];		/* atomic: 0 when free */
	char pad[64];
};

static struct bt_dev *dev;
static struct worker workers[MAX_THREADS];
static int nr_threads = 2;
static uint64_t end_at;
static int stop_reader;		/* atomic */
static int failed;		/* atomic */

#define FAIL(...) do { fprintf(stderr, "stress_trace: " __VA_ARGS__); \
	__atomic_store_n(&failed, 1, __ATOMIC_RELAXED); } while (0)

/* CPU time, not the wall clock: other work on the machine does not count */
static uint64_t cpu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg, *next = &workers[(w->id + 1) % nr_threads];
	uint64_t start[DEPTH];
	unsigned k = 0, i;

	for (i = 0; i < DEPTH; i++)
	{
		start[i] = bt_req_begin(dev, BLK_WRITE, 4096ull * i, 4096, (uint32_t)w->id + 1);
		bt_req_issue(dev, BLK_WRITE, 4096ull * i, 4096, (uint32_t)w->id + 1);
	}
	while (blk_now_ns() < end_at) {
		unsigned slot = k % DEPTH;

		/* end a request the previous thread handed over, when there is one */
		for (i = 0; i < DEPTH; i++) {
			uint64_t s = __atomic_exchange_n(&w->handed[i], 0, __ATOMIC_ACQUIRE);

			if (s) {
				bt_req_end(dev, BLK_WRITE, 0, 4096, (uint32_t)w->id + 1, s, 4096);
				w->done++;
			}
		}
		if (k % 8 == 7 && !__atomic_load_n(&next->handed[slot], __ATOMIC_RELAXED)) {
			/* this one is ended by the next thread; begin its successor here */
			__atomic_store_n(&next->handed[slot], start[slot], __ATOMIC_RELEASE);
		} else {
			bt_req_end(dev, BLK_WRITE, 0, 4096, (uint32_t)w->id + 1, start[slot], 4096);
			w->done++;
		}
		start[slot] = bt_req_begin(dev, BLK_WRITE, 4096ull * slot, 4096, (uint32_t)w->id + 1);
		bt_req_issue(dev, BLK_WRITE, 4096ull * slot, 4096, (uint32_t)w->id + 1);
		k++;
	}
	for (i = 0; i < DEPTH; i++) {
		bt_req_end(dev, BLK_WRITE, 0, 4096, (uint32_t)w->id + 1, start[i], 4096);
		w->done++;
	}
	w->cpu_ns = cpu_now_ns();
	return NULL;
}

static void *reader_main(void *arg)
{
	uint64_t last_ticks = 0, t0 = *(uint64_t *)arg;

	while (!__atomic_load_n(&stop_reader, __ATOMIC_RELAXED)) {
		struct bt_counts c;
		uint64_t now;

		bt_fuse_counts(dev, &c);
		now = blk_now_ns();
		if (c.in_flight > (uint64_t)nr_threads * 2 * DEPTH)
			FAIL("%llu in flight, more than %d\n", (unsigned long long)c.in_flight,
			     nr_threads * 2 * DEPTH);
		if (c.io_ticks_ns + 1000000 < last_ticks)
			FAIL("busy time went back: %llu after %llu\n",
			     (unsigned long long)c.io_ticks_ns, (unsigned long long)last_ticks);
		if (c.io_ticks_ns > now - t0 + 1000000)
			FAIL("busy %llu ns in %llu ns\n", (unsigned long long)c.io_ticks_ns,
			     (unsigned long long)(now - t0));
		last_ticks = c.io_ticks_ns;
		usleep(1000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = 10;
	bool traced = false;
	struct bt_session *s = NULL, *stalled = NULL;
	struct bt_counts c;
	int pfd[2] = { -1, -1 };
	struct blk_hist *h = malloc(sizeof(*h));
	pthread_t reader;
	uint64_t t0, t1, total = 0, cpu = 0, wr, dr;
	int i, pos = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-t"))
			traced = true;
		else if (pos++ == 0)
			secs = atof(argv[i]);
		else
			nr_threads = atoi(argv[i]);
	}
	if (!h || secs <= 0 || nr_threads < 1 || nr_threads > MAX_THREADS) {
		fprintf(stderr, "usage: stress_trace [SECONDS] [THREADS 1..%d] [-t]\n", MAX_THREADS);
		return 2;
	}
	dev = bt_dev_get("stress");
	if (!dev)
		return 1;
	if (traced) {
		s = bt_session_start(dev, BT_LEVEL_FUSE, open("/dev/null", O_WRONLY | O_CLOEXEC));
		if (IS_ERR(s)) {
			fprintf(stderr, "stress_trace: no session\n");
			return 1;
		}
		if (pipe(pfd) || IS_ERR(stalled = bt_session_start(dev, BT_LEVEL_FUSE, pfd[1]))) {
			fprintf(stderr, "stress_trace: no stalled session\n");
			return 1;
		}
	}
	t0 = blk_now_ns();
	end_at = t0 + (uint64_t)(secs * 1e9);
	pthread_create(&reader, NULL, reader_main, &t0);
	for (i = 0; i < nr_threads; i++) {
		workers[i].id = i;
		pthread_create(&workers[i].t, NULL, worker_main, &workers[i]);
	}
	for (i = 0; i < nr_threads; i++)
		pthread_join(workers[i].t, NULL);
	/* what was handed over and not taken: ended here */
	for (i = 0; i < nr_threads; i++)
		for (int j = 0; j < DEPTH; j++) {
			uint64_t st = __atomic_exchange_n(&workers[i].handed[j], 0, __ATOMIC_ACQUIRE);

			if (st) {
				bt_req_end(dev, BLK_WRITE, 0, 4096, 1, st, 4096);
				workers[i].done++;
			}
		}
	t1 = blk_now_ns();
	__atomic_store_n(&stop_reader, 1, __ATOMIC_RELAXED);
	pthread_join(reader, NULL);
	if (s && bt_session_stop(s, &wr, &dr))
		FAIL("the session's writes failed\n");
	if (stalled) {
		uint64_t a = blk_now_ns(), b;

		bt_session_stop(stalled, &wr, &dr);
		b = blk_now_ns();
		if (b - a > 1000000000ull)
			FAIL("the stop of the stalled session took %llu ms\n",
			     (unsigned long long)((b - a) / 1000000));
		close(pfd[0]);
	}
	for (i = 0; i < nr_threads; i++) {
		total += workers[i].done;
		cpu += workers[i].cpu_ns;
	}
	bt_fuse_counts(dev, &c);
	bt_hist_snap(dev, BT_LEVEL_FUSE, BT_OP_WRITE, h);
	if (c.in_flight)
		FAIL("%llu still in flight\n", (unsigned long long)c.in_flight);
	if (c.ios[BT_OP_WRITE] != total || h->count != total)
		FAIL("%llu requests ended, %llu counted, %llu in the histogram\n",
		     (unsigned long long)total, (unsigned long long)c.ios[BT_OP_WRITE],
		     (unsigned long long)h->count);
	if (c.bytes[BT_OP_WRITE] != total * 4096)
		FAIL("%llu bytes counted for %llu writes\n", (unsigned long long)c.bytes[BT_OP_WRITE],
		     (unsigned long long)total);
	if (c.io_ticks_ns < (t1 - t0) * 9 / 10 || c.io_ticks_ns > t1 - t0)
		FAIL("busy %llu ns of a run of %llu ns that was never idle\n",
		     (unsigned long long)c.io_ticks_ns, (unsigned long long)(t1 - t0));
	printf("stress_trace: %d threads%s: %llu requests in %.2f s, %.1f ns of CPU per request "
	       "(begin + end, threads at once), busy %.3f of the run\n", nr_threads,
	       traced ? " (traced)" : "", (unsigned long long)total, (double)(t1 - t0) / 1e9,
	       (double)cpu / (double)total,
	       (double)c.io_ticks_ns / (double)(t1 - t0));
	free(h);
	return __atomic_load_n(&failed, __ATOMIC_RELAXED);
}
