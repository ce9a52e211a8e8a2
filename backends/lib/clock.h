/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/clock.h - the one clock: CLOCK_MONOTONIC in nanoseconds and in
 * milliseconds, for time stamps, latencies, deadlines and rate limits. The
 * cache (core/) and the backends both use it; it lives here because a
 * backend includes nothing from core/.
 *
 * Timed waits use the same clock: every condition variable that is ever
 * waited on with a timeout is made by blk_cond_init() (CLOCK_MONOTONIC, so
 * a step of the wall clock neither stretches nor cuts a bound), and waited
 * on through blk_cond_wait_until() or blk_cond_wait_ms(). A condition
 * variable made with PTHREAD_COND_INITIALIZER or a plain pthread_cond_init()
 * measures a timeout on CLOCK_REALTIME: never pass one here.
 */
#ifndef BLKFS_CLOCK_H
#define BLKFS_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t blk_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A request's stamps, shared by the levels it crosses in one thread (issue
 * 39: two clock reads per request, not four): its start and its end, each
 * read once and used by both the FUSE level and the device level of an
 * unsplit direct I/O (core/submit.c: the I/O embedded in the request's
 * struct pc_aio, which is the stamp's @tok).
 *
 * The begin stamp: the FUSE level's start (bt_req_begin()), left by the
 * receiving thread (fuse/devfile.c: req_get()) only when the request got
 * its slot without waiting for one (bf_slots_get()'s @waited), and taken by
 * the device level's begin of its unsplit I/O in the same thread
 * (acct_begin_tok()). It lives only within the request's handler: the
 * handler's return clears it (req_returned(), req_put()), and so do any
 * other backend I/O begun in the thread (acct_begin()), any request begun
 * in it (bt_req_begin()), and a copy of the request's data before its I/O.
 *
 * The end stamp: the device level's end of an unsplit I/O (sio_end_io()),
 * left for the request it belongs to, and taken by the FUSE level's end of
 * that request when it is answered in the same thread's handler (inline:
 * bt_req_end_tok()). Any other backend I/O begun or ended in the thread
 * (acct_begin(), acct_end()) and any request begun in it (bt_req_begin())
 * clear it first.
 *
 * A stamp is only ever taken by the request that set it, and only once: a
 * taker whose @tok differs reads the clock, and any take clears it.
 */
struct blk_stamp {
	const void *tok;	/* the request it is for; NULL: none */
	uint64_t ns;		/* blk_now_ns()'s scale */
};

extern __thread struct blk_stamp blk_begin_stamp;	/* backends/lib/trace.c */
extern __thread struct blk_stamp blk_end_stamp;		/* backends/lib/trace.c */

static inline void blk_stamp_set(struct blk_stamp *s, const void *tok, uint64_t ns)
{
	s->tok = tok;
	s->ns = ns;
}

static inline void blk_stamp_clear(struct blk_stamp *s)
{
	s->tok = NULL;
}

/* The stamp's time when it is @tok's, else the clock's now; either way the stamp is gone. */
static inline uint64_t blk_stamp_take(struct blk_stamp *s, const void *tok)
{
	const void *had = s->tok;

	s->tok = NULL;
	if (tok && had == tok)
		return s->ns;
	return blk_now_ns();
}

static inline uint64_t blk_now_ms(void)
{
	return blk_now_ns() / 1000000u;
}

/* A condition variable whose timed waits run on CLOCK_MONOTONIC. */
static inline int blk_cond_init(pthread_cond_t *c)
{
	pthread_condattr_t ca;
	int ret;

	ret = pthread_condattr_init(&ca);
	if (ret)
		return ret;
	ret = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!ret)
		ret = pthread_cond_init(c, &ca);
	pthread_condattr_destroy(&ca);
	return ret;
}

/* The absolute CLOCK_MONOTONIC time @ns (blk_now_ns()'s scale) as a timespec. */
static inline struct timespec blk_ns_to_timespec(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / 1000000000u),
		.tv_nsec = (long)(ns % 1000000000u),
	};

	return ts;
}

/*
 * Wait on @c (made by blk_cond_init) until signalled or until @deadline_ns
 * (blk_now_ns()'s scale) has passed: 0, or ETIMEDOUT. Callers loop on their
 * condition as with any condition variable wait.
 */
static inline int blk_cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, uint64_t deadline_ns)
{
	struct timespec ts = blk_ns_to_timespec(deadline_ns);

	return pthread_cond_timedwait(c, m, &ts);
}

/* blk_cond_wait_until() @ms milliseconds from now. */
static inline int blk_cond_wait_ms(pthread_cond_t *c, pthread_mutex_t *m, uint64_t ms)
{
	return blk_cond_wait_until(c, m, blk_now_ns() + ms * 1000000u);
}

#endif
