// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_crashmodel.c - the disk's promise (backends/lib/crashmodel.h)
 * against a hand-written log whose state sets are written out by hand.
 *
 * The device: 4 physical blocks of 4096 bytes (logical 512). A block's
 * contents are named by a code: "0" zeros, "A" all 'A', "BA" 512 bytes of
 * 'B' then 'A', "DE" 'D' with 'E' at [512, 1024), "CF" 'C' with 'F' at
 * [512, 1024). A state is the codes of blocks 0..3 joined by spaces.
 *
 * The log, in the order a dm-log-writes log has it (a flush is logged when
 * it completes, after the writes that completed before it was submitted;
 * a write completing while it is in flight comes after it):
 *   0  W1  [0, 8192)        'A'   blocks 0 and 1
 *   1  W2  [4096, 4608)     'B'   block 1, inside W1's
 *   2  FLUSH covers W1, W2 (submitted after they completed)
 *   3  W3  [8192, 12288)    'C'   block 2; completed while the flush was in
 *                                 flight, so the flush does not cover it
 *   4  W4  [0, 8192)        'D'   blocks 0 and 1
 *   5  W5  [4608, 5120)     'E'   block 1, after W4
 *   6  MARK
 *   7  W6  [8704, 9216)     'F'   block 2, after W3
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/lib/crashmodel.h"

#define PBS	4096u
#define NBLK	4u
#define SIZE	(PBS * NBLK)

static uint8_t wdata[6][8192];

static void fill(uint8_t *p, size_t n, char c)
{
	memset(p, c, n);
}

static void build_log(struct blk_cm_log *log)
{
	blk_cm_init(log, PBS);
	fill(wdata[0], 8192, 'A');
	fill(wdata[1], 512, 'B');
	fill(wdata[2], 4096, 'C');
	fill(wdata[3], 8192, 'D');
	fill(wdata[4], 512, 'E');
	fill(wdata[5], 512, 'F');
	cr_assert_eq(blk_cm_write(log, 0, 8192, wdata[0], 0), 0);
	cr_assert_eq(blk_cm_write(log, 4096, 512, wdata[1], 0), 0);
	cr_assert_eq(blk_cm_flush(log, 2), 0);
	cr_assert_eq(blk_cm_write(log, 8192, 4096, wdata[2], 0), 0);
	cr_assert_eq(blk_cm_write(log, 0, 8192, wdata[3], 0), 0);
	cr_assert_eq(blk_cm_write(log, 4608, 512, wdata[4], 0), 0);
	cr_assert_eq(blk_cm_mark(log), 0);
	cr_assert_eq(blk_cm_write(log, 8704, 512, wdata[5], 0), 0);
}

/* The code of one block's contents; "?" for anything else. */
static const char *block_code(const uint8_t *b)
{
	static const char *const codes[] = { "0", "A", "BA", "C", "CF", "D", "DE" };
	uint8_t want[PBS];
	size_t i;

	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		const char *c = codes[i];

		fill(want, PBS, c[0] == '0' ? 0 : c[0]);
		if (!strcmp(c, "BA")) {
			fill(want, PBS, 'A');
			fill(want, 512, 'B');
		} else if (c[1]) {
			fill(want + 512, 512, c[1]);
		}
		if (!memcmp(want, b, PBS))
			return c;
	}
	return "?";
}

static void image_code(const uint8_t *img, char *out, size_t len)
{
	unsigned int i;

	out[0] = 0;
	for (i = 0; i < NBLK; i++)
		snprintf(out + strlen(out), len - strlen(out), "%s%s", i ? " " : "",
			 block_code(img + (size_t)i * PBS));
}

static int copy_into(void *ctx, uint64_t pos, uint64_t len, const void *data)
{
	uint8_t *img = ctx;

	cr_assert_leq(pos + len, SIZE);
	if (data)
		memcpy(img + pos, data, len);
	else
		memset(img + pos, 0, len);
	return 0;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Enumerate every state after @nr_events events; compare the codes, as a
 * set, with @want (sorted here) and check that each state is its own.
 */
static void check_point(size_t nr_events, const char *const *want, size_t nr_want)
{
	struct blk_cm_log log;
	struct blk_cm_point pt;
	uint8_t base[SIZE] = { 0 }, img[SIZE];
	char **got, **exp;
	uint32_t choice[NBLK], back[NBLK];
	uint64_t n;
	size_t i;

	build_log(&log);
	cr_assert_eq(blk_cm_point_init(&pt, &log, nr_events), 0);
	cr_assert_eq(pt.nr_states, nr_want, "after %zu events: %llu states, expected %zu",
		     nr_events, (unsigned long long)pt.nr_states, nr_want);
	got = calloc(nr_want, sizeof(*got));
	exp = calloc(nr_want, sizeof(*exp));
	cr_assert(got && exp);
	for (n = 0; n < pt.nr_states; n++) {
		cr_assert_eq(blk_cm_state_nth(&pt, n, choice), 0);
		cr_assert(blk_cm_state_valid(&pt, choice));
		cr_assert_eq(blk_cm_state_index(&pt, choice), n);
		memcpy(img, base, SIZE);
		cr_assert_eq(blk_cm_apply(&pt, choice, copy_into, img), 0);
		got[n] = malloc(64);
		cr_assert_not_null(got[n]);
		image_code(img, got[n], 64);
		/* The image maps back to a state (perhaps another with equal bytes). */
		cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, back), 0, "%s", got[n]);
	}
	cr_assert_eq(blk_cm_state_nth(&pt, pt.nr_states, choice), -ERANGE);
	for (i = 0; i < nr_want; i++)
		exp[i] = (char *)want[i];
	qsort(got, nr_want, sizeof(*got), str_cmp);
	qsort(exp, nr_want, sizeof(*exp), str_cmp);
	for (i = 0; i < nr_want; i++)
		cr_assert_str_eq(got[i], exp[i], "after %zu events: state %zu is '%s', expected '%s'",
				 nr_events, i, got[i], exp[i]);

	/* The in-order state is the last write everywhere. */
	blk_cm_state_in_order(&pt, choice);
	memcpy(img, base, SIZE);
	blk_cm_apply(&pt, choice, copy_into, img);
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, back), 0);
	for (i = 0; i < pt.nr_blocks; i++)
		cr_assert_eq(back[i], choice[i]);

	for (i = 0; i < nr_want; i++)
		free(got[i]);
	free(got);
	free(exp);
	blk_cm_point_destroy(&pt);
	blk_cm_destroy(&log);
}

Test(crashmodel, before_the_flush_everything_is_volatile)
{
	/* After W1, W2 (no flush yet): block 0 {0, A}; block 1 {0, A, BA}. */
	static const char *const want[] = {
		"0 0 0 0", "A 0 0 0", "0 A 0 0", "A A 0 0", "0 BA 0 0", "A BA 0 0",
	};

	check_point(2, want, sizeof(want) / sizeof(want[0]));
}

Test(crashmodel, at_the_flush_what_it_covers_is_durable)
{
	static const char *const want[] = { "A BA 0 0" };

	check_point(3, want, sizeof(want) / sizeof(want[0]));
}

Test(crashmodel, after_the_flush_only_the_write_completed_during_it_is_volatile)
{
	static const char *const want[] = { "A BA 0 0", "A BA C 0" };

	check_point(4, want, sizeof(want) / sizeof(want[0]));
}

Test(crashmodel, at_the_mark_blocks_choose_independently)
{
	/* block 0 {A, D}; block 1 {BA, D, DE}; block 2 {0, C}: W4 may tear at 4096. */
	static const char *const want[] = {
		"A BA 0 0", "D BA 0 0", "A D 0 0", "D D 0 0", "A DE 0 0", "D DE 0 0",
		"A BA C 0", "D BA C 0", "A D C 0", "D D C 0", "A DE C 0", "D DE C 0",
	};

	check_point(7, want, sizeof(want) / sizeof(want[0]));
}

Test(crashmodel, at_the_end_a_block_never_holds_a_newer_write_without_an_older_one)
{
	/* block 2 {0, C, CF}: never F without C, which completed before it. */
	static const char *const want[] = {
		"A BA 0 0", "D BA 0 0", "A D 0 0", "D D 0 0", "A DE 0 0", "D DE 0 0",
		"A BA C 0", "D BA C 0", "A D C 0", "D D C 0", "A DE C 0", "D DE C 0",
		"A BA CF 0", "D BA CF 0", "A D CF 0", "D D CF 0", "A DE CF 0", "D DE CF 0",
	};

	check_point(8, want, sizeof(want) / sizeof(want[0]));
}

Test(crashmodel, images_outside_the_set_are_refused)
{
	struct blk_cm_log log;
	struct blk_cm_point pt;
	uint8_t base[SIZE] = { 0 }, img[SIZE];
	uint32_t choice[NBLK];

	build_log(&log);
	cr_assert_eq(blk_cm_point_init(&pt, &log, 8), 0);
	blk_cm_state_in_order(&pt, choice);
	memcpy(img, base, SIZE);
	blk_cm_apply(&pt, choice, copy_into, img);
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, choice), 0);
	/* F without C: a newer write to block 2 kept, an older one lost */
	memset(img + 2 * PBS, 0, PBS);
	memset(img + 2 * PBS + 512, 'F', 512);
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, choice), -ENOENT);
	/* a torn physical block: half of W4's D in block 0 */
	blk_cm_state_in_order(&pt, choice);
	memcpy(img, base, SIZE);
	blk_cm_apply(&pt, choice, copy_into, img);
	memset(img, 'A', 2048);
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, choice), -ENOENT);
	/* flushed data lost: block 1 zeros */
	blk_cm_state_in_order(&pt, choice);
	memcpy(img, base, SIZE);
	blk_cm_apply(&pt, choice, copy_into, img);
	memset(img + PBS, 0, PBS);
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, choice), -ENOENT);
	/* a block no write touched changed */
	blk_cm_state_in_order(&pt, choice);
	memcpy(img, base, SIZE);
	blk_cm_apply(&pt, choice, copy_into, img);
	img[3 * PBS + 7] = 1;
	cr_assert_eq(blk_cm_state_of(&pt, base, img, SIZE, choice), -ENOENT);
	blk_cm_point_destroy(&pt);
	blk_cm_destroy(&log);
}

Test(crashmodel, a_fua_write_is_durable_when_it_completes)
{
	struct blk_cm_log log;
	struct blk_cm_point pt;
	uint32_t choice[2];

	blk_cm_init(&log, PBS);
	cr_assert_eq(blk_cm_write(&log, 0, 4096, wdata[0], 0), 0);
	cr_assert_eq(blk_cm_write(&log, 512, 512, wdata[1], BLK_CM_FUA), 0);
	cr_assert_eq(blk_cm_write(&log, 0, 512, wdata[2], 0), 0);
	cr_assert_eq(blk_cm_write(&log, 4096, 512, wdata[2], 0), 0);
	cr_assert_eq(blk_cm_point_init(&pt, &log, log.nr), 0);
	/* block 0: after W1+W2 or all three; block 1: none or its one write */
	cr_assert_eq(pt.nr_blocks, 2);
	cr_assert_eq(pt.b[0].min, 2);
	cr_assert_eq(pt.b[0].nr, 3);
	cr_assert_eq(pt.nr_states, 4);
	cr_assert_eq(blk_cm_state_nth(&pt, 0, choice), 0);
	cr_assert_eq(choice[0], 2);
	cr_assert_eq(choice[1], 0);
	choice[0] = 1;
	cr_assert_not(blk_cm_state_valid(&pt, choice));
	blk_cm_point_destroy(&pt);
	/* a flush that covers more writes than exist is refused */
	cr_assert_eq(blk_cm_flush(&log, 5), -EINVAL);
	blk_cm_destroy(&log);
}

Test(crashmodel, flushes_completing_out_of_order)
{
	struct blk_cm_log log;
	struct blk_cm_point pt;

	blk_cm_init(&log, PBS);
	cr_assert_eq(blk_cm_write(&log, 0, 4096, wdata[0], 0), 0);
	cr_assert_eq(blk_cm_write(&log, 4096, 4096, wdata[0], 0), 0);
	cr_assert_eq(blk_cm_flush(&log, 2), 0);	/* the later flush, done first */
	cr_assert_eq(blk_cm_flush(&log, 1), 0);
	cr_assert_eq(blk_cm_point_init(&pt, &log, log.nr), 0);
	cr_assert_eq(pt.durable, 2);
	cr_assert_eq(pt.nr_blocks, 0);
	cr_assert_eq(pt.nr_states, 1);
	blk_cm_point_destroy(&pt);
	blk_cm_destroy(&log);
}
