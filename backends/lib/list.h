/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/list.h - intrusive doubly linked lists, as the kernel's list_head,
 * with its names and argument order: the entry (or the list to move) first,
 * the list it goes to second. The cache (core/) and the backends use this
 * one implementation; it lives here because a backend includes nothing
 * from core/.
 */
#ifndef BLKFS_LIST_H
#define BLKFS_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_head {
	struct list_head *prev, *next;
};

#define LIST_HEAD_INIT(name) { &(name), &(name) }
#define LIST_HEAD(name) struct list_head name = LIST_HEAD_INIT(name)
#define list_entry(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define list_first_entry(head, type, member) list_entry((head)->next, type, member)
#define list_first_entry_or_null(head, type, member) \
	(list_empty(head) ? NULL : list_first_entry(head, type, member))
#define list_for_each(pos, head) \
	for (pos = (head)->next; pos != (head); pos = pos->next)
#define list_for_each_safe(pos, n, head) \
	for (pos = (head)->next, n = pos->next; pos != (head); pos = n, n = pos->next)
/* @pos: a pointer to the entry type; the body must not unlink it */
#define list_for_each_entry(pos, head, member) \
	for (pos = list_entry((head)->next, __typeof__(*pos), member); \
	     &pos->member != (head); \
	     pos = list_entry(pos->member.next, __typeof__(*pos), member))

static inline void list_init(struct list_head *h) { h->prev = h->next = h; }
static inline bool list_empty(const struct list_head *h) { return h->next == h; }

static inline void list_add_between(struct list_head *n, struct list_head *prev,
				    struct list_head *next)
{
	next->prev = n;
	n->next = next;
	n->prev = prev;
	prev->next = n;
}

/* @n goes first on @head (a stack) */
static inline void list_add(struct list_head *n, struct list_head *head)
{
	list_add_between(n, head, head->next);
}

/* @n goes last on @head (a queue) */
static inline void list_add_tail(struct list_head *n, struct list_head *head)
{
	list_add_between(n, head->prev, head);
}

static inline void list_del_init(struct list_head *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	list_init(e);
}

static inline void list_move_tail(struct list_head *e, struct list_head *head)
{
	list_del_init(e);
	list_add_tail(e, head);
}

/* The entries of @list, in their order, between @prev and @next. */
static inline void list_splice_between(const struct list_head *list, struct list_head *prev,
				       struct list_head *next)
{
	struct list_head *first = list->next, *last = list->prev;

	first->prev = prev;
	prev->next = first;
	last->next = next;
	next->prev = last;
}

/* Every entry of @list, in its order, goes in front of @head's; @list is left empty. */
static inline void list_splice_init(struct list_head *list, struct list_head *head)
{
	if (list_empty(list))
		return;
	list_splice_between(list, head, head->next);
	list_init(list);
}

/* Every entry of @list, in its order, goes after @head's; @list is left empty. */
static inline void list_splice_tail_init(struct list_head *list, struct list_head *head)
{
	if (list_empty(list))
		return;
	list_splice_between(list, head->prev, head);
	list_init(list);
}

#endif
