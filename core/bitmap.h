/* SPDX-License-Identifier: MIT */
/*
 * core/bitmap.h - range operations on unsigned long bitmaps, for the folio
 * state (fst): bits [0,n) uptodate, [n,2n) dirty, as iomap_folio_state.
 * Whole words are handled a word at a time, so cost grows with words, not bits.
 */
#ifndef BLKFS_BITMAP_H
#define BLKFS_BITMAP_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define BM_BITS (sizeof(unsigned long) * CHAR_BIT)
#define BM_WORDS(nbits) (((nbits) + BM_BITS - 1) / BM_BITS)

static inline unsigned long bm_mask(size_t lo, size_t hi) /* bits [lo,hi) of a word, hi<=64 */
{
	unsigned long m = hi >= BM_BITS ? ~0UL : ((1UL << hi) - 1);
	return m & ~((1UL << lo) - 1);
}

static inline bool bm_test(const unsigned long *bm, size_t bit)
{
	return (bm[bit / BM_BITS] >> (bit % BM_BITS)) & 1;
}

/* Set bits [start, start+nr); returns how many were 0 before. */
static inline size_t bm_set_range(unsigned long *bm, size_t start, size_t nr)
{
	size_t end = start + nr, changed = 0;

	while (start < end) {
		size_t w = start / BM_BITS, lo = start % BM_BITS;
		size_t hi = (end - w * BM_BITS) < BM_BITS ? end - w * BM_BITS : BM_BITS;
		unsigned long m = bm_mask(lo, hi);

		changed += (size_t)__builtin_popcountl(m & ~bm[w]);
		bm[w] |= m;
		start = w * BM_BITS + hi;
	}
	return changed;
}

/* Clear bits [start, start+nr); returns how many were 1 before. */
static inline size_t bm_clear_range(unsigned long *bm, size_t start, size_t nr)
{
	size_t end = start + nr, changed = 0;

	while (start < end) {
		size_t w = start / BM_BITS, lo = start % BM_BITS;
		size_t hi = (end - w * BM_BITS) < BM_BITS ? end - w * BM_BITS : BM_BITS;
		unsigned long m = bm_mask(lo, hi);

		changed += (size_t)__builtin_popcountl(m & bm[w]);
		bm[w] &= ~m;
		start = w * BM_BITS + hi;
	}
	return changed;
}

/* Index of the first bit in [start, end) equal to @val, or @end. */
static inline size_t bm_find(const unsigned long *bm, size_t start, size_t end, bool val)
{
	while (start < end) {
		size_t w = start / BM_BITS;
		unsigned long word = val ? bm[w] : ~bm[w];

		word &= ~0UL << (start % BM_BITS);
		if (word) {
			size_t bit = w * BM_BITS + (size_t)__builtin_ctzl(word);
			return bit < end ? bit : end;
		}
		start = (w + 1) * BM_BITS;
	}
	return end;
}

/* Number of set bits in [start, start+nr). */
static inline size_t bm_count(const unsigned long *bm, size_t start, size_t nr)
{
	size_t end = start + nr, n = 0;

	while (start < end) {
		size_t w = start / BM_BITS, lo = start % BM_BITS;
		size_t hi = (end - w * BM_BITS) < BM_BITS ? end - w * BM_BITS : BM_BITS;

		n += (size_t)__builtin_popcountl(bm[w] & bm_mask(lo, hi));
		start = w * BM_BITS + hi;
	}
	return n;
}

/* Copy bits [start, start+nr) of @src to bits [0, nr) of @dst. */
static inline void bm_copy(unsigned long *dst, const unsigned long *src, size_t start, size_t nr)
{
	size_t i, words = BM_WORDS(nr), last = BM_WORDS(start + nr);

	for (i = 0; i < words; i++) {
		size_t bit = start + i * BM_BITS, w = bit / BM_BITS, off = bit % BM_BITS;
		unsigned long v = src[w] >> off;

		if (off && w + 1 < last)
			v |= src[w + 1] << (BM_BITS - off);
		dst[i] = v;
	}
	if (nr % BM_BITS)
		dst[words - 1] &= (1UL << (nr % BM_BITS)) - 1;
}

/* True if every bit of [start, start+nr) is @val. */
static inline bool bm_all(const unsigned long *bm, size_t start, size_t nr, bool val)
{
	return bm_find(bm, start, start + nr, !val) == start + nr;
}

#endif
