// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ctl.c - fuse/ctl_parse.c: the control file's line syntax.
 *
 * Tokens and blanks, quotes (joined parts, escapes, empty tokens), the one
 * trailing newline, every refusal with its message (a second line, a NUL,
 * an unterminated quote, an empty line, too long, too many tokens), and the
 * formatter: what it writes parses back to the same tokens, for chosen and
 * for random tokens.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../fuse/ctl_parse.h"

#define MAXA 16

struct parsed {
	int argc;
	char *argv[MAXA + 1];
	char store[256];
	char err[256];
};

static struct parsed *parse_n(const char *line, size_t len)
{
	static struct parsed p;

	memset(&p, 0x5a, sizeof(p));
	p.argc = bf_ctl_parse(line, len, p.store, sizeof(p.store), p.argv, MAXA, p.err,
			      sizeof(p.err));
	return &p;
}

static struct parsed *parse(const char *line)
{
	return parse_n(line, strlen(line));
}

static void expect(const char *line, int argc, ...)
{
	struct parsed *p = parse(line);
	va_list ap;
	int i;

	cr_assert_eq(p->argc, argc, "'%s': argc %d (%s), want %d", line, p->argc,
		     p->argc < 0 ? p->err : "", argc);
	va_start(ap, argc);
	for (i = 0; i < argc; i++) {
		const char *want = va_arg(ap, const char *);

		cr_assert_str_eq(p->argv[i], want, "'%s': token %d is '%s', want '%s'", line, i,
				 p->argv[i], want);
	}
	va_end(ap);
	cr_assert_null(p->argv[argc], "'%s': argv[%d] is not NULL", line, argc);
}

static void refused(const char *line, size_t len, int err, const char *msg)
{
	struct parsed *p = parse_n(line, len);

	cr_assert_eq(p->argc, err, "'%.*s': got %d, want %d", (int)len, line, p->argc, err);
	cr_assert_str_eq(p->err, msg, "'%.*s': message '%s', want '%s'", (int)len, line, p->err,
			 msg);
}

Test(ctl, tokens_and_blanks)
{
	expect("add", 1, "add");
	expect("add ram1 backend=ram size=1G", 4, "add", "ram1", "backend=ram", "size=1G");
	expect("  \tremove\t\t ram1   ", 2, "remove", "ram1");
	expect("add ram1\n", 2, "add", "ram1");
	expect("snapshot -d ram0 s1", 4, "snapshot", "-d", "ram0", "s1");
	/* outside quotes a backslash is a character like any other */
	expect("add a\\b c\\", 3, "add", "a\\b", "c\\");
}

Test(ctl, quotes)
{
	expect("add \"a b\"", 2, "add", "a b");
	expect("add log.path=\"/tmp/a b\"", 2, "add", "log.path=/tmp/a b");
	expect("x a\"b c\"d", 2, "x", "ab cd");
	expect("x \"\" \"\"", 3, "x", "", "");
	expect("x \"a\\\"b\" \"c\\\\d\"", 3, "x", "a\"b", "c\\d");
	/* any other backslash in quotes stays, with what follows */
	expect("x \"a\\nb\"", 2, "x", "a\\nb");
	expect("x \"\t\"", 2, "x", "\t");
	expect("x \"a\"\"b\"", 2, "x", "ab");
}

Test(ctl, refusals)
{
	refused("", 0, -EINVAL, "empty command");
	refused("\n", 1, -EINVAL, "empty command");
	refused(" \t ", 3, -EINVAL, "empty command");
	refused("add x\nremove x", 15, -EINVAL,
		"a second line (0x0a) at byte 5: one command per write, a line of printable characters");
	refused("add x\n\n", 7, -EINVAL,
		"a second line (0x0a) at byte 5: one command per write, a line of printable characters");
	refused("add\0x", 5, -EINVAL,
		"a control character (0x00) at byte 3: one command per write, a line of printable characters");
	refused("add x\r\n", 7, -EINVAL,
		"a control character (0x0d) at byte 5: one command per write, a line of printable characters");
	refused("add \"x", 6, -EINVAL, "unterminated quote (the \" at byte 4)");
	refused("add \"x\\\"", 8, -EINVAL, "unterminated quote (the \" at byte 4)");
	refused("add a\"b", 7, -EINVAL, "unterminated quote (the \" at byte 5)");
}

Test(ctl, limits)
{
	char line[600], store[8], *argv[4], err[128];
	int i;

	memset(line, 'a', sizeof(line));
	refused(line, 300, -EINVAL, "command too long (300 bytes, at most 255)");
	/* 255 bytes fit a 256-byte store; a trailing newline does not count */
	cr_assert_eq(parse_n(line, 255)->argc, 1);
	line[255] = '\n';
	cr_assert_eq(parse_n(line, 256)->argc, 1);
	for (i = 0; i < 40; i++) {
		line[2 * i] = 'a';
		line[2 * i + 1] = ' ';
	}
	cr_assert_eq(parse_n(line, 2 * MAXA)->argc, MAXA);
	refused(line, 2 * MAXA + 1, -EINVAL, "too many arguments (at most 16)");
	/* argv exactly full: no NULL after the last, nothing written past it */
	argv[3] = (char *)0x1;
	cr_assert_eq(bf_ctl_parse("a b c", 5, store, sizeof(store), argv, 3, err, sizeof(err)), 3);
	cr_assert_eq(argv[3], (char *)0x1);
	/* the store bound is exact: len + 1 */
	cr_assert_eq(bf_ctl_parse("abcdefg", 7, store, 8, argv, 3, err, sizeof(err)), 1);
	cr_assert_eq(bf_ctl_parse("abcdefgh", 8, store, 8, argv, 3, err, sizeof(err)), -EINVAL);
	/* a message cut to a small buffer stays terminated */
	cr_assert_eq(bf_ctl_parse("", 0, store, 8, argv, 3, err, 4), -EINVAL);
	cr_assert_str_eq(err, "emp");
}

static void roundtrip(int argc, char **argv)
{
	char line[1024];
	struct parsed *p;
	int n, i;

	n = bf_ctl_format(argc, argv, line, sizeof(line));
	cr_assert_gt(n, 0, "format failed: %d", n);
	cr_assert_eq((size_t)n, strlen(line));
	cr_assert_eq(line[n - 1], '\n');
	p = parse_n(line, (size_t)n);
	cr_assert_eq(p->argc, argc, "'%s' parses as %d tokens (%s), want %d", line, p->argc,
		     p->argc < 0 ? p->err : "", argc);
	for (i = 0; i < argc; i++)
		cr_assert_str_eq(p->argv[i], argv[i], "'%s': token %d", line, i);
}

Test(ctl, format_roundtrip)
{
	char *a1[] = { "add", "ram1", "backend=ram", "size=1G" };
	char *a2[] = { "add", "x", "log.path=/tmp/a b", "", "\"", "\\", "a\\\"b", "\t" };
	char line[64];

	roundtrip(4, a1);
	roundtrip(8, a2);
	cr_assert_eq(bf_ctl_format(4, a1, line, sizeof(line)), 29);
	cr_assert_str_eq(line, "add ram1 backend=ram size=1G\n");
	bf_ctl_format(8, a2, line, sizeof(line));
	cr_assert_str_eq(line, "add x \"log.path=/tmp/a b\" \"\" \"\\\"\" \"\\\\\" \"a\\\\\\\"b\" \"\t\"\n");
}

Test(ctl, format_refusals)
{
	char *nl[] = { "add", "a\nb" }, *ok[] = { "add", "abcdef" };
	char line[8];

	cr_assert_eq(bf_ctl_format(2, nl, line, sizeof(line)), -EINVAL);
	cr_assert_eq(bf_ctl_format(2, ok, line, sizeof(line)), -E2BIG);	/* 11 bytes + NUL */
	cr_assert_eq(bf_ctl_format(1, ok, line, sizeof(line)), 4);
}

Test(ctl, format_roundtrip_random)
{
	static const char alphabet[] = "ab =\"\\\t.-/#;";
	char tok[MAXA][24], *argv[MAXA];
	unsigned seed = 12345;
	int round, i, j;

	for (round = 0; round < 20000; round++) {
		int argc = 1 + (int)(rand_r(&seed) % MAXA);

		for (i = 0; i < argc; i++) {
			int n = (int)(rand_r(&seed) % 8);

			for (j = 0; j < n; j++)
				tok[i][j] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
			tok[i][n] = 0;
			argv[i] = tok[i];
		}
		roundtrip(argc, argv);
	}
}
