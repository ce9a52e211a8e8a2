/* SPDX-License-Identifier: MIT */
/*
 * backends/backends_int.h - private to backends/: the ops of every backend
 * the registry knows, and helpers the backends share. Nothing outside
 * backends/ includes this; core/ sees only backend.h.
 */
#ifndef BLKFS_BACKENDS_INT_H
#define BLKFS_BACKENDS_INT_H

#include <pthread.h>

#include "backend.h"
#include "clock.h"
#include "list.h"

/* One line per backend; registry.c lists them in the same order. */
extern const struct blk_backend_ops ram_backend_ops;
extern const struct blk_backend_ops null_backend_ops;
extern const struct blk_backend_ops aio_backend_ops;
extern const struct blk_backend_ops nbd_backend_ops;
/* Filters (is_filter): the same list, in the order blk_filter_names() gives. */
extern const struct blk_backend_ops log_filter_ops;
extern const struct blk_backend_ops delay_filter_ops;
extern const struct blk_backend_ops fault_filter_ops;
extern const struct blk_backend_ops powerloss_filter_ops;

/**
 * be_geo_from_params - the geometry of a backend whose shape is all config
 * (ram, null)
 * @p: the device's parameters; p->geo as the config gave it
 * @backend: backend name, for the message
 * @geo: filled: p->geo with the defaults conf documents for fields left 0
 *	 (lbs 512, pbs = lbs, io_min = pbs, max_io = 1M rounded to pbs,
 *	 io_opt = max_io) and dma_align = 1
 *
 * Returns: 0, or -EINVAL with p->err set: no size, or a shape conf would
 * have refused (the backend checks again because tests and tools build
 * struct blk_params by hand).
 */
int be_geo_from_params(struct blk_params *p, const char *backend,
		       struct blk_geometry *geo);

/**
 * be_geo_given - did the config give geometry field @key, with value @val?
 * (for a backend whose geometry comes from its storage: aio, nbd)
 * @p: the device's parameters
 * @key: the field's config key ("logical_block_size")
 * @val: the field in p->geo
 *
 * conf fills defaults for what is absent only when `size` is given, so
 * without a size any non-zero field was given; with one, the key must be
 * in the section. (A non-zero size itself was always given: conf never
 * makes one up.)
 */
bool be_geo_given(const struct blk_params *p, const char *key, uint64_t val);

/* backends/util.c, and inline */

/**
 * be_stat_printf - format a ->stat text (see struct blk_backend_ops)
 * @buf, @len: what ->stat got
 *
 * Returns: the length written, at most @len - 1 (the text is cut short,
 * never unterminated), or 0 when @len is 0 or formatting failed.
 */
size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/**
 * be_attr_text - an attr's store input as a string
 * @buf, @len: what store got (not NUL-terminated; one trailing newline allowed)
 * @s, @cap: filled with the text without the newline, NUL-terminated
 *
 * Returns: 0, or -EINVAL when it is empty, holds a NUL or does not fit.
 */
int be_attr_text(const char *buf, size_t len, char *s, size_t cap);

/**
 * be_attr_out - an attr's show: @s and a newline into @buf
 *
 * Returns: the length, or -EOVERFLOW when it does not fit in @len.
 */
int be_attr_out(char *buf, size_t len, const char *s);

/**
 * struct be_pool - fixed-size objects a backend or filter needs per I/O,
 * taken from memory filled before the I/O path needs it
 *
 * be_pool_init() allocates and touches @n objects: getting one costs a lock
 * and no allocation, so the I/O path neither calls malloc nor faults a page
 * in (under memory pressure a fault there can wait for writeback that only
 * this I/O would finish: a loop device over the mount). When more are in
 * use at once than were filled, the pool grows by malloc (counted in
 * nr_grown) and keeps what it grew, up to the peak; objects go back to it,
 * never to the system, until be_pool_destroy().
 *
 * Lock: @lock covers @free and the counters; never held across anything
 * but the list operation.
 */
struct be_pool {
	pthread_mutex_t lock;
	void *free;		/* lock: objects not in use, linked through their first word */
	size_t size;		/* object size, at least a pointer */
	uint64_t nr_objs;	/* lock: objects the pool owns */
	uint64_t nr_grown;	/* lock: of those, made by malloc in the I/O path */
};

/* Returns 0 or -ENOMEM (nothing allocated then). */
int be_pool_init(struct be_pool *pool, size_t size, unsigned int n);
/* An object, zeroed; NULL only when the pool is empty and malloc fails. */
void *be_pool_get(struct be_pool *pool);
void be_pool_put(struct be_pool *pool, void *obj);
/* Every object must be back. */
void be_pool_destroy(struct be_pool *pool);
/* "PREFIX_pool_objs N\nPREFIX_pool_grown N\n" for a ->stat. */
size_t be_pool_stat(struct be_pool *pool, const char *prefix, char *buf, size_t len);

/* A filter's ->geometry: the layer below's, unchanged. */
void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo);

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
 */
static inline struct blk_io be_child_io(const struct blk_io *parent,
					void (*end_io)(struct blk_io *, int), void *private)
{
	return (struct blk_io){
		.op = parent->op,
		.flags = parent->flags,
		.pos = parent->pos,
		.len = parent->len,
		.iov = parent->iov,
		.iovcnt = parent->iovcnt,
		.end_io = end_io,
		.private = private,
	};
}

#endif
