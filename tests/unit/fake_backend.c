/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/fake_backend.c - the in-memory fake backend of the unit tests.
 *
 * Every op is checked against backends/backend.h, logged, and queued or
 * completed at once. Data moves when an op completes, not when it is
 * submitted, as on a real device: a write still in flight is not yet in the
 * store, and a cache that changes folio memory under writeback is seen.
 * The fault decision is taken at submit time, so a countdown follows the
 * submission order whatever the completion mode.
 */
#include "fake_backend.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../backends/lib/clock.h"

#define FAKE_POISON 0xEE
#define FAKE_MAX_REPORTS 16

struct fake_pend {
	struct blk_io *io;
	uint64_t seq;
	int result;		/* decided at submit: 0 or the injected error */
	uint64_t part;		/* with result: the bytes that complete first (partial) */
	bool bad;		/* violated the contract: touch nothing */
};

struct fake_be {
	struct blk_backend be;	/* Must come first. */
	struct blk_geometry geo;
	struct blk_backend_ops ops;	/* fake_ops, with stable_writes as set */

	pthread_mutex_t lock;
	pthread_cond_t cv;	/* pending changed, mode changed, stop */

	/* All below under lock. */
	uint8_t *data;
	size_t map_len;

	enum fake_mode mode;
	unsigned int delay_us;
	unsigned int seed;

	struct fake_op *log;
	size_t log_len, log_cap;
	uint64_t log_base;	/* seq of log[0] */
	uint64_t next_seq;
	uint64_t next_done_seq;

	struct fake_pend *pend;
	size_t nr_pend, pend_cap;
	uint64_t pend_changes;	/* bumped on every submit and completion */

	struct fake_fault fault;
	bool fault_armed;
	unsigned int fault_hits;

	unsigned int violations;
	unsigned int overlaps;
	bool quiet;
	uint64_t total_ops[8];		/* per op, since creation */
	uint64_t total_bytes[8];

	bool stop;
	pthread_t completer;
};

static const struct blk_backend_ops fake_ops;

static bool ranges_overlap(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

static void violation_locked(struct fake_be *fb, const struct blk_io *io, const char *why)
{
	if (fb->violations++ < FAKE_MAX_REPORTS && !fb->quiet)
		fprintf(stderr, "fake_backend: contract violation: %s pos=%llu len=%llu iovcnt=%d: %s\n",
			blk_op_name(io->op), (unsigned long long)io->pos,
			(unsigned long long)io->len, io->iovcnt, why);
}

/* Check @io against the rules of backend.h; false (and counted) if broken. */
static bool check_io_locked(struct fake_be *fb, const struct blk_io *io)
{
	const struct blk_geometry *g = &fb->geo;
	uint64_t sum = 0;
	int i;

	if (!io->end_io) {
		violation_locked(fb, io, "no end_io");
		return false;
	}
	for (size_t p = 0; p < fb->nr_pend; p++) {
		if (fb->pend[p].io == io) {
			violation_locked(fb, io, "blk_io submitted again while in flight");
			return false;
		}
	}
	switch (io->op) {
	case BLK_FLUSH:
		if (io->pos || io->len) {
			violation_locked(fb, io, "FLUSH with pos/len");
			return false;
		}
		return true;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		if (!blk_aligned(io->pos, g->lbs) || !blk_aligned(io->len, g->lbs)) {
			violation_locked(fb, io, "not aligned to lbs");
			return false;
		}
		if (io->pos > g->size || io->len > g->size - io->pos) {
			violation_locked(fb, io, "outside the device");
			return false;
		}
		return true;
	case BLK_READ:
	case BLK_WRITE:
		break;
	default:
		violation_locked(fb, io, "unknown op");
		return false;
	}

	if (!blk_aligned(io->pos, g->lbs) || !blk_aligned(io->len, g->lbs)) {
		violation_locked(fb, io, "not aligned to lbs");
		return false;
	}
	if (io->len == 0 || io->len > g->max_io) {
		violation_locked(fb, io, "len is 0 or above max_io");
		return false;
	}
	if (io->pos > g->size || io->len > g->size - io->pos) {
		violation_locked(fb, io, "outside the device");
		return false;
	}
	if (!io->iov || io->iovcnt <= 0) {
		violation_locked(fb, io, "no iovec");
		return false;
	}
	for (i = 0; i < io->iovcnt; i++) {
		if (!blk_aligned((uintptr_t)io->iov[i].iov_base, g->dma_align) ||
		    !blk_aligned(io->iov[i].iov_len, g->dma_align)) {
			violation_locked(fb, io, "iovec not aligned to dma_align");
			return false;
		}
		if (io->iov[i].iov_len && !io->iov[i].iov_base) {
			violation_locked(fb, io, "NULL iov_base");
			return false;
		}
		sum += io->iov[i].iov_len;
	}
	if (sum != io->len) {
		violation_locked(fb, io, "iovec lengths do not add up to len");
		return false;
	}
	return true;
}

/*
 * Make [pos, pos+len) of the store zero. Whole pages are given back to the
 * kernel (they read as zero again) so a discard of a huge range costs nothing.
 */
static void store_zero_locked(struct fake_be *fb, uint64_t pos, uint64_t len)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t end = pos + len;
	uint64_t a = (pos + pg - 1) & ~(pg - 1);
	uint64_t b = end & ~(pg - 1);

	if (a >= b) {
		memset(fb->data + pos, 0, len);
		return;
	}
	memset(fb->data + pos, 0, a - pos);
	if (madvise(fb->data + a, b - a, MADV_DONTNEED))
		memset(fb->data + a, 0, b - a);
	memset(fb->data + b, 0, end - b);
}

static void iov_fill_locked(const struct blk_io *io, const uint8_t *src, int byte)
{
	uint64_t off = 0;

	for (int i = 0; i < io->iovcnt; i++) {
		if (src)
			memcpy(io->iov[i].iov_base, src + off, io->iov[i].iov_len);
		else
			memset(io->iov[i].iov_base, byte, io->iov[i].iov_len);
		off += io->iov[i].iov_len;
	}
}

/* Move the first @n bytes of a READ or WRITE, between its vector and the store. */
static void iov_move_locked(struct fake_be *fb, const struct blk_io *io, uint64_t n)
{
	uint64_t off = 0;

	for (int i = 0; i < io->iovcnt && off < n; i++) {
		size_t c = io->iov[i].iov_len < n - off ? io->iov[i].iov_len : n - off;

		if (io->op == BLK_READ)
			memcpy(io->iov[i].iov_base, fb->data + io->pos + off, c);
		else
			memcpy(fb->data + io->pos + off, io->iov[i].iov_base, c);
		off += c;
	}
}

/* Move the data of a completing op and fill in its log entry; returns its result. */
static int process_locked(struct fake_be *fb, const struct fake_pend *p)
{
	struct blk_io *io = p->io;
	int res = p->result;

	if (p->bad) {
		res = -EIO;
	} else if (res == 0) {
		switch (io->op) {
		case BLK_READ:
			iov_fill_locked(io, fb->data + io->pos, 0);
			break;
		case BLK_WRITE: {
			uint64_t off = io->pos;

			for (int i = 0; i < io->iovcnt; i++) {
				memcpy(fb->data + off, io->iov[i].iov_base, io->iov[i].iov_len);
				off += io->iov[i].iov_len;
			}
			break;
		}
		case BLK_DISCARD:
		case BLK_WRITE_ZEROES:
			store_zero_locked(fb, io->pos, io->len);
			break;
		case BLK_FLUSH:
			break;
		}
	} else if (io->op == BLK_READ) {
		iov_fill_locked(io, NULL, FAKE_POISON);
	}
	if (res && p->part && !p->bad)
		iov_move_locked(fb, io, p->part);	/* the part before the fault made it */
	if (res)
		io->done = p->bad ? 0 : p->part;

	if (p->seq >= fb->log_base && p->seq - fb->log_base < fb->log_len) {
		struct fake_op *e = &fb->log[p->seq - fb->log_base];

		e->done = true;
		e->result = res;
		e->done_seq = fb->next_done_seq;
	}
	fb->next_done_seq++;
	return res;
}

static struct fake_pend pend_take_locked(struct fake_be *fb, size_t idx)
{
	struct fake_pend p = fb->pend[idx];

	memmove(&fb->pend[idx], &fb->pend[idx + 1],
		(fb->nr_pend - idx - 1) * sizeof(fb->pend[0]));
	fb->nr_pend--;
	fb->pend_changes++;
	pthread_cond_broadcast(&fb->cv);
	return p;
}

/* Called with the lock held; returns with it held. end_io runs unlocked. */
static void complete_locked(struct fake_be *fb, size_t idx)
{
	struct fake_pend p = pend_take_locked(fb, idx);
	int res = process_locked(fb, &p);

	pthread_mutex_unlock(&fb->lock);
	p.io->end_io(p.io, res);
	pthread_mutex_lock(&fb->lock);
}

static int fault_check_locked(struct fake_be *fb, const struct blk_io *io)
{
	struct fake_fault *f = &fb->fault;

	if (!fb->fault_armed || !(f->op_mask & FAKE_OP(io->op)))
		return 0;
	if (f->len && !ranges_overlap(io->pos, io->len, f->pos, f->len))
		return 0;
	if (f->countdown > 1) {
		f->countdown--;
		return 0;
	}
	fb->fault_hits++;
	if (!f->persistent)
		fb->fault_armed = false;
	return f->err;
}

static int log_append_locked(struct fake_be *fb, const struct blk_io *io, bool bad)
{
	struct fake_op *e;
	unsigned int inflight = 0;

	if (fb->log_len == fb->log_cap) {
		size_t cap = fb->log_cap ? fb->log_cap * 2 : 1024;
		struct fake_op *n = realloc(fb->log, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		fb->log = n;
		fb->log_cap = cap;
	}
	e = &fb->log[fb->log_len++];
	memset(e, 0, sizeof(*e));
	e->seq = fb->next_seq;
	e->op = io->op;
	e->flags = io->flags;
	e->pos = io->pos;
	e->len = io->len;
	e->iovcnt = io->iovcnt;
	e->violation = bad;
	for (size_t i = 0; i < fb->nr_pend; i++)
		if (fb->pend[i].io->op == BLK_WRITE)
			inflight++;
	e->inflight_writes = inflight;
	return 0;
}

static int fake_submit(struct blk_backend *be, struct blk_io *io)
{
	struct fake_be *fb = (struct fake_be *)be;
	struct fake_pend p = { .io = io };
	int ret;

	pthread_mutex_lock(&fb->lock);
	p.bad = !check_io_locked(fb, io);
	if (p.bad && !io->end_io) {
		pthread_mutex_unlock(&fb->lock);
		return -EINVAL;	/* cannot complete it */
	}
	ret = log_append_locked(fb, io, p.bad);
	if (ret) {
		pthread_mutex_unlock(&fb->lock);
		return ret;
	}
	if (fb->nr_pend == fb->pend_cap) {
		size_t cap = fb->pend_cap ? fb->pend_cap * 2 : 256;
		struct fake_pend *n = realloc(fb->pend, cap * sizeof(*n));

		if (!n) {
			fb->log_len--;
			pthread_mutex_unlock(&fb->lock);
			return -ENOMEM;
		}
		fb->pend = n;
		fb->pend_cap = cap;
	}
	p.seq = fb->next_seq++;
	if ((unsigned int)io->op < 8) {
		fb->total_ops[io->op]++;
		fb->total_bytes[io->op] += io->len;
	}
	if (!p.bad)
		p.result = fault_check_locked(fb, io);
	if (p.result && fb->fault.partial && fb->fault.pos > io->pos &&
	    (io->op == BLK_READ || io->op == BLK_WRITE))
		p.part = (fb->fault.pos - io->pos) & ~(uint64_t)(fb->geo.lbs - 1);
	if (io->op == BLK_WRITE) {
		for (size_t i = 0; i < fb->nr_pend; i++) {
			const struct blk_io *o = fb->pend[i].io;

			if (o->op == BLK_WRITE &&
			    ranges_overlap(o->pos, o->len, io->pos, io->len)) {
				fb->overlaps++;
				break;
			}
		}
	}
	fb->pend[fb->nr_pend++] = p;
	fb->pend_changes++;
	pthread_cond_broadcast(&fb->cv);
	if (fb->mode == FAKE_INLINE)
		complete_locked(fb, fb->nr_pend - 1);
	pthread_mutex_unlock(&fb->lock);
	return 0;
}

static void fake_geometry_op(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct fake_be *)be)->geo;
}

/* Tests own the fake: fake_destroy() frees it, close does nothing. */
static void fake_close(struct blk_backend *be)
{
	(void)be;
}

static size_t fake_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct fake_be *fb = (struct fake_be *)be;
	int n;

	pthread_mutex_lock(&fb->lock);
	n = snprintf(buf, len, "fake_ops %llu\nfake_violations %u\nfake_fault_hits %u\n",
		     (unsigned long long)fb->next_seq, fb->violations, fb->fault_hits);
	pthread_mutex_unlock(&fb->lock);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : (len ? len - 1 : 0);
}

static const struct blk_backend_ops fake_ops = {
	.name = "fake",
	.help = "in-memory test backend",
	.close = fake_close,
	.geometry = fake_geometry_op,
	.submit = fake_submit,
	.stat = fake_stat,
};

static void *completer_main(void *arg)
{
	struct fake_be *fb = arg;

	pthread_mutex_lock(&fb->lock);
	while (!fb->stop) {
		unsigned int us;

		if (fb->mode != FAKE_DEFERRED || !fb->nr_pend) {
			pthread_cond_wait(&fb->cv, &fb->lock);
			continue;
		}
		/* Wait a little: more I/O queues up and the pick below shuffles it. */
		us = fb->delay_us ? (unsigned int)rand_r(&fb->seed) % (fb->delay_us + 1) : 0;
		pthread_mutex_unlock(&fb->lock);
		if (us)
			usleep(us);
		pthread_mutex_lock(&fb->lock);
		if (fb->stop || fb->mode != FAKE_DEFERRED || !fb->nr_pend)
			continue;
		complete_locked(fb, (size_t)rand_r(&fb->seed) % fb->nr_pend);
	}
	pthread_mutex_unlock(&fb->lock);
	return NULL;
}

struct fake_be *fake_create(const struct blk_geometry *geo)
{
	struct fake_be *fb = calloc(1, sizeof(*fb));
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	if (!fb)
		return NULL;
	fb->ops = fake_ops;
	fb->be.ops = &fb->ops;
	fb->geo = *geo;
	if (!fb->geo.dma_align)
		fb->geo.dma_align = 1;
	if (!fb->geo.pbs)
		fb->geo.pbs = fb->geo.lbs;
	if (!fb->geo.io_min)
		fb->geo.io_min = fb->geo.pbs;
	if (!fb->geo.max_io)
		fb->geo.max_io = 1u << 20;
	if (!fb->geo.io_opt)
		fb->geo.io_opt = fb->geo.max_io;
	fb->map_len = (fb->geo.size + pg - 1) & ~(pg - 1);
	if (!fb->map_len)
		fb->map_len = pg;
	/* Lazily zeroed: a multi-GiB device costs only the pages a test touches. */
	fb->data = mmap(NULL, fb->map_len, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (fb->data == MAP_FAILED)
		goto out_free;
	fb->mode = FAKE_INLINE;
	fb->delay_us = 200;
	fb->seed = 1;
	pthread_mutex_init(&fb->lock, NULL);
	/* waited on with timeouts (fake_wait_*): CLOCK_MONOTONIC, as clock.h says */
	if (blk_cond_init(&fb->cv))
		goto out_mutex;
	if (pthread_create(&fb->completer, NULL, completer_main, fb))
		goto out_cond;
	return fb;

out_cond:
	pthread_cond_destroy(&fb->cv);
out_mutex:
	pthread_mutex_destroy(&fb->lock);
	munmap(fb->data, fb->map_len);
out_free:
	free(fb);
	return NULL;
}

void fake_destroy(struct fake_be *fb)
{
	if (!fb)
		return;
	pthread_mutex_lock(&fb->lock);
	fb->stop = true;
	pthread_cond_broadcast(&fb->cv);
	pthread_mutex_unlock(&fb->lock);
	pthread_join(fb->completer, NULL);
	if (fb->nr_pend)
		fprintf(stderr, "fake_backend: destroyed with %zu I/O pending\n", fb->nr_pend);
	pthread_cond_destroy(&fb->cv);
	pthread_mutex_destroy(&fb->lock);
	munmap(fb->data, fb->map_len);
	free(fb->log);
	free(fb->pend);
	free(fb);
}

struct blk_backend *fake_backend(struct fake_be *fb)
{
	return &fb->be;
}

const struct blk_geometry *fake_geometry(const struct fake_be *fb)
{
	return &fb->geo;
}

void fake_set_stable_writes(struct fake_be *fb, bool on)
{
	/* read by pc_dev_add() only: no lock, and no device may be on it yet */
	fb->ops.stable_writes = on;
}

void fake_set_mode(struct fake_be *fb, enum fake_mode mode)
{
	pthread_mutex_lock(&fb->lock);
	fb->mode = mode;
	pthread_cond_broadcast(&fb->cv);
	pthread_mutex_unlock(&fb->lock);
}

void fake_set_delay(struct fake_be *fb, unsigned int max_us)
{
	pthread_mutex_lock(&fb->lock);
	fb->delay_us = max_us;
	pthread_mutex_unlock(&fb->lock);
}

void fake_set_seed(struct fake_be *fb, unsigned int seed)
{
	pthread_mutex_lock(&fb->lock);
	fb->seed = seed;
	pthread_mutex_unlock(&fb->lock);
}

size_t fake_pending(struct fake_be *fb)
{
	size_t n;

	pthread_mutex_lock(&fb->lock);
	n = fb->nr_pend;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

/* blk_now_ns() @ms milliseconds from now: a deadline for blk_cond_wait_until() */
static uint64_t deadline_after(unsigned int ms)
{
	return blk_now_ns() + (uint64_t)ms * 1000000u;
}

bool fake_wait_pending(struct fake_be *fb, size_t n, unsigned int timeout_ms)
{
	uint64_t end = deadline_after(timeout_ms);
	bool ok;

	pthread_mutex_lock(&fb->lock);
	while (fb->nr_pend < n) {
		if (blk_cond_wait_until(&fb->cv, &fb->lock, end) == ETIMEDOUT)
			break;
	}
	ok = fb->nr_pend >= n;
	if (!ok)
		fprintf(stderr, "fake_wait_pending: %zu of %zu I/Os pending after %u ms\n",
			fb->nr_pend, n, timeout_ms);
	pthread_mutex_unlock(&fb->lock);
	return ok;
}

size_t fake_wait_quiet(struct fake_be *fb, unsigned int quiet_ms, unsigned int timeout_ms)
{
	uint64_t end = deadline_after(timeout_ms);
	size_t n;

	pthread_mutex_lock(&fb->lock);
	for (;;) {
		uint64_t changes = fb->pend_changes;
		uint64_t quiet_end = deadline_after(quiet_ms);
		int rc = 0;

		while (fb->pend_changes == changes && rc != ETIMEDOUT)
			rc = blk_cond_wait_until(&fb->cv, &fb->lock, quiet_end);
		if (fb->pend_changes == changes)
			break;
		if (blk_now_ns() >= end)
			break;
	}
	n = fb->nr_pend;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

bool fake_complete_one(struct fake_be *fb, size_t idx)
{
	bool ok = false;

	pthread_mutex_lock(&fb->lock);
	if (idx < fb->nr_pend) {
		complete_locked(fb, idx);
		ok = true;
	}
	pthread_mutex_unlock(&fb->lock);
	return ok;
}

size_t fake_pending_data(struct fake_be *fb, size_t idx, void *buf, size_t len,
			 uint64_t *pos)
{
	const struct blk_io *io;
	size_t n = 0;
	int i;

	pthread_mutex_lock(&fb->lock);
	if (idx >= fb->nr_pend || fb->pend[idx].bad ||
	    (fb->pend[idx].io->op != BLK_READ && fb->pend[idx].io->op != BLK_WRITE))
		goto out_unlock;
	io = fb->pend[idx].io;
	if (pos)
		*pos = io->pos;
	for (i = 0; i < io->iovcnt && n < len; i++) {
		size_t take = io->iov[i].iov_len < len - n ? io->iov[i].iov_len : len - n;

		memcpy((uint8_t *)buf + n, io->iov[i].iov_base, take);
		n += take;
	}
out_unlock:
	pthread_mutex_unlock(&fb->lock);
	return n;
}

bool fake_complete_op(struct fake_be *fb, unsigned int op_mask)
{
	bool ok = false;
	size_t i;

	pthread_mutex_lock(&fb->lock);
	for (i = 0; i < fb->nr_pend; i++) {
		if (op_mask & FAKE_OP(fb->pend[i].io->op)) {
			complete_locked(fb, i);
			ok = true;
			break;
		}
	}
	pthread_mutex_unlock(&fb->lock);
	return ok;
}

size_t fake_pending_ops(struct fake_be *fb, unsigned int op_mask)
{
	size_t i, n = 0;

	pthread_mutex_lock(&fb->lock);
	for (i = 0; i < fb->nr_pend; i++)
		n += !!(op_mask & FAKE_OP(fb->pend[i].io->op));
	pthread_mutex_unlock(&fb->lock);
	return n;
}

size_t fake_complete_all(struct fake_be *fb, bool reverse)
{
	uint64_t *seqs;
	size_t cnt, n = 0;

	pthread_mutex_lock(&fb->lock);
	/*
	 * Only what is pending now: I/O submitted from an end_io (or by a
	 * thread woken by one) waits for the next call, as on a real queue.
	 */
	cnt = fb->nr_pend;
	seqs = malloc((cnt ? cnt : 1) * sizeof(*seqs));
	if (!seqs) {
		pthread_mutex_unlock(&fb->lock);
		return 0;
	}
	for (size_t i = 0; i < cnt; i++)
		seqs[i] = fb->pend[i].seq;
	for (size_t k = 0; k < cnt; k++) {
		uint64_t seq = seqs[reverse ? cnt - 1 - k : k];

		for (size_t i = 0; i < fb->nr_pend; i++) {
			if (fb->pend[i].seq == seq) {
				complete_locked(fb, i);
				n++;
				break;
			}
		}
	}
	pthread_mutex_unlock(&fb->lock);
	free(seqs);
	return n;
}

void fake_fault_set(struct fake_be *fb, const struct fake_fault *f)
{
	pthread_mutex_lock(&fb->lock);
	fb->fault = *f;
	if (!fb->fault.countdown)
		fb->fault.countdown = 1;
	if (fb->fault.err > 0)
		fb->fault.err = -fb->fault.err;
	if (!fb->fault.err)
		fb->fault.err = -EIO;
	fb->fault_armed = true;
	pthread_mutex_unlock(&fb->lock);
}

void fake_fault_clear(struct fake_be *fb)
{
	pthread_mutex_lock(&fb->lock);
	fb->fault_armed = false;
	pthread_mutex_unlock(&fb->lock);
}

unsigned int fake_fault_hits(struct fake_be *fb)
{
	unsigned int n;

	pthread_mutex_lock(&fb->lock);
	n = fb->fault_hits;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

void fake_set_quiet(struct fake_be *fb, bool quiet)
{
	pthread_mutex_lock(&fb->lock);
	fb->quiet = quiet;
	pthread_mutex_unlock(&fb->lock);
}

unsigned int fake_violations(struct fake_be *fb)
{
	unsigned int n;

	pthread_mutex_lock(&fb->lock);
	n = fb->violations;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

unsigned int fake_overlaps(struct fake_be *fb)
{
	unsigned int n;

	pthread_mutex_lock(&fb->lock);
	n = fb->overlaps;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

size_t fake_log_len(struct fake_be *fb)
{
	size_t n;

	pthread_mutex_lock(&fb->lock);
	n = fb->log_len;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

bool fake_log_get(struct fake_be *fb, size_t i, struct fake_op *out)
{
	bool ok = false;

	pthread_mutex_lock(&fb->lock);
	if (i < fb->log_len) {
		*out = fb->log[i];
		ok = true;
	}
	pthread_mutex_unlock(&fb->lock);
	return ok;
}

size_t fake_log_count_range(struct fake_be *fb, unsigned int op_mask,
			    uint64_t pos, uint64_t len)
{
	size_t n = 0;

	pthread_mutex_lock(&fb->lock);
	for (size_t i = 0; i < fb->log_len; i++) {
		const struct fake_op *e = &fb->log[i];

		if (!(op_mask & FAKE_OP(e->op)))
			continue;
		if (len && !ranges_overlap(e->pos, e->len, pos, len))
			continue;
		n++;
	}
	pthread_mutex_unlock(&fb->lock);
	return n;
}

size_t fake_log_count(struct fake_be *fb, unsigned int op_mask)
{
	return fake_log_count_range(fb, op_mask, 0, 0);
}

uint64_t fake_log_bytes(struct fake_be *fb, unsigned int op_mask)
{
	uint64_t n = 0;

	pthread_mutex_lock(&fb->lock);
	for (size_t i = 0; i < fb->log_len; i++)
		if (op_mask & FAKE_OP(fb->log[i].op))
			n += fb->log[i].len;
	pthread_mutex_unlock(&fb->lock);
	return n;
}

long fake_log_find(struct fake_be *fb, size_t from, unsigned int op_mask,
		   uint64_t pos, uint64_t len)
{
	long r = -1;

	pthread_mutex_lock(&fb->lock);
	for (size_t i = from; i < fb->log_len; i++) {
		const struct fake_op *e = &fb->log[i];

		if ((op_mask & FAKE_OP(e->op)) && e->pos == pos && e->len == len) {
			r = (long)i;
			break;
		}
	}
	pthread_mutex_unlock(&fb->lock);
	return r;
}

long fake_log_find_overlap(struct fake_be *fb, size_t from, unsigned int op_mask,
			   uint64_t pos, uint64_t len)
{
	long r = -1;

	pthread_mutex_lock(&fb->lock);
	for (size_t i = from; i < fb->log_len; i++) {
		const struct fake_op *e = &fb->log[i];

		if ((op_mask & FAKE_OP(e->op)) && ranges_overlap(e->pos, e->len, pos, len)) {
			r = (long)i;
			break;
		}
	}
	pthread_mutex_unlock(&fb->lock);
	return r;
}

void fake_log_clear(struct fake_be *fb)
{
	pthread_mutex_lock(&fb->lock);
	fb->log_base = fb->next_seq;
	fb->log_len = 0;
	pthread_mutex_unlock(&fb->lock);
}

uint64_t fake_total_count(struct fake_be *fb, unsigned int op_mask)
{
	uint64_t n = 0;

	pthread_mutex_lock(&fb->lock);
	for (unsigned int op = 0; op < 8; op++)
		if (op_mask & (1u << op))
			n += fb->total_ops[op];
	pthread_mutex_unlock(&fb->lock);
	return n;
}

uint64_t fake_total_bytes(struct fake_be *fb, unsigned int op_mask)
{
	uint64_t n = 0;

	pthread_mutex_lock(&fb->lock);
	for (unsigned int op = 0; op < 8; op++)
		if (op_mask & (1u << op))
			n += fb->total_bytes[op];
	pthread_mutex_unlock(&fb->lock);
	return n;
}

void fake_log_dump(struct fake_be *fb, FILE *f)
{
	pthread_mutex_lock(&fb->lock);
	fprintf(f, "fake log (%zu ops, seed %u, %u violations, %zu pending):\n",
		fb->log_len, fb->seed, fb->violations, fb->nr_pend);
	for (size_t i = 0; i < fb->log_len; i++) {
		const struct fake_op *e = &fb->log[i];

		fprintf(f, "  #%llu %-12s pos=%llu len=%llu iovcnt=%d",
			(unsigned long long)e->seq, blk_op_name(e->op),
			(unsigned long long)e->pos, (unsigned long long)e->len, e->iovcnt);
		if (e->done)
			fprintf(f, " -> %d (done #%llu)", e->result,
				(unsigned long long)e->done_seq);
		else
			fprintf(f, " (pending)");
		if (e->inflight_writes)
			fprintf(f, " [%u writes in flight]", e->inflight_writes);
		fprintf(f, "%s\n", e->violation ? " VIOLATION" : "");
	}
	pthread_mutex_unlock(&fb->lock);
}

uint8_t *fake_store(struct fake_be *fb)
{
	return fb->data;
}

void fake_store_read(struct fake_be *fb, void *buf, size_t len, uint64_t pos)
{
	pthread_mutex_lock(&fb->lock);
	memcpy(buf, fb->data + pos, len);
	pthread_mutex_unlock(&fb->lock);
}

void fake_store_write(struct fake_be *fb, const void *buf, size_t len, uint64_t pos)
{
	pthread_mutex_lock(&fb->lock);
	memcpy(fb->data + pos, buf, len);
	pthread_mutex_unlock(&fb->lock);
}
