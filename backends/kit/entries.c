// SPDX-License-Identifier: MIT
/*
 * backends/kit/entries.c - the entries of a list value (entries.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "entries.h"

/*
 * Blanks between tokens: a carriage return too, for a .sys store written
 * with CRLF. Not shared with fuse/ctl_parse.c's is_blank(), which refuses
 * a carriage return as a control character: the two sets differ on
 * purpose.
 */
static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

int be_entries(const char **sp, size_t *np, char sep, char tok[][32], int max)
{
	const char *s = *sp, *end;
	size_t n = *np, k;
	int nt = 0;

	if (!n)
		return -ENOENT;
	end = memchr(s, sep, n);
	k = end ? (size_t)(end - s) : n;
	*sp = s + k + (end ? 1 : 0);
	*np = n - k - (end ? 1 : 0);
	for (;;) {
		size_t t = 0;

		while (k && is_blank(*s))
			s++, k--;
		if (!k)
			break;
		if (nt == max)
			return -EINVAL;
		while (t < k && !is_blank(s[t]))
			t++;
		if (t >= 32 || memchr(s, '\0', t))
			return -EINVAL;
		memcpy(tok[nt], s, t);
		tok[nt][t] = '\0';
		nt++;
		s += t;
		k -= t;
	}
	return nt;
}

