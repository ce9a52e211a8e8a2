/* SPDX-License-Identifier: MIT */
/*
 * fuse/rawio.c - the raw FUSE traffic blkfs rewrites on its way between
 * /dev/fuse and libfuse (fuse_session_custom_io): INIT and OPEN replies get
 * the flags libfuse 3.14 cannot set (FUSE_DIRECT_IO_ALLOW_MMAP,
 * FOPEN_PARALLEL_DIRECT_WRITES), and WRITE data is received page-aligned.
 * Everything else passes through unchanged to libfuse's own handlers.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bf.h"

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
static struct bf_daemon *io_daemon;

/*
 * libfuse 3.14 cannot set FOPEN_PARALLEL_DIRECT_WRITES either; without it
 * the kernel serializes direct writes to one file (fio with several jobs).
 * OPEN requests are remembered by their unique id until their reply passes.
 */
#ifndef FOPEN_PARALLEL_DIRECT_WRITES
#define FOPEN_PARALLEL_DIRECT_WRITES (1 << 6)
#endif
#define OPEN_SLOTS 64
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t open_uniques[OPEN_SLOTS];	/* open_lock; 0 = empty */
static unsigned open_next;			/* open_lock */

static void open_remember(uint64_t unique)
{
	pthread_mutex_lock(&open_lock);
	open_uniques[open_next++ % OPEN_SLOTS] = unique;	/* oldest entry (a failed open) goes */
	pthread_mutex_unlock(&open_lock);
}

static bool open_forget(uint64_t unique)
{
	bool found = false;
	unsigned i;

	pthread_mutex_lock(&open_lock);
	for (i = 0; i < OPEN_SLOTS; i++) {
		if (open_uniques[i] == unique) {
			open_uniques[i] = 0;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&open_lock);
	return found;
}

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

char *bf_rawio_req_buf(void)
{
	return rx_thread_buf();
}

bool bf_rawio_in_thread_buf(const char *data, size_t len)
{
	return rx_buf && data >= rx_buf && data + len <= rx_buf + RX_LEN;
}

char *bf_rawio_keep(const char **data, size_t len)
{
	char *b = rx_buf;

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
	if (r >= (ssize_t)sizeof(struct fuse_in_header) &&
	    ((const struct fuse_in_header *)buf)->opcode == FUSE_OPEN)
		open_remember(((const struct fuse_in_header *)buf)->unique);
	if (r >= (ssize_t)(sizeof(struct fuse_in_header) + sizeof(struct fuse_init_in)) &&
	    !__atomic_load_n(&init_unique, __ATOMIC_ACQUIRE)) {
		const struct fuse_in_header *in = buf;

		if (in->opcode == FUSE_INIT) {
			const struct fuse_init_in *ii = (const void *)(in + 1);

			__atomic_store_n(&rx_write_in, ii->major > 7 || ii->minor >= 9,
					 __ATOMIC_RELAXED);
			init_allow_mmap = (ii->flags & FUSE_INIT_EXT) &&
					  ((uint64_t)ii->flags2 << 32 & FUSE_DIRECT_IO_ALLOW_MMAP);
			__atomic_store_n(&init_unique, in->unique, __ATOMIC_RELEASE);
		}
	}
	return r < 0 ? -errno : r;
}

static ssize_t bf_io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	uint64_t unique = __atomic_load_n(&init_unique, __ATOMIC_ACQUIRE);
	struct fuse_open_out oo;
	struct fuse_init_out out;
	bool is_init = unique && oh->unique == unique && !oh->error;
	ssize_t r;

	(void)userdata;
	if (is_init && count == 2 && iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + 4 &&
	    init_allow_mmap) {
		memcpy(&out, iov[1].iov_base, iov[1].iov_len < sizeof(out) ? iov[1].iov_len : sizeof(out));
		out.flags |= FUSE_INIT_EXT;
		out.flags2 |= (uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32);
		iov[1].iov_base = &out;
	}
	if (count == 2 && iov[1].iov_len == sizeof(oo) && !oh->error && open_forget(oh->unique)) {
		memcpy(&oo, iov[1].iov_base, sizeof(oo));
		oo.open_flags |= FOPEN_PARALLEL_DIRECT_WRITES;
		iov[1].iov_base = &oo;
	}
	r = writev(fd, iov, count);
	if (r < 0)
		r = -errno;
	if (is_init) {
		__atomic_store_n(&init_unique, 0, __ATOMIC_RELEASE);
		if (r >= 0 && io_daemon)
			bf_ready(io_daemon);	/* the kernel has its answer: the mount is usable */
	}
	return r;
}

static const struct fuse_custom_io bf_io = {
	.read = bf_io_read,
	.writev = bf_io_writev,
};

int bf_rawio_attach(struct bf_daemon *d, struct fuse_session *se)
{
	/* fuse_session_mount() replaces this placeholder with the /dev/fuse fd */
	int dummy = open("/dev/null", O_RDWR | O_CLOEXEC);
	int ret;

	if (dummy < 0)
		return -errno;
	io_daemon = d;
	ret = fuse_session_custom_io(se, &bf_io, dummy);
	if (ret) {
		close(dummy);
		io_daemon = NULL;
		return ret < 0 ? ret : -EINVAL;
	}
	return dummy;
}

void bf_rawio_detach(void)
{
	io_daemon = NULL;
}
