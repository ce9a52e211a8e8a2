// SPDX-License-Identifier: MIT
/*
 * backends/null.c - a device that stores nothing, like the kernel's null_blk:
 * writes are dropped, reads return zeros, and every I/O completes before
 * submit() returns. With it behind the cache, a benchmark measures blkfs's
 * own cost (FUSE, cache, writeback shaping) and nothing else.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends_int.h"
#include "kit/knobs.h"

struct null_dev {
	struct blk_backend be;		/* must come first */
	struct blk_geometry geo;	/* set at open; size changes in null_resize() */
};

/*
 * No keys of its own: the geometry is the device section's. The table is
 * there all the same, so every backend's keys are listed the one way.
 */
struct null_conf {
	char unused;
};

#define NULL_KNOBS(K)

BK_BACKEND_DEFINE(null, struct null_conf, NULL_KNOBS);

static struct blk_backend *null_open(struct blk_params *p, struct blk_backend *next)
{
	struct null_conf conf;
	struct null_dev *nd;
	struct blk_geometry geo;
	int ret;

	(void)next;
	ret = bk_parse(&bk_table, p, &conf);
	if (!ret)
		ret = be_geo_from_params(p, "null", &geo);
	if (ret)
		return ERR_PTR(ret);
	nd = calloc(1, sizeof(*nd));
	if (!nd) {
		blk_param_error(p, NULL, "out of memory");
		return ERR_PTR(-ENOMEM);
	}
	nd->be.ops = &null_backend_ops;
	nd->geo = geo;
	return &nd->be;
}

static void null_close(struct blk_backend *be)
{
	free(be);
}

static void null_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct null_dev *)be)->geo;
}

/* blk_resize(): any size (0, "auto": no storage to ask, the size stays). */
static int null_resize(struct blk_backend *be, uint64_t *size)
{
	struct null_dev *nd = (struct null_dev *)be;

	if (!*size)
		*size = nd->geo.size;
	if (*size % nd->geo.lbs)
		return -EINVAL;
	nd->geo.size = *size;
	return 0;
}

static int null_submit(struct blk_backend *be, struct blk_io *io)
{
	int i;

	if (io->op == BLK_READ)
		for (i = 0; i < io->iovcnt; i++)
			memset(io->iov[i].iov_base, 0, io->iov[i].iov_len);
	io->end_io(io, 0);
	return 0;
}


const struct blk_backend_ops null_backend_ops = {
	.name = "null",
	.keys = null_keys,
	.help = "null: stores nothing, reads zeros (like null_blk); size from the config",
	.open = null_open,
	.close = null_close,
	.geometry = null_geometry,
	.resize = null_resize,
	.submit = null_submit,
};
