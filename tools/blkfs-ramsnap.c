// SPDX-License-Identifier: MIT
/*
 * tools/blkfs-ramsnap.c - what snapshots of a ram device cost, measured on
 * the backend itself (no mount, no FUSE): the numbers issue 15 sets, and
 * what they rest on.
 *
 *   blkfs-ramsnap [--size SIZE] [--data SIZE] [--writes N] [--dir DIR] [--quick]
 *
 * One ram device of --size (default 4G) gets --data (default 1G) written in
 * 1 MiB writes; then, printed as a Markdown table:
 *  - snapshot: the time blk_snap_create() takes, and the data and index
 *    memory before and after (a snapshot must not add data memory);
 *  - 1 GiB written since: --data more of 1 MiB writes over the shared data,
 *    each page copied once, with the memory it adds;
 *  - reset: blk_snap_reset() back to the snapshot (the issue: under 50 ms
 *    for a 4 GiB device with 1 GiB written since);
 *  - 4 KiB random writes, as fio's randwrite issues them, to --writes
 *    distinct random pages of the data: on the device without a snapshot
 *    (twice), to as many pages never written (a new page each: what any
 *    first write costs), and with a live snapshot: the first pass copies
 *    each page (first touch), the second finds them the device's own;
 *  - list and delete of the snapshot;
 *  - the reserve: 64 MiB of fresh 4 KiB writes paced as FUSE delivers them,
 *    with reserve = 8M and 0, twice each: the writes that faulted memory in
 *    and their time, and how often a writer mapped a slab itself;
 *  - save of the device to a sparse image in --dir (default $TMPDIR or
 *    /tmp), and a device opened from it with image = FILE.
 * --quick: 64M device, 16M data, 4096 writes (a check that it runs).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../backends/backend.h"

#define MiB (1ull << 20)

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * Wall and CPU time of a step: on a shared 2-CPU machine the wall time of
 * a short step is often mostly another process's (preemption); the CPU
 * time is this thread's own work.
 */
struct tmr {
	double wall, cpu;
};

static void tmr_start(struct tmr *t)
{
	t->wall = now_ms();
	t->cpu = cpu_ms();
}

static void tmr_stop(struct tmr *t)
{
	t->wall = now_ms() - t->wall;
	t->cpu = cpu_ms() - t->cpu;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "blkfs-ramsnap: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

struct ctx {
	struct blk_params p;
	struct blk_param v[2];
	char err[512];
};

static struct blk_backend *ram_open(struct ctx *c, uint64_t size, const char *key,
				    const char *val)
{
	const struct blk_backend_ops *ops = blk_backend_find("ram");
	struct blk_backend *be;

	memset(c, 0, sizeof(*c));
	c->p.file = "blkfs-ramsnap";
	c->p.dev = "ram0";
	c->p.geo.size = size;
	c->p.geo.lbs = 512;
	c->p.geo.pbs = 4096;
	c->p.err = c->err;
	c->p.errlen = sizeof(c->err);
	if (key) {
		c->v[0] = (struct blk_param){ .key = key, .value = val, .line = 1 };
		c->p.v = c->v;
		c->p.n = 1;
	}
	be = ops->open(&c->p, NULL);
	if (IS_ERR(be)) {
		fprintf(stderr, "blkfs-ramsnap: open: %s\n", c->err);
		exit(1);
	}
	return be;
}

static int io_res;

static void end_io(struct blk_io *io, int res)
{
	(void)io;
	io_res = res;
}

static void rw(struct blk_backend *be, enum blk_op op, uint64_t pos, void *buf, uint64_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct blk_io io = { .op = op, .pos = pos, .len = len, .iov = &iov, .iovcnt = 1,
			     .end_io = end_io };
	int ret = blk_submit(be, &io);

	if (ret || io_res)
		die(op == BLK_WRITE ? "write" : "read", ret ? ret : io_res);
}

static uint64_t stat_val(struct blk_backend *be, const char *name)
{
	char buf[2048], *s;
	size_t len = strlen(name);

	be->ops->stat(be, buf, sizeof(buf));
	for (s = buf; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (!strncmp(s, name, len) && s[len] == ' ')
			return strtoull(s + len + 1, NULL, 10);
	fprintf(stderr, "blkfs-ramsnap: no %s in stat\n", name);
	exit(1);
}

static double mib(uint64_t b)
{
	return (double)b / MiB;
}

static void fill(unsigned char *buf, size_t len, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i += 8) {
		uint64_t v = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;

		memcpy(buf + i, &v, 8);
	}
}

static void write_range(struct blk_backend *be, uint64_t pos, uint64_t len, unsigned char *buf,
			unsigned int seed)
{
	uint64_t off;

	for (off = 0; off < len; off += MiB) {
		fill(buf, MiB, seed + (unsigned int)(off / MiB));
		rw(be, BLK_WRITE, pos + off, buf, MiB);
	}
}

/* @n distinct random pages of [0, @data), shuffled (Fisher-Yates on a prefix). */
static uint64_t *random_pages(uint64_t data, uint64_t n, unsigned int seed)
{
	uint64_t pages = data / 4096, i, *all = malloc(pages * sizeof(*all));

	if (!all)
		die("malloc", ENOMEM);
	for (i = 0; i < pages; i++)
		all[i] = i;
	for (i = 0; i < n; i++) {
		uint64_t j = i + ((uint64_t)rand_r(&seed) << 16 ^ (uint64_t)rand_r(&seed)) % (pages - i);
		uint64_t t = all[i];

		all[i] = all[j];
		all[j] = t;
	}
	return all;
}

/* 4 KiB writes to @pages[0..n): wall and CPU ns per write. */
static struct tmr rand_writes(struct blk_backend *be, const uint64_t *pages, uint64_t n,
			      unsigned char *buf)
{
	struct tmr t;
	uint64_t i;

	tmr_start(&t);
	for (i = 0; i < n; i++) {
		buf[0] = (unsigned char)i;
		rw(be, BLK_WRITE, pages[i] * 4096, buf, 4096);
	}
	tmr_stop(&t);
	t.wall *= 1e6 / (double)n;
	t.cpu *= 1e6 / (double)n;
	return t;
}

static long thread_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ru.ru_minflt + ru.ru_majflt;
}

/*
 * Fresh 4 KiB writes at about the rate FUSE delivers them (one per 20 us,
 * 200 MB/s: DESIGN.md), on a new device with @reserve: the writes that
 * page-faulted (memory taken from the system in the I/O path) and the time
 * they took, and how often a writer mapped a slab itself. (Wall time per
 * write is no measure on a shared 2-CPU machine: preemption swamps it.)
 */
static void reserve_row(uint64_t len, const char *reserve, unsigned char *buf)
{
	uint64_t n = len / 4096, i, nr_faulting = 0;
	double next, in_faults = 0, worst = 0;
	struct ctx c;
	struct blk_backend *be = ram_open(&c, len, "reserve", reserve);

	next = now_ms();
	for (i = 0; i < n; i++) {
		double t;
		long f;

		while ((t = now_ms()) < next)
			;
		next = t + 0.020;
		f = thread_faults();
		rw(be, BLK_WRITE, i * 4096, buf, 4096);
		if (thread_faults() != f) {
			t = now_ms() - t;
			nr_faulting++;
			in_faults += t;
			if (t > worst)
				worst = t;
		}
	}
	printf("| %llu MiB of fresh 4 KiB writes, one per 20 us, reserve = %s | %llu writes faulted memory in: %.1f ms in them, the slowest %.2f ms | a writer mapped a slab %llu times |\n",
	       (unsigned long long)(len / MiB), reserve, (unsigned long long)nr_faulting, in_faults,
	       worst, (unsigned long long)stat_val(be, "reserve_misses"));
	be->ops->close(be);
}

int main(int argc, char **argv)
{
	uint64_t size = 4ull << 30, data = 1ull << 30, nwrites = 65536;
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	struct blk_snap_info info[4];
	struct blk_backend *be;
	unsigned char *buf;
	uint64_t a0, n0, *pages;
	struct tmr t, plain1, plain2, cow1, cow2, fresh_w = { 0, 0 };
	char path[4096];
	struct stat st;
	struct ctx c;
	int i, ret;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			size = 64 * MiB;
			data = 16 * MiB;
			nwrites = 4096;
		} else if (i + 1 < argc && !strcmp(argv[i], "--size")) {
			if (blk_parse_size(argv[++i], &size))
				die("--size", EINVAL);
		} else if (i + 1 < argc && !strcmp(argv[i], "--data")) {
			if (blk_parse_size(argv[++i], &data))
				die("--data", EINVAL);
		} else if (i + 1 < argc && !strcmp(argv[i], "--writes")) {
			nwrites = strtoull(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(argv[i], "--dir")) {
			dir = argv[++i];
		} else {
			fprintf(stderr, "usage: blkfs-ramsnap [--size SIZE] [--data SIZE] [--writes N] [--dir DIR] [--quick]\n");
			return 2;
		}
	}
	data = data / MiB * MiB;
	if (!data || data > size || size % 4096 || nwrites > data / 4096) {
		fprintf(stderr, "blkfs-ramsnap: need 1M <= data <= size, and writes <= data / 4K\n");
		return 2;
	}
	buf = aligned_alloc(4096, MiB);
	if (!buf)
		die("malloc", ENOMEM);

	printf("ram device %llu MiB, %llu MiB of data (1 MiB writes), %llu random 4 KiB writes\n"
	       "times: wall (CPU time of the thread that did it)\n\n",
	       (unsigned long long)(size / MiB), (unsigned long long)(data / MiB),
	       (unsigned long long)nwrites);
	printf("| step | time | memory |\n|---|---|---|\n");

	be = ram_open(&c, size, NULL, NULL);
	tmr_start(&t);
	write_range(be, 0, data, buf, 1);
	tmr_stop(&t);
	printf("| write %llu MiB (first touch) | %.0f ms (%.0f) | data %.1f MiB, index %.2f MiB |\n",
	       (unsigned long long)(data / MiB), t.wall, t.cpu, mib(stat_val(be, "arena_bytes")),
	       mib(stat_val(be, "node_bytes")));

	/* 4 KiB random writes without a snapshot: the baseline. */
	pages = random_pages(data, nwrites, 7);
	plain1 = rand_writes(be, pages, nwrites, buf);
	plain2 = rand_writes(be, pages, nwrites, buf);

	a0 = stat_val(be, "arena_bytes");
	n0 = stat_val(be, "node_bytes");
	tmr_start(&t);
	ret = blk_snap_create(be, "s");
	tmr_stop(&t);
	if (ret)
		die("snapshot", ret);
	printf("| snapshot of %llu MiB of data | %.3f ms (%.3f) | data %+.1f MiB, index %+.2f MiB (the index: %.2f MiB per GiB of data) |\n",
	       (unsigned long long)(data / MiB), t.wall, t.cpu, mib(stat_val(be, "arena_bytes") - a0),
	       mib(stat_val(be, "node_bytes") - n0), mib(n0) / ((double)data / (1 << 30)));

	/* A page of its own for each write: what a first write to a page costs. */
	if (2 * data <= size) {
		uint64_t *fresh = malloc(nwrites * sizeof(*fresh)), j;

		if (!fresh)
			die("malloc", ENOMEM);
		for (j = 0; j < nwrites; j++)
			fresh[j] = pages[j] + data / 4096;
		fresh_w = rand_writes(be, fresh, nwrites, buf);
		free(fresh);
		if (blk_snap_destroy(be, "s"))
			die("delete", EIO);
		if (blk_submit(be, &(struct blk_io){ .op = BLK_DISCARD, .pos = data, .len = data,
						    .end_io = end_io }) || io_res)
			die("discard", EIO);
		if (blk_snap_create(be, "s"))
			die("snapshot", EIO);
	}
	cow1 = rand_writes(be, pages, nwrites, buf);
	cow2 = rand_writes(be, pages, nwrites, buf);
	printf("| %llu random 4 KiB writes, no snapshot | %.0f ns/write (%.0f), again %.0f (%.0f) | |\n",
	       (unsigned long long)nwrites, plain1.wall, plain1.cpu, plain2.wall, plain2.cpu);
	if (fresh_w.wall)
		printf("| %llu random 4 KiB writes to pages never written | %.0f ns/write (%.0f): a new page each | |\n",
		       (unsigned long long)nwrites, fresh_w.wall, fresh_w.cpu);
	printf("| the same with a live snapshot | first touch %.0f ns/write (%.0f): a copy each, %llu pages copied; again %.0f (%.0f) | data %+.1f MiB, index %+.2f MiB |\n",
	       cow1.wall, cow1.cpu, (unsigned long long)stat_val(be, "snapshot_cow_pages"), cow2.wall,
	       cow2.cpu, mib(stat_val(be, "arena_bytes") - a0), mib(stat_val(be, "node_bytes") - n0));

	tmr_start(&t);
	write_range(be, 0, data, buf, 2);
	tmr_stop(&t);
	printf("| write %llu MiB over the shared data | %.0f ms (%.0f) | data %+.1f MiB, index %+.2f MiB since the snapshot |\n",
	       (unsigned long long)(data / MiB), t.wall, t.cpu, mib(stat_val(be, "arena_bytes") - a0),
	       mib(stat_val(be, "node_bytes") - n0));

	tmr_start(&t);
	ret = blk_snap_list(be, info, 4);
	tmr_stop(&t);
	if (ret != 1)
		die("list", ret < 0 ? ret : EPROTO);
	printf("| list | %.2f ms (%.2f) | snapshot s: data %.1f MiB, held alone %.1f MiB |\n", t.wall,
	       t.cpu, mib(info[0].data_bytes), mib(info[0].own_bytes));

	tmr_start(&t);
	ret = blk_snap_reset(be, "s");
	tmr_stop(&t);
	if (ret)
		die("reset", ret);
	printf("| **reset** of the %llu MiB device, %llu MiB written since the snapshot | %.2f ms (%.2f) | data %.1f MiB, index %.2f MiB after |\n",
	       (unsigned long long)(size / MiB), (unsigned long long)(data / MiB), t.wall, t.cpu,
	       mib(stat_val(be, "arena_bytes")), mib(stat_val(be, "node_bytes")));

	/* Overwrite again, then delete the snapshot: it frees what only it holds. */
	write_range(be, 0, data, buf, 3);
	tmr_start(&t);
	ret = blk_snap_destroy(be, "s");
	tmr_stop(&t);
	if (ret)
		die("delete", ret);
	printf("| delete of the snapshot (%llu MiB held alone) | %.2f ms (%.2f) | data %.1f MiB after |\n",
	       (unsigned long long)(data / MiB), t.wall, t.cpu, mib(stat_val(be, "arena_bytes")));

	snprintf(path, sizeof(path), "%s/blkfs-ramsnap.%d.img", dir, (int)getpid());
	tmr_start(&t);
	ret = blk_snap_save(be, NULL, path);
	tmr_stop(&t);
	if (ret)
		die(path, ret);
	if (stat(path, &st))
		die(path, errno);
	printf("| save the device to a sparse image (fsync included) | %.0f ms (%.0f) | file %.1f MiB, %.1f MiB on disk |\n",
	       t.wall, t.cpu, mib((uint64_t)st.st_size), mib((uint64_t)st.st_blocks * 512));
	be->ops->close(be);

	{
		struct ctx c2;
		struct blk_backend *img;

		tmr_start(&t);
		img = ram_open(&c2, 0, "image", path);
		tmr_stop(&t);
		printf("| open a device with image = that file | %.0f ms (%.0f) | data %.1f MiB |\n",
		       t.wall, t.cpu, mib(stat_val(img, "arena_bytes")));
		img->ops->close(img);
	}
	unlink(path);

	/* Alternated, as each run's memory is fresh from the host or not. */
	for (i = 0; i < 2; i++) {
		reserve_row(size < 64 * MiB ? size : 64 * MiB, "8M", buf);
		reserve_row(size < 64 * MiB ? size : 64 * MiB, "0", buf);
	}
	free(pages);
	free(buf);
	return 0;
}
