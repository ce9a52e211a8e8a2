/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_list.c - backends/list.h, the one intrusive list of the
 * cache and the backends: order after each operation, walked both ways
 * (every prev pointer must mirror a next pointer), empty lists left usable.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../backends/list.h"

struct item {
	int v;
	struct list_head node;
};

static struct item it[8];

static void items_init(void)
{
	for (int i = 0; i < 8; i++) {
		it[i].v = i;
		list_init(&it[i].node);
	}
}

/*
 * The values on @head front to back, as "0 1 2"; asserts that walking
 * back from the tail gives the same entries in reverse.
 */
static const char *order(struct list_head *head)
{
	static char buf[64];
	struct list_head *p;
	struct item *e;
	int fwd[16], n = 0, k = 0;
	size_t len = 0;

	buf[0] = '\0';
	list_for_each_entry(e, head, node) {
		cr_assert_lt(n, 16, "list does not end");
		fwd[n++] = e->v;
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%d", len ? " " : "", e->v);
	}
	for (p = head->prev; p != head; p = p->prev) {
		cr_assert_lt(k, n, "backward walk longer than forward (%s)", buf);
		cr_assert_eq(list_entry(p, struct item, node)->v, fwd[n - 1 - k],
			     "backward walk differs from forward (%s)", buf);
		k++;
	}
	cr_assert_eq(k, n, "backward walk shorter than forward (%s)", buf);
	return buf;
}

Test(list, add_and_add_tail)
{
	LIST_HEAD(h);

	items_init();
	cr_assert(list_empty(&h));
	cr_assert_null(list_first_entry_or_null(&h, struct item, node));
	list_add_tail(&it[1].node, &h);
	list_add_tail(&it[2].node, &h);
	list_add(&it[0].node, &h);
	list_add(&it[3].node, &h);
	cr_assert_str_eq(order(&h), "3 0 1 2");
	cr_assert_eq(list_first_entry_or_null(&h, struct item, node), &it[3]);
}

Test(list, del_init_and_move_tail)
{
	LIST_HEAD(h);
	LIST_HEAD(g);

	items_init();
	for (int i = 0; i < 4; i++)
		list_add_tail(&it[i].node, &h);
	list_del_init(&it[1].node);
	cr_assert(list_empty(&it[1].node), "a deleted entry is left as an empty list");
	cr_assert_str_eq(order(&h), "0 2 3");
	list_move_tail(&it[0].node, &h);
	cr_assert_str_eq(order(&h), "2 3 0");
	list_move_tail(&it[3].node, &g);
	cr_assert_str_eq(order(&h), "2 0");
	cr_assert_str_eq(order(&g), "3");
}

Test(list, splice_init_goes_in_front)
{
	LIST_HEAD(h);
	LIST_HEAD(s);

	items_init();
	list_add_tail(&it[0].node, &h);
	list_add_tail(&it[1].node, &h);
	list_add_tail(&it[5].node, &s);
	list_add_tail(&it[6].node, &s);
	list_add_tail(&it[7].node, &s);
	list_splice_init(&s, &h);
	cr_assert_str_eq(order(&h), "5 6 7 0 1");
	cr_assert(list_empty(&s), "the spliced list is left empty");
	cr_assert_str_eq(order(&s), "");
	/* into an empty list, and an empty list into a full one */
	list_splice_init(&h, &s);
	cr_assert_str_eq(order(&s), "5 6 7 0 1");
	cr_assert(list_empty(&h));
	list_splice_init(&h, &s);
	cr_assert_str_eq(order(&s), "5 6 7 0 1");
}

Test(list, splice_tail_init_goes_after)
{
	LIST_HEAD(h);
	LIST_HEAD(s);

	items_init();
	list_add_tail(&it[0].node, &h);
	list_add_tail(&it[1].node, &h);
	list_add_tail(&it[5].node, &s);
	list_add_tail(&it[6].node, &s);
	list_splice_tail_init(&s, &h);
	cr_assert_str_eq(order(&h), "0 1 5 6");
	cr_assert(list_empty(&s), "the spliced list is left empty");
	list_add_tail(&it[7].node, &s);		/* and usable again */
	list_splice_tail_init(&s, &h);
	cr_assert_str_eq(order(&h), "0 1 5 6 7");
	list_splice_tail_init(&s, &h);		/* empty: nothing changes */
	cr_assert_str_eq(order(&h), "0 1 5 6 7");
	list_splice_tail_init(&h, &s);
	cr_assert_str_eq(order(&s), "0 1 5 6 7");
	cr_assert(list_empty(&h));
}

Test(list, for_each_safe_unlinks)
{
	LIST_HEAD(h);
	LIST_HEAD(odd);
	struct list_head *p, *n;
	int count = 0;

	items_init();
	for (int i = 0; i < 8; i++)
		list_add_tail(&it[i].node, &h);
	list_for_each_safe(p, n, &h) {
		struct item *e = list_entry(p, struct item, node);

		if (e->v & 1)
			list_move_tail(p, &odd);
	}
	list_for_each(p, &h)
		count++;
	cr_assert_eq(count, 4);
	cr_assert_str_eq(order(&h), "0 2 4 6");
	cr_assert_str_eq(order(&odd), "1 3 5 7");
}
