// SPDX-License-Identifier: MIT
/*
 * backends/filters/record.c - the record filter: a log of every write, discard,
 * write-zeroes and flush that reaches the backend, in the kernel's
 * dm-log-writes format (backends/lib/logwrites.h), for the crash explorer
 * (`blkfs crashcheck`) or xfstests' replay-log.
 *
 * It sits directly above the backend (listed last in `filters`; open
 * refuses anything else), so it sees what the device sees: writeback,
 * O_DIRECT, flushes. When powerloss is stacked too it is above record, and
 * the restores of a cut are writes that reach record: they are logged.
 *
 * Order, as the kernel's dm-log-writes has it (drivers/md/dm-log-writes.c:
 * log_writes_map splices the writes completed so far onto a flush when it
 * is submitted, normal_end_io logs them and then the flush when it
 * completes; a write completing meanwhile waits for a later flush). A
 * flush is logged when it completes, and only if it succeeded; before it
 * every write that completed before it was submitted, after it every write
 * that completed while it was in flight. So while no flush is in flight a
 * write (or discard) is logged when it completes, before its completion
 * goes up; while one is, what completes is held (a copy, struct rec_held)
 * and logged once each flush that was in flight when it completed has
 * ended. A mark is held the same way, and its writer waits until it is
 * logged: a mark comes after the flushes in flight when it was written.
 * A failed flush logs no entry; what it held is logged in order.
 *
 * The log is mapped. The file is mapped into one reserved range of
 * address space, and an entry is copied straight into the file's pages at
 * the log's tail, under rd->lock, the super block's entry count updated
 * after it: the file is a valid log at every moment and the I/O path makes
 * no system call and copies each byte once. A writer thread keeps
 * REC_AHEAD bytes past the tail allocated (fallocate), mapped and faulted
 * in (MADV_POPULATE_WRITE), REC_STEP at a time, so the I/O path takes no
 * page fault and a full disk shows as an error of fallocate, never as a
 * SIGBUS. (Measured against the chunks it replaced, which a thread wrote
 * with pwrite: BENCHMARKS.md, "Recording cost".) When the tail reaches
 * the end of what is mapped, the completion grows the map itself (or waits
 * for whoever does): back pressure. When a step cannot be allocated (ENOSPC, EFBIG), the writer
 * allocates only what a waiting entry needs; when that fails too the
 * recording stops: the error goes to the daemon log and to the stat
 * counters, the log keeps every entry logged so far, and the device goes
 * on serving. stop truncates the file to its last entry.
 *
 * start (`echo NAME > .sys/DEV/record/start`; `-` for no snapshot): new writes wait, those in
 * flight drain, the layer below takes snapshot NAME, the log file
 * record.path is created with an empty log, and writes go on: no write
 * falls between the snapshot and the log.
 *
 * Lock: rd->lock covers the state, the tail, the mapped length and the
 * counters, the flushes in flight and the held entries, and every store
 * into the map; it is never held across a submit, an end_io or a system
 * call. A submitter may wait on rd->cv (a start draining); a completion
 * may wait on rd->space_cv (the writer), a flush's completion on rd->cv
 * (another one logging what it held), a mark's writer on rd->cv (until it
 * is logged).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../backends_int.h"
#include "../kit/knobs.h"
#include "../lib/logwrites.h"
#include "../lib/plug.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23		/* Linux 5.14 */
#endif

#define REC_STEP	(4ull << 20)	/* the file grows by this much at a time */
#define REC_AHEAD	(16ull << 20)	/* allocated and faulted in past the tail */
#define REC_VA		(1ull << 40)	/* address space reserved: the longest log */
#define REC_PAGE	4096ull

enum rec_state { REC_OFF, REC_ON, REC_FAILED };

struct rec_dev {
	struct blk_backend be;		/* must come first */
	const char *dev;
	char *path;			/* record.path; NULL: none */
	struct blk_geometry geo;
	struct be_pool io_pool;

	pthread_mutex_t lock;
	pthread_cond_t cv;		/* in-flight writes drained, the gate opened */
	pthread_cond_t space_cv;	/* the writer mapped more, or the recording ended */
	pthread_cond_t writer_cv;	/* to the writer: the tail nears the end, or stop */
	enum rec_state state;		/* lock */
	bool gate;			/* lock: a start is draining; new writes wait */
	uint64_t inflight;		/* lock: writes and flushes passed down, not completed */
	struct rec_io *flights;		/* lock: flushes in flight, oldest first */
	struct rec_io *flights_tail;
	struct rec_held *held;		/* lock: entries held for flushes in flight, in order */
	struct rec_held **held_tail;
	uint64_t held_seq;		/* lock: the next held entry's number */
	uint64_t logged_seq;		/* lock: held entries below this number are logged */
	bool draining;			/* lock: a flush's end logs held entries (drops the lock) */
	unsigned char *map;		/* REC_VA bytes reserved; [0, ready) maps the file */
	uint64_t tail;			/* lock: the next entry's offset */
	uint64_t ready;			/* lock: bytes allocated, mapped, faulted in */
	uint64_t want;			/* lock: an entry waits until ready reaches this */
	bool tight;			/* lock: a step failed; grow by what is wanted only */
	bool growing;			/* lock: someone grows the map (outside the lock) */
	bool writer_stop;		/* lock */
	bool writer_running;		/* lock */
	pthread_t writer;
	int fd;				/* the writer's (and start/stop's) */
	bool no_falloc;			/* writer: the file system has no fallocate */

	/* Counters (lock). */
	uint64_t nr_entries, nr_marks, nr_flushes, log_bytes, nr_starts, nr_waits;
	int err;			/* lock: why the recording failed; 0 */
};

struct rec_io {
	struct blk_io io;		/* must come first */
	struct blk_io *parent;
	struct rec_dev *rd;
	/* a flush: held entries numbered below pos completed before it was submitted */
	uint64_t pos;
	struct rec_io *fprev, *fnext;	/* rd->flights */
};

/* An entry that completed while a flush was in flight: logged after that flush. */
struct rec_held {
	struct rec_held *next;
	uint64_t seq;
	struct lw_entry e;
	size_t len;			/* bytes of data (a write) or text (a mark) */
	unsigned char data[];
};

static uint64_t page_up(uint64_t n)
{
	return (n + REC_PAGE - 1) & ~(REC_PAGE - 1);
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
	pthread_cond_broadcast(&rd->cv);	/* a mark waiting to be logged */
	pthread_cond_signal(&rd->writer_cv);
}

/* ---- the map ---- */

/*
 * Make [@off, @off + @len) of the log file allocated, mapped at map + @off
 * and faulted in. No lock: one grows the file at a time (rd->growing, or
 * start before anyone else), and nothing reads or writes that range until
 * ready says so.
 */
static int log_grow(struct rec_dev *rd, uint64_t off, uint64_t len)
{
	void *p;

	if (off + len > REC_VA)
		return -EFBIG;
	if (!rd->no_falloc) {
		if (fallocate(rd->fd, 0, (off_t)off, (off_t)len) == 0)
			goto map;
		if (errno != EOPNOTSUPP)
			return -errno;
		rd->no_falloc = true;
	}
	if (ftruncate(rd->fd, (off_t)(off + len)))
		return -errno;
map:
	p = mmap(rd->map + off, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, rd->fd,
		 (off_t)off);
	if (p == MAP_FAILED) {
		int e = errno;

		/* keep the range reserved, so the final munmap hits nothing of others */
		mmap(rd->map + off, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
		     MAP_FIXED, -1, 0);
		return -e;
	}
	/*
	 * The page faults here, in this thread, not in the I/O path. Without
	 * fallocate the file system allocates now, and a full one fails the
	 * populate (EFAULT, the SIGBUS a store would get): say ENOSPC.
	 */
	if (madvise(p, len, MADV_POPULATE_WRITE)) {
		if (errno == EFAULT)
			return -ENOSPC;
		if (errno != EINVAL)	/* a kernel before 5.14: the copies fault */
			return -errno;
	}
	return 0;
}

/*
 * Grow the map toward @goal: a step, or only what is wanted when tight.
 * Lock held; dropped while the file grows (rd->growing keeps others out).
 */
static void grow_locked(struct rec_dev *rd, uint64_t goal)
{
	uint64_t off = rd->ready, len = page_up(goal - off);
	int ret;

	if (!rd->tight && len < REC_STEP)
		len = REC_STEP;
	rd->growing = true;
	pthread_mutex_unlock(&rd->lock);
	ret = log_grow(rd, off, len);
	pthread_mutex_lock(&rd->lock);
	rd->growing = false;
	if (!ret)
		rd->ready = off + len;
	else if ((ret == -ENOSPC || ret == -EFBIG) && !rd->tight)
		rd->tight = true;	/* what fits still goes in */
	else
		fail_locked(rd, -ret, "growing the log");
	pthread_cond_broadcast(&rd->space_cv);
	pthread_cond_signal(&rd->writer_cv);
}

static void *writer_main(void *arg)
{
	struct rec_dev *rd = arg;

	pthread_mutex_lock(&rd->lock);
	while (!rd->writer_stop) {
		uint64_t goal = rd->tight ? rd->want :
				(rd->want > rd->tail + REC_AHEAD ? rd->want : rd->tail + REC_AHEAD);

		if (rd->state == REC_ON && goal > rd->ready && !rd->growing)
			grow_locked(rd, goal);
		else
			pthread_cond_wait(&rd->writer_cv, &rd->lock);
	}
	pthread_mutex_unlock(&rd->lock);
	return NULL;
}

/*
 * Room for @need bytes at the tail, or NULL (the recording stopped
 * meanwhile). When the writer fell behind (a busy machine does not run it
 * in time), the completion grows the map itself rather than sleep until
 * the writer runs; while another grows it, it waits. Drops and retakes
 * the lock then.
 */
static unsigned char *reserve_locked(struct rec_dev *rd, uint64_t need)
{
	unsigned char *p;

	while (rd->state == REC_ON && rd->tail + need > rd->ready) {
		if (rd->want < rd->tail + need)
			rd->want = rd->tail + need;
		rd->nr_waits++;
		if (!rd->growing)
			grow_locked(rd, rd->want);
		else
			pthread_cond_wait(&rd->space_cv, &rd->lock);
	}
	if (rd->state != REC_ON)
		return NULL;
	p = rd->map + rd->tail;
	rd->tail += need;
	if (!rd->tight && rd->ready - rd->tail < REC_AHEAD - REC_STEP)
		pthread_cond_signal(&rd->writer_cv);
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
	rd->nr_entries++;
	rd->log_bytes += s + (iov ? (size_t)(e->nr_sectors * s) : 0);
	/* The entry is in the file before the super block counts it (x86: stores in order). */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	lw_put64(rd->map + 16, rd->nr_entries);
}

/* ---- entries held for the flushes in flight ---- */

/* Must an entry wait for a flush (one in flight, or what one held is not logged yet)? */
static bool must_hold_locked(const struct rec_dev *rd)
{
	return rd->flights || rd->held || rd->draining;
}

/*
 * Hold @e (with @iov's data, or @text) until the flushes in flight end.
 * Returns its number, or UINT64_MAX when the recording failed (no memory).
 */
static uint64_t hold_locked(struct rec_dev *rd, const struct lw_entry *e, const char *text,
			    const struct iovec *iov, int iovcnt)
{
	size_t len = iov ? (size_t)(e->nr_sectors * rd->geo.lbs) : text ? e->data_len : 0;
	struct rec_held *h = malloc(sizeof(*h) + len);
	unsigned char *p;
	size_t left = len;
	int i;

	if (!h) {
		fail_locked(rd, ENOMEM, "holding an entry for");
		return UINT64_MAX;
	}
	h->next = NULL;
	h->seq = rd->held_seq++;
	h->e = *e;
	h->len = len;
	if (text)
		memcpy(h->data, text, len);
	for (p = h->data, i = 0; iov && i < iovcnt && left; i++) {
		size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;

		memcpy(p, iov[i].iov_base, n);
		p += n;
		left -= n;
	}
	*rd->held_tail = h;
	rd->held_tail = &h->next;
	return h->seq;
}

/*
 * Log the held entries numbered below @upto, in order. rd->draining is
 * set by the caller: log_entry_locked may drop the lock, and meanwhile
 * whatever completes is held behind these.
 */
static void drain_locked(struct rec_dev *rd, uint64_t upto)
{
	struct rec_held *h;

	while ((h = rd->held) && h->seq < upto) {
		rd->held = h->next;
		if (!rd->held)
			rd->held_tail = &rd->held;
		if (h->e.flags & LW_MARK) {
			log_entry_locked(rd, &h->e, (const char *)h->data, NULL, 0);
		} else {
			struct iovec v = { .iov_base = h->data, .iov_len = h->len };

			log_entry_locked(rd, &h->e, NULL, h->len ? &v : NULL, h->len ? 1 : 0);
		}
		rd->logged_seq = h->seq + 1;
		free(h);
	}
	pthread_cond_broadcast(&rd->cv);	/* marks waiting to be logged */
}

/* Forget what is held (a new recording starts; nothing is in flight). */
static void held_clear(struct rec_dev *rd)
{
	struct rec_held *h;

	while ((h = rd->held)) {
		rd->held = h->next;
		free(h);
	}
	rd->held_tail = &rd->held;
	rd->held_seq = rd->logged_seq = 0;
}

/* A write's or a discard's entry: logged now, or held behind a flush in flight. */
static void log_or_hold_locked(struct rec_dev *rd, const struct lw_entry *e,
			       const struct iovec *iov, int iovcnt)
{
	if (must_hold_locked(rd))
		hold_locked(rd, e, NULL, iov, iovcnt);
	else
		log_entry_locked(rd, e, NULL, iov, iovcnt);
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

		log_or_hold_locked(rd, &e, io->op == BLK_WRITE ? io->iov : NULL,
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
	while (rd->gate) {
		/*
		 * The gate opens when the writes in flight have ended: some
		 * may be held back by this thread's plug (backends/lib/plug.h).
		 */
		if (blk_plug_pending()) {
			pthread_mutex_unlock(&rd->lock);
			blk_plug_flush();
			pthread_mutex_lock(&rd->lock);
			continue;
		}
		pthread_cond_wait(&rd->cv, &rd->lock);
	}
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

/*
 * A flush ended (@res 0: it succeeded): the entries held from before it,
 * its own entry, then what no other flush in flight holds back. Lock held.
 */
static void flush_end_locked(struct rec_dev *rd, struct rec_io *c, int res)
{
	while (rd->draining)
		pthread_cond_wait(&rd->cv, &rd->lock);
	if (c->fprev)
		c->fprev->fnext = c->fnext;
	else
		rd->flights = c->fnext;
	if (c->fnext)
		c->fnext->fprev = c->fprev;
	else
		rd->flights_tail = c->fprev;
	rd->draining = true;
	if (!res && rd->state == REC_ON) {
		struct lw_entry e = { .flags = LW_FLUSH };

		drain_locked(rd, c->pos);
		log_entry_locked(rd, &e, NULL, NULL, 0);
		rd->nr_flushes++;
	}
	drain_locked(rd, rd->flights ? rd->flights->pos : UINT64_MAX);
	rd->draining = false;
	if (!--rd->inflight)
		pthread_cond_broadcast(&rd->cv);
	pthread_cond_broadcast(&rd->cv);	/* draining ended */
}

static void rec_flush_end_io(struct blk_io *io, int res)
{
	struct rec_io *c = (struct rec_io *)io;
	struct rec_dev *rd = c->rd;
	struct blk_io *parent = c->parent;

	pthread_mutex_lock(&rd->lock);
	flush_end_locked(rd, c, res);
	pthread_mutex_unlock(&rd->lock);
	be_pool_put(&rd->io_pool, c);
	parent->end_io(parent, res);
}

static int rec_submit_flush(struct rec_dev *rd, struct blk_io *io)
{
	struct rec_io *c = be_pool_get(&rd->io_pool);
	int ret;

	if (!c)
		return -ENOMEM;
	c->io = be_child_io(io, rec_flush_end_io, c);
	c->parent = io;
	c->rd = rd;
	pthread_mutex_lock(&rd->lock);
	while (rd->gate) {
		/*
		 * The gate opens when the writes in flight have ended: some
		 * may be held back by this thread's plug (backends/lib/plug.h).
		 */
		if (blk_plug_pending()) {
			pthread_mutex_unlock(&rd->lock);
			blk_plug_flush();
			pthread_mutex_lock(&rd->lock);
			continue;
		}
		pthread_cond_wait(&rd->cv, &rd->lock);
	}
	rd->inflight++;
	c->pos = rd->held_seq;
	c->fnext = NULL;
	c->fprev = rd->flights_tail;
	if (rd->flights_tail)
		rd->flights_tail->fnext = c;
	else
		rd->flights = c;
	rd->flights_tail = c;
	pthread_mutex_unlock(&rd->lock);
	ret = blk_submit(rd->be.next, &c->io);
	if (ret) {
		pthread_mutex_lock(&rd->lock);
		flush_end_locked(rd, c, ret);
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
		return rec_submit_flush(rd, io);
	default:
		return rec_submit_write(rd, io);
	}
}

/* ---- start, stop, mark ---- */

/*
 * Stop the writer, unmap, cut the file at its last entry (the super block
 * counts them all already), fsync and close it.
 */
static int writer_finish(struct rec_dev *rd)
{
	uint64_t tail;
	int ret;

	pthread_mutex_lock(&rd->lock);
	rd->writer_stop = true;
	pthread_cond_signal(&rd->writer_cv);
	pthread_mutex_unlock(&rd->lock);
	pthread_join(rd->writer, NULL);
	pthread_mutex_lock(&rd->lock);
	/* state is no longer REC_ON: nothing stores into the map, nor grows it, once a grow ends */
	while (rd->growing)
		pthread_cond_wait(&rd->space_cv, &rd->lock);
	rd->writer_running = false;
	rd->writer_stop = false;
	ret = rd->state == REC_FAILED ? -rd->err : 0;
	tail = rd->tail;
	pthread_mutex_unlock(&rd->lock);
	munmap(rd->map, REC_VA);
	rd->map = NULL;
	if (ftruncate(rd->fd, (off_t)tail) && !ret)
		ret = -errno;
	if (!ret && fsync(rd->fd))
		ret = -errno;
	if (close(rd->fd) && !ret)
		ret = -errno;
	rd->fd = -1;
	return ret;
}

/* The log's first bytes: the file, the reserved range, the super block. */
static int log_begin(struct rec_dev *rd)
{
	uint64_t len = REC_STEP;
	int ret, fd;

	fd = open(rd->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		ret = -errno;
		blk_err("record: %s: cannot create %s: %s", rd->dev, rd->path, strerror(errno));
		return ret;
	}
	rd->map = mmap(NULL, REC_VA, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (rd->map == MAP_FAILED) {
		ret = -errno;
		rd->map = NULL;
		blk_err("record: %s: cannot reserve address space for the log: %s", rd->dev,
			strerror(-ret));
		close(fd);
		return ret;
	}
	rd->fd = fd;
	rd->no_falloc = false;
	rd->tight = false;
	rd->growing = false;
	ret = log_grow(rd, 0, len);
	if (ret == -ENOSPC || ret == -EFBIG) {
		rd->tight = true;
		len = page_up(rd->geo.lbs);
		ret = log_grow(rd, 0, len);
	}
	if (ret) {
		blk_err("record: %s: cannot write %s: %s", rd->dev, rd->path, strerror(-ret));
		munmap(rd->map, REC_VA);
		rd->map = NULL;
		close(fd);
		unlink(rd->path);
		rd->fd = -1;
		return ret;
	}
	lw_encode_super(rd->map, rd->geo.lbs, 0);
	rd->ready = len;
	rd->tail = rd->geo.lbs;
	rd->want = 0;
	return 0;
}

static int rec_start(struct rec_dev *rd, const char *snap)
{
	int ret;

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
	ret = log_begin(rd);
	if (ret)
		goto out_destroy_snap;
	ret = -pthread_create(&rd->writer, NULL, writer_main, rd);
	if (ret)
		goto out_unmap;
	pthread_mutex_lock(&rd->lock);
	rd->writer_running = true;
	rd->state = REC_ON;
	rd->err = 0;
	rd->nr_entries = rd->nr_marks = rd->nr_flushes = rd->nr_waits = 0;
	held_clear(rd);		/* nothing in flight: nothing is held */
	rd->log_bytes = rd->geo.lbs;
	rd->nr_starts++;
	rd->gate = false;
	pthread_cond_broadcast(&rd->cv);
	pthread_cond_signal(&rd->writer_cv);
	pthread_mutex_unlock(&rd->lock);
	blk_info("record: %s: recording to %s%s%s", rd->dev, rd->path,
		 *snap ? " from snapshot " : "", snap);
	return 0;

out_unmap:
	munmap(rd->map, REC_VA);
	rd->map = NULL;
	close(rd->fd);
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
	pthread_cond_broadcast(&rd->space_cv);
	pthread_cond_broadcast(&rd->cv);	/* a mark waiting to be logged */
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
	int ret;

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
	rd->nr_marks++;
	if (must_hold_locked(rd)) {
		/* after the flushes in flight: wait until they end and it is logged */
		uint64_t seq = hold_locked(rd, &e, buf, NULL, 0);

		while (rd->state == REC_ON && rd->logged_seq <= seq)
			pthread_cond_wait(&rd->cv, &rd->lock);
		ret = rd->state == REC_ON ? 0 : -EBADFD;
		pthread_mutex_unlock(&rd->lock);
		return ret;
	}
	/* In the file at once (mapped): a reader sees the mark when this returns. */
	log_entry_locked(rd, &e, buf, NULL, 0);
	pthread_mutex_unlock(&rd->lock);
	return 0;
}

/* ---- attrs ---- */

static int attr_start_store(struct blk_backend *be, const char *buf, size_t len)
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

static int attr_stop_store(struct blk_backend *be, const char *buf, size_t len)
{
	char s[4];

	if (be_attr_text(buf, len, s, sizeof(s)) || strcmp(s, "1"))
		return -EINVAL;
	return rec_stop((struct rec_dev *)be);
}

static int attr_mark_store(struct blk_backend *be, const char *buf, size_t len)
{
	return rec_mark((struct rec_dev *)be, buf, len);
}

static int attr_state_show(struct blk_backend *be, char *buf, size_t len)
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

static int attr_path_show(struct blk_backend *be, char *buf, size_t len)
{
	struct rec_dev *rd = (struct rec_dev *)be;

	return be_attr_out(buf, len, rd->path ? rd->path : "none");
}

/* An action's file reads empty. */
#define attr_start_show	rec_empty_show
#define attr_stop_show	rec_empty_show
#define attr_mark_show	rec_empty_show

/*
 * path is the one key (read by open(): "empty file name" is its own
 * message); the rest are actions and state.
 */
#define RECORD_KNOBS(K)								\
	K(start, none, be,   0, 0, 0, "a snapshot name, or -", ACT, NULL)	\
	K(stop,  none, be,   0, 0, 0, "1", ACT, NULL)				\
	K(mark,  none, be,   0, 0, 0, "a mark's text", ACT, NULL)		\
	K(state, none, be,   0, 0, 0, "", OWNRO, NULL)				\
	K(path,  none, path, 0, 0, 0, "a file", OWNKEY, NULL)

BK_DEFINE(record, struct rec_dev, lock, NULL, RECORD_KNOBS);

/* ---- open, close, stat ---- */

static struct blk_backend *rec_open(struct blk_params *p, struct blk_backend *next)
{
	struct rec_dev *rd;
	const char *path;
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
	rd->held_tail = &rd->held;
	ret = -pthread_mutex_init(&rd->lock, NULL);
	if (ret)
		goto out_free;
	pthread_cond_init(&rd->cv, NULL);
	pthread_cond_init(&rd->space_cv, NULL);
	/* never waited on with a timeout; plain, as the other two */
	pthread_cond_init(&rd->writer_cv, NULL);
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
	held_clear(rd);
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
			   "record_log_bytes %llu\nrecord_mapped_ahead_bytes %llu\nrecord_starts %llu\n"
			   "record_waits %llu\n",
			   rd->state == REC_ON, rd->state == REC_FAILED, rd->err,
			   (unsigned long long)rd->nr_entries, (unsigned long long)rd->nr_marks,
			   (unsigned long long)rd->nr_flushes, (unsigned long long)rd->log_bytes,
			   (unsigned long long)(rd->writer_running ? rd->ready - rd->tail : 0),
			   (unsigned long long)rd->nr_starts, (unsigned long long)rd->nr_waits);
	pthread_mutex_unlock(&rd->lock);
	return n + be_pool_stat(&rd->io_pool, "record_io", buf + n, len - n);
}

const struct blk_backend_ops record_filter_ops = {
	.name = "record",
	.is_filter = true,
	.keys = record_keys,
	.help = "record: a dm-log-writes log of the device's writes and flushes "
		"(echo SNAP > .sys/DEV/record/start, mark, stop); record.path = FILE",
	.open = rec_open,
	.close = rec_close,
	.geometry = be_filter_geometry,
	.resize = be_filter_resize,
	.submit = rec_submit,
	.stat = rec_stat,
	.attrs = record_attrs,
	.snap = &be_filter_snap_ops,
};
