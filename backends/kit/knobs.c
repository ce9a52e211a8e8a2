// SPDX-License-Identifier: MIT
/*
 * backends/kit/knobs.c - a filter's or backend's knob table at work
 * (knobs.h): reading the keys at open, and show and store for a filter's
 * .sys files, with the types every layer shares. The messages for bad config values are the ones
 * blk_param_*() give (params.c's be_param_*_value()), so a key says the
 * same whichever filter or backend takes it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "../lib/params.h"
#include "attr.h"
#include "errnames.h"
#include "filter.h"
#include "seed.h"
#include "knobs.h"

/* The longest store a shared type takes (the filter's own lists take their own). */
#define BK_TEXT_MAX	64
/* The largest field a type may have (a scratch copy on the stack). */
#define BK_FIELD_MAX	64

static void *field_of(void *state, size_t off)
{
	return (char *)state + off;
}

static pthread_mutex_t *lock_of(const struct bk_table *t, struct blk_backend *state)
{
	return field_of(state, t->lock_off);
}

/*
 * Fields of the sizes an atomic access takes are copied with one (see
 * knobs.h: the I/O path may read them without the lock); others whole,
 * under the lock.
 */
static void field_get(void *dst, const void *f, size_t size)
{
	switch (size) {
	case 1: *(uint8_t *)dst = __atomic_load_n((const uint8_t *)f, __ATOMIC_RELAXED); break;
	case 4: *(uint32_t *)dst = __atomic_load_n((const uint32_t *)f, __ATOMIC_RELAXED); break;
	case 8: *(uint64_t *)dst = __atomic_load_n((const uint64_t *)f, __ATOMIC_RELAXED); break;
	default: memcpy(dst, f, size);
	}
}

static void field_set(void *f, const void *src, size_t size)
{
	switch (size) {
	case 1: __atomic_store_n((uint8_t *)f, *(const uint8_t *)src, __ATOMIC_RELAXED); break;
	case 4: __atomic_store_n((uint32_t *)f, *(const uint32_t *)src, __ATOMIC_RELAXED); break;
	case 8: __atomic_store_n((uint64_t *)f, *(const uint64_t *)src, __ATOMIC_RELAXED); break;
	default: memcpy(f, src, size);
	}
}

/* ---- unsigned int ---- */

static void uint_def(const struct bk_knob *k, void *f)
{
	*(unsigned int *)f = (unsigned int)k->def;
}

static int uint_parse(const struct bk_knob *k, const char *s, void *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < k->min || v > k->max)
		return -EINVAL;
	*(unsigned int *)out = (unsigned int)v;
	return 0;
}

static int uint_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	return be_param_uint_value(p, k->name, s, (unsigned int)k->min, (unsigned int)k->max, out);
}

static int uint_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return snprintf(buf, len, "%u", *(const unsigned int *)v);
}

const struct bk_type bk_type_uint = {
	.size = sizeof(unsigned int),
	.set_def = uint_def,
	.param = uint_param,
	.parse = uint_parse,
	.format = uint_format,
};

/* ---- uint64_t: plain numbers, sizes, durations ---- */

static void u64_def(const struct bk_knob *k, void *f)
{
	*(uint64_t *)f = k->def;
}

static int u64_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)v);
}

static int u64_parse(const struct bk_knob *k, const char *s, void *out)
{
	unsigned long long v;
	char *end;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < k->min || v > k->max)
		return -EINVAL;
	*(uint64_t *)out = v;
	return 0;
}

/* As be_param_uint_value() says it, for the wider field. */
static int u64_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	if (u64_parse(k, s, out))
		return blk_param_error(p, k->name, "'%s' is not a number from %llu to %llu", s,
				       (unsigned long long)k->min, (unsigned long long)k->max);
	return 0;
}

const struct bk_type bk_type_u64 = {
	.size = sizeof(uint64_t),
	.set_def = u64_def,
	.param = u64_param,
	.parse = u64_parse,
	.format = u64_format,
};

static int size_parse(const struct bk_knob *k, const char *s, void *out)
{
	uint64_t v;

	if (blk_parse_size(s, &v) || v < k->min || v > k->max)
		return -EINVAL;
	*(uint64_t *)out = v;
	return 0;
}

static int size_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	uint64_t v;
	int ret = be_param_size_value(p, k->name, s, &v);

	if (ret)
		return ret;
	if (v < k->min || v > k->max)
		return blk_param_error(p, k->name, "'%s' is out of range (allowed: %llu..%llu)", s,
				       (unsigned long long)k->min, (unsigned long long)k->max);
	*(uint64_t *)out = v;
	return 0;
}

const struct bk_type bk_type_size = {
	.size = sizeof(uint64_t),
	.set_def = u64_def,
	.param = size_param,
	.parse = size_parse,
	.format = u64_format,
};

static int dur_parse(const struct bk_knob *k, const char *s, uint64_t bare, void *out)
{
	uint64_t v;

	if (blk_parse_duration(s, bare, &v) || v < k->min || v > k->max)
		return -EINVAL;
	*(uint64_t *)out = v;
	return 0;
}

static int dur_param(struct blk_params *p, const struct bk_knob *k, const char *s,
		     uint64_t bare, void *out)
{
	return be_param_duration_value(p, k->name, s, k->min, k->max, bare, out);
}

static int dur_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return blk_format_duration(buf, len, *(const uint64_t *)v);
}

static int duration_parse(const struct bk_knob *k, const char *s, void *out)
{
	return dur_parse(k, s, 0, out);
}

static int duration_param(struct blk_params *p, const struct bk_knob *k, const char *s,
			  void *out)
{
	return dur_param(p, k, s, 0, out);
}

const struct bk_type bk_type_duration = {
	.size = sizeof(uint64_t),
	.set_def = u64_def,
	.param = duration_param,
	.parse = duration_parse,
	.format = dur_format,
};

static int seconds_parse(const struct bk_knob *k, const char *s, void *out)
{
	return dur_parse(k, s, 1000000000ull, out);
}

static int seconds_param(struct blk_params *p, const struct bk_knob *k, const char *s,
			 void *out)
{
	return dur_param(p, k, s, 1000000000ull, out);
}

const struct bk_type bk_type_seconds = {
	.size = sizeof(uint64_t),
	.set_def = u64_def,
	.param = seconds_param,
	.parse = seconds_parse,
	.format = dur_format,
};

/* ---- bool ---- */

static void bool_def(const struct bk_knob *k, void *f)
{
	*(bool *)f = k->def != 0;
}

static int bool_parse(const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	return blk_parse_bool(s, out) ? -EINVAL : 0;
}

static int bool_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	return be_param_bool_value(p, k->name, s, out);
}

static int bool_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return snprintf(buf, len, "%s", *(const bool *)v ? "1" : "0");
}

const struct bk_type bk_type_bool = {
	.size = sizeof(bool),
	.set_def = bool_def,
	.param = bool_param,
	.parse = bool_parse,
	.format = bool_format,
};

/* ---- probability: a double in [0, 1]; its default is 0 ---- */

static void prob_def(const struct bk_knob *k, void *f)
{
	(void)k;
	*(double *)f = 0;
}

static int prob_parse(const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	return be_parse_probability(s, out) ? -EINVAL : 0;
}

static int prob_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	if (be_parse_probability(s, out))
		return blk_param_error(p, k->name, "'%s' is not a probability (allowed: %s)", s,
				       k->unit);
	return 0;
}

/* "%.17g": the text be_parse_probability() takes back exactly. */
static int prob_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return snprintf(buf, len, "%.17g", *(const double *)v);
}

const struct bk_type bk_type_probability = {
	.size = sizeof(double),
	.set_def = prob_def,
	.param = prob_param,
	.parse = prob_parse,
	.format = prob_format,
};

/* ---- errno: a positive errno, by name or number ---- */

static void errno_def(const struct bk_knob *k, void *f)
{
	*(int *)f = (int)k->def;
}

static int errno_parse(const struct bk_knob *k, const char *s, void *out)
{
	int e = be_parse_errno(s);

	(void)k;
	if (e < 0)
		return -EINVAL;
	*(int *)out = e;
	return 0;
}

static int errno_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	if (errno_parse(k, s, out))
		return blk_param_error(p, k->name, "'%s' is not an errno (allowed: %s)", s, k->unit);
	return 0;
}

static int errno_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	char eb[16];

	(void)k;
	return snprintf(buf, len, "%s", be_errno_name(*(const int *)v, eb, sizeof(eb)));
}

const struct bk_type bk_type_errno = {
	.size = sizeof(int),
	.set_def = errno_def,
	.param = errno_param,
	.parse = errno_parse,
	.format = errno_format,
};

/*
 * ---- seed: the key is read when absent too (auto: from the clock); the
 * stream (aux_off) starts from it; a store restarts it and says so ----
 */

static int seed_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	(void)s;
	return be_param_seed(p, out);
}

static int seed_store(const struct bk_table *t, const struct bk_knob *k,
		      struct blk_backend *state, const char *s)
{
	return be_seed_store(lock_of(t, state), field_of(state, k->off),
			     field_of(state, k->aux_off), t->filter,
			     *(const char **)field_of(state, t->dev_off), s, strlen(s));
}

const struct bk_type bk_type_seed = {
	.size = sizeof(uint64_t),
	.param = seed_param,
	.format = u64_format,
	.store = seed_store,
};

/* ---- pool: be_param_pool()'s key, read when absent too ---- */

static int pool_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	(void)k;
	(void)s;
	return be_param_pool(p, out);
}

const struct bk_type bk_type_pool = {
	.size = sizeof(unsigned int),
	.param = pool_param,
	.format = uint_format,
};

const struct bk_type bk_type_none = { .size = 0 };

/* ---- text: the config's own words (a path, a URI), kept as a pointer ---- */

static void text_def(const struct bk_knob *k, void *f)
{
	(void)k;
	*(const char **)f = NULL;
}

static int text_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	(void)p;
	(void)k;
	*(const char **)out = s;
	return 0;
}

const struct bk_type bk_type_text = {
	.size = sizeof(const char *),
	.set_def = text_def,
	.param = text_param,
};

/* ---- size_max: a size whose bound says what is allowed (ram's reserve) ---- */

static int size_max_param(struct blk_params *p, const struct bk_knob *k, const char *s,
			  void *out)
{
	uint64_t v;
	int ret = be_param_size_value(p, k->name, s, &v);

	if (ret)
		return ret;
	if (v > k->max || v < k->min)
		return blk_param_error(p, k->name, "%llu is too %s (allowed: %s)",
				       (unsigned long long)v, v > k->max ? "large" : "small",
				       k->unit);
	*(uint64_t *)out = v;
	return 0;
}

const struct bk_type bk_type_size_max = {
	.size = sizeof(uint64_t),
	.set_def = u64_def,
	.param = size_max_param,
	.parse = size_parse,
	.format = u64_format,
};

/*
 * ---- msec: whole milliseconds read as a duration, a bare number in
 * seconds (nbd's timeout: the poll loop's unit, so a finer value is
 * refused rather than cut) ----
 */

#define NS_PER_MS	1000000ull

static int msec_parse(const struct bk_knob *k, const char *s, void *out)
{
	uint64_t ns;

	if (blk_parse_duration(s, 1000 * NS_PER_MS, &ns) || ns % NS_PER_MS ||
	    ns < k->min * NS_PER_MS || ns > k->max * NS_PER_MS)
		return -EINVAL;
	*(unsigned int *)out = (unsigned int)(ns / NS_PER_MS);
	return 0;
}

static int msec_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	uint64_t ns;
	int ret;

	ret = be_param_duration_value(p, k->name, s, k->min * NS_PER_MS, k->max * NS_PER_MS,
				      1000 * NS_PER_MS, &ns);
	if (ret)
		return ret;
	if (ns % NS_PER_MS)
		return blk_param_error(p, k->name,
				       "'%s' is finer than 1ms (allowed: whole milliseconds)", s);
	*(unsigned int *)out = (unsigned int)(ns / NS_PER_MS);
	return 0;
}

static int msec_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return blk_format_duration(buf, len, *(const unsigned int *)v * NS_PER_MS);
}

const struct bk_type bk_type_msec = {
	.size = sizeof(unsigned int),
	.set_def = uint_def,
	.param = msec_param,
	.parse = msec_parse,
	.format = msec_format,
};

/*
 * ---- sec: whole seconds read as a duration, a bare number in seconds
 * (rbd's timeout: librados takes whole seconds, so a finer value is
 * refused rather than cut; the row's unit says why) ----
 */

#define NS_PER_S	1000000000ull

static int sec_parse(const struct bk_knob *k, const char *s, void *out)
{
	uint64_t ns;

	if (blk_parse_duration(s, NS_PER_S, &ns) || ns % NS_PER_S ||
	    ns < k->min * NS_PER_S || ns > k->max * NS_PER_S)
		return -EINVAL;
	*(unsigned int *)out = (unsigned int)(ns / NS_PER_S);
	return 0;
}

static int sec_param(struct blk_params *p, const struct bk_knob *k, const char *s, void *out)
{
	uint64_t ns;
	int ret;

	ret = be_param_duration_value(p, k->name, s, k->min * NS_PER_S, k->max * NS_PER_S,
				      NS_PER_S, &ns);
	if (ret)
		return ret;
	if (ns % NS_PER_S)
		return blk_param_error(p, k->name, "'%s' is finer than 1s (%s)", s, k->unit);
	*(unsigned int *)out = (unsigned int)(ns / NS_PER_S);
	return 0;
}

static int sec_format(const struct bk_knob *k, const void *v, char *buf, size_t len)
{
	(void)k;
	return blk_format_duration(buf, len, *(const unsigned int *)v * NS_PER_S);
}

const struct bk_type bk_type_sec = {
	.size = sizeof(unsigned int),
	.set_def = uint_def,
	.param = sec_param,
	.parse = sec_parse,
	.format = sec_format,
};

/* ---- the table ---- */

/* Row @k of a table into @conf: its default, or the config's value. */
static int parse_row(const struct bk_knob *k, struct blk_params *p, void *conf)
{
	void *f = field_of(conf, k->off);
	const char *s;
	int ret;

	s = blk_param_get(p, k->name);
	/* a type without a default reads its key itself, absent or not */
	if (!s && k->type->set_def) {
		k->type->set_def(k, f);
		return 0;
	}
	ret = k->type->param(p, k, s, f);
	if (ret)
		return ret;
	if (k->aux_off)
		memcpy(field_of(conf, k->aux_off), f, k->type->size);
	return 0;
}

int bk_parse(const struct bk_table *t, struct blk_params *p, void *conf)
{
	size_t i;
	int ret;

	for (i = 0; i < t->nr; i++) {
		const struct bk_knob *k = &t->knobs[i];

		/* the filter's own rows, and attrs that are no key, are not read here */
		if (k->live != BK_RW && k->live != BK_CONF)
			continue;
		ret = parse_row(k, p, conf);
		if (ret)
			return ret;
	}
	return 0;
}

int bk_parse_key(const struct bk_table *t, struct blk_params *p, const char *name, void *conf)
{
	size_t i;

	for (i = 0; i < t->nr; i++)
		if (!strcmp(t->knobs[i].name, name))
			return parse_row(&t->knobs[i], p, conf);
	return -ENOENT;
}

int bk_params(const struct bk_table *t, struct blk_params *p, struct blk_backend *state)
{
	return bk_parse(t, p, state);
}

int bk_format_def(const struct bk_knob *k, char *buf, size_t len)
{
	_Alignas(16) unsigned char v[BK_FIELD_MAX];

	/* pool: the default is be_param_pool()'s, which the row repeats */
	if (k->type == &bk_type_pool)
		return snprintf(buf, len, "%llu", (unsigned long long)k->def);
	if (k->type == &bk_type_text || !k->type->set_def || !k->type->format ||
	    k->type->size > sizeof(v))
		return -EINVAL;
	k->type->set_def(k, v);
	return k->type->format(k, v, buf, len);
}

int bk_format_bound(const struct bk_knob *k, uint64_t v, char *buf, size_t len)
{
	const struct bk_type *t = k->type;

	if (t == &bk_type_uint || t == &bk_type_u64 || t == &bk_type_pool ||
	    t == &bk_type_size || t == &bk_type_size_max || t == &bk_type_probability)
		return snprintf(buf, len, "%llu", (unsigned long long)v);
	if (t == &bk_type_duration || t == &bk_type_seconds)
		return blk_format_duration(buf, len, v);
	if (t == &bk_type_msec)
		return blk_format_duration(buf, len, v * NS_PER_MS);
	if (t == &bk_type_sec)
		return blk_format_duration(buf, len, v * NS_PER_S);
	return -EINVAL;
}

int bk_show(const struct bk_table *t, const struct bk_knob *k, struct blk_backend *state,
	    char *buf, size_t len)
{
	_Alignas(16) unsigned char v[BK_FIELD_MAX];
	char s[BK_TEXT_MAX];
	int n;

	if (k->type->size > sizeof(v) || !k->type->format)
		return -EINVAL;
	pthread_mutex_lock(lock_of(t, state));
	field_get(v, field_of(state, k->off), k->type->size);
	pthread_mutex_unlock(lock_of(t, state));
	n = k->type->format(k, v, s, sizeof(s));
	if (n < 0 || (size_t)n >= sizeof(s))
		return -EOVERFLOW;
	return be_attr_out(buf, len, s);
}

int bk_store(const struct bk_table *t, const struct bk_knob *k, struct blk_backend *state,
	     const char *buf, size_t len)
{
	_Alignas(16) unsigned char v[BK_FIELD_MAX];
	char s[BK_TEXT_MAX];
	int ret;

	if ((k->live != BK_RW && k->live != BK_LIVE) || be_attr_text(buf, len, s, sizeof(s)))
		return -EINVAL;
	if (k->type->store) {
		ret = k->type->store(t, k, state, s);
		if (!ret && k->hook) {
			pthread_mutex_lock(lock_of(t, state));
			k->hook(state);
			pthread_mutex_unlock(lock_of(t, state));
		}
	} else {
		if (k->type->size > sizeof(v) || !k->type->parse || k->type->parse(k, s, v))
			return -EINVAL;
		pthread_mutex_lock(lock_of(t, state));
		field_set(field_of(state, k->off), v, k->type->size);
		if (k->hook)
			k->hook(state);
		pthread_mutex_unlock(lock_of(t, state));
		ret = 0;
	}
	if (!ret && t->after)
		t->after(state);
	return ret;
}
