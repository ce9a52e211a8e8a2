/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/trace.h - blkfs's block trace: events in blktrace's format
 * (blktrace.h) from any layer (the cache, a filter, the FUSE glue), per
 * device and level, and the latency histograms of each level.
 *
 * Each device name has one struct bt_dev for the life of the process
 * (bt_dev_get()), numbered in the order names are first seen: devices
 * opened in config order get the same numbers on every mount of that
 * config. A device has two levels, each with its own device number
 * (blkparse's major << 20 | minor):
 *   BT_LEVEL_DEV  (major BT_MAJOR_DEV): I/O to the layer below the cache,
 *     Q at submission, M merge, X split, I/D queue and issue, C completion;
 *   BT_LEVEL_FUSE (major BT_MAJOR_FUSE): the user's requests as FUSE
 *     received them (bt_req_begin/bt_req_end), with the caller's pid.
 *
 * Events go into a ring of the calling thread (no lock, no syscall); an
 * event carries the count of events of its device and level that its ring
 * lost just before it. A session numbers its records in the order it
 * writes them, which is time order, all as cpu 0 (blkparse reads a trace
 * file as one cpu's), skipping one number for each event lost: every event
 * lost is a gap blkparse counts, about where it was lost. A trace thread
 * (bt_session_*) drains the rings every millisecond in time order into
 * each session's buffer, and a writer thread per session writes that
 * buffer to its descriptor. A full ring drops the event (counted in
 * bt_dev.dropped), a full session buffer drops it for that session only:
 * I/O never waits for a reader, nor a session for another's reader. With
 * no session a level's bt_on() is one load and one predictable branch.
 */
#ifndef BLKFS_TRACE_H
#define BLKFS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../backend.h"
#include "blktrace.h"
#include "hist.h"

enum { BT_LEVEL_DEV, BT_LEVEL_FUSE, BT_LEVELS };
/* 240-254: "local/experimental use" in the kernel's devices.txt */
#define BT_MAJOR_DEV	240
#define BT_MAJOR_FUSE	241

/* The ops a histogram is kept for (WRITE_ZEROES counts as DISCARD). */
enum { BT_OP_READ, BT_OP_WRITE, BT_OP_FLUSH, BT_OP_DISCARD, BT_NR_OPS };
extern const char *const bt_op_names[BT_NR_OPS];

static inline unsigned bt_op(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return BT_OP_READ;
	case BLK_WRITE: return BT_OP_WRITE;
	case BLK_FLUSH: return BT_OP_FLUSH;
	default: return BT_OP_DISCARD;
	}
}

/* Counters of a level that bt_hist reset does not clear (iostat's). */
struct bt_counts {
	uint64_t ios[BT_NR_OPS], bytes[BT_NR_OPS], ticks_ns[BT_NR_OPS];
	uint64_t in_flight;		/* gauge */
	uint64_t io_ticks_ns;		/* time with at least one in flight */
};

struct bt_tl;

struct bt_dev {
	int on[BT_LEVELS];		/* atomic: sessions reading the level */
	uint32_t devnum[BT_LEVELS];
	uint64_t dropped[BT_LEVELS];	/* atomic: events a full ring dropped */
	int queues_below;		/* atomic: filters that queue (throttle) emit I and D */
	uint64_t fuse_epoch;		/* atomic: bt_hist_reset()s so far */
	struct bt_dev *next;		/* the registry's mutex */
	struct bt_tl *fuse_tl;		/* the registry's mutex: threads' own counts */
	/*
	 * BT_LEVEL_FUSE's counts (the device level's are pc_stats). Each
	 * request thread adds its requests' counts and latencies to a block of
	 * its own (struct bt_tl in trace.c: no locked instruction, no shared
	 * cache line), and the device level's latencies too (bt_dev_latency());
	 * @fuse's ios, bytes and ticks and @hist hold what exited threads counted (and a thread's whose block could
	 * not be allocated), with relaxed atomics. In flight and busy time are
	 * the device's as a whole: relaxed atomics on a cache line of their
	 * own (the fields above are read by every event). Busy time is kept as
	 * the kernel's update_io_ticks() keeps it: whoever moves fuse_stamp_ns
	 * forward by compare-and-swap adds the time since the old stamp, when
	 * something was in flight over it.
	 */
	struct bt_counts fuse __attribute__((aligned(64)));
	uint64_t fuse_stamp_ns;		/* atomic: the last update of fuse.io_ticks_ns */
	uint64_t fuse_ticks_shown;	/* atomic: the most bt_fuse_counts() reported */
	struct blk_hist hist[BT_LEVELS][BT_NR_OPS] __attribute__((aligned(64)));
	/*
	 * The registry's mutex: the histograms' totals at the last
	 * bt_hist_reset(). A reset clears nothing: .sys/DEV/latency shows
	 * the counts since it (the totals less these), and the exposition
	 * the totals, which never go backwards (Prometheus's counters).
	 */
	struct blk_hist hist_base[BT_LEVELS][BT_NR_OPS];
	char name[];
};

/**
 * bt_dev_get - the trace state of the device named @name, created on first use
 * Returns: the same pointer for the same name for the life of the process
 * (never freed), or NULL when out of memory (tracing then ignores it).
 * Locking: takes the registry's mutex; call it at open, not per I/O.
 */
struct bt_dev *bt_dev_get(const char *name);

static inline bool bt_on(const struct bt_dev *d, int level)
{
	return __builtin_expect(d && __atomic_load_n(&d->on[level], __ATOMIC_RELAXED), 0);
}

/* The categories of an I/O of @op (BLK_IO_WAITED makes it sync). */
uint32_t bt_op_cat(enum blk_op op, unsigned int flags);

/**
 * bt_event - emit one event (call it only when bt_on())
 * @d, @level: where
 * @action: BT_ACT_* | BT_TC_ACT(bt_op_cat(...))
 * @pos, @len: bytes (the record holds 512-byte sectors)
 * @err: 0 or -errno (C events)
 * @pdu, @pdu_len: payload (at most BT_PDU_MAX bytes; longer is cut)
 * @pid: the pid the record names; 0 for the calling thread's id
 * Never blocks; a full ring drops the event and counts it.
 */
#define BT_PDU_MAX 80
void bt_event(struct bt_dev *d, int level, uint32_t action, uint64_t pos, uint64_t len,
	      int err, const void *pdu, unsigned pdu_len, uint32_t pid);

/* X: the piece [pos, pos+len) was split off; the rest begins at @at (bytes). */
void bt_split(struct bt_dev *d, uint32_t cat, uint64_t pos, uint64_t len, uint64_t at);

/* A message note ("m N text" in blkparse) at the device level, when traced. */
void bt_msg(struct bt_dev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Count one latency of the device level (the cache's submit to end_io), in
 * the calling thread's block (@d may be NULL). Locking: none.
 */
void bt_dev_latency(struct bt_dev *d, enum blk_op op, uint64_t ns);

/**
 * bt_req_begin - a user's request arrived (the FUSE level)
 * @d: the device's trace state (may be NULL)
 * @op, @pos, @len: the request (a FUSE read, write, fsync or fallocate)
 * @pid: the pid FUSE names in the request
 * Emits Q when traced, counts it in flight.
 * Returns: its start time, for bt_req_end().
 * Called by the request path when it receives a request (fuse/devfile.c).
 * Locking: none (a few relaxed atomics); any thread, any number at once.
 */
uint64_t bt_req_begin(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len,
		      uint32_t pid);

/**
 * bt_req_issue - the request begun by bt_req_begin() got its request slot
 * and goes to the cache: D when traced, so that btt's Q2D at the FUSE
 * level is the wait for a slot (the block layer's wait for a tag).
 * Locking: none; no cost when not traced.
 */
void bt_req_issue(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid);

/**
 * bt_req_end - the request begun at @start_ns was answered with @res
 * (0, a byte count or -errno): C when traced, its latency in the FUSE
 * level's histogram and iostat counters. Called where the reply is sent,
 * in whatever thread sends it. Locking: none; the first call of a thread
 * for a device allocates that thread's block of counts (once).
 */
void bt_req_end(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid,
		uint64_t start_ns, long res);
/*
 * bt_req_end_tok - bt_req_end() at the device level's end of the same
 * request, when that is this thread's end stamp for @tok (its struct
 * pc_aio; backends/lib/clock.h): no second clock read for one end. Else
 * (@tok NULL: the reply is not sent in the thread that received the
 * request; or the stamp is not @tok's) it reads the clock.
 */
void bt_req_end_tok(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid,
		    uint64_t start_ns, long res, const void *tok);

/* A snapshot of the FUSE level's counters (busy time up to now included). */
void bt_fuse_counts(struct bt_dev *d, struct bt_counts *out);

/*
 * A snapshot of @level's histogram of @op (BT_OP_*), every thread's counts
 * summed: the latencies since the last bt_hist_reset() (max_ns too).
 */
void bt_hist_snap(struct bt_dev *d, int level, unsigned op, struct blk_hist *out);

/*
 * The same since the device's name was first seen, whatever the resets
 * (monotonic counts, for the exposition); max_ns is not meaningful.
 */
void bt_hist_snap_total(struct bt_dev *d, int level, unsigned op, struct blk_hist *out);

/*
 * Start both levels' histograms over as bt_hist_snap() sees them (`reset`
 * written to .sys/DEV/latency); bt_hist_snap_total() does not change.
 */
void bt_hist_reset(struct bt_dev *d);

/*
 * Show .sys/DEV/latency: per level and op with a count since the last
 * reset, one line
 * "LEVEL OP count N sum_ns S avg_ns A p50_ns .. p90_ns .. p99_ns .. p99.9_ns .. max_ns .."
 * then its biolatency histogram. Returns the length of the whole text, as
 * snprintf: @len or more when @buf was too small (it then holds a cut,
 * terminated text). @buf may be NULL when @len is 0.
 */
size_t bt_latency_show(struct bt_dev *d, char *buf, size_t len);

/*
 * Show .sys/DEV/latency_total, what --prometheus reads: for every level
 * and op, even without a count, one line
 * "LEVEL OP count N sum_ns S usecs_log2 C0 C1 .. C39", the BH_LOG2
 * biolatency buckets, totals that no reset takes back
 * (bt_hist_snap_total()). Returns as bt_latency_show().
 */
size_t bt_latency_total_show(struct bt_dev *d, char *buf, size_t len);

/* ------------------------------------------------------------ sessions */

struct bt_session;

/**
 * bt_session_start - write @d's @level events to @fd until bt_session_stop()
 * @fd: taken over (closed by stop); written by the session's own writer
 *	thread, which a stalled reader stalls, never I/O nor another session
 * Returns: the session, or ERR_PTR(-ENOMEM / -EAGAIN: no thread / -EBUSY).
 */
struct bt_session *bt_session_start(struct bt_dev *d, int level, int fd);

/**
 * bt_session_stop - end a session: the events up to now are written, or
 * counted lost when its reader takes none for 0.5 s (a stop returns
 * within about that, whatever the reader does)
 * @written, @dropped: what it wrote, and what it lost (full rings, its
 *	full buffer, a failed write, a reader too slow at the stop)
 * Returns: 0, or the -errno a write to its descriptor failed with.
 */
int bt_session_stop(struct bt_session *s, uint64_t *written, uint64_t *dropped);

/* Encode one record (native byte order) into @out; for the unit test too. */
void bt_encode(struct blk_io_trace *out, uint32_t seq, uint64_t time_ns, uint64_t pos,
	       uint64_t len, uint32_t action, uint32_t pid, uint32_t dev, int err,
	       unsigned pdu_len);

#endif
