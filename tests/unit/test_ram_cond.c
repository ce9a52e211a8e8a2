// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_ram_cond.c - the ram backend's open when its arena
 * thread's condition variable cannot be made on CLOCK_MONOTONIC
 * (blk_cond_init() fails): the open fails, says why, and leaves nothing
 * behind (the sanitizer build checks for leaks), rather than going on
 * with a condition variable whose timed waits would run on another clock.
 *
 * This binary defines pthread_condattr_setclock(), so that every call in
 * it (libblkfs.a's included) comes here: it fails while fail_setclock is
 * set and otherwise passes the call on to the C library's.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"

static bool fail_setclock;

int pthread_condattr_setclock(pthread_condattr_t *attr, clockid_t clock)
{
	static int (*real)(pthread_condattr_t *, clockid_t);

	if (__atomic_load_n(&fail_setclock, __ATOMIC_RELAXED))
		return EINVAL;
	if (!real)
		real = (int (*)(pthread_condattr_t *, clockid_t))dlsym(RTLD_NEXT,
								     "pthread_condattr_setclock");
	cr_assert_not_null(real);
	return real(attr, clock);
}

static struct blk_backend *open_ram(struct blk_params *p, char *err, size_t errlen)
{
	const struct blk_backend_ops *ops = blk_backend_find("ram");

	cr_assert_not_null(ops);
	memset(p, 0, sizeof(*p));
	p->file = "test.conf";
	p->line = 3;
	p->dev = "ram0";
	p->geo.size = 1 << 20;
	p->err = err;
	p->errlen = errlen;
	return ops->open(p, NULL);
}

Test(ram_cond, open_fails_when_cond_init_fails)
{
	struct blk_params p;
	struct blk_backend *be;
	char err[256] = "";

	__atomic_store_n(&fail_setclock, true, __ATOMIC_RELAXED);
	be = open_ram(&p, err, sizeof(err));
	__atomic_store_n(&fail_setclock, false, __ATOMIC_RELAXED);
	if (!IS_ERR_OR_NULL(be))
		be->ops->close(be);
	cr_assert(IS_ERR(be), "open went on without its condition variable");
	cr_assert_eq(PTR_ERR(be), -EINVAL);
	cr_assert(strstr(err, "cannot set up the ram backend"), "message: %s", err);
}

/* The same open succeeds when the clock can be set: the failure above is the cond's. */
Test(ram_cond, open_succeeds_otherwise)
{
	struct blk_params p;
	struct blk_backend *be;
	char err[256] = "";

	be = open_ram(&p, err, sizeof(err));
	cr_assert(!IS_ERR_OR_NULL(be), "open: %s", err);
	be->ops->close(be);
}
