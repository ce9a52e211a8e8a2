/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_list.c - backends/lib/list.h, the one intrusive list of the
 * cache and the backends: order after each operation, walked both ways
 * (every prev pointer must mirror a next pointer), empty lists left usable.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "../../backends/lib/list.h"

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

/* it[first] to it[last], in that order, onto the tail of @h */
static void add_items(struct list_head *h, int first, int last)
{
	for (int i = first; i <= last; i++)
		list_add_tail(&it[i].node, h);
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
	add_items(&h, 0, 3);
	list_del_init(&it[1].node);
	cr_assert(list_empty(&it[1].node), "a deleted entry is left as an empty list");
	cr_assert_str_eq(order(&h), "0 2 3");
	list_move_tail(&it[0].node, &h);
	cr_assert_str_eq(order(&h), "2 3 0");
	list_move_tail(&it[3].node, &g);
	cr_assert_str_eq(order(&h), "2 0");
	cr_assert_str_eq(order(&g), "3");
}

/*
 * @splice moves every entry of its first list onto its second: h = 0 1
 * takes s = 5 6 (@want), then s, empty after it and used again, takes 7
 * (@want_more); an empty s changes nothing; and h goes whole into the
 * empty s.
 */
static void check_splice(void (*splice)(struct list_head *, struct list_head *),
			 const char *want, const char *want_more)
{
	LIST_HEAD(h);
	LIST_HEAD(s);

	items_init();
	add_items(&h, 0, 1);
	add_items(&s, 5, 6);
	splice(&s, &h);
	cr_assert_str_eq(order(&h), want);
	cr_assert(list_empty(&s), "the spliced list is left empty");
	add_items(&s, 7, 7);
	splice(&s, &h);
	cr_assert_str_eq(order(&h), want_more);
	splice(&s, &h);
	cr_assert_str_eq(order(&h), want_more, "splicing an empty list changed the other");
	splice(&h, &s);
	cr_assert_str_eq(order(&s), want_more);
	cr_assert(list_empty(&h));
}

Test(list, splice_init_goes_in_front)
{
	check_splice(list_splice_init, "5 6 0 1", "7 5 6 0 1");
}

Test(list, splice_tail_init_goes_after)
{
	check_splice(list_splice_tail_init, "0 1 5 6", "0 1 5 6 7");
}

Test(list, for_each_safe_unlinks)
{
	LIST_HEAD(h);
	LIST_HEAD(odd);
	struct list_head *p, *n;
	int count = 0;

	items_init();
	add_items(&h, 0, 7);
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
