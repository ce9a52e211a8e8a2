// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_knobs.c - a filter's knob table (backends/kit/knobs.h) on
 * a state of its own: the keys and attrs one list gives, defaults, every
 * shared type read from the config and refused out of bounds with
 * "FILE:LINE: FILTER.KEY: ..." messages, show/store round trips, a bad
 * store changing nothing, the row's hook under the lock and the table's
 * after hook without it, and a seed's stream restarted by a store. The
 * filter's own rows (OWN, ACT, OWNRO) only name their key and attr.
 * Then a backend's table (rows with a help column, read with bk_parse()
 * and bk_parse_key() into a struct of the backend's own) with the types
 * the backends brought: text, size_max, msec and sec; and the default and
 * bounds as bk_format_def() and bk_format_bound() write them for
 * blkfs.conf(5)'s test.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/backends_int.h"
#include "../../backends/kit/knobs.h"
#include "../../core/conf.h"
#include "helpers.h"

struct kt_dev {
	struct blk_backend be;
	const char *dev;
	pthread_mutex_t lock;
	unsigned int depth;
	uint64_t bytes, count, total, wait_ns, period_ns;
	bool on;
	double p;
	int err;
	uint64_t seed, rng;
	unsigned int nr_pool;
	unsigned int hooked, afters, kicks;
	bool hook_held_lock, after_held_lock;
};

static void kt_hook(struct blk_backend *be)
{
	struct kt_dev *d = (struct kt_dev *)be;

	/* held by the store: trylock fails */
	d->hook_held_lock = pthread_mutex_trylock(&d->lock) != 0;
	if (!d->hook_held_lock)
		pthread_mutex_unlock(&d->lock);
	d->hooked++;
}

static void kt_after(struct blk_backend *be)
{
	struct kt_dev *d = (struct kt_dev *)be;

	d->after_held_lock = pthread_mutex_trylock(&d->lock) != 0;
	if (!d->after_held_lock)
		pthread_mutex_unlock(&d->lock);
	d->afters++;
}

static int attr_state_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "fine");
}

/* An OWN row's key is read by the filter; its attr is the filter's own. */
static int attr_list_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "a,b");
}

static int attr_list_store(struct blk_backend *be, const char *buf, size_t len)
{
	(void)be;
	(void)buf;
	(void)len;
	return -EINVAL;
}

/* An ACT row: an attr only. */
static int attr_kick_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "0");
}

static int attr_kick_store(struct blk_backend *be, const char *buf, size_t len)
{
	(void)buf;
	(void)len;
	((struct kt_dev *)be)->kicks++;
	return 0;
}

#define KT_KNOBS(K)										\
	K(depth,   uint,        depth,     1, 64, 8, "I/Os", RW, kt_hook)			\
	K(bytes,   size,        bytes,     0, 1u << 20, 4096, "bytes", RW, NULL)		\
	K(count,   u64,         count,     1, 1000000, 10, "writes", RW, NULL)		\
	K(wait,    duration,    wait_ns,   0, 1000000000ull, 0, "ns", RW, NULL)		\
	K(period,  seconds,     period_ns, 0, 60000000000ull, 0, "ns", CONF, NULL)		\
	K(on,      bool,        on,        0, 1, 1, "", RW, NULL)				\
	K(p,       probability, p,         0, 0, 0, "0 to 1", RW, NULL)			\
	K(errno,   errno,       err,       0, 0, EIO, "a name such as EIO", RW, NULL)		\
	K(seed,    seed,        seed,      0, 0, 0, "", RW, NULL)				\
	K(pool,    pool,        nr_pool,   1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)	\
	K(hooked,  uint,        hooked,    0, 0, 0, "", RO, NULL)				\
	K(state,   none,        be,        0, 0, 0, "", OWNRO, NULL)				\
	K(total,   u64,         total,     0, UINT64_MAX, 0, "bytes", RO, NULL)		\
	K(list,    none,        be,        0, 0, 0, "a list", OWN, NULL)			\
	K(kick,    none,        be,        0, 0, 0, "1", ACT, NULL)

BK_DEFINE(kt, struct kt_dev, lock, kt_after, KT_KNOBS);

static struct kt_dev d;
static struct tparams tp;

static void setup(void)
{
	memset(&d, 0, sizeof(d));
	d.dev = "fake0";
	pthread_mutex_init(&d.lock, NULL);
	filter_params_init(&tp, "kt", NULL, "/etc/blkfs.conf", 3);
}

static void teardown(void)
{
	pthread_mutex_destroy(&d.lock);
}

TestSuite(knobs, .init = setup, .fini = teardown);

static const struct blk_attr *find(const char *name)
{
	const struct blk_attr *a;

	for (a = kt_attrs; a->name; a++)
		if (!strcmp(a->name, name))
			return a;
	return NULL;
}

static const char *show(const char *name)
{
	static char buf[256];
	const struct blk_attr *a = find(name);

	cr_assert_not_null(a, "no attr %s", name);
	cr_assert_gt(a->show(&d.be, buf, sizeof(buf)), 0, "show %s", name);
	return buf;
}

static int store(const char *name, const char *val)
{
	const struct blk_attr *a = find(name);

	cr_assert_not_null(a, "no attr %s", name);
	cr_assert_not_null(a->store, "%s is read-only", name);
	return a->store(&d.be, val, strlen(val));
}

Test(knobs, keys_and_attrs_come_from_the_list)
{
	static const char *const keys[] = { "depth", "bytes", "count", "wait", "period", "on",
					    "p", "errno", "seed", "pool", "list", NULL };
	static const char *const rw[] = { "depth", "bytes", "count", "wait", "on", "p", "errno",
					  "seed" };
	size_t i;

	for (i = 0; keys[i]; i++)
		cr_assert_str_eq(kt_keys[i], keys[i]);
	cr_assert_null(kt_keys[i]);
	for (i = 0; i < sizeof(rw) / sizeof(rw[0]); i++)
		cr_assert_not_null(find(rw[i])->store, "%s", rw[i]);
	/* config only: no attr; state: show only */
	cr_assert_null(find("period"));
	cr_assert_null(find("pool"));
	cr_assert_null(find("hooked")->store);
	cr_assert_null(find("state")->store);
	cr_assert_str_eq(show("state"), "fine\n");
	cr_assert_null(find("total")->store);
	/* the filter's own: a key and an attr, an attr only */
	cr_assert_str_eq(show("list"), "a,b\n");
	cr_assert_eq(store("list", "x"), -EINVAL);
	cr_assert_str_eq(show("kick"), "0\n");
	cr_assert_eq(store("kick", "1"), 0);
	cr_assert_eq(d.kicks, 1);
}

/* A read-only u64 (powerloss's unflushed_bytes): the field as it is, to the last value. */
Test(knobs, ro_u64_shows_the_field)
{
	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0, "%s", tp.err);
	cr_assert_str_eq(show("total"), "0\n");
	d.total = UINT64_MAX;
	cr_assert_str_eq(show("total"), "18446744073709551615\n");
}

Test(knobs, defaults_when_absent)
{
	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0, "%s", tp.err);
	cr_assert_eq(d.depth, 8);
	cr_assert_eq(d.bytes, 4096);
	cr_assert_eq(d.count, 10);
	cr_assert_eq(d.wait_ns, 0);
	cr_assert(d.on);
	cr_assert_eq(d.err, EIO);
	cr_assert_eq(d.nr_pool, BE_POOL_DEF);
	/* seed auto: from the clock, the stream starting from it */
	cr_assert_eq(d.rng, d.seed);
}

Test(knobs, config_values)
{
	tparams_add(&tp, "kt.depth", "64", 4);
	tparams_add(&tp, "kt.bytes", "1M", 5);
	tparams_add(&tp, "kt.count", "1000000", 5);
	tparams_add(&tp, "kt.wait", "250us", 6);
	tparams_add(&tp, "kt.period", "5", 7);
	tparams_add(&tp, "kt.on", "off", 8);
	tparams_add(&tp, "kt.p", "0.25", 9);
	tparams_add(&tp, "kt.errno", "enospc", 10);
	tparams_add(&tp, "kt.seed", "42", 11);
	tparams_add(&tp, "kt.pool", "32", 12);
	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0, "%s", tp.err);
	for (int i = 0; i < tp.p.n; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	cr_assert_eq(d.depth, 64);
	cr_assert_eq(d.bytes, 1u << 20);
	cr_assert_eq(d.count, 1000000);
	cr_assert_eq(d.wait_ns, 250000);
	cr_assert_eq(d.period_ns, 5000000000ull);
	cr_assert(!d.on);
	cr_assert_eq(d.p, 0.25);
	cr_assert_eq(d.err, ENOSPC);
	cr_assert_eq(d.seed, 42);
	cr_assert_eq(d.rng, 42);
	cr_assert_eq(d.nr_pool, 32);
}

Test(knobs, bad_config_values_name_file_line_key)
{
	static const struct {
		const char *key, *value, *want;
	} bad[] = {
		{ "kt.depth", "0", "/etc/blkfs.conf:9: kt.depth: '0' is not a number from 1 to 64" },
		{ "kt.depth", "65", "/etc/blkfs.conf:9: kt.depth: '65' is not a number from 1 to 64" },
		{ "kt.depth", "-1", "/etc/blkfs.conf:9: kt.depth: '-1' is not a number from 1 to 64" },
		{ "kt.bytes", "1Q", "/etc/blkfs.conf:9: kt.bytes: '1Q' is not a size (digits with an optional K, M, G or T suffix, binary as dd)" },
		{ "kt.bytes", "99999999999999999999", "/etc/blkfs.conf:9: kt.bytes: '99999999999999999999' is too large" },
		{ "kt.bytes", "2M", "/etc/blkfs.conf:9: kt.bytes: '2M' is out of range (allowed: 0..1048576)" },
		{ "kt.count", "0", "/etc/blkfs.conf:9: kt.count: '0' is not a number from 1 to 1000000" },
		{ "kt.count", "1000001", "/etc/blkfs.conf:9: kt.count: '1000001' is not a number from 1 to 1000000" },
		{ "kt.count", "-1", "/etc/blkfs.conf:9: kt.count: '-1' is not a number from 1 to 1000000" },
		{ "kt.count", "1K", "/etc/blkfs.conf:9: kt.count: '1K' is not a number from 1 to 1000000" },
		{ "kt.count", "18446744073709551616", "/etc/blkfs.conf:9: kt.count: '18446744073709551616' is not a number from 1 to 1000000" },
		{ "kt.wait", "5", "/etc/blkfs.conf:9: kt.wait: '5' is not a duration (allowed: 0..1s; " BLK_DURATION_HELP ")" },
		{ "kt.wait", "2s", "/etc/blkfs.conf:9: kt.wait: '2s' is out of range (allowed: 0..1s)" },
		{ "kt.period", "x", "/etc/blkfs.conf:9: kt.period: 'x' is not a duration (allowed: 0..1m; " BLK_DURATION_HELP ", or plain seconds)" },
		{ "kt.on", "maybe", "/etc/blkfs.conf:9: kt.on: 'maybe' is not yes/no/true/false/1/0/on/off" },
		{ "kt.p", "1.5", "/etc/blkfs.conf:9: kt.p: '1.5' is not a probability (allowed: 0 to 1)" },
		{ "kt.errno", "EWHAT", "/etc/blkfs.conf:9: kt.errno: 'EWHAT' is not an errno (allowed: a name such as EIO)" },
		{ "kt.seed", "x", "/etc/blkfs.conf:9: kt.seed: 'x' is not a seed" },
		{ "kt.pool", "0", "/etc/blkfs.conf:9: kt.pool: '0' is not a number from 1 to 65536" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		filter_params_init(&tp, "kt", NULL, "/etc/blkfs.conf", 3);
		tparams_add(&tp, bad[i].key, bad[i].value, 9);
		cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), -EINVAL, "%s", bad[i].value);
		cr_assert(!strncmp(tp.err, bad[i].want, strlen(bad[i].want)), "%s\nwant %s", tp.err,
			  bad[i].want);
	}
}

Test(knobs, show_store_round_trip)
{
	static const struct {
		const char *name, *in, *out;
	} v[] = {
		{ "depth", "1\n", "1\n" }, { "depth", "64", "64\n" },
		{ "bytes", "4K\n", "4096\n" }, { "bytes", "0", "0\n" },
		{ "count", "1\n", "1\n" }, { "count", "1000000", "1000000\n" },
		{ "wait", "1500us", "1500us\n" }, { "wait", "1s", "1s\n" }, { "wait", "0", "0\n" },
		{ "on", "yes", "1\n" }, { "on", "OFF\n", "0\n" },
		{ "p", "0.1", "0.10000000000000001\n" }, { "p", "1", "1\n" },
		{ "errno", "enomem", "ENOMEM\n" }, { "errno", "28", "ENOSPC\n" },
		{ "seed", "7", "7\n" },
	};

	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char again[64];

		cr_assert_eq(store(v[i].name, v[i].in), 0, "%s = %s", v[i].name, v[i].in);
		cr_assert_str_eq(show(v[i].name), v[i].out, "%s = %s", v[i].name, v[i].in);
		/* what show says, store takes back to the same value */
		snprintf(again, sizeof(again), "%s", show(v[i].name));
		cr_assert_eq(store(v[i].name, again), 0);
		cr_assert_str_eq(show(v[i].name), v[i].out);
	}
	cr_assert_eq(d.rng, 7, "a seed's store restarts the stream");
}

Test(knobs, bad_store_changes_nothing)
{
	static const struct {
		const char *name, *in;
	} bad[] = {
		{ "depth", "0" }, { "depth", "65" }, { "depth", "" }, { "depth", "\n" },
		{ "depth", "8x" }, { "depth", " 8" }, { "depth", "99999999999999999999" },
		{ "bytes", "2M" }, { "bytes", "1X" }, { "count", "0" }, { "count", "1000001" },
		{ "count", "-1" }, { "count", "1K" }, { "count", " 5" },
		{ "count", "18446744073709551616" }, { "wait", "5" }, { "wait", "2s" },
		{ "on", "maybe" }, { "p", "-0.1" }, { "p", "nan" }, { "errno", "0" },
		{ "errno", "EWHAT" }, { "seed", "-1" },
	};
	char before[64];

	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(before, sizeof(before), "%s", show(bad[i].name));
		cr_assert_eq(store(bad[i].name, bad[i].in), -EINVAL, "%s = '%s'", bad[i].name,
			     bad[i].in);
		cr_assert_str_eq(show(bad[i].name), before);
	}
	cr_assert_eq(d.hooked, 0);
	cr_assert_eq(d.afters, 0);
	/* a value with a NUL inside is refused */
	cr_assert_eq(find("depth")->store(&d.be, "8\0", 2), -EINVAL);
}

Test(knobs, hooks)
{
	cr_assert_eq(bk_params(&bk_table, &tp.p, &d.be), 0);
	cr_assert_eq(store("depth", "4"), 0);
	cr_assert_eq(d.hooked, 1);
	cr_assert(d.hook_held_lock, "the row's hook runs under the lock");
	cr_assert_eq(d.afters, 1);
	cr_assert(!d.after_held_lock, "the after hook runs without it");
	cr_assert_str_eq(show("hooked"), "1\n");
	/* a row without a hook: only the after hook */
	cr_assert_eq(store("bytes", "1K"), 0);
	cr_assert_eq(d.hooked, 1);
	cr_assert_eq(d.afters, 2);
}

/* ---- a backend's table: bk_parse() into the backend's own struct ---- */

struct kb_conf {
	const char *path;
	uint64_t reserve;
	unsigned int timeout_ms;
	unsigned int conns;
	unsigned int linger_s;
};

/* A row as BK_BACKEND_DEFINE writes it (that macro's bk_table would clash with kt's). */
#define KB_ROW(n_, t_, f_, min_, max_, def_, unit_, help_)					\
	{ .name = #n_, .type = &bk_type_##t_, .off = offsetof(struct kb_conf, f_),		\
	  .min = (min_), .max = (max_), .def = (def_), .unit = (unit_), .live = BK_CONF,	\
	  .help = (help_) }

static const struct bk_knob kb_knobs[] = {
	KB_ROW(path,    text,     path,       0, 0, 0, "a path", "the image"),
	KB_ROW(reserve, size_max, reserve,    4096, 1ull << 30, 1u << 20, "4K to 1G", "kept"),
	KB_ROW(timeout, msec,     timeout_ms, 10, 86400000, 5000, "ms", "how long"),
	KB_ROW(conns,   uint,     conns,      1, 16, 4, "connections", "how many"),
	KB_ROW(linger,  sec,      linger_s,   1, 3600, 30, "the library takes whole seconds",
	       "how long, in seconds"),
};

static const struct bk_table kb_table = {
	.filter = "kb",
	.knobs = kb_knobs,
	.nr = sizeof(kb_knobs) / sizeof(kb_knobs[0]),
};

/* A backend's keys have no prefix; its section is at line 3. */
static void kb_params_init(struct tparams *t)
{
	filter_params_init(t, "kb", NULL, "/etc/blkfs.conf", 3);
	t->p.prefix = NULL;
}

/* A struct no row has touched: every byte 0xa5. */
static void kb_poison(struct kb_conf *c)
{
	memset(c, 0xa5, sizeof(*c));
}

static const struct bk_knob *kb_row(const char *name)
{
	for (size_t i = 0; i < kb_table.nr; i++)
		if (!strcmp(kb_knobs[i].name, name))
			return &kb_knobs[i];
	cr_assert_fail("no row %s", name);
	return NULL;
}

Test(knobs, backend_defaults_when_absent)
{
	struct kb_conf c;

	kb_params_init(&tp);
	kb_poison(&c);
	cr_assert_eq(bk_parse(&kb_table, &tp.p, &c), 0, "%s", tp.err);
	cr_assert_null(c.path, "text: absent is NULL, for the backend to say it is required");
	cr_assert_eq(c.reserve, 1u << 20);
	cr_assert_eq(c.timeout_ms, 5000);
	cr_assert_eq(c.conns, 4);
	cr_assert_eq(c.linger_s, 30);
}

Test(knobs, backend_values)
{
	static const char img[] = "/var/lib/img";
	struct kb_conf c;

	kb_params_init(&tp);
	tparams_add(&tp, "path", img, 4);
	tparams_add(&tp, "reserve", "1G", 5);
	tparams_add(&tp, "timeout", "250ms", 6);
	tparams_add(&tp, "conns", "16", 7);
	/* not a row: bk_parse leaves it, and the config's check says it is unknown */
	tparams_add(&tp, "colour", "red", 8);
	kb_poison(&c);
	cr_assert_eq(bk_parse(&kb_table, &tp.p, &c), 0, "%s", tp.err);
	cr_assert_eq(c.path, img, "text: a pointer to the config's own value, not a copy");
	cr_assert_eq(c.reserve, 1ull << 30);
	cr_assert_eq(c.timeout_ms, 250);
	cr_assert_eq(c.conns, 16);
	for (int i = 0; i < 4; i++)
		cr_assert(tp.v[i].used, "%s not taken", tp.v[i].key);
	cr_assert(!tp.v[4].used, "bk_parse took a key no row has");
}

static bool starts_with(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

/* One key's value through bk_parse(): 0 or the message, with the field's value. */
static int kb_one(const char *key, const char *value, struct kb_conf *c)
{
	kb_params_init(&tp);
	tparams_add(&tp, key, value, 9);
	kb_poison(c);
	return bk_parse(&kb_table, &tp.p, c);
}

Test(knobs, msec_bare_number_is_seconds_units_and_bounds)
{
	static const struct {
		const char *in;
		unsigned int ms;
	} ok[] = {
		{ "2", 2000 }, { "0", 0 }, { "5", 5000 }, { "86400", 86400000 },
		{ "10ms", 10 }, { "250ms", 250 }, { "1500ms", 1500 }, { "3s", 3000 },
		{ "2m", 120000 }, { "24h", 86400000 }, { "1000us", 1 }, { "10000000ns", 10 },
		{ "86400000ms", 86400000 },
	};
	struct kb_conf c;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		if (ok[i].ms < 10)	/* below the row's min: the edge is tested below */
			continue;
		cr_assert_eq(kb_one("timeout", ok[i].in, &c), 0, "%s: %s", ok[i].in, tp.err);
		cr_assert_eq(c.timeout_ms, ok[i].ms, "%s: %u ms", ok[i].in, c.timeout_ms);
	}
	/* the store's parse (a type any table may use): the same values, 0 allowed at min 0 */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct bk_knob k = *kb_row("timeout");
		unsigned int v = 12345;

		k.min = 0;
		cr_assert_eq(bk_type_msec.parse(&k, ok[i].in, &v), 0, "parse %s", ok[i].in);
		cr_assert_eq(v, ok[i].ms, "parse %s: %u ms", ok[i].in, v);
	}
}

Test(knobs, msec_refuses_finer_than_1ms_and_out_of_bounds)
{
	static const struct {
		const char *in, *want;
	} bad[] = {
		{ "10500us", "/etc/blkfs.conf:9: timeout: '10500us' is finer than 1ms (allowed: whole milliseconds)" },
		{ "10000001ns", "/etc/blkfs.conf:9: timeout: '10000001ns' is finer than 1ms (allowed: whole milliseconds)" },
		{ "9ms", "/etc/blkfs.conf:9: timeout: '9ms' is out of range (allowed: 10ms..24h)" },
		{ "0", "/etc/blkfs.conf:9: timeout: '0' is out of range (allowed: 10ms..24h)" },
		{ "86400001ms", "/etc/blkfs.conf:9: timeout: '86400001ms' is out of range (allowed: 10ms..24h)" },
		{ "25h", "/etc/blkfs.conf:9: timeout: '25h' is out of range (allowed: 10ms..24h)" },
		{ "86401", "/etc/blkfs.conf:9: timeout: '86401' is out of range (allowed: 10ms..24h)" },
		{ "soon", "/etc/blkfs.conf:9: timeout: 'soon' is not a duration (allowed: 10ms..24h; " BLK_DURATION_HELP },
	};
	const struct bk_knob *k = kb_row("timeout");
	struct kb_conf c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		unsigned int v = 777;

		cr_assert_eq(kb_one("timeout", bad[i].in, &c), -EINVAL, "%s", bad[i].in);
		cr_assert(starts_with(tp.err, bad[i].want), "%s\nwant %s", tp.err, bad[i].want);
		/* the store's parse refuses it too and leaves the value */
		cr_assert_eq(bk_type_msec.parse(k, bad[i].in, &v), -EINVAL, "parse %s", bad[i].in);
		cr_assert_eq(v, 777);
	}
}

Test(knobs, sec_bare_number_is_seconds_units_and_bounds)
{
	static const struct {
		const char *in;
		unsigned int s;
	} ok[] = {
		{ "1", 1 }, { "30", 30 }, { "3600", 3600 }, { "1s", 1 }, { "2000ms", 2 },
		{ "5m", 300 }, { "1h", 3600 }, { "3000000us", 3 }, { "1000000000ns", 1 },
	};
	struct kb_conf c;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		unsigned int v = 12345;

		cr_assert_eq(kb_one("linger", ok[i].in, &c), 0, "%s: %s", ok[i].in, tp.err);
		cr_assert_eq(c.linger_s, ok[i].s, "%s: %u s", ok[i].in, c.linger_s);
		/* the store's parse: the same values */
		cr_assert_eq(bk_type_sec.parse(kb_row("linger"), ok[i].in, &v), 0, "parse %s",
			     ok[i].in);
		cr_assert_eq(v, ok[i].s, "parse %s: %u s", ok[i].in, v);
	}
}

Test(knobs, sec_refuses_finer_than_1s_and_out_of_bounds)
{
	static const struct {
		const char *in, *want;
	} bad[] = {
		{ "1500ms", "/etc/blkfs.conf:9: linger: '1500ms' is finer than 1s (the library takes whole seconds)" },
		{ "1000000001ns", "/etc/blkfs.conf:9: linger: '1000000001ns' is finer than 1s (the library takes whole seconds)" },
		{ "0", "/etc/blkfs.conf:9: linger: '0' is out of range (allowed: 1s..1h)" },
		{ "500ms", "/etc/blkfs.conf:9: linger: '500ms' is out of range (allowed: 1s..1h)" },
		{ "3601", "/etc/blkfs.conf:9: linger: '3601' is out of range (allowed: 1s..1h)" },
		{ "2h", "/etc/blkfs.conf:9: linger: '2h' is out of range (allowed: 1s..1h)" },
		{ "30.5", "/etc/blkfs.conf:9: linger: '30.5' is not a duration (allowed: 1s..1h; " BLK_DURATION_HELP ", or plain seconds)" },
		{ "soon", "/etc/blkfs.conf:9: linger: 'soon' is not a duration (allowed: 1s..1h; " BLK_DURATION_HELP ", or plain seconds)" },
	};
	const struct bk_knob *k = kb_row("linger");
	struct kb_conf c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		unsigned int v = 777;

		cr_assert_eq(kb_one("linger", bad[i].in, &c), -EINVAL, "%s", bad[i].in);
		cr_assert_str_eq(tp.err, bad[i].want, "%s\nwant %s", tp.err, bad[i].want);
		/* the store's parse refuses it too and leaves the value */
		cr_assert_eq(bk_type_sec.parse(k, bad[i].in, &v), -EINVAL, "parse %s", bad[i].in);
		cr_assert_eq(v, 777);
	}
}

Test(knobs, size_max_says_what_is_allowed)
{
	static const struct {
		const char *in, *want;
	} bad[] = {
		{ "2G", "/etc/blkfs.conf:9: reserve: 2147483648 is too large (allowed: 4K to 1G)" },
		{ "1073741825", "/etc/blkfs.conf:9: reserve: 1073741825 is too large (allowed: 4K to 1G)" },
		{ "4095", "/etc/blkfs.conf:9: reserve: 4095 is too small (allowed: 4K to 1G)" },
		{ "1Q", "/etc/blkfs.conf:9: reserve: '1Q' is not a size (digits with an optional K, M, G or T suffix, binary as dd)" },
	};
	struct kb_conf c;

	cr_assert_eq(kb_one("reserve", "1G", &c), 0, "%s", tp.err);
	cr_assert_eq(c.reserve, 1ull << 30, "the max itself is allowed");
	cr_assert_eq(kb_one("reserve", "4K", &c), 0, "%s", tp.err);
	cr_assert_eq(c.reserve, 4096, "the min itself is allowed");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(kb_one("reserve", bad[i].in, &c), -EINVAL, "%s", bad[i].in);
		cr_assert(!strncmp(tp.err, bad[i].want, strlen(bad[i].want)), "%s\nwant %s", tp.err,
			  bad[i].want);
	}
}

Test(knobs, backend_parse_stops_at_the_first_bad_row)
{
	struct kb_conf c;

	kb_params_init(&tp);
	/* in the config's order conns comes first; in the table's, reserve */
	tparams_add(&tp, "conns", "17", 4);
	tparams_add(&tp, "reserve", "2G", 5);
	kb_poison(&c);
	cr_assert_eq(bk_parse(&kb_table, &tp.p, &c), -EINVAL);
	cr_assert(starts_with(tp.err, "/etc/blkfs.conf:5: reserve: 2147483648 is too large"), "%s",
		  tp.err);
}

Test(knobs, parse_key_reads_one_row)
{
	struct kb_conf c, poisoned;

	kb_poison(&poisoned);
	kb_params_init(&tp);
	tparams_add(&tp, "path", "/a", 4);
	tparams_add(&tp, "timeout", "7", 5);
	tparams_add(&tp, "conns", "99", 6);	/* bad, but not read */
	kb_poison(&c);
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "timeout", &c), 0, "%s", tp.err);
	cr_assert_eq(c.timeout_ms, 7000);
	/* the other rows are untouched, their keys not taken */
	cr_assert_eq(memcmp(&c.path, &poisoned.path, sizeof(c.path)), 0);
	cr_assert_eq(c.reserve, poisoned.reserve);
	cr_assert_eq(c.conns, poisoned.conns);
	cr_assert(!tp.v[0].used && tp.v[1].used && !tp.v[2].used);
	/* absent: the default */
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "reserve", &c), 0, "%s", tp.err);
	cr_assert_eq(c.reserve, 1u << 20);
	cr_assert_eq(c.conns, poisoned.conns);
	/* text: the pointer */
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "path", &c), 0);
	cr_assert_eq(c.path, tp.v[0].value);
	/* a bad value: its message */
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "conns", &c), -EINVAL);
	cr_assert(starts_with(tp.err, "/etc/blkfs.conf:6: conns: '99' is not a number from 1 to 16"),
		  "%s", tp.err);
	/* no such row */
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "colour", &c), -ENOENT);
	cr_assert_eq(bk_parse_key(&kb_table, &tp.p, "time", &c), -ENOENT);
}

Test(knobs, format_def_and_bound)
{
	char buf[64], pool[16];

	/* defaults, as the type shows a value */
	cr_assert_gt(bk_format_def(kb_row("reserve"), buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1048576");
	cr_assert_gt(bk_format_def(kb_row("timeout"), buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "5s");
	cr_assert_gt(bk_format_def(kb_row("conns"), buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "4");
	cr_assert_gt(bk_format_def(kb_row("linger"), buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "30s");
	cr_assert_gt(bk_format_def(&bk_knobs[bk_i_wait], buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "0");
	cr_assert_gt(bk_format_def(&bk_knobs[bk_i_on], buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1");
	cr_assert_gt(bk_format_def(&bk_knobs[bk_i_errno], buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "EIO");
	cr_assert_gt(bk_format_def(&bk_knobs[bk_i_pool], buf, sizeof(buf)), 0);
	snprintf(pool, sizeof(pool), "%u", BE_POOL_DEF);
	cr_assert_str_eq(buf, pool);
	/* no default of their own */
	cr_assert_eq(bk_format_def(kb_row("path"), buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(bk_format_def(&bk_knobs[bk_i_seed], buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(bk_format_def(&bk_knobs[bk_i_list], buf, sizeof(buf)), -EINVAL);

	/* bounds, in the type's terms: msec rows in ms, sec rows in s, durations in ns */
	cr_assert_gt(bk_format_bound(kb_row("timeout"), 10, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "10ms");
	cr_assert_gt(bk_format_bound(kb_row("timeout"), 86400000, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "24h");
	cr_assert_gt(bk_format_bound(kb_row("linger"), 1, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1s");
	cr_assert_gt(bk_format_bound(kb_row("linger"), 3600, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1h");
	cr_assert_gt(bk_format_bound(kb_row("reserve"), 1ull << 30, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1073741824");
	cr_assert_gt(bk_format_bound(kb_row("conns"), 16, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "16");
	cr_assert_gt(bk_format_bound(&bk_knobs[bk_i_wait], 1000000000ull, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1s");
	cr_assert_gt(bk_format_bound(&bk_knobs[bk_i_period], 60000000000ull, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1m");
	cr_assert_gt(bk_format_bound(&bk_knobs[bk_i_count], 1000000, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "1000000");
	/* no bounds */
	cr_assert_eq(bk_format_bound(kb_row("path"), 0, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(bk_format_bound(&bk_knobs[bk_i_on], 1, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(bk_format_bound(&bk_knobs[bk_i_errno], 0, buf, sizeof(buf)), -EINVAL);
	cr_assert_eq(bk_format_bound(&bk_knobs[bk_i_seed], 0, buf, sizeof(buf)), -EINVAL);
}

/*
 * A backend's keys (BK_BACKEND_DEFINE's PFX_keys) are its table's rows: the
 * config's message for an unknown key lists every one of them.
 */
Test(knobs, unknown_backend_key_lists_the_table)
{
	char names[256], *save = NULL, *name;
	int tables = 0;

	snprintf(names, sizeof(names), "%s", blk_backend_names());
	for (name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
		const struct bk_table *t = blk_knob_table(name);
		struct conf c;
		char buf[256], err[1024], want[96];
		const char *list;
		int n;

		cr_assert_not_null(t, "%s has no knob table (blk_knob_table)", name);
		tables++;
		n = snprintf(buf, sizeof(buf), "[device d0]\nbackend = %s\nsize = 1M\ncolour = red\n",
			     name);
		memset(&c, 0, sizeof(c));
		cr_assert_eq(conf_parse_buf(buf, n, "k.conf", &c, err, sizeof(err)), -EINVAL,
			     "%s: colour taken", name);
		snprintf(want, sizeof(want), "k.conf:4: colour: unknown key for backend %s (allowed: ",
			 name);
		cr_assert(!strncmp(err, want, strlen(want)), "%s\nwant %s", err, want);
		list = err + strlen(want);
		for (size_t i = 0; i < t->nr; i++) {
			char word[64];

			snprintf(word, sizeof(word), ", %s", t->knobs[i].name);
			cr_assert(strstr(list, word), "%s: the message does not list row %s: %s", name,
				  t->knobs[i].name, err);
		}
	}
	cr_assert_geq(tables, 2, "no backend with a table in \"%s\"", blk_backend_names());
}
