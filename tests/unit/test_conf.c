// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_conf.c - core/conf.c: the blkfs.conf parser.
 *
 * The default config, comments in every position, size suffixes, defaults,
 * every error with its exact "FILE:LINE: KEY: message", dirty thresholds,
 * the cache block rule, conf_check_geometry(), and hostile input (NUL bytes,
 * no final newline, huge numbers, long lines, random mutations) that must
 * end in a clean -EINVAL with nothing leaked (run under ASan too).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/conf.h"

#define F "blkfs.conf"

/* The sample in the task brief; blkfs.conf, when it exists, is tested too. */
static const char default_conf[] =
	"[cache]\n"
	"# hard bound on cached data (default 256M)\n"
	"size = 256M\n"
	"# power of two, 4K..2M, at least the largest logical block size (default 64K)\n"
	"folio_size = 64K\n"
	"\n"
	"[device ram0]\n"
	"backend = ram\n"
	"size = 1G\n"
	"logical_block_size = 512\n"
	"physical_block_size = 4096\n"
	"# largest single backend I/O (default 1M); io_min / io_opt default to the physical block size / max_io\n"
	"max_io = 1M\n"
	"# auto = the kernel's set_init_blocksize rule (README); a smaller power of two forces finer tracking\n"
	"cache_block_size = auto\n";

/* A minimal valid device section, for tests about something else. */
#define RAM0 "[device ram0]\nbackend = ram\nsize = 1G\n"

static struct conf c;
static char err[1024];

static void teardown(void)
{
	conf_free(&c);
}

TestSuite(conf, .fini = teardown);

static int parse_n(const char *text, size_t len)
{
	memset(err, 'X', sizeof(err));
	err[sizeof(err) - 1] = '\0';
	return conf_parse_buf(text, len, F, &c, err, sizeof(err));
}

static int parse(const char *text)
{
	return parse_n(text, strlen(text));
}

static void expect_ok(const char *text)
{
	int ret = parse(text);

	cr_assert_eq(ret, 0, "parse failed (%d): %s\n--- text:\n%s", ret, err, text);
}

static bool is_zero(const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--)
		if (*b++)
			return false;
	return true;
}

/* Check the failure and the message's shape; @want is a substring. */
static void expect_err_n(const char *text, size_t len, const char *want)
{
	int ret = parse_n(text, len);
	size_t i;

	cr_assert_eq(ret, -EINVAL, "expected -EINVAL, got %d (want \"%s\")", ret, want);
	cr_assert(strstr(err, want), "message\n  \"%s\"\nlacks\n  \"%s\"", err, want);
	cr_assert(!strncmp(err, F ":", strlen(F ":")), "no FILE: prefix: %s", err);
	for (i = 0; err[i]; i++)
		cr_assert((unsigned char)err[i] >= 0x20, "control byte in message: %s", err);
	cr_assert(is_zero(&c, sizeof(c)), "struct conf not left empty on failure");
}

static void expect_err(const char *text, const char *want)
{
	expect_err_n(text, strlen(text), want);
}

static const struct blk_param *param(const struct conf_device *d, const char *key)
{
	int i;

	for (i = 0; i < d->nr_params; i++)
		if (!strcmp(d->params[i].key, key))
			return &d->params[i];
	return NULL;
}

/* ------------------------------------------------------------------ */
/* the default config */

Test(conf, default_config)
{
	static const struct {
		const char *key, *value;
		int line;
	} want[] = {
		{ "backend", "ram", 8 },
		{ "size", "1G", 9 },
		{ "logical_block_size", "512", 10 },
		{ "physical_block_size", "4096", 11 },
		{ "max_io", "1M", 13 },
		{ "cache_block_size", "auto", 15 },
	};
	const struct conf_device *d;
	int i;

	expect_ok(default_conf);
	cr_assert_str_eq(c.file, F);
	cr_assert_eq(c.cache.line, 1);
	cr_assert_eq(c.cache.size, 256ull << 20);
	cr_assert_eq(c.cache.folio_size, 64u << 10);
	cr_assert_eq(c.cache.dirty_background, (256ull << 20) * 10 / 100);
	cr_assert_eq(c.cache.dirty_limit, (256ull << 20) * 40 / 100);
	cr_assert_eq(c.cache.dirty_expire_ms, 5000);

	cr_assert_eq(c.nr_devs, 1);
	d = &c.devs[0];
	cr_assert_str_eq(d->name, "ram0");
	cr_assert_eq(d->line, 7);
	cr_assert_not_null(d->ops);
	cr_assert_eq(d->ops, blk_backend_find("ram"));
	cr_assert_eq(d->geo.size, 1ull << 30);
	cr_assert_eq(d->geo.lbs, 512);
	cr_assert_eq(d->geo.pbs, 4096);
	cr_assert_eq(d->geo.io_min, 4096);
	cr_assert_eq(d->geo.max_io, 1u << 20);
	cr_assert_eq(d->geo.io_opt, 1u << 20);
	cr_assert_eq(d->cache_block_size, 0);
	cr_assert_eq(conf_cache_block(&d->geo, d->cache_block_size), 4096);

	cr_assert_eq(d->nr_params, 6);
	for (i = 0; i < 6; i++) {
		cr_assert_str_eq(d->params[i].key, want[i].key);
		cr_assert_str_eq(d->params[i].value, want[i].value);
		cr_assert_eq(d->params[i].line, want[i].line, "%s", want[i].key);
		cr_assert(d->params[i].used, "%s not marked used", want[i].key);
	}
}

static void open_all_with_ram(const char *text, uint32_t want_cache_block);

/* The shipped blkfs.conf (make runs tests from the top directory). */
Test(conf, shipped_blkfs_conf)
{
	char *buf;
	long n;
	FILE *f = fopen("blkfs.conf", "r");

	if (!f)
		cr_skip_test("no blkfs.conf in the current directory");
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_geq(n, 0);
	rewind(f);
	buf = malloc(n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, n, f), (size_t)n);
	fclose(f);
	cr_assert_eq(parse_n(buf, n), 0, "%s", err);
	cr_assert_geq(c.nr_devs, 1);
	conf_free(&c);
	buf[n] = '\0';
	open_all_with_ram(buf, 0);
	free(buf);
}

Test(conf, file_name_is_copied)
{
	char name[] = "my.conf";

	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), name, &c, err, sizeof(err)), 0);
	cr_assert_neq(c.file, name);
	name[0] = 'X';
	cr_assert_str_eq(c.file, "my.conf");
}

/* ------------------------------------------------------------------ */
/* comments, whitespace, line ends */

Test(conf, comments_everywhere)
{
	const struct conf_device *d;

	expect_ok("# leading comment\n"
		  "; semicolon comment\n"
		  "   # indented comment\n"
		  "\t; tab-indented comment\n"
		  "[cache] # after a header\n"
		  "size = 512M # after a value\n"
		  "folio_size = 16K\t; after a tab\n"
		  "dirty_expire = 2s ;no space after the mark\n"
		  "\n"
		  "   \t  \n"
		  "[device disk-1.a_b]\t# device header comment\n"
		  "  backend   =   ram   # padded\n"
		  "size=1G #\n"
		  "logical_block_size\t=\t4K\n"
		  "#size = 2G\n");
	cr_assert_eq(c.cache.size, 512ull << 20);
	cr_assert_eq(c.cache.folio_size, 16u << 10);
	cr_assert_eq(c.cache.dirty_expire_ms, 2000);
	d = &c.devs[0];
	cr_assert_str_eq(d->name, "disk-1.a_b");
	cr_assert_eq(d->line, 11);
	cr_assert_eq(d->nr_params, 3);
	cr_assert_str_eq(d->params[0].value, "ram");
	cr_assert_str_eq(d->params[1].value, "1G");
	cr_assert_eq(d->geo.lbs, 4096);
	cr_assert_eq(d->params[2].line, 14);
}

Test(conf, hash_inside_a_value_stays)
{
	/* 'a#b' keeps the '#', so the value reaches the checks whole. */
	expect_err("[device ram0]\nbackend = ram#1\nsize = 1G\n",
		   F ":2: backend: ram#1 is not a backend (allowed: ");
	expect_err("[device ram0]\nbackend = ram\nsize = 1G;x\n",
		   F ":3: size: 1G;x is not a size (allowed: digits with an optional K, M, G or T suffix");
	expect_err("[device ram0]\nbackend = ram\nsize =#1G\n",
		   F ":3: size: #1G is not a size");
	/* a comment right after '=' with whitespace leaves nothing */
	expect_err("[device ram0]\nbackend = ram\nsize = # 1G\n",
		   F ":3: size: empty value");
}

Test(conf, crlf_and_no_final_newline)
{
	expect_ok("[cache]\r\nsize = 64M\r\n[device ram0]\r\nbackend = ram\r\nsize = 1G");
	cr_assert_eq(c.cache.size, 64ull << 20);
	cr_assert_eq(c.devs[0].geo.size, 1ull << 30);
	cr_assert_str_eq(c.devs[0].params[1].value, "1G");
	conf_free(&c);
	/* no newline after a comment, and after a header */
	expect_ok(RAM0 "# the end");
	conf_free(&c);
	expect_err("[device ram0]\nbackend = ram\nsize = 1G\n[cache", F ":4: [cache: syntax error");
}

Test(conf, value_keeps_inner_spaces_and_equals)
{
	expect_err("[device ram0]\nbackend = r a=m\nsize = 1G\n",
		   F ":2: backend: r a=m is not a backend");
}

/* ------------------------------------------------------------------ */
/* sizes */

Test(conf, size_suffixes)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} v[] = {
		{ "1073741824", 1ull << 30 },
		{ "1048576K", 1ull << 30 }, { "1048576k", 1ull << 30 },
		{ "1024M", 1ull << 30 }, { "1024m", 1ull << 30 },
		{ "1G", 1ull << 30 }, { "1g", 1ull << 30 }, { "1GiB", 1ull << 30 },
		{ "1024MiB", 1ull << 30 }, { "1048576KiB", 1ull << 30 },
		{ "1T", 1ull << 40 }, { "1t", 1ull << 40 }, { "1TiB", 1ull << 40 },
	};
	char text[256];
	size_t i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		snprintf(text, sizeof(text), "[device ram0]\nbackend = ram\nsize = %s\n", v[i].text);
		expect_ok(text);
		cr_assert_eq(c.devs[0].geo.size, v[i].bytes, "%s", v[i].text);
		conf_free(&c);
	}
}

Test(conf, size_errors)
{
	expect_err("[device ram0]\nbackend = ram\nsize = 12Q\n",
		   F ":3: size: 12Q is not a size (allowed: digits with an optional K, M, G or T suffix, e.g. 64K)");
	expect_err("[device ram0]\nbackend = ram\nsize = 1 G\n", F ":3: size: 1 G is not a size");
	expect_err("[device ram0]\nbackend = ram\nsize = -1\n", F ":3: size: -1 is not a size");
	expect_err("[device ram0]\nbackend = ram\nsize = 1KB\n", F ":3: size: 1KB is not a size");
	expect_err("[device ram0]\nbackend = ram\nsize = 99999999999999999999\n",
		   F ":3: size: 99999999999999999999 is too large");
	expect_err("[device ram0]\nbackend = ram\nsize = 16777216T\n",
		   F ":3: size: 16777216T is too large");
	expect_err("[device ram0]\nbackend = ram\nsize = 0\n",
		   F ":3: size: 0 is out of range (allowed: a multiple of the logical block size, up to 4194304T)");
	expect_err("[device ram0]\nbackend = ram\nsize = 8388608T\n",
		   F ":3: size: 8388608T is out of range");
	expect_err("[device ram0]\nbackend = ram\nsize = 1000\n",
		   F ":3: size: 1000 is not a multiple of the logical block size 512 (allowed: a multiple of 512)");
	expect_err("[device ram0]\nbackend = ram\nsize = 1049088\nlogical_block_size = 4K\n",
		   F ":3: size: 1049088 is not a multiple of the logical block size 4K (allowed: a multiple of 4K)");
}

/* ------------------------------------------------------------------ */
/* sections */

Test(conf, section_errors)
{
	expect_err("[foo]\n", F ":1: [foo]: unknown section (allowed: [cache], [mount], [device NAME])");
	expect_err(RAM0 "[Cache]\n", F ":4: [Cache]: unknown section");
	expect_err(RAM0 "[cache x]\n", F ":4: [cache x]: unknown section");
	expect_err(RAM0 "[devices ram1]\n", F ":4: [devices ram1]: unknown section");
	expect_err(RAM0 "[]\n", F ":4: []: unknown section");
	expect_err("[cache]\n" RAM0 "[cache]\n",
		   F ":5: [cache]: duplicate section (first defined on line 1)");
	expect_err("# x\n" RAM0 "\n[device ram1]\nbackend = ram\nsize = 1G\n[device ram0]\n",
		   F ":9: [device ram0]: duplicate device (first defined on line 2)");
	expect_err("[device]\n", F ":1: [device]: missing device name (allowed: [device NAME], NAME of 1..32 characters");
	expect_err("[device   ]\n", F ":1: [device   ]: missing device name");
	expect_err("[cache\n", F ":1: [cache: syntax error: a section header ends with ']' (allowed: [cache], [device NAME])");
	expect_err("[\n", F ":1: [: syntax error: a section header ends with ']'");
	expect_err("[cache]x\n", F ":1: [cache]x: syntax error");
	expect_err("[cache]#x\n", F ":1: [cache]#x: syntax error");
}

Test(conf, section_header_whitespace)
{
	expect_ok("[ cache ]\n[device\tram0 ]\nbackend = ram\nsize = 1G\n");
	cr_assert_eq(c.cache.line, 1);
	cr_assert_str_eq(c.devs[0].name, "ram0");
}

Test(conf, device_names)
{
	static const char *const bad[] = {
		".", "..", ".hidden", "a/b", "a b", "a:b", "ram0]", "é",
		"123456789012345678901234567890123",	/* 33 */
	};
	char text[256], want[256];
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "[device %s]\nbackend = ram\nsize = 1G\n", bad[i]);
		snprintf(want, sizeof(want),
			 F ":1: [device %s]: invalid device name (allowed: 1..32 characters from A-Z a-z 0-9 _ . -, not starting with '.')",
			 bad[i]);
		expect_err(text, want);
	}
	expect_ok("[device 12345678901234567890123456789012]\nbackend = ram\nsize = 1G\n"
		  "[device a.]\nbackend = ram\nsize = 1G\n"
		  "[device -_.Zz9]\nbackend = ram\nsize = 1G\n");
	cr_assert_eq(c.nr_devs, 3);
	cr_assert_str_eq(c.devs[0].name, "12345678901234567890123456789012");
	cr_assert_str_eq(c.devs[2].name, "-_.Zz9");
}

Test(conf, device_count_limit)
{
	size_t cap = (CONF_MAX_DEVICES + 1) * 64, n = 0;
	char *text = malloc(cap);
	int i;

	cr_assert_not_null(text);
	for (i = 0; i < CONF_MAX_DEVICES; i++)
		n += snprintf(text + n, cap - n, "[device d%d]\nbackend = ram\nsize = 1M\n", i);
	expect_ok(text);
	cr_assert_eq(c.nr_devs, CONF_MAX_DEVICES);
	cr_assert_str_eq(c.devs[CONF_MAX_DEVICES - 1].name, "d63");
	conf_free(&c);
	snprintf(text + n, cap - n, "[device d%d]\nbackend = ram\nsize = 1M\n", i);
	expect_err(text, F ":193: [device d64]: too many devices (allowed: at most 64)");
	free(text);
}

Test(conf, no_device)
{
	expect_err("", F ":1: [device NAME]: no [device NAME] section (allowed: at least one");
	expect_err("# nothing\n\n", F ":1: [device NAME]: no [device NAME] section");
	expect_err("[cache]\nsize = 64M\n", F ":1: [device NAME]: no [device NAME] section");
}

/* ------------------------------------------------------------------ */
/* lines and keys */

Test(conf, line_errors)
{
	expect_err("size = 1G\n" RAM0,
		   F ":1: size: key outside a section (allowed: under [cache], [mount] or [device NAME])");
	expect_err("[cache]\nhello world\n",
		   F ":2: hello world: syntax error (allowed: `key = value`, `[section]`, or a # comment)");
	expect_err("[cache]\n= 5\n", F ":2: =: syntax error: no key before '='");
	expect_err("[cache]\nsize =\n", F ":2: size: empty value");
	expect_err("[cache]\nsize =   \t\n", F ":2: size: empty value");
	expect_err(RAM0 "io_min =\n", F ":4: io_min: empty value");
}

Test(conf, duplicate_keys)
{
	expect_err("[cache]\nsize = 64M\n\nsize = 128M\n" RAM0,
		   F ":4: size: duplicate key (first given on line 2)");
	expect_err("[device ram0]\nbackend = ram\nsize = 1G\n# again\nsize = 1G\n",
		   F ":5: size: duplicate key (first given on line 3)");
	expect_err("[device ram0]\nbackend = ram\nsize = 1G\nbackend = ram\n",
		   F ":4: backend: duplicate key (first given on line 2)");
	/* the same key in two sections is fine */
	expect_ok("[cache]\nsize = 64M\n" RAM0);
}

Test(conf, cache_unknown_key)
{
	expect_err("[cache]\nsize = 64M\ncolour = red\n" RAM0,
		   F ":3: colour: unknown key in [cache] (allowed: size, folio_size, dirty_background, dirty_limit, dirty_expire)");
	expect_err("[cache]\nSize = 64M\n" RAM0, F ":2: Size: unknown key in [cache]");
}

/* ------------------------------------------------------------------ */
/* backends and their keys */

Test(conf, backend_errors)
{
	char want[512];

	snprintf(want, sizeof(want), F ":2: backend: nope is not a backend (allowed: %s)",
		 blk_backend_names());
	expect_err("[device ram0]\nbackend = nope\nsize = 1G\n", want);

	snprintf(want, sizeof(want),
		 F ":3: [device ram0]: no backend key (required; allowed: backend = %s)",
		 blk_backend_names());
	expect_err("# one\n\n[device ram0]\nsize = 1G\n", want);
	/* a section with no keys at all */
	expect_err("[device ram0]\n[device ram1]\nbackend = ram\nsize = 1G\n",
		   F ":1: [device ram0]: no backend key");
	expect_err("[device ram0]\nbackend = RAM\nsize = 1G\n", F ":2: backend: RAM is not a backend");
	cr_assert(strstr(blk_backend_names(), "ram"), "ram not in \"%s\"", blk_backend_names());
}

Test(conf, unknown_key_lists_core_and_backend_keys)
{
	const struct blk_backend_ops *ram = blk_backend_find("ram");
	const char *const *k;
	char want[1024];
	size_t n;

	cr_assert_not_null(ram);
	n = snprintf(want, sizeof(want),
		     F ":4: colour: unknown key for backend ram (allowed: backend, size, logical_block_size, physical_block_size, io_min, io_opt, max_io, cache_block_size, filters, rmw, on_error, read_ahead, mode, uid, gid, write_cache");
	for (k = ram->keys; k && *k; k++)
		n += snprintf(want + n, sizeof(want) - n, ", %s", *k);
	snprintf(want + n, sizeof(want) - n, ")");
	expect_err(RAM0 "colour = red\n", want);
	/* checked against the backend even when `backend` comes last */
	want[strlen(F ":")] = '2';
	expect_err("[device ram0]\ncolour = red\nsize = 1G\nbackend = ram\n", want);
}

/* Every key the ram backend lists is passed through, not consumed. */
Test(conf, backend_keys_pass_through)
{
	const struct blk_backend_ops *ram = blk_backend_find("ram");
	const struct conf_device *d;
	char text[4096];
	size_t n;
	int i, nr = 0;

	cr_assert_not_null(ram);
	n = snprintf(text, sizeof(text), RAM0);
	for (i = 0; ram->keys && ram->keys[i]; i++, nr++) {
		if (!strcmp(ram->keys[i], "size"))	/* already there */
			continue;
		n += snprintf(text + n, sizeof(text) - n, "%s = v%d\n", ram->keys[i], i);
	}
	if (!nr)
		cr_skip_test("the ram backend takes no keys of its own");
	expect_ok(text);
	d = &c.devs[0];
	for (i = 0; ram->keys[i]; i++) {
		const struct blk_param *p = param(d, ram->keys[i]);

		cr_assert_not_null(p, "%s", ram->keys[i]);
		if (!strcmp(ram->keys[i], "size"))
			continue;
		cr_assert_not(p->used, "backend key %s marked used", ram->keys[i]);
	}
}

/* ------------------------------------------------------------------ */
/* filters */

Test(conf, filters_registered)
{
	const struct blk_backend_ops *log = blk_backend_find("log");
	const struct blk_backend_ops *delay = blk_backend_find("delay");

	cr_assert_not_null(log);
	cr_assert_not_null(delay);
	cr_assert(log->is_filter && delay->is_filter);
	cr_assert_str_eq(blk_filter_names(), "log, delay, fault, flakey, throttle, powerloss, record");
	cr_assert_null(strstr(blk_backend_names(), "log"), "%s", blk_backend_names());
	cr_assert_null(strstr(blk_backend_names(), "delay"), "%s", blk_backend_names());
	cr_assert_not_null(strstr(blk_backend_names(), "ram"));
}

Test(conf, filters_list)
{
	const struct blk_backend_ops *log = blk_backend_find("log");
	const struct blk_backend_ops *delay = blk_backend_find("delay");
	const struct conf_device *d;
	const struct blk_param *prm;

	expect_ok(RAM0 "filters = log, delay\nlog.path = /tmp/t\ndelay.write = 2ms\n");
	d = &c.devs[0];
	cr_assert_eq(d->nr_filters, 2);
	cr_assert_eq(d->filters[0], log);
	cr_assert_eq(d->filters[1], delay);
	prm = param(d, "filters");
	cr_assert_not_null(prm);
	cr_assert(prm->used, "filters is conf's own key");
	/* The filters' keys are left for their open() (blk_param_get with a prefix). */
	prm = param(d, "log.path");
	cr_assert_not_null(prm);
	cr_assert_str_eq(prm->value, "/tmp/t");
	cr_assert_eq(prm->line, 5);
	cr_assert_not(prm->used);
	prm = param(d, "delay.write");
	cr_assert_not_null(prm);
	cr_assert_str_eq(prm->value, "2ms");
	cr_assert_not(prm->used);
	conf_free(&c);

	/* Spaces only, the other order, a trailing comma, keys before the list. */
	expect_ok(RAM0 "delay.read = 1ms-5ms\nfilters =   delay\tlog ,\nlog.append = yes\n");
	d = &c.devs[0];
	cr_assert_eq(d->nr_filters, 2);
	cr_assert_eq(d->filters[0], delay);
	cr_assert_eq(d->filters[1], log);
	conf_free(&c);

	expect_ok(RAM0 "filters = log\n");
	cr_assert_eq(c.devs[0].nr_filters, 1);
	conf_free(&c);

	/* No filters key: none, and the device's other fields as before. */
	expect_ok(RAM0);
	cr_assert_eq(c.devs[0].nr_filters, 0);
	cr_assert_null(c.devs[0].filters[0]);
	cr_assert_eq(CONF_MAX_FILTERS, 8);
}

Test(conf, filters_list_errors)
{
	char want[512];

	snprintf(want, sizeof(want),
		 F ":4: filters: nope is not a filter (allowed: a list of %s)", blk_filter_names());
	expect_err(RAM0 "filters = log, nope\n", want);
	expect_err(RAM0 "filters = ram\n",
		   F ":4: filters: ram is a backend, not a filter (allowed: a list of log, delay, fault, flakey, throttle, powerloss, record)");
	expect_err(RAM0 "filters = log, delay, log\n",
		   F ":4: filters: log is listed twice (allowed: each filter once)");
	expect_err(RAM0 "filters = ,\n",
		   F ":4: filters: no filter names (allowed: a list of log, delay");
	expect_err(RAM0 "filters = LOG\n", F ":4: filters: LOG is not a filter");
	/* Names are not cut at a prefix: "logx" is not "log". */
	expect_err(RAM0 "filters = logx\n", F ":4: filters: logx is not a filter");
	/* A long name is shown cut, and the message stays one line. */
	expect_err(RAM0 "filters = log aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		   F ":4: filters: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... is not a filter");
	expect_err(RAM0 "filters = log\nfilters = delay\n",
		   F ":5: filters: duplicate key (first given on line 4)");
	/* The list is checked before the keys it allows, wherever it is. */
	expect_err(RAM0 "log.path = x\nfilters = nope\n", F ":5: filters: nope is not a filter");
	/* A filter cannot be the backend. */
	expect_err("[device ram0]\nbackend = log\nsize = 1G\n",
		   F ":2: backend: log is a filter, not a backend");
}

Test(conf, filter_key_errors)
{
	/* The filter must be listed. */
	expect_err(RAM0 "log.path = /tmp/trace\n",
		   F ":4: log.path: the log filter is not in this device's filters (no filters key; add filters = log)");
	expect_err(RAM0 "filters = delay\nlog.path = /tmp/trace\n",
		   F ":5: log.path: the log filter is not in this device's filters (filters = delay)");
	/* The key must be one the filter takes. */
	expect_err(RAM0 "filters = delay\ndelay.wrte = 2ms\n",
		   F ":5: delay.wrte: unknown key for filter delay (allowed: delay.read, delay.write, delay.flush, delay.discard, delay.map, delay.p90, delay.p99, delay.p999, delay.p9999, delay.seed, delay.pool)");
	expect_err(RAM0 "filters = log\nlog. = x\n",
		   F ":5: log.: unknown key for filter log (allowed: log.path, log.append)");
	expect_err(RAM0 "filters = log\nlog.path.x = x\n",
		   F ":5: log.path.x: unknown key for filter log");
	/* A prefix that is no filter at all. */
	expect_err(RAM0 "filters = delay\ndealy.write = 2ms\n",
		   F ":5: dealy.write: unknown key: not a key of backend ram, and dealy is not a filter (allowed filter settings: FILTER.KEY with FILTER one of log, delay, fault, flakey, throttle, powerloss, record)");
	expect_err(RAM0 "ram.size = 1G\n", F ":4: ram.size: unknown key: not a key of backend ram, and ram is not a filter");
	expect_err(RAM0 ".x = 1\n", F ":4: .x: unknown key for backend ram (allowed: backend,");
	/* A filter key given twice. */
	expect_err(RAM0 "filters = log\nlog.path = a\nlog.path = b\n",
		   F ":6: log.path: duplicate key (first given on line 5)");
	/* Bare filter keys are not the filter's. */
	expect_err(RAM0 "filters = log\npath = a\n", F ":5: path: unknown key for backend ram");
}

/* ------------------------------------------------------------------ */
/* device geometry */

Test(conf, device_defaults_with_size)
{
	const struct conf_device *d;

	expect_ok(RAM0);
	d = &c.devs[0];
	cr_assert_eq(d->geo.size, 1ull << 30);
	cr_assert_eq(d->geo.lbs, 512);
	cr_assert_eq(d->geo.pbs, 512);
	cr_assert_eq(d->geo.io_min, 512);
	cr_assert_eq(d->geo.max_io, 1u << 20);
	cr_assert_eq(d->geo.io_opt, 1u << 20);
	cr_assert_eq(d->cache_block_size, 0);
	cr_assert_eq(d->nr_params, 2);
	cr_assert(d->params[0].used && d->params[1].used);
	conf_free(&c);

	expect_ok("[device big]\nbackend = ram\nsize = 1G\nlogical_block_size = 4K\n"
		  "physical_block_size = 64K\n[cache]\nfolio_size = 64K\n");
	d = &c.devs[0];
	cr_assert_eq(d->geo.lbs, 4096);
	cr_assert_eq(d->geo.pbs, 65536);
	cr_assert_eq(d->geo.io_min, 65536);
	cr_assert_eq(d->geo.max_io, 1u << 20);
	cr_assert_eq(d->geo.io_opt, 1u << 20);
	conf_free(&c);

	expect_ok("[device x]\nbackend = ram\nsize = 1G\nmax_io = 256K\nio_min = 8K\n");
	d = &c.devs[0];
	cr_assert_eq(d->geo.max_io, 256u << 10);
	cr_assert_eq(d->geo.io_opt, 256u << 10);
	cr_assert_eq(d->geo.io_min, 8u << 10);
	conf_free(&c);

	expect_ok("[device x]\nbackend = ram\nsize = 1G\nio_opt = 3M\n");
	cr_assert_eq(c.devs[0].geo.io_opt, 3u << 20);
	cr_assert_eq(c.devs[0].geo.max_io, 1u << 20);
}

/* Without a size the backend supplies the geometry: only given fields are set. */
Test(conf, device_without_size)
{
	const struct conf_device *d;

	expect_ok("[device r]\nbackend = ram\n");
	d = &c.devs[0];
	cr_assert(is_zero(&d->geo, sizeof(d->geo)));
	conf_free(&c);

	expect_ok("[device r]\nbackend = ram\nlogical_block_size = 4K\nmax_io = 128K\n");
	d = &c.devs[0];
	cr_assert_eq(d->geo.size, 0);
	cr_assert_eq(d->geo.lbs, 4096);
	cr_assert_eq(d->geo.pbs, 0);
	cr_assert_eq(d->geo.io_min, 0);
	cr_assert_eq(d->geo.io_opt, 0);
	cr_assert_eq(d->geo.max_io, 128u << 10);
	conf_free(&c);

	/* rules between the given keys still hold */
	expect_err("[device r]\nbackend = ram\nlogical_block_size = 4K\nmax_io = 6K\n",
		   F ":4: max_io: 6K is not a multiple of the physical block size 4K");
	expect_err("[device r]\nbackend = ram\nlogical_block_size = 4K\nphysical_block_size = 1K\n",
		   F ":4: physical_block_size: 1K is smaller than the logical block size 4K");
	expect_err("[device r]\nbackend = ram\nio_min = 1000\n",
		   F ":3: io_min: 1000 is not a multiple of the logical block size 512");
}

Test(conf, block_size_errors)
{
	expect_err(RAM0 "logical_block_size = 1000\n",
		   F ":4: logical_block_size: 1000 is not a power of two (allowed: 512, 1K, ..., 64K)");
	expect_err(RAM0 "logical_block_size = 256\n",
		   F ":4: logical_block_size: 256 is out of range (allowed: 512, 1K, ..., 64K)");
	expect_err(RAM0 "logical_block_size = 128K\n",
		   F ":4: logical_block_size: 128K is out of range (allowed: 512, 1K, ..., 64K)");
	expect_err(RAM0 "logical_block_size = 0\n",
		   F ":4: logical_block_size: 0 is not a power of two");
	expect_err(RAM0 "physical_block_size = 3K\n",
		   F ":4: physical_block_size: 3K is not a power of two (allowed: 512, 1K, ..., 64K)");
	expect_err(RAM0 "physical_block_size = 128K\n",
		   F ":4: physical_block_size: 128K is out of range");
	expect_err(RAM0 "logical_block_size = 4096\nphysical_block_size = 512\n",
		   F ":5: physical_block_size: 512 is smaller than the logical block size 4K (allowed: a power of two from 4K to 64K)");
	expect_err(RAM0 "logical_block_size = 4k\nphysical_block_size = 2k\n",
		   F ":5: physical_block_size: 2k is smaller than the logical block size 4K");
}

Test(conf, io_size_errors)
{
	expect_err(RAM0 "max_io = 6K\nphysical_block_size = 4K\n",
		   F ":4: max_io: 6K is not a multiple of the physical block size 4K (allowed: a multiple of 4K from 4K to 64M)");
	expect_err(RAM0 "physical_block_size = 16K\nmax_io = 8K\n",
		   F ":5: max_io: 8K is smaller than the physical block size 16K (allowed: a multiple of 16K from 16K to 64M)");
	expect_err(RAM0 "max_io = 128M\n",
		   F ":4: max_io: 128M is out of range (allowed: a multiple of the physical block size, from the physical block size to 64M)");
	expect_err(RAM0 "max_io = 0\n", F ":4: max_io: 0 is out of range");
	expect_err(RAM0 "max_io = 1000\n", F ":4: max_io: 1000 is not a multiple of the physical block size 512");
	expect_err(RAM0 "io_min = 1000\n",
		   F ":4: io_min: 1000 is not a multiple of the logical block size 512 (allowed: a multiple of 512, up to 1G)");
	expect_err(RAM0 "logical_block_size = 4K\nio_opt = 6K\n",
		   F ":5: io_opt: 6K is not a multiple of the logical block size 4K (allowed: a multiple of 4K, up to 1G)");
	expect_err(RAM0 "io_opt = 0\n",
		   F ":4: io_opt: 0 is out of range (allowed: a multiple of the logical block size, up to 1G)");
	expect_err(RAM0 "io_min = 2G\n", F ":4: io_min: 2G is out of range");
	expect_err(RAM0 "io_opt = 8G\n", F ":4: io_opt: 8G is out of range");
	expect_ok(RAM0 "max_io = 64M\nio_min = 1G\n");
	cr_assert_eq(c.devs[0].geo.max_io, 64u << 20);
	cr_assert_eq(c.devs[0].geo.io_min, 1u << 30);
}

Test(conf, cache_block_size_values)
{
	expect_ok(RAM0 "cache_block_size = 1K\n");
	cr_assert_eq(c.devs[0].cache_block_size, 1024);
	cr_assert(c.devs[0].params[2].used);
	conf_free(&c);
	expect_ok(RAM0 "cache_block_size = auto\n");
	cr_assert_eq(c.devs[0].cache_block_size, 0);
	conf_free(&c);
	/* up to folio_size */
	expect_ok("[cache]\nfolio_size = 2M\nsize = 64M\n" RAM0 "cache_block_size = 2M\n");
	cr_assert_eq(c.devs[0].cache_block_size, 2u << 20);
}

Test(conf, cache_block_size_errors)
{
	expect_err(RAM0 "cache_block_size = 1000\n",
		   F ":4: cache_block_size: 1000 is not a power of two from 512 to 2M (allowed: auto, or a power of two from the logical block size to folio_size)");
	expect_err(RAM0 "cache_block_size = Auto\n", F ":4: cache_block_size: Auto is not a size");
	expect_err(RAM0 "cache_block_size = 256\n", F ":4: cache_block_size: 256 is not a power of two from 512 to 2M");
	expect_err(RAM0 "cache_block_size = 4M\n", F ":4: cache_block_size: 4M is not a power of two from 512 to 2M");
	expect_err(RAM0 "logical_block_size = 4K\ncache_block_size = 1K\n",
		   F ":5: cache_block_size: 1K is smaller than the logical block size 4K (allowed: auto, or a power of two from 4K to folio_size)");
	expect_err("[device odd]\nbackend = ram\nsize = 1049088\ncache_block_size = 1K\n",
		   F ":4: cache_block_size: 1K does not divide the size 1049088 (allowed: auto, or a power of two that divides the size)");
	expect_err(RAM0 "cache_block_size = 128K\n",
		   F ":4: cache_block_size: 128K is larger than the cache's folio_size 64K (allowed: auto, or a power of two from the logical block size to folio_size)");
	/* [cache] after the device */
	expect_err(RAM0 "cache_block_size = 16K\n[cache]\nfolio_size = 8K\n",
		   F ":4: cache_block_size: 16K is larger than the cache's folio_size 8K");
}

Test(conf, folio_smaller_than_logical_block)
{
	expect_err("[cache]\nfolio_size = 16K\n\n[device big]\nbackend = ram\nsize = 1G\nlogical_block_size = 64K\n",
		   F ":7: logical_block_size: 64K is larger than the cache's folio_size 16K (allowed: at most folio_size; raise folio_size in [cache])");
	/* [cache] may come after the device; the error is still on the device's line */
	expect_err(RAM0 "[device big]\nbackend = ram\nlogical_block_size = 32K\n"
		   "[cache]\nfolio_size = 8K\n",
		   F ":6: logical_block_size: 32K is larger than the cache's folio_size 8K");
	expect_ok("[cache]\nfolio_size = 64K\n[device big]\nbackend = ram\nsize = 1G\nlogical_block_size = 64K\n");
	cr_assert_eq(conf_cache_block(&c.devs[0].geo, 0), 65536);
}

/* ------------------------------------------------------------------ */
/* [cache] */

Test(conf, cache_defaults)
{
	expect_ok(RAM0);
	cr_assert_eq(c.cache.line, 0);
	cr_assert_eq(c.cache.size, 256ull << 20);
	cr_assert_eq(c.cache.folio_size, 65536);
	cr_assert_eq(c.cache.dirty_background, 26843545);
	cr_assert_eq(c.cache.dirty_limit, 107374182);
	cr_assert_eq(c.cache.dirty_expire_ms, 5000);
	conf_free(&c);

	/* an empty [cache] section is all defaults too */
	expect_ok(RAM0 "[cache]\n");
	cr_assert_eq(c.cache.line, 4);
	cr_assert_eq(c.cache.size, 256ull << 20);
}

Test(conf, cache_size_and_folio)
{
	expect_ok("[cache]\nsize = 1M\nfolio_size = 4K\n" RAM0);
	cr_assert_eq(c.cache.size, 1u << 20);
	cr_assert_eq(c.cache.folio_size, 4096);
	conf_free(&c);
	expect_ok("[cache]\nsize = 1T\nfolio_size = 2M\n" RAM0);
	cr_assert_eq(c.cache.size, 1ull << 40);
	conf_free(&c);
	expect_ok("[cache]\nsize = 16M\nfolio_size = 2M\n" RAM0);
	conf_free(&c);

	expect_err("[cache]\nsize = 512K\n" RAM0,
		   F ":2: size: 512K is out of range (allowed: 1M..1T: at least 1M and 8 folios of folio_size 64K)");
	expect_err("[cache]\nsize = 8M\nfolio_size = 2M\n" RAM0,
		   F ":2: size: 8M is out of range (allowed: 16M..1T: at least 1M and 8 folios of folio_size 2M)");
	expect_err("[cache]\nsize = 2T\n" RAM0, F ":2: size: 2T is out of range (allowed: 1M..1T");
	expect_err("[cache]\nsize = lots\n" RAM0, F ":2: size: lots is not a size");
	expect_err("[cache]\nfolio_size = 3K\n" RAM0,
		   F ":2: folio_size: 3K is not a power of two (allowed: 4K, 8K, ..., 2M)");
	expect_err("[cache]\nfolio_size = 2K\n" RAM0,
		   F ":2: folio_size: 2K is out of range (allowed: 4K, 8K, ..., 2M)");
	expect_err("[cache]\nfolio_size = 4M\n" RAM0, F ":2: folio_size: 4M is out of range");
}

Test(conf, dirty_percent_and_bytes)
{
	expect_ok("[cache]\nsize = 1G\ndirty_background = 5%\ndirty_limit = 50%\n" RAM0);
	cr_assert_eq(c.cache.dirty_background, (1ull << 30) * 5 / 100);
	cr_assert_eq(c.cache.dirty_limit, 1ull << 29);
	conf_free(&c);

	expect_ok("[cache]\ndirty_background = 16M\ndirty_limit = 64M\n" RAM0);
	cr_assert_eq(c.cache.dirty_background, 16u << 20);
	cr_assert_eq(c.cache.dirty_limit, 64u << 20);
	conf_free(&c);

	/* mixed, the limit at the whole cache; percent of a size given later */
	expect_ok("[cache]\ndirty_background = 1%\ndirty_limit = 100%\nsize = 100M\n" RAM0);
	cr_assert_eq(c.cache.dirty_background, (100ull << 20) / 100);
	cr_assert_eq(c.cache.dirty_limit, 100ull << 20);
	conf_free(&c);
	expect_ok("[cache]\ndirty_background = 1\ndirty_limit = 256M\n" RAM0);
	cr_assert_eq(c.cache.dirty_background, 1);
	cr_assert_eq(c.cache.dirty_limit, 256u << 20);
}

Test(conf, dirty_errors)
{
	expect_err("[cache]\ndirty_limit = 0%\n" RAM0,
		   F ":2: dirty_limit: 0% is out of range (allowed: 1%..100% of the cache size, or a size in bytes)");
	expect_err("[cache]\ndirty_limit = 101%\n" RAM0, F ":2: dirty_limit: 101% is out of range");
	expect_err("[cache]\ndirty_limit = 99999999999999999999%\n" RAM0,
		   F ":2: dirty_limit: 99999999999999999999% is out of range");
	expect_err("[cache]\ndirty_limit = %\n" RAM0, F ":2: dirty_limit: % is not a percentage");
	expect_err("[cache]\ndirty_limit = 4.5%\n" RAM0, F ":2: dirty_limit: 4.5% is not a percentage");
	expect_err("[cache]\ndirty_background = x%\n" RAM0, F ":2: dirty_background: x% is not a percentage");
	expect_err("[cache]\ndirty_limit = 300M\n" RAM0,
		   F ":2: dirty_limit: 300M is out of range (allowed: 1%..100% of the cache size, or a size in bytes from 1 to the cache size 256M)");
	expect_err("[cache]\ndirty_background = 0\n" RAM0, F ":2: dirty_background: 0 is out of range");
	expect_err("[cache]\ndirty_background = many\n" RAM0, F ":2: dirty_background: many is not a size");
	/* background must stay below the limit; blame what was given */
	expect_err("[cache]\ndirty_background = 50%\n" RAM0,
		   F ":2: dirty_background: dirty_background (134217728 bytes) must be below dirty_limit (107374182 bytes) (allowed: dirty_background < dirty_limit <= size)");
	expect_err("[cache]\ndirty_limit = 5%\n" RAM0,
		   F ":2: dirty_limit: dirty_background (26843545 bytes) must be below dirty_limit (13421772 bytes)");
	expect_err("[cache]\ndirty_limit = 64M\ndirty_background = 64M\n" RAM0,
		   F ":3: dirty_background: dirty_background (67108864 bytes) must be below dirty_limit (67108864 bytes)");
}

Test(conf, dirty_expire)
{
	static const struct {
		const char *text;
		uint32_t ms;
	} ok[] = {
		{ "5s", 5000 }, { "500ms", 500 }, { "2m", 120000 }, { "10", 10000 },
		{ "100ms", 100 }, { "1h", 3600000 }, { "3600", 3600000 }, { "60m", 3600000 },
		/* the one grammar: every unit, here as elsewhere */
		{ "250000us", 250 }, { "1500000000ns", 1500 }, { "0001s", 1000 },
	};
	char text[256];
	size_t i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text), "[cache]\ndirty_expire = %s\n" RAM0, ok[i].text);
		expect_ok(text);
		cr_assert_eq(c.cache.dirty_expire_ms, ok[i].ms, "%s", ok[i].text);
		conf_free(&c);
	}
	expect_err("[cache]\ndirty_expire = 5x\n" RAM0,
		   F ":2: dirty_expire: 5x is not a duration (allowed: 100ms..1h; digits and a unit: ns, us, ms, s, m or h, such as 500us, 2ms, 5s, or plain seconds)");
	expect_err("[cache]\ndirty_expire = 5S\n" RAM0, F ":2: dirty_expire: 5S is not a duration");
	expect_err("[cache]\ndirty_expire = 1.5s\n" RAM0, F ":2: dirty_expire: 1.5s is not a duration");
	expect_err("[cache]\ndirty_expire = 100500us\n" RAM0,
		   F ":2: dirty_expire: 100500us is finer than the flusher's 1ms resolution (allowed: whole milliseconds)");
	expect_err("[cache]\ndirty_expire = 99999999ns\n" RAM0,
		   F ":2: dirty_expire: 99999999ns is out of range (allowed: 100ms..1h)");
	expect_err("[cache]\ndirty_expire = s\n" RAM0, F ":2: dirty_expire: s is not a duration");
	expect_err("[cache]\ndirty_expire = 5 s\n" RAM0, F ":2: dirty_expire: 5 s is not a duration");
	expect_err("[cache]\ndirty_expire = 99ms\n" RAM0,
		   F ":2: dirty_expire: 99ms is out of range (allowed: 100ms..1h)");
	expect_err("[cache]\ndirty_expire = 0\n" RAM0, F ":2: dirty_expire: 0 is out of range");
	expect_err("[cache]\ndirty_expire = 2h\n" RAM0, F ":2: dirty_expire: 2h is out of range");
	expect_err("[cache]\ndirty_expire = 3601s\n" RAM0, F ":2: dirty_expire: 3601s is out of range");
	expect_err("[cache]\ndirty_expire = 99999999999999999999ms\n" RAM0,
		   F ":2: dirty_expire: 99999999999999999999ms is out of range");
	expect_err("[cache]\ndirty_expire = 18446744073709551615h\n" RAM0,
		   F ":2: dirty_expire: 18446744073709551615h is out of range");
}

/* ------------------------------------------------------------------ */
/* the duration grammar (backends/lib/params.c), which every duration key uses */

TestSuite(duration);

#define NS 1ull
#define US 1000ull
#define MS 1000000ull
#define SEC 1000000000ull

Test(duration, parse)
{
	static const struct {
		const char *s;
		uint64_t bare;		/* unit of a bare number; 0: refused */
		int ret;
		uint64_t ns;
	} cases[] = {
		{ "0", 0, 0, 0 }, { "0", SEC, 0, 0 }, { "000", 0, 0, 0 },
		{ "0ns", 0, 0, 0 }, { "0h", 0, 0, 0 },
		{ "1ns", 0, 0, 1 }, { "7us", 0, 0, 7 * US }, { "2ms", 0, 0, 2 * MS },
		{ "5s", 0, 0, 5 * SEC }, { "2m", 0, 0, 120 * SEC }, { "1h", 0, 0, 3600 * SEC },
		{ "1500ms", 0, 0, 1500 * MS }, { "007s", 0, 0, 7 * SEC },
		/* a bare number: only where the key has a unit for it */
		{ "5", 0, -EINVAL, 0 }, { "5", SEC, 0, 5 * SEC }, { "5", MS, 0, 5 * MS },
		/* the largest: UINT64_MAX ns, about 584 years */
		{ "18446744073709551615ns", 0, 0, UINT64_MAX },
		{ "18446744073709551616ns", 0, -ERANGE, 0 },
		{ "18446744073709551615", SEC, -ERANGE, 0 },
		{ "18446744073709551615", 0, -EINVAL, 0 },
		{ "18446744073us", 0, 0, 18446744073ull * US },
		{ "18446744074s", 0, -ERANGE, 0 },
		{ "5124095h", 0, 0, 5124095ull * 3600 * SEC }, { "5124096h", 0, -ERANGE, 0 },
		{ "5124096h1", 0, -EINVAL, 0 },
		{ "5124095576030432h", 0, -ERANGE, 0 },
		{ "99999999999999999999999999x", 0, -EINVAL, 0 },
		/* malformed */
		{ "", 0, -EINVAL, 0 }, { "s", 0, -EINVAL, 0 }, { "ms", SEC, -EINVAL, 0 },
		{ "5S", 0, -EINVAL, 0 }, { "5MS", 0, -EINVAL, 0 }, { "5M", 0, -EINVAL, 0 },
		{ "5 s", 0, -EINVAL, 0 }, { " 5s", 0, -EINVAL, 0 }, { "5s ", 0, -EINVAL, 0 },
		{ "1.5s", 0, -EINVAL, 0 }, { "-1s", 0, -EINVAL, 0 }, { "+1s", 0, -EINVAL, 0 },
		{ "5sec", 0, -EINVAL, 0 }, { "5mss", 0, -EINVAL, 0 }, { "5d", 0, -EINVAL, 0 },
		{ "5µs", 0, -EINVAL, 0 }, { "1h30m", 0, -EINVAL, 0 }, { "0x10s", 0, -EINVAL, 0 },
		{ "1e3ms", 0, -EINVAL, 0 },
	};
	size_t i;
	uint64_t v;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		v = 0xdeadbeef;
		cr_assert_eq(blk_parse_duration(cases[i].s, cases[i].bare, &v), cases[i].ret,
			     "\"%s\" (bare %llu)", cases[i].s, (unsigned long long)cases[i].bare);
		if (!cases[i].ret)
			cr_assert_eq(v, cases[i].ns, "\"%s\" gave %llu", cases[i].s,
				     (unsigned long long)v);
		else
			cr_assert_eq(v, 0xdeadbeef, "\"%s\" wrote *ns", cases[i].s);
	}
	cr_assert_eq(blk_parse_duration(NULL, SEC, &v), -EINVAL);
}

/* The largest unit that says it exactly, and it parses back to the same value. */
Test(duration, format_round_trip)
{
	static const struct {
		uint64_t ns;
		const char *s;
	} cases[] = {
		{ 0, "0" }, { 1, "1ns" }, { 999, "999ns" }, { 1000, "1us" }, { 1500 * US, "1500us" },
		{ 2 * MS, "2ms" }, { 1001 * MS, "1001ms" }, { 90 * SEC, "90s" },
		{ 120 * SEC, "2m" }, { 3600 * SEC, "1h" }, { 3601 * SEC, "3601s" },
		{ 7200 * SEC + 1, "7200000000001ns" }, { UINT64_MAX, "18446744073709551615ns" },
	};
	char buf[32];
	size_t i;
	uint64_t v;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cr_assert_eq(blk_format_duration(buf, sizeof(buf), cases[i].ns),
			     (int)strlen(cases[i].s));
		cr_assert_str_eq(buf, cases[i].s);
		cr_assert_eq(blk_parse_duration(buf, 0, &v), 0, "%s", buf);
		cr_assert_eq(v, cases[i].ns, "%s", buf);
	}
	/* cut short, never overrun */
	cr_assert_eq(blk_format_duration(buf, 3, 1500 * US), 6);
	cr_assert_str_eq(buf, "15");
}

Test(duration, param)
{
	struct blk_param v[3] = {
		{ .key = "delay.tick", .value = "250us", .line = 4 },
		{ .key = "delay.wait", .value = "3", .line = 5 },
		{ .key = "delay.slow", .value = "2h", .line = 6 },
	};
	char e[256];
	struct blk_params p = { .prefix = "delay.", .file = F, .line = 3, .dev = "ram0",
				.v = v, .n = 3, .err = e, .errlen = sizeof(e) };
	uint64_t ns = 0;

	cr_assert_eq(blk_param_duration(&p, "tick", 0, 0, 3600 * SEC, 0, &ns), 0);
	cr_assert_eq(ns, 250 * US);
	cr_assert(v[0].used);
	cr_assert_eq(blk_param_duration(&p, "absent", 42, 0, 1, 0, &ns), 0);
	cr_assert_eq(ns, 42);
	/* bare: refused, or plain seconds */
	cr_assert_eq(blk_param_duration(&p, "wait", 0, 0, 3600 * SEC, 0, &ns), -EINVAL);
	cr_assert_str_eq(e, F ":5: delay.wait: '3' is not a duration (allowed: 0..1h; "
			 "digits and a unit: ns, us, ms, s, m or h, such as 500us, 2ms, 5s)");
	cr_assert_eq(blk_param_duration(&p, "wait", 0, 0, 3600 * SEC, SEC, &ns), 0);
	cr_assert_eq(ns, 3 * SEC);
	cr_assert_eq(blk_param_duration(&p, "wait", 0, 10 * SEC, 3600 * SEC, SEC, &ns), -EINVAL);
	cr_assert_str_eq(e, F ":5: delay.wait: '3' is out of range (allowed: 10s..1h)");
	cr_assert_eq(blk_param_duration(&p, "slow", 0, 1 * MS, 3600 * SEC, SEC, &ns), -EINVAL);
	cr_assert_str_eq(e, F ":6: delay.slow: '2h' is out of range (allowed: 1ms..1h)");
}

/* ------------------------------------------------------------------ */
/* the cache block rule */

/*
 * The one place the cache block is computed (pc_dev_add() and the daemon
 * call it): the kernel's set_init_blocksize rule.
 */
Test(conf, cache_block_rule)
{
	static const struct {
		uint64_t size;
		uint32_t lbs, pbs, want;
	} t[] = {
		{ 1ull << 30, 512, 4096, 4096 },		/* doubled up to 4096 */
		{ 1ull << 30, 512, 512, 4096 },			/* pbs plays no part */
		{ 1ull << 30, 1024, 1024, 4096 },
		{ (1ull << 30) + 512, 512, 4096, 512 },		/* stopped by the size */
		{ (1ull << 30) + 1024, 512, 512, 1024 },
		{ (1ull << 30) + 2048, 512, 512, 2048 },
		{ 1536, 512, 512, 512 },			/* 3 x 512 */
		{ 1ull << 30, 4096, 4096, 4096 },		/* never above 4096 by doubling */
		{ 8192 * 3, 8192, 8192, 8192 },			/* never below lbs */
		{ 1ull << 30, 16384, 16384, 16384 },
		{ 1ull << 30, 65536, 65536, 65536 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct blk_geometry g = { .size = t[i].size, .lbs = t[i].lbs, .pbs = t[i].pbs };

		cr_assert_eq(conf_cache_block(&g, 0), t[i].want,
			     "size %llu lbs %u: cache block %u, want %u",
			     (unsigned long long)t[i].size, t[i].lbs, conf_cache_block(&g, 0),
			     t[i].want);
	}
}

Test(conf, cache_block_forced)
{
	struct blk_geometry g = { .size = 1ull << 30, .lbs = 512, .pbs = 4096 };

	cr_assert_eq(conf_cache_block(&g, 1024), 1024);
	cr_assert_eq(conf_cache_block(&g, 512), 512);
	g.size += 512;
	cr_assert_eq(conf_cache_block(&g, 512), 512);

	expect_ok(RAM0 "cache_block_size = 2K\n");
	cr_assert_eq(conf_cache_block(&c.devs[0].geo, c.devs[0].cache_block_size), 2048);
}

/* ------------------------------------------------------------------ */
/* conf_check_geometry() */

Test(conf, check_geometry)
{
	const struct conf_device *d;
	struct blk_geometry g;

	expect_ok(default_conf);
	d = &c.devs[0];

	/* ram reports what the config said, with the defaults filled in */
	g = d->geo;
	g.dma_align = 1;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), 0, "%s", err);

	g.lbs = 4096;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, F ":10: logical_block_size: config says 512 but the device has 4096");

	g = d->geo;
	g.size = 2ull << 30;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, F ":9: size: config says 1073741824 but the device has 2147483648");

	g = d->geo;
	g.max_io = 512u << 10;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, F ":13: max_io: config says 1048576 but the device has 524288");

	/* io_min was defaulted, not given: a different value is no conflict */
	g = d->geo;
	g.io_min = 8192;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), 0, "%s", err);
}

Test(conf, check_geometry_backend_supplied)
{
	const struct conf_device *d;
	struct blk_geometry g = {
		.size = 1ull << 30, .lbs = 4096, .pbs = 4096,
		.io_min = 4096, .io_opt = 1u << 20, .max_io = 1u << 20, .dma_align = 512,
	};

	expect_ok("[cache]\nfolio_size = 16K\n[device disk]\nbackend = ram\n");
	d = &c.devs[0];
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), 0, "%s", err);

	g.lbs = g.pbs = 32768;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: logical_block_size: the device has 32K but the cache's folio_size is 16K"),
		  "%s", err);

	g.lbs = g.pbs = 4096;
	g.max_io = 4096 * 3 + 512;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: max_io: the device has 12800 (allowed: a multiple of the physical block size 4096)"),
		  "%s", err);

	g.max_io = 1u << 20;
	g.pbs = 2048;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: physical_block_size: the device has 2048"), "%s", err);

	g.pbs = 4096;
	g.lbs = 1000;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: logical_block_size: the device has 1000 (allowed: 512, 1K, ..., 64K)"),
		  "%s", err);

	g.lbs = 4096;
	g.size = 4096 * 7 + 512;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: size: the device has 29184"), "%s", err);
}

Test(conf, check_geometry_forced_cache_block)
{
	const struct conf_device *d;
	struct blk_geometry g = {
		.size = 1ull << 30, .lbs = 4096, .pbs = 4096,
		.io_min = 4096, .io_opt = 1u << 20, .max_io = 1u << 20, .dma_align = 1,
	};

	expect_ok("[device disk]\nbackend = ram\ncache_block_size = 1K\n");
	d = &c.devs[0];
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: cache_block_size: 1K is smaller than the device's logical block size 4K"),
		  "%s", err);
	g.lbs = 512;
	g.size = (1ull << 30) + 512;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, F ":3: cache_block_size: 1K does not divide the device's size 1073742336"),
		  "%s", err);
	g.size = 1ull << 30;
	cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(conf_cache_block(&g, d->cache_block_size), 1024);
}

/*
 * The contract end to end: open each device with the real ram backend from
 * what conf filled, and check that what it reports passes
 * conf_check_geometry() (conf's defaults and the backend's agree).
 */
static void open_all_with_ram(const char *text, uint32_t want_cache_block)
{
	int i;

	expect_ok(text);
	for (i = 0; i < c.nr_devs; i++) {
		struct conf_device *d = &c.devs[i];
		char berr[256] = "";
		struct blk_params p = {
			.file = c.file, .line = d->line, .dev = d->name, .geo = d->geo,
			.v = d->params, .n = d->nr_params, .err = berr, .errlen = sizeof(berr),
		};
		struct blk_geometry g;
		struct blk_backend *be;

		if (d->ops != blk_backend_find("ram"))
			continue;	/* a shipped config may name real disks */
		be = d->ops->open(&p, NULL);
		cr_assert_not(IS_ERR_OR_NULL(be), "%s: open: %s", d->name, berr);
		d->ops->geometry(be, &g);
		cr_assert_eq(conf_check_geometry(&c, d, &g, err, sizeof(err)), 0,
			     "%s: %s", d->name, err);
		if (want_cache_block)
			cr_assert_eq(conf_cache_block(&g, d->cache_block_size), want_cache_block,
				     "%s", d->name);
		d->ops->close(be);
	}
	conf_free(&c);
}

Test(conf, ram_backend_agrees)
{
	open_all_with_ram(default_conf, 4096);
	open_all_with_ram(RAM0, 4096);
	open_all_with_ram("[device odd]\nbackend = ram\nsize = 1073742336\n", 512);
	open_all_with_ram("[cache]\nfolio_size = 64K\n[device big]\nbackend = ram\nsize = 1G\n"
			  "logical_block_size = 64K\n", 65536);
	open_all_with_ram("[device a]\nbackend = ram\nsize = 64M\nlogical_block_size = 4K\n"
			  "physical_block_size = 16K\nmax_io = 256K\nio_min = 16K\nio_opt = 512K\n"
			  "cache_block_size = 4K\n", 4096);
	open_all_with_ram(RAM0 "cache_block_size = 1K\n", 1024);
}

/* ------------------------------------------------------------------ */
/* hostile input and cleanup */

Test(conf, free_after_failure_and_twice)
{
	/* fail late: two devices with params allocated, then an error */
	expect_err(RAM0 "[device ram1]\nbackend = ram\nsize = 1G\nio_min = 3\n",
		   F ":7: io_min: 3 is not a multiple");
	conf_free(&c);
	conf_free(&c);
	expect_ok(RAM0);
	conf_free(&c);
	conf_free(&c);
	cr_assert(is_zero(&c, sizeof(c)));
}

Test(conf, nul_bytes)
{
	static const char t1[] = "[device ram0]\nbackend = ram\nsize = 1G\0 junk\n";
	static const char t2[] = "[device ram0]\nbackend = ram\nsize = 1G\n# a \0 in a comment\n";
	static const char t3[] = "\0";
	static const char t4[] = "[device ram0]\0\nbackend = ram\nsize = 1G\n";

	expect_err_n(t1, sizeof(t1) - 1, F ":3: size = 1G: NUL byte in the line (allowed: text)");
	expect_err_n(t2, sizeof(t2) - 1, F ":4: # a: NUL byte in the line");
	expect_err_n(t3, 1, F ":1: (line): NUL byte in the line");
	expect_err_n(t4, sizeof(t4) - 1, F ":1: [device ram0]: NUL byte in the line");
	/* the length, not a NUL, ends the text: a NUL past len is not seen */
	expect_ok("[device ram0]\nbackend = ram\nsize = 1G");
	conf_free(&c);
	cr_assert_eq(parse_n(t1, strlen(t1)), 0, "%s", err);
}

Test(conf, not_nul_terminated)
{
	/* a buffer with no NUL anywhere; ASan catches a read past it */
	static const char text[] = RAM0 "max_io = 1M";
	size_t n = sizeof(text) - 1;
	char *buf = malloc(n);

	cr_assert_not_null(buf);
	memcpy(buf, text, n);
	cr_assert_eq(parse_n(buf, n), 0, "%s", err);
	cr_assert_eq(c.devs[0].geo.max_io, 1u << 20);
	conf_free(&c);
	/* cut in the middle of a key, of a header */
	expect_err_n(buf, n - 8, F ":4: max: syntax error");
	expect_err_n(buf, 5, F ":1: [devi: syntax error");
	free(buf);
}

Test(conf, control_chars_in_message)
{
	expect_err("[device ram0]\nbackend = r\x1b[31mam\x7f\nsize = 1G\n",
		   F ":2: backend: r?[31mam? is not a backend");
	expect_err("[cache]\nsize = 1\rG\n" RAM0, F ":2: size: 1?G is not a size");
	/* the file name is echoed too */
	cr_assert_eq(conf_parse_buf("[x]\n", 4, "a\nb", &c, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "a?b:1: [x]: unknown section (allowed: [cache], [mount], [device NAME])");
}

Test(conf, long_lines_and_values)
{
	size_t n = 100000;
	char *text = malloc(n + 256);
	char want[256];
	size_t off;

	cr_assert_not_null(text);
	/* a huge number: echoed cut at 48 characters */
	off = sprintf(text, "[device ram0]\nbackend = ram\nsize = ");
	memset(text + off, '9', n);
	strcpy(text + off + n, "\n");
	off = sprintf(want, F ":3: size: ");
	memset(want + off, '9', 48);
	strcpy(want + off + 48, "... is too large");
	expect_err(text, want);
	/* a huge key */
	off = sprintf(text, RAM0);
	memset(text + off, 'k', n);
	strcpy(text + off + n, " = v\n");
	off = sprintf(want, F ":4: ");
	memset(want + off, 'k', 48);
	strcpy(want + off + 48, "...: unknown key for backend ram");
	expect_err(text, want);
	/* a huge comment is fine */
	off = sprintf(text, RAM0 "#");
	memset(text + off, 'c', n);
	strcpy(text + off + n, "\n");
	expect_ok(text);
	conf_free(&c);
	/* a huge line of nothing but spaces, and no final newline */
	off = sprintf(text, RAM0);
	memset(text + off, ' ', n);
	text[off + n] = '\0';
	expect_ok(text);
	free(text);
}

Test(conf, too_long_text)
{
	size_t n = (1u << 20) + 1;
	char *text = malloc(n);

	cr_assert_not_null(text);
	memset(text, '\n', n);
	expect_err_n(text, n, F ":1: config: the text is 1048577 bytes long (allowed: at most 1M)");
	/* exactly the limit is fine (until it finds no device) */
	expect_err_n(text, n - 1, F ":1: [device NAME]: no [device NAME] section");
	free(text);
}

Test(conf, tiny_and_null_error_buffers)
{
	char small[8];

	cr_assert_eq(conf_parse_buf("[x]\n", 4, F, &c, small, sizeof(small)), -EINVAL);
	cr_assert_str_eq(small, "blkfs.c");
	cr_assert_eq(conf_parse_buf("[x]\n", 4, F, &c, NULL, 0), -EINVAL);
	cr_assert_eq(conf_parse_buf("[x]\n", 4, NULL, &c, small, 1), -EINVAL);
	cr_assert_str_eq(small, "");
	cr_assert_eq(conf_parse_buf(NULL, 0, F, &c, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "no [device NAME] section"), "%s", err);
}

/* A deterministic mutation fuzzer: no input may crash, leak or misreport. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

Test(conf, random_mutations)
{
	static const char alphabet[] = "[]=#; \t\n\r%0123456789KMGTkiBmsh.-_abcdefgilnoprstuvxyz\0\x7f\xff";
	size_t base = sizeof(default_conf) - 1;
	char buf[1024];
	int iter, ok = 0;

	for (iter = 0; iter < 20000; iter++) {
		size_t len = base, j, nmut = 1 + rng() % 8;
		int ret;

		memcpy(buf, default_conf, base);
		for (j = 0; j < nmut; j++) {
			size_t at = rng() % len;
			char ch = alphabet[rng() % (sizeof(alphabet) - 1)];

			switch (rng() % 3) {
			case 0:		/* replace */
				buf[at] = ch;
				break;
			case 1:		/* insert */
				if (len < sizeof(buf)) {
					memmove(buf + at + 1, buf + at, len - at);
					buf[at] = ch;
					len++;
				}
				break;
			default:	/* delete */
				memmove(buf + at, buf + at + 1, len - at - 1);
				len--;
				break;
			}
		}
		len = rng() % 8 ? len : rng() % (len + 1);	/* truncate now and then */
		memset(err, 0, sizeof(err));
		ret = conf_parse_buf(buf, len, F, &c, err, sizeof(err));
		if (ret == 0) {
			ok++;
			cr_assert_geq(c.nr_devs, 1);
			cr_assert_not_null(c.devs[0].ops);
			cr_assert_leq(c.cache.dirty_background, c.cache.dirty_limit);
			conf_free(&c);
		} else {
			cr_assert_eq(ret, -EINVAL);
			cr_assert(!strncmp(err, F ":", 11), "bad message: %s", err);
			cr_assert_not(strchr(err, '\n'), "multi-line message: %s", err);
			cr_assert(is_zero(&c, sizeof(c)));
		}
	}
	cr_assert_gt(ok, 0);
}

Test(conf, mount_section)
{
	const char *m = RAM0 "[mount]\nkernel_cache = writeback\n";

	cr_assert_eq(conf_parse_buf(m, strlen(m), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(c.mount.kernel_writeback);
	conf_free(&c);
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(!c.mount.kernel_writeback);
	conf_free(&c);
	expect_err(RAM0 "[mount]\nkernel_cache = maybe\n",
		   F ":5: kernel_cache: maybe is not a choice (allowed: none, writeback)");
	expect_err(RAM0 "[mount]\ncolour = red\n",
		   F ":5: colour: unknown key in [mount] (allowed: kernel_cache, allow_other, "
		   "max_pending, transport, uring_queue_depth, uring_spin, shutdown_timeout, "
		   "transport_probe)");
	expect_err("[mount]\n[mount]\n", F ":2: [mount]: duplicate section (first defined on line 1)");
}

/* Mount options override [mount]: the fstab line wins over the file. */
Test(conf, mount_options_override)
{
	const char *m = RAM0 "[mount]\nkernel_cache = writeback\nallow_other = no\n";

	cr_assert_eq(conf_parse_buf(m, strlen(m), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(conf_mount_set(&c, "kernel_cache", "none", err, sizeof(err)), 0, "%s", err);
	cr_assert(!c.mount.kernel_writeback);
	cr_assert_eq(conf_mount_set(&c, "allow_other", NULL, err, sizeof(err)), 0, "%s", err);
	cr_assert(c.mount.allow_other);
	cr_assert_eq(conf_mount_set(&c, "allow_other", "no", err, sizeof(err)), 0, "%s", err);
	cr_assert(!c.mount.allow_other);
	cr_assert_eq(conf_mount_set(&c, "kernel_cache", "writeback", err, sizeof(err)), 0, "%s", err);
	cr_assert(c.mount.kernel_writeback);

	strcpy(err, "untouched");
	cr_assert_eq(conf_mount_set(&c, "colour", "red", err, sizeof(err)), -ENOENT);
	cr_assert_str_eq(err, "untouched");
	cr_assert_eq(conf_mount_set(&c, "kernel_cache", "maybe", err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "mount option kernel_cache: maybe is not a choice (allowed: none, writeback)");
	cr_assert(c.mount.kernel_writeback, "a bad value changes nothing");
	cr_assert_eq(conf_mount_set(&c, "kernel_cache", NULL, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "mount option kernel_cache: needs a value (kernel_cache=VALUE)");
	cr_assert_eq(conf_mount_set(&c, "max_pending", "64", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.max_pending, 64);
	cr_assert_eq(conf_mount_set(&c, "max_pending", "0", err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "mount option max_pending: 0 is not a number from 1 to 4096");
	cr_assert_eq(conf_mount_set(&c, "allow_other", "maybe", err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "mount option allow_other: maybe is not a choice (allowed: yes, no)");
	conf_free(&c);
}

Test(conf, mount_shutdown_timeout)
{
	const char *m = RAM0 "[mount]\nshutdown_timeout = 3s\n";

	cr_assert_eq(conf_parse_buf(m, strlen(m), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.shutdown_timeout_ms, 3000);
	cr_assert_eq(conf_mount_set(&c, "shutdown_timeout", "0", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.shutdown_timeout_ms, 0, "0: wait forever");
	cr_assert_eq(conf_mount_set(&c, "shutdown_timeout", "1500ms", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.shutdown_timeout_ms, 1500);
	cr_assert_eq(conf_mount_set(&c, "shutdown_timeout", "5", err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "mount option shutdown_timeout: 5 is not a duration from 0 (wait "
			 "forever) to 24h in whole milliseconds (" BLK_DURATION_HELP ")");
	cr_assert_eq(c.mount.shutdown_timeout_ms, 1500, "a bad value changes nothing");
	conf_free(&c);
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.shutdown_timeout_ms, CONF_SHUTDOWN_TIMEOUT_DEFAULT_MS);
	conf_free(&c);
	expect_err(RAM0 "[mount]\nshutdown_timeout = 25h\n",
		   F ":5: shutdown_timeout: 25h is not a duration from 0 (wait forever) to 24h in "
		   "whole milliseconds (" BLK_DURATION_HELP ")");
	expect_err(RAM0 "[mount]\nshutdown_timeout = 1500us\n",
		   F ":5: shutdown_timeout: 1500us is not a duration from 0 (wait forever) to 24h in "
		   "whole milliseconds (" BLK_DURATION_HELP ")");
	expect_err(RAM0 "[mount]\nshutdown_timeout = 3s\nshutdown_timeout = 4s\n",
		   F ":6: shutdown_timeout: duplicate key (first given on line 5)");
}

Test(conf, mount_max_pending)
{
	const char *m = RAM0 "[mount]\nmax_pending = 64\n";

	cr_assert_eq(conf_parse_buf(m, strlen(m), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.max_pending, 64);
	conf_free(&c);
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.max_pending, CONF_MAX_PENDING_DEFAULT);
	conf_free(&c);
	expect_err(RAM0 "[mount]\nmax_pending = 0\n",
		   F ":5: max_pending: 0 is not a number from 1 to 4096");
	expect_err(RAM0 "[mount]\nmax_pending = 4097\n",
		   F ":5: max_pending: 4097 is not a number from 1 to 4096");
	expect_err(RAM0 "[mount]\nmax_pending = 1k\n",
		   F ":5: max_pending: 1k is not a number from 1 to 4096");
	expect_err(RAM0 "[mount]\nmax_pending = 8\nmax_pending = 9\n",
		   F ":6: max_pending: duplicate key (first given on line 5)");
}

Test(conf, mount_transport)
{
	static const struct { const char *val; enum conf_transport t; } ok[] = {
		{ "auto", CONF_TRANSPORT_AUTO },
		{ "uring", CONF_TRANSPORT_URING },
		{ "dev", CONF_TRANSPORT_DEV },
	};
	char text[256];
	size_t i;

	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.transport, CONF_TRANSPORT_AUTO);
	cr_assert_eq(c.mount.uring_queue_depth, CONF_DEF_URING_DEPTH);
	conf_free(&c);
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text), RAM0 "[mount]\ntransport = %s\nuring_queue_depth = 3\n",
			 ok[i].val);
		cr_assert_eq(conf_parse_buf(text, strlen(text), "m.conf", &c, err, sizeof(err)), 0,
			     "%s", err);
		cr_assert_eq(c.mount.transport, ok[i].t);
		cr_assert_eq(c.mount.transport_line, 5);
		cr_assert_eq(c.mount.uring_queue_depth, 3);
		cr_assert_eq(c.mount.uring_queue_depth_line, 6);
		conf_free(&c);
	}
	snprintf(text, sizeof(text), RAM0 "[mount]\nuring_queue_depth = %u\n", CONF_MAX_URING_DEPTH);
	cr_assert_eq(conf_parse_buf(text, strlen(text), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.uring_queue_depth, CONF_MAX_URING_DEPTH);
	conf_free(&c);
	expect_err(RAM0 "[mount]\ntransport = fuse\n",
		   F ":5: transport: fuse is not a choice (allowed: auto, uring, dev)");
	expect_err(RAM0 "[mount]\ntransport = uring\ntransport = dev\n",
		   F ":6: transport: duplicate key (first given on line 5)");
	expect_err(RAM0 "[mount]\nuring_queue_depth = 0\n",
		   F ":5: uring_queue_depth: 0 is not a queue depth (allowed: 1 to 256 entries per CPU)");
	expect_err(RAM0 "[mount]\nuring_queue_depth = 257\n",
		   F ":5: uring_queue_depth: 257 is not a queue depth (allowed: 1 to 256 entries per CPU)");
	expect_err(RAM0 "[mount]\nuring_queue_depth = 99999999999999999999999\n",
		   F ":5: uring_queue_depth: 99999999999999999999999 is not a queue depth (allowed: 1 to 256 entries per CPU)");
	expect_err(RAM0 "[mount]\nuring_queue_depth = 16K\n",
		   F ":5: uring_queue_depth: 16K is not a queue depth (allowed: 1 to 256 entries per CPU)");
}

/* [mount] uring_spin: off or whole microseconds up to 1 ms; the default when absent. */
Test(conf, uring_spin)
{
	static const struct { const char *val; uint32_t us; } ok[] = {
		{ "off", 0 }, { "0", 0 }, { "0us", 0 }, { "50us", 50 }, { "1ms", 1000 },
		{ "1000us", 1000 }, { "2000ns", 2 },
	};
	char text[256];
	size_t i;

	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.mount.uring_spin_us, CONF_DEF_URING_SPIN_US);
	cr_assert_eq(c.mount.uring_spin_line, 0);
	conf_free(&c);
	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		snprintf(text, sizeof(text), RAM0 "[mount]\nuring_spin = %s\n", ok[i].val);
		cr_assert_eq(conf_parse_buf(text, strlen(text), "m.conf", &c, err, sizeof(err)), 0,
			     "%s: %s", ok[i].val, err);
		cr_assert_eq(c.mount.uring_spin_us, ok[i].us, "%s: %u", ok[i].val, c.mount.uring_spin_us);
		cr_assert_eq(c.mount.uring_spin_line, 5);
		conf_free(&c);
	}
	expect_err(RAM0 "[mount]\nuring_spin = 1001us\n",
		   F ":5: uring_spin: 1001us is not off or a duration from 0 to 1000us in whole microseconds (" BLK_DURATION_HELP ")");
	expect_err(RAM0 "[mount]\nuring_spin = 1500ns\n",
		   F ":5: uring_spin: 1500ns is not off or a duration from 0 to 1000us in whole microseconds (" BLK_DURATION_HELP ")");
	expect_err(RAM0 "[mount]\nuring_spin = on\n",
		   F ":5: uring_spin: on is not off or a duration from 0 to 1000us in whole microseconds (" BLK_DURATION_HELP ")");
	expect_err(RAM0 "[mount]\nuring_spin = 5us\nuring_spin = off\n",
		   F ":6: uring_spin: duplicate key (first given on line 5)");
}

/* The rings' memory against the machine's: a quarter of it at most. */
Test(conf, check_uring)
{
	const char *t = RAM0 "[mount]\ntransport = uring\nuring_queue_depth = 64\n";
	uint64_t mib = 1u << 20, entry = mib + 8192;

	cr_assert_eq(conf_parse_buf(t, strlen(t), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	/* 2 x 64 x (1M + 8K) = 129M: fits in a quarter of 1G, not of 512M */
	cr_assert_eq(conf_check_uring(&c, 2, entry, 1024 * mib, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(err[0], 0);
	cr_assert_eq(conf_check_uring(&c, 2, entry, 512 * mib, err, sizeof(err)), -EINVAL);
	cr_assert_str_eq(err, "m.conf:6: uring_queue_depth: 64 entries on each of 2 CPU queues need 129M "
			 "of ring buffers (1032K each), more than a quarter of this machine's memory 512M "
			 "(allowed: at most 63 entries here; the default is 64)");
	/* no overflow with absurd CPU counts */
	cr_assert_eq(conf_check_uring(&c, 1u << 31, UINT64_MAX / 2, UINT64_MAX, err, sizeof(err)),
		     -EINVAL);
	conf_free(&c);
	/* the default depth, no [mount]: the message names line 1 */
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(conf_check_uring(&c, 4096, entry, 1024 * mib, err, sizeof(err)), -EINVAL);
	cr_assert(!strncmp(err, "m.conf:1: uring_queue_depth: 64 entries on each of 4096 CPU queues",
			   66), "%s", err);
	conf_free(&c);
}

Test(conf, device_policies)
{
	const char *t = RAM0 "rmw = device\non_error = drop\nread_ahead = 1M\n";

	cr_assert_eq(conf_parse_buf(t, strlen(t), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(c.devs[0].rmw_device);
	cr_assert(c.devs[0].on_error_drop);
	cr_assert_eq(c.devs[0].read_ahead, 1u << 20);
	conf_free(&c);
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert(!c.devs[0].rmw_device && !c.devs[0].on_error_drop);
	cr_assert_eq(c.devs[0].read_ahead, CONF_DEF_READ_AHEAD);
	conf_free(&c);
	expect_err(RAM0 "rmw = sometimes\n", F ":4: rmw: sometimes is not a choice (allowed: cache, device)");
	expect_err(RAM0 "on_error = ignore\n", F ":4: on_error: ignore is not a choice (allowed: keep, drop)");
	expect_err(RAM0 "read_ahead = 100\n", F ":4: read_ahead: 100 is out of range");
}

Test(conf, owner_and_mode)
{
	const char *t = RAM0 "mode = 0660\nuid = nobody\ngid = 6\n[mount]\nallow_other = yes\n";

	cr_assert_eq(conf_parse_buf(t, strlen(t), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.devs[0].mode, 0660);
	cr_assert_str_eq(c.devs[0].owner, "nobody");
	cr_assert_str_eq(c.devs[0].group, "6");
	cr_assert(c.mount.allow_other);
	conf_free(&c);
	cr_assert_eq(conf_parse_buf(RAM0, strlen(RAM0), "m.conf", &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(c.devs[0].mode, CONF_DEF_MODE);
	cr_assert_null(c.devs[0].owner);
	cr_assert(!c.mount.allow_other);
	conf_free(&c);
	expect_err(RAM0 "mode = 0999\n", F ":4: mode: 0999 is not a permission mode");
	expect_err(RAM0 "mode = 01777\n", F ":4: mode: 01777 is not a permission mode");
	expect_err(RAM0 "uid = a/b\n", F ":4: uid: a/b is not a user or group");
	expect_err("[mount]\nallow_other = maybe\n", F ":2: allow_other: maybe is not a choice (allowed: yes, no)");
}
