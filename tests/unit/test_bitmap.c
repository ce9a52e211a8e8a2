/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_bitmap.c - core/bitmap.h range operations at word edges,
 * each checked against a bit-at-a-time model.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/bitmap.h"

#define NBITS 320	/* 5 words */

static unsigned long bm[BM_WORDS(NBITS)];
static bool model[NBITS];

static void reset(void)
{
	memset(bm, 0, sizeof(bm));
	memset(model, 0, sizeof(model));
}

static size_t model_set(size_t start, size_t nr, bool val)
{
	size_t changed = 0;

	for (size_t i = start; i < start + nr; i++) {
		if (model[i] != val)
			changed++;
		model[i] = val;
	}
	return changed;
}

static void check_model(void)
{
	for (size_t i = 0; i < NBITS; i++)
		cr_assert_eq(bm_test(bm, i), model[i], "bit %zu: bitmap %d model %d",
			     i, bm_test(bm, i), model[i]);
}

Test(bitmap, mask)
{
	cr_assert_eq(bm_mask(0, 64), ~0UL);
	cr_assert_eq(bm_mask(0, 1), 1UL);
	cr_assert_eq(bm_mask(63, 64), 1UL << 63);
	cr_assert_eq(bm_mask(1, 63), (~0UL >> 1) & ~1UL);
	cr_assert_eq(bm_mask(5, 5), 0UL);
	cr_assert_eq(BM_WORDS(1), 1);
	cr_assert_eq(BM_WORDS(64), 1);
	cr_assert_eq(BM_WORDS(65), 2);
	cr_assert_eq(BM_WORDS(128), 2);
}

Test(bitmap, single_bits_at_word_edges)
{
	static const size_t bits[] = { 0, 1, 62, 63, 64, 65, 126, 127, 128, 191, 192, 319 };

	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
		size_t b = bits[i];

		reset();
		cr_assert_eq(bm_set_range(bm, b, 1), 1, "set bit %zu", b);
		model_set(b, 1, true);
		check_model();
		cr_assert_eq(bm_set_range(bm, b, 1), 0, "set bit %zu again", b);
		cr_assert_eq(bm_find(bm, 0, NBITS, true), b);
		cr_assert_eq(bm_find(bm, b, NBITS, true), b);
		cr_assert_eq(bm_find(bm, b + 1, NBITS, true), NBITS);
		cr_assert_eq(bm_find(bm, 0, b, true), b, "end bound: bit %zu", b);
		cr_assert_eq(bm_find(bm, 0, NBITS, false), b == 0 ? 1 : 0);
		cr_assert_eq(bm_find(bm, b, NBITS, false), b + 1 < NBITS ? b + 1 : NBITS);
		cr_assert(bm_all(bm, b, 1, true));
		cr_assert_not(bm_all(bm, b, 1, false));
		if (b)
			cr_assert(bm_all(bm, 0, b, false));
		cr_assert(bm_all(bm, b + 1, NBITS - b - 1, false));
		cr_assert_eq(bm_clear_range(bm, b, 1), 1, "clear bit %zu", b);
		cr_assert_eq(bm_clear_range(bm, b, 1), 0, "clear bit %zu again", b);
		model_set(b, 1, false);
		check_model();
	}
}

Test(bitmap, ranges_crossing_words)
{
	static const size_t r[][2] = {
		{ 63, 2 },	/* 63..64 */
		{ 60, 10 },
		{ 0, 64 },	/* exactly one word */
		{ 64, 64 },	/* exactly the second word */
		{ 0, 128 },
		{ 1, 126 },	/* all but the outer bits of two words */
		{ 63, 66 },	/* 63..128: word edge to word edge + 1 */
		{ 5, 300 },	/* three whole words in the middle */
		{ 127, 1 },
		{ 0, NBITS },
		{ 64, 0 },	/* empty */
	};

	for (size_t i = 0; i < sizeof(r) / sizeof(r[0]); i++) {
		size_t s = r[i][0], n = r[i][1];

		reset();
		cr_assert_eq(bm_set_range(bm, s, n), n, "set [%zu,+%zu)", s, n);
		model_set(s, n, true);
		check_model();
		cr_assert(bm_all(bm, s, n, true));
		cr_assert_eq(bm_find(bm, 0, NBITS, true), n ? s : NBITS);
		cr_assert_eq(bm_find(bm, s, NBITS, false), s + n < NBITS ? s + n : NBITS);
		if (s)
			cr_assert(bm_all(bm, 0, s, false));
		if (n && s + n < NBITS)
			cr_assert_not(bm_all(bm, s, n + 1, true));
		cr_assert_eq(bm_clear_range(bm, s, n), n, "clear [%zu,+%zu)", s, n);
		model_set(s, n, false);
		check_model();
	}
}

Test(bitmap, counts_with_partial_overlap)
{
	reset();
	/* Set 60..69, then 50..129: 10 of its 80 bits were already set. */
	cr_assert_eq(bm_set_range(bm, 60, 10), 10);
	cr_assert_eq(bm_set_range(bm, 50, 80), 70);
	model_set(50, 80, true);
	check_model();
	/* Clear 0..63: only 50..63 (14 bits) were set. */
	cr_assert_eq(bm_clear_range(bm, 0, 64), 14);
	model_set(0, 64, false);
	check_model();
	/* Clear 64..191: 64..129 (66 bits) were set. */
	cr_assert_eq(bm_clear_range(bm, 64, 128), 66);
	model_set(64, 128, false);
	check_model();
	cr_assert(bm_all(bm, 0, NBITS, false));
}

Test(bitmap, full_words_and_find_both_values)
{
	reset();
	bm_set_range(bm, 0, NBITS);
	model_set(0, NBITS, true);
	cr_assert(bm_all(bm, 0, NBITS, true));
	cr_assert_eq(bm_find(bm, 0, NBITS, false), NBITS);
	/* a hole at 64..127: find 0 and find 1 around it */
	cr_assert_eq(bm_clear_range(bm, 64, 64), 64);
	model_set(64, 64, false);
	check_model();
	cr_assert_eq(bm_find(bm, 0, NBITS, false), 64);
	cr_assert_eq(bm_find(bm, 64, NBITS, true), 128);
	cr_assert_eq(bm_find(bm, 65, 100, true), 100, "end inside the hole");
	cr_assert_eq(bm_find(bm, 63, NBITS, false), 64);
	cr_assert_eq(bm_find(bm, 128, NBITS, false), NBITS);
	cr_assert(bm_all(bm, 64, 64, false));
	cr_assert_not(bm_all(bm, 63, 2, false));
	cr_assert_not(bm_all(bm, 127, 2, true));
	cr_assert(bm_all(bm, 128, NBITS - 128, true));
	/* find with start == end */
	cr_assert_eq(bm_find(bm, 70, 70, false), 70);
	cr_assert(bm_all(bm, 70, 0, true));
}

/* The fst layout: n uptodate bits then n dirty bits in one bitmap. */
Test(bitmap, fst_layout_two_halves)
{
	const size_t n = 128;	/* 512-byte blocks in a 64K folio */

	reset();
	/* write of blocks 63..64: uptodate and dirty */
	bm_set_range(bm, 63, 2);
	bm_set_range(bm, n + 63, 2);
	model_set(63, 2, true);
	model_set(n + 63, 2, true);
	check_model();
	cr_assert_eq(bm_find(bm, n, 2 * n, true), n + 63);
	cr_assert_eq(bm_find(bm, n + 63, 2 * n, false), n + 65);
	/* last block of the folio */
	bm_set_range(bm, n - 1, 1);
	bm_set_range(bm, 2 * n - 1, 1);
	model_set(n - 1, 1, true);
	model_set(2 * n - 1, 1, true);
	check_model();
	cr_assert_eq(bm_find(bm, n + 65, 2 * n, true), 2 * n - 1);
	/* uptodate half does not leak into the dirty half */
	cr_assert_eq(bm_clear_range(bm, 0, n), 3);
	cr_assert_eq(bm_find(bm, 0, 2 * n, true), n + 63);
}

/* Random ranges against the model. */
Test(bitmap, random_against_model)
{
	unsigned int seed = 12345;

	reset();
	for (int i = 0; i < 20000; i++) {
		size_t s = (size_t)rand_r(&seed) % NBITS;
		size_t n = (size_t)rand_r(&seed) % (NBITS - s + 1);
		bool val = rand_r(&seed) & 1;
		size_t exp = model_set(s, n, val);
		size_t got = val ? bm_set_range(bm, s, n) : bm_clear_range(bm, s, n);

		cr_assert_eq(got, exp, "op %d %s [%zu,+%zu): %zu changed, model %zu",
			     i, val ? "set" : "clear", s, n, got, exp);
		if (i % 64 == 0)
			check_model();

		size_t a = (size_t)rand_r(&seed) % NBITS;
		size_t b = a + (size_t)rand_r(&seed) % (NBITS - a + 1);
		bool v = rand_r(&seed) & 1;
		size_t want = b;

		for (size_t k = a; k < b; k++) {
			if (model[k] == v) {
				want = k;
				break;
			}
		}
		cr_assert_eq(bm_find(bm, a, b, v), want, "find %d in [%zu,%zu)", v, a, b);
		cr_assert_eq(bm_all(bm, a, b - a, !v), want == b);
	}
	check_model();
}
