/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_contract.c - the backend contract checked at the one door,
 * blk_submit() (backends/backend.h, backends/lib/check.c), as every unit
 * build compiles it (-DBLKFS_CONTRACT_CHECK): a deliberately bad layer that
 * completes twice, reports done > len, or completes from a submit() that
 * failed aborts the process, and so does an I/O outside a layer's geometry
 * on any hop of a stack; the good paths (a filter passing the same I/O on,
 * an I/O reused, a refused one resubmitted) pass and keep the submitter's
 * end_io.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/backend.h"

/* What the bad layer does wrong; one per test. */
enum bad_mode { GOOD, REFUSE, TWICE, DONE_GT_LEN, DONE_UNALIGNED, POSITIVE_RES, FAIL_AFTER_END };

struct bad_layer {
	struct blk_backend be;	/* must come first */
	enum bad_mode mode;
	struct blk_geometry geo;
	int submits;
};

static void bad_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct bad_layer *)be)->geo;
}

static int bad_submit(struct blk_backend *be, struct blk_io *io)
{
	struct bad_layer *b = (struct bad_layer *)be;

	b->submits++;
	switch (b->mode) {
	case GOOD:
		io->end_io(io, 0);
		return 0;
	case REFUSE:
		return -EBUSY;
	case TWICE:
		io->end_io(io, 0);
		io->end_io(io, 0);
		return 0;
	case DONE_GT_LEN:
		io->done = io->len + 512;
		io->end_io(io, -EIO);
		return 0;
	case DONE_UNALIGNED:
		io->done = 100;
		io->end_io(io, -EIO);
		return 0;
	case POSITIVE_RES:
		io->end_io(io, 5);
		return 0;
	case FAIL_AFTER_END:
		io->end_io(io, -EIO);
		return -EIO;
	}
	return 0;
}

static const struct blk_backend_ops bad_ops = {
	.name = "bad",
	.geometry = bad_geometry,
	.submit = bad_submit,
};

/*
 * A filter that passes the very same I/O on (log, delay do, unheld), and
 * claims a larger max_io than the layer below takes: only the check of the
 * second hop can catch an I/O between the two.
 */
static void pass_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	be->next->ops->geometry(be->next, geo);
	geo->max_io = 1 << 20;
}

static int pass_submit(struct blk_backend *be, struct blk_io *io)
{
	return blk_submit(be->next, io);
}

static const struct blk_backend_ops pass_ops = {
	.name = "pass",
	.is_filter = true,
	.geometry = pass_geometry,
	.submit = pass_submit,
};

static struct bad_layer layer;
static struct blk_backend pass = { .ops = &pass_ops, .next = &layer.be };
static char buf[8192] __attribute__((aligned(4096)));
static struct iovec iov;
static int calls, last_res;

static void count_end_io(struct blk_io *io, int res)
{
	(void)io;
	calls++;
	last_res = res;
}

static void setup(enum bad_mode mode, struct blk_io *io, uint64_t pos, uint64_t len)
{
	layer = (struct bad_layer){
		.be = { .ops = &bad_ops },
		.mode = mode,
		.geo = { .size = 1 << 20, .lbs = 512, .pbs = 4096, .io_min = 4096,
			 .io_opt = 4096, .max_io = 8192, .dma_align = 512 },
	};
	calls = 0;
	iov = (struct iovec){ .iov_base = buf, .iov_len = len };
	*io = (struct blk_io){ .op = BLK_WRITE, .pos = pos, .len = len, .iov = &iov,
			       .iovcnt = 1, .end_io = count_end_io };
}

Test(contract, good_layer_and_filter_pass_and_keep_end_io)
{
	struct blk_io io;

	setup(GOOD, &io, 4096, 4096);
	cr_assert_eq(blk_submit(&pass, &io), 0);
	cr_assert_eq(calls, 1);
	cr_assert_eq(last_res, 0);
	/* reused as it is, and again through the bare layer */
	cr_assert_eq(blk_submit(&pass, &io), 0);
	cr_assert_eq(blk_submit(&layer.be, &io), 0);
	cr_assert_eq(calls, 3);
	cr_assert_eq(layer.submits, 3);
}

Test(contract, refused_io_is_given_back_whole)
{
	struct blk_io io;

	setup(REFUSE, &io, 0, 512);
	cr_assert_eq(blk_submit(&pass, &io), -EBUSY);
	cr_assert_eq(calls, 0);
	cr_assert(io.end_io == count_end_io, "a refused I/O must come back with its own end_io");
	layer.mode = GOOD;
	cr_assert_eq(blk_submit(&pass, &io), 0);
	cr_assert_eq(calls, 1);
}

Test(contract, end_io_twice_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(TWICE, &io, 0, 4096);
	blk_submit(&layer.be, &io);
}

Test(contract, end_io_twice_below_a_filter_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(TWICE, &io, 0, 4096);
	blk_submit(&pass, &io);
}

Test(contract, done_past_len_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(DONE_GT_LEN, &io, 0, 4096);
	blk_submit(&layer.be, &io);
}

Test(contract, done_not_block_aligned_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(DONE_UNALIGNED, &io, 0, 4096);
	blk_submit(&layer.be, &io);
}

Test(contract, positive_result_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(POSITIVE_RES, &io, 0, 4096);
	blk_submit(&layer.be, &io);
}

Test(contract, end_io_from_a_failed_submit_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(FAIL_AFTER_END, &io, 0, 4096);
	blk_submit(&layer.be, &io);
}

Test(contract, misaligned_io_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(GOOD, &io, 100, 512);
	blk_submit(&layer.be, &io);
}

Test(contract, io_past_max_io_aborts_below_a_filter, .signal = SIGABRT)
{
	struct blk_io io;

	setup(GOOD, &io, 0, 8192);
	layer.geo.max_io = 4096;	/* the layer below is stricter than the first hop */
	blk_submit(&pass, &io);
}

Test(contract, io_past_the_end_aborts, .signal = SIGABRT)
{
	struct blk_io io;

	setup(GOOD, &io, (1 << 20) - 512, 1024);
	blk_submit(&layer.be, &io);
}
