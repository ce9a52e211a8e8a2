/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/clock.h - the one clock: CLOCK_MONOTONIC in nanoseconds and in
 * milliseconds, for time stamps, latencies, deadlines and rate limits. The
 * cache (core/) and the backends both use it; it lives here because a
 * backend includes nothing from core/.
 */
#ifndef BLKFS_CLOCK_H
#define BLKFS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t blk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t blk_now_ms(void)
{
	return blk_now_ns() / 1000000u;
}

#endif
