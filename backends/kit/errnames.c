// SPDX-License-Identifier: MIT
/*
 * backends/kit/errnames.c - errnos by name, both ways (errnames.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../backend.h"
#include "errnames.h"

int be_parse_errno(const char *s)
{
	char *end;
	long v;
	int e;

	if (*s >= '0' && *s <= '9') {
		errno = 0;
		v = strtol(s, &end, 10);
		if (errno || *end || v <= 0 || v >= BLK_MAX_ERRNO)
			return -EINVAL;
		return (int)v;
	}
	for (e = 1; e < 256; e++) {
		const char *n = strerrorname_np(e);

		if (n && !strcasecmp(n, s))
			return e;
	}
	return -EINVAL;
}

const char *be_errno_name(int e, char *buf, size_t len)
{
	const char *n = strerrorname_np(e);

	if (n)
		return n;
	snprintf(buf, len, "%d", e);
	return buf;
}

