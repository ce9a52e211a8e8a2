/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_knobs.c - the filters' knob tables (backends/kit/knobs.h)
 * stored and shown while I/O runs through them, for ThreadSanitizer
 * (`make tsan`).
 *
 *   stress_knobs [SECONDS]	(default 10 s)
 *
 * A stack of log, fault, flakey, delay, throttle and powerloss over a ram
 * device. Two threads keep I/O going (4K reads and writes, each waited
 * for), and one thread stores values into every table knob of every
 * filter, in turn, and shows each after, as `echo` and `cat` on .sys
 * would, seeds too (fault's, flakey's, powerloss's); powerloss also takes
 * a power cut and a restart each turn (a cut waits for the writes in
 * flight; writes in the dark are dropped).
 * Errors from fault and flakey are expected (the values include faults); a
 * hang is never stored. At the end: every I/O completed exactly once,
 * stores happened, and the stack closes. Exit 0 on success, 1 on a
 * mismatch.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"

#define DEV_SIZE	(64u << 20)
#define IO_LEN		4096u
#define NR_IOERS	2

/* Values each knob takes in turn; none hangs an I/O for good. */
static const struct {
	const char *name;
	const char *vals[4];
} knob_vals[] = {
	{ "mbps", { "0", "2000" } }, { "read_mbps", { "0", "1000" } },
	{ "write_mbps", { "0", "1000" } }, { "burst", { "0", "1M" } },
	{ "queue_depth", { "0", "4", "1" } }, { "latency_per_inflight", { "0", "5us" } },
	{ "read", { "0", "10us", "1us-20us" } }, { "write", { "0", "10us" } },
	{ "flush", { "0", "5us" } }, { "discard", { "0", "5us" } },
	{ "p90", { "0", "50us" } }, { "p99", { "0", "100us" } },
	{ "up_interval", { "0", "10ms" } }, { "down_interval", { "0", "5ms" } },
	{ "error_reads", { "no", "yes" } }, { "error_writes", { "no", "yes" } },
	{ "drop_writes", { "no", "yes" } },
	{ "random_read_corrupt", { "0", "0.01" } }, { "random_write_corrupt", { "0", "0.01" } },
	{ "errno", { "EIO", "ENOSPC" } },
	{ "ops", { "write", "all", "read,flush" } }, { "probability", { "0", "0.01" } },
	{ "after", { "off", "100" } }, { "persistent", { "no", "yes" } },
	{ "hang_timeout", { "0", "1ms" } },
	{ "badblocks_once", { "no", "yes" } }, { "badblocks_clear_on_write", { "no", "yes" } },
	{ "badblocks_partial_io", { "no", "yes" } }, { "enabled", { "yes", "no" } },
	{ "seed", { "auto", "42", "random" } },
	{ "trigger", { "1" } }, { "restart", { "1" } },
};

#define NR_KNOB_VALS (sizeof(knob_vals) / sizeof(knob_vals[0]))

static const char *const stack[] = { "powerloss", "throttle", "delay", "flakey", "fault", "log" };
#define NR_STACK (sizeof(stack) / sizeof(stack[0]))

static struct blk_backend *layers[NR_STACK + 1];	/* [0] ram ... [NR_STACK] the top */
static atomic_bool stop;
static atomic_ulong nr_ios, nr_errors, nr_stores;

static void fail(const char *what)
{
	fprintf(stderr, "stress_knobs: %s\n", what);
	exit(1);
}

struct sio {
	struct blk_io io;
	atomic_int ends;
	int res;
};

static void sio_end(struct blk_io *io, int res)
{
	struct sio *s = (struct sio *)io;

	s->res = res;
	atomic_fetch_add(&s->ends, 1);
}

static void *ioer_main(void *arg)
{
	uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
	void *buf = aligned_alloc(4096, IO_LEN);

	if (!buf)
		fail("out of memory");
	memset(buf, 0x5a, IO_LEN);
	while (!atomic_load(&stop)) {
		struct iovec iov = { .iov_base = buf, .iov_len = IO_LEN };
		struct sio s = { .io = { .iov = &iov, .iovcnt = 1, .len = IO_LEN,
					 .end_io = sio_end } };
		int ret;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		s.io.op = (rng >> 40) & 1 ? BLK_WRITE : BLK_READ;
		s.io.pos = ((rng >> 20) % (DEV_SIZE / IO_LEN)) * IO_LEN;
		ret = blk_submit(layers[NR_STACK], &s.io);
		if (ret) {
			atomic_fetch_add(&nr_errors, 1);
		} else {
			/* the delay and throttle filters complete from their timer thread */
			while (!atomic_load(&s.ends))
				sched_yield();
			if (s.res)
				atomic_fetch_add(&nr_errors, 1);
		}
		if (atomic_load(&s.ends) > 1)
			fail("an I/O completed twice");
		atomic_fetch_add(&nr_ios, 1);
	}
	free(buf);
	return NULL;
}

static const struct blk_attr *attr_of(struct blk_backend *be, const char *name)
{
	const struct blk_attr *a;

	for (a = be->ops->attrs; a && a->name; a++)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

static void *knobs_main(void *arg)
{
	unsigned int turn = 0;
	char buf[4096];

	(void)arg;
	while (!atomic_load(&stop)) {
		size_t i, l;

		for (l = 1; l <= NR_STACK; l++) {
			for (i = 0; i < NR_KNOB_VALS; i++) {
				const struct blk_attr *a = attr_of(layers[l], knob_vals[i].name);
				const char *v;
				size_t nv = 0;

				if (!a || !a->store)
					continue;
				while (nv < 4 && knob_vals[i].vals[nv])
					nv++;
				v = knob_vals[i].vals[(turn + i) % nv];
				if (a->store(layers[l], v, strlen(v)))
					fail("a good value refused");
				if (a->show(layers[l], buf, sizeof(buf)) <= 0)
					fail("show failed");
				atomic_fetch_add(&nr_stores, 1);
			}
		}
		turn++;
		usleep(2000);	/* each store re-arms fault, which says so: keep the log short */
	}
	return NULL;
}

static struct blk_backend *open_layer(const char *name, struct blk_backend *next)
{
	static struct blk_param path = { .key = "log.path", .value = "/dev/null", .line = 2 };
	char prefix[32], err[512] = "";
	struct blk_params p = { .file = "stress_knobs", .line = 1, .dev = "k0",
				.geo = { .size = DEV_SIZE, .lbs = 512, .pbs = 4096 },
				.err = err, .errlen = sizeof(err) };
	struct blk_backend *be;

	if (next) {
		snprintf(prefix, sizeof(prefix), "%s.", name);
		p.prefix = prefix;
		if (!strcmp(name, "log")) {
			p.v = &path;
			p.n = 1;
		}
	}
	be = blk_backend_find(name)->open(&p, next);
	if (IS_ERR(be)) {
		fprintf(stderr, "stress_knobs: open %s: %s\n", name, err);
		exit(1);
	}
	return be;
}

int main(int argc, char **argv)
{
	pthread_t it[NR_IOERS], kt;
	int secs = argc > 1 ? atoi(argv[1]) : 10, i;

	layers[0] = open_layer("ram", NULL);
	for (i = 0; i < (int)NR_STACK; i++)
		layers[i + 1] = open_layer(stack[i], layers[i]);
	for (i = 0; i < NR_IOERS; i++)
		if (pthread_create(&it[i], NULL, ioer_main, (void *)(uintptr_t)(i + 1)))
			fail("pthread_create");
	if (pthread_create(&kt, NULL, knobs_main, NULL))
		fail("pthread_create");
	sleep((unsigned int)(secs > 0 ? secs : 1));
	atomic_store(&stop, true);
	for (i = 0; i < NR_IOERS; i++)
		pthread_join(it[i], NULL);
	pthread_join(kt, NULL);
	for (i = (int)NR_STACK; i >= 0; i--)
		layers[i]->ops->close(layers[i]);
	printf("stress_knobs: %lu I/Os (%lu failed, as stored), %lu stores\n",
	       atomic_load(&nr_ios), atomic_load(&nr_errors), atomic_load(&nr_stores));
	if (!atomic_load(&nr_ios) || !atomic_load(&nr_stores))
		fail("nothing ran");
	return 0;
}
