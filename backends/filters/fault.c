// SPDX-License-Identifier: MIT
/*
 * backends/filters/fault.c - the fault filter: fails chosen I/O with a chosen errno,
 * or holds it (a hang), so a test (or a person) can see what the cache, the
 * daemon and the software above make of a failing disk. A failed I/O is
 * completed with the error and never passed to the layer below: a failed
 * write changes nothing.
 *
 * Keys (and live attrs of the same names, .sys/DEV/fault/ATTR):
 *	ops		which ops the knobs below apply to: a comma-separated
 *			list of read, write, flush, discard (discard also
 *			covers WRITE_ZEROES), or all; default write
 *	errno		the error injected: a name (EIO, ENOSPC, ENOMEM,
 *			EROFS, ...) or a number; default EIO
 *	probability	0..1: each matching op fails with this chance; default 0
 *	after		N: once N matching ops have passed, the next one fails;
 *			off (default) disarms it
 *	persistent	yes: once a fault has fired, every later matching op
 *			fails too, until a knob is stored again; no (default):
 *			`after` fires once and disarms itself (shows off)
 *	hang		yes: a fault that fires holds its I/O instead of failing
 *			it (the device stops answering): it is passed on only
 *			when released (the `release` attr) or after
 *			hang_timeout; no (default): it fails with errno
 *	hang_timeout	a duration: a hung I/O is passed on after this long;
 *			0 (default): only `release` ends a hang
 *	badblocks	a bad-block map, one `OFFSET LENGTH [ERRNO]` per line
 *			(bytes, K/M/G/T suffixes taken; ERRNO defaults to EIO;
 *			in the config, entries separated by commas). Any READ,
 *			WRITE, DISCARD or WRITE_ZEROES overlapping a range
 *			fails with its errno, whatever `ops` says. Storing
 *			lines adds them; `clear` empties the map; a malformed
 *			line or a range outside the device is EINVAL and
 *			nothing changes.
 *	badblocks_once	yes: an I/O that fails on the map clears the part of the
 *			ranges it covered, so each bad block fails once and then
 *			works (null_blk's badblocks_once)
 *	badblocks_clear_on_write
 *			yes: a WRITE, DISCARD or WRITE_ZEROES over bad blocks
 *			succeeds and clears the part it covered, as a drive
 *			remaps a sector; reads still fail until then (dm-dust)
 *	badblocks_partial_io
 *			yes: a READ or WRITE that reaches a bad range after its
 *			first logical block completes up to it and fails from
 *			it (null_blk's badblocks_partial_io): the part before is
 *			passed on as an I/O of its own, and the I/O ends with the
 *			range's errno and blk_io.done = that part
 *	seed		the random stream of `probability` (a number, or auto:
 *			from the clock); printed to the daemon log
 *	enabled		no: everything passes (the map and the knobs are kept)
 *	pool		how many hung I/Os are held without allocating (config only)
 * Attrs only: `release` (write 1 or all: every hung I/O is passed on; an
 * errno name: each fails with it) and `hung` (read-only: how many are held).
 *
 * Storing `after`, `persistent`, `hang` or `enabled` re-arms: the count of
 * matching ops restarts at 0 and a persistent fault that had fired stops
 * firing.
 *
 * A hung I/O is the cache's own blk_io on fd->hung (its record from a pool
 * filled at open); the hang thread passes it on at its timeout, `release`
 * in the storing thread, close all at once. Whoever takes it off the list
 * under fd->lock is the one who ends it.
 *
 * Lock: fd->lock covers every knob, the map, the count, the random state
 * and the hung list; it is held only to decide, never across a submit or
 * an end_io.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "../backends_int.h"
#include "../kit/knobs.h"
#include "../kit/ranges.h"
#include "../lib/trace.h"

#define FAULT_AFTER_OFF	UINT64_MAX
#define FAULT_MAX_BAD	256		/* the listing fits a .sys read */
#define FAULT_TEXT_MAX	(64 * FAULT_MAX_BAD)	/* the longest store taken */
#define FAULT_SAY_CLEARS 10		/* clears said in the log, then only counted */
#define FAULT_MAX_HANG_NS (24 * 3600ull * 1000000000)	/* hang_timeout: at most 1 day */

/* Op bits; discard covers BLK_DISCARD and BLK_WRITE_ZEROES. */
enum {
	FO_READ = 1u << 0,
	FO_WRITE = 1u << 1,
	FO_FLUSH = 1u << 2,
	FO_DISCARD = 1u << 3,
	FO_ALL = FO_READ | FO_WRITE | FO_FLUSH | FO_DISCARD,
};

static const struct {
	const char *name;
	unsigned int bit;
} fault_op_names[] = {
	{ "read", FO_READ },
	{ "write", FO_WRITE },
	{ "flush", FO_FLUSH },
	{ "discard", FO_DISCARD },
};

#define NR_OP_NAMES (sizeof(fault_op_names) / sizeof(fault_op_names[0]))

/* The part before a bad range, passed on alone (badblocks_partial_io). From fd->part_pool. */
#define FAULT_PART_IOV 16
struct fault_part {
	struct blk_io io;		/* must come first */
	struct fault_dev *fd;
	struct blk_io *parent;
	int err;			/* the bad range's errno: the rest's */
	struct iovec iov[FAULT_PART_IOV];
};

/* A hung I/O: the cache's blk_io, held on fd->hung. From fd->pool. */
struct fault_hang {
	struct fault_hang *next;	/* fd->lock */
	struct blk_io *io;
	uint64_t since_ns;
};

struct fault_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages; set at open */
	struct bt_dev *bt;		/* trace state (message notes); NULL: none */
	uint64_t size;			/* the device's; set at open */
	uint32_t lbs;			/* its logical block size */
	struct be_pool pool;		/* struct fault_hang */
	struct be_pool part_pool;	/* struct fault_part */
	pthread_t hang_thread;
	bool seed_said;			/* atomic: the first I/O said the seed */

	pthread_mutex_t lock;
	pthread_cond_t hang_cv;		/* to the hang thread: new hang, timeout, stop */
	unsigned int ops;		/* lock: FO_* */
	int err;			/* lock: positive errno */
	double probability;		/* lock */
	uint64_t after;			/* lock: FAULT_AFTER_OFF or N */
	uint64_t passed;		/* lock: matching ops let through since armed */
	bool persistent;		/* lock */
	bool fired;			/* lock: a persistent fault has fired */
	bool enabled;			/* lock */
	bool said;			/* lock: the first injection since armed was logged */
	bool hang;			/* lock */
	bool once;			/* lock: badblocks_once */
	bool clear_on_write;		/* lock: badblocks_clear_on_write */
	bool partial_io;		/* lock: badblocks_partial_io */
	bool stop;			/* lock: closing; the hang thread passes all on */
	uint64_t hang_timeout_ns;	/* lock: 0 = until released */
	uint64_t seed;			/* lock: the stream's seed, as shown */
	unsigned int nr_pool;		/* the pools' size (config only) */
	uint64_t rng;			/* lock: splitmix64 state */
	struct be_range bad[FAULT_MAX_BAD];	/* lock: the map, in the order added; tag: the errno */
	size_t nr_bad;			/* lock */
	unsigned int nr_said_clears;	/* lock */
	struct fault_hang *hung, **hung_tail;	/* lock: oldest first */
	size_t nr_hung;			/* lock */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_injected;		/* every I/O failed here */
	uint64_t nr_bad_hits;		/* of those, by the bad-block map */
	uint64_t nr_matching;		/* ops the knobs applied to */
	uint64_t nr_cleared;		/* I/Os that cleared bad blocks (once, or a write) */
	uint64_t nr_hangs;		/* I/Os hung */
	uint64_t nr_released;		/* of those, ended by `release` */
	uint64_t nr_timed_out;		/* of those, passed on at hang_timeout */
	uint64_t nr_partial;		/* I/Os completed part way (partial_io) */
};

static unsigned int op_bit(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return FO_READ;
	case BLK_WRITE: return FO_WRITE;
	case BLK_FLUSH: return FO_FLUSH;
	default: return FO_DISCARD;	/* DISCARD, WRITE_ZEROES */
	}
}

/* ---- parsing: every parser takes a NUL-terminated, trimmed string ---- */

/* "read,write", "all": FO_* bits, or -EINVAL (an empty item is an error). */
static int parse_ops(const char *s)
{
	unsigned int mask = 0;
	const char *p = s;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		size_t i;

		while (n && (*p == ' ' || *p == '\t'))
			p++, n--;
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (!n)
			return -EINVAL;
		if (n == 3 && !strncasecmp(p, "all", 3)) {
			mask |= FO_ALL;
		} else {
			for (i = 0; i < NR_OP_NAMES; i++)
				if (strlen(fault_op_names[i].name) == n &&
				    !strncasecmp(p, fault_op_names[i].name, n))
					break;
			if (i == NR_OP_NAMES)
				return -EINVAL;
			mask |= fault_op_names[i].bit;
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	return (int)mask;
}

static void format_ops(unsigned int mask, char *buf, size_t len)
{
	size_t i, off = 0;

	buf[0] = '\0';
	for (i = 0; i < NR_OP_NAMES; i++) {
		int n;

		if (!(mask & fault_op_names[i].bit))
			continue;
		n = snprintf(buf + off, len - off, "%s%s", off ? "," : "",
			     fault_op_names[i].name);
		if (n < 0 || (size_t)n >= len - off)
			return;
		off += (size_t)n;
	}
}

/* "off" (also "none", "never") or a count below UINT64_MAX. */
static int parse_after(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!strcasecmp(s, "off") || !strcasecmp(s, "none") || !strcasecmp(s, "never")) {
		*out = FAULT_AFTER_OFF;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v >= FAULT_AFTER_OFF)
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * The bad-block entries of @s/@n (@sep between entries), each
 * "OFFSET LENGTH [ERRNO]" inside the device, into @out (room for @room).
 * Returns how many, -EINVAL for a malformed entry, -ENOSPC past @room.
 */
static int parse_bad_list(const char *s, size_t n, char sep, uint64_t size,
			  struct be_range *out, size_t room)
{
	return be_ranges_parse(s, n, sep, size, be_parse_errno, EIO, out, room);
}

/* ---- deciding ---- */

/* What becomes of an I/O. */
struct fault_verdict {
	int err;		/* fail with -err (0: not failed) */
	bool hang;		/* hold it instead */
	bool bad_hit;		/* the map failed it */
	bool cleared;		/* it cleared bad blocks */
	uint64_t partial;	/* badblocks_partial_io: the bytes before the bad range */
};

struct clear_ctx {
	struct fault_dev *fd;
	uint64_t pos, len;
	const char *why;
};

/* be_ranges_punch() cuts @r: said to the daemon log, the first few times. */
static void clear_said(void *arg, const struct be_range *r, bool full)
{
	struct clear_ctx *c = arg;
	struct fault_dev *fd = c->fd;
	uint64_t end = c->pos + c->len, r_end = r->pos + r->len;

	if (fd->nr_said_clears < FAULT_SAY_CLEARS) {
		uint64_t c0 = r->pos > c->pos ? r->pos : c->pos;
		uint64_t c1 = r_end < end ? r_end : end;

		blk_info("fault: %s: bad blocks %llu+%llu cleared by %s%s",
			fd->dev, (unsigned long long)c0, (unsigned long long)(c1 - c0), c->why,
			++fd->nr_said_clears == FAULT_SAY_CLEARS ?
			" (further clears are only counted: fault_badblocks_cleared)" : "");
	}
	if (full)
		blk_warn("fault: %s: the bad-block map is full (%d ranges): %s of %llu+%llu clears the smaller side of %llu+%llu too",
			fd->dev, FAULT_MAX_BAD, c->why, (unsigned long long)c->pos,
			(unsigned long long)c->len, (unsigned long long)r->pos,
			(unsigned long long)r->len);
}

/*
 * Take [pos, pos + len) out of the map. A range cut in the middle becomes
 * two; with the map full, the smaller piece is cleared too (said once):
 * a block more works, rather than a block written or failed once failing
 * again. Caller holds fd->lock.
 */
static void clear_bad_locked(struct fault_dev *fd, uint64_t pos, uint64_t len,
			     const char *why)
{
	struct clear_ctx c = { .fd = fd, .pos = pos, .len = len, .why = why };

	be_ranges_punch(fd->bad, &fd->nr_bad, FAULT_MAX_BAD, pos, len, clear_said, &c);
}

/* The whole logical blocks of @io before the first bad byte it covers. */
static uint64_t partial_locked(const struct fault_dev *fd, const struct blk_io *io)
{
	uint64_t first = be_ranges_first(fd->bad, fd->nr_bad, io->pos, io->len);

	return (first - io->pos) & ~(uint64_t)(fd->lbs - 1);
}

static bool is_write_op(enum blk_op op)
{
	return op == BLK_WRITE || op == BLK_DISCARD || op == BLK_WRITE_ZEROES;
}

/* What becomes of @io: the map first, then the knobs. */
static struct fault_verdict fault_decide(struct fault_dev *fd, const struct blk_io *io)
{
	struct fault_verdict v = { 0 };
	unsigned int bit = op_bit(io->op);
	size_t i;

	pthread_mutex_lock(&fd->lock);
	if (!fd->enabled)
		goto out_unlock;
	if (io->op != BLK_FLUSH) {
		i = be_ranges_find(fd->bad, fd->nr_bad, io->pos, io->len);
		if (i < fd->nr_bad) {
			if (fd->clear_on_write && is_write_op(io->op)) {
				/* remapped: the write goes on, the knobs below still apply */
				clear_bad_locked(fd, io->pos, io->len, blk_op_name(io->op));
				v.cleared = true;
			} else {
				v.err = fd->bad[i].tag;
				v.bad_hit = true;
				if (fd->partial_io && (io->op == BLK_READ || io->op == BLK_WRITE))
					v.partial = partial_locked(fd, io);
				if (fd->once) {
					clear_bad_locked(fd, io->pos, io->len, "a failed I/O (badblocks_once)");
					v.cleared = true;
				}
				goto out_unlock;
			}
		}
	}
	if (!(fd->ops & bit))
		goto out_unlock;
	__atomic_add_fetch(&fd->nr_matching, 1, __ATOMIC_RELAXED);
	if (fd->fired) {
		v.err = fd->err;
		goto out_fired;
	}
	if (fd->after != FAULT_AFTER_OFF) {
		if (fd->passed >= fd->after) {
			v.err = fd->err;
			if (!fd->persistent)
				fd->after = FAULT_AFTER_OFF;	/* fired once: disarmed */
		} else {
			fd->passed++;
		}
	}
	if (!v.err && fd->probability > 0 && be_rand01(&fd->rng) < fd->probability)
		v.err = fd->err;
	if (v.err && fd->persistent)
		fd->fired = true;
	if (v.err && !fd->said) {
		char eb[16], where[48] = "";

		fd->said = true;
		if (io->op != BLK_FLUSH)
			snprintf(where, sizeof(where), " at %llu+%llu", (unsigned long long)io->pos,
				 (unsigned long long)io->len);
		blk_warn("fault: %s: injecting %s into %s%s%s",
			fd->dev, fd->hang ? "a hang" : be_errno_name(v.err, eb, sizeof(eb)),
			blk_op_name(io->op), where,
			fd->persistent ? " (persistent: every later one too)" : "");
	}
out_fired:
	if (v.err && fd->hang) {
		v.err = 0;
		v.hang = true;
	}
out_unlock:
	pthread_mutex_unlock(&fd->lock);
	return v;
}

/* ---- partial completions ---- */

static void part_end_io(struct blk_io *io, int res)
{
	struct fault_part *c = (struct fault_part *)io;
	struct fault_dev *fd = c->fd;
	struct blk_io *parent = c->parent;
	int err = c->err;

	/* the part before the bad range ended: the I/O ends with the range's error */
	parent->done = res ? io->done : io->len;
	be_pool_put(&fd->part_pool, c);
	parent->end_io(parent, res ? res : -err);
}

/*
 * Pass on the first @part bytes of @io alone, then fail it with @err from
 * there. Returns -ENOMEM (nothing done) when the part's record cannot be
 * had or its vector is longer than a record holds.
 */
static int part_submit(struct fault_dev *fd, struct blk_io *io, uint64_t part, int err)
{
	struct fault_part *c = be_pool_get(&fd->part_pool);
	uint64_t left = part;
	int n = 0, ret;

	if (!c)
		return -ENOMEM;
	while (left) {
		if (n == FAULT_PART_IOV || n == io->iovcnt) {
			be_pool_put(&fd->part_pool, c);
			return -ENOMEM;
		}
		c->iov[n] = io->iov[n];
		if (c->iov[n].iov_len > left)
			c->iov[n].iov_len = left;
		left -= c->iov[n].iov_len;
		n++;
	}
	c->io = be_child_io(io, part_end_io, c);
	c->io.len = part;
	c->io.iov = c->iov;
	c->io.iovcnt = n;
	c->fd = fd;
	c->parent = io;
	c->err = err;
	ret = blk_submit(fd->be.next, &c->io);
	if (ret)
		part_end_io(&c->io, ret);
	return 0;
}

/* ---- hangs ---- */

/* Pass a hung I/O on (the hang is over) or fail it with @err. */
static void hang_end(struct fault_dev *fd, struct fault_hang *h, int err)
{
	struct blk_io *io = h->io;
	int ret;

	be_pool_put(&fd->pool, h);
	if (err) {
		io->end_io(io, -err);
		return;
	}
	ret = blk_submit(fd->be.next, io);
	/* We took it: a refusal below becomes its completion. */
	if (ret)
		io->end_io(io, ret);
}

/* Hold @io until released or timed out; -ENOMEM when no record can be had. */
static int hang_add(struct fault_dev *fd, struct blk_io *io)
{
	struct fault_hang *h = be_pool_get(&fd->pool);

	if (!h)
		return -ENOMEM;
	/* passed on later by another thread: nobody waits in that one */
	io->flags &= ~BLK_IO_WAITED;
	h->io = io;
	h->next = NULL;
	h->since_ns = blk_now_ns();
	pthread_mutex_lock(&fd->lock);
	*fd->hung_tail = h;
	fd->hung_tail = &h->next;
	fd->nr_hung++;
	pthread_cond_signal(&fd->hang_cv);
	pthread_mutex_unlock(&fd->lock);
	__atomic_add_fetch(&fd->nr_hangs, 1, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Take every hung I/O off the list (all, or those past their timeout at
 * @now) into a list of the caller's. Caller holds fd->lock.
 */
static struct fault_hang *hang_take_locked(struct fault_dev *fd, bool all, uint64_t now)
{
	struct fault_hang *taken = NULL, **tail = &taken, **pp = &fd->hung, *h;

	while ((h = *pp)) {
		if (all || (fd->hang_timeout_ns && now - h->since_ns >= fd->hang_timeout_ns)) {
			*pp = h->next;
			fd->nr_hung--;
			h->next = NULL;
			*tail = h;
			tail = &h->next;
		} else {
			pp = &h->next;
		}
	}
	fd->hung_tail = pp;
	return taken;
}

/* Ends each hang at its timeout; at close, all of them at once. */
static void *hang_main(void *arg)
{
	struct fault_dev *fd = arg;

	pthread_mutex_lock(&fd->lock);
	for (;;) {
		uint64_t now = blk_now_ns(), due = UINT64_MAX;
		struct fault_hang *taken, *h;
		bool stop = fd->stop;

		taken = hang_take_locked(fd, stop, now);
		if (taken) {
			pthread_mutex_unlock(&fd->lock);
			while ((h = taken)) {
				taken = h->next;
				if (!stop)
					__atomic_add_fetch(&fd->nr_timed_out, 1, __ATOMIC_RELAXED);
				hang_end(fd, h, 0);
			}
			pthread_mutex_lock(&fd->lock);
			continue;
		}
		if (stop)
			break;
		if (fd->hang_timeout_ns)
			for (h = fd->hung; h; h = h->next)
				if (h->since_ns + fd->hang_timeout_ns < due)
					due = h->since_ns + fd->hang_timeout_ns;
		if (due == UINT64_MAX)
			pthread_cond_wait(&fd->hang_cv, &fd->lock);
		else
			blk_cond_wait_until(&fd->hang_cv, &fd->lock, due);
	}
	pthread_mutex_unlock(&fd->lock);
	return NULL;
}

static int fault_submit(struct blk_backend *be, struct blk_io *io)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	struct fault_verdict v;

	if (be_first_io(&fd->seed_said))
		be_say_seed_first_io(&fd->lock, &fd->seed, "fault", fd->dev);
	v = fault_decide(fd, io);
	if ((v.hang || v.err) && bt_on(fd->bt, BT_LEVEL_DEV)) {
		char eb[16];

		bt_msg(fd->bt, "fault: %s at %llu (%s%s)", v.hang ? "hang" :
		       be_errno_name(v.err, eb, sizeof(eb)), (unsigned long long)(io->pos + v.partial),
		       bt_op_names[bt_op(io->op)], v.partial ? ", partial" : "");
	}

	if (v.cleared)
		__atomic_add_fetch(&fd->nr_cleared, 1, __ATOMIC_RELAXED);
	if (v.hang)
		return hang_add(fd, io);
	if (!v.err)
		return blk_submit(be->next, io);
	__atomic_add_fetch(&fd->nr_injected, 1, __ATOMIC_RELAXED);
	if (v.bad_hit)
		__atomic_add_fetch(&fd->nr_bad_hits, 1, __ATOMIC_RELAXED);
	if (v.partial && !part_submit(fd, io, v.partial, v.err)) {
		__atomic_add_fetch(&fd->nr_partial, 1, __ATOMIC_RELAXED);
		return 0;
	}
	/* Taken and failed, as a disk fails it: the error is the I/O's result. */
	io->done = 0;
	io->end_io(io, -v.err);
	return 0;
}

/* ---- the knobs: config keys and .sys/DEV/fault/ ---- */

/* Re-arm after a knob changed. Caller holds fd->lock. */
static void rearm_locked(struct fault_dev *fd)
{
	fd->passed = 0;
	fd->fired = false;
	fd->said = false;
}

/* The ops a fault applies to: FO_* bits, shown as "read,write" or "none". */
static int ops_parse(const struct bk_knob *k, const char *s, void *out)
{
	int ret = parse_ops(s);

	(void)k;
	if (ret < 0)
		return -EINVAL;
	*(unsigned int *)out = (unsigned int)ret;
	return 0;
}

static int ops_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	if (ops_parse(k, s, out))
		return blk_param_error(p, k->name, "'%s' is not a list of ops (allowed: %s)", s,
				       k->unit);
	return 0;
}

static int ops_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	format_ops(*(const unsigned int *)v, buf, len);
	if (!buf[0])
		snprintf(buf, len, "none");
	return (int)strlen(buf);
}

static void ops_def(const struct bk_knob *k, void *f)
{
	*(unsigned int *)f = (unsigned int)k->def;
}

static const struct bk_type bk_type_ops = {
	.size = sizeof(unsigned int),
	.set_def = ops_def,
	.param = ops_param,
	.parse = ops_parse,
	.format = ops_format,
};
#define BK_AUX_ops(f_)	0

/* `after`: a count of matching ops, or off (FAULT_AFTER_OFF). */
static int after_parse(const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	return parse_after(s, out) ? -EINVAL : 0;
}

static int after_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	if (parse_after(s, out))
		return blk_param_error(p, k->name, "'%s' is not a count of ops (allowed: %s)", s,
				       k->unit);
	return 0;
}

static int after_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	uint64_t a = *(const uint64_t *)v;

	(void)k;
	if (a == FAULT_AFTER_OFF)
		return snprintf(buf, len, "off");
	return snprintf(buf, len, "%llu", (unsigned long long)a);
}

static void after_def(const struct bk_knob *k, void *f)
{
	*(uint64_t *)f = k->def;
}

static const struct bk_type bk_type_after = {
	.size = sizeof(uint64_t),
	.set_def = after_def,
	.param = after_param,
	.parse = after_parse,
	.format = after_format,
};
#define BK_AUX_after(f_)	0

/*
 * Storing after, persistent, hang or enabled re-arms (the count restarts,
 * a persistent fault that fired stops firing); a new hang_timeout applies
 * to the I/Os hung now as well (each ends at its start + the new timeout).
 */
static void rearm(struct blk_backend *be)
{
	rearm_locked((struct fault_dev *)be);
}

static void hang_timeout_changed(struct blk_backend *be)
{
	pthread_cond_signal(&((struct fault_dev *)be)->hang_cv);
}

static int attr_release_show(struct blk_backend *be, char *buf, size_t len);
static int attr_release_store(struct blk_backend *be, const char *buf, size_t len);
static int attr_hung_show(struct blk_backend *be, char *buf, size_t len);
static int attr_badblocks_show(struct blk_backend *be, char *buf, size_t len);
static int attr_badblocks_store(struct blk_backend *be, const char *buf, size_t len);

#define FAULT_OPS	"read, write, flush, discard, comma-separated, or all"
#define FAULT_ERRNO	"a name such as EIO, ENOSPC, ENOMEM, EROFS, or a number"
#define FAULT_KNOBS(K)											\
	K(ops,          ops,         ops,         0, 0, FO_WRITE, FAULT_OPS, RW, NULL)			\
	K(errno,        errno,       err,         0, 0, EIO, FAULT_ERRNO, RW, NULL)			\
	K(probability,  probability, probability, 0, 1, 0, "0 to 1, such as 0.01", RW, NULL)		\
	K(after,        after,       after,       0, 0, FAULT_AFTER_OFF, "a number, or off", RW, rearm)	\
	K(persistent,   bool,        persistent,  0, 1, 0, "", RW, rearm)				\
	K(hang,         bool,        hang,        0, 1, 0, "", RW, rearm)				\
	K(hang_timeout, duration,    hang_timeout_ns, 0, FAULT_MAX_HANG_NS, 0, "ns", RW,		\
	  hang_timeout_changed)										\
	K(release,      none,        be,          0, 0, 0, "1, all, or an errno", ACT, NULL)		\
	K(hung,         none,        nr_hung,     0, 0, 0, "I/Os", OWNRO, NULL)				\
	K(badblocks,    none,        bad,         0, FAULT_MAX_BAD, 0, "OFFSET LENGTH [ERRNO]", OWN, NULL) \
	K(badblocks_once,           bool, once,           0, 1, 0, "", RW, NULL)			\
	K(badblocks_clear_on_write, bool, clear_on_write, 0, 1, 0, "", RW, NULL)			\
	K(badblocks_partial_io,     bool, partial_io,     0, 1, 0, "", RW, NULL)			\
	K(seed,         seed,        seed,        0, 0, 0, "", RW, NULL)					\
	K(enabled,      bool,        enabled,     0, 1, 1, "", RW, rearm)				\
	K(pool,         pool,        nr_pool,     1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)

BK_DEFINE(fault, struct fault_dev, lock, NULL, FAULT_KNOBS);

/* ---- open, close, geometry, stat ---- */

/*
 * The device's size changed (blk_resize()): ranges given from now on are
 * checked against the new end; those given before stay as they are (I/O
 * never reaches a part of them past the end).
 */
static int fault_resize(struct blk_backend *be, uint64_t *size)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	int ret = blk_resize(be->next, size);

	if (!ret)
		__atomic_store_n(&fd->size, *size, __ATOMIC_RELAXED);
	return ret;
}

static struct blk_backend *fault_open(struct blk_params *p, struct blk_backend *next)
{
	struct blk_geometry geo;
	struct fault_dev *fd;
	const char *s;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the fault filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	next->ops->geometry(next, &geo);
	fd = calloc(1, sizeof(*fd));
	if (!fd) {
		blk_param_error(p, NULL, "cannot set up the fault filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	fd->dev = p->dev ? p->dev : "?";
	fd->bt = p->dev ? bt_dev_get(p->dev) : NULL;
	fd->size = geo.size;
	fd->lbs = geo.lbs;
	fd->hung_tail = &fd->hung;

	ret = bk_params(&bk_table, p, &fd->be);
	if (ret)
		goto out_free;
	s = blk_param_get(p, "badblocks");
	if (s) {
		ret = parse_bad_list(s, strlen(s), ',', fd->size, fd->bad, FAULT_MAX_BAD);
		if (ret < 0) {
			ret = blk_param_error(p, "badblocks",
				"'%s' is not a list of bad ranges inside the device (allowed: OFFSET LENGTH [ERRNO], comma-separated, at most %d, with OFFSET + LENGTH <= %llu)",
				s, FAULT_MAX_BAD, (unsigned long long)fd->size);
			goto out_free;
		}
		fd->nr_bad = (size_t)ret;
	}
	ret = be_pool_init(&fd->pool, fd->nr_pool, sizeof(struct fault_hang), 64);
	if (ret)
		goto out_err;
	ret = be_pool_init(&fd->part_pool, fd->nr_pool, sizeof(struct fault_part), 64);
	if (ret) {
		be_pool_destroy(&fd->pool);
		goto out_err;
	}
	ret = -pthread_mutex_init(&fd->lock, NULL);
	if (ret)
		goto out_destroy_pool;
	/* Hang timeouts are CLOCK_MONOTONIC: a wall-clock jump must not end one. */
	ret = -blk_cond_init(&fd->hang_cv);
	if (ret)
		goto out_destroy_lock;
	ret = -pthread_create(&fd->hang_thread, NULL, hang_main, fd);
	if (ret)
		goto out_destroy_cv;
	fd->be.ops = &fault_filter_ops;
	fd->be.next = next;
	be_say_seed("fault", fd->dev, fd->seed, "at open");
	return &fd->be;

out_destroy_cv:
	pthread_cond_destroy(&fd->hang_cv);
out_destroy_lock:
	pthread_mutex_destroy(&fd->lock);
out_destroy_pool:
	be_pool_destroy(&fd->pool);
	be_pool_destroy(&fd->part_pool);
out_err:
	blk_param_error(p, NULL, "cannot set up the fault filter: %s", strerror(-ret));
out_free:
	free(fd);
	return ERR_PTR(ret);
}

/*
 * Every hung I/O is passed on now (nobody is left to release it); a passed
 * I/O is the layer below's, which is closed after us and waits for it.
 */
static void fault_close(struct blk_backend *be)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	pthread_mutex_lock(&fd->lock);
	fd->stop = true;
	pthread_cond_signal(&fd->hang_cv);
	pthread_mutex_unlock(&fd->lock);
	pthread_join(fd->hang_thread, NULL);
	pthread_cond_destroy(&fd->hang_cv);
	pthread_mutex_destroy(&fd->lock);
	be_pool_destroy(&fd->pool);
	be_pool_destroy(&fd->part_pool);
	free(fd);
}

static size_t fault_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	size_t n, hung, bad;

	pthread_mutex_lock(&fd->lock);
	hung = fd->nr_hung;
	bad = fd->nr_bad;
	pthread_mutex_unlock(&fd->lock);
	n = be_stat_printf(buf, len,
			   "fault_injected %llu\nfault_badblock_injected %llu\nfault_matching_ops %llu\n"
			   "fault_badblocks_cleared %llu\nfault_badblock_ranges %zu\n"
			   "fault_hangs %llu\nfault_hung_ios %zu\nfault_hangs_released %llu\n"
			   "fault_hangs_timed_out %llu\nfault_partial_ios %llu\n",
			   (unsigned long long)__atomic_load_n(&fd->nr_injected, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fd->nr_bad_hits, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fd->nr_matching, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fd->nr_cleared, __ATOMIC_RELAXED),
			   bad,
			   (unsigned long long)__atomic_load_n(&fd->nr_hangs, __ATOMIC_RELAXED),
			   hung,
			   (unsigned long long)__atomic_load_n(&fd->nr_released, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fd->nr_timed_out, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fd->nr_partial, __ATOMIC_RELAXED));
	return n + be_pool_stat(&fd->pool, "fault", buf + n, len - n);
}

/* ---- the attrs of its own: .sys/DEV/fault/{release,hung,badblocks} ---- */

static int attr_hung_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[24];

	pthread_mutex_lock(&fd->lock);
	snprintf(s, sizeof(s), "%zu", fd->nr_hung);
	pthread_mutex_unlock(&fd->lock);
	return be_attr_out(buf, len, s);
}

static int attr_release_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "0");
}

/*
 * `1` or `all`: every hung I/O goes on to the layer below; an errno name
 * or number: each fails with it. Ends what is hung now; a later fault
 * hangs again. With nothing hung it succeeds and does nothing.
 */
static int attr_release_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	struct fault_hang *taken, *h;
	char s[32];
	int err = 0;

	if (be_attr_text(buf, len, s, sizeof(s)))
		return -EINVAL;
	if (strcmp(s, "1") && strcasecmp(s, "all")) {
		err = be_parse_errno(s);
		if (err < 0)
			return -EINVAL;
	}
	pthread_mutex_lock(&fd->lock);
	taken = hang_take_locked(fd, true, 0);
	pthread_mutex_unlock(&fd->lock);
	while ((h = taken)) {
		taken = h->next;
		__atomic_add_fetch(&fd->nr_released, 1, __ATOMIC_RELAXED);
		if (err)
			__atomic_add_fetch(&fd->nr_injected, 1, __ATOMIC_RELAXED);
		hang_end(fd, h, err);
	}
	return 0;
}

/* One `OFFSET LENGTH ERRNO` line per range, in the order added. */
static int attr_badblocks_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	int ret;

	pthread_mutex_lock(&fd->lock);
	ret = be_ranges_print(fd->bad, fd->nr_bad, buf, len, be_errno_name);
	pthread_mutex_unlock(&fd->lock);
	return ret;
}

/*
 * `clear`, or lines to add. All or nothing: one bad line, a range outside
 * the device, or more than FAULT_MAX_BAD ranges in all changes nothing.
 */
static int attr_badblocks_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	struct be_range *add;
	size_t room;
	char s[8];
	int ret;

	if (!len || len > FAULT_TEXT_MAX || memchr(buf, '\0', len))
		return -EINVAL;
	if (!be_attr_text(buf, len, s, sizeof(s)) && !strcasecmp(s, "clear")) {
		pthread_mutex_lock(&fd->lock);
		fd->nr_bad = 0;
		pthread_mutex_unlock(&fd->lock);
		return 0;
	}
	/* parsed outside the lock, into a scratch copy: the map changes only whole */
	add = malloc(FAULT_MAX_BAD * sizeof(*add));
	if (!add)
		return -ENOMEM;
	pthread_mutex_lock(&fd->lock);
	room = FAULT_MAX_BAD - fd->nr_bad;
	pthread_mutex_unlock(&fd->lock);
	ret = parse_bad_list(buf, len, '\n', fd->size, add, room);
	if (ret <= 0) {
		free(add);
		return -EINVAL;
	}
	pthread_mutex_lock(&fd->lock);
	/* Another store may have added meanwhile: check the room again. */
	if (fd->nr_bad + (size_t)ret > FAULT_MAX_BAD) {
		ret = -EINVAL;
	} else {
		memcpy(fd->bad + fd->nr_bad, add, (size_t)ret * sizeof(*add));
		fd->nr_bad += (size_t)ret;
		ret = 0;
	}
	pthread_mutex_unlock(&fd->lock);
	free(add);
	return ret;
}

const struct blk_backend_ops fault_filter_ops = {
	.name = "fault",
	.is_filter = true,
	.keys = fault_keys,
	.help = "fault: fail or hang I/O; fault.ops = read,write,flush,discard, fault.errno = EIO, "
		"fault.probability = 0..1, fault.after = N, fault.persistent = yes|no, "
		"fault.hang = yes|no, fault.hang_timeout = 30s, "
		"fault.badblocks = OFFSET LENGTH ERRNO, ..., fault.badblocks_once = yes|no, "
		"fault.badblocks_clear_on_write = yes|no, fault.badblocks_partial_io = yes|no, "
		"fault.seed = N|auto",
	.open = fault_open,
	.close = fault_close,
	.geometry = be_filter_geometry,
	.resize = fault_resize,
	.submit = fault_submit,
	.stat = fault_stat,
	.attrs = fault_attrs,
	.snap = &be_filter_snap_ops,
};
