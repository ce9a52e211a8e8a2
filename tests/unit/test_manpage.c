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
 *
 * Every layer has a knob table (blk_knob_table(): ram, null, nbd, aio, rbd
 * and every filter), and is checked row by row too: each key of the table is an item,
 * the keys the ops list are the table's, and what the item's text says of
 * the default ("Default X", "Default none", "Required") and of the bounds
 * ("A to B", "at most B") is what the row says, in the page's words (a
 * size with its suffix, a bool as yes/no, a duration with its unit). An
 * item's text runs to the next item that has text of its own, so items
 * written one under the other share the text below them. Every row must
 * state its default and, when it has any, its bounds, in its item: words
 * elsewhere (the subsection's opening paragraph, another item's text) do not
 * count.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/backends_int.h"
#include "../../backends/kit/knobs.h"
#include "../../core/conf.h"

#define MAX_ITEMS 512

#define TEXT_MAX 2048

struct item {
	char sub[64];		/* the subsection's title */
	char key[64];
	bool expected;		/* matched by a key of the tables */
	char text[TEXT_MAX];	/* its description, macros dropped, one space between words */
};

static struct item items[MAX_ITEMS];
static int nr_items;
static char subs[64][64];	/* every subsection title, in page order */
static int nr_subs;

/*
 * Append @line's words to every item of the group from @first on: the
 * items written one under the other share the text below them. Macro
 * names are gone; a lone punctuation word (".Cm no .") sticks to the word
 * before it, so "Default .Cm no ." reads "Default no.".
 */
static void add_text(int first, const char *line)
{
	char buf[1024], *save = NULL, *w;

	snprintf(buf, sizeof(buf), "%s", line);
	for (w = strtok_r(buf, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save)) {
		bool punct = strlen(w) == 1 && strchr(".,;:)", w[0]);

		if (!strcmp(w, "Ns"))
			continue;
		for (int i = first; i < nr_items; i++) {
			char *t = items[i].text;
			size_t n = strlen(t);

			snprintf(t + n, TEXT_MAX - n, "%s%s", n && !punct ? " " : "", w);
		}
	}
}

static void read_page(void)
{
	const char *dir = getenv("BLKFS_SRCDIR");
	char path[4096], line[1024], cur[64] = "";
	int group;		/* the first item of the group the text goes to */
	FILE *f;

	snprintf(path, sizeof(path), "%s/core/blkfs.conf.5", dir && *dir ? dir : ".");
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: cannot open (run from the top of the tree, or set BLKFS_SRCDIR)",
			   path);
	nr_items = nr_subs = 0;
	group = -1;
	while (fgets(line, sizeof(line), f)) {
		char title[64], key[64];

		if (sscanf(line, ".Ss \"%63[^\"]\"", title) == 1 ||
		    sscanf(line, ".Ss %63[^\n]", title) == 1) {
			snprintf(cur, sizeof(cur), "%s", title);
			cr_assert_lt(nr_subs, 64);
			snprintf(subs[nr_subs++], 64, "%s", title);
			group = -1;
			continue;
		}
		if (!strncmp(line, ".Sh ", 4)) {
			cur[0] = 0;	/* keys are items of subsections only */
			group = -1;
			continue;
		}
		if (!strncmp(line, ".El", 3) || !strncmp(line, ".It", 3)) {
			/* an item with text of its own starts a group; one without joins it */
			if (group >= 0 && group < nr_items && items[nr_items - 1].text[0])
				group = -1;
			if (!strncmp(line, ".El", 3))
				group = -1;
		}
		if (cur[0] && sscanf(line, ".It Cm %63s", key) == 1) {
			cr_assert_lt(nr_items, MAX_ITEMS);
			snprintf(items[nr_items].sub, sizeof(items[0].sub), "%s", cur);
			snprintf(items[nr_items].key, sizeof(items[0].key), "%s", key);
			items[nr_items].expected = false;
			items[nr_items].text[0] = 0;
			if (group < 0)
				group = nr_items;
			nr_items++;
			continue;
		}
		if (group >= 0 && line[0] != '.')
			add_text(group, line);
		else if (group >= 0 && strncmp(line, ".Bl", 3) && strncmp(line, ".El", 3) &&
			 strncmp(line, ".It", 3))
			add_text(group, strchr(line, ' ') ? strchr(line, ' ') + 1 : "");
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

static struct item *find_item(const char *sub, const char *key)
{
	for (int i = 0; i < nr_items; i++)
		if (!strcmp(items[i].sub, sub) && !strcmp(items[i].key, key))
			return &items[i];
	return NULL;
}

/* The word after @after in @text (its trailing punctuation cut), or false. */
static bool word_after(const char *text, const char *after, char *out, size_t len)
{
	const char *at = strstr(text, after);
	size_t n;

	if (!at)
		return false;
	at += strlen(after);
	n = strcspn(at, " ");
	while (n && strchr(".,;:)", at[n - 1]))
		n--;
	snprintf(out, len, "%.*s", (int)n, at);
	return n > 0;
}

/* A whole word (punctuation after it allowed) in @text. */
static bool has_words(const char *text, const char *words)
{
	size_t n = strlen(words);

	for (const char *at = strstr(text, words); at; at = strstr(at + 1, words)) {
		if (at != text && at[-1] != ' ')
			continue;
		if (!at[n] || at[n] == ' ' || strchr(".,;:)", at[n]))
			return true;
	}
	return false;
}

static bool is_size(const struct bk_knob *k)
{
	return k->type == &bk_type_size || k->type == &bk_type_size_max;
}

/* A byte count as the page writes it: 8M, 1G, 64K, 0. */
static void size_words(uint64_t v, char *buf, size_t len)
{
	static const char sfx[] = "TGMK";
	int shift = 40;

	for (int i = 0; i < 4; i++, shift -= 10) {
		if (v && !(v & ((1ull << shift) - 1))) {
			snprintf(buf, len, "%llu%c", (unsigned long long)(v >> shift), sfx[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

/* The row's default in the page's words, or false for a type without one. */
static bool def_words(const struct bk_knob *k, char *buf, size_t len)
{
	if (bk_format_def(k, buf, len) < 0)
		return false;
	if (is_size(k))
		size_words(k->def, buf, len);
	else if (k->type == &bk_type_bool)
		snprintf(buf, len, "%s", k->def ? "yes" : "no");
	return true;
}

static bool bound_words(const struct bk_knob *k, uint64_t v, char *buf, size_t len)
{
	if (bk_format_bound(k, v, buf, len) < 0)
		return false;
	if (is_size(k))
		size_words(v, buf, len);
	return true;
}

/* Row @k of @layer's table against item @it of the page. */
static void expect_row(const char *layer, const struct bk_knob *k, const struct item *it)
{
	char def[64], lo[64], hi[64], want[160], got[80];
	bool bounded;

	if (k->type == &bk_type_text) {
		cr_expect(has_words(it->text, "Default none") || has_words(it->text, "Required:"),
			  "blkfs.conf(5): %s: %s has no default (text): its item must say "
			  "\"Default none.\" or \"Required: ...\"; it says: %s", layer, it->key, it->text);
		return;
	}
	if (def_words(k, def, sizeof(def))) {
		if (word_after(it->text, "Default ", got, sizeof(got)))
			cr_expect_str_eq(got, def, "blkfs.conf(5): %s: %s: the page says \"Default %s\", "
					 "the table's default is %s", layer, it->key, got, def);
		else
			cr_expect(false, "blkfs.conf(5): %s: %s: the item does not state its "
				  "default (want \"Default %s.\"); it says: %s", layer, it->key, def,
				  it->text);
	}
	if (!bound_words(k, k->min, lo, sizeof(lo)) || !bound_words(k, k->max, hi, sizeof(hi)))
		return;
	/* a type's own limits are no bound to document */
	bounded = k->min || (k->max != UINT64_MAX && k->max != UINT32_MAX);
	if (!bounded)
		return;
	snprintf(want, sizeof(want), "%s to %s", lo, hi);
	if (has_words(it->text, want))
		return;
	snprintf(got, sizeof(got), "at most %s", hi);
	if (!k->min && has_words(it->text, got))
		return;
	cr_expect(false, "blkfs.conf(5): %s: %s: the table's bounds are %s to %s, which the "
		  "item does not say (\"%s\" or, from 0, \"at most %s\"); it says: %s", layer,
		  it->key, lo, hi, want, hi, it->text);
}

/* Every row of each layer's table in @names that is a config key. */
static void expect_tables(const char *names, bool filters)
{
	char list[256], *save = NULL, *name;

	snprintf(list, sizeof(list), "%s", names);
	for (name = strtok_r(list, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
		const struct blk_backend_ops *ops = blk_backend_find(name);
		const struct bk_table *t = blk_knob_table(name);
		char sub[64], key[64];
		size_t nkeys = 0, i;

		cr_assert_not_null(ops);
		cr_expect_not_null(t, "%s has no knob table (blk_knob_table)", name);
		if (!t)
			continue;
		cr_expect_str_eq(t->filter, name, "blk_knob_table(%s) is %s's table", name, t->filter);
		snprintf(sub, sizeof(sub), filters ? "filter %s" : "backend = %s", name);
		for (i = 0; i < t->nr; i++) {
			const struct bk_knob *k = &t->knobs[i];
			const struct item *it;

			if (k->live != BK_RW && k->live != BK_CONF && k->live != BK_OWN &&
			    k->live != BK_OWNKEY)
				continue;	/* an attr only: no key */
			cr_expect(ops->keys && ops->keys[nkeys] && !strcmp(ops->keys[nkeys], k->name),
				  "%s: key %zu of the ops is %s, the table's is %s", name, nkeys,
				  ops->keys && ops->keys[nkeys] ? ops->keys[nkeys] : "(none)", k->name);
			nkeys++;
			snprintf(key, sizeof(key), "%s%s%s", filters ? name : "", filters ? "." : "",
				 k->name);
			it = find_item(sub, key);
			cr_expect_not_null(it, "blkfs.conf(5) has no item for %s in \"%s\"", key, sub);
			if (it && k->live != BK_OWN && k->live != BK_OWNKEY)
				expect_row(name, k, it);
		}
		cr_expect(ops->keys && !ops->keys[nkeys], "%s: its ops list keys its table has not",
			  name);
	}
}

Test(manpage, tables_match_the_page)
{
	read_page();
	expect_tables(blk_backend_names(), false);
	expect_tables(blk_filter_names(), true);
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
