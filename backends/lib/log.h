/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/log.h - one place where blkfs speaks: stderr (a terminal with
 * -f, the daemon's log file otherwise), with a time stamp, and a rate limiter
 * for messages that can repeat per I/O (writeback errors). When stderr is the
 * journal ($JOURNAL_STREAM names it), each line starts with its syslog
 * priority instead ("<3>", "<4>", "<6>"), and the journal keeps the time.
 * The levels and blk_logl(), blk_err(), blk_warn(), blk_info() are declared
 * in backends/backend.h, so that backends and filters speak through here too.
 */
#ifndef BLKFS_LOG_H
#define BLKFS_LOG_H

#include <stdbool.h>
#include <stdint.h>

#include "../backend.h"

/* blk_log - blk_info(): a message at BLK_LOG_INFO. */
void blk_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * blk_log_prefix - what starts a line of @level written to stderr by hand
 * (a command's own error messages): "<3>" and the like when stderr is the
 * journal, else "".
 */
const char *blk_log_prefix(int level);

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
