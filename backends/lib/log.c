/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/log.c - messages to stderr, time-stamped or with a journal
 * priority, and a simple rate limiter.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

static pthread_mutex_t rl_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Is stderr the journal? systemd sets $JOURNAL_STREAM to "DEV:INO" of the
 * stream it connected; a program whose stderr was redirected since (the
 * daemon's own log file) must not take the variable for itself, so it is
 * checked against stderr each time (messages are few and rate-limited).
 */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (!js || sscanf(js, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st))
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

const char *blk_log_prefix(int level)
{
	static const char *const prefix[8] = { "<0>", "<1>", "<2>", "<3>", "<4>", "<5>", "<6>", "<7>" };

	if (!stderr_is_journal())
		return "";
	return prefix[level >= 0 && level < 8 ? level : BLK_LOG_INFO];
}

static void vlog(int level, const char *fmt, va_list ap)
{
	char buf[1024], stamp[32];
	const char *prefix = blk_log_prefix(level);
	struct timespec ts;
	struct tm tm;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	/* one fprintf per message: lines from several threads do not interleave */
	if (*prefix) {
		fprintf(stderr, "%sblkfs: %s\n", prefix, buf);
		return;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fprintf(stderr, "%s.%03ld blkfs: %s%s\n", stamp, ts.tv_nsec / 1000000,
		level <= BLK_LOG_ERR ? "error: " : level == BLK_LOG_WARNING ? "warning: " : "", buf);
}

void blk_logl(int level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(level, fmt, ap);
	va_end(ap);
}

void blk_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(BLK_LOG_INFO, fmt, ap);
	va_end(ap);
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
		blk_warn("%s: %u messages suppressed", what, missed);
	return ok;
}
