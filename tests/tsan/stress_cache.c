/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_cache.c - many threads against one page cache, for
 * ThreadSanitizer (`make tsan`; plain C: Criterion cannot run under TSan).
 *
 *   stress_cache [-o] [SECONDS] [SEED]	(default 10 s, seed 1)
 *
 * One small cache (4 MiB of 64 KiB folios: constant eviction; dirty limit
 * 1 MiB: writers throttle and wait; expiry 100 ms) in front of three devices:
 *   fk: the fake backend in deferred mode (a completer thread ends I/O
 *       late and out of order), 512/4096 blocks, max_io 128K, 512-byte
 *       cache blocks (writeback widens to whole physical blocks);
 *   rm: the ram backend, 4096/4096 blocks, max_io 256K;
 *   st: a config section parsed by conf_parse_buf() and opened by
 *       stack_open() as the daemon does: the ram backend under the filters
 *       log, delay (0-200us per write) and fault when it is built in (armed
 *       with nothing that fires).
 * The background flusher runs. On each device:
 *   - 3 writers, each owning a region it alone changes, with a model of its
 *     region: buffered writes at any offset and length, O_DIRECT writes,
 *     discards and write-zeroes (aligned), each checked at once by reading
 *     back (buffered, zero-copy pc_read_begin, or direct), and fsyncs. A
 *     writer works in epochs: it changes each 4 KiB unit (a physical block,
 *     the largest cache block) at most once per epoch, and ends the epoch
 *     with an fsync once half its units are used. Dirty data piles up far
 *     past the dirty limit and the flusher writes back units next to the
 *     ones being written, in the same folios, but a unit is never changed
 *     while its writeback may be in flight: the cache does not keep data
 *     stable under writeback (a block changed meanwhile is dirty again and
 *     written again), so that would be a race on the data bytes themselves,
 *     which -o (overwrite anything at any time) shows;
 *   - 2 readers of the fourth region, which is written once before the
 *     threads start and fsynced: buffered, zero-copy and direct reads,
 *     checked against the model, while the writers' folios push its folios
 *     out of the cache and the readers fill them again, often the same
 *     folio at once. (Readers never read bytes another thread is writing:
 *     a read racing a write of the same bytes returns either, as on any
 *     block device, and TSan would rightly call the two memcpy()s a race;
 *     writeback of a block that its writer changes again is the one such
 *     race the cache itself has: see -o above.)
 *   - 1 fsync thread;
 * and one knob thread changes max_io and read_ahead live, reads every
 * device's counters, and stores and shows the filters' live attrs (delays,
 * log on/off, fault knobs that never fire). At the end: fsync, every region
 * equals its model read through the cache, and the backend's own contents
 * (the fake's store; the ram backend through O_DIRECT reads) equal it too;
 * the fake saw no I/O that breaks backend.h; no writeback or read errors.
 * Then the flusher is stopped and the devices removed, as the daemon does.
 * Exit 0 on success, 1 on a mismatch (TSan reports make `make tsan` fail
 * through halt_on_error).
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
#include "../../core/conf.h"
#include "../../core/pcache.h"
#include "../../core/stack.h"
#include "../unit/fake_backend.h"

#define KiB (1024ull)
#define MiB (1024ull * KiB)

#define DEV_SIZE	(16 * MiB)
#define NR_WRITERS	3
#define NR_READERS	2
#define REGION		(DEV_SIZE / 4)		/* writer i owns region i; region 3 is only read */
#define RO_BASE		(NR_WRITERS * REGION)
#define MAX_BUF		(256 * KiB)
#define NR_DEVS		3

struct dev {
	const char *name;
	struct pc_dev *pc;
	struct blk_backend *be;
	struct fake_be *fb;		/* or NULL: ram (under filters for st) */
	struct blk_geometry geo;
	uint8_t *model;			/* DEV_SIZE bytes; region i is writer i's */
};

#define UNIT		4096ull			/* a writer changes a unit once per epoch */
#define REGION_UNITS	(REGION / UNIT)

struct worker {
	pthread_t tid;
	struct dev *d;
	int idx;
	uint64_t rng;
	uint64_t ops, bytes, epochs;
	uint8_t used[REGION_UNITS];	/* writers: units changed in this epoch */
	unsigned nr_used;
	pc_errseq_t since;
};

static bool overwrite;		/* -o: writers change any unit at any time */

static atomic_bool stop;
static atomic_int failures;
static uint64_t seed = 1;

#define fail(...)							\
	do {								\
		fprintf(stderr, "stress_cache: FAIL: " __VA_ARGS__);	\
		fputc('\n', stderr);					\
		atomic_fetch_add(&failures, 1);				\
	} while (0)

static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static uint64_t below(uint64_t *s, uint64_t n)
{
	return n ? rnd(s) % n : 0;
}

static void *alloc_buf(void)
{
	void *p;

	if (posix_memalign(&p, 4096, MAX_BUF))
		abort();
	memset(p, 0, MAX_BUF);
	return p;
}

/* @len bytes read at @pos (buffered, zero-copy or direct) must equal the model. */
static void verify(struct worker *w, uint8_t *buf, uint64_t pos, size_t len, int how)
{
	struct dev *d = w->d;
	struct pc_read rd;
	ssize_t r;
	size_t i, off = 0;

	switch (how) {
	case 0:
		r = pc_read(d->pc, buf, len, pos);
		break;
	case 1:
		r = pc_read_begin(d->pc, &rd, len, pos);
		if (r > 0) {
			for (i = 0; i < (size_t)rd.iovcnt; i++) {
				memcpy(buf + off, rd.iov[i].iov_base, rd.iov[i].iov_len);
				off += rd.iov[i].iov_len;
			}
			if (off != (size_t)r)
				fail("%s: read_begin iovecs hold %zu bytes, returned %zd",
				     d->name, off, r);
		}
		if (r >= 0)
			pc_read_end(&rd);
		break;
	default:
		r = pc_direct_read(d->pc, buf, len, pos);
		break;
	}
	if (r != (ssize_t)len) {
		fail("%s: read(%d) at %" PRIu64 " +%zu returned %zd", d->name, how, pos, len, r);
		return;
	}
	if (memcmp(buf, d->model + pos, len)) {
		for (i = 0; i < len && buf[i] == d->model[pos + i]; i++)
			;
		fail("%s: read(%d) at %" PRIu64 " +%zu differs from the model at %" PRIu64
		     ": got 0x%02x want 0x%02x (seed %" PRIu64 ")", d->name, how, pos, len,
		     pos + i, buf[i], d->model[pos + i], seed);
	}
}

/* End the epoch: everything written so far is on the backend, no writeback in flight. */
static int end_epoch(struct worker *w)
{
	int ret = pc_fsync(w->d->pc, &w->since);

	if (ret)
		fail("%s: pc_fsync: %d", w->d->name, ret);
	memset(w->used, 0, sizeof(w->used));
	w->nr_used = 0;
	w->epochs++;
	return ret;
}

/*
 * A range of the writer's region to change: at most @max bytes, starting
 * and ending on multiples of @align (1: anywhere), over units not changed
 * in this epoch (any units with -o); the units are marked. Returns false
 * when the epoch could not be ended.
 */
static bool pick(struct worker *w, uint64_t max, uint64_t align, uint64_t *pos, uint64_t *len)
{
	uint64_t base = (uint64_t)w->idx * REGION, u0, u, n, first, last;
	int tries;

	if (!overwrite && w->nr_used >= REGION_UNITS / 2 && end_epoch(w))
		return false;
	for (tries = 0;; tries++) {
		u0 = below(&w->rng, REGION_UNITS);
		if (overwrite || !w->used[u0])
			break;
		if (tries == 64 && end_epoch(w))
			return false;
	}
	n = 1 + below(&w->rng, (max + UNIT - 1) / UNIT);
	for (u = u0 + 1; u < u0 + n && u < REGION_UNITS && (overwrite || !w->used[u]); u++)
		;
	n = u - u0;
	/* start in the first unit, end in the last, on @align */
	first = base + u0 * UNIT + align * below(&w->rng, UNIT / align);
	last = base + (u0 + n) * UNIT - align * below(&w->rng, UNIT / align);
	if (last <= first)
		last = first + align;
	if (last - first > max)
		last = first + max / align * align;
	*pos = first;
	*len = last - first;
	for (u = u0; u < u0 + n; u++) {
		if (!w->used[u])
			w->nr_used++;
		w->used[u] = 1;
	}
	return true;
}

static void *writer_main(void *arg)
{
	struct worker *w = arg;
	struct dev *d = w->d;
	uint64_t base = (uint64_t)w->idx * REGION, lbs = d->geo.lbs;
	uint8_t *buf = alloc_buf(), *rbuf = alloc_buf();

	w->since = pc_errseq_sample(d->pc);
	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		unsigned op = (unsigned)below(&w->rng, 100);
		uint64_t pos, len, i;
		ssize_t r;

		if (op < 40) {			/* buffered write, any offset and length */
			if (!pick(w, below(&w->rng, 4) ? 16 * KiB : 200 * KiB, 1, &pos, &len))
				break;
			for (i = 0; i < len; i++)
				buf[i] = (uint8_t)rnd(&w->rng);
			r = pc_write(d->pc, buf, len, pos);
			if (r != (ssize_t)len) {
				fail("%s: pc_write at %" PRIu64 " +%" PRIu64 ": %zd", d->name, pos, len, r);
				break;
			}
			memcpy(d->model + pos, buf, len);
			w->bytes += len;
		} else if (op < 50) {		/* O_DIRECT write */
			if (!pick(w, 128 * KiB, lbs, &pos, &len))
				break;
			for (i = 0; i < len; i++)
				buf[i] = (uint8_t)rnd(&w->rng);
			r = pc_direct_write(d->pc, buf, len, pos);
			if (r != (ssize_t)len) {
				fail("%s: pc_direct_write at %" PRIu64 " +%" PRIu64 ": %zd",
				     d->name, pos, len, r);
				break;
			}
			memcpy(d->model + pos, buf, len);
			w->bytes += len;
		} else if (op < 56) {		/* discard or write-zeroes */
			int ret;

			if (!pick(w, 256 * KiB, lbs, &pos, &len))
				break;
			ret = op & 1 ? pc_discard(d->pc, pos, len) : pc_write_zeroes(d->pc, pos, len);
			if (ret) {
				fail("%s: %s at %" PRIu64 " +%" PRIu64 ": %d", d->name,
				     op & 1 ? "discard" : "write_zeroes", pos, len, ret);
				break;
			}
			memset(d->model + pos, 0, len);
		} else if (op < 96) {		/* read back and check */
			int how = (int)below(&w->rng, 3);

			if (how == 2) {
				len = lbs * (1 + below(&w->rng, 128 * KiB / lbs));
				pos = base + lbs * below(&w->rng, (REGION - len) / lbs + 1);
			} else {
				len = 1 + below(&w->rng, 128 * KiB);
				pos = base + below(&w->rng, REGION - len + 1);
			}
			verify(w, rbuf, pos, len, how);
		} else {			/* fsync */
			int ret = pc_fsync(d->pc, &w->since);

			if (ret) {
				fail("%s: pc_fsync: %d", d->name, ret);
				break;
			}
		}
		w->ops++;
	}
	free(buf);
	free(rbuf);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct worker *w = arg;
	struct dev *d = w->d;
	uint8_t *buf = alloc_buf();
	uint64_t lbs = d->geo.lbs;

	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		int how = (int)below(&w->rng, 3);
		uint64_t pos, len;

		if (below(&w->rng, 16) == 0) {	/* at and past the end: 0 bytes */
			ssize_t r = pc_read(d->pc, buf, 1 + below(&w->rng, 4096),
					    DEV_SIZE + below(&w->rng, 2) * below(&w->rng, 1ull << 40));

			if (r != 0)
				fail("%s: read past the end returned %zd", d->name, r);
			continue;
		}
		if (how == 2) {
			len = lbs * (1 + below(&w->rng, MAX_BUF / lbs));
			pos = RO_BASE + lbs * below(&w->rng, (REGION - len) / lbs + 1);
		} else {
			len = 1 + below(&w->rng, MAX_BUF);
			pos = RO_BASE + below(&w->rng, REGION - len + 1);
		}
		verify(w, buf, pos, len, how);
		w->ops++;
		w->bytes += len;
	}
	free(buf);
	return NULL;
}

static void *fsync_main(void *arg)
{
	struct worker *w = arg;
	pc_errseq_t since = pc_errseq_sample(w->d->pc);

	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		int ret = pc_fsync(w->d->pc, &since);

		if (ret) {
			fail("%s: fsync thread: %d", w->d->name, ret);
			break;
		}
		w->ops++;
		usleep((useconds_t)below(&w->rng, 20000));
	}
	return NULL;
}

static struct dev devs[NR_DEVS];
static struct conf conf;		/* st's config */
static char tmpdir[] = "/tmp/stress_cache.XXXXXX";

/* Values the knob thread stores to the filters' attrs: none makes I/O fail. */
static const struct {
	const char *attr;	/* FILTER/ATTR */
	const char *values[4];
} knob_values[] = {
	{ "delay/write", { "0", "50us", "0-200us", "100us-300us" } },
	{ "delay/read", { "0", "20us", "0-100us", "0" } },
	{ "delay/flush", { "0", "100us", "0-1ms", "0" } },
	{ "delay/discard", { "0", "10us", "0-50us", "0" } },
	{ "log/enabled", { "0", "1", "yes\n", "off\n" } },
	{ "fault/enabled", { "yes", "no", "1", "0" } },
	{ "fault/ops", { "write", "read,write", "all", "flush" } },
	{ "fault/errno", { "EIO", "ENOSPC", "EROFS", "5" } },
	{ "fault/probability", { "0", "0.0", "0", "0" } },
	{ "fault/after", { "off", "off", "off", "off" } },
	{ "fault/persistent", { "no", "yes", "no", "0" } },
	{ "fault/badblocks", { "clear", "clear\n", "clear", "CLEAR" } },
};

/* Store one of its values to a random filter attr of @d's stack, and show one. */
static void filter_knob(struct worker *w, struct dev *d)
{
	struct blk_backend *be;
	char name[64], buf[4096];
	size_t i;

	for (be = d->be; be; be = be->next) {
		const struct blk_attr *a;

		for (a = be->ops->attrs; a && a->name; a++) {
			if (a->show && a->show(be, buf, sizeof(buf)) < 0)
				fail("%s: %s/%s show failed", d->name, be->ops->name, a->name);
			if (!a->store || below(&w->rng, 3))
				continue;
			snprintf(name, sizeof(name), "%s/%s", be->ops->name, a->name);
			for (i = 0; i < sizeof(knob_values) / sizeof(knob_values[0]); i++) {
				const char *v = knob_values[i].values[below(&w->rng, 4)];
				int ret;

				if (strcmp(knob_values[i].attr, name))
					continue;
				ret = a->store(be, v, strlen(v));
				if (ret)
					fail("%s: storing '%s' to %s: %d", d->name, v, name, ret);
			}
		}
	}
}

static void *knob_main(void *arg)
{
	struct worker *w = arg;

	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		struct dev *d = &devs[below(&w->rng, NR_DEVS)];
		struct pc_stats st;
		uint64_t n = d->geo.max_io / d->geo.pbs;
		int ret;

		ret = pc_dev_set_max_io(d->pc, d->geo.pbs * (1 + below(&w->rng, n)));
		if (ret)
			fail("%s: set_max_io: %d", d->name, ret);
		ret = pc_dev_set_read_ahead(d->pc, 512 * below(&w->rng, 1025));
		if (ret)
			fail("%s: set_read_ahead: %d", d->name, ret);
		pc_dev_stats(d->pc, &st);
		(void)pc_dev_max_io(d->pc);
		(void)pc_dev_read_ahead(d->pc);
		if (d->fb && below(&w->rng, 8) == 0)
			fake_log_clear(d->fb);	/* the log would grow without bound */
		if (d->be->next)
			filter_knob(w, d);
		w->ops++;
		usleep((useconds_t)below(&w->rng, 5000));
	}
	return NULL;
}

static struct blk_backend *open_ram(struct blk_geometry *geo)
{
	const struct blk_backend_ops *ops = blk_backend_find("ram");
	char err[256] = "";
	struct blk_params p = {
		.file = "stress", .line = 1, .dev = "rm",
		.geo = { .size = DEV_SIZE, .lbs = 4096, .pbs = 4096, .max_io = 256 * KiB },
		.err = err, .errlen = sizeof(err),
	};
	struct blk_backend *be;

	if (!ops) {
		fprintf(stderr, "stress_cache: no ram backend\n");
		exit(1);
	}
	be = ops->open(&p, NULL);
	if (IS_ERR_OR_NULL(be)) {
		fprintf(stderr, "stress_cache: ram: %s\n", err);
		exit(1);
	}
	be->ops->geometry(be, geo);
	return be;
}

/* st: a config section, through the parser and stack_open() as in the daemon. */
static struct blk_backend *open_stack(struct blk_geometry *geo)
{
	char text[1024], err[512];
	struct blk_backend *be;
	bool fault = blk_backend_find("fault") != NULL;
	int n;

	if (!mkdtemp(tmpdir)) {
		perror("stress_cache: mkdtemp");
		exit(1);
	}
	n = snprintf(text, sizeof(text),
		     "[device st]\nbackend = ram\nsize = %llu\nlogical_block_size = 512\n"
		     "physical_block_size = 4096\nmax_io = 128K\nfilters = log, delay%s\n"
		     "log.path = %s/trace\ndelay.write = 0-200us\ndelay.read = 0-50us\n%s",
		     DEV_SIZE, fault ? ", fault" : "", tmpdir,
		     fault ? "fault.probability = 0\n" : "");
	if (conf_parse_buf(text, (size_t)n, "stress.conf", &conf, err, sizeof(err))) {
		fprintf(stderr, "stress_cache: %s\n", err);
		exit(1);
	}
	be = stack_open(&conf, &conf.devs[0], NULL, err, sizeof(err));
	if (IS_ERR_OR_NULL(be)) {
		fprintf(stderr, "stress_cache: stack_open: %s\n", err);
		exit(1);
	}
	be->ops->geometry(be, geo);
	printf("  st: ram under filters log, delay%s\n", fault ? ", fault" : "");
	return be;
}

static void add_dev(struct pc_cache *pc, struct dev *d)
{
	/* fk: 512-byte cache blocks in 4K physical blocks: writeback widens */
	d->pc = pc_dev_add(pc, d->name, d->be, d->fb ? 512 : 0);
	if (IS_ERR_OR_NULL(d->pc)) {
		fprintf(stderr, "stress_cache: pc_dev_add %s: %ld\n", d->name,
			IS_ERR(d->pc) ? PTR_ERR(d->pc) : 0L);
		exit(1);
	}
	d->model = calloc(1, DEV_SIZE);
	if (!d->model)
		abort();
}

/* After the threads: everything written back, and what each layer holds is the model. */
static void final_check(struct dev *d)
{
	struct worker w = { .d = d, .rng = seed };
	uint8_t *buf = alloc_buf();
	pc_errseq_t since = pc_errseq_sample(d->pc);
	struct pc_stats st;
	uint64_t pos;
	int ret;

	ret = pc_fsync(d->pc, &since);
	if (ret)
		fail("%s: final fsync: %d", d->name, ret);
	for (pos = 0; pos < DEV_SIZE; pos += MAX_BUF)
		verify(&w, buf, pos, MAX_BUF, 0);	/* through the cache */
	if (d->fb) {
		for (pos = 0; pos < DEV_SIZE; pos += MAX_BUF) {
			fake_store_read(d->fb, buf, MAX_BUF, pos);
			if (memcmp(buf, d->model + pos, MAX_BUF))
				fail("%s: the backend's store differs from the model in [%" PRIu64
				     ", +%llu)", d->name, pos, MAX_BUF);
		}
		if (fake_violations(d->fb))
			fail("%s: %u I/Os broke the backend contract", d->name,
			     fake_violations(d->fb));
		printf("  %s: fake backend: %" PRIu64 " writes, %" PRIu64 " reads, %u overlapping writes in flight\n",
		       d->name, fake_total_count(d->fb, FAKE_OP(BLK_WRITE)),
		       fake_total_count(d->fb, FAKE_OP(BLK_READ)), fake_overlaps(d->fb));
	} else {
		for (pos = 0; pos < DEV_SIZE; pos += MAX_BUF)
			verify(&w, buf, pos, MAX_BUF, 2);	/* the backend itself */
	}
	pc_dev_stats(d->pc, &st);
	if (st.writeback_errors || st.read_errors || st.writeback_copy_bytes)
		fail("%s: writeback_errors %" PRIu64 " read_errors %" PRIu64
		     " writeback_copy_bytes %" PRIu64, d->name, st.writeback_errors,
		     st.read_errors, st.writeback_copy_bytes);
	printf("  %s: user writes %" PRIu64 " B, backend writes %" PRIu64 " B in %" PRIu64
	       " I/Os, cache hits %" PRIu64 " misses %" PRIu64 "\n", d->name,
	       st.user_write_bytes, st.backend_write_bytes, st.backend_write_ios,
	       st.cache_hits, st.cache_misses);
	free(buf);
}

int main(int argc, char **argv)
{
	struct pc_cache_params cp = {
		.size = 4 * MiB,
		.folio_size = 64 * KiB,
		.min_block = 512,
		.dirty_background = 512 * KiB,
		.dirty_limit = 1 * MiB,
		.dirty_expire_ms = 100,
	};
	struct blk_geometry fgeo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 128 * KiB, .dma_align = 512,
	};
	static struct worker ws[NR_DEVS * (NR_WRITERS + NR_READERS + 1) + 1];
	char path[512];
	unsigned seconds;
	struct pc_cache *pc;
	int i, j, n = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "-o")) {
		overwrite = true;
		argc--;
		argv++;
	}
	seconds = argc > 1 ? (unsigned)atoi(argv[1]) : 10;
	if (argc > 2)
		seed = strtoull(argv[2], NULL, 0);
	if (!seed)
		seed = 1;
	printf("stress_cache: %u s, seed %" PRIu64 "%s\n", seconds, seed,
	       overwrite ? ", writers overwrite data under writeback (-o)" : "");

	pc = pc_cache_create(&cp);
	if (IS_ERR_OR_NULL(pc)) {
		fprintf(stderr, "stress_cache: pc_cache_create: %ld\n", IS_ERR(pc) ? PTR_ERR(pc) : 0L);
		return 1;
	}
	devs[0].name = "fk";
	devs[0].fb = fake_create(&fgeo);
	if (!devs[0].fb)
		return 1;
	fake_set_quiet(devs[0].fb, false);
	fake_set_seed(devs[0].fb, (unsigned)seed);
	fake_set_delay(devs[0].fb, 200);
	fake_set_mode(devs[0].fb, FAKE_DEFERRED);
	devs[0].be = fake_backend(devs[0].fb);
	devs[0].geo = *fake_geometry(devs[0].fb);
	devs[1].name = "rm";
	devs[1].be = open_ram(&devs[1].geo);
	devs[2].name = "st";
	devs[2].be = open_stack(&devs[2].geo);
	for (i = 0; i < NR_DEVS; i++) {
		uint64_t k, x = seed;
		pc_errseq_t since;

		add_dev(pc, &devs[i]);
		/* the readers' region: a pattern, on the backend before they start */
		for (k = RO_BASE; k < DEV_SIZE; k++)
			devs[i].model[k] = (uint8_t)rnd(&x);
		since = pc_errseq_sample(devs[i].pc);
		if (pc_write(devs[i].pc, devs[i].model + RO_BASE, REGION, RO_BASE) != (ssize_t)REGION ||
		    pc_fsync(devs[i].pc, &since)) {
			fprintf(stderr, "stress_cache: %s: cannot fill the readers' region\n",
				devs[i].name);
			return 1;
		}
	}
	if (pc_cache_start(pc)) {
		fprintf(stderr, "stress_cache: pc_cache_start failed\n");
		return 1;
	}

	for (i = 0; i < NR_DEVS; i++) {
		for (j = 0; j < NR_WRITERS; j++) {
			ws[n] = (struct worker){ .d = &devs[i], .idx = j };
			ws[n].rng = seed * 1000003 + (uint64_t)n + 1;
			pthread_create(&ws[n].tid, NULL, writer_main, &ws[n]);
			n++;
		}
		for (j = 0; j < NR_READERS; j++) {
			ws[n] = (struct worker){ .d = &devs[i], .idx = j };
			ws[n].rng = seed * 1000003 + (uint64_t)n + 1;
			pthread_create(&ws[n].tid, NULL, reader_main, &ws[n]);
			n++;
		}
		ws[n] = (struct worker){ .d = &devs[i] };
		ws[n].rng = seed * 1000003 + (uint64_t)n + 1;
		pthread_create(&ws[n].tid, NULL, fsync_main, &ws[n]);
		n++;
	}
	ws[n] = (struct worker){ .d = &devs[0] };
	ws[n].rng = seed * 1000003 + (uint64_t)n + 1;
	pthread_create(&ws[n].tid, NULL, knob_main, &ws[n]);
	n++;

	for (i = 0; i < (int)seconds * 10 && !atomic_load(&failures); i++)
		usleep(100000);
	atomic_store(&stop, true);
	for (i = 0; i < n; i++)
		pthread_join(ws[i].tid, NULL);
	{
		uint64_t ops = 0, bytes = 0, epochs = 0;

		for (i = 0; i < n; i++) {
			ops += ws[i].ops;
			bytes += ws[i].bytes;
			epochs += ws[i].epochs;
		}
		printf("  %d threads: %" PRIu64 " operations, %" PRIu64 " MiB moved, %" PRIu64
		       " writer epochs\n", n, ops, bytes >> 20, epochs);
	}
	for (i = 0; i < NR_DEVS && !atomic_load(&failures); i++)
		final_check(&devs[i]);

	pc_cache_stop(pc);	/* the flusher walks the device list */
	for (i = 0; i < NR_DEVS; i++) {
		pc_dev_remove(devs[i].pc);
		free(devs[i].model);
	}
	pc_cache_destroy(pc);
	fake_destroy(devs[0].fb);
	devs[1].be->ops->close(devs[1].be);
	stack_close(devs[2].be);
	conf_free(&conf);
	snprintf(path, sizeof(path), "%s/trace", tmpdir);
	unlink(path);
	rmdir(tmpdir);
	if (atomic_load(&failures)) {
		fprintf(stderr, "stress_cache: %d failures (seed %" PRIu64 ")\n",
			atomic_load(&failures), seed);
		return 1;
	}
	printf("stress_cache: OK\n");
	return 0;
}
