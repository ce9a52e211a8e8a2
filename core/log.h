/* SPDX-License-Identifier: MIT */
/*
 * core/log.h - one place where blkfs speaks: stderr (a terminal with -f, the
 * daemon's log file otherwise), with a time stamp, and a rate limiter for
 * messages that can repeat per I/O (writeback errors).
 */
#ifndef BLKFS_LOG_H
#define BLKFS_LOG_H

#include <stdbool.h>
#include <stdint.h>

void blk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Allows @burst messages per @interval_ms; counts what it suppressed. */
struct blk_ratelimit {
	uint64_t interval_ms;
	uint32_t burst;
	/* private, protected by an internal lock */
	uint64_t begin_ms;
	uint32_t printed, missed;
};

#define BLK_RATELIMIT_INIT(ms, n) { .interval_ms = (ms), .burst = (n) }

/* True if the caller may log now; reports suppressed messages when a window ends. */
bool blk_ratelimit(struct blk_ratelimit *rl, const char *what);

#endif
