// SPDX-License-Identifier: MIT
/*
 * tests/unit/helpers.c - see helpers.h.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

double now_s(void)
{
	return (double)blk_now_ns() / 1e9;
}

/* ---- test I/Os ---- */

static unsigned long tio_nr_done;	/* atomic */

static void tio_end_io(struct blk_io *io, int res)
{
	struct tio *t = (struct tio *)io;

	t->res = res;
	t->done_ns = blk_now_ns();
	__atomic_add_fetch(&t->calls, 1, __ATOMIC_SEQ_CST);
	__atomic_add_fetch(&tio_nr_done, 1, __ATOMIC_SEQ_CST);
}

void tio_init(struct tio *t, enum blk_op op, uint64_t pos, uint64_t len, const void *data,
	      int fill)
{
	memset(t, 0, sizeof(*t));
	t->io.op = op;
	t->io.pos = pos;
	t->io.len = len;
	t->io.end_io = tio_end_io;
	if (op == BLK_READ || op == BLK_WRITE) {
		t->iov.iov_base = malloc(len);
		cr_assert_not_null(t->iov.iov_base);
		if (data)
			memcpy(t->iov.iov_base, data, len);
		else
			memset(t->iov.iov_base, fill, len);
		t->iov.iov_len = len;
		t->io.iov = &t->iov;
		t->io.iovcnt = 1;
	}
}

void tio_free(struct tio *t)
{
	free(t->iov.iov_base);
	t->iov.iov_base = NULL;
}

int tio_submit(struct blk_backend *be, struct tio *t)
{
	t->submit_ns = blk_now_ns();
	return blk_submit(be, &t->io);
}

int tio_calls(struct tio *t)
{
	return __atomic_load_n(&t->calls, __ATOMIC_SEQ_CST);
}

bool tio_wait(struct tio *t, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000;

	while (!tio_calls(t) && blk_now_ns() < end)
		usleep(100);
	if (tio_calls(t))
		return true;
	cr_log_error("tio_wait: %s at %llu+%llu not completed after %u ms", blk_op_name(t->io.op),
		     (unsigned long long)t->io.pos, (unsigned long long)t->io.len, ms);
	return false;
}

bool flag_wait(int *flag, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000u;

	while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE))
		if (blk_now_ns() > end)
			return false;
		else
			sched_yield();
	return true;
}

void tio_done_reset(void)
{
	__atomic_store_n(&tio_nr_done, 0, __ATOMIC_SEQ_CST);
}

unsigned long tio_done(void)
{
	return __atomic_load_n(&tio_nr_done, __ATOMIC_SEQ_CST);
}

bool tio_done_wait(unsigned long n, unsigned int ms)
{
	uint64_t end = blk_now_ns() + (uint64_t)ms * 1000000;

	unsigned long done;

	while (tio_done() < n && blk_now_ns() < end)
		usleep(1000);
	done = tio_done();
	if (done >= n)
		return true;
	cr_log_error("tio_done_wait: %lu of %lu completions after %u ms", done, n, ms);
	return false;
}

int tio_do(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
	   const void *data, int fill, void *out)
{
	struct tio t;
	int ret;

	tio_init(&t, op, pos, len, data, fill);
	ret = tio_submit(be, &t);
	if (!ret) {
		cr_assert(tio_wait(&t, WAIT_MS), "%s at %llu never completed", blk_op_name(op),
			  (unsigned long long)pos);
		cr_assert_eq(tio_calls(&t), 1, "%s at %llu: %d completions", blk_op_name(op),
			     (unsigned long long)pos, tio_calls(&t));
		ret = t.res;
	} else {
		cr_assert_eq(tio_calls(&t), 0, "refused and completed");
	}
	if (out && op == BLK_READ)
		memcpy(out, t.iov.iov_base, len);
	tio_free(&t);
	return ret;
}

void fill_pattern(unsigned char *buf, size_t len, uint64_t pos, unsigned int seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		buf[i] = (unsigned char)(((pos + i) * 31 + seed * 7 + ((pos + i) >> 9)) | 1);
}

bool all_zero(const unsigned char *buf, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (buf[i])
			return false;
	return true;
}

uint64_t stat_get(struct blk_backend *be, const char *name)
{
	char buf[4096], *s;
	size_t n, len = strlen(name);

	cr_assert_not_null(be->ops->stat, "%s has no stat", be->ops->name);
	n = be->ops->stat(be, buf, sizeof(buf));
	cr_assert(n > 0 && n < sizeof(buf));
	cr_assert_eq(buf[n], '\0');
	for (s = buf; s && *s; s = strchr(s, '\n'), s = s ? s + 1 : NULL)
		if (!strncmp(s, name, len) && s[len] == ' ')
			return strtoull(s + len + 1, NULL, 10);
	cr_assert_fail("no %s in stat:\n%s", name, buf);
	return 0;
}

/* ---- live attrs ---- */

const struct blk_attr *attr_find(struct blk_backend *be, const char *name)
{
	const struct blk_attr *a;

	for (a = be->ops->attrs; a && a->name; a++)
		if (!strcmp(a->name, name))
			return a;
	cr_assert_fail("no attr %s in %s", name, be->ops->name);
	return NULL;
}

static const char *show(struct blk_backend *be, const char *name, bool may_be_empty)
{
	static char buf[16384];
	const struct blk_attr *a = attr_find(be, name);
	int n = a->show(be, buf, sizeof(buf));

	if (may_be_empty)
		cr_assert_geq(n, 0, "show %s: %d", name, n);
	else
		cr_assert_gt(n, 0, "show %s: %d", name, n);
	cr_assert_lt((size_t)n, sizeof(buf));
	cr_assert(n == 0 || buf[n - 1] == '\n', "show %s: no newline", name);
	cr_assert_eq(buf[n], '\0', "show %s: not terminated", name);
	return buf;
}

const char *attr_show(struct blk_backend *be, const char *name)
{
	return show(be, name, false);
}

const char *attr_show_list(struct blk_backend *be, const char *name)
{
	return show(be, name, true);
}

int attr_store(struct blk_backend *be, const char *name, const char *val)
{
	const struct blk_attr *a = attr_find(be, name);

	cr_assert_not_null(a->store, "%s is read-only", name);
	return a->store(be, val, strlen(val));
}

void attr_refuses(struct blk_backend *be, const char *name, const char *val)
{
	char before[16384];

	snprintf(before, sizeof(before), "%s", attr_show(be, name));
	cr_assert_eq(attr_store(be, name, val), -EINVAL, "%s accepted '%s'", name, val);
	cr_assert_str_eq(attr_show(be, name), before, "%s changed after '%s'", name, val);
}

/* ---- a filter's config ---- */

void filter_params_init(struct tparams *tp, const char *filter, struct blk_backend *next,
			const char *file, int line)
{
	memset(tp, 0, sizeof(*tp));
	tp->filter = filter;
	tp->next = next;
	snprintf(tp->file, sizeof(tp->file), "%s", file);
	snprintf(tp->prefix, sizeof(tp->prefix), "%s.", filter);
	tp->p.prefix = tp->prefix;
	tp->p.file = tp->file;
	tp->p.line = line;
	tp->p.dev = "fake0";
	tp->p.v = tp->v;
	tp->p.err = tp->err;
	tp->p.errlen = sizeof(tp->err);
}

void tparams_add(struct tparams *tp, const char *key, const char *value, int line)
{
	cr_assert_lt(tp->p.n, TP_MAXP);
	tp->v[tp->p.n].key = key;
	tp->v[tp->p.n].value = value;
	tp->v[tp->p.n].line = line;
	tp->p.n++;
}

struct blk_backend *filter_open(struct tparams *tp)
{
	const struct blk_backend_ops *ops = blk_backend_find(tp->filter);
	struct blk_backend *be;

	cr_assert_not_null(ops, "filter %s", tp->filter);
	cr_assert(ops->is_filter);
	be = ops->open(&tp->p, tp->next);
	cr_assert(!IS_ERR_OR_NULL(be), "open %s: %ld: %s", tp->filter,
		  IS_ERR(be) ? PTR_ERR(be) : 0, tp->err);
	cr_assert_eq(be->ops, ops);
	cr_assert_eq(be->next, tp->next);
	return be;
}

void filter_open_fails_with(struct tparams *tp, long err, const char *want)
{
	struct blk_backend *be = blk_backend_find(tp->filter)->open(&tp->p, tp->next);

	cr_assert(IS_ERR(be), "open %s succeeded; wanted \"%s\"", tp->filter, want);
	cr_assert_eq(PTR_ERR(be), err, "%ld", PTR_ERR(be));
	cr_assert(strstr(tp->err, want), "message\n  \"%s\"\nlacks\n  \"%s\"", tp->err, want);
}

void filter_open_fails(struct tparams *tp, const char *want)
{
	filter_open_fails_with(tp, -EINVAL, want);
}
