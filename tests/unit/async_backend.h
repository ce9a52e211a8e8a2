/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/async_backend.h - for the unit tests of a backend that ends
 * I/O on threads of its own (aio, nbd): I/Os whose completions a test
 * waits for (end_io exactly once, or the test fails after a timeout), and
 * the device's config section, hand-built as core/ hands it over after
 * parsing blkfs.conf.
 */
#ifndef BLKFS_TEST_ASYNC_BACKEND_H
#define BLKFS_TEST_ASYNC_BACKEND_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "../../backends/backend.h"

/* ---- completions ---- */

/* Counts the I/Os of one test_io set in flight. */
struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int outstanding;
	int ended;
	int errors;
};

struct test_io {
	struct blk_io io;	/* must come first */
	struct waiter *w;
	int calls;		/* under w->lock */
	int res;
	struct iovec iov[8];
};

/* How long waiter_wait() waits before it fails the test (a hang); WAIT_MS. */
extern int waiter_timeout_s;

void waiter_init(struct waiter *w);
void waiter_add(struct waiter *w, int n);
/* Wait until nothing is outstanding; fail after @secs. */
void waiter_wait_for(struct waiter *w, int secs);
/* The same, for waiter_timeout_s. */
void waiter_wait(struct waiter *w);

/* @t's end_io: counts the call and the result, wakes the waiter. */
void test_end_io(struct blk_io *io, int res);
/* @t for @op over [@pos, +@len), counted by @w; no iovec yet. */
void test_io_init(struct test_io *t, struct waiter *w, enum blk_op op, uint64_t pos,
		  uint64_t len);
/* test_io_init() over one buffer: t->iov[0] = { @buf, @len }. */
void test_io_init_buf(struct test_io *t, struct waiter *w, enum blk_op op, uint64_t pos,
		      void *buf, uint64_t len);
/* Submit @t, counted as outstanding; the submit must take it. */
void submit_async(struct blk_backend *be, struct test_io *t);
/* Submit, wait, and return end_io's result (called exactly once). */
int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
	  const struct iovec *iov, int iovcnt);
int do_rw(struct blk_backend *be, enum blk_op op, uint64_t pos, void *buf, uint64_t len);
/* do_io() with blk_io.flags = @flags; *@calls_at_return (if given): end_io
 * calls already made when submit() returned. */
int do_io_flags(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		const struct iovec *iov, int iovcnt, unsigned int flags, int *calls_at_return);

/* ---- the device's config section ---- */

#define TD_MAXP 12

struct test_dev {
	struct blk_params p;
	struct blk_param v[TD_MAXP];
	char vals[TD_MAXP][PATH_MAX];
	char file[PATH_MAX];
	char err[1024];
};

/*
 * "[device @dev]" at line 3 of config file @file, "backend = @backend" on
 * line 4 (as conf hands it over: its own key, already used); td_set()
 * puts keys on lines 5, 6, ...
 */
void td_init(struct test_dev *td, const char *backend, const char *file, const char *dev);
/*
 * Add "@key = value". conf takes the geometry keys (size, *_block_size,
 * max_io, io_*): they are marked used and their value goes into p->geo as
 * conf would put it; the backend takes the rest.
 */
void td_set(struct test_dev *td, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Open the backend: the backend or ERR_PTR, the message in td->err. */
struct blk_backend *td_open(struct test_dev *td);
/* The same; fails the test unless it opens and takes every key. */
struct blk_backend *td_open_ok(struct test_dev *td);
/*
 * Open must fail with -EINVAL and "FILE:<line of @key>: @key: ", and the
 * message must contain each string of the NULL-terminated list @contains...
 */
void td_open_fails(struct test_dev *td, const char *key, const char *contains, ...)
	__attribute__((sentinel));

#endif
