/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/brlock.h - a big-reader lock (as the kernel's
 * percpu_rw_semaphore): readers share it, a writer excludes them, and a
 * read costs no write to a cache line any other thread writes. Each thread
 * has a record of its own (one cache line), on a process-wide list; a
 * reader stores the lock it holds into its record and then loads the
 * lock's writer flag, which only a writer ever stores; a writer sets the
 * flag and then waits until no record names its lock. For a lock taken
 * shared on every I/O by many threads and exclusive rarely (the ram
 * backend's arena), where a rwlock's count is a line every reader writes.
 *
 * The reader's store and the writer's flag store are each followed by a
 * load of the other's (seq_cst both, Dekker's pattern): of a reader and a
 * writer that come at once, at least one sees the other. A reader that
 * sees the flag drops its claim and takes the slow path: it waits on the
 * writer's mutex, and claims again under it, when no writer can be inside.
 * So no reader ever waits for a writer while a writer waits for it.
 *
 * A thread holds at most one brlock shared at a time (asserted): a read
 * section takes no other brlock and does not nest. A writer may be any
 * thread not in a read section. A record is made at a thread's first
 * read and freed when the thread exits (a pthread key's destructor),
 * under the list's mutex, which the writer's scan holds.
 *
 * Cost: a read takes and drops its claim with one locked instruction each
 * on the thread's own line, and loads the flag (a line that stays shared
 * in every cache). A write walks every thread's record, at least twice.
 */
#ifndef BLKFS_BRLOCK_H
#define BLKFS_BRLOCK_H

#include <pthread.h>
#include <stdbool.h>

struct brlock {
	/*
	 * Atomic: a writer is inside or waiting for readers to leave; set and
	 * cleared only under wlock. Alone on its line: readers load it on
	 * every read, and nothing but a writer stores into that line.
	 */
	int writer __attribute__((aligned(64)));
	char pad[60];
	pthread_mutex_t wlock;		/* writers, one at a time; slow readers */
	pthread_mutex_t wait_lock;	/* a writer waiting for readers, and their wakeups */
	pthread_cond_t wait_cv;		/* wait_lock: a reader left while writer was set */
};

int brlock_init(struct brlock *b);
void brlock_destroy(struct brlock *b);

/*
 * Shared. @tag names what the reader does it for (the ram backend: the
 * device), for brlock_nr_tagged(); NULL for nothing in particular.
 */
void brlock_read_lock(struct brlock *b, const void *tag);
void brlock_read_unlock(struct brlock *b);

void brlock_write_lock(struct brlock *b);
void brlock_write_unlock(struct brlock *b);

/*
 * Threads inside a read section of @b with @tag now: a snapshot, for an
 * assertion that none is (a reader entering or leaving meanwhile may or
 * may not be counted).
 */
unsigned int brlock_nr_tagged(struct brlock *b, const void *tag);

#endif
