// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_filters.c - the log and delay filters over the fake
 * backend, and core/stack.c opening a device's filter stack.
 *
 * Filters are opened from hand-built struct blk_params with the prefix
 * core/stack.c gives them ("log.", "delay.") and next = the fake. Every
 * test checks that each I/O the filter took completes to its submitter
 * exactly once, with the result the layer below gave.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../core/conf.h"
#include "../../core/stack.h"
#include "fake_backend.h"
#include "helpers.h"

#define MS (1000000ull)		/* ns */

static void sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts))
		;
}

/* ---- a fake below, a filter above ---- */

static char tdir[64];
static struct fake_be *fb;

static void setup(void)
{
	const struct blk_geometry geo = {
		.size = 64 * MiB, .lbs = 512, .pbs = 4096, .max_io = 64 * KiB,
	};

	snprintf(tdir, sizeof(tdir), "/tmp/blkfs-test-filters.XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
	fb = fake_create(&geo);
	cr_assert_not_null(fb);
	tio_done_reset();
}

static void teardown(void)
{
	char cmd[128];

	if (fb)
		fake_destroy(fb);
	fb = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", tdir);
}

TestSuite(log, .init = setup, .fini = teardown);
TestSuite(delay, .init = setup, .fini = teardown);
TestSuite(stack, .init = setup, .fini = teardown);

/* @filter's config in <tdir>/blkfs.conf, its section at line 7; over the fake. */
static void tparams_init(struct tparams *tp, const char *filter)
{
	char file[128];

	snprintf(file, sizeof(file), "%s/blkfs.conf", tdir);
	filter_params_init(tp, filter, fake_backend(fb), file, 7);
}

/* ---- the trace ---- */

struct trace_line {
	double time;
	char op[16];
	unsigned long long pos, len;
	int res;
	unsigned long long lat_us;
};

#define TRACE_MAX 4096

struct trace {
	int nr_headers;
	int n;
	struct trace_line l[TRACE_MAX];
};

/* Parse the trace at @path, checking every line's format strictly. */
static void trace_read(const char *path, struct trace *t)
{
	static const char pat[] =
		"^[0-9]+\\.[0-9]{6} (READ|WRITE|FLUSH|DISCARD|WRITE_ZEROES) [0-9]+ [0-9]+ (0|-[1-9][0-9]*) [0-9]+$";
	FILE *f = fopen(path, "r");
	char line[512];
	double last = 0;
	regex_t re;

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(regcomp(&re, pat, REG_EXTENDED | REG_NOSUB), 0);
	memset(t, 0, sizeof(*t));
	while (fgets(line, sizeof(line), f)) {
		struct trace_line *l;
		size_t n = strlen(line);

		cr_assert(n && line[n - 1] == '\n', "incomplete line: %s", line);
		line[n - 1] = '\0';
		if (line[0] == '#') {
			cr_assert(strstr(line, "TIME OP POS LEN RESULT LATENCY_US"), "%s", line);
			t->nr_headers++;
			last = 0;	/* each open starts its clock at 0 */
			continue;
		}
		cr_assert_eq(regexec(&re, line, 0, NULL, 0), 0, "bad trace line: \"%s\"", line);
		cr_assert_lt(t->n, TRACE_MAX);
		l = &t->l[t->n++];
		cr_assert_eq(sscanf(line, "%lf %15s %llu %llu %d %llu", &l->time, l->op, &l->pos,
				    &l->len, &l->res, &l->lat_us), 6, "%s", line);
		cr_assert_geq(l->time, last, "TIME went back: %s", line);
		last = l->time;
	}
	regfree(&re);
	fclose(f);
}

static void trace_path(char *buf, size_t len)
{
	snprintf(buf, len, "%s/trace", tdir);
}

static struct blk_backend *log_open_in_tdir(struct tparams *tp)
{
	tparams_init(tp, "log");
	tparams_add(tp, "log.path", "trace", 8);
	return filter_open(tp);
}

/* ================================================================== */
/* log */

Test(log, one_line_per_op)
{
	static const struct {
		enum blk_op op;
		uint64_t pos, len;
		const char *name;
	} ops[] = {
		{ BLK_READ, 4096, 8192, "READ" },
		{ BLK_WRITE, 512, 65536, "WRITE" },
		{ BLK_FLUSH, 0, 0, "FLUSH" },
		{ BLK_DISCARD, 1 * MiB, 3 * MiB, "DISCARD" },
		{ BLK_WRITE_ZEROES, 64 * MiB - 512, 512, "WRITE_ZEROES" },
	};
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct trace *t = malloc(sizeof(*t));
	char path[128];
	size_t i;

	cr_assert_not_null(t);
	for (i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct tio io;

		tio_init(&io, ops[i].op, ops[i].pos, ops[i].len, NULL, 0x5a);
		cr_assert_eq(tio_submit(be, &io), 0);
		/* The fake completes inline: the parent is done before submit returns. */
		cr_assert_eq(io.calls, 1, "%s: end_io called %d times", ops[i].name, io.calls);
		cr_assert_eq(io.res, 0);
		tio_free(&io);
	}
	cr_assert_eq(stat_get(be, "log_lines"), 5);

	/* Complete lines are in the file as soon as the I/O completed: no close needed. */
	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->nr_headers, 1);
	cr_assert_eq(t->n, 5);
	for (i = 0; i < 5; i++) {
		cr_assert_str_eq(t->l[i].op, ops[i].name);
		cr_assert_eq(t->l[i].pos, ops[i].pos, "%s", ops[i].name);
		cr_assert_eq(t->l[i].len, ops[i].len, "%s", ops[i].name);
		cr_assert_eq(t->l[i].res, 0);
		cr_assert_lt(t->l[i].time, 60.0);
	}
	/* What the filter passed down is what it was given. */
	cr_assert_eq(fake_log_len(fb), 5);
	for (i = 0; i < 5; i++) {
		struct fake_op fo;

		cr_assert(fake_log_get(fb, i, &fo));
		cr_assert_eq(fo.op, ops[i].op);
		cr_assert_eq(fo.pos, ops[i].pos);
		cr_assert_eq(fo.len, ops[i].len);
	}
	cr_assert_eq(fake_violations(fb), 0);
	be->ops->close(be);
	free(t);
}

Test(log, data_passes_through)
{
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct tio w, r;

	tio_init(&w, BLK_WRITE, 8192, 4096, NULL, 0x5a);
	memset(w.iov.iov_base, 0xa7, 4096);
	cr_assert_eq(tio_submit(be, &w), 0);
	tio_init(&r, BLK_READ, 8192, 4096, NULL, 0x5a);
	memset(r.iov.iov_base, 0, 4096);
	cr_assert_eq(tio_submit(be, &r), 0);
	cr_assert_eq(memcmp(w.iov.iov_base, r.iov.iov_base, 4096), 0);
	tio_free(&w);
	tio_free(&r);
	be->ops->close(be);
}

Test(log, errors_are_logged_and_passed_up)
{
	struct fake_fault f = { .op_mask = FAKE_OP(BLK_WRITE), .countdown = 2, .err = -EIO };
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct trace *t = malloc(sizeof(*t));
	struct tio io[4];
	char path[128];
	int i;

	cr_assert_not_null(t);
	fake_fault_set(fb, &f);
	for (i = 0; i < 3; i++) {
		tio_init(&io[i], BLK_WRITE, (uint64_t)i * 4096, 4096, NULL, 0x5a);
		cr_assert_eq(tio_submit(be, &io[i]), 0);
	}
	f = (struct fake_fault){ .op_mask = FAKE_OP(BLK_FLUSH), .countdown = 1, .err = -ENOSPC };
	fake_fault_set(fb, &f);
	tio_init(&io[3], BLK_FLUSH, 0, 0, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io[3]), 0);

	cr_assert_eq(io[0].calls, 1);
	cr_assert_eq(io[0].res, 0);
	cr_assert_eq(io[1].calls, 1);
	cr_assert_eq(io[1].res, -EIO);
	cr_assert_eq(io[2].calls, 1);
	cr_assert_eq(io[2].res, 0);
	cr_assert_eq(io[3].calls, 1);
	cr_assert_eq(io[3].res, -ENOSPC);

	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 4);
	cr_assert_eq(t->l[0].res, 0);
	cr_assert_eq(t->l[1].res, -EIO);
	cr_assert_eq(t->l[1].pos, 4096);
	cr_assert_eq(t->l[2].res, 0);
	cr_assert_str_eq(t->l[3].op, "FLUSH");
	cr_assert_eq(t->l[3].res, -ENOSPC);
	for (i = 0; i < 4; i++)
		tio_free(&io[i]);
	be->ops->close(be);
	free(t);
}

/* Latency is submit to completion, in the layer below's time. */
Test(log, latency_and_late_completion)
{
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct trace *t = malloc(sizeof(*t));
	struct tio a, b;
	char path[128];

	cr_assert_not_null(t);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&a, BLK_WRITE, 0, 4096, NULL, 0x5a);
	tio_init(&b, BLK_READ, 65536, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &a), 0);
	cr_assert_eq(tio_submit(be, &b), 0);
	cr_assert_eq(fake_pending(fb), 2);
	cr_assert_eq(tio_calls(&a) + tio_calls(&b), 0, "completed before the layer below did");
	sleep_ms(30);
	/* Out of order: the READ first. */
	cr_assert(fake_complete_one(fb, 1));
	cr_assert_eq(tio_calls(&b), 1);
	cr_assert_eq(tio_calls(&a), 0);
	cr_assert(fake_complete_one(fb, 0));
	cr_assert_eq(tio_calls(&a), 1);

	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 2);
	cr_assert_str_eq(t->l[0].op, "READ");
	cr_assert_str_eq(t->l[1].op, "WRITE");
	cr_assert_geq(t->l[0].lat_us, 30000, "%llu", t->l[0].lat_us);
	cr_assert_geq(t->l[1].lat_us, 30000, "%llu", t->l[1].lat_us);
	cr_assert_lt(t->l[1].lat_us, 10000000, "%llu", t->l[1].lat_us);
	cr_assert_geq(t->l[1].time, 0.030);
	tio_free(&a);
	tio_free(&b);
	be->ops->close(be);
	free(t);
}

/* Many threads, completions on the fake's thread in shuffled order. */
struct log_worker {
	struct blk_backend *be;
	int id;
};

#define LW_THREADS 4
#define LW_IOS 300

static void *log_worker_main(void *arg)
{
	struct log_worker *w = arg;
	struct tio *io = calloc(LW_IOS, sizeof(*io));
	int i;

	if (!io)
		return (void *)1;
	for (i = 0; i < LW_IOS; i++) {
		uint64_t pos = ((uint64_t)w->id * LW_IOS + (uint64_t)i) * 4096;

		tio_init(&io[i], i % 7 == 6 ? BLK_FLUSH : BLK_WRITE,
			 i % 7 == 6 ? 0 : pos, i % 7 == 6 ? 0 : 4096, NULL, 0x5a);
		if (tio_submit(w->be, &io[i]))
			return (void *)1;
	}
	return io;
}

Test(log, threads_and_deferred_completions)
{
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct log_worker w[LW_THREADS];
	struct tio *ios[LW_THREADS];
	pthread_t th[LW_THREADS];
	struct trace *t = malloc(sizeof(*t));
	unsigned long writes = 0, flushes = 0;
	char path[128];
	int i, j;

	cr_assert_not_null(t);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 300);
	for (i = 0; i < LW_THREADS; i++) {
		w[i] = (struct log_worker){ .be = be, .id = i };
		cr_assert_eq(pthread_create(&th[i], NULL, log_worker_main, &w[i]), 0);
	}
	for (i = 0; i < LW_THREADS; i++) {
		void *r;

		cr_assert_eq(pthread_join(th[i], &r), 0);
		cr_assert(r && r != (void *)1, "worker %d failed", i);
		ios[i] = r;
	}
	cr_assert(tio_done_wait(LW_THREADS * LW_IOS, WAIT_MS), "completions missing");
	for (i = 0; i < LW_THREADS; i++) {
		for (j = 0; j < LW_IOS; j++) {
			cr_assert_eq(tio_calls(&ios[i][j]), 1, "thread %d io %d", i, j);
			cr_assert_eq(ios[i][j].res, 0);
			tio_free(&ios[i][j]);
		}
		free(ios[i]);
	}
	be->ops->close(be);

	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, LW_THREADS * LW_IOS);
	for (i = 0; i < t->n; i++) {
		if (!strcmp(t->l[i].op, "WRITE"))
			writes++;
		else if (!strcmp(t->l[i].op, "FLUSH"))
			flushes++;
	}
	cr_assert_eq(writes + flushes, LW_THREADS * LW_IOS);
	cr_assert_eq(flushes, LW_THREADS * (LW_IOS / 7));
	free(t);
}

/* A layer below that refuses every I/O (submit returns -errno). */
static int refuse_submit(struct blk_backend *be, struct blk_io *io)
{
	(void)be;
	(void)io;
	return -EBUSY;
}

/* A real geometry: blk_submit() checks each I/O against it on the way in. */
static void refuse_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	(void)be;
	*geo = (struct blk_geometry){ .size = 1 << 20, .lbs = 512, .pbs = 512, .io_min = 512,
				      .io_opt = 512, .max_io = 1 << 20, .dma_align = 1 };
}

static const struct blk_backend_ops refuse_ops = {
	.name = "refuse",
	.geometry = refuse_geometry,
	.submit = refuse_submit,
};

Test(log, refused_below_is_refused_above)
{
	struct blk_backend refuse = { .ops = &refuse_ops };
	struct trace *t = malloc(sizeof(*t));
	struct blk_backend *be;
	struct tparams tp;
	struct tio io;
	char path[128];

	cr_assert_not_null(t);
	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", "trace", 8);
	be = blk_backend_find("log")->open(&tp.p, &refuse);
	cr_assert(!IS_ERR_OR_NULL(be), "%s", tp.err);
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), -EBUSY);
	cr_assert_eq(io.calls, 0, "a refused I/O must not complete");
	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 1);
	cr_assert_eq(t->l[0].res, -EBUSY);
	tio_free(&io);
	be->ops->close(be);
	free(t);
}

Test(log, geometry_is_the_layer_belows)
{
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct blk_geometry g;

	be->ops->geometry(be, &g);
	cr_assert_eq(memcmp(&g, fake_geometry(fb), sizeof(g)), 0);
	be->ops->close(be);
}

Test(log, path_relative_to_config_and_append)
{
	struct trace *t = malloc(sizeof(*t));
	struct blk_backend *be;
	struct tparams tp;
	char path[192], want[192];
	struct tio io;

	cr_assert_not_null(t);
	cr_assert_eq(mkdir(strcat(strcpy(path, tdir), "/sub"), 0755), 0);

	/* Relative: next to the config file, shown absolute. */
	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", "sub/t1", 8);
	be = filter_open(&tp);
	snprintf(want, sizeof(want), "%s/sub/t1\n", tdir);
	cr_assert_str_eq(attr_show(be, "path"), want);
	cr_assert_null(attr_find(be, "path")->store, "path is read-only");
	cr_assert(tp.v[0].used, "log.path not taken");
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), 0);
	be->ops->close(be);

	/* append = no (the default) truncates. */
	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", "sub/t1", 8);
	tparams_add(&tp, "log.append", "no", 9);
	be = filter_open(&tp);
	cr_assert(tp.v[1].used);
	cr_assert_eq(tio_submit(be, &io), 0);
	be->ops->close(be);
	snprintf(path, sizeof(path), "%s/sub/t1", tdir);
	trace_read(path, t);
	cr_assert_eq(t->nr_headers, 1);
	cr_assert_eq(t->n, 1);

	/* append = yes keeps what is there; each open adds a header. */
	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", path, 8);	/* absolute this time */
	tparams_add(&tp, "log.append", "yes", 9);
	be = filter_open(&tp);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	be->ops->close(be);
	trace_read(path, t);
	cr_assert_eq(t->nr_headers, 2);
	cr_assert_eq(t->n, 3);

	/* A config file given without a directory: relative to the cwd. */
	tparams_init(&tp, "log");
	tp.p.file = "blkfs.conf";
	tparams_add(&tp, "log.path", "t2", 8);
	cr_assert_eq(chdir(tdir), 0);
	be = filter_open(&tp);
	snprintf(want, sizeof(want), "%s/t2\n", tdir);
	cr_assert_str_eq(attr_show(be, "path"), want);
	be->ops->close(be);
	cr_assert_eq(chdir("/"), 0);
	tio_free(&io);
	free(t);
}

Test(log, open_errors)
{
	struct tparams tp;
	char want[256];

	tparams_init(&tp, "log");
	snprintf(want, sizeof(want), "%s:7: log.path: the log filter needs a trace file", tp.file);
	filter_open_fails(&tp, want);

	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", "nodir/trace", 9);
	snprintf(want, sizeof(want), "%s:9: log.path: cannot open %s/nodir/trace: No such file or directory",
		 tp.file, tdir);
	filter_open_fails_with(&tp, -ENOENT, want);

	tparams_init(&tp, "log");
	tparams_add(&tp, "log.path", "trace", 9);
	tparams_add(&tp, "log.append", "maybe", 10);
	snprintf(want, sizeof(want), "%s:10: log.append: 'maybe' is not yes/no", tp.file);
	filter_open_fails(&tp, want);

	/* Keys of another filter or unprefixed are not the log filter's. */
	tparams_init(&tp, "log");
	tparams_add(&tp, "path", "trace", 9);
	tparams_add(&tp, "delay.path", "trace", 10);
	filter_open_fails(&tp, "log.path: the log filter needs a trace file");
}

Test(log, enabled_attr)
{
	struct trace *t = malloc(sizeof(*t));
	static const char *const bad[] = { "2", "", "\n", "yes please", "1\n\n", "enabled", "-1" };
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	char path[128];
	struct tio io;
	size_t i;

	cr_assert_not_null(t);
	cr_assert_str_eq(attr_show(be, "enabled"), "1\n");
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), 0);

	cr_assert_eq(attr_store(be, "enabled", "0\n"), 0);
	cr_assert_str_eq(attr_show(be, "enabled"), "0\n");
	for (i = 0; i < 3; i++)
		cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(io.calls, 4, "every I/O completes once, traced or not");
	cr_assert_eq(fake_log_len(fb), 4, "untraced I/O still reaches the layer below");

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(attr_store(be, "enabled", bad[i]), -EINVAL, "\"%s\"", bad[i]);
		cr_assert_str_eq(attr_show(be, "enabled"), "0\n", "changed by \"%s\"", bad[i]);
	}
	cr_assert_eq(attr_store(be, "enabled", "1"), 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(attr_store(be, "enabled", "off"), 0);
	cr_assert_str_eq(attr_show(be, "enabled"), "0\n");
	cr_assert_eq(attr_store(be, "enabled", "on\n"), 0);
	cr_assert_str_eq(attr_show(be, "enabled"), "1\n");

	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 2);
	cr_assert_eq(stat_get(be, "log_lines"), 2);
	cr_assert_eq(stat_get(be, "log_write_errors"), 0);
	tio_free(&io);
	be->ops->close(be);
	free(t);
}

/* Tracing switched off while an I/O is below: that I/O still gets its line. */
Test(log, disable_with_io_in_flight)
{
	struct tparams tp;
	struct blk_backend *be = log_open_in_tdir(&tp);
	struct trace *t = malloc(sizeof(*t));
	char path[128];
	struct tio io;

	cr_assert_not_null(t);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(attr_store(be, "enabled", "0"), 0);
	cr_assert_eq(fake_complete_all(fb, false), 1);
	cr_assert_eq(io.calls, 1);
	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 1);
	tio_free(&io);
	be->ops->close(be);
	free(t);
}

/* ================================================================== */
/* delay */

static struct blk_backend *delay_open_with(struct tparams *tp, const char *key,
					   const char *value)
{
	tparams_init(tp, "delay");
	if (key)
		tparams_add(tp, key, value, 8);
	return filter_open(tp);
}

/* The time from submit to the parent's completion, waiting for it. */
static uint64_t wait_latency_ns(struct tio *io, unsigned int timeout_ms)
{
	uint64_t end = blk_now_ns() + timeout_ms * MS;

	while (tio_calls(io) == 0 && blk_now_ns() < end)
		sleep_ms(1);
	cr_assert_eq(tio_calls(io), 1, "end_io called %d times", tio_calls(io));
	return io->done_ns - io->submit_ns;
}

Test(delay, holds_each_op_its_time)
{
	static const struct {
		const char *key;
		enum blk_op op;
		uint64_t pos, len;
	} cases[] = {
		{ "delay.read", BLK_READ, 0, 4096 },
		{ "delay.write", BLK_WRITE, 4096, 4096 },
		{ "delay.flush", BLK_FLUSH, 0, 0 },
		{ "delay.discard", BLK_DISCARD, 0, 1 * MiB },
		{ "delay.discard", BLK_WRITE_ZEROES, 1 * MiB, 1 * MiB },
	};
	size_t i, j;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tparams tp;
		struct blk_backend *be = delay_open_with(&tp, cases[i].key, "30ms");
		uint64_t lat;

		cr_assert(tp.v[0].used, "%s not taken", cases[i].key);
		/* The delayed op waits 30 ms... */
		for (j = 0; j < sizeof(cases) / sizeof(cases[0]); j++) {
			struct tio io;
			bool held = !strcmp(cases[j].key, cases[i].key);

			tio_init(&io, cases[j].op, cases[j].pos, cases[j].len, NULL, 0x5a);
			cr_assert_eq(tio_submit(be, &io), 0);
			if (!held) {
				/* ...the others go on at once (the fake completes inline). */
				cr_assert_eq(tio_calls(&io), 1, "%s with only %s set",
					     blk_op_name(cases[j].op), cases[i].key);
				tio_free(&io);
				continue;
			}
			cr_assert_eq(tio_calls(&io), 0, "%s not held", blk_op_name(cases[j].op));
			lat = wait_latency_ns(&io, WAIT_MS);
			cr_assert_geq(lat, 30 * MS, "%s: %llu ns", blk_op_name(cases[j].op),
				      (unsigned long long)lat);
			/* late on a busy machine, but not lost: a bound only a lost timer misses */
			cr_assert_lt(lat, 30 * MS + 10000 * MS, "%s: %llu ns",
				     blk_op_name(cases[j].op), (unsigned long long)lat);
			cr_assert_eq(io.res, 0);
			tio_free(&io);
		}
		be->ops->close(be);
	}
}

/* latency = delay + the layer below's time */
Test(delay, adds_to_the_layer_belows_latency)
{
	struct tparams tp;
	struct blk_backend *be = delay_open_with(&tp, "delay.write", "20ms");
	uint64_t lat;
	struct tio io;

	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(fake_pending(fb), 0, "passed on before its time");
	cr_assert(fake_wait_pending(fb, 1, WAIT_MS));
	cr_assert_geq(blk_now_ns() - io.submit_ns, 20 * MS);
	sleep_ms(20);
	cr_assert_eq(tio_calls(&io), 0);
	cr_assert(fake_complete_one(fb, 0));
	lat = wait_latency_ns(&io, WAIT_MS);
	cr_assert_geq(lat, 40 * MS, "%llu", (unsigned long long)lat);
	tio_free(&io);
	be->ops->close(be);
}

Test(delay, random_range_stays_in_range)
{
	struct tparams tp;
	struct blk_backend *be = delay_open_with(&tp, "delay.read", "5ms-15ms");
	uint64_t lo = UINT64_MAX, hi = 0;
	struct tio io[40];
	int i;

	/* All at once: each one's own draw, not a queue behind the previous. */
	for (i = 0; i < 40; i++) {
		tio_init(&io[i], BLK_READ, (uint64_t)i * 512, 512, NULL, 0x5a);
		cr_assert_eq(tio_submit(be, &io[i]), 0);
	}
	cr_assert(tio_done_wait(40, WAIT_MS));
	for (i = 0; i < 40; i++) {
		uint64_t lat = wait_latency_ns(&io[i], 0);

		cr_assert_geq(lat, 5 * MS, "io %d: %llu ns", i, (unsigned long long)lat);
		cr_assert_lt(lat, 15 * MS + 10000 * MS, "io %d: %llu ns", i,
			     (unsigned long long)lat);
		lo = lat < lo ? lat : lo;
		hi = lat > hi ? lat : hi;
		tio_free(&io[i]);
	}
	/* Drawn, not fixed: 40 uniform draws over 10 ms spread more than 3 ms. */
	cr_assert_gt(hi - lo, 3 * MS, "lo %llu hi %llu", (unsigned long long)lo,
		     (unsigned long long)hi);
	cr_assert_eq(stat_get(be, "delayed_ios"), 40);
	cr_assert_eq(stat_get(be, "delay_held_ios"), 0);
	be->ops->close(be);
}

/*
 * BLK_IO_WAITED goes down with an I/O submitted in the caller's thread, and
 * not with one the timer thread submits later; log passes it on too.
 */
Test(delay, waited_flag_only_from_the_callers_thread)
{
	struct tparams tp, lp;
	struct blk_backend *be = delay_open_with(&tp, "delay.write", "10ms");
	struct tio r, w;
	struct fake_op fo;

	tio_init(&r, BLK_READ, 0, 512, NULL, 0);
	tio_init(&w, BLK_WRITE, 512, 512, NULL, 0x5a);
	r.io.flags = w.io.flags = BLK_IO_WAITED;
	cr_assert_eq(tio_submit(be, &r), 0);
	cr_assert_eq(tio_calls(&r), 1, "a read that is not held ends inline");
	cr_assert_eq(tio_submit(be, &w), 0);
	cr_assert(tio_wait(&w, WAIT_MS));
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.op, BLK_READ);
	cr_assert_eq(fo.flags, BLK_IO_WAITED, "inline: the flag goes down");
	cr_assert(fake_log_get(fb, 1, &fo));
	cr_assert_eq(fo.op, BLK_WRITE);
	cr_assert_eq(fo.flags, 0, "held, then submitted by the timer thread: no flag");
	tio_free(&r);
	tio_free(&w);
	be->ops->close(be);

	fake_log_clear(fb);
	be = log_open_in_tdir(&lp);
	tio_init(&w, BLK_WRITE, 512, 512, NULL, 0x5a);
	w.io.flags = BLK_IO_WAITED;
	cr_assert_eq(tio_submit(be, &w), 0);
	cr_assert_eq(tio_calls(&w), 1);
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.flags, BLK_IO_WAITED, "log passes the flag on");
	tio_free(&w);
	be->ops->close(be);
}

/* The heap: an I/O due earlier goes first, whatever the submission order. */
Test(delay, earliest_due_goes_first)
{
	struct tparams tp;
	struct blk_backend *be = delay_open_with(&tp, "delay.write", "200ms");
	struct tio a, b, c;
	struct fake_op fo;

	tio_init(&a, BLK_WRITE, 0, 512, NULL, 0x5a);
	tio_init(&b, BLK_WRITE, 512, 512, NULL, 0x5a);
	tio_init(&c, BLK_WRITE, 1024, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &a), 0);
	cr_assert_eq(attr_store(be, "write", "100ms"), 0);
	cr_assert_eq(tio_submit(be, &b), 0);
	cr_assert_eq(attr_store(be, "write", "10ms\n"), 0);
	cr_assert_eq(tio_submit(be, &c), 0);
	cr_assert_eq(stat_get(be, "delay_held_ios"), 3);
	cr_assert(tio_done_wait(3, WAIT_MS));
	cr_assert(fake_log_get(fb, 0, &fo));
	cr_assert_eq(fo.pos, 1024);
	cr_assert(fake_log_get(fb, 1, &fo));
	cr_assert_eq(fo.pos, 512);
	cr_assert(fake_log_get(fb, 2, &fo));
	cr_assert_eq(fo.pos, 0);
	cr_assert_geq(wait_latency_ns(&a, 0), 200 * MS);
	cr_assert_geq(wait_latency_ns(&b, 0), 100 * MS);
	cr_assert_geq(wait_latency_ns(&c, 0), 10 * MS);
	tio_free(&a);
	tio_free(&b);
	tio_free(&c);
	be->ops->close(be);
}

Test(delay, attrs_round_trip)
{
	static const struct {
		const char *in, *out;
	} good[] = {
		{ "2ms", "2ms\n" },
		{ "2ms\n", "2ms\n" },
		{ "500us", "500us\n" },
		{ "1500us", "1500us\n" },
		{ "2000us", "2ms\n" },
		{ "1s", "1s\n" },
		{ "3000ms", "3s\n" },
		{ "0", "0\n" },
		{ "0ms", "0\n" },
		{ "1ms-5ms", "1ms-5ms\n" },
		{ "1ms - 5ms\n", "1ms-5ms\n" },
		{ "0-250us", "0-250us\n" },
		{ "3ms-3ms", "3ms\n" },
		{ "3600s", "1h\n" },
		{ "90s", "90s\n" },
		{ "2m", "2m\n" },
		{ "1ns", "1ns\n" },
		{ "1500ns-2us", "1500ns-2us\n" },
		{ "1000us-1s", "1ms-1s\n" },
	};
	static const char *const bad[] = {
		"", "\n", "5", "fast", "2 ms", "2mss", "2MS", "-1ms", "5ms-1ms", "1ms-",
		"-", "1ms-2ms-3ms", "3601s", "2h", "99999999999999999999999ms", "1.5ms",
		"2ms\n\n", "2ms-3", "0-5", "1m1s", "61m",
		"1000000000000000000000000000000000000000000000000000000000000000000000us",
	};
	static const char *const names[] = { "read", "write", "flush", "discard" };
	struct tparams tp;
	struct blk_backend *be = delay_open_with(&tp, NULL, NULL);
	size_t i, k;
	char small[3];

	for (k = 0; k < 4; k++) {
		cr_assert_str_eq(attr_show(be, names[k]), "0\n");
		for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
			cr_assert_eq(attr_store(be, names[k], good[i].in), 0, "%s \"%s\"",
				     names[k], good[i].in);
			cr_assert_str_eq(attr_show(be, names[k]), good[i].out, "%s \"%s\"",
					 names[k], good[i].in);
		}
		cr_assert_eq(attr_store(be, names[k], "7ms-9ms"), 0);
		for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			cr_assert_eq(attr_store(be, names[k], bad[i]), -EINVAL, "%s \"%s\"",
				     names[k], bad[i]);
			cr_assert_str_eq(attr_show(be, names[k]), "7ms-9ms\n",
					 "%s changed by \"%s\"", names[k], bad[i]);
		}
		/* Not NUL-terminated: the length is what counts. */
		cr_assert_eq(attr_find(be, names[k])->store(be, "4msXXXX", 3), 0);
		cr_assert_str_eq(attr_show(be, names[k]), "4ms\n");
	}
	/* The others are untouched by one's store. */
	cr_assert_eq(attr_store(be, "write", "1s"), 0);
	cr_assert_str_eq(attr_show(be, "read"), "4ms\n");
	/* A buffer too small for the value. */
	cr_assert_lt(attr_find(be, "write")->show(be, small, sizeof(small)), 0);
	be->ops->close(be);
}

Test(delay, open_values_and_errors)
{
	struct tparams tp;
	struct blk_backend *be;
	char want[256];

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.read", "1ms-5ms", 8);
	tparams_add(&tp, "delay.write", "2ms", 9);
	tparams_add(&tp, "delay.flush", "1s", 10);
	tparams_add(&tp, "delay.discard", "0", 11);
	be = filter_open(&tp);
	cr_assert_str_eq(attr_show(be, "read"), "1ms-5ms\n");
	cr_assert_str_eq(attr_show(be, "write"), "2ms\n");
	cr_assert_str_eq(attr_show(be, "flush"), "1s\n");
	cr_assert_str_eq(attr_show(be, "discard"), "0\n");
	for (int i = 0; i < 4; i++)
		cr_assert(tp.v[i].used, "%s", tp.v[i].key);
	be->ops->close(be);

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.write", "fast", 12);
	snprintf(want, sizeof(want), "%s:12: delay.write: 'fast' is not a delay (allowed: 0, ",
		 tp.file);
	filter_open_fails(&tp, want);

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.read", "5ms-1ms", 12);
	filter_open_fails(&tp, "delay.read: '5ms-1ms' is not a delay");

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.flush", "2h", 12);
	filter_open_fails(&tp, "delay.flush: '2h' is too long (allowed: at most 1h");

	/* A bare number is refused: 2 what? */
	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.write", "2", 12);
	filter_open_fails(&tp, "delay.write: '2' is not a delay");

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.flush", "7200s", 12);
	filter_open_fails(&tp, "delay.flush: '7200s' is too long (allowed: at most 1h");
}

/*
 * Close with I/Os held and below: every one is passed on at once (a 10 s
 * delay does not hold close up) and completes to its submitter once before
 * close returns.
 */
Test(delay, close_with_io_in_flight)
{
	struct tparams tp;
	struct blk_backend *be;
	struct tio *io = calloc(200, sizeof(*io));
	uint64_t t0;
	int i;

	cr_assert_not_null(io);
	tparams_init(&tp, "delay");
	/* a close that waited would take a minute: no busy machine is that slow */
	tparams_add(&tp, "delay.write", "60s", 8);
	tparams_add(&tp, "delay.read", "0-2ms", 9);
	be = filter_open(&tp);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 2000);
	for (i = 0; i < 200; i++) {
		tio_init(&io[i], i % 2 ? BLK_WRITE : BLK_READ, (uint64_t)i * 4096, 4096, NULL, 0x5a);
		cr_assert_eq(tio_submit(be, &io[i]), 0);
	}
	sleep_ms(3);
	t0 = blk_now_ns();
	be->ops->close(be);
	cr_assert_lt(blk_now_ns() - t0, 30000 * MS, "close waited for the delay: %llu ns",
		     (unsigned long long)(blk_now_ns() - t0));
	/* Nothing completes after close returned, and nothing is left below. */
	cr_assert_eq(tio_done(), 200);
	cr_assert_eq(fake_pending(fb), 0);
	for (i = 0; i < 200; i++) {
		cr_assert_eq(io[i].calls, 1, "io %d: %d calls", i, io[i].calls);
		cr_assert_eq(io[i].res, 0);
		tio_free(&io[i]);
	}
	free(io);
}

/* Errors from below reach the submitter unchanged, after the delay. */
Test(delay, errors_pass_through)
{
	struct fake_fault f = { .op_mask = FAKE_OP(BLK_WRITE), .countdown = 1, .err = -EIO };
	struct tparams tp;
	struct blk_backend *be = delay_open_with(&tp, "delay.write", "5ms");
	struct blk_backend refuse = { .ops = &refuse_ops };
	struct tio io;

	fake_fault_set(fb, &f);
	tio_init(&io, BLK_WRITE, 0, 512, NULL, 0x5a);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 5 * MS);
	cr_assert_eq(io.res, -EIO);
	be->ops->close(be);

	/* Refused below: with no delay, submit says so; held, end_io says so. */
	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.write", "5ms", 8);
	be = blk_backend_find("delay")->open(&tp.p, &refuse);
	cr_assert(!IS_ERR_OR_NULL(be), "%s", tp.err);
	tio_done_reset();
	io.calls = 0;
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert(tio_done_wait(1, WAIT_MS));
	cr_assert_eq(io.calls, 1);
	cr_assert_eq(io.res, -EBUSY);
	cr_assert_eq(attr_store(be, "write", "0"), 0);
	io.calls = 0;
	cr_assert_eq(tio_submit(be, &io), -EBUSY);
	cr_assert_eq(io.calls, 0);
	be->ops->close(be);
	tio_free(&io);
}

struct delay_worker {
	struct blk_backend *be;
	int id;
	struct tio *io;
};

#define DW_THREADS 4
#define DW_IOS 250

static void *delay_worker_main(void *arg)
{
	struct delay_worker *w = arg;
	int i;

	for (i = 0; i < DW_IOS; i++) {
		struct tio *t = &w->io[i];

		tio_init(t, i % 3 ? BLK_WRITE : BLK_READ,
			 ((uint64_t)w->id * DW_IOS + (uint64_t)i) * 4096, 4096, NULL, 0x5a);
		if (tio_submit(w->be, t))
			return (void *)1;
	}
	return NULL;
}

Test(delay, threads_submit_while_timer_runs)
{
	struct tparams tp;
	struct blk_backend *be;
	struct delay_worker w[DW_THREADS];
	pthread_t th[DW_THREADS];
	int i, j;

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.write", "0-3ms", 8);
	tparams_add(&tp, "delay.read", "1ms", 9);
	be = filter_open(&tp);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_set_delay(fb, 200);
	for (i = 0; i < DW_THREADS; i++) {
		w[i] = (struct delay_worker){ .be = be, .id = i };
		w[i].io = calloc(DW_IOS, sizeof(struct tio));
		cr_assert_not_null(w[i].io);
		cr_assert_eq(pthread_create(&th[i], NULL, delay_worker_main, &w[i]), 0);
	}
	for (i = 0; i < DW_THREADS; i++) {
		void *r;

		cr_assert_eq(pthread_join(th[i], &r), 0);
		cr_assert_null(r, "worker %d: a submit failed", i);
	}
	cr_assert(tio_done_wait(DW_THREADS * DW_IOS, WAIT_MS), "completions missing");
	be->ops->close(be);
	for (i = 0; i < DW_THREADS; i++) {
		for (j = 0; j < DW_IOS; j++) {
			cr_assert_eq(w[i].io[j].calls, 1, "thread %d io %d", i, j);
			if (w[i].io[j].io.op == BLK_READ)
				cr_assert_geq(w[i].io[j].done_ns - w[i].io[j].submit_ns, 1 * MS);
			tio_free(&w[i].io[j]);
		}
		free(w[i].io);
	}
	cr_assert_eq(fake_violations(fb), 0);
	cr_assert_eq(fake_total_count(fb, FAKE_ANY), DW_THREADS * DW_IOS);
}

/* A latency map: a region slower (or faster) than the op's delay. */
Test(delay, latency_map)
{
	struct tparams tp;
	struct blk_backend *be;
	struct tio io;
	uint64_t lat;

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.read", "5ms", 8);
	/* the slow region far above the op's 5ms, so a busy machine cannot blur them */
	tparams_add(&tp, "delay.map", "1M 1M 500ms, 4M 4K 0", 9);
	be = filter_open(&tp);
	cr_assert_str_eq(attr_show_list(be, "map"), "1048576 1048576 500ms\n4194304 4096 0\n");
	/* inside the slow region */
	tio_init(&io, BLK_READ, MiB + 4096, 4096, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	lat = wait_latency_ns(&io, WAIT_MS);
	cr_assert_geq(lat, 500 * MS, "%llu", (unsigned long long)lat);
	tio_free(&io);
	/* overlapping its edge is inside too */
	tio_init(&io, BLK_READ, MiB - 512, 1024, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 500 * MS);
	tio_free(&io);
	/* outside: the op's delay */
	tio_init(&io, BLK_READ, 3 * MiB, 4096, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	lat = wait_latency_ns(&io, WAIT_MS);
	cr_assert(lat >= 5 * MS && lat < 500 * MS, "%llu", (unsigned long long)lat);
	tio_free(&io);
	/* a fast region: 0 in place of the 5ms, so it goes at once */
	tio_init(&io, BLK_READ, 4 * MiB, 4096, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(tio_calls(&io), 1);
	tio_free(&io);
	/* writes too (the map has no op), flushes never (no range) */
	tio_init(&io, BLK_WRITE, MiB, 512, NULL, 1);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 500 * MS);
	tio_free(&io);
	tio_init(&io, BLK_FLUSH, 0, 0, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_eq(tio_calls(&io), 1);
	cr_assert_eq(stat_get(be, "delay_map_hits"), 4);

	/* live: lines add, the longest of overlapping entries wins, clear empties */
	cr_assert_eq(attr_store(be, "map", "1M 4K 800ms\n\n"), 0);
	tio_init(&io, BLK_READ, MiB, 4096, NULL, 0);
	cr_assert_eq(tio_submit(be, &io), 0);
	cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 800 * MS);
	tio_free(&io);
	attr_refuses(be, "map", "1M 4K");
	attr_refuses(be, "map", "1M 4K 5");
	attr_refuses(be, "map", "1M 0 5ms");
	attr_refuses(be, "map", "64M 512 5ms");
	attr_refuses(be, "map", "1M 4K 2h");
	attr_refuses(be, "map", "2M 4K 5ms\n3M 4K fast");
	attr_refuses(be, "map", "");
	cr_assert_eq(attr_store(be, "map", "clear"), 0);
	cr_assert_str_eq(attr_show_list(be, "map"), "");
	be->ops->close(be);

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.map", "1M 1M 60", 9);
	filter_open_fails(&tp, "delay.map: '1M 1M 60' is not a latency map inside the device");
}

/* Tail latency: one draw per I/O; the same seed picks the same I/Os. */
Test(delay, tail_latency_replays_from_the_seed)
{
	struct tparams tp;
	struct blk_backend *be;
	char a[401], b[401];
	int i, n = 0, pass;

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.p90", "20ms", 8);
	tparams_add(&tp, "delay.seed", "31337", 9);
	be = filter_open(&tp);
	cr_assert_str_eq(attr_show(be, "p90"), "20ms\n");
	cr_assert_str_eq(attr_show(be, "p99"), "0\n");
	cr_assert_str_eq(attr_show(be, "seed"), "31337\n");
	for (pass = 0; pass < 2; pass++) {
		char *m = pass ? b : a;

		tio_done_reset();
		for (i = 0; i < 400; i++) {
			struct tio *io = malloc(sizeof(*io));

			cr_assert_not_null(io);
			tio_init(io, BLK_WRITE, (uint64_t)i * 512, 512, NULL, 1);
			cr_assert_eq(tio_submit(be, io), 0);
			/* no base delay: an I/O without a tail goes (and ends) at once */
			m[i] = tio_calls(io) ? '.' : 'T';
			n += m[i] == 'T';
			cr_assert(tio_wait(io, WAIT_MS));
			tio_free(io);
			free(io);
		}
		m[400] = '\0';
		cr_assert_eq(attr_store(be, "seed", "31337"), 0);
	}
	cr_assert_str_eq(a, b, "the same seed picked other I/Os");
	/* 10% of 400 each pass, within 5 sd */
	cr_assert(n > 2 * 15 && n < 2 * 70, "%d tails in 800", n);
	cr_assert_eq(stat_get(be, "delay_tail_ios"), (uint64_t)n);
	/* a tail never shortens: p99 below the base leaves the base */
	cr_assert_eq(attr_store(be, "p90", "0"), 0);
	cr_assert_eq(attr_store(be, "p9999", "1ms"), 0);
	cr_assert_eq(attr_store(be, "write", "30ms"), 0);
	{
		struct tio io;

		tio_init(&io, BLK_WRITE, 0, 512, NULL, 1);
		cr_assert_eq(tio_submit(be, &io), 0);
		cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 30 * MS);
		tio_free(&io);
	}
	/* p99 = 1 in 100 over every op, flush included: count on a fixed seed */
	cr_assert_eq(attr_store(be, "write", "0"), 0);
	cr_assert_eq(attr_store(be, "p9999", "0"), 0);
	cr_assert_eq(attr_store(be, "p99", "10ms-20ms"), 0);
	cr_assert_str_eq(attr_show(be, "p99"), "10ms-20ms\n");
	attr_refuses(be, "p99", "20");
	attr_refuses(be, "p99", "2h");
	attr_refuses(be, "seed", "-5");
	be->ops->close(be);
}

/* More held than the pool: served (counted), all complete; the heap grows past it. */
Test(delay, pool_overflow)
{
	struct tparams tp;
	struct blk_backend *be;
	struct tio io[6];
	int i;

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.pool", "2", 8);
	tparams_add(&tp, "delay.write", "20ms", 9);
	be = filter_open(&tp);
	tio_done_reset();
	for (i = 0; i < 6; i++) {
		tio_init(&io[i], BLK_WRITE, (uint64_t)i * 512, 512, NULL, 1);
		cr_assert_eq(tio_submit(be, &io[i]), 0);
	}
	cr_assert_eq(stat_get(be, "delay_pool_allocs"), 4);
	cr_assert_eq(stat_get(be, "delay_pool_max_used"), 6);
	/* the timer queue, sized for 2, grew twice (4, then 8) */
	cr_assert_eq(stat_get(be, "delay_timer_grows"), 2);
	cr_assert(tio_done_wait(6, WAIT_MS));
	for (i = 0; i < 6; i++) {
		cr_assert_eq(io[i].calls, 1);
		tio_free(&io[i]);
	}
	cr_assert_eq(stat_get(be, "delay_held_ios"), 0);
	be->ops->close(be);

	tparams_init(&tp, "delay");
	tparams_add(&tp, "delay.pool", "65537", 8);
	filter_open_fails(&tp, "delay.pool: '65537' is not a number from 1 to 65536");
}

/* ================================================================== */
/* stack: conf + core/stack.c */

static struct conf conf;
static char cerr[1024];

static void conf_text(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void conf_text(const char *fmt, ...)
{
	char text[2048], file[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	snprintf(file, sizeof(file), "%s/blkfs.conf", tdir);
	cr_assert_eq(conf_parse_buf(text, strlen(text), file, &conf, cerr, sizeof(cerr)), 0,
		     "%s", cerr);
}

Test(stack, filters_in_config_order)
{
	struct conf_device *d;
	struct blk_backend *top;
	struct blk_geometry g, below;
	struct trace *t = malloc(sizeof(*t));
	char path[128];
	struct tio io;
	int i;

	cr_assert_not_null(t);
	conf_text("[device r0]\nbackend = ram\nsize = 16M\nlogical_block_size = 512\n"
		  "physical_block_size = 4096\nmax_io = 64K\n"
		  "filters = log, delay\nlog.path = trace\ndelay.write = 1ms\n");
	d = &conf.devs[0];
	top = stack_open(&conf, d, NULL, cerr, sizeof(cerr));
	cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
	cr_assert_str_eq(top->ops->name, "log");
	cr_assert_not_null(top->next);
	cr_assert_str_eq(top->next->ops->name, "delay");
	cr_assert_not_null(top->next->next);
	cr_assert_str_eq(top->next->next->ops->name, "ram");
	cr_assert_null(top->next->next->next);
	/* Every key taken by someone. */
	for (i = 0; i < d->nr_params; i++)
		cr_assert(d->params[i].used, "%s not taken", d->params[i].key);
	/* The stack's geometry is the backend's. */
	top->ops->geometry(top, &g);
	top->next->next->ops->geometry(top->next->next, &below);
	cr_assert_eq(memcmp(&g, &below, sizeof(g)), 0);
	cr_assert_eq(g.max_io, 64 * KiB);
	cr_assert_eq(g.pbs, 4096);

	tio_init(&io, BLK_WRITE, 4096, 8192, NULL, 0x5a);
	cr_assert_eq(tio_submit(top, &io), 0);
	cr_assert_geq(wait_latency_ns(&io, WAIT_MS), 1 * MS);
	cr_assert_eq(io.res, 0);
	tio_free(&io);
	stack_close(top);

	trace_path(path, sizeof(path));
	trace_read(path, t);
	cr_assert_eq(t->n, 1);
	cr_assert_str_eq(t->l[0].op, "WRITE");
	cr_assert_eq(t->l[0].pos, 4096);
	cr_assert_eq(t->l[0].len, 8192);
	/* The log sits above the delay: its latency includes it. */
	cr_assert_geq(t->l[0].lat_us, 1000);
	conf_free(&conf);
	free(t);
}

Test(stack, no_filters_is_the_backend)
{
	struct blk_backend *top;

	conf_text("[device r0]\nbackend = ram\nsize = 1M\n");
	top = stack_open(&conf, &conf.devs[0], NULL, cerr, sizeof(cerr));
	cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
	cr_assert_str_eq(top->ops->name, "ram");
	cr_assert_null(top->next);
	stack_close(top);
	conf_free(&conf);
}

/* A filter that fails to open closes what is open below it (ASan: no leak). */
Test(stack, failure_closes_what_was_opened)
{
	struct blk_backend *top;
	char want[256];

	/* delay opens (above ram), then log fails: no log.path. */
	conf_text("[device r0]\nbackend = ram\nsize = 1M\nfilters = log, delay\n"
		  "delay.read = 1ms\n");
	top = stack_open(&conf, &conf.devs[0], NULL, cerr, sizeof(cerr));
	cr_assert(IS_ERR(top));
	cr_assert_eq(PTR_ERR(top), -EINVAL);
	snprintf(want, sizeof(want), "%s/blkfs.conf:1: log.path: the log filter needs a trace file",
		 tdir);
	cr_assert(strstr(cerr, want), "%s", cerr);
	conf_free(&conf);

	/* The lower filter fails: the backend is closed again. */
	conf_text("[device r0]\nbackend = ram\nsize = 1M\nfilters = log, delay\n"
		  "log.path = trace\ndelay.read = soon\n");
	top = stack_open(&conf, &conf.devs[0], NULL, cerr, sizeof(cerr));
	cr_assert(IS_ERR(top));
	snprintf(want, sizeof(want), "%s/blkfs.conf:6: delay.read: 'soon' is not a delay", tdir);
	cr_assert(strstr(cerr, want), "%s", cerr);
	/* log was never opened: no trace file. */
	trace_path(want, sizeof(want));
	cr_assert_neq(access(want, F_OK), 0, "log opened before the layer below it");
	conf_free(&conf);
}
