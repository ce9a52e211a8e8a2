/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_firsthop.c - the first-hop check the installed build
 * keeps (issue 43): an I/O the cache hands to its device's top layer that
 * breaks the contract (blk_io_valid()) is failed with EIO, with a
 * rate-limited line in the log, and never reaches the backend; a good one
 * goes on unchanged.
 *
 * The check is compiled in every build (core/submit.c, no #ifdef), so
 * these tests exercise what a CHECKS=0 build runs. The unit build has
 * CHECKS=1, whose blk_submit() check aborts on a bad I/O: before the
 * first-hop check, each bad-I/O test here crashed in that abort (or, built
 * CHECKS=0, let the fake backend take the I/O and count a violation).
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../../backends/lib/log.h"
#include "../../core/pcache.h"
#include "../../core/pcache_int.h"
#include "cache_fixture.h"
#include "fake_backend.h"
#include "helpers.h"

#define DEV_SIZE (1 * MiB)
#define FOLIO (64 * KiB)

static void setup_4k(void)
{
	struct blk_geometry g = geo_of(DEV_SIZE, 4096, 4096, 64 * KiB);

	setup(&g, 1 * MiB, FOLIO, 0);
}

static void setup_4k_quiet_log(void)
{
	cr_redirect_stderr();
}

/* The backend saw nothing at all (the fake counts every op it is given). */
static void expect_backend_untouched(const char *what)
{
	cr_expect_eq(fake_total_count(fb, FAKE_ANY), 0, "%s reached the backend:\n%s", what,
		     log_text());
}

TEST_FIX(firsthop, read_past_end_refused)
{
	uint8_t *buf;
	struct iovec iov;

	setup_4k();
	buf = talloc(4096);
	iov = (struct iovec){ .iov_base = buf, .iov_len = 4096 };
	cr_assert_eq(pc_submit_wait(dev, BLK_READ, DEV_SIZE, 4096, &iov, 1), -EIO);
	expect_backend_untouched("a read past the end");
	/* the same range one block earlier is the device's last block: it goes */
	cr_assert_eq(pc_submit_wait(dev, BLK_READ, DEV_SIZE - 4096, 4096, &iov, 1), 0);
	cr_expect_eq(fake_total_count(fb, FAKE_OP(BLK_READ)), 1);
}

TEST_FIX(firsthop, misaligned_discard_refused)
{
	uint8_t *data = talloc(8192), *got = talloc(8192);

	setup_4k();
	fill(data, 8192, 0, 1);
	fake_store_write(fb, data, 8192, 0);
	/* lbs is 4096: a discard at 512 is not block-aligned */
	cr_assert_eq(pc_submit_wait(dev, BLK_DISCARD, 512, 4096, NULL, 0), -EIO);
	cr_assert_eq(pc_submit_wait(dev, BLK_WRITE_ZEROES, 0, 6144, NULL, 0), -EIO);
	expect_backend_untouched("a misaligned discard");
	fake_store_read(fb, got, 8192, 0);
	expect_same(got, data, 8192, 0, "the device after refused discards");
}

static int ends, last_res;

static void count_end_io(struct blk_io *io, int res)
{
	(void)io;
	ends++;
	last_res = res;
}

/* Called directly: the check is one function, the same in every build. */
TEST_FIX(firsthop, direct_call_checks_each_rule)
{
	uint8_t *buf = talloc(256 * KiB);
	struct iovec iov[2] = {
		{ .iov_base = buf, .iov_len = 4096 },
		{ .iov_base = buf + 4096, .iov_len = 4096 },
	};
	struct iovec big = { .iov_base = buf, .iov_len = 128 * KiB };
	struct iovec odd = { .iov_base = buf + 512, .iov_len = 4096 };	/* dma_align 4096 */
	struct {
		const char *what;
		struct blk_io io;
	} bad[] = {
		{ "iovec shorter than len", { .op = BLK_WRITE, .pos = 0, .len = 12288, .iov = iov,
					      .iovcnt = 2 } },
		{ "misaligned pos", { .op = BLK_READ, .pos = 2048, .len = 8192, .iov = iov,
				      .iovcnt = 2 } },
		{ "over max_io", { .op = BLK_READ, .pos = 0, .len = 128 * KiB, .iov = &big,
				   .iovcnt = 1 } },
		{ "memory not dma-aligned", { .op = BLK_WRITE, .pos = 0, .len = 4096, .iov = &odd,
					      .iovcnt = 1 } },
		{ "no iovec", { .op = BLK_WRITE, .pos = 0, .len = 4096, .iov = iov, .iovcnt = 0 } },
		{ "flush with a range", { .op = BLK_FLUSH, .pos = 0, .len = 4096 } },
		{ "discard past the end", { .op = BLK_DISCARD, .pos = DEV_SIZE - 4096,
					    .len = 8192 } },
	};
	struct blk_io io;
	struct blk_backend *be;

	setup_4k();
	be = fake_backend(fb);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		io = bad[i].io;
		io.end_io = count_end_io;
		cr_expect_eq(pc_submit_first_hop(be, "t0", &io), -EIO, "%s: not refused",
			     bad[i].what);
	}
	cr_expect_eq(ends, 0, "a refused I/O's end_io was called: the caller ends it");
	expect_backend_untouched("a bad I/O");

	/* a good one goes on unchanged, and ends once */
	io = (struct blk_io){ .op = BLK_WRITE, .pos = 8192, .len = 8192, .iov = iov, .iovcnt = 2,
			      .end_io = count_end_io };
	cr_assert_eq(pc_submit_first_hop(be, "t0", &io), 0);
	cr_expect_eq(ends, 1);
	cr_expect_eq(last_res, 0);
	cr_expect_eq(fake_log_find(fb, 0, FAKE_OP(BLK_WRITE), 8192, 8192), 0, "%s", log_text());
}

/*
 * Many bad I/Os: each fails, none crashes, and the log gets at most the
 * limiter's burst (5 per 5 s) of lines, not one per I/O.
 */
Test(firsthop, many_bad_logged_rate_limited, .init = setup_4k_quiet_log, .fini = teardown,
     .timeout = 60)
{
	uint8_t *buf;
	struct iovec iov;
	char line[1024];
	int lines = 0;
	FILE *err;

	setup_4k();
	buf = talloc(4096);
	iov = (struct iovec){ .iov_base = buf, .iov_len = 4096 };
	for (int i = 0; i < 200; i++)
		cr_assert_eq(pc_submit_wait(dev, BLK_READ, DEV_SIZE + (uint64_t)i * 4096, 4096,
					    &iov, 1), -EIO);
	expect_backend_untouched("a read past the end");
	fflush(stderr);
	err = cr_get_redirected_stderr();
	cr_assert_not_null(err);
	/* the pipe holds what was written; stop reading at the marker */
	fprintf(stderr, "END-OF-TEST\n");
	fflush(stderr);
	while (fgets(line, sizeof(line), err) && !strstr(line, "END-OF-TEST"))
		if (strstr(line, "cache bug") && strstr(line, "failed with EIO"))
			lines++;
	cr_expect(lines >= 1, "no log line for a refused I/O");
	cr_expect(lines <= 5, "%d log lines for 200 refused I/Os: not rate-limited", lines);
}
