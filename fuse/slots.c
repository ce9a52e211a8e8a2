/* SPDX-License-Identifier: MIT */
/*
 * fuse/slots.c - a device's request slots (slots.h): take, give back,
 * freeze, thaw, drain, and their counts.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>

#include "../backends/lib/clock.h"
#include "slots.h"

int bf_slots_init(struct bf_slots *s)
{
	int ret;

	*s = (struct bf_slots){ 0 };
	ret = pthread_mutex_init(&s->lock, NULL);
	if (ret)
		return -ret;
	ret = blk_cond_init(&s->cond);
	if (ret) {
		pthread_mutex_destroy(&s->lock);
		return -ret;
	}
	return 0;
}

void bf_slots_add(struct bf_slots *s, struct bf_slot *slot)
{
	pthread_mutex_lock(&s->lock);
	slot->next = s->free;
	s->free = slot;
	s->nr++;
	pthread_mutex_unlock(&s->lock);
}

void bf_slots_destroy(struct bf_slots *s)
{
	assert(!s->in_use);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
}

struct bf_slot *bf_slots_get(struct bf_slots *s)
{
	struct bf_slot *slot;

	pthread_mutex_lock(&s->lock);
	if (!s->free || s->frozen)
		s->waits++;
	while (!s->free || s->frozen) {
		s->waiters++;
		pthread_cond_wait(&s->cond, &s->lock);
		s->waiters--;
	}
	slot = s->free;
	s->free = slot->next;
	if (++s->in_use > s->peak)
		s->peak = s->in_use;
	pthread_mutex_unlock(&s->lock);
	return slot;
}

void bf_slots_put(struct bf_slots *s, struct bf_slot *slot)
{
	pthread_mutex_lock(&s->lock);
	assert(s->in_use);
	slot->next = s->free;
	s->free = slot;
	s->in_use--;
	/* a receiving thread waits for a slot, or a freeze or drain for the last one */
	if (s->waiters || !s->in_use)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int bf_slots_freeze(struct bf_slots *s, unsigned int timeout_ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	assert(!s->frozen);	/* the caller makes freezes one at a time */
	s->frozen = true;
	/* bf_slots_put() broadcasts when the last slot comes back */
	while (s->in_use && !ret)
		ret = blk_cond_wait_until(&s->cond, &s->lock, end);
	if (s->in_use) {
		s->frozen = false;
		pthread_cond_broadcast(&s->cond);
		ret = -ETIMEDOUT;
	} else {
		ret = 0;
	}
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void bf_slots_thaw(struct bf_slots *s)
{
	pthread_mutex_lock(&s->lock);
	s->frozen = false;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void bf_slots_drain(struct bf_slots *s)
{
	pthread_mutex_lock(&s->lock);
	while (s->in_use)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
}

uint32_t bf_slots_drain_ms(struct bf_slots *s, uint64_t ms)
{
	uint64_t end = blk_now_ns() + ms * 1000000u;
	uint32_t left;

	pthread_mutex_lock(&s->lock);
	while (s->in_use && blk_cond_wait_until(&s->cond, &s->lock, end) != ETIMEDOUT)
		;
	left = s->in_use;
	pthread_mutex_unlock(&s->lock);
	return left;
}

void bf_slots_stats(struct bf_slots *s, struct bf_slots_stats *st)
{
	pthread_mutex_lock(&s->lock);
	st->in_use = s->in_use;
	st->peak = s->peak;
	st->waits = s->waits;
	st->nr = s->nr;
	st->waiters = s->waiters;
	st->frozen = s->frozen;
	pthread_mutex_unlock(&s->lock);
}
