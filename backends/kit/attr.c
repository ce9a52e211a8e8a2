// SPDX-License-Identifier: MIT
/*
 * backends/kit/attr.c - a layer's ->stat text, and an attr's one-line
 * value in and out (attr.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "attr.h"

size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!len)
		return 0;
	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : len - 1;
}

int be_attr_text(const char *buf, size_t len, char *s, size_t cap)
{
	if (len && buf[len - 1] == '\n')
		len--;
	if (!len || len >= cap || memchr(buf, '\0', len))
		return -EINVAL;
	memcpy(s, buf, len);
	s[len] = '\0';
	return 0;
}

int be_attr_out(char *buf, size_t len, const char *s)
{
	int n = snprintf(buf, len, "%s\n", s);

	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

