/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/copy.h - copying whole aligned pieces with non-temporal stores. Data
 * the writer hands over is not read again soon (writeback reads it once,
 * long after it left the CPU cache), so skipping the cache's
 * read-for-ownership makes the copy cheaper and leaves the cache to others.
 */
#ifndef BLKFS_COPY_H
#define BLKFS_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

/* Streams @n bytes when @dst is 64-byte aligned, @n a multiple of 64 and at least 4K. */
static inline bool copy_stream(void *dst, const void *src, size_t n)
{
	__m128i *d = dst;
	const __m128i *s = src;
	size_t i;

	if (n < 4096 || (((uintptr_t)dst | n) & 63) || ((uintptr_t)src & 15))
		return false;
	for (i = 0; i < n / 16; i += 4) {
		__m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
		__m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);

		_mm_stream_si128(d + i, a);
		_mm_stream_si128(d + i + 1, b);
		_mm_stream_si128(d + i + 2, c);
		_mm_stream_si128(d + i + 3, e);
	}
	/* streaming stores are weakly ordered: visible before anything after */
	_mm_sfence();
	return true;
}
#else
static inline bool copy_stream(void *dst, const void *src, size_t n)
{
	(void)dst;
	(void)src;
	(void)n;
	return false;
}
#endif

static inline void copy_big(void *dst, const void *src, size_t n)
{
	if (!copy_stream(dst, src, n))
		memcpy(dst, src, n);
}

#endif
