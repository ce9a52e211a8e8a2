// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_mapped.c - mapped direct reads (BLK_IO_MAPPED,
 * backend.h): an unsplit direct read whose caller takes a mapping
 * (pc_aio.map_ok) is answered from the backend's memory inside its end_io,
 * with no copy into the request's buffer, when the backend ends it inline;
 * copied into the buffer as before when the backend ends it on another
 * thread, when the backend does not map, or when ram's mapping would need
 * more than 64 segments. The cache runs over the real ram backend and over
 * a small backend of this file's that maps (inline or from a thread of its
 * own) or ignores the flag. A race of in-place writes and mapped reads of
 * the same blocks on ram checks that a reply never carries a torn block.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../core/pcache.h"
#include "cache_fixture.h"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define POISON 0xa5

/* ------------------------------------------------------------ requests */

struct mreq {
	struct pc_aio aio;	/* first */
	int calls;		/* atomic */
	ssize_t res;
	bool mapped;		/* done got a mapping */
	unsigned int mapcnt;
	struct iovec seg[256];	/* the mapping's segments, as done saw them */
	uint8_t *buf;		/* the request's buffer */
	uint8_t *got;		/* what the reply carried */
	size_t len;
	/* race: done reads each 4 KiB block of the mapping slowly; a torn one counts */
	bool slow_check;
	unsigned int torn;
};

static void spin_ns(long ns)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ns);
}

/* What a FUSE reply does: the data leaves from the mapping, or from the buffer. */
static void mreq_done(struct pc_aio *aio, ssize_t res)
{
	struct mreq *m = (struct mreq *)aio;
	size_t off = 0;
	unsigned int i;

	m->res = res;
	if (res > 0 && aio->map) {
		m->mapped = true;
		m->mapcnt = aio->mapcnt;
		for (i = 0; i < aio->mapcnt; i++) {
			if (i < 256)
				m->seg[i] = aio->map[i];
			if (m->slow_check && aio->map[i].iov_len == 4096) {
				/* the kernel copies the reply a while after it was built */
				const uint8_t *p = aio->map[i].iov_base;
				uint8_t first = p[0];

				spin_ns(3000);
				if (p[2048] != first || p[4095] != first)
					m->torn++;
			}
			memcpy(m->got + off, aio->map[i].iov_base, aio->map[i].iov_len);
			off += aio->map[i].iov_len;
		}
	} else if (res > 0) {
		memcpy(m->got, m->buf, (size_t)res);
	}
	__atomic_add_fetch(&m->calls, 1, __ATOMIC_RELEASE);
}

static struct mreq *mreq_new(size_t len)
{
	struct mreq *m = calloc(1, sizeof(*m));

	cr_assert_not_null(m);
	m->buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	m->got = malloc(len);
	cr_assert(m->buf && m->got);
	memset(m->buf, POISON, len);
	memset(m->got, 0, len);
	m->len = len;
	m->aio.done = mreq_done;
	m->aio.map_ok = true;
	return m;
}

static void mreq_free(struct mreq *m)
{
	free(m->buf);
	free(m->got);
	free(m);
}

static bool mreq_wait(struct mreq *m, unsigned int ms)
{
	unsigned int i;

	for (i = 0; i < ms * 10; i++) {
		if (__atomic_load_n(&m->calls, __ATOMIC_ACQUIRE))
			return true;
		usleep(100);
	}
	return false;
}

/* A mapped-capable direct read of @len at @pos; waits for it. */
static struct mreq *dread(struct pc_dev *d, uint64_t pos, size_t len)
{
	struct mreq *m = mreq_new(len);

	pc_direct_read_async(d, &m->aio, m->buf, len, pos);
	cr_assert(mreq_wait(m, 5000), "direct read %llu+%zu never ended",
		  (unsigned long long)pos, len);
	cr_assert_eq(m->calls, 1);
	cr_assert_eq(m->res, (ssize_t)len, "read %llu+%zu: %zd", (unsigned long long)pos, len,
		     m->res);
	return m;
}

static void wdone(struct pc_aio *aio, ssize_t res)
{
	struct mreq *m = (struct mreq *)aio;

	m->res = res;
	__atomic_add_fetch(&m->calls, 1, __ATOMIC_RELEASE);
}

static void dwrite(struct pc_dev *d, const void *buf, size_t len, uint64_t pos)
{
	struct mreq w = { .aio.done = wdone };

	pc_direct_write_async(d, &w.aio, buf, len, pos);
	cr_assert(mreq_wait(&w, 5000));
	cr_assert_eq(w.res, (ssize_t)len, "write %llu+%zu: %zd", (unsigned long long)pos, len,
		     w.res);
}

static uint64_t mapped_count(struct pc_dev *d)
{
	struct pc_stats st;

	pc_dev_stats(d, &st);
	return st.direct_read_mapped;
}

static void expect_bytes(const uint8_t *got, const uint8_t *want, size_t len, const char *what)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (got[i] != want[i])
			cr_assert_fail("%s: byte %zu is %#x, want %#x", what, i, got[i], want[i]);
}

static bool buf_untouched(const struct mreq *m)
{
	size_t i;

	for (i = 0; i < m->len; i++)
		if (m->buf[i] != POISON)
			return false;
	return true;
}

/* ---------------------------------------------------------- the fixture */

static struct pc_cache *tpc;
static struct pc_dev *tdev;
static struct blk_backend *tbe;
static uint8_t *ref;		/* what the device holds */
#define DEV_SIZE (16 * MiB)

static struct blk_backend *ram_open(uint64_t size, uint32_t max_io)
{
	static struct blk_params p;
	static char err[256];

	memset(&p, 0, sizeof(p));
	p.file = "test.conf";
	p.line = 1;
	p.dev = "ram0";
	p.geo.size = size;
	p.geo.lbs = 512;
	p.geo.pbs = 4096;
	p.geo.max_io = max_io;
	p.err = err;
	p.errlen = sizeof(err);
	tbe = blk_backend_find("ram")->open(&p, NULL);
	cr_assert(!IS_ERR_OR_NULL(tbe), "open ram: %s", err);
	return tbe;
}

static void start(struct blk_backend *be)
{
	tpc = cache_new(8 * MiB, 64 * KiB, 8 * MiB);
	tdev = pc_dev_add(tpc, "m0", be, 0);
	cr_assert(!IS_ERR_OR_NULL(tdev));
	ref = calloc(1, DEV_SIZE);
	cr_assert_not_null(ref);
}

static void stop(void)
{
	if (tdev && !IS_ERR(tdev))
		pc_dev_remove(tdev);
	if (tpc && !IS_ERR(tpc))
		pc_cache_destroy(tpc);
	if (tbe && !IS_ERR(tbe))
		tbe->ops->close(tbe);
	free(ref);
	tdev = NULL;
	tpc = NULL;
	tbe = NULL;
	ref = NULL;
}

static void start_ram(void)
{
	start(ram_open(DEV_SIZE, 1 * MiB));
}

/* Write @len bytes of pattern @gen at @pos, through the cache, and into ref. */
static void put(uint64_t pos, size_t len, unsigned int gen)
{
	uint8_t *b = aligned_alloc(4096, len);

	cr_assert_not_null(b);
	fill(b, len, pos, gen);
	dwrite(tdev, b, len, pos);
	memcpy(ref + pos, b, len);
	free(b);
}

/* -------------------------------------------------------- ram: mapped */

Test(mapped, one_block_is_one_segment_and_never_copied, .init = start_ram, .fini = stop)
{
	struct mreq *m;

	put(8 * KiB, 4 * KiB, 3);
	m = dread(tdev, 8 * KiB, 4 * KiB);
	cr_assert(m->mapped, "ram answered a 4 KiB read with a copy");
	cr_assert_eq(m->mapcnt, 1);
	cr_assert_eq(m->seg[0].iov_len, 4 * KiB);
	cr_assert(buf_untouched(m), "the mapped read copied into the request's buffer");
	expect_bytes(m->got, ref + 8 * KiB, 4 * KiB, "one block");
	cr_assert_eq(mapped_count(tdev), 1);
	mreq_free(m);
}

Test(mapped, many_pages_are_many_segments, .init = start_ram, .fini = stop)
{
	struct mreq *m;
	size_t sum = 0;
	unsigned int i;

	put(1 * MiB, 64 * KiB, 5);
	/* one 512-byte sector into the range's first page too: a partial segment */
	m = dread(tdev, 1 * MiB + 512, 64 * KiB - 512);
	cr_assert(m->mapped);
	cr_assert_eq(m->mapcnt, 16, "%u segments", m->mapcnt);
	cr_assert_eq(m->seg[0].iov_len, 4 * KiB - 512);
	for (i = 0; i < m->mapcnt; i++)
		sum += m->seg[i].iov_len;
	cr_assert_eq(sum, 64 * KiB - 512);
	cr_assert(buf_untouched(m));
	expect_bytes(m->got, ref + 1 * MiB + 512, 64 * KiB - 512, "64 KiB");
	mreq_free(m);
}

Test(mapped, holes_point_at_one_zero_buffer, .init = start_ram, .fini = stop)
{
	struct mreq *m;
	const void *zero = NULL;
	unsigned int i, holes = 0;

	put(0, 4 * KiB, 7);
	put(128 * KiB, 4 * KiB, 8);
	/* data, 124 KiB hole, data, 124 KiB hole: holes split at 64 KiB */
	m = dread(tdev, 0, 256 * KiB);
	cr_assert(m->mapped);
	cr_assert_eq(m->mapcnt, 6, "%u segments", m->mapcnt);
	for (i = 0; i < m->mapcnt; i++) {
		cr_assert_leq(m->seg[i].iov_len, 64 * KiB);
		if (i == 0 || i == 3) {
			cr_assert_eq(m->seg[i].iov_len, 4 * KiB);
			continue;
		}
		holes++;
		if (!zero)
			zero = m->seg[i].iov_base;
		cr_assert_eq(m->seg[i].iov_base, zero, "holes in two zero buffers");
	}
	cr_assert_eq(holes, 4);
	expect_bytes(m->got, ref, 256 * KiB, "data and holes");
	mreq_free(m);

	/* never written at all: 1 MiB in 16 entries of the 64 KiB zero buffer */
	m = dread(tdev, 4 * MiB, 1 * MiB);
	cr_assert(m->mapped);
	cr_assert_eq(m->mapcnt, 16);
	expect_bytes(m->got, ref + 4 * MiB, 1 * MiB, "a hole of 1 MiB");
	mreq_free(m);
}

Test(mapped, more_than_64_segments_are_copied, .init = start_ram, .fini = stop)
{
	struct mreq *m;
	uint64_t pos;

	/* every other page written: 256 segments for 1 MiB */
	for (pos = 0; pos < 1 * MiB; pos += 8 * KiB)
		put(2 * MiB + pos, 4 * KiB, 9);
	m = dread(tdev, 2 * MiB, 1 * MiB);
	cr_assert_not(m->mapped, "a 256-segment mapping");
	expect_bytes(m->got, ref + 2 * MiB, 1 * MiB, "copied");
	cr_assert_eq(mapped_count(tdev), 0);
	mreq_free(m);
	/* 64 exactly still maps: 32 data pages and 32 holes of 4 KiB */
	m = dread(tdev, 2 * MiB, 256 * KiB);
	cr_assert(m->mapped);
	cr_assert_eq(m->mapcnt, 64);
	expect_bytes(m->got, ref + 2 * MiB, 256 * KiB, "64 segments");
	mreq_free(m);
}

Test(mapped, a_split_read_or_a_caller_without_map_ok_is_copied, .init = start_ram, .fini = stop)
{
	struct mreq *m;

	put(0, 512 * KiB, 4);
	cr_assert_eq(pc_dev_set_max_io(tdev, 128 * KiB), 0);
	m = dread(tdev, 0, 512 * KiB);
	cr_assert_not(m->mapped, "a split read was mapped");
	expect_bytes(m->got, ref, 512 * KiB, "split");
	mreq_free(m);

	m = mreq_new(4 * KiB);
	m->aio.map_ok = false;
	pc_direct_read_async(tdev, &m->aio, m->buf, 4 * KiB, 4 * KiB);
	cr_assert(mreq_wait(m, 5000));
	cr_assert_not(m->mapped);
	expect_bytes(m->got, ref + 4 * KiB, 4 * KiB, "map_ok false");
	mreq_free(m);
	cr_assert_eq(mapped_count(tdev), 0);
}

Test(mapped, a_synchronous_direct_read_is_never_mapped, .init = start_ram, .fini = stop)
{
	uint8_t *b = aligned_alloc(4096, 16 * KiB);

	cr_assert_not_null(b);
	put(32 * KiB, 16 * KiB, 11);
	memset(b, POISON, 16 * KiB);
	cr_assert_eq(pc_direct_read(tdev, b, 16 * KiB, 32 * KiB), (ssize_t)(16 * KiB));
	expect_bytes(b, ref + 32 * KiB, 16 * KiB, "pc_direct_read");
	cr_assert_eq(mapped_count(tdev), 0);
	free(b);
}

/* ------------------------------------ a backend that maps, or not, anywhere */

enum tb_mode { TB_INLINE, TB_THREAD, TB_NOMAP };

struct tbe {
	struct blk_backend be;	/* first */
	struct blk_geometry geo;
	enum tb_mode mode;
	uint8_t *store;
	struct iovec map[4];
	unsigned int seen_flags;	/* of the last READ */
	pthread_t th;
	bool have_th;
};

static struct tbe *tb;

static void tb_fill_map(struct tbe *t, struct blk_io *io)
{
	/* two segments, to see them joined in order */
	size_t half = io->len / 2;

	t->map[0].iov_base = t->store + io->pos;
	t->map[0].iov_len = half;
	t->map[1].iov_base = t->store + io->pos + half;
	t->map[1].iov_len = io->len - half;
	io->map = t->map;
	io->mapcnt = 2;
}

static void *tb_thread(void *arg)
{
	struct blk_io *io = arg;

	usleep(20000);		/* the submitter has long returned */
	tb_fill_map(tb, io);
	io->end_io(io, 0);
	return NULL;
}

static int tb_submit(struct blk_backend *be, struct blk_io *io)
{
	struct tbe *t = (struct tbe *)be;
	size_t off = 0;
	int i;

	if (io->op == BLK_WRITE) {
		for (i = 0; i < io->iovcnt; i++) {
			memcpy(t->store + io->pos + off, io->iov[i].iov_base, io->iov[i].iov_len);
			off += io->iov[i].iov_len;
		}
		io->end_io(io, 0);
		return 0;
	}
	if (io->op != BLK_READ) {
		io->end_io(io, 0);
		return 0;
	}
	t->seen_flags = io->flags;
	if (t->mode == TB_NOMAP || !(io->flags & BLK_IO_MAPPED)) {
		for (i = 0; i < io->iovcnt; i++) {
			memcpy(io->iov[i].iov_base, t->store + io->pos + off, io->iov[i].iov_len);
			off += io->iov[i].iov_len;
		}
		io->end_io(io, 0);
		return 0;
	}
	if (t->mode == TB_THREAD) {
		cr_assert_eq(pthread_create(&t->th, NULL, tb_thread, io), 0);
		t->have_th = true;
		return 0;
	}
	tb_fill_map(t, io);
	io->end_io(io, 0);
	return 0;
}

static void tb_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct tbe *)be)->geo;
}

static const struct blk_backend_ops tb_ops = {
	.name = "maptest",
	.geometry = tb_geometry,
	.submit = tb_submit,
};

static void start_tb(enum tb_mode mode)
{
	tb = calloc(1, sizeof(*tb));
	cr_assert_not_null(tb);
	tb->be.ops = &tb_ops;
	tb->geo = geo_of(DEV_SIZE, 512, 4096, 1 * MiB);
	tb->mode = mode;
	tb->store = calloc(1, DEV_SIZE);
	cr_assert_not_null(tb->store);
	start(&tb->be);
}

static void stop_tb(void)
{
	if (tb && tb->have_th)
		pthread_join(tb->th, NULL);
	stop();
	if (tb) {
		free(tb->store);
		free(tb);
	}
	tb = NULL;
}

Test(mapped, inline_mapping_of_another_backend_replies_from_it, .fini = stop_tb)
{
	struct mreq *m;

	start_tb(TB_INLINE);
	put(64 * KiB, 16 * KiB, 2);
	m = dread(tdev, 64 * KiB, 16 * KiB);
	cr_assert(tb->seen_flags & BLK_IO_MAPPED, "the read went down without BLK_IO_MAPPED");
	cr_assert(m->mapped);
	cr_assert_eq(m->mapcnt, 2);
	cr_assert_eq(m->seg[0].iov_base, tb->store + 64 * KiB, "not the backend's memory");
	cr_assert(buf_untouched(m));
	expect_bytes(m->got, ref + 64 * KiB, 16 * KiB, "inline");
	cr_assert_eq(mapped_count(tdev), 1);
	mreq_free(m);
}

Test(mapped, a_mapping_ended_on_another_thread_is_copied, .fini = stop_tb)
{
	struct mreq *m;

	start_tb(TB_THREAD);
	put(64 * KiB, 16 * KiB, 2);
	m = dread(tdev, 64 * KiB, 16 * KiB);
	cr_assert(tb->seen_flags & BLK_IO_MAPPED);
	cr_assert_not(m->mapped, "done got a mapping outside the submitting thread");
	expect_bytes(m->buf, ref + 64 * KiB, 16 * KiB, "copied into the buffer");
	expect_bytes(m->got, ref + 64 * KiB, 16 * KiB, "off-thread");
	cr_assert_eq(mapped_count(tdev), 0);
	mreq_free(m);
}

Test(mapped, a_backend_without_mapping_copies, .fini = stop_tb)
{
	struct mreq *m;

	start_tb(TB_NOMAP);
	put(0, 8 * KiB, 6);
	m = dread(tdev, 0, 8 * KiB);
	cr_assert(tb->seen_flags & BLK_IO_MAPPED);
	cr_assert_not(m->mapped);
	expect_bytes(m->got, ref, 8 * KiB, "no mapping");
	cr_assert_eq(mapped_count(tdev), 0);
	mreq_free(m);
}

/* ------------------------------------------ ram: writes against mapped replies */

#define RACE_BLOCKS 4
static volatile bool race_stop;

static void *race_writer(void *arg)
{
	uint8_t *b = aligned_alloc(4096, 4096);
	unsigned int v = 1 + (unsigned int)(uintptr_t)arg;

	while (!race_stop) {
		int blk;

		for (blk = 0; blk < RACE_BLOCKS; blk++) {
			struct mreq w = { .aio.done = wdone };

			memset(b, (int)(v & 0xff), 4096);
			pc_direct_write_async(tdev, &w.aio, b, 4096, (uint64_t)blk * 4096);
			while (!__atomic_load_n(&w.calls, __ATOMIC_ACQUIRE))
				sched_yield();
		}
		v += 2;
	}
	free(b);
	return NULL;
}

/*
 * Whole-block versions: writers fill a block with one byte, readers check
 * each mapped block a few microseconds after the mapping was made (as the
 * kernel's copy of a reply comes after the writev(2) starts): with ram's
 * in-place writes waiting for the replies that map the page, never torn.
 */
Test(mapped, in_place_writes_never_tear_a_mapped_reply, .init = start_ram, .fini = stop,
     .timeout = 60)
{
	pthread_t w[2];
	unsigned int torn = 0, reads = 0, mapped = 0, i;
	struct timespec t0, t;
	uint8_t *b = aligned_alloc(4096, 4096);

	memset(b, 0xff, 4096);
	for (i = 0; i < RACE_BLOCKS; i++)
		dwrite(tdev, b, 4096, (uint64_t)i * 4096);	/* pages exist: writes are in place */
	free(b);
	race_stop = false;
	for (i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&w[i], NULL, race_writer, (void *)(uintptr_t)i), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct mreq *m = mreq_new(RACE_BLOCKS * 4096);
		size_t k;

		m->slow_check = true;
		pc_direct_read_async(tdev, &m->aio, m->buf, RACE_BLOCKS * 4096, 0);
		cr_assert(mreq_wait(m, 5000));
		torn += m->torn;
		mapped += m->mapped;
		/* the reply itself: each block one version */
		for (k = 0; k < RACE_BLOCKS * 4096; k += 4096)
			if (memcmp(m->got + k, m->got + k + 1, 4095))
				torn++;
		mreq_free(m);
		reads++;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 2);
	race_stop = true;
	for (i = 0; i < 2; i++)
		pthread_join(w[i], NULL);
	cr_assert_gt(mapped, 0);
	cr_assert_eq(torn, 0, "%u torn blocks in %u reads (%u mapped)", torn, reads, mapped);
}
