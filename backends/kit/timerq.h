/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/timerq.h - the timer queue of the filters that hold I/O
 * until a time (delay, throttle).
 */
#ifndef BLKFS_KIT_TIMERQ_H
#define BLKFS_KIT_TIMERQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * A timer queue: a min-heap of due times and one thread that calls each
 * timer's fire() once it is due, with no lock held (fire may submit,
 * complete or add again). The heap is sized at init and grows past it only
 * when more are queued (counted in nr_grows). Ties fire in the order added.
 *
 * Lock: q->lock covers the heap and stop; fire() runs without it.
 */
struct be_timer {
	uint64_t due_ns;		/* CLOCK_MONOTONIC */
	uint64_t seq;
	void (*fire)(struct be_timer *t);
};

struct be_timerq {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* to the thread: new earliest, or stop */
	struct be_timer **heap;		/* lock */
	size_t nr, cap;			/* lock */
	uint64_t seq;			/* lock */
	bool stop;			/* lock: fire everything now, then exit */
	uint64_t nr_grows;		/* lock */
};

/* Sized for @cap timers; starts the thread. 0 or -errno. */
int be_timerq_init(struct be_timerq *q, size_t cap);
/*
 * Fire @t at @due_ns (at once, from the thread, when it is past). Once the
 * queue is stopping, @t fires now in the caller's thread. 0, or -ENOMEM
 * when the heap had to grow and could not (@t is not queued).
 */
int be_timerq_add(struct be_timerq *q, struct be_timer *t, uint64_t due_ns);
size_t be_timerq_len(struct be_timerq *q);
/* How often the heap grew past its size at init (an allocation on the I/O path). */
uint64_t be_timerq_grows(struct be_timerq *q);
/* Fire everything queued now (nobody waits for the time any more) and join the thread. */
void be_timerq_stop(struct be_timerq *q);
/* After stop. */
void be_timerq_destroy(struct be_timerq *q);

#endif
