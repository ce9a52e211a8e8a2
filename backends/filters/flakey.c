// SPDX-License-Identifier: MIT
/*
 * backends/filters/flakey.c - the flakey filter: dm-flakey's unreliable device, in
 * its own names. From open the device is up for up_interval, then down for
 * down_interval, over and over; in a down window it fails reads and/or
 * writes, acknowledges writes and drops them, or corrupts data silently
 * (the I/O succeeds: what a checksumming filesystem must catch).
 *
 * Keys (and live attrs of the same names, .sys/DEV/flakey/ATTR):
 *	up_interval, down_interval
 *			durations (blk_parse_duration; plain seconds too, as
 *			dm-flakey counts them). down_interval 0 (the default):
 *			never down. up_interval 0 with a down_interval: always
 *			down (xfstests' drop-writes table is `0 180`). Storing
 *			either starts the cycle again, up first.
 *	error_reads	yes: in a down window every READ fails with errno
 *	error_writes	yes: every WRITE, DISCARD, WRITE_ZEROES and FLUSH fails
 *	drop_writes	yes: every WRITE, DISCARD and WRITE_ZEROES succeeds and
 *			is dropped (FLUSH still goes down: it makes what was
 *			written before the window durable). error_writes wins.
 *	corrupt_bio_byte
 *			`N r|w VALUE [FLAGS]`: byte N (from 1) of each READ
 *			(r) or WRITE (w) becomes VALUE (0..255); FLAGS, if
 *			given, must be 0 (blkfs I/O has no request flags);
 *			`off` (default) clears it
 *	random_read_corrupt, random_write_corrupt
 *			0..1 (dm-flakey's 1000000000 is 1): each READ or WRITE
 *			has a random byte XORed with a random non-zero value
 *			(it always changes) with this chance
 *	corrupt_ranges	`OFFSET LENGTH` entries (comma-separated in the config,
 *			one per line in .sys; `clear` empties): corruption only
 *			touches bytes inside them (merged, sorted)
 *	errno		what error_reads / error_writes fail with; default EIO
 *	seed		the random stream of the corruption (a number, or
 *			auto: from the clock); printed to the daemon log
 *	pool		corrupted I/Os in flight without allocating (config only)
 * Read-only attrs: `state` (up or down now) and `last_corruption`
 * (`OP OFFSET OLD NEW`: the device offset of the last byte corrupted and
 * its value before and after, or `none`).
 *
 * With none of error_reads, error_writes, drop_writes or a corruption set,
 * a down window fails every I/O (dm-flakey's rule).
 *
 * Corruption never touches the cache's memory of a write: the write goes
 * down with a vector in which the one dma_align-sized piece holding the
 * byte is a copy (a bounce buffer), so the cache keeps what it was given
 * and the device gets the corrupted byte. A read is corrupted in its own
 * buffer after the layer below filled it. Which byte is decided at submit,
 * so the same seed and the same order of I/O corrupt the same bytes.
 *
 * Lock: fk->lock covers every knob, the ranges, the random state, the
 * cycle's start and last_corruption; it is held only to decide, never
 * across a submit or an end_io.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../backends_int.h"
#include "../kit/knobs.h"
#include "../kit/ranges.h"
#include "../lib/trace.h"

#define FLAKEY_MAX_INTERVAL_NS	(30 * 24 * 3600ull * 1000000000)	/* 30 days */
#define FLAKEY_MAX_RANGES	256		/* the listing fits a .sys read */
#define FLAKEY_TEXT_MAX		(64 * FLAKEY_MAX_RANGES)
#define FLAKEY_SAY		10		/* corruptions said in the log, then counted */
#define FLAKEY_INLINE_IOV	20		/* a 1 MiB write of 64 KiB folios, + 4 */
#define FLAKEY_BOUNCES		64		/* bounce pieces in the pool */
#define FLAKEY_MAX_POINTS	2		/* corrupt_bio_byte and a random one */

/* One corrupted byte. */
struct flakey_point {
	uint64_t off;		/* in the I/O */
	int value;		/* the new value, or -1: XOR with xor */
	uint8_t xor;		/* non-zero */
};

/* A child I/O: a read or write to corrupt. From fk->pool. */
struct flakey_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;
	struct flakey_dev *fk;
	struct flakey_point pt[FLAKEY_MAX_POINTS];
	int npt;
	void *bounce[FLAKEY_MAX_POINTS];	/* WRITE: the copied pieces */
	struct iovec *iov;		/* WRITE: iov_inline, or malloc'ed */
	struct iovec iov_inline[FLAKEY_INLINE_IOV];
};

struct flakey_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages; set at open */
	struct bt_dev *bt;		/* trace state (message notes); NULL: none */
	bool traced_down;		/* lock: the state the last I/O saw, for the notes */
	uint64_t size;			/* set at open */
	uint32_t align;			/* the layer below's dma_align (>= 1) */
	struct be_pool pool;		/* struct flakey_io */
	struct be_pool bounces;		/* align-sized pieces, align-aligned */
	/*
	 * Atomic: down_interval is non-zero, so a window may be down. With it
	 * false submit() passes everything on without taking the lock.
	 */
	bool can_go_down;
	bool seed_said;			/* atomic: the first I/O said the seed */

	pthread_mutex_t lock;
	pthread_cond_t idle_cv;		/* to close: inflight reached 0 */
	uint64_t up_ns, down_ns;	/* lock */
	uint64_t start_ns;		/* lock: when the cycle (re)started */
	bool error_reads, error_writes, drop_writes;	/* lock */
	uint64_t byte_n;		/* lock: corrupt_bio_byte's N, 0 = off */
	bool byte_write;		/* lock: its direction */
	int byte_value;			/* lock */
	double p_read, p_write;		/* lock */
	int err;			/* lock: positive errno */
	struct be_range ranges[FLAKEY_MAX_RANGES];	/* lock: sorted, merged */
	size_t nr_ranges;		/* lock */
	uint64_t seed, rng;		/* lock */
	unsigned int nr_said;		/* lock */
	char last[96];			/* lock: last_corruption */
	uint64_t inflight;		/* lock: children not yet completed to the cache */
	unsigned int nr_pool;		/* the pool's size (config only) */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_down_ios;		/* I/Os that came in a down window */
	uint64_t nr_errors;		/* failed */
	uint64_t nr_dropped;		/* writes dropped */
	uint64_t nr_read_corrupt;	/* READs corrupted */
	uint64_t nr_write_corrupt;	/* WRITEs corrupted */
};

/* ---- parsing ---- */

/* "off", or "N r|w VALUE [0]". */
static int parse_byte(const char *s, uint64_t *n, bool *write, int *value)
{
	char tok[4][32], *end;
	const char *p = s;
	size_t len = strlen(s);
	unsigned long long v;
	int nt;

	if (!strcasecmp(s, "off") || !strcmp(s, "0")) {
		*n = 0;
		*write = false;
		*value = 0;
		return 0;
	}
	nt = be_entries(&p, &len, '\n', tok, 4);
	if (nt < 3 || len)
		return -EINVAL;
	if (tok[0][0] < '1' || tok[0][0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(tok[0], &end, 10);
	if (errno || *end)
		return -EINVAL;
	*n = v;
	if (!strcmp(tok[1], "r"))
		*write = false;
	else if (!strcmp(tok[1], "w"))
		*write = true;
	else
		return -EINVAL;
	if (tok[2][0] < '0' || tok[2][0] > '9')
		return -EINVAL;
	v = strtoull(tok[2], &end, 10);
	if (*end || v > 255)
		return -EINVAL;
	*value = (int)v;
	if (nt == 4 && strcmp(tok[3], "0"))
		return -EINVAL;
	return 0;
}

/* `OFFSET LENGTH` entries inside the device into @out (room @room): count or -errno. */
static int parse_ranges(const char *s, size_t n, char sep, uint64_t size,
			struct be_range *out, size_t room)
{
	return be_ranges_parse(s, n, sep, size, NULL, 0, out, room);
}

/* ---- deciding ---- */

enum flakey_action { FK_PASS, FK_FAIL, FK_DROP, FK_CORRUPT };

/* Down now? Caller holds fk->lock. */
static bool is_down_locked(const struct flakey_dev *fk, uint64_t now)
{
	if (!fk->down_ns)
		return false;
	if (!fk->up_ns)
		return true;
	return (now - fk->start_ns) % (fk->up_ns + fk->down_ns) >= fk->up_ns;
}

/* Bytes of [pos, pos + len) inside the ranges (all of it without ranges). */
static uint64_t eligible_locked(const struct flakey_dev *fk, uint64_t pos, uint64_t len)
{
	return fk->nr_ranges ? be_ranges_covered(fk->ranges, fk->nr_ranges, pos, len) : len;
}

/* The offset in the I/O of the @k-th eligible byte. */
static uint64_t nth_eligible_locked(const struct flakey_dev *fk, uint64_t pos, uint64_t len,
				    uint64_t k)
{
	return fk->nr_ranges ? be_ranges_nth(fk->ranges, fk->nr_ranges, pos, len, k) : k;
}

static bool in_ranges_locked(const struct flakey_dev *fk, uint64_t at)
{
	return !fk->nr_ranges || be_ranges_contains(fk->ranges, fk->nr_ranges, at);
}

/*
 * What becomes of @io; for FK_FAIL the errno in *@err, for FK_CORRUPT the
 * bytes in @pt (*@npt of them).
 */
static enum flakey_action flakey_decide(struct flakey_dev *fk, const struct blk_io *io,
					int *err, struct flakey_point *pt, int *npt, int *edge)
{
	enum flakey_action a = FK_PASS;
	bool write = io->op != BLK_READ && io->op != BLK_FLUSH;
	bool data = io->op == BLK_READ || io->op == BLK_WRITE;
	bool features;
	double p;

	*npt = 0;
	pthread_mutex_lock(&fk->lock);
	if (is_down_locked(fk, blk_now_ns()) != fk->traced_down) {
		fk->traced_down = !fk->traced_down;
		*edge = fk->traced_down ? 1 : -1;	/* a note in the trace */
	}
	if (!fk->traced_down)
		goto out_unlock;
	__atomic_add_fetch(&fk->nr_down_ios, 1, __ATOMIC_RELAXED);
	features = fk->error_reads || fk->error_writes || fk->drop_writes || fk->byte_n ||
		   fk->p_read > 0 || fk->p_write > 0;
	if (!features || (io->op == BLK_READ && fk->error_reads) ||
	    ((write || io->op == BLK_FLUSH) && fk->error_writes)) {
		*err = fk->err;
		a = FK_FAIL;
		goto out_unlock;
	}
	if (write && fk->drop_writes) {
		a = FK_DROP;
		goto out_unlock;
	}
	if (!data)
		goto out_unlock;
	if (fk->byte_n && fk->byte_write == (io->op == BLK_WRITE) && fk->byte_n <= io->len &&
	    in_ranges_locked(fk, io->pos + fk->byte_n - 1))
		pt[(*npt)++] = (struct flakey_point){ .off = fk->byte_n - 1, .value = fk->byte_value };
	p = io->op == BLK_READ ? fk->p_read : fk->p_write;
	if (p > 0) {
		uint64_t n = eligible_locked(fk, io->pos, io->len);

		/* the draws only for an I/O that could be corrupted: the stream stays short */
		if (n && be_rand01(&fk->rng) < p) {
			uint64_t k = be_rand_below(&fk->rng, n);

			pt[(*npt)++] = (struct flakey_point){
				.off = nth_eligible_locked(fk, io->pos, io->len, k),
				.value = -1,
				.xor = (uint8_t)(1 + be_rand_below(&fk->rng, 255)),
			};
		}
	}
	if (*npt)
		a = FK_CORRUPT;
out_unlock:
	pthread_mutex_unlock(&fk->lock);
	return a;
}

/* ---- corrupting ---- */

/* Where byte @off of a vector is. */
static uint8_t *iov_byte(const struct iovec *iov, int iovcnt, uint64_t off)
{
	int i;

	for (i = 0; i < iovcnt; i++) {
		if (off < iov[i].iov_len)
			return (uint8_t *)iov[i].iov_base + off;
		off -= iov[i].iov_len;
	}
	return NULL;
}

static uint8_t corrupt_value(const struct flakey_point *p, uint8_t old)
{
	return p->value < 0 ? old ^ p->xor : (uint8_t)p->value;
}

/* Note one corrupted byte: last_corruption, and the log for the first few. */
static void note_corruption(struct flakey_dev *fk, const struct blk_io *io, uint64_t off,
			    uint8_t old, uint8_t new)
{
	const char *op = io->op == BLK_READ ? "read" : "write";

	bt_msg(fk->bt, "flakey: corrupted %s at byte %llu", op, (unsigned long long)(io->pos + off));
	pthread_mutex_lock(&fk->lock);
	snprintf(fk->last, sizeof(fk->last), "%s %llu %u %u", op,
		 (unsigned long long)(io->pos + off), old, new);
	if (fk->nr_said < FLAKEY_SAY) {
		fk->nr_said++;
		blk_warn("flakey: %s: corrupted %s %llu+%llu at byte %llu: 0x%02x -> 0x%02x%s",
			fk->dev, blk_op_name(io->op), (unsigned long long)io->pos,
			(unsigned long long)io->len, (unsigned long long)(io->pos + off), old, new,
			fk->nr_said == FLAKEY_SAY ?
			" (further corruptions are only counted: flakey_*_corruptions)" : "");
	}
	pthread_mutex_unlock(&fk->lock);
}

static void child_done(struct flakey_dev *fk, struct flakey_io *c)
{
	int i;

	for (i = 0; i < FLAKEY_MAX_POINTS; i++)
		if (c->bounce[i])
			be_pool_put(&fk->bounces, c->bounce[i]);
	if (c->iov && c->iov != c->iov_inline)
		free(c->iov);
	be_pool_put(&fk->pool, c);
}

static void flakey_end_io(struct blk_io *io, int res)
{
	struct flakey_io *c = (struct flakey_io *)io;
	struct flakey_dev *fk = c->fk;
	struct blk_io *parent = c->parent;
	int i;

	if (!res && parent->op == BLK_READ) {
		/* the data the layer below gave, in the cache's buffer: ours to spoil */
		for (i = 0; i < c->npt; i++) {
			uint8_t *b = iov_byte(parent->iov, parent->iovcnt, c->pt[i].off);
			uint8_t old = *b;

			*b = corrupt_value(&c->pt[i], old);
			note_corruption(fk, parent, c->pt[i].off, old, *b);
		}
		__atomic_add_fetch(&fk->nr_read_corrupt, 1, __ATOMIC_RELAXED);
	} else if (!res) {
		__atomic_add_fetch(&fk->nr_write_corrupt, 1, __ATOMIC_RELAXED);
	}
	parent->done = res ? io->done : 0;
	child_done(fk, c);
	parent->end_io(parent, res);
	/* After the parent's end_io: close waits for inflight 0 before freeing fk. */
	pthread_mutex_lock(&fk->lock);
	if (!--fk->inflight)
		pthread_cond_broadcast(&fk->idle_cv);
	pthread_mutex_unlock(&fk->lock);
}

/*
 * The child's vector for a corrupted WRITE: the parent's, with the piece
 * holding each point replaced by a corrupted copy. A piece is the
 * align-sized, align-aligned block of one iovec around the byte (iovec
 * bases and lengths are multiples of align, so it never crosses one).
 */
static int build_write(struct flakey_dev *fk, struct flakey_io *c)
{
	const struct blk_io *p = c->parent;
	uint64_t a = fk->align, base = 0;
	int i, k = 0, nb = 0, n = 0, cap = p->iovcnt + 2 * FLAKEY_MAX_POINTS;

	if (c->npt == 2 && c->pt[0].off > c->pt[1].off) {
		struct flakey_point t = c->pt[0];

		c->pt[0] = c->pt[1];
		c->pt[1] = t;
	}
	if (cap <= FLAKEY_INLINE_IOV) {
		c->iov = c->iov_inline;
	} else {
		/* a vector longer than the slot holds: allocated, and counted as a miss */
		__atomic_add_fetch(&fk->pool.nr_allocs, 1, __ATOMIC_RELAXED);
		c->iov = malloc((size_t)cap * sizeof(*c->iov));
		if (!c->iov)
			return -ENOMEM;
	}
	for (i = 0; i < p->iovcnt; i++) {
		const struct iovec *v = &p->iov[i];
		uint64_t cur = 0;	/* how much of v is in the child's vector */

		while (k < c->npt && c->pt[k].off < base + v->iov_len) {
			uint64_t start = (c->pt[k].off - base) / a * a;
			uint8_t *piece;

			if (start > cur)
				c->iov[n++] = (struct iovec){ (char *)v->iov_base + cur, start - cur };
			piece = be_pool_get(&fk->bounces);
			if (!piece)
				return -ENOMEM;
			c->bounce[nb++] = piece;
			memcpy(piece, (char *)v->iov_base + start, a);
			/* this point, and the next when it falls in the same piece */
			for (; k < c->npt && c->pt[k].off < base + start + a; k++) {
				uint8_t *b = piece + (c->pt[k].off - base - start), old = *b;

				*b = corrupt_value(&c->pt[k], old);
				note_corruption(fk, p, c->pt[k].off, old, *b);
			}
			c->iov[n++] = (struct iovec){ piece, a };
			cur = start + a;
		}
		if (cur < v->iov_len)
			c->iov[n++] = (struct iovec){ (char *)v->iov_base + cur, v->iov_len - cur };
		base += v->iov_len;
	}
	c->io.iov = c->iov;
	c->io.iovcnt = n;
	return 0;
}

/* The seed again at the first I/O: stderr is the daemon's log by then. */
static int flakey_submit(struct blk_backend *be, struct blk_io *io)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	struct flakey_point pt[FLAKEY_MAX_POINTS];
	struct flakey_io *c;
	int err = 0, npt, ret, edge = 0;
	enum flakey_action a;
	char eb[16];

	if (be_first_io(&fk->seed_said))
		be_say_seed_first_io(&fk->lock, &fk->seed, "flakey", fk->dev);
	if (!__atomic_load_n(&fk->can_go_down, __ATOMIC_RELAXED))
		return blk_submit(be->next, io);
	a = flakey_decide(fk, io, &err, pt, &npt, &edge);
	if (edge)
		bt_msg(fk->bt, "flakey: %s", edge > 0 ? "down" : "up");
	switch (a) {
	case FK_PASS:
		return blk_submit(be->next, io);
	case FK_FAIL:
		__atomic_add_fetch(&fk->nr_errors, 1, __ATOMIC_RELAXED);
		if (bt_on(fk->bt, BT_LEVEL_DEV))
			bt_msg(fk->bt, "flakey: %s at %llu (%s)", be_errno_name(err, eb, sizeof(eb)),
			       (unsigned long long)io->pos, bt_op_names[bt_op(io->op)]);
		io->end_io(io, -err);
		return 0;
	case FK_DROP:
		__atomic_add_fetch(&fk->nr_dropped, 1, __ATOMIC_RELAXED);
		bt_msg(fk->bt, "flakey: dropped at %llu (%s)", (unsigned long long)io->pos,
		       bt_op_names[bt_op(io->op)]);
		io->end_io(io, 0);
		return 0;
	case FK_CORRUPT:
		break;
	}
	c = be_pool_get(&fk->pool);
	if (!c)
		return -ENOMEM;
	c->io = be_child_io(io, flakey_end_io, c);
	c->parent = io;
	c->fk = fk;
	memcpy(c->pt, pt, sizeof(pt));
	c->npt = npt;
	c->bounce[0] = c->bounce[1] = NULL;
	c->iov = NULL;
	if (io->op == BLK_WRITE) {
		ret = build_write(fk, c);
		if (ret) {
			child_done(fk, c);
			return ret;
		}
	}
	pthread_mutex_lock(&fk->lock);
	fk->inflight++;
	pthread_mutex_unlock(&fk->lock);
	ret = blk_submit(be->next, &c->io);
	if (ret) {
		/* refused below: nothing happened; @c was not completed */
		child_done(fk, c);
		pthread_mutex_lock(&fk->lock);
		if (!--fk->inflight)
			pthread_cond_broadcast(&fk->idle_cv);
		pthread_mutex_unlock(&fk->lock);
	}
	return ret;
}

/* Caller holds fk->lock (or owns fk alone). */
static void update_can_go_down_locked(struct flakey_dev *fk)
{
	__atomic_store_n(&fk->can_go_down, fk->down_ns > 0, __ATOMIC_RELAXED);
}

/* ---- the knobs: config keys and .sys/DEV/flakey/ ---- */

static int attr_corrupt_bio_byte_show(struct blk_backend *be, char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	char s[64];

	pthread_mutex_lock(&fk->lock);
	if (!fk->byte_n)
		snprintf(s, sizeof(s), "off");
	else
		snprintf(s, sizeof(s), "%llu %c %d", (unsigned long long)fk->byte_n,
			 fk->byte_write ? 'w' : 'r', fk->byte_value);
	pthread_mutex_unlock(&fk->lock);
	return be_attr_out(buf, len, s);
}

static int attr_corrupt_bio_byte_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	uint64_t n;
	bool w;
	int v;
	char s[128];

	if (be_attr_text(buf, len, s, sizeof(s)) || parse_byte(s, &n, &w, &v))
		return -EINVAL;
	pthread_mutex_lock(&fk->lock);
	fk->byte_n = n;
	fk->byte_write = w;
	fk->byte_value = v;
	fk->nr_said = 0;
	pthread_mutex_unlock(&fk->lock);
	return 0;
}

/* One `OFFSET LENGTH` line per range, sorted and merged. */
static int attr_corrupt_ranges_show(struct blk_backend *be, char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	int ret;

	pthread_mutex_lock(&fk->lock);
	ret = be_ranges_print(fk->ranges, fk->nr_ranges, buf, len, NULL);
	pthread_mutex_unlock(&fk->lock);
	return ret;
}

/* `clear`, or lines to add (merged with what is there); all or nothing. */
static int attr_corrupt_ranges_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	struct be_range *v;
	size_t have;
	char s[8];
	int ret;

	if (!len || len > FLAKEY_TEXT_MAX || memchr(buf, '\0', len))
		return -EINVAL;
	if (!be_attr_text(buf, len, s, sizeof(s)) && !strcasecmp(s, "clear")) {
		pthread_mutex_lock(&fk->lock);
		fk->nr_ranges = 0;
		pthread_mutex_unlock(&fk->lock);
		return 0;
	}
	v = malloc(2 * FLAKEY_MAX_RANGES * sizeof(*v));
	if (!v)
		return -ENOMEM;
	ret = parse_ranges(buf, len, '\n', fk->size, v, FLAKEY_MAX_RANGES);
	if (ret <= 0) {
		free(v);
		return -EINVAL;
	}
	pthread_mutex_lock(&fk->lock);
	have = fk->nr_ranges;
	memcpy(v + ret, fk->ranges, have * sizeof(*v));
	have = be_ranges_merge(v, have + (size_t)ret);
	if (have > FLAKEY_MAX_RANGES) {
		ret = -EINVAL;
	} else {
		memcpy(fk->ranges, v, have * sizeof(*v));
		fk->nr_ranges = have;
		ret = 0;
	}
	pthread_mutex_unlock(&fk->lock);
	free(v);
	return ret;
}

static int attr_state_show(struct blk_backend *be, char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	bool down;

	pthread_mutex_lock(&fk->lock);
	down = is_down_locked(fk, blk_now_ns());
	pthread_mutex_unlock(&fk->lock);
	return be_attr_out(buf, len, down ? "down" : "up");
}

static int attr_last_corruption_show(struct blk_backend *be, char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	char s[sizeof(fk->last)];

	pthread_mutex_lock(&fk->lock);
	memcpy(s, fk->last, sizeof(s));
	pthread_mutex_unlock(&fk->lock);
	return be_attr_out(buf, len, s);
}

/* A new interval starts the cycle again, up first (as loading a dm table does). */
static void cycle_restart(struct blk_backend *be)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;

	fk->start_ns = blk_now_ns();
	update_can_go_down_locked(fk);
}

/* A new corruption (or stream) is told in the daemon log again. */
static void said_reset(struct blk_backend *be)
{
	((struct flakey_dev *)be)->nr_said = 0;
}

#define FLAKEY_PROB	"0 to 1, such as 0.01; dm-flakey's 1000000000 is 1"
#define FLAKEY_KNOBS(K)											\
	K(up_interval,   seconds, up_ns,   0, FLAKEY_MAX_INTERVAL_NS, 0, "ns", RW, cycle_restart)	\
	K(down_interval, seconds, down_ns, 0, FLAKEY_MAX_INTERVAL_NS, 0, "ns", RW, cycle_restart)	\
	K(error_reads,   bool, error_reads,  0, 1, 0, "", RW, NULL)					\
	K(error_writes,  bool, error_writes, 0, 1, 0, "", RW, NULL)					\
	K(drop_writes,   bool, drop_writes,  0, 1, 0, "", RW, NULL)					\
	K(corrupt_bio_byte, none, byte_n, 0, 0, 0, "N r|w VALUE [0], or off", OWN, NULL)		\
	K(random_read_corrupt,  probability, p_read,  0, 1, 0, FLAKEY_PROB, RW, said_reset)		\
	K(random_write_corrupt, probability, p_write, 0, 1, 0, FLAKEY_PROB, RW, said_reset)		\
	K(corrupt_ranges, none, ranges, 0, FLAKEY_MAX_RANGES, 0, "OFFSET LENGTH", OWN, NULL)		\
	K(errno, errno, err, 0, 0, EIO, "a name such as EIO, ENOSPC, or a number", RW, NULL)		\
	K(seed,  seed,  seed, 0, 0, 0, "", RW, said_reset)						\
	K(pool,  pool,  nr_pool, 1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)			\
	K(state, none,  be, 0, 0, 0, "up or down", OWNRO, NULL)						\
	K(last_corruption, none, last, 0, 0, 0, "OP OFFSET OLD NEW, or none", OWNRO, NULL)

BK_DEFINE(flakey, struct flakey_dev, lock, NULL, FLAKEY_KNOBS);

/* ---- open, close, stat ---- */

/*
 * The device's size changed (blk_resize()): ranges given from now on are
 * checked against the new end; those given before stay as they are (I/O
 * never reaches a part of them past the end).
 */
static int flakey_resize(struct blk_backend *be, uint64_t *size)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	int ret = blk_resize(be->next, size);

	if (!ret)
		__atomic_store_n(&fk->size, *size, __ATOMIC_RELAXED);
	return ret;
}

static struct blk_backend *flakey_open(struct blk_params *p, struct blk_backend *next)
{
	struct blk_geometry geo;
	struct flakey_dev *fk;
	const char *s;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the flakey filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	next->ops->geometry(next, &geo);
	fk = calloc(1, sizeof(*fk));
	if (!fk) {
		blk_param_error(p, NULL, "cannot set up the flakey filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	fk->dev = p->dev ? p->dev : "?";
	fk->bt = p->dev ? bt_dev_get(p->dev) : NULL;
	fk->size = geo.size;
	fk->align = geo.dma_align ? geo.dma_align : 1;
	snprintf(fk->last, sizeof(fk->last), "none");

	ret = bk_params(&bk_table, p, &fk->be);
	if (ret)
		goto out_free;
	s = blk_param_get(p, "corrupt_bio_byte");
	if (s && parse_byte(s, &fk->byte_n, &fk->byte_write, &fk->byte_value)) {
		ret = blk_param_error(p, "corrupt_bio_byte",
			"'%s' is not a corruption (allowed: N r|w VALUE [0], with N from 1 and VALUE 0..255, or off)",
			s);
		goto out_free;
	}
	s = blk_param_get(p, "corrupt_ranges");
	if (s) {
		ret = parse_ranges(s, strlen(s), ',', fk->size, fk->ranges, FLAKEY_MAX_RANGES);
		if (ret < 0) {
			ret = blk_param_error(p, "corrupt_ranges",
				"'%s' is not a list of ranges inside the device (allowed: OFFSET LENGTH, comma-separated, at most %d, with OFFSET + LENGTH <= %llu)",
				s, FLAKEY_MAX_RANGES, (unsigned long long)fk->size);
			goto out_free;
		}
		fk->nr_ranges = be_ranges_merge(fk->ranges, (size_t)ret);
	}
	update_can_go_down_locked(fk);

	ret = be_pool_init(&fk->pool, fk->nr_pool, sizeof(struct flakey_io), 64);
	if (ret)
		goto out_err;
	ret = be_pool_init(&fk->bounces, FLAKEY_BOUNCES, fk->align, fk->align < 64 ? 64 : fk->align);
	if (ret)
		goto out_destroy_pool;
	ret = -pthread_mutex_init(&fk->lock, NULL);
	if (ret)
		goto out_destroy_bounces;
	ret = -pthread_cond_init(&fk->idle_cv, NULL);
	if (ret)
		goto out_destroy_lock;
	fk->start_ns = blk_now_ns();
	fk->be.ops = &flakey_filter_ops;
	fk->be.next = next;
	be_say_seed("flakey", fk->dev, fk->seed, "at open");
	return &fk->be;

out_destroy_lock:
	pthread_mutex_destroy(&fk->lock);
out_destroy_bounces:
	be_pool_destroy(&fk->bounces);
out_destroy_pool:
	be_pool_destroy(&fk->pool);
out_err:
	blk_param_error(p, NULL, "cannot set up the flakey filter: %s", strerror(-ret));
out_free:
	free(fk);
	return ERR_PTR(ret);
}

/* Wait for the children still below: the layer below is closed next. */
static void flakey_close(struct blk_backend *be)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;

	pthread_mutex_lock(&fk->lock);
	while (fk->inflight)
		pthread_cond_wait(&fk->idle_cv, &fk->lock);
	pthread_mutex_unlock(&fk->lock);
	pthread_cond_destroy(&fk->idle_cv);
	pthread_mutex_destroy(&fk->lock);
	be_pool_destroy(&fk->bounces);
	be_pool_destroy(&fk->pool);
	free(fk);
}

static size_t flakey_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct flakey_dev *fk = (struct flakey_dev *)be;
	bool down;
	size_t n;

	pthread_mutex_lock(&fk->lock);
	down = is_down_locked(fk, blk_now_ns());
	pthread_mutex_unlock(&fk->lock);
	n = be_stat_printf(buf, len,
			   "flakey_down %d\nflakey_down_ios %llu\nflakey_errors %llu\n"
			   "flakey_dropped_writes %llu\nflakey_read_corruptions %llu\n"
			   "flakey_write_corruptions %llu\n",
			   down,
			   (unsigned long long)__atomic_load_n(&fk->nr_down_ios, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fk->nr_errors, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fk->nr_dropped, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fk->nr_read_corrupt, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&fk->nr_write_corrupt, __ATOMIC_RELAXED));
	n += be_pool_stat(&fk->pool, "flakey", buf + n, len - n);
	return n + be_pool_stat(&fk->bounces, "flakey_bounce", buf + n, len - n);
}

const struct blk_backend_ops flakey_filter_ops = {
	.name = "flakey",
	.is_filter = true,
	.keys = flakey_keys,
	.help = "flakey: dm-flakey's up/down cycle; flakey.up_interval/down_interval = 5s, "
		"flakey.error_reads/error_writes/drop_writes = yes|no, "
		"flakey.corrupt_bio_byte = N r|w VALUE, flakey.random_read_corrupt/random_write_corrupt = 0..1, "
		"flakey.corrupt_ranges = OFFSET LENGTH, ..., flakey.errno = EIO, flakey.seed = N|auto",
	.open = flakey_open,
	.close = flakey_close,
	.geometry = be_filter_geometry,
	.resize = flakey_resize,
	.submit = flakey_submit,
	.stat = flakey_stat,
	.attrs = flakey_attrs,
	.snap = &be_filter_snap_ops,
};
