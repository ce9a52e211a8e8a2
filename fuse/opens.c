/* SPDX-License-Identifier: MIT */
/*
 * fuse/opens.c - the OPEN requests in flight (opens.h).
 */
#include <linux/fuse.h>
#include <pthread.h>
#include <stdlib.h>

#include "opens.h"

#define OPENS_FIRST 64

static pthread_mutex_t opens_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t opens_fixed[OPENS_FIRST];	/* opens_lock; 0 = empty */
static uint64_t *opens = opens_fixed;		/* opens_lock: the table */
static size_t opens_cap = OPENS_FIRST;		/* opens_lock */
static size_t opens_next;			/* opens_lock: where the next search starts */
static uint64_t opens_used;			/* opens_lock, read atomically */
static uint64_t opens_overwritten;		/* atomic */

/* Twice the room, the entries kept; false without memory. opens_lock held. */
static bool opens_grow_locked(void)
{
	size_t cap = opens_cap * 2;
	uint64_t *t = calloc(cap, sizeof(*t));
	size_t i;

	if (!t)
		return false;
	for (i = 0; i < opens_cap; i++)
		t[i] = opens[i];
	if (opens != opens_fixed)
		free(opens);
	opens_next = opens_cap;
	opens = t;
	opens_cap = cap;
	return true;
}

void bf_opens_note(uint32_t opcode, uint64_t unique)
{
	size_t i;

	if (opcode != FUSE_OPEN)
		return;
	pthread_mutex_lock(&opens_lock);
	if (opens_used == opens_cap && !opens_grow_locked()) {
		/* no memory: the oldest slot's open loses the flag, counted */
		__atomic_add_fetch(&opens_overwritten, 1, __ATOMIC_RELAXED);
		opens[opens_next] = unique;
		opens_next = (opens_next + 1) % opens_cap;
		goto out_unlock;
	}
	for (i = 0; i < opens_cap; i++) {
		size_t at = (opens_next + i) % opens_cap;

		if (!opens[at]) {
			opens[at] = unique;
			opens_next = (at + 1) % opens_cap;
			__atomic_store_n(&opens_used, opens_used + 1, __ATOMIC_RELAXED);
			break;
		}
	}
out_unlock:
	pthread_mutex_unlock(&opens_lock);
}

bool bf_opens_forget(uint64_t unique)
{
	bool found = false;
	size_t i;

	if (!__atomic_load_n(&opens_used, __ATOMIC_RELAXED))
		return false;
	pthread_mutex_lock(&opens_lock);
	for (i = 0; i < opens_cap; i++) {
		if (opens[i] == unique) {
			opens[i] = 0;
			__atomic_store_n(&opens_used, opens_used - 1, __ATOMIC_RELAXED);
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&opens_lock);
	return found;
}

uint64_t bf_opens_pending(void)
{
	return __atomic_load_n(&opens_used, __ATOMIC_RELAXED);
}

uint64_t bf_opens_lost(void)
{
	return __atomic_load_n(&opens_overwritten, __ATOMIC_RELAXED);
}

void bf_opens_free(void)
{
	pthread_mutex_lock(&opens_lock);
	if (opens != opens_fixed)
		free(opens);
	opens = opens_fixed;
	opens_cap = OPENS_FIRST;
	opens_next = 0;
	for (size_t i = 0; i < OPENS_FIRST; i++)
		opens_fixed[i] = 0;
	__atomic_store_n(&opens_used, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&opens_lock);
}
