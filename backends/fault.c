// SPDX-License-Identifier: MIT
/*
 * backends/fault.c - the fault filter: fails chosen I/O with a chosen errno,
 * so a test (or a person) can see what the cache, the daemon and the
 * software above make of a failing disk. A failed I/O is completed with the
 * error and never passed to the layer below: a failed write changes nothing.
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
 *	badblocks	a bad-block map, one `OFFSET LENGTH [ERRNO]` per line
 *			(bytes, K/M/G/T suffixes taken; ERRNO defaults to EIO;
 *			in the config, entries separated by commas). Any READ,
 *			WRITE, DISCARD or WRITE_ZEROES overlapping a range
 *			fails with its errno, whatever `ops` says. Storing
 *			lines adds them; `clear` empties the map; a malformed
 *			line or a range outside the device is EINVAL and
 *			nothing changes.
 *	enabled		no: everything passes (the map and the knobs are kept)
 *
 * Storing `after`, `persistent` or `enabled` re-arms: the count of matching
 * ops restarts at 0 and a persistent fault that had fired stops firing.
 *
 * Lock: fd->lock covers every knob, the map, the count and the random
 * state; it is held only to decide, never across a submit or an end_io.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "backends_int.h"

#define FAULT_AFTER_OFF	UINT64_MAX
#define FAULT_MAX_BAD	256		/* the listing fits a .sys read */
#define FAULT_TEXT_MAX	(64 * FAULT_MAX_BAD)	/* the longest store taken */

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

/* One bad range: [pos, pos + len) fails with -err. */
struct fault_bad {
	uint64_t pos;
	uint64_t len;
	int err;
};

struct fault_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name, for messages; set at open */
	uint64_t size;			/* the device's; set at open */

	pthread_mutex_t lock;
	unsigned int ops;		/* lock: FO_* */
	int err;			/* lock: positive errno */
	double probability;		/* lock */
	uint64_t after;			/* lock: FAULT_AFTER_OFF or N */
	uint64_t passed;		/* lock: matching ops let through since armed */
	bool persistent;		/* lock */
	bool fired;			/* lock: a persistent fault has fired */
	bool enabled;			/* lock */
	bool said;			/* lock: the first injection since armed was logged */
	uint64_t rng;			/* lock: xorshift64* state */
	struct fault_bad *bad;		/* lock: the map, in the order added */
	size_t nr_bad;			/* lock */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_injected;		/* every I/O failed here */
	uint64_t nr_bad_hits;		/* of those, by the bad-block map */
	uint64_t nr_matching;		/* ops the knobs applied to */
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

/* An errno name (EIO, eio) or number (5): the positive errno, or -EINVAL. */
static int parse_errno(const char *s)
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

static const char *errno_name(int e, char *buf, size_t len)
{
	const char *n = strerrorname_np(e);

	if (n)
		return n;
	snprintf(buf, len, "%d", e);
	return buf;
}

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

/* A decimal in [0, 1] ("0", "0.25", "1", "1e-3"). */
static int parse_probability(const char *s, double *out)
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
 * One bad-block entry, "OFFSET LENGTH [ERRNO]" (@s/@n, not terminated),
 * checked against the device size. Blank entries are -ENOENT (skipped).
 */
static int parse_bad(const char *s, size_t n, uint64_t size, struct fault_bad *out)
{
	char tok[3][32];
	int nt = 0, e = EIO;
	uint64_t pos, len;

	for (;;) {
		size_t k = 0;

		while (n && (*s == ' ' || *s == '\t' || *s == '\r'))
			s++, n--;
		if (!n)
			break;
		if (nt == 3)
			return -EINVAL;
		while (k < n && s[k] != ' ' && s[k] != '\t' && s[k] != '\r')
			k++;
		if (k >= sizeof(tok[0]))
			return -EINVAL;
		memcpy(tok[nt], s, k);
		tok[nt][k] = '\0';
		nt++;
		s += k;
		n -= k;
	}
	if (!nt)
		return -ENOENT;
	if (nt < 2)
		return -EINVAL;
	if (blk_parse_size(tok[0], &pos) || blk_parse_size(tok[1], &len))
		return -EINVAL;
	if (!len || pos >= size || len > size - pos)
		return -EINVAL;
	if (nt == 3) {
		e = parse_errno(tok[2]);
		if (e < 0)
			return -EINVAL;
	}
	out->pos = pos;
	out->len = len;
	out->err = e;
	return 0;
}

/*
 * Entries of @s/@n separated by @sep into a new array (*@out, *@nr);
 * -EINVAL for any malformed entry. @room: how many may be added.
 */
static int parse_bad_list(const char *s, size_t n, char sep, uint64_t size, size_t room,
			  struct fault_bad **out, size_t *nr)
{
	struct fault_bad *v = NULL;
	size_t cnt = 0, cap = 0;

	while (n) {
		const char *end = memchr(s, sep, n);
		size_t k = end ? (size_t)(end - s) : n;
		struct fault_bad b;
		int ret = parse_bad(s, k, size, &b);

		if (ret && ret != -ENOENT) {
			free(v);
			return ret;
		}
		if (!ret) {
			if (cnt == room) {
				free(v);
				return -ENOSPC;
			}
			if (cnt == cap) {
				size_t c = cap ? 2 * cap : 8;
				struct fault_bad *nv = realloc(v, c * sizeof(*nv));

				if (!nv) {
					free(v);
					return -ENOMEM;
				}
				v = nv;
				cap = c;
			}
			v[cnt++] = b;
		}
		s += k;
		n -= k;
		if (end) {
			s++;
			n--;
		}
	}
	*out = v;
	*nr = cnt;
	return 0;
}

/* ---- deciding ---- */

static double rand01_locked(struct fault_dev *fd)
{
	uint64_t x = fd->rng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	fd->rng = x;
	return (double)((x * 0x2545f4914f6cdd1dull) >> 11) / (double)(1ull << 53);
}

/* The errno @io fails with, or 0 to pass it on. */
static int fault_decide(struct fault_dev *fd, const struct blk_io *io, bool *bad_hit)
{
	unsigned int bit = op_bit(io->op);
	int err = 0;
	size_t i;

	*bad_hit = false;
	pthread_mutex_lock(&fd->lock);
	if (!fd->enabled)
		goto out_unlock;
	if (io->op != BLK_FLUSH) {
		for (i = 0; i < fd->nr_bad; i++) {
			const struct fault_bad *b = &fd->bad[i];

			if (io->pos < b->pos + b->len && b->pos < io->pos + io->len) {
				err = b->err;
				*bad_hit = true;
				goto out_unlock;
			}
		}
	}
	if (!(fd->ops & bit))
		goto out_unlock;
	__atomic_add_fetch(&fd->nr_matching, 1, __ATOMIC_RELAXED);
	if (fd->fired) {
		err = fd->err;
		goto out_unlock;
	}
	if (fd->after != FAULT_AFTER_OFF) {
		if (fd->passed >= fd->after) {
			err = fd->err;
			if (!fd->persistent)
				fd->after = FAULT_AFTER_OFF;	/* fired once: disarmed */
		} else {
			fd->passed++;
		}
	}
	if (!err && fd->probability > 0 && rand01_locked(fd) < fd->probability)
		err = fd->err;
	if (err && fd->persistent)
		fd->fired = true;
	if (err && !fd->said) {
		char eb[16], where[48] = "";

		fd->said = true;
		if (io->op != BLK_FLUSH)
			snprintf(where, sizeof(where), " at %llu+%llu", (unsigned long long)io->pos,
				 (unsigned long long)io->len);
		blk_warn("fault: %s: injecting %s into %s%s%s",
			fd->dev, errno_name(err, eb, sizeof(eb)), blk_op_name(io->op), where,
			fd->persistent ? " (persistent: every later one fails too)" : "");
	}
out_unlock:
	pthread_mutex_unlock(&fd->lock);
	return err;
}

static int fault_submit(struct blk_backend *be, struct blk_io *io)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	bool bad_hit;
	int err = fault_decide(fd, io, &bad_hit);

	if (!err)
		return blk_submit(be->next, io);
	__atomic_add_fetch(&fd->nr_injected, 1, __ATOMIC_RELAXED);
	if (bad_hit)
		__atomic_add_fetch(&fd->nr_bad_hits, 1, __ATOMIC_RELAXED);
	/* Taken and failed, as a disk fails it: the error is the I/O's result. */
	io->end_io(io, -err);
	return 0;
}

/* ---- open, close, geometry, stat ---- */

static const char *const fault_keys[] = {
	"ops", "errno", "probability", "after", "persistent", "badblocks", "enabled", NULL,
};

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
	fd->size = geo.size;
	fd->ops = FO_WRITE;
	fd->err = EIO;
	fd->after = FAULT_AFTER_OFF;
	fd->enabled = true;

	s = blk_param_get(p, "ops");
	if (s) {
		ret = parse_ops(s);
		if (ret < 0) {
			ret = blk_param_error(p, "ops",
				"'%s' is not a list of ops (allowed: read, write, flush, discard, comma-separated, or all)",
				s);
			goto out_free;
		}
		fd->ops = (unsigned int)ret;
	}
	s = blk_param_get(p, "errno");
	if (s) {
		ret = parse_errno(s);
		if (ret < 0) {
			ret = blk_param_error(p, "errno",
				"'%s' is not an errno (allowed: a name such as EIO, ENOSPC, ENOMEM, EROFS, or a number)",
				s);
			goto out_free;
		}
		fd->err = ret;
	}
	s = blk_param_get(p, "probability");
	if (s && parse_probability(s, &fd->probability)) {
		ret = blk_param_error(p, "probability", "'%s' is not a probability (allowed: 0 to 1, such as 0.01)", s);
		goto out_free;
	}
	s = blk_param_get(p, "after");
	if (s && parse_after(s, &fd->after)) {
		ret = blk_param_error(p, "after", "'%s' is not a count of ops (allowed: a number, or off)", s);
		goto out_free;
	}
	ret = blk_param_bool(p, "persistent", false, &fd->persistent);
	if (ret)
		goto out_free;
	ret = blk_param_bool(p, "enabled", true, &fd->enabled);
	if (ret)
		goto out_free;
	s = blk_param_get(p, "badblocks");
	if (s) {
		ret = parse_bad_list(s, strlen(s), ',', fd->size, FAULT_MAX_BAD, &fd->bad, &fd->nr_bad);
		if (ret) {
			ret = blk_param_error(p, "badblocks",
				"'%s' is not a list of bad ranges inside the device (allowed: OFFSET LENGTH [ERRNO], comma-separated, at most %d, with OFFSET + LENGTH <= %llu)",
				s, FAULT_MAX_BAD, (unsigned long long)fd->size);
			goto out_free;
		}
	}
	fd->rng = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)fd ^ 0x9e3779b97f4a7c15ull;
	if (!fd->rng)
		fd->rng = 1;
	ret = -pthread_mutex_init(&fd->lock, NULL);
	if (ret) {
		blk_param_error(p, NULL, "cannot set up the fault filter: %s", strerror(-ret));
		goto out_free;
	}
	fd->be.ops = &fault_filter_ops;
	fd->be.next = next;
	return &fd->be;

out_free:
	free(fd->bad);
	free(fd);
	return ERR_PTR(ret);
}

/* Nothing of ours is in flight: a passed I/O is the layer below's. */
static void fault_close(struct blk_backend *be)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	pthread_mutex_destroy(&fd->lock);
	free(fd->bad);
	free(fd);
}

static size_t fault_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	return be_stat_printf(buf, len,
			      "fault_injected %llu\nfault_badblock_injected %llu\nfault_matching_ops %llu\n",
			      (unsigned long long)__atomic_load_n(&fd->nr_injected, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&fd->nr_bad_hits, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&fd->nr_matching, __ATOMIC_RELAXED));
}

/* ---- live attributes: .sys/DEV/fault/ ---- */

/* Re-arm after a knob changed. Caller holds fd->lock. */
static void rearm_locked(struct fault_dev *fd)
{
	fd->passed = 0;
	fd->fired = false;
	fd->said = false;
}

static int fault_ops_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[64];

	pthread_mutex_lock(&fd->lock);
	format_ops(fd->ops, s, sizeof(s));
	pthread_mutex_unlock(&fd->lock);
	return be_attr_out(buf, len, s[0] ? s : "none");
}

static int fault_ops_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[64];
	int ret;

	if (be_attr_text(buf, len, s, sizeof(s)))
		return -EINVAL;
	ret = parse_ops(s);
	if (ret < 0)
		return -EINVAL;
	pthread_mutex_lock(&fd->lock);
	fd->ops = (unsigned int)ret;
	pthread_mutex_unlock(&fd->lock);
	return 0;
}

static int fault_errno_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char eb[16];
	int e;

	pthread_mutex_lock(&fd->lock);
	e = fd->err;
	pthread_mutex_unlock(&fd->lock);
	return be_attr_out(buf, len, errno_name(e, eb, sizeof(eb)));
}

static int fault_errno_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[32];
	int e;

	if (be_attr_text(buf, len, s, sizeof(s)))
		return -EINVAL;
	e = parse_errno(s);
	if (e < 0)
		return -EINVAL;
	pthread_mutex_lock(&fd->lock);
	fd->err = e;
	pthread_mutex_unlock(&fd->lock);
	return 0;
}

static int fault_probability_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	double p;
	int n;

	pthread_mutex_lock(&fd->lock);
	p = fd->probability;
	pthread_mutex_unlock(&fd->lock);
	n = snprintf(buf, len, "%.17g\n", p);
	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

static int fault_probability_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[64];
	double p;

	if (be_attr_text(buf, len, s, sizeof(s)) || parse_probability(s, &p))
		return -EINVAL;
	pthread_mutex_lock(&fd->lock);
	fd->probability = p;
	pthread_mutex_unlock(&fd->lock);
	return 0;
}

static int fault_after_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	uint64_t a;
	int n;

	pthread_mutex_lock(&fd->lock);
	a = fd->after;
	pthread_mutex_unlock(&fd->lock);
	if (a == FAULT_AFTER_OFF)
		return be_attr_out(buf, len, "off");
	n = snprintf(buf, len, "%llu\n", (unsigned long long)a);
	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

static int fault_after_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	char s[32];
	uint64_t a;

	if (be_attr_text(buf, len, s, sizeof(s)) || parse_after(s, &a))
		return -EINVAL;
	pthread_mutex_lock(&fd->lock);
	fd->after = a;
	rearm_locked(fd);
	pthread_mutex_unlock(&fd->lock);
	return 0;
}

static int bool_show(struct fault_dev *fd, const bool *field, char *buf, size_t len)
{
	bool v;

	pthread_mutex_lock(&fd->lock);
	v = *field;
	pthread_mutex_unlock(&fd->lock);
	return be_attr_out(buf, len, v ? "1" : "0");
}

static int bool_store(struct fault_dev *fd, bool *field, const char *buf, size_t len)
{
	char s[8];
	bool v;

	if (be_attr_text(buf, len, s, sizeof(s)) || blk_parse_bool(s, &v))
		return -EINVAL;
	pthread_mutex_lock(&fd->lock);
	*field = v;
	rearm_locked(fd);
	pthread_mutex_unlock(&fd->lock);
	return 0;
}

static int fault_persistent_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	return bool_show(fd, &fd->persistent, buf, len);
}

static int fault_persistent_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	return bool_store(fd, &fd->persistent, buf, len);
}

static int fault_enabled_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	return bool_show(fd, &fd->enabled, buf, len);
}

static int fault_enabled_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;

	return bool_store(fd, &fd->enabled, buf, len);
}

/* One `OFFSET LENGTH ERRNO` line per range, in the order added. */
static int fault_badblocks_show(struct blk_backend *be, char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	size_t i, off = 0;
	int ret = 0;

	if (!len)
		return -EOVERFLOW;
	buf[0] = '\0';
	pthread_mutex_lock(&fd->lock);
	for (i = 0; i < fd->nr_bad; i++) {
		char eb[16];
		int n = snprintf(buf + off, len - off, "%llu %llu %s\n",
				 (unsigned long long)fd->bad[i].pos,
				 (unsigned long long)fd->bad[i].len,
				 errno_name(fd->bad[i].err, eb, sizeof(eb)));

		if (n < 0 || (size_t)n >= len - off) {
			ret = -EOVERFLOW;
			break;
		}
		off += (size_t)n;
	}
	pthread_mutex_unlock(&fd->lock);
	return ret ? ret : (int)off;
}

/*
 * `clear`, or lines to add. All or nothing: one bad line, a range outside
 * the device, or more than FAULT_MAX_BAD ranges in all changes nothing.
 */
static int fault_badblocks_store(struct blk_backend *be, const char *buf, size_t len)
{
	struct fault_dev *fd = (struct fault_dev *)be;
	struct fault_bad *add, *v;
	size_t nr, room;
	char s[8];
	int ret;

	if (!len || len > FAULT_TEXT_MAX || memchr(buf, '\0', len))
		return -EINVAL;
	if (!be_attr_text(buf, len, s, sizeof(s)) && !strcasecmp(s, "clear")) {
		pthread_mutex_lock(&fd->lock);
		v = fd->bad;
		fd->bad = NULL;
		fd->nr_bad = 0;
		pthread_mutex_unlock(&fd->lock);
		free(v);
		return 0;
	}
	pthread_mutex_lock(&fd->lock);
	room = FAULT_MAX_BAD - fd->nr_bad;
	pthread_mutex_unlock(&fd->lock);
	ret = parse_bad_list(buf, len, '\n', fd->size, room, &add, &nr);
	if (ret)
		return ret == -ENOMEM ? ret : -EINVAL;
	if (!nr) {
		free(add);
		return -EINVAL;
	}
	pthread_mutex_lock(&fd->lock);
	/* Another store may have added meanwhile: check the room again. */
	if (fd->nr_bad + nr > FAULT_MAX_BAD) {
		ret = -EINVAL;
		goto out_unlock;
	}
	v = realloc(fd->bad, (fd->nr_bad + nr) * sizeof(*v));
	if (!v) {
		ret = -ENOMEM;
		goto out_unlock;
	}
	memcpy(v + fd->nr_bad, add, nr * sizeof(*v));
	fd->bad = v;
	fd->nr_bad += nr;
out_unlock:
	pthread_mutex_unlock(&fd->lock);
	free(add);
	return ret;
}

static const struct blk_attr fault_attrs[] = {
	{ .name = "ops", .show = fault_ops_show, .store = fault_ops_store },
	{ .name = "errno", .show = fault_errno_show, .store = fault_errno_store },
	{ .name = "probability", .show = fault_probability_show, .store = fault_probability_store },
	{ .name = "after", .show = fault_after_show, .store = fault_after_store },
	{ .name = "persistent", .show = fault_persistent_show, .store = fault_persistent_store },
	{ .name = "badblocks", .show = fault_badblocks_show, .store = fault_badblocks_store },
	{ .name = "enabled", .show = fault_enabled_show, .store = fault_enabled_store },
	{ .name = NULL },
};

const struct blk_backend_ops fault_filter_ops = {
	.name = "fault",
	.is_filter = true,
	.keys = fault_keys,
	.help = "fault: fail I/O with an errno; fault.ops = read,write,flush,discard, fault.errno = EIO, "
		"fault.probability = 0..1, fault.after = N, fault.persistent = yes|no, "
		"fault.badblocks = OFFSET LENGTH ERRNO, ...",
	.open = fault_open,
	.close = fault_close,
	.geometry = be_filter_geometry,
	.submit = fault_submit,
	.stat = fault_stat,
	.attrs = fault_attrs,
	.snap = &be_filter_snap_ops,
};
