// SPDX-License-Identifier: MIT
/*
 * backends/lib/crashmodel.c - the state set of a crash (crashmodel.h has the
 * promise in words). A point groups the unflushed writes by the physical
 * blocks they touch; a state is a prefix length per block, so the set is a
 * product and its states are numbered in mixed radix.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "crashmodel.h"

void blk_cm_init(struct blk_cm_log *log, uint32_t pbs)
{
	memset(log, 0, sizeof(*log));
	log->pbs = pbs;
}

void blk_cm_destroy(struct blk_cm_log *log)
{
	free(log->ev);
	memset(log, 0, sizeof(*log));
}

static struct blk_cm_event *log_append(struct blk_cm_log *log)
{
	if (log->nr == log->cap) {
		size_t cap = log->cap ? 2 * log->cap : 64;
		struct blk_cm_event *v = realloc(log->ev, cap * sizeof(*v));

		if (!v)
			return NULL;
		log->ev = v;
		log->cap = cap;
	}
	memset(&log->ev[log->nr], 0, sizeof(log->ev[0]));
	return &log->ev[log->nr++];
}

int blk_cm_write(struct blk_cm_log *log, uint64_t pos, uint64_t len, const void *data,
		 unsigned int flags)
{
	struct blk_cm_event *e = log_append(log);

	if (!e)
		return -ENOMEM;
	e->kind = BLK_CM_WRITE;
	e->flags = flags;
	e->pos = pos;
	e->len = len;
	e->data = data;
	e->seq = log->nr_writes++;
	return 0;
}

int blk_cm_flush(struct blk_cm_log *log, uint64_t covers)
{
	struct blk_cm_event *e;

	if (covers > log->nr_writes)
		return -EINVAL;
	e = log_append(log);
	if (!e)
		return -ENOMEM;
	e->kind = BLK_CM_FLUSH;
	e->covers = covers;
	return 0;
}

int blk_cm_mark(struct blk_cm_log *log)
{
	struct blk_cm_event *e = log_append(log);

	if (!e)
		return -ENOMEM;
	e->kind = BLK_CM_MARK;
	return 0;
}

/* ---- points ---- */

struct piece {
	uint64_t blk;
	size_t ev;
};

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;

	if (x->blk != y->blk)
		return x->blk < y->blk ? -1 : 1;
	return x->ev < y->ev ? -1 : x->ev > y->ev;
}

static bool unflushed(const struct blk_cm_point *pt, const struct blk_cm_event *e)
{
	return e->kind == BLK_CM_WRITE && e->seq >= pt->durable && e->len;
}

int blk_cm_point_init(struct blk_cm_point *pt, const struct blk_cm_log *log, size_t nr_events)
{
	uint64_t pbs = log->pbs;
	struct piece *pc = NULL;
	size_t i, n = 0, cap = 0, j;

	memset(pt, 0, sizeof(*pt));
	pt->log = log;
	pt->nr_events = nr_events < log->nr ? nr_events : log->nr;
	for (i = 0; i < pt->nr_events; i++)
		if (log->ev[i].kind == BLK_CM_FLUSH && log->ev[i].covers > pt->durable)
			pt->durable = log->ev[i].covers;

	/* Every (physical block, unflushed write) pair, sorted. */
	for (i = 0; i < pt->nr_events; i++) {
		const struct blk_cm_event *e = &log->ev[i];
		uint64_t b;

		if (!unflushed(pt, e))
			continue;
		for (b = e->pos / pbs; b <= (e->pos + e->len - 1) / pbs; b++) {
			if (n == cap) {
				size_t c = cap ? 2 * cap : 64;
				struct piece *v = realloc(pc, c * sizeof(*v));

				if (!v)
					goto out_nomem;
				pc = v;
				cap = c;
			}
			pc[n++] = (struct piece){ .blk = b, .ev = i };
		}
	}
	pt->nr_states = 1;
	if (!n || !pc)
		return 0;	/* nothing unflushed: one state */
	qsort(pc, n, sizeof(*pc), piece_cmp);
	for (i = 0; i < n; i = j) {
		struct blk_cm_block *bl;
		struct blk_cm_block *v;

		for (j = i; j < n && pc[j].blk == pc[i].blk; j++)
			;
		v = realloc(pt->b, (pt->nr_blocks + 1) * sizeof(*v));
		if (!v)
			goto out_nomem;
		pt->b = v;
		bl = &pt->b[pt->nr_blocks++];
		memset(bl, 0, sizeof(*bl));
		bl->blk = pc[i].blk;
		bl->nr = (uint32_t)(j - i);
		bl->ev = malloc((j - i) * sizeof(*bl->ev));
		if (!bl->ev)
			goto out_nomem;
	}
	/* Fill the lists (a second pass: realloc above may have moved pt->b). */
	for (i = 0, j = 0; i < pt->nr_blocks; i++) {
		struct blk_cm_block *bl = &pt->b[i];
		uint32_t k;

		for (k = 0; k < bl->nr; k++, j++) {
			bl->ev[k] = pc[j].ev;
			if (log->ev[pc[j].ev].flags & BLK_CM_FUA)
				bl->min = k + 1;
		}
	}
	free(pc);
	pt->nr_states = 1;
	for (i = 0; i < pt->nr_blocks; i++) {
		uint64_t r = pt->b[i].nr - pt->b[i].min + 1;

		if (pt->nr_states > UINT64_MAX / r) {
			pt->nr_states = UINT64_MAX;
			break;
		}
		pt->nr_states *= r;
	}
	return 0;

out_nomem:
	free(pc);
	blk_cm_point_destroy(pt);
	return -ENOMEM;
}

void blk_cm_point_destroy(struct blk_cm_point *pt)
{
	size_t i;

	for (i = 0; i < pt->nr_blocks; i++)
		free(pt->b[i].ev);
	free(pt->b);
	pt->b = NULL;
	pt->nr_blocks = 0;
}

void blk_cm_state_in_order(const struct blk_cm_point *pt, uint32_t *choice)
{
	size_t i;

	for (i = 0; i < pt->nr_blocks; i++)
		choice[i] = pt->b[i].nr;
}

int blk_cm_state_nth(const struct blk_cm_point *pt, uint64_t n, uint32_t *choice)
{
	size_t i;

	if (pt->nr_states != UINT64_MAX && n >= pt->nr_states)
		return -ERANGE;
	for (i = 0; i < pt->nr_blocks; i++) {
		uint64_t r = pt->b[i].nr - pt->b[i].min + 1;

		choice[i] = pt->b[i].min + (uint32_t)(n % r);
		n /= r;
	}
	return n ? -ERANGE : 0;
}

bool blk_cm_state_valid(const struct blk_cm_point *pt, const uint32_t *choice)
{
	size_t i;

	for (i = 0; i < pt->nr_blocks; i++)
		if (choice[i] < pt->b[i].min || choice[i] > pt->b[i].nr)
			return false;
	return true;
}

long blk_cm_find_block(const struct blk_cm_point *pt, uint64_t blk)
{
	size_t lo = 0, hi = pt->nr_blocks;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (pt->b[mid].blk < blk)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < pt->nr_blocks && pt->b[lo].blk == blk ? (long)lo : -1;
}

/* Where event @ev stands among the writes to block @bl (it is there). */
static uint32_t rank_in(const struct blk_cm_block *bl, size_t ev)
{
	uint32_t lo = 0, hi = bl->nr;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (bl->ev[mid] < ev)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int emit(const struct blk_cm_event *e, uint64_t a, uint64_t b,
		int (*fn)(void *, uint64_t, uint64_t, const void *), void *ctx)
{
	const char *d = e->data;

	return fn(ctx, a, b - a, d ? d + (a - e->pos) : NULL);
}

static int apply(const struct blk_cm_point *pt, const uint32_t *choice, bool durable,
		 int (*fn)(void *ctx, uint64_t pos, uint64_t len, const void *data), void *ctx)
{
	uint64_t pbs = pt->log->pbs;
	size_t i;
	int ret;

	for (i = 0; i < pt->nr_events; i++) {
		const struct blk_cm_event *e = &pt->log->ev[i];
		uint64_t p, run = 0, end = e->pos + e->len;
		bool in_run = false;

		if (e->kind != BLK_CM_WRITE || !e->len)
			continue;
		if (!unflushed(pt, e)) {
			if (!durable)
				continue;
			ret = fn(ctx, e->pos, e->len, e->data);
			if (ret)
				return ret;
			continue;
		}
		/* Piece by physical block; adjacent kept pieces go out as one. */
		for (p = e->pos; p < end;) {
			uint64_t next = (p / pbs + 1) * pbs;
			long bi = blk_cm_find_block(pt, p / pbs);
			bool keep;

			if (next > end)
				next = end;
			keep = bi >= 0 && rank_in(&pt->b[bi], i) < choice[bi];
			if (keep && !in_run) {
				run = p;
				in_run = true;
			} else if (!keep && in_run) {
				ret = emit(e, run, p, fn, ctx);
				if (ret)
					return ret;
				in_run = false;
			}
			p = next;
		}
		if (in_run) {
			ret = emit(e, run, end, fn, ctx);
			if (ret)
				return ret;
		}
	}
	return 0;
}

int blk_cm_apply(const struct blk_cm_point *pt, const uint32_t *choice,
		 int (*fn)(void *ctx, uint64_t pos, uint64_t len, const void *data), void *ctx)
{
	return apply(pt, choice, true, fn, ctx);
}

int blk_cm_apply_volatile(const struct blk_cm_point *pt, const uint32_t *choice,
			  int (*fn)(void *ctx, uint64_t pos, uint64_t len, const void *data),
			  void *ctx)
{
	return apply(pt, choice, false, fn, ctx);
}

uint64_t blk_cm_state_index(const struct blk_cm_point *pt, const uint32_t *choice)
{
	uint64_t n = 0;
	size_t i;

	for (i = pt->nr_blocks; i-- > 0;)
		n = n * (pt->b[i].nr - pt->b[i].min + 1) + (choice[i] - pt->b[i].min);
	return n;
}

static int copy_into(void *ctx, uint64_t pos, uint64_t len, const void *data)
{
	uint8_t *img = ctx;

	if (data)
		memcpy(img + pos, data, (size_t)len);
	else
		memset(img + pos, 0, (size_t)len);
	return 0;
}

int blk_cm_state_of(const struct blk_cm_point *pt, const uint8_t *base, const uint8_t *img,
		    uint64_t size, uint32_t *choice)
{
	uint64_t pbs = pt->log->pbs;
	uint8_t *dur = malloc((size_t)size);
	uint8_t *blk = malloc((size_t)pbs);
	int ret = 0;
	size_t i;

	if (!dur || !blk) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(dur, base, (size_t)size);
	memset(choice, 0, pt->nr_blocks * sizeof(*choice));
	blk_cm_apply(pt, choice, copy_into, dur);	/* the durable writes alone */
	for (i = 0; i < pt->nr_blocks && !ret; i++) {
		const struct blk_cm_block *bl = &pt->b[i];
		uint64_t off = bl->blk * pbs;
		uint32_t k;
		bool found = false;

		memcpy(blk, dur + off, (size_t)pbs);
		for (k = 0; ; k++) {
			const struct blk_cm_event *e;
			uint64_t a, b;

			if (k >= bl->min && !memcmp(blk, img + off, (size_t)pbs)) {
				choice[i] = k;
				found = true;
				break;
			}
			if (k == bl->nr)
				break;
			e = &pt->log->ev[bl->ev[k]];
			a = e->pos > off ? e->pos : off;
			b = e->pos + e->len < off + pbs ? e->pos + e->len : off + pbs;
			if (e->data)
				memcpy(blk + (a - off), (const char *)e->data + (a - e->pos),
				       (size_t)(b - a));
			else
				memset(blk + (a - off), 0, (size_t)(b - a));
		}
		if (!found)
			ret = -ENOENT;
	}
	if (!ret) {
		/* Blocks no unflushed write touched must hold their durable contents. */
		memcpy(dur, base, (size_t)size);
		blk_cm_apply(pt, choice, copy_into, dur);
		if (memcmp(dur, img, (size_t)size))
			ret = -ENOENT;
	}
out:
	free(blk);
	free(dur);
	return ret;
}
