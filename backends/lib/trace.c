/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/trace.c - the block trace (trace.h): the registry of devices,
 * the per-thread event rings, the trace thread that drains them into each
 * session's descriptor, and the FUSE level's accounting.
 *
 * A ring has one producer (its thread) and one consumer (the trace
 * thread): head and tail are free-running counters, published with
 * release and read with acquire; no lock on the I/O path. A thread's
 * ring is made the first time it emits while a level is traced, and is
 * freed by the trace thread after the thread exited and its ring ran dry.
 *
 * The trace thread holds events back for BT_HOLD_NS before writing them,
 * so that an event stamped just before a drain but put in its ring just
 * after still goes out in time order (blkparse and btt want sorted input;
 * a pipe to blkparse gets it sorted too).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "tlslots.h"
#include "trace.h"

const char *const bt_op_names[BT_NR_OPS] = { "read", "write", "flush", "discard" };

/* ------------------------------------------------------------ registry */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bt_dev *reg_head;
static uint32_t reg_nr;

struct bt_dev *bt_dev_get(const char *name)
{
	struct bt_dev *d;
	size_t n = strlen(name);

	pthread_mutex_lock(&reg_lock);
	for (d = reg_head; d; d = d->next)
		if (!strcmp(d->name, name))
			goto out;
	/* its counters are on cache lines of their own: aligned memory */
	if (posix_memalign((void **)&d, 64, sizeof(*d) + n + 1)) {
		d = NULL;
		goto out;
	}
	memset(d, 0, sizeof(*d));
	memcpy(d->name, name, n + 1);
	d->devnum[BT_LEVEL_DEV] = BT_MKDEV(BT_MAJOR_DEV, reg_nr);
	d->devnum[BT_LEVEL_FUSE] = BT_MKDEV(BT_MAJOR_FUSE, reg_nr);
	reg_nr++;
	d->next = reg_head;
	reg_head = d;
out:
	pthread_mutex_unlock(&reg_lock);
	return d;
}

uint32_t bt_op_cat(enum blk_op op, unsigned int flags)
{
	uint32_t c = flags & BLK_IO_WAITED ? BT_TC_SYNC : 0;

	switch (op) {
	case BLK_READ:
		return c | BT_TC_READ;
	case BLK_WRITE:
		return c | BT_TC_WRITE;
	case BLK_FLUSH:
		return BT_TC_FLUSH;
	case BLK_DISCARD:
		return BT_TC_WRITE | BT_TC_DISCARD;
	case BLK_WRITE_ZEROES:
		return BT_TC_WRITE;
	}
	return 0;
}

/* --------------------------------------------------------------- rings */

#define BT_RING_SLOTS	16384	/* a power of two: 2 MiB a thread that emitted */
#define BT_HOLD_NS	2000000ull
#define BT_DRAIN_NS	1000000l

struct bt_slot {
	struct blk_io_trace t;	/* time absolute; sequence: the events lost just before */
	char pdu[BT_PDU_MAX];
};

/*
 * What a ring lost: for each device and level, the events dropped since
 * the ring's last event of it, which that next event carries (in its
 * sequence field) to the trace thread. A session numbers its records as
 * it writes them (blkparse reads a file's records as one cpu's, and will
 * not have another cpu's in it: the numbers cannot be per ring) and adds
 * these counts first, so that each event lost is a missing number, at
 * the place it was lost: blkparse's "Skips" are the drops. Written by the
 * ring's thread only; read by a session's end; handed to the next ring
 * (a thread that starts after this one's ended) through the free list, so
 * that nothing it counted is forgotten.
 */
#define BT_SEQ_DEVS	1024	/* devices counted (minors above: drops carried by none) */

struct bt_cpu {
	uint32_t lost[BT_SEQ_DEVS * BT_LEVELS];	/* [minor * BT_LEVELS + level]; relaxed */
	struct bt_cpu *next;	/* ring_lock: free list */
};

struct bt_ring {
	uint64_t head;		/* producer: release */
	char pad1[56];
	uint64_t tail;		/* consumer: release */
	char pad2[56];
	bool dead;		/* atomic: its thread exited */
	struct bt_ring *next;	/* reg: ring_lock */
	struct bt_cpu *cpu;	/* its thread's while it lives: what it lost */
	struct bt_slot slot[];	/* ring_slots */
};

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bt_ring *rings;
static struct bt_cpu *cpu_free;	/* ring_lock */
static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static uint64_t ring_slots = BT_RING_SLOTS;	/* set once, before any ring */
static __thread struct bt_ring *my_ring;
static __thread uint32_t my_tid;
static __thread bool my_ring_failed;

static void ring_exit(void *p)
{
	struct bt_ring *r = p;

	__atomic_store_n(&r->dead, true, __ATOMIC_RELEASE);
}

static void ring_key_init(void)
{
	/*
	 * A test hook: BLKFS_TRACE_RING_SLOTS (a power of two, 2 or more)
	 * makes rings that small, so that a test can make them drop.
	 */
	const char *e = getenv("BLKFS_TRACE_RING_SLOTS");

	if (e) {
		unsigned long v = strtoul(e, NULL, 0);

		if (v >= 2 && v <= BT_RING_SLOTS && !(v & (v - 1)))
			ring_slots = v;
	}
	if (pthread_key_create(&ring_key, ring_exit))
		ring_key = (pthread_key_t)-1;
}

static struct bt_ring *ring_get(void)
{
	struct bt_ring *r = my_ring;
	struct bt_cpu *c;

	if (__builtin_expect(r != NULL, 1))
		return r;
	if (my_ring_failed)
		return NULL;
	pthread_once(&ring_once, ring_key_init);
	r = calloc(1, sizeof(*r) + ring_slots * sizeof(r->slot[0]));
	c = calloc(1, sizeof(*c));
	if (!r || !c || ring_key == (pthread_key_t)-1 || pthread_setspecific(ring_key, r)) {
		free(c);
		free(r);
		my_ring_failed = true;
		return NULL;
	}
	pthread_mutex_lock(&ring_lock);
	if (cpu_free) {
		free(c);
		c = cpu_free;
		cpu_free = c->next;
	}
	r->cpu = c;
	r->next = rings;
	rings = r;
	pthread_mutex_unlock(&ring_lock);
	my_ring = r;
	return r;
}

static uint32_t seq_idx(uint32_t devnum, int level)
{
	return (devnum & ((1u << BT_MINORBITS) - 1)) * BT_LEVELS + (uint32_t)level;
}

void bt_encode(struct blk_io_trace *out, uint32_t seq, uint64_t time_ns, uint64_t pos,
	       uint64_t len, uint32_t action, uint32_t pid, uint32_t dev, int err,
	       unsigned pdu_len)
{
	out->magic = BT_MAGIC | BT_VERSION;
	out->sequence = seq;
	out->time = time_ns;
	out->sector = pos >> 9;
	out->bytes = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
	out->action = action;
	out->pid = pid;
	out->device = dev;
	out->cpu = 0;
	out->error = (uint16_t)(err < 0 ? -err : err);
	out->pdu_len = (uint16_t)pdu_len;
}

void bt_event(struct bt_dev *d, int level, uint32_t action, uint64_t pos, uint64_t len,
	      int err, const void *pdu, unsigned pdu_len, uint32_t pid)
{
	struct bt_ring *r = ring_get();
	struct bt_slot *s;
	uint32_t i = seq_idx(d->devnum[level], level), lost = 0;
	uint64_t h, t;

	if (!r)
		goto drop;
	h = r->head;
	t = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	if (h - t >= ring_slots)
		goto drop;
	if (!pid) {
		if (!my_tid)
			my_tid = (uint32_t)syscall(SYS_gettid);
		pid = my_tid;
	}
	if (pdu_len > BT_PDU_MAX)
		pdu_len = BT_PDU_MAX;
	s = &r->slot[h & (ring_slots - 1)];
	/* the events of this device and level this ring lost just before this one */
	if (i < BT_SEQ_DEVS * BT_LEVELS) {
		lost = __atomic_load_n(&r->cpu->lost[i], __ATOMIC_RELAXED);
		if (__builtin_expect(lost != 0, 0))
			__atomic_store_n(&r->cpu->lost[i], 0, __ATOMIC_RELAXED);
	}
	bt_encode(&s->t, lost, blk_now_ns(), pos, len, action, pid, d->devnum[level], err, pdu_len);
	if (pdu_len)
		memcpy(s->pdu, pdu, pdu_len);
	__atomic_store_n(&r->head, h + 1, __ATOMIC_RELEASE);
	return;
drop:
	if (r && i < BT_SEQ_DEVS * BT_LEVELS)
		__atomic_store_n(&r->cpu->lost[i],
				 __atomic_load_n(&r->cpu->lost[i], __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
	__atomic_add_fetch(&d->dropped[level], 1, __ATOMIC_RELAXED);
}

void bt_split(struct bt_dev *d, uint32_t cat, uint64_t pos, uint64_t len, uint64_t at)
{
	uint64_t sec = at >> 9;
	unsigned char be[8];
	int i;

	for (i = 0; i < 8; i++)
		be[i] = (unsigned char)(sec >> (56 - 8 * i));	/* big-endian, as the kernel's */
	bt_event(d, BT_LEVEL_DEV, BT_ACT_SPLIT | BT_TC_ACT(cat), pos, len, 0, be, 8, 0);
}

void bt_msg(struct bt_dev *d, const char *fmt, ...)
{
	char buf[BT_PDU_MAX + 1];
	va_list ap;
	int n;

	if (!bt_on(d, BT_LEVEL_DEV))
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > BT_PDU_MAX)
		n = BT_PDU_MAX;
	bt_event(d, BT_LEVEL_DEV, BT_ACT_MESSAGE, 0, 0, 0, buf, (unsigned)n, 0);
}

/* ---------------------------------------------------------- FUSE level */

/*
 * One thread's counts of one device's FUSE level, and its latencies of
 * both levels (the device level's from bt_dev_latency()): written by that thread
 * alone (plain loads and stores through relaxed atomics, so that a reader
 * may sum them meanwhile), found through the thread's table indexed by
 * the device's minor, listed on the device (reg_lock) for readers, and
 * folded into the device's shared counts when the thread exits.
 */
struct bt_tl {
	struct bt_tl *next;		/* reg_lock: d->fuse_tl */
	struct bt_dev *d;
	uint64_t epoch;			/* atomic (release): d->fuse_epoch @hist's max since */
	uint64_t ios[BT_NR_OPS], bytes[BT_NR_OPS], ticks_ns[BT_NR_OPS];
	/*
	 * begun here less ended here (modulo 2^64: a parked request ends in
	 * another thread); the sum over the device's blocks is its requests
	 * in flight, as the kernel sums its per-CPU in-flight counts
	 */
	uint64_t in_flight;
	struct blk_hist hist[BT_LEVELS][BT_NR_OPS];
};

#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELAXED)

static void tl_attach(void *blk, void *owner);
static void tl_fold(void *blk);

/*
 * The tables by minor, their growth and the fold at a thread's exit:
 * backends/lib/tlslots.h, under reg_lock. A device is never freed (the
 * registry keeps it for the process's life): no block is ever an orphan.
 */
static struct tls_kind tl_kind = TLS_KIND_INIT(&reg_lock, sizeof(struct bt_tl), tl_attach,
					       tl_fold);
static __thread struct tls_table tl_tt;

static void tl_attach(void *blk, void *owner)
{
	struct bt_tl *t = blk;
	struct bt_dev *d = owner;

	t->d = d;
	t->epoch = __atomic_load_n(&d->fuse_epoch, __ATOMIC_RELAXED);
	t->next = d->fuse_tl;
	d->fuse_tl = t;
}

/* A thread exits: what it counted goes to its device's shared counts. */
static void tl_fold(void *blk)
{
	struct bt_tl *t = blk, **pp;
	struct bt_dev *d = t->d;
	int o;

	for (pp = &d->fuse_tl; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	__atomic_add_fetch(&d->fuse.in_flight, t->in_flight, __ATOMIC_RELAXED);
	for (o = 0; o < BT_NR_OPS; o++) {
		__atomic_add_fetch(&d->fuse.ios[o], t->ios[o], __ATOMIC_RELAXED);
		__atomic_add_fetch(&d->fuse.bytes[o], t->bytes[o], __ATOMIC_RELAXED);
		__atomic_add_fetch(&d->fuse.ticks_ns[o], t->ticks_ns[o], __ATOMIC_RELAXED);
	}
	/*
	 * its latencies, all of them (a reset leaves the totals be);
	 * its max only when no reset came after it
	 */
	for (o = 0; o < BT_LEVELS * BT_NR_OPS; o++) {
		struct blk_hist *h = &t->hist[o / BT_NR_OPS][o % BT_NR_OPS];
		struct blk_hist *to = &d->hist[o / BT_NR_OPS][o % BT_NR_OPS];
		unsigned k;
		uint64_t m = to->max_ns;

		for (k = 0; k < BH_LOG2; k++)
			__atomic_add_fetch(&to->log2[k], h->log2[k], __ATOMIC_RELAXED);
		for (k = 0; k < BH_FINE; k++)
			__atomic_add_fetch(&to->fine[k], h->fine[k], __ATOMIC_RELAXED);
		__atomic_add_fetch(&to->sum_ns, h->sum_ns, __ATOMIC_RELAXED);
		__atomic_add_fetch(&to->count, h->count, __ATOMIC_RELAXED);
		if (t->epoch != __atomic_load_n(&d->fuse_epoch, __ATOMIC_RELAXED))
			continue;
		while (h->max_ns > m &&
		       !__atomic_compare_exchange_n(&to->max_ns, &m, h->max_ns, true,
						    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
	}
}

/* This thread's block for @d, made on first use; NULL when out of memory. */
static struct bt_tl *tl_get(struct bt_dev *d)
{
	uint32_t minor = d->devnum[BT_LEVEL_DEV] & ((1u << BT_MINORBITS) - 1);
	struct bt_tl *t = tls_slot(&tl_tt, minor);

	if (__builtin_expect(t != NULL, 1))
		return t;
	return tls_slot_make(&tl_kind, &tl_tt, minor, d);
}

/*
 * This thread's block for @d with its maxima of the current epoch: after a
 * reset since this thread last counted, its maxima go (the counts stay: the
 * reset took them as its base).
 */
static struct bt_tl *tl_get_cur(struct bt_dev *d)
{
	struct bt_tl *t = tl_get(d);
	uint64_t epoch;

	if (__builtin_expect(t == NULL, 0))
		return NULL;
	epoch = __atomic_load_n(&d->fuse_epoch, __ATOMIC_RELAXED);
	if (__builtin_expect(t->epoch != epoch, 0)) {
		for (unsigned l = 0; l < BT_LEVELS; l++)
			for (unsigned k = 0; k < BT_NR_OPS; k++)
				__atomic_store_n(&t->hist[l][k].max_ns, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&t->epoch, epoch, __ATOMIC_RELEASE);
	}
	return t;
}

/*
 * The device level's latencies in this thread's block (the cache's
 * accounting of each backend I/O calls it): no locked instruction.
 */
void bt_dev_latency(struct bt_dev *d, enum blk_op op, uint64_t ns)
{
	struct bt_tl *t;

	if (!d)
		return;
	t = tl_get_cur(d);
	if (__builtin_expect(t != NULL, 1))
		blk_hist_add_owned(&t->hist[BT_LEVEL_DEV][bt_op(op)], ns);
	else
		blk_hist_add(&d->hist[BT_LEVEL_DEV][bt_op(op)], ns);
}

/*
 * Busy time without a lock, as the kernel's update_io_ticks(): the thread
 * that moves the stamp from S to @now adds now - S when the device was busy
 * over [S, now]: a request is ending (@end: it was in flight all along), or
 * one was in flight when this one began. A thread that loses the race (the
 * stamp moved meanwhile) adds nothing: the winner covered up to its own
 * time, and the next update covers the rest. Called before the in-flight
 * count changes.
 */
/*
 * Busy time as the kernel's update_io_ticks() keeps it, at its granularity:
 * the kernel moves the stamp once a jiffy, so it takes the shared line once
 * a jiffy, not per request; here once per BT_TICK_NS (a request seen within
 * it of the stamp leaves it alone, and its time is counted at the next move).
 * A move at begin sums every thread's in-flight count (fuse_in_flight():
 * reg_lock and one cache line per thread); at 64 us that walk was 0.7% of
 * the daemon's samples at QD32 (BENCHMARKS.md, "Issue 39's last
 * shavings"). 1 ms is the kernel's own granularity at HZ=1000, and finer
 * than iostat's.
 */
#define BT_TICK_NS 1000000u

/* The FUSE level's requests in flight: the shared count and every thread's. */
static uint64_t fuse_in_flight(struct bt_dev *d)
{
	uint64_t n = __atomic_load_n(&d->fuse.in_flight, __ATOMIC_RELAXED);
	struct bt_tl *t;

	pthread_mutex_lock(&reg_lock);
	for (t = d->fuse_tl; t; t = t->next)
		n += __atomic_load_n(&t->in_flight, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&reg_lock);
	return n;
}

static void fuse_ticks(struct bt_dev *d, uint64_t now, bool end)
{
	uint64_t stamp = __atomic_load_n(&d->fuse_stamp_ns, __ATOMIC_RELAXED);

	if (now >= stamp + BT_TICK_NS &&
	    __atomic_compare_exchange_n(&d->fuse_stamp_ns, &stamp, now, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED) &&
	    (end || fuse_in_flight(d)))
		__atomic_add_fetch(&d->fuse.io_ticks_ns, now - stamp, __ATOMIC_RELAXED);
}

/* One more (@delta 1) or one fewer (-1) in flight, in this thread's block when it has one. */
static void fuse_in_flight_add(struct bt_dev *d, uint64_t delta)
{
	struct bt_tl *t = tl_get(d);

	if (__builtin_expect(t != NULL, 1))
		OWNED_ADD(&t->in_flight, delta);
	else
		__atomic_add_fetch(&d->fuse.in_flight, delta, __ATOMIC_RELAXED);
}

__thread struct blk_stamp blk_begin_stamp;
__thread struct blk_stamp blk_end_stamp;

uint64_t bt_req_begin(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len,
		      uint32_t pid)
{
	uint64_t now = blk_now_ns();

	/* a new request in this thread: an earlier one's stamps are no longer any use */
	blk_stamp_clear(&blk_begin_stamp);
	blk_stamp_clear(&blk_end_stamp);

	if (!d)
		return now;
	fuse_ticks(d, now, false);
	fuse_in_flight_add(d, 1);
	if (bt_on(d, BT_LEVEL_FUSE)) {
		uint32_t cat = bt_op_cat(op, 0);

		bt_event(d, BT_LEVEL_FUSE, BT_ACT_QUEUE | BT_TC_ACT(cat), pos, len, 0, NULL, 0, pid);
	}
	return now;
}

void bt_req_issue(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid)
{
	if (bt_on(d, BT_LEVEL_FUSE))
		bt_event(d, BT_LEVEL_FUSE, BT_ACT_ISSUE | BT_TC_ACT(bt_op_cat(op, 0)), pos, len, 0,
			 NULL, 0, pid);
}

static void req_end_at(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid,
		       uint64_t start_ns, long res, uint64_t now)
{
	uint64_t ns = now - start_ns;
	unsigned o = bt_op(op);

	if (!d)
		return;
	fuse_ticks(d, now, true);
	fuse_in_flight_add(d, (uint64_t)-1);
	if (res >= 0) {
		/* a read or write counts the bytes it moved (a read at the end: fewer) */
		uint64_t bytes = op == BLK_FLUSH ? 0 :
				 (op == BLK_READ || op == BLK_WRITE) && (uint64_t)res < len ?
				 (uint64_t)res : len;
		struct bt_tl *t = tl_get_cur(d);

		if (__builtin_expect(t != NULL, 1)) {
			OWNED_ADD(&t->ios[o], 1);
			OWNED_ADD(&t->bytes[o], bytes);
			OWNED_ADD(&t->ticks_ns[o], ns);
			blk_hist_add_owned(&t->hist[BT_LEVEL_FUSE][o], ns);
		} else {
			__atomic_add_fetch(&d->fuse.ios[o], 1, __ATOMIC_RELAXED);
			__atomic_add_fetch(&d->fuse.bytes[o], bytes, __ATOMIC_RELAXED);
			__atomic_add_fetch(&d->fuse.ticks_ns[o], ns, __ATOMIC_RELAXED);
			blk_hist_add(&d->hist[BT_LEVEL_FUSE][o], ns);
		}
	}
	if (bt_on(d, BT_LEVEL_FUSE))
		bt_event(d, BT_LEVEL_FUSE, BT_ACT_COMPLETE | BT_TC_ACT(bt_op_cat(op, 0)), pos, len,
			 res < 0 ? (int)res : 0, NULL, 0, pid);
}

void bt_req_end(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid,
		uint64_t start_ns, long res)
{
	req_end_at(d, op, pos, len, pid, start_ns, res, blk_now_ns());
}

void bt_req_end_tok(struct bt_dev *d, enum blk_op op, uint64_t pos, uint64_t len, uint32_t pid,
		    uint64_t start_ns, long res, const void *tok)
{
	req_end_at(d, op, pos, len, pid, start_ns, res, blk_stamp_take(&blk_end_stamp, tok));
}

void bt_fuse_counts(struct bt_dev *d, struct bt_counts *out)
{
	uint64_t now = blk_now_ns();
	struct bt_tl *t;
	unsigned i;

	pthread_mutex_lock(&reg_lock);
	for (i = 0; i < BT_NR_OPS; i++) {
		out->ios[i] = __atomic_load_n(&d->fuse.ios[i], __ATOMIC_RELAXED);
		out->bytes[i] = __atomic_load_n(&d->fuse.bytes[i], __ATOMIC_RELAXED);
		out->ticks_ns[i] = __atomic_load_n(&d->fuse.ticks_ns[i], __ATOMIC_RELAXED);
		for (t = d->fuse_tl; t; t = t->next) {
			out->ios[i] += __atomic_load_n(&t->ios[i], __ATOMIC_RELAXED);
			out->bytes[i] += __atomic_load_n(&t->bytes[i], __ATOMIC_RELAXED);
			out->ticks_ns[i] += __atomic_load_n(&t->ticks_ns[i], __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&reg_lock);
	out->in_flight = fuse_in_flight(d);
	out->io_ticks_ns = __atomic_load_n(&d->fuse.io_ticks_ns, __ATOMIC_RELAXED);
	if (out->in_flight) {
		/* the busy time since the last update counts too */
		uint64_t stamp = __atomic_load_n(&d->fuse_stamp_ns, __ATOMIC_RELAXED);

		if (now > stamp)
			out->io_ticks_ns += now - stamp;
	}
	/*
	 * Never less than a reader was shown before: that guess counts the
	 * time since the stamp as busy, and the next mover may find nothing
	 * in flight (a request ended within BT_TICK_NS of the stamp, or the
	 * per-thread counts summed while one moved between threads) and add
	 * none of it. Busy time is a counter (%util, rate() of
	 * blkfs_io_busy_seconds_total): it must not go back.
	 */
	{
		uint64_t shown = __atomic_load_n(&d->fuse_ticks_shown, __ATOMIC_RELAXED);

		while (out->io_ticks_ns > shown &&
		       !__atomic_compare_exchange_n(&d->fuse_ticks_shown, &shown, out->io_ticks_ns,
						    false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		if (out->io_ticks_ns < shown)
			out->io_ticks_ns = shown;
	}
}

/*
 * @level's totals of @op into @out, every thread's block summed; max_ns the
 * largest since the last reset. Under reg_lock, so that a thread's block
 * that tl_exit() folds into the shared counts is counted once.
 */
static void hist_total_locked(struct bt_dev *d, int level, unsigned op, struct blk_hist *out)
{
	uint64_t epoch = __atomic_load_n(&d->fuse_epoch, __ATOMIC_RELAXED);
	struct bt_tl *t;

	blk_hist_snap(&d->hist[level][op], out);
	for (t = d->fuse_tl; t; t = t->next) {
		/* a block still of an older epoch has a max from before the reset */
		bool cur = __atomic_load_n(&t->epoch, __ATOMIC_ACQUIRE) == epoch;
		uint64_t m = out->max_ns;

		blk_hist_snap_add(&t->hist[level][op], out);
		if (!cur)
			out->max_ns = m;
	}
}

void bt_hist_snap_total(struct bt_dev *d, int level, unsigned op, struct blk_hist *out)
{
	pthread_mutex_lock(&reg_lock);
	hist_total_locked(d, level, op, out);
	pthread_mutex_unlock(&reg_lock);
}

void bt_hist_snap(struct bt_dev *d, int level, unsigned op, struct blk_hist *out)
{
	pthread_mutex_lock(&reg_lock);
	hist_total_locked(d, level, op, out);
	blk_hist_sub(out, &d->hist_base[level][op]);
	pthread_mutex_unlock(&reg_lock);
}

/*
 * A reset takes the totals as the base that bt_hist_snap() subtracts, and
 * clears only the maxima: the shared ones here, each thread's at its next
 * request (the epoch). The counts never go backwards, so the exposition's
 * histograms stay counters; no request waits for a reset, nor pays for it.
 */
void bt_hist_reset(struct bt_dev *d)
{
	int l;
	unsigned o;

	pthread_mutex_lock(&reg_lock);
	for (l = 0; l < BT_LEVELS; l++)
		for (o = 0; o < BT_NR_OPS; o++) {
			hist_total_locked(d, l, o, &d->hist_base[l][o]);
			__atomic_store_n(&d->hist[l][o].max_ns, 0, __ATOMIC_RELAXED);
		}
	__atomic_add_fetch(&d->fuse_epoch, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&reg_lock);
}

/* Append to @buf as snprintf: @o counts on past @len, so the caller learns the length needed. */
#define APPEND(buf, len, o, ...) \
	((o) += (size_t)snprintf((o) < (len) ? (buf) + (o) : NULL, (o) < (len) ? (len) - (o) : 0, \
				 __VA_ARGS__))

static const char *const lvl_names[BT_LEVELS] = { "device", "fuse" };

size_t bt_latency_show(struct bt_dev *d, char *buf, size_t len)
{
	struct blk_hist *h;
	size_t o = 0;
	int l, op;

	if (len)
		buf[0] = 0;
	h = malloc(sizeof(*h));
	if (!h)
		return 0;
	for (l = 0; l < BT_LEVELS; l++)
		for (op = 0; op < BT_NR_OPS; op++) {
			bt_hist_snap(d, l, (unsigned)op, h);
			if (!h->count)
				continue;
			APPEND(buf, len, o,
				"%s %s count %llu sum_ns %llu avg_ns %llu p50_ns %llu p90_ns %llu "
				"p99_ns %llu p99.9_ns %llu max_ns %llu\n", lvl_names[l], bt_op_names[op],
				(unsigned long long)h->count, (unsigned long long)h->sum_ns,
				(unsigned long long)(h->sum_ns / h->count),
				(unsigned long long)blk_hist_pct(h, 500),
				(unsigned long long)blk_hist_pct(h, 900),
				(unsigned long long)blk_hist_pct(h, 990),
				(unsigned long long)blk_hist_pct(h, 999),
				(unsigned long long)h->max_ns);
			o += blk_hist_print(h, o < len ? buf + o : NULL, o < len ? len - o : 0);
		}
	free(h);
	return o;
}

size_t bt_latency_total_show(struct bt_dev *d, char *buf, size_t len)
{
	struct blk_hist *h;
	size_t o = 0;
	int l, op, k;

	if (len)
		buf[0] = 0;
	h = malloc(sizeof(*h));
	if (!h)
		return 0;
	for (l = 0; l < BT_LEVELS; l++)
		for (op = 0; op < BT_NR_OPS; op++) {
			bt_hist_snap_total(d, l, (unsigned)op, h);
			APPEND(buf, len, o, "%s %s count %llu sum_ns %llu usecs_log2", lvl_names[l],
			       bt_op_names[op], (unsigned long long)h->count,
			       (unsigned long long)h->sum_ns);
			for (k = 0; k < BH_LOG2; k++)
				APPEND(buf, len, o, " %llu", (unsigned long long)h->log2[k]);
			APPEND(buf, len, o, "\n");
		}
	free(h);
	return o;
}

/* ------------------------------------------------------- trace thread */

/*
 * Two kinds of thread (core/THREADS.md): one trace thread takes the events
 * out of the rings in time order and copies each into the buffer of every
 * session that wants it, never waiting for a reader; each session has a
 * writer thread that writes its buffer to its descriptor. A reader that
 * stops reading fills only its own session's buffer: its session then
 * loses events (counted, and each a gap in its sequence numbers), and no
 * other session, no ring and no I/O waits for it.
 */
#define BT_MAX_SESSIONS	16
#define BT_SESS_PIDS	256
/*
 * A session's records taken, not yet written: 4 MiB, about 100 ms of a
 * device-level trace of fio 4k QD32 on ram (~110k IOPS, ~40 MB/s of
 * records), so a writer or reader off the CPU that long (a loaded 2-CPU
 * machine) loses nothing; 1 MiB dropped events in 2 runs of 5 there.
 * Touched only as it fills (malloc'd: mapped on demand).
 */
#define BT_WBUF		(4u << 20)
#define BT_WMARKS	(2 * sizeof(struct blk_io_trace))	/* room kept for its marks */
#define BT_WCHUNK	4096		/* PIPE_BUF: a pipe poll() calls writable takes it whole */
#define BT_POLL_MS	50
#define BT_STOP_WRITE_NS 500000000ull	/* a stop's reader that takes nothing that long loses the rest */

struct bt_session {
	struct bt_dev *d;
	int level;
	int fd;
	bool regular;		/* a regular file: written whole, never waits for a reader */
	uint32_t devnum;
	uint64_t t0;		/* start: events before it are not this session's */
	uint64_t dropped0;	/* d->dropped[level] at the start */
	uint64_t stop_ns;	/* sess_lock: events after it are not this session's */
	bool stopping;		/* sess_lock: the trace thread lets go once past stop_ns */
	uint32_t pids[BT_SESS_PIDS];	/* the trace thread's: named so far (a PROCESS note each) */
	unsigned nr_pids;
	uint32_t seq;		/* the trace thread's: the last number, given or lost */
	uint64_t last_ns;	/* the trace thread's: the time of the last record */
	pthread_t writer;
	/* @lock: the trace thread fills, the writer empties */
	pthread_mutex_t lock;
	pthread_cond_t cond;	/* @lock: data came, drained */
	char *fill;		/* @lock */
	size_t fill_len;	/* @lock */
	uint64_t fill_count;	/* @lock: records in fill */
	uint64_t lost_full;	/* @lock: records the full buffer turned away */
	bool drained;		/* @lock: nothing more comes */
	uint64_t drained_ns;	/* @lock: when drained was set */
	int werr;		/* @lock: the first failed write */
	/* the writer's own (read by stop after it joined it) */
	char *out;
	uint64_t written, lost_write;
	uint64_t progress_ns;	/* the last write that took something */
};

static pthread_mutex_t sess_lock = PTHREAD_MUTEX_INITIALIZER;	/* sessions, thread */
static struct bt_session *sess[BT_MAX_SESSIONS];
static int nr_sess;
static bool thread_running;
static pthread_t trace_thread;
static uint64_t late;		/* the trace thread's: events that came after the hold */
static uint64_t hold_ns = BT_HOLD_NS;	/* the trace thread's */
static uint64_t hold_at;	/* the trace thread's: when hold_ns last changed */
#define BT_HOLD_MAX_NS	64000000ull
/*
 * A hold that grew comes down by half after this long without a late
 * event: a hold of 64 ms kept for good (a busy moment long ago) keeps
 * 64 ms of events in the rings and the session buffers, and at 100k+
 * IOPS those fill and drop.
 */
#define BT_HOLD_CALM_NS	1000000000ull

/*
 * A record into @s's buffer; false (and counted lost, unless @mark: a
 * record that is no event) when it is full or its writes failed.
 */
static bool sess_put(struct bt_session *s, const struct blk_io_trace *e, const char *pdu,
		     bool mark)
{
	struct blk_io_trace t = *e;
	size_t n = sizeof(t) + t.pdu_len;
	bool ok = false;

	/*
	 * An event put in its ring more than the hold after it was stamped
	 * (its thread preempted between the two) comes after later ones went
	 * out: it goes out at the time of the last, so that the trace stays
	 * in order (blkparse reads a file as sorted), and the hold grows.
	 */
	if (t.time < s->last_ns) {
		t.time = s->last_ns;
		late++;
	}
	s->last_ns = t.time;
	pthread_mutex_lock(&s->lock);
	if (s->werr || s->fill_len + n > (mark ? BT_WBUF + BT_WMARKS : BT_WBUF)) {
		if (!mark)
			s->lost_full++;
	} else {
		t.time = t.time > s->t0 ? t.time - s->t0 : 0;
		memcpy(s->fill + s->fill_len, &t, sizeof(t));
		if (t.pdu_len)
			memcpy(s->fill + s->fill_len + sizeof(t), pdu, t.pdu_len);
		s->fill_len += n;
		s->fill_count += t.action != 0;	/* a mark is no record written */
		ok = true;
	}
	pthread_mutex_unlock(&s->lock);
	return ok;
}

/*
 * A mark: a record with no category, which blkparse numbers (it counts the
 * numbers missing before it) but neither prints nor counts nor passes on
 * to btt (-d). Not counted written.
 */
static void sess_mark(struct bt_session *s, uint32_t seq, uint64_t time_ns)
{
	struct blk_io_trace mark;

	bt_encode(&mark, seq, time_ns, 0, 0, 0, 0, s->devnum, 0, 0);
	sess_put(s, &mark, NULL, true);
}

/*
 * An event into @s's buffer, numbered: first the numbers of the events its
 * ring lost just before it (@e carries their count), then its own, or,
 * when the buffer is full, a number lost too. A message takes none
 * (blkparse checks no message's number, as the kernel gives none).
 */
static void sess_take(struct bt_session *s, const struct bt_slot *e)
{
	struct blk_io_trace t = e->t;

	s->seq += t.sequence;
	if (t.action == BT_ACT_MESSAGE) {
		t.sequence = 0;
		sess_put(s, &t, e->pdu, false);
		return;
	}
	t.sequence = ++s->seq;
	sess_put(s, &t, e->pdu, false);
}

/*
 * The session ends: blkparse sees no gap after the last record, so a mark
 * with the number after those lost at the end (its full buffer, and what
 * the rings lost and no later event carried). The rings' counts are only
 * read while no other session reads the same device and level, whose
 * events after the stop carry those counts too. sess_lock held.
 */
static void sess_end_mark_locked(struct bt_session *s)
{
	uint32_t i = seq_idx(s->devnum, s->level), pending = 0;
	struct bt_ring *r;
	struct bt_cpu *cp;
	int k;

	for (k = 0; k < nr_sess; k++)
		if (sess[k] != s && sess[k]->devnum == s->devnum)
			i = BT_SEQ_DEVS * BT_LEVELS;
	if (i < BT_SEQ_DEVS * BT_LEVELS) {
		pthread_mutex_lock(&ring_lock);
		for (r = rings; r; r = r->next)
			pending += __atomic_load_n(&r->cpu->lost[i], __ATOMIC_RELAXED);
		for (cp = cpu_free; cp; cp = cp->next)
			pending += __atomic_load_n(&cp->lost[i], __ATOMIC_RELAXED);
		pthread_mutex_unlock(&ring_lock);
	}
	sess_mark(s, s->seq + pending + 1, s->stop_ns);
}

/*
 * blkparse names each pid by the PROCESS note that came before its first
 * event (the kernel sends one per task): the comm from /proc, read here in
 * the trace thread, never on the I/O path.
 */
static void sess_name_pid(struct bt_session *s, const struct blk_io_trace *t)
{
	struct bt_slot note;
	char path[64];
	unsigned i;
	bool full;
	ssize_t n;
	int fd;

	for (i = 0; i < s->nr_pids; i++)
		if (s->pids[i] == t->pid)
			return;
	if (s->nr_pids == BT_SESS_PIDS)
		return;
	/* no room: no /proc read per event while the buffer is full */
	pthread_mutex_lock(&s->lock);
	full = s->werr || s->fill_len + sizeof(note.t) + 16 > BT_WBUF;
	pthread_mutex_unlock(&s->lock);
	if (full)
		return;
	memset(&note, 0, sizeof(note));
	snprintf(path, sizeof(path), "/proc/%u/comm", t->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, note.pdu, 15) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		snprintf(note.pdu, 16, "%u", t->pid);
	note.pdu[strcspn(note.pdu, "\n")] = 0;
	bt_encode(&note.t, 0, t->time, 0, 0, BT_ACT(BT_TC_NOTIFY, BT_TN_PROCESS), t->pid,
		  t->device, 0, 16);
	/* a full buffer: not an event lost (no number), the next event tries again */
	if (sess_put(s, &note.t, note.pdu, true))
		s->pids[s->nr_pids++] = t->pid;
}

/* One event to every session that wants it (sess_lock held). */
static void dispatch_locked(const struct bt_slot *e)
{
	int k;

	for (k = 0; k < nr_sess; k++) {
		struct bt_session *s = sess[k];

		if (s->devnum != e->t.device || e->t.time < s->t0)
			continue;
		if (s->stopping && e->t.time > s->stop_ns) {
			/* not this session's, but what its ring lost before it is */
			s->seq += e->t.sequence;
			continue;
		}
		sess_name_pid(s, &e->t);
		sess_take(s, e);
	}
}

struct bt_cursor {
	struct bt_ring *r;
	uint64_t t, h;
};

/*
 * Take the events stamped up to @cutoff out of every ring, oldest first
 * (each ring is in time order: one thread stamps it), into the sessions.
 * An event stays in its ring until it is taken, so a later event of
 * another ring never goes out before it, whatever the number of events.
 * Rings of exited threads are freed once empty. @cur: the trace thread's
 * array of @cap cursors, grown here. sess_lock held.
 */
static void drain_locked(uint64_t cutoff, struct bt_cursor **cur, size_t *cap)
{
	struct bt_ring **pp, *r;
	size_t n = 0, i;

	pthread_mutex_lock(&ring_lock);
	for (pp = &rings; (r = *pp);) {
		bool dead = __atomic_load_n(&r->dead, __ATOMIC_ACQUIRE);
		uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);

		if (r->tail == h) {
			if (dead) {
				/* its numbers go on with the next thread's ring */
				*pp = r->next;
				r->cpu->next = cpu_free;
				cpu_free = r->cpu;
				free(r);
				continue;
			}
		} else {
			if (n == *cap) {
				size_t c = *cap ? 2 * *cap : 64;
				struct bt_cursor *p = realloc(*cur, c * sizeof(*p));

				if (!p)
					break;	/* the rest next time */
				*cur = p;
				*cap = c;
			}
			(*cur)[n].r = r;
			(*cur)[n].t = r->tail;
			(*cur)[n].h = h;
			n++;
		}
		pp = &r->next;
	}
	pthread_mutex_unlock(&ring_lock);
	while (n) {
		struct bt_cursor *best = NULL;
		uint64_t bt = 0;

		for (i = 0; i < n; i++) {
			struct bt_cursor *c = &(*cur)[i];
			uint64_t tm = c->r->slot[c->t & (ring_slots - 1)].t.time;

			if (tm <= cutoff && (!best || tm < bt)) {
				best = c;
				bt = tm;
			}
		}
		if (!best)
			break;
		dispatch_locked(&best->r->slot[best->t & (ring_slots - 1)]);
		best->t++;
		__atomic_store_n(&best->r->tail, best->t, __ATOMIC_RELEASE);
		if (best->t == best->h)
			*best = (*cur)[--n];
	}
}

/*
 * Write @len bytes of whole records (@count of them) from @buf to @s's
 * descriptor. A pipe or socket is written a chunk of whole records at a
 * time once poll() finds it writable, so that the writer never sleeps in
 * write() and a stop returns even while its reader is stopped: once
 * drained, a reader that takes nothing for BT_STOP_WRITE_NS loses the
 * rest. What that or an error leaves is counted lost, record by record.
 */
static void sess_write_out(struct bt_session *s, const char *buf, size_t len, uint64_t count)
{
	size_t off = 0, chunk = s->regular ? len : BT_WCHUNK;
	int err = 0;

	while (off < len && !err) {
		size_t end = off, nrec = 0, done = off;

		/* whole records, at most a chunk (a record is far below one) */
		while (end < len) {
			struct blk_io_trace t;	/* a copy: records follow payloads, unaligned */
			size_t n;

			memcpy(&t, buf + end, sizeof(t));
			n = sizeof(t) + t.pdu_len;
			if (end + n - off > chunk && end > off)
				break;
			end += n;
			nrec += t.action != 0;
		}
		while (done < end && !err) {
			ssize_t w;

			if (!s->regular) {
				struct pollfd pf = { .fd = s->fd, .events = POLLOUT };
				int pr = poll(&pf, 1, BT_POLL_MS);

				if (pr == 0 || (pr < 0 && errno == EINTR)) {
					uint64_t since;

					/* drained, and the reader took nothing for BT_STOP_WRITE_NS */
					pthread_mutex_lock(&s->lock);
					since = s->drained_ns;
					pthread_mutex_unlock(&s->lock);
					if (since && s->progress_ns > since)
						since = s->progress_ns;
					if (since && blk_now_ns() - since >= BT_STOP_WRITE_NS)
						err = -ETIMEDOUT;
					continue;
				}
			}
			w = write(s->fd, buf + done, end - done);
			if (w < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			if (w <= 0) {
				err = w < 0 ? -errno : -EIO;
			} else {
				done += (size_t)w;
				s->progress_ns = blk_now_ns();
			}
		}
		if (done == end) {
			s->written += nrec;
			count -= nrec;
			off = end;
		}
	}
	if (!err)
		return;
	s->lost_write += count;
	pthread_mutex_lock(&s->lock);
	if (!s->werr)
		s->werr = err;
	pthread_mutex_unlock(&s->lock);
}

/* A session's writer: its buffer to its descriptor until drained and empty. */
static void *sess_writer(void *arg)
{
	struct bt_session *s = arg;
	sigset_t pipe;

	/* a reader gone (blkparse ended) is EPIPE for this session, never the process's end */
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, NULL);
	pthread_mutex_lock(&s->lock);
	for (;;) {
		char *b;
		size_t len;
		uint64_t count;

		while (!s->fill_len && !s->drained)
			pthread_cond_wait(&s->cond, &s->lock);
		if (!s->fill_len)
			break;
		b = s->fill;
		len = s->fill_len;
		count = s->fill_count;
		s->fill = s->out;
		s->out = b;
		s->fill_len = 0;
		s->fill_count = 0;
		if (s->werr) {
			s->lost_write += count;
			continue;
		}
		pthread_mutex_unlock(&s->lock);
		sess_write_out(s, b, len, count);
		pthread_mutex_lock(&s->lock);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

static void *trace_main(void *arg)
{
	struct timespec ts = { 0, BT_DRAIN_NS };
	struct bt_cursor *cur = NULL;
	size_t cap = 0;
	int k;

	(void)arg;
	pthread_mutex_lock(&sess_lock);
	while (nr_sess) {
		uint64_t cutoff, now;

		pthread_mutex_unlock(&sess_lock);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&sess_lock);
		/*
		 * Events are held back (BT_HOLD_NS, more once one came late),
		 * so that one stamped just
		 * before this pass but put in its ring just after still goes
		 * out in time order; a stop waits for the same hold (its
		 * session ends once the passes are past its stop), and never
		 * makes the other sessions' events leave early.
		 */
		now = blk_now_ns();
		cutoff = now - hold_ns;
		late = 0;
		drain_locked(cutoff, &cur, &cap);
		if (late) {
			if (hold_ns < BT_HOLD_MAX_NS)
				hold_ns *= 2;
			hold_at = now;
		} else if (hold_ns > BT_HOLD_NS && now - hold_at >= BT_HOLD_CALM_NS) {
			hold_ns /= 2;
			hold_at = now;
		}
		for (k = 0; k < nr_sess; k++) {
			struct bt_session *s = sess[k];

			pthread_mutex_lock(&s->lock);
			if (s->stopping && s->stop_ns <= cutoff) {
				pthread_mutex_unlock(&s->lock);
				sess_end_mark_locked(s);
				pthread_mutex_lock(&s->lock);
				s->drained = true;
				s->drained_ns = blk_now_ns();
				sess[k--] = sess[--nr_sess];
			}
			if (s->fill_len || s->drained)
				pthread_cond_broadcast(&s->cond);
			pthread_mutex_unlock(&s->lock);
		}
	}
	thread_running = false;
	pthread_mutex_unlock(&sess_lock);
	free(cur);
	return NULL;
}

static void sess_free(struct bt_session *s)
{
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s->fill);
	free(s->out);
	free(s);
}

struct bt_session *bt_session_start(struct bt_dev *d, int level, int fd)
{
	struct bt_session *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	struct stat st;
	int ret = 0;

	if (!s)
		return ERR_PTR(-ENOMEM);
	s->d = d;
	s->level = level;
	s->fd = fd;
	s->regular = !fstat(fd, &st) && S_ISREG(st.st_mode);
	s->devnum = d->devnum[level];
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	s->fill = malloc(BT_WBUF + BT_WMARKS);
	s->out = malloc(BT_WBUF + BT_WMARKS);
	if (!s->fill || !s->out) {
		sess_free(s);
		return ERR_PTR(-ENOMEM);
	}
	ret = -pthread_create(&s->writer, NULL, sess_writer, s);
	if (ret) {
		sess_free(s);
		return ERR_PTR(ret);
	}
	s->dropped0 = __atomic_load_n(&d->dropped[level], __ATOMIC_RELAXED);
	pthread_mutex_lock(&sess_lock);
	if (nr_sess == BT_MAX_SESSIONS) {
		ret = -EBUSY;
		goto out_unlock;
	}
	if (!thread_running) {
		pthread_attr_t attr;

		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		/* it takes sess_lock first, and then sees this session */
		ret = -pthread_create(&trace_thread, &attr, trace_main, NULL);
		pthread_attr_destroy(&attr);
		if (ret)
			goto out_unlock;
		thread_running = true;
	}
	/* numbered from 1: a start mark 0 makes a loss before the first record a gap */
	s->t0 = blk_now_ns();
	sess_mark(s, 0, s->t0);
	sess[nr_sess++] = s;
	__atomic_add_fetch(&d->on[level], 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&sess_lock);
	return s;
out_unlock:
	pthread_mutex_unlock(&sess_lock);
	pthread_mutex_lock(&s->lock);
	s->drained = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->writer, NULL);
	sess_free(s);
	return ERR_PTR(ret);
}

int bt_session_stop(struct bt_session *s, uint64_t *written, uint64_t *dropped)
{
	int err;

	__atomic_sub_fetch(&s->d->on[s->level], 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&sess_lock);
	s->stop_ns = blk_now_ns();
	s->stopping = true;
	pthread_mutex_unlock(&sess_lock);
	/*
	 * The trace thread lets go within the hold and a pass (it never waits
	 * for a reader); the writer then writes the rest, or gives up once
	 * its reader took nothing for BT_STOP_WRITE_NS.
	 */
	pthread_mutex_lock(&s->lock);
	while (!s->drained)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->writer, NULL);
	*written = s->written;
	*dropped = __atomic_load_n(&s->d->dropped[s->level], __ATOMIC_RELAXED) - s->dropped0 +
		   s->lost_full + s->lost_write;
	err = s->werr == -ETIMEDOUT ? 0 : s->werr;
	close(s->fd);
	sess_free(s);
	return err;
}
