// SPDX-License-Identifier: MIT
/*
 * backends/filters/log.c - the log filter: one line per I/O, written when the I/O
 * completes, to a trace file (nbdkit's log filter is the model). Tests read
 * the trace to prove what reached the layer below (aligned, limit-sized
 * writes, a flush after them); a person reads it for latency per op.
 *
 * The file starts with one `#` line per open (device, columns, wall clock),
 * then one line per I/O:
 *
 *	TIME OP POS LEN RESULT LATENCY_US
 *	12.000345 WRITE 1048576 65536 0 153
 *
 * TIME is seconds since the filter opened, with microseconds; OP is READ,
 * WRITE, FLUSH, DISCARD or WRITE_ZEROES; POS and LEN are bytes, decimal;
 * RESULT is 0 or the negative errno; LATENCY_US is submit to completion.
 * Lines are in completion order (TIME never goes back).
 *
 * Each I/O goes down as a child blk_io of the filter's own, so the filter
 * sees its completion. The child's end_io writes the line, frees the child
 * and completes the parent, in that order: nothing of the filter is touched
 * after the parent's end_io, which is what may let the cache close us.
 *
 * A line is one write(2) to an O_APPEND descriptor, under ld->lock (which
 * keeps TIME in order): the trace is complete as soon as an I/O has
 * completed, with no buffer to flush at FLUSH or close. That costs a
 * syscall per I/O; the log filter is for seeing what happens, not for speed.
 * The trace must not live on a blkfs mount served by this daemon: a
 * completion would then wait for a write that waits for completions.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "../backends_int.h"
#include "../kit/knobs.h"

#define LOG_LINE_MAX	128	/* the longest line: 20-digit numbers everywhere */
/*
 * Child I/Os filled at open: more than the cache keeps in flight on one
 * device in ordinary use; past it objects come from malloc (log_pool_allocs).
 */
#define LOG_POOL	256

struct log_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;		/* device name; set at open */
	char *path;			/* absolute; set at open, read-only after */
	bool append;			/* config only */
	int fd;				/* O_APPEND; set at open */
	uint64_t t0_ns;			/* CLOCK_MONOTONIC at open */
	bool enabled;			/* atomic: the `enabled` attr */

	struct be_pool pool;		/* struct log_io, one per I/O in flight */
	pthread_mutex_t lock;		/* one line at a time, in TIME order */
	bool write_failed;		/* lock: the failure was reported once */

	/* Counters for ->stat; atomic, read without a lock. */
	uint64_t nr_lines;
	uint64_t nr_write_errors;
};

/* A child I/O: what the filter passes down in place of the cache's. */
struct log_io {
	struct blk_io io;		/* must come first: the layer below gets &io */
	struct blk_io *parent;		/* the cache's; completed once, after the line */
	struct log_dev *ld;
	uint64_t start_ns;
};

/* Write all of @buf; -errno on failure (a short write to a full disk). */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENOSPC;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * One trace line for @io, which ended with @res. A trace that cannot be
 * written never fails the I/O: the error is counted, and said once on
 * stderr (the daemon's log).
 */
static void log_line(struct log_dev *ld, const struct blk_io *io, int res,
		     uint64_t start_ns)
{
	char line[LOG_LINE_MAX];
	uint64_t now, t;
	int n, ret;

	pthread_mutex_lock(&ld->lock);
	now = blk_now_ns();
	t = now - ld->t0_ns;
	n = snprintf(line, sizeof(line), "%llu.%06llu %s %llu %llu %d %llu\n",
		     (unsigned long long)(t / 1000000000ull),
		     (unsigned long long)(t % 1000000000ull / 1000),
		     blk_op_name(io->op), (unsigned long long)io->pos,
		     (unsigned long long)io->len, res,
		     (unsigned long long)((now - start_ns) / 1000));
	ret = write_all(ld->fd, line, (size_t)n);
	if (ret) {
		__atomic_add_fetch(&ld->nr_write_errors, 1, __ATOMIC_RELAXED);
		if (!ld->write_failed) {
			ld->write_failed = true;
			blk_err("log filter: %s: %s (trace lines are lost)",
				ld->path, strerror(-ret));
		}
	} else {
		__atomic_add_fetch(&ld->nr_lines, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&ld->lock);
}

static void log_end_io(struct blk_io *io, int res)
{
	struct log_io *li = (struct log_io *)io;
	struct blk_io *parent = li->parent;

	log_line(li->ld, io, res, li->start_ns);
	parent->done = res ? io->done : 0;
	be_pool_put(&li->ld->pool, li);
	/* Last: the cache may close the stack once this returns. */
	parent->end_io(parent, res);
}

static int log_submit(struct blk_backend *be, struct blk_io *io)
{
	struct log_dev *ld = (struct log_dev *)be;
	struct log_io *li;
	int ret;

	/* Tracing off: not even a child, the I/O goes down as it came. */
	if (!__atomic_load_n(&ld->enabled, __ATOMIC_RELAXED))
		return blk_submit(be->next, io);

	li = be_pool_get(&ld->pool);
	if (!li)
		return -ENOMEM;
	li->io = be_child_io(io, log_end_io, li);
	li->parent = io;
	li->ld = ld;
	li->start_ns = blk_now_ns();
	ret = blk_submit(be->next, &li->io);
	if (ret) {
		/* Refused below: the parent gets no end_io, but the trace says so. */
		log_line(ld, &li->io, ret, li->start_ns);
		be_pool_put(&ld->pool, li);
	}
	/* On success @li may be gone already: the layer below may complete inline. */
	return ret;
}

/*
 * The trace's absolute path: @path as given, or relative to the directory
 * of the config file @file (itself relative to the working directory at
 * open), so `log.path = trace` lands next to blkfs.conf.
 */
static char *log_resolve(const char *file, const char *path)
{
	const char *slash = file ? strrchr(file, '/') : NULL;
	char *dir, *cwd = NULL, *out = NULL;
	int n;

	if (path[0] == '/')
		return strdup(path);
	if (!slash)
		dir = strdup(".");
	else if (slash == file)
		dir = strdup("/");
	else
		dir = strndup(file, (size_t)(slash - file));
	if (!dir)
		return NULL;
	if (dir[0] != '/') {
		cwd = getcwd(NULL, 0);
		if (!cwd)
			goto out;
		n = !strcmp(dir, ".") ? asprintf(&out, "%s/%s", cwd, path) :
					asprintf(&out, "%s/%s/%s", cwd, dir, path);
	} else {
		n = asprintf(&out, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", path);
	}
	if (n < 0)
		out = NULL;
out:
	free(cwd);
	free(dir);
	return out;
}

static int log_header(struct log_dev *ld, const char *dev)
{
	char line[512], when[64];
	struct tm tm;
	time_t t = time(NULL);
	int n;

	if (!localtime_r(&t, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S%z", &tm))
		snprintf(when, sizeof(when), "%lld", (long long)t);
	n = snprintf(line, sizeof(line),
		     "# blkfs log filter: device %s, opened %s; TIME OP POS LEN RESULT LATENCY_US\n",
		     dev ? dev : "?", when);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -EINVAL;
	return write_all(ld->fd, line, (size_t)n);
}

/* ---- the knobs: config keys and .sys/DEV/log/ ---- */

static int attr_path_show(struct blk_backend *be, char *buf, size_t len)
{
	return be_attr_out(buf, len, ((struct log_dev *)be)->path);
}

/*
 * path is resolved against the config file's directory (log_resolve), so
 * open() reads it; enabled is on at open and read by submit() without the
 * lock (an atomic field: knobs.h).
 */
#define LOG_KNOBS(K)									\
	K(path,    none, path,    0, 0, 0, "a file", OWNKEY, NULL)			\
	K(append,  bool, append,  0, 1, 0, "", CONF, NULL)				\
	K(enabled, bool, enabled, 0, 1, 1, "", LIVE, NULL)

BK_DEFINE(log, struct log_dev, lock, NULL, LOG_KNOBS);

static struct blk_backend *log_open(struct blk_params *p, struct blk_backend *next)
{
	struct log_dev *ld;
	const char *path;
	int ret;

	if (!next) {
		blk_param_error(p, NULL, "the log filter needs a layer below it");
		return ERR_PTR(-EINVAL);
	}
	path = blk_param_get(p, "path");
	if (!path) {
		ret = blk_param_error(p, "path",
				      "the log filter needs a trace file (log.path = FILE; relative to the config file's directory)");
		return ERR_PTR(ret);
	}
	ld = calloc(1, sizeof(*ld));
	if (!ld)
		goto out_nomem;
	ld->dev = p->dev ? p->dev : "?";
	ret = bk_params(&bk_table, p, &ld->be);
	if (ret) {
		free(ld);
		return ERR_PTR(ret);
	}
	ld->path = log_resolve(p->file, path);
	if (!ld->path)
		goto out_nomem_free;
	/*
	 * O_APPEND in both modes: each line is one write at the end, so
	 * concurrent completions can never overwrite each other.
	 */
	ld->fd = open(ld->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC |
			  (ld->append ? 0 : O_TRUNC), 0644);
	if (ld->fd < 0) {
		ret = -errno;
		blk_param_error(p, "path", "cannot open %s: %s", ld->path, strerror(-ret));
		goto out_free_path;
	}
	ret = log_header(ld, p->dev);
	if (ret) {
		blk_param_error(p, "path", "cannot write to %s: %s", ld->path, strerror(-ret));
		goto out_close;
	}
	ret = -pthread_mutex_init(&ld->lock, NULL);
	if (ret) {
		blk_param_error(p, NULL, "cannot set up the log filter: %s", strerror(-ret));
		goto out_close;
	}
	ret = be_pool_init(&ld->pool, LOG_POOL, sizeof(struct log_io), 64);
	if (ret) {
		blk_param_error(p, NULL, "cannot set up the log filter: %s", strerror(-ret));
		pthread_mutex_destroy(&ld->lock);
		goto out_close;
	}
	ld->t0_ns = blk_now_ns();
	ld->enabled = true;
	ld->be.ops = &log_filter_ops;
	ld->be.next = next;
	return &ld->be;

out_close:
	close(ld->fd);
out_free_path:
	free(ld->path);
	free(ld);
	return ERR_PTR(ret);
out_nomem_free:
	free(ld);
out_nomem:
	blk_param_error(p, NULL, "cannot set up the log filter: out of memory");
	return ERR_PTR(-ENOMEM);
}

/* The cache has no I/O in flight at close; the layer below is closed after us. */
static void log_close(struct blk_backend *be)
{
	struct log_dev *ld = (struct log_dev *)be;

	if (close(ld->fd))
		blk_err("log filter: %s: %s", ld->path, strerror(errno));
	be_pool_destroy(&ld->pool);
	pthread_mutex_destroy(&ld->lock);
	free(ld->path);
	free(ld);
}

static size_t log_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct log_dev *ld = (struct log_dev *)be;
	size_t n = be_stat_printf(buf, len, "log_lines %llu\nlog_write_errors %llu\n",
				  (unsigned long long)__atomic_load_n(&ld->nr_lines, __ATOMIC_RELAXED),
				  (unsigned long long)__atomic_load_n(&ld->nr_write_errors,
								      __ATOMIC_RELAXED));

	return n + be_pool_stat(&ld->pool, "log", buf + n, len - n);
}

const struct blk_backend_ops log_filter_ops = {
	.name = "log",
	.is_filter = true,
	.keys = log_keys,
	.help = "log: a line per I/O (time, op, pos, len, result, latency) to log.path; log.append = yes|no",
	.open = log_open,
	.close = log_close,
	.geometry = be_filter_geometry,
	.resize = be_filter_resize,
	.submit = log_submit,
	.stat = log_stat,
	.attrs = log_attrs,
	.snap = &be_filter_snap_ops,
};
