/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_clone.c - ram clones (clone = DEV@SNAP) under many
 * threads, for ThreadSanitizer (`make tsan`; plain C: Criterion cannot run
 * under TSan).
 *
 *   stress_clone [SECONDS]	(default 10 s)
 *
 * An origin (64 MiB, 512/4096) with data everywhere, snapshot s, and two
 * clones of it: the three devices share one arena, its lock and its
 * counts. One writer per device writes random sectors of its own model
 * (so the model is exact) over pages all three share at the start, while
 * a control thread takes and deletes snapshots of the origin and of the
 * second clone (counts of shared pages move under two devices' trees at
 * once). At the end each device reads as its model; then the origin is
 * closed first and the clones still read as theirs. Exit 0 on success,
 * 1 on a mismatch (TSan's reports fail `make tsan` through halt_on_error).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../backends/backend.h"

#define DEV_SIZE	(64ull << 20)
#define NR_SECT		(DEV_SIZE / 512)
#define NR_DEVS		3

struct dev {
	struct blk_backend *be;
	uint16_t *ver;		/* per sector; the writer's alone until the join */
	uint64_t seed;
	uint16_t base;
};

static atomic_bool stop;

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void sio_end(struct blk_io *io, int res)
{
	*(int *)io->private = res;
}

static int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len, void *buf)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	int res = -EINPROGRESS;
	struct blk_io io = { .op = op, .pos = pos, .len = len, .iov = &iov, .iovcnt = 1,
			     .end_io = sio_end, .private = &res };
	int ret = blk_submit(be, &io);

	return ret ? ret : res;
}

static void fill(uint8_t *out, uint64_t sect, uint16_t v)
{
	memset(out, (int)(v * 31 + sect) & 0xff, 512);
	memcpy(out, &v, sizeof(v));
}

static void *writer_main(void *arg)
{
	struct dev *d = arg;
	uint8_t buf[8 * 512];
	uint16_t v = d->base;

	while (!atomic_load(&stop)) {
		uint64_t n = 1 + rnd(&d->seed) % 8, s = rnd(&d->seed) % (NR_SECT - n), i;

		v = (uint16_t)(v + 1 ? v + 1 : 1);
		for (i = 0; i < n; i++) {
			fill(buf + i * 512, s + i, v);
			d->ver[s + i] = v;
		}
		if (do_io(d->be, BLK_WRITE, s * 512, n * 512, buf)) {
			fprintf(stderr, "stress_clone: write failed\n");
			exit(1);
		}
	}
	return NULL;
}

static void *control_main(void *arg)
{
	struct dev *d = arg;
	unsigned int n = 0;

	while (!atomic_load(&stop)) {
		char name[16], prev[16];

		snprintf(name, sizeof(name), "x%u", n);
		snprintf(prev, sizeof(prev), "x%u", n - 1);
		if (blk_snap_create(d[0].be, name) || (n && blk_snap_destroy(d[0].be, prev)) ||
		    blk_snap_create(d[2].be, "c") || blk_snap_destroy(d[2].be, "c")) {
			fprintf(stderr, "stress_clone: a snapshot call failed\n");
			exit(1);
		}
		n++;
		usleep(200);
	}
	return NULL;
}

static int check(const struct dev *d, const char *what)
{
	uint8_t got[512], want[512];
	uint64_t s;

	for (s = 0; s < NR_SECT; s += 7) {
		if (do_io(d->be, BLK_READ, s * 512, 512, got))
			return 1;
		fill(want, s, d->ver[s]);
		if (memcmp(got, want, 512)) {
			fprintf(stderr, "stress_clone: %s: sector %llu differs\n", what,
				(unsigned long long)s);
			return 1;
		}
	}
	return 0;
}

static struct blk_backend *open_dev(const char *name, uint64_t size, const char *clone)
{
	struct blk_param v = { .key = "clone", .value = clone, .line = 2 };
	struct blk_params p = { .file = "stress_clone", .line = 1, .dev = name,
				.geo = { .size = size, .lbs = size ? 512 : 0, .pbs = size ? 4096 : 0 },
				.v = clone ? &v : NULL, .n = clone ? 1 : 0 };
	static char err[256];
	struct blk_backend *be;

	p.err = err;
	p.errlen = sizeof(err);
	be = blk_backend_find("ram")->open(&p, NULL);
	if (IS_ERR(be)) {
		fprintf(stderr, "stress_clone: open %s: %s\n", name, err);
		exit(1);
	}
	return be;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 10, i, bad = 0;
	pthread_t wt[NR_DEVS], ct;
	struct dev d[NR_DEVS];
	uint8_t *buf = malloc(1 << 20);
	uint64_t s;

	if (!buf)
		return 1;
	memset(d, 0, sizeof(d));
	d[0].be = open_dev("so", DEV_SIZE, NULL);
	d[0].ver = calloc(NR_SECT, sizeof(uint16_t));
	for (s = 0; s < NR_SECT; s++) {
		fill(buf + (s % 2048) * 512, s, 1);
		d[0].ver[s] = 1;
		if (s % 2048 == 2047 && do_io(d[0].be, BLK_WRITE, (s - 2047) * 512, 1 << 20, buf))
			return 1;
	}
	if (blk_snap_create(d[0].be, "s"))
		return 1;
	d[1].be = open_dev("sc1", 0, "so@s");
	d[2].be = open_dev("sc2", 0, "so@s");
	for (i = 0; i < NR_DEVS; i++) {
		if (i) {
			d[i].ver = malloc(NR_SECT * sizeof(uint16_t));
			memcpy(d[i].ver, d[0].ver, NR_SECT * sizeof(uint16_t));
		}
		d[i].seed = 100 + (uint64_t)i;
		d[i].base = (uint16_t)(1000 * (i + 1));
	}
	for (i = 0; i < NR_DEVS; i++)
		pthread_create(&wt[i], NULL, writer_main, &d[i]);
	pthread_create(&ct, NULL, control_main, d);
	sleep((unsigned int)secs);
	atomic_store(&stop, true);
	for (i = 0; i < NR_DEVS; i++)
		pthread_join(wt[i], NULL);
	pthread_join(ct, NULL);
	for (i = 0; i < NR_DEVS; i++)
		bad |= check(&d[i], i ? "a clone" : "the origin");
	d[0].be->ops->close(d[0].be);
	bad |= check(&d[1], "the first clone, its origin closed");
	bad |= check(&d[2], "the second clone, its origin closed");
	d[1].be->ops->close(d[1].be);
	d[2].be->ops->close(d[2].be);
	for (i = 0; i < NR_DEVS; i++)
		free(d[i].ver);
	free(buf);
	printf("stress_clone: %d s, %s\n", secs, bad ? "MISMATCH" : "ok");
	return bad;
}
