/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_tprobe.c - transport = auto's rule (fuse/tprobe_rule.c):
 * the ring when the geometric mean of its ratios to /dev/fuse is at least
 * 0.97, /dev/fuse on a tie below it and on anything not measured; and the
 * probe's cache file: written and read back, and a bad or stale one means
 * probe again.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../fuse/tprobe_rule.h"

#define REL "6.18.0-test"
#define BOOT "0b6e8f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"

static struct tprobe_result mk(double d0, double r0, double d1, double r1, double d2, double r2)
{
	struct tprobe_result r = {
		.dev_iops = { d0, d1, d2 },
		.ring_iops = { r0, r1, r2 },
	};
	return r;
}

Test(tprobe, equal_is_ring)
{
	struct tprobe_result r = mk(1000, 1000, 2000, 2000, 30000, 30000);

	cr_assert(tprobe_choose(&r));
	cr_assert_float_eq(r.geomean, 1.0, 1e-9);
	cr_assert_float_eq(r.ratio[2], 1.0, 1e-9);
}

/* The threshold itself is the ring's; just below it, /dev/fuse's. */
Test(tprobe, ties_at_threshold)
{
	struct tprobe_result r = mk(1000, 970, 1000, 970, 1000, 970);

	cr_assert(tprobe_choose(&r), "geomean %f", r.geomean);
	r = mk(1000, 960, 1000, 960, 1000, 960);
	cr_assert_not(tprobe_choose(&r), "geomean %f", r.geomean);
	/* mixed ratios whose geometric mean is 0.97: 1.0 * 1.0 * 0.912673 */
	r = mk(1000, 1000, 1000, 1000, 1000000, 912673);
	cr_assert(tprobe_choose(&r), "geomean %f", r.geomean);
}

/* On a loaded machine: 8x at QD1, 12% less at QD32: the ring. */
Test(tprobe, qd1_huge_win_qd32_small_loss)
{
	struct tprobe_result r = mk(1000, 8000, 1000, 6000, 30000, 26400);

	cr_assert(tprobe_choose(&r));
	cr_assert_float_eq(r.ratio[2], 0.88, 1e-9);
	cr_assert_gt(r.geomean, 3.0);
}

/* A quiet machine: QD1 even, QD32 at 0.84: the geometric mean 0.944, /dev/fuse. */
Test(tprobe, quiet_qd32_loss_is_dev)
{
	struct tprobe_result r = mk(10000, 10000, 10000, 10000, 30000, 25200);

	cr_assert_not(tprobe_choose(&r));
	cr_assert_float_eq(r.geomean, cbrt(0.84), 1e-9);
}

Test(tprobe, invalid_inputs_are_dev)
{
	const double bad[] = { 0, -5, NAN, INFINITY };

	for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		for (int i = 0; i < TPROBE_NR_TESTS; i++) {
			struct tprobe_result r = mk(1000, 9000, 1000, 9000, 1000, 9000);

			r.ring_iops[i] = bad[b];
			cr_assert_not(tprobe_choose(&r), "ring test %d = %f", i, bad[b]);
			cr_assert_eq(r.geomean, 0);
			cr_assert_eq(r.ratio[i], 0);
			r = mk(1000, 9000, 1000, 9000, 1000, 9000);
			r.dev_iops[i] = bad[b];
			cr_assert_not(tprobe_choose(&r), "dev test %d = %f", i, bad[b]);
		}
	}
	struct tprobe_result z;

	memset(&z, 0, sizeof(z));

	cr_assert_not(tprobe_choose(&z));
}

Test(tprobe, ratios_str)
{
	struct tprobe_result r = mk(1000, 1234, 1000, 950, 1000, 880);
	char buf[64];

	tprobe_choose(&r);
	cr_assert_str_eq(tprobe_ratios_str(&r, buf, sizeof(buf)), "1.234,0.950,0.880");
}

Test(tprobe, cache_round_trip)
{
	struct tprobe_result r = mk(5000, 9000, 4000, 7000, 30000, 26000), back;
	char buf[1024];
	int n;

	tprobe_choose(&r);
	n = tprobe_cache_format(&r, REL, BOOT, buf, sizeof(buf));
	cr_assert_gt(n, 0);
	cr_assert_eq((size_t)n, strlen(buf));
	cr_assert_eq(tprobe_cache_parse(buf, REL, BOOT, &back), 0, "%s", buf);
	cr_assert_eq(back.ring, r.ring);
	for (int i = 0; i < TPROBE_NR_TESTS; i++) {
		cr_assert_float_eq(back.dev_iops[i], r.dev_iops[i], 0.5);
		cr_assert_float_eq(back.ring_iops[i], r.ring_iops[i], 0.5);
	}
	cr_assert_eq(tprobe_cache_format(&r, REL, BOOT, buf, 40), -ENOSPC);
}

Test(tprobe, cache_other_boot_or_kernel_is_stale)
{
	struct tprobe_result r = mk(5000, 4000, 5000, 4000, 5000, 4000), back;
	char buf[1024];

	tprobe_choose(&r);
	cr_assert_gt(tprobe_cache_format(&r, REL, BOOT, buf, sizeof(buf)), 0);
	cr_assert_eq(tprobe_cache_parse(buf, REL, "ffffffff-1c3d-4e5f-8a9b-0c1d2e3f4a5b", &back),
		     -ESTALE);
	cr_assert_eq(tprobe_cache_parse(buf, "6.19.0", BOOT, &back), -ESTALE);
}

Test(tprobe, cache_bad_files)
{
	struct tprobe_result r = mk(5000, 9000, 4000, 7000, 30000, 26000), back;
	char good[1024], bad[1200];
	const char *p;

	tprobe_choose(&r);
	cr_assert_gt(tprobe_cache_format(&r, REL, BOOT, good, sizeof(good)), 0);
	cr_assert_eq(tprobe_cache_parse("", REL, BOOT, &back), -EINVAL);
	cr_assert_eq(tprobe_cache_parse("garbage\n", REL, BOOT, &back), -EINVAL);
	/* cut short anywhere: never valid */
	for (size_t n = 1; n < strlen(good); n++) {
		memcpy(bad, good, n);
		bad[n] = 0;
		cr_assert_eq(tprobe_cache_parse(bad, REL, BOOT, &back), -EINVAL, "cut at %zu", n);
	}
	/* a choice that is not the rule's */
	p = strstr(good, "choice uring");
	cr_assert(p);
	snprintf(bad, sizeof(bad), "%.*schoice dev%s", (int)(p - good), good, p + strlen("choice uring"));
	cr_assert_eq(tprobe_cache_parse(bad, REL, BOOT, &back), -EINVAL);
	/* a zero IOPS, an unknown test, a line too many */
	p = strstr(good, "dev 5000");
	snprintf(bad, sizeof(bad), "%.*sdev 0%s", (int)(p - good), good, p + strlen("dev 5000"));
	cr_assert_eq(tprobe_cache_parse(bad, REL, BOOT, &back), -EINVAL);
	p = strstr(good, "qd1_read");
	snprintf(bad, sizeof(bad), "%.*sqd9_read%s", (int)(p - good), good, p + strlen("qd1_read"));
	cr_assert_eq(tprobe_cache_parse(bad, REL, BOOT, &back), -EINVAL);
	snprintf(bad, sizeof(bad), "%sextra line\n", good);
	cr_assert_eq(tprobe_cache_parse(bad, REL, BOOT, &back), -EINVAL);
}
