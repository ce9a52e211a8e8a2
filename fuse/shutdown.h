/* SPDX-License-Identifier: MIT */
/* fuse/shutdown.h - the end of serving (shutdown.c). */
#ifndef BLKFS_FUSE_SHUTDOWN_H
#define BLKFS_FUSE_SHUTDOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

struct bf_daemon;

/* Once serving has ended: SIGTERM, SIGINT and SIGHUP are noted, never fatal. */
void bf_final_signals(void);
/* Report the final writeback's progress (log, STATUS=) until _stop(). */
void bf_final_progress_start(struct bf_daemon *d);
void bf_final_progress_stop(void);
/*
 * The end of serving, bounded by [mount] shutdown_timeout: bf_final_begin
 * starts, per device, a thread that waits for its requests in flight and
 * then writes its cache back (NULL without memory: then the two calls
 * below do it in this thread, unbounded). bf_final_wait_drained waits
 * until every device's requests are answered or the device was given up
 * on (no progress for the timeout); true when none was. bf_final_end
 * waits for the writebacks likewise, writes the status lines ("ok DEV
 * BYTES", "lost DEV BYTES REASON") to @status, sets d->abandoned when a
 * device was given up on, and returns the exit code (0, or 1: data lost).
 */
struct bf_final;
/*
 * bf_final_wait_busy - before those: wait while @busy(@arg) (called with
 * @lock held; @cv, made by blk_cond_init, is signalled when it may have
 * changed) as long as the devices make progress by the final writeback's
 * measure, any device's.
 * Returns true once @busy is false; false after shutdown_timeout without
 * progress (never with shutdown_timeout = 0).
 */
bool bf_final_wait_busy(struct bf_daemon *d, bool (*busy)(void *), void *arg,
			pthread_mutex_t *lock, pthread_cond_t *cv);
struct bf_final *bf_final_begin(struct bf_daemon *d);
bool bf_final_wait_drained(struct bf_daemon *d, struct bf_final *f);
int bf_final_end(struct bf_daemon *d, struct bf_final *f, char *status, size_t statuslen);

#endif
