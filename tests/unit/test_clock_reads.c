/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_clock_reads.c - how many times a request reads the clock
 * (issue 39), counted by interposing clock_gettime(2) (CLOCK_MONOTONIC
 * calls of this thread only). A request is driven as fuse/devfile.c drives
 * one: bt_req_begin() at receipt, a request slot (fuse/slots.c, built in
 * here) whose bf_slots_get() says whether it waited, the begin stamp left
 * for the request's struct pc_aio when it did not, the cache's asynchronous
 * form, the reply's bt_req_end_tok() with the request's struct pc_aio when
 * it is answered in its handler's thread (the fake completes inline), and
 * the handler's return clearing the begin stamp. An unsplit direct I/O
 * answered inline shares both ends with the device level: 2 reads, not 4;
 * one that waited for its slot reads the clock at the device level's begin
 * (3), whose time then leaves the wait out. A stamp is only ever taken by
 * the request that set it, within its handler.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "../../backends/lib/trace.h"
#include "../../core/pcache.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#include "../../fuse/slots.h"	/* the real bf_slots_get() and its @waited: fuse/slots.o is linked in */

static __thread bool counting;
static __thread unsigned int reads;

/* Every clock_gettime of the process comes here (the binary defines it): counted, passed on. */
int clock_gettime(clockid_t clk, struct timespec *ts)
{
	static int (*real)(clockid_t, struct timespec *);

	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "clock_gettime");
	if (counting && clk == CLOCK_MONOTONIC)
		reads++;
	return real(clk, ts);
}

/* A request as devfile.c's struct bf_req has it. */
struct treq {
	struct pc_aio aio;	/* first */
	struct bt_dev *bt;
	enum blk_op op;
	uint64_t pos, len, start;
	ssize_t res;
	int calls;
};

/* The request whose handler this thread runs (devfile.c's req_here). */
static __thread const struct treq *here;

/* The device's request slots: one, so that a second taker waits. */
static struct bf_slots gate;
static struct bf_slot gate_slot;
static bool gate_made;

static void gate_make(void)
{
	if (gate_made)
		return;
	cr_assert_eq(bf_slots_init(&gate), 0);
	cr_assert_eq(bf_slots_add(&gate, &gate_slot), 0);
	gate_made = true;
}

/* devfile.c's req_get(): begun at receipt, then a slot; its start shared when it did not wait. */
static struct bf_slot *treq_get(struct treq *r)
{
	bool waited;
	struct bf_slot *slot;

	r->start = bt_req_begin(r->bt, r->op, r->pos, r->len, 1);
	slot = bf_slots_get(&gate, &waited);
	if (!waited)
		blk_stamp_set(&blk_begin_stamp, &r->aio, r->start);
	here = r;
	return slot;
}

/* devfile.c's req_returned() (the fake completed inline: the slot goes back). */
static void treq_returned(struct bf_slot *slot)
{
	here = NULL;
	blk_stamp_clear(&blk_begin_stamp);
	bf_slots_put(&gate, slot);
}

static void treq_done(struct pc_aio *aio, ssize_t res)
{
	struct treq *r = (struct treq *)aio;

	bt_req_end_tok(r->bt, r->op, r->pos, r->len, 1, r->start, (long)res,
		       here == r ? &r->aio : NULL);
	r->res = res;
	r->calls++;
}

static struct treq *treq_new(void)
{
	struct treq *r = talloc(sizeof(*r));

	r->aio.done = treq_done;
	r->aio.waited = false;
	r->bt = bt_dev_get("t0");	/* the fixture's device: the cache's own */
	cr_assert_not_null(r->bt);
	return r;
}

/* Receive, start and (the fake being inline) answer one request; the clock reads it took. */
static unsigned int run(struct treq *r, enum blk_op op, bool direct, void *buf, uint64_t len,
			uint64_t pos)
{
	struct bf_slot *slot;

	reads = 0;
	counting = true;
	r->op = op;
	r->pos = pos;
	r->len = len;
	r->calls = 0;
	slot = treq_get(r);
	if (op == BLK_WRITE && direct)
		pc_direct_write_async(dev, &r->aio, buf, len, pos);
	else if (op == BLK_WRITE)
		pc_write_async(dev, &r->aio, buf, len, pos);
	else
		pc_direct_read_async(dev, &r->aio, buf, len, pos);
	treq_returned(slot);
	counting = false;
	return reads;
}

/* run(), answered in its handler with all its bytes (asserted). */
static unsigned int run_ok(struct treq *r, enum blk_op op, bool direct, void *buf, uint64_t len,
			   uint64_t pos)
{
	unsigned int n = run(r, op, direct, buf, len, pos);

	cr_assert_eq(r->calls, 1, "the request was not answered in its handler");
	cr_assert_eq(r->res, (ssize_t)len);
	return n;
}

static void setup_dev(void)
{
	struct blk_geometry g = geo_of(16 * MiB, 4096, 4096, 1 * MiB);

	setup(&g, 8 * MiB, 64 * KiB, 0);
	gate_make();
}

/* The FUSE level's latency sum of @op against the device level's. */
static void sums(unsigned int op, uint64_t *fuse, uint64_t *devl)
{
	struct blk_hist h;
	struct bt_dev *bt = bt_dev_get("t0");

	bt_hist_snap(bt, BT_LEVEL_FUSE, op, &h);
	*fuse = h.sum_ns;
	bt_hist_snap(bt, BT_LEVEL_DEV, op, &h);
	*devl = h.sum_ns;
}

TEST_FIX(clock_reads, unsplit_direct_io_inline_reads_two)
{
	struct treq *r = treq_new();
	uint8_t *buf = talloc(64 * KiB);
	uint64_t f, d;
	unsigned int n;
	int i;

	setup_dev();
	run_ok(r, BLK_WRITE, true, buf, 4096, 0);	/* the thread's first: its blocks are made */
	for (i = 0; i < 4; i++) {
		n = run_ok(r, BLK_WRITE, true, buf, 4096, 4096 * (uint64_t)(i + 1));
		cr_assert_eq(n, 2, "direct write %d: %u clock reads (the FUSE level's begin, which "
			     "is the device level's too, and the device level's end, which is the "
			     "reply's too)", i, n);
		n = run_ok(r, BLK_READ, true, buf, 64 * KiB, 64 * KiB * (uint64_t)i);
		cr_assert_eq(n, 2, "direct read %d: %u clock reads", i, n);
	}
	/* one end for both levels: the FUSE level's time holds the device level's */
	sums(BT_OP_WRITE, &f, &d);
	cr_assert_geq(f, d, "FUSE level writes %llu ns < device level %llu ns",
		      (unsigned long long)f, (unsigned long long)d);
	sums(BT_OP_READ, &f, &d);
	cr_assert_geq(f, d, "FUSE level reads %llu ns < device level %llu ns",
		      (unsigned long long)f, (unsigned long long)d);
}

#define SLOT_WAIT_MS 40

struct waiter {
	struct treq *r;
	uint8_t *buf;
	unsigned int reads;
};

static void *waiter_fn(void *arg)
{
	struct waiter *w = arg;

	/* the gate's one slot is the main thread's: this request waits for it */
	w->reads = run(w->r, BLK_WRITE, true, w->buf, 4096, 64 * KiB);
	return NULL;
}

/*
 * A request that waited for its slot (all taken) does not share its start:
 * the device level reads the clock at its begin (3 reads), and its time
 * leaves the wait out, which the FUSE level's holds.
 */
TEST_FIX(clock_reads, waited_for_slot_reads_three)
{
	struct waiter w = { .r = treq_new() };
	struct bf_slots_stats st;
	struct bf_slot *held;
	uint64_t f0, d0, f1, d1;
	pthread_t t;

	setup_dev();
	w.buf = talloc(64 * KiB);
	run_ok(w.r, BLK_WRITE, true, w.buf, 4096, 0);
	sums(BT_OP_WRITE, &f0, &d0);
	held = bf_slots_get(&gate, NULL);
	cr_assert_eq(pthread_create(&t, NULL, waiter_fn, &w), 0);
	do {
		sched_yield();
		bf_slots_stats(&gate, &st);
	} while (st.waiters != 1);
	usleep(SLOT_WAIT_MS * 1000);
	bf_slots_put(&gate, held);
	pthread_join(t, NULL);
	cr_assert_eq(w.r->calls, 1);
	cr_assert_eq(w.r->res, 4096);
	cr_assert_eq(w.reads, 3, "a request that waited for its slot: %u clock reads, not 3 (its "
		     "begin, the device level's own begin, the shared end)", w.reads);
	sums(BT_OP_WRITE, &f1, &d1);
	cr_assert_geq(f1 - f0, SLOT_WAIT_MS * 1000000ull, "the FUSE level's time (%llu ns) lacks the wait",
		      (unsigned long long)(f1 - f0));
	cr_assert_lt(d1 - d0, SLOT_WAIT_MS * 1000000ull, "the device level's time (%llu ns) holds the "
		     "wait for a slot", (unsigned long long)(d1 - d0));
}

/* A request the cache refuses at once (a misaligned direct write): the clock reads it took. */
static unsigned int run_refused(struct treq *r, uint8_t *buf)
{
	unsigned int n = run(r, BLK_WRITE, true, buf, 4096, 100);

	cr_assert_eq(r->calls, 1);
	cr_assert_eq(r->res, -EINVAL);
	return n;
}

/*
 * A stamp is only ever taken by the request that set it: the same slot's
 * next request, one that reaches no device (refused at once), reads the
 * clock at its end as any such request does, and a reply sent outside the
 * handler (parked) reads it too.
 */
TEST_FIX(clock_reads, stale_stamp_is_never_taken)
{
	struct treq *r = treq_new(), *other = treq_new();
	uint8_t *buf = talloc(64 * KiB);
	unsigned int n, plain;

	setup_dev();
	run_ok(r, BLK_WRITE, true, buf, 4096, 0);
	/* a direct write whose device end leaves a stamp, not answered in its handler */
	counting = true;
	reads = 0;
	r->calls = 0;
	r->op = BLK_WRITE;
	r->pos = 8192;
	r->len = 4096;
	r->start = bt_req_begin(r->bt, BLK_WRITE, 8192, 4096, 1);
	pc_direct_write_async(dev, &r->aio, buf, 4096, 8192);	/* here is NULL: parked */
	counting = false;
	cr_assert_eq(r->calls, 1);
	cr_assert_eq(reads, 4, "a reply outside its handler: %u clock reads, not 4", reads);
	/* its end stamp is left: the same slot's next request never takes it */
	n = run_refused(r, buf);
	plain = run_refused(other, buf);
	cr_assert_eq(n, plain, "a refused request in the same slot: %u clock reads, not %u as in "
		     "another (it took the stale stamp for its end)", n, plain);
	cr_assert_eq(plain, 2, "a refused request: %u clock reads, not 2 (its begin and end)", plain);
}

#define STALE_MS 20

/*
 * A begin stamp lives only within its request's handler: a request that
 * sent no I/O (refused at once) leaves it untaken, its handler's return
 * clears it, and the same struct pc_aio's I/O begun later in this thread
 * outside any handler (as a parked request resumed here) reads the clock
 * at its begin: 3 reads (its begin, its end, the reply's end outside the
 * handler), and its device time is its own, not since the old start.
 */
TEST_FIX(clock_reads, begin_stamp_dies_with_its_handler)
{
	struct treq *r = treq_new();
	uint8_t *buf = talloc(64 * KiB);
	uint64_t f0, d0, f1, d1;

	setup_dev();
	run_ok(r, BLK_WRITE, true, buf, 4096, 0);
	run_refused(r, buf);
	usleep(STALE_MS * 1000);
	sums(BT_OP_WRITE, &f0, &d0);
	counting = true;
	reads = 0;
	r->calls = 0;
	r->pos = 8192;
	pc_direct_write_async(dev, &r->aio, buf, 4096, 8192);	/* here is NULL: no handler */
	counting = false;
	cr_assert_eq(r->calls, 1);
	cr_assert_eq(r->res, 4096);
	cr_assert_eq(reads, 3, "an I/O begun outside its handler: %u clock reads, not 3 (it took "
		     "a begin stamp its handler left)", reads);
	sums(BT_OP_WRITE, &f1, &d1);
	cr_assert_lt(d1 - d0, STALE_MS * 1000000ull, "the device level's time (%llu ns) runs from "
		     "a stale start", (unsigned long long)(d1 - d0));
}
