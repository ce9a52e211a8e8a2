/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/fake_backend.h - an in-memory backend for unit tests of core/
 * (in the spirit of SQLite's testvfs).
 *
 * The fake keeps the device contents in a lazily zeroed anonymous mapping,
 * logs every op it is given, checks every op against the rules of
 * backends/backend.h (counting violations instead of aborting), completes
 * I/O inline, late and out of order, or when the test says so, and fails
 * chosen ops on a countdown.
 *
 * Tests create it directly with fake_create(), not through the registry,
 * and hand &fake->be to pc_dev_add().
 *
 * Locking: one mutex per fake (fake->lock) covers the store, the log, the
 * queue of pending I/O and the fault state. It is never held while end_io
 * runs. Every function below may be called from any thread.
 */
#ifndef BLKFS_TEST_FAKE_BACKEND_H
#define BLKFS_TEST_FAKE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../backends/backend.h"

/* Op masks: FAKE_OP(BLK_WRITE) | FAKE_OP(BLK_FLUSH) ... */
#define FAKE_OP(op)	(1u << (op))
#define FAKE_DATA	(FAKE_OP(BLK_READ) | FAKE_OP(BLK_WRITE))
#define FAKE_ANY	0xffu

enum fake_mode {
	FAKE_INLINE,	/* end_io runs before submit() returns */
	FAKE_DEFERRED,	/* a completer thread ends I/O late, in shuffled order */
	FAKE_MANUAL,	/* I/O waits until the test calls fake_complete*() */
};

/* One logged op. */
struct fake_op {
	uint64_t seq;		/* submission order, from 0 (not reset by clear) */
	enum blk_op op;
	unsigned int flags;	/* blk_io.flags as submitted */
	uint64_t pos;
	uint64_t len;
	int iovcnt;
	bool done;		/* end_io has been called */
	int result;		/* 0 or -errno, once done */
	uint64_t done_seq;	/* completion order, once done */
	bool violation;		/* broke a rule of backend.h */
	unsigned int inflight_writes;	/* WRITEs pending when this op was submitted */
};

/*
 * Fault injection: the @countdown-th op (1 = the next one) whose type is in
 * @op_mask and which overlaps [@pos, @pos + @len) (@len 0: anywhere) fails
 * with @err (a negative errno). A transient fault then disarms; a persistent
 * one fails every later matching op too, until fake_fault_clear().
 * A failed WRITE does not change the store; a failed READ fills its buffers
 * with poison (0xEE) so that a cache using them shows it.
 */
struct fake_fault {
	unsigned int op_mask;
	uint64_t pos;
	uint64_t len;
	unsigned int countdown;
	int err;
	bool persistent;
	/*
	 * A READ or WRITE the fault fails from @pos on (pos inside it) first
	 * completes what lies before, in whole logical blocks: end_io gets
	 * @err with blk_io.done set (a partial completion, backend.h).
	 */
	bool partial;
};

struct fake_be;

/**
 * fake_create - a fake device
 * @geo: its geometry; dma_align 0 is taken as 1, io_min/io_opt/pbs 0 as lbs,
 *       max_io 0 as 1 MiB. The fake does not check that it is sensible.
 *
 * Returns: the fake (inline mode, no fault), or NULL.
 */
struct fake_be *fake_create(const struct blk_geometry *geo);

/**
 * fake_destroy - stop the completer and free everything. I/O still pending
 * is dropped without end_io (the cache must have waited for it).
 */
void fake_destroy(struct fake_be *fb);

/* The struct blk_backend to give to pc_dev_add(). */
struct blk_backend *fake_backend(struct fake_be *fb);
const struct blk_geometry *fake_geometry(const struct fake_be *fb);

/*
 * Make the fake ask for stable writes (blk_backend_ops.stable_writes), as
 * rbd does: it reads a WRITE's memory until end_io (which it does anyway:
 * data moves at completion). Call before pc_dev_add(), which reads it.
 */
void fake_set_stable_writes(struct fake_be *fb, bool on);

/* Completion modes; switching never completes what is already pending. */
void fake_set_mode(struct fake_be *fb, enum fake_mode mode);
/* Deferred mode: each completion waits 0..@max_us microseconds (default 200). */
void fake_set_delay(struct fake_be *fb, unsigned int max_us);
/* Seed of the shuffle and the delays (default 1); printed by fake_log_dump(). */
void fake_set_seed(struct fake_be *fb, unsigned int seed);

/* Manual mode (and leftovers of the others). */
size_t fake_pending(struct fake_be *fb);
/* Wait until at least @n I/Os are pending; false after @timeout_ms. */
bool fake_wait_pending(struct fake_be *fb, size_t n, unsigned int timeout_ms);
/*
 * Wait until the number of pending I/Os has not changed for @quiet_ms
 * (the submitter is done or blocked); returns that number.
 */
size_t fake_wait_quiet(struct fake_be *fb, unsigned int quiet_ms, unsigned int timeout_ms);
/*
 * The memory of the pending READ or WRITE at @idx (0 = oldest) as it is
 * now: for a WRITE, what the store would get if it completed now. Copies
 * up to @len bytes into @buf and returns how many (0: no such I/O); *@pos
 * (if not NULL) gets the I/O's position.
 */
size_t fake_pending_data(struct fake_be *fb, size_t idx, void *buf, size_t len,
			 uint64_t *pos);
/* Complete the pending I/O at @idx (0 = oldest). Returns false if none. */
bool fake_complete_one(struct fake_be *fb, size_t idx);
/* Complete the oldest pending I/O of a type in @op_mask; false if none. */
bool fake_complete_op(struct fake_be *fb, unsigned int op_mask);
/* Pending I/Os of a type in @op_mask. */
size_t fake_pending_ops(struct fake_be *fb, unsigned int op_mask);
/* Complete every pending I/O, oldest first or newest first; returns how many. */
size_t fake_complete_all(struct fake_be *fb, bool reverse);

/* Faults */
void fake_fault_set(struct fake_be *fb, const struct fake_fault *f);
void fake_fault_clear(struct fake_be *fb);
/* Ops failed by injection since creation. */
unsigned int fake_fault_hits(struct fake_be *fb);

/* Contract checks; each violation is also printed to stderr unless quiet. */
void fake_set_quiet(struct fake_be *fb, bool quiet);
unsigned int fake_violations(struct fake_be *fb);
/* Writes submitted while an overlapping write was still in flight. */
unsigned int fake_overlaps(struct fake_be *fb);

/* The log */
size_t fake_log_len(struct fake_be *fb);
/* Copy entry @i (0 = oldest since the last clear); false if out of range. */
bool fake_log_get(struct fake_be *fb, size_t i, struct fake_op *out);
/* Ops of a type in @op_mask; the _range form counts those overlapping [pos, pos+len). */
size_t fake_log_count(struct fake_be *fb, unsigned int op_mask);
size_t fake_log_count_range(struct fake_be *fb, unsigned int op_mask,
			    uint64_t pos, uint64_t len);
/* Bytes moved by logged ops of a type in @op_mask. */
uint64_t fake_log_bytes(struct fake_be *fb, unsigned int op_mask);
/*
 * Index of the first entry at or after @from of a type in @op_mask with
 * exactly this @pos and @len, or -1.
 */
long fake_log_find(struct fake_be *fb, size_t from, unsigned int op_mask,
		   uint64_t pos, uint64_t len);
/* Index of the first entry at or after @from overlapping [pos, pos+len), or -1. */
long fake_log_find_overlap(struct fake_be *fb, size_t from, unsigned int op_mask,
			   uint64_t pos, uint64_t len);
void fake_log_clear(struct fake_be *fb);
/* Ops of a type in @op_mask submitted since creation, and their bytes (not cleared). */
uint64_t fake_total_count(struct fake_be *fb, unsigned int op_mask);
uint64_t fake_total_bytes(struct fake_be *fb, unsigned int op_mask);
/* One line per entry, for failure messages. */
void fake_log_dump(struct fake_be *fb, FILE *f);

/*
 * The store. fake_store() is the raw contents (size bytes); read it only
 * while no I/O is in flight. The copy functions take the lock.
 */
uint8_t *fake_store(struct fake_be *fb);
void fake_store_read(struct fake_be *fb, void *buf, size_t len, uint64_t pos);
void fake_store_write(struct fake_be *fb, const void *buf, size_t len, uint64_t pos);

#endif
