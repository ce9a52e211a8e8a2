/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/helpers.h - what the unit tests of backends and filters share:
 * data patterns, test I/Os, a counter from ->stat, a filter's live attrs, and a
 * filter's config as core/stack.c hands it over (hand-built struct
 * blk_params, prefix "NAME.", the layer below as next). Every check fails
 * the calling Criterion test.
 */
#ifndef BLKFS_TEST_HELPERS_H
#define BLKFS_TEST_HELPERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/*
 * How long a wait for something that must happen (a completion, an I/O
 * reaching the layer below) gives up after and fails the test: long enough
 * for a machine at load 10, since a wait that ends early costs nothing. A
 * test never waits this long to show that something does not happen.
 * Criterion's .timeout of a test (which ends it without a word of what it
 * waited for) is 180 s, well above it.
 */
#define WAIT_MS 60000u

/* CLOCK_MONOTONIC in seconds (blk_now_ns() in nanoseconds). */
double now_s(void);

/* A pattern that differs per byte, position and @seed; never a zero byte. */
void fill_pattern(unsigned char *buf, size_t len, uint64_t pos, unsigned int seed);
bool all_zero(const unsigned char *buf, size_t len);

/* Counter @name of @be's ->stat ("name value" lines); fails when absent. */
uint64_t stat_get(struct blk_backend *be, const char *name);

/* ---- test I/Os ---- */

/* One I/O with a buffer of its own (data ops), counting its completions. */
struct tio {
	struct blk_io io;		/* must come first */
	struct iovec iov;
	int calls;			/* atomic; res and done_ns are set before it */
	int res;
	uint64_t submit_ns, done_ns;
};

/* A READ or WRITE gets a @len-byte buffer holding @data, or @fill bytes if NULL. */
void tio_init(struct tio *t, enum blk_op op, uint64_t pos, uint64_t len, const void *data,
	      int fill);
void tio_free(struct tio *t);
/* blk_submit(), noting the time in submit_ns. */
int tio_submit(struct blk_backend *be, struct tio *t);
int tio_calls(struct tio *t);
/* Wait up to @ms for the first completion; false if none came (and says so). */
bool tio_wait(struct tio *t, unsigned int ms);
/*
 * Completions of every tio since tio_done_reset(); wait up to @ms until
 * there are @n, false (saying how many came) if not.
 */
void tio_done_reset(void);
unsigned long tio_done(void);
bool tio_done_wait(unsigned long n, unsigned int ms);
/*
 * Wait up to @ms (spinning with sched_yield(), on the monotonic clock) for
 * another thread to set *@flag (an acquire load); false on the timeout.
 */
bool flag_wait(int *flag, unsigned int ms);
/*
 * Submit one I/O and wait for its single completion (a refusal by submit()
 * must not complete); returns the result. A WRITE carries @data (or @fill
 * bytes), a READ's data goes to @out when not NULL.
 */
int tio_do(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
	   const void *data, int fill, void *out);

/* ---- live attrs (struct blk_attr) ---- */

const struct blk_attr *attr_find(struct blk_backend *be, const char *name);
/*
 * The attr's value as `cat` shows it, in a static buffer (valid until the
 * next call): not empty, ends with a newline.
 */
const char *attr_show(struct blk_backend *be, const char *name);
/* The same for a list, which may also be empty (fault's badblocks). */
const char *attr_show_list(struct blk_backend *be, const char *name);
int attr_store(struct blk_backend *be, const char *name, const char *val);
/* Storing @val is -EINVAL and the shown value stays what it was. */
void attr_refuses(struct blk_backend *be, const char *name, const char *val);

/* ---- a filter's config ---- */

#define TP_MAXP 12

/* Up to TP_MAXP `NAME.key = value` lines of one filter, as conf leaves them. */
struct tparams {
	struct blk_params p;
	struct blk_param v[TP_MAXP];
	const char *filter;		/* its registry name */
	struct blk_backend *next;	/* the layer below */
	char file[128];
	char prefix[24];
	char err[1024];
};

/*
 * No keys yet; the device section "[device fake0]" is at line @line of
 * config file @file.
 */
void filter_params_init(struct tparams *tp, const char *filter, struct blk_backend *next,
			const char *file, int line);
/* Add "@key = @value" on line @line; @key with its prefix, as the config has it. */
void tparams_add(struct tparams *tp, const char *key, const char *value, int line);
/* Open the filter over tp->next; fails the test unless it opens. */
struct blk_backend *filter_open(struct tparams *tp);
/* Open must fail with @err and a message containing @want. */
void filter_open_fails_with(struct tparams *tp, long err, const char *want);
/* ... with -EINVAL. */
void filter_open_fails(struct tparams *tp, const char *want);

#endif
