// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_crashexplore.c - the crash explorer's engine
 * (backends/lib/crashexplore.h) without a mount: over dm-log-writes logs
 * built here and a base of zeros, the states it lists at each crash point
 * (how many, the in-order one first, no state twice, a sample that is a
 * repeatable subsequence of the full list), and a run in scratch files
 * whose checker sees each state byte for byte as --materialize writes it.
 *
 * The small log (sector size 512, physical blocks of 4096):
 *   0  W [0, 4096)        'A'   block 0
 *   1  W [4096, 8192)     'B'   block 1
 *   2  W [8192, 8704)     'C'   block 2
 *   3  MARK "three"             crash point: 3 blocks, one write each: 8 states
 *   4  FLUSH                    crash point: nothing unflushed: 1 state
 *   5  W [4096, 4608)     'D'   block 1
 *   6  W [4608, 5120)     'E'   block 1
 *   7  W [12288, 16384)   'F'   block 3
 *   8  MARK "six"               crash point: block 1 keeps 0, 1 or 2, block 3 0 or 1: 6
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/lib/crashexplore.h"
#include "../../backends/lib/logwrites.h"

#define SS 512u

static unsigned char buf[1 << 20];
static size_t len;
static uint64_t nr;
static char dir[64];		/* this test's folder: the log, scratch, kept outputs */
static char log_path[128];

static void start(void)
{
	len = SS;
	nr = 0;
}

static void add(uint64_t sector, uint64_t nsec, uint64_t flags, const char *text, int fill)
{
	struct lw_entry e = { .sector = sector, .nr_sectors = nsec, .flags = flags,
			      .data_len = text ? strlen(text) : 0 };

	cr_assert_leq(len + SS + nsec * SS, sizeof(buf));
	lw_encode_entry(buf + len, SS, &e, text);
	len += SS;
	if (!(flags & (LW_DISCARD | LW_MARK | LW_FLUSH))) {
		memset(buf + len, fill, nsec * SS);
		len += nsec * SS;
	}
	nr++;
}

/* The log into dir/log. */
static void finish(void)
{
	FILE *f;

	lw_encode_super(buf, SS, nr);
	snprintf(log_path, sizeof(log_path), "%s/log", dir);
	f = fopen(log_path, "w");
	cr_assert(f);
	cr_assert_eq(fwrite(buf, 1, len, f), len);
	cr_assert_eq(fclose(f), 0);
}

static void small_log(void)
{
	start();
	add(0, 8, 0, NULL, 'A');
	add(8, 8, 0, NULL, 'B');
	add(16, 1, 0, NULL, 'C');
	add(0, 0, LW_MARK, "three", 0);
	add(0, 0, LW_FLUSH, NULL, 0);
	add(8, 1, 0, NULL, 'D');
	add(9, 1, 0, NULL, 'E');
	add(24, 8, 0, NULL, 'F');
	add(0, 0, LW_MARK, "six", 0);
	finish();
}

/* @nblk blocks written once each, unflushed, then a mark: 2^nblk states at one point. */
static void wide_log(unsigned int nblk)
{
	unsigned int b;

	start();
	for (b = 0; b < nblk; b++)
		add((uint64_t)b * 8, 1, 0, NULL, 'a' + (int)(b % 26));
	add(0, 0, LW_MARK, "wide", 0);
	finish();
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/blkfs-test-cx.XXXXXX");
	cr_assert(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(crashexplore, .init = setup, .fini = teardown);

/* A loaded engine over dir/log with a base of zeros, as `--base zeros`. */
static void load(struct cc *cc)
{
	cc_init(cc);
	cc->log_path = log_path;
	cc->base = "zeros";
	cc->scratch = dir;
	cr_assert_eq(cc_load(cc), 0);
}

/* Every planned state's id, allocated; the in-order state first at each point, no id twice. */
static char **plan_ids(const struct cc *cc)
{
	char **ids = calloc(cc->nr_tasks + 1, sizeof(*ids));
	size_t p, i, j;

	cr_assert(ids);
	for (i = 0; i < cc->nr_tasks; i++) {
		ids[i] = cc_task_id(cc, &cc->tasks[i]);
		cr_assert(ids[i]);
	}
	for (p = 0; p < cc->nr_pts; p++) {
		const struct cc_point *cp = &cc->pts[p];
		char want[32];

		cr_assert_gt(cp->listed, 0);
		snprintf(want, sizeof(want), "%zu", cp->ev);
		cr_assert_eq(cc->tasks[cp->first_task].nr_roll, 0, "point %zu: in-order first", cp->ev);
		cr_assert_str_eq(ids[cp->first_task], want);
		for (i = cp->first_task; i < cp->first_task + cp->listed; i++) {
			cr_assert_eq(cc->tasks[i].point, p);
			for (j = cp->first_task; j < i; j++)
				cr_assert_str_neq(ids[i], ids[j], "point %zu lists %s twice", cp->ev,
						  ids[i]);
		}
	}
	return ids;
}

static void free_ids(char **ids, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(ids[i]);
	free(ids);
}

static void expect_point(const struct cc *cc, size_t p, size_t ev, uint64_t full, uint64_t dflt,
			 uint64_t listed, bool sampled)
{
	const struct cc_point *cp = &cc->pts[p];

	cr_assert_eq(cp->ev, ev, "point %zu: after event %zu, not %zu", p, cp->ev, ev);
	cr_assert_eq(cp->full, full, "event %zu: full set %lu", ev, (unsigned long)cp->full);
	cr_assert_eq(cp->dflt, dflt, "event %zu: default set %lu", ev, (unsigned long)cp->dflt);
	cr_assert_eq(cp->listed, listed, "event %zu: listed %lu", ev, (unsigned long)cp->listed);
	cr_assert_eq(cp->sampled, sampled, "event %zu", ev);
}

Test(crashexplore, every_combination_within_n)
{
	struct cc cc;
	char **ids;

	small_log();
	load(&cc);
	cr_assert_eq(cc_plan(&cc), 0);
	cr_assert_eq(cc.nr_pts, 3);
	expect_point(&cc, 0, 3, 8, 8, 8, false);
	expect_point(&cc, 1, 4, 1, 1, 1, false);
	expect_point(&cc, 2, 8, 6, 6, 6, false);
	cr_assert_eq(cc.nr_tasks, 15);
	ids = plan_ids(&cc);
	/* block 1 rolled back to before D, or to D alone; block 3 without F */
	cr_assert_str_eq(ids[9], "8");
	free_ids(ids, cc.nr_tasks);
	cc_destroy(&cc);
}

Test(crashexplore, k_blocks_rolled_back_beyond_n)
{
	struct cc cc;
	char **ids;
	size_t i;

	small_log();
	load(&cc);
	cc.n = 1;	/* more blocks than that: the in-order state and one block rolled back */
	cc.k = 1;
	cr_assert_eq(cc_plan(&cc), 0);
	expect_point(&cc, 0, 3, 8, 4, 4, false);
	expect_point(&cc, 1, 4, 1, 1, 1, false);
	expect_point(&cc, 2, 8, 6, 4, 4, false);
	ids = plan_ids(&cc);
	for (i = 0; i < cc.nr_tasks; i++)
		cr_assert_leq(cc.tasks[i].nr_roll, 1, "%s", ids[i]);
	cr_assert_str_eq(ids[1], "3:0=0");
	cr_assert_str_eq(ids[5], "8");
	cr_assert_str_eq(ids[6], "8:1=0");
	cr_assert_str_eq(ids[7], "8:1=1");
	cr_assert_str_eq(ids[8], "8:3=0");
	free_ids(ids, cc.nr_tasks);
	cc_destroy(&cc);
}

/* Index of @id in @all[0, n), or n. */
static size_t find_id(char **all, size_t n, const char *id)
{
	size_t i;

	for (i = 0; i < n && strcmp(all[i], id); i++)
		;
	return i;
}

Test(crashexplore, sample_is_a_repeatable_subsequence)
{
	struct cc full, a, b;
	char **fid, **aid, **bid;
	size_t i, at = 0;

	wide_log(12);
	load(&full);
	full.n = 12;	/* every combination: 2^12 */
	cr_assert_eq(cc_plan(&full), 0);
	expect_point(&full, 0, 12, 4096, 4096, 4096, false);
	fid = plan_ids(&full);

	load(&a);
	a.n = 12;
	a.max_states = 100;
	a.seed = 7;
	cr_assert_eq(cc_plan(&a), 0);
	expect_point(&a, 0, 12, 4096, 4096, 100, true);
	aid = plan_ids(&a);	/* in-order first, no repeats */
	for (i = 0; i < a.nr_tasks; i++) {
		size_t k = find_id(fid, full.nr_tasks, aid[i]);

		cr_assert_lt(k, full.nr_tasks, "%s is not a state of the point", aid[i]);
		cr_assert(i == 0 || k > at, "%s out of the full list's order", aid[i]);
		at = k;
	}

	load(&b);
	b.n = 12;
	b.max_states = 100;
	b.seed = 7;
	cr_assert_eq(cc_plan(&b), 0);
	bid = plan_ids(&b);
	for (i = 0; i < b.nr_tasks; i++)
		cr_assert_str_eq(aid[i], bid[i], "the same --seed, another sample");
	free_ids(bid, b.nr_tasks);
	cc_destroy(&b);

	/* another seed, another sample */
	load(&b);
	b.n = 12;
	b.max_states = 100;
	b.seed = 8;
	cr_assert_eq(cc_plan(&b), 0);
	bid = plan_ids(&b);
	for (i = 1; i < b.nr_tasks && !strcmp(aid[i], bid[i]); i++)
		;
	cr_assert_lt(i, b.nr_tasks, "--seed 7 and 8 drew the same states");
	free_ids(bid, b.nr_tasks);
	cc_destroy(&b);

	free_ids(aid, a.nr_tasks);
	cc_destroy(&a);
	free_ids(fid, full.nr_tasks);
	cc_destroy(&full);
}

Test(crashexplore, draws_from_a_set_too_large_to_list)
{
	struct cc cc;
	char **ids;
	size_t i;

	/* 64 blocks, up to 8 rolled back: C(64, <=8) states, far above CC_MAX_LIST */
	wide_log(64);
	load(&cc);
	cc.k = 8;
	cr_assert_eq(cc_plan(&cc), CC_EXIT_USAGE, "listing it whole is refused");
	cc_destroy(&cc);

	load(&cc);
	cc.k = 8;
	cc.max_states = 500;
	cc.seed = 1;
	cr_assert_eq(cc_plan(&cc), 0);
	cr_assert_gt(cc.pts[0].dflt, CC_MAX_LIST);
	expect_point(&cc, 0, 64, UINT64_MAX, cc.pts[0].dflt, 500, true);
	ids = plan_ids(&cc);	/* in-order first, no repeats */
	for (i = 1; i < cc.nr_tasks; i++) {
		struct blk_cm_point pt;
		uint32_t choice[64];
		char why[256];

		cr_assert(cc.tasks[i].nr_roll >= 1 && cc.tasks[i].nr_roll <= 8, "%s", ids[i]);
		cr_assert_eq(blk_cm_point_init(&pt, &cc.m, 65), 0);
		cr_assert_eq(cc_parse_rollbacks(&pt, strchr(ids[i], ':') + 1, choice, why,
						sizeof(why)), 0, "%s: %s", ids[i], why);
		blk_cm_point_destroy(&pt);
	}
	free_ids(ids, cc.nr_tasks);
	cc_destroy(&cc);
}

static void no_progress(const struct cc *cc, const struct cc_progress *pr, void *arg)
{
	(*(unsigned int *)arg)++;
}

static void read_file(const char *path, unsigned char *out, size_t n)
{
	FILE *f = fopen(path, "r");

	cr_assert(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fread(out, 1, n, f), n, "%s", path);
	fclose(f);
}

/*
 * A run in scratch files: the checker keeps a copy of each state it is
 * given and fails where block 0 lacks its write. Each copy is the state
 * --materialize writes for its id, and the failures are those states.
 */
Test(crashexplore, run_in_scratch_files)
{
	static unsigned char seen[1 << 20], want[1 << 20];
	char check[512], path[256], keep[128];
	unsigned int calls = 0;
	struct cc cc;
	char **ids;
	size_t i;

	small_log();
	snprintf(keep, sizeof(keep), "%s/keep", dir);
	snprintf(check, sizeof(check), "cp \"$BLKFS_CRASH_DEV\" '%s/seen-'\"$BLKFS_CRASH_STATE\" && "
		 "dd if=\"$BLKFS_CRASH_DEV\" bs=4096 count=1 2>/dev/null | tr -d '\\000' | grep -q A",
		 dir);
	load(&cc);
	cc.check = check;
	cc.keep = keep;
	cr_assert_eq(cc.dev_size, 1u << 20);
	cr_assert_eq(cc_make_dirs(&cc), 0);
	cr_assert_eq(cc_plan(&cc), 0);
	cr_assert_eq(cc_run(&cc, no_progress, &calls), 0);
	cr_assert_gt(calls, 0);
	cr_assert_eq(cc.clone, false);
	cr_assert_eq(cc.done, 15);
	cr_assert_eq(cc.failed, 4);
	ids = plan_ids(&cc);
	for (i = 0; i < cc.nr_tasks; i++) {
		const struct cc_task *t = &cc.tasks[i];
		bool lost = false;
		uint32_t r;

		for (r = 0; r < t->nr_roll; r++)
			lost |= cc.rolls[t->roll + r].blk == 0 && cc.rolls[t->roll + r].keep == 0;
		cr_assert_eq(t->verdict, lost ? CC_FAIL : CC_OK, "%s", ids[i]);
		cr_assert_eq(!!t->out, lost, "%s: a failing state's output is kept", ids[i]);

		snprintf(path, sizeof(path), "%s/seen-%s", dir, ids[i]);
		read_file(path, seen, sizeof(seen));
		snprintf(path, sizeof(path), "%s/want", dir);
		cc.state_id = ids[i];
		cc.materialize = path;
		cr_assert_eq(cc_materialize(&cc), 0, "%s", ids[i]);
		read_file(path, want, sizeof(want));
		cr_assert(!memcmp(seen, want, sizeof(seen)), "%s: the checker saw another state",
			  ids[i]);
	}
	/* the in-order state after the last mark, byte by byte */
	snprintf(path, sizeof(path), "%s/seen-8", dir);
	read_file(path, seen, sizeof(seen));
	cr_assert(seen[0] == 'A' && seen[4096] == 'D' && seen[4608] == 'E' && seen[5120] == 'B' &&
		  seen[8192] == 'C' && seen[8704] == 0 && seen[12288] == 'F' && seen[16384] == 0);
	free_ids(ids, cc.nr_tasks);
	cc_destroy(&cc);
}
