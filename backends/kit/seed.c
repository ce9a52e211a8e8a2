// SPDX-License-Identifier: MIT
/*
 * backends/kit/seed.c - a filter's random stream: probabilities, seeds
 * from the config, the clock or a .sys store, and the line that says
 * which seed replays a run (seed.h).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../backend.h"
#include "../lib/clock.h"
#include "attr.h"
#include "seed.h"

int be_parse_probability(const char *s, double *out)
{
	char *end;
	double v;

	if (!((*s >= '0' && *s <= '9') || *s == '.'))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v) || v < 0 || v > 1)
		return -EINVAL;
	*out = v;
	return 0;
}

uint64_t be_seed_from_clock(void)
{
	struct timespec ts;
	uint64_t s;

	clock_gettime(CLOCK_REALTIME, &ts);
	s = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	s ^= blk_now_ns() << 17 ^ ((uint64_t)getpid() << 32);
	/* one splitmix step: seeds taken close together differ in every bit */
	return be_rand(&s);
}

void be_say_seed(const char *filter, const char *dev, uint64_t seed, const char *why)
{
	blk_info("%s: %s: seed %llu (%s; %s.seed = %llu replays it)", filter, dev,
		(unsigned long long)seed, why, filter, (unsigned long long)seed);
}

int be_parse_seed(const char *s, bool *is_auto, uint64_t *seed)
{
	unsigned long long v;
	char *end;

	/* time and random: what powerloss.seed has always taken for auto */
	if (!strcasecmp(s, "auto") || !strcasecmp(s, "time") || !strcasecmp(s, "random")) {
		*is_auto = true;
		*seed = 0;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*is_auto = false;
	*seed = v;
	return 0;
}

int be_seed_show(pthread_mutex_t *lock, const uint64_t *seed, char *buf, size_t len)
{
	char s[24];

	pthread_mutex_lock(lock);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)*seed);
	pthread_mutex_unlock(lock);
	return be_attr_out(buf, len, s);
}

int be_seed_store(pthread_mutex_t *lock, uint64_t *seed, uint64_t *rng, const char *filter,
		  const char *dev, const char *buf, size_t len)
{
	bool is_auto;
	uint64_t v;
	char s[32];

	if (be_attr_text(buf, len, s, sizeof(s)) || be_parse_seed(s, &is_auto, &v))
		return -EINVAL;
	if (is_auto)
		v = be_seed_from_clock();
	pthread_mutex_lock(lock);
	*seed = v;
	*rng = v;
	pthread_mutex_unlock(lock);
	be_say_seed(filter, dev, v, "stored");
	return 0;
}

int be_param_seed(struct blk_params *p, uint64_t *seed)
{
	const char *s = blk_param_get(p, "seed");
	bool is_auto = true;

	if (s && be_parse_seed(s, &is_auto, seed))
		return blk_param_error(p, "seed",
			"'%s' is not a seed (allowed: a number below 2^64, or auto for one from the clock)",
			s);
	if (is_auto)
		*seed = be_seed_from_clock();
	return 0;
}

void be_say_seed_first_io(pthread_mutex_t *lock, const uint64_t *seed, const char *filter,
			  const char *dev)
{
	uint64_t s;

	pthread_mutex_lock(lock);
	s = *seed;
	pthread_mutex_unlock(lock);
	be_say_seed(filter, dev, s, "first I/O");
}
