// SPDX-License-Identifier: MIT
/*
 * tools/blkfs-hopcost.c - what the first-hop check costs (issue 43): the
 * installed build's one blk_io_valid() per I/O the cache hands its device
 * (core/submit.c, pc_submit_first_hop()), in ns per I/O.
 *
 *   blkfs-hopcost [--ios N] [--rounds R] [--cpu C] [--ref-ns NS] [--quick]
 *
 * One thread, pinned to CPU C (sched_setaffinity; default: the last CPU it
 * may run on), submits N (default 2000000) 4 KiB WRITEs to a null backend
 * (backends/null.c: ends every I/O inside submit(), stores nothing) at
 * positions walking the device: in one block through blk_submit() alone,
 * in the next through pc_submit_first_hop() (the geometry call and
 * blk_io_valid(), then the same blk_submit()). Blocks alternate, which goes
 * first alternating by round, so that drift hits both alike; R rounds
 * (default 7, at least 5). Prints a Markdown table: the median, least and
 * most ns per I/O of each way, and the difference of the medians (and the
 * median of the rounds' paired differences); with --ref-ns, the difference
 * as a share of NS (the ram path's CPU per request, tools/blkfs-ab's CPU
 * per I/O, 4k randwrite QD32: the issue keeps the check if under 2%).
 * --quick: 200000 I/Os, 5 rounds (a check that it runs).
 *
 * The numbers are for an installed build (CHECKS=0, -O2): built with
 * CHECKS=1, blk_submit() checks every hop itself and the tool says so.
 * Wall time of a pinned thread; a loaded machine shows in the spread.
 * The checked way also pays one call into core/ (pc_submit_first_hop() is
 * not inline; blk_submit() is): an upper bound of what sio_submit() pays.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/backend.h"
#include "../backends/lib/log.h"
#include "../core/pcache_int.h"

#define IO_SIZE 4096u
#define DEV_SIZE (1ull << 30)	/* 1 GiB: 262144 positions to walk */
#define MAX_ROUNDS 101

static void usage(void)
{
	fprintf(stderr, "usage: blkfs-hopcost [--ios N] [--rounds R] [--cpu C] [--ref-ns NS] "
		"[--quick]\n");
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned long ends;

static void end_io(struct blk_io *io, int res)
{
	(void)io;
	if (res) {
		fprintf(stderr, "blkfs-hopcost: an I/O failed: %s\n", strerror(-res));
		exit(1);
	}
	ends++;
}

static struct blk_backend *null_open_dev(void)
{
	static struct blk_params p;
	static char err[512];
	const struct blk_backend_ops *ops = blk_backend_find("null");
	struct blk_backend *be;

	if (!ops) {
		fprintf(stderr, "blkfs-hopcost: no null backend\n");
		exit(1);
	}
	p.file = "blkfs-hopcost";
	p.dev = "null0";
	p.geo.size = DEV_SIZE;
	p.geo.lbs = 4096;
	p.geo.pbs = 4096;
	p.err = err;
	p.errlen = sizeof(err);
	be = ops->open(&p, NULL);
	if (IS_ERR(be)) {
		fprintf(stderr, "blkfs-hopcost: open: %s\n", err);
		exit(1);
	}
	return be;
}

/* One block of @n I/Os, checked or not: ns per I/O. */
static double run_block(struct blk_backend *be, struct blk_io *io, unsigned long n,
			bool checked)
{
	const uint64_t nr_pos = DEV_SIZE / IO_SIZE;
	unsigned long before = ends;
	uint64_t t0, t1;
	int ret;

	t0 = now_ns();
	for (unsigned long i = 0; i < n; i++) {
		io->pos = (i & (nr_pos - 1)) * IO_SIZE;
		io->done = 0;
		ret = checked ? pc_submit_first_hop(be, "null0", io) : blk_submit(be, io);
		if (ret) {
			fprintf(stderr, "blkfs-hopcost: submit: %s\n", strerror(-ret));
			exit(1);
		}
	}
	t1 = now_ns();
	if (ends - before != n) {
		fprintf(stderr, "blkfs-hopcost: %lu I/Os ended of %lu\n", ends - before, n);
		exit(1);
	}
	return (double)(t1 - t0) / (double)n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double s[MAX_ROUNDS];

	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static double least(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		if (v[i] < m)
			m = v[i];
	return m;
}

static double most(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		if (v[i] > m)
			m = v[i];
	return m;
}

static int pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0) {
		if (sched_getaffinity(0, sizeof(set), &set))
			return -1;
		for (cpu = CPU_SETSIZE - 1; cpu >= 0 && !CPU_ISSET(cpu, &set); cpu--)
			;
		if (cpu < 0)
			return -1;
	}
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, "blkfs-hopcost: pinning to CPU %d: %s\n", cpu, strerror(errno));
		exit(1);
	}
	return cpu;
}

int main(int argc, char **argv)
{
	unsigned long n = 2000000;
	int rounds = 7, cpu = -1;
	double ref_ns = 0, without[MAX_ROUNDS], with[MAX_ROUNDS], diff[MAX_ROUNDS];
	double m_without, m_with;
	static char buf[IO_SIZE] __attribute__((aligned(4096)));
	struct iovec iov = { .iov_base = buf, .iov_len = IO_SIZE };
	struct blk_io io = { .op = BLK_WRITE, .len = IO_SIZE, .iov = &iov, .iovcnt = 1,
			     .end_io = end_io };
	struct blk_backend *be;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			n = 200000;
			rounds = 5;
		} else if (i + 1 < argc && !strcmp(argv[i], "--ios")) {
			n = strtoul(argv[++i], NULL, 10);
		} else if (i + 1 < argc && !strcmp(argv[i], "--rounds")) {
			rounds = atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--cpu")) {
			cpu = atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--ref-ns")) {
			ref_ns = strtod(argv[++i], NULL);
		} else {
			usage();
		}
	}
	if (!n || rounds < 5 || rounds > MAX_ROUNDS || ref_ns < 0)
		usage();
	cpu = pin(cpu);
	be = null_open_dev();
#ifdef BLKFS_CONTRACT_CHECK
	fprintf(stderr, "blkfs-hopcost: built with CHECKS=1: blk_submit() checks every hop "
		"too; build with CHECKS=0 (the installed build) for the figure\n");
#endif
	/* warm up: code, the I/O's line, the CPU's clock */
	run_block(be, &io, n / 4 + 1, false);
	run_block(be, &io, n / 4 + 1, true);
	for (int r = 0; r < rounds; r++) {
		if (r % 2) {
			with[r] = run_block(be, &io, n, true);
			without[r] = run_block(be, &io, n, false);
		} else {
			without[r] = run_block(be, &io, n, false);
			with[r] = run_block(be, &io, n, true);
		}
		diff[r] = with[r] - without[r];
	}
	be->ops->close(be);

	m_without = median(without, rounds);
	m_with = median(with, rounds);
	printf("First-hop check on the null backend: %lu 4 KiB WRITEs a block, %d rounds, "
	       "one thread pinned to CPU %d\n\n", n, rounds, cpu);
	printf("| submit | ns per I/O (median) | least | most |\n");
	printf("|---|---:|---:|---:|\n");
	printf("| blk_submit() alone | %.2f | %.2f | %.2f |\n", m_without,
	       least(without, rounds), most(without, rounds));
	printf("| pc_submit_first_hop() | %.2f | %.2f | %.2f |\n", m_with,
	       least(with, rounds), most(with, rounds));
	printf("| difference (of the medians) | %.2f | | |\n", m_with - m_without);
	printf("| difference (median of the rounds' pairs) | %.2f | %.2f | %.2f |\n",
	       median(diff, rounds), least(diff, rounds), most(diff, rounds));
	if (ref_ns > 0)
		printf("\nThe difference is %.3f%% of %.0f ns per request (--ref-ns).\n",
		       100.0 * (m_with - m_without) / ref_ns, ref_ns);
	return 0;
}
