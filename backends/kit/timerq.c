// SPDX-License-Identifier: MIT
/*
 * backends/lib/util.c - small pieces every backend or filter would otherwise
 * write again: an op's name, the ->stat text, an attr's one-line value in
 * and out, a filter's geometry (the layer below's), a filter's snapshot
 * calls (which go to the layer below), and what the fault and latency
 * filters share: errno names, probabilities, seeds, list entries, the
 * `pool` key (the pool itself: lib/pool.c) and the timer queue.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../backends_int.h"

const char *blk_op_name(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return "READ";
	case BLK_WRITE: return "WRITE";
	case BLK_FLUSH: return "FLUSH";
	case BLK_DISCARD: return "DISCARD";
	case BLK_WRITE_ZEROES: return "WRITE_ZEROES";
	}
	return "UNKNOWN";
}

size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!len)
		return 0;
	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : len - 1;
}

int be_attr_text(const char *buf, size_t len, char *s, size_t cap)
{
	if (len && buf[len - 1] == '\n')
		len--;
	if (!len || len >= cap || memchr(buf, '\0', len))
		return -EINVAL;
	memcpy(s, buf, len);
	s[len] = '\0';
	return 0;
}

int be_attr_out(char *buf, size_t len, const char *s)
{
	int n = snprintf(buf, len, "%s\n", s);

	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	be->next->ops->geometry(be->next, geo);
}

int be_filter_resize(struct blk_backend *be, uint64_t *size)
{
	return blk_resize(be->next, size);
}

/* ---- errnos, probabilities, seeds ---- */

int be_parse_errno(const char *s)
{
	char *end;
	long v;
	int e;

	if (*s >= '0' && *s <= '9') {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || *end || v <= 0 || v >= BLK_MAX_ERRNO)
			return -EINVAL;
		return (int)v;
	}
	for (e = 1; e < 256; e++) {
		const char *n = strerrorname_np(e);

		if (n && !strcasecmp(n, s))
			return e;
	}
	return -EINVAL;
}

const char *be_errno_name(int e, char *buf, size_t len)
{
	const char *n = strerrorname_np(e);

	if (n)
		return n;
	snprintf(buf, len, "%d", e);
	return buf;
}

int be_parse_probability(const char *s, double *out)
{
	char *end;
	double v;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0 || v > 1)
		return -EINVAL;
	*out = v;
	return 0;
}

uint64_t be_seed_from_clock(void)
{
	struct timespec ts;
	uint64_t s;

	clock_gettime(CLOCK_REALTIME, &ts);
	s = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	s ^= blk_now_ns() << 17 ^ ((uint64_t)getpid() << 32);
	/* one splitmix step: seeds taken close together differ in every bit */
	return be_rand(&s);
}

void be_say_seed(const char *filter, const char *dev, uint64_t seed, const char *why)
{
	blk_info("%s: %s: seed %llu (%s; %s.seed = %llu replays it)", filter, dev,
		(unsigned long long)seed, why, filter, (unsigned long long)seed);
}

int be_parse_seed(const char *s, bool *is_auto, uint64_t *seed)
{
	unsigned long long v;
	char *end;

	/* time and random: what powerloss.seed has always taken for auto */
	if (!strcasecmp(s, "auto") || !strcasecmp(s, "time") || !strcasecmp(s, "random")) {
		*is_auto = true;
		*seed = 0;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*is_auto = false;
	*seed = v;
	return 0;
}

int be_seed_show(pthread_mutex_t *lock, const uint64_t *seed, char *buf, size_t len)
{
	char s[24];

	pthread_mutex_lock(lock);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)*seed);
	pthread_mutex_unlock(lock);
	return be_attr_out(buf, len, s);
}

int be_seed_store(pthread_mutex_t *lock, uint64_t *seed, uint64_t *rng, const char *filter,
		  const char *dev, const char *buf, size_t len)
{
	bool is_auto;
	uint64_t v;
	char s[32];

	if (be_attr_text(buf, len, s, sizeof(s)) || be_parse_seed(s, &is_auto, &v))
		return -EINVAL;
	if (is_auto)
		v = be_seed_from_clock();
	pthread_mutex_lock(lock);
	*seed = v;
	*rng = v;
	pthread_mutex_unlock(lock);
	be_say_seed(filter, dev, v, "stored");
	return 0;
}

int be_param_seed(struct blk_params *p, uint64_t *seed)
{
	const char *s = blk_param_get(p, "seed");
	bool is_auto = true;

	if (s && be_parse_seed(s, &is_auto, seed))
		return blk_param_error(p, "seed",
			"'%s' is not a seed (allowed: a number below 2^64, or auto for one from the clock)",
			s);
	if (is_auto)
		*seed = be_seed_from_clock();
	return 0;
}

/* ---- list entries ---- */

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

int be_entries(const char **sp, size_t *np, char sep, char tok[][32], int max)
{
	const char *s = *sp, *end;
	size_t n = *np, k;
	int nt = 0;

	if (!n)
		return -ENOENT;
	end = memchr(s, sep, n);
	k = end ? (size_t)(end - s) : n;
	*sp = s + k + (end ? 1 : 0);
	*np = n - k - (end ? 1 : 0);
	for (;;) {
		size_t t = 0;

		while (k && is_blank(*s))
			s++, k--;
		if (!k)
			break;
		if (nt == max)
			return -EINVAL;
		while (t < k && !is_blank(s[t]))
			t++;
		if (t >= 32 || memchr(s, '\0', t))
			return -EINVAL;
		memcpy(tok[nt], s, t);
		tok[nt][t] = '\0';
		nt++;
		s += t;
		k -= t;
	}
	return nt;
}

/* ---- the per-I/O object pool: lib/pool.c; its config key ---- */

int be_param_pool(struct blk_params *p, unsigned int *nr)
{
	return blk_param_uint(p, "pool", BE_POOL_DEF, 1, BE_POOL_MAX, nr);
}

/* ---- the timer queue ---- */

static bool timer_before(const struct be_timer *a, const struct be_timer *b)
{
	return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_swap(struct be_timer **h, size_t a, size_t b)
{
	struct be_timer *t = h[a];

	h[a] = h[b];
	h[b] = t;
}

static struct be_timer *timerq_pop_locked(struct be_timerq *q)
{
	struct be_timer *top = q->heap[0];
	size_t i = 0, n = --q->nr;

	q->heap[0] = q->heap[n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;

		if (l < n && timer_before(q->heap[l], q->heap[m]))
			m = l;
		if (r < n && timer_before(q->heap[r], q->heap[m]))
			m = r;
		if (m == i)
			break;
		heap_swap(q->heap, i, m);
		i = m;
	}
	return top;
}

static void *timerq_main(void *arg)
{
	struct be_timerq *q = arg;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct be_timer *t;

		if (!q->nr) {
			if (q->stop)
				break;
			pthread_cond_wait(&q->cv, &q->lock);
			continue;
		}
		/* Stopping fires everything now: nobody waits for the time. */
		if (!q->stop && q->heap[0]->due_ns > blk_now_ns()) {
			blk_cond_wait_until(&q->cv, &q->lock, q->heap[0]->due_ns);
			continue;
		}
		t = timerq_pop_locked(q);
		pthread_mutex_unlock(&q->lock);
		t->fire(t);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int be_timerq_init(struct be_timerq *q, size_t cap)
{
	int ret;

	memset(q, 0, sizeof(*q));
	q->cap = cap ? cap : 1;
	q->heap = calloc(q->cap, sizeof(*q->heap));
	if (!q->heap)
		return -ENOMEM;
	ret = -pthread_mutex_init(&q->lock, NULL);
	if (ret)
		goto out_free;
	/* Due times are CLOCK_MONOTONIC: a wall-clock jump must not stall I/O. */
	ret = -blk_cond_init(&q->cv);
	if (ret)
		goto out_destroy_lock;
	ret = -pthread_create(&q->thread, NULL, timerq_main, q);
	if (ret)
		goto out_destroy_cv;
	return 0;

out_destroy_cv:
	pthread_cond_destroy(&q->cv);
out_destroy_lock:
	pthread_mutex_destroy(&q->lock);
out_free:
	free(q->heap);
	q->heap = NULL;
	return ret;
}

int be_timerq_add(struct be_timerq *q, struct be_timer *t, uint64_t due_ns)
{
	size_t i;

	t->due_ns = due_ns;
	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		t->fire(t);
		return 0;
	}
	if (q->nr == q->cap) {
		size_t cap = 2 * q->cap;
		struct be_timer **h = realloc(q->heap, cap * sizeof(*h));

		if (!h) {
			pthread_mutex_unlock(&q->lock);
			return -ENOMEM;
		}
		q->heap = h;
		q->cap = cap;
		q->nr_grows++;
	}
	t->seq = q->seq++;
	i = q->nr++;
	q->heap[i] = t;
	while (i && timer_before(q->heap[i], q->heap[(i - 1) / 2])) {
		heap_swap(q->heap, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	/* Only a new earliest due time changes what the thread waits for. */
	if (q->heap[0] == t)
		pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	return 0;
}

size_t be_timerq_len(struct be_timerq *q)
{
	size_t n;

	pthread_mutex_lock(&q->lock);
	n = q->nr;
	pthread_mutex_unlock(&q->lock);
	return n;
}

uint64_t be_timerq_grows(struct be_timerq *q)
{
	uint64_t n;

	pthread_mutex_lock(&q->lock);
	n = q->nr_grows;
	pthread_mutex_unlock(&q->lock);
	return n;
}

void be_timerq_stop(struct be_timerq *q)
{
	pthread_mutex_lock(&q->lock);
	q->stop = true;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
}

void be_timerq_destroy(struct be_timerq *q)
{
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->lock);
	free(q->heap);
	q->heap = NULL;
}

bool blk_snap_name_valid(const char *name)
{
	size_t i;

	if (!name || !name[0] || name[0] == '.' || name[0] == '-')
		return false;
	for (i = 0; name[i]; i++) {
		char c = name[i];

		if (i == BLK_SNAP_NAME_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '+' || c == '@' || c == ':'))
			return false;
	}
	return true;
}

int be_filter_snap_create(struct blk_backend *be, const char *name)
{
	return blk_snap_create(be->next, name);
}

int be_filter_snap_destroy(struct blk_backend *be, const char *name)
{
	return blk_snap_destroy(be->next, name);
}

int be_filter_snap_reset(struct blk_backend *be, const char *name)
{
	return blk_snap_reset(be->next, name);
}

int be_filter_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	return blk_snap_list(be->next, v, nr);
}

int be_filter_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	return blk_snap_save(be->next, name, path);
}

const struct blk_snap_ops be_filter_snap_ops = {
	.create = be_filter_snap_create,
	.destroy = be_filter_snap_destroy,
	.reset = be_filter_snap_reset,
	.list = be_filter_snap_list,
	.save = be_filter_snap_save,
};
