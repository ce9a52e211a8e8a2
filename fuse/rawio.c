/* SPDX-License-Identifier: MIT */
/*
 * fuse/rawio.c - the raw FUSE traffic blkfs rewrites on its way between
 * /dev/fuse and libfuse (fuse_session_custom_io): INIT and OPEN replies get
 * the flags libfuse 3.14 cannot set (FUSE_DIRECT_IO_ALLOW_MMAP,
 * FOPEN_PARALLEL_DIRECT_WRITES), and WRITE data is received page-aligned.
 * Everything else passes through unchanged to libfuse's own handlers.
 *
 * The transport ([mount] transport) is chosen here too: with FUSE over
 * io_uring (uring.c) the INIT reply accepts the kernel's offer, the ring's
 * queues carry the requests, and /dev/fuse still carries INIT, FORGET,
 * INTERRUPT and the daemon's notifications; every reply passes the writev
 * hook, which gives the ring the replies to its requests.
 *
 * Notifications and the ring. A notification that touches the kernel's
 * page cache (inval_inode, store) or its dentries waits inside the kernel
 * for what the file has in flight: it writes the dirty pages back first
 * (a dirty shared mapping, kernel_cache = writeback), waits for folios
 * locked by a READ, for a directory's lookup. Over the ring those requests
 * go to the queue of the CPU that sent the notification, and if that is a
 * queue's own thread, nothing serves them: the thread, the mount and every
 * later stat of it hang for good (an unkillable daemon; aborting the
 * connection frees nothing). So no queue thread ever sends one:
 *  - a request whose handler may notify (a .sys store, a command) asks
 *    bf_rawio_offqueue() first: on a queue thread its handler is run by a
 *    thread that serves no queue, and the queue's thread returns to its
 *    queue at once, the request parked (its entry stays held) until that
 *    handler replies;
 *  - every notification passes bf_io_writev() on its way to /dev/fuse,
 *    which refuses one from a queue thread before the kernel sees it
 *    (-EDEADLK, logged, counted in .sys/.transport's
 *    queue_thread_notifications): a path that forgot the first rule fails
 *    that notification instead of wedging the machine.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../backends/lib/log.h"
#include "../backends/lib/tlslots.h"
#include "bf.h"
#include "fuse_uring_abi.h"
#include "notify.h"
#include "opens.h"
#include "rawio.h"
#include "tprobe.h"
#include "uring.h"

#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif

/*
 * libfuse 3.14 does not know FUSE_DIRECT_IO_ALLOW_MMAP, and without it the
 * kernel refuses shared mmap of a direct-mode file (ENODEV). Reading
 * /dev/fuse ourselves (fuse_session_custom_io) lets us see the INIT request
 * and add the flag to the INIT reply when the kernel offers it.
 */
static uint64_t init_unique;	/* written by the reader of INIT, read by its replier */
static bool init_allow_mmap;
static bool init_uring_offered;	/* the kernel offers FUSE_OVER_IO_URING */
static struct bf_daemon *io_daemon;
static struct fuse_session *io_se;
/*
 * transport = auto's choice and how it was made, for .sys/.transport:
 * auto_choice uring|dev|none (none: transport is not auto), auto_probe
 * the ring/dev ratios measured, "cached", "off", "no_ring", "none", or
 * "failed:REASON". Written before mounting, read after: no lock.
 */
static char auto_choice[16] = "none";
static char auto_probe[160] = "none";
/* what the probe said, logged once the mount is usable (the log starts there) */
static char auto_note[400];
static bool auto_failed;
#define TPROBE_LIMIT_MS 40000
/*
 * Requests read from /dev/fuse, counted per receiving thread in a block of
 * its own (backends/lib/tlslots.h: a plain store, no line shared by the
 * workers), listed on rx_counts for readers; dev_requests keeps what
 * exited threads counted. rx_count_lock, a leaf: the list and the fold of
 * an exiting thread's block. The transport is the one owner, never gone:
 * id 0, no orphan.
 */
struct rx_count {
	struct rx_count *next;		/* rx_count_lock: rx_counts */
	uint64_t requests;		/* its thread's: plain store of a relaxed atomic */
};

static pthread_mutex_t rx_count_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rx_count *rx_counts;	/* rx_count_lock */
static uint64_t dev_requests;	/* atomic: exited threads' requests (or a thread's without a block) */

static void rx_count_attach(void *blk, void *owner)
{
	struct rx_count *c = blk;

	(void)owner;
	c->next = rx_counts;
	rx_counts = c;
}

static void rx_count_fold(void *blk)
{
	struct rx_count *c = blk, **pp;

	for (pp = &rx_counts; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	__atomic_add_fetch(&dev_requests, c->requests, __ATOMIC_RELAXED);
}

static struct tls_kind rx_count_kind = TLS_KIND_INIT(&rx_count_lock, sizeof(struct rx_count),
						     rx_count_attach, rx_count_fold);
static __thread struct tls_table rx_count_tt;

static void rx_count_one(void)
{
	struct rx_count *c = tls_slot(&rx_count_tt, 0);

	if (__builtin_expect(!c, 0))
		c = tls_slot_make(&rx_count_kind, &rx_count_tt, 0, NULL);
	if (__builtin_expect(c != NULL, 1))
		__atomic_store_n(&c->requests,
				 __atomic_load_n(&c->requests, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(&dev_requests, 1, __ATOMIC_RELAXED);
}

/* Requests read from /dev/fuse so far: every thread's block and the exited threads'. */
static uint64_t rx_requests(void)
{
	struct rx_count *c;
	uint64_t n;

	pthread_mutex_lock(&rx_count_lock);
	n = __atomic_load_n(&dev_requests, __ATOMIC_RELAXED);
	for (c = rx_counts; c; c = c->next)
		n += __atomic_load_n(&c->requests, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&rx_count_lock);
	return n;
}

/*
 * The transport. io_ring exists from attach (before mounting) when the
 * config and the kernel allow the ring; whether it carries requests is
 * decided while INIT is answered. io_lock: ring_live, ring_dead, stopping,
 * failed, and the why strings.
 */
#define RING_REGISTER_MS 10000	/* every queue registers within this, or no ring */
static struct bf_ring *io_ring;
static size_t io_max_write;	/* the session's max_write: the largest request */
static pthread_t io_main;	/* runs the request loop: a SIGTERM ends it */
static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER;
static bool ring_live;		/* the ring carries the requests */
static bool ring_dead;		/* a queue failed: the ring cannot carry them all */
static bool stopping;		/* bf_rawio_stop() began */
static bool failed;		/* the transport failed: the daemon exits 1 */
static char dev_why[256];	/* why /dev/fuse carries the requests */
static char dead_why[256];	/* why a queue failed */
static uint64_t notifications;	/* atomic: notifications sent to the kernel */
static uint64_t queue_notifications;	/* atomic: refused, from a ring queue thread */
static uint64_t offqueue_requests;	/* atomic: handlers run by an off-queue thread */

static void rawio_ring_failed(const char *why);

/* libfuse 3.14 cannot set FOPEN_PARALLEL_DIRECT_WRITES either: opens.h. */
#ifndef FOPEN_PARALLEL_DIRECT_WRITES
#define FOPEN_PARALLEL_DIRECT_WRITES (1 << 6)
#endif

/*
 * WRITE data lands page-aligned. libfuse reads each request into a buffer
 * of its own, where a WRITE's data starts 80 bytes in (the two headers):
 * not aligned for O_DIRECT, so every direct write was copied once more on
 * its way to the device. The read hook splits the read: the headers into
 * libfuse's buffer, the rest into an aligned buffer of the thread's. A
 * WRITE's data stays there (bf_write takes it from there: libfuse hands
 * the request to a handler in the thread that read it); any other
 * request's rest, small, is copied on after the headers.
 */
#define RX_SPLIT (sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in))
#define RX_ALIGN 4096
/* libfuse reads into max_write + a page: the part after the headers */
#define RX_LEN (BF_MAX_WRITE + 4096 - RX_SPLIT)
static __thread char *rx_buf;		/* RX_LEN bytes, RX_ALIGN-aligned */
static __thread const char *rx_fake;	/* where libfuse has the WRITE data: in libfuse's buffer */
static pthread_key_t rx_key;		/* frees rx_buf when its thread ends */
static pthread_once_t rx_once = PTHREAD_ONCE_INIT;
static bool rx_write_in;	/* the kernel speaks 7.9+: fuse_write_in is whole (RX_SPLIT holds) */

/*
 * Memory a receive writes into is touched before the readv, never by it: a
 * page fault inside fuse_dev_read() happens with the request already off
 * the queue, and under memory pressure (a memory cgroup holding a loop
 * device over this mount) its reclaim waits for writeback that needs that
 * very request, and the daemon deadlocks (seen in tests/integ/memcg.sh:
 * fuse_dev_read -> iov_iter_get_pages -> do_anonymous_page -> charge ->
 * shrink_folio_list -> folio_wait_writeback). Fresh receive buffers and
 * libfuse's own buffer are touched once, here, with no request held.
 */
static __thread void *rx_touched;	/* libfuse's buffer, once this thread touched it */

/*
 * Receive buffers that requests kept past their handler (bf_rawio_keep):
 * the thread that received one goes on receiving into another. Buffers
 * given back wait here for the next thread that needs one, already
 * touched (first touch of fresh memory is slow on this machine), up to
 * RX_POOL_MAX of them.
 */
#define RX_POOL_MAX 64
static pthread_mutex_t rx_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static char *rx_pool[RX_POOL_MAX];	/* rx_pool_lock */
static int rx_pool_n;			/* rx_pool_lock */
static uint64_t rx_kept;		/* atomic: buffers requests hold now */
static uint64_t rx_kept_total;		/* atomic: requests that kept one */

static void rx_key_init(void)
{
	if (pthread_key_create(&rx_key, free))
		abort();
}

static char *rx_alloc(void)
{
	void *p = NULL;

	pthread_mutex_lock(&rx_pool_lock);
	if (rx_pool_n)
		p = rx_pool[--rx_pool_n];
	pthread_mutex_unlock(&rx_pool_lock);
	if (!p) {
		if (posix_memalign(&p, RX_ALIGN, RX_LEN))
			return NULL;
		memset(p, 0, RX_LEN);	/* see rx_touched */
	}
	return p;
}

/* The calling thread's receive buffer, set up on first use. */
static char *rx_thread_buf(void)
{
	if (!rx_buf) {
		pthread_once(&rx_once, rx_key_init);
		rx_buf = rx_alloc();
		if (rx_buf && pthread_setspecific(rx_key, rx_buf)) {
			free(rx_buf);
			rx_buf = NULL;
		}
	}
	return rx_buf;
}

/* The data of the WRITE being handled in this thread, for @buf as libfuse gives it. */
const char *bf_rawio_write_data(const char *buf)
{
	return buf == rx_fake && rx_fake ? rx_buf : buf;
}

bool bf_rawio_req_in_ring(void)
{
	return bf_ring_req_payload() != NULL;
}

char *bf_rawio_req_buf(void)
{
	char *p = bf_ring_req_payload();

	/* a ring request's reply built in its entry is committed without a copy */
	return p ? p : rx_thread_buf();
}

bool bf_rawio_in_thread_buf(const char *data, size_t len)
{
	return rx_buf && data >= rx_buf && data + len <= rx_buf + RX_LEN;
}

char *bf_rawio_keep(const char **data, size_t len)
{
	char *b = rx_buf;

	/* a ring request's buffers are its entry's until its reply: nothing to keep */
	if (bf_ring_in_request())
		return NULL;

	if (b && *data >= b && *data + len <= b + RX_LEN) {
		/* the request takes the buffer; the next receive gets another */
		rx_buf = NULL;
		pthread_setspecific(rx_key, NULL);
	} else {
		/* libfuse's own buffer (the receive could not be split): a copy */
		if (len > RX_LEN || !(b = rx_alloc()))
			return ERR_PTR(-ENOMEM);
		memcpy(b, *data, len);
		*data = b;
	}
	__atomic_add_fetch(&rx_kept, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&rx_kept_total, 1, __ATOMIC_RELAXED);
	return b;
}

void bf_rawio_release(char *buf)
{
	__atomic_sub_fetch(&rx_kept, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&rx_pool_lock);
	if (rx_pool_n < RX_POOL_MAX) {
		rx_pool[rx_pool_n++] = buf;
		buf = NULL;
	}
	pthread_mutex_unlock(&rx_pool_lock);
	free(buf);
}

void bf_rawio_stats(uint64_t *kept, uint64_t *kept_total)
{
	*kept = __atomic_load_n(&rx_kept, __ATOMIC_RELAXED);
	*kept_total = __atomic_load_n(&rx_kept_total, __ATOMIC_RELAXED);
}

static ssize_t rx_read(int fd, void *buf, size_t len)
{
	struct iovec iov[2];
	ssize_t r;

	rx_fake = NULL;
	if (buf != rx_touched) {
		memset(buf, 0, len);
		rx_touched = buf;
	}
	if (len != RX_LEN + RX_SPLIT || !rx_thread_buf())
		return read(fd, buf, len);	/* not libfuse's usual size, or no memory */
	iov[0] = (struct iovec){ buf, RX_SPLIT };
	iov[1] = (struct iovec){ rx_buf, RX_LEN };
	r = readv(fd, iov, 2);
	if (r > (ssize_t)RX_SPLIT) {
		if (((const struct fuse_in_header *)buf)->opcode == FUSE_WRITE &&
		    __atomic_load_n(&rx_write_in, __ATOMIC_RELAXED))
			rx_fake = (const char *)buf + RX_SPLIT;
		else
			memcpy((char *)buf + RX_SPLIT, rx_buf, (size_t)r - RX_SPLIT);
	}
	return r;
}

static ssize_t bf_io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t r = rx_read(fd, buf, len);

	(void)userdata;
	if (r > 0)
		rx_count_one();
	if (r >= (ssize_t)sizeof(struct fuse_in_header))
		bf_opens_note(((const struct fuse_in_header *)buf)->opcode,
			      ((const struct fuse_in_header *)buf)->unique);
	if (r >= (ssize_t)(sizeof(struct fuse_in_header) + sizeof(struct fuse_init_in)) &&
	    !__atomic_load_n(&init_unique, __ATOMIC_ACQUIRE)) {
		const struct fuse_in_header *in = buf;

		if (in->opcode == FUSE_INIT) {
			const struct fuse_init_in *ii = (const void *)(in + 1);

			__atomic_store_n(&rx_write_in, ii->major > 7 || ii->minor >= 9,
					 __ATOMIC_RELAXED);
			init_allow_mmap = (ii->flags & FUSE_INIT_EXT) &&
					  ((uint64_t)ii->flags2 << 32 & FUSE_DIRECT_IO_ALLOW_MMAP);
			init_uring_offered = (ii->flags & FUSE_INIT_EXT) &&
					     ((uint64_t)ii->flags2 << 32 & FUSE_OVER_IO_URING);
			__atomic_store_n(&init_unique, in->unique, __ATOMIC_RELEASE);
		}
	}
	return r < 0 ? -errno : r;
}

/*
 * The ring's payload buffers must hold the largest request the kernel
 * sends, as it computes it from the INIT reply (fs/fuse/dev_uring.c:
 * max(FUSE_MIN_READ_BUFFER, max_write, max_pages pages)).
 */
static size_t ring_payload(const struct fuse_init_out *out)
{
	size_t pages = (out->flags & FUSE_MAX_PAGES) ? (out->max_pages ? out->max_pages : 1) : 32;
	size_t n = FUSE_MIN_READ_BUFFER;

	if (out->max_write > n)
		n = out->max_write;
	if (pages * 4096 > n)
		n = pages * 4096;
	return n;
}

static void set_dev_why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void set_dev_why(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dev_why, sizeof(dev_why), fmt, ap);
	va_end(ap);
}

/* The transport failed before the mount was usable: say why, end the session. */
static void fail_mount(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail_mount(const char *fmt, ...)
{
	va_list ap;

	fputs("blkfs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	pthread_mutex_lock(&io_lock);
	failed = true;
	pthread_mutex_unlock(&io_lock);
	/* this is a request loop thread: the loop ends when it returns */
	fuse_session_exit(io_se);
}

static const char *conf_name(void)
{
	return io_daemon && io_daemon->conf.file ? io_daemon->conf.file : "(config)";
}

static int transport_line(void)
{
	const struct conf_mount *m = &io_daemon->conf.mount;

	return m->transport_line ? m->transport_line : m->line ? m->line : 1;
}

static bool want_ring_only(void)
{
	return io_daemon && io_daemon->conf.mount.transport == CONF_TRANSPORT_URING;
}

/*
 * The INIT reply has gone to the kernel: start the ring if the reply
 * accepted it, decide the transport, and tell the waiting parent that the
 * mount is usable (or why not).
 */
static void init_answered(bool ring_offered_back)
{
	char why[256] = "";
	int ret;

	if (ring_offered_back) {
		ret = bf_ring_start(io_ring, RING_REGISTER_MS, why, sizeof(why));
		if (ret) {
			if (want_ring_only()) {
				fail_mount("%s:%d: transport: uring: FUSE over io_uring could not start: %s",
					   conf_name(), transport_line(), why);
				return;
			}
			set_dev_why("FUSE over io_uring could not start: %s", why);
		} else {
			bool dead;

			pthread_mutex_lock(&io_lock);
			dead = ring_dead;
			ring_live = !dead;
			pthread_mutex_unlock(&io_lock);
			if (dead) {
				fail_mount("%s", dead_why);
				return;
			}
		}
	} else if (want_ring_only()) {
		fail_mount("%s:%d: transport: uring: %s", conf_name(), transport_line(),
			   dev_why[0] ? dev_why :
			   "the kernel did not offer FUSE over io_uring at INIT (was /sys/module/fuse/parameters/enable_uring turned off meanwhile?)");
		return;
	} else if (!dev_why[0]) {
		set_dev_why("the kernel did not offer FUSE over io_uring");
	}
	bf_ready(io_daemon);	/* the kernel has its answer: the mount is usable */
	if (ring_live) {
		char stat[512];
		unsigned long long bytes = 0, queues = 0, depth = 0, spin = 0;
		const char *p;

		bf_ring_show(io_ring, stat, sizeof(stat));
		p = strstr(stat, "queues ");
		if (p)
			queues = strtoull(p + 7, NULL, 10);
		p = strstr(stat, "queue_depth ");
		if (p)
			depth = strtoull(p + 12, NULL, 10);
		p = strstr(stat, "ring_bytes ");
		if (p)
			bytes = strtoull(p + 11, NULL, 10);
		p = strstr(stat, "uring_spin_limit_us ");
		if (p)
			spin = strtoull(p + 20, NULL, 10);
		char spins[32] = "off";

		if (spin)
			snprintf(spins, sizeof(spins), "%lluus", spin);
		blk_log("transport: FUSE over io_uring, %llu queues (one per possible CPU) x %llu entries; ring buffers %.1f MiB, outside [cache] size, touched as used; uring_spin %s",
			queues, depth, (double)bytes / (1 << 20), spins);
	} else {
		blk_log("transport: /dev/fuse (%s)", dev_why);
	}
	if (auto_note[0] && auto_failed)
		blk_warn("%s", auto_note);
	else if (auto_note[0])
		blk_log("%s", auto_note);
}

/*
 * A notification from a ring queue thread: not sent (see the top of this
 * file). A blkfs bug when it happens: the path that sent it must run off
 * the queue (bf_rawio_offqueue()).
 */
static ssize_t notify_refused(int32_t code)
{
	static struct blk_ratelimit rl = BLK_RATELIMIT_INIT(60000, 3);

	__atomic_add_fetch(&queue_notifications, 1, __ATOMIC_RELAXED);
	if (blk_ratelimit(&rl, "FUSE ring: notifications refused"))
		blk_err("FUSE ring: a notification (code %d) from a ring queue thread refused: "
			"the kernel would wait for requests only that thread serves (a blkfs bug; "
			"the kernel's cache of the file may be stale)", (int)code);
	return -EDEADLK;
}

static ssize_t bf_io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	uint64_t unique = __atomic_load_n(&init_unique, __ATOMIC_ACQUIRE);
	struct fuse_open_out oo;
	struct fuse_init_out out;
	bool is_init = unique && oh->unique == unique && !oh->error;
	bool ring_back = false;
	ssize_t r;

	(void)userdata;
	if (!oh->unique && oh->error > 0) {
		/* a notification (its code in error): never from a queue thread */
		if (bf_ring_queue_thread())
			return notify_refused(oh->error);
		__atomic_add_fetch(&notifications, 1, __ATOMIC_RELAXED);
	}
	if (is_init && count == 2 && iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + 4) {
		uint32_t flags2 = 0;

		memset(&out, 0, sizeof(out));
		memcpy(&out, iov[1].iov_base, iov[1].iov_len < sizeof(out) ? iov[1].iov_len : sizeof(out));
		if (init_allow_mmap)
			flags2 |= (uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
		if (io_ring && init_uring_offered) {
			char why[200];

			/* buffers and fd before the reply: a failure here costs only the ring */
			if (!bf_ring_arm(io_ring, fd, ring_payload(&out), why, sizeof(why))) {
				flags2 |= (uint32_t)(FUSE_OVER_IO_URING >> 32);
				ring_back = true;
			} else {
				set_dev_why("FUSE over io_uring could not be set up: %s", why);
			}
		}
		if (flags2) {
			out.flags |= FUSE_INIT_EXT;
			out.flags2 |= flags2;
			iov[1].iov_base = &out;
		}
	}
	if (count == 2 && iov[1].iov_len == sizeof(oo) && !oh->error && bf_opens_forget(oh->unique)) {
		memcpy(&oo, iov[1].iov_base, sizeof(oo));
		oo.open_flags |= FOPEN_PARALLEL_DIRECT_WRITES;
		iov[1].iov_base = &oo;
	} else if (oh->error < 0) {
		bf_opens_forget(oh->unique);	/* a failed OPEN's entry goes (no-op when none is kept) */
	}
	if (io_ring && !is_init && bf_ring_reply(io_ring, iov, count, &r))
		return r;
	r = writev(fd, iov, count);
	if (r < 0)
		r = -errno;
	if (is_init) {
		__atomic_store_n(&init_unique, 0, __ATOMIC_RELEASE);
		if (r >= 0 && io_daemon)
			init_answered(ring_back);
	}
	return r;
}

static const struct fuse_custom_io bf_io = {
	.read = bf_io_read,
	.writev = bf_io_writev,
};

/* @s as one word: a value of .sys/.transport (blkfs stat reads one word a line) */
static void one_word(char *s)
{
	for (; *s; s++)
		if (*s == ' ' || *s == '\t' || *s == '\n')
			*s = '_';
}

/*
 * transport = auto with the ring offered: [mount] transport_probe decides.
 * Returns true to take the ring. A probe that fails or runs out of time
 * leaves the ring (auto's old choice), and the log says why.
 */
static bool auto_takes_ring(struct bf_daemon *d)
{
	enum conf_transport_probe mode = d->conf.mount.transport_probe;
	char choice[16] = "", detail[sizeof(auto_probe) - 8];
	int ret;

	if (mode == CONF_TPROBE_OFF) {
		snprintf(auto_choice, sizeof(auto_choice), "uring");
		snprintf(auto_probe, sizeof(auto_probe), "off");
		return true;
	}
	ret = bf_tprobe_run(mode == CONF_TPROBE_BOOT, TPROBE_LIMIT_MS, choice, sizeof(choice),
			    detail, sizeof(detail));
	if (ret) {
		snprintf(auto_note, sizeof(auto_note),
			 "transport = auto: the transport probe failed (%s): FUSE over io_uring, as without a probe",
			 detail);
		auto_failed = true;
		one_word(detail);
		snprintf(auto_choice, sizeof(auto_choice), "uring");
		snprintf(auto_probe, sizeof(auto_probe), "failed:%s", detail);
		return true;
	}
	snprintf(auto_choice, sizeof(auto_choice), "%s", choice);
	snprintf(auto_probe, sizeof(auto_probe), "%s", detail);
	snprintf(auto_note, sizeof(auto_note),
		 "transport = auto: the transport probe (transport_probe = %s) chose %s (ring/dev: %s)",
		 mode == CONF_TPROBE_BOOT ? "boot" : "always", choice, detail);
	return !strcmp(choice, "uring");
}

/* Decide, before mounting, whether the ring may carry the requests. */
static int ring_prepare(struct bf_daemon *d, struct fuse_session *se, char *err, size_t errlen)
{
	enum conf_transport t = d->conf.mount.transport;
	char why[512];
	size_t payload;
	uint64_t mem;
	unsigned nq, depth;
	long pages;
	int on;

	if (t == CONF_TRANSPORT_DEV) {
		set_dev_why("transport = dev");
		return 0;
	}
	on = bf_enable_uring();
	if (on < 0)
		snprintf(why, sizeof(why), "this kernel has no FUSE over io_uring (no /sys/module/fuse/parameters/enable_uring: it needs CONFIG_FUSE_IO_URING, kernel 6.14 or later)");
	else if (!on)
		snprintf(why, sizeof(why), "FUSE over io_uring is off in the kernel (/sys/module/fuse/parameters/enable_uring is N)");
	if (t == CONF_TRANSPORT_AUTO && on <= 0) {
		snprintf(auto_choice, sizeof(auto_choice), "dev");
		snprintf(auto_probe, sizeof(auto_probe), "no_ring");
	}
	if (on <= 0) {
		if (t == CONF_TRANSPORT_URING) {
			snprintf(err, errlen, "%s:%d: transport: uring: %s; to turn it on, as root: echo Y > /sys/module/fuse/parameters/enable_uring (or boot with fuse.enable_uring=1), or set transport = auto or dev in [mount]",
				 d->conf.file, transport_line(), why);
			return -EOPNOTSUPP;
		}
		set_dev_why("%s", why);
		return 0;
	}
	/* libfuse sizes max_pages from max_write: the largest request is max_write */
	payload = io_max_write > FUSE_MIN_READ_BUFFER ? io_max_write : FUSE_MIN_READ_BUFFER;
	pages = sysconf(_SC_PHYS_PAGES);
	mem = pages > 0 ? (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
	nq = bf_ring_possible_cpus();
	depth = d->conf.mount.uring_queue_depth;
	if (!d->conf.mount.uring_queue_depth_line && nq) {
		/* the default on a machine with many CPUs and little memory: what fits */
		uint64_t fit = mem / 4 / nq / bf_ring_entry_bytes(payload);

		if (fit < depth && fit >= 1) {
			blk_log("uring_queue_depth: the default %u lowered to %llu: %u possible CPUs x %llu entries of 1 MiB fit a quarter of this machine's memory",
				depth, (unsigned long long)fit, nq, (unsigned long long)fit);
			depth = (unsigned)fit;
		}
	}
	/* a depth whose buffers would not fit is a config error whatever the transport */
	if (depth == d->conf.mount.uring_queue_depth &&
	    conf_check_uring(&d->conf, nq, bf_ring_entry_bytes(payload), mem, err, errlen))
		return -EINVAL;
	/* after the config's checks: a config error is one without a probe's wait */
	if (t == CONF_TRANSPORT_AUTO && !auto_takes_ring(d)) {
		set_dev_why("transport = auto: /dev/fuse measured faster here (ring/dev %s)", auto_probe);
		return 0;
	}
	io_ring = bf_ring_create(se, depth, payload, d->conf.mount.uring_spin_us, rawio_ring_failed,
				 why, sizeof(why));
	if (io_ring)
		return 0;
	if (t == CONF_TRANSPORT_URING) {
		snprintf(err, errlen, "%s:%d: transport: uring: %s", d->conf.file, transport_line(), why);
		return -EINVAL;
	}
	set_dev_why("%s", why);
	return 0;
}

int bf_rawio_attach(struct bf_daemon *d, struct fuse_session *se, size_t max_write,
		    char *err, size_t errlen)
{
	/* fuse_session_mount() replaces this placeholder with the /dev/fuse fd */
	int dummy;
	int ret;

	io_daemon = d;
	io_se = se;
	io_max_write = max_write;
	io_main = pthread_self();
	ret = ring_prepare(d, se, err, errlen);
	if (ret) {
		io_daemon = NULL;
		return ret;
	}
	dummy = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (dummy < 0) {
		ret = -errno;
		snprintf(err, errlen, "blkfs: cannot set up FUSE I/O: /dev/null: %s", strerror(-ret));
		goto out_ring;
	}
	ret = fuse_session_custom_io(se, &bf_io, dummy);
	if (ret) {
		close(dummy);
		ret = ret < 0 ? ret : -EINVAL;
		snprintf(err, errlen, "blkfs: cannot set up FUSE I/O: %s", strerror(-ret));
		goto out_ring;
	}
	return dummy;

out_ring:
	bf_ring_stop(io_ring);
	bf_ring_destroy(io_ring);
	io_ring = NULL;
	io_daemon = NULL;
	return ret;
}

static void rawio_ring_failed(const char *why)
{
	bool kill_loop;

	pthread_mutex_lock(&io_lock);
	if (!ring_dead)
		snprintf(dead_why, sizeof(dead_why), "%s", why);
	ring_dead = true;
	kill_loop = ring_live && !stopping && !failed;
	if (ring_live)
		failed = true;
	pthread_mutex_unlock(&io_lock);
	if (!kill_loop)
		return;	/* before the ring was up: init_answered() reports it */
	blk_log("%s; ending the session (the connection is aborted: callers get ENOTCONN)", why);
	/* the request loop ends as on SIGTERM; its thread takes the signal */
	pthread_kill(io_main, SIGTERM);
}

bool bf_rawio_stop(uint64_t timeout_ms)
{
	pthread_mutex_lock(&io_lock);
	stopping = true;
	pthread_mutex_unlock(&io_lock);
	return bf_ring_stop_within(io_ring, timeout_ms);
}

bool bf_rawio_failed(void)
{
	bool f;

	pthread_mutex_lock(&io_lock);
	f = failed;
	pthread_mutex_unlock(&io_lock);
	return f;
}

bool bf_rawio_ring_request(void)
{
	return bf_ring_in_request();
}

bool bf_rawio_queue_thread(void)
{
	return bf_ring_queue_thread();
}

/*
 * Off-queue threads: each runs parked handlers (bf_rawio_offqueue) until
 * none is left, then ends; a new one starts for each handler while fewer
 * than OQ_THREADS_MAX run (a resize writing back does not hold up another
 * device's drop_caches), past that handlers wait their turn. They take no
 * signals (as the queue threads). After a handler's reply they touch only
 * what is here: the ring's stop waits for the reply, not for them.
 */
#define OQ_THREADS_MAX 8
static pthread_mutex_t oq_lock = PTHREAD_MUTEX_INITIALIZER;
static struct bf_offq *oq_head;			/* oq_lock */
static struct bf_offq **oq_tail = &oq_head;	/* oq_lock */
static unsigned oq_threads;			/* oq_lock: running */

static void *oq_main(void *arg)
{
	struct bf_offq *w;

	(void)arg;
	pthread_setname_np(pthread_self(), "blkfs-offq");
	pthread_mutex_lock(&oq_lock);
	while ((w = oq_head)) {
		oq_head = w->next;
		if (!oq_head)
			oq_tail = &oq_head;
		pthread_mutex_unlock(&oq_lock);
		__atomic_add_fetch(&offqueue_requests, 1, __ATOMIC_RELAXED);
		w->fn(w);	/* replies, and may free w */
		pthread_mutex_lock(&oq_lock);
	}
	oq_threads--;
	pthread_mutex_unlock(&oq_lock);
	return NULL;
}

int bf_rawio_offqueue(struct bf_offq *w)
{
	pthread_attr_t attr;
	sigset_t all, old;
	struct bf_offq **pp;
	pthread_t t;
	int ret = 0;

	/* the request's buffers then stay where they are until its reply */
	assert(bf_ring_in_request());
	w->next = NULL;
	pthread_mutex_lock(&oq_lock);
	*oq_tail = w;
	oq_tail = &w->next;
	if (oq_threads < OQ_THREADS_MAX) {
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		ret = pthread_create(&t, &attr, oq_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&attr);
		if (!ret)
			oq_threads++;
	}
	if (ret && !oq_threads) {
		/* no thread to run it, and none will come: take it back */
		for (pp = &oq_head; *pp != w; pp = &(*pp)->next)
			;
		*pp = NULL;
		oq_tail = pp;
		ret = -EAGAIN;
	} else {
		ret = 0;	/* a running thread takes it after its own */
	}
	pthread_mutex_unlock(&oq_lock);
	if (ret)
		blk_warn("FUSE ring: no thread to run a request off its queue (it fails with EAGAIN)");
	return ret;
}

int bf_rawio_show(char *buf, size_t len)
{
	bool live;
	int n;

	pthread_mutex_lock(&io_lock);
	live = ring_live;
	pthread_mutex_unlock(&io_lock);
	n = snprintf(buf, len, "transport %s\n", live ? "uring" : "dev");
	if (live && n >= 0 && (size_t)n < len)
		n += bf_ring_show(io_ring, buf + n, len - (size_t)n);
	if (n >= 0 && (size_t)n < len)
		n += snprintf(buf + n, len - (size_t)n,
			      "dev_requests %llu\nnotifications %llu\nqueue_thread_notifications %llu\n"
			      "offqueue_requests %llu\nopen_flags_lost %llu\n"
			      "auto_choice %s\nauto_probe %s\n",
			      (unsigned long long)rx_requests(),
			      (unsigned long long)__atomic_load_n(&notifications, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&queue_notifications, __ATOMIC_RELAXED),
			      (unsigned long long)__atomic_load_n(&offqueue_requests, __ATOMIC_RELAXED),
			      (unsigned long long)bf_opens_lost(), auto_choice, auto_probe);
	return n < 0 ? -EIO : (size_t)n < len ? n : (int)len;
}

void bf_rawio_detach(void)
{
	bf_ring_stop(io_ring);
	bf_ring_destroy(io_ring);
	io_ring = NULL;
	io_daemon = NULL;
	io_se = NULL;
	bf_opens_free();
	ring_live = ring_dead = stopping = failed = false;
	dev_why[0] = dead_why[0] = 0;
	snprintf(auto_choice, sizeof(auto_choice), "none");
	snprintf(auto_probe, sizeof(auto_probe), "none");
	auto_note[0] = 0;
	auto_failed = false;
}
