/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/seed.h - the random stream of a filter that chooses at
 * random (fault, flakey, delay, powerloss): the generator, probabilities,
 * the one seed grammar, and the seed lines and knob every such filter has.
 *
 * Lock: the generator is the caller's state (*state under the filter's
 * lock); be_seed_show/store and be_say_seed_first_io take the lock they
 * are given around the seed fields.
 */
#ifndef BLKFS_KIT_SEED_H
#define BLKFS_KIT_SEED_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct blk_params;

/* A decimal in [0, 1] ("0", "0.25", "1", "1e-3"); -EINVAL otherwise. */
int be_parse_probability(const char *s, double *out);

/*
 * Seeds. Every random choice of a filter comes from this splitmix64 stream
 * (any seed, 0 included, gives a good one; powerloss's cuts too), so a run
 * replays from its seed as long as the I/O comes in the same order.
 * `seed = auto` (or time, random) takes one from the clock; the filter
 * prints it to the daemon log and shows it in .sys.
 */
static inline uint64_t be_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double be_rand01(uint64_t *state)
{
	return (double)(be_rand(state) >> 11) / (double)(1ull << 53);
}

/* Uniform in [0, n) for n > 0 (the modulo bias is below n / 2^64). */
static inline uint64_t be_rand_below(uint64_t *state, uint64_t n)
{
	return be_rand(state) % n;
}

/*
 * "blkfs: FILTER: DEV: seed N (WHY; FILTER.seed = N replays it)" on stderr.
 * A filter says it at open (which `blkfs mount` prints: the daemon's log
 * does not exist yet), again at its first I/O (by then stderr is the
 * daemon's log) and at every store of `seed`.
 */
void be_say_seed(const char *filter, const char *dev, uint64_t seed, const char *why);

/*
 * The seed line of a filter's first I/O (be_first_io() says when): the
 * seed read under @lock, which a store of `seed` may change meanwhile.
 */
void be_say_seed_first_io(pthread_mutex_t *lock, const uint64_t *seed, const char *filter,
			  const char *dev);

/* True once: for the first I/O's seed line. */
static inline bool be_first_io(bool *said)
{
	return !__atomic_load_n(said, __ATOMIC_RELAXED) &&
	       !__atomic_exchange_n(said, true, __ATOMIC_RELAXED);
}

/* A seed from the clock and the process, for `seed = auto`. */
uint64_t be_seed_from_clock(void);
/*
 * The one seed grammar of every filter: "auto", "time" or "random" (the
 * same: *is_auto = true, the filter takes one from be_seed_from_clock()),
 * or a decimal below 2^64; -EINVAL otherwise. Case does not matter.
 */
int be_parse_seed(const char *s, bool *is_auto, uint64_t *seed);

/*
 * The .sys knob every seeded filter has, on fields under the filter's
 * @lock: `seed` (a number, or auto: from the clock; storing one restarts
 * the stream @rng from it and says so). Return what an attr's show/store
 * returns. (A filter's errno and probability knobs are rows of its knob
 * table: kit/knobs.h.)
 */
int be_seed_show(pthread_mutex_t *lock, const uint64_t *seed, char *buf, size_t len);
int be_seed_store(pthread_mutex_t *lock, uint64_t *seed, uint64_t *rng, const char *filter,
		  const char *dev, const char *buf, size_t len);
/*
 * A filter's `seed` key: the seed it starts from (from the clock when the
 * key is absent or `auto`). -EINVAL with p->err when malformed.
 */
int be_param_seed(struct blk_params *p, uint64_t *seed);

#endif
