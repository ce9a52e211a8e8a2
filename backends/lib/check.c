/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/check.c - the contract checked at the one door, blk_submit()
 * (backends/backend.h), when built with -DBLKFS_CONTRACT_CHECK: on every
 * hop the I/O against the layer's geometry, and end_io exactly once with a
 * sane result, as nbdkit's server/backend.c checks every call into a
 * plugin or a filter. The first hop of an I/O puts a shim in its end_io
 * and keeps the submitter's in blk_io.check; later hops (a filter passing
 * the same I/O on) check the range only. A violation aborts: the rule, the
 * layer, the op, pos and len.
 */
#ifdef BLKFS_CONTRACT_CHECK

#include <stdio.h>
#include <stdlib.h>

#include "../backend.h"

enum {
	BLK_CHECK_IDLE,		/* never submitted, or given back by a failed submit() */
	BLK_CHECK_FLIGHT,	/* submitted, end_io not yet called */
	BLK_CHECK_ENDED,	/* end_io called */
};

static void check_fail(const struct blk_backend *be, const struct blk_io *io, const char *what)
{
	fprintf(stderr, "blkfs: contract violated: layer %s: %s %llu+%llu: %s\n",
		be && be->ops && be->ops->name ? be->ops->name : "?", blk_op_name(io->op),
		(unsigned long long)io->pos, (unsigned long long)io->len, what);
	abort();
}

static void check_end_io(struct blk_io *io, int res)
{
	struct blk_io_check *c = &io->check;

	if (c->self != io || c->state != BLK_CHECK_FLIGHT)
		check_fail(c->be, io, c->state == BLK_CHECK_ENDED ? "end_io called twice" :
			   "end_io of an I/O not in flight");
	if (res > 0 || res < -BLK_MAX_ERRNO)
		check_fail(c->be, io, "end_io result neither 0 nor -errno");
	if (io->done > io->len)
		check_fail(c->be, io, "done > len");
	if (res < 0 && !blk_aligned(io->done, c->lbs))
		check_fail(c->be, io, "done not a multiple of the logical block size");
	/*
	 * The shim stays in io->end_io: a second call comes back here. The
	 * submitter that reuses the I/O without setting end_io again gets its
	 * own back through check.end_io on the next blk_submit().
	 */
	c->state = BLK_CHECK_ENDED;
	c->end_io(io, res);
}

int blk_submit_checked(struct blk_backend *be, struct blk_io *io)
{
	struct blk_io_check *c = &io->check;
	struct blk_geometry geo;
	bool first;
	int ret;

	if (be->ops->check_geometry)
		be->ops->check_geometry(be, &geo);
	else
		be->ops->geometry(be, &geo);
	if (!blk_io_valid(&geo, io))
		check_fail(be, io, "I/O outside the layer's geometry (blk_io_valid)");
	first = !(io->end_io == check_end_io && c->self == io && c->state == BLK_CHECK_FLIGHT);
	if (first) {
		/* a copy of a checked I/O (c->self elsewhere) carries its end_io in check too */
		if (io->end_io != check_end_io)
			c->end_io = io->end_io;
		if (!c->end_io)
			check_fail(be, io, "no end_io");
		c->be = be;
		c->self = io;
		c->lbs = geo.lbs;
		c->state = BLK_CHECK_FLIGHT;
		io->end_io = check_end_io;
	}
	ret = be->ops->submit(be, io);
	/* 0: the I/O is the layer's now (end_io may have freed it): not a look */
	if (ret < 0) {
		if (ret < -BLK_MAX_ERRNO)
			check_fail(be, io, "submit() result neither 0 nor -errno");
		if (c->state != BLK_CHECK_FLIGHT)
			check_fail(be, io, "end_io called by a submit() that failed");
		if (first) {
			io->end_io = c->end_io;
			c->state = BLK_CHECK_IDLE;
		}
	} else if (ret > 0) {
		check_fail(be, io, "submit() result neither 0 nor -errno");
	}
	return ret;
}

#endif
