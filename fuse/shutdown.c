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
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "bf.h"
#include "devtab.h"
#include "notify.h"
#include "shutdown.h"
#include "slots.h"

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
	pthread_cond_t cv;			/* blk_cond_init (prog_cv_init): waited on with a timeout */
	bool stop;				/* lock */
	pthread_t thread;
	bool running;
} prog = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t prog_once = PTHREAD_ONCE_INIT;
static int prog_cv_ret;

static void prog_cv_init(void)
{
	prog_cv_ret = blk_cond_init(&prog.cv);
}

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
	uint64_t start = blk_now_ms(), last_log = start, prev = UINT64_MAX, tick_end;
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

		tick_end = blk_now_ns() + PROGRESS_TICK_MS * 1000000ull;
		pthread_mutex_lock(&prog.lock);
		while (!prog.stop && blk_cond_wait_until(&prog.cv, &prog.lock, tick_end) != ETIMEDOUT)
			;
		stop = prog.stop;
		pthread_mutex_unlock(&prog.lock);
	}
	return NULL;
}

void bf_final_progress_start(struct bf_daemon *d)
{
	sigset_t all, old;

	pthread_once(&prog_once, prog_cv_init);
	if (prog_cv_ret) {
		blk_warn("cannot start the progress reporter: %s: the final writeback runs "
			 "unreported", strerror(prog_cv_ret));
		return;
	}
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

/*
 * The final writeback, bounded. Each device gets a thread that waits for
 * its requests in flight and then writes its cache back (pc_dev_sync_final):
 * a device that hangs holds up no other, and the daemon can stop waiting
 * for it. Progress is a request answered, a backend I/O ended, a byte less
 * to write: a slow device that is still writing is waited for, however
 * long; one that makes none for [mount] shutdown_timeout is dealt with:
 *  - waiting for its requests with writeback in flight all that time (a
 *    hung write, which its final writeback would wait for too): given up
 *    on;
 *  - waiting for its requests without (they wait for a hung read, say):
 *    its final writeback starts anyway, with the timeout afresh, and the
 *    requests are counted as not answered;
 *  - in its final writeback: given up on.
 * A device given up on has its thread left where it waits, and nothing its
 * I/O may still reach is ever freed: this state, the cache, the devices,
 * the session (the daemon exits).
 */
enum { FIN_DRAIN, FIN_WRITEBACK, FIN_DONE };

struct fin_mark {
	uint64_t ios, left, wb, reqs, in_flight;
};

struct fin_dev {
	struct bf_final *fin;
	struct bf_dev *bd;
	pthread_t thread;
	bool threaded;
	int phase;			/* fin->lock */
	bool abandoned;			/* fin->lock: given up on */
	bool skip_drain;		/* fin->lock: start the writeback without the requests */
	int err;			/* once FIN_DONE: pc_dev_sync_final's */
	uint64_t lost;			/* once FIN_DONE, or when abandoned */
	uint64_t unanswered;		/* fin->lock: requests in flight when given up on */
	uint64_t deadline_ms;		/* atomic: given up on if no progress by then; 0: never */
	struct fin_mark mark;		/* the waiter's: the last progress seen */
};

struct bf_final {
	struct bf_daemon *d;
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* blk_cond_init: waited on with a timeout */
	uint64_t timeout_ms;
	uint64_t start_ms;
	int n;
	struct fin_dev dev[];
};

#define FIN_ATTEMPTS 5
#define FIN_TICK_MS 100

/* One tick's wait on @cv, made by blk_cond_init (CLOCK_MONOTONIC). */
static void fin_timedwait(pthread_cond_t *cv, pthread_mutex_t *lock, long ms)
{
	blk_cond_wait_ms(cv, lock, (uint64_t)ms);
}

static void fin_set_phase(struct fin_dev *fd, int phase)
{
	pthread_mutex_lock(&fd->fin->lock);
	fd->phase = phase;
	pthread_cond_broadcast(&fd->fin->cv);
	pthread_mutex_unlock(&fd->fin->lock);
}

/* Wait until every request of every device has been answered (unmount, exit). */
static void bf_drain(struct bf_daemon *d)
{
	int i;

	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct bf_dev *bd = d->devs[i];

		if (bd && bd->reqs)
			bf_slots_drain(&bd->slots);
	}
}

/* Wait for @fd's requests in flight, or until the waiter says to go on. */
static void fin_drain(struct fin_dev *fd)
{
	struct bf_dev *bd = fd->bd;
	uint32_t left;

	if (!bd->reqs)
		return;
	for (;;) {
		bool skip;

		left = bf_slots_drain_ms(&bd->slots, FIN_TICK_MS);
		if (!left)
			return;
		pthread_mutex_lock(&fd->fin->lock);
		skip = fd->skip_drain;
		pthread_mutex_unlock(&fd->fin->lock);
		if (skip)
			break;
	}
	pthread_mutex_lock(&fd->fin->lock);
	fd->unanswered = left;
	pthread_mutex_unlock(&fd->fin->lock);
	blk_warn("%s: %u request%s still unanswered after shutdown_timeout without progress; "
		 "writing back what is cached", bd->cd->name, left, left == 1 ? "" : "s");
}

static void fin_run(struct fin_dev *fd)
{
	uint64_t lost = 0;
	int err;

	fin_drain(fd);
	fin_set_phase(fd, FIN_WRITEBACK);
	err = pc_dev_sync_final(fd->bd->pc, FIN_ATTEMPTS, &fd->deadline_ms, &lost);
	pthread_mutex_lock(&fd->fin->lock);
	fd->err = err;
	fd->lost = lost;
	fd->phase = FIN_DONE;
	pthread_cond_broadcast(&fd->fin->cv);
	pthread_mutex_unlock(&fd->fin->lock);
}

static void *fin_thread(void *arg)
{
	fin_run(arg);
	return NULL;
}

/* @bd's progress now: a change in any field from the last look is progress. */
static void dev_mark(struct bf_dev *bd, struct fin_mark *m)
{
	struct bf_slots_stats ss;
	struct pc_stats st;

	pc_dev_stats(bd->pc, &st);
	m->ios = st.backend_read_ios + st.backend_write_ios + st.backend_flushes +
		 st.backend_discards + st.writeback_errors + st.read_errors;
	m->left = st.dirty_bytes + st.writeback_bytes;
	m->wb = st.writeback_bytes;
	m->in_flight = st.in_flight;
	m->reqs = 0;
	if (bd->reqs) {
		bf_slots_stats(&bd->slots, &ss);
		m->reqs = ss.in_use;
	}
}

static void fin_mark(struct fin_dev *fd, struct fin_mark *m)
{
	dev_mark(fd->bd, m);
}

/*
 * Control commands still running when the loop ends (a remove writes its
 * device back, a resize or snapshot too): waited for like a device's final
 * writeback, by the same measure. The marks of every device in the table
 * (the commands' devices among them: which one a command works on is its
 * own business) are taken each tick; any change is progress and gives the
 * whole timeout again. A device that comes or goes is a change too.
 */
struct cmd_marks {
	uint64_t ino[PC_MAX_DEVS];
	struct fin_mark m[PC_MAX_DEVS];
};

static void cmd_marks(struct bf_daemon *d, struct cmd_marks *cm)
{
	int i;

	memset(cm, 0, sizeof(*cm));
	/* shared: a remove unpublishes under it exclusive, and frees only after */
	pthread_rwlock_rdlock(&d->dev_lock);
	for (i = 0; i < PC_MAX_DEVS; i++) {
		if (!d->devs[i] || !d->devs[i]->pc)
			continue;
		cm->ino[i] = d->devs[i]->ino;
		dev_mark(d->devs[i], &cm->m[i]);
	}
	pthread_rwlock_unlock(&d->dev_lock);
}

bool bf_final_wait_busy(struct bf_daemon *d, bool (*busy)(void *), void *arg,
			pthread_mutex_t *lock, pthread_cond_t *cv)
{
	uint64_t timeout_ms = d->conf.mount.shutdown_timeout_ms, deadline;
	struct cmd_marks *prev, *now;
	bool ret = false;

	prev = malloc(2 * sizeof(*prev));
	now = prev ? prev + 1 : NULL;
	if (prev)
		cmd_marks(d, prev);
	else
		blk_warn("no memory to measure the control commands' progress: waiting for them unbounded");
	deadline = blk_now_ms() + timeout_ms;
	for (;;) {
		bool b;
		uint64_t t;

		pthread_mutex_lock(lock);
		if (busy(arg))
			fin_timedwait(cv, lock, FIN_TICK_MS);
		b = busy(arg);
		pthread_mutex_unlock(lock);
		if (!b) {
			ret = true;
			break;
		}
		if (!timeout_ms || !prev)
			continue;
		t = blk_now_ms();
		cmd_marks(d, now);
		if (memcmp(now, prev, sizeof(*now))) {
			*prev = *now;
			deadline = t + timeout_ms;
		} else if (t >= deadline) {
			break;
		}
	}
	free(prev);
	return ret;
}

static void fin_report_abandoned(struct bf_final *f, struct fin_dev *fd,
				 const struct fin_mark *m, const char *where);

struct bf_final *bf_final_begin(struct bf_daemon *d)
{
	struct bf_final *f;
	sigset_t all, old;
	int i;

	f = calloc(1, sizeof(*f) + (size_t)d->nr_devs * sizeof(f->dev[0]));
	if (!f) {
		blk_warn("no memory for the bounded final writeback: it runs unbounded");
		return NULL;
	}
	f->d = d;
	f->n = d->nr_devs;
	f->timeout_ms = d->conf.mount.shutdown_timeout_ms;
	f->start_ms = blk_now_ms();
	pthread_mutex_init(&f->lock, NULL);
	if (blk_cond_init(&f->cv)) {
		pthread_mutex_destroy(&f->lock);
		free(f);
		blk_warn("no condition variable for the bounded final writeback: it runs unbounded");
		return NULL;
	}
	/* the signals stay with the main thread */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < f->n; i++) {
		struct fin_dev *fd = &f->dev[i];

		fd->fin = f;
		fd->bd = bf_dev_nth(d, i);
		fd->phase = FIN_DRAIN;
		fin_mark(fd, &fd->mark);
		/*
		 * A command given up on (bf_final_wait_busy) still holds its
		 * device's ctl_lock and waits on its hung I/O: the device is
		 * given up on with it, at once (the timeout has passed), and
		 * nothing here waits for that lock.
		 */
		if (d->ctl_given_up && bf_dev_ctl_held(fd->bd)) {
			/* no thread runs for @fd and nobody waits yet: no lock needed */
			fd->abandoned = true;
			fd->lost = fd->mark.left;
			fd->unanswered = fd->mark.reqs;
			fin_report_abandoned(f, fd, &fd->mark, "in a control command (remove, "
					     "resize, snapshot...) still running at unmount");
			continue;
		}
		/*
		 * The ring already waited the timeout for requests in hand
		 * (d->abandoned): a device's requests get a second only to
		 * show progress, not the whole timeout again.
		 */
		if (f->timeout_ms)
			fd->deadline_ms = f->start_ms + (d->abandoned && f->timeout_ms > 1000 ?
							 1000 : f->timeout_ms);
		fd->threaded = !pthread_create(&fd->thread, NULL, fin_thread, fd);
		if (fd->threaded) {
			char name[16];

			snprintf(name, sizeof(name), "blkfs-fin%u", (unsigned)i % 1000);
			pthread_setname_np(fd->thread, name);
		} else {
			blk_warn("%s: cannot start its final writeback thread: it runs unbounded",
				 fd->bd->cd->name);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* a device without a thread runs in this one, with no bound */
	for (i = 0; i < f->n; i++)
		if (!f->dev[i].threaded && !f->dev[i].abandoned)
			fin_run(&f->dev[i]);
	return f;
}

/*
 * Give up on @fd: what it had not written and the requests it had not
 * answered. @where: what it was doing (NULL: its phase says).
 */
static void fin_abandon(struct bf_final *f, struct fin_dev *fd, const struct fin_mark *m,
			const char *where)
{
	pthread_mutex_lock(&f->lock);
	if (fd->phase == FIN_DONE) {
		/* it finished after all, as the waiter looked */
		pthread_mutex_unlock(&f->lock);
		return;
	}
	fd->abandoned = true;
	fd->lost = m->left;
	fd->unanswered = m->reqs;
	pthread_mutex_unlock(&f->lock);
	fin_report_abandoned(f, fd, m, where);
}

/* The log line of a device given up on. */
static void fin_report_abandoned(struct bf_final *f, struct fin_dev *fd,
				 const struct fin_mark *m, const char *where)
{
	char t[32];

	blk_format_duration(t, sizeof(t), f->timeout_ms * 1000000ull);
	blk_err("%s: a hung I/O was abandoned: no progress for %s (shutdown_timeout) %s; "
		"%llu bytes of dirty data not written back are lost, %llu request%s not answered, "
		"%llu backend I/O%s still in flight",
		fd->bd->cd->name, t, where ? where :
		fd->phase == FIN_DRAIN ? "waiting for its requests in flight" :
					 "in its final writeback",
		(unsigned long long)m->left, (unsigned long long)m->reqs,
		m->reqs == 1 ? " was" : "s were",
		(unsigned long long)m->in_flight, m->in_flight == 1 ? " is" : "s are");
}

/* @fd made no progress for the timeout: the rules at the top of this part. */
static void fin_stalled(struct bf_final *f, struct fin_dev *fd, const struct fin_mark *m,
			uint64_t now)
{
	bool drain;

	pthread_mutex_lock(&f->lock);
	drain = fd->phase == FIN_DRAIN && !fd->skip_drain;
	if (drain && !m->wb) {
		fd->skip_drain = true;
		__atomic_store_n(&fd->deadline_ms, now + f->timeout_ms, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&f->lock);
	if (!drain || m->wb)
		fin_abandon(f, fd, m, NULL);
}

/*
 * Wait until every device not given up on has reached @phase; deal with
 * those that make no progress for the timeout. Returns true when every
 * device's requests were answered and none was given up on.
 */
static bool fin_wait(struct bf_final *f, int phase)
{
	bool none_abandoned = true;

	for (;;) {
		bool pending = false;
		uint64_t now;
		int i;

		pthread_mutex_lock(&f->lock);
		for (i = 0; i < f->n; i++)
			if (!f->dev[i].abandoned && f->dev[i].phase < phase)
				pending = true;
		if (pending)
			fin_timedwait(&f->cv, &f->lock, FIN_TICK_MS);
		pthread_mutex_unlock(&f->lock);
		if (!pending)
			break;
		now = blk_now_ms();
		for (i = 0; i < f->n; i++) {
			struct fin_dev *fd = &f->dev[i];
			struct fin_mark m;
			bool waiting;

			pthread_mutex_lock(&f->lock);
			waiting = !fd->abandoned && fd->phase < FIN_DONE;
			pthread_mutex_unlock(&f->lock);
			if (!waiting || !f->timeout_ms)
				continue;
			fin_mark(fd, &m);
			if (memcmp(&m, &fd->mark, sizeof(m))) {
				/* progress: the device has the whole timeout again */
				fd->mark = m;
				__atomic_store_n(&fd->deadline_ms, now + f->timeout_ms, __ATOMIC_RELEASE);
			} else if (now >= __atomic_load_n(&fd->deadline_ms, __ATOMIC_ACQUIRE)) {
				fin_stalled(f, fd, &m, now);
			}
		}
	}
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < f->n; i++)
		if (f->dev[i].abandoned || f->dev[i].skip_drain)
			none_abandoned = false;
	pthread_mutex_unlock(&f->lock);
	return none_abandoned;
}

bool bf_final_wait_drained(struct bf_daemon *d, struct bf_final *f)
{
	if (!f) {
		bf_drain(d);
		return true;
	}
	return fin_wait(f, FIN_WRITEBACK);
}

/* Without memory for the bounded form: each device in turn, unbounded. */
static void fin_unbounded(struct bf_daemon *d, struct bf_final *f)
{
	int i;

	for (i = 0; i < d->nr_devs; i++) {
		struct fin_dev *fd = &f->dev[i];

		fd->fin = f;
		fd->bd = bf_dev_nth(d, i);
		fd->err = pc_dev_sync_final(fd->bd->pc, FIN_ATTEMPTS, NULL, &fd->lost);
		fd->phase = FIN_DONE;
	}
}

int bf_final_end(struct bf_daemon *d, struct bf_final *f, char *status, size_t statuslen)
{
	size_t used = 0;
	int code = 0, i;
	char t[32];

	if (!f) {
		f = calloc(1, sizeof(*f) + (size_t)d->nr_devs * sizeof(f->dev[0]));
		if (!f) {
			blk_err("no memory for the final writeback's results");
			return 1;
		}
		if (blk_cond_init(&f->cv)) {
			free(f);
			blk_err("no memory for the final writeback's results");
			return 1;
		}
		pthread_mutex_init(&f->lock, NULL);
		f->d = d;
		f->n = d->nr_devs;
		fin_unbounded(d, f);
	}
	/* a request or thread given up on may still reach what exit would free */
	if (!fin_wait(f, FIN_DONE))
		d->abandoned = true;
	blk_format_duration(t, sizeof(t), f->timeout_ms * 1000000ull);
	for (i = 0; i < f->n; i++) {
		struct fin_dev *fd = &f->dev[i];
		const char *name = fd->bd->cd->name;
		struct pc_stats st;
		int n;

		pthread_mutex_lock(&f->lock);
		if (fd->abandoned) {
			code = 1;
			n = snprintf(status + used, statuslen - used,
				     "lost %s %llu a hung I/O was abandoned after %s without progress "
				     "(shutdown_timeout); %llu request%s not answered\n", name,
				     (unsigned long long)fd->lost, t, (unsigned long long)fd->unanswered,
				     fd->unanswered == 1 ? " was" : "s were");
		} else if (fd->err || fd->lost) {
			code = 1;
			blk_err("%s: %llu bytes could not be written back: %s", name,
				(unsigned long long)fd->lost, strerror(fd->err ? -fd->err : EIO));
			n = snprintf(status + used, statuslen - used, "lost %s %llu %s%s\n", name,
				     (unsigned long long)fd->lost, strerror(fd->err ? -fd->err : EIO),
				     fd->unanswered ? "; requests hung and were not answered" : "");
		} else if (fd->unanswered) {
			/* its data is written; what the hung requests carried is not */
			code = 1;
			n = snprintf(status + used, statuslen - used,
				     "lost %s 0 %llu hung request%s not answered after %s without "
				     "progress (shutdown_timeout); the cached data was written back\n",
				     name, (unsigned long long)fd->unanswered,
				     fd->unanswered == 1 ? " was" : "s were", t);
		} else {
			pc_dev_stats(fd->bd->pc, &st);
			n = snprintf(status + used, statuslen - used, "ok %s %llu\n", name,
				     (unsigned long long)st.backend_write_bytes);
		}
		pthread_mutex_unlock(&f->lock);
		if (n > 0)
			used += (size_t)n;
		if (used >= statuslen)
			used = statuslen - 1;
	}
	if (d->abandoned) {
		/* threads still wait on hung I/O and read this: it stays */
		blk_err("gave up on a hung I/O: exiting without freeing what it may still reach");
		return code;
	}
	for (i = 0; i < f->n; i++)
		if (f->dev[i].threaded)
			pthread_join(f->dev[i].thread, NULL);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cv);
	free(f);
	return code;
}
