// SPDX-License-Identifier: MIT
/*
 * backends/nbd.c - remote storage through the NBD protocol, with libnbd as
 * the client (no protocol code here): any NBD server (nbdkit, qemu-nbd,
 * qemu-storage-daemon, rbd-nbd, a cloud gateway), over a Unix socket, TCP
 * or TLS (nbds://), with blkfs's cache, shaping and filters in front.
 *
 * Geometry is the server's (NBD_INFO_BLOCK_SIZE): the logical block is its
 * minimum raised to 512, the physical block its preferred size when larger,
 * max_io its maximum capped at 32M. A config may tighten that (a larger
 * logical block, a smaller max_io) but not contradict it.
 *
 * Threads and locks: one poll thread per connection; conn->lock covers the
 * connection's state and every libnbd call on its handle (the completion
 * callbacks run under it too). Only the poll thread creates, closes or
 * replaces a handle, so a dead one is never freed under anyone's feet.
 *  - submit() picks a connection (the least loaded of those up). When that
 *    connection has nothing waiting and a free slot, submit() issues the
 *    NBD commands itself (libnbd queues them on the socket without
 *    blocking) and the poll thread only sees the replies: no thread hop on
 *    the way out, which here is most of the cost of a 4 KiB I/O (measured:
 *    the daemon's time went to wakeups and context switches). Otherwise it
 *    appends the request to the connection's pending list and, when that
 *    was empty, wakes the poll thread through its eventfd. submit() never
 *    blocks on the network and never waits for a slot.
 *  - The poll thread issues pending requests while fewer than queue_depth
 *    commands are in flight (one READ/WRITE becomes one command per run of
 *    memory-contiguous iovec segments, at most 4M each: folio memory goes
 *    to the socket with no copy; WRITE_ZEROES/DISCARD are split at the
 *    server's limit),
 *    polls the socket in the direction libnbd asks for, and lets libnbd
 *    run the completion callbacks. A callback only moves its request to
 *    the done list; end_io runs afterwards, from the poll thread, with no
 *    lock held (libnbd's included), so an end_io may submit again.
 *  - FLUSH goes to every connection that is up (multi-conn: the protocol
 *    asks for it) and ends when the last one has; without can_flush the
 *    server has no volatile cache and FLUSH ends at once.
 *
 * Failure: a connection that dies (EOF, reset) or makes no progress for
 * `timeout` while commands are in flight is closed; its in-flight requests
 * end with -EIO (the cache keeps the data dirty and the next fsync reports
 * it). The thread reconnects with backoff (a new handle, same URI, same
 * size and block sizes required). Requests queued meanwhile wait for the
 * reconnect at most `timeout`; once a connection has been down that long,
 * new requests fail at once, so no caller ever waits much longer than
 * `timeout`. A connection lost while writes it had acknowledged were not
 * yet flushed makes the next FLUSH fail with -EIO: the server may have
 * lost them with its volatile cache, as a disk losing power would.
 *
 * Request life: submit -> pending -> active (commands issued, some in
 * flight) -> done -> end_io -> freed; or submit -> active at once. nr_pending
 * counts the requests between submit() and the return of their end_io;
 * close() lets the threads leave once it is zero.
 *
 * Lock order: conn->lock -> (libnbd's handle lock) -> nd->lock. None is held
 * while an end_io runs or while the poll thread sleeps.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <libnbd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "backends_int.h"
#include "kit/knobs.h"

#define NBD_DEF_QD		64
#define NBD_MAX_QD		1024
#define NBD_DEF_CONNS		1
#define NBD_MAX_CONNS		16
#define NBD_DEF_TIMEOUT_MS	5000
#define NBD_MIN_TIMEOUT_MS	10
#define NBD_MAX_TIMEOUT_MS	(24u * 3600 * 1000)
#define NBD_MAX_IO_CAP		(32u << 20)	/* libnbd itself takes at most 64M */
#define NBD_ZERO_CHUNK		(64u << 20)	/* WRITE_ZEROES per command, at most */
/*
 * READ/WRITE per command, at most: a larger I/O goes as several commands
 * in flight at once. Measured with nbdkit memory (dd bs=1M, 1 GiB, 256M
 * cache): 32M commands ran at ~400 MB/s against 470-790 MB/s for 1M-16M
 * ones; nbdkit takes each request's buffer from malloc, which maps 32M
 * afresh every time (glibc's mmap threshold stops at 32M), and first
 * touch of fresh memory is slow here. Smaller commands also let a
 * multi-threaded server work on one I/O in parallel.
 */
#define NBD_DATA_CHUNK		(4u << 20)
#define NBD_ZERO_BUF		(1u << 20)	/* zeros written from here without can_zero */
#define NBD_BACKOFF_MIN_MS	20
#define NBD_BACKOFF_MAX_MS	1000
#define NBD_DISC_WAIT_MS	1000		/* a polite NBD_CMD_DISC at close, at most */
#define NBD_MAX_BLOCK		(64u << 10)
#define NBD_NO_LIMIT		UINT32_MAX	/* block_size_maximum 0 / 0xffffffff */

#define NS_PER_MS		((uint64_t)1000000)

enum conn_state {
	CONN_DOWN,		/* no handle; next attempt at c->next_try */
	CONN_CONNECTING,	/* handle connecting (nbd_aio_connect_uri) */
	CONN_UP,		/* handle ready for commands */
};

struct nbd_conn;

/* A FLUSH sent to several connections: ends when the last child has. */
struct nbd_flush {
	struct blk_io *io;
	int remaining;		/* atomic: children not yet ended */
	int err;		/* atomic: first error of a child */
	uint64_t gen;		/* nd->wgen when submitted */
};

struct nbd_req {
	struct blk_io *io;		/* the cache's; NULL for a FLUSH child */
	struct nbd_flush *fl;		/* a FLUSH child: its group */
	struct nbd_conn *conn;
	struct list_head node;		/* on one list of its conn at a time; conn->lock */
	enum blk_op op;
	uint64_t t_submit;		/* ns, CLOCK_MONOTONIC */
	uint64_t total;			/* bytes to issue (FLUSH: 1) */
	uint64_t off;			/* bytes issued so far */
	int iov_i;			/* READ/WRITE: where req->off is in io->iov: */
	size_t iov_off;			/* segment, and bytes into it */
	unsigned char *bounce;		/* READ/WRITE through a copy (see nbd_need_bounce) */
	unsigned int cmds;		/* commands in flight */
	int err;			/* first error: what end_io gets */
	bool zero_writes;		/* counted in nr_zero_writes */
};

/* What a server said when a handle connected. */
struct nbd_srv {
	uint64_t size;
	uint32_t bmin, bpref, bmax;	/* bmax NBD_NO_LIMIT when none */
	bool can_flush, can_zero, can_trim, can_fua, can_multi_conn, read_only;
};

struct nbd_dev;

struct nbd_conn {
	struct nbd_dev *nd;
	unsigned int idx;
	pthread_t thread;
	int efd;			/* eventfd: submit() and close() wake the thread */

	/* Read without the lock by submit() to pick a connection: atomic. */
	int state;			/* enum conn_state; written under lock */
	bool failing;			/* down for `timeout`: new I/O fails at once */
	unsigned int load;		/* requests given to it and not ended */

	pthread_mutex_t lock;		/* all below, and every libnbd call on h */
	struct nbd_handle *h;		/* created, closed, replaced: poll thread only */
	struct nbd_srv srv;		/* of h */
	struct list_head pending;	/* submitted, not started */
	struct list_head active;	/* started */
	struct nbd_req *cur;		/* started, not every command issued yet */
	struct list_head done;		/* to end (by the poll thread) */
	unsigned int cmds;		/* commands in flight on h */
	unsigned int nr_queued;		/* on pending */
	char dead_why[160];		/* libnbd's word when a call found h dead */
	uint64_t now;			/* ns, refreshed by whoever takes the lock to work */
	uint64_t last_progress;		/* ns: a reply, or the socket moved */

	/* The poll thread's own. */
	uint64_t down_since, next_try, connect_deadline;
	unsigned int backoff_ms;
	bool ever_up;			/* a later UP is a reconnect */
	bool quiet;			/* this outage's retries were logged */
	bool resize_drop;		/* lock: reconnect to learn the export's new size */
};

struct nbd_dev {
	struct blk_backend be;		/* must come first */
	/* set at open; size (and srv0.size) change only in nbd_resize(), quiesced */
	struct blk_geometry geo;
	struct nbd_srv srv0;		/* the server at open: reconnects must match */
	char *uri;
	char *name;			/* device name, for messages */
	unsigned int nconn;		/* connections in use */
	unsigned int nconn_init;	/* connections set up (locks, eventfds) */
	unsigned int qd;		/* commands in flight per connection */
	uint64_t timeout_ns;
	uint32_t cmd_align;		/* server minimum block: every command aligned to it */
	bool read_only;			/* the mount is read-only: a read-only export will do */
	uint32_t zero_chunk;		/* WRITE_ZEROES bytes per command */
	uint32_t zero_len;		/* bytes per write from zero_buf */
	void *zero_buf;			/* zeros, read-only */

	pthread_mutex_t lock;
	uint64_t nr_pending;		/* lock: submitted, end_io not yet returned */
	bool stopping;			/* lock: close() has begun */
	bool lost;			/* lock: acknowledged writes may be lost */
	uint64_t flushed_gen;		/* lock: wgen covered by the last good FLUSH */
	uint64_t wgen;			/* atomic: writes (zeroes) acknowledged */
	unsigned int rr;		/* atomic: where connection choice starts */

	/* Counters for ->stat: atomic. */
	uint64_t nr_commands;		/* NBD commands issued */
	uint64_t nr_completed;		/* end_io calls */
	uint64_t nr_errors;		/* end_io calls with an error */
	uint64_t nr_drops;		/* connections lost */
	uint64_t nr_reconnects;		/* connections made again */
	uint64_t nr_timeouts;		/* connections closed for making no progress */
	uint64_t nr_zero_writes;	/* zero ranges written as data */
	uint64_t nr_bounced;		/* READ/WRITE through a copy */
	uint64_t nr_flush_lost;		/* FLUSH failed: writes lost with a connection */

	struct nbd_conn conn[];
};

/* ---- small helpers ---- */

#define ATOMIC_INC(p)		__atomic_add_fetch((p), 1, __ATOMIC_RELAXED)
#define ATOMIC_ADD(p, v)	__atomic_add_fetch((p), (v), __ATOMIC_RELAXED)
#define ATOMIC_LOAD(p)		__atomic_load_n((p), __ATOMIC_RELAXED)
#define ATOMIC_STORE(p, v)	__atomic_store_n((p), (v), __ATOMIC_RELAXED)

static void conn_wake(struct nbd_conn *c)
{
	uint64_t one = 1;

	/* Only fails when the counter would overflow: it is then non-zero anyway. */
	while (write(c->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

static void nbd_wake_all(struct nbd_dev *nd)
{
	unsigned int i;

	for (i = 0; i < nd->nconn; i++)
		conn_wake(&nd->conn[i]);
}

/*
 * What end_io gets for an NBD error. The server's ENOSPC stays ENOSPC (a
 * thin or quota-bound export is full); everything else, the server's EIO,
 * a dead connection's ENOTCONN or a refused command, is -EIO, as a block
 * device says it.
 */
static int nbd_map_err(int err)
{
	if (err == ENOSPC || err == EDQUOT)
		return -ENOSPC;
	return -EIO;
}

/* ---- requests ---- */

/* A request is over on this connection: to the done list. */
static void req_finish(struct nbd_conn *c, struct nbd_req *req)
{
	assert(!req->cmds);
	list_move_tail(&req->node, &c->done);
}

/* libnbd's completion callback: on the poll thread, with the handle locked. */
static int nbd_cmd_done(void *user_data, int *error)
{
	struct nbd_req *req = user_data;
	struct nbd_conn *c = req->conn;

	assert(req->cmds > 0 && c->cmds > 0);
	req->cmds--;
	c->cmds--;
	c->last_progress = c->now;
	if (*error && !req->err)
		req->err = nbd_map_err(*error);
	/* Ended here only once every command is issued; else by the issuer. */
	if (req->off == req->total && !req->cmds)
		req_finish(c, req);
	return 1;	/* retire it: nobody asks libnbd about it later */
}

/*
 * Issue the next command of @req at req->off. Returns 0 (issued, or
 * nothing left), or -1 when libnbd refused the command (req->err set).
 */
static int req_issue_one(struct nbd_conn *c, struct nbd_req *req)
{
	struct nbd_dev *nd = c->nd;
	struct blk_io *io = req->io;
	nbd_completion_callback cb = { .callback = nbd_cmd_done, .user_data = req };
	uint64_t pos = io ? io->pos + req->off : 0;
	uint64_t len = 0;
	int64_t cookie;

	/* The callback may run inside the call (a handle dying): count first. */
	req->cmds++;
	c->cmds++;
	switch (req->op) {
	case BLK_READ:
	case BLK_WRITE: {
		void *buf;

		if (req->bounce) {
			buf = req->bounce + req->off;
			len = req->total - req->off;
			if (len > NBD_DATA_CHUNK)
				len = NBD_DATA_CHUNK;
		} else {
			const struct iovec *v;
			int i = req->iov_i;
			size_t o = req->iov_off;

			/*
			 * Only a FLUSH child has no blk_io. (The analyzer
			 * cannot tell: req escapes to libnbd as the callback's
			 * user_data, so after a command it assumes req->op
			 * may have changed.)
			 */
			assert(io);
			v = io->iov;

			while (o == v[i].iov_len) {	/* done with it, or empty */
				i++;
				o = 0;
			}
			buf = (char *)v[i].iov_base + o;
			len = v[i].iov_len - o;
			if (len >= NBD_DATA_CHUNK) {
				len = NBD_DATA_CHUNK;
				o += NBD_DATA_CHUNK;
			} else {
				/* Segments adjacent in memory go as one command. */
				for (i++, o = 0; i < io->iovcnt; i++) {
					size_t take = v[i].iov_len;

					if (take && (char *)v[i].iov_base != (char *)buf + len)
						break;
					if (take > NBD_DATA_CHUNK - len)
						take = NBD_DATA_CHUNK - len;
					len += take;
					if (take < v[i].iov_len) {
						o = take;
						break;
					}
				}
			}
			req->iov_i = i;
			req->iov_off = o;
		}
		if (req->op == BLK_READ)
			cookie = nbd_aio_pread(c->h, buf, len, pos, cb, 0);
		else
			cookie = nbd_aio_pwrite(c->h, buf, len, pos, cb, 0);
		break;
	}
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		len = req->total - req->off;
		if (c->srv.can_zero) {
			/*
			 * DISCARD must leave zeros: WRITE_ZEROES that may punch
			 * holes (TRIM alone promises nothing about contents);
			 * WRITE_ZEROES keeps the blocks allocated (NO_HOLE).
			 */
			if (len > nd->zero_chunk)
				len = nd->zero_chunk;
			cookie = nbd_aio_zero(c->h, len, pos, cb,
					      req->op == BLK_WRITE_ZEROES ? LIBNBD_CMD_FLAG_NO_HOLE : 0);
		} else {
			if (len > nd->zero_len)
				len = nd->zero_len;
			if (!req->zero_writes) {
				req->zero_writes = true;
				ATOMIC_INC(&nd->nr_zero_writes);
			}
			cookie = nbd_aio_pwrite(c->h, nd->zero_buf, len, pos, cb, 0);
		}
		break;
	case BLK_FLUSH:
	default:
		len = 1;
		cookie = nbd_aio_flush(c->h, cb, 0);
		break;
	}
	if (cookie == -1) {
		int err = nbd_get_errno();

		req->cmds--;
		c->cmds--;
		if (!req->err)
			req->err = nbd_map_err(err);
		/*
		 * A dead handle is dropped by the poll thread, which may not be
		 * the caller (libnbd's error is per thread): keep its word.
		 * Anything else is worth a line.
		 */
		if (nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h))
			snprintf(c->dead_why, sizeof(c->dead_why), "%s",
				 nbd_get_error() ? nbd_get_error() : "the connection failed");
		else
			blk_err("nbd: %s: connection %u: command refused: %s",
				nd->name, c->idx, nbd_get_error());
		req->off = req->total;		/* issue nothing more of it */
		return -1;
	}
	ATOMIC_INC(&nd->nr_commands);
	req->off += len;
	return 0;
}

/* ---- connections ---- */

static void conn_log(struct nbd_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void conn_log(struct nbd_conn *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	blk_warn("nbd: %s: connection %u to %s: %s", c->nd->name, c->idx,
		c->nd->uri, msg);
}

/* A new handle, set up the same way for open and for every reconnect. */
static struct nbd_handle *nbd_handle_new(void)
{
	struct nbd_handle *h = nbd_create();

	if (!h)
		return NULL;
	/*
	 * Reads land straight in folio memory; zeroing it first (libnbd's
	 * default, against leaking a buffer's old contents to a careless
	 * caller) would only cost a memset per read: on error the cache
	 * never uses the buffer.
	 */
	nbd_set_pread_initialize(h, false);
	/* tls-psk-file= and tls-certificates= in the URI: the config is root's. */
	nbd_set_uri_allow_local_file(h, true);
	nbd_set_request_block_size(h, true);
	return h;
}

static uint32_t block_size(struct nbd_handle *h, int which)
{
	int64_t v = nbd_get_block_size(h, which);

	return v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
}

static int srv_read(struct nbd_handle *h, struct nbd_srv *s)
{
	int64_t size = nbd_get_size(h);

	if (size < 0)
		return -1;
	s->size = (uint64_t)size;
	s->bmin = block_size(h, LIBNBD_SIZE_MINIMUM);
	s->bpref = block_size(h, LIBNBD_SIZE_PREFERRED);
	s->bmax = block_size(h, LIBNBD_SIZE_MAXIMUM);
	if (!s->bmax)
		s->bmax = NBD_NO_LIMIT;
	s->can_flush = nbd_can_flush(h) == 1;
	s->can_zero = nbd_can_zero(h) == 1;
	s->can_trim = nbd_can_trim(h) == 1;
	s->can_fua = nbd_can_fua(h) == 1;
	s->can_multi_conn = nbd_can_multi_conn(h) == 1;
	s->read_only = nbd_is_read_only(h) == 1;
	return 0;
}

/*
 * Is the server @s (a reconnect, or another connection) one the device can
 * keep using? Returns NULL, or what differs, in @buf.
 */
static const char *srv_mismatch(const struct nbd_dev *nd, const struct nbd_srv *s, char *buf,
				size_t len)
{
	const struct blk_geometry *g = &nd->geo;

	if (s->read_only && !nd->read_only)
		snprintf(buf, len, "the export is now read-only");
	else if (s->size / g->lbs * g->lbs != g->size)
		snprintf(buf, len, "the export is now %" PRIu64 " bytes, was %" PRIu64,
			 s->size, nd->srv0.size);
	else if (s->bmin > g->lbs || (s->bmin && g->lbs % s->bmin))
		snprintf(buf, len, "the server's minimum block size is now %" PRIu32
			 " (the device's logical block is %" PRIu32 ")", s->bmin, g->lbs);
	else if (s->bmax < g->max_io)
		snprintf(buf, len, "the server's maximum block size is now %" PRIu32
			 " (the device's max_io is %" PRIu32 ")", s->bmax, g->max_io);
	else
		return NULL;
	return buf;
}

static void conn_set_state(struct nbd_conn *c, enum conn_state st)
{
	__atomic_store_n(&c->state, (int)st, __ATOMIC_RELEASE);
}

static bool conn_dead_locked(struct nbd_conn *c)
{
	return c->h && (nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h));
}

/*
 * Close the handle; every request started on it ends with -EIO. Requests
 * not yet started stay pending for the reconnect. Poll thread, lock held.
 */
static void conn_drop_locked(struct nbd_conn *c, const char *why)
{
	struct nbd_dev *nd = c->nd;
	struct nbd_req *req;
	bool unflushed;

	/*
	 * libnbd may have failed the commands in flight already (the handle
	 * died in the call that noticed): no count here would be right.
	 */
	conn_log(c, "lost (%s); I/O in flight on it fails with EIO; reconnecting", why);
	c->dead_why[0] = '\0';
	/*
	 * nbd_close() may run the callbacks of commands still in flight
	 * (ENOTCONN: -EIO); whatever is left after it is ended here.
	 */
	nbd_close(c->h);
	c->h = NULL;
	while ((req = list_first_entry_or_null(&c->active, struct nbd_req, node))) {
		req->cmds = 0;
		req->off = req->total;
		if (!req->err)
			req->err = -EIO;
		req_finish(c, req);
	}
	c->cur = NULL;
	c->cmds = 0;

	pthread_mutex_lock(&nd->lock);
	unflushed = ATOMIC_LOAD(&nd->wgen) != nd->flushed_gen;
	if (unflushed && c->srv.can_flush)
		nd->lost = true;
	pthread_mutex_unlock(&nd->lock);

	ATOMIC_INC(&nd->nr_drops);
	conn_set_state(c, CONN_DOWN);
	c->down_since = c->now;
	c->next_try = c->now;		/* at once: the server may be back already */
	c->backoff_ms = NBD_BACKOFF_MIN_MS;
	c->quiet = false;
}

/* Poll thread, lock held. */
static void conn_retry_later_locked(struct nbd_conn *c, const char *why)
{
	if (c->h) {
		nbd_close(c->h);
		c->h = NULL;
	}
	if (!c->quiet) {
		conn_log(c, "cannot reconnect (%s); retrying every %u ms at most", why,
			 NBD_BACKOFF_MAX_MS);
		c->quiet = true;
	}
	conn_set_state(c, CONN_DOWN);
	c->next_try = c->now + (uint64_t)c->backoff_ms * NS_PER_MS;
	c->backoff_ms *= 2;
	if (c->backoff_ms > NBD_BACKOFF_MAX_MS)
		c->backoff_ms = NBD_BACKOFF_MAX_MS;
}

/*
 * Poll thread, lock held on entry and exit: a new handle and its connect
 * are made without the lock (a host name is resolved synchronously), which
 * nobody misses: while the state is DOWN no one else touches c->h.
 */
static void conn_connect_start_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;
	struct nbd_handle *h;
	char why[256] = "";
	int ret = -1;

	pthread_mutex_unlock(&c->lock);
	h = nbd_handle_new();
	if (h)
		ret = nbd_aio_connect_uri(h, nd->uri);
	if (ret == -1)
		snprintf(why, sizeof(why), "%s", nbd_get_error() ? nbd_get_error() : "out of memory");
	pthread_mutex_lock(&c->lock);
	c->now = blk_now_ns();
	c->h = h;
	if (ret == -1) {
		conn_retry_later_locked(c, why);
		return;
	}
	conn_set_state(c, CONN_CONNECTING);
	c->connect_deadline = c->now + nd->timeout_ns;
}

/* The handshake ended: usable if the server is the same one. */
static void conn_connected_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;
	struct nbd_srv s;
	char why[200];
	const char *bad;

	if (srv_read(c->h, &s)) {
		conn_retry_later_locked(c, nbd_get_error());
		return;
	}
	bad = srv_mismatch(nd, &s, why, sizeof(why));
	if (bad) {
		conn_retry_later_locked(c, bad);
		return;
	}
	c->srv = s;
	c->last_progress = c->now;
	if (c->ever_up) {
		ATOMIC_INC(&nd->nr_reconnects);
		conn_log(c, "reconnected after %" PRIu64 " ms",
			 (c->now - c->down_since) / NS_PER_MS);
	}
	c->ever_up = true;
	ATOMIC_STORE(&c->failing, false);
	conn_set_state(c, CONN_UP);
}

/*
 * After libnbd ran on the poll thread: did the handle change state? @err:
 * libnbd's error when the call that ran it failed, else NULL (libnbd's
 * last error may be an old one).
 */
static void conn_check_handle_locked(struct nbd_conn *c, const char *err)
{
	bool gone;

	if (!c->h)
		return;
	gone = conn_dead_locked(c);
	if (c->state == CONN_CONNECTING) {
		if (nbd_aio_is_ready(c->h))
			conn_connected_locked(c);
		else if (gone)
			conn_retry_later_locked(c, err ? err : "the server closed the connection");
	} else if (c->state == CONN_UP && gone) {
		conn_drop_locked(c, err ? err : "the server closed the connection");
	}
}

/*
 * Issue commands of @req (started: on active, c->cur) while slots are free.
 * Returns true when every command is issued (c->cur cleared, and @req on
 * done if none is left in flight). Lock held; any thread.
 */
static bool req_issue_locked(struct nbd_conn *c, struct nbd_req *req)
{
	struct nbd_dev *nd = c->nd;

	/* No volatile cache on the server: nothing to flush. */
	if (req->op == BLK_FLUSH && !c->srv.can_flush)
		req->off = req->total;
	while (req->off < req->total && c->cmds < nd->qd) {
		if (!c->cmds)
			c->last_progress = c->now;	/* a busy period starts */
		if (req_issue_one(c, req) && conn_dead_locked(c))
			break;
	}
	if (req->off < req->total && !conn_dead_locked(c))
		return false;
	/* A dead handle: the rest is never sent; what is in flight ends later. */
	req->off = req->total;
	c->cur = NULL;
	if (!req->cmds)
		req_finish(c, req);
	return true;
}

static void req_start_locked(struct nbd_conn *c, struct nbd_req *req)
{
	list_add_tail(&req->node, &c->active);
	c->cur = req;
}

/* Start pending requests while slots are free. Poll thread, lock held. */
static void conn_issue_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;

	while (c->state == CONN_UP && c->cmds < nd->qd && !conn_dead_locked(c)) {
		struct nbd_req *req = c->cur;

		if (!req) {
			req = list_first_entry_or_null(&c->pending, struct nbd_req, node);
			if (!req)
				break;
			list_del_init(&req->node);
			c->nr_queued--;
			req_start_locked(c, req);
		}
		if (!req_issue_locked(c, req))
			break;
	}
	if (c->state == CONN_UP && conn_dead_locked(c))
		conn_drop_locked(c, c->dead_why[0] ? c->dead_why : "the connection failed");
}

/* Not up: requests that waited `timeout` (or all, when down that long) fail. */
static void conn_expire_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;
	struct list_head *pos, *n;
	bool all;

	if (c->state == CONN_UP)
		return;
	all = c->now - c->down_since >= nd->timeout_ns;
	if (all && !ATOMIC_LOAD(&c->failing)) {
		ATOMIC_STORE(&c->failing, true);
		conn_log(c, "down for %" PRIu64 " ms: I/O fails with EIO until it is back",
			 nd->timeout_ns / NS_PER_MS);
	}
	list_for_each_safe(pos, n, &c->pending) {
		struct nbd_req *req = list_entry(pos, struct nbd_req, node);

		if (all || c->now - req->t_submit >= nd->timeout_ns) {
			c->nr_queued--;
			req->err = -EIO;
			list_move_tail(&req->node, &c->done);
		}
	}
}

/* No progress for `timeout` with commands in flight: the server is gone. */
static void conn_check_timeout_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;
	char why[80];

	if (c->state != CONN_UP || !c->cmds || c->now - c->last_progress < nd->timeout_ns)
		return;
	ATOMIC_INC(&nd->nr_timeouts);
	snprintf(why, sizeof(why), "no reply for %" PRIu64 " ms", nd->timeout_ns / NS_PER_MS);
	conn_drop_locked(c, why);
}

/* ---- ending requests ---- */

static void nbd_io_ended(struct nbd_dev *nd, int err)
{
	ATOMIC_INC(&nd->nr_completed);
	if (err)
		ATOMIC_INC(&nd->nr_errors);
}

static void pending_sub(struct nbd_dev *nd, uint64_t n)
{
	bool wake;

	if (!n)
		return;
	pthread_mutex_lock(&nd->lock);
	nd->nr_pending -= n;
	wake = nd->stopping && !nd->nr_pending;
	pthread_mutex_unlock(&nd->lock);
	if (wake)
		nbd_wake_all(nd);
}

/* Copy @len bytes from @src out into the iovec. */
static void iov_copy_out(const struct iovec *iov, int iovcnt, const unsigned char *src,
			 uint64_t len)
{
	int i;

	for (i = 0; i < iovcnt && len; i++) {
		size_t n = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(iov[i].iov_base, src, n);
		src += n;
		len -= n;
	}
}

/* End every request on @done: poll thread, no lock held. */
static void conn_end(struct nbd_conn *c, struct list_head *done)
{
	struct nbd_dev *nd = c->nd;
	struct nbd_req *req;
	uint64_t ended = 0;

	while ((req = list_first_entry_or_null(done, struct nbd_req, node))) {
		struct blk_io *io = req->io;
		int err = req->err;

		list_del_init(&req->node);
		__atomic_sub_fetch(&c->load, 1, __ATOMIC_RELAXED);
		if (req->fl) {
			struct nbd_flush *fl = req->fl;
			int zero = 0;

			free(req);
			if (err)
				__atomic_compare_exchange_n(&fl->err, &zero, err, false,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
			if (__atomic_sub_fetch(&fl->remaining, 1, __ATOMIC_ACQ_REL))
				continue;
			err = __atomic_load_n(&fl->err, __ATOMIC_RELAXED);
			if (!err) {
				pthread_mutex_lock(&nd->lock);
				if ((int64_t)(fl->gen - nd->flushed_gen) > 0)
					nd->flushed_gen = fl->gen;
				pthread_mutex_unlock(&nd->lock);
			}
			io = fl->io;
			free(fl);
		} else {
			if (!err && req->bounce && req->op == BLK_READ)
				iov_copy_out(io->iov, io->iovcnt, req->bounce, io->len);
			/* Before end_io: a FLUSH the cache sends next must see it. */
			if (!err && req->op != BLK_READ)
				__atomic_add_fetch(&nd->wgen, 1, __ATOMIC_RELEASE);
			free(req->bounce);
			free(req);
		}
		nbd_io_ended(nd, err);
		/* May free @io, or submit(): no lock is held here. */
		io->end_io(io, err);
		ended++;
	}
	pending_sub(nd, ended);
}

/* ---- the poll thread ---- */

static int conn_poll_timeout_locked(struct nbd_conn *c)
{
	struct nbd_dev *nd = c->nd;
	uint64_t when = UINT64_MAX;
	struct nbd_req *req;

	switch (c->state) {
	case CONN_UP:
		/*
		 * Busy: when `timeout` without progress runs out. Idle: a look
		 * every `timeout` anyway, since submit() may start a busy
		 * period while this thread sleeps without waking it.
		 */
		when = (c->cmds ? c->last_progress : c->now) + nd->timeout_ns;
		break;
	case CONN_CONNECTING:
		when = c->connect_deadline;
		break;
	case CONN_DOWN:
		when = c->next_try;
		break;
	}
	if (c->state != CONN_UP) {
		if (!list_empty(&c->pending) && !ATOMIC_LOAD(&c->failing) &&
		    c->down_since + nd->timeout_ns < when)
			when = c->down_since + nd->timeout_ns;
		list_for_each_entry(req, &c->pending, node)
			if (req->t_submit + nd->timeout_ns < when)
				when = req->t_submit + nd->timeout_ns;
	}
	if (when <= c->now)
		return 0;
	/* Rounded up: waking a little late is fine, spinning is not. */
	return (int)((when - c->now + NS_PER_MS - 1) / NS_PER_MS);
}

/* At close: NBD_CMD_DISC, a moment for the server to see it, then close. */
static void conn_disconnect(struct nbd_conn *c)
{
	uint64_t end = blk_now_ns() + NBD_DISC_WAIT_MS * NS_PER_MS;

	if (!c->h)
		return;
	if (c->state == CONN_UP && nbd_aio_disconnect(c->h, 0) == 0) {
		while (!nbd_aio_is_closed(c->h) && !nbd_aio_is_dead(c->h)) {
			uint64_t now = blk_now_ns();

			if (now >= end || nbd_poll(c->h, (int)((end - now) / NS_PER_MS) + 1) <= 0)
				break;
		}
	}
	nbd_close(c->h);
	c->h = NULL;
}

/* Work that needs no waiting: is there any? Lock held. */
static bool conn_has_work_locked(struct nbd_conn *c)
{
	return !list_empty(&c->done) ||
	       (c->state == CONN_UP && c->cmds < c->nd->qd &&
		(c->cur || !list_empty(&c->pending)));
}

static void *conn_thread_fn(void *arg)
{
	struct nbd_conn *c = arg;
	struct nbd_dev *nd = c->nd;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		LIST_HEAD(done);
		struct pollfd pfd[2];
		unsigned int dir = 0;
		int n = 1, r, tmo;
		bool stop;

		c->now = blk_now_ns();
		if (c->resize_drop) {
			/* nbd_resize(): nothing in flight; the handle knows the old size */
			c->resize_drop = false;
			if (c->state == CONN_UP)
				conn_drop_locked(c, "the export's size changed");
			else if (c->state == CONN_CONNECTING)
				conn_retry_later_locked(c, "the export's size changed");
			c->next_try = c->now;
		}
		if (c->state == CONN_DOWN && c->now >= c->next_try)
			conn_connect_start_locked(c);
		if (c->state == CONN_CONNECTING && c->now >= c->connect_deadline)
			conn_retry_later_locked(c, "the handshake timed out");
		conn_issue_locked(c);
		conn_check_timeout_locked(c);
		conn_expire_locked(c);
		list_splice_tail_init(&c->done, &done);
		pthread_mutex_unlock(&c->lock);

		/* Ended with no lock held: an end_io may submit again. */
		conn_end(c, &done);

		pthread_mutex_lock(&nd->lock);
		stop = nd->stopping && !nd->nr_pending;
		pthread_mutex_unlock(&nd->lock);
		pthread_mutex_lock(&c->lock);
		if (stop)
			break;
		if (conn_has_work_locked(c))
			continue;

		pfd[0].fd = c->efd;
		pfd[0].events = POLLIN;
		pfd[0].revents = 0;
		if (c->h) {
			dir = nbd_aio_get_direction(c->h);
			pfd[1].fd = nbd_aio_get_fd(c->h);
			pfd[1].events = (dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
					(dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0);
			pfd[1].revents = 0;
			if (pfd[1].fd >= 0)
				n = 2;
		}
		tmo = conn_poll_timeout_locked(c);
		/*
		 * c->h stays open while unlocked: only this thread closes it.
		 * submit() may issue on it meanwhile; it wakes this thread when
		 * libnbd then needs to write, or when the handle died.
		 */
		pthread_mutex_unlock(&c->lock);
		r = poll(pfd, n, tmo);
		pthread_mutex_lock(&c->lock);
		if (r <= 0)
			continue;	/* a deadline, or EINTR: the loop looks again */
		c->now = blk_now_ns();
		if (pfd[0].revents & POLLIN) {
			uint64_t cnt;

			while (read(c->efd, &cnt, sizeof(cnt)) < 0 && errno == EINTR)
				;
		}
		if (n == 2 && pfd[1].revents && c->h) {
			short ev = pfd[1].revents;

			/* The socket moved: the server is alive. */
			c->last_progress = c->now;
			/* What libnbd waits for may have changed since the poll. */
			dir = nbd_aio_get_direction(c->h);
			r = 0;
			if ((dir & LIBNBD_AIO_DIRECTION_READ) && (ev & (POLLIN | POLLHUP | POLLERR)))
				r = nbd_aio_notify_read(c->h);
			else if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && (ev & (POLLOUT | POLLHUP | POLLERR)))
				r = nbd_aio_notify_write(c->h);
			conn_check_handle_locked(c, r == -1 ? nbd_get_error() : NULL);
		}
	}
	conn_disconnect(c);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- submit ---- */

/*
 * One command per run of memory-contiguous segments needs every run to
 * end on the server's minimum block (it refuses unaligned commands). The
 * cache's segments are whole cache blocks, so this holds unless a caller
 * hands over odd slices; then the data goes through one copy.
 */
static bool nbd_need_bounce(const struct nbd_dev *nd, const struct blk_io *io)
{
	uint64_t off = 0;
	int i;

	if (nd->cmd_align <= 1)
		return false;
	for (i = 0; i + 1 < io->iovcnt; i++) {
		off += io->iov[i].iov_len;
		if ((char *)io->iov[i].iov_base + io->iov[i].iov_len != io->iov[i + 1].iov_base &&
		    !blk_aligned(off, nd->cmd_align))
			return true;
	}
	return false;
}

/*
 * The connection for a new request: the least loaded of those up; when
 * none is, one still waiting for its reconnect; else any (it fails fast).
 */
static struct nbd_conn *nbd_pick(struct nbd_dev *nd)
{
	struct nbd_conn *best = NULL;
	unsigned int best_load = UINT32_MAX, best_rank = 3, start, i;

	if (nd->nconn == 1)
		return &nd->conn[0];
	start = __atomic_fetch_add(&nd->rr, 1, __ATOMIC_RELAXED);
	for (i = 0; i < nd->nconn; i++) {
		struct nbd_conn *c = &nd->conn[(start + i) % nd->nconn];
		unsigned int load = ATOMIC_LOAD(&c->load), rank;

		if (__atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_UP)
			rank = 0;
		else if (!ATOMIC_LOAD(&c->failing))
			rank = 1;
		else
			rank = 2;
		if (rank < best_rank || (rank == best_rank && load < best_load)) {
			best = c;
			best_rank = rank;
			best_load = load;
		}
	}
	return best;
}

/*
 * Hand @req to @c: issued at once when the connection is up with nothing
 * waiting and a slot free, else queued for the poll thread.
 */
static void conn_submit(struct nbd_conn *c, struct nbd_req *req)
{
	struct nbd_dev *nd = c->nd;
	bool wake;

	req->conn = c;
	__atomic_add_fetch(&c->load, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&c->lock);
	if (!req->total) {
		/* Nothing to send (an empty range, a FLUSH that failed already). */
		wake = list_empty(&c->done);
		list_add_tail(&req->node, &c->done);
	} else if (c->state == CONN_UP && list_empty(&c->pending) && !c->cur && c->cmds < nd->qd &&
		   !conn_dead_locked(c)) {
		c->now = blk_now_ns();
		req_start_locked(c, req);
		req_issue_locked(c, req);
		/*
		 * The poll thread must look again when libnbd has bytes left to
		 * write (it may be polling for replies only), and when the
		 * handle died or something ended (it drops and ends). Not for
		 * the reply: it polls for that already. Nor for the `timeout`
		 * of a busy period that starts now: idle, it looks every
		 * `timeout` anyway, and then sleeps until last_progress +
		 * timeout, which is when this command would time out.
		 */
		wake = !list_empty(&c->done) || conn_dead_locked(c) ||
		       (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE);
	} else {
		/* A non-empty list already woke the thread, which has yet to take it. */
		wake = list_empty(&c->pending);
		list_add_tail(&req->node, &c->pending);
		c->nr_queued++;
	}
	pthread_mutex_unlock(&c->lock);
	if (wake)
		conn_wake(c);
}

static int nbd_submit_flush(struct nbd_dev *nd, struct blk_io *io, uint64_t t)
{
	struct nbd_req *child[NBD_MAX_CONNS];
	struct nbd_conn *target[NBD_MAX_CONNS];
	struct nbd_flush *fl;
	unsigned int n = 0, i;
	bool lost;

	for (i = 0; i < nd->nconn; i++)
		if (__atomic_load_n(&nd->conn[i].state, __ATOMIC_ACQUIRE) == CONN_UP)
			target[n++] = &nd->conn[i];
	if (!n)
		target[n++] = nbd_pick(nd);

	fl = calloc(1, sizeof(*fl));
	if (!fl)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		child[i] = calloc(1, sizeof(*child[i]));
		if (!child[i]) {
			while (i--)
				free(child[i]);
			free(fl);
			return -ENOMEM;
		}
	}
	fl->io = io;
	fl->remaining = (int)n;
	fl->gen = __atomic_load_n(&nd->wgen, __ATOMIC_ACQUIRE);

	pthread_mutex_lock(&nd->lock);
	lost = nd->lost;
	nd->lost = false;
	pthread_mutex_unlock(&nd->lock);
	if (lost) {
		/* Acknowledged writes went with a lost connection: say so once. */
		ATOMIC_INC(&nd->nr_flush_lost);
		fl->err = -EIO;
	}
	for (i = 0; i < n; i++) {
		struct nbd_req *req = child[i];

		req->fl = fl;
		req->op = BLK_FLUSH;
		req->t_submit = t;
		req->total = lost ? 0 : 1;
		conn_submit(target[i], req);
	}
	return 0;
}

static int nbd_submit(struct blk_backend *be, struct blk_io *io)
{
	struct nbd_dev *nd = (struct nbd_dev *)be;
	struct nbd_req *req;
	uint64_t t = blk_now_ns();
	int ret;

	if (io->op > BLK_WRITE_ZEROES)
		return -EOPNOTSUPP;

	pthread_mutex_lock(&nd->lock);
	/*
	 * After close() began only an end_io may still submit (the threads
	 * stay while nr_pending is not 0); once it is, nothing can.
	 */
	if (nd->stopping && !nd->nr_pending) {
		pthread_mutex_unlock(&nd->lock);
		return -ESHUTDOWN;
	}
	nd->nr_pending++;
	pthread_mutex_unlock(&nd->lock);

	if (io->op == BLK_FLUSH) {
		ret = nbd_submit_flush(nd, io, t);
		if (ret)
			goto out_unpend;
		return 0;
	}

	req = calloc(1, sizeof(*req));
	if (!req) {
		ret = -ENOMEM;
		goto out_unpend;
	}
	req->io = io;
	req->op = io->op;
	req->t_submit = t;
	req->total = io->len;
	if ((io->op == BLK_READ || io->op == BLK_WRITE) && nbd_need_bounce(nd, io)) {
		req->bounce = malloc(io->len);
		if (!req->bounce) {
			free(req);
			ret = -ENOMEM;
			goto out_unpend;
		}
		if (io->op == BLK_WRITE) {
			unsigned char *d = req->bounce;
			int i;

			for (i = 0; i < io->iovcnt; i++) {
				memcpy(d, io->iov[i].iov_base, io->iov[i].iov_len);
				d += io->iov[i].iov_len;
			}
		}
		ATOMIC_INC(&nd->nr_bounced);
	}
	conn_submit(nbd_pick(nd), req);
	return 0;

out_unpend:
	pending_sub(nd, 1);
	return ret;
}

/* ---- open: config, the server, its geometry ---- */

/*
 * The config's keys. `timeout` is a duration, with plain seconds as it
 * always took, kept in ms (the poll loop's unit: msec refuses a finer
 * value rather than cut it).
 */
struct nbd_conf {
	const char *uri;
	unsigned int nconn, qd, timeout_ms;
};

#define NBD_URI_FORMS	"nbd+unix:///EXPORT?socket=PATH, nbd://HOST[:PORT]/EXPORT or nbds://..."

#define NBD_KNOBS(K)											\
	K(uri,         text, uri,        0, 0, 0, NBD_URI_FORMS,					\
	  "the server and export (required)")								\
	K(connections, uint, nconn,      1, NBD_MAX_CONNS, NBD_DEF_CONNS, "connections",		\
	  "connections, used when the server allows multi-conn")					\
	K(queue_depth, uint, qd,         1, NBD_MAX_QD, NBD_DEF_QD, "commands",			\
	  "commands in flight per connection")								\
	K(timeout,     msec, timeout_ms, NBD_MIN_TIMEOUT_MS, NBD_MAX_TIMEOUT_MS, NBD_DEF_TIMEOUT_MS,	\
	  "ms", "a connection with no progress this long is dropped and made again")

BK_BACKEND_DEFINE(nbd, struct nbd_conf, NBD_KNOBS);

/*
 * The device's geometry from what the server said (@s), checked against
 * the config. Every refusal names both values.
 */
static int nbd_geometry(struct nbd_dev *nd, struct blk_params *p, const struct nbd_srv *s)
{
	const struct blk_geometry *cfg = &p->geo;
	struct blk_geometry *g = &nd->geo;
	uint32_t smin = s->bmin ? s->bmin : 1, lbs, pbs, cap, max_io;
	bool pbs_given = be_geo_given(p, "physical_block_size", cfg->pbs);
	uint64_t size;

	if (!blk_is_pow2(smin) || smin > NBD_MAX_BLOCK)
		return blk_param_error(p, "uri",
			"the server at %s has a minimum block size of %" PRIu32
			" bytes (blkfs takes a power of two up to 64K)", nd->uri, smin);
	if (s->read_only && !p->read_only)
		return blk_param_error(p, "uri",
			"the server at %s exports it read-only (blkfs devices are writable; "
			"mount with -o ro to read it)", nd->uri);

	/* Logical block: the server's minimum, at least 512; the config may ask more. */
	lbs = smin > 512 ? smin : 512;
	if (be_geo_given(p, "logical_block_size", cfg->lbs)) {
		if (!blk_is_pow2(cfg->lbs) || cfg->lbs < 512 || cfg->lbs > NBD_MAX_BLOCK)
			return blk_param_error(p, "logical_block_size",
				"%" PRIu32 " is not a power of two from 512 to 65536", cfg->lbs);
		if (cfg->lbs < smin)
			return blk_param_error(p, "logical_block_size",
				"config says %" PRIu32 " but the server's minimum block size is %" PRIu32
				" (allowed: a power of two from %" PRIu32 " to 64K)",
				cfg->lbs, smin, lbs);
		lbs = cfg->lbs;
	}

	size = s->size / lbs * lbs;
	if (!size)
		return blk_param_error(p, "uri",
			"the export at %s has %" PRIu64 " bytes, less than one logical block (%" PRIu32 ")",
			nd->uri, s->size, lbs);
	if (cfg->size && cfg->size != size)
		return blk_param_error(p, "size",
			"config says %" PRIu64 " but the server's export has %" PRIu64 " bytes%s",
			cfg->size, size, size != s->size ? " (rounded down to the logical block size)" : "");

	/* Physical block: the server's preferred size when a larger power of two. */
	pbs = lbs;
	if (pbs_given) {
		if (!blk_is_pow2(cfg->pbs) || cfg->pbs < lbs || cfg->pbs > NBD_MAX_BLOCK)
			return blk_param_error(p, "physical_block_size",
				"%" PRIu32 " is not a power of two from the logical block size %" PRIu32
				" to 65536", cfg->pbs, lbs);
		pbs = cfg->pbs;
	} else if (blk_is_pow2(s->bpref) && s->bpref > lbs) {
		pbs = s->bpref < NBD_MAX_BLOCK ? s->bpref : NBD_MAX_BLOCK;
	}

	/* max_io: the server's maximum, at most 32M, whole physical blocks. */
	cap = s->bmax < NBD_MAX_IO_CAP ? s->bmax : NBD_MAX_IO_CAP;
	if (cap < lbs)
		return blk_param_error(p, "uri",
			"the server at %s takes at most %" PRIu32 " bytes per request, less than the logical block size %" PRIu32,
			nd->uri, s->bmax, lbs);
	if (cap - cap % pbs < pbs) {
		if (pbs_given)
			return blk_param_error(p, "physical_block_size",
				"config says %" PRIu32 " but the server takes at most %" PRIu32 " bytes per request",
				pbs, s->bmax);
		pbs = lbs;	/* the preferred size does not fit a request */
	}
	max_io = cap - cap % pbs;
	if (be_geo_given(p, "max_io", cfg->max_io)) {
		if (cfg->max_io > cap)
			return blk_param_error(p, "max_io",
				"config says %" PRIu32 " but the server takes at most %" PRIu32 " bytes per request%s",
				cfg->max_io, cap, cap == NBD_MAX_IO_CAP ? " (the nbd backend's limit)" : "");
		if (!cfg->max_io || cfg->max_io % pbs)
			return blk_param_error(p, "max_io",
				"%" PRIu32 " is not a multiple of the physical block size (%" PRIu32 ")",
				cfg->max_io, pbs);
		max_io = cfg->max_io;
	}

	g->size = size;
	g->lbs = lbs;
	g->pbs = pbs;
	g->max_io = max_io;
	g->io_min = be_geo_given(p, "io_min", cfg->io_min) ? cfg->io_min : pbs;
	g->io_opt = be_geo_given(p, "io_opt", cfg->io_opt) ? cfg->io_opt : max_io;
	g->dma_align = 1;

	nd->cmd_align = smin;
	nd->zero_chunk = NBD_ZERO_CHUNK;
	if (s->bmax < nd->zero_chunk)
		nd->zero_chunk = s->bmax;
	nd->zero_chunk -= nd->zero_chunk % lbs;
	nd->zero_len = NBD_ZERO_BUF < max_io ? NBD_ZERO_BUF : max_io;
	return 0;
}

/*
 * Connect @h to nd->uri and wait for the handshake, at most the timeout:
 * open() must not hang on a dead server either. Returns 0 or -1 with
 * libnbd's error (or "timed out") in @why.
 */
static int nbd_connect_sync(struct nbd_dev *nd, struct nbd_handle *h, char *why, size_t len)
{
	uint64_t end = blk_now_ns() + nd->timeout_ns;

	if (nbd_aio_connect_uri(h, nd->uri) == -1)
		goto fail;
	while (!nbd_aio_is_ready(h)) {
		uint64_t now = blk_now_ns();
		int r;

		if (nbd_aio_is_dead(h) || nbd_aio_is_closed(h))
			goto fail;
		if (now >= end) {
			snprintf(why, len, "no answer within %" PRIu64 " ms (timeout)",
				 nd->timeout_ns / NS_PER_MS);
			return -1;
		}
		r = nbd_poll(h, (int)((end - now + NS_PER_MS - 1) / NS_PER_MS));
		if (r == -1)
			goto fail;
	}
	return 0;
fail:
	snprintf(why, len, "%s", nbd_get_error() ? nbd_get_error() : "cannot connect");
	return -1;
}

static int nbd_start_threads(struct nbd_dev *nd, unsigned int *started)
{
	sigset_t all, old;
	int ret = 0;

	/* The poll threads take no signals: the daemon's handlers run elsewhere. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (*started = 0; *started < nd->nconn; (*started)++) {
		struct nbd_conn *c = &nd->conn[*started];
		char name[16];

		ret = pthread_create(&c->thread, NULL, conn_thread_fn, c);
		if (ret)
			break;
		snprintf(name, sizeof(name), "blkfs-nbd-%u", c->idx);
		pthread_setname_np(c->thread, name);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return -ret;
}

static void nbd_free(struct nbd_dev *nd)
{
	unsigned int i;

	for (i = 0; i < nd->nconn_init; i++) {
		struct nbd_conn *c = &nd->conn[i];

		nbd_close(c->h);
		if (c->efd >= 0)
			close(c->efd);
		pthread_mutex_destroy(&c->lock);
	}
	pthread_mutex_destroy(&nd->lock);
	free(nd->zero_buf);
	free(nd->uri);
	free(nd->name);
	free(nd);
}

static struct blk_backend *nbd_open(struct blk_params *p, struct blk_backend *next)
{
	unsigned int nconn, qd, timeout_ms, i, started;
	struct nbd_handle *h;
	struct nbd_conf conf;
	struct nbd_dev *nd;
	const char *uri;
	char why[512];
	int ret;

	(void)next;
	/* Every key first, so each is marked used whatever fails later. */
	ret = bk_parse(&bk_table, p, &conf);
	if (ret)
		return ERR_PTR(ret);
	uri = conf.uri;
	nconn = conf.nconn;
	qd = conf.qd;
	timeout_ms = conf.timeout_ms;
	if (!uri || !*uri)
		return ERR_PTR(blk_param_error(p, "uri", "missing (required: " NBD_URI_FORMS ")"));

	nd = calloc(1, sizeof(*nd) + nconn * sizeof(nd->conn[0]));
	if (!nd) {
		blk_param_error(p, NULL, "out of memory");
		return ERR_PTR(-ENOMEM);
	}
	pthread_mutex_init(&nd->lock, NULL);
	nd->uri = strdup(uri);
	nd->name = strdup(p->dev ? p->dev : "?");
	nd->read_only = p->read_only;
	nd->nconn = nconn;
	nd->qd = qd;
	nd->timeout_ns = (uint64_t)timeout_ms * NS_PER_MS;
	if (!nd->uri || !nd->name) {
		blk_param_error(p, NULL, "out of memory");
		ret = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < nconn; i++) {
		struct nbd_conn *c = &nd->conn[i];

		c->nd = nd;
		c->idx = i;
		list_init(&c->pending);
		list_init(&c->active);
		list_init(&c->done);
		pthread_mutex_init(&c->lock, NULL);
		nd->nconn_init++;
		c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (c->efd < 0) {
			ret = -errno;
			blk_param_error(p, NULL, "eventfd: %s", strerror(-ret));
			goto out_free;
		}
	}

	/* The first connection: is the URI usable, and what does the server say? */
	h = nbd_handle_new();
	if (!h) {
		ret = blk_param_error(p, NULL, "cannot create an NBD handle: %s", nbd_get_error());
		goto out_free;
	}
	nd->conn[0].h = h;
	if (!nbd_supports_uri(h)) {
		ret = blk_param_error(p, "uri", "this libnbd was built without URI support");
		goto out_free;
	}
	if (!strncmp(uri, "nbds", 4) && !nbd_supports_tls(h)) {
		ret = blk_param_error(p, "uri", "%s needs TLS, and this libnbd was built without it",
				      uri);
		goto out_free;
	}
	if (nbd_connect_sync(nd, h, why, sizeof(why))) {
		ret = blk_param_error(p, "uri", "cannot connect to %s: %s", uri, why);
		goto out_free;
	}
	if (srv_read(h, &nd->srv0)) {
		ret = blk_param_error(p, "uri", "%s: %s", uri, nbd_get_error());
		goto out_free;
	}
	ret = nbd_geometry(nd, p, &nd->srv0);
	if (ret)
		goto out_free;
	nd->conn[0].srv = nd->srv0;

	/* multi-conn only where the server says its connections share one cache. */
	if (nconn > 1 && !nd->srv0.can_multi_conn) {
		blk_warn("nbd: %s: the server at %s does not advertise multi-conn: 1 connection, not %u",
			nd->name, uri, nconn);
		nd->nconn = 1;
	}
	for (i = 1; i < nd->nconn; i++) {
		struct nbd_conn *c = &nd->conn[i];
		struct nbd_srv s;
		const char *bad;

		c->h = nbd_handle_new();
		if (!c->h) {
			ret = blk_param_error(p, NULL, "cannot create an NBD handle: %s",
					      nbd_get_error());
			goto out_free;
		}
		if (nbd_connect_sync(nd, c->h, why, sizeof(why))) {
			ret = blk_param_error(p, "connections",
				"connection %u of %u to %s: %s", i + 1, nd->nconn, uri, why);
			goto out_free;
		}
		if (srv_read(c->h, &s)) {
			ret = blk_param_error(p, "uri", "%s: %s", uri, nbd_get_error());
			goto out_free;
		}
		bad = srv_mismatch(nd, &s, why, sizeof(why));
		if (bad) {
			ret = blk_param_error(p, "connections", "connection %u of %u to %s: %s",
					      i + 1, nd->nconn, uri, bad);
			goto out_free;
		}
		c->srv = s;
	}

	/* Written from when a server has no WRITE_ZEROES; read-only, so shared. */
	nd->zero_buf = calloc(1, nd->zero_len);
	if (!nd->zero_buf) {
		blk_param_error(p, NULL, "out of memory");
		ret = -ENOMEM;
		goto out_free;
	}
	for (i = 0; i < nd->nconn; i++) {
		nd->conn[i].state = CONN_UP;
		nd->conn[i].ever_up = true;
	}
	nd->be.ops = &nbd_backend_ops;
	ret = nbd_start_threads(nd, &started);
	if (ret) {
		blk_param_error(p, NULL, "cannot start the nbd threads: %s", strerror(-ret));
		pthread_mutex_lock(&nd->lock);
		nd->stopping = true;
		pthread_mutex_unlock(&nd->lock);
		nbd_wake_all(nd);
		for (i = 0; i < started; i++)
			pthread_join(nd->conn[i].thread, NULL);
		goto out_free;
	}
	return &nd->be;

out_free:
	nbd_free(nd);
	return ERR_PTR(ret);
}

/* ---- close, geometry, stat ---- */

static void nbd_close_be(struct blk_backend *be)
{
	struct nbd_dev *nd = (struct nbd_dev *)be;
	unsigned int i;

	/* The threads leave once every request submitted so far has ended. */
	pthread_mutex_lock(&nd->lock);
	nd->stopping = true;
	pthread_mutex_unlock(&nd->lock);
	nbd_wake_all(nd);
	for (i = 0; i < nd->nconn; i++)
		pthread_join(nd->conn[i].thread, NULL);
	for (i = 0; i < nd->nconn; i++) {
		struct nbd_conn *c = &nd->conn[i];

		(void)c;
		assert(list_empty(&c->pending) && list_empty(&c->active) && list_empty(&c->done));
	}
	nbd_free(nd);
}

/*
 * blk_resize(): the export's size is the server's; the only way to learn a
 * new one is a new handshake. A connection of our own asks the server
 * (@size 0: take what it says; else it must say @size), checks that the
 * export is otherwise the same one, and then every connection is made
 * again so that libnbd, which checks each command against the size of its
 * handshake, lets I/O reach the new end. Waits for them, at most the
 * timeout (I/O submitted before they are up waits for them as after any
 * reconnect).
 */
static int nbd_resize(struct blk_backend *be, uint64_t *size)
{
	struct nbd_dev *nd = (struct nbd_dev *)be;
	uint64_t old = nd->geo.size, old_srv = nd->srv0.size, end;
	struct nbd_handle *h;
	struct nbd_srv s;
	char why[256];
	const char *bad;
	unsigned int i, up;

	h = nbd_handle_new();
	if (!h)
		return -ENOMEM;
	why[0] = '\0';
	if (nbd_connect_sync(nd, h, why, sizeof(why)) || srv_read(h, &s)) {
		if (!why[0])
			snprintf(why, sizeof(why), "%s", nbd_get_error() ? nbd_get_error() : "?");
		blk_err("nbd %s: %s: cannot connect to learn the export's size: %s", nd->name,
			nd->uri, why);
		nbd_close(h);
		return -EIO;
	}
	nbd_close(h);
	if (*size && s.size / nd->geo.lbs * nd->geo.lbs != *size)
		return -EOPNOTSUPP;
	nd->geo.size = s.size / nd->geo.lbs * nd->geo.lbs;
	nd->srv0.size = s.size;
	bad = srv_mismatch(nd, &s, why, sizeof(why));
	if (bad || !nd->geo.size) {
		blk_err("nbd %s: %s: the export changed more than its size: %s", nd->name,
			nd->uri, bad ? bad : "it is now empty");
		nd->geo.size = old;
		nd->srv0.size = old_srv;
		return -EIO;
	}
	*size = nd->geo.size;
	if (nd->geo.size == old)
		return 0;
	blk_info("nbd %s: the export is now %llu bytes (was %llu): connecting again", nd->name,
		 (unsigned long long)nd->geo.size, (unsigned long long)old);
	for (i = 0; i < nd->nconn; i++) {
		struct nbd_conn *c = &nd->conn[i];

		pthread_mutex_lock(&c->lock);
		c->resize_drop = true;
		pthread_mutex_unlock(&c->lock);
		conn_wake(c);
	}
	end = blk_now_ns() + nd->timeout_ns;
	do {
		for (i = 0, up = 0; i < nd->nconn; i++) {
			struct nbd_conn *c = &nd->conn[i];

			pthread_mutex_lock(&c->lock);
			if (!c->resize_drop && c->state == CONN_UP && c->srv.size == s.size)
				up++;
			pthread_mutex_unlock(&c->lock);
		}
		if (up == nd->nconn)
			return 0;
		usleep(2000);
	} while (blk_now_ns() < end);
	blk_warn("nbd %s: %u of %u connections are up again after the resize; the rest keep trying",
		 nd->name, up, nd->nconn);
	return 0;
}

static void nbd_geometry_get(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct nbd_dev *)be)->geo;
}

static size_t nbd_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct nbd_dev *nd = (struct nbd_dev *)be;
	unsigned int up = 0, inflight = 0, queued = 0, i;
	const struct nbd_srv *s = &nd->srv0;

	for (i = 0; i < nd->nconn; i++) {
		struct nbd_conn *c = &nd->conn[i];

		up += __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == CONN_UP;
		pthread_mutex_lock(&c->lock);
		inflight += c->cmds;
		queued += c->nr_queued;
		pthread_mutex_unlock(&c->lock);
	}
	/*
	 * connections: how many the device uses; connected: of those, up now;
	 * inflight: NBD commands sent and not answered; queued: requests
	 * waiting for a slot or a connection; lost_flushes: FLUSHes failed
	 * because a connection went down with acknowledged, unflushed writes.
	 */
	return be_stat_printf(buf, len,
			      "nbd_connections %u\nnbd_connected %u\nnbd_queue_depth %u\nnbd_inflight %u\n"
			      "nbd_queued %u\nnbd_commands %" PRIu64 "\nnbd_completed %" PRIu64 "\n"
			      "nbd_errors %" PRIu64 "\nnbd_drops %" PRIu64 "\nnbd_reconnects %" PRIu64 "\n"
			      "nbd_timeouts %" PRIu64 "\nnbd_lost_flushes %" PRIu64 "\nnbd_zero_writes %" PRIu64 "\n"
			      "nbd_bounced %" PRIu64 "\nnbd_timeout_ms %" PRIu64 "\n"
			      "nbd_block_min %" PRIu32 "\nnbd_block_preferred %" PRIu32 "\nnbd_block_max %" PRIu32 "\n"
			      "nbd_can_flush %d\nnbd_can_zero %d\nnbd_can_trim %d\nnbd_can_multi_conn %d\n",
			      nd->nconn, up, nd->qd, inflight, queued,
			      ATOMIC_LOAD(&nd->nr_commands), ATOMIC_LOAD(&nd->nr_completed),
			      ATOMIC_LOAD(&nd->nr_errors), ATOMIC_LOAD(&nd->nr_drops),
			      ATOMIC_LOAD(&nd->nr_reconnects), ATOMIC_LOAD(&nd->nr_timeouts),
			      ATOMIC_LOAD(&nd->nr_flush_lost), ATOMIC_LOAD(&nd->nr_zero_writes),
			      ATOMIC_LOAD(&nd->nr_bounced), nd->timeout_ns / NS_PER_MS,
			      s->bmin, s->bpref, s->bmax,
			      s->can_flush, s->can_zero, s->can_trim, s->can_multi_conn);
}

const struct blk_backend_ops nbd_backend_ops = {
	.name = "nbd",
	.keys = nbd_keys,
	.help = "nbd: any NBD server through libnbd (uri = nbd+unix:///EXPORT?socket=PATH | nbd://HOST/EXPORT | nbds://..., connections, queue_depth, timeout)",
	.open = nbd_open,
	.close = nbd_close_be,
	.geometry = nbd_geometry_get,
	.resize = nbd_resize,
	.submit = nbd_submit,
	.stat = nbd_stat,
};
