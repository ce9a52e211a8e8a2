// SPDX-License-Identifier: MIT
/*
 * backends/kit/timerq.c - a timer queue (timerq.h): a min-heap of due
 * times and the thread that fires them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/clock.h"
#include "timerq.h"

static bool timer_before(const struct be_timer *a, const struct be_timer *b)
{
	return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_swap(struct be_timer **h, size_t a, size_t b)
{
	struct be_timer *t = h[a];

	h[a] = h[b];
	h[b] = t;
}

static struct be_timer *timerq_pop_locked(struct be_timerq *q)
{
	struct be_timer *top = q->heap[0];
	size_t i = 0, n = --q->nr;

	q->heap[0] = q->heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < n && timer_before(q->heap[l], q->heap[m]))
			m = l;
		if (r < n && timer_before(q->heap[r], q->heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(q->heap, i, m);
		i = m;
	}
	return top;
}

static void *timerq_main(void *arg)
{
	struct be_timerq *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct be_timer *t;

		if (!q->nr) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->cv, &q->lock);
			continue;
		}
		/* Stopping fires everything now: nobody waits for the time. */
		if (!q->stop && q->heap[0]->due_ns > blk_now_ns()) {
			blk_cond_wait_until(&q->cv, &q->lock, q->heap[0]->due_ns);
			continue;
		}
		t = timerq_pop_locked(q);
		pthread_mutex_unlock(&q->lock);
		t->fire(t);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int be_timerq_init(struct be_timerq *q, size_t cap)
{
	int ret;

	memset(q, 0, sizeof(*q));
	q->cap = cap ? cap : 1;
	q->heap = calloc(q->cap, sizeof(*q->heap));
	if (!q->heap)
		return -ENOMEM;
	ret = -pthread_mutex_init(&q->lock, NULL);
	if (ret)
		goto out_free;
	/* Due times are CLOCK_MONOTONIC: a wall-clock jump must not stall I/O. */
	ret = -blk_cond_init(&q->cv);
	if (ret)
		goto out_destroy_lock;
	ret = -pthread_create(&q->thread, NULL, timerq_main, q);
	if (ret)
		goto out_destroy_cv;
	return 0;

out_destroy_cv:
	pthread_cond_destroy(&q->cv);
out_destroy_lock:
	pthread_mutex_destroy(&q->lock);
out_free:
	free(q->heap);
	q->heap = NULL;
	return ret;
}

int be_timerq_add(struct be_timerq *q, struct be_timer *t, uint64_t due_ns)
{
	size_t i;

	t->due_ns = due_ns;
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		t->fire(t);
		return 0;
	}
	if (q->nr == q->cap) {
		size_t cap = 2 * q->cap;
		struct be_timer **h = realloc(q->heap, cap * sizeof(*h));

		if (!h) {
			pthread_mutex_unlock(&q->lock);
			return -ENOMEM;
		}
		q->heap = h;
		q->cap = cap;
		q->nr_grows++;
	}
	t->seq = q->seq++;
	i = q->nr++;
	q->heap[i] = t;
	while (i && timer_before(q->heap[i], q->heap[(i - 1) / 2])) {
		heap_swap(q->heap, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	/* Only a new earliest due time changes what the thread waits for. */
	if (q->heap[0] == t)
		pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

size_t be_timerq_len(struct be_timerq *q)
{
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->nr;
	pthread_mutex_unlock(&q->lock);
	return n;
}

uint64_t be_timerq_grows(struct be_timerq *q)
{
	uint64_t n;

	pthread_mutex_lock(&q->lock);
	n = q->nr_grows;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void be_timerq_stop(struct be_timerq *q)
{
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
}

void be_timerq_destroy(struct be_timerq *q)
{
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->lock);
	free(q->heap);
	q->heap = NULL;
}
