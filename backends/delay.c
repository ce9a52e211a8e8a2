// SPDX-License-Identifier: MIT
/*
 * backends/delay.c - the delay filter: holds each I/O for a set time before
 * passing it on, so latency = delay + the layer below. A slow HDD, a
 * stalling SSD, a far-away NBD server, without one (nbdkit's delay filter
 * is the model).
 *
 * Keys (and live attrs of the same names): read, write, flush, discard (the
 * last also for WRITE_ZEROES). A value is a duration, `0`, `500us`, `2ms`,
 * `1s`, or a range `1ms-5ms`, each I/O then drawing its delay uniformly from
 * the range (so I/Os of one type may pass each other, as on a real disk).
 *
 * submit() never sleeps: it puts the I/O on a min-heap of due times, and one
 * timer thread passes each on when it is due. An I/O with no delay goes on
 * at once from submit(). Each I/O goes down as a child blk_io, so the filter
 * sees completions and close can wait for every I/O it took: the layer below
 * is closed right after us and must not see one of ours afterwards.
 *
 * Lock: dd->lock covers the delays, the heap, the in-flight count and the
 * random state; it is never held across a submit below or an end_io.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends_int.h"

#define DELAY_MAX_US	(3600ull * 1000000)	/* 1h: longer is surely a typo */
#define DELAY_TEXT_MAX	64			/* the longest value taken */

enum delay_kind { DL_READ, DL_WRITE, DL_FLUSH, DL_DISCARD, DL_NR };

static const char *const delay_names[DL_NR] = {
	[DL_READ] = "read",
	[DL_WRITE] = "write",
	[DL_FLUSH] = "flush",
	[DL_DISCARD] = "discard",
};

/* [lo_us, hi_us]; lo == hi for a fixed delay. */
struct delay_range {
	uint64_t lo_us;
	uint64_t hi_us;
};

/* A child I/O: held on the heap, then passed down. */
struct delay_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;		/* the cache's; completed once */
	struct delay_dev *dd;
	uint64_t due_ns;		/* CLOCK_MONOTONIC */
	uint64_t seq;			/* ties on due_ns go in submission order */
};

struct delay_dev {
	struct blk_backend be;		/* must come first */
	pthread_t timer;

	pthread_mutex_t lock;
	pthread_cond_t timer_cv;	/* to the timer: new earliest due, or stop */
	pthread_cond_t idle_cv;		/* to close: inflight reached 0 */
	struct delay_range range[DL_NR];	/* lock */
	uint64_t rng;			/* lock: xorshift64* state */
	struct delay_io **heap;		/* lock: min-heap on (due_ns, seq) */
	size_t nr_held, heap_cap;	/* lock */
	uint64_t seq;			/* lock */
	uint64_t inflight;		/* lock: taken and not yet completed to the cache */
	bool stop;			/* lock: closing; the timer passes all on now */

	uint64_t nr_delayed;		/* atomic: I/Os held for a non-zero time */
};

static enum delay_kind op_kind(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return DL_READ;
	case BLK_WRITE: return DL_WRITE;
	case BLK_FLUSH: return DL_FLUSH;
	default: return DL_DISCARD;	/* DISCARD, WRITE_ZEROES */
	}
}

/* ---- durations: "0", "500us", "2ms", "1s", "1ms-5ms" ---- */

static int parse_one(const char *s, size_t n, uint64_t *us)
{
	static const struct {
		const char *sfx;
		uint64_t mul;
	} units[] = { { "us", 1 }, { "ms", 1000 }, { "s", 1000000 } };
	uint64_t v = 0;
	size_t i = 0, u;

	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (!n || s[0] < '0' || s[0] > '9')
		return -EINVAL;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (v > DELAY_MAX_US)
			return -ERANGE;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	/* A bare number is only clear when it is 0: 5 what? */
	if (i == n) {
		if (v)
			return -EINVAL;
		*us = 0;
		return 0;
	}
	for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
		if (strlen(units[u].sfx) != n - i || memcmp(s + i, units[u].sfx, n - i))
			continue;
		if (v > DELAY_MAX_US / units[u].mul)
			return -ERANGE;
		*us = v * units[u].mul;
		return 0;
	}
	return -EINVAL;
}

/* @s, @n: a duration or LO-HI with LO <= HI; -EINVAL or -ERANGE (> 1h). */
static int parse_range(const char *s, size_t n, struct delay_range *r)
{
	const char *dash = memchr(s, '-', n);
	struct delay_range v;
	int ret;

	if (!dash) {
		ret = parse_one(s, n, &v.lo_us);
		if (!ret)
			v.hi_us = v.lo_us;
	} else {
		ret = parse_one(s, (size_t)(dash - s), &v.lo_us);
		if (!ret)
			ret = parse_one(dash + 1, n - (size_t)(dash - s) - 1, &v.hi_us);
		if (!ret && v.lo_us > v.hi_us)
			ret = -EINVAL;
	}
	if (!ret)
		*r = v;
	return ret;
}

/* In the largest unit that says it exactly: 2000us is "2ms". */
static int format_one(char *buf, size_t len, uint64_t us)
{
	if (!us)
		return snprintf(buf, len, "0");
	if (us % 1000000 == 0)
		return snprintf(buf, len, "%llus", (unsigned long long)(us / 1000000));
	if (us % 1000 == 0)
		return snprintf(buf, len, "%llums", (unsigned long long)(us / 1000));
	return snprintf(buf, len, "%lluus", (unsigned long long)us);
}

static void format_range(char *buf, size_t len, const struct delay_range *r)
{
	int n = format_one(buf, len, r->lo_us);

	if (r->hi_us != r->lo_us && n >= 0 && (size_t)n < len) {
		buf[n++] = '-';
		format_one(buf + n, len - (size_t)n, r->hi_us);
	}
}

/* ---- the heap ---- */

static bool before(const struct delay_io *a, const struct delay_io *b)
{
	return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_swap(struct delay_io **h, size_t a, size_t b)
{
	struct delay_io *t = h[a];

	h[a] = h[b];
	h[b] = t;
}

/* Returns false on ENOMEM. */
static bool heap_push_locked(struct delay_dev *dd, struct delay_io *c)
{
	size_t i;

	if (dd->nr_held == dd->heap_cap) {
		size_t cap = dd->heap_cap ? 2 * dd->heap_cap : 64;
		struct delay_io **h = realloc(dd->heap, cap * sizeof(*h));

		if (!h)
			return false;
		dd->heap = h;
		dd->heap_cap = cap;
	}
	i = dd->nr_held++;
	dd->heap[i] = c;
	while (i && before(dd->heap[i], dd->heap[(i - 1) / 2])) {
		heap_swap(dd->heap, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	return true;
}

static struct delay_io *heap_pop_locked(struct delay_dev *dd)
{
	struct delay_io *top = dd->heap[0];
	size_t i = 0, n = --dd->nr_held;

	dd->heap[0] = dd->heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < n && before(dd->heap[l], dd->heap[m]))
			m = l;
		if (r < n && before(dd->heap[r], dd->heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(dd->heap, i, m);
		i = m;
	}
	return top;
}

/* ---- I/O ---- */

/* A delay in [lo, hi], uniform (the modulo bias is below 1e-6 for 1h). */
static uint64_t pick_us_locked(struct delay_dev *dd, const struct delay_range *r)
{
	uint64_t x;

	if (r->lo_us == r->hi_us)
		return r->lo_us;
	x = dd->rng;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	dd->rng = x;
	return r->lo_us + (x * 0x2545f4914f6cdd1dull) % (r->hi_us - r->lo_us + 1);
}

/* The I/O we took ended; @res goes to the cache. */
static void delay_end_io(struct blk_io *io, int res)
{
	struct delay_io *c = (struct delay_io *)io;
	struct delay_dev *dd = c->dd;
	struct blk_io *parent = c->parent;

	free(c);
	parent->end_io(parent, res);
	/*
	 * After the parent's end_io: close waits for inflight 0, so it cannot
	 * free dd while this thread is still inside the completion.
	 */
	pthread_mutex_lock(&dd->lock);
	if (!--dd->inflight)
		pthread_cond_broadcast(&dd->idle_cv);
	pthread_mutex_unlock(&dd->lock);
}

static void *delay_timer_main(void *arg)
{
	struct delay_dev *dd = arg;

	pthread_mutex_lock(&dd->lock);
	for (;;) {
		struct delay_io *c;
		uint64_t now;
		int ret;

		if (!dd->nr_held) {
			if (dd->stop)
				break;
			pthread_cond_wait(&dd->timer_cv, &dd->lock);
			continue;
		}
		now = blk_now_ns();
		/* Closing passes everything on now: nobody waits for the delay. */
		if (!dd->stop && dd->heap[0]->due_ns > now) {
			struct timespec ts = {
				.tv_sec = (time_t)(dd->heap[0]->due_ns / 1000000000ull),
				.tv_nsec = (long)(dd->heap[0]->due_ns % 1000000000ull),
			};

			pthread_cond_timedwait(&dd->timer_cv, &dd->lock, &ts);
			continue;
		}
		c = heap_pop_locked(dd);
		pthread_mutex_unlock(&dd->lock);
		ret = blk_submit(dd->be.next, &c->io);
		/* We took the parent: a refusal below becomes its completion. */
		if (ret)
			delay_end_io(&c->io, ret);
		pthread_mutex_lock(&dd->lock);
	}
	pthread_mutex_unlock(&dd->lock);
	return NULL;
}

static int delay_submit(struct blk_backend *be, struct blk_io *io)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	struct delay_io *c;
	uint64_t us;
	int ret;

	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->io = be_child_io(io, delay_end_io, c);
	c->parent = io;
	c->dd = dd;

	pthread_mutex_lock(&dd->lock);
	us = pick_us_locked(dd, &dd->range[op_kind(io->op)]);
	dd->inflight++;
	if (us) {
		c->due_ns = blk_now_ns() + us * 1000;
		/* the timer thread submits it: nobody waits in that thread */
		c->io.flags &= ~BLK_IO_WAITED;
		c->seq = dd->seq++;
		if (!heap_push_locked(dd, c)) {
			ret = -ENOMEM;
			goto out_undo;
		}
		/* Only a new earliest due time changes what the timer waits for. */
		if (dd->heap[0] == c)
			pthread_cond_signal(&dd->timer_cv);
		pthread_mutex_unlock(&dd->lock);
		__atomic_add_fetch(&dd->nr_delayed, 1, __ATOMIC_RELAXED);
		return 0;
	}
	pthread_mutex_unlock(&dd->lock);

	ret = blk_submit(be->next, &c->io);
	if (!ret)
		return 0;	/* @c may be gone: the layer below may complete inline */
	pthread_mutex_lock(&dd->lock);
out_undo:
	if (!--dd->inflight)
		pthread_cond_broadcast(&dd->idle_cv);
	pthread_mutex_unlock(&dd->lock);
	free(c);
	return ret;
}

/* ---- open, close, geometry, stat ---- */

static struct blk_backend *delay_open(struct blk_params *p, struct blk_backend *next)
{
	struct delay_range range[DL_NR] = { { 0, 0 } };
	pthread_condattr_t ca;
	struct delay_dev *dd;
	int i, ret;

	if (!next) {
		blk_param_error(p, NULL, "the delay filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	for (i = 0; i < DL_NR; i++) {
		const char *s = blk_param_get(p, delay_names[i]);

		if (!s)
			continue;
		ret = parse_range(s, strlen(s), &range[i]);
		if (ret == -ERANGE)
			return ERR_PTR(blk_param_error(p, delay_names[i],
				"'%s' is too long (allowed: at most 1h = 3600s)", s));
		if (ret)
			return ERR_PTR(blk_param_error(p, delay_names[i],
				"'%s' is not a delay (allowed: 0, a duration such as 500us, 2ms, 1s, or a range LO-HI such as 1ms-5ms)",
				s));
	}

	dd = calloc(1, sizeof(*dd));
	if (!dd) {
		ret = -ENOMEM;
		goto out_err;
	}
	memcpy(dd->range, range, sizeof(range));
	/* Any non-zero seed; runs need not repeat (the values are in the trace). */
	dd->rng = blk_now_ns() ^ (uint64_t)(uintptr_t)dd ^ 0x9e3779b97f4a7c15ull;
	if (!dd->rng)
		dd->rng = 1;

	ret = -pthread_mutex_init(&dd->lock, NULL);
	if (ret)
		goto out_free;
	/* Due times are CLOCK_MONOTONIC: a wall-clock jump must not stall I/O. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	ret = -pthread_cond_init(&dd->timer_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto out_destroy_lock;
	ret = -pthread_cond_init(&dd->idle_cv, NULL);
	if (ret)
		goto out_destroy_timer_cv;
	dd->be.ops = &delay_filter_ops;
	dd->be.next = next;
	ret = -pthread_create(&dd->timer, NULL, delay_timer_main, dd);
	if (ret)
		goto out_destroy_idle_cv;
	return &dd->be;

out_destroy_idle_cv:
	pthread_cond_destroy(&dd->idle_cv);
out_destroy_timer_cv:
	pthread_cond_destroy(&dd->timer_cv);
out_destroy_lock:
	pthread_mutex_destroy(&dd->lock);
out_free:
	free(dd);
out_err:
	blk_param_error(p, NULL, "cannot set up the delay filter: %s", strerror(-ret));
	return ERR_PTR(ret);
}

/*
 * Pass on what is still held (at once: nobody is left to wait for the
 * delay), then wait until every I/O taken has completed to its submitter,
 * so the layer below, closed next, sees none of ours.
 */
static void delay_close(struct blk_backend *be)
{
	struct delay_dev *dd = (struct delay_dev *)be;

	pthread_mutex_lock(&dd->lock);
	dd->stop = true;
	pthread_cond_signal(&dd->timer_cv);
	pthread_mutex_unlock(&dd->lock);
	pthread_join(dd->timer, NULL);

	pthread_mutex_lock(&dd->lock);
	while (dd->inflight)
		pthread_cond_wait(&dd->idle_cv, &dd->lock);
	pthread_mutex_unlock(&dd->lock);

	pthread_cond_destroy(&dd->idle_cv);
	pthread_cond_destroy(&dd->timer_cv);
	pthread_mutex_destroy(&dd->lock);
	free(dd->heap);
	free(dd);
}

static size_t delay_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	size_t held;

	pthread_mutex_lock(&dd->lock);
	held = dd->nr_held;
	pthread_mutex_unlock(&dd->lock);
	return be_stat_printf(buf, len, "delayed_ios %llu\ndelay_held_ios %zu\n",
			      (unsigned long long)__atomic_load_n(&dd->nr_delayed, __ATOMIC_RELAXED),
			      held);
}

/* ---- live attributes: .sys/DEV/delay/{read,write,flush,discard} ---- */

static int delay_show(struct blk_backend *be, enum delay_kind k, char *buf, size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	struct delay_range r;
	char s[DELAY_TEXT_MAX];
	int n;

	pthread_mutex_lock(&dd->lock);
	r = dd->range[k];
	pthread_mutex_unlock(&dd->lock);
	format_range(s, sizeof(s), &r);
	n = snprintf(buf, len, "%s\n", s);
	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

/* The same syntax as the config; I/Os already held keep their due time. */
static int delay_store(struct blk_backend *be, enum delay_kind k, const char *buf,
		       size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	struct delay_range r;
	int ret;

	if (len && buf[len - 1] == '\n')
		len--;
	if (!len || len >= DELAY_TEXT_MAX || memchr(buf, '\0', len))
		return -EINVAL;
	ret = parse_range(buf, len, &r);
	if (ret)
		return -EINVAL;
	pthread_mutex_lock(&dd->lock);
	dd->range[k] = r;
	pthread_mutex_unlock(&dd->lock);
	return 0;
}

#define DELAY_ATTR(kind, fn)							\
static int delay_##fn##_show(struct blk_backend *be, char *buf, size_t len)	\
{										\
	return delay_show(be, kind, buf, len);					\
}										\
static int delay_##fn##_store(struct blk_backend *be, const char *buf, size_t len) \
{										\
	return delay_store(be, kind, buf, len);					\
}

DELAY_ATTR(DL_READ, read)
DELAY_ATTR(DL_WRITE, write)
DELAY_ATTR(DL_FLUSH, flush)
DELAY_ATTR(DL_DISCARD, discard)

static const struct blk_attr delay_attrs[] = {
	{ .name = "read", .show = delay_read_show, .store = delay_read_store },
	{ .name = "write", .show = delay_write_show, .store = delay_write_store },
	{ .name = "flush", .show = delay_flush_show, .store = delay_flush_store },
	{ .name = "discard", .show = delay_discard_show, .store = delay_discard_store },
	{ .name = NULL },
};

static const char *const delay_keys[] = { "read", "write", "flush", "discard", NULL };

const struct blk_backend_ops delay_filter_ops = {
	.name = "delay",
	.is_filter = true,
	.keys = delay_keys,
	.help = "delay: hold I/O before passing it on; delay.read/write/flush/discard = 2ms, 500us, 1s or 1ms-5ms",
	.open = delay_open,
	.close = delay_close,
	.geometry = be_filter_geometry,
	.submit = delay_submit,
	.stat = delay_stat,
	.attrs = delay_attrs,
	.snap = &be_filter_snap_ops,
};
