/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/filter.h - what every filter shares: the calls it passes to
 * the layer below unchanged (geometry, resize, snapshots), the child I/O
 * it submits in place of the one it took, and the `pool` key of a filter
 * with per-I/O state (the pool itself: lib/pool.h).
 *
 * Lock: none of its own; each call is the layer below's.
 */
#ifndef BLKFS_KIT_FILTER_H
#define BLKFS_KIT_FILTER_H

#include "../backend.h"

/* The `pool` key every filter with per-I/O state takes: 1..65536, default 256. */
#define BE_POOL_DEF	256u
#define BE_POOL_MAX	65536u
int be_param_pool(struct blk_params *p, unsigned int *nr);

/* A filter's ->geometry: the layer below's, unchanged. */
void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo);
/* A filter's ->resize that keeps nothing of the size: the layer below's. */
int be_filter_resize(struct blk_backend *be, uint64_t *size);

/*
 * A filter's ->snap: every call goes to the layer below, unchanged (one line
 * in a filter's ops: `.snap = &be_filter_snap_ops`). A filter with a table
 * of its own takes the calls it does not change from here.
 */
extern const struct blk_snap_ops be_filter_snap_ops;
int be_filter_snap_create(struct blk_backend *be, const char *name);
int be_filter_snap_destroy(struct blk_backend *be, const char *name);
int be_filter_snap_reset(struct blk_backend *be, const char *name);
int be_filter_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr);
int be_filter_snap_save(struct blk_backend *be, const char *name, const char *path);

/**
 * be_child_io - the blk_io a filter passes down in place of @parent
 * @parent: the I/O the filter took (the cache's)
 * @end_io: the filter's completion, which ends @parent in its turn
 * @private: the filter's, for @end_io
 *
 * The same op, flags and range over the parent's iovec: that memory stays
 * the cache's until the parent's end_io, so it outlives the child. A filter
 * that submits the child from another thread clears BLK_IO_WAITED.
 * BLK_IO_MAPPED does not go down: a filter ends its parent outside the child's end_io.
 */
static inline struct blk_io be_child_io(const struct blk_io *parent,
					void (*end_io)(struct blk_io *, int), void *private)
{
	return (struct blk_io){
		.op = parent->op,
		.flags = parent->flags & ~BLK_IO_MAPPED,	/* backend.h: never down a filter */
		.pos = parent->pos,
		.len = parent->len,
		.iov = parent->iov,
		.iovcnt = parent->iovcnt,
		.end_io = end_io,
		.private = private,
		.done = 0,
	};
}

#endif
