// SPDX-License-Identifier: MIT
/*
 * backends/kit/ranges.c - byte ranges of a device (ranges.h): parsing and
 * printing a list, looking up I/O against it, merging, and punching a
 * range out. Lists are small (a few hundred entries, read by a person),
 * so lookups are linear. A range set is kept sorted and merged as it
 * grows, and searched in halves.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "entries.h"
#include "ranges.h"

int be_ranges_parse(const char *s, size_t n, char sep, uint64_t size, int (*tag)(const char *),
		    int tag_def, struct be_range *out, size_t room)
{
	char tok[3][32];
	size_t cnt = 0;
	int nt;

	while ((nt = be_entries(&s, &n, sep, tok, tag ? 3 : 2)) != -ENOENT) {
		struct be_range r = { .tag = tag_def };

		if (nt < 0)
			return -EINVAL;
		if (!nt)
			continue;
		if (nt < 2 || blk_parse_size(tok[0], &r.pos) || blk_parse_size(tok[1], &r.len))
			return -EINVAL;
		if (!r.len || r.pos >= size || r.len > size - r.pos)
			return -EINVAL;
		if (nt == 3 && tag) {
			r.tag = tag(tok[2]);
			if (r.tag < 0)
				return -EINVAL;
		}
		if (cnt == room)
			return -ENOSPC;
		out[cnt++] = r;
	}
	return (int)cnt;
}

int be_ranges_print(const struct be_range *v, size_t n, char *buf, size_t len,
		    const char *(*tag_name)(int tag, char *tmp, size_t tmplen))
{
	size_t i, off = 0;

	if (!len)
		return -EOVERFLOW;
	buf[0] = '\0';
	for (i = 0; i < n; i++) {
		char tmp[16];
		int w;

		if (tag_name)
			w = snprintf(buf + off, len - off, "%llu %llu %s\n",
				     (unsigned long long)v[i].pos, (unsigned long long)v[i].len,
				     tag_name(v[i].tag, tmp, sizeof(tmp)));
		else
			w = snprintf(buf + off, len - off, "%llu %llu\n",
				     (unsigned long long)v[i].pos, (unsigned long long)v[i].len);
		if (w < 0 || (size_t)w >= len - off)
			return -EOVERFLOW;
		off += (size_t)w;
	}
	return (int)off;
}

size_t be_ranges_find(const struct be_range *v, size_t n, uint64_t pos, uint64_t len)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (be_range_overlaps(&v[i], pos, len))
			break;
	return i;
}

uint64_t be_ranges_first(const struct be_range *v, size_t n, uint64_t pos, uint64_t len)
{
	uint64_t first = pos + len;
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t at = v[i].pos > pos ? v[i].pos : pos;

		if (be_range_overlaps(&v[i], pos, len) && at < first)
			first = at;
	}
	return first;
}

static int cmp_pos(const void *a, const void *b)
{
	const struct be_range *x = a, *y = b;

	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

size_t be_ranges_merge(struct be_range *v, size_t n)
{
	size_t i, out = 0;

	qsort(v, n, sizeof(*v), cmp_pos);
	for (i = 0; i < n; i++) {
		if (out && v[i].pos <= v[out - 1].pos + v[out - 1].len) {
			uint64_t end = v[i].pos + v[i].len;

			if (end > v[out - 1].pos + v[out - 1].len)
				v[out - 1].len = end - v[out - 1].pos;
			continue;
		}
		v[out++] = v[i];
	}
	return out;
}

/* The part of entry @r inside [pos, pos + len): [*a, *b), empty when *a >= *b. */
static void clip(const struct be_range *r, uint64_t pos, uint64_t len, uint64_t *a, uint64_t *b)
{
	*a = r->pos > pos ? r->pos : pos;
	*b = r->pos + r->len;
	if (*b > pos + len)
		*b = pos + len;
}

uint64_t be_ranges_covered(const struct be_range *v, size_t n, uint64_t pos, uint64_t len)
{
	uint64_t sum = 0, a, b;
	size_t i;

	for (i = 0; i < n; i++) {
		clip(&v[i], pos, len, &a, &b);
		if (a < b)
			sum += b - a;
	}
	return sum;
}

uint64_t be_ranges_nth(const struct be_range *v, size_t n, uint64_t pos, uint64_t len,
		       uint64_t k)
{
	uint64_t a, b;
	size_t i;

	for (i = 0; i < n; i++) {
		clip(&v[i], pos, len, &a, &b);
		if (a >= b)
			continue;
		if (k < b - a)
			return a + k - pos;
		k -= b - a;
	}
	return 0;	/* not reached: k < be_ranges_covered() */
}

bool be_ranges_contains(const struct be_range *v, size_t n, uint64_t at)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (at >= v[i].pos && at - v[i].pos < v[i].len)
			return true;
	return false;
}

void be_ranges_punch(struct be_range *v, size_t *n, size_t cap, uint64_t pos, uint64_t len,
		     void (*said)(void *arg, const struct be_range *r, bool full), void *arg)
{
	uint64_t end = pos + len;
	size_t i = 0;

	while (i < *n) {
		struct be_range *r = &v[i];
		uint64_t r_end = r->pos + r->len;
		bool whole = pos <= r->pos && end >= r_end;
		bool middle = pos > r->pos && end < r_end;

		if (!be_range_overlaps(r, pos, len)) {
			i++;
			continue;
		}
		if (said)
			said(arg, r, middle && *n >= cap);
		if (whole) {
			/* all of it: the later entries move up, order kept */
			memmove(r, r + 1, (*n - i - 1) * sizeof(*r));
			(*n)--;
			continue;
		}
		if (pos <= r->pos) {
			r->len = r_end - end;
			r->pos = end;
		} else if (end >= r_end) {
			r->len = pos - r->pos;
		} else if (*n < cap) {
			memmove(r + 2, r + 1, (*n - i - 1) * sizeof(*r));
			(*n)++;
			r[1] = (struct be_range){ .pos = end, .len = r_end - end, .tag = r->tag };
			r->len = pos - r->pos;
			i++;
		} else if (pos - r->pos >= r_end - end) {
			r->len = pos - r->pos;
		} else {
			r->len = r_end - end;
			r->pos = end;
		}
		i++;
	}
}

size_t be_range_set_find(const struct be_range_set *rs, uint64_t pos)
{
	size_t lo = 0, hi = rs->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (rs->v[mid].pos + rs->v[mid].len <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int be_range_set_add(struct be_range_set *rs, uint64_t pos, uint64_t len)
{
	uint64_t s = pos, e = pos + len;
	size_t i, j;

	if (!len)
		return 0;
	i = be_range_set_find(rs, s);
	/* Ranges touching [s, e) (one ending at s counts) merge into it. */
	if (i > 0 && rs->v[i - 1].pos + rs->v[i - 1].len == s)
		i--;
	j = i;
	while (j < rs->n && rs->v[j].pos <= e) {
		uint64_t end = rs->v[j].pos + rs->v[j].len;

		if (rs->v[j].pos < s)
			s = rs->v[j].pos;
		if (end > e)
			e = end;
		j++;
	}
	if (j == i) {
		if (rs->n == rs->cap) {
			size_t cap = rs->cap ? 2 * rs->cap : 64;
			void *v = realloc(rs->v, cap * sizeof(rs->v[0]));

			if (!v)
				return -ENOMEM;
			rs->v = v;
			rs->cap = cap;
		}
		memmove(&rs->v[i + 1], &rs->v[i], (rs->n - i) * sizeof(rs->v[0]));
		rs->n++;
	} else if (j > i + 1) {
		memmove(&rs->v[i + 1], &rs->v[j], (rs->n - j) * sizeof(rs->v[0]));
		rs->n -= j - i - 1;
	}
	rs->v[i] = (struct be_range){ .pos = s, .len = e - s };
	return 0;
}

void be_range_set_destroy(struct be_range_set *rs)
{
	free(rs->v);
	*rs = (struct be_range_set){ 0 };
}
