/* SPDX-License-Identifier: MIT */
/*
 * tests/tsan/stress_ram.c - the ram arena's copy-on-write under many threads,
 * for ThreadSanitizer (`make tsan`; plain C: Criterion cannot run under TSan).
 *
 *   stress_ram [SECONDS] [SEED]	(default 10 s, seed 1)
 *
 * One ram device (1 GiB, 512/4096, max_io 256K) with snapshots coming and
 * going while threads do I/O on it, the backend alone (no cache):
 *  - 4 writers. Writer w owns sector w of every page of a shared region
 *    (2 MiB across a leaf boundary: many threads copy the same leaves and
 *    pages at once) and a private region of 4 MiB (writes of any lbs-
 *    aligned shape, discards, write-zeroes), with a model of each: a
 *    version per sector.
 *  - 2 readers of the bytes no one writes (sectors 4-7 of every shared
 *    page, constant): a copy of a page must carry them over whole,
 *    whichever page a reader finds. Readers never read bytes a writer is
 *    writing: a read racing a write of the same bytes returns either, as
 *    on any block device, and TSan would rightly call the two memcpy()s a
 *    race.
 *  - 1 control thread, as the daemon will be: every few milliseconds it
 *    takes a snapshot with I/O held (a rwlock of the test's own that every
 *    I/O takes shared: the daemon's "hold writes"), keeps the models' copy,
 *    deletes the oldest of 6 with I/O going on, lists, saves a snapshot to
 *    a file with I/O going on (and checks the file against its model), and
 *    now and then quiesces the device, resets it to a random snapshot and
 *    checks the whole device against that snapshot's model.
 * At the end: the device equals the models, every snapshot is deleted,
 * and only the device's own pages are left in the arena. Exit 0 on
 * success, 1 on a mismatch (TSan reports fail `make tsan` through
 * halt_on_error).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../backends/backend.h"

#define KiB		(1024ull)
#define MiB		(1024ull * KiB)

#define DEV_SIZE	(1024 * MiB)
#define MAX_IO		(256 * KiB)
#define NR_WRITERS	4
#define NR_READERS	2
#define SHARED		(2 * MiB - 1 * MiB)	/* [1M, 3M): across the leaf at 2M */
#define SHARED_LEN	(2 * MiB)
#define PRIV(w)		(512 * MiB + (uint64_t)(w) * 64 * MiB)
#define PRIV_LEN	(4 * MiB)
#define NR_SNAPS	6

#define SECTORS(len)	((len) / 512)

/* Every sector the writers own, as versions: shared sector w of each page, private. */
struct models {
	uint32_t shared[NR_WRITERS][SHARED_LEN / 4096];
	uint32_t priv[NR_WRITERS][SECTORS(PRIV_LEN)];
};

struct snap {
	char name[16];
	struct models *m;	/* the models when it was taken */
};

static struct blk_backend *be;
static struct models live;		/* writer w's parts: w, under io_hold shared */
static pthread_rwlock_t io_hold;	/* shared per I/O; exclusive: the device is held */
static atomic_bool stop;
static atomic_int failures;
static atomic_uint_fast64_t nr_ios, nr_snaps, nr_resets, nr_saves, nr_lists;
static uint64_t seed = 1;

#define fail(...)							\
	do {								\
		fprintf(stderr, "stress_ram: FAIL: " __VA_ARGS__);	\
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

/* The bytes of the sector at @pos at version @v (0: zeros). */
static void sector_fill(uint8_t *out, uint64_t pos, uint32_t v)
{
	uint64_t i;

	if (!v) {
		memset(out, 0, 512);
		return;
	}
	for (i = 0; i < 512; i += 8) {
		uint64_t x = (pos + i) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)v << 32 | v);

		memcpy(out + i, &x, 8);
	}
}

/* The constant sectors 4-7 of the shared pages. */
static uint32_t const_ver(uint64_t pos)
{
	return 0x7fff0000u | (uint32_t)((pos >> 9) & 0xffff);
}

/* ---- synchronous I/O on the backend ---- */

struct sio {
	struct blk_io io;	/* first */
	int res;
	atomic_int done;
};

static void sio_end(struct blk_io *io, int res)
{
	struct sio *s = (struct sio *)io;

	s->res = res;
	atomic_store(&s->done, 1);
}

static int do_io(enum blk_op op, uint64_t pos, uint64_t len, void *buf)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	struct sio s = { .io = { .op = op, .pos = pos, .len = len, .iov = buf ? &iov : NULL,
				 .iovcnt = buf ? 1 : 0, .end_io = sio_end } };
	int ret = blk_submit(be, &s.io);

	atomic_fetch_add(&nr_ios, 1);
	if (ret)
		return ret;
	if (!atomic_load(&s.done))	/* ram completes before submit() returns */
		return -EPROTO;
	return s.res;
}

/* ---- the writers ---- */

static void *writer_main(void *arg)
{
	int w = (int)(intptr_t)arg;
	uint64_t rng = seed * 1000 + (uint64_t)w + 1;
	uint8_t *buf = aligned_alloc(4096, MAX_IO);

	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		unsigned int op = (unsigned int)below(&rng, 100);
		uint64_t pos, len, s;
		int ret;

		pthread_rwlock_rdlock(&io_hold);
		if (op < 50) {
			/* Its sector of a shared page. */
			uint64_t pg = below(&rng, SHARED_LEN / 4096);
			uint32_t v = live.shared[w][pg] + 1;

			pos = SHARED + pg * 4096 + (uint64_t)w * 512;
			sector_fill(buf, pos, v);
			ret = do_io(BLK_WRITE, pos, 512, buf);
			if (ret)
				fail("writer %d: write %" PRIu64 ": %d", w, pos, ret);
			live.shared[w][pg] = v;
		} else {
			/* Its private region: any shape. */
			len = (below(&rng, 4) ? below(&rng, 16) + 1 : below(&rng, MAX_IO / 512) + 1) * 512;
			pos = below(&rng, SECTORS(PRIV_LEN) - SECTORS(len) + 1) * 512;
			if (op < 85) {
				for (s = 0; s < len; s += 512) {
					uint32_t v = live.priv[w][(pos + s) / 512] + 1;

					sector_fill(buf + s, PRIV(w) + pos + s, v);
					live.priv[w][(pos + s) / 512] = v;
				}
				ret = do_io(BLK_WRITE, PRIV(w) + pos, len, buf);
			} else {
				memset(&live.priv[w][pos / 512], 0, SECTORS(len) * sizeof(uint32_t));
				ret = do_io(op < 93 ? BLK_DISCARD : BLK_WRITE_ZEROES, PRIV(w) + pos, len,
					    NULL);
			}
			if (ret)
				fail("writer %d: op %u at %" PRIu64 " +%" PRIu64 ": %d", w, op, pos, len, ret);
		}
		pthread_rwlock_unlock(&io_hold);
	}
	free(buf);
	return NULL;
}

/* ---- the readers: the sectors no one writes ---- */

static void *reader_main(void *arg)
{
	uint64_t rng = seed * 2000 + (uint64_t)(intptr_t)arg + 1;
	uint8_t got[2048], want[512];

	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		uint64_t pg = below(&rng, SHARED_LEN / 4096), pos = SHARED + pg * 4096 + 2048, s;
		int ret;

		pthread_rwlock_rdlock(&io_hold);
		ret = do_io(BLK_READ, pos, sizeof(got), got);
		pthread_rwlock_unlock(&io_hold);
		if (ret) {
			fail("reader: read %" PRIu64 ": %d", pos, ret);
			break;
		}
		for (s = 0; s < sizeof(got); s += 512) {
			sector_fill(want, pos + s, const_ver(pos + s));
			if (memcmp(got + s, want, 512))
				fail("reader: sector %" PRIu64 " changed (no one writes it)", (pos + s) / 512);
		}
	}
	return NULL;
}

/* ---- checks ---- */

/* The expected bytes of the whole shared region, or a private one, under @m. */
static void expect_shared(const struct models *m, uint8_t *out)
{
	uint64_t p, s;

	for (p = 0; p < SHARED_LEN; p += 4096)
		for (s = 0; s < 4096; s += 512) {
			uint64_t pos = SHARED + p + s;
			uint32_t v = s / 512 < NR_WRITERS ? m->shared[s / 512][p / 4096] : const_ver(pos);

			sector_fill(out + p + s, pos, v);
		}
}

static void expect_priv(const struct models *m, int w, uint8_t *out)
{
	uint64_t s;

	for (s = 0; s < PRIV_LEN; s += 512)
		sector_fill(out + s, PRIV(w) + s, m->priv[w][s / 512]);
}

/* Compare @len bytes from @read (device or file reader) with @want. */
static bool same(const uint8_t *got, const uint8_t *want, uint64_t len, const char *what,
		 uint64_t base)
{
	uint64_t i;

	if (!memcmp(got, want, len))
		return true;
	for (i = 0; got[i] == want[i]; i++)
		;
	fail("%s: byte %" PRIu64 " (sector %" PRIu64 ") differs", what, base + i, (base + i) / 512);
	return false;
}

/* The device (held: no I/O) reads as @m says. */
static void check_device(const struct models *m, const char *what)
{
	uint8_t *got = aligned_alloc(4096, PRIV_LEN), *want = aligned_alloc(4096, PRIV_LEN);
	uint64_t off;
	int w;

	expect_shared(m, want);
	for (off = 0; off < SHARED_LEN; off += MAX_IO)
		if (do_io(BLK_READ, SHARED + off, MAX_IO, got + off))
			fail("%s: read", what);
	same(got, want, SHARED_LEN, what, SHARED);
	for (w = 0; w < NR_WRITERS; w++) {
		expect_priv(m, w, want);
		for (off = 0; off < PRIV_LEN; off += MAX_IO)
			if (do_io(BLK_READ, PRIV(w) + off, MAX_IO, got + off))
				fail("%s: read", what);
		same(got, want, PRIV_LEN, what, PRIV(w));
	}
	free(got);
	free(want);
}

/* The image file @path holds what @m says. */
static void check_file(const char *path, const struct models *m, const char *what)
{
	uint8_t *got = malloc(PRIV_LEN), *want = malloc(PRIV_LEN);
	FILE *f = fopen(path, "rb");
	int w;

	if (!f) {
		fail("%s: %s: %s", what, path, strerror(errno));
		goto out;
	}
	expect_shared(m, want);
	if (fseeko(f, (off_t)SHARED, SEEK_SET) || fread(got, 1, SHARED_LEN, f) != SHARED_LEN)
		fail("%s: short read", what);
	else
		same(got, want, SHARED_LEN, what, SHARED);
	for (w = 0; w < NR_WRITERS; w++) {
		expect_priv(m, w, want);
		if (fseeko(f, (off_t)PRIV(w), SEEK_SET) || fread(got, 1, PRIV_LEN, f) != PRIV_LEN)
			fail("%s: short read", what);
		else
			same(got, want, PRIV_LEN, what, PRIV(w));
	}
	if (fseeko(f, 0, SEEK_END) || ftello(f) != (off_t)DEV_SIZE)
		fail("%s: the image is not the device's size", what);
	fclose(f);
out:
	free(got);
	free(want);
}

/* ---- the control thread: the daemon's snapshot calls ---- */

static void *control_main(void *arg)
{
	struct snap snaps[NR_SNAPS] = { 0 };
	char path[128];
	uint64_t rng = seed * 3000 + 7, n = 0;
	int nr = 0, i, ret;

	(void)arg;
	snprintf(path, sizeof(path), "%s/stress_ram.%d.img",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	while (!atomic_load(&stop) && !atomic_load(&failures)) {
		unsigned int op = (unsigned int)below(&rng, 100);

		usleep(1000 + (useconds_t)below(&rng, 4000));
		if (op < 40 || !nr) {
			/* Take one with writes held; the oldest goes when there are too many. */
			if (nr == NR_SNAPS) {
				ret = blk_snap_destroy(be, snaps[0].name);
				if (ret)
					fail("destroy %s: %d", snaps[0].name, ret);
				free(snaps[0].m);
				memmove(&snaps[0], &snaps[1], (NR_SNAPS - 1) * sizeof(snaps[0]));
				nr--;
			}
			snprintf(snaps[nr].name, sizeof(snaps[nr].name), "e%" PRIu64, n++);
			snaps[nr].m = malloc(sizeof(struct models));
			pthread_rwlock_wrlock(&io_hold);
			ret = blk_snap_create(be, snaps[nr].name);
			memcpy(snaps[nr].m, &live, sizeof(live));
			pthread_rwlock_unlock(&io_hold);
			if (ret)
				fail("create %s: %d", snaps[nr].name, ret);
			nr++;
			atomic_fetch_add(&nr_snaps, 1);
		} else if (op < 60) {
			struct blk_snap_info v[NR_SNAPS + 1];

			ret = blk_snap_list(be, v, NR_SNAPS + 1);
			if (ret != nr)
				fail("list: %d snapshots, want %d", ret, nr);
			for (i = 0; i < nr && i < ret; i++)
				if (strcmp(v[i].name, snaps[i].name))
					fail("list: %s where %s was", v[i].name, snaps[i].name);
			atomic_fetch_add(&nr_lists, 1);
		} else if (op < 75) {
			/* Save one while the writers go on; the file is that snapshot. */
			i = (int)below(&rng, (uint64_t)nr);
			ret = blk_snap_save(be, snaps[i].name, path);
			if (ret)
				fail("save %s: %d", snaps[i].name, ret);
			else
				check_file(path, snaps[i].m, snaps[i].name);
			unlink(path);
			atomic_fetch_add(&nr_saves, 1);
		} else if (op < 85) {
			/* Quiesce, reset, check the whole device, let I/O go on. */
			i = (int)below(&rng, (uint64_t)nr);
			pthread_rwlock_wrlock(&io_hold);
			ret = blk_snap_reset(be, snaps[i].name);
			if (ret) {
				fail("reset %s: %d", snaps[i].name, ret);
			} else {
				memcpy(&live, snaps[i].m, sizeof(live));
				check_device(&live, snaps[i].name);
			}
			pthread_rwlock_unlock(&io_hold);
			atomic_fetch_add(&nr_resets, 1);
		} else {
			/* The device as it is now, saved with I/O going on: not checked. */
			ret = blk_snap_save(be, NULL, path);
			if (ret)
				fail("save the device: %d", ret);
			unlink(path);
		}
	}
	for (i = 0; i < nr; i++) {
		ret = blk_snap_destroy(be, snaps[i].name);
		if (ret)
			fail("destroy %s at the end: %d", snaps[i].name, ret);
		free(snaps[i].m);
	}
	return NULL;
}

static uint64_t stat_val(const char *name)
{
	char buf[2048], *s;
	size_t len = strlen(name);

	be->ops->stat(be, buf, sizeof(buf));
	for (s = buf; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (!strncmp(s, name, len) && s[len] == ' ')
			return strtoull(s + len + 1, NULL, 10);
	fail("no %s in stat", name);
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t wt[NR_WRITERS], rt[NR_READERS], ct;
	struct blk_params p = { .file = "stress_ram", .line = 1, .dev = "ram0",
				.geo = { .size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = MAX_IO } };
	char err[256];
	uint8_t *buf;
	uint64_t off;
	int secs = argc > 1 ? atoi(argv[1]) : 10, i, w;

	if (argc > 2)
		seed = strtoull(argv[2], NULL, 10);
	p.err = err;
	p.errlen = sizeof(err);
	be = blk_backend_find("ram")->open(&p, NULL);
	if (IS_ERR(be)) {
		fprintf(stderr, "stress_ram: open: %s\n", err);
		return 1;
	}
	{
		/* Writer-preferring: the control thread gets the device held. */
		pthread_rwlockattr_t a;

		pthread_rwlockattr_init(&a);
		pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&io_hold, &a);
		pthread_rwlockattr_destroy(&a);
	}
	/* The shared region starts with every sector written. */
	buf = aligned_alloc(4096, SHARED_LEN);
	expect_shared(&live, buf);
	for (off = 0; off < SHARED_LEN; off += MAX_IO)
		if (do_io(BLK_WRITE, SHARED + off, MAX_IO, buf + off))
			fail("initial write");
	free(buf);

	for (w = 0; w < NR_WRITERS; w++)
		pthread_create(&wt[w], NULL, writer_main, (void *)(intptr_t)w);
	for (i = 0; i < NR_READERS; i++)
		pthread_create(&rt[i], NULL, reader_main, (void *)(intptr_t)i);
	pthread_create(&ct, NULL, control_main, NULL);
	for (i = 0; i < secs * 10 && !atomic_load(&failures); i++)
		usleep(100 * 1000);
	atomic_store(&stop, true);
	for (w = 0; w < NR_WRITERS; w++)
		pthread_join(wt[w], NULL);
	for (i = 0; i < NR_READERS; i++)
		pthread_join(rt[i], NULL);
	pthread_join(ct, NULL);

	check_device(&live, "the device at the end");
	/*
	 * No snapshot left: the arena holds the device's pages and nothing
	 * else. (A snapshot of it now says how many pages it maps.)
	 */
	{
		struct blk_snap_info v[1];

		if (blk_snap_list(be, NULL, 0) != 0)
			fail("snapshots left at the end");
		if (blk_snap_create(be, "final") || blk_snap_list(be, v, 1) != 1)
			fail("the final snapshot");
		else if (stat_val("arena_bytes") != v[0].data_bytes)
			fail("arena_bytes %" PRIu64 " with no snapshot left, the device maps %" PRIu64,
			     stat_val("arena_bytes"), v[0].data_bytes);
		blk_snap_destroy(be, "final");
	}
	printf("stress_ram: %d s, seed %" PRIu64 ": %" PRIu64 " I/Os, %" PRIu64 " snapshots, %" PRIu64
	       " resets, %" PRIu64 " saves, %" PRIu64 " lists, %" PRIu64 " pages copied: %s\n",
	       secs, seed, (uint64_t)atomic_load(&nr_ios), (uint64_t)atomic_load(&nr_snaps),
	       (uint64_t)atomic_load(&nr_resets), (uint64_t)atomic_load(&nr_saves),
	       (uint64_t)atomic_load(&nr_lists), stat_val("snapshot_cow_pages"),
	       atomic_load(&failures) ? "FAILED" : "ok");
	be->ops->close(be);
	pthread_rwlock_destroy(&io_hold);
	return atomic_load(&failures) ? 1 : 0;
}
