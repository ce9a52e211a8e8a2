// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_powerloss.c - the powerloss filter over the fake backend.
 *
 * The core of it is a model: the test keeps the device's durable contents
 * (as of the last completed flush) and the list of unflushed writes since,
 * with their data. After a power cut, every physical block of the fake's
 * store must hold its contents after some prefix of the unflushed writes
 * that touch it (none of them, some, all), which says at once that flushed
 * data survived, that nothing tore inside a physical block, and that no
 * data appeared that was never written. A second check, on writes that do
 * not overlap, says each write was kept, dropped, or torn into a kept
 * prefix of whole physical blocks, and that every outcome happens.
 * Random workloads run for many seeds and three geometries.
 *
 * Also: the dark period (writes and flushes acknowledged and dropped,
 * reads of the post-crash state), restart, the host's drop_volatile calls,
 * a flush in flight at the cut (EIO), a write in flight at the cut (waited
 * for, then decided), overlapping writes (serialized), the attrs and keys.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../backends/lib/crashmodel.h"
#include "../../core/conf.h"
#include "../../core/stack.h"
#include "fake_backend.h"
#include "helpers.h"


/* ---- I/O helpers ---- */

/* Submit, wait for the one completion, return the result; READ data into @out. */
static int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		 const void *data, void *out)
{
	return tio_do(be, op, pos, len, data, 0xee, out);
}

/* ---- the host: counts drop_volatile calls ---- */

static int nr_drops;		/* atomic */

static void host_drop(void *ctx)
{
	(void)ctx;
	__atomic_add_fetch(&nr_drops, 1, __ATOMIC_SEQ_CST);
}

static const struct blk_host host = { .ctx = NULL, .drop_volatile = host_drop };

static int drops(void)
{
	return __atomic_load_n(&nr_drops, __ATOMIC_SEQ_CST);
}

/* ---- fake + filter ---- */

static struct fake_be *fb;

static void make_fake(uint64_t size, uint32_t lbs, uint32_t pbs, uint32_t max_io)
{
	const struct blk_geometry geo = { .size = size, .lbs = lbs, .pbs = pbs, .max_io = max_io };

	if (fb)
		fake_destroy(fb);
	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void setup(void)
{
	make_fake(1 * MiB, 512, 4096, 64 * KiB);
	__atomic_store_n(&nr_drops, 0, __ATOMIC_SEQ_CST);
}

static void teardown(void)
{
	if (fb)
		fake_destroy(fb);
	fb = NULL;
}

TestSuite(powerloss, .init = setup, .fini = teardown);

static void tparams_init(struct tparams *tp)
{
	filter_params_init(tp, "powerloss", fake_backend(fb), "/etc/blkfs.conf", 2);
	tp->p.host = &host;
}

static struct blk_backend *pl_open(void)
{
	struct tparams tp;

	tparams_init(&tp);
	return filter_open(&tp);
}

static void trigger_seed(struct blk_backend *be, uint64_t seed)
{
	char s[32];

	snprintf(s, sizeof(s), "%llu\n", (unsigned long long)seed);
	cr_assert_eq(attr_store(be, "seed", s), 0);
	cr_assert_eq(attr_store(be, "trigger", "1\n"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "dark\n");
	snprintf(s, sizeof(s), "%llu\n", (unsigned long long)seed);
	cr_assert_str_eq(attr_show(be, "last_seed"), s);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");
}

static void restart(struct blk_backend *be)
{
	cr_assert_eq(attr_store(be, "restart", "1"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "running\n");
}

/* ---- random data ---- */

static uint64_t xs(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

static void fill_random(uint8_t *p, size_t n, uint64_t *s)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(xs(s) >> 56);
}

/* ---- the model ---- */

struct mwrite {
	uint64_t pos, len;
	uint8_t *data;			/* the new contents (zeros for a discard) */
};

struct model {
	uint64_t size, pbs;
	uint8_t *durable;		/* as of the last completed flush */
	uint8_t *cur;			/* every write applied */
	struct mwrite *w;		/* unflushed, in order */
	size_t n, cap;
};

static void model_init(struct model *m, uint64_t size, uint64_t pbs)
{
	memset(m, 0, sizeof(*m));
	m->size = size;
	m->pbs = pbs;
	m->durable = calloc(1, size);
	m->cur = calloc(1, size);
	cr_assert(m->durable && m->cur);
}

static void model_clear_writes(struct model *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->w[i].data);
	m->n = 0;
}

static void model_free(struct model *m)
{
	model_clear_writes(m);
	free(m->w);
	free(m->durable);
	free(m->cur);
}

static void model_write(struct model *m, uint64_t pos, uint64_t len, const uint8_t *data)
{
	struct mwrite *w;

	if (m->n == m->cap) {
		m->cap = m->cap ? 2 * m->cap : 64;
		m->w = realloc(m->w, m->cap * sizeof(*m->w));
		cr_assert_not_null(m->w);
	}
	w = &m->w[m->n++];
	w->pos = pos;
	w->len = len;
	w->data = malloc(len);
	cr_assert_not_null(w->data);
	if (data)
		memcpy(w->data, data, len);
	else
		memset(w->data, 0, len);
	memcpy(m->cur + pos, w->data, len);
}

static void model_flush(struct model *m)
{
	memcpy(m->durable, m->cur, m->size);
	model_clear_writes(m);
}

/*
 * The store after a cut: each physical block must be its contents after
 * some prefix of the unflushed writes touching it. Then the post-crash
 * state becomes the model's durable one. Returns how many physical blocks
 * ended with some but not all of their unflushed writes, for the caller's
 * statistics.
 */
static unsigned int model_check_cut(struct model *m, const uint8_t *store, uint64_t seed)
{
	uint8_t *state = malloc(m->pbs);
	unsigned int partial = 0;
	uint64_t p;
	size_t i;

	cr_assert_not_null(state);
	for (p = 0; p < m->size; p += m->pbs) {
		size_t touching = 0, matched = (size_t)-1, k = 0;

		memcpy(state, m->durable + p, m->pbs);
		if (!memcmp(state, store + p, m->pbs))
			matched = 0;
		for (i = 0; i < m->n; i++) {
			const struct mwrite *w = &m->w[i];
			uint64_t a = w->pos > p ? w->pos : p;
			uint64_t b = w->pos + w->len < p + m->pbs ? w->pos + w->len : p + m->pbs;

			if (a >= b)
				continue;
			touching++;
			k++;
			memcpy(state + (a - p), w->data + (a - w->pos), b - a);
			if (!memcmp(state, store + p, m->pbs))
				matched = k;
		}
		cr_assert_neq(matched, (size_t)-1,
			      "seed %llu: physical block at %llu holds neither its flushed contents "
			      "nor those after any prefix of its %zu unflushed writes",
			      (unsigned long long)seed, (unsigned long long)p, touching);
		if (matched && matched < touching)
			partial++;
	}
	free(state);
	memcpy(m->durable, store, m->size);
	memcpy(m->cur, store, m->size);
	model_clear_writes(m);
	return partial;
}

/* Run one random op against the filter and the model. */
static void random_op(struct blk_backend *be, struct model *m, uint64_t *rs, uint32_t lbs,
		      uint32_t max_io)
{
	uint64_t r = xs(rs) % 100, nlb = m->size / lbs, pos, len;
	uint8_t *buf;

	if (r < 10) {
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
		model_flush(m);
		return;
	}
	pos = (xs(rs) % nlb) * lbs;
	if (r < 20) {
		/* a discard or write-zeroes, up to 4 * max_io */
		len = (1 + xs(rs) % (4 * max_io / lbs)) * lbs;
		if (len > m->size - pos)
			len = m->size - pos;
		cr_assert_eq(do_io(be, r < 15 ? BLK_DISCARD : BLK_WRITE_ZEROES, pos, len, NULL, NULL), 0);
		model_write(m, pos, len, NULL);
		return;
	}
	if (r < 40)
		len = lbs;			/* one logical block */
	else
		len = (1 + xs(rs) % (max_io / lbs)) * lbs;
	if (len > m->size - pos)
		len = m->size - pos;
	buf = malloc(len);
	cr_assert_not_null(buf);
	fill_random(buf, len, rs);
	cr_assert_eq(do_io(be, BLK_WRITE, pos, len, buf, NULL), 0);
	model_write(m, pos, len, buf);
	free(buf);
}

/*
 * @rounds of (random ops, cut with a seed, model check, restart) on a
 * fresh fake of the given geometry; returns the partial-block count.
 */
static unsigned int random_run(uint64_t wseed, uint64_t size, uint32_t lbs, uint32_t pbs,
			       uint32_t max_io, int rounds, int ops)
{
	struct blk_backend *be;
	struct model m;
	uint64_t rs = wseed * 0x9e3779b97f4a7c15ull + 1;
	unsigned int partial = 0;
	int round, i;

	make_fake(size, lbs, pbs, max_io);
	be = pl_open();
	model_init(&m, size, pbs);
	for (round = 0; round < rounds; round++) {
		uint64_t cut_seed = wseed * 1000 + (uint64_t)round;
		int d0 = drops();

		for (i = 0; i < ops; i++)
			random_op(be, &m, &rs, lbs, max_io);
		cr_assert_eq(stat_get(be, "powerloss_unflushed_writes"), m.n);
		trigger_seed(be, cut_seed);
		cr_assert_geq(drops() - d0, 1, "trigger did not drop what is volatile");
		partial += model_check_cut(&m, fake_store(fb), cut_seed);
		restart(be);
		cr_assert_geq(drops() - d0, 2, "restart did not drop what is volatile");
	}
	cr_assert_eq(fake_violations(fb), 0);
	be->ops->close(be);
	model_free(&m);
	return partial;
}

/* ================================================================== */

Test(powerloss, registered_as_a_filter)
{
	cr_assert(strstr(blk_filter_names(), "powerloss"), "%s", blk_filter_names());
	cr_assert_null(strstr(blk_backend_names(), "powerloss"));
}

Test(powerloss, flushed_data_survives_unflushed_writes_within_a_block_are_all_or_nothing)
{
	uint8_t a[8192], b[8192], got[8192];
	int kept = 0, dropped = 0;
	uint64_t seed;

	memset(a, 0xa1, sizeof(a));
	memset(b, 0xb2, sizeof(b));
	for (seed = 1; seed <= 40; seed++) {
		struct blk_backend *be;

		make_fake(1 * MiB, 512, 4096, 64 * KiB);
		be = pl_open();
		cr_assert_eq(do_io(be, BLK_WRITE, 0, 8192, a, NULL), 0);
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
		cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");
		/* one logical block inside a physical block: kept or dropped whole */
		cr_assert_eq(do_io(be, BLK_WRITE, 512, 1024, b, NULL), 0);
		cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "1024\n");
		trigger_seed(be, seed);
		cr_assert_eq(do_io(be, BLK_READ, 0, 8192, NULL, got), 0);
		if (!memcmp(got + 512, b, 1024)) {
			kept++;
		} else {
			cr_assert_eq(memcmp(got + 512, a, 1024), 0, "seed %llu: neither old nor new",
				     (unsigned long long)seed);
			dropped++;
		}
		/* flushed data around it is always there */
		cr_assert_eq(memcmp(got, a, 512), 0);
		cr_assert_eq(memcmp(got + 1536, a + 1536, 8192 - 1536), 0);
		be->ops->close(be);
	}
	cr_assert_gt(kept, 0);
	cr_assert_gt(dropped, 0);
}

/* Writes that do not overlap: each kept, dropped, or torn into a kept prefix. */
static void prefix_outcomes(uint32_t lbs, uint32_t pbs, uint32_t max_io, int *outcome)
{
	const uint64_t size = 32 * (uint64_t)max_io;	/* 16 writes, each in its own 2 * max_io */
	uint64_t seed, rs = 77;

	for (seed = 100; seed < 130; seed++) {
		struct blk_backend *be;
		uint8_t *data = malloc(max_io), *store;
		uint64_t pos[16], len[16];
		int i;

		cr_assert_not_null(data);
		make_fake(size, lbs, pbs, max_io);
		be = pl_open();
		/* old contents everywhere, flushed */
		memset(data, 0xaa, max_io);
		for (uint64_t p = 0; p < size; p += max_io)
			cr_assert_eq(do_io(be, BLK_WRITE, p, max_io, data, NULL), 0);
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
		/* 16 writes, each in its own max_io slot; some not pbs-aligned */
		for (i = 0; i < 16; i++) {
			uint64_t nlb = max_io / lbs;
			uint64_t off = (xs(&rs) % (nlb / 4)) * lbs;

			len[i] = (nlb / 2 + xs(&rs) % (nlb / 4)) * lbs;
			pos[i] = (uint64_t)i * 2 * max_io + off;
			fill_random(data, len[i], &rs);
			cr_assert_eq(do_io(be, BLK_WRITE, pos[i], len[i], data, NULL), 0);
		}
		trigger_seed(be, seed);
		store = fake_store(fb);
		for (i = 0; i < 16; i++) {
			uint64_t first = pos[i] / pbs * pbs, p;
			int state = 0;	/* 0: kept so far, 1: dropped from here on */
			int nkept = 0, nunits = 0;

			for (p = first; p < pos[i] + len[i]; p += pbs) {
				uint64_t a = p > pos[i] ? p : pos[i];
				uint64_t b = p + pbs < pos[i] + len[i] ? p + pbs : pos[i] + len[i];
				bool old = true;

				for (uint64_t x = a; x < b; x++)
					old &= store[x] == 0xaa;
				nunits++;
				if (!old) {
					cr_assert_eq(state, 0, "seed %llu: write %d kept a block after a dropped one",
						     (unsigned long long)seed, i);
					nkept++;
				} else {
					state = 1;
				}
				/* outside the write, the block is untouched */
				for (uint64_t x = p; x < a; x++)
					cr_assert_eq(store[x], 0xaa);
				for (uint64_t x = b; x < p + pbs; x++)
					cr_assert_eq(store[x], 0xaa);
			}
			outcome[nkept == nunits ? 0 : nkept == 0 ? 1 : 2]++;
		}
		be->ops->close(be);
		free(data);
	}
}

Test(powerloss, each_write_kept_dropped_or_torn_at_physical_blocks)
{
	int outcome[3] = { 0, 0, 0 };

	prefix_outcomes(512, 4096, 64 * KiB, outcome);
	prefix_outcomes(4096, 16384, 256 * KiB, outcome);
	prefix_outcomes(512, 512, 32 * KiB, outcome);
	cr_assert_gt(outcome[0], 50, "kept %d", outcome[0]);
	cr_assert_gt(outcome[1], 50, "dropped %d", outcome[1]);
	cr_assert_gt(outcome[2], 50, "torn %d", outcome[2]);
}

Test(powerloss, random_workloads_against_the_model)
{
	unsigned int partial = 0;
	uint64_t s;

	for (s = 1; s <= 12; s++)
		partial += random_run(s, 1 * MiB, 512, 4096, 64 * KiB, 4, 40);
	for (s = 13; s <= 18; s++)
		partial += random_run(s, 2 * MiB, 4096, 16384, 128 * KiB, 3, 40);
	for (s = 19; s <= 24; s++)
		partial += random_run(s, 512 * KiB, 512, 512, 16 * KiB, 3, 40);
	/* overlapping writes did get split between kept and dropped */
	cr_assert_gt(partial, 0);
}

Test(powerloss, same_seed_same_crash)
{
	uint8_t *first = malloc(MiB);
	int differ = 0;
	uint64_t seed;

	cr_assert_not_null(first);
	for (seed = 5; seed < 10; seed++) {
		for (int pass = 0; pass < 2; pass++) {
			struct blk_backend *be;
			struct model m;
			uint64_t rs = 4242;
			int i;

			make_fake(1 * MiB, 512, 4096, 64 * KiB);
			be = pl_open();
			model_init(&m, MiB, 4096);
			for (i = 0; i < 60; i++)
				random_op(be, &m, &rs, 512, 64 * KiB);
			trigger_seed(be, seed);
			if (!pass) {
				if (seed > 5)
					differ += memcmp(first, fake_store(fb), MiB) != 0;
				memcpy(first, fake_store(fb), MiB);
			} else {
				cr_assert_eq(memcmp(first, fake_store(fb), MiB), 0,
					     "seed %llu gave two different crashes", (unsigned long long)seed);
			}
			be->ops->close(be);
			model_free(&m);
		}
	}
	cr_assert_gt(differ, 0, "every seed gave the same crash");
	free(first);
}

Test(powerloss, dark_until_restart)
{
	struct blk_backend *be = pl_open();
	uint8_t a[4096], b[4096], got[4096];
	size_t nops;

	memset(a, 0x11, sizeof(a));
	memset(b, 0x22, sizeof(b));
	cr_assert_str_eq(attr_show(be, "state"), "running\n");
	cr_assert_str_eq(attr_show(be, "last_seed"), "none\n");
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, a, NULL), 0);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	trigger_seed(be, 1);
	cr_assert_eq(drops(), 2, "a cut drops what is volatile at its start and its end");

	/* writes, discards and flushes are acknowledged and go nowhere */
	nops = fake_total_count(fb, FAKE_ANY);
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, b, NULL), 0);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 0, 4096, NULL, NULL), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 4096, NULL, NULL), 0);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), nops);
	cr_assert_eq(stat_get(be, "powerloss_dark_writes"), 3);
	/* reads see the post-crash state */
	cr_assert_eq(do_io(be, BLK_READ, 0, 4096, NULL, got), 0);
	cr_assert_eq(memcmp(got, a, 4096), 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");

	/* one cut at a time */
	cr_assert_eq(attr_store(be, "trigger", "1"), -EALREADY);
	cr_assert_eq(drops(), 2);

	restart(be);
	cr_assert_eq(drops(), 3);
	cr_assert_eq(attr_store(be, "restart", "1"), -EALREADY);
	/* working again: writes land and are tracked */
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, b, NULL), 0);
	cr_assert_eq(memcmp(fake_store(fb), b, 4096), 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "4096\n");
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");
	/* a second cut: the flushed write survives */
	trigger_seed(be, 2);
	cr_assert_eq(memcmp(fake_store(fb), b, 4096), 0);
	cr_assert_eq(stat_get(be, "powerloss_cuts"), 2);
	be->ops->close(be);
}

Test(powerloss, without_a_host)
{
	struct blk_backend *be;
	struct tparams tp;
	uint8_t a[4096];

	tparams_init(&tp);
	tp.p.host = NULL;
	be = filter_open(&tp);
	memset(a, 1, sizeof(a));
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, a, NULL), 0);
	trigger_seed(be, 3);
	restart(be);
	cr_assert_eq(drops(), 0);
	be->ops->close(be);
}

/* A FLUSH that had not completed when the power went did not make anything durable. */
Test(powerloss, flush_in_flight_at_the_cut_fails)
{
	struct blk_backend *be = pl_open();
	uint8_t a[4096];
	struct tio fl;

	memset(a, 0x33, sizeof(a));
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, a, NULL), 0);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&fl, BLK_FLUSH, 0, 0, NULL, 0xee);
	cr_assert_eq(blk_submit(be, &fl.io), 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	fake_set_mode(fb, FAKE_INLINE);
	trigger_seed(be, 9);
	cr_assert_eq(fl.calls, 0);
	cr_assert_eq(fake_complete_all(fb, false), 1);
	cr_assert(tio_wait(&fl, WAIT_MS));
	cr_assert_eq(fl.res, -EIO);
	cr_assert_eq(stat_get(be, "powerloss_kept_writes") + stat_get(be, "powerloss_dropped_writes"), 1);
	be->ops->close(be);
}

/* ---- writes in flight: submitted from threads (the old-data read waits) ---- */

struct submitter {
	struct blk_backend *be;
	struct tio *t;
	int ret;
};

static void *submit_main(void *p)
{
	struct submitter *s = p;

	s->ret = blk_submit(s->be, &s->t->io);
	return NULL;
}

static void *trigger_main(void *p)
{
	struct submitter *s = p;

	s->ret = attr_find(s->be, "trigger")->store(s->be, "1", 1);
	return NULL;
}

/* Wait until the filter's state reads @want; fails with the last state seen. */
static void wait_state(struct blk_backend *be, const char *want)
{
	uint64_t end = blk_now_ns() + WAIT_MS * 1000000ull;
	char last[64];

	for (;;) {
		snprintf(last, sizeof(last), "%s", attr_show(be, "state"));
		if (!strcmp(last, want))
			return;
		cr_assert(blk_now_ns() < end, "state stayed '%.*s' for %u ms, not '%.*s'",
			  (int)strcspn(last, "\n"), last, WAIT_MS, (int)strcspn(want, "\n"), want);
		usleep(1000);
	}
}

Test(powerloss, write_in_flight_at_the_cut_is_waited_for_and_decided)
{
	uint8_t a[8192];
	int seen[2] = { 0, 0 };
	uint64_t seed;

	memset(a, 0x55, sizeof(a));
	for (seed = 1; seed <= 12; seed++) {
		struct submitter ws, ts;
		struct blk_backend *be;
		pthread_t wt, tt;
		struct tio w;
		bool kept;

		make_fake(1 * MiB, 512, 4096, 64 * KiB);
		be = pl_open();
		fake_set_mode(fb, FAKE_MANUAL);
		tio_init(&w, BLK_WRITE, 4096, 4096, a, 0xee);
		ws = (struct submitter){ .be = be, .t = &w };
		cr_assert_eq(pthread_create(&wt, NULL, submit_main, &ws), 0);
		/* the filter reads the old contents first */
		cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
		cr_assert(fake_complete_one(fb, 0));
		/* then the write goes down and stays there */
		cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
		pthread_join(wt, NULL);
		cr_assert_eq(ws.ret, 0);
		fake_set_mode(fb, FAKE_INLINE);

		cr_assert_eq(attr_store(be, "seed", seed % 2 ? "1" : "2"), 0);
		ts = (struct submitter){ .be = be };
		cr_assert_eq(pthread_create(&tt, NULL, trigger_main, &ts), 0);
		/* the cut waits for the write; already dark meanwhile (once the thread ran) */
		wait_state(be, "dark\n");
		cr_assert_eq(w.calls, 0);
		cr_assert_eq(fake_complete_all(fb, false), 1);
		pthread_join(tt, NULL);
		cr_assert_eq(ts.ret, 0);
		cr_assert(tio_wait(&w, WAIT_MS));
		cr_assert_eq(w.res, 0);
		kept = fake_store(fb)[4096] == 0x55;
		cr_assert(kept || fake_store(fb)[4096] == 0);
		seen[kept]++;
		cr_assert_eq(stat_get(be, "powerloss_kept_writes") + stat_get(be, "powerloss_dropped_writes"), 1);
		be->ops->close(be);
		free(w.iov.iov_base);
	}
	cr_assert_gt(seen[0], 0);
	cr_assert_gt(seen[1], 0);
}

/* A flush covers the writes completed before it, not one still in flight. */
Test(powerloss, flush_does_not_cover_a_write_in_flight)
{
	struct blk_backend *be = pl_open();
	struct submitter ws;
	uint8_t a[4096];
	pthread_t wt;
	struct tio w, fl;

	memset(a, 0x44, sizeof(a));
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&w, BLK_WRITE, 8192, 4096, a, 0xee);
	ws = (struct submitter){ .be = be, .t = &w };
	cr_assert_eq(pthread_create(&wt, NULL, submit_main, &ws), 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert(fake_complete_one(fb, 0));		/* the old-data read */
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));	/* the write, in flight */
	pthread_join(wt, NULL);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	cr_assert_eq(fake_complete_all(fb, false), 1);
	cr_assert(tio_wait(&w, WAIT_MS));
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "4096\n");
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");
	free(w.iov.iov_base);

	/* Nor one that completes while the flush is in flight. */
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&fl, BLK_FLUSH, 0, 0, NULL, 0xee);
	cr_assert_eq(blk_submit(be, &fl.io), 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	tio_init(&w, BLK_WRITE, 8192, 4096, a, 0xee);
	ws = (struct submitter){ .be = be, .t = &w };
	cr_assert_eq(pthread_create(&wt, NULL, submit_main, &ws), 0);
	cr_assert(fake_wait_pending(fb, 2, WAIT_MS));
	cr_assert(fake_complete_one(fb, 1));		/* the old-data read */
	cr_assert(fake_wait_pending(fb, 2, WAIT_MS));
	pthread_join(wt, NULL);
	cr_assert(fake_complete_one(fb, 1));		/* the write */
	cr_assert(tio_wait(&w, WAIT_MS));
	cr_assert(fake_complete_one(fb, 0));		/* then the flush */
	cr_assert(tio_wait(&fl, WAIT_MS));
	cr_assert_eq(fl.res, 0);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "4096\n");
	free(w.iov.iov_base);
	be->ops->close(be);
}

/* A write overlapping one in flight waits: its saved data must be what that one left. */
Test(powerloss, overlapping_writes_are_serialized)
{
	struct blk_backend *be = pl_open();
	uint8_t a[8192], b[4096];
	struct submitter s1, s2;
	pthread_t t1, t2;
	struct tio w1, w2;

	memset(a, 0x61, sizeof(a));
	memset(b, 0x62, sizeof(b));
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&w1, BLK_WRITE, 0, 8192, a, 0xee);
	s1 = (struct submitter){ .be = be, .t = &w1 };
	cr_assert_eq(pthread_create(&t1, NULL, submit_main, &s1), 0);
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert(fake_complete_one(fb, 0));		/* w1's old-data read */
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));	/* w1 itself */
	pthread_join(t1, NULL);

	tio_init(&w2, BLK_WRITE, 4096, 4096, b, 0xee);
	s2 = (struct submitter){ .be = be, .t = &w2 };
	cr_assert_eq(pthread_create(&t2, NULL, submit_main, &s2), 0);
	usleep(30000);
	/* w2 has not even read: it waits for w1 */
	cr_assert_eq(fake_pending(fb), 1);
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_READ)), 1);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert(fake_complete_one(fb, 0));		/* w1 done: w2 goes on, inline */
	pthread_join(t2, NULL);
	cr_assert(tio_wait(&w1, WAIT_MS));
	cr_assert(tio_wait(&w2, WAIT_MS));
	cr_assert_eq(w1.res, 0);
	cr_assert_eq(w2.res, 0);
	cr_assert_eq(fake_overlaps(fb), 0);
	cr_assert_eq(fake_store(fb)[4096], 0x62);
	cr_assert_eq(fake_store(fb)[0], 0x61);
	free(w1.iov.iov_base);
	free(w2.iov.iov_base);
	be->ops->close(be);
}

/* A write whose old contents cannot be read is refused, not journaled, not passed down. */
Test(powerloss, unreadable_old_contents_fail_the_write)
{
	struct blk_backend *be = pl_open();
	struct fake_fault ff = { .op_mask = FAKE_OP(BLK_READ), .countdown = 1, .err = -EIO };
	uint8_t a[4096];

	memset(a, 0x71, sizeof(a));
	fake_fault_set(fb, &ff);
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, a, NULL), -EIO);
	cr_assert_eq(fake_total_count(fb, FAKE_OP(BLK_WRITE)), 0);
	cr_assert_eq(fake_store(fb)[0], 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "0\n");
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 4096, a, NULL), 0);
	cr_assert_str_eq(attr_show(be, "unflushed_bytes"), "4096\n");
	be->ops->close(be);
}

/* Zeros cost no memory: a discard of an empty device, a write onto one. */
Test(powerloss, zeros_are_not_saved)
{
	struct blk_backend *be;
	uint8_t *a = malloc(64 * KiB);

	cr_assert_not_null(a);
	make_fake(16 * MiB, 512, 4096, 64 * KiB);
	be = pl_open();
	memset(a, 0x81, 64 * KiB);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 16 * MiB, NULL, NULL), 0);
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 64 * KiB, a, NULL), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 0);
	cr_assert_eq(stat_get(be, "powerloss_unflushed_bytes"), 16 * MiB + 64 * KiB);
	/* over data: saved */
	cr_assert_eq(do_io(be, BLK_WRITE, 0, 64 * KiB, a, NULL), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 64 * KiB);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 0, 8 * MiB, NULL, NULL), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 128 * KiB);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
	cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), 0);
	cr_assert_eq(stat_get(be, "powerloss_unflushed_writes"), 0);
	be->ops->close(be);
	free(a);
}

Test(powerloss, attrs_and_keys)
{
	struct blk_backend *be;
	struct tparams tp;

	tparams_init(&tp);
	tp.v[0] = (struct blk_param){ .key = "powerloss.seed", .value = "1234", .line = 5 };
	tp.p.n = 1;
	be = filter_open(&tp);
	cr_assert(tp.v[0].used);
	cr_assert_str_eq(attr_show(be, "seed"), "1234\n");
	cr_assert_eq(attr_store(be, "seed", "auto\n"), 0);
	cr_assert_str_eq(attr_show(be, "seed"), "auto\n");
	cr_assert_eq(attr_store(be, "seed", "18446744073709551615"), 0);
	cr_assert_str_eq(attr_show(be, "seed"), "18446744073709551615\n");
	attr_refuses(be, "seed", "");
	attr_refuses(be, "seed", "-1");
	attr_refuses(be, "seed", "12a");
	attr_refuses(be, "seed", "18446744073709551616");
	attr_refuses(be, "seed", "1 2");
	attr_refuses(be, "seed", "autox");
	cr_assert_eq(attr_find(be, "seed")->store(be, "7\0", 2), -EINVAL);

	attr_refuses(be, "trigger", "2");
	attr_refuses(be, "trigger", "yes");
	attr_refuses(be, "trigger", "");
	attr_refuses(be, "trigger", "11");
	attr_refuses(be, "restart", "0");
	cr_assert_str_eq(attr_show(be, "state"), "running\n");
	cr_assert_null(attr_find(be, "state")->store);
	cr_assert_null(attr_find(be, "last_seed")->store);
	cr_assert_null(attr_find(be, "unflushed_bytes")->store);
	cr_assert_eq(drops(), 0);
	/* auto: a seed from the clock, readable afterwards */
	cr_assert_eq(attr_store(be, "seed", "auto"), 0);
	cr_assert_eq(attr_store(be, "trigger", "1"), 0);
	cr_assert_str_neq(attr_show(be, "last_seed"), "none\n");
	be->ops->close(be);

	tparams_init(&tp);
	tp.v[0] = (struct blk_param){ .key = "powerloss.seed", .value = "soon", .line = 6 };
	tp.p.n = 1;
	be = blk_backend_find("powerloss")->open(&tp.p, fake_backend(fb));
	cr_assert(IS_ERR(be));
	cr_assert(strstr(tp.err, "/etc/blkfs.conf:6: powerloss.seed: 'soon' is not a seed"), "%s", tp.err);
	tparams_init(&tp);
	be = blk_backend_find("powerloss")->open(&tp.p, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(tp.err, "needs a layer below"), "%s", tp.err);
}

/* Through the config and core/stack.c, on ram, which takes WRITE_ZEROES for real. */
Test(powerloss, in_a_stack_over_ram)
{
	static const char text[] =
		"[device r0]\nbackend = ram\nsize = 4M\nphysical_block_size = 4096\n"
		"filters = powerloss\npowerloss.seed = 11\n";
	struct blk_backend *top;
	struct model m;
	struct conf conf;
	uint8_t *store = malloc(4 * MiB);
	char cerr[512];
	uint64_t rs = 99, p;
	int i;

	cr_assert_not_null(store);
	cr_assert_eq(conf_parse_buf(text, strlen(text), "t.conf", &conf, cerr, sizeof(cerr)), 0,
		     "%s", cerr);
	top = stack_open(&conf, &conf.devs[0], &host, cerr, sizeof(cerr));
	cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
	cr_assert_str_eq(top->ops->name, "powerloss");
	model_init(&m, 4 * MiB, 4096);
	for (i = 0; i < 200; i++)
		random_op(top, &m, &rs, 512, 256 * KiB);
	cr_assert_eq(attr_store(top, "trigger", "1"), 0);
	cr_assert_str_eq(attr_show(top, "last_seed"), "11\n");
	for (p = 0; p < 4 * MiB; p += 1 * MiB)
		cr_assert_eq(do_io(top, BLK_READ, p, MiB, NULL, store + p), 0);
	model_check_cut(&m, store, 11);
	restart(top);
	stack_close(top);
	conf_free(&conf);
	model_free(&m);
	free(store);
}

/*
 * A reset to a snapshot ends the journal: what it saved belongs to a device
 * state that is gone, and a later cut must not put it back. The snapshot is
 * taken after an unflushed write X; a write B follows; the reset returns
 * the device to X. A journal kept over the reset would, at the cut, undo X
 * (restoring A) for about half the seeds: every seed must leave X.
 */
Test(powerloss, reset_to_snapshot_drops_journal)
{
	unsigned char a[4096], x[4096], b[4096], got[8192];
	uint64_t seed;

	memset(a, 0x41, sizeof(a));
	memset(x, 0x58, sizeof(x));
	memset(b, 0x42, sizeof(b));
	for (seed = 1; seed <= 16; seed++) {
		static const char text[] =
			"[device r0]\nbackend = ram\nsize = 4M\nphysical_block_size = 4096\n"
			"filters = powerloss\n";
		struct blk_backend *top;
		struct conf conf;
		char cerr[512], s[32];

		cr_assert_eq(conf_parse_buf(text, strlen(text), "t.conf", &conf, cerr, sizeof(cerr)),
			     0, "%s", cerr);
		top = stack_open(&conf, &conf.devs[0], &host, cerr, sizeof(cerr));
		cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
		snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
		cr_assert_eq(attr_store(top, "seed", s), 0);

		cr_assert_eq(do_io(top, BLK_WRITE, 0, 4096, a, NULL), 0);
		cr_assert_eq(do_io(top, BLK_FLUSH, 0, 0, NULL, NULL), 0);
		cr_assert_eq(do_io(top, BLK_WRITE, 0, 4096, x, NULL), 0);
		cr_assert_eq(blk_snap_create(top, "s"), 0);
		cr_assert_eq(do_io(top, BLK_WRITE, 0, 4096, b, NULL), 0);
		cr_assert_eq(do_io(top, BLK_WRITE, 64 * KiB, 4096, b, NULL), 0);
		cr_assert_str_eq(attr_show(top, "unflushed_bytes"), "12288\n");

		cr_assert_eq(blk_snap_reset(top, "s"), 0);
		cr_assert_str_eq(attr_show(top, "unflushed_bytes"), "0\n");
		cr_assert_eq(stat_get(top, "powerloss_resets"), 1);
		cr_assert_eq(do_io(top, BLK_READ, 0, 4096, NULL, got), 0);
		cr_assert_arr_eq(got, x, 4096);

		cr_assert_eq(attr_store(top, "trigger", "1"), 0);
		cr_assert_eq(do_io(top, BLK_READ, 0, 4096, NULL, got), 0);
		cr_assert_arr_eq(got, x, 4096, "seed %llu: the cut undid a write from before the reset",
				 (unsigned long long)seed);
		cr_assert_eq(do_io(top, BLK_READ, 64 * KiB, 4096, NULL, got), 0);
		cr_assert(all_zero(got, 4096), "seed %llu", (unsigned long long)seed);
		/* Dark stays dark over a reset; the snapshot calls still work. */
		cr_assert_eq(blk_snap_reset(top, "s"), 0);
		cr_assert_str_eq(attr_show(top, "state"), "dark\n");
		restart(top);
		cr_assert_eq(blk_snap_destroy(top, "s"), 0);
		stack_close(top);
		conf_free(&conf);
	}
}

/* ---- against the shared model (backends/lib/crashmodel.h) ---- */

/* The cut's result must be a state of the model's set for the log @log. */
static void cut_in_model(const struct blk_cm_log *log, const uint8_t *base, uint64_t seed)
{
	struct blk_cm_point pt;
	uint32_t *choice;

	cr_assert_eq(blk_cm_point_init(&pt, log, log->nr), 0);
	choice = calloc(pt.nr_blocks + 1, sizeof(*choice));
	cr_assert_not_null(choice);
	cr_assert_eq(blk_cm_state_of(&pt, base, fake_store(fb), fake_geometry(fb)->size, choice), 0,
		     "seed %llu: the cut left a state the disk's promise does not allow "
		     "(%zu unflushed blocks, %llu states)", (unsigned long long)seed,
		     pt.nr_blocks, (unsigned long long)pt.nr_states);
	free(choice);
	blk_cm_point_destroy(&pt);
}

/*
 * Two writes to one physical block, in different logical blocks, so they
 * may be in flight together: the later-submitted completes first. A block
 * then holds none, the first completed, or both; never only the write
 * that completed last.
 */
Test(powerloss, cuts_follow_completion_order_within_a_physical_block)
{
	uint8_t a[512], c[512], base[64 * 1024];
	uint64_t seed;
	unsigned int outcomes = 0;

	memset(a, 0x41, sizeof(a));
	memset(c, 0x43, sizeof(c));
	memset(base, 0, sizeof(base));
	for (seed = 1; seed <= 40; seed++) {
		struct submitter s1, s2;
		struct blk_backend *be;
		struct blk_cm_log log;
		pthread_t t1, t2;
		struct tio w1, w2;
		char s[32];

		make_fake(sizeof(base), 512, 4096, 64 * KiB);
		be = pl_open();
		fake_set_mode(fb, FAKE_MANUAL);
		tio_init(&w1, BLK_WRITE, 4096, 512, a, 0xee);
		s1 = (struct submitter){ .be = be, .t = &w1 };
		cr_assert_eq(pthread_create(&t1, NULL, submit_main, &s1), 0);
		cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
		cr_assert(fake_complete_one(fb, 0));		/* w1's old-data read */
		cr_assert(fake_wait_pending(fb, 1, WAIT_MS));	/* w1, in flight */
		pthread_join(t1, NULL);
		tio_init(&w2, BLK_WRITE, 4096 + 1024, 512, c, 0xee);
		s2 = (struct submitter){ .be = be, .t = &w2 };
		cr_assert_eq(pthread_create(&t2, NULL, submit_main, &s2), 0);
		cr_assert(fake_wait_pending(fb, 2, WAIT_MS));
		cr_assert(fake_complete_one(fb, 1));		/* w2's old-data read */
		cr_assert(fake_wait_pending(fb, 2, WAIT_MS));	/* w2, in flight */
		pthread_join(t2, NULL);
		cr_assert(fake_complete_one(fb, 1));		/* w2 completes first */
		cr_assert(tio_wait(&w2, WAIT_MS));
		cr_assert(fake_complete_one(fb, 0));		/* then w1 */
		cr_assert(tio_wait(&w1, WAIT_MS));
		fake_set_mode(fb, FAKE_INLINE);

		blk_cm_init(&log, 4096);
		cr_assert_eq(blk_cm_write(&log, 4096 + 1024, 512, c, 0), 0);
		cr_assert_eq(blk_cm_write(&log, 4096, 512, a, 0), 0);
		snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
		cr_assert_eq(attr_store(be, "seed", s), 0);
		cr_assert_eq(attr_store(be, "trigger", "1"), 0);
		cut_in_model(&log, base, seed);
		outcomes |= 1u << ((fake_store(fb)[4096] == 0x41) * 2 + (fake_store(fb)[5120] == 0x43));
		blk_cm_destroy(&log);
		be->ops->close(be);
		free(w1.iov.iov_base);
		free(w2.iov.iov_base);
	}
	/* none (0), w2 only (1), both (3): each came up */
	cr_assert_eq(outcomes, 0xbu, "outcomes seen: %#x", outcomes);
}

/*
 * Random concurrent workloads (the fake completes late and out of order):
 * writes, discards and flushes recorded in the fake's completion order,
 * then a cut; over many seeds, each cut lands inside the model's set.
 */
Test(powerloss, random_concurrent_cuts_land_inside_the_model)
{
	const uint64_t size = 16 * KiB;
	uint64_t seed;

	for (seed = 1; seed <= 60; seed++) {
		uint64_t rs = seed * 0x9e3779b97f4a7c15ull + 7;
		struct blk_backend *be;
		struct blk_cm_log log;
		struct tio t[8];
		uint8_t *data[64], *base;
		size_t nr_data = 0, i;
		char seed_s[32];
		int round;

		make_fake(size, 512, 4096, 16 * KiB);
		fake_set_seed(fb, (unsigned int)seed);
		fake_set_delay(fb, 1000);
		be = pl_open();
		base = calloc(1, size);
		cr_assert_not_null(base);
		blk_cm_init(&log, 4096);
		for (round = 0; round < 6; round++) {
			size_t n = 1 + xs(&rs) % 8, first = fake_log_len(fb), k;
			struct { uint64_t done; size_t w; } ord[8];
			size_t nord = 0;

			fake_set_mode(fb, FAKE_DEFERRED);
			tio_done_reset();
			for (i = 0; i < n; i++) {
				uint64_t pos = (xs(&rs) % (size / 512)) * 512;
				uint64_t len = (1 + xs(&rs) % (xs(&rs) % 4 ? 2 : 16)) * 512;
				bool zero = xs(&rs) % 6 == 0;

				if (len > size - pos)
					len = size - pos;
				data[nr_data] = malloc(len);
				cr_assert_not_null(data[nr_data]);
				if (zero)
					memset(data[nr_data], 0, len);
				else
					fill_random(data[nr_data], len, &rs);
				tio_init(&t[i], zero ? BLK_WRITE_ZEROES : BLK_WRITE, pos, len,
					 data[nr_data], 0xee);
				nr_data++;
				cr_assert_eq(tio_submit(be, &t[i]), 0);
			}
			cr_assert(tio_done_wait(n, WAIT_MS));
			/* the k-th write the fake got is the k-th submitted: order them by completion */
			for (k = first, i = 0; k < fake_log_len(fb); k++) {
				struct fake_op op;

				cr_assert(fake_log_get(fb, k, &op));
				if (op.op == BLK_READ)
					continue;
				cr_assert(op.done && !op.result);
				ord[nord].done = op.done_seq;
				ord[nord++].w = i++;
			}
			cr_assert_eq(nord, n);
			for (i = 1; i < nord; i++)	/* insertion sort by done_seq */
				for (k = i; k > 0 && ord[k - 1].done > ord[k].done; k--) {
					__typeof__(ord[0]) tmp = ord[k];

					ord[k] = ord[k - 1];
					ord[k - 1] = tmp;
				}
			for (i = 0; i < nord; i++) {
				struct tio *w = &t[ord[i].w];

				cr_assert_eq(blk_cm_write(&log, w->io.pos, w->io.len,
							  data[nr_data - n + ord[i].w], 0), 0);
			}
			for (i = 0; i < n; i++)
				tio_free(&t[i]);
			fake_set_mode(fb, FAKE_INLINE);
			if (round < 5 && xs(&rs) % 2) {
				cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
				cr_assert_eq(blk_cm_flush(&log, log.nr_writes), 0);
			}
		}
		snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)seed);
		cr_assert_eq(attr_store(be, "seed", seed_s), 0);
		cr_assert_eq(attr_store(be, "trigger", "1"), 0);
		cut_in_model(&log, base, seed);
		blk_cm_destroy(&log);
		be->ops->close(be);
		for (i = 0; i < nr_data; i++)
			free(data[i]);
		free(base);
	}
}

/*
 * A write over 1 MiB (max_io 4 MiB) saves more pieces than an entry's
 * inline runs: their array is allocated before pd->lock, never under it
 * (powerloss_locked_allocs counts one that is), and the cut restores all
 * of them. 2 MiB - 512 bytes: 511 pages in 9 classes and a tail, 10 runs
 * of data.
 */
Test(powerloss, writes_over_1mib_allocate_nothing_under_the_lock)
{
	const uint64_t len = 2 * MiB - 512;
	uint8_t *a = malloc(len), *b = malloc(len), *got = malloc(len);
	int dropped = 0, kept = 0;
	uint64_t seed, i;

	cr_assert(a && b && got);
	for (i = 0; i < len; i++) {
		a[i] = (uint8_t)(i * 7 + 1) | 1;	/* no zero piece: every piece a run */
		b[i] = (uint8_t)~a[i];
	}
	for (seed = 1; seed <= 12; seed++) {
		struct blk_backend *be;

		make_fake(8 * MiB, 512, 4096, 4 * MiB);
		be = pl_open();
		cr_assert_eq(do_io(be, BLK_WRITE, 0, len, a, NULL), 0);
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, NULL), 0);
		cr_assert_eq(do_io(be, BLK_WRITE, 0, len, b, NULL), 0);
		cr_assert_eq(stat_get(be, "powerloss_saved_bytes"), len);
		cr_assert_eq(stat_get(be, "powerloss_locked_allocs"), 0,
			     "the runs of a write over 1 MiB were allocated under pd->lock");
		trigger_seed(be, seed);
		cr_assert_eq(do_io(be, BLK_READ, 0, len, NULL, got), 0);
		if (stat_get(be, "powerloss_dropped_writes")) {
			cr_assert_eq(memcmp(got, a, len), 0, "seed %llu: dropped, not restored",
				     (unsigned long long)seed);
			dropped++;
		} else if (stat_get(be, "powerloss_kept_writes")) {
			cr_assert_eq(memcmp(got, b, len), 0);
			kept++;
		} else {
			/* torn: a prefix of whole physical blocks new, the rest old */
			for (i = 0; i < len && got[i] == b[i]; i++)
				;
			cr_assert(i > 0 && i % 4096 == 0, "seed %llu: torn at %llu",
				  (unsigned long long)seed, (unsigned long long)i);
			cr_assert_eq(memcmp(got + i, a + i, len - i), 0);
		}
		be->ops->close(be);
	}
	cr_assert_gt(dropped, 0);
	cr_assert_gt(kept, 0);
	free(a);
	free(b);
	free(got);
}
