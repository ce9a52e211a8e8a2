/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/tlslots.c - per-thread slot tables (tlslots.h): a thread's
 * table of blocks by owner id, its growth, and its end: a pthread key per
 * kind whose destructor folds each block into its owner's shared counts
 * when the thread exits. The user's lock guards the lists and the ids.
 */
#include <stdlib.h>
#include <string.h>

#include "tlslots.h"

/*
 * A thread exits: its blocks' counts go to their owners (the user's fold,
 * under its lock, one acquisition for the whole table), then the blocks
 * and the table are freed. The key's value is the thread's own table (a
 * __thread object, still there while key destructors run).
 */
static void tls_exit(void *p)
{
	struct tls_table *t = p;
	struct tls_kind *k = t->kind;
	uint32_t i, n = t->nr;

	pthread_mutex_lock(k->lock);
	for (i = 0; i < n; i++)
		if (t->tab[i])
			k->fold(t->tab[i]);
	pthread_mutex_unlock(k->lock);
	for (i = 0; i < n; i++)
		free(t->tab[i]);
	free(t->tab);
	t->tab = NULL;
	t->nr = 0;
}

static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * pthread_once() takes no argument: the kinds' keys are made under one
 * lock instead, once each (key_ok says whether it was).
 */
static bool tls_key_ready(struct tls_kind *k)
{
	bool ok;

	if (__atomic_load_n(&k->key_state, __ATOMIC_ACQUIRE))
		return k->key_ok;
	pthread_mutex_lock(&key_lock);
	if (!k->key_state) {
		k->key_ok = !pthread_key_create(&k->key, tls_exit);
		__atomic_store_n(&k->key_state, 1, __ATOMIC_RELEASE);
	}
	ok = k->key_ok;
	pthread_mutex_unlock(&key_lock);
	return ok;
}

void *tls_slot_make(struct tls_kind *k, struct tls_table *t, uint32_t id, void *owner)
{
	void *b;

	if (id == TLS_NO_ID || t->failed)
		return NULL;
	if (!tls_key_ready(k))
		goto fail;
	t->kind = k;
	if (id >= t->nr) {
		uint32_t n = id + 8;
		void **tab = realloc(t->tab, n * sizeof(*tab));

		if (!tab)
			goto fail;
		memset(tab + t->nr, 0, (n - t->nr) * sizeof(*tab));
		/* the key's destructor runs only for a value set: once per table */
		if (!t->tab && pthread_setspecific(k->key, t)) {
			free(tab);
			goto fail;
		}
		t->tab = tab;
		t->nr = n;
	}
	/* an orphan of an owner gone that had this id: unlisted already */
	free(t->tab[id]);
	t->tab[id] = NULL;
	/* its own cache lines: no false sharing with another thread's */
	if (posix_memalign(&b, 64, (k->size + 63) & ~(size_t)63))
		goto fail;
	memset(b, 0, k->size);
	pthread_mutex_lock(k->lock);
	k->attach(b, owner);
	pthread_mutex_unlock(k->lock);
	t->tab[id] = b;
	return b;
fail:
	t->failed = true;
	return NULL;
}

uint32_t tls_id_get_locked(struct tls_kind *k)
{
	uint32_t w;

	for (w = 0; w < TLS_IDS / 64; w++)
		if (~k->ids[w]) {
			unsigned bit = (unsigned)__builtin_ctzll(~k->ids[w]);

			k->ids[w] |= 1ull << bit;
			return w * 64 + bit;
		}
	return TLS_NO_ID;
}

void tls_id_put_locked(struct tls_kind *k, uint32_t id)
{
	if (id != TLS_NO_ID)
		k->ids[id / 64] &= ~(1ull << (id % 64));
}
