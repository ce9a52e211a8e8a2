/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/attr_fuzz.c - libFuzzer target for the attribute parsers: the
 * live knobs every filter shows under .sys/DEV/FILTER/ (their blk_attr
 * store and show), the config values a filter's open() parses, and the
 * helpers of backends/lib/params.c (blk_parse_size, blk_param_size/bool/error).
 *
 * Only backend.h is used: every filter the registry has (blk_filter_names()
 * lists them, so fault, powerloss and later ones join by themselves) is
 * stacked over a null backend, each opened with no keys but what it needs
 * (log.path = /dev/null); one that does not open without keys is left out
 * and said once on stderr. No I/O is submitted. An input always starts from
 * a freshly opened stack: the stack is reused by the next input only when
 * no store succeeded (a refused store changes nothing, which is checked).
 * The attrs are in name order ("FILTER/ATTR").
 *
 * The input is a program of operations, each a byte, then its arguments:
 *   STORE N NAME LEN BYTES	LEN bytes (not NUL-terminated, NULs allowed)
 *				to the store of the writable attr named by the
 *				N bytes NAME ("delay/write"; a name that is no
 *				attr's picks one by its byte sum, so mutations
 *				reach every attr and seeds stay valid when
 *				filters are added)
 *   SHOW ATTR LEN		show into a LEN-byte buffer (LEN < 16)
 *   SIZE LEN BYTES		blk_parse_size() and blk_param_size(); then
 *				blk_parse_duration() on the same bytes
 *   PARAM LEN BYTES		blk_param_bool/get/error with a small err buffer
 *   OPEN FILTER KEY LEN BYTES	open FILTER with FILTER.KEY = BYTES as config
 * Oracles: store returns 0 or -errno; a refused store changes no attr of
 * the stack (the shown values are the same before and after); for the
 * knobs below a taken value shows as text the store takes back unchanged;
 * blk_parse_size and blk_parse_duration agree with reference parsers, and a
 * duration formats back to text that parses to the same value; a refused open says
 * "FILE:LINE: KEY: message".
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "../../backends/backend.h"
#include "fuzz.h"

#define MAX_LAYERS 16
#define MAX_ATTRS 64
#define SHOW_LEN 4096
#define ERR_LEN 256

/* Knobs whose shown value must be taken back as is (store(show()) = same). */
static const char *const roundtrip[] = {
	"delay/read", "delay/write", "delay/flush", "delay/discard", "log/enabled",
	"fault/ops", "fault/errno", "fault/probability", "fault/after", "fault/persistent",
	"fault/enabled", "powerloss/seed",
	"delay/p90", "delay/p99", "delay/p999", "delay/p9999", "delay/seed",
	"fault/hang", "fault/hang_timeout", "fault/badblocks_once",
	"fault/badblocks_clear_on_write", "fault/seed",
	"flakey/up_interval", "flakey/down_interval", "flakey/error_reads",
	"flakey/error_writes", "flakey/drop_writes", "flakey/corrupt_bio_byte",
	"flakey/random_read_corrupt", "flakey/random_write_corrupt", "flakey/errno",
	"flakey/seed",
	"throttle/mbps", "throttle/read_mbps", "throttle/write_mbps", "throttle/burst",
	"throttle/queue_depth", "throttle/latency_per_inflight", NULL,
};

struct attr_ref {
	struct blk_backend *be;
	const struct blk_attr *a;
	char name[64];		/* FILTER/ATTR */
	bool stable;		/* shows the same twice in a row with nothing done */
	bool roundtrip;
};

struct stack {
	struct blk_backend *layers[MAX_LAYERS];	/* [0] = null backend, then filters */
	int nr;
	struct attr_ref attrs[MAX_ATTRS];
	int nr_attrs;
	int nr_store;		/* attrs with a store come first */
};

static const struct blk_backend_ops *filters[MAX_LAYERS];
static int nr_filters;

static void drop_volatile(void *ctx)
{
	(void)ctx;
}

static const struct blk_host host = { .ctx = NULL, .drop_volatile = drop_volatile };

static struct blk_params params(const char *prefix, struct blk_param *v, int n, char *err,
				size_t errlen)
{
	struct blk_params p = {
		.prefix = prefix,
		.file = "fuzz.conf",
		.line = 1,
		.dev = "f0",
		.geo = { .size = 64u << 20, .lbs = 512, .pbs = 4096 },
		.v = v,
		.n = n,
		.err = err,
		.errlen = errlen,
		.host = &host,
	};
	return p;
}

static struct blk_backend *open_null(void)
{
	const struct blk_backend_ops *ops = blk_backend_find("null");
	char err[ERR_LEN];
	struct blk_params p = params(NULL, NULL, 0, err, sizeof(err));
	struct blk_backend *be;

	if (!ops)
		fuzz_fail("no null backend in the registry");
	be = ops->open(&p, NULL);
	if (IS_ERR_OR_NULL(be))
		fuzz_fail("null backend: %s", err);
	return be;
}

/* Open @ops over @next with its needed keys plus @extra; ERR_PTR on failure. */
static struct blk_backend *open_filter(const struct blk_backend_ops *ops,
				       struct blk_backend *next, struct blk_param *extra,
				       char *err, size_t errlen)
{
	struct blk_param v[2];
	char prefix[40], key[48];
	int n = 0;
	struct blk_params p;
	struct blk_backend *be;

	snprintf(prefix, sizeof(prefix), "%s.", ops->name);
	if (!strcmp(ops->name, "log") && !(extra && !strcmp(extra->key, "log.path"))) {
		snprintf(key, sizeof(key), "log.path");
		v[n++] = (struct blk_param){ .key = key, .value = "/dev/null", .line = 2 };
	}
	if (extra)
		v[n++] = *extra;
	p = params(prefix, v, n, err, errlen);
	err[0] = '\0';
	be = ops->open(&p, next);
	if (!IS_ERR_OR_NULL(be))
		be->next = next;
	return be;
}

static void find_filters(void)
{
	const char *s = blk_filter_names();

	while (*s && nr_filters < MAX_LAYERS - 1) {
		char name[32];
		size_t n = strcspn(s, ", ");

		if (n && n < sizeof(name)) {
			const struct blk_backend_ops *ops;

			memcpy(name, s, n);
			name[n] = '\0';
			ops = blk_backend_find(name);
			if (ops && ops->is_filter)
				filters[nr_filters++] = ops;
		}
		s += n;
		while (*s == ',' || *s == ' ')
			s++;
	}
}

static bool show(const struct attr_ref *r, char *buf)
{
	int n;

	if (!r->a->show)
		return false;
	n = r->a->show(r->be, buf, SHOW_LEN);
	if (n < 0) {
		buf[0] = '\0';
		return false;
	}
	fuzz_check((size_t)n < SHOW_LEN, "%s shows %d bytes", r->name, n);
	buf[n] = '\0';
	return true;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct attr_ref *)a)->name, ((const struct attr_ref *)b)->name);
}

static void add_attrs(struct stack *st, bool with_store)
{
	int first = st->nr_attrs;

	int i;

	for (i = st->nr - 1; i >= 0; i--) {
		struct blk_backend *be = st->layers[i];
		const struct blk_attr *a;

		for (a = be->ops->attrs; a && a->name; a++) {
			struct attr_ref *r;
			const char *const *k;

			if ((a->store != NULL) != with_store || st->nr_attrs == MAX_ATTRS)
				continue;
			r = &st->attrs[st->nr_attrs++];
			r->be = be;
			r->a = a;
			snprintf(r->name, sizeof(r->name), "%s/%s", be->ops->name, a->name);
			r->roundtrip = false;
			for (k = roundtrip; *k; k++)
				if (!strcmp(*k, r->name))
					r->roundtrip = true;
		}
	}
	qsort(st->attrs + first, (size_t)(st->nr_attrs - first), sizeof(st->attrs[0]), by_name);
}

/* The writable attr named by @name (@n bytes), else one picked by its byte sum. */
static const struct attr_ref *pick_store(const struct stack *st, const uint8_t *name, size_t n)
{
	unsigned sum = 0;
	size_t i;

	for (i = 0; i < (size_t)st->nr_store; i++)
		if (strlen(st->attrs[i].name) == n && !memcmp(st->attrs[i].name, name, n))
			return &st->attrs[i];
	for (i = 0; i < n; i++)
		sum += name[i];
	return &st->attrs[sum % (unsigned)st->nr_store];
}

static int stack_up(struct stack *st)
{
	static bool said[MAX_LAYERS];
	static char a[SHOW_LEN], b[SHOW_LEN];
	char err[ERR_LEN];
	int i;

	memset(st, 0, sizeof(*st));
	st->layers[st->nr++] = open_null();
	for (i = 0; i < nr_filters; i++) {
		struct blk_backend *be = open_filter(filters[i], st->layers[st->nr - 1], NULL,
						     err, sizeof(err));

		if (IS_ERR_OR_NULL(be)) {
			if (!said[i])
				fprintf(stderr, "attr_fuzz: filter %s left out: %s\n",
					filters[i]->name, err);
			said[i] = true;
			continue;
		}
		st->layers[st->nr++] = be;
	}
	add_attrs(st, true);
	st->nr_store = st->nr_attrs;
	add_attrs(st, false);
	for (i = 0; i < st->nr_attrs; i++) {
		struct attr_ref *r = &st->attrs[i];

		r->stable = show(r, a) && show(r, b) && !strcmp(a, b);
	}
	return 0;
}

static void stack_down(struct stack *st)
{
	int i;

	for (i = st->nr - 1; i >= 0; i--)
		st->layers[i]->ops->close(st->layers[i]);
	st->nr = 0;
}

/* Every stable attr's shown value, one after the other, into @out. */
static void snapshot(const struct stack *st, char *out, size_t len)
{
	static char buf[SHOW_LEN];
	size_t n = 0;
	int i;

	out[0] = '\0';
	for (i = 0; i < st->nr_attrs; i++) {
		const struct attr_ref *r = &st->attrs[i];
		int w;

		if (!r->stable || !show(r, buf))
			continue;
		w = snprintf(out + n, len - n, "%s=%s;", r->name, buf);
		if (w < 0 || (size_t)w >= len - n)
			break;
		n += (size_t)w;
	}
}

/* store with the value in a buffer of exactly @len bytes (ASan sees overruns) */
static int store(const struct attr_ref *r, const uint8_t *v, size_t len)
{
	char *b = malloc(len ? len : 1);
	int ret;

	if (!b)
		abort();
	memcpy(b, v, len);
	ret = r->a->store(r->be, b, len);
	free(b);
	fuzz_check(ret <= 0 && ret >= -BLK_MAX_ERRNO, "%s store returned %d", r->name, ret);
	return ret;
}

/* Returns true when the store was taken (the stack's state changed). */
static bool op_store(struct stack *st, const struct attr_ref *r, const uint8_t *v, size_t len)
{
	static char before[16384], after[16384], shown[SHOW_LEN], again[SHOW_LEN];
	int ret;

	snapshot(st, before, sizeof(before));
	ret = store(r, v, len);
	if (ret) {
		snapshot(st, after, sizeof(after));
		fuzz_check(!strcmp(before, after),
			   "refused store to %s (%d) changed the attrs:\nbefore %s\nafter  %s",
			   r->name, ret, before, after);
		return false;
	}
	if (!r->roundtrip || !show(r, shown))
		return true;
	ret = store(r, (const uint8_t *)shown, strlen(shown));
	fuzz_check(ret == 0, "%s does not take back its own value '%s': %d", r->name, shown, ret);
	fuzz_check(show(r, again) && !strcmp(shown, again), "%s: '%s' stored back shows '%s'",
		   r->name, shown, again);
	return true;
}

static void op_show_small(const struct attr_ref *r, size_t len)
{
	char *b;
	int n;

	if (!r->a->show)
		return;
	b = malloc(len ? len : 1);
	if (!b)
		abort();
	n = r->a->show(r->be, b, len);
	fuzz_check(n < 0 || (size_t)n < len || (len == 0 && n == 0) || (size_t)n == len,
		   "%s show into %zu bytes returned %d", r->name, len, n);
	free(b);
}

/*
 * A reference for blk_parse_size: digits, optional K/M/G/T[iB], no overflow.
 * A second parser on purpose, not a copy to replace by a call: the oracle
 * compares the real one (params.c) with it, so it is written apart: 128-bit
 * arithmetic that saturates, the range checked after the shift, where
 * params.c checks before each step.
 */
static int ref_size(const char *s, uint64_t *out)
{
	unsigned __int128 v = 0;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (unsigned)(*s - '0');
		if (v > UINT64_MAX)
			v = (unsigned __int128)UINT64_MAX + 1;	/* saturate: too large */
	}
	switch (*s) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (shift) {
		s++;
		if (s[0] == 'i' && s[1] == 'B')
			s += 2;
	}
	if (*s)
		return -EINVAL;
	v <<= shift;
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/*
 * A reference for blk_parse_duration: digits, then nothing (bare: 0, or in
 * @bare ns, or refused) or one of the units; no overflow of 64-bit ns.
 */
static int ref_duration(const char *s, uint64_t bare, uint64_t *out)
{
	static const char *const sfx[] = { "ns", "us", "ms", "s", "m", "h" };
	static const uint64_t mul[] = { 1, 1000, 1000000, 1000000000, 60000000000ull,
					3600000000000ull };
	unsigned __int128 v = 0;
	size_t i;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (unsigned)(*s - '0');
		if (v > UINT64_MAX)
			v = (unsigned __int128)UINT64_MAX + 1;	/* saturate: too large */
	}
	if (!*s) {
		if (v == 0) {
			*out = 0;
			return 0;
		}
		if (!bare)
			return -EINVAL;
		v *= bare;
	} else {
		for (i = 0; i < 6; i++)
			if (!strcmp(s, sfx[i]))
				break;
		if (i == 6)
			return -EINVAL;
		v *= mul[i];
	}
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* The duration grammar on the same bytes: against the reference, and formatted back. */
static void op_duration(const char *s, uint64_t bare)
{
	char buf[32];
	uint64_t a = 1, b = 2;
	int ra = blk_parse_duration(s, bare, &a), rb = ref_duration(s, bare, &b), n;

	fuzz_check(ra == rb && (ra || a == b),
		   "blk_parse_duration('%s', %llu) = %d %llu, reference %d %llu", s,
		   (unsigned long long)bare, ra, (unsigned long long)a, rb, (unsigned long long)b);
	if (ra)
		return;
	n = blk_format_duration(buf, sizeof(buf), a);
	fuzz_check(n > 0 && (size_t)n < sizeof(buf), "blk_format_duration(%llu) = %d",
		   (unsigned long long)a, n);
	fuzz_check(!blk_parse_duration(buf, 0, &b) && b == a,
		   "'%s' (%llu ns) formats as '%s', which parses as %llu", s,
		   (unsigned long long)a, buf, (unsigned long long)b);
}

static char *cstr(const uint8_t *v, size_t len)
{
	char *s = malloc(len + 1);

	if (!s)
		abort();
	memcpy(s, v, len);
	s[len] = '\0';
	return s;
}

static void op_size(const uint8_t *v, size_t len)
{
	char *s = cstr(v, len), *err = malloc(ERR_LEN);
	struct blk_param prm = { .key = "size", .value = s, .line = 3 };
	struct blk_params p = params(NULL, &prm, 1, err, ERR_LEN);
	uint64_t a = 1, b = 2, c = 3;
	int ra, rb, rc;

	if (!err)
		abort();
	ra = blk_parse_size(s, &a);
	rb = ref_size(s, &b);
	/* (a string cut by a NUL parses as its first part in both) */
	fuzz_check(!ra == !rb && (ra || a == b), "blk_parse_size('%s') = %d %llu, reference %d %llu",
		   s, ra, (unsigned long long)a, rb, (unsigned long long)b);
	fuzz_check(ra == 0 || ra == -EINVAL || ra == -ERANGE, "blk_parse_size returned %d", ra);
	rc = blk_param_size(&p, "size", 7, &c);
	fuzz_check(rc == (ra ? -EINVAL : 0) && (rc || c == a), "blk_param_size('%s') = %d", s, rc);
	fuzz_check(prm.used, "blk_param_size did not mark its key used");
	if (rc)
		fuzz_check(!strncmp(err, "fuzz.conf:3: size: ", 19), "message: %s", err);
	/* the duration grammar takes the same bytes: without and with plain seconds */
	op_duration(s, 0);
	op_duration(s, 1000000000);
	free(err);
	free(s);
}

static void op_param(const uint8_t *v, size_t len)
{
	char *s = cstr(v, len);
	size_t errlen = 1 + (len ? v[0] % 40 : 0);
	char *err = malloc(errlen);
	struct blk_param prm = { .key = "delay.flag", .value = s, .line = 9 };
	struct blk_params p = params("delay.", &prm, 1, err, errlen);
	bool out = false;
	int ret;

	if (!err)
		abort();
	ret = blk_param_bool(&p, "flag", true, &out);
	fuzz_check(ret == 0 || ret == -EINVAL, "blk_param_bool returned %d", ret);
	fuzz_check(!ret || memchr(err, '\0', errlen), "bool message not terminated");
	fuzz_check(blk_param_get(&p, "flag") == s && !blk_param_get(&p, "other") &&
		   blk_param_line(&p, "flag") == 9 && blk_param_line(&p, "other") == 1,
		   "blk_param_get/line");
	ret = blk_param_error(&p, len & 1 ? "flag" : NULL, "%s (%zu bytes)", s, len);
	fuzz_check(ret == -EINVAL && memchr(err, '\0', errlen), "blk_param_error");
	free(err);
	free(s);
}

/* Open filter @f with FILTER.KEY = @v: refused with a message, or opened and closed. */
static void op_open(int f, unsigned k, const uint8_t *v, size_t len)
{
	const struct blk_backend_ops *ops = filters[f];
	const char *const *keys;
	struct blk_backend *below, *be;
	struct blk_param extra;
	char key[64], *val, err[ERR_LEN];
	int nk = 0;

	for (keys = ops->keys; keys && keys[nk]; nk++)
		;
	if (!nk)
		return;
	/* never a path: the fuzzer must not create files */
	if (strstr(ops->keys[k % nk], "path") || strstr(ops->keys[k % nk], "file"))
		return;
	snprintf(key, sizeof(key), "%s.%s", ops->name, ops->keys[k % nk]);
	val = cstr(v, len);
	extra = (struct blk_param){ .key = key, .value = val, .line = 5 };
	below = open_null();
	be = open_filter(ops, below, &extra, err, sizeof(err));
	if (IS_ERR_OR_NULL(be)) {
		fuzz_check(IS_ERR(be), "%s open returned NULL", ops->name);
		fuzz_check(!strncmp(err, "fuzz.conf:", 10) && strstr(err, ": "),
			   "%s open refused %s = '%s' with message '%s'", ops->name, key, val, err);
	} else {
		be->ops->close(be);
	}
	below->ops->close(below);
	free(val);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	find_filters();
	return 0;
}

static struct stack cur;		/* open while cur.nr > 0 */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	bool changed = false;
	size_t pos = 0;

	if (!nr_filters)
		find_filters();
	if (!cur.nr)
		stack_up(&cur);
#define TAKE() (pos < size ? data[pos++] : 0)
	while (pos < size) {
		unsigned op = TAKE(), a = 0, b = 0;
		const uint8_t *name;
		size_t len, n;

		switch (op % 8) {
		case 0: case 1: case 2: case 3:		/* STORE */
			n = TAKE();
			if (n > size - pos)
				n = size - pos;
			name = data + pos;
			pos += n;
			len = TAKE();
			if (len > size - pos)
				len = size - pos;
			if (cur.nr_store)
				changed |= op_store(&cur, pick_store(&cur, name, n), data + pos, len);
			pos += len;
			break;
		case 4:					/* SHOW */
			a = TAKE();
			b = TAKE();
			if (cur.nr_attrs)
				op_show_small(&cur.attrs[a % cur.nr_attrs], b % 16);
			break;
		case 5:					/* SIZE */
		case 6:					/* PARAM */
			len = TAKE();
			if (len > size - pos)
				len = size - pos;
			if (op % 8 == 5)
				op_size(data + pos, len);
			else
				op_param(data + pos, len);
			pos += len;
			break;
		default:				/* OPEN */
			a = TAKE();
			b = TAKE();
			len = TAKE();
			if (len > size - pos)
				len = size - pos;
			if (nr_filters)
				op_open((int)(a % nr_filters), b, data + pos, len);
			pos += len;
			break;
		}
	}
#undef TAKE
	if (changed)
		stack_down(&cur);
	return 0;
}
