/* SPDX-License-Identifier: MIT */
/*
 * fuse/shutdown.c - the end of a mount. Once the request loop has ended
 * (the mount went away, or SIGTERM/SIGINT/SIGHUP asked the daemon to go),
 * every dirty block is written to its backend before the daemon exits.
 * Nothing but SIGKILL stops that final writeback: the three signals are only
 * noted (and answered in the log with what is left to write), because a
 * shutdown script or service manager that repeats its SIGTERM would
 * otherwise lose exactly the data the first one was meant to save. A
 * thread reports progress while it runs: STATUS= lines with the bytes left
 * and EXTEND_TIMEOUT_USEC= to a service manager (so a stop timeout fires
 * only when writeback stops making progress), and a log line every 10 s.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../backends/clock.h"
#include "../core/log.h"
#include "bf.h"

#define PROGRESS_TICK_MS 1000
#define PROGRESS_LOG_MS 10000
/* a service manager waits this long past its stop timeout for the next sign of progress */
#define PROGRESS_EXTEND_US 30000000ull

/* atomic (lock-free int: safe in a handler, and read by the progress thread) */
static int final_sig;		/* the last signal seen, 0 once reported */
static int final_nsigs;

static void final_handler(int sig)
{
	__atomic_store_n(&final_sig, sig, __ATOMIC_RELAXED);
	__atomic_add_fetch(&final_nsigs, 1, __ATOMIC_RELAXED);
}

void bf_final_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = final_handler;
	sigemptyset(&sa.sa_mask);
	/* restarted: a signal must not fail an I/O of the writeback with EINTR */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool stop;				/* lock */
	pthread_t thread;
	bool running;
} prog = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, false };

static uint64_t bytes_left(struct bf_daemon *d)
{
	uint64_t left = 0;
	int i;

	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct pc_stats st;

		if (!d->devs[i] || !d->devs[i]->pc)
			continue;
		pc_dev_stats(d->devs[i]->pc, &st);
		left += st.dirty_bytes + st.writeback_bytes;
	}
	return left;
}

static void *progress_fn(void *arg)
{
	struct bf_daemon *d = arg;
	uint64_t start = blk_now_ms(), last_log = start, prev = UINT64_MAX;
	struct timespec ts;
	bool stop = false;

	while (!stop) {
		uint64_t left = bytes_left(d), now = blk_now_ms();
		int sig = __atomic_exchange_n(&final_sig, 0, __ATOMIC_RELAXED);

		if (sig) {
			blk_warn("%s during the final writeback (%d so far): carrying on, %llu bytes "
				 "left to write (SIGKILL would lose them)", strsignal(sig),
				 __atomic_load_n(&final_nsigs, __ATOMIC_RELAXED),
				 (unsigned long long)left);
		}
		/* more time only while there is progress: a stuck device still times out */
		if (left < prev)
			bf_notify("STATUS=Writing back: %llu bytes left\nEXTEND_TIMEOUT_USEC=%llu",
				  (unsigned long long)left, PROGRESS_EXTEND_US);
		else
			bf_notify("STATUS=Writing back: %llu bytes left (no progress for %llu s)",
				  (unsigned long long)left,
				  (unsigned long long)((now - start) / 1000));
		if (left < prev)
			start = now;
		prev = left;
		if (now - last_log >= PROGRESS_LOG_MS) {
			blk_info("final writeback: %llu bytes left", (unsigned long long)left);
			last_log = now;
		}

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += PROGRESS_TICK_MS / 1000;
		pthread_mutex_lock(&prog.lock);
		while (!prog.stop &&
		       pthread_cond_timedwait(&prog.cv, &prog.lock, &ts) != ETIMEDOUT)
			;
		stop = prog.stop;
		pthread_mutex_unlock(&prog.lock);
	}
	return NULL;
}

void bf_final_progress_start(struct bf_daemon *d)
{
	sigset_t all, old;

	pthread_mutex_lock(&prog.lock);
	prog.stop = false;
	pthread_mutex_unlock(&prog.lock);
	/* the signals go to the main thread, which has the handler's context */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	prog.running = !pthread_create(&prog.thread, NULL, progress_fn, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!prog.running)
		blk_warn("cannot start the progress reporter: the final writeback runs unreported");
	else
		pthread_setname_np(prog.thread, "blkfs-final");
}

void bf_final_progress_stop(void)
{
	int sig;

	if (!prog.running)
		return;
	pthread_mutex_lock(&prog.lock);
	prog.stop = true;
	pthread_cond_signal(&prog.cv);
	pthread_mutex_unlock(&prog.lock);
	pthread_join(prog.thread, NULL);
	prog.running = false;
	sig = __atomic_exchange_n(&final_sig, 0, __ATOMIC_RELAXED);
	if (sig)
		blk_warn("%s during the final writeback: it was finished first", strsignal(sig));
}
