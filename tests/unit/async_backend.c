// SPDX-License-Identifier: MIT
/*
 * tests/unit/async_backend.c - see async_backend.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "async_backend.h"
#include "helpers.h"

/* ---- completions ---- */

int waiter_timeout_s = WAIT_MS / 1000;

void waiter_init(struct waiter *w)
{
	pthread_mutex_init(&w->lock, NULL);
	cr_assert_eq(blk_cond_init(&w->cond), 0);	/* timed waits on CLOCK_MONOTONIC */
	w->outstanding = w->ended = w->errors = 0;
}

void test_end_io(struct blk_io *io, int res)
{
	struct test_io *t = (struct test_io *)io;
	struct waiter *w = t->w;

	pthread_mutex_lock(&w->lock);
	t->calls++;
	t->res = res;
	w->ended++;
	if (res)
		w->errors++;
	w->outstanding--;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void waiter_add(struct waiter *w, int n)
{
	pthread_mutex_lock(&w->lock);
	w->outstanding += n;
	pthread_mutex_unlock(&w->lock);
}

void waiter_wait_for(struct waiter *w, int secs)
{
	uint64_t deadline = blk_now_ns() + (uint64_t)secs * 1000000000u;

	pthread_mutex_lock(&w->lock);
	while (w->outstanding > 0) {
		if (blk_cond_wait_until(&w->cond, &w->lock, deadline) == ETIMEDOUT) {
			int left = w->outstanding;

			pthread_mutex_unlock(&w->lock);
			cr_assert_fail("%d I/Os never completed (a hang)", left);
		}
	}
	pthread_mutex_unlock(&w->lock);
}

void waiter_wait(struct waiter *w)
{
	waiter_wait_for(w, waiter_timeout_s);
}

void test_io_init(struct test_io *t, struct waiter *w, enum blk_op op, uint64_t pos,
		  uint64_t len)
{
	memset(t, 0, sizeof(*t));
	t->w = w;
	t->io.op = op;
	t->io.pos = pos;
	t->io.len = len;
	t->io.end_io = test_end_io;
}

void test_io_init_buf(struct test_io *t, struct waiter *w, enum blk_op op, uint64_t pos,
		      void *buf, uint64_t len)
{
	test_io_init(t, w, op, pos, len);
	t->iov[0] = (struct iovec){ .iov_base = buf, .iov_len = len };
	t->io.iov = t->iov;
	t->io.iovcnt = 1;
}

void submit_async(struct blk_backend *be, struct test_io *t)
{
	int ret;

	waiter_add(t->w, 1);
	ret = blk_submit(be, &t->io);
	if (ret)
		waiter_add(t->w, -1);
	cr_assert_eq(ret, 0, "submit op %d pos %llu len %llu: %d", t->io.op,
		     (unsigned long long)t->io.pos, (unsigned long long)t->io.len, ret);
}

int do_io_flags(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		const struct iovec *iov, int iovcnt, unsigned int flags, int *calls_at_return)
{
	struct waiter w;
	struct test_io t;

	waiter_init(&w);
	test_io_init(&t, &w, op, pos, len);
	t.io.flags = flags;
	t.io.iov = iov;
	t.io.iovcnt = iovcnt;
	submit_async(be, &t);
	if (calls_at_return) {
		pthread_mutex_lock(&w.lock);
		*calls_at_return = t.calls;
		pthread_mutex_unlock(&w.lock);
	}
	waiter_wait(&w);
	cr_assert_eq(t.calls, 1, "end_io called %d times", t.calls);
	return t.res;
}

int do_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
	  const struct iovec *iov, int iovcnt)
{
	return do_io_flags(be, op, pos, len, iov, iovcnt, 0, NULL);
}

int do_rw(struct blk_backend *be, enum blk_op op, uint64_t pos, void *buf, uint64_t len)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };

	return do_io(be, op, pos, len, &iov, 1);
}

/* ---- the device's config section ---- */

void td_init(struct test_dev *td, const char *backend, const char *file, const char *dev)
{
	memset(td, 0, sizeof(*td));
	snprintf(td->file, sizeof(td->file), "%s", file);
	td->p.file = td->file;
	td->p.line = 3;
	td->p.dev = dev;
	td->p.v = td->v;
	td->p.err = td->err;
	td->p.errlen = sizeof(td->err);
	td->v[0].key = "backend";
	td->v[0].value = backend;
	td->v[0].line = 4;
	td->v[0].used = true;
	td->p.n = 1;
}

void td_set(struct test_dev *td, const char *key, const char *fmt, ...)
{
	va_list ap;
	int i = td->p.n++;
	uint64_t v;

	cr_assert(i < TD_MAXP);
	va_start(ap, fmt);
	vsnprintf(td->vals[i], sizeof(td->vals[i]), fmt, ap);
	va_end(ap);
	td->v[i].key = key;
	td->v[i].value = td->vals[i];
	td->v[i].line = 4 + i;
	td->v[i].used = !strcmp(key, "size") || strstr(key, "block_size") ||
			!strcmp(key, "max_io") || !strncmp(key, "io_", 3);
	if (td->v[i].used) {
		cr_assert_eq(blk_parse_size(td->vals[i], &v), 0);
		if (!strcmp(key, "size"))
			td->p.geo.size = v;
		else if (!strcmp(key, "logical_block_size"))
			td->p.geo.lbs = (uint32_t)v;
		else if (!strcmp(key, "physical_block_size"))
			td->p.geo.pbs = (uint32_t)v;
		else if (!strcmp(key, "max_io"))
			td->p.geo.max_io = (uint32_t)v;
		else if (!strcmp(key, "io_min"))
			td->p.geo.io_min = (uint32_t)v;
		else if (!strcmp(key, "io_opt"))
			td->p.geo.io_opt = (uint32_t)v;
	}
}

static int td_line(const struct test_dev *td, const char *key)
{
	int i;

	for (i = 0; i < td->p.n; i++)
		if (!strcmp(td->v[i].key, key))
			return td->v[i].line;
	return td->p.line;
}

struct blk_backend *td_open(struct test_dev *td)
{
	const struct blk_backend_ops *ops = blk_backend_find(td->v[0].value);

	cr_assert_not_null(ops, "backend %s", td->v[0].value);
	td->err[0] = '\0';
	return ops->open(&td->p, NULL);
}

struct blk_backend *td_open_ok(struct test_dev *td)
{
	struct blk_backend *be = td_open(td);
	int i;

	cr_assert(!IS_ERR_OR_NULL(be), "open: %s", td->err);
	for (i = 0; i < td->p.n; i++)
		cr_assert(td->v[i].used, "key %s not marked used", td->v[i].key);
	return be;
}

void td_open_fails(struct test_dev *td, const char *key, const char *contains, ...)
{
	struct blk_backend *be = td_open(td);
	char prefix[PATH_MAX + 64];
	const char *s;
	va_list ap;

	cr_assert(IS_ERR(be), "open succeeded");
	cr_assert_eq(PTR_ERR(be), -EINVAL, "open: %ld (%s)", PTR_ERR(be), td->err);
	snprintf(prefix, sizeof(prefix), "%s:%d: %s: ", td->file, td_line(td, key), key);
	cr_assert(!strncmp(td->err, prefix, strlen(prefix)), "error '%s' does not start with '%s'",
		  td->err, prefix);
	va_start(ap, contains);
	for (s = contains; s; s = va_arg(ap, const char *))
		cr_assert(strstr(td->err, s), "error '%s' does not say '%s'", td->err, s);
	va_end(ap);
}
