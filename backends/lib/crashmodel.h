/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/crashmodel.h - the disk's promise, written once: what a power
 * cut may leave on a device, given the writes and flushes that completed
 * before it. The powerloss filter's cuts are checked against it (its unit
 * test), and the crash explorer enumerates it. It lives in backends/
 * because the powerloss filter is there and backends/ never reaches core/;
 * it includes nothing but libc.
 *
 * The promise:
 *  - A write is durable when a flush was submitted after the write
 *    completed and that flush completed. Since a flush covers every write
 *    that completed before it was submitted, what is durable is a prefix
 *    of the writes in completion order: those numbered below the largest
 *    `covers` of a completed flush.
 *  - A write flagged FUA (only in logs from elsewhere: blkfs's backend
 *    contract has none) is durable when it completes.
 *  - For every physical block touched by writes no completed flush covers,
 *    the block holds the result of some prefix (none, some or all) of
 *    those writes to it, in completion order: never an older value after a
 *    newer one, never a torn physical block. A FUA write raises the
 *    shortest prefix its blocks may take to one that includes it.
 *  - Different physical blocks choose independently, so a write spanning
 *    several may tear at their boundaries.
 *  - Writes in flight at the crash point have not completed: they are not
 *    in the log and in no state.
 *
 * A state is one choice per touched physical block: the length of the
 * prefix it keeps. The in-order state keeps every write.
 *
 * Nothing here locks: a log and its points belong to one thread at a time.
 */
#ifndef BLKFS_CRASHMODEL_H
#define BLKFS_CRASHMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum blk_cm_kind {
	BLK_CM_WRITE,		/* a WRITE, DISCARD or WRITE_ZEROES that completed */
	BLK_CM_FLUSH,		/* a FLUSH that completed */
	BLK_CM_MARK,		/* a point the workload named; changes nothing */
};

#define BLK_CM_FUA	(1u << 0)	/* write: durable on completion */

struct blk_cm_event {
	enum blk_cm_kind kind;
	unsigned int flags;	/* BLK_CM_FUA */
	uint64_t pos, len;	/* write: bytes */
	const void *data;	/* write: len bytes, the caller's; NULL: zeros */
	uint64_t seq;		/* write: its number in completion order, from 0 */
	uint64_t covers;	/* flush: the writes numbered below it are durable */
};

/* Events in completion order. */
struct blk_cm_log {
	uint32_t pbs;		/* physical block size: a power of two */
	struct blk_cm_event *ev;
	size_t nr, cap;
	uint64_t nr_writes;
};

void blk_cm_init(struct blk_cm_log *log, uint32_t pbs);
void blk_cm_destroy(struct blk_cm_log *log);
/* Append a completed write of @len bytes at @pos (@data NULL: zeros); 0 or -ENOMEM. */
int blk_cm_write(struct blk_cm_log *log, uint64_t pos, uint64_t len, const void *data,
		 unsigned int flags);
/*
 * Append a completed flush that covers the first @covers writes (those that
 * had completed when it was submitted; at most log->nr_writes). 0, -EINVAL
 * or -ENOMEM.
 */
int blk_cm_flush(struct blk_cm_log *log, uint64_t covers);
int blk_cm_mark(struct blk_cm_log *log);

/* One physical block that unflushed writes touch at a crash point. */
struct blk_cm_block {
	uint64_t blk;		/* physical block number */
	uint32_t min;		/* the shortest prefix allowed (FUA), <= nr */
	uint32_t nr;		/* unflushed writes touching it */
	size_t *ev;		/* their event indices, in completion order */
};

/* What a crash after the first nr_events events of a log may leave. */
struct blk_cm_point {
	const struct blk_cm_log *log;
	size_t nr_events;
	uint64_t durable;	/* writes with seq < durable are on stable storage */
	struct blk_cm_block *b;	/* sorted by blk */
	size_t nr_blocks;
	uint64_t nr_states;	/* product of (nr - min + 1); UINT64_MAX: more */
};

/**
 * blk_cm_point_init - the state set of a crash after @nr_events events
 * @pt: filled; blk_cm_point_destroy() frees it
 * @log: the log; it must outlive @pt and not change meanwhile
 * @nr_events: how many of its events happened (at most log->nr)
 *
 * Returns: 0 or -ENOMEM.
 */
int blk_cm_point_init(struct blk_cm_point *pt, const struct blk_cm_log *log, size_t nr_events);
void blk_cm_point_destroy(struct blk_cm_point *pt);

/* The in-order state: every block keeps all its writes. */
void blk_cm_state_in_order(const struct blk_cm_point *pt, uint32_t *choice);

/*
 * The @n-th state (0 <= @n < nr_states) in a fixed order (mixed radix over
 * the blocks, the first block fastest; state 0 keeps the fewest writes).
 * Returns 0 or -ERANGE.
 */
int blk_cm_state_nth(const struct blk_cm_point *pt, uint64_t n, uint32_t *choice);

/* Is @choice (one entry per block) a state of the set? */
bool blk_cm_state_valid(const struct blk_cm_point *pt, const uint32_t *choice);

/* Index of physical block @blk in pt->b (sorted by blk), or -1 if no write touched it. */
long blk_cm_find_block(const struct blk_cm_point *pt, uint64_t blk);

/*
 * blk_cm_apply - the writes that turn the base (the device before the log)
 * into the state @choice
 * @fn: called in completion order with pieces of writes; @data NULL means
 *	zeros. A non-zero return stops the walk and is returned.
 *
 * @choice is not checked against min (a choice of all zeros gives the
 * durable contents alone, which the set contains only without FUA).
 * Returns: 0 or what @fn returned.
 */
int blk_cm_apply(const struct blk_cm_point *pt, const uint32_t *choice,
		 int (*fn)(void *ctx, uint64_t pos, uint64_t len, const void *data), void *ctx);

/* The same, without the durable writes: what a state adds to the durable contents. */
int blk_cm_apply_volatile(const struct blk_cm_point *pt, const uint32_t *choice,
			  int (*fn)(void *ctx, uint64_t pos, uint64_t len, const void *data),
			  void *ctx);

/* The number n for which blk_cm_state_nth() gives @choice (a valid state; nr_states < UINT64_MAX). */
uint64_t blk_cm_state_index(const struct blk_cm_point *pt, const uint32_t *choice);

/*
 * blk_cm_state_of - which state an image of the whole device is
 * @base: the device before the log (@size bytes)
 * @img: the device after the crash (@size bytes)
 * @choice: filled with a state that gives @img
 *
 * Returns: 0; -ENOENT when no state of the set gives @img (a block holds
 * what no prefix leaves, or a block no unflushed write touches differs
 * from its durable contents); -ENOMEM.
 */
int blk_cm_state_of(const struct blk_cm_point *pt, const uint8_t *base, const uint8_t *img,
		    uint64_t size, uint32_t *choice);

#endif
