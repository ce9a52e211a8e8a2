// SPDX-License-Identifier: MIT
/*
 * backends/lib/brlock.c - a big-reader lock: per-thread read claims, a
 * writer that waits for every claim on its lock to go. See brlock.h.
 *
 * Locks: b->wlock -> b->wait_lock -> br_list_lock. A reader takes wlock
 * only on its slow path (holding no claim), wait_lock only to wake a
 * writer (holding no claim); a thread's first read and its exit take
 * br_list_lock alone.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "brlock.h"

/* One per thread that ever read: what it holds now. */
struct br_rec {
	/*
	 * The brlock this thread holds shared, or NULL. Stored only by its
	 * thread (seq_cst, see brlock.h); loaded by writers.
	 */
	struct brlock *held;
	/* What for (brlock_nr_tagged()): stored by its thread before held. */
	const void *tag;
	struct br_rec *prev, *next;	/* br_list_lock */
} __attribute__((aligned(64)));

static pthread_mutex_t br_list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct br_rec *br_list;		/* br_list_lock: every thread's record */
static pthread_once_t br_once = PTHREAD_ONCE_INIT;
static pthread_key_t br_key;		/* the record, freed at the thread's exit */
static bool br_key_ok;			/* set once by br_key_init() */
/*
 * The thread's record, or NULL before its first read (or when it could
 * not have one: then its reads take wlock, which excludes writers too).
 */
static __thread struct br_rec *br_self;

/* A thread exits: its record leaves the list (it holds nothing: asserted). */
static void br_rec_free(void *p)
{
	struct br_rec *rec = p;

	assert(!rec->held && "brlock: a thread exited inside a read section");
	pthread_mutex_lock(&br_list_lock);
	if (rec->prev)
		rec->prev->next = rec->next;
	else
		br_list = rec->next;
	if (rec->next)
		rec->next->prev = rec->prev;
	pthread_mutex_unlock(&br_list_lock);
	if (br_self == rec)
		br_self = NULL;
	free(rec);
}

static void br_key_init(void)
{
	br_key_ok = !pthread_key_create(&br_key, br_rec_free);
}

/* The thread's first read: a record on the list, freed when it exits. */
static struct br_rec *br_register(void)
{
	struct br_rec *rec;

	pthread_once(&br_once, br_key_init);
	if (!br_key_ok)
		return NULL;
	rec = aligned_alloc(64, sizeof(*rec));
	if (!rec)
		return NULL;
	*rec = (struct br_rec){ 0 };
	if (pthread_setspecific(br_key, rec)) {
		free(rec);
		return NULL;
	}
	pthread_mutex_lock(&br_list_lock);
	rec->next = br_list;
	if (br_list)
		br_list->prev = rec;
	br_list = rec;
	pthread_mutex_unlock(&br_list_lock);
	br_self = rec;
	return rec;
}

int brlock_init(struct brlock *b)
{
	int ret;

	b->writer = 0;
	ret = pthread_mutex_init(&b->wlock, NULL);
	if (ret)
		return -ret;
	ret = pthread_mutex_init(&b->wait_lock, NULL);
	if (ret)
		goto out_wlock;
	ret = pthread_cond_init(&b->wait_cv, NULL);
	if (ret)
		goto out_wait;
	return 0;
out_wait:
	pthread_mutex_destroy(&b->wait_lock);
out_wlock:
	pthread_mutex_destroy(&b->wlock);
	return -ret;
}

void brlock_destroy(struct brlock *b)
{
	assert(!b->writer);
	pthread_cond_destroy(&b->wait_cv);
	pthread_mutex_destroy(&b->wait_lock);
	pthread_mutex_destroy(&b->wlock);
}

/* Claims on @b (with @tag, when @any_tag is false) in every record now. */
static unsigned int br_count(struct brlock *b, const void *tag, bool any_tag)
{
	struct br_rec *rec;
	unsigned int n = 0;

	pthread_mutex_lock(&br_list_lock);
	for (rec = br_list; rec; rec = rec->next)
		if (__atomic_load_n(&rec->held, __ATOMIC_SEQ_CST) == b &&
		    (any_tag || __atomic_load_n(&rec->tag, __ATOMIC_RELAXED) == tag))
			n++;
	pthread_mutex_unlock(&br_list_lock);
	return n;
}

/* Drop the claim; a writer waiting for it is woken. */
static void br_drop(struct br_rec *rec, struct brlock *b)
{
	__atomic_store_n(&rec->held, NULL, __ATOMIC_SEQ_CST);
	/* Either this sees the flag, or the writer's scan sees NULL (brlock.h). */
	if (__builtin_expect(__atomic_load_n(&b->writer, __ATOMIC_SEQ_CST), 0)) {
		pthread_mutex_lock(&b->wait_lock);
		pthread_cond_broadcast(&b->wait_cv);
		pthread_mutex_unlock(&b->wait_lock);
	}
}

void brlock_read_lock(struct brlock *b, const void *tag)
{
	struct br_rec *rec = br_self;

	if (__builtin_expect(!rec, 0)) {
		rec = br_register();
		if (!rec) {
			pthread_mutex_lock(&b->wlock);
			return;
		}
	}
	assert(!rec->held && "brlock: read sections do not nest");
	__atomic_store_n(&rec->tag, tag, __ATOMIC_RELAXED);
	__atomic_store_n(&rec->held, b, __ATOMIC_SEQ_CST);
	if (__builtin_expect(!__atomic_load_n(&b->writer, __ATOMIC_SEQ_CST), 1))
		return;
	/*
	 * A writer is inside or waiting for readers: step aside (it may be
	 * waiting for this claim) and claim again when no writer is inside,
	 * under wlock, which every writer holds from flag to flag.
	 */
	br_drop(rec, b);
	pthread_mutex_lock(&b->wlock);
	__atomic_store_n(&rec->held, b, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&b->wlock);
}

void brlock_read_unlock(struct brlock *b)
{
	struct br_rec *rec = br_self;

	if (__builtin_expect(!rec, 0)) {
		pthread_mutex_unlock(&b->wlock);
		return;
	}
	assert(rec->held == b);
	br_drop(rec, b);
}

void brlock_write_lock(struct brlock *b)
{
	assert((!br_self || br_self->held != b) && "brlock: write inside a read section");
	pthread_mutex_lock(&b->wlock);
	__atomic_store_n(&b->writer, 1, __ATOMIC_SEQ_CST);
	/* Readers that came before the flag leave; those after it wait on wlock. */
	pthread_mutex_lock(&b->wait_lock);
	while (br_count(b, NULL, true))
		pthread_cond_wait(&b->wait_cv, &b->wait_lock);
	pthread_mutex_unlock(&b->wait_lock);
}

void brlock_write_unlock(struct brlock *b)
{
	__atomic_store_n(&b->writer, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&b->wlock);
}

unsigned int brlock_nr_tagged(struct brlock *b, const void *tag)
{
	return br_count(b, tag, false);
}
