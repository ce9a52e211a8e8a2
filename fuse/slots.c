/* SPDX-License-Identifier: MIT */
/*
 * fuse/slots.c - a device's request slots (slots.h): take, give back,
 * freeze, thaw, drain, and their counts.
 *
 * Every receiving thread takes and gives back a slot per request, so the
 * two are kept off the lock: the free slots are a stack of indices whose
 * whole state is one 64-bit word, s->head (a tagged Treiber stack):
 *
 *   bits  0-13  SLOTS_TOP     the index + 1 of the top free slot, 0: none
 *   bits 14-27  SLOTS_FREE    how many slots are free (in use: nr - free)
 *   bit  28     SLOTS_FROZEN  bf_slots_freeze(): no slot is handed out
 *   bit  29     SLOTS_SLOW    someone sleeps on s->cond: give back under the lock
 *   bits 30-63  the tag, one more at every push and pop
 *
 * A pop reads the top's ->next and swaps head for (next, free - 1); the tag
 * makes the swap fail when the top went and came back in between (ABA: its
 * ->next read then may be stale). It wraps after 2^34 pushes and pops, a
 * stall no thread makes between its read of head and its swap.
 *
 * Why no wake-up is lost. Everyone who sleeps on s->cond (a taker with no
 * slot, a freeze, a drain) counts itself in s->sleepers under s->lock, and
 * the first sets SLOTS_SLOW in head (an atomic or) before it looks at head
 * again; the last clears it, under the lock too. A give-back swaps head
 * lock-free only while SLOTS_SLOW is clear in the value it swaps, and else
 * pushes under the lock and broadcasts. Both are read-modify-writes of the
 * one word, so they are ordered: either the give-back came first, and the
 * sleeper's look at head (after its own or, so at a later value) sees the
 * slot back; or it came after, saw SLOTS_SLOW, and took the lock, which the
 * sleeper holds from its count to its pthread_cond_wait(), so the broadcast
 * reaches it. No ordering between two words is needed (no Dekker pattern).
 *
 * Freeze. SLOTS_FROZEN is in the same word, so a pop and the freeze are
 * ordered too: a pop that swapped before the freeze is a slot in use,
 * which the freeze waits for; one after sees the flag and sleeps as if
 * none were free. Thaw and a timed-out freeze clear it and broadcast under
 * the lock, which every sleeping taker holds from its look to its sleep.
 *
 * Drain and the pool's end. A give-back's last touch of the pool is its
 * swap (lock-free, seen by the drain only once done) or its unlock (under
 * the lock, which the drain must take to see the slot back): once a drain
 * or freeze has seen every slot back, no give-back still reads the pool,
 * so its caller may destroy it.
 *
 * What is left on the fast path: a take is a read of head, of the top's
 * ->next and of the table, one swap, and a read of s->peak (a write only
 * when the peak rises); a give-back a write of ->next and one swap.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/plug.h"
#include "slots.h"

#define SLOTS_BITS	14
#define SLOTS_MASK	((1ull << SLOTS_BITS) - 1)
#define SLOTS_TOP(h)	((uint32_t)((h) & SLOTS_MASK))
#define SLOTS_FREE(h)	((uint32_t)(((h) >> SLOTS_BITS) & SLOTS_MASK))
#define SLOTS_FROZEN	(1ull << (2 * SLOTS_BITS))
#define SLOTS_SLOW	(1ull << (2 * SLOTS_BITS + 1))
#define SLOTS_TAG_ONE	(1ull << (2 * SLOTS_BITS + 2))
#define SLOTS_TAG_MASK	(~(SLOTS_TAG_ONE - 1))

_Static_assert(BF_SLOTS_MAX == SLOTS_MASK, "an index + 1 and a count fit SLOTS_BITS");

/* @old with @top on the stack, @free free, its flags, and the next tag. */
static uint64_t head_make(uint64_t old, uint32_t top, uint32_t free)
{
	return ((old & SLOTS_TAG_MASK) + SLOTS_TAG_ONE) | (old & (SLOTS_FROZEN | SLOTS_SLOW)) |
	       (uint64_t)free << SLOTS_BITS | top;
}

static uint32_t in_use_of(const struct bf_slots *s, uint64_t h)
{
	return s->nr - SLOTS_FREE(h);
}

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

/*
 * Push @slot: lock-free while nobody sleeps on s->cond (SLOTS_SLOW clear),
 * returning true; false, with nothing done, when someone does. @locked: the
 * caller holds s->lock, and pushes whatever the flag says.
 */
static bool push(struct bf_slots *s, struct bf_slot *slot, bool locked)
{
	uint64_t old = __atomic_load_n(&s->head, __ATOMIC_RELAXED), new;

	do {
		if ((old & SLOTS_SLOW) && !locked)
			return false;
		assert(SLOTS_FREE(old) < s->nr);	/* a slot given back twice */
		/* read by a pop that acquires the head this swap releases */
		__atomic_store_n(&slot->next, SLOTS_TOP(old), __ATOMIC_RELAXED);
		new = head_make(old, slot->idx + 1, SLOTS_FREE(old) + 1);
	} while (!__atomic_compare_exchange_n(&s->head, &old, new, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
	return true;
}

/* Pop a free slot, or NULL when none is free or the pool is frozen. */
static struct bf_slot *pop(struct bf_slots *s)
{
	uint64_t old = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE), new;
	struct bf_slot *slot;
	uint32_t in_use, peak;

	do {
		if ((old & SLOTS_FROZEN) || !SLOTS_TOP(old))
			return NULL;
		slot = s->tab[SLOTS_TOP(old) - 1];
		/*
		 * Stale when the top was taken since head was read: then head
		 * has another tag and the swap fails.
		 */
		new = head_make(old, __atomic_load_n(&slot->next, __ATOMIC_RELAXED),
				SLOTS_FREE(old) - 1);
	} while (!__atomic_compare_exchange_n(&s->head, &old, new, true, __ATOMIC_ACQUIRE,
					      __ATOMIC_ACQUIRE));

	/* each count in use was some pop's, which raises the peak to it */
	in_use = in_use_of(s, new);
	peak = __atomic_load_n(&s->peak, __ATOMIC_RELAXED);
	while (in_use > peak && !__atomic_compare_exchange_n(&s->peak, &peak, in_use, true,
							     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	return slot;
}

int bf_slots_add(struct bf_slots *s, struct bf_slot *slot)
{
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	if (s->nr == BF_SLOTS_MAX) {
		ret = -ENOSPC;
		goto out_unlock;
	}
	if (s->nr == s->cap) {
		uint32_t cap = s->cap ? 2 * s->cap : 16;
		struct bf_slot **tab = realloc(s->tab, cap * sizeof(*tab));

		if (!tab) {
			ret = -ENOMEM;
			goto out_unlock;
		}
		s->tab = tab;
		s->cap = cap;
	}
	slot->idx = s->nr;
	s->tab[s->nr++] = slot;
	push(s, slot, true);
out_unlock:
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void bf_slots_destroy(struct bf_slots *s)
{
	assert(!in_use_of(s, __atomic_load_n(&s->head, __ATOMIC_ACQUIRE)));
	assert(!s->sleepers);
	free(s->tab);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
}

/* Caller holds s->lock: one more thread about to sleep on s->cond. */
static void sleep_begin_locked(struct bf_slots *s)
{
	/* before its look at head: see the comment at the top */
	if (!s->sleepers++)
		__atomic_fetch_or(&s->head, SLOTS_SLOW, __ATOMIC_ACQ_REL);
}

static void sleep_end_locked(struct bf_slots *s)
{
	if (!--s->sleepers)
		__atomic_fetch_and(&s->head, ~SLOTS_SLOW, __ATOMIC_ACQ_REL);
}

/* Caller holds s->lock: the slots in use, as a sleeper sees them. */
static uint32_t in_use_locked(struct bf_slots *s)
{
	return in_use_of(s, __atomic_load_n(&s->head, __ATOMIC_ACQUIRE));
}

static void set_frozen_locked(struct bf_slots *s, bool frozen)
{
	if (frozen)
		__atomic_fetch_or(&s->head, SLOTS_FROZEN, __ATOMIC_ACQ_REL);
	else
		__atomic_fetch_and(&s->head, ~SLOTS_FROZEN, __ATOMIC_ACQ_REL);
}

struct bf_slot *bf_slots_get(struct bf_slots *s, bool *waited)
{
	struct bf_slot *slot = pop(s);

	if (waited)
		*waited = !slot;
	if (slot)
		return slot;

	/*
	 * A slot frees when a request of the device is answered, maybe one
	 * whose I/O this thread's plug holds back (a ring queue thread's
	 * batch): send it before sleeping.
	 */
	blk_plug_flush();
	pthread_mutex_lock(&s->lock);
	sleep_begin_locked(s);
	slot = pop(s);
	if (!slot) {
		s->waits++;
		s->waiters++;
		do
			pthread_cond_wait(&s->cond, &s->lock);
		while (!(slot = pop(s)));
		s->waiters--;
	}
	sleep_end_locked(s);
	pthread_mutex_unlock(&s->lock);
	return slot;
}

void bf_slots_put(struct bf_slots *s, struct bf_slot *slot)
{
	if (push(s, slot, false))
		return;

	/* a taker waits for a slot, or a freeze or drain for the last one */
	pthread_mutex_lock(&s->lock);
	push(s, slot, true);
	if (s->sleepers)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

int bf_slots_freeze(struct bf_slots *s, unsigned int timeout_ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	/* the caller makes freezes one at a time */
	assert(!(__atomic_load_n(&s->head, __ATOMIC_RELAXED) & SLOTS_FROZEN));
	set_frozen_locked(s, true);
	sleep_begin_locked(s);
	/* bf_slots_put() broadcasts when it sees SLOTS_SLOW */
	while (in_use_locked(s) && !ret)
		ret = blk_cond_wait_until(&s->cond, &s->lock, end);
	if (in_use_locked(s)) {
		set_frozen_locked(s, false);
		pthread_cond_broadcast(&s->cond);
		ret = -ETIMEDOUT;
	} else {
		ret = 0;
	}
	sleep_end_locked(s);
	pthread_mutex_unlock(&s->lock);
	return ret;
}

void bf_slots_thaw(struct bf_slots *s)
{
	pthread_mutex_lock(&s->lock);
	set_frozen_locked(s, false);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void bf_slots_drain(struct bf_slots *s)
{
	pthread_mutex_lock(&s->lock);
	sleep_begin_locked(s);
	while (in_use_locked(s))
		pthread_cond_wait(&s->cond, &s->lock);
	sleep_end_locked(s);
	pthread_mutex_unlock(&s->lock);
}

uint32_t bf_slots_drain_ms(struct bf_slots *s, uint64_t ms)
{
	uint64_t end = blk_now_ns() + ms * 1000000u;
	uint32_t left;

	pthread_mutex_lock(&s->lock);
	sleep_begin_locked(s);
	while (in_use_locked(s) && blk_cond_wait_until(&s->cond, &s->lock, end) != ETIMEDOUT)
		;
	left = in_use_locked(s);
	sleep_end_locked(s);
	pthread_mutex_unlock(&s->lock);
	return left;
}

void bf_slots_stats(struct bf_slots *s, struct bf_slots_stats *st)
{
	uint64_t h;

	pthread_mutex_lock(&s->lock);
	h = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
	st->in_use = in_use_of(s, h);
	st->frozen = h & SLOTS_FROZEN;
	st->peak = __atomic_load_n(&s->peak, __ATOMIC_RELAXED);
	st->waits = s->waits;
	st->nr = s->nr;
	st->waiters = s->waiters;
	pthread_mutex_unlock(&s->lock);
}
