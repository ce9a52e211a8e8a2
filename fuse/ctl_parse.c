/* SPDX-License-Identifier: MIT */
/*
 * fuse/ctl_parse.c - the control file's line syntax (control.h): the
 * tokenizer the daemon runs on every write, and the formatter the client
 * builds its line with. Pure functions, no I/O, no libfuse: the unit tests
 * and the fuzzer link this file alone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "ctl_parse.h"

/*
 * The separators of a control line. Not shared with backends/kit/entries.c's
 * is_blank(), which takes a carriage return as a blank too (a .sys store
 * written with CRLF): here a carriage return is a control byte the line
 * refuses (is_ctl()), so the two sets differ on purpose.
 */
static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* A byte no command may hold: every control character but the blanks' tab. */
static bool is_ctl(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

int bf_ctl_parse(const char *line, size_t len, char *store, size_t storelen, char **argv,
		 int maxargs, char *err, size_t errlen)
{
	size_t i = 0, o = 0;
	int argc = 0;

	if (errlen)
		err[0] = 0;
	if (len && line[len - 1] == '\n')
		len--;		/* the one newline `echo` adds */
	if (len + 1 > storelen) {
		snprintf(err, errlen, "command too long (%zu bytes, at most %zu)", len,
			 storelen ? storelen - 1 : 0);
		return -EINVAL;
	}
	for (;;) {
		size_t start;
		bool quoted = false;

		while (i < len && is_blank(line[i]))
			i++;
		if (i == len)
			break;
		if (argc == maxargs) {
			snprintf(err, errlen, "too many arguments (at most %d)", maxargs);
			return -EINVAL;
		}
		argv[argc++] = store + o;
		start = i;
		for (; i < len; i++) {
			unsigned char c = (unsigned char)line[i];

			if (is_ctl(c)) {
				snprintf(err, errlen, "%s (0x%02x) at byte %zu: one command per write, "
					 "a line of printable characters",
					 c == '\n' ? "a second line" : "a control character", c, i);
				return -EINVAL;
			}
			if (!quoted && is_blank((char)c))
				break;
			if (c == '"') {
				if (!quoted)
					start = i;
				quoted = !quoted;
				continue;
			}
			if (quoted && c == '\\' && i + 1 < len &&
			    (line[i + 1] == '"' || line[i + 1] == '\\'))
				c = (unsigned char)line[++i];
			store[o++] = (char)c;
		}
		if (quoted) {
			snprintf(err, errlen, "unterminated quote (the \" at byte %zu)", start);
			return -EINVAL;
		}
		store[o++] = 0;
	}
	if (!argc) {
		snprintf(err, errlen, "empty command");
		return -EINVAL;
	}
	if (argc < maxargs)
		argv[argc] = NULL;
	return argc;
}

/* Must @s be quoted to come back as it is? */
static bool needs_quotes(const char *s)
{
	if (!*s)
		return true;
	for (; *s; s++)
		if (is_blank(*s) || *s == '"' || *s == '\\')
			return true;
	return false;
}

int bf_ctl_format(int argc, char *const *argv, char *buf, size_t len)
{
	size_t o = 0;
	int i;

#define PUT(ch) do { if (o + 1 >= len) return -E2BIG; buf[o++] = (ch); } while (0)
	for (i = 0; i < argc; i++) {
		const char *s = argv[i];
		bool q = needs_quotes(s);

		if (i)
			PUT(' ');
		if (q)
			PUT('"');
		for (; *s; s++) {
			if (is_ctl((unsigned char)*s))
				return -EINVAL;
			if (q && (*s == '"' || *s == '\\'))
				PUT('\\');
			PUT(*s);
		}
		if (q)
			PUT('"');
	}
	PUT('\n');
#undef PUT
	buf[o] = 0;
	return (int)o;
}
