/* SPDX-License-Identifier: MIT */
/*
 * core/conf.c - the blkfs.conf parser: config text in, struct conf out.
 *
 * A hand-written INI reader (Debian's libinih keeps a "# comment" after a
 * value as part of the value). Pure: no file I/O and no printing; an error is
 * one line, "FILE:LINE: KEY: message", in the caller's buffer. It is fuzzed
 * (tests/fuzz/conf_fuzz.c), so it trusts nothing about the text: NUL bytes,
 * a missing final newline, huge numbers and very long lines all end in a
 * clean -EINVAL.
 *
 * One pass over the lines. A section is checked when it ends (at the next
 * header or at the end of the text), because a device's `backend`, which
 * decides what other keys the section may hold, can come after them. What
 * spans sections (folio_size against every logical block size) is checked at
 * the end. So errors come out in file order, except that a section's syntax
 * errors come before its other errors, and its backend and then its
 * `filters` list are checked before its other keys (they decide which
 * other keys are allowed).
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

/*
 * The largest config text taken. A real config is a few KiB (at most 64
 * devices); the bound keeps line numbers and counts far from overflow and
 * a fuzzer's inputs cheap.
 */
#define CONF_MAX_LEN		(1u << 20)
#define SHOW_MAX		48	/* user text echoed in a message, at most */

#define CONF_DEF_CACHE		(256ull << 20)
#define CONF_MIN_CACHE		(1ull << 20)
#define CONF_MAX_CACHE		(1ull << 40)
#define CONF_MIN_FOLIOS		8
#define CONF_DEF_FOLIO		(64u << 10)
#define CONF_DEF_BG_PCT		10
#define CONF_DEF_LIMIT_PCT	40
#define CONF_DEF_EXPIRE_MS	5000u
#define NS_PER_MS		1000000ull
#define NS_PER_S		1000000000ull
#define CONF_MIN_EXPIRE_MS	100u
#define CONF_MAX_EXPIRE_MS	3600000u

#define CONF_DEF_MAX_IO		(1u << 20)
#define CONF_MAX_MAX_IO		(64u << 20)
#define CONF_MAX_IO_HINT	(1u << 30)	/* io_min, io_opt */
#define CONF_MAX_DEV_SIZE	(1ull << 62)	/* keeps pos + len within off_t */
#define CONF_PAGE		4096u		/* set_init_blocksize's PAGE_SIZE */

enum cache_key { CK_SIZE, CK_FOLIO, CK_BG, CK_LIMIT, CK_EXPIRE, CK_NR };

static const char *const cache_keys[CK_NR] = {
	[CK_SIZE] = "size",
	[CK_FOLIO] = "folio_size",
	[CK_BG] = "dirty_background",
	[CK_LIMIT] = "dirty_limit",
	[CK_EXPIRE] = "dirty_expire",
};

enum dev_key { DK_BACKEND, DK_SIZE, DK_LBS, DK_PBS, DK_IO_MIN, DK_IO_OPT,
	       DK_MAX_IO, DK_CBS, DK_FILTERS, DK_RMW, DK_ON_ERROR, DK_READ_AHEAD,
	       DK_MODE, DK_UID, DK_GID, DK_WRITE_CACHE, DK_NR };

static const char *const dev_keys[DK_NR] = {
	[DK_BACKEND] = "backend",
	[DK_SIZE] = "size",
	[DK_LBS] = "logical_block_size",
	[DK_PBS] = "physical_block_size",
	[DK_IO_MIN] = "io_min",
	[DK_IO_OPT] = "io_opt",
	[DK_MAX_IO] = "max_io",
	[DK_CBS] = "cache_block_size",
	[DK_FILTERS] = "filters",
	[DK_RMW] = "rmw",
	[DK_ON_ERROR] = "on_error",
	[DK_READ_AHEAD] = "read_ahead",
	[DK_MODE] = "mode",
	[DK_UID] = "uid",
	[DK_GID] = "gid",
	[DK_WRITE_CACHE] = "write_cache",
};

enum conf_section { SEC_NONE, SEC_CACHE, SEC_DEVICE, SEC_MOUNT };

struct conf_parser {
	struct conf *c;
	char *err;
	size_t errlen;
	char *sp, *send;		/* free space in c->strings */
	int line;			/* current line, for -ENOMEM */
	enum conf_section sec;
	int params_cap;			/* of the current device's params */
	/* [cache]: each key's value and line, NULL / 0 when absent */
	const char *cval[CK_NR];
	int cline[CK_NR];
	bool cache_done;
};

/* A string as a size message shows it: "64K", "1M", else plain bytes. */
struct size_str {
	char s[24];
};

static const char *size_str(struct size_str *b, uint64_t v)
{
	static const char sfx[] = "KMGT";
	int i = 0;

	if (!v || (v & 1023)) {
		snprintf(b->s, sizeof(b->s), "%" PRIu64, v);
		return b->s;
	}
	while (i < 3 && v >= 1024 && !(v & 1023) && !((v >> 10) & 1023)) {
		v >>= 10;
		i++;
	}
	v >>= 10;
	snprintf(b->s, sizeof(b->s), "%" PRIu64 "%c", v, sfx[i]);
	return b->s;
}

/* User text as a message echoes it: cut at SHOW_MAX bytes. */
struct show_str {
	char s[SHOW_MAX + 4];
};

static const char *show(struct show_str *b, const char *s)
{
	size_t n = strnlen(s, SHOW_MAX + 1);

	if (n <= SHOW_MAX) {
		memcpy(b->s, s, n + 1);
	} else {
		memcpy(b->s, s, SHOW_MAX);
		memcpy(b->s + SHOW_MAX, "...", 4);
	}
	return b->s;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f';
}

static bool is_digit(char ch)
{
	return ch >= '0' && ch <= '9';
}

/*
 * Write "FILE:LINE: KEY: message" into @err (any size, even 0). Control
 * characters that came in with the user's text become '?', so the message
 * stays one line whatever the file name or value held.
 */
static void conf_vmsg(const char *file, char *err, size_t errlen, int line,
		      const char *key, const char *fmt, va_list ap)
{
	struct show_str k;
	size_t i;
	int n;

	if (!err || !errlen)
		return;
	n = snprintf(err, errlen, "%s:%d: %s: ", file, line, show(&k, key));
	if (n >= 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - n, fmt, ap);
	for (i = 0; i < errlen && err[i]; i++)
		if ((unsigned char)err[i] < 0x20 || err[i] == 0x7f)
			err[i] = '?';
}

static int conf_err(struct conf_parser *p, int line, const char *key,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int conf_err(struct conf_parser *p, int line, const char *key,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_vmsg(p->c->file, p->err, p->errlen, line, key, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int conf_nomem(struct conf_parser *p)
{
	conf_err(p, p->line, "config", "out of memory");
	return -ENOMEM;
}

/* Copy @n bytes of @s into c->strings, NUL-terminated. */
static char *save(struct conf_parser *p, const char *s, size_t n)
{
	char *r = p->sp;

	/* conf_parse_buf() sized the arena so that this cannot happen. */
	if ((size_t)(p->send - p->sp) < n + 1)
		return NULL;
	memcpy(r, s, n);
	r[n] = '\0';
	p->sp += n + 1;
	return r;
}

/* Decimal digits only, at least one; -ERANGE past UINT64_MAX. */
static int parse_uint(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!is_digit(*s))
		return -EINVAL;
	for (; is_digit(*s); s++) {
		unsigned d = *s - '0';

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (*s)
		return -EINVAL;
	*out = v;
	return 0;
}

/* A size value of @key on @line, through blk_parse_size(). */
static int get_size(struct conf_parser *p, const char *key, const char *val,
		    int line, uint64_t *out)
{
	struct show_str v;
	int ret = blk_parse_size(val, out);

	if (ret == -ERANGE)
		return conf_err(p, line, key, "%s is too large (allowed: a size below 16384T)",
				show(&v, val));
	if (ret)
		return conf_err(p, line, key,
				"%s is not a size (allowed: digits with an optional K, M, G or T suffix, e.g. 64K)",
				show(&v, val));
	return 0;
}

/* A block size: power of two, 512..64K. */
static int get_block_size(struct conf_parser *p, const char *key,
			  const char *val, int line, uint32_t *out)
{
	struct show_str v;
	uint64_t n;
	int ret;

	ret = get_size(p, key, val, line, &n);
	if (ret)
		return ret;
	if (!blk_is_pow2(n))
		return conf_err(p, line, key,
				"%s is not a power of two (allowed: 512, 1K, ..., 64K)",
				show(&v, val));
	if (n < CONF_MIN_BLOCK || n > CONF_MAX_BLOCK)
		return conf_err(p, line, key,
				"%s is out of range (allowed: 512, 1K, ..., 64K)",
				show(&v, val));
	*out = n;
	return 0;
}

/* ------------------------------------------------------------------ */
/* [cache] */

/*
 * dirty_background / dirty_limit: "N%" of the cache size, or a size in
 * bytes. Resolved into bytes.
 */
static int get_dirty(struct conf_parser *p, enum cache_key k, uint64_t size,
		     unsigned def_pct, uint64_t *out)
{
	const char *val = p->cval[k], *key = cache_keys[k];
	int line = p->cline[k];
	struct size_str s;
	struct show_str v;
	size_t n;
	uint64_t x;
	int ret;

	if (!val) {
		*out = size * def_pct / 100;
		return 0;
	}
	n = strlen(val);
	if (n && val[n - 1] == '%') {
		char num[8];

		if (n - 1 >= sizeof(num))
			ret = -ERANGE;
		else {
			memcpy(num, val, n - 1);
			num[n - 1] = '\0';
			ret = parse_uint(num, &x);
		}
		if (ret == -EINVAL)
			return conf_err(p, line, key,
					"%s is not a percentage (allowed: 1%%..100%% of the cache size, or a size in bytes)",
					show(&v, val));
		if (ret || x < 1 || x > 100)
			return conf_err(p, line, key,
					"%s is out of range (allowed: 1%%..100%% of the cache size, or a size in bytes)",
					show(&v, val));
		*out = size * x / 100;
		return 0;
	}
	ret = get_size(p, key, val, line, &x);
	if (ret)
		return ret;
	if (x < 1 || x > size)
		return conf_err(p, line, key,
				"%s is out of range (allowed: 1%%..100%% of the cache size, or a size in bytes from 1 to the cache size %s)",
				show(&v, val), size_str(&s, size));
	*out = x;
	return 0;
}

static int finish_cache(struct conf_parser *p)
{
	struct conf_cache *cc = &p->c->cache;
	struct size_str s1, s2, s3;
	struct show_str v;
	uint64_t n, min;
	const char *val;
	int line, ret;

	cc->folio_size = CONF_DEF_FOLIO;
	val = p->cval[CK_FOLIO];
	line = p->cline[CK_FOLIO];
	if (val) {
		ret = get_size(p, "folio_size", val, line, &n);
		if (ret)
			return ret;
		if (!blk_is_pow2(n))
			return conf_err(p, line, "folio_size",
					"%s is not a power of two (allowed: 4K, 8K, ..., 2M)",
					show(&v, val));
		if (n < CONF_MIN_FOLIO || n > CONF_MAX_FOLIO)
			return conf_err(p, line, "folio_size",
					"%s is out of range (allowed: 4K, 8K, ..., 2M)",
					show(&v, val));
		cc->folio_size = n;
	}

	cc->size = CONF_DEF_CACHE;
	val = p->cval[CK_SIZE];
	line = p->cline[CK_SIZE];
	if (val) {
		ret = get_size(p, "size", val, line, &n);
		if (ret)
			return ret;
		min = (uint64_t)cc->folio_size * CONF_MIN_FOLIOS;
		if (min < CONF_MIN_CACHE)
			min = CONF_MIN_CACHE;
		if (n < min || n > CONF_MAX_CACHE)
			return conf_err(p, line, "size",
					"%s is out of range (allowed: %s..%s: at least 1M and %d folios of folio_size %s)",
					show(&v, val), size_str(&s1, min),
					size_str(&s2, CONF_MAX_CACHE), CONF_MIN_FOLIOS,
					size_str(&s3, cc->folio_size));
		cc->size = n;
	}

	ret = get_dirty(p, CK_BG, cc->size, CONF_DEF_BG_PCT, &cc->dirty_background);
	if (ret)
		return ret;
	ret = get_dirty(p, CK_LIMIT, cc->size, CONF_DEF_LIMIT_PCT, &cc->dirty_limit);
	if (ret)
		return ret;
	if (cc->dirty_background >= cc->dirty_limit) {
		/* Blame the one the config gave; dirty_background if both. */
		enum cache_key k = p->cval[CK_BG] ? CK_BG : CK_LIMIT;

		return conf_err(p, p->cline[k], cache_keys[k],
				"dirty_background (%" PRIu64 " bytes) must be below dirty_limit (%" PRIu64 " bytes) (allowed: dirty_background < dirty_limit <= size)",
				cc->dirty_background, cc->dirty_limit);
	}

	cc->dirty_expire_ms = CONF_DEF_EXPIRE_MS;
	val = p->cval[CK_EXPIRE];
	line = p->cline[CK_EXPIRE];
	if (val) {
		/* Plain seconds were always taken here, and still are. */
		ret = blk_parse_duration(val, NS_PER_S, &n);
		if (ret == -EINVAL)
			return conf_err(p, line, "dirty_expire",
					"%s is not a duration (allowed: 100ms..1h; " BLK_DURATION_HELP ", or plain seconds)",
					show(&v, val));
		if (ret || n < CONF_MIN_EXPIRE_MS * NS_PER_MS || n > CONF_MAX_EXPIRE_MS * NS_PER_MS)
			return conf_err(p, line, "dirty_expire",
					"%s is out of range (allowed: 100ms..1h)",
					show(&v, val));
		if (n % NS_PER_MS)
			return conf_err(p, line, "dirty_expire",
					"%s is finer than the flusher's 1ms resolution (allowed: whole milliseconds)",
					show(&v, val));
		cc->dirty_expire_ms = n / NS_PER_MS;
	}
	p->cache_done = true;
	return 0;
}

static int cache_key_line(struct conf_parser *p, const char *key,
			  const char *val, int line)
{
	int k;

	for (k = 0; k < CK_NR; k++)
		if (!strcmp(key, cache_keys[k]))
			break;
	if (k == CK_NR)
		return conf_err(p, line, key,
				"unknown key in [cache] (allowed: size, folio_size, dirty_background, dirty_limit, dirty_expire)");
	if (p->cval[k])
		return conf_err(p, line, key, "duplicate key (first given on line %d)",
				p->cline[k]);
	p->cval[k] = val;
	p->cline[k] = line;
	return 0;
}

/* ------------------------------------------------------------------ */
/* [device NAME] */

static int dev_key_index(const char *key)
{
	int k;

	for (k = 0; k < DK_NR; k++)
		if (!strcmp(key, dev_keys[k]))
			return k;
	return -1;
}

static bool backend_has_key(const struct blk_backend_ops *ops, const char *key)
{
	const char *const *k;

	for (k = ops->keys; k && *k; k++)
		if (!strcmp(*k, key))
			return true;
	return false;
}

static int unknown_dev_key(struct conf_parser *p, const struct conf_device *d,
			   const struct blk_param *prm)
{
	char list[512];
	size_t n = 0;
	const char *const *k;
	int i;

	list[0] = '\0';
	for (i = 0; i < DK_NR; i++) {
		int r = snprintf(list + n, sizeof(list) - n, "%s%s", i ? ", " : "", dev_keys[i]);

		if (r < 0 || (size_t)r >= sizeof(list) - n)
			break;
		n += r;
	}
	for (k = d->ops->keys; k && *k; k++) {
		int r = snprintf(list + n, sizeof(list) - n, ", %s", *k);

		if (r < 0 || (size_t)r >= sizeof(list) - n)
			break;
		n += r;
	}
	return conf_err(p, prm->line, prm->key,
			"unknown key for backend %s (allowed: %s)", d->ops->name, list);
}

/*
 * `filters = log, delay`: names separated by commas and/or whitespace, each
 * a registered filter, each once (a second instance would share the first's
 * `NAME.key` settings and .sys directory), at most CONF_MAX_FILTERS.
 */
static int parse_filters(struct conf_parser *p, struct conf_device *d,
			 const struct blk_param *prm)
{
	const char *s = prm->value;
	struct show_str v;

	d->nr_filters = 0;
	for (;;) {
		const struct blk_backend_ops *ops;
		char name[SHOW_MAX + 2];	/* one more: show() adds "..." */
		size_t n;
		int i;

		while (*s == ',' || is_space(*s))
			s++;
		if (!*s)
			break;
		n = strcspn(s, ", \t\r\v\f");
		memcpy(name, s, n < sizeof(name) - 1 ? n : sizeof(name) - 1);
		name[n < sizeof(name) - 1 ? n : sizeof(name) - 1] = '\0';
		s += n;
		ops = n < sizeof(name) - 1 ? blk_backend_find(name) : NULL;
		if (!ops)
			return conf_err(p, prm->line, prm->key,
					"%s is not a filter (allowed: a list of %s)",
					show(&v, name), blk_filter_names());
		if (!ops->is_filter)
			return conf_err(p, prm->line, prm->key,
					"%s is a backend, not a filter (allowed: a list of %s)",
					ops->name, blk_filter_names());
		for (i = 0; i < d->nr_filters; i++)
			if (d->filters[i] == ops)
				return conf_err(p, prm->line, prm->key,
						"%s is listed twice (allowed: each filter once)",
						ops->name);
		if (d->nr_filters == CONF_MAX_FILTERS)
			return conf_err(p, prm->line, prm->key,
					"too many filters (allowed: at most %d)",
					CONF_MAX_FILTERS);
		d->filters[d->nr_filters++] = ops;
	}
	if (!d->nr_filters)
		return conf_err(p, prm->line, prm->key,
				"no filter names (allowed: a list of %s, separated by commas or spaces)",
				blk_filter_names());
	return 0;
}

/* "a, b" from @ops' keys, each with @prefix, into @list; "" if none. */
static void key_list(const struct blk_backend_ops *ops, const char *prefix,
		     char *list, size_t len)
{
	const char *const *k;
	size_t n = 0;

	list[0] = '\0';
	for (k = ops->keys; k && *k; k++) {
		int r = snprintf(list + n, len - n, "%s%s%s", n ? ", " : "", prefix, *k);

		if (r < 0 || (size_t)r >= len - n) {
			list[n] = '\0';
			break;
		}
		n += r;
	}
}

/*
 * @prm is neither a core nor a backend key: it may be a filter's setting,
 * FILTER.KEY. The filter must be one of the device's `filters` (@fprm, NULL
 * when the section has none) and list KEY in its ops->keys. Returns 0 if
 * it is, else -EINVAL with the message.
 */
static int filter_key(struct conf_parser *p, const struct conf_device *d,
		      const struct blk_param *prm, const struct blk_param *fprm)
{
	const char *dot = strchr(prm->key, '.');
	const struct blk_backend_ops *ops = NULL;
	char name[SHOW_MAX + 2], list[512];
	struct show_str v;
	size_t n;
	int i;

	if (!dot || dot == prm->key)
		return unknown_dev_key(p, d, prm);
	n = dot - prm->key;
	if (n < sizeof(name)) {
		memcpy(name, prm->key, n);
		name[n] = '\0';
		ops = blk_backend_find(name);
	}
	if (!ops || !ops->is_filter)
		return conf_err(p, prm->line, prm->key,
				"unknown key: not a key of backend %s, and %.*s is not a filter (allowed filter settings: FILTER.KEY with FILTER one of %s)",
				d->ops->name, (int)(n < SHOW_MAX ? n : SHOW_MAX), prm->key,
				blk_filter_names());
	for (i = 0; i < d->nr_filters; i++)
		if (d->filters[i] == ops)
			break;
	if (i == d->nr_filters) {
		if (fprm)
			return conf_err(p, prm->line, prm->key,
					"the %s filter is not in this device's filters (filters = %s)",
					ops->name, show(&v, fprm->value));
		return conf_err(p, prm->line, prm->key,
				"the %s filter is not in this device's filters (no filters key; add filters = %s)",
				ops->name, ops->name);
	}
	if (!backend_has_key(ops, dot + 1)) {
		snprintf(name, sizeof(name), "%s.", ops->name);
		key_list(ops, name, list, sizeof(list));
		if (!list[0])
			return conf_err(p, prm->line, prm->key,
					"unknown key for filter %s (it takes no keys)", ops->name);
		return conf_err(p, prm->line, prm->key,
				"unknown key for filter %s (allowed: %s)", ops->name, list);
	}
	return 0;
}

/* Check one core key's value on its own; cross-key rules come later. */
static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       is_digit(ch) || ch == '_' || ch == '.' || ch == '-';
}

static int dev_value(struct conf_parser *p, int k, const struct blk_param *prm,
		     uint64_t *out)
{
	struct size_str s;
	struct show_str v;
	uint32_t bs = 0;
	int ret;

	switch (k) {
	case DK_LBS:
	case DK_PBS:
		ret = get_block_size(p, prm->key, prm->value, prm->line, &bs);
		*out = bs;
		return ret;
	case DK_RMW:
		if (strcmp(prm->value, "cache") && strcmp(prm->value, "device"))
			return conf_err(p, prm->line, prm->key, "%s is not a choice (allowed: cache, device)",
					show(&v, prm->value));
		*out = !strcmp(prm->value, "device");
		return 0;
	case DK_WRITE_CACHE:
		if (strcmp(prm->value, "write back") && strcmp(prm->value, "write through"))
			return conf_err(p, prm->line, prm->key,
					"%s is not a choice (allowed: write back, write through)",
					show(&v, prm->value));
		*out = !strcmp(prm->value, "write through");
		return 0;
	case DK_ON_ERROR:
		if (strcmp(prm->value, "keep") && strcmp(prm->value, "drop"))
			return conf_err(p, prm->line, prm->key, "%s is not a choice (allowed: keep, drop)",
					show(&v, prm->value));
		*out = !strcmp(prm->value, "drop");
		return 0;
	case DK_MODE: {
		char *end;
		unsigned long m = strtoul(prm->value, &end, 8);

		if (*end || prm->value[0] < '0' || prm->value[0] > '7' || m > 0777)
			return conf_err(p, prm->line, prm->key,
					"%s is not a permission mode (allowed: octal, 0000 to 0777, e.g. 0660)",
					show(&v, prm->value));
		*out = m;
		return 0;
	}
	case DK_UID:
	case DK_GID: {
		const char *c;

		/* a number, or a name the daemon looks up (conf does no I/O) */
		for (c = prm->value; *c; c++)
			if (!name_char(*c))
				return conf_err(p, prm->line, prm->key,
						"%s is not a user or group (allowed: a number or a name of A-Z a-z 0-9 _ . -)",
						show(&v, prm->value));
		*out = 0;
		return 0;
	}
	case DK_READ_AHEAD:
		if (!strcmp(prm->value, "off")) {
			*out = 0;
			return 0;
		}
		ret = get_size(p, prm->key, prm->value, prm->line, out);
		if (ret)
			return ret;
		if (*out % 512 || *out > CONF_MAX_READ_AHEAD)
			return conf_err(p, prm->line, prm->key,
					"%s is out of range (allowed: off, 0, or a multiple of 512 up to %s)",
					show(&v, prm->value), size_str(&s, CONF_MAX_READ_AHEAD));
		return 0;
	case DK_CBS:
		if (!strcmp(prm->value, "auto")) {
			*out = 0;
			return 0;
		}
		ret = get_size(p, prm->key, prm->value, prm->line, out);
		if (ret)
			return ret;
		if (!blk_is_pow2(*out) || *out < CONF_MIN_BLOCK || *out > CONF_MAX_FOLIO)
			return conf_err(p, prm->line, prm->key,
					"%s is not a power of two from 512 to 2M (allowed: auto, or a power of two from the logical block size to folio_size)",
					show(&v, prm->value));
		return 0;
	default:
		break;
	}

	ret = get_size(p, prm->key, prm->value, prm->line, out);
	if (ret)
		return ret;
	switch (k) {
	case DK_SIZE:
		if (!*out || *out > CONF_MAX_DEV_SIZE)
			return conf_err(p, prm->line, prm->key,
					"%s is out of range (allowed: a multiple of the logical block size, up to %s)",
					show(&v, prm->value), size_str(&s, CONF_MAX_DEV_SIZE));
		break;
	case DK_IO_MIN:
	case DK_IO_OPT:
		if (!*out || *out > CONF_MAX_IO_HINT)
			return conf_err(p, prm->line, prm->key,
					"%s is out of range (allowed: a multiple of the logical block size, up to %s)",
					show(&v, prm->value), size_str(&s, CONF_MAX_IO_HINT));
		break;
	case DK_MAX_IO:
		if (*out < CONF_MIN_BLOCK || *out > CONF_MAX_MAX_IO)
			return conf_err(p, prm->line, prm->key,
					"%s is out of range (allowed: a multiple of the physical block size, from the physical block size to %s)",
					show(&v, prm->value), size_str(&s, CONF_MAX_MAX_IO));
		break;
	}
	return 0;
}

/*
 * The section of @d has ended: resolve the backend, check every key and the
 * rules between them, and fill d->geo (with the defaults when the config
 * gives the size, i.e. the geometry).
 */
static int finish_device(struct conf_parser *p, struct conf_device *d)
{
	const struct blk_param *at[DK_NR] = { NULL };
	const struct blk_param *fprm = NULL;
	uint64_t val[DK_NR] = { 0 };
	struct size_str s1, s3;
	struct show_str v;
	struct blk_geometry *g = &d->geo;
	uint64_t lbs, pbs;
	int i, j, ret;

	/* The backend first: it decides which other keys are allowed. */
	for (i = 0; i < d->nr_params; i++)
		if (!strcmp(d->params[i].key, "backend"))
			break;
	if (i == d->nr_params) {
		char hdr[CONF_NAME_MAX + 16];

		snprintf(hdr, sizeof(hdr), "[device %s]", d->name);
		return conf_err(p, d->line, hdr,
				"no backend key (required; allowed: backend = %s)",
				blk_backend_names());
	}
	d->ops = blk_backend_find(d->params[i].value);
	if (!d->ops)
		return conf_err(p, d->params[i].line, "backend",
				"%s is not a backend (allowed: %s)",
				show(&v, d->params[i].value), blk_backend_names());
	if (d->ops->is_filter)
		return conf_err(p, d->params[i].line, "backend",
				"%s is a filter, not a backend (allowed: %s)",
				d->ops->name, blk_backend_names());

	/* Then the filters: they decide which FILTER.KEY keys are allowed. */
	for (i = 0; i < d->nr_params; i++) {
		if (!strcmp(d->params[i].key, "filters")) {
			fprm = &d->params[i];
			ret = parse_filters(p, d, fprm);
			if (ret)
				return ret;
			break;
		}
	}

	for (i = 0; i < d->nr_params; i++) {
		struct blk_param *prm = &d->params[i];
		int k = dev_key_index(prm->key);

		/* A filter's key stays unused: its open() takes it. */
		if (k < 0 && !backend_has_key(d->ops, prm->key)) {
			ret = filter_key(p, d, prm, fprm);
			if (ret)
				return ret;
		}
		/*
		 * Every earlier key is known and unique, so this scan is
		 * bounded by the number of allowed keys, not of lines.
		 */
		for (j = 0; j < i; j++)
			if (!strcmp(d->params[j].key, prm->key))
				return conf_err(p, prm->line, prm->key,
						"duplicate key (first given on line %d)",
						d->params[j].line);
		if (k < 0)
			continue;
		prm->used = true;
		at[k] = prm;
		if (k == DK_BACKEND || k == DK_FILTERS)
			continue;
		ret = dev_value(p, k, prm, &val[k]);
		if (ret)
			return ret;
	}

	/*
	 * The rules between keys, with what is known here: the logical block
	 * size is 512 when the config gives the size but not the block size;
	 * without a size the backend decides, and conf_check_geometry() checks
	 * its answer.
	 */
	lbs = val[DK_LBS];
	if (!lbs)
		lbs = CONF_MIN_BLOCK;	/* the default, or the least the backend may say */
	pbs = val[DK_PBS];
	if (pbs && pbs < lbs) {
		const char *ls = size_str(&s1, lbs);

		/* val[k] is non-zero only where the loop above set at[k] */
		assert(at[DK_PBS]);

		return conf_err(p, at[DK_PBS]->line, "physical_block_size",
				"%s is smaller than the logical block size %s (allowed: a power of two from %s to 64K)",
				show(&v, at[DK_PBS]->value), ls, ls);
	}
	if (!pbs)
		pbs = lbs;
	if (at[DK_SIZE] && val[DK_SIZE] % lbs) {
		const char *ls = size_str(&s1, lbs);

		return conf_err(p, at[DK_SIZE]->line, "size",
				"%s is not a multiple of the logical block size %s (allowed: a multiple of %s)",
				show(&v, at[DK_SIZE]->value), ls, ls);
	}
	if (at[DK_MAX_IO] && (val[DK_MAX_IO] < pbs || val[DK_MAX_IO] % pbs)) {
		const char *ps = size_str(&s1, pbs);

		return conf_err(p, at[DK_MAX_IO]->line, "max_io",
				"%s is %s the physical block size %s (allowed: a multiple of %s from %s to %s)",
				show(&v, at[DK_MAX_IO]->value),
				val[DK_MAX_IO] < pbs ? "smaller than" : "not a multiple of",
				ps, ps, ps, size_str(&s3, CONF_MAX_MAX_IO));
	}
	for (i = DK_IO_MIN; i <= DK_IO_OPT; i++) {
		const char *ls = size_str(&s1, lbs);

		if (at[i] && val[i] % lbs)
			return conf_err(p, at[i]->line, dev_keys[i],
					"%s is not a multiple of the logical block size %s (allowed: a multiple of %s, up to %s)",
					show(&v, at[i]->value), ls, ls,
					size_str(&s3, CONF_MAX_IO_HINT));
	}
	if (val[DK_CBS]) {
		const char *ls = size_str(&s1, lbs);

		assert(at[DK_CBS]);	/* as for at[DK_PBS] above */

		if (val[DK_CBS] < lbs)
			return conf_err(p, at[DK_CBS]->line, "cache_block_size",
					"%s is smaller than the logical block size %s (allowed: auto, or a power of two from %s to folio_size)",
					show(&v, at[DK_CBS]->value), ls, ls);
		if (at[DK_SIZE] && val[DK_SIZE] % val[DK_CBS])
			return conf_err(p, at[DK_CBS]->line, "cache_block_size",
					"%s does not divide the size %" PRIu64 " (allowed: auto, or a power of two that divides the size)",
					show(&v, at[DK_CBS]->value), val[DK_SIZE]);
	}

	d->cache_block_size = val[DK_CBS];
	d->rmw_device = val[DK_RMW];
	d->on_error_drop = val[DK_ON_ERROR];
	d->write_through = val[DK_WRITE_CACHE];
	d->read_ahead = at[DK_READ_AHEAD] ? (uint32_t)val[DK_READ_AHEAD] : CONF_DEF_READ_AHEAD;
	d->mode = at[DK_MODE] ? (uint32_t)val[DK_MODE] : CONF_DEF_MODE;
	d->owner = at[DK_UID] ? at[DK_UID]->value : NULL;
	d->group = at[DK_GID] ? at[DK_GID]->value : NULL;
	g->size = val[DK_SIZE];
	g->lbs = val[DK_LBS];
	g->pbs = val[DK_PBS];
	g->io_min = val[DK_IO_MIN];
	g->io_opt = val[DK_IO_OPT];
	g->max_io = val[DK_MAX_IO];
	if (at[DK_SIZE]) {
		g->lbs = lbs;
		g->pbs = pbs;
		if (!g->max_io)		/* 1M is a multiple of every pbs */
			g->max_io = CONF_DEF_MAX_IO;
		if (!g->io_min)
			g->io_min = g->pbs;
		if (!g->io_opt)
			g->io_opt = g->max_io;
	}
	return 0;
}

/* The line @key is on in @d's section, else the section's line. */
static int dev_param_line(const struct conf_device *d, const char *key)
{
	int i;

	for (i = 0; i < d->nr_params; i++)
		if (!strcmp(d->params[i].key, key))
			return d->params[i].line;
	return d->line;
}

static int add_param(struct conf_parser *p, struct conf_device *d,
		     const char *key, const char *value, int line)
{
	struct blk_param *prm;

	if (d->nr_params == p->params_cap) {
		int cap = p->params_cap ? 2 * p->params_cap : 16;

		prm = realloc(d->params, cap * sizeof(*prm));
		if (!prm)
			return conf_nomem(p);
		d->params = prm;
		p->params_cap = cap;
	}
	prm = &d->params[d->nr_params++];
	prm->key = key;
	prm->value = value;
	prm->line = line;
	prm->used = false;
	return 0;
}

/* ------------------------------------------------------------------ */
/* lines */

static int finish_section(struct conf_parser *p)
{
	switch (p->sec) {
	case SEC_CACHE:
		return finish_cache(p);
	case SEC_DEVICE:
		return finish_device(p, &p->c->devs[p->c->nr_devs - 1]);
	default:
		return 0;
	}
}

/* @s, @n: the header's text inside the brackets; @hdr: the whole header. */
static int header_line(struct conf_parser *p, const char *s, size_t n,
		       const char *hdr)
{
	struct conf *c = p->c;
	struct conf_device *d;
	int i, ret;

	ret = finish_section(p);
	if (ret)
		return ret;

	while (n && is_space(*s))
		s++, n--;
	while (n && is_space(s[n - 1]))
		n--;

	if (n == 5 && !memcmp(s, "mount", 5)) {
		if (c->mount.line)
			return conf_err(p, p->line, hdr,
					"duplicate section (first defined on line %d)",
					c->mount.line);
		c->mount.line = p->line;
		p->sec = SEC_MOUNT;
		return 0;
	}
	if (n == 5 && !memcmp(s, "cache", 5)) {
		if (c->cache.line)
			return conf_err(p, p->line, hdr,
					"duplicate section (first defined on line %d)",
					c->cache.line);
		c->cache.line = p->line;
		p->sec = SEC_CACHE;
		return 0;
	}
	if (n < 6 || memcmp(s, "device", 6) || (n > 6 && !is_space(s[6])))
		return conf_err(p, p->line, hdr,
				"unknown section (allowed: [cache], [mount], [device NAME])");
	s += 6;
	n -= 6;
	while (n && is_space(*s))
		s++, n--;
	if (!n)
		return conf_err(p, p->line, hdr,
				"missing device name (allowed: [device NAME], NAME of 1..%d characters from A-Z a-z 0-9 _ . -, not starting with '.')",
				CONF_NAME_MAX);
	for (i = 0; (size_t)i < n; i++)
		if (!name_char(s[i]))
			break;
	if ((size_t)i < n || n > CONF_NAME_MAX || s[0] == '.')
		return conf_err(p, p->line, hdr,
				"invalid device name (allowed: 1..%d characters from A-Z a-z 0-9 _ . -, not starting with '.')",
				CONF_NAME_MAX);
	for (i = 0; i < c->nr_devs; i++)
		if (strlen(c->devs[i].name) == n && !memcmp(c->devs[i].name, s, n))
			return conf_err(p, p->line, hdr,
					"duplicate device (first defined on line %d)",
					c->devs[i].line);
	if (c->nr_devs == CONF_MAX_DEVICES)
		return conf_err(p, p->line, hdr,
				"too many devices (allowed: at most %d)", CONF_MAX_DEVICES);

	d = &c->devs[c->nr_devs++];
	memcpy(d->name, s, n);
	d->name[n] = '\0';
	d->line = p->line;
	p->params_cap = 0;
	p->sec = SEC_DEVICE;
	return 0;
}

/*
 * [mount]: how the kernel side of the mount behaves. The same keys are mount
 * options (`-o kernel_cache=writeback`, an fstab line), which override the
 * file: conf_mount_set().
 */
enum mount_key {
	MK_KERNEL_CACHE, MK_ALLOW_OTHER, MK_MAX_PENDING, MK_TRANSPORT, MK_URING_QUEUE_DEPTH,
	MK_URING_SPIN, MK_SHUTDOWN_TIMEOUT, MK_TRANSPORT_PROBE, MK_NR
};

static const char *const mount_keys[MK_NR] = {
	[MK_KERNEL_CACHE] = "kernel_cache",
	[MK_ALLOW_OTHER] = "allow_other",
	[MK_MAX_PENDING] = "max_pending",
	[MK_TRANSPORT] = "transport",
	[MK_URING_QUEUE_DEPTH] = "uring_queue_depth",
	[MK_URING_SPIN] = "uring_spin",
	[MK_SHUTDOWN_TIMEOUT] = "shutdown_timeout",
	[MK_TRANSPORT_PROBE] = "transport_probe",
};

static int mount_key_find(const char *key)
{
	int k;

	for (k = 0; k < MK_NR; k++)
		if (!strcmp(key, mount_keys[k]))
			return k;
	return -1;
}

/*
 * Set key @k to @val. Returns NULL, or what is wrong with @val, in @why
 * ("maybe is not a choice (allowed: yes, no)"), and changes nothing.
 */
static const char *mount_key_set(struct conf_mount *m, int k, const char *val, char *why,
				 size_t len)
{
	struct show_str v;
	uint64_t n;

	switch (k) {
	case MK_KERNEL_CACHE:
		if (strcmp(val, "none") && strcmp(val, "writeback"))
			break;
		m->kernel_writeback = !strcmp(val, "writeback");
		return NULL;
	case MK_ALLOW_OTHER:
		if (strcmp(val, "yes") && strcmp(val, "no"))
			break;
		m->allow_other = !strcmp(val, "yes");
		return NULL;
	case MK_MAX_PENDING:
		if (parse_uint(val, &n) || n < 1 || n > CONF_MAX_PENDING) {
			snprintf(why, len, "%s is not a number from 1 to %u", show(&v, val),
				 CONF_MAX_PENDING);
			return why;
		}
		m->max_pending = (uint32_t)n;
		return NULL;
	case MK_TRANSPORT:
		if (!strcmp(val, "auto"))
			m->transport = CONF_TRANSPORT_AUTO;
		else if (!strcmp(val, "uring"))
			m->transport = CONF_TRANSPORT_URING;
		else if (!strcmp(val, "dev"))
			m->transport = CONF_TRANSPORT_DEV;
		else
			break;
		return NULL;
	case MK_TRANSPORT_PROBE:
		if (!strcmp(val, "boot"))
			m->transport_probe = CONF_TPROBE_BOOT;
		else if (!strcmp(val, "always"))
			m->transport_probe = CONF_TPROBE_ALWAYS;
		else if (!strcmp(val, "off"))
			m->transport_probe = CONF_TPROBE_OFF;
		else
			break;
		return NULL;
	case MK_URING_QUEUE_DEPTH:
		/*
		 * Each entry of each CPU's queue holds a buffer of a whole
		 * request (1 MiB): 256 is already 256 MiB per CPU.
		 */
		if (parse_uint(val, &n) || n < 1 || n > CONF_MAX_URING_DEPTH) {
			snprintf(why, len, "%s is not a queue depth (allowed: 1 to %u entries per CPU)",
				 show(&v, val), CONF_MAX_URING_DEPTH);
			return why;
		}
		m->uring_queue_depth = (uint32_t)n;
		return NULL;
	case MK_URING_SPIN:
		/* whole microseconds: what a wake-up costs is tens of them */
		if (!strcmp(val, "off")) {
			m->uring_spin_us = 0;
			return NULL;
		}
		if (blk_parse_duration(val, 0, &n) || n > CONF_MAX_URING_SPIN_US * 1000ull ||
		    n % 1000) {
			snprintf(why, len, "%s is not off or a duration from 0 to %uus in whole "
				 "microseconds (%s)", show(&v, val), CONF_MAX_URING_SPIN_US,
				 BLK_DURATION_HELP);
			return why;
		}
		m->uring_spin_us = (uint32_t)(n / 1000);
		return NULL;
	case MK_SHUTDOWN_TIMEOUT:
		/*
		 * How long the end of a mount waits for requests in flight and
		 * the final writeback before it gives up on a hung I/O. Whole
		 * milliseconds: the waits are timed in them.
		 */
		if (blk_parse_duration(val, 0, &n) || n > CONF_MAX_SHUTDOWN_TIMEOUT_MS * NS_PER_MS ||
		    n % NS_PER_MS) {
			snprintf(why, len, "%s is not a duration from 0 (wait forever) to 24h in whole "
				 "milliseconds (%s)", show(&v, val), BLK_DURATION_HELP);
			return why;
		}
		m->shutdown_timeout_ms = n / NS_PER_MS;
		return NULL;
	}
	snprintf(why, len, "%s is not a choice (allowed: %s)", show(&v, val),
		 k == MK_KERNEL_CACHE ? "none, writeback" :
		 k == MK_TRANSPORT ? "auto, uring, dev" :
		 k == MK_TRANSPORT_PROBE ? "boot, always, off" : "yes, no");
	return why;
}

static int mount_key_line(struct conf_parser *p, const char *key, const char *val, int line)
{
	struct conf_mount *m = &p->c->mount;
	int *const seen[MK_NR] = {
		[MK_KERNEL_CACHE] = &m->kernel_cache_line,
		[MK_ALLOW_OTHER] = &m->allow_other_line,
		[MK_MAX_PENDING] = &m->max_pending_line,
		[MK_TRANSPORT] = &m->transport_line,
		[MK_URING_QUEUE_DEPTH] = &m->uring_queue_depth_line,
		[MK_URING_SPIN] = &m->uring_spin_line,
		[MK_SHUTDOWN_TIMEOUT] = &m->shutdown_timeout_line,
		[MK_TRANSPORT_PROBE] = &m->transport_probe_line,
	};
	int k = mount_key_find(key);
	char why[256];

	if (k < 0)
		return conf_err(p, line, key, "unknown key in [mount] (allowed: kernel_cache, "
				"allow_other, max_pending, transport, uring_queue_depth, "
				"uring_spin, shutdown_timeout, transport_probe)");
	if (*seen[k])
		return conf_err(p, line, key, "duplicate key (first given on line %d)", *seen[k]);
	if (mount_key_set(m, k, val, why, sizeof(why)))
		return conf_err(p, line, key, "%s", why);
	*seen[k] = line;
	return 0;
}

int conf_mount_set(struct conf *c, const char *key, const char *val, char *err, size_t errlen)
{
	int k = mount_key_find(key);
	char why[256];

	if (k < 0)
		return -ENOENT;
	/* a bare `allow_other` is libfuse's and mount's spelling of yes */
	if (!val && k == MK_ALLOW_OTHER)
		val = "yes";
	if (!val) {
		snprintf(err, errlen, "mount option %s: needs a value (%s=VALUE)", key, key);
		return -EINVAL;
	}
	if (mount_key_set(&c->mount, k, val, why, sizeof(why))) {
		snprintf(err, errlen, "mount option %s: %s", key, why);
		return -EINVAL;
	}
	return 0;
}

const char *const *conf_section_keys(const char *section, size_t *n)
{
	if (!strcmp(section, "cache")) {
		*n = CK_NR;
		return cache_keys;
	}
	if (!strcmp(section, "mount")) {
		*n = MK_NR;
		return mount_keys;
	}
	if (!strcmp(section, "device")) {
		*n = DK_NR;
		return dev_keys;
	}
	*n = 0;
	return NULL;
}

static int key_line(struct conf_parser *p, const char *s, size_t n)
{
	const char *eq = memchr(s, '=', n);
	const char *k = s, *v;
	size_t kn, vn;
	char *key, *val;

	if (!eq) {
		char text[SHOW_MAX + 2];	/* one more: show() adds "..." */

		kn = n < SHOW_MAX + 1 ? n : SHOW_MAX + 1;
		memcpy(text, s, kn);
		text[kn] = '\0';
		return conf_err(p, p->line, text,
				"syntax error (allowed: `key = value`, `[section]`, or a # comment)");
	}
	kn = eq - s;
	while (kn && is_space(k[kn - 1]))
		kn--;
	v = eq + 1;
	vn = n - (v - s);
	while (vn && is_space(*v))
		v++, vn--;

	key = save(p, k, kn);
	val = save(p, v, vn);
	if (!key || !val)
		return conf_nomem(p);
	if (!kn)
		return conf_err(p, p->line, "=", "syntax error: no key before '=' (allowed: `key = value`)");
	if (!vn)
		return conf_err(p, p->line, key, "empty value (allowed: `key = value`; remove the line for the default)");

	switch (p->sec) {
	case SEC_CACHE:
		return cache_key_line(p, key, val, p->line);
	case SEC_DEVICE:
		return add_param(p, &p->c->devs[p->c->nr_devs - 1], key, val, p->line);
	case SEC_MOUNT:
		return mount_key_line(p, key, val, p->line);
	default:
		return conf_err(p, p->line, key,
				"key outside a section (allowed: under [cache], [mount] or [device NAME])");
	}
}

static int one_line(struct conf_parser *p, const char *s, size_t n)
{
	const char *nul = memchr(s, '\0', n);
	size_t i;

	if (nul) {
		char text[SHOW_MAX + 2];	/* one more: show() adds "..." */
		size_t tn = nul - s;

		while (tn && is_space(*s))
			s++, tn--;
		while (tn && is_space(s[tn - 1]))
			tn--;
		if (tn > SHOW_MAX + 1)
			tn = SHOW_MAX + 1;
		memcpy(text, s, tn);
		text[tn] = '\0';
		return conf_err(p, p->line, tn ? text : "(line)",
				"NUL byte in the line (allowed: text)");
	}

	/* A # or ; at the start or after whitespace begins a comment. */
	for (i = 0; i < n; i++)
		if ((s[i] == '#' || s[i] == ';') && (i == 0 || is_space(s[i - 1])))
			break;
	n = i;
	while (n && is_space(*s))
		s++, n--;
	while (n && is_space(s[n - 1]))
		n--;
	if (!n)
		return 0;

	if (*s == '[') {
		char hdr[SHOW_MAX + 2];		/* one more: show() adds "..." */
		size_t hn = n < SHOW_MAX + 1 ? n : SHOW_MAX + 1;

		memcpy(hdr, s, hn);
		hdr[hn] = '\0';
		if (s[n - 1] != ']' || n < 2)
			return conf_err(p, p->line, hdr,
					"syntax error: a section header ends with ']' (allowed: [cache], [device NAME])");
		return header_line(p, s + 1, n - 2, hdr);
	}
	return key_line(p, s, n);
}

static int parse(struct conf_parser *p, const char *buf, size_t len)
{
	struct conf *c = p->c;
	size_t pos = 0;
	int i, ret;

	while (pos < len) {
		const char *s = buf + pos;
		const char *nl = memchr(s, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - s) : len - pos;

		p->line++;
		ret = one_line(p, s, n);
		if (ret)
			return ret;
		pos += n + (nl ? 1 : 0);
	}
	ret = finish_section(p);
	if (ret)
		return ret;
	if (!p->cache_done) {
		ret = finish_cache(p);
		if (ret)
			return ret;
	}
	if (!c->mount.uring_queue_depth)
		c->mount.uring_queue_depth = CONF_DEF_URING_DEPTH;
	if (!c->mount.uring_spin_line)
		c->mount.uring_spin_us = CONF_DEF_URING_SPIN_US;
	if (!c->nr_devs)
		return conf_err(p, 1, "[device NAME]",
				"no [device NAME] section (allowed: at least one, e.g. [device ram0] with backend = ram and size = 1G)");

	/* folio_size was only known once the whole text was read. */
	for (i = 0; i < c->nr_devs; i++) {
		const struct conf_device *d = &c->devs[i];
		struct size_str s1, s2;

		if (d->geo.lbs > c->cache.folio_size)
			return conf_err(p, dev_param_line(d, "logical_block_size"),
					"logical_block_size",
					"%s is larger than the cache's folio_size %s (allowed: at most folio_size; raise folio_size in [cache])",
					size_str(&s1, d->geo.lbs),
					size_str(&s2, c->cache.folio_size));
		if (d->cache_block_size > c->cache.folio_size)
			return conf_err(p, dev_param_line(d, "cache_block_size"),
					"cache_block_size",
					"%s is larger than the cache's folio_size %s (allowed: auto, or a power of two from the logical block size to folio_size)",
					size_str(&s1, d->cache_block_size),
					size_str(&s2, c->cache.folio_size));
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* API */

int conf_parse_buf(const char *buf, size_t len, const char *file, struct conf *c,
		   char *err, size_t errlen)
{
	struct conf_parser p = { .c = c, .err = err, .errlen = errlen };
	size_t fn;
	int ret;

	memset(c, 0, sizeof(*c));
	if (err && errlen)
		err[0] = '\0';
	if (!file)
		file = "(config)";
	c->file = file;		/* for messages until the copy exists */
	if (len > CONF_MAX_LEN || (!buf && len)) {
		struct size_str s;

		conf_err(&p, 1, "config", "the text is %zu bytes long (allowed: at most %s)",
			 len, size_str(&s, CONF_MAX_LEN));
		c->file = NULL;
		return -EINVAL;
	}

	/*
	 * One arena for every string: the file name, then each key and value
	 * NUL-terminated. A line gives at most its length + 1 bytes (the '='
	 * goes, two NULs come), so len + 1 bytes hold all lines.
	 */
	fn = strlen(file);
	c->strings = malloc(fn + 1 + len + 1);
	c->devs = calloc(CONF_MAX_DEVICES, sizeof(*c->devs));
	if (!c->strings || !c->devs) {
		ret = conf_nomem(&p);
		goto out_free;
	}
	memcpy(c->strings, file, fn + 1);
	c->file = c->strings;
	p.sp = c->strings + fn + 1;
	p.send = p.sp + len + 1;

	c->mount.max_pending = CONF_MAX_PENDING_DEFAULT;
	c->mount.shutdown_timeout_ms = CONF_SHUTDOWN_TIMEOUT_DEFAULT_MS;
	ret = parse(&p, buf, len);
	if (ret)
		goto out_free;
	return 0;

out_free:
	conf_free(c);
	return ret;
}

void conf_free(struct conf *c)
{
	int i;

	if (!c)
		return;
	for (i = 0; i < c->nr_devs; i++)
		free(c->devs[i].params);
	free(c->devs);
	free(c->strings);
	memset(c, 0, sizeof(*c));
}

static int geo_err(const struct conf *c, char *err, size_t errlen, int line,
		   const char *key, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));

static int geo_err(const struct conf *c, char *err, size_t errlen, int line,
		   const char *key, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	conf_vmsg(c->file ? c->file : "(config)", err, errlen, line, key, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Did the config give @key in @d's section? */
static const struct blk_param *dev_param(const struct conf_device *d, const char *key)
{
	int i;

	for (i = 0; i < d->nr_params; i++)
		if (!strcmp(d->params[i].key, key))
			return &d->params[i];
	return NULL;
}

static uint64_t geo_field(const struct blk_geometry *g, int k)
{
	switch (k) {
	case DK_SIZE:	return g->size;
	case DK_LBS:	return g->lbs;
	case DK_PBS:	return g->pbs;
	case DK_IO_MIN:	return g->io_min;
	case DK_IO_OPT:	return g->io_opt;
	case DK_MAX_IO:	return g->max_io;
	default:	return 0;
	}
}

int conf_check_geometry(const struct conf *c, const struct conf_device *d,
			const struct blk_geometry *geo, char *err, size_t errlen)
{
	struct size_str s1, s2;
	int k;

	if (err && errlen)
		err[0] = '\0';

	/* What the config says against what the device says. */
	for (k = DK_SIZE; k <= DK_MAX_IO; k++) {
		const struct blk_param *prm = dev_param(d, dev_keys[k]);
		uint64_t want = geo_field(&d->geo, k), have = geo_field(geo, k);

		if (prm && want != have)
			return geo_err(c, err, errlen, prm->line, dev_keys[k],
				       "config says %" PRIu64 " but the device has %" PRIu64,
				       want, have);
	}

	/* What the cache can shape I/O to. */
	if (!blk_is_pow2(geo->lbs) || geo->lbs < CONF_MIN_BLOCK || geo->lbs > CONF_MAX_BLOCK)
		return geo_err(c, err, errlen, dev_param_line(d, "logical_block_size"),
			       "logical_block_size",
			       "the device has %" PRIu32 " (allowed: 512, 1K, ..., 64K)", geo->lbs);
	if (!blk_is_pow2(geo->pbs) || geo->pbs < geo->lbs || geo->pbs > CONF_MAX_BLOCK)
		return geo_err(c, err, errlen, dev_param_line(d, "physical_block_size"),
			       "physical_block_size",
			       "the device has %" PRIu32 " (allowed: a power of two from the logical block size %" PRIu32 " to 64K)",
			       geo->pbs, geo->lbs);
	if (!geo->size || geo->size % geo->lbs)
		return geo_err(c, err, errlen, dev_param_line(d, "size"), "size",
			       "the device has %" PRIu64 " (allowed: a non-zero multiple of the logical block size %" PRIu32 ")",
			       geo->size, geo->lbs);
	if (geo->max_io < geo->pbs || geo->max_io % geo->pbs)
		return geo_err(c, err, errlen, dev_param_line(d, "max_io"), "max_io",
			       "the device has %" PRIu32 " (allowed: a multiple of the physical block size %" PRIu32 ")",
			       geo->max_io, geo->pbs);
	if (geo->lbs > c->cache.folio_size)
		return geo_err(c, err, errlen, dev_param_line(d, "logical_block_size"),
			       "logical_block_size",
			       "the device has %s but the cache's folio_size is %s (allowed: folio_size at least the logical block size; raise folio_size in [cache])",
			       size_str(&s1, geo->lbs), size_str(&s2, c->cache.folio_size));

	/* A forced cache block must fit the device as it really is. */
	if (d->cache_block_size) {
		int line = dev_param_line(d, "cache_block_size");

		if (d->cache_block_size < geo->lbs) {
			const char *ls = size_str(&s2, geo->lbs);

			return geo_err(c, err, errlen, line, "cache_block_size",
				       "%s is smaller than the device's logical block size %s (allowed: auto, or a power of two from %s to folio_size)",
				       size_str(&s1, d->cache_block_size), ls, ls);
		}
		if (geo->size % d->cache_block_size)
			return geo_err(c, err, errlen, line, "cache_block_size",
				       "%s does not divide the device's size %" PRIu64 " (allowed: auto, or a power of two that divides the size)",
				       size_str(&s1, d->cache_block_size), geo->size);
	}
	return 0;
}

int conf_check_uring(const struct conf *c, unsigned nr_queues, uint64_t entry_bytes,
		     uint64_t mem_bytes, char *err, size_t errlen)
{
	uint64_t depth = c->mount.uring_queue_depth, need, allowed = mem_bytes / 4;
	struct size_str s1, s2, s3;

	if (err && errlen)
		err[0] = '\0';
	if (!nr_queues || !depth || entry_bytes > UINT64_MAX / depth / nr_queues)
		need = UINT64_MAX;
	else
		need = depth * nr_queues * entry_bytes;
	if (need <= allowed)
		return 0;
	/* rounded up in the message: exact byte counts say nothing to a reader */
	need = need > UINT64_MAX - (1u << 20) ? UINT64_MAX >> 20 << 20 : (need + (1u << 20) - 1) >> 20 << 20;
	return geo_err(c, err, errlen,
		       c->mount.uring_queue_depth_line ? c->mount.uring_queue_depth_line :
		       c->mount.line ? c->mount.line : 1,
		       "uring_queue_depth",
		       "%" PRIu64 " entries on each of %u CPU queues need %s of ring buffers (%s each), more than a quarter of this machine's memory %s (allowed: at most %" PRIu64 " entries here; the default is %u)",
		       depth, nr_queues, size_str(&s1, need),
		       size_str(&s2, (entry_bytes + 1023) >> 10 << 10), size_str(&s3, mem_bytes >> 20 << 20),
		       nr_queues && entry_bytes ? allowed / nr_queues / entry_bytes : 0,
		       CONF_DEF_URING_DEPTH);
}

uint32_t conf_cache_block(const struct blk_geometry *geo, uint32_t forced)
{
	uint32_t bs = geo->lbs;

	if (forced)
		return forced;
	if (!bs)
		return 0;
	/* The kernel's set_init_blocksize(), with PAGE_SIZE 4096. */
	while (bs < CONF_PAGE && geo->size % (2 * bs) == 0)
		bs <<= 1;
	return bs;
}
