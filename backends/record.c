// SPDX-License-Identifier: MIT
/*
 * backends/record.c - the record filter: a log of every write, discard,
 * write-zeroes and flush that reaches the backend, in the kernel's
 * dm-log-writes format (backends/logwrites.h), for the crash explorer
 * (`blkfs crashcheck`) or xfstests' replay-log.
 *
 * It sits directly above the backend (listed last in `filters`; open
 * refuses anything else), so it sees what the device sees: writeback,
 * O_DIRECT, flushes. When powerloss is stacked too it is above record, and
 * the restores of a cut are writes that reach record: they are logged.
 *
 * Order. A write is logged when it completes (before its completion goes
 * up), a flush when it is submitted, a mark when it is written, each under
 * rd->lock: so a write is logged before a flush entry if and only if it
 * completed before that flush was submitted, and writes completing while
 * the flush is in flight come after it, as the format requires.
 *
 * Buffering. Entries are copied into chunks of REC_CHUNK bytes; a writer
 * thread writes full chunks to the log file (and a partial one every
 * REC_TICK_MS, or at a mark or stop) and then the super block with the
 * number of entries written so far, so the file is a valid log at every
 * moment and the I/O path makes no system call. When the writer falls
 * REC_MAX_QUEUED bytes behind, completions wait for it (back pressure).
 * A log that cannot be written (ENOSPC, EIO) stops the recording: the
 * error goes to the daemon log and to the stat counters, and the device
 * goes on serving.
 *
 * start (`echo NAME > .sys/DEV/record/start`; `-` for no snapshot): new writes wait, those in
 * flight drain, the layer below takes snapshot NAME, the log file
 * record.path is created with an empty log, and writes go on: no write
 * falls between the snapshot and the log.
 *
 * Lock: rd->lock covers the state, the chunks and the counters; it is
 * never held across a submit, an end_io or a file write. A submitter may
 * wait on rd->cv (a start draining); a completion may wait on rd->space_cv.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends_int.h"
#include "logwrites.h"

#define REC_CHUNK	(1u << 20)
#define REC_MAX_QUEUED	(64u << 20)
#define REC_TICK_MS	100u
#define REC_FREE_MAX	80		/* chunks kept for reuse: past warm-up no page faults */

enum rec_state { REC_OFF, REC_ON, REC_FAILED };

struct rec_chunk {
	struct rec_chunk *next;
	size_t len, cap;
	uint64_t nr_entries;		/* entries that end in this chunk */
	unsigned char *data;
};

struct rec_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;
	char *path;			/* record.path; NULL: none */
	struct blk_geometry geo;
	struct be_pool io_pool;

	pthread_mutex_t lock;
	pthread_cond_t cv;		/* in-flight writes drained, the gate opened */
	pthread_cond_t space_cv;	/* the writer took chunks off the queue */
	pthread_cond_t writer_cv;	/* to the writer: work, or stop */
	enum rec_state state;		/* lock */
	bool gate;			/* lock: a start is draining; new writes wait */
	uint64_t inflight;		/* lock: writes passed down, not completed */
	struct rec_chunk *cur;		/* lock: being filled */
	struct rec_chunk *q_head, *q_tail;	/* lock: full, for the writer */
	size_t q_bytes;			/* lock */
	struct rec_chunk *free;		/* lock: for reuse */
	int nr_free;			/* lock */
	bool writer_stop;		/* lock */
	bool writer_busy;		/* lock: writing chunks now */
	bool writer_running;		/* lock */
	pthread_t writer;
	int fd;				/* writer's (and start/stop's) */
	uint64_t file_off;		/* writer */
	uint64_t nr_written;		/* writer: entries in the file */

	/* Counters (lock). */
	uint64_t nr_entries, nr_marks, nr_flushes, log_bytes, nr_starts;
	int err;			/* lock: why the recording failed; 0 */
};

struct rec_io {
	struct blk_io io;		/* must come first */
	struct blk_io *parent;
	struct rec_dev *rd;
};

/* ---- chunks (lock held) ---- */

static struct rec_chunk *chunk_get_locked(struct rec_dev *rd, size_t need)
{
	struct rec_chunk *c = rd->free;
	size_t cap = need > REC_CHUNK ? need : REC_CHUNK;

	if (c && c->cap >= need) {
		rd->free = c->next;
		rd->nr_free--;
		c->next = NULL;
		c->len = 0;
		c->nr_entries = 0;
		return c;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->data = malloc(cap);
	if (!c->data) {
		free(c);
		return NULL;
	}
	c->cap = cap;
	return c;
}

static void chunk_free(struct rec_chunk *c)
{
	if (c) {
		free(c->data);
		free(c);
	}
}

static void chunk_put_locked(struct rec_dev *rd, struct rec_chunk *c)
{
	if (rd->nr_free < REC_FREE_MAX) {
		c->next = rd->free;
		rd->free = c;
		rd->nr_free++;
	} else {
		chunk_free(c);
	}
}

/* Hand the current chunk to the writer. */
static void queue_cur_locked(struct rec_dev *rd)
{
	struct rec_chunk *c = rd->cur;

	if (!c || !c->len)
		return;
	rd->cur = NULL;
	if (rd->q_tail)
		rd->q_tail->next = c;
	else
		rd->q_head = c;
	rd->q_tail = c;
	rd->q_bytes += c->len;
	pthread_cond_signal(&rd->writer_cv);
}

static void fail_locked(struct rec_dev *rd, int err, const char *what)
{
	if (rd->state != REC_ON)
		return;
	rd->state = REC_FAILED;
	rd->err = err;
	blk_err("record: %s: %s %s failed: %s; recording stopped (the device goes on)",
		rd->dev, what, rd->path, strerror(err));
	pthread_cond_broadcast(&rd->space_cv);
	pthread_cond_signal(&rd->writer_cv);
}

/*
 * Room for @need bytes at the end of the current chunk, or NULL (the
 * recording stopped meanwhile, or memory ran out: then it fails). May wait
 * for the writer (drops and retakes the lock).
 */
static unsigned char *reserve_locked(struct rec_dev *rd, size_t need)
{
	unsigned char *p;

	while (rd->state == REC_ON && rd->q_bytes >= REC_MAX_QUEUED)
		pthread_cond_wait(&rd->space_cv, &rd->lock);
	if (rd->state != REC_ON)
		return NULL;
	if (rd->cur && rd->cur->cap - rd->cur->len < need)
		queue_cur_locked(rd);
	if (!rd->cur) {
		rd->cur = chunk_get_locked(rd, need);
		if (!rd->cur) {
			fail_locked(rd, ENOMEM, "buffering the log");
			return NULL;
		}
	}
	p = rd->cur->data + rd->cur->len;
	rd->cur->len += need;
	rd->cur->nr_entries++;
	rd->nr_entries++;
	rd->log_bytes += need;
	return p;
}

/* Log an entry; @iov/@iovcnt: a write's data (e->nr_sectors sectors). */
static void log_entry_locked(struct rec_dev *rd, const struct lw_entry *e, const void *text,
			     const struct iovec *iov, int iovcnt)
{
	size_t s = rd->geo.lbs, dlen = iov ? (size_t)(e->nr_sectors * s) : 0;
	unsigned char *p = reserve_locked(rd, s + dlen);
	int i;

	if (!p)
		return;
	lw_encode_entry(p, (uint32_t)s, e, text);
	p += s;
	for (i = 0; i < iovcnt && dlen; i++) {
		size_t n = iov[i].iov_len < dlen ? iov[i].iov_len : dlen;

		memcpy(p, iov[i].iov_base, n);
		p += n;
		dlen -= n;
	}
}

/* ---- the writer thread ---- */

static int write_all(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;

	while (len) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ENOSPC;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int write_super(struct rec_dev *rd, uint64_t nr_entries)
{
	unsigned char sb[65536];

	lw_encode_super(sb, rd->geo.lbs, nr_entries);
	return write_all(rd->fd, sb, rd->geo.lbs, 0);
}

static void *writer_main(void *arg)
{
	struct rec_dev *rd = arg;

	pthread_mutex_lock(&rd->lock);
	for (;;) {
		struct rec_chunk *list, *c;
		int ret = 0;

		if (!rd->q_head) {
			if (rd->writer_stop)
				break;
			if (rd->cur && rd->cur->len) {
				/* A partial chunk goes out at each tick. */
				struct timespec ts;
				uint64_t due = blk_now_ns() + REC_TICK_MS * 1000000ull;

				ts.tv_sec = (time_t)(due / 1000000000ull);
				ts.tv_nsec = (long)(due % 1000000000ull);
				if (pthread_cond_timedwait(&rd->writer_cv, &rd->lock, &ts) == ETIMEDOUT)
					queue_cur_locked(rd);
			} else {
				pthread_cond_wait(&rd->writer_cv, &rd->lock);
			}
			continue;
		}
		list = rd->q_head;
		rd->q_head = rd->q_tail = NULL;
		rd->writer_busy = true;
		pthread_mutex_unlock(&rd->lock);

		for (c = list; c && !ret; c = c->next) {
			ret = write_all(rd->fd, c->data, c->len, rd->file_off);
			if (!ret) {
				rd->file_off += c->len;
				rd->nr_written += c->nr_entries;
			}
		}
		/* The entries are in the file before the super block counts them. */
		if (!ret)
			ret = write_super(rd, rd->nr_written);

		pthread_mutex_lock(&rd->lock);
		while (list) {
			c = list;
			list = c->next;
			rd->q_bytes -= c->len;
			chunk_put_locked(rd, c);
		}
		rd->writer_busy = false;
		if (ret)
			fail_locked(rd, -ret, "writing the log");
		pthread_cond_broadcast(&rd->space_cv);
	}
	pthread_mutex_unlock(&rd->lock);
	return NULL;
}

/* ---- I/O ---- */

static void rec_write_end_io(struct blk_io *io, int res)
{
	struct rec_io *c = (struct rec_io *)io;
	struct rec_dev *rd = c->rd;
	struct blk_io *parent = c->parent;
	uint64_t len = res ? io->done : io->len;

	pthread_mutex_lock(&rd->lock);
	/* What completed is on the device: a failed write's done part only. */
	if (rd->state == REC_ON && len) {
		struct lw_entry e = {
			.sector = io->pos / rd->geo.lbs,
			.nr_sectors = len / rd->geo.lbs,
			.flags = io->op == BLK_WRITE ? 0 : LW_DISCARD,
		};

		log_entry_locked(rd, &e, NULL, io->op == BLK_WRITE ? io->iov : NULL,
				 io->op == BLK_WRITE ? io->iovcnt : 0);
	}
	if (!--rd->inflight)
		pthread_cond_broadcast(&rd->cv);
	pthread_mutex_unlock(&rd->lock);
	parent->done = res ? io->done : 0;
	be_pool_put(&rd->io_pool, c);
	parent->end_io(parent, res);
}

static int rec_submit_write(struct rec_dev *rd, struct blk_io *io)
{
	struct rec_io *c = be_pool_get(&rd->io_pool);
	int ret;

	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&rd->lock);
	while (rd->gate)
		pthread_cond_wait(&rd->cv, &rd->lock);
	rd->inflight++;
	pthread_mutex_unlock(&rd->lock);
	c->io = be_child_io(io, rec_write_end_io, c);
	c->parent = io;
	c->rd = rd;
	ret = blk_submit(rd->be.next, &c->io);
	if (ret) {
		pthread_mutex_lock(&rd->lock);
		if (!--rd->inflight)
			pthread_cond_broadcast(&rd->cv);
		pthread_mutex_unlock(&rd->lock);
		be_pool_put(&rd->io_pool, c);
	}
	return ret;
}

static int rec_submit(struct blk_backend *be, struct blk_io *io)
{
	struct rec_dev *rd = (struct rec_dev *)be;

	switch (io->op) {
	case BLK_READ:
		return blk_submit(be->next, io);
	case BLK_FLUSH:
		pthread_mutex_lock(&rd->lock);
		if (rd->state == REC_ON) {
			struct lw_entry e = { .flags = LW_FLUSH };

			log_entry_locked(rd, &e, NULL, NULL, 0);
			rd->nr_flushes++;
		}
		pthread_mutex_unlock(&rd->lock);
		return blk_submit(be->next, io);
	default:
		return rec_submit_write(rd, io);
	}
}

/* ---- start, stop, mark ---- */

/* Stop the writer after it wrote everything; the file gets its final count. */
static int writer_finish(struct rec_dev *rd)
{
	int ret;

	pthread_mutex_lock(&rd->lock);
	queue_cur_locked(rd);
	rd->writer_stop = true;
	pthread_cond_signal(&rd->writer_cv);
	pthread_mutex_unlock(&rd->lock);
	pthread_join(rd->writer, NULL);
	pthread_mutex_lock(&rd->lock);
	rd->writer_running = false;
	rd->writer_stop = false;
	ret = rd->state == REC_FAILED ? -rd->err : 0;
	/* A failed log drops what was still queued. */
	while (rd->q_head) {
		struct rec_chunk *c = rd->q_head;

		rd->q_head = c->next;
		rd->q_bytes -= c->len;
		chunk_free(c);
	}
	rd->q_tail = NULL;
	chunk_free(rd->cur);
	rd->cur = NULL;
	pthread_mutex_unlock(&rd->lock);
	if (!ret && fsync(rd->fd))
		ret = -errno;
	if (close(rd->fd) && !ret)
		ret = -errno;
	rd->fd = -1;
	return ret;
}

static int rec_start(struct rec_dev *rd, const char *snap)
{
	int ret, fd;

	if (!rd->path)
		return -EINVAL;
	pthread_mutex_lock(&rd->lock);
	if (rd->state == REC_ON || rd->gate || rd->writer_running) {
		pthread_mutex_unlock(&rd->lock);
		return -EBUSY;
	}
	rd->gate = true;
	while (rd->inflight)
		pthread_cond_wait(&rd->cv, &rd->lock);
	pthread_mutex_unlock(&rd->lock);

	/* Nothing in flight, nothing new: the snapshot and the log's start coincide. */
	ret = *snap ? blk_snap_create(rd->be.next, snap) : 0;
	if (ret)
		goto out_open_gate;
	fd = open(rd->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		blk_err("record: %s: cannot create %s: %s", rd->dev, rd->path, strerror(errno));
		goto out_destroy_snap;
	}
	rd->fd = fd;
	rd->file_off = rd->geo.lbs;
	rd->nr_written = 0;
	ret = write_super(rd, 0);
	if (ret) {
		blk_err("record: %s: cannot write %s: %s", rd->dev, rd->path, strerror(-ret));
		goto out_close;
	}
	ret = -pthread_create(&rd->writer, NULL, writer_main, rd);
	if (ret)
		goto out_close;
	pthread_mutex_lock(&rd->lock);
	rd->writer_running = true;
	rd->state = REC_ON;
	rd->err = 0;
	rd->nr_entries = rd->nr_marks = rd->nr_flushes = 0;
	rd->log_bytes = rd->geo.lbs;
	rd->nr_starts++;
	rd->gate = false;
	pthread_cond_broadcast(&rd->cv);
	pthread_mutex_unlock(&rd->lock);
	blk_info("record: %s: recording to %s%s%s", rd->dev, rd->path,
		 *snap ? " from snapshot " : "", snap);
	return 0;

out_close:
	close(fd);
	rd->fd = -1;
out_destroy_snap:
	if (*snap)
		blk_snap_destroy(rd->be.next, snap);
out_open_gate:
	pthread_mutex_lock(&rd->lock);
	rd->gate = false;
	pthread_cond_broadcast(&rd->cv);
	pthread_mutex_unlock(&rd->lock);
	return ret;
}

static int rec_stop(struct rec_dev *rd)
{
	uint64_t n;
	int ret;

	pthread_mutex_lock(&rd->lock);
	if (!rd->writer_running || rd->gate) {
		pthread_mutex_unlock(&rd->lock);
		return -EALREADY;
	}
	if (rd->state == REC_ON)
		rd->state = REC_OFF;	/* nothing more is logged */
	n = rd->nr_entries;
	pthread_mutex_unlock(&rd->lock);
	ret = writer_finish(rd);
	if (!ret)
		blk_info("record: %s: stopped: %llu entries in %s", rd->dev,
			 (unsigned long long)n, rd->path);
	/* A failure was reported when it happened; stop itself succeeds. */
	return 0;
}

static int rec_mark(struct rec_dev *rd, const char *buf, size_t len)
{
	struct lw_entry e = { .flags = LW_MARK };

	if (len && buf[len - 1] == '\n')
		len--;
	if (!len || len > LW_MARK_MAX(rd->geo.lbs) || memchr(buf, '\n', len) ||
	    memchr(buf, '\0', len))
		return -EINVAL;
	pthread_mutex_lock(&rd->lock);
	if (rd->state != REC_ON) {
		pthread_mutex_unlock(&rd->lock);
		return -EBADFD;
	}
	e.data_len = len;
	log_entry_locked(rd, &e, buf, NULL, 0);
	rd->nr_marks++;
	/* A mark is a moment someone waits for: write it out now. */
	queue_cur_locked(rd);
	pthread_mutex_unlock(&rd->lock);
	return 0;
}

/* ---- attrs ---- */

static int rec_start_store(struct blk_backend *be, const char *buf, size_t len)
{
	char s[BLK_SNAP_NAME_MAX + 2];

	if (be_attr_text(buf, len, s, sizeof(s)))
		return -EINVAL;
	/* "-": no snapshot (a backend without them; the base is the caller's business) */
	if (!strcmp(s, "-"))
		s[0] = '\0';
	else if (!blk_snap_name_valid(s))
		return -EINVAL;
	return rec_start((struct rec_dev *)be, s);
}

static int rec_stop_store(struct blk_backend *be, const char *buf, size_t len)
{
	char s[4];

	if (be_attr_text(buf, len, s, sizeof(s)) || strcmp(s, "1"))
		return -EINVAL;
	return rec_stop((struct rec_dev *)be);
}

static int rec_mark_store(struct blk_backend *be, const char *buf, size_t len)
{
	return rec_mark((struct rec_dev *)be, buf, len);
}

static int rec_state_show(struct blk_backend *be, char *buf, size_t len)
{
	struct rec_dev *rd = (struct rec_dev *)be;
	char s[160];

	pthread_mutex_lock(&rd->lock);
	if (rd->state == REC_ON)
		snprintf(s, sizeof(s), "recording");
	else if (rd->state == REC_FAILED)
		snprintf(s, sizeof(s), "failed: %s", strerror(rd->err));
	else
		snprintf(s, sizeof(s), "stopped");
	pthread_mutex_unlock(&rd->lock);
	return be_attr_out(buf, len, s);
}

static int rec_empty_show(struct blk_backend *be, char *buf, size_t len)
{
	(void)be;
	return be_attr_out(buf, len, "");
}

static int rec_path_show(struct blk_backend *be, char *buf, size_t len)
{
	struct rec_dev *rd = (struct rec_dev *)be;

	return be_attr_out(buf, len, rd->path ? rd->path : "none");
}

static const struct blk_attr rec_attrs[] = {
	{ .name = "start", .show = rec_empty_show, .store = rec_start_store },
	{ .name = "stop", .show = rec_empty_show, .store = rec_stop_store },
	{ .name = "mark", .show = rec_empty_show, .store = rec_mark_store },
	{ .name = "state", .show = rec_state_show },
	{ .name = "path", .show = rec_path_show },
	{ .name = NULL },
};

/* ---- open, close, stat ---- */

static struct blk_backend *rec_open(struct blk_params *p, struct blk_backend *next)
{
	struct rec_dev *rd;
	const char *path;
	pthread_condattr_t ca;
	int ret;

	if (!next || next->ops->is_filter) {
		blk_param_error(p, NULL, "the record filter must sit directly above the backend "
				"(list it last in filters)");
		return ERR_PTR(-EINVAL);
	}
	path = blk_param_get(p, "path");
	if (path && !*path)
		return ERR_PTR(blk_param_error(p, "path", "empty file name"));
	rd = calloc(1, sizeof(*rd));
	if (!rd || (path && !(rd->path = strdup(path)))) {
		free(rd);
		blk_param_error(p, NULL, "cannot set up the record filter: out of memory");
		return ERR_PTR(-ENOMEM);
	}
	next->ops->geometry(next, &rd->geo);
	rd->dev = p->dev ? p->dev : "?";
	rd->fd = -1;
	ret = -pthread_mutex_init(&rd->lock, NULL);
	if (ret)
		goto out_free;
	pthread_cond_init(&rd->cv, NULL);
	pthread_cond_init(&rd->space_cv, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&rd->writer_cv, &ca);
	pthread_condattr_destroy(&ca);
	ret = be_pool_init(&rd->io_pool, BE_POOL_DEF, sizeof(struct rec_io), 64);
	if (ret)
		goto out_destroy;
	rd->be.ops = &record_filter_ops;
	rd->be.next = next;
	return &rd->be;

out_destroy:
	pthread_cond_destroy(&rd->writer_cv);
	pthread_cond_destroy(&rd->space_cv);
	pthread_cond_destroy(&rd->cv);
	pthread_mutex_destroy(&rd->lock);
out_free:
	free(rd->path);
	free(rd);
	blk_param_error(p, NULL, "cannot set up the record filter: %s", strerror(-ret));
	return ERR_PTR(ret);
}

static void rec_close(struct blk_backend *be)
{
	struct rec_dev *rd = (struct rec_dev *)be;
	bool running;

	pthread_mutex_lock(&rd->lock);
	while (rd->inflight)
		pthread_cond_wait(&rd->cv, &rd->lock);
	running = rd->writer_running;
	if (rd->state == REC_ON)
		rd->state = REC_OFF;
	pthread_mutex_unlock(&rd->lock);
	if (running)
		writer_finish(rd);
	while (rd->free) {
		struct rec_chunk *c = rd->free;

		rd->free = c->next;
		chunk_free(c);
	}
	be_pool_destroy(&rd->io_pool);
	pthread_cond_destroy(&rd->writer_cv);
	pthread_cond_destroy(&rd->space_cv);
	pthread_cond_destroy(&rd->cv);
	pthread_mutex_destroy(&rd->lock);
	free(rd->path);
	free(rd);
}

static size_t rec_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct rec_dev *rd = (struct rec_dev *)be;
	size_t n;

	pthread_mutex_lock(&rd->lock);
	n = be_stat_printf(buf, len,
			   "record_recording %d\nrecord_failed %d\nrecord_error_errno %d\n"
			   "record_entries %llu\nrecord_marks %llu\nrecord_flushes %llu\n"
			   "record_log_bytes %llu\nrecord_queued_bytes %zu\nrecord_starts %llu\n",
			   rd->state == REC_ON, rd->state == REC_FAILED, rd->err,
			   (unsigned long long)rd->nr_entries, (unsigned long long)rd->nr_marks,
			   (unsigned long long)rd->nr_flushes, (unsigned long long)rd->log_bytes,
			   rd->q_bytes + (rd->cur ? rd->cur->len : 0),
			   (unsigned long long)rd->nr_starts);
	pthread_mutex_unlock(&rd->lock);
	return n + be_pool_stat(&rd->io_pool, "record_io", buf + n, len - n);
}

static const char *const rec_keys[] = { "path", NULL };

const struct blk_backend_ops record_filter_ops = {
	.name = "record",
	.is_filter = true,
	.keys = rec_keys,
	.help = "record: a dm-log-writes log of the device's writes and flushes "
		"(echo SNAP > .sys/DEV/record/start, mark, stop); record.path = FILE",
	.open = rec_open,
	.close = rec_close,
	.geometry = be_filter_geometry,
	.resize = be_filter_resize,
	.submit = rec_submit,
	.stat = rec_stat,
	.attrs = rec_attrs,
	.snap = &be_filter_snap_ops,
};
