// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_plug.c - backends/lib/plug.c: a thread's plug, as the
 * kernel's blk_plug.
 *
 * What plug.h promises, one test each: start and finish run each deferred
 * callback once (the same work deferred twice is one callback); a plug
 * inside another does nothing and the outer one flushes all; callbacks run
 * with no plug in force (what they start is done at once, not deferred
 * again); past BLK_PLUG_MAX_CBS layers the next one does its work at once;
 * blk_plug_flush() mid-plug runs what is deferred and keeps the plug; no
 * plug, nothing deferred; a plug is its own thread's (another thread's work
 * is not deferred, nor run by its flush). The waits that flush a plug are
 * tested where they live: test_slots.c (bf_slots_get()) and test_record.c
 * (record's gate).
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "../../backends/lib/plug.h"

/* A layer's deferred work: how often it ran, and what it saw then. */
struct work {
	int runs;
	bool plugged;		/* blk_plugged() inside the callback */
	bool pending;		/* blk_plug_pending() inside the callback */
	int redefer;		/* blk_plug_defer() of more work inside it, when asked */
	bool ask_redefer;
	int order;		/* when it ran, from 1 */
};

static int ran;			/* callbacks run so far, across works */

static void work_fn(void *data)
{
	struct work *w = data;

	w->runs++;
	w->order = ++ran;
	w->plugged = blk_plugged();
	w->pending = blk_plug_pending();
	if (w->ask_redefer)
		w->redefer = blk_plug_defer(work_fn, w + 1);
}

/* A second function: the same data under another fn is other work. */
static void other_fn(void *data)
{
	struct work *w = data;

	w->runs++;
}

static void init(void)
{
	ran = 0;
}

TestSuite(plug, .init = init);

Test(plug, no_plug_defers_nothing)
{
	struct work w = { 0 };

	cr_assert(!blk_plugged());
	cr_assert(!blk_plug_pending());
	cr_assert_eq(blk_plug_defer(work_fn, &w), 0, "deferred with no plug in force");
	blk_plug_flush();	/* nothing to run, nothing to crash on */
	cr_assert_eq(w.runs, 0);
	cr_assert(!blk_plug_pending());
}

Test(plug, finish_runs_each_deferred_callback_once)
{
	struct work w[3] = { 0 };
	struct blk_plug plug;
	int i;

	memset(&plug, 0x5a, sizeof(plug));	/* on the stack: whatever was there */
	blk_plug_start(&plug);
	cr_assert(blk_plugged());
	cr_assert(!blk_plug_pending(), "a new plug holds nothing");
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	cr_assert(blk_plug_pending());
	cr_assert_eq(blk_plug_defer(work_fn, &w[1]), 1);
	/* the same work again (aio: another iocb of the same device): nothing new */
	for (i = 0; i < 5; i++)
		cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 2);
	/* the same data with another fn is other work */
	cr_assert_eq(blk_plug_defer(other_fn, &w[2]), 1);
	cr_assert_eq(blk_plug_defer(work_fn, &w[2]), 1);
	for (i = 0; i < 3; i++)
		cr_assert_eq(w[i].runs, 0, "work %d ran before the flush", i);

	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 1, "w0 ran %d times", w[0].runs);
	cr_assert_eq(w[1].runs, 1, "w1 ran %d times", w[1].runs);
	cr_assert_eq(w[2].runs, 2, "w2 (two fns) ran %d times", w[2].runs);
	cr_assert_eq(w[0].order, 1, "deferred work runs in the order it was deferred");
	cr_assert_eq(w[1].order, 2);
	cr_assert(!blk_plugged());
	cr_assert(!blk_plug_pending());

	/* after the finish: nothing deferred, nothing run again */
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 0);
	blk_plug_flush();
	cr_assert_eq(w[0].runs, 1);

	/* a plug after it starts empty and works the same */
	blk_plug_start(&plug);
	cr_assert(!blk_plug_pending());
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 2);
	cr_assert_eq(w[1].runs, 1);
}

Test(plug, a_plug_inside_another_does_nothing_the_outer_flushes_all)
{
	struct work w[3] = { 0 };
	struct blk_plug outer, inner;

	blk_plug_start(&outer);
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	blk_plug_start(&inner);
	cr_assert(blk_plug_pending(), "the inner plug hid the outer one's work");
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 2, "the outer plug's work is still known");
	cr_assert_eq(blk_plug_defer(work_fn, &w[1]), 1);
	blk_plug_finish(&inner);
	cr_assert_eq(w[0].runs + w[1].runs, 0, "the inner plug's finish ran work");
	cr_assert(blk_plugged(), "the inner plug's finish ended the outer plug");
	cr_assert(blk_plug_pending());
	cr_assert_eq(blk_plug_defer(work_fn, &w[2]), 1, "the outer plug no longer defers");

	blk_plug_finish(&outer);
	cr_assert_eq(w[0].runs, 1);
	cr_assert_eq(w[1].runs, 1);
	cr_assert_eq(w[2].runs, 1);
	cr_assert(!blk_plugged());
	cr_assert(!blk_plug_pending());
}

Test(plug, callbacks_run_with_no_plug_in_force)
{
	struct work w[2] = { 0 };
	struct blk_plug plug;

	/* at the finish */
	w[0].ask_redefer = true;
	blk_plug_start(&plug);
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 1);
	cr_assert(!w[0].plugged, "a callback ran with a plug in force");
	cr_assert(!w[0].pending);
	cr_assert_eq(w[0].redefer, 0, "work a callback started was deferred again");
	cr_assert_eq(w[1].runs, 0);

	/* at a flush mid-plug, and the plug is back after it */
	w[0] = (struct work){ .ask_redefer = true };
	w[0].redefer = -1;
	blk_plug_start(&plug);
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	blk_plug_flush();
	cr_assert_eq(w[0].runs, 1);
	cr_assert(!w[0].plugged, "a callback ran with a plug in force (flush)");
	cr_assert_eq(w[0].redefer, 0, "work a callback started was deferred again (flush)");
	cr_assert(blk_plugged(), "the flush ended the plug");
	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 1);
	cr_assert_eq(w[1].runs, 0);
}

Test(plug, past_max_layers_the_next_one_works_at_once)
{
	struct work w[BLK_PLUG_MAX_CBS + 2] = { 0 };
	struct blk_plug plug;
	int i;

	blk_plug_start(&plug);
	for (i = 0; i < BLK_PLUG_MAX_CBS; i++)
		cr_assert_eq(blk_plug_defer(work_fn, &w[i]), 1, "layer %d", i);
	/* full: the next one is told to do its work now */
	cr_assert_eq(blk_plug_defer(work_fn, &w[BLK_PLUG_MAX_CBS]), 0,
		     "a layer past BLK_PLUG_MAX_CBS was deferred");
	cr_assert_eq(blk_plug_defer(work_fn, &w[BLK_PLUG_MAX_CBS + 1]), 0);
	/* one already there still counts as deferred */
	cr_assert_eq(blk_plug_defer(work_fn, &w[BLK_PLUG_MAX_CBS - 1]), 2);
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 2);
	blk_plug_finish(&plug);
	for (i = 0; i < BLK_PLUG_MAX_CBS; i++)
		cr_assert_eq(w[i].runs, 1, "layer %d ran %d times", i, w[i].runs);
	/* refused work is the caller's: the plug never runs it */
	cr_assert_eq(w[BLK_PLUG_MAX_CBS].runs, 0);
	cr_assert_eq(w[BLK_PLUG_MAX_CBS + 1].runs, 0);
}

Test(plug, flush_mid_plug_runs_the_work_and_keeps_the_plug)
{
	struct work w[BLK_PLUG_MAX_CBS + 1] = { 0 };
	struct blk_plug plug;
	int i;

	blk_plug_start(&plug);
	blk_plug_flush();	/* nothing deferred yet */
	cr_assert(blk_plugged());
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	cr_assert_eq(blk_plug_defer(work_fn, &w[1]), 1);
	blk_plug_flush();
	cr_assert_eq(w[0].runs, 1, "the flush did not run the deferred work");
	cr_assert_eq(w[1].runs, 1);
	cr_assert(!blk_plug_pending(), "the plug still holds work after its flush");
	cr_assert(blk_plugged(), "the flush ended the plug");
	blk_plug_flush();	/* nothing again: nothing run twice */
	cr_assert_eq(w[0].runs, 1);

	/* still usable: the same work defers anew, and room is back (all slots) */
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1, "the flushed work still counts as deferred");
	for (i = 1; i < BLK_PLUG_MAX_CBS; i++)
		cr_assert_eq(blk_plug_defer(work_fn, &w[i + 1]), 1, "layer %d after the flush", i);
	cr_assert(blk_plug_pending());
	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 2);
	cr_assert_eq(w[1].runs, 1, "work flushed before ran again at the finish");
	for (i = 2; i <= BLK_PLUG_MAX_CBS; i++)
		cr_assert_eq(w[i].runs, 1, "work %d ran %d times", i, w[i].runs);
	cr_assert(!blk_plugged());
}

/* ---- a plug is per thread ---- */

struct other {
	struct work *w;
	int defer;
	bool plugged, pending;
};

static void *other_main(void *arg)
{
	struct other *o = arg;

	o->plugged = blk_plugged();
	o->pending = blk_plug_pending();
	o->defer = blk_plug_defer(work_fn, o->w);
	blk_plug_flush();	/* must not run the plugged thread's work */
	return NULL;
}

/* Another thread while this one is plugged, and with a plug of its own. */
static void *other_plugged_main(void *arg)
{
	struct other *o = arg;
	struct blk_plug plug;

	blk_plug_start(&plug);
	o->defer = blk_plug_defer(work_fn, o->w);
	blk_plug_finish(&plug);
	return NULL;
}

Test(plug, a_plug_is_its_threads_own)
{
	struct work w[3] = { 0 };
	struct other o = { .w = &w[1], .defer = -1 };
	struct blk_plug plug;
	pthread_t t;

	blk_plug_start(&plug);
	cr_assert_eq(blk_plug_defer(work_fn, &w[0]), 1);
	cr_assert_eq(pthread_create(&t, NULL, other_main, &o), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert(!o.plugged, "another thread sees this thread's plug");
	cr_assert(!o.pending, "another thread sees this thread's deferred work");
	cr_assert_eq(o.defer, 0, "another thread's work was deferred to this thread's plug");
	cr_assert_eq(w[0].runs, 0, "another thread's flush ran this thread's work");

	/* the same data from another thread with its own plug: its own callback */
	o = (struct other){ .w = &w[0], .defer = -1 };
	cr_assert_eq(pthread_create(&t, NULL, other_plugged_main, &o), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(o.defer, 1, "another thread's plug saw this thread's work");
	cr_assert_eq(w[0].runs, 1, "another thread's finish did not run its own work once");
	cr_assert(blk_plug_pending(), "another thread's finish took this thread's work");

	blk_plug_finish(&plug);
	cr_assert_eq(w[0].runs, 2);
	cr_assert_eq(w[1].runs, 0);
}
