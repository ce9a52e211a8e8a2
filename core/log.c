/* SPDX-License-Identifier: MIT */
/* core/log.c - time-stamped messages to stderr and a simple rate limiter. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "../backends/clock.h"
#include "log.h"

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

void blk_log(const char *fmt, ...)
{
	char buf[1024], stamp[32];
	struct timespec ts;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	/* one fprintf per message: lines from several threads do not interleave */
	fprintf(stderr, "%s.%03ld blkfs: %s\n", stamp, ts.tv_nsec / 1000000, buf);
}

bool blk_ratelimit(struct blk_ratelimit *rl, const char *what)
{
	uint64_t now = blk_now_ms();
	uint32_t missed = 0;
	bool ok;

	pthread_mutex_lock(&rl_lock);
	if (!rl->begin_ms || now - rl->begin_ms >= rl->interval_ms) {
		missed = rl->missed;
		rl->begin_ms = now;
		rl->printed = 0;
		rl->missed = 0;
	}
	ok = rl->printed < rl->burst;
	if (ok)
		rl->printed++;
	else
		rl->missed++;
	pthread_mutex_unlock(&rl_lock);
	if (missed)
		blk_log("%s: %u messages suppressed", what, missed);
	return ok;
}
