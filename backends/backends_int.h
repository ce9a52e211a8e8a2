/* SPDX-License-Identifier: MIT */
/*
 * backends/backends_int.h - private to backends/: the ops of every backend
 * the registry knows, their knob tables, and (included below) the kit of
 * helpers the backends and filters share. Nothing outside backends/
 * includes this; core/ sees only backend.h.
 */
#ifndef BLKFS_BACKENDS_INT_H
#define BLKFS_BACKENDS_INT_H

#include <pthread.h>

#include "backend.h"
#include "lib/clock.h"
#include "lib/list.h"
#include "lib/pool.h"

/* One line per backend; registry.c lists them in the same order. */
extern const struct blk_backend_ops ram_backend_ops;
extern const struct blk_backend_ops null_backend_ops;
extern const struct blk_backend_ops aio_backend_ops;
extern const struct blk_backend_ops nbd_backend_ops;
extern const struct blk_backend_ops rbd_backend_ops;
/*
 * Test hook: when set, the ram arena thread calls it with the device after
 * it has mapped and touched a reserve slab and before it takes alloc_lock
 * again to push it, so a unit test can run a discard in that window. NULL
 * outside tests.
 */
extern void (*ram_test_slab_mapped)(struct blk_backend *be);
/*
 * The aio backend's wait for an I/O on an idle, fast device (aio.c): the
 * longest a caller waits for its own I/O, and the average completion time
 * above which it does not wait. Tests change them before opening a device
 * (a wait of 0 makes every such I/O an orphan that the reaper must find);
 * the daemon keeps the defaults.
 */
extern uint64_t aio_wait_ns, aio_fast_ns, aio_wait_fast_ns, aio_sync_inline;
/* Filters (is_filter): the same list, in the order blk_filter_names() gives. */
extern const struct blk_backend_ops log_filter_ops;
extern const struct blk_backend_ops delay_filter_ops;
extern const struct blk_backend_ops fault_filter_ops;
extern const struct blk_backend_ops flakey_filter_ops;
extern const struct blk_backend_ops throttle_filter_ops;
extern const struct blk_backend_ops powerloss_filter_ops;
extern const struct blk_backend_ops record_filter_ops;

/*
 * The knob tables (kit/knobs.h) of every layer: every filter, and the ram,
 * nbd, aio, null and rbd backends. Each is defined by BK_DEFINE or
 * BK_BACKEND_DEFINE in its file.
 */
struct bk_table;
extern const struct bk_table *const ram_knob_table;
extern const struct bk_table *const null_knob_table;
extern const struct bk_table *const nbd_knob_table;
extern const struct bk_table *const aio_knob_table;
extern const struct bk_table *const rbd_knob_table;
extern const struct bk_table *const log_knob_table;
extern const struct bk_table *const delay_knob_table;
extern const struct bk_table *const fault_knob_table;
extern const struct bk_table *const flakey_knob_table;
extern const struct bk_table *const throttle_knob_table;
extern const struct bk_table *const powerloss_knob_table;
extern const struct bk_table *const record_knob_table;

/**
 * blk_knob_table - the knob table of the backend or filter @name
 * (registry.c), for tests and tools that list every key with its type,
 * bounds, default and unit
 *
 * Returns: the table, or NULL for a name blkfs does not have.
 */
const struct bk_table *blk_knob_table(const char *name);

/*
 * The kit (backends/kit/): helpers only backends and filters use, one
 * header per module. This header includes them all, so that a backend or
 * a filter includes this one header for the registry and its whole kit;
 * a kit file itself never includes this header (only ../backend.h and
 * ../lib/). params.h is lib/'s: the geometry from config and the value
 * forms of the blk_param_*() readers (kit/knobs.c reads keys with them).
 */
#include "kit/attr.h"
#include "kit/entries.h"
#include "kit/errnames.h"
#include "kit/filter.h"
#include "kit/seed.h"
#include "kit/timerq.h"
#include "lib/params.h"

#endif
