// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ranges.c - byte ranges of a device (backends/kit/ranges.h):
 * parsing (sizes, tags, entries outside the device or past the room
 * refused), printing, lookups in list order, sort and merge, the bytes
 * covered and the n-th of them, and punching a range out: whole, at
 * either end, in the middle, and in the middle of a full list.
 */
#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/backends_int.h"
#include "../../backends/kit/ranges.h"

#define SIZE (1u << 20)

static int parse(const char *s, char sep, bool tags, struct be_range *v, size_t room)
{
	return be_ranges_parse(s, strlen(s), sep, SIZE, tags ? be_parse_errno : NULL, EIO, v,
			       room);
}

Test(ranges, parse)
{
	struct be_range v[4];

	cr_assert_eq(parse("0 4K, 8K 512 ENOSPC,,  1020K 4K ", ',', true, v, 4), 3);
	cr_assert_eq(v[0].pos, 0);
	cr_assert_eq(v[0].len, 4096);
	cr_assert_eq(v[0].tag, EIO, "no tag: the default");
	cr_assert_eq(v[1].pos, 8192);
	cr_assert_eq(v[1].len, 512);
	cr_assert_eq(v[1].tag, ENOSPC);
	cr_assert_eq(parse("0 4K\n4K 4K\n", '\n', false, v, 4), 2);
	cr_assert_eq(parse("", ',', false, v, 4), 0);

	/* malformed, empty, outside the device, a tag where none is taken */
	cr_assert_eq(parse("0", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("0 0", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("x 4K", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("1M 1", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("1020K 8K", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("0 4K EIO", ',', false, v, 4), -EINVAL);
	cr_assert_eq(parse("0 4K EWHAT", ',', true, v, 4), -EINVAL);
	cr_assert_eq(parse("0 4K EIO x", ',', true, v, 4), -EINVAL);
	cr_assert_eq(parse("0 1, 1 1, 2 1", ',', false, v, 2), -ENOSPC);
}

Test(ranges, print)
{
	struct be_range v[] = { { 0, 4096, EIO }, { 8192, 512, ENOSPC } };
	char buf[64];

	cr_assert_eq(be_ranges_print(v, 2, buf, sizeof(buf), NULL), 16);
	cr_assert_str_eq(buf, "0 4096\n8192 512\n");
	cr_assert_eq(be_ranges_print(v, 2, buf, sizeof(buf), be_errno_name), 27);
	cr_assert_str_eq(buf, "0 4096 EIO\n8192 512 ENOSPC\n");
	cr_assert_eq(be_ranges_print(v, 0, buf, sizeof(buf), NULL), 0);
	cr_assert_str_eq(buf, "");
	cr_assert_eq(be_ranges_print(v, 2, buf, 10, NULL), -EOVERFLOW);
}

Test(ranges, lookups)
{
	/* list order, not position order: find gives the first listed */
	struct be_range v[] = { { 8192, 4096, ENOSPC }, { 4096, 8192, EIO } };

	cr_assert_eq(be_ranges_find(v, 2, 0, 4096), 2, "ends where the first starts: none");
	cr_assert_eq(be_ranges_find(v, 2, 4096, 512), 1);
	cr_assert_eq(be_ranges_find(v, 2, 8192, 512), 0);
	cr_assert_eq(be_ranges_find(v, 2, 12288, 4096), 2);
	cr_assert_eq(be_ranges_first(v, 2, 0, 16384), 4096);
	cr_assert_eq(be_ranges_first(v, 2, 9000, 100), 9000);
	cr_assert_eq(be_ranges_first(v, 2, 12288, 512), 12800, "none: the end");
	cr_assert(be_ranges_contains(v, 2, 4096));
	cr_assert(be_ranges_contains(v, 2, 12287));
	cr_assert(!be_ranges_contains(v, 2, 12288));
	cr_assert(!be_ranges_contains(v, 2, 4095));
}

Test(ranges, merge_covered_nth)
{
	struct be_range v[] = {
		{ 8192, 4096, 0 }, { 0, 512, 0 }, { 512, 512, 0 }, { 9000, 8000, 0 },
		{ 100000, 1, 0 },
	};
	size_t n = be_ranges_merge(v, 5);

	/* touching ones merge, overlapping ones merge, sorted by pos */
	cr_assert_eq(n, 3);
	cr_assert_eq(v[0].pos, 0);
	cr_assert_eq(v[0].len, 1024);
	cr_assert_eq(v[1].pos, 8192);
	cr_assert_eq(v[1].len, 17000 - 8192);
	cr_assert_eq(v[2].pos, 100000);
	cr_assert_eq(be_ranges_covered(v, n, 0, 200000), 1024 + 17000 - 8192 + 1);
	cr_assert_eq(be_ranges_covered(v, n, 512, 8192), 512 + 512);
	cr_assert_eq(be_ranges_covered(v, n, 2000, 1000), 0);
	cr_assert_eq(be_ranges_nth(v, n, 512, 8192, 0), 0);
	cr_assert_eq(be_ranges_nth(v, n, 512, 8192, 511), 511);
	cr_assert_eq(be_ranges_nth(v, n, 512, 8192, 512), 8192 - 512);
	cr_assert_eq(be_ranges_nth(v, n, 0, 200000, 1024 + 17000 - 8192), 100000);
}

static int nr_said, nr_full;

static void said(void *arg, const struct be_range *r, bool full)
{
	(void)arg;
	(void)r;
	nr_said++;
	nr_full += full;
}

Test(ranges, punch)
{
	struct be_range v[4] = { { 0, 4096, 1 }, { 8192, 4096, 2 }, { 16384, 4096, 3 } };
	size_t n = 3;

	nr_said = nr_full = 0;
	/* all of the first: the others move up, order kept */
	be_ranges_punch(v, &n, 4, 0, 4096, said, NULL);
	cr_assert_eq(n, 2);
	cr_assert_eq(v[0].tag, 2);
	cr_assert_eq(v[1].tag, 3);
	/* the head of one, the tail of another */
	be_ranges_punch(v, &n, 4, 7000, 2000, said, NULL);
	cr_assert_eq(v[0].pos, 9000);
	cr_assert_eq(v[0].len, 12288 - 9000);
	be_ranges_punch(v, &n, 4, 19000, 5000, said, NULL);
	cr_assert_eq(v[1].pos, 16384);
	cr_assert_eq(v[1].len, 19000 - 16384);
	/* the middle: two pieces, the tag in both */
	be_ranges_punch(v, &n, 4, 10000, 100, said, NULL);
	cr_assert_eq(n, 3);
	cr_assert_eq(v[0].pos, 9000);
	cr_assert_eq(v[0].len, 1000);
	cr_assert_eq(v[1].pos, 10100);
	cr_assert_eq(v[1].len, 12288 - 10100);
	cr_assert_eq(v[1].tag, 2);
	cr_assert_eq(v[2].tag, 3);
	cr_assert_eq(nr_said, 4);
	cr_assert_eq(nr_full, 0);
	/* the middle of a full list: the smaller side goes too */
	be_ranges_punch(v, &n, 3, 16400, 100, said, NULL);
	cr_assert_eq(n, 3);
	cr_assert_eq(nr_full, 1);
	cr_assert_eq(v[2].pos, 16500);
	cr_assert_eq(v[2].len, 19000 - 16500);
	/* nothing overlapping: nothing said */
	be_ranges_punch(v, &n, 3, 30000, 100, said, NULL);
	cr_assert_eq(nr_said, 5);
	cr_assert_eq(n, 3);
}

/* Powerloss's settled blocks: sorted, disjoint, touching ranges merged, found in halves. */
Test(ranges, set_adds_merge_and_find)
{
	struct be_range_set rs = { 0 };
	size_t i;

	cr_assert_eq(be_range_set_find(&rs, 0), 0, "an empty set finds nothing");
	cr_assert_eq(be_range_set_add(&rs, 100, 0), 0);
	cr_assert_eq(rs.n, 0, "an empty range adds nothing");
	cr_assert_eq(be_range_set_add(&rs, 8192, 4096), 0);
	cr_assert_eq(be_range_set_add(&rs, 0, 4096), 0);
	cr_assert_eq(be_range_set_add(&rs, 20480, 4096), 0);
	cr_assert_eq(rs.n, 3);
	cr_assert(rs.v[0].pos == 0 && rs.v[1].pos == 8192 && rs.v[2].pos == 20480, "kept sorted");
	/* the first range ending after pos */
	cr_assert_eq(be_range_set_find(&rs, 0), 0);
	cr_assert_eq(be_range_set_find(&rs, 4095), 0);
	cr_assert_eq(be_range_set_find(&rs, 4096), 1, "a range ending at pos is before it");
	cr_assert_eq(be_range_set_find(&rs, 12287), 1);
	cr_assert_eq(be_range_set_find(&rs, 12288), 2);
	cr_assert_eq(be_range_set_find(&rs, 24576), 3);
	/* touching at both ends: one range */
	cr_assert_eq(be_range_set_add(&rs, 4096, 4096), 0);
	cr_assert_eq(rs.n, 2);
	cr_assert(rs.v[0].pos == 0 && rs.v[0].len == 12288, "[0, 4K) + [4K, 8K) + [8K, 12K)");
	/* across several, overhanging both: swallows them */
	cr_assert_eq(be_range_set_add(&rs, 2048, 30000), 0);
	cr_assert_eq(rs.n, 1);
	cr_assert(rs.v[0].pos == 0 && rs.v[0].len == 32048);
	/* inside one: nothing changes */
	cr_assert_eq(be_range_set_add(&rs, 100, 200), 0);
	cr_assert(rs.n == 1 && rs.v[0].pos == 0 && rs.v[0].len == 32048);
	/* past the first array (64): it grows, order kept */
	for (i = 0; i < 200; i++)
		cr_assert_eq(be_range_set_add(&rs, 1000000 + (uint64_t)(199 - i) * 10, 5), 0);
	cr_assert_eq(rs.n, 201);
	for (i = 1; i < rs.n; i++)
		cr_assert_gt(rs.v[i].pos, rs.v[i - 1].pos + rs.v[i - 1].len, "entry %zu", i);
	cr_assert_eq(be_range_set_find(&rs, 1000007), 2);
	be_range_set_destroy(&rs);
	cr_assert(rs.n == 0 && rs.v == NULL);
}
