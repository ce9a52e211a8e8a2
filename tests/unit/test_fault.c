// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_fault.c - the fault filter over the fake backend: every
 * trigger (after N, probability, persistent or once, the op mask), errnos by
 * name, the bad-block map, the live attrs (round trip, garbage refused with
 * nothing changed), config keys and their errors, and the rule that a failed
 * I/O never reaches the layer below.
 *
 * The filter is opened from hand-built struct blk_params with the prefix
 * core/stack.c gives it ("fault.") and next = the fake. Every I/O is checked
 * to complete exactly once.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../core/conf.h"
#include "../../core/stack.h"
#include "fake_backend.h"
#include "helpers.h"

#define DEV_SIZE (64 * MiB)

/* ---- I/Os with completion tracking (all complete inline here) ---- */

/* Submit one I/O of @fill bytes and return its result; a READ's data into @buf. */
static int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len, int fill,
		 void *buf)
{
	return tio_do(be, op, pos, len, NULL, fill, buf);
}

/* ---- the fake below, the filter above ---- */

static struct fake_be *fb;

static void setup(void)
{
	const struct blk_geometry geo = {
		.size = DEV_SIZE, .lbs = 512, .pbs = 4096, .max_io = 64 * KiB,
	};

	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void teardown(void)
{
	if (fb)
		fake_destroy(fb);
	fb = NULL;
}

TestSuite(fault, .init = setup, .fini = teardown);

static void tparams_init(struct tparams *tp)
{
	filter_params_init(tp, "fault", fake_backend(fb), "/etc/blkfs.conf", 3);
}

static struct blk_backend *fault_open_default(void)
{
	struct tparams tp;

	tparams_init(&tp);
	return filter_open(&tp);
}

static int wr(struct blk_backend *be, uint64_t pos, uint64_t len, int fill)
{
	return do_io(be, BLK_WRITE, pos, len, fill, NULL);
}

static int rd(struct blk_backend *be, uint64_t pos, uint64_t len)
{
	return do_io(be, BLK_READ, pos, len, 0, NULL);
}

/* The store holds @fill (or not) at [pos, pos + len). */
static bool store_is(uint64_t pos, uint64_t len, int fill)
{
	uint8_t *s = fake_store(fb);
	uint64_t i;

	for (i = 0; i < len; i++)
		if (s[pos + i] != (uint8_t)fill)
			return false;
	return true;
}

/* ================================================================== */

Test(fault, registered_as_a_filter)
{
	const char *names = blk_filter_names();

	cr_assert(strstr(names, "fault"), "%s", names);
	cr_assert(blk_backend_find("fault")->is_filter);
	cr_assert_null(strstr(blk_backend_names(), "fault"));
}

Test(fault, defaults_pass_everything)
{
	struct blk_backend *be = fault_open_default();
	uint8_t buf[4096];
	struct blk_geometry g;

	cr_assert_str_eq(attr_show(be, "ops"), "write\n");
	cr_assert_str_eq(attr_show(be, "errno"), "EIO\n");
	cr_assert_str_eq(attr_show(be, "probability"), "0\n");
	cr_assert_str_eq(attr_show(be, "after"), "off\n");
	cr_assert_str_eq(attr_show(be, "persistent"), "0\n");
	cr_assert_str_eq(attr_show(be, "enabled"), "1\n");
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "");

	cr_assert_eq(wr(be, 8192, 4096, 0x11), 0);
	cr_assert(store_is(8192, 4096, 0x11));
	cr_assert_eq(do_io(be, BLK_READ, 8192, 4096, 0, buf), 0);
	cr_assert_eq(buf[0], 0x11);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 8192, 4096, 0, NULL), 0);
	cr_assert(store_is(8192, 4096, 0));
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), 4);
	cr_assert_eq(stat_get(be, "fault_injected"), 0);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, DEV_SIZE);
	cr_assert_eq(g.pbs, 4096);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

Test(fault, after_zero_fails_the_first_write_once)
{
	struct blk_backend *be = fault_open_default();

	cr_assert_eq(attr_store(be, "after", "0\n"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x22), -EIO);
	/* Never passed down: the store is unchanged, the fake saw nothing. */
	cr_assert(store_is(0, 4096, 0));
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), 0);
	/* Once: disarmed. */
	cr_assert_str_eq(attr_show(be, "after"), "off\n");
	cr_assert_eq(wr(be, 0, 4096, 0x22), 0);
	cr_assert(store_is(0, 4096, 0x22));
	cr_assert_eq(wr(be, 4096, 4096, 0x23), 0);
	/* Reads are not in ops = write. */
	cr_assert_eq(rd(be, 0, 4096), 0);
	cr_assert_eq(stat_get(be, "fault_injected"), 1);
	be->ops->close(be);
}

Test(fault, after_n_counts_matching_ops_only)
{
	struct blk_backend *be = fault_open_default();
	int i;

	cr_assert_eq(attr_store(be, "after", "3"), 0);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(wr(be, (uint64_t)i * 4096, 4096, 0x30 + i), 0);
		/* reads and flushes do not count towards after */
		cr_assert_eq(rd(be, 0, 512), 0);
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), 0);
	}
	cr_assert_eq(wr(be, 3 * 4096, 4096, 0x33), -EIO);
	cr_assert(store_is(3 * 4096, 4096, 0));
	cr_assert_eq(wr(be, 4 * 4096, 4096, 0x34), 0);
	cr_assert_eq(stat_get(be, "fault_injected"), 1);
	cr_assert_eq(stat_get(be, "fault_matching_ops"), 5);
	be->ops->close(be);
}

Test(fault, persistent_keeps_failing_until_rearmed)
{
	struct blk_backend *be = fault_open_default();
	int i;

	cr_assert_eq(attr_store(be, "persistent", "yes"), 0);
	cr_assert_eq(attr_store(be, "errno", "ENOSPC"), 0);
	cr_assert_eq(attr_store(be, "after", "1"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x41), 0);
	for (i = 0; i < 10; i++)
		cr_assert_eq(wr(be, 4096 + (uint64_t)i * 4096, 4096, 0x42), -ENOSPC);
	cr_assert(store_is(4096, 10 * 4096, 0));
	/* after stays: it is persistent */
	cr_assert_str_eq(attr_show(be, "after"), "1\n");
	/* off: everything passes */
	cr_assert_eq(attr_store(be, "enabled", "0"), 0);
	cr_assert_eq(wr(be, 4096, 4096, 0x43), 0);
	cr_assert(store_is(4096, 4096, 0x43));
	/* on again: re-armed, the count starts over */
	cr_assert_eq(attr_store(be, "enabled", "1"), 0);
	cr_assert_eq(wr(be, 8192, 4096, 0x44), 0);
	cr_assert_eq(wr(be, 8192, 4096, 0x45), -ENOSPC);
	cr_assert_eq(wr(be, 8192, 4096, 0x45), -ENOSPC);
	/* after = off stops it too */
	cr_assert_eq(attr_store(be, "after", "off"), 0);
	cr_assert_eq(wr(be, 8192, 4096, 0x46), 0);
	cr_assert(store_is(8192, 4096, 0x46));
	cr_assert_eq(stat_get(be, "fault_injected"), 12);
	be->ops->close(be);
}

Test(fault, op_mask)
{
	struct blk_backend *be = fault_open_default();

	cr_assert_eq(attr_store(be, "persistent", "1"), 0);
	cr_assert_eq(attr_store(be, "ops", "read"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x51), 0);
	cr_assert_eq(rd(be, 0, 4096), -EIO);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), 0);

	cr_assert_eq(attr_store(be, "ops", "flush,discard"), 0);
	cr_assert_str_eq(attr_show(be, "ops"), "flush,discard\n");
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	cr_assert_eq(rd(be, 0, 4096), 0);
	cr_assert_eq(wr(be, 0, 4096, 0x52), 0);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), -EIO);
	/* discard covers WRITE_ZEROES too; neither zeroes anything */
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 4096, 0, NULL), -EIO);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 0, 4096, 0, NULL), -EIO);
	cr_assert(store_is(0, 4096, 0x52));
	cr_assert_eq(fake_log_count(fb, FAKE_OP(BLK_FLUSH) | FAKE_OP(BLK_DISCARD) |
					FAKE_OP(BLK_WRITE_ZEROES)), 1);

	cr_assert_eq(attr_store(be, "ops", " all "), 0);
	cr_assert_str_eq(attr_show(be, "ops"), "read,write,flush,discard\n");
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	cr_assert_eq(rd(be, 0, 512), -EIO);
	cr_assert_eq(wr(be, 0, 512, 0), -EIO);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), -EIO);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 512, 0, NULL), -EIO);

	attr_refuses(be, "ops", "");
	attr_refuses(be, "ops", "\n");
	attr_refuses(be, "ops", "read,");
	attr_refuses(be, "ops", ",write");
	attr_refuses(be, "ops", "read,,write");
	attr_refuses(be, "ops", "reads");
	attr_refuses(be, "ops", "trim");
	attr_refuses(be, "ops", "read write");
	be->ops->close(be);
}

Test(fault, errno_by_name_or_number)
{
	static const struct {
		const char *in, *shown;
		int err;
	} ok[] = {
		{ "EIO", "EIO", EIO }, { "ENOSPC\n", "ENOSPC", ENOSPC },
		{ "enomem", "ENOMEM", ENOMEM }, { "EROFS", "EROFS", EROFS },
		{ "ETIMEDOUT", "ETIMEDOUT", ETIMEDOUT }, { "28", "ENOSPC", ENOSPC },
		{ "EREMOTEIO", "EREMOTEIO", EREMOTEIO },
	};
	struct blk_backend *be = fault_open_default();
	char want[32];
	size_t i;

	cr_assert_eq(attr_store(be, "persistent", "yes"), 0);
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		cr_assert_eq(attr_store(be, "errno", ok[i].in), 0, "%s", ok[i].in);
		snprintf(want, sizeof(want), "%s\n", ok[i].shown);
		cr_assert_str_eq(attr_show(be, "errno"), want);
		cr_assert_eq(attr_store(be, "after", "0"), 0);
		cr_assert_eq(wr(be, 0, 512, 1), -ok[i].err, "%s", ok[i].in);
	}
	attr_refuses(be, "errno", "");
	attr_refuses(be, "errno", "EFOO");
	attr_refuses(be, "errno", "0");
	attr_refuses(be, "errno", "-5");
	attr_refuses(be, "errno", "5000");
	attr_refuses(be, "errno", "EIO ");
	attr_refuses(be, "errno", "5x");
	attr_refuses(be, "errno", "EIO\n\n");
	cr_assert_eq(attr_find(be, "errno")->store(be, "EIO\0", 4), -EINVAL);
	be->ops->close(be);
}

Test(fault, probability)
{
	struct blk_backend *be = fault_open_default();
	int i, failed = 0;

	cr_assert_eq(attr_store(be, "probability", "1"), 0);
	for (i = 0; i < 20; i++)
		cr_assert_eq(wr(be, 0, 512, 1), -EIO);
	cr_assert_eq(attr_store(be, "probability", "0.25\n"), 0);
	cr_assert_str_eq(attr_show(be, "probability"), "0.25\n");
	for (i = 0; i < 4000; i++)
		failed += wr(be, 0, 512, 1) == -EIO;
	/* binomial(4000, 0.25): mean 1000, sd 27; 8 sd either side */
	cr_assert(failed > 780 && failed < 1220, "%d of 4000 failed at p = 0.25", failed);
	cr_assert_eq(stat_get(be, "fault_injected"), 20 + (unsigned long long)failed);
	cr_assert_eq(fake_total_count(fb, FAKE_OP(BLK_WRITE)), 4000 - (uint64_t)failed);
	/* Not persistent: one failure does not make the next fail. */
	cr_assert_lt(failed, 3000);

	/* persistent: the first failure sticks */
	cr_assert_eq(attr_store(be, "persistent", "on"), 0);
	cr_assert_eq(attr_store(be, "probability", "0.5"), 0);
	for (i = 0; i < 64 && wr(be, 0, 512, 1) == 0; i++)
		;
	cr_assert_lt(i, 64);
	for (i = 0; i < 50; i++)
		cr_assert_eq(wr(be, 0, 512, 1), -EIO);

	cr_assert_eq(attr_store(be, "probability", "0"), 0);
	attr_refuses(be, "probability", "1.5");
	attr_refuses(be, "probability", "-0.1");
	attr_refuses(be, "probability", "nan");
	attr_refuses(be, "probability", "inf");
	attr_refuses(be, "probability", "0.5x");
	attr_refuses(be, "probability", "");
	attr_refuses(be, "probability", "50%");
	be->ops->close(be);
}

Test(fault, after_and_bool_attrs_refuse_garbage)
{
	struct blk_backend *be = fault_open_default();

	cr_assert_eq(attr_store(be, "after", "12345"), 0);
	cr_assert_str_eq(attr_show(be, "after"), "12345\n");
	attr_refuses(be, "after", "-1");
	attr_refuses(be, "after", "");
	attr_refuses(be, "after", "1e3");
	attr_refuses(be, "after", "18446744073709551615");
	attr_refuses(be, "after", "99999999999999999999999");
	attr_refuses(be, "after", "soon");
	cr_assert_eq(attr_store(be, "after", "never\n"), 0);
	cr_assert_str_eq(attr_show(be, "after"), "off\n");

	attr_refuses(be, "persistent", "2");
	attr_refuses(be, "persistent", "maybe");
	attr_refuses(be, "persistent", "");
	attr_refuses(be, "enabled", "yes please");
	attr_refuses(be, "enabled", "10");
	cr_assert_eq(attr_store(be, "persistent", "TRUE"), 0);
	cr_assert_str_eq(attr_show(be, "persistent"), "1\n");
	cr_assert_eq(attr_store(be, "enabled", "off\n"), 0);
	cr_assert_str_eq(attr_show(be, "enabled"), "0\n");
	be->ops->close(be);
}

Test(fault, badblocks)
{
	struct blk_backend *be = fault_open_default();
	uint8_t buf[8192];

	/* data first, so a failed write shows as unchanged */
	cr_assert_eq(wr(be, MiB - 8192, 16384, 0x61), 0);
	cr_assert_eq(attr_store(be, "badblocks", "1048576 4096 EIO\n"), 0);
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "1048576 4096 EIO\n");

	/* reads overlapping the range fail, whatever ops says; others pass */
	cr_assert_eq(rd(be, MiB, 4096), -EIO);
	cr_assert_eq(rd(be, MiB - 512, 1024), -EIO);
	cr_assert_eq(rd(be, MiB + 4096 - 512, 512), -EIO);
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(do_io(be, BLK_READ, MiB - 8192, 8192, 0, buf), 0);
	cr_assert_eq(buf[0], 0x61);
	cr_assert_eq(rd(be, MiB + 4096, 4096), 0);
	/* writes, discards too; the store keeps what it had */
	cr_assert_eq(wr(be, MiB, 512, 0x62), -EIO);
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 2 * MiB, 0, NULL), -EIO);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, MiB, 4096, 0, NULL), -EIO);
	cr_assert(store_is(MiB - 8192, 16384, 0x61));
	/* a flush has no range */
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, 0, NULL), 0);
	cr_assert_eq(fake_log_count_range(fb, FAKE_ANY & ~FAKE_OP(BLK_FLUSH), MiB, 4096), 1);

	/* more lines at once, suffixes, another errno, no errno = EIO */
	cr_assert_eq(attr_store(be, "badblocks", "0 512 ENOSPC\n2M 8K EROFS\n\n4M 512\n"), 0);
	cr_assert_str_eq(attr_show_list(be, "badblocks"),
			 "1048576 4096 EIO\n0 512 ENOSPC\n2097152 8192 EROFS\n4194304 512 EIO\n");
	cr_assert_eq(rd(be, 0, 4096), -ENOSPC);
	cr_assert_eq(wr(be, 2 * MiB + 4096, 4096, 1), -EROFS);
	cr_assert_eq(rd(be, 4 * MiB, 512), -EIO);
	cr_assert_eq(stat_get(be, "fault_badblock_injected"), 9);

	/* disabled: the map is kept but nothing fails */
	cr_assert_eq(attr_store(be, "enabled", "0"), 0);
	cr_assert_eq(rd(be, MiB, 4096), 0);
	cr_assert_eq(attr_store(be, "enabled", "1"), 0);
	cr_assert_eq(rd(be, MiB, 4096), -EIO);

	/* garbage and ranges outside the device: EINVAL, nothing changes */
	attr_refuses(be, "badblocks", "");
	attr_refuses(be, "badblocks", "\n");
	attr_refuses(be, "badblocks", "abc");
	attr_refuses(be, "badblocks", "1048576");
	attr_refuses(be, "badblocks", "1048576 4096 EIO extra");
	attr_refuses(be, "badblocks", "1048576 0 EIO");
	attr_refuses(be, "badblocks", "1048576 4096 EFOO");
	attr_refuses(be, "badblocks", "-1 4096 EIO");
	attr_refuses(be, "badblocks", "67108864 512 EIO");
	attr_refuses(be, "badblocks", "67108352 1024 EIO");
	attr_refuses(be, "badblocks", "18446744073709551615 2 EIO");
	attr_refuses(be, "badblocks", "64M 1 EIO");
	attr_refuses(be, "badblocks", "8M 4K EIO\n9M x EIO\n");
	attr_refuses(be, "badblocks", "clear all");
	cr_assert_eq(attr_find(be, "badblocks")->store(be, "8M 4K\0EIO", 9), -EINVAL);
	cr_assert_eq(rd(be, 8 * MiB, 4096), 0);

	/* the edge of the device is inside */
	cr_assert_eq(attr_store(be, "badblocks", "67108352 512 EIO"), 0);
	cr_assert_eq(rd(be, DEV_SIZE - 4096, 4096), -EIO);

	cr_assert_eq(attr_store(be, "badblocks", "clear\n"), 0);
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "");
	cr_assert_eq(rd(be, MiB, 4096), 0);
	cr_assert_eq(rd(be, 0, 4096), 0);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

Test(fault, badblocks_limit)
{
	struct blk_backend *be = fault_open_default();
	char line[64];
	int i;

	for (i = 0; i < 256; i++) {
		snprintf(line, sizeof(line), "%d 512 EIO\n", i * 4096);
		cr_assert_eq(attr_store(be, "badblocks", line), 0, "entry %d", i);
	}
	/* 256 lines fit a .sys read */
	cr_assert_gt(strlen(attr_show_list(be, "badblocks")), 256 * 10);
	attr_refuses(be, "badblocks", "60M 512 EIO");
	cr_assert_eq(attr_store(be, "badblocks", "clear"), 0);
	cr_assert_eq(attr_store(be, "badblocks", "60M 512 EIO"), 0);
	be->ops->close(be);
}

Test(fault, config_keys)
{
	struct blk_backend *be;
	struct tparams tp;

	tparams_init(&tp);
	tparams_add(&tp, "fault.ops", "read, flush", 4);
	tparams_add(&tp, "fault.errno", "ENOMEM", 5);
	tparams_add(&tp, "fault.probability", "0.125", 6);
	tparams_add(&tp, "fault.after", "7", 7);
	tparams_add(&tp, "fault.persistent", "yes", 8);
	tparams_add(&tp, "fault.badblocks", "1M 4K EIO, 2M 512 ENOSPC", 9);
	tparams_add(&tp, "fault.enabled", "no", 10);
	be = filter_open(&tp);
	for (int i = 0; i < tp.p.n; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	cr_assert_str_eq(attr_show(be, "ops"), "read,flush\n");
	cr_assert_str_eq(attr_show(be, "errno"), "ENOMEM\n");
	cr_assert_str_eq(attr_show(be, "probability"), "0.125\n");
	cr_assert_str_eq(attr_show(be, "after"), "7\n");
	cr_assert_str_eq(attr_show(be, "persistent"), "1\n");
	cr_assert_str_eq(attr_show(be, "enabled"), "0\n");
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "1048576 4096 EIO\n2097152 512 ENOSPC\n");
	be->ops->close(be);

	/* every key in the ops' list */
	for (const char *const *k = blk_backend_find("fault")->keys; *k; k++)
		cr_assert(strstr("ops errno probability after persistent hang hang_timeout badblocks "
				 "badblocks_once badblocks_clear_on_write badblocks_partial_io seed "
				 "enabled pool", *k),
			  "%s", *k);

	tparams_init(&tp);
	tparams_add(&tp, "fault.hang", "yes", 4);
	tparams_add(&tp, "fault.hang_timeout", "2m", 5);
	tparams_add(&tp, "fault.badblocks_once", "on", 6);
	tparams_add(&tp, "fault.badblocks_clear_on_write", "1", 7);
	tparams_add(&tp, "fault.seed", "12345", 8);
	tparams_add(&tp, "fault.pool", "4", 9);
	be = filter_open(&tp);
	for (int i = 0; i < tp.p.n; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	cr_assert_str_eq(attr_show(be, "hang"), "1\n");
	cr_assert_str_eq(attr_show(be, "hang_timeout"), "2m\n");
	cr_assert_str_eq(attr_show(be, "badblocks_once"), "1\n");
	cr_assert_str_eq(attr_show(be, "badblocks_clear_on_write"), "1\n");
	cr_assert_str_eq(attr_show(be, "seed"), "12345\n");
	cr_assert_eq(stat_get(be, "fault_pool"), 4);
	be->ops->close(be);
	tparams_init(&tp);
	tparams_add(&tp, "fault.hang_timeout", "30", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.hang_timeout: '30' is not a duration");
	tparams_init(&tp);
	tparams_add(&tp, "fault.hang_timeout", "2d", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.hang_timeout: '2d' is not a duration");
	tparams_init(&tp);
	tparams_add(&tp, "fault.hang_timeout", "25h", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.hang_timeout: '25h' is out of range (allowed: 0..24h)");
	tparams_init(&tp);
	tparams_add(&tp, "fault.seed", "-1", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.seed: '-1' is not a seed");
	tparams_init(&tp);
	tparams_add(&tp, "fault.pool", "0", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.pool: '0' is not a number from 1 to 65536");

	tparams_init(&tp);
	tparams_add(&tp, "fault.ops", "writes", 4);
	filter_open_fails(&tp, "/etc/blkfs.conf:4: fault.ops: 'writes' is not a list of ops");
	tparams_init(&tp);
	tparams_add(&tp, "fault.errno", "EWHAT", 5);
	filter_open_fails(&tp, "/etc/blkfs.conf:5: fault.errno: 'EWHAT' is not an errno");
	tparams_init(&tp);
	tparams_add(&tp, "fault.probability", "2", 6);
	filter_open_fails(&tp, "/etc/blkfs.conf:6: fault.probability: '2' is not a probability");
	tparams_init(&tp);
	tparams_add(&tp, "fault.after", "x", 7);
	filter_open_fails(&tp, "/etc/blkfs.conf:7: fault.after: 'x' is not a count");
	tparams_init(&tp);
	tparams_add(&tp, "fault.persistent", "sometimes", 8);
	filter_open_fails(&tp, "/etc/blkfs.conf:8: fault.persistent: 'sometimes' is not yes/no");
	tparams_init(&tp);
	tparams_add(&tp, "fault.badblocks", "1M 4K EIO, 64M 4K EIO", 9);
	filter_open_fails(&tp, "/etc/blkfs.conf:9: fault.badblocks: '1M 4K EIO, 64M 4K EIO' is not a list of bad ranges inside the device");

	/* no layer below */
	tparams_init(&tp);
	be = blk_backend_find("fault")->open(&tp.p, NULL);
	cr_assert(IS_ERR(be));
	cr_assert(strstr(tp.err, "needs a layer below"), "%s", tp.err);
}

/* Passed I/O completes with what the layer below said, late and out of order. */
Test(fault, passes_deferred_completions_and_errors_below)
{
	struct blk_backend *be = fault_open_default();
	struct fake_fault ff = {
		.op_mask = FAKE_OP(BLK_WRITE), .countdown = 1, .err = -ENOSPC,
	};
	struct tio t[32];
	int i;

	fake_set_mode(fb, FAKE_DEFERRED);
	tio_done_reset();
	for (i = 0; i < 32; i++) {
		tio_init(&t[i], BLK_WRITE, (uint64_t)i * 4096, 4096, NULL, i);
		cr_assert_eq(blk_submit(be, &t[i].io), 0);
	}
	cr_assert(tio_done_wait(32, WAIT_MS), "%lu of 32 completed", tio_done());
	for (i = 0; i < 32; i++) {
		cr_assert_eq(tio_calls(&t[i]), 1);
		cr_assert_eq(t[i].res, 0);
		tio_free(&t[i]);
	}
	fake_set_mode(fb, FAKE_INLINE);
	/* the layer below's own error comes up unchanged, and is not counted */
	fake_fault_set(fb, &ff);
	cr_assert_eq(wr(be, 0, 4096, 1), -ENOSPC);
	cr_assert_eq(stat_get(be, "fault_injected"), 0);
	be->ops->close(be);
}

/* Through the config and core/stack.c, on top of ram. */
Test(fault, in_a_stack)
{
	static const char text[] =
		"[device r0]\nbackend = ram\nsize = 4M\n"
		"filters = fault\nfault.ops = write\nfault.after = 1\nfault.errno = EROFS\n";
	struct blk_backend *top;
	struct conf conf;
	char cerr[512];

	cr_assert_eq(conf_parse_buf(text, strlen(text), "t.conf", &conf, cerr, sizeof(cerr)), 0,
		     "%s", cerr);
	top = stack_open(&conf, &conf.devs[0], NULL, cerr, sizeof(cerr));
	cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
	cr_assert_str_eq(top->ops->name, "fault");
	cr_assert_str_eq(top->next->ops->name, "ram");
	cr_assert_eq(wr(top, 0, 4096, 1), 0);
	cr_assert_eq(wr(top, 4096, 4096, 1), -EROFS);
	cr_assert_eq(wr(top, 4096, 4096, 1), 0);
	stack_close(top);
	conf_free(&conf);

	/* a key the filter does not take is the config's error */
	static const char bad[] =
		"[device r0]\nbackend = ram\nsize = 4M\nfilters = fault\nfault.when = now\n";
	cr_assert_neq(conf_parse_buf(bad, strlen(bad), "t.conf", &conf, cerr, sizeof(cerr)), 0);
	cr_assert(strstr(cerr, "t.conf:5: fault.when"), "%s", cerr);
}

/* Many threads through one filter: every I/O completes once; counts add up. */
struct worker_arg {
	struct blk_backend *be;
	int id;
	int failed;
};

static void *worker_main(void *p)
{
	struct worker_arg *a = p;
	int i;

	for (i = 0; i < 500; i++) {
		struct tio t;
		int ret;

		tio_init(&t, i % 3 ? BLK_WRITE : BLK_READ, (uint64_t)(a->id * 500 + i) * 4096, 4096, NULL, i);
		ret = blk_submit(a->be, &t.io);
		if (!ret) {
			while (!__atomic_load_n(&t.calls, __ATOMIC_SEQ_CST))
				usleep(100);
			ret = t.res;
		}
		a->failed += ret != 0;
		free(t.iov.iov_base);
	}
	return NULL;
}

Test(fault, threads)
{
	struct blk_backend *be = fault_open_default();
	struct worker_arg a[4];
	pthread_t th[4];
	int i, failed = 0;

	cr_assert_eq(attr_store(be, "ops", "read,write"), 0);
	cr_assert_eq(attr_store(be, "probability", "0.1"), 0);
	fake_set_mode(fb, FAKE_DEFERRED);
	for (i = 0; i < 4; i++) {
		a[i] = (struct worker_arg){ .be = be, .id = i };
		cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &a[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		failed += a[i].failed;
	}
	cr_assert_eq(stat_get(be, "fault_injected"), (unsigned long long)failed);
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), 2000 - (uint64_t)failed);
	cr_assert(failed > 100 && failed < 320, "%d of 2000", failed);
	be->ops->close(be);
}

/* ================================================================== */
/* bad blocks with a life */

/* null_blk's badblocks_once: each bad block fails one I/O, then works. */
Test(fault, badblocks_once)
{
	struct blk_backend *be = fault_open_default();

	cr_assert_eq(wr(be, 0, 64 * KiB, 0x71), 0);
	cr_assert_eq(attr_store(be, "badblocks", "8K 16K EIO\n40K 4K ENOSPC"), 0);
	cr_assert_eq(attr_store(be, "badblocks_once", "yes"), 0);
	/* a read of the middle fails once, and only that part is cleared */
	cr_assert_eq(rd(be, 12 * KiB, 4096), -EIO);
	cr_assert_str_eq(attr_show_list(be, "badblocks"),
			 "8192 4096 EIO\n16384 8192 EIO\n40960 4096 ENOSPC\n");
	cr_assert_eq(rd(be, 12 * KiB, 4096), 0);
	/* the rest still fails, once each */
	cr_assert_eq(rd(be, 8 * KiB, 4096), -EIO);
	cr_assert_eq(rd(be, 8 * KiB, 4096), 0);
	/* a failed write changes nothing, and clears what it covered */
	cr_assert_eq(wr(be, 16 * KiB, 8 * KiB, 0x72), -EIO);
	cr_assert(store_is(16 * KiB, 8 * KiB, 0x71));
	cr_assert_eq(wr(be, 16 * KiB, 8 * KiB, 0x72), 0);
	cr_assert(store_is(16 * KiB, 8 * KiB, 0x72));
	/* an I/O over two ranges fails once (with the first's errno) and clears both */
	cr_assert_eq(attr_store(be, "badblocks", "36K 4K EROFS"), 0);
	cr_assert_eq(rd(be, 32 * KiB, 16 * KiB), -ENOSPC);
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "");
	cr_assert_eq(rd(be, 32 * KiB, 16 * KiB), 0);
	cr_assert_eq(stat_get(be, "fault_badblock_injected"), 4);
	cr_assert_eq(stat_get(be, "fault_badblocks_cleared"), 4);
	cr_assert_eq(stat_get(be, "fault_badblock_ranges"), 0);

	/* off: a bad block fails every time, as before */
	cr_assert_eq(attr_store(be, "badblocks_once", "no"), 0);
	cr_assert_eq(attr_store(be, "badblocks", "0 512"), 0);
	cr_assert_eq(rd(be, 0, 512), -EIO);
	cr_assert_eq(rd(be, 0, 512), -EIO);
	attr_refuses(be, "badblocks_once", "twice");
	be->ops->close(be);
}

/* An I/O over @be whose partial completion the test sees: the result and done. */
static int io_done(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len, int fill,
		   uint64_t *done)
{
	struct tio t;
	int res;

	tio_init(&t, op, pos, len, NULL, fill);
	cr_assert_eq(tio_submit(be, &t), 0);
	cr_assert(tio_wait(&t, WAIT_MS));
	res = t.res;
	*done = t.io.done;
	tio_free(&t);
	return res;
}

/*
 * null_blk's badblocks_partial_io: an I/O that reaches a bad range after its
 * first logical block completes up to it (passed on as an I/O of its own)
 * and fails from it, saying how much completed in blk_io.done.
 */
Test(fault, badblocks_partial_io)
{
	struct blk_backend *be = fault_open_default();
	uint64_t done = 1;

	cr_assert_eq(wr(be, 0, 64 * KiB, 0x71), 0);
	cr_assert_eq(attr_store(be, "badblocks", "20000 1000 ENOSPC"), 0);
	cr_assert_str_eq(attr_show(be, "badblocks_partial_io"), "0\n");
	/* off: the whole I/O fails, nothing completed */
	cr_assert_eq(io_done(be, BLK_WRITE, 0, 32 * KiB, 0x72, &done), -ENOSPC);
	cr_assert_eq(done, 0);
	cr_assert(store_is(0, 32 * KiB, 0x71));
	cr_assert_eq(attr_store(be, "badblocks_partial_io", "yes"), 0);
	/* a write up to the bad range, in whole 512-byte blocks: 19968 bytes */
	cr_assert_eq(io_done(be, BLK_WRITE, 0, 32 * KiB, 0x72, &done), -ENOSPC);
	cr_assert_eq(done, 19968, "done %llu", (unsigned long long)done);
	cr_assert(store_is(0, 19968, 0x72));
	cr_assert(store_is(19968, 32 * KiB - 19968, 0x71));
	/* a read likewise; one that starts in the range fails whole */
	cr_assert_eq(io_done(be, BLK_READ, 4096, 32 * KiB, 0, &done), -ENOSPC);
	cr_assert_eq(done, 19968 - 4096);
	cr_assert_eq(io_done(be, BLK_READ, 20480, 4096, 0, &done), -ENOSPC);
	cr_assert_eq(done, 0);
	cr_assert_eq(stat_get(be, "fault_partial_ios"), 2);
	attr_refuses(be, "badblocks_partial_io", "some");
	be->ops->close(be);
}

/* dm-dust: reads of a bad block fail; a write to it succeeds and remaps it. */
Test(fault, badblocks_clear_on_write)
{
	struct blk_backend *be = fault_open_default();
	uint8_t buf[4096];

	cr_assert_eq(attr_store(be, "badblocks_clear_on_write", "1"), 0);
	cr_assert_eq(attr_store(be, "badblocks", "1M 64K EIO"), 0);
	cr_assert_eq(rd(be, MiB, 4096), -EIO);
	cr_assert_eq(rd(be, MiB, 4096), -EIO);
	/* a write in the middle lands and splits the range */
	cr_assert_eq(wr(be, MiB + 16 * KiB, 4096, 0x81), 0);
	cr_assert(store_is(MiB + 16 * KiB, 4096, 0x81));
	cr_assert_str_eq(attr_show_list(be, "badblocks"),
			 "1048576 16384 EIO\n1069056 45056 EIO\n");
	cr_assert_eq(do_io(be, BLK_READ, MiB + 16 * KiB, 4096, 0, buf), 0);
	cr_assert_eq(buf[0], 0x81);
	cr_assert_eq(rd(be, MiB + 12 * KiB, 8 * KiB), -EIO);
	/* WRITE_ZEROES and DISCARD write too */
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, MiB, 16 * KiB, 0, NULL), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, MiB + 20 * KiB, 44 * KiB, 0, NULL), 0);
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "");
	cr_assert_eq(rd(be, MiB, 64 * KiB), 0);
	cr_assert_eq(stat_get(be, "fault_badblocks_cleared"), 3);
	/* the op knobs still apply to a write that cleared */
	cr_assert_eq(attr_store(be, "badblocks", "2M 4K"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	cr_assert_eq(wr(be, 2 * MiB, 4096, 0x82), -EIO);
	cr_assert_str_eq(attr_show_list(be, "badblocks"), "");
	/* with once too, a read clears it */
	cr_assert_eq(attr_store(be, "badblocks_once", "1"), 0);
	cr_assert_eq(attr_store(be, "badblocks", "3M 4K"), 0);
	cr_assert_eq(rd(be, 3 * MiB, 4096), -EIO);
	cr_assert_eq(rd(be, 3 * MiB, 4096), 0);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

/* A full map that must split: the smaller side goes too, never a crash or overrun. */
Test(fault, badblocks_split_with_a_full_map)
{
	struct blk_backend *be = fault_open_default();
	char line[64];
	int i;

	cr_assert_eq(attr_store(be, "badblocks_clear_on_write", "1"), 0);
	cr_assert_eq(attr_store(be, "badblocks", "0 1M"), 0);
	for (i = 1; i < 256; i++) {
		snprintf(line, sizeof(line), "%d 512\n", 2 * (int)MiB + i * 4096);
		cr_assert_eq(attr_store(be, "badblocks", line), 0, "entry %d", i);
	}
	cr_assert_eq(stat_get(be, "fault_badblock_ranges"), 256);
	/* [0, 1M) cut at 256K..260K: the larger side after it stays bad, the 256K before goes */
	cr_assert_eq(wr(be, 256 * KiB, 4096, 0x91), 0);
	cr_assert_eq(stat_get(be, "fault_badblock_ranges"), 256);
	cr_assert_eq(rd(be, 252 * KiB, 4096), 0);
	cr_assert_eq(rd(be, 0, 4096), 0);
	cr_assert_eq(rd(be, 260 * KiB, 4096), -EIO);
	cr_assert_eq(rd(be, MiB - 4096, 4096), -EIO);
	be->ops->close(be);
}

/* ================================================================== */
/* hangs */

/* A submit whose I/O completes later, from another thread. */
static void tio_start_flags(struct blk_backend *be, struct tio *t, enum blk_op op, uint64_t pos,
			    uint64_t len, int fill, unsigned int flags)
{
	tio_init(t, op, pos, len, NULL, fill);
	t->io.flags = flags;
	cr_assert_eq(tio_submit(be, t), 0);
}

static void tio_start(struct blk_backend *be, struct tio *t, enum blk_op op, uint64_t pos,
		      uint64_t len, int fill)
{
	tio_start_flags(be, t, op, pos, len, fill, 0);
}

Test(fault, hang_until_released)
{
	struct blk_backend *be = fault_open_default();
	struct tio r, w;

	cr_assert_eq(wr(be, 0, 8192, 0xa1), 0);
	cr_assert_eq(attr_store(be, "ops", "read"), 0);
	cr_assert_eq(attr_store(be, "hang", "yes"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	fake_log_clear(fb);
	tio_start_flags(be, &r, BLK_READ, 0, 4096, 0, BLK_IO_WAITED);
	/* held: not below, not completed */
	usleep(50 * 1000);
	cr_assert_eq(tio_calls(&r), 0);
	cr_assert_eq(fake_log_len(fb), 0);
	cr_assert_str_eq(attr_show(be, "hung"), "1\n");
	cr_assert_eq(stat_get(be, "fault_hung_ios"), 1);
	/* after fired once: the next read goes through, writes were never in ops */
	cr_assert_eq(rd(be, 4096, 4096), 0);
	cr_assert_eq(wr(be, 8192, 4096, 0xa2), 0);
	/* released: passed on, and it reads what is there */
	cr_assert_eq(attr_store(be, "release", "1\n"), 0);
	cr_assert(tio_wait(&r, WAIT_MS));
	cr_assert_eq(r.res, 0);
	cr_assert_eq(((uint8_t *)r.iov.iov_base)[0], 0xa1);
	cr_assert_str_eq(attr_show(be, "hung"), "0\n");
	cr_assert_eq(stat_get(be, "fault_hangs"), 1);
	cr_assert_eq(stat_get(be, "fault_hangs_released"), 1);
	cr_assert_eq(stat_get(be, "fault_injected"), 0);
	tio_free(&r);

	/* persistent: every read hangs; released with an errno, each fails with it */
	cr_assert_eq(attr_store(be, "persistent", "1"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	tio_start(be, &r, BLK_READ, 0, 4096, 0);
	tio_start(be, &w, BLK_READ, 4096, 4096, 0);
	cr_assert_str_eq(attr_show(be, "hung"), "2\n");
	attr_refuses(be, "release", "0");
	attr_refuses(be, "release", "yes");
	attr_refuses(be, "release", "EWHAT");
	attr_refuses(be, "release", "");
	cr_assert_str_eq(attr_show(be, "hung"), "2\n");
	cr_assert_eq(attr_store(be, "release", "ETIMEDOUT"), 0);
	cr_assert(tio_wait(&r, WAIT_MS) && tio_wait(&w, WAIT_MS));
	cr_assert_eq(r.res, -ETIMEDOUT);
	cr_assert_eq(w.res, -ETIMEDOUT);
	cr_assert_eq(tio_calls(&r) + tio_calls(&w), 2);
	/* nothing hung: release is a no-op */
	cr_assert_eq(attr_store(be, "release", "all"), 0);
	tio_free(&r);
	tio_free(&w);
	be->ops->close(be);
	cr_assert_eq(fake_violations(fb), 0);
}

/* hang_timeout: the I/O goes on by itself after the stated time. */
Test(fault, hang_timeout)
{
	struct blk_backend *be = fault_open_default();
	struct fake_op fo;
	struct tio t, u;
	uint64_t lat;

	cr_assert_eq(attr_store(be, "hang", "1"), 0);
	cr_assert_eq(attr_store(be, "hang_timeout", "200ms"), 0);
	cr_assert_str_eq(attr_show(be, "hang_timeout"), "200ms\n");
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	tio_start_flags(be, &t, BLK_WRITE, 0, 4096, 0xb1, BLK_IO_WAITED);
	cr_assert(tio_wait(&t, WAIT_MS));
	lat = t.done_ns - t.submit_ns;
	/* (how late it goes is the machine's: that it went by itself, the stat says) */
	cr_assert_geq(lat, 200 * 1000000ull, "%llu ns", (unsigned long long)lat);
	cr_assert_eq(t.res, 0);
	cr_assert(store_is(0, 4096, 0xb1));
	/* passed on from the hang thread: not BLK_IO_WAITED */
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.flags, 0);
	cr_assert_eq(stat_get(be, "fault_hangs_timed_out"), 1);
	tio_free(&t);

	/* a new timeout applies to what is hung now: 1h, then 0 (only release) ... */
	cr_assert_eq(attr_store(be, "hang_timeout", "1h"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	tio_start(be, &t, BLK_WRITE, 0, 4096, 0xb2);
	usleep(100 * 1000);
	cr_assert_eq(tio_calls(&t), 0);
	/* ... then 50ms: already past, it goes now */
	cr_assert_eq(attr_store(be, "hang_timeout", "50ms"), 0);
	cr_assert(tio_wait(&t, WAIT_MS));
	cr_assert_eq(t.res, 0);
	tio_free(&t);

	attr_refuses(be, "hang_timeout", "5");
	attr_refuses(be, "hang_timeout", "25h");
	attr_refuses(be, "hang_timeout", "-1s");

	/* close with a hung I/O: it is passed on, and completes, before close returns */
	cr_assert_eq(attr_store(be, "hang_timeout", "0"), 0);
	cr_assert_eq(attr_store(be, "after", "0"), 0);
	tio_start(be, &u, BLK_WRITE, 8192, 4096, 0xb3);
	cr_assert_eq(tio_calls(&u), 0);
	be->ops->close(be);
	cr_assert_eq(tio_calls(&u), 1);
	cr_assert_eq(u.res, 0);
	cr_assert(store_is(8192, 4096, 0xb3));
	tio_free(&u);
}

/* More hangs than the pool: still held (allocated, counted), all released. */
Test(fault, hang_pool_overflow)
{
	struct tparams tp;
	struct blk_backend *be;
	struct tio t[6];
	int i;

	tparams_init(&tp);
	tparams_add(&tp, "fault.pool", "2", 4);
	tparams_add(&tp, "fault.hang", "yes", 5);
	tparams_add(&tp, "fault.persistent", "yes", 6);
	tparams_add(&tp, "fault.after", "0", 7);
	be = filter_open(&tp);
	for (i = 0; i < 6; i++)
		tio_start(be, &t[i], BLK_WRITE, (uint64_t)i * 4096, 4096, 0xc0 + i);
	cr_assert_str_eq(attr_show(be, "hung"), "6\n");
	cr_assert_eq(stat_get(be, "fault_pool_allocs"), 4);
	cr_assert_eq(stat_get(be, "fault_pool_max_used"), 6);
	cr_assert_eq(attr_store(be, "release", "1"), 0);
	for (i = 0; i < 6; i++) {
		cr_assert_eq(tio_calls(&t[i]), 1);
		cr_assert_eq(t[i].res, 0);
		cr_assert(store_is((uint64_t)i * 4096, 4096, 0xc0 + i));
		tio_free(&t[i]);
	}
	be->ops->close(be);
}

/* ================================================================== */
/* seeds */

/* The same seed, the same I/O in the same order: the same failures. */
Test(fault, seed_replays)
{
	struct tparams tp;
	struct blk_backend *be;
	char a[129], b[129], c[129];
	int i;

	tparams_init(&tp);
	tparams_add(&tp, "fault.seed", "4242", 4);
	tparams_add(&tp, "fault.probability", "0.5", 5);
	be = filter_open(&tp);
	cr_assert_str_eq(attr_show(be, "seed"), "4242\n");
	for (i = 0; i < 128; i++)
		a[i] = wr(be, 0, 512, 1) ? 'x' : '.';
	a[128] = '\0';
	cr_assert_eq(attr_store(be, "seed", "4242"), 0);
	for (i = 0; i < 128; i++)
		b[i] = wr(be, 0, 512, 1) ? 'x' : '.';
	b[128] = '\0';
	cr_assert_str_eq(a, b);
	cr_assert_eq(attr_store(be, "seed", "4243"), 0);
	for (i = 0; i < 128; i++)
		c[i] = wr(be, 0, 512, 1) ? 'x' : '.';
	c[128] = '\0';
	cr_assert_str_neq(a, c);
	/* auto: a new seed from the clock, shown */
	cr_assert_eq(attr_store(be, "seed", "auto"), 0);
	cr_assert_str_neq(attr_show(be, "seed"), "4243\n");
	attr_refuses(be, "seed", "x");
	attr_refuses(be, "seed", "18446744073709551616");
	be->ops->close(be);

	/* a second filter opened with the config's seed replays the first run */
	be = filter_open(&tp);
	for (i = 0; i < 128; i++)
		b[i] = wr(be, 0, 512, 1) ? 'x' : '.';
	cr_assert_str_eq(a, b);
	be->ops->close(be);
}
