/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/ranges.h - byte ranges of a device, for a filter that acts
 * on parts of it: fault's bad-block map, flakey's corrupt ranges (nbdkit's
 * common/regions is the model: one helper, so each filter holds only what
 * it does with a range). A list is an array the caller owns, of at most
 * @cap entries, each [pos, pos + len) with a tag (fault: the errno).
 *
 * Text: one entry is "OFFSET LENGTH [TAG]", sizes with K/M/G/T; a config
 * value separates entries with commas, a .sys store with newlines.
 *
 * A range set (struct be_range_set) is the other shape: disjoint ranges,
 * sorted, each added range merged with those it overlaps or touches, in
 * an array it grows itself (powerloss's physical blocks settled at a cut,
 * one add per unflushed write: binary search, not the linear lists'
 * lookups).
 *
 * Lock: none; the caller holds its own around every call on a list that
 * others read.
 */
#ifndef BLKFS_KIT_RANGES_H
#define BLKFS_KIT_RANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct be_range {
	uint64_t pos;
	uint64_t len;
	int tag;
};

static inline bool be_range_overlaps(const struct be_range *r, uint64_t pos, uint64_t len)
{
	return pos < r->pos + r->len && r->pos < pos + len;
}

/**
 * be_ranges_parse - the entries of a list text into @out
 * @s, @n: the text; @sep: between entries (',' or '\n')
 * @size: the device's size: every entry is non-empty and inside it
 * @tag: reads an entry's third token (a value >= 0, or < 0: malformed);
 *	 NULL: an entry has exactly two
 * @tag_def: the tag of an entry without one
 * @out, @room: where they go, and how many fit
 *
 * Returns: how many, -EINVAL for a malformed entry, -ENOSPC past @room.
 */
int be_ranges_parse(const char *s, size_t n, char sep, uint64_t size, int (*tag)(const char *),
		    int tag_def, struct be_range *out, size_t room);

/**
 * be_ranges_print - one "POS LEN\n" line per entry (or "POS LEN TAG\n"
 * with @tag_name), in order, into @buf: an attr's show
 * @tag_name: a tag as text (fault: the errno's name); NULL: none shown
 *
 * Returns: the length, or -EOVERFLOW when it does not fit in @len.
 */
int be_ranges_print(const struct be_range *v, size_t n, char *buf, size_t len,
		    const char *(*tag_name)(int tag, char *tmp, size_t tmplen));

/* The first entry overlapping [pos, pos + len), in list order; @n when none. */
size_t be_ranges_find(const struct be_range *v, size_t n, uint64_t pos, uint64_t len);

/* The lowest byte of [pos, pos + len) inside an entry; pos + len when none. */
uint64_t be_ranges_first(const struct be_range *v, size_t n, uint64_t pos, uint64_t len);

/*
 * Sort by pos and merge entries that overlap or touch, in place (tags are
 * the first's): the count left.
 */
size_t be_ranges_merge(struct be_range *v, size_t n);

/* For a merged list: the bytes of [pos, pos + len) inside it. */
uint64_t be_ranges_covered(const struct be_range *v, size_t n, uint64_t pos, uint64_t len);

/*
 * For a merged list: the offset from @pos of the @k-th byte (from 0) of
 * [pos, pos + len) inside it; k < be_ranges_covered().
 */
uint64_t be_ranges_nth(const struct be_range *v, size_t n, uint64_t pos, uint64_t len,
		       uint64_t k);

/* Is byte @at inside an entry? */
bool be_ranges_contains(const struct be_range *v, size_t n, uint64_t at);

/**
 * be_ranges_punch - take [pos, pos + len) out of a list, order kept
 * @v, @n, @cap: the list, its count (updated) and its room
 * @said: called for each entry it cuts, before the cut, with @full true
 *	  when the entry is cut in the middle and the list has no room for
 *	  a second piece: then the smaller piece goes too (a block more
 *	  works, rather than one that should work failing again); NULL: none
 * @arg: for @said
 *
 * An entry wholly inside goes (the later ones move up); one cut at an end
 * shrinks; one cut in the middle becomes two.
 */
void be_ranges_punch(struct be_range *v, size_t *n, size_t cap, uint64_t pos, uint64_t len,
		     void (*said)(void *arg, const struct be_range *r, bool full), void *arg);

/*
 * Disjoint ranges [pos, pos + len), sorted by pos, none touching another
 * (tags unused: 0). Zeroed is empty; its array is malloc'ed as it grows.
 */
struct be_range_set {
	struct be_range *v;
	size_t n, cap;
};

/* The index of the first range of @rs that ends after @pos; rs->n when none. */
size_t be_range_set_find(const struct be_range_set *rs, uint64_t pos);

/**
 * be_range_set_add - add [pos, pos + len) to @rs
 *
 * Every range it overlaps or touches (one ending at @pos, one starting at
 * pos + len) merges with it into one. @len 0 adds nothing.
 *
 * Returns: 0, or -ENOMEM when the array could not grow (@rs unchanged).
 */
int be_range_set_add(struct be_range_set *rs, uint64_t pos, uint64_t len);

/* Free @rs's array; it is empty (zeroed) after. */
void be_range_set_destroy(struct be_range_set *rs);

#endif
