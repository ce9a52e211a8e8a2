/* SPDX-License-Identifier: MIT */
/*
 * fuse/slots.h - a device's request slots: a pool of [mount] max_pending
 * entries, the block layer's tags. A request takes one when it is received
 * and gives it back when it is answered; all taken, the receiving thread
 * waits for one (rule R5 in core/THREADS.md: the one wait a receiving
 * thread may do). A freeze holds new requests the same way and waits for
 * those in flight (a live resize, snapshot or reset); drain waits for the
 * last one (unmount).
 *
 * Pure: no libfuse, no device, no cache (tests/unit/test_slots.c links it
 * alone). The entries are the caller's: each embeds a struct bf_slot and is
 * handed to the pool once, at set-up (bf_slots_add()).
 *
 * Lock: s->lock, a leaf (taken last, never across a reply or backend I/O).
 * Taking and giving back a slot take no lock while a slot is free, the
 * pool is not frozen and nobody waits: each is one compare-and-swap on
 * s->head (fuse/slots.c says why no wake-up is lost). The lock is the slow
 * path's: waiting for a slot, freeze, thaw, drain, and the counts.
 */
#ifndef BLKFS_FUSE_SLOTS_H
#define BLKFS_FUSE_SLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* The most entries a pool holds: an index fits s->head's 14 bits. */
#define BF_SLOTS_MAX 16383u

struct bf_slot {
	uint32_t next;			/* atomic: the index + 1 of the next free slot below it, 0: none */
	uint32_t idx;			/* its number in the pool: fixed after set-up */
};

struct bf_slots {
	/*
	 * atomic: the free slots' stack, its count and two flags, changed by
	 * atomic read-modify-writes only (fuse/slots.c: SLOTS_*): the index +
	 * 1 of the top free slot, how many are free, frozen, someone sleeps on
	 * cond, and a tag that changes with every push and pop (no ABA).
	 */
	uint64_t head;
	uint32_t peak;			/* atomic: the most ever in use at once */
	uint32_t nr;			/* entries added: fixed after set-up */
	struct bf_slot **tab;		/* entry by index: fixed after set-up */
	uint32_t cap;			/* tab's size: set-up only */
	uint32_t sleepers;		/* lock: threads waiting on cond (takers, freeze, drain); not 0: SLOTS_SLOW */
	uint32_t waiters;		/* lock: threads waiting in bf_slots_get() */
	uint64_t waits;			/* lock: bf_slots_get() calls that had to wait */
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* blk_cond_init: a slot came back, or the freeze ended */
};

struct bf_slots_stats {
	uint64_t in_use, peak, waits, nr, waiters;
	bool frozen;
};

/* An empty pool (its lock and condition variable made): 0 or -errno. */
int bf_slots_init(struct bf_slots *s);
/*
 * At set-up, before any bf_slots_get(): @slot is one more entry of the pool.
 * Returns 0, -ENOMEM (the table of entries could not grow) or -ENOSPC (more
 * than BF_SLOTS_MAX entries), and then @slot is not in the pool.
 */
int bf_slots_add(struct bf_slots *s, struct bf_slot *slot);
/* Every slot back (asserted): the table, the lock and condition variable go. */
void bf_slots_destroy(struct bf_slots *s);
/*
 * A free slot, waiting while none is free or the pool is frozen. @waited
 * (may be NULL) is set true when the slot was not taken at the first look
 * (none free, or frozen): the caller may have flushed its plug and slept,
 * so time read before the call is not the request's own (issue 39: the
 * FUSE level's start shared with the device level's only when false).
 */
struct bf_slot *bf_slots_get(struct bf_slots *s, bool *waited);
/* @slot is free again: wakes a waiter of bf_slots_get(), or a freeze or drain when it is the last. */
void bf_slots_put(struct bf_slots *s, struct bf_slot *slot);
/*
 * bf_slots_freeze - hold new requests (bf_slots_get() waits, as when all are
 * taken) and wait until those in flight are back, at most @timeout_ms.
 * One freeze at a time (the caller serialises them). Returns 0 (frozen:
 * call bf_slots_thaw()) or -ETIMEDOUT (not frozen, waiters released).
 */
int bf_slots_freeze(struct bf_slots *s, unsigned int timeout_ms);
void bf_slots_thaw(struct bf_slots *s);
/* Wait until no slot is in use. */
void bf_slots_drain(struct bf_slots *s);
/* Wait up to @ms for no slot to be in use; returns those still in use. */
uint32_t bf_slots_drain_ms(struct bf_slots *s, uint64_t ms);
void bf_slots_stats(struct bf_slots *s, struct bf_slots_stats *st);

#endif
