// SPDX-License-Identifier: MIT
/*
 * backends/lib/params.c - what a backend's open() uses to read its config keys:
 * lookup (marking a key used, so the config can name keys nobody took),
 * sizes, durations, numbers and booleans, and "FILE:LINE: KEY: message" errors. Also the
 * geometry-from-config helper shared by the ram and null backends.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../backend.h"
#include "params.h"

/* A filter asks for "write"; its line in the config says "delay.write". */
static struct blk_param *param_find(const struct blk_params *p, const char *key)
{
	size_t plen = p->prefix ? strlen(p->prefix) : 0;
	int i;

	if (!key)
		return NULL;
	for (i = 0; i < p->n; i++) {
		const char *k = p->v[i].key;

		if (k && !strncmp(k, p->prefix ? p->prefix : "", plen) &&
		    !strcmp(k + plen, key))
			return &p->v[i];
	}
	return NULL;
}

const char *blk_param_get(struct blk_params *p, const char *key)
{
	struct blk_param *v = param_find(p, key);

	if (!v)
		return NULL;
	v->used = true;
	return v->value;
}

int blk_param_line(const struct blk_params *p, const char *key)
{
	struct blk_param *v = param_find(p, key);

	return v ? v->line : p->line;
}

int blk_param_error(struct blk_params *p, const char *key, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!p->err || !p->errlen)
		return -EINVAL;
	if (key)
		n = snprintf(p->err, p->errlen, "%s:%d: %s%s: ", p->file ? p->file : "?",
			     blk_param_line(p, key), p->prefix ? p->prefix : "", key);
	else
		n = snprintf(p->err, p->errlen, "%s:%d: [device %s]: ",
			     p->file ? p->file : "?", p->line, p->dev ? p->dev : "?");
	/* A prefix that filled the buffer leaves it truncated but terminated. */
	if (n < 0 || (size_t)n >= p->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(p->err + n, p->errlen - n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int blk_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned int shift = 0;
	const char *c = s;

	if (!s || *c < '0' || *c > '9')
		return -EINVAL;
	for (; *c >= '0' && *c <= '9'; c++) {
		unsigned int d = *c - '0';

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	switch (*c) {
	case 'K': case 'k': shift = 10; break;
	case 'M': case 'm': shift = 20; break;
	case 'G': case 'g': shift = 30; break;
	case 'T': case 't': shift = 40; break;
	case '\0': break;
	default: return -EINVAL;
	}
	if (shift) {
		c++;
		/* "KiB" says binary in so many words; "KB" might mean 1000: refused. */
		if (c[0] == 'i' && c[1] == 'B')
			c += 2;
	}
	if (*c)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int be_param_size_value(struct blk_params *p, const char *key, const char *s, uint64_t *out)
{
	int ret = blk_parse_size(s, out);

	if (ret == -ERANGE)
		return blk_param_error(p, key, "'%s' is too large", s);
	if (ret)
		return blk_param_error(p, key,
			"'%s' is not a size (digits with an optional K, M, G or T suffix, binary as dd)",
			s);
	return 0;
}

int blk_param_size(struct blk_params *p, const char *key, uint64_t def, uint64_t *out)
{
	const char *s = blk_param_get(p, key);

	if (!s) {
		*out = def;
		return 0;
	}
	return be_param_size_value(p, key, s, out);
}

/* The units of a duration, largest first (the formatter's order). */
static const struct {
	const char *sfx;
	uint64_t ns;
} dur_units[] = {
	{ "h", 3600ull * 1000000000 }, { "m", 60ull * 1000000000 }, { "s", 1000000000 },
	{ "ms", 1000000 }, { "us", 1000 }, { "ns", 1 },
};

#define NR_DUR_UNITS (sizeof(dur_units) / sizeof(dur_units[0]))

int blk_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *ns)
{
	const char *c = s;
	uint64_t v = 0;
	bool big = false;
	size_t u;

	if (!s || *c < '0' || *c > '9')
		return -EINVAL;
	/* Keep reading digits past an overflow: "99...9x" is malformed, not too large. */
	for (; *c >= '0' && *c <= '9'; c++) {
		unsigned int d = *c - '0';

		if (v > (UINT64_MAX - d) / 10)
			big = true;
		else
			v = v * 10 + d;
	}
	if (!*c) {
		/* A bare number: 0 needs no unit; another one only where the key has one. */
		if (big)
			return bare_unit_ns ? -ERANGE : -EINVAL;
		if (!v) {
			*ns = 0;
			return 0;
		}
		if (!bare_unit_ns)
			return -EINVAL;
		if (v > UINT64_MAX / bare_unit_ns)
			return -ERANGE;
		*ns = v * bare_unit_ns;
		return 0;
	}
	for (u = 0; u < NR_DUR_UNITS; u++) {
		if (strcmp(c, dur_units[u].sfx))
			continue;
		if (big || v > UINT64_MAX / dur_units[u].ns)
			return -ERANGE;
		*ns = v * dur_units[u].ns;
		return 0;
	}
	return -EINVAL;
}

int blk_format_duration(char *buf, size_t len, uint64_t ns)
{
	size_t u;

	if (!ns)
		return snprintf(buf, len, "0");
	for (u = 0; u < NR_DUR_UNITS; u++)
		if (ns % dur_units[u].ns == 0)
			break;
	return snprintf(buf, len, "%llu%s", (unsigned long long)(ns / dur_units[u].ns),
			dur_units[u].sfx);
}

int be_param_duration_value(struct blk_params *p, const char *key, const char *s,
			    uint64_t min_ns, uint64_t max_ns, uint64_t bare_unit_ns, uint64_t *out)
{
	char lo[32], hi[32];
	uint64_t v;
	int ret;

	blk_format_duration(lo, sizeof(lo), min_ns);
	blk_format_duration(hi, sizeof(hi), max_ns);
	ret = blk_parse_duration(s, bare_unit_ns, &v);
	if (ret == -EINVAL)
		return blk_param_error(p, key, "'%s' is not a duration (allowed: %s..%s; %s%s)",
				       s, lo, hi, BLK_DURATION_HELP,
				       bare_unit_ns == 1000000000 ? ", or plain seconds" : "");
	if (ret || v < min_ns || v > max_ns)
		return blk_param_error(p, key, "'%s' is out of range (allowed: %s..%s)", s, lo, hi);
	*out = v;
	return 0;
}

int blk_param_duration(struct blk_params *p, const char *key, uint64_t def_ns,
		       uint64_t min_ns, uint64_t max_ns, uint64_t bare_unit_ns, uint64_t *out)
{
	const char *s = blk_param_get(p, key);

	if (!s) {
		*out = def_ns;
		return 0;
	}
	return be_param_duration_value(p, key, s, min_ns, max_ns, bare_unit_ns, out);
}

int be_param_uint_value(struct blk_params *p, const char *key, const char *s,
			unsigned int min, unsigned int max, unsigned int *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (*s < '0' || *s > '9' || *end || errno || v < min || v > max)
		return blk_param_error(p, key, "'%s' is not a number from %u to %u", s, min, max);
	*out = (unsigned int)v;
	return 0;
}

int blk_param_uint(struct blk_params *p, const char *key, unsigned int def,
		   unsigned int min, unsigned int max, unsigned int *out)
{
	const char *s = blk_param_get(p, key);

	if (!s) {
		*out = def;
		return 0;
	}
	return be_param_uint_value(p, key, s, min, max, out);
}

int blk_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "yes", "true", "1", "on" };
	static const char *const no[] = { "no", "false", "0", "off" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

int be_param_bool_value(struct blk_params *p, const char *key, const char *s, bool *out)
{
	if (blk_parse_bool(s, out))
		return blk_param_error(p, key, "'%s' is not yes/no/true/false/1/0/on/off", s);
	return 0;
}

int blk_param_bool(struct blk_params *p, const char *key, bool def, bool *out)
{
	const char *s = blk_param_get(p, key);

	if (!s) {
		*out = def;
		return 0;
	}
	return be_param_bool_value(p, key, s, out);
}

int be_geo_from_params(struct blk_params *p, const char *backend,
		       struct blk_geometry *geo)
{
	*geo = p->geo;
	if (!geo->size)
		return blk_param_error(p, "size", "the %s backend needs a size", backend);
	if (!geo->lbs)
		geo->lbs = 512;
	if (!geo->pbs)
		geo->pbs = geo->lbs;
	if (!geo->io_min)
		geo->io_min = geo->pbs;
	if (!geo->max_io)
		geo->max_io = geo->pbs > (1u << 20) ? geo->pbs : 1u << 20;
	if (!geo->io_opt)
		geo->io_opt = geo->max_io;
	geo->dma_align = 1;

	if (!blk_is_pow2(geo->lbs) || geo->lbs < 512 || geo->lbs > (64u << 10))
		return blk_param_error(p, "logical_block_size",
			"%u is not a power of two from 512 to 65536", geo->lbs);
	if (!blk_is_pow2(geo->pbs) || geo->pbs < geo->lbs)
		return blk_param_error(p, "physical_block_size",
			"%u is not a power of two >= logical_block_size (%u)",
			geo->pbs, geo->lbs);
	if (!blk_aligned(geo->size, geo->lbs))
		return blk_param_error(p, "size",
			"%llu is not a multiple of logical_block_size (%u)",
			(unsigned long long)geo->size, geo->lbs);
	if (!blk_aligned(geo->max_io, geo->pbs))
		return blk_param_error(p, "max_io",
			"%u is not a multiple of physical_block_size (%u)",
			geo->max_io, geo->pbs);
	return 0;
}

bool be_geo_given(const struct blk_params *p, const char *key, uint64_t val)
{
	return val && (!p->geo.size || param_find(p, key));
}

bool blk_io_valid(const struct blk_geometry *geo, const struct blk_io *io)
{
	uint64_t sum = 0;
	uint32_t align = geo->dma_align ? geo->dma_align : 1;
	int i;

	if (io->op == BLK_FLUSH)
		return io->pos == 0 && io->len == 0;
	if (!blk_aligned(io->pos, geo->lbs) || !blk_aligned(io->len, geo->lbs) ||
	    io->pos > geo->size || io->len > geo->size - io->pos)
		return false;
	if (io->op == BLK_DISCARD || io->op == BLK_WRITE_ZEROES)
		return true;
	if (!io->len || io->len > geo->max_io || io->iovcnt <= 0)
		return false;
	for (i = 0; i < io->iovcnt; i++) {
		if (!blk_aligned((uintptr_t)io->iov[i].iov_base, align) ||
		    !blk_aligned(io->iov[i].iov_len, align))
			return false;
		sum += io->iov[i].iov_len;
	}
	return sum == io->len;
}
