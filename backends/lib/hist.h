/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/hist.h - latency histograms: log2 buckets of microseconds, as
 * bcc's biolatency prints them (0 -> 1, 2 -> 3, 4 -> 7, ...), and a finer
 * log-linear histogram of nanoseconds (8 steps per power of two, so within
 * 12.5%) that the percentiles come from. Adding is a few relaxed atomic
 * increments: any thread, no lock. A reader takes a snapshot (not one
 * instant: counts added meanwhile may be in some arrays and not others).
 */
#ifndef BLKFS_HIST_H
#define BLKFS_HIST_H

#include <stddef.h>
#include <stdint.h>

#define BH_LOG2		40	/* usecs buckets: the last holds 2^39 us and up */
#define BH_FINE		496	/* ns: 0..7 exact, then 8 steps per power of two */

struct blk_hist {
	uint64_t log2[BH_LOG2];
	uint64_t fine[BH_FINE];
	uint64_t count, sum_ns, max_ns;
};

/* Which biolatency bucket @us falls in: 0 for 0-1, k for [2^k, 2^(k+1)). */
unsigned blk_hist_log2_idx(uint64_t us);
/* Which fine bucket @ns falls in, and the largest value that bucket holds. */
unsigned blk_hist_fine_idx(uint64_t ns);
uint64_t blk_hist_fine_max(unsigned idx);

/* Count one latency of @ns nanoseconds. */
void blk_hist_add(struct blk_hist *h, uint64_t ns);
/*
 * The same for a histogram only the calling thread adds to (a thread's
 * own): plain loads and stores, no locked instruction; readers may still
 * take snapshots meanwhile.
 */
void blk_hist_add_owned(struct blk_hist *h, uint64_t ns);
/* Add a snapshot of @h into the snapshot @out (counts and sums; the larger max). */
void blk_hist_snap_add(const struct blk_hist *h, struct blk_hist *out);
void blk_hist_reset(struct blk_hist *h);
void blk_hist_snap(const struct blk_hist *h, struct blk_hist *out);
/*
 * Take the snapshot @base (taken earlier of the same counts) from the
 * snapshot @h: the counts and sum since @base (never below 0); @h's
 * max_ns stays as it is.
 */
void blk_hist_sub(struct blk_hist *h, const struct blk_hist *base);

/**
 * blk_hist_pct - a percentile of a snapshot
 * @h: the snapshot
 * @permille: 500 for p50, 999 for p99.9
 * Returns: nanoseconds: the top of the fine bucket that holds the value of
 * rank ceil(count * permille / 1000), never above the largest value seen;
 * 0 for an empty histogram.
 */
uint64_t blk_hist_pct(const struct blk_hist *h, unsigned permille);

/*
 * Print a snapshot as biolatency does ("usecs : count distribution", from
 * the first to the last bucket that holds a count) into @buf. Returns the
 * length of the whole text, as snprintf: @len or more when it was cut
 * (what is in @buf is then cut at @len - 1 and terminated).
 */
size_t blk_hist_print(const struct blk_hist *h, char *buf, size_t len);

#endif
