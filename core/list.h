/* SPDX-License-Identifier: MIT */
/* core/list.h - intrusive doubly linked lists, as the kernel's list_head. */
#ifndef BLKFS_LIST_H
#define BLKFS_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_head {
	struct list_head *prev, *next;
};

#define LIST_HEAD_INIT(name) { &(name), &(name) }
#define list_entry(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))
#define list_first_entry(head, type, member) list_entry((head)->next, type, member)
#define list_for_each_safe(pos, n, head) \
	for (pos = (head)->next, n = pos->next; pos != (head); pos = n, n = pos->next)

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

#endif
