/* SPDX-License-Identifier: MIT */
/*
 * backends/backends_int.h - private to backends/: the ops of every backend
 * the registry knows, and helpers the backends share. Nothing outside
 * backends/ includes this; core/ sees only backend.h.
 */
#ifndef BLKFS_BACKENDS_INT_H
#define BLKFS_BACKENDS_INT_H

#include "backend.h"

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

#endif
