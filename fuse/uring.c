/* SPDX-License-Identifier: MIT */
/*
 * fuse/uring.c - FUSE over io_uring (kernel 6.14+, fs/fuse/dev_uring.c),
 * written for libfuse 3.14, which has no ring of its own.
 *
 * The kernel keeps one queue per possible CPU and puts each request on the
 * queue of the CPU its caller runs on. blkfs runs one thread per queue,
 * pinned to that CPU, with its own io_uring and uring_queue_depth entries.
 * An entry is a header buffer and a payload buffer registered with the
 * kernel; the kernel fills them with a request and completes the entry's
 * command; the thread lays the request out as /dev/fuse would have
 * delivered it and hands it to libfuse (fuse_session_process_buf), so the
 * op handlers are the ones /dev/fuse requests reach. The reply comes back
 * through rawio.c's writev hook to bf_ring_reply(), is copied into the
 * entry, and the entry is committed with COMMIT_AND_FETCH, which also
 * makes it wait for the next request.
 *
 * Entry memory: [front page | payload buffer], one mmap per queue. The
 * front page holds the kernel's header buffer at its start and, at its
 * end, the fuse_in_header and the op's header copied in front of the
 * payload: header, op header and payload are then one contiguous request
 * for libfuse, and a WRITE's data, the start of the payload, is
 * page-aligned (O_DIRECT needs no copy) and stays where it is until the
 * reply is committed.
 *
 * Who commits: only the queue's own thread submits to its io_uring. The
 * kernel runs the work of a uring command (copying the next request into
 * the entry's buffers) in the context of the task that submitted it; a
 * reply committed by another thread (a backend's completion) would make
 * that thread the one that must run the next request's copy, wake it on
 * whatever CPU it sleeps, and, if it ends, cancel the command with the next
 * request in it. So a reply from another thread is copied into the entry
 * there and the entry pushed on the queue's hand-off list (lock-free); the
 * first push onto an empty list writes the queue's eventfd, which the
 * thread always has a read on in its ring. Replies from the thread itself
 * (a handler that answers at once) go on a local list: no atomic, no
 * syscall; the commits are submitted with the wait for the next request,
 * one io_uring_enter per batch.
 *
 * Finding a request's entry from its reply, with no table and no lock:
 * libfuse is given, as the request's unique, a key that names the entry
 * (KEY_RING | generation | queue | index: ent_key()), and its reply
 * carries that key back; the kernel's own unique stays in e->unique and
 * is what the commit sends. The generation, also in e->state, makes a
 * late second reply to an entry that holds a newer request find no
 * request. The thread that is handling the request matches it at once
 * (tl_ent). Kernel uniques are far below bit 63, so a reply without it is
 * /dev/fuse's. What libfuse does with a unique: it puts it in the reply
 * and matches FUSE_INTERRUPTs against it; an interrupt names the kernel's
 * unique, so libfuse does not find a ring request by it (it keeps the
 * interrupt and answers it EAGAIN with its next request, as one that came
 * before its request): blkfs registers no interrupt callback, and the
 * request is answered as usual.
 *
 * Entry states (e->state):
 *   KERNEL:  the kernel has it (registered or committed), waiting for a request
 *   HELD:    a request is in it, a handler owns it and its buffers
 *   REPLIED: the reply is in it, its commit is on a list for the thread
 *   IDLE:    a request came after bf_ring_stop() began: never served; the
 *            connection's end answers it (ENOTCONN)
 *   GONE:    the kernel ended the entry (the connection went away)
 * A queue's HELD entries: q->requests - q->replied_here - q->replied_far
 * (queue_held()); an entry leaves HELD only by its reply.
 *
 * Invariants:
 *  1. Only the queue's thread touches its io_uring (after creation) and
 *     its local list; e->cmd and KERNEL/IDLE/GONE are written by it.
 *  2. HELD -> REPLIED happens once, by compare-and-swap, in the replying
 *     thread; buffers are written before the entry is published on a list
 *     (release), and read by the thread after taking the list (acquire).
 *  3. A replier from another thread counts q->replied_far last, after
 *     its eventfd write: when queue_held() is 0 no replier touches the
 *     queue, so bf_ring_stop() may close and unmap it.
 *  4. A HELD entry's e->key names it (queue, index) with the generation
 *     of e->state; e->state's generation changes only when the entry
 *     takes a request (lay_out()).
 *  5. q->requests, q->replied_here, q->handoffs and q->stolen are written
 *     only by the queue's thread (OWNED_ADD: a plain store of the owned
 *     value, no locked instruction); others read them atomically.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "../backends/lib/plug.h"
#include "fuse_uring_abi.h"
#include "opens.h"
#include "uring.h"

#define RING_PAGE 4096u
#define RING_FRONT RING_PAGE		/* front page before each payload buffer */
#define RING_EV_TAG ((uint64_t)1)	/* user_data of the eventfd read (entries are aligned) */
#define RING_STEAL_MIN (256u << 10)	/* a request this large may go to an idle queue's thread */
#define RING_SPIN_BUSY_NS 500000ull	/* a yield this long ran another task a whole slice: the CPU is not idle */
#define RING_SPIN_BACKOFF_NS 50000000ull	/* then no spin for this long */
#define RING_SPREAD_MIN 4		/* a wait's batch this long is shared with an idle queue's thread */
#define RING_BATCH_MAX 256		/* requests taken from one wait (CONF_MAX_URING_DEPTH) */
#define RING_TICK_MS 1000		/* the longest a queue's thread sleeps */
#define STEAL_CLOSED ((struct ring_ent *)(uintptr_t)1)	/* q->steal of a thread that ended */

enum ent_state { ENT_KERNEL, ENT_HELD, ENT_REPLIED, ENT_IDLE, ENT_GONE };

/* e->state: (generation << ENT_ST_BITS) | enum ent_state */
#define ENT_ST_BITS 3
#define ENT_ST_MASK ((1u << ENT_ST_BITS) - 1)
#define ENT_GEN_MASK ((1u << (32 - ENT_ST_BITS)) - 1)

/*
 * The unique libfuse sees for a ring request: bit 63 (the kernel's uniques
 * count up from 0 in steps of 2: never there), the entry's generation
 * (29 bits), its queue and its index (16 bits each; the low bit 0, as in a
 * kernel unique that is no interrupt's).
 */
#define KEY_RING (1ull << 63)
#define KEY_GEN_SHIFT 33
#define KEY_Q_SHIFT 17
#define KEY_IDX_SHIFT 1
#define KEY_FIELD 0xffffu
#define RING_MAX_QUEUES (KEY_FIELD + 1)

/* A counter only its queue's thread writes: a plain store (invariant 5). */
#define OWNED_ADD(p, v) __atomic_store_n((p), __atomic_load_n((p), __ATOMIC_RELAXED) + (v), \
					 __ATOMIC_RELEASE)

struct ring_queue;

struct ring_ent {
	struct ring_queue *q;
	struct fuse_uring_req_header *hdr;	/* at the start of the front page */
	char *payload;				/* page-aligned, after the front page */
	struct iovec iov[2];			/* REGISTER's: header and payload buffers */
	uint64_t unique;		/* the kernel's unique of the request it holds (HELD, REPLIED) */
	uint64_t key;			/* libfuse's unique for it (HELD): ent_key(); atomic */
	uint32_t state;			/* generation and enum ent_state; atomic */
	uint32_t cmd;			/* last command submitted (resubmitted on EAGAIN) */
	uint32_t used;			/* most payload bytes used, either way; atomic */
	unsigned idx;
	char *req;			/* the request laid out for libfuse (HELD) */
	uint32_t req_len;
	struct ring_ent *next;		/* hand-off or local list */
};

/* Queue start-up, under ring->lock. */
enum queue_state { Q_NEW, Q_CREATED, Q_ARMED, Q_REGISTERED, Q_FAILED, Q_EXITED };

struct ring_queue {
	struct bf_ring *r;
	unsigned qid;
	int cpu;			/* pinned to this CPU, or -1 */
	pthread_t tid;
	bool thread;			/* tid is a thread to join */
	int st;				/* enum queue_state, ring->lock */
	int err;			/* -errno of Q_FAILED, ring->lock */
	char why[160];			/* what failed, ring->lock */
	struct io_uring ring;
	bool ring_ok;
	size_t ring_bytes;		/* SQ, SQEs, CQ */
	int evfd;
	uint64_t evbuf;
	char *mem;			/* entries' front pages and payload buffers */
	size_t mem_len;
	struct ring_ent *ents;
	struct ring_ent *handoff;	/* replies from other threads; atomic */
	struct ring_ent *local;		/* the thread's own replies; thread only */
	struct ring_ent *steal;		/* other queues' requests for this thread; atomic */
	bool waiting;			/* the thread waits for completions; atomic */
	unsigned alive;			/* entries the kernel has not ended; thread only */
	bool dead;			/* the thread ended on an error; atomic */
	uint64_t requests;		/* served (entries made HELD); thread only, OWNED_ADD */
	uint64_t replied_here;		/* replies made in the thread; thread only, OWNED_ADD */
	uint64_t handoffs;		/* replies committed from the hand-off list; thread only, OWNED_ADD */
	uint64_t stolen;		/* requests given to another queue's thread; thread only, OWNED_ADD */
	uint64_t last_req_ns;		/* when it last took a request; thread only, OWNED_ADD-style store */
	uint64_t spin_ns;		/* time spent spinning; thread only, OWNED_ADD */
	uint64_t spins, spin_hits;	/* spins begun, and ended by work; thread only, OWNED_ADD */
	uint64_t spin_yielded;		/* spins ended because the CPU had other work; thread only */
	uint64_t spin_off_until;	/* no spin before this (the CPU was busy); thread only */
	/* its own line: the one counter other threads write */
	uint64_t replied_far __attribute__((aligned(64)));	/* replies from other threads; atomic */
} __attribute__((aligned(64)));

enum ring_phase { PH_CREATE, PH_ARM, PH_GO, PH_ABANDON, PH_STOP };

struct bf_ring {
	struct fuse_session *se;
	void (*failed)(const char *why);	/* bf_ring_create's: a queue died after start */
	unsigned nr_queues;
	unsigned depth;
	size_t payload;			/* each entry's payload buffer, page multiple */
	int fuse_fd;
	struct ring_queue *qs;
	pthread_mutex_t lock;
	pthread_cond_t cond;		/* CLOCK_MONOTONIC */
	int phase;			/* enum ring_phase, lock */
	bool stopping;			/* atomic: no new request is served */
	bool active;			/* atomic: replies may be ring replies */
	bool abandoned;			/* bf_ring_stop_within() gave up: never freed */
	struct io_uring ctl;		/* the armer's ring, for giving the ring up */
	bool ctl_ok;
	/* BLKFS_URING_TEST, for the tests only */
	unsigned test_handoff;		/* every Nth reply comes from another thread */
	unsigned handoff_count;		/* atomic */
	unsigned test_die_after;	/* queue 0 fails after this many requests */
	int test_noregister;		/* this queue never registers (-1: none) */
	unsigned test_limit_ms;		/* registration time limit instead of the caller's */
	bool test_nosteal;		/* no request goes to another queue's thread */
	struct handoff_helper *helper;
	uint64_t spin_ns;		/* spin this long past the mount's last request; 0: never */
};

static __thread struct ring_queue *tl_queue;	/* the queue this thread serves */
static __thread struct ring_ent *tl_ent;	/* the request it is handling */
static __thread bool tl_helper;			/* the test hand-off thread */

bool bf_ring_in_request(void)
{
	return tl_ent != NULL;
}

bool bf_ring_queue_thread(void)
{
	return tl_queue != NULL;
}

char *bf_ring_req_payload(void)
{
	return tl_ent ? tl_ent->payload : NULL;
}

static int ent_state(struct ring_ent *e)
{
	return (int)(__atomic_load_n(&e->state, __ATOMIC_ACQUIRE) & ENT_ST_MASK);
}

/*
 * The queue's thread only, and never while the entry is HELD (the one
 * state another thread changes, by compare-and-swap): its generation stays.
 */
static void set_state(struct ring_ent *e, int st)
{
	uint32_t s = __atomic_load_n(&e->state, __ATOMIC_RELAXED);

	__atomic_store_n(&e->state, (s & ~ENT_ST_MASK) | (uint32_t)st, __ATOMIC_RELEASE);
}

static void note_used(struct ring_ent *e, size_t n)
{
	if (n > __atomic_load_n(&e->used, __ATOMIC_RELAXED))
		__atomic_store_n(&e->used, (uint32_t)n, __ATOMIC_RELAXED);
}

/* ------------------------------------------------- keys: libfuse's uniques */

static uint64_t ent_key(const struct ring_ent *e, uint32_t gen)
{
	return KEY_RING | (uint64_t)gen << KEY_GEN_SHIFT | (uint64_t)e->q->qid << KEY_Q_SHIFT |
	       (uint64_t)e->idx << KEY_IDX_SHIFT;
}

/* The entry @key names, or NULL if it names none. */
static struct ring_ent *key_ent(struct bf_ring *r, uint64_t key)
{
	unsigned qid = (unsigned)(key >> KEY_Q_SHIFT) & KEY_FIELD;
	unsigned idx = (unsigned)(key >> KEY_IDX_SHIFT) & KEY_FIELD;

	if (!(key & KEY_RING) || qid >= r->nr_queues || idx >= r->depth || !r->qs[qid].ents)
		return NULL;
	return &r->qs[qid].ents[idx];
}

/* HELD entries of @q: its thread's count less the replies' (invariant 3). */
static unsigned queue_held(struct ring_queue *q)
{
	/* replies first: each counts a request already counted (no wrap) */
	uint64_t far = __atomic_load_n(&q->replied_far, __ATOMIC_ACQUIRE);
	uint64_t here = __atomic_load_n(&q->replied_here, __ATOMIC_ACQUIRE);

	return (unsigned)(__atomic_load_n(&q->requests, __ATOMIC_ACQUIRE) - here - far);
}

/* ------------------------------------------------------------- helpers */

static void ring_log_queue_error(struct ring_queue *q, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * A queue's thread cannot go on: its CPU's callers would wait for ever. It
 * says why once; rawio.c ends the session (the connection is aborted when
 * the daemon lets go of /dev/fuse, and the callers get ENOTCONN).
 */
static void ring_log_queue_error(struct ring_queue *q, const char *fmt, ...)
{
	char msg[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	__atomic_store_n(&q->dead, true, __ATOMIC_RELEASE);
	if (__atomic_load_n(&q->r->stopping, __ATOMIC_ACQUIRE)) {
		blk_log("FUSE ring queue %u (CPU %d): %s (while stopping)", q->qid, q->cpu, msg);
		return;
	}
	{
		char why[256];

		snprintf(why, sizeof(why), "FUSE ring queue %u (CPU %d) stopped: %s", q->qid, q->cpu,
			 msg);
		q->r->failed(why);
	}
}

static void eventfd_kick(int fd)
{
	uint64_t one = 1;

	/* an eventfd write only fails on overflow, which needs 2^64 - 1 kicks */
	if (write(fd, &one, sizeof(one)) != sizeof(one))
		blk_log("FUSE ring: eventfd write failed: %m");
}

static struct io_uring_sqe *get_sqe(struct ring_queue *q)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);

	/*
	 * Cannot be NULL: the SQ has depth + 1 slots, and each entry and the
	 * eventfd read have at most one SQE waiting to be submitted.
	 */
	if (sqe)
		memset(sqe, 0, 2 * sizeof(*sqe));	/* SQE128: the command area too */
	return sqe;
}

/* A uring command for entry @e: REGISTER or COMMIT_AND_FETCH. */
static int prep_cmd(struct ring_queue *q, struct ring_ent *e, uint32_t cmd)
{
	struct io_uring_sqe *sqe = get_sqe(q);
	struct fuse_uring_cmd_req *cr;

	if (!sqe)
		return -EBUSY;
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->flags = IOSQE_FIXED_FILE;
	sqe->fd = 0;				/* the fixed file: /dev/fuse */
	sqe->cmd_op = cmd;
	sqe->user_data = (uint64_t)(uintptr_t)e;
	cr = (struct fuse_uring_cmd_req *)((char *)sqe + BF_SQE_CMD_OFF);
	cr->qid = (uint16_t)q->qid;
	if (cmd == FUSE_IO_URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	} else {
		cr->commit_id = e->unique;
	}
	e->cmd = cmd;
	set_state(e, ENT_KERNEL);
	return 0;
}

static int prep_evread(struct ring_queue *q)
{
	struct io_uring_sqe *sqe = get_sqe(q);

	if (!sqe)
		return -EBUSY;
	io_uring_prep_read(sqe, q->evfd, &q->evbuf, sizeof(q->evbuf), 0);
	sqe->user_data = RING_EV_TAG;
	return 0;
}

/* --------------------------------------------------------------- replies */

/* The reply into the entry: out header, payload (copied unless it is there). */
static void fill_reply(struct bf_ring *r, struct ring_ent *e, const struct iovec *iov, int count)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	struct fuse_out_header *out = (struct fuse_out_header *)e->hdr->in_out;
	size_t n = 0, off = 0;
	int32_t error = oh->error;
	int i;

	for (i = 1; i < count; i++)
		n += iov[i].iov_len;
	if (n > r->payload) {
		static struct blk_ratelimit rl = BLK_RATELIMIT_INIT(5000, 5);

		if (blk_ratelimit(&rl, "FUSE ring: oversized replies"))
			blk_log("FUSE ring: a reply of %zu bytes does not fit the %zu-byte buffer; the request fails with EIO",
				n, r->payload);
		error = -EIO;
		n = 0;
	} else if (!(count == 2 && iov[1].iov_base == e->payload)) {
		for (i = 1; i < count; i++) {
			if (iov[i].iov_len)
				memcpy(e->payload + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
	}
	out->len = (uint32_t)(sizeof(*out) + n);
	out->error = error;
	out->unique = e->unique;
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)n;
	note_used(e, n);
}

/* Entry @e, its reply filled, goes to its thread for the commit. */
static void hand_to_owner(struct ring_ent *e)
{
	struct ring_queue *q = e->q;
	struct ring_ent *old;

	if (tl_queue == q) {
		e->next = q->local;
		q->local = e;
		OWNED_ADD(&q->replied_here, 1);
		return;
	}
	old = __atomic_load_n(&q->handoff, __ATOMIC_RELAXED);
	do {
		e->next = old;
	} while (!__atomic_compare_exchange_n(&q->handoff, &old, e, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
	/* the first reply onto an empty list wakes the thread; it takes them all */
	if (!old)
		eventfd_kick(q->evfd);
	/* last: once nothing is held, bf_ring_stop() may free the queue (invariant 3) */
	__atomic_add_fetch(&q->replied_far, 1, __ATOMIC_RELEASE);
}

/* ------------------------------------------------ test hand-off thread */

/*
 * BLKFS_URING_TEST=handoff (or handoff=N: every Nth): every reply to a ring
 * request is made by this thread instead of the handler's, as replies from
 * completions will be.
 * It exercises the hand-off path (and TSan sees it) before any handler
 * replies from another thread by itself.
 */
struct handoff_msg {
	struct handoff_msg *next;
	size_t len;
	char data[];			/* fuse_out_header, then the payload */
};

struct handoff_helper {
	struct bf_ring *r;
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct handoff_msg *head, **tail;	/* lock */
	bool stop;				/* lock */
};

static void *helper_main(void *arg)
{
	struct handoff_helper *h = arg;
	struct handoff_msg *m;
	ssize_t res;

	tl_helper = true;
	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->head && !h->stop)
			pthread_cond_wait(&h->cond, &h->lock);
		m = h->head;
		if (!m)
			break;
		h->head = m->next;
		if (!h->head)
			h->tail = &h->head;
		pthread_mutex_unlock(&h->lock);
		{
			struct iovec iov[2] = {
				{ m->data, sizeof(struct fuse_out_header) },
				{ m->data + sizeof(struct fuse_out_header),
				  m->len - sizeof(struct fuse_out_header) },
			};

			if (!bf_ring_reply(h->r, iov, 2, &res))
				blk_log("FUSE ring test: a handed-off reply found no ring request");
		}
		free(m);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* Give the reply to the helper; false if it cannot (then it is made here). */
static bool helper_take(struct handoff_helper *h, const struct iovec *iov, int count)
{
	struct handoff_msg *m;
	size_t len = 0, off = 0;
	int i;

	for (i = 0; i < count; i++)
		len += iov[i].iov_len;
	m = malloc(sizeof(*m) + len);
	if (!m)
		return false;
	for (i = 0; i < count; i++) {
		memcpy(m->data + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	m->len = len;
	m->next = NULL;
	pthread_mutex_lock(&h->lock);
	*h->tail = m;
	h->tail = &m->next;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	return true;
}

static struct handoff_helper *helper_start(struct bf_ring *r)
{
	struct handoff_helper *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->r = r;
	h->tail = &h->head;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);
	if (pthread_create(&h->tid, NULL, helper_main, h)) {
		pthread_cond_destroy(&h->cond);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return NULL;
	}
	return h;
}

static void helper_stop(struct handoff_helper *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_signal(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->tid, NULL);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

bool bf_ring_reply(struct bf_ring *r, const struct iovec *iov, int count, ssize_t *res)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	struct ring_ent *e = tl_ent;
	uint32_t gen = (uint32_t)(oh->unique >> KEY_GEN_SHIFT) & ENT_GEN_MASK;
	size_t total = 0;
	int i;

	/*
	 * e->key atomically: a handler that parked this entry's request may
	 * still be in it when the entry takes its next one (lay_out()).
	 */
	if (!e || __atomic_load_n(&e->key, __ATOMIC_RELAXED) != oh->unique) {
		/* not the request this thread is handling: a parked one, or /dev/fuse's */
		if (!(oh->unique & KEY_RING) || !__atomic_load_n(&r->active, __ATOMIC_ACQUIRE))
			return false;
		e = key_ent(r, oh->unique);
		if (!e) {
			*res = -ENOENT;
			return true;
		}
	}
	for (i = 0; i < count; i++)
		total += iov[i].iov_len;
	*res = (ssize_t)total;
	if (r->helper && !tl_helper &&
	    __atomic_add_fetch(&r->handoff_count, 1, __ATOMIC_RELAXED) % r->test_handoff == 0 &&
	    helper_take(r->helper, iov, count))
		return true;
	{
		uint32_t held = gen << ENT_ST_BITS | ENT_HELD;

		/*
		 * One reply per request (invariant 2): a second finds no
		 * request, even once the entry holds a newer one (its
		 * generation differs).
		 */
		if (!__atomic_compare_exchange_n(&e->state, &held, gen << ENT_ST_BITS | ENT_REPLIED,
						 false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			*res = -ENOENT;
			return true;
		}
	}
	fill_reply(r, e, iov, count);
	hand_to_owner(e);
	return true;
}

/* ------------------------------------------------------- serving a request */

/*
 * A request that cannot be laid out: fail it with EIO, as a reply would.
 * In the queue's thread; the entry was never HELD, so no count changes.
 */
static void reply_error_here(struct ring_queue *q, struct ring_ent *e, uint64_t unique, int err)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = err, .unique = unique };
	struct iovec iov = { &oh, sizeof(oh) };

	e->unique = unique;
	set_state(e, ENT_REPLIED);
	fill_reply(q->r, e, &iov, 1);
	e->next = q->local;
	q->local = e;
}

/*
 * Lay the request in @e out as /dev/fuse would have given it and make @e
 * HELD. Returns 0, or -1 when the request was answered (malformed) or
 * cannot be.
 */
static int lay_out(struct ring_queue *q, struct ring_ent *e)
{
	struct bf_ring *r = q->r;
	struct fuse_uring_req_header *h = e->hdr;
	struct fuse_in_header in;
	uint64_t id = h->ring_ent_in_out.commit_id;
	uint32_t psz = h->ring_ent_in_out.payload_sz;
	uint32_t gen;
	size_t opsz;
	char *start;

	memcpy(&in, h->in_out, sizeof(in));
	/*
	 * The op's header went to op_in and the rest to the payload buffer;
	 * in.len is the whole request, so the op header's size is what is
	 * left (0 for ops without one, such as LOOKUP, whose name is payload).
	 */
	if (!id) {
		ring_log_queue_error(q, "the kernel gave a request without a commit id");
		set_state(e, ENT_IDLE);
		return -1;
	}
	if (in.unique != id || in.len < sizeof(in) + (uint64_t)psz ||
	    in.len - sizeof(in) - psz > FUSE_URING_OP_IN_OUT_SZ || psz > r->payload) {
		static struct blk_ratelimit rl = BLK_RATELIMIT_INIT(5000, 5);

		if (blk_ratelimit(&rl, "FUSE ring: malformed requests"))
			blk_log("FUSE ring queue %u: a request does not add up (opcode %u, len %u, payload %u, unique %llu, commit id %llu): EIO",
				q->qid, in.opcode, in.len, psz, (unsigned long long)in.unique,
				(unsigned long long)id);
		reply_error_here(q, e, id, -EIO);
		return -1;
	}
	/* a new generation: a late reply to the entry's last request finds none */
	gen = ((__atomic_load_n(&e->state, __ATOMIC_RELAXED) >> ENT_ST_BITS) + 1) & ENT_GEN_MASK;
	__atomic_store_n(&e->key, ent_key(e, gen), __ATOMIC_RELAXED);
	e->unique = id;
	in.unique = e->key;	/* libfuse's reply names the entry (no lookup) */
	opsz = in.len - sizeof(in) - psz;
	start = e->payload - opsz - sizeof(in);
	memcpy(start, &in, sizeof(in));
	memcpy(start + sizeof(in), h->op_in, opsz);
	note_used(e, psz);
	e->req = start;
	e->req_len = in.len;
	/* the opens table hears the unique the reply will carry (rawio.c) */
	bf_opens_note(in.opcode, e->key);
	__atomic_store_n(&e->state, gen << ENT_ST_BITS | ENT_HELD, __ATOMIC_RELEASE);
	OWNED_ADD(&q->requests, 1);
	if (q->r->spin_ns)
		__atomic_store_n(&q->last_req_ns, blk_now_ns(), __ATOMIC_RELAXED);
	return 0;
}

/* Hand the laid-out request in @e to libfuse, in this thread. */
static void run(struct bf_ring *r, struct ring_ent *e)
{
	const struct fuse_in_header *in = (const struct fuse_in_header *)e->req;
	uint32_t opcode = in->opcode;
	uint64_t key = e->key;

	tl_ent = e;
	fuse_session_process_buf(r->se, &(struct fuse_buf){ .size = e->req_len, .mem = e->req });
	tl_ent = NULL;
	/*
	 * Forgets get no reply, and the kernel sends them over /dev/fuse; one
	 * that came here anyway must not keep its entry for ever.
	 */
	if ((opcode == FUSE_FORGET || opcode == FUSE_BATCH_FORGET) && ent_state(e) == ENT_HELD) {
		struct fuse_out_header oh = { .len = sizeof(oh), .unique = key };
		struct iovec iov = { &oh, sizeof(oh) };
		ssize_t res;

		bf_ring_reply(r, &iov, 1, &res);
	}
}

/* ------------------------------------------------------- work stealing */

/*
 * One CPU's caller can have many large requests out at once (a 16 MiB
 * write or read is 16 requests of 1 MiB, sent together): the kernel puts
 * them all on its CPU's queue, where /dev/fuse would have spread them
 * over threads on every CPU. So when a thread takes two or more large
 * requests in one wait and another queue's thread is idle, every other
 * large one goes to that thread: its handler (the copy into or out of
 * the cache) runs there, its reply comes back through the hand-off list,
 * and the entry's own thread commits it.
 *
 * A deep queue of small requests (fio at iodepth 32 on one CPU) is the
 * same case: the kernel queues them all on that CPU, whose thread then
 * shares it with their caller while the other CPUs idle. So a wait that
 * brings RING_SPREAD_MIN or more requests gives three in four of them to
 * an idle peer (large ones too): one wake-up of the peer for most of the
 * batch, while this thread, on the caller's CPU, keeps the commits of all
 * of them (three in four measured faster than one in two at iodepth 32,
 * 1.05x writes and 1.11x reads, and than all but one). A lone small
 * request never moves: a wake-up on another CPU costs more than it does.
 * Two large ones alone: every other one moves, as before.
 */
static bool is_big(const struct ring_ent *e)
{
	const struct fuse_in_header *in = (const struct fuse_in_header *)e->req;

	if (in->opcode == FUSE_WRITE)
		return e->req_len - sizeof(*in) - sizeof(struct fuse_write_in) >= RING_STEAL_MIN;
	if (in->opcode == FUSE_READ && e->req_len >= sizeof(*in) + sizeof(struct fuse_read_in))
		return ((const struct fuse_read_in *)(in + 1))->size >= RING_STEAL_MIN;
	return false;
}

/* An idle queue thread other than @q's, or NULL. */
static struct ring_queue *idle_peer(struct ring_queue *q)
{
	struct bf_ring *r = q->r;
	unsigned i;

	for (i = 1; i < r->nr_queues; i++) {
		struct ring_queue *p = &r->qs[(q->qid + i) % r->nr_queues];

		if (__atomic_load_n(&p->waiting, __ATOMIC_ACQUIRE) &&
		    !__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
			return p;
	}
	return NULL;
}

/* Give @e to @p's thread; false if that thread has ended (then run it here). */
static bool steal_push(struct ring_queue *p, struct ring_ent *e)
{
	struct ring_ent *old = __atomic_load_n(&p->steal, __ATOMIC_RELAXED);

	do {
		if (old == STEAL_CLOSED)
			return false;
		e->next = old;
	} while (!__atomic_compare_exchange_n(&p->steal, &old, e, true, __ATOMIC_RELEASE,
					      __ATOMIC_RELAXED));
	if (!old)
		eventfd_kick(p->evfd);
	return true;
}

/* Run what other queues gave this thread; @close: and take no more. */
static void steal_run(struct ring_queue *q, bool close)
{
	struct ring_ent *e, *next;
	struct blk_plug plug;
	bool batch;

	e = __atomic_exchange_n(&q->steal, close ? STEAL_CLOSED : NULL, __ATOMIC_ACQUIRE);
	if (e == STEAL_CLOSED || !e)
		return;
	/* two or more: their backend I/O goes down together (run_batch()) */
	batch = e->next;
	if (batch)
		blk_plug_start(&plug);
	for (; e; e = next) {
		next = e->next;
		run(q->r, e);
	}
	if (batch)
		blk_plug_finish(&plug);
}

/* The requests of one wait: some to an idle peer, the rest here. */
static void run_batch(struct ring_queue *q, struct ring_ent **batch, unsigned n)
{
	struct bf_ring *r = q->r;
	struct ring_queue *peer = NULL;
	struct blk_plug plug;
	unsigned i, big = 0;
	bool spread = false;

	if (n >= 2 && !r->test_nosteal && r->nr_queues > 1) {
		spread = n >= RING_SPREAD_MIN;
		for (i = 0; i < n && !spread; i++)
			big += is_big(batch[i]);
		if (spread || big >= 2)
			peer = idle_peer(q);
	}
	big = 0;
	/*
	 * Two or more requests: the backend I/O they start goes down together
	 * at the end (aio: one io_submit(), backends/lib/plug.h). One alone is
	 * not plugged, so that aio may wait for it in this thread (QD1).
	 */
	if (n >= 2)
		blk_plug_start(&plug);
	for (i = 0; i < n; i++) {
		struct ring_ent *e = batch[i];

		if (peer && (spread ? big++ % 4 : is_big(e) && (big++ & 1))) {
			if (steal_push(peer, e)) {
				OWNED_ADD(&q->stolen, 1);
				continue;
			}
			peer = NULL;
		}
		run(r, e);
	}
	if (n >= 2)
		blk_plug_finish(&plug);
}

/* Commits for every reply on the two lists. */
static int flush_replies(struct ring_queue *q)
{
	struct ring_ent *e, *next;
	int ret = 0;

	e = __atomic_exchange_n(&q->handoff, NULL, __ATOMIC_ACQUIRE);
	for (; e; e = next) {
		next = e->next;
		OWNED_ADD(&q->handoffs, 1);
		ret = ret ? ret : prep_cmd(q, e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
	}
	for (e = q->local, q->local = NULL; e; e = next) {
		next = e->next;
		ret = ret ? ret : prep_cmd(q, e, FUSE_IO_URING_CMD_COMMIT_AND_FETCH);
	}
	return ret;
}

static const char *cmd_name(uint32_t cmd)
{
	return cmd == FUSE_IO_URING_CMD_REGISTER ? "REGISTER" : "COMMIT_AND_FETCH";
}

/*
 * One completion; a request is laid out and added to @batch (run after
 * the wait's other completions). Returns 0, or -1 when the queue cannot
 * go on.
 */
static int handle_cqe(struct ring_queue *q, const struct io_uring_cqe *cqe,
		      struct ring_ent **batch, unsigned *nbatch)
{
	struct bf_ring *r = q->r;
	struct ring_ent *e;
	int res = cqe->res;

	if (cqe->user_data == RING_EV_TAG) {
		if (res < 0 && res != -EINTR && res != -EAGAIN) {
			ring_log_queue_error(q, "reading its eventfd failed: %s", strerror(-res));
			return -1;
		}
		if (prep_evread(q)) {
			ring_log_queue_error(q, "no submission slot for its eventfd");
			return -1;
		}
		return 0;
	}
	e = (struct ring_ent *)(uintptr_t)cqe->user_data;
	if (res == 0) {
		if (__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE)) {
			set_state(e, ENT_IDLE);
			return 0;
		}
		if (!lay_out(q, e))
			batch[(*nbatch)++] = e;
		return 0;
	}
	if (res == -EAGAIN || res == -EINTR) {
		if (prep_cmd(q, e, e->cmd)) {
			ring_log_queue_error(q, "no submission slot to resubmit %s", cmd_name(e->cmd));
			return -1;
		}
		return 0;
	}
	set_state(e, ENT_GONE);
	q->alive--;
	if (res == -ENOTCONN || res == -ECANCELED)
		return 0;	/* the connection is gone: the kernel ended the entry */
	if (q->alive) {
		static struct blk_ratelimit rl = BLK_RATELIMIT_INIT(5000, 5);

		if (blk_ratelimit(&rl, "FUSE ring: entries lost"))
			blk_log("FUSE ring queue %u: the kernel refused %s of entry %u: %s; %u entries left",
				q->qid, cmd_name(e->cmd), e->idx, strerror(-res), q->alive);
		return 0;
	}
	ring_log_queue_error(q, "the kernel refused %s of its last entry: %s", cmd_name(e->cmd),
			     strerror(-res));
	return -1;
}

/*
 * The mount's last request, on any queue: the most recent of the queues'
 * own stamps (each written only by its thread).
 */
static uint64_t ring_last_req(struct bf_ring *r)
{
	uint64_t last = 0, t;
	unsigned i;

	for (i = 0; i < r->nr_queues; i++) {
		t = __atomic_load_n(&r->qs[i].last_req_ns, __ATOMIC_RELAXED);
		if (t > last)
			last = t;
	}
	return last;
}

static bool queue_has_work(struct ring_queue *q)
{
	return io_uring_cq_ready(&q->ring) ||
	       __atomic_load_n(&q->handoff, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&q->steal, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&q->r->stopping, __ATOMIC_ACQUIRE);
}

/*
 * Before sleeping: while the mount has had a request within the last
 * r->spin_ns, keep this CPU busy and look for work, yielding the CPU at
 * each look to whatever else may run on it. True if work came.
 */
static bool ring_spin(struct ring_queue *q)
{
	struct bf_ring *r = q->r;
	uint64_t start = blk_now_ns(), now = start, before;
	bool hit = false;

	if (now < q->spin_off_until || now - ring_last_req(r) >= r->spin_ns)
		return false;
	OWNED_ADD(&q->spins, 1);
	for (;;) {
		if (queue_has_work(q)) {
			hit = true;
			break;
		}
		before = now;
		sched_yield();
		now = blk_now_ns();
		if (now - before >= RING_SPIN_BUSY_NS) {
			/*
			 * The yield gave the CPU away. To a requester woken here,
			 * whose request is then this queue's: the spin won. To
			 * anything else: the CPU has other work, and a spin only
			 * takes from it.
			 */
			if (queue_has_work(q)) {
				hit = true;
				break;
			}
			OWNED_ADD(&q->spin_yielded, 1);
			q->spin_off_until = now + RING_SPIN_BACKOFF_NS;
			break;
		}
		if (now - ring_last_req(r) >= r->spin_ns)
			break;
	}
	if (hit)
		OWNED_ADD(&q->spin_hits, 1);
	OWNED_ADD(&q->spin_ns, now - start);
	return hit;
}

static void serve_loop(struct ring_queue *q)
{
	struct bf_ring *r = q->r;
	struct ring_ent *batch[RING_BATCH_MAX];
	struct io_uring_cqe *cqe;
	unsigned head, n, nbatch;
	int ret, fail;

	for (;;) {
		steal_run(q, false);
		if (flush_replies(q)) {
			ring_log_queue_error(q, "no submission slot for a commit");
			break;
		}
		if (__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE)) {
			ret = io_uring_submit(&q->ring);
			if (ret < 0 && ret != -EINTR)
				blk_log("FUSE ring queue %u: submitting the last commits: %s", q->qid,
					strerror(-ret));
			/* held first: a replier publishes before it lets go (invariant 3) */
			if (!queue_held(q) &&
			    !__atomic_load_n(&q->handoff, __ATOMIC_ACQUIRE))
				break;
		}
		__atomic_store_n(&q->waiting, true, __ATOMIC_RELEASE);
		if (r->spin_ns) {
			ret = io_uring_submit(&q->ring);
			if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
				ring_log_queue_error(q, "io_uring_enter: %s", strerror(-ret));
				break;
			}
			if (ring_spin(q)) {
				__atomic_store_n(&q->waiting, false, __ATOMIC_RELEASE);
				goto reap;
			}
		}
		{
			/*
			 * Every wake-up comes as a completion (the eventfd read);
			 * the timeout is a safety net only: a thread that sleeps
			 * through one still sees stop or hand-off within it.
			 */
			struct __kernel_timespec ts = { .tv_sec = RING_TICK_MS / 1000,
							.tv_nsec = (RING_TICK_MS % 1000) * 1000000L };
			struct io_uring_cqe *first;

			ret = io_uring_submit_and_wait_timeout(&q->ring, &first, 1, &ts, NULL);
			if (ret == -ETIME) {
				ret = 0;
				if (__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE) ||
				    __atomic_load_n(&q->handoff, __ATOMIC_ACQUIRE) ||
				    __atomic_load_n(&q->steal, __ATOMIC_ACQUIRE)) {
					static struct blk_ratelimit rl = BLK_RATELIMIT_INIT(60000, 3);

					if (blk_ratelimit(&rl, "FUSE ring: missed wake-ups"))
						blk_log("FUSE ring queue %u: woken by its %u ms tick with work waiting (%s): a wake-up was missed",
							q->qid, RING_TICK_MS,
							__atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE) ? "stop" :
							__atomic_load_n(&q->handoff, __ATOMIC_ACQUIRE) ? "replies" : "requests");
				}
			}
		}
		__atomic_store_n(&q->waiting, false, __ATOMIC_RELEASE);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			ring_log_queue_error(q, "io_uring_enter: %s", strerror(-ret));
			break;
		}
reap:
		n = nbatch = 0;
		fail = 0;
		io_uring_for_each_cqe(&q->ring, head, cqe) {
			n++;
			fail = handle_cqe(q, cqe, batch, &nbatch);
			if (fail || nbatch == RING_BATCH_MAX)
				break;
		}
		io_uring_cq_advance(&q->ring, n);
		run_batch(q, batch, nbatch);
		if (fail)
			break;
		if (r->test_die_after && q->qid == 0 &&
		    __atomic_load_n(&q->requests, __ATOMIC_RELAXED) >= r->test_die_after) {
			ring_log_queue_error(q, "made to fail by BLKFS_URING_TEST after %u requests",
					     r->test_die_after);
			break;
		}
	}
	/* requests other queues gave this thread are served before it ends */
	steal_run(q, true);
}

/* ------------------------------------------------------ queue start-up */

static void queue_set(struct ring_queue *q, int st, int err, const char *why)
{
	struct bf_ring *r = q->r;

	pthread_mutex_lock(&r->lock);
	q->st = st;
	q->err = err;
	if (why)
		snprintf(q->why, sizeof(q->why), "%s", why);
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* Wait for the next phase after @cur; returns it. */
static int queue_wait_phase(struct ring_queue *q, int cur)
{
	struct bf_ring *r = q->r;
	int ph;

	pthread_mutex_lock(&r->lock);
	while (r->phase == cur)
		pthread_cond_wait(&r->cond, &r->lock);
	ph = r->phase;
	pthread_mutex_unlock(&r->lock);
	return ph;
}

static int queue_make_ring(struct ring_queue *q)
{
	struct io_uring_params p = { 0 };
	unsigned entries = q->r->depth + 1;	/* every entry, and the eventfd read */
	int ret;

	/*
	 * No SINGLE_ISSUER | DEFER_TASKRUN, though only this thread submits:
	 * measured here they gave the same IOPS and CPU per request (14 us),
	 * but with them a thread slept through the completion of its eventfd
	 * read now and then (the read done, the waiter not woken: about one
	 * SIGTERM in ten, until the tick below woke it); none in 28 without.
	 */
	p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
	p.cq_entries = 2 * entries;
	ret = io_uring_queue_init_params(entries, &q->ring, &p);
	if (ret)
		return ret;
	q->ring_ok = true;
	q->ring_bytes = (size_t)p.sq_entries * (2 * sizeof(struct io_uring_sqe) + sizeof(unsigned)) +
			(size_t)p.cq_entries * sizeof(struct io_uring_cqe);
	q->evfd = eventfd(0, EFD_CLOEXEC);
	if (q->evfd < 0)
		return -errno;
	return 0;
}

/* Map the entries' memory, give the ring /dev/fuse. */
static int queue_arm(struct ring_queue *q, char *why, size_t len)
{
	struct bf_ring *r = q->r;
	size_t stride = RING_FRONT + r->payload;
	unsigned i;
	int ret;

	q->ents = calloc(r->depth, sizeof(*q->ents));
	if (!q->ents) {
		snprintf(why, len, "no memory for %u entries", r->depth);
		return -ENOMEM;
	}
	q->mem_len = stride * r->depth;
	/* not touched here: a page is made when a request first reaches it */
	q->mem = mmap(NULL, q->mem_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q->mem == MAP_FAILED) {
		ret = -errno;
		q->mem = NULL;
		snprintf(why, len, "cannot map %zu bytes of ring buffers: %s", q->mem_len,
			 strerror(-ret));
		return ret;
	}
	for (i = 0; i < r->depth; i++) {
		struct ring_ent *e = &q->ents[i];
		char *front = q->mem + i * stride;

		e->q = q;
		e->idx = i;
		e->hdr = (struct fuse_uring_req_header *)front;
		e->payload = front + RING_FRONT;
		e->iov[0] = (struct iovec){ e->hdr, sizeof(*e->hdr) };
		e->iov[1] = (struct iovec){ e->payload, r->payload };
	}
	ret = io_uring_register_files(&q->ring, &r->fuse_fd, 1);
	if (ret) {
		snprintf(why, len, "cannot give its io_uring the /dev/fuse fd: %s", strerror(-ret));
		return ret;
	}
	return 0;
}

/*
 * Every entry's REGISTER and the eventfd read, submitted under ring->lock:
 * once bf_ring_start() gives up (PH_ABANDON, under the lock) no queue
 * registers any more, so the kernel's ring can never become ready behind
 * its back.
 */
static int queue_register(struct ring_queue *q, char *why, size_t len)
{
	struct bf_ring *r = q->r;
	struct io_uring_cqe *cqe;
	unsigned i, head;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	if (r->phase != PH_GO) {
		pthread_mutex_unlock(&r->lock);
		return -ECANCELED;
	}
	if ((int)q->qid == r->test_noregister) {
		/* as a thread that never gets to it: bf_ring_start() must time out */
		pthread_mutex_unlock(&r->lock);
		snprintf(why, len, "made not to register by BLKFS_URING_TEST");
		queue_wait_phase(q, PH_GO);
		return -EINPROGRESS;
	}
	for (i = 0; i < r->depth && !ret; i++)
		ret = prep_cmd(q, &q->ents[i], FUSE_IO_URING_CMD_REGISTER);
	if (!ret)
		ret = prep_evread(q);
	if (ret) {
		snprintf(why, len, "no submission slots");
	} else {
		ret = io_uring_submit(&q->ring);
		if (ret >= 0 && (unsigned)ret != r->depth + 1) {
			snprintf(why, len, "io_uring took %d of %u commands", ret, r->depth + 1);
			ret = -EIO;
		} else if (ret < 0) {
			snprintf(why, len, "io_uring_enter: %s", strerror(-ret));
		} else {
			ret = 0;
			/* a REGISTER that failed completed at once; success completes later */
			io_uring_for_each_cqe(&q->ring, head, cqe) {
				if (cqe->user_data != RING_EV_TAG && cqe->res < 0 &&
				    cqe->res != -EAGAIN && cqe->res != -EINTR) {
					ret = cqe->res;
					snprintf(why, len, "the kernel refused REGISTER: %s",
						 strerror(-ret));
					break;
				}
			}
		}
	}
	q->alive = r->depth;
	q->st = ret ? Q_FAILED : Q_REGISTERED;
	q->err = ret;
	if (ret)
		snprintf(q->why, sizeof(q->why), "%s", why);
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return ret;
}

static void pin(struct ring_queue *q)
{
	cpu_set_t allowed, one;

	q->cpu = -1;
	if (sched_getaffinity(0, sizeof(allowed), &allowed) || q->qid >= CPU_SETSIZE ||
	    !CPU_ISSET(q->qid, &allowed))
		return;	/* offline, or not ours: it runs on the CPUs this process has */
	CPU_ZERO(&one);
	CPU_SET(q->qid, &one);
	if (!sched_setaffinity(0, sizeof(one), &one))
		q->cpu = (int)q->qid;
}

static void *queue_main(void *arg)
{
	struct ring_queue *q = arg;
	char why[160] = "";
	char name[16];
	int ret, ph;

	tl_queue = q;
	snprintf(name, sizeof(name), "blkfs-ring%u", q->qid);
	pthread_setname_np(pthread_self(), name);
	pin(q);
	ret = queue_make_ring(q);
	if (ret) {
		snprintf(why, sizeof(why), "cannot create an io_uring: %s%s", strerror(-ret),
			 ret == -EPERM ? " (sysctl kernel.io_uring_disabled?)" : "");
		queue_set(q, Q_FAILED, ret, why);
		goto out;
	}
	queue_set(q, Q_CREATED, 0, NULL);
	ph = queue_wait_phase(q, PH_CREATE);
	if (ph != PH_ARM)
		goto out;
	ret = queue_arm(q, why, sizeof(why));
	queue_set(q, ret ? Q_FAILED : Q_ARMED, ret, ret ? why : NULL);
	if (ret)
		goto out;
	ph = queue_wait_phase(q, PH_ARM);
	if (ph != PH_GO)
		goto out;
	if (queue_register(q, why, sizeof(why)))
		goto out;
	serve_loop(q);
out:
	pthread_mutex_lock(&q->r->lock);
	if (q->st != Q_FAILED)
		q->st = Q_EXITED;
	pthread_cond_broadcast(&q->r->cond);
	pthread_mutex_unlock(&q->r->lock);
	tl_queue = NULL;
	return NULL;
}

/* ------------------------------------------------------------------ API */

/* Possible CPUs: the kernel makes one queue for each. */
static unsigned possible_cpus(void)
{
	char buf[256];
	unsigned n = 0;
	ssize_t len;
	char *s, *end;
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return (unsigned)get_nprocs_conf();
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return (unsigned)get_nprocs_conf();
	buf[len] = 0;
	/* "0-3,8-11": count them */
	for (s = buf; *s && *s != '\n';) {
		unsigned long a = strtoul(s, &end, 10), b = a;

		if (end == s)
			return (unsigned)get_nprocs_conf();
		if (*end == '-') {
			s = end + 1;
			b = strtoul(s, &end, 10);
			if (end == s || b < a)
				return (unsigned)get_nprocs_conf();
		}
		n += (unsigned)(b - a + 1);
		s = *end == ',' ? end + 1 : end;
	}
	return n ? n : (unsigned)get_nprocs_conf();
}

static void parse_test_env(struct bf_ring *r)
{
	const char *env = getenv("BLKFS_URING_TEST");
	char buf[128], *tok, *save;

	r->test_noregister = -1;
	if (!env || !*env)
		return;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "handoff"))
			r->test_handoff = 1;
		else if (!strncmp(tok, "handoff=", 8))
			r->test_handoff = (unsigned)strtoul(tok + 8, NULL, 10);
		else if (!strncmp(tok, "die=", 4))
			r->test_die_after = (unsigned)strtoul(tok + 4, NULL, 10);
		else if (!strncmp(tok, "noregister=", 11))
			r->test_noregister = (int)strtol(tok + 11, NULL, 10);
		else if (!strcmp(tok, "nosteal"))
			r->test_nosteal = true;
		else if (!strncmp(tok, "limit=", 6))
			r->test_limit_ms = (unsigned)strtoul(tok + 6, NULL, 10);
	}
	blk_log("FUSE ring: BLKFS_URING_TEST=%s", env);
}

unsigned bf_ring_possible_cpus(void)
{
	return possible_cpus();
}

size_t bf_ring_entry_bytes(size_t payload)
{
	return RING_FRONT + (payload + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
}

struct bf_ring *bf_ring_create(struct fuse_session *se, unsigned depth, size_t payload,
			       unsigned spin_us, void (*failed)(const char *why), char *err,
			       size_t errlen)
{
	struct bf_ring *r;
	sigset_t all, old;
	unsigned i;
	int ret = 0;

	payload = (payload + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
	r = calloc(1, sizeof(*r));
	if (!r) {
		snprintf(err, errlen, "FUSE over io_uring: out of memory");
		return NULL;
	}
	r->se = se;
	r->failed = failed;
	r->depth = depth;
	r->payload = payload;
	r->spin_ns = (uint64_t)spin_us * 1000;
	r->nr_queues = possible_cpus();
	if (r->nr_queues > RING_MAX_QUEUES || depth > KEY_FIELD + 1) {
		/* a key has 16 bits for the queue and 16 for the entry */
		snprintf(err, errlen, "FUSE over io_uring: %u possible CPUs and %u entries each, at most %u of either",
			 r->nr_queues, depth, KEY_FIELD + 1);
		free(r);
		return NULL;
	}
	r->fuse_fd = -1;
	parse_test_env(r);
	pthread_mutex_init(&r->lock, NULL);
	ret = blk_cond_init(&r->cond);
	if (ret) {
		pthread_mutex_destroy(&r->lock);
		free(r);
		snprintf(err, errlen, "FUSE over io_uring: %s", strerror(ret));
		return NULL;
	}
	r->qs = aligned_alloc(64, sizeof(*r->qs) * r->nr_queues);
	if (!r->qs) {
		snprintf(err, errlen, "FUSE over io_uring: out of memory for %u queues", r->nr_queues);
		bf_ring_destroy(r);
		return NULL;
	}
	memset(r->qs, 0, sizeof(*r->qs) * r->nr_queues);
	/* the queue threads take no signals: the daemon's handlers run elsewhere */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < r->nr_queues; i++) {
		struct ring_queue *q = &r->qs[i];

		q->r = r;
		q->qid = i;
		q->cpu = -1;
		q->evfd = -1;
		ret = pthread_create(&q->tid, NULL, queue_main, q);
		if (ret) {
			snprintf(err, errlen, "FUSE over io_uring: cannot start the thread of queue %u: %s",
				 i, strerror(ret));
			break;
		}
		q->thread = true;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ret) {
		/* every thread has made its ring, or said why not */
		pthread_mutex_lock(&r->lock);
		for (i = 0; i < r->nr_queues; i++) {
			while (r->qs[i].st == Q_NEW)
				pthread_cond_wait(&r->cond, &r->lock);
			if (r->qs[i].st == Q_FAILED && !ret) {
				ret = r->qs[i].err;
				snprintf(err, errlen, "FUSE over io_uring: queue %u: %s", i,
					 r->qs[i].why);
			}
		}
		pthread_mutex_unlock(&r->lock);
	}
	if (ret) {
		bf_ring_stop(r);
		bf_ring_destroy(r);
		return NULL;
	}
	return r;
}

/* Wait for every queue to reach @want, until @deadline_ns (blk_now_ns()'s scale). */
static int wait_queues(struct bf_ring *r, int want, uint64_t deadline_ns, char *why, size_t len)
{
	unsigned i;
	int ret = 0;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->nr_queues && !ret; i++) {
		struct ring_queue *q = &r->qs[i];

		while (q->st != want && q->st != Q_FAILED && q->st != Q_EXITED && !ret)
			ret = blk_cond_wait_until(&r->cond, &r->lock, deadline_ns);
		if (ret == ETIMEDOUT) {
			snprintf(why, len, "queue %u (CPU %d) did not %s in time", i, q->cpu,
				 want == Q_ARMED ? "set up its buffers" : "register");
			ret = -ETIMEDOUT;
		} else if (ret) {
			snprintf(why, len, "queue %u: waiting: %s", i, strerror(ret));
			ret = -ret;
		} else if (q->st != want) {
			snprintf(why, len, "queue %u (CPU %d): %s", i, q->cpu,
				 q->why[0] ? q->why : "its thread ended");
			ret = q->err ? q->err : -EIO;
		}
	}
	pthread_mutex_unlock(&r->lock);
	return ret;
}

static void set_phase(struct bf_ring *r, int ph)
{
	pthread_mutex_lock(&r->lock);
	if (r->phase < PH_ABANDON || ph == PH_STOP)
		r->phase = ph;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

int bf_ring_arm(struct bf_ring *r, int fuse_fd, size_t payload, char *why, size_t len)
{
	int ret;

	if (payload > r->payload) {
		/* the memory was checked for r->payload: not more behind the config's back */
		snprintf(why, len, "the kernel asks %zu-byte payload buffers, blkfs planned %zu",
			 payload, r->payload);
		return -EINVAL;
	}
	ret = io_uring_queue_init(2, &r->ctl, IORING_SETUP_SQE128);
	if (ret) {
		snprintf(why, len, "cannot create an io_uring: %s", strerror(-ret));
		return ret;
	}
	r->ctl_ok = true;
	r->fuse_fd = fuse_fd;
	set_phase(r, PH_ARM);
	return wait_queues(r, Q_ARMED, blk_now_ns() + 10000 * 1000000ull, why, len);
}

/* Tell the kernel to give the ring up: a REGISTER it must refuse (payload 0). */
static int give_up(struct bf_ring *r)
{
	struct fuse_uring_req_header hdr;
	char none[1];
	struct iovec iov[2] = { { &hdr, sizeof(hdr) }, { none, 0 } };
	struct io_uring_sqe *sqe;
	struct io_uring_cqe *cqe;
	int ret;

	if (!r->ctl_ok)
		return -EBADF;
	sqe = io_uring_get_sqe(&r->ctl);
	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 2 * sizeof(*sqe));
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = r->fuse_fd;
	sqe->cmd_op = FUSE_IO_URING_CMD_REGISTER;
	sqe->addr = (uint64_t)(uintptr_t)iov;
	sqe->len = 2;
	ret = io_uring_submit_and_wait(&r->ctl, 1);
	if (ret < 0)
		return ret;
	ret = io_uring_wait_cqe(&r->ctl, &cqe);
	if (ret)
		return ret;
	ret = cqe->res;
	io_uring_cqe_seen(&r->ctl, cqe);
	/* refused, as meant: the kernel now serves /dev/fuse */
	return ret < 0 ? 0 : -EPROTO;
}

int bf_ring_start(struct bf_ring *r, unsigned limit_ms, char *why, size_t len)
{
	int ret;

	if (r->test_handoff) {
		r->helper = helper_start(r);
		if (!r->helper)
			blk_log("FUSE ring test: cannot start the hand-off thread");
	}
	__atomic_store_n(&r->active, true, __ATOMIC_RELEASE);
	set_phase(r, PH_GO);
	ret = wait_queues(r, Q_REGISTERED,
			  blk_now_ns() + (uint64_t)(r->test_limit_ms ? r->test_limit_ms : limit_ms) *
						 1000000u,
			  why, len);
	/*
	 * All registered: the ring is the kernel's transport now. A queue that
	 * failed since has told rawio.c (bf_ring_create's @failed), which ends the
	 * session as for any later failure.
	 */
	if (!ret)
		return 0;
	/*
	 * Not all: the kernel's ring cannot become ready, since no queue
	 * registers after PH_ABANDON (queue_register() checks it under the
	 * lock); tell the kernel to give up waiting for it.
	 */
	set_phase(r, PH_ABANDON);
	{
		int gu = give_up(r);

		if (gu) {
			size_t n = strlen(why);

			snprintf(why + n, len - n, "; and the kernel could not be told to use /dev/fuse (%s)",
				 strerror(-gu));
			return -EPIPE;
		}
	}
	return ret;
}

static unsigned ring_held(struct bf_ring *r)
{
	unsigned i, held = 0;

	for (i = 0; r->qs && i < r->nr_queues; i++)
		held += queue_held(&r->qs[i]);
	return held;
}

bool bf_ring_stop_within(struct bf_ring *r, uint64_t timeout_ms)
{
	uint64_t start = blk_now_ms(), progress = start;
	unsigned i, held, prev = UINT_MAX;
	bool said = false;

	if (!r || r->abandoned)
		return !r;
	__atomic_store_n(&r->stopping, true, __ATOMIC_RELEASE);
	set_phase(r, PH_STOP);
	for (i = 0; i < r->nr_queues; i++)
		if (r->qs && r->qs[i].evfd >= 0)
			eventfd_kick(r->qs[i].evfd);
	for (i = 0; r->qs && i < r->nr_queues; i++) {
		struct ring_queue *q = &r->qs[i];

		while (q->thread) {
			/*
			 * Polled each ms, no clock in it to step: ThreadSanitizer
			 * does not see pthread_clockjoin_np() join (it reported
			 * the teardown below as a race with the joined thread).
			 */
			if (!pthread_tryjoin_np(q->tid, NULL)) {
				q->thread = false;
				progress = blk_now_ms();
				continue;
			}
			if (!said && blk_now_ms() - start > 5000) {
				/* what it waits for: requests parked on a device, or their replies */
				blk_log("FUSE ring: queue %u still has %u requests in hand%s",
					i, queue_held(q),
					__atomic_load_n(&q->handoff, __ATOMIC_ACQUIRE) ?
					" and replies to commit" : "");
				said = true;
			}
			held = ring_held(r);
			if (held < prev)
				progress = blk_now_ms();
			prev = held;
			if (timeout_ms && blk_now_ms() - progress >= timeout_ms)
				goto out_abandon;
			usleep(1000);
		}
	}
	/*
	 * A queue whose thread died still lends its buffers to requests a
	 * handler holds: they go when the last of those replies.
	 */
	for (;;) {
		held = ring_held(r);
		if (!held)
			break;
		if (held < prev)
			progress = blk_now_ms();
		prev = held;
		if (timeout_ms && blk_now_ms() - progress >= timeout_ms)
			goto out_abandon;
		if (!said && blk_now_ms() - start > 5000) {
			blk_log("FUSE ring: waiting for %u requests in hand to be answered", held);
			said = true;
		}
		usleep(1000);
	}
	helper_stop(r->helper);
	r->helper = NULL;
	__atomic_store_n(&r->active, false, __ATOMIC_RELEASE);
	for (i = 0; r->qs && i < r->nr_queues; i++) {
		struct ring_queue *q = &r->qs[i];

		/* closing the ring cancels what the kernel still holds of it */
		if (q->ring_ok)
			io_uring_queue_exit(&q->ring);
		q->ring_ok = false;
		if (q->evfd >= 0)
			close(q->evfd);
		q->evfd = -1;
		if (q->mem)
			munmap(q->mem, q->mem_len);
		q->mem = NULL;
		free(q->ents);
		q->ents = NULL;
	}
	if (r->ctl_ok)
		io_uring_queue_exit(&r->ctl);
	r->ctl_ok = false;
	return true;

out_abandon:
	/*
	 * A request in hand waits on a hung device: its reply would go
	 * through its entry, so the rings, buffers and threads stay as they
	 * are for as long as the process lives (the daemon exits).
	 */
	blk_err("FUSE ring: gave up after %llu ms without progress: %u requests in hand are "
		"not answered", (unsigned long long)timeout_ms, ring_held(r));
	r->abandoned = true;
	return false;
}

void bf_ring_stop(struct bf_ring *r)
{
	bf_ring_stop_within(r, 0);
}

void bf_ring_destroy(struct bf_ring *r)
{
	if (!r || r->abandoned)
		return;
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r->qs);
	free(r);
}

/* Bytes of the queue's buffers that are in memory now. */
static size_t resident(const struct ring_queue *q)
{
	size_t pages = q->mem_len / RING_PAGE, n = 0, i;
	unsigned char *vec;

	if (!q->mem || !pages)
		return 0;
	vec = malloc(pages);
	if (!vec)
		return 0;
	if (!mincore(q->mem, q->mem_len, vec))
		for (i = 0; i < pages; i++)
			n += vec[i] & 1;
	free(vec);
	return n * RING_PAGE;
}

int bf_ring_show(struct bf_ring *r, char *buf, size_t len)
{
	uint64_t requests = 0, handoffs = 0, stolen = 0, spin_ns = 0, spins = 0, hits = 0, yielded = 0;
	size_t bytes = 0, res = 0;
	unsigned i;

	for (i = 0; i < r->nr_queues; i++) {
		const struct ring_queue *q = &r->qs[i];

		requests += __atomic_load_n(&q->requests, __ATOMIC_RELAXED);
		handoffs += __atomic_load_n(&q->handoffs, __ATOMIC_RELAXED);
		stolen += __atomic_load_n(&q->stolen, __ATOMIC_RELAXED);
		spin_ns += __atomic_load_n(&q->spin_ns, __ATOMIC_RELAXED);
		spins += __atomic_load_n(&q->spins, __ATOMIC_RELAXED);
		hits += __atomic_load_n(&q->spin_hits, __ATOMIC_RELAXED);
		yielded += __atomic_load_n(&q->spin_yielded, __ATOMIC_RELAXED);
		bytes += q->mem_len + q->ring_bytes;
		res += resident(q);
	}
	return snprintf(buf, len,
			"queues %u\nqueue_depth %u\npayload_bytes %zu\nring_bytes %zu\n"
			"ring_resident_bytes %zu\nring_requests %llu\nring_handoff_replies %llu\n"
			"ring_moved_requests %llu\nuring_spin_limit_us %llu\nring_spin_us %llu\n"
			"ring_spins %llu\nring_spin_hits %llu\nring_spin_yielded %llu\n",
			r->nr_queues, r->depth, r->payload, bytes, res,
			(unsigned long long)requests, (unsigned long long)handoffs,
			(unsigned long long)stolen, (unsigned long long)(r->spin_ns / 1000),
			(unsigned long long)(spin_ns / 1000),
			(unsigned long long)spins, (unsigned long long)hits,
			(unsigned long long)yielded);
}
