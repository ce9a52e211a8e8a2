/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/hist.c - latency histograms (hist.h): biolatency's log2 buckets
 * for show, a log-linear one for percentiles.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hist.h"

static unsigned ilog2(uint64_t v)
{
	return 63u - (unsigned)__builtin_clzll(v);
}

unsigned blk_hist_log2_idx(uint64_t us)
{
	unsigned k;

	if (us < 2)
		return 0;
	k = ilog2(us);
	return k < BH_LOG2 ? k : BH_LOG2 - 1;
}

unsigned blk_hist_fine_idx(uint64_t ns)
{
	unsigned e;

	if (ns < 8)
		return (unsigned)ns;
	e = ilog2(ns);
	return (e - 2) * 8 + (unsigned)((ns >> (e - 3)) & 7);
}

uint64_t blk_hist_fine_max(unsigned idx)
{
	unsigned e, sub;

	if (idx < 8)
		return idx;
	e = idx / 8 + 2;
	sub = idx % 8;
	if (e == 63 && sub == 7)
		return UINT64_MAX;
	return ((8ull + sub) << (e - 3)) + (1ull << (e - 3)) - 1;
}

void blk_hist_add(struct blk_hist *h, uint64_t ns)
{
	uint64_t max = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);

	__atomic_add_fetch(&h->log2[blk_hist_log2_idx(ns / 1000)], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->fine[blk_hist_fine_idx(ns)], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
	while (ns > max && !__atomic_compare_exchange_n(&h->max_ns, &max, ns, true,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* One writer: relaxed loads and stores (no lock prefix), still whole for a reader. */
#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELAXED)

void blk_hist_add_owned(struct blk_hist *h, uint64_t ns)
{
	OWNED_ADD(&h->log2[blk_hist_log2_idx(ns / 1000)], 1);
	OWNED_ADD(&h->fine[blk_hist_fine_idx(ns)], 1);
	OWNED_ADD(&h->sum_ns, ns);
	OWNED_ADD(&h->count, 1);
	if (ns > __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED))
		__atomic_store_n(&h->max_ns, ns, __ATOMIC_RELAXED);
}

void blk_hist_snap_add(const struct blk_hist *h, struct blk_hist *out)
{
	uint64_t m;
	unsigned i;

	for (i = 0; i < BH_LOG2; i++)
		out->log2[i] += __atomic_load_n(&h->log2[i], __ATOMIC_RELAXED);
	for (i = 0; i < BH_FINE; i++) {
		uint64_t v = __atomic_load_n(&h->fine[i], __ATOMIC_RELAXED);

		out->fine[i] += v;
		out->count += v;
	}
	out->sum_ns += __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
	m = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
	if (m > out->max_ns)
		out->max_ns = m;
}

void blk_hist_reset(struct blk_hist *h)
{
	unsigned i;

	for (i = 0; i < BH_LOG2; i++)
		__atomic_store_n(&h->log2[i], 0, __ATOMIC_RELAXED);
	for (i = 0; i < BH_FINE; i++)
		__atomic_store_n(&h->fine[i], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->count, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->sum_ns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&h->max_ns, 0, __ATOMIC_RELAXED);
}

#define SUB0(a, b) ((a) > (b) ? (a) - (b) : 0)

void blk_hist_sub(struct blk_hist *h, const struct blk_hist *base)
{
	unsigned i;

	for (i = 0; i < BH_LOG2; i++)
		h->log2[i] = SUB0(h->log2[i], base->log2[i]);
	h->count = 0;
	for (i = 0; i < BH_FINE; i++) {
		h->fine[i] = SUB0(h->fine[i], base->fine[i]);
		h->count += h->fine[i];
	}
	h->sum_ns = SUB0(h->sum_ns, base->sum_ns);
}

void blk_hist_snap(const struct blk_hist *h, struct blk_hist *out)
{
	unsigned i;

	for (i = 0; i < BH_LOG2; i++)
		out->log2[i] = __atomic_load_n(&h->log2[i], __ATOMIC_RELAXED);
	out->count = 0;
	for (i = 0; i < BH_FINE; i++) {
		out->fine[i] = __atomic_load_n(&h->fine[i], __ATOMIC_RELAXED);
		out->count += out->fine[i];	/* the percentiles' own total */
	}
	out->sum_ns = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
	out->max_ns = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
}

uint64_t blk_hist_pct(const struct blk_hist *h, unsigned permille)
{
	uint64_t rank, cum = 0, top;
	unsigned i;

	if (!h->count)
		return 0;
	rank = (h->count * permille + 999) / 1000;
	if (!rank)
		rank = 1;
	for (i = 0; i < BH_FINE; i++) {
		cum += h->fine[i];
		if (cum >= rank)
			break;
	}
	top = i < BH_FINE ? blk_hist_fine_max(i) : h->max_ns;
	return top < h->max_ns ? top : h->max_ns;
}

/* Append to @buf as snprintf: @o counts on past @len, so the caller learns the length needed. */
#define APPEND(buf, len, o, ...) \
	((o) += (size_t)snprintf((o) < (len) ? (buf) + (o) : NULL, (o) < (len) ? (len) - (o) : 0, \
				 __VA_ARGS__))

size_t blk_hist_print(const struct blk_hist *h, char *buf, size_t len)
{
	uint64_t peak = 0;
	size_t o = 0;
	int first = -1, last = -1, i;

	if (len)
		buf[0] = 0;
	for (i = 0; i < BH_LOG2; i++) {
		if (!h->log2[i])
			continue;
		if (first < 0)
			first = i;
		last = i;
		if (h->log2[i] > peak)
			peak = h->log2[i];
	}
	if (first < 0)
		return 0;
	APPEND(buf, len, o, "%20s : count     distribution\n", "usecs");
	for (i = first; i <= last; i++) {
		uint64_t lo = i ? 1ull << i : 0, hi = i ? (2ull << i) - 1 : 1;
		char bar[41];
		unsigned n = (unsigned)(h->log2[i] * 40 / peak);

		memset(bar, '*', n);
		memset(bar + n, ' ', 40 - n);
		bar[40] = 0;
		APPEND(buf, len, o, "%10llu -> %-10llu : %-8llu |%s|\n", (unsigned long long)lo,
		       (unsigned long long)hi, (unsigned long long)h->log2[i], bar);
	}
	return o;
}
