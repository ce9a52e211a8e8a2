// SPDX-License-Identifier: MIT
/*
 * backends/kit/filter.c - what a filter passes down unchanged: geometry,
 * resize, the snapshot calls; and the `pool` key (filter.h).
 */
#include "../backend.h"
#include "filter.h"

void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	be->next->ops->geometry(be->next, geo);
}

int be_filter_resize(struct blk_backend *be, uint64_t *size)
{
	return blk_resize(be->next, size);
}

int be_param_pool(struct blk_params *p, unsigned int *nr)
{
	return blk_param_uint(p, "pool", BE_POOL_DEF, 1, BE_POOL_MAX, nr);
}

int be_filter_snap_create(struct blk_backend *be, const char *name)
{
	return blk_snap_create(be->next, name);
}

int be_filter_snap_destroy(struct blk_backend *be, const char *name)
{
	return blk_snap_destroy(be->next, name);
}

int be_filter_snap_reset(struct blk_backend *be, const char *name)
{
	return blk_snap_reset(be->next, name);
}

int be_filter_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	return blk_snap_list(be->next, v, nr);
}

int be_filter_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	return blk_snap_save(be->next, name, path);
}

const struct blk_snap_ops be_filter_snap_ops = {
	.create = be_filter_snap_create,
	.destroy = be_filter_snap_destroy,
	.reset = be_filter_snap_reset,
	.list = be_filter_snap_list,
	.save = be_filter_snap_save,
};
