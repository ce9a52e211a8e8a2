// SPDX-License-Identifier: MIT
/*
 * backends/filters/delay.c - the delay filter: holds each I/O for a set time before
 * passing it on, so latency = delay + the layer below. A slow HDD, a
 * stalling SSD, a far-away NBD server, a slow region of a disk, an SSD's
 * garbage-collection tail, without one (nbdkit's delay filter and dm-delay
 * are the models).
 *
 * Keys (and live attrs of the same names, .sys/DEV/delay/ATTR):
 *	read, write, flush, discard
 *			the delay of each op (discard also for WRITE_ZEROES):
 *			a duration (blk_parse_duration: `0`, `500us`, `2ms`;
 *			a bare non-zero number is refused) up to 1h, or a
 *			range `1ms-5ms`, each I/O then drawing its delay
 *			uniformly from it (so I/Os of one type may pass each
 *			other, as on a real disk)
 *	map		a latency map: `OFFSET LENGTH LATENCY` per entry (bytes
 *			with K/M/G/T; LATENCY as above; comma-separated in the
 *			config, one per line in .sys). An I/O with a range that
 *			overlaps entries takes the longest of their latencies
 *			in place of its op's delay: a slow (or fast) region.
 *			Storing lines adds them, `clear` empties it; at most
 *			DELAY_MAX_MAP entries, inside the device.
 *	p90, p99, p999, p9999
 *			tail latency: 10%, 1%, 0.1%, 0.01% of I/Os (every op)
 *			take at least this long (`p99 = 20ms`: the slowest
 *			1% take 20ms, as a real SSD's garbage collection
 *			shows). One draw per I/O picks its tail, the rarest
 *			first; a tail never makes an I/O faster than its
 *			delay would. 0 (the default) is no tail.
 *	seed		the random stream of ranges and tails (a number, or
 *			auto: from the clock); printed to the daemon log at
 *			open and at each store, so a run replays
 *	pool		I/Os the filter can hold without allocating (config
 *			only; delay_pool* in the stat say how it went)
 *
 * submit() never sleeps: an I/O with a delay goes down as a child blk_io
 * (taken from a pool filled at open) on a timer queue, whose thread passes
 * it on when due; close can then wait for every child. An I/O with no delay
 * goes on at once, itself, from submit(): nothing of the filter's is in it,
 * and a filter in the stack with nothing configured costs one atomic load.
 *
 * Lock: dd->lock covers the delays, the map, the tails, the in-flight count
 * and the random state; it is never held across a submit below or an
 * end_io. The pool and the timer queue have their own locks, taken alone.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../backends_int.h"
#include "../kit/knobs.h"

#define DELAY_MAX_NS	(3600ull * 1000000000)	/* 1h: longer is surely a typo */
#define DELAY_TEXT_MAX	64			/* the longest value taken */
#define DELAY_MAX_MAP	256			/* the listing fits a .sys read */
#define DELAY_MAP_TEXT_MAX (96 * DELAY_MAX_MAP)	/* the longest map store taken */

enum delay_kind { DL_READ, DL_WRITE, DL_FLUSH, DL_DISCARD, DL_NR };

/* Tails, the rarest first: the order one draw tests them in. */
enum delay_tail { DT_P9999, DT_P999, DT_P99, DT_P90, DT_NR };

static const double tail_fraction[DT_NR] = {
	[DT_P9999] = 0.0001,
	[DT_P999] = 0.001,
	[DT_P99] = 0.01,
	[DT_P90] = 0.1,
};

/* [lo_ns, hi_ns]; lo == hi for a fixed delay. */
struct delay_range {
	uint64_t lo_ns;
	uint64_t hi_ns;
};

/* [pos, pos + len) takes @lat. */
struct delay_map_ent {
	uint64_t pos;
	uint64_t len;
	struct delay_range lat;
};

/* A child I/O: held on the timer queue, then passed down. From dd->pool. */
struct delay_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;		/* the cache's; completed once */
	struct delay_dev *dd;
	struct be_timer timer;
};

struct delay_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages; set at open */
	uint64_t size;			/* the device's; set at open */
	struct be_pool pool;		/* struct delay_io */
	struct be_timerq tq;
	/*
	 * Atomic: something is configured (a delay, a map entry or a tail).
	 * Written under lock by every store; read without it by submit(),
	 * which with nothing configured passes the I/O on untouched.
	 */
	bool active;
	bool seed_said;			/* atomic: the first I/O said the seed */

	pthread_mutex_t lock;
	pthread_cond_t idle_cv;		/* to close: inflight reached 0 */
	struct delay_range range[DL_NR];	/* lock */
	struct delay_range tail[DT_NR];	/* lock */
	struct delay_map_ent *map;	/* lock: DELAY_MAX_MAP entries, nr_map used */
	size_t nr_map;			/* lock */
	uint64_t seed;			/* lock: the stream's seed, as shown */
	uint64_t rng;			/* lock: splitmix64 state */
	uint64_t inflight;		/* lock: children not yet completed to the cache */
	unsigned int nr_pool;		/* the pool's size (config only) */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_delayed;		/* I/Os held for a non-zero time */
	uint64_t nr_map_hits;		/* I/Os that took a map latency */
	uint64_t nr_tail;		/* I/Os that took a tail latency */
	uint64_t nr_timer_full;		/* could not be queued (ENOMEM): refused */
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

/* ---- delays: a duration ("0", "500us", "2ms", "1s") or a range "1ms-5ms" ---- */

/* One duration of @s/@n (blanks around it allowed); -EINVAL or -ERANGE (> 1h). */
static int parse_one(const char *s, size_t n, uint64_t *ns)
{
	char tmp[DELAY_TEXT_MAX];
	int ret;

	while (n && (*s == ' ' || *s == '\t'))
		s++, n--;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (!n || n >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	/* A bare number is only clear when it is 0: 5 what? */
	ret = blk_parse_duration(tmp, 0, ns);
	if (!ret && *ns > DELAY_MAX_NS)
		ret = -ERANGE;
	return ret;
}

/* @s, @n: a duration or LO-HI with LO <= HI; -EINVAL or -ERANGE (> 1h). */
static int parse_range(const char *s, size_t n, struct delay_range *r)
{
	const char *dash = memchr(s, '-', n);
	struct delay_range v;
	int ret;

	if (!dash) {
		ret = parse_one(s, n, &v.lo_ns);
		if (!ret)
			v.hi_ns = v.lo_ns;
	} else {
		ret = parse_one(s, (size_t)(dash - s), &v.lo_ns);
		if (!ret)
			ret = parse_one(dash + 1, n - (size_t)(dash - s) - 1, &v.hi_ns);
		if (!ret && v.lo_ns > v.hi_ns)
			ret = -EINVAL;
	}
	if (!ret)
		*r = v;
	return ret;
}

/* In the largest unit that says it exactly: 2000us is "2ms". */
static void format_range(char *buf, size_t len, const struct delay_range *r)
{
	int n = blk_format_duration(buf, len, r->lo_ns);

	if (r->hi_ns != r->lo_ns && n >= 0 && (size_t)n + 1 < len) {
		buf[n++] = '-';
		blk_format_duration(buf + n, len - (size_t)n, r->hi_ns);
	}
}

/*
 * The entries of a map text (@sep between entries) into @out (room for
 * @room): each `OFFSET LENGTH LATENCY` inside the device. Returns how many,
 * -EINVAL for a malformed one, -ENOSPC past @room.
 */
static int parse_map(const char *s, size_t n, char sep, uint64_t size,
		     struct delay_map_ent *out, size_t room)
{
	char tok[3][32];
	size_t cnt = 0;
	int nt;

	while ((nt = be_entries(&s, &n, sep, tok, 3)) != -ENOENT) {
		struct delay_map_ent e;

		if (nt < 0)
			return -EINVAL;
		if (!nt)
			continue;
		if (nt != 3 || blk_parse_size(tok[0], &e.pos) || blk_parse_size(tok[1], &e.len) ||
		    parse_range(tok[2], strlen(tok[2]), &e.lat))
			return -EINVAL;
		if (!e.len || e.pos >= size || e.len > size - e.pos)
			return -EINVAL;
		if (cnt == room)
			return -ENOSPC;
		out[cnt++] = e;
	}
	return (int)cnt;
}

/* ---- deciding ---- */

/* A delay in [lo, hi], uniform. Caller holds dd->lock. */
static uint64_t pick_locked(struct delay_dev *dd, const struct delay_range *r)
{
	if (r->lo_ns == r->hi_ns)
		return r->lo_ns;
	return r->lo_ns + be_rand_below(&dd->rng, r->hi_ns - r->lo_ns + 1);
}

/* Caller holds dd->lock. */
static void update_active_locked(struct delay_dev *dd)
{
	bool a = dd->nr_map > 0;
	int i;

	for (i = 0; i < DL_NR; i++)
		a |= dd->range[i].hi_ns > 0;
	for (i = 0; i < DT_NR; i++)
		a |= dd->tail[i].hi_ns > 0;
	__atomic_store_n(&dd->active, a, __ATOMIC_RELAXED);
}

/* The delay of @io: its op's, or the map's where it hits, then a tail. */
static uint64_t delay_pick(struct delay_dev *dd, const struct blk_io *io)
{
	uint64_t ns, m = 0;
	bool hit = false, tail = false;
	size_t i;

	pthread_mutex_lock(&dd->lock);
	ns = pick_locked(dd, &dd->range[op_kind(io->op)]);
	if (io->op != BLK_FLUSH) {
		for (i = 0; i < dd->nr_map; i++) {
			const struct delay_map_ent *e = &dd->map[i];
			uint64_t v;

			if (io->pos >= e->pos + e->len || e->pos >= io->pos + io->len)
				continue;
			v = pick_locked(dd, &e->lat);
			m = hit && m > v ? m : v;
			hit = true;
		}
		if (hit)
			ns = m;
	}
	for (i = 0; i < DT_NR; i++)
		if (dd->tail[i].hi_ns)
			break;
	if (i < DT_NR) {
		/* one draw per I/O, whatever it picks: the stream stays in step */
		double u = be_rand01(&dd->rng);

		for (i = 0; i < DT_NR; i++) {
			uint64_t v;

			if (!dd->tail[i].hi_ns || u >= tail_fraction[i])
				continue;
			v = pick_locked(dd, &dd->tail[i]);
			if (v > ns)
				ns = v;
			tail = true;
			break;
		}
	}
	pthread_mutex_unlock(&dd->lock);
	if (hit)
		__atomic_add_fetch(&dd->nr_map_hits, 1, __ATOMIC_RELAXED);
	if (tail)
		__atomic_add_fetch(&dd->nr_tail, 1, __ATOMIC_RELAXED);
	return ns;
}

/* ---- I/O ---- */

/* The I/O we held ended; @res goes to the cache. */
static void delay_end_io(struct blk_io *io, int res)
{
	struct delay_io *c = (struct delay_io *)io;
	struct delay_dev *dd = c->dd;
	struct blk_io *parent = c->parent;

	parent->done = res ? io->done : 0;
	be_pool_put(&dd->pool, c);
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

/* Due: pass it on (from the timer thread, or from close). */
static void delay_fire(struct be_timer *t)
{
	struct delay_io *c = (struct delay_io *)((char *)t - offsetof(struct delay_io, timer));
	int ret = blk_submit(c->dd->be.next, &c->io);

	/* We took the parent: a refusal below becomes its completion. */
	if (ret)
		delay_end_io(&c->io, ret);
}

/* The seed again at the first I/O: stderr is the daemon's log by then. */
static int delay_submit(struct blk_backend *be, struct blk_io *io)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	struct delay_io *c;
	uint64_t ns;
	int ret;

	if (be_first_io(&dd->seed_said))
		be_say_seed_first_io(&dd->lock, &dd->seed, "delay", dd->dev);
	if (!__atomic_load_n(&dd->active, __ATOMIC_RELAXED))
		return blk_submit(be->next, io);
	ns = delay_pick(dd, io);
	if (!ns)
		return blk_submit(be->next, io);

	c = be_pool_get(&dd->pool);
	if (!c)
		return -ENOMEM;
	c->io = be_child_io(io, delay_end_io, c);
	/* the timer thread submits it: nobody waits in that thread */
	c->io.flags &= ~BLK_IO_WAITED;
	c->parent = io;
	c->dd = dd;
	c->timer.fire = delay_fire;
	pthread_mutex_lock(&dd->lock);
	dd->inflight++;
	pthread_mutex_unlock(&dd->lock);
	ret = be_timerq_add(&dd->tq, &c->timer, blk_now_ns() + ns);
	if (ret) {
		__atomic_add_fetch(&dd->nr_timer_full, 1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&dd->lock);
		if (!--dd->inflight)
			pthread_cond_broadcast(&dd->idle_cv);
		pthread_mutex_unlock(&dd->lock);
		be_pool_put(&dd->pool, c);
		return ret;
	}
	__atomic_add_fetch(&dd->nr_delayed, 1, __ATOMIC_RELAXED);
	return 0;
}

/* ---- open, close, geometry, stat ---- */

/* ---- the knobs: config keys and .sys/DEV/delay/ ---- */

/* A delay (or a tail): a duration or a range, as the config and .sys give it. */
static void range_def(const struct bk_knob *k, void *f)
{
	(void)k;
	memset(f, 0, sizeof(struct delay_range));
}

static int range_parse(const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	return parse_range(s, strlen(s), out) ? -EINVAL : 0;
}

static int range_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	int ret = parse_range(s, strlen(s), out);

	if (ret == -ERANGE)
		return blk_param_error(p, k->name, "'%s' is too long (allowed: at most 1h = 3600s)", s);
	if (ret)
		return blk_param_error(p, k->name,
			"'%s' is not a delay (allowed: 0, a duration (" BLK_DURATION_HELP "), or a range LO-HI such as 1ms-5ms)",
			s);
	return 0;
}

static int range_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	format_range(buf, len, v);
	return (int)strlen(buf);
}

static const struct bk_type bk_type_range = {
	.size = sizeof(struct delay_range),
	.set_def = range_def,
	.param = range_param,
	.parse = range_parse,
	.format = range_format,
};
#define BK_AUX_range(f_)	0

/* A store under dd->lock; I/Os already held keep their due time. */
static void active_changed(struct blk_backend *be)
{
	update_active_locked((struct delay_dev *)be);
}

static int attr_map_show(struct blk_backend *be, char *buf, size_t len);
static int attr_map_store(struct blk_backend *be, const char *buf, size_t len);

#define DELAY_KNOBS(K)										\
	K(read,    range, range[DL_READ],    0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(write,   range, range[DL_WRITE],   0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(flush,   range, range[DL_FLUSH],   0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(discard, range, range[DL_DISCARD], 0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(map,     none,  map,               0, DELAY_MAX_MAP, 0, "entries", OWN, NULL)		\
	K(p90,     range, tail[DT_P90],      0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(p99,     range, tail[DT_P99],      0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(p999,    range, tail[DT_P999],     0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(p9999,   range, tail[DT_P9999],    0, DELAY_MAX_NS, 0, "ns", RW, active_changed)	\
	K(seed,    seed,  seed,              0, 0, 0, "", RW, NULL)					\
	K(pool,    pool,  nr_pool,           1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)

BK_DEFINE(delay, struct delay_dev, lock, NULL, DELAY_KNOBS);

/*
 * The device's size changed (blk_resize()): ranges given from now on are
 * checked against the new end; those given before stay as they are (I/O
 * never reaches a part of them past the end).
 */
static int delay_resize(struct blk_backend *be, uint64_t *size)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	int ret = blk_resize(be->next, size);

	if (!ret)
		__atomic_store_n(&dd->size, *size, __ATOMIC_RELAXED);
	return ret;
}

static struct blk_backend *delay_open(struct blk_params *p, struct blk_backend *next)
{
	struct blk_geometry geo;
	struct delay_dev *dd;
	const char *s;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the delay filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	next->ops->geometry(next, &geo);
	dd = calloc(1, sizeof(*dd));
	if (!dd) {
		blk_param_error(p, NULL, "cannot set up the delay filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	dd->dev = p->dev ? p->dev : "?";
	dd->size = geo.size;
	dd->map = calloc(DELAY_MAX_MAP, sizeof(*dd->map));
	if (!dd->map) {
		ret = -ENOMEM;
		blk_param_error(p, NULL, "cannot set up the delay filter: out of memory");
		goto out_free;
	}
	ret = bk_params(&bk_table, p, &dd->be);
	if (ret)
		goto out_free;
	s = blk_param_get(p, "map");
	if (s) {
		ret = parse_map(s, strlen(s), ',', dd->size, dd->map, DELAY_MAX_MAP);
		if (ret < 0) {
			ret = blk_param_error(p, "map",
				"'%s' is not a latency map inside the device (allowed: OFFSET LENGTH LATENCY, comma-separated, at most %d, with OFFSET + LENGTH <= %llu and LATENCY a delay such as 20ms or 5ms-50ms)",
				s, DELAY_MAX_MAP, (unsigned long long)dd->size);
			goto out_free;
		}
		dd->nr_map = (size_t)ret;
	}
	update_active_locked(dd);

	ret = be_pool_init(&dd->pool, dd->nr_pool, sizeof(struct delay_io), 64);
	if (ret)
		goto out_err;
	ret = -pthread_mutex_init(&dd->lock, NULL);
	if (ret)
		goto out_destroy_pool;
	ret = -pthread_cond_init(&dd->idle_cv, NULL);
	if (ret)
		goto out_destroy_lock;
	ret = be_timerq_init(&dd->tq, dd->nr_pool);
	if (ret)
		goto out_destroy_idle_cv;
	dd->be.ops = &delay_filter_ops;
	dd->be.next = next;
	be_say_seed("delay", dd->dev, dd->seed, "at open");
	return &dd->be;

out_destroy_idle_cv:
	pthread_cond_destroy(&dd->idle_cv);
out_destroy_lock:
	pthread_mutex_destroy(&dd->lock);
out_destroy_pool:
	be_pool_destroy(&dd->pool);
out_err:
	blk_param_error(p, NULL, "cannot set up the delay filter: %s", strerror(-ret));
out_free:
	free(dd->map);
	free(dd);
	return ERR_PTR(ret);
}

/*
 * Pass on what is still held (at once: nobody is left to wait for the
 * delay), then wait until every child has completed to its submitter, so
 * the layer below, closed next, sees none of ours.
 */
static void delay_close(struct blk_backend *be)
{
	struct delay_dev *dd = (struct delay_dev *)be;

	be_timerq_stop(&dd->tq);
	pthread_mutex_lock(&dd->lock);
	while (dd->inflight)
		pthread_cond_wait(&dd->idle_cv, &dd->lock);
	pthread_mutex_unlock(&dd->lock);

	be_timerq_destroy(&dd->tq);
	pthread_cond_destroy(&dd->idle_cv);
	pthread_mutex_destroy(&dd->lock);
	be_pool_destroy(&dd->pool);
	free(dd->map);
	free(dd);
}

static size_t delay_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	size_t n;

	n = be_stat_printf(buf, len,
			   "delayed_ios %llu\ndelay_held_ios %zu\ndelay_map_hits %llu\n"
			   "delay_tail_ios %llu\ndelay_refused_ios %llu\ndelay_timer_grows %llu\n",
			   (unsigned long long)__atomic_load_n(&dd->nr_delayed, __ATOMIC_RELAXED),
			   be_timerq_len(&dd->tq),
			   (unsigned long long)__atomic_load_n(&dd->nr_map_hits, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&dd->nr_tail, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&dd->nr_timer_full, __ATOMIC_RELAXED),
			   (unsigned long long)be_timerq_grows(&dd->tq));
	return n + be_pool_stat(&dd->pool, "delay", buf + n, len - n);
}

/* ---- the map's attr: .sys/DEV/delay/map ---- */

/* One `OFFSET LENGTH LATENCY` line per entry, in the order added. */
static int attr_map_show(struct blk_backend *be, char *buf, size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	size_t i, off = 0;
	int ret = 0;

	if (!len)
		return -EOVERFLOW;
	buf[0] = '\0';
	pthread_mutex_lock(&dd->lock);
	for (i = 0; i < dd->nr_map; i++) {
		char lat[DELAY_TEXT_MAX];
		int n;

		format_range(lat, sizeof(lat), &dd->map[i].lat);
		n = snprintf(buf + off, len - off, "%llu %llu %s\n",
			     (unsigned long long)dd->map[i].pos,
			     (unsigned long long)dd->map[i].len, lat);
		if (n < 0 || (size_t)n >= len - off) {
			ret = -EOVERFLOW;
			break;
		}
		off += (size_t)n;
	}
	pthread_mutex_unlock(&dd->lock);
	return ret ? ret : (int)off;
}

/* `clear`, or lines to add; all or nothing. */
static int attr_map_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct delay_dev *dd = (struct delay_dev *)be;
	struct delay_map_ent *add;
	char s[8];
	size_t room;
	int ret;

	if (!len || len > DELAY_MAP_TEXT_MAX || memchr(buf, '\0', len))
		return -EINVAL;
	if (!be_attr_text(buf, len, s, sizeof(s)) && !strcasecmp(s, "clear")) {
		pthread_mutex_lock(&dd->lock);
		dd->nr_map = 0;
		update_active_locked(dd);
		pthread_mutex_unlock(&dd->lock);
		return 0;
	}
	/* parsed outside the lock, into a scratch copy: the map changes only whole */
	add = malloc(DELAY_MAX_MAP * sizeof(*add));
	if (!add)
		return -ENOMEM;
	pthread_mutex_lock(&dd->lock);
	room = DELAY_MAX_MAP - dd->nr_map;
	pthread_mutex_unlock(&dd->lock);
	ret = parse_map(buf, len, '\n', dd->size, add, room);
	if (ret <= 0) {
		free(add);
		return -EINVAL;
	}
	pthread_mutex_lock(&dd->lock);
	/* Another store may have added meanwhile: check the room again. */
	if (dd->nr_map + (size_t)ret > DELAY_MAX_MAP) {
		ret = -EINVAL;
	} else {
		memcpy(dd->map + dd->nr_map, add, (size_t)ret * sizeof(*add));
		dd->nr_map += (size_t)ret;
		update_active_locked(dd);
		ret = 0;
	}
	pthread_mutex_unlock(&dd->lock);
	free(add);
	return ret;
}

const struct blk_backend_ops delay_filter_ops = {
	.name = "delay",
	.is_filter = true,
	.keys = delay_keys,
	.help = "delay: hold I/O before passing it on; delay.read/write/flush/discard = 2ms, 500us or 1ms-5ms, "
		"delay.map = OFFSET LENGTH LATENCY, ..., delay.p90/p99/p999/p9999 = 20ms (tail latency), "
		"delay.seed = N|auto, delay.pool = 256",
	.open = delay_open,
	.close = delay_close,
	.geometry = be_filter_geometry,
	.resize = delay_resize,
	.submit = delay_submit,
	.stat = delay_stat,
	.attrs = delay_attrs,
	.snap = &be_filter_snap_ops,
};
