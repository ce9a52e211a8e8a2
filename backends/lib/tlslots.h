/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/tlslots.h - per-thread slot tables (tlslots.c): each thread
 * counts in blocks of its own, one per owner (a device, the transport), so
 * that a count on the request path is a plain store to a line no other
 * thread writes, as the kernel's per-CPU part_stat. A block is found
 * through the thread's table, indexed by the owner's id; the table grows
 * on a thread's first count of an owner whose id is past its end.
 *
 * The user (core/submit.c's device counts, trace.c's FUSE level, fuse/'s
 * request counts) keeps its blocks on lists of its owners, under a lock of
 * its own that the helper takes too: it lists a new block (attach) and, at
 * the thread's exit, folds a block's counts into its owner's shared ones
 * and unlists it (fold), both called under that lock. Readers sum the
 * shared counts and the listed blocks under the same lock, so a block
 * that an exiting thread folds is counted once.
 *
 * An owner that goes away (a device removed) orphans its blocks: under the
 * lock it marks them as no longer its own (the user's owner field) and
 * frees its id (tls_id_put_locked()); the thread that owns such a block
 * frees it at its next look-up of that id (tls_slot_make()) or at its
 * exit (where fold() leaves an orphan alone).
 */
#ifndef BLKFS_TLSLOTS_H
#define BLKFS_TLSLOTS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TLS_IDS 4096		/* ids tls_id_get() hands out */
#define TLS_NO_ID UINT32_MAX	/* an owner without an id: the shared counts */

/* A kind of per-thread block: one, static, per user. */
struct tls_kind {
	pthread_mutex_t *lock;	/* the user's: its lists, the ids; attach and fold run under it */
	size_t size;		/* a block's bytes: made zeroed, on cache lines of its own */
	/* under *lock: @blk, new and zeroed, becomes @owner's (listed for readers) */
	void (*attach)(void *blk, void *owner);
	/*
	 * under *lock, as the block's thread exits: @blk's counts go to its
	 * owner's shared ones and it leaves the owner's list; an orphan (its
	 * owner gone) is left alone. The helper frees @blk after.
	 */
	void (*fold)(void *blk);
	/* the helper's */
	int key_state;		/* atomic: 0, then 1 once key_ok says whether key was made */
	pthread_key_t key;
	bool key_ok;
	uint64_t ids[TLS_IDS / 64];	/* *lock: ids in use */
};

#define TLS_KIND_INIT(lock_, size_, attach_, fold_) \
	{ .lock = (lock_), .size = (size_), .attach = (attach_), .fold = (fold_) }

/* A thread's table of one kind: declared `static __thread struct tls_table x;` by the user. */
struct tls_table {
	void **tab;		/* by id: a block, NULL where none was made */
	uint32_t nr;
	bool failed;		/* no memory once: the caller counts in the shared counts from then on */
	struct tls_kind *kind;
};

/* The block at @id in this thread's table @t, or NULL: the fast path, no lock. */
static inline void *tls_slot(const struct tls_table *t, uint32_t id)
{
	return __builtin_expect(id < t->nr, 1) ? t->tab[id] : NULL;
}

/**
 * tls_slot_make - this thread's new block of @owner at @id in @t
 * @k: the kind
 * @t: the calling thread's table of @k
 * @id: @owner's id (not TLS_NO_ID)
 * @owner: handed to @k->attach
 *
 * Called when tls_slot() found nothing of @owner at @id: what is there is
 * an orphan of an owner gone, and is freed. The table grows to hold @id.
 * Returns the block, or NULL when out of memory (from then on the thread
 * gets NULL at once: its counts go to the shared ones).
 * Locking: takes @k->lock for the attach; call it with no lock held.
 */
void *tls_slot_make(struct tls_kind *k, struct tls_table *t, uint32_t id, void *owner);

/**
 * tls_id_get_locked - the lowest id of @k free, now in use
 * Returns: the id, or TLS_NO_ID when all TLS_IDS are in use.
 * Locking: @k->lock held.
 */
uint32_t tls_id_get_locked(struct tls_kind *k);
/* @id (from tls_id_get_locked) is free again; the owner's blocks are orphans by now. Locking: @k->lock held. */
void tls_id_put_locked(struct tls_kind *k, uint32_t id);

#endif
