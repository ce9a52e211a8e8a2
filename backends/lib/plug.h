/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/plug.h - a thread's plug, as the kernel's blk_plug: a thread
 * that serves a batch of requests (a FUSE ring queue thread's batch) starts
 * a plug, and a layer below that would start work for each request (aio:
 * an io_submit()) defers it to the plug's flush, where the batch's work
 * goes in one go (aio: one io_submit() for the batch's iocbs).
 *
 * Deferred work holds I/O back until the flush, so a thread with a plug
 * must flush before it sleeps on anything that I/O may be needed for: the
 * kernel flushes a task's plug when it schedules; here each wait on the
 * request path that a plugged thread can reach calls blk_plug_flush()
 * first (fuse/slots.c:bf_slots_get(), backends/filters/record.c's gate;
 * core/THREADS.md R7). A layer that defers must also leave its work
 * reachable without the flush where it can (aio queues the requests on its
 * shared queue, which any other submitter or the reaper drains too).
 *
 * Thread-local, no locks: a plug, its callbacks and their flush all belong
 * to the thread that started it.
 */
#ifndef BLKFS_PLUG_H
#define BLKFS_PLUG_H

#include <stdbool.h>

/* Layers (devices) one plug defers for; more: the next one does its work at once. */
#define BLK_PLUG_MAX_CBS 8

struct blk_plug_cb {
	void (*fn)(void *data);
	void *data;
};

struct blk_plug {
	unsigned int nr;
	struct blk_plug_cb cb[BLK_PLUG_MAX_CBS];
};

/**
 * blk_plug_start - start deferring this thread's work to @plug's flush
 * @plug: the caller's (on its stack), until blk_plug_finish()
 *
 * A plug inside another does nothing: the outer one flushes all.
 */
void blk_plug_start(struct blk_plug *plug);

/**
 * blk_plug_finish - end @plug: run every callback deferred to it, once
 * @plug: as given to blk_plug_start()
 *
 * The callbacks run with no plug in force, so what they start (an end_io
 * submitting again) is done at once.
 */
void blk_plug_finish(struct blk_plug *plug);

/**
 * blk_plug_flush - run what this thread's plug holds, and keep the plug
 *
 * Called before a wait that deferred work could be needed for. Nothing
 * without a plug, or with nothing deferred.
 */
void blk_plug_flush(void);

/** blk_plug_pending - does this thread's plug hold deferred work? */
bool blk_plug_pending(void);

/** blk_plugged - is a plug in force in this thread (outside its flush)? */
bool blk_plugged(void);

/**
 * blk_plug_defer - defer @fn(@data) to the flush of this thread's plug
 * @fn: called once at the flush for all the work deferred with @data
 * @data: names the work (aio: its device)
 *
 * Returns: 0: no plug (or no room): do the work now; 1: deferred now,
 * @fn(@data) will run once; 2: already deferred with the same @fn and
 * @data, nothing new.
 */
int blk_plug_defer(void (*fn)(void *data), void *data);

#endif
