/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_manpage.c - blkfs.conf(5) documents every key the parser
 * takes, and nothing else. The keys come from the parser's own tables
 * (conf_section_keys()) and from every backend's and filter's ops->keys in
 * the registry, so a key added anywhere without a line in the page fails
 * here, and so does an item left in the page for a key that is gone.
 *
 * The page (core/blkfs.conf.5, or $BLKFS_SRCDIR/core/blkfs.conf.5) has one
 * subsection per place a key can be: `.Ss "[cache] section"`, `"[mount]
 * section"`, `"[device NAME] section"`, `"backend = NAME"` for each backend
 * and `"filter NAME"` for each filter, and in it one `.It Cm KEY ...` item
 * per key (a filter's keys written NAME.key, as in the config).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/conf.h"

#define MAX_ITEMS 512

struct item {
	char sub[64];		/* the subsection's title */
	char key[64];
	bool expected;		/* matched by a key of the tables */
};

static struct item items[MAX_ITEMS];
static int nr_items;
static char subs[64][64];	/* every subsection title, in page order */
static int nr_subs;

static void read_page(void)
{
	const char *dir = getenv("BLKFS_SRCDIR");
	char path[4096], line[1024], cur[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/core/blkfs.conf.5", dir && *dir ? dir : ".");
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: cannot open (run from the top of the tree, or set BLKFS_SRCDIR)",
			   path);
	nr_items = nr_subs = 0;
	while (fgets(line, sizeof(line), f)) {
		char title[64], key[64];

		if (sscanf(line, ".Ss \"%63[^\"]\"", title) == 1 ||
		    sscanf(line, ".Ss %63[^\n]", title) == 1) {
			snprintf(cur, sizeof(cur), "%s", title);
			cr_assert_lt(nr_subs, 64);
			snprintf(subs[nr_subs++], 64, "%s", title);
			continue;
		}
		if (!strncmp(line, ".Sh ", 4)) {
			cur[0] = 0;	/* keys are items of subsections only */
			continue;
		}
		if (cur[0] && sscanf(line, ".It Cm %63s", key) == 1) {
			cr_assert_lt(nr_items, MAX_ITEMS);
			snprintf(items[nr_items].sub, sizeof(items[0].sub), "%s", cur);
			snprintf(items[nr_items].key, sizeof(items[0].key), "%s", key);
			items[nr_items].expected = false;
			nr_items++;
		}
	}
	fclose(f);
}

static bool has_sub(const char *title)
{
	for (int i = 0; i < nr_subs; i++)
		if (!strcmp(subs[i], title))
			return true;
	return false;
}

/* @key (with @prefix, e.g. "delay.") must be an item of subsection @sub. */
static void expect_key(const char *sub, const char *prefix, const char *key)
{
	char want[64];
	bool found = false;

	snprintf(want, sizeof(want), "%s%s", prefix, key);
	for (int i = 0; i < nr_items; i++) {
		if (!strcmp(items[i].sub, sub) && !strcmp(items[i].key, want)) {
			items[i].expected = true;
			found = true;
		}
	}
	cr_expect(found, "blkfs.conf(5) does not document key %s: add `.It Cm %s ...` to "
		  "subsection \"%s\" of core/blkfs.conf.5", want, want, sub);
}

static void expect_section(const char *section, const char *sub)
{
	const char *const *keys;
	size_t n, i;

	keys = conf_section_keys(section, &n);
	cr_assert(keys && n, "conf_section_keys(%s) is empty", section);
	cr_expect(has_sub(sub), "blkfs.conf(5) has no subsection \"%s\"", sub);
	for (i = 0; i < n; i++)
		expect_key(sub, "", keys[i]);
}

/* Each name of a "ram, null, ..." list: its subsection and every key. */
static void expect_layers(const char *names, bool filters)
{
	char list[256], *save = NULL, *name;

	snprintf(list, sizeof(list), "%s", names);
	for (name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
		const struct blk_backend_ops *ops = blk_backend_find(name);
		char sub[64], prefix[64];
		const char *const *k;

		cr_assert_not_null(ops, "registry lists %s but cannot find it", name);
		snprintf(sub, sizeof(sub), filters ? "filter %s" : "backend = %s", name);
		snprintf(prefix, sizeof(prefix), filters ? "%s." : "", name);
		cr_expect(has_sub(sub), "blkfs.conf(5) has no subsection \"%s\" for the %s %s", sub,
			  filters ? "filter" : "backend", name);
		for (k = ops->keys; k && *k; k++)
			expect_key(sub, prefix, *k);
	}
}

Test(manpage, conf_documents_every_key_and_only_keys)
{
	int i;

	read_page();
	expect_section("cache", "[cache] section");
	expect_section("mount", "[mount] section");
	expect_section("device", "[device NAME] section");
	expect_layers(blk_backend_names(), false);
	expect_layers(blk_filter_names(), true);
	for (i = 0; i < nr_items; i++)
		cr_expect(items[i].expected, "blkfs.conf(5) documents %s in \"%s\", which takes no "
			  "such key (gone, renamed, or in the wrong subsection?)", items[i].key,
			  items[i].sub);
	/* no subsection for a backend or filter the registry does not have */
	for (i = 0; i < nr_subs; i++) {
		const char *name = NULL;

		if (!strncmp(subs[i], "backend = ", 10))
			name = subs[i] + 10;
		else if (!strncmp(subs[i], "filter ", 7))
			name = subs[i] + 7;
		if (name)
			cr_expect_not_null(blk_backend_find(name),
					   "blkfs.conf(5) documents \"%s\", which blkfs does not have",
					   subs[i]);
	}
}
