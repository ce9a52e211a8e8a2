// SPDX-License-Identifier: MIT
/*
 * backends/aio.c - real storage behind the cache: a block device (partition,
 * whole disk, loop device) or an image file, through Linux AIO (libaio) and
 * O_DIRECT. Data goes between folio memory and the device with no copy and
 * no second page cache; a block device's geometry is read from the device.
 *
 * Threads and queues (all under ad->lock, never held across a syscall that
 * does I/O, nor while end_io runs):
 *  - submit() takes a request from the free list and appends it to the
 *    submission queue (sq). The caller that finds nobody submitting becomes
 *    the submitter: it moves queued requests into the kernel, up to
 *    AIO_BATCH per io_submit(), while fewer than queue_depth are in flight.
 *    A caller that finds a submitter at work only queues (flat combining:
 *    one io_submit() for many callers under load, no thread hop when idle).
 *    I/O beyond queue_depth waits in the sq, never fails, never blocks.
 *  - A READ/WRITE whose submitter sleeps until end_io anyway
 *    (BLK_IO_WAITED: O_DIRECT through the mount, cache misses) is done in
 *    that thread with preadv/pwritev when a slot is free and the sq is
 *    empty; it counts in flight like an iocb, and end_io runs before
 *    submit() returns. Writeback never waits per I/O: it takes the queue.
 *  - Any other READ/WRITE that finds the device idle (nothing in flight,
 *    nothing queued) on a device whose recent I/Os completed within
 *    AIO_FAST_NS, while recent such waits ended within AIO_WAIT_FAST_NS
 *    (on a loaded machine they do not, and the queue serves better; one in
 *    AIO_WAIT_PROBE waits anyway, to notice when the load goes), is
 *    submitted by its caller without the eventfd signal,
 *    and the caller waits in io_getevents() for it, at most AIO_WAIT_NS,
 *    ending whatever it reaps (its own and others') in its thread: at
 *    queue depth 1 on a fast device the reply leaves from the thread that
 *    received the request, with no wake-up of the reaper and back. If it
 *    gives up, the iocb is an orphan (nr_orphans) that signals nothing:
 *    the reaper then waits in io_getevents() itself, a tick at a time,
 *    until no orphan is left. A caller never waits this way from inside
 *    an end_io that it runs (aio_reaping).
 *  - On a device that does its work inside the submitting syscall (zram,
 *    brd: such a caller's I/O had mostly ended when io_submit() returned,
 *    inline_avg) an idle READ/WRITE is instead done by its caller with one
 *    preadv/pwritev, as for BLK_IO_WAITED, whatever the waits: the queue
 *    would do the same work in io_submit() and add the reaper's wake-up.
 *    One in AIO_WAIT_PROBE still goes by io_submit(), to keep measuring.
 *  - Every other submit() then takes the events already there (no wait)
 *    and ends them in its own thread: at depth, the threads that receive
 *    requests also complete them, in batches, and the reaper is not woken.
 *    A submit() from inside an end_io neither reaps (no nesting) nor
 *    submits at once: it is queued, and the batch's submits go down
 *    together when the batch of end_ios is over (aio_end()).
 *  - The reaper thread sleeps on an eventfd that the iocbs batched while
 *    it sleeps signal (IOCB_FLAG_RESFD) and that the others write to wake
 *    it; while iocbs that signal nothing are in flight (nr_nosig,
 *    nr_orphans) it waits in io_getevents() instead, a tick at a time. It
 *    takes what nobody else did: it reaps events, resubmits the rest of
 *    short transfers, retries after EAGAIN, refills the kernel from the
 *    sq, and calls end_io with no lock held, so an end_io may free its
 *    blk_io or submit() again. "Which threads reap" below has the race.
 *  - The worker thread runs what has no asynchronous form: fdatasync() for
 *    FLUSH where the kernel refuses IOCB_CMD_FDSYNC, fallocate() and
 *    BLKZEROOUT for DISCARD / WRITE_ZEROES, and writing zeroes where those
 *    are refused; an empty DISCARD / WRITE_ZEROES goes there too, to be
 *    ended with no syscall. It calls each one's end_io itself, once the
 *    syscall has returned (the zeros or the flush are on the storage): no
 *    hand-off to the reaper, whose tick at depth would add up to a
 *    millisecond to every one.
 *  - An iocb the kernel refuses (io_submit() fails it alone) is ended by
 *    the thread that was refused, after its other work (aio_drain() gives
 *    it back), except inside a batch of end_ios (aio_reaping: a submit()
 *    to another device from an end_io), where ending it would nest: it
 *    goes on the done list, and the reaper does not sleep, nor wait a
 *    tick, while that list holds any.
 *  - A thread with a plug in force (backends/lib/plug.h: a FUSE ring queue
 *    thread serving a batch) queues its READ/WRITE/FLUSH on the sq and
 *    defers its io_submit() to the plug's flush, where the batch goes down
 *    in one call (aio_unplug()); it does not wait for its own I/O
 *    (aio_submit_wait()), and the drains after its reaps wait for the flush
 *    too. What it queued is on the shared sq, so any other submitter or the
 *    reaper, draining, takes it along; the plug holds the device (an
 *    nr_callers count) until its flush, so close() cannot free it first.
 *
 * Request life: free -> sq -> kernel -> (sq again after a short transfer)
 * -> reaped (by the reaper or a submitter) -> end_io -> free; or free ->
 * sq -> refused -> end_io (its submitter's; the reaper's from the done
 * list) -> free; or free -> wq -> worker -> end_io (the worker's) -> free.
 * nr_pending counts requests between submit() and the return of their
 * end_io; close() waits for it to reach zero.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "backends_int.h"
#include "kit/knobs.h"
#include "lib/plug.h"

#define AIO_DEF_QD	64
#define AIO_MAX_QD	1024
#define AIO_BATCH	64		/* iocbs per io_submit() */
#define AIO_EVENTS	128		/* events per io_getevents() */
#define AIO_DEF_MAX_IO	(1u << 20)
#define AIO_ZERO_BUF	(1u << 20)	/* the write-zeroes fallback's buffer */
#define AIO_RETRY_MS	1		/* after io_submit() said EAGAIN */
#define AIO_MIN_ALIGN	512u
/*
 * The caller's own wait for an I/O on an idle, fast device: at most
 * AIO_WAIT_NS, and only while the device's I/Os take AIO_FAST_NS or less on
 * average (lat_ns): a disk's milliseconds are the reaper's to wait for.
 */
#define AIO_WAIT_NS	100000ull
#define AIO_FAST_NS	50000ull
/*
 * ... and only while a waiting caller sees its I/O end within
 * AIO_WAIT_FAST_NS on average (wait_ns, fed by the waits alone). On a
 * loaded machine the waiting thread must get a CPU back, and the wait costs
 * more than the queue (BENCHMARKS.md, "Issue 41's loaded QD1"). While the
 * waits are slow, one eligible I/O in AIO_WAIT_PROBE still waits, so the
 * average follows when the load goes.
 */
#define AIO_WAIT_FAST_NS 20000ull
#define AIO_WAIT_PROBE	32u
/*
 * ... and where at least AIO_SYNC_INLINE/256 of those waits found their I/O
 * ended when io_submit() returned (inline_avg: the device did the work in
 * the syscall), the caller does its I/O with preadv/pwritev instead
 * (aio_submit_sync()).
 */
#define AIO_INLINE_ONE	256u
#define AIO_SYNC_INLINE	192u
#define AIO_ORPHAN_TICK_NS 1000000	/* the reaper's wait while iocbs signal nothing */

#ifndef IOV_MAX
#define IOV_MAX		1024		/* the kernel's UIO_MAXIOV */
#endif

struct aio_req {
	struct iocb iocb;	/* must come first: events give back &iocb */
	struct blk_io *io;
	struct list_head node;	/* on sq, wq, done or free; ad->lock */
	uint64_t done;		/* READ/WRITE: bytes transferred so far */
	uint64_t cur;		/* bytes in the iocb now submitted */
	struct iovec *vec;	/* the rest of io->iov when it must be copied */
	int res;		/* on the done list: what end_io gets */
	uint64_t t_submit;	/* blk_now_ns() at io_submit(): lat_ns */
	/*
	 * lock: submitted without the eventfd signal (aio_submit_wait());
	 * @waiter is its caller's flag while it waits, NULL once it gave up
	 * (the request then counts in nr_orphans until its event is seen).
	 */
	bool quiet;
	bool *waiter;
	/*
	 * Submitted by aio_drain() without the eventfd signal, the reaper
	 * being awake: counted in nr_nosig until its event is reaped. Set
	 * under lock before io_submit(); read and cleared by whoever reaps
	 * its event (the kernel orders the two: kernel_seq).
	 */
	bool nosig;
};

struct aio_dev {
	struct blk_backend be;		/* must come first */
	/* set at open; size changes only in aio_resize(), the device quiesced */
	struct blk_geometry geo;
	int fd;
	int efd;			/* eventfd: completions and wakeups */
	bool bdev;			/* a block device, else an image file */
	bool read_only;			/* opened for reading (a read-only mount) */
	unsigned int qd;
	io_context_t ctx;
	pthread_t reaper, worker;
	char path[PATH_MAX];		/* as resolved, for messages */

	pthread_mutex_t lock;
	pthread_cond_t wq_cond;		/* the worker waits for wq or stop */
	struct list_head sq;		/* lock: waiting for a slot */
	struct list_head wq;		/* lock: for the worker */
	struct list_head done;		/* lock: refused iocbs for the reaper to end */
	struct list_head free;		/* lock: unused requests, most recent first */
	unsigned int inflight;		/* lock: iocbs in (or on the way to) the kernel */
	unsigned int nr_sq;		/* lock */
	unsigned int nr_wq;		/* lock: waiting for or in the worker */
	uint64_t nr_pending;		/* lock: submitted, end_io not yet returned */
	bool submitting;		/* lock: a thread is in aio_drain()'s loop */
	bool backoff;			/* lock: EAGAIN; the reaper retries on a timer */
	bool stopping;			/* lock: close() has begun */
	bool worker_stop;		/* lock */
	bool no_fdsync;			/* lock: the kernel refused IOCB_CMD_FDSYNC */
	unsigned int nr_orphans;	/* lock: quiet iocbs nobody waits for: the reaper polls */
	unsigned int nr_nosig;		/* lock: iocbs in flight without the signal (req->nosig) */
	bool reaper_asleep;		/* lock: the reaper sleeps, or is about to, on the eventfd */
	uint64_t lat_ns;		/* atomic: moving average of READ/WRITE completion time */
	uint64_t wait_ns;		/* atomic: moving average of a caller's wait (aio_submit_wait) */
	/*
	 * atomic: moving average, in 1/AIO_INLINE_ONE, of those waits whose
	 * I/O had ended by the time io_submit() returned
	 */
	uint64_t inline_avg;
	unsigned int sync_probes;	/* lock: idle I/Os on an inline device (probe count) */
	unsigned int wait_skips;	/* lock: idle-device I/Os while wait_ns is slow (probe count) */
	/*
	 * Bumped (release) before each io_submit(), read (acquire) after each
	 * io_getevents(). The syscalls already order a request's fields
	 * before its completion; this says so to ThreadSanitizer, which
	 * cannot see through the kernel (`make tsan` runs the daemon).
	 */
	unsigned long kernel_seq;

	/* Worker thread only. */
	bool no_punch;			/* FALLOC_FL_PUNCH_HOLE refused */
	bool no_zero_range;		/* FALLOC_FL_ZERO_RANGE refused */
	bool no_zeroout;		/* BLKZEROOUT refused */
	void *zero_buf;			/* AIO_ZERO_BUF of zeros, made on first use */

	/* Counters for ->stat; lock. */
	uint64_t nr_submitted;		/* iocbs the kernel took */
	uint64_t nr_submit_calls;	/* io_submit() calls that took some */
	uint64_t nr_completed;		/* end_io calls */
	uint64_t nr_errors;		/* end_io calls with an error */
	uint64_t nr_short;		/* short transfers resubmitted */
	uint64_t nr_eagain;		/* io_submit() said EAGAIN */
	uint64_t nr_zero_writes;	/* ranges zeroed by writing zeroes */
	uint64_t nr_sync;		/* READ/WRITE done in the submitter's thread */
	uint64_t nr_idle_sync;		/* ... of them, on an idle inline device (aio_submit_sync(idle)) */
	uint64_t nr_waited;		/* READ/WRITE whose caller waited for them (aio_submit_wait) */
	uint64_t nr_wait_missed;	/* ... and gave up after AIO_WAIT_NS: orphans */
	uint64_t nr_wait_skipped;	/* idle-device READ/WRITE not waited for: the waits were slow */
	uint64_t nr_req_grown;		/* atomic: requests made past the 2 x queue_depth of open */
	uint64_t nr_end_reaper;		/* end_io calls made by the reaper */
	uint64_t nr_end_caller;		/* ... by a submitting thread (reaped after its submit) */
	uint64_t nr_end_worker;		/* ... by the worker, of what it did */
	uint64_t nr_plug_flushes;	/* flushes of a plug that had deferred a drain */
	/*
	 * atomic: threads inside submit(), and plugs that deferred a drain
	 * of this device until their flush (aio_plugged()). One may still be
	 * there, reaping others' events, after its own I/O's end_io ran
	 * elsewhere and its owner called close(): close() waits for it before
	 * freeing anything.
	 */
	unsigned int nr_callers;
};

/* ---- the reaper's eventfd ---- */

static void aio_wake(struct aio_dev *ad)
{
	uint64_t one = 1;

	/* Only fails when the counter would overflow: it is then non-zero anyway. */
	while (write(ad->efd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

/* ---- building iocbs ---- */

/*
 * What is left of a READ/WRITE from byte @done on, at most IOV_MAX segments
 * (what one iocb or preadv/pwritev takes): *@iovp and *@np, and in *@bytes
 * what they hold. The cache's own iovec (no copy) unless the rest starts
 * mid-segment after a short transfer: then it is copied into *@vec so the
 * first segment can be trimmed. *@vec is sized once (a later continuation
 * starts at or after this segment, so it never needs more entries); the
 * caller frees it. 0, or -ENOMEM.
 */
static int aio_iov_rest(const struct blk_io *io, uint64_t done, struct iovec **vec,
			const struct iovec **iovp, int *np, uint64_t *bytes)
{
	const struct iovec *iov = io->iov;
	uint64_t skip = done;
	int i = 0, n, k;

	while (skip && skip >= iov[i].iov_len) {
		skip -= iov[i].iov_len;
		i++;
	}
	iov += i;
	n = io->iovcnt - i;
	if (n > IOV_MAX)
		n = IOV_MAX;
	if (skip) {
		if (!*vec) {
			*vec = malloc(sizeof(**vec) * n);
			if (!*vec)
				return -ENOMEM;
		}
		memcpy(*vec, iov, sizeof(*iov) * n);
		(*vec)[0].iov_base = (char *)(*vec)[0].iov_base + skip;
		(*vec)[0].iov_len -= skip;
		iov = *vec;
	}
	if (n == io->iovcnt - i) {
		*bytes = io->len - done;
	} else {
		/* More segments than one call takes: this part, then the rest. */
		*bytes = 0;
		for (k = 0; k < n; k++)
			*bytes += iov[k].iov_len;
	}
	*iovp = iov;
	*np = n;
	return 0;
}

/* Point req->iocb at what is left of a READ/WRITE from byte req->done on. */
static int aio_prep_rw(struct aio_dev *ad, struct aio_req *req)
{
	struct blk_io *io = req->io;
	const struct iovec *iov;
	int n, ret;

	ret = aio_iov_rest(io, req->done, &req->vec, &iov, &n, &req->cur);
	if (ret)
		return ret;
	if (io->op == BLK_READ)
		io_prep_preadv(&req->iocb, ad->fd, iov, n, io->pos + req->done);
	else
		io_prep_pwritev(&req->iocb, ad->fd, iov, n, io->pos + req->done);
	req->iocb.data = req;
	io_set_eventfd(&req->iocb, ad->efd);
	return 0;
}

static void aio_prep_fdsync(struct aio_dev *ad, struct aio_req *req)
{
	io_prep_fdsync(&req->iocb, ad->fd);
	req->iocb.data = req;
	io_set_eventfd(&req->iocb, ad->efd);
}

/* ---- submission ---- */

#define AIO_IOCB_RESFD	(1u << 0)	/* IOCB_FLAG_RESFD: io_set_eventfd()'s bit */

/*
 * Which threads reap, and why nothing is lost:
 *  - A thread that has just submitted (aio_submit(): a FUSE worker, a ring
 *    queue thread, a device worker) takes the events already there, without
 *    waiting (io_getevents() with min_nr 0; libaio looks at the ring in
 *    memory first, so an empty one costs no syscall), and runs their end_io
 *    itself: at depth, the replies leave from the threads that receive the
 *    requests, several at a time, and the reaper is not woken for them.
 *  - An iocb signals the eventfd (IOCB_FLAG_RESFD) only while the reaper
 *    sleeps on it, or is about to (ad->reaper_asleep, set under the lock
 *    before it looks at the counts below and sleeps). Any other one is
 *    counted in nr_nosig from the lock hold that builds its batch until
 *    its event is reaped. The reaper sleeps on the eventfd only while
 *    nr_nosig (and nr_orphans) is 0; else it waits in io_getevents()
 *    itself, a tick at a time. So an iocb is always reaped: by a submitter
 *    that comes by, or by the reaper, which either saw it counted or slept
 *    before its batch was built, and then it signals.
 *  - A thread running end_ios it reaped (aio_reaping) does not reap again
 *    from a submit() made inside one of them: no nesting, no stack growth.
 *    Its submits to the same device are only queued (aio_plug) and go down
 *    together in one io_submit() once the batch of end_ios is over.
 *  - The worker reaps nothing: it ends what it did itself (aio_worker_fn()),
 *    as the reaper ends a batch.
 *  - Refused iocbs never wait for the reaper's tick: the thread refused
 *    ends them (aio_drain() hands them back), and only a submit() to a
 *    device other than the one whose end_ios it runs puts them on the done
 *    list (a cache's end_io submits to its own device, so in the daemon
 *    none does); the reaper looks at the list before each sleep or tick
 *    and then sleeps not at all. One put there while the reaper already
 *    waits a tick is ended at the tick's end.
 */
static __thread bool aio_reaping;
static __thread struct aio_dev *aio_plug;

/* Clear nosig on the requests of @list (not in the kernel); how many had it. */
static int aio_unsig(struct list_head *list)
{
	struct aio_req *req;
	int nr = 0;

	list_for_each_entry(req, list, node) {
		if (req->nosig) {
			req->nosig = false;
			nr++;
		}
	}
	return nr;
}

/*
 * Move queued requests into the kernel while slots are free. One thread at
 * a time does it (ad->submitting); the others' requests, queued meanwhile,
 * are seen by its next look at the sq, which happens under the same lock
 * hold that clears ->submitting, so none is left behind. When it stops
 * with requests queued, either all slots are taken (a completion calls
 * this again from the reaper) or io_submit() said EAGAIN (the reaper
 * retries on a timer; @from_reaper: it is the caller, so it is not woken,
 * or it would retry at once, in a loop). Requests the kernel refused
 * (req->res set) go onto @refused_out for the caller to end with
 * aio_end(), or, with @refused_out NULL (the caller is inside a batch of
 * end_ios: aio_reaping), onto the done list for the reaper.
 */
static void aio_drain(struct aio_dev *ad, bool from_reaper, struct list_head *refused_out)
{
	struct iocb *batch[AIO_BATCH];
	bool wake = false;

	pthread_mutex_lock(&ad->lock);
	if (ad->submitting) {
		pthread_mutex_unlock(&ad->lock);
		return;
	}
	ad->submitting = true;
	while (!list_empty(&ad->sq) && ad->inflight < ad->qd) {
		LIST_HEAD(refused);
		LIST_HEAD(to_worker);
		LIST_HEAD(back);
		int n = 0, i = 0, calls = 0, submitted = 0, nr_back, nr_worker = 0, nr_unsig;
		bool eagain = false, fdsync_refused = false;
		uint64_t now = blk_now_ns();

		while (n < AIO_BATCH && !list_empty(&ad->sq) && ad->inflight < ad->qd) {
			struct aio_req *req = list_first_entry(&ad->sq, struct aio_req, node);

			list_del_init(&req->node);
			req->t_submit = now;
			if (ad->reaper_asleep) {
				req->iocb.u.c.flags |= AIO_IOCB_RESFD;
			} else {
				req->iocb.u.c.flags &= ~AIO_IOCB_RESFD;
				req->nosig = true;
				ad->nr_nosig++;
			}
			batch[n++] = &req->iocb;
			ad->nr_sq--;
			ad->inflight++;
		}
		pthread_mutex_unlock(&ad->lock);

		__atomic_fetch_add(&ad->kernel_seq, 1, __ATOMIC_RELEASE);
		while (i < n) {
			struct aio_req *req;
			int ret = io_submit(ad->ctx, n - i, batch + i);

			if (ret > 0) {
				/* Those iocbs may complete, and be freed, from here on. */
				i += ret;
				submitted += ret;
				calls++;
				continue;
			}
			if (ret == -EINTR)
				continue;
			if (ret == -EAGAIN || ret == 0) {
				eagain = true;
				break;
			}
			/* The kernel refused batch[i] alone; the rest may go. */
			req = (struct aio_req *)batch[i++];
			if (req->io->op == BLK_FLUSH && ret == -EINVAL) {
				fdsync_refused = true;
				list_add_tail(&req->node, &to_worker);
				nr_worker++;
			} else {
				req->res = ret;
				list_add_tail(&req->node, &refused);
			}
		}

		for (nr_back = 0; i < n; i++, nr_back++)
			list_add_tail(&((struct aio_req *)batch[i])->node, &back);
		/* Not in the kernel: they signal nothing, and nobody reaps them. */
		nr_unsig = aio_unsig(&refused) + aio_unsig(&to_worker) + aio_unsig(&back);

		pthread_mutex_lock(&ad->lock);
		ad->nr_nosig -= nr_unsig;
		ad->nr_submitted += submitted;
		ad->nr_submit_calls += calls;
		ad->inflight -= n - submitted;
		if (fdsync_refused)
			ad->no_fdsync = true;
		if (!list_empty(&refused)) {
			if (refused_out) {
				list_splice_tail_init(&refused, refused_out);
			} else {
				list_splice_tail_init(&refused, &ad->done);
				wake = true;
			}
		}
		if (nr_worker) {
			ad->nr_wq += nr_worker;
			list_splice_tail_init(&to_worker, &ad->wq);
			pthread_cond_signal(&ad->wq_cond);
		}
		if (eagain) {
			list_splice_init(&back, &ad->sq);
			ad->nr_sq += nr_back;
			ad->nr_eagain++;
			ad->backoff = true;
			if (!from_reaper)
				wake = true;
			break;
		}
	}
	ad->submitting = false;
	pthread_mutex_unlock(&ad->lock);
	if (wake)
		aio_wake(ad);
}

/* ---- in the submitter's thread ---- */

/* Who runs a batch of end_ios (aio_end()): the counter it goes to. */
enum aio_ender { AIO_END_CALLER, AIO_END_REAPER, AIO_END_WORKER };

static unsigned int aio_reap(struct aio_dev *ad, struct list_head *ends, long min_nr,
			     struct timespec *timeout);
static void aio_end(struct aio_dev *ad, struct list_head *ends, enum aio_ender who);

/*
 * preadv/pwritev all of @io, resuming after short transfers as the reaper
 * does: 0 or -errno.
 */
static int aio_sync_transfer(struct aio_dev *ad, struct blk_io *io)
{
	struct iovec *vec = NULL;
	uint64_t done = 0;
	int err = 0;

	while (done < io->len) {
		const struct iovec *iov;
		uint64_t want;
		ssize_t n;
		int cnt;

		err = aio_iov_rest(io, done, &vec, &iov, &cnt, &want);
		if (err)
			break;
		if (io->op == BLK_READ)
			n = preadv(ad->fd, iov, cnt, (off_t)(io->pos + done));
		else
			n = pwritev(ad->fd, iov, cnt, (off_t)(io->pos + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = -errno;
			break;
		}
		/* nothing, or not whole blocks: -EIO, as in aio_event() */
		if (n == 0 || (uint64_t)n > want || !blk_aligned((uint64_t)n, ad->geo.lbs)) {
			err = -EIO;
			break;
		}
		done += (uint64_t)n;
		if ((uint64_t)n < want)
			__atomic_add_fetch(&ad->nr_short, 1, __ATOMIC_RELAXED);
	}
	free(vec);
	io->done = err ? done : 0;
	return err;
}

static void aio_avg_feed(uint64_t *avg, uint64_t sample_ns);
static bool aio_plugged(struct aio_dev *ad);

/*
 * A READ or WRITE done in the submitter's thread with preadv/pwritev, one
 * syscall, end_io run before submit() returns. Two kinds (@idle):
 *  - false: the submitter sleeps until end_io anyway (BLK_IO_WAITED):
 *    while a queue_depth slot is free and none waits for one. That saves
 *    the hand-off through the reaper and back, about three thread wake-ups
 *    per I/O.
 *  - true: any READ/WRITE on an idle device (nothing in flight, nothing
 *    queued), fast (lat_ns within aio_fast_ns), that does its work inside
 *    the submitting syscall: at least aio_sync_inline/AIO_INLINE_ONE of
 *    its callers' recent waits found their I/O ended when io_submit()
 *    returned (zram, brd). There io_submit() then io_getevents() are two
 *    syscalls for what one preadv does, and aio_submit_wait()'s deadline,
 *    which lets a slow I/O's caller go, cannot fire. Whatever the waits
 *    (aio_waits_pay_locked()): the thread does not sleep, and the queue
 *    would do the same work in io_submit(), then wake the reaper. One such
 *    I/O in AIO_WAIT_PROBE goes by aio_submit_wait() instead, which keeps
 *    inline_avg current. Its time feeds lat_ns as an iocb's would.
 * true: done. false: nothing done, take the queue (or aio_submit_wait()).
 */
static bool aio_submit_sync(struct aio_dev *ad, struct blk_io *io, bool idle)
{
	LIST_HEAD(refused);
	struct aio_dev *plug = aio_plug;
	bool reaping = aio_reaping, drain, stop;
	uint64_t t0 = 0;
	int res;

	/* an end_io it runs (aio_reaping) does not wait again */
	if (idle && (aio_reaping ||
		     __atomic_load_n(&ad->lat_ns, __ATOMIC_RELAXED) > aio_fast_ns ||
		     __atomic_load_n(&ad->inline_avg, __ATOMIC_RELAXED) < aio_sync_inline))
		return false;
	pthread_mutex_lock(&ad->lock);
	if (ad->stopping || !list_empty(&ad->sq) || ad->inflight >= ad->qd ||
	    (idle && (ad->inflight || ++ad->sync_probes % AIO_WAIT_PROBE == 0))) {
		pthread_mutex_unlock(&ad->lock);
		return false;
	}
	ad->inflight++;
	ad->nr_pending++;
	pthread_mutex_unlock(&ad->lock);

	if (idle)
		t0 = blk_now_ns();
	res = aio_sync_transfer(ad, io);
	if (idle)
		aio_avg_feed(&ad->lat_ns, blk_now_ns() - t0);

	pthread_mutex_lock(&ad->lock);
	ad->inflight--;
	ad->nr_sync++;
	if (idle)
		ad->nr_idle_sync++;
	ad->nr_submitted++;
	ad->nr_completed++;
	if (res)
		ad->nr_errors++;
	/* the slot is free again: requests queued meanwhile need a submitter */
	drain = !list_empty(&ad->sq);
	pthread_mutex_unlock(&ad->lock);
	if (drain)
		aio_drain(ad, false, reaping ? NULL : &refused);

	/*
	 * As aio_end() runs one: a submit() from this end_io neither reaps nor
	 * does its I/O here (no nesting, however long a chain of end_ios that
	 * submit); one to this device is queued and goes down just below.
	 */
	aio_reaping = true;
	aio_plug = ad;
	io->end_io(io, res);
	aio_plug = plug;
	aio_reaping = reaping;

	pthread_mutex_lock(&ad->lock);
	ad->nr_pending--;
	drain = !list_empty(&ad->sq);
	stop = ad->stopping && !ad->nr_pending;
	pthread_mutex_unlock(&ad->lock);
	if (drain && !aio_plugged(ad))
		aio_drain(ad, false, reaping ? NULL : &refused);
	if (stop)
		aio_wake(ad);	/* close() waits in the reaper for nr_pending 0 */
	aio_end(ad, &refused, AIO_END_CALLER);
	return true;
}

uint64_t aio_wait_ns = AIO_WAIT_NS, aio_fast_ns = AIO_FAST_NS, aio_wait_fast_ns = AIO_WAIT_FAST_NS,
	 aio_sync_inline = AIO_SYNC_INLINE;

/* Feed @sample_ns to @avg's moving average (one eighth; racy between threads: it only steers). */
static void aio_avg_feed(uint64_t *avg, uint64_t sample_ns)
{
	uint64_t a = __atomic_load_n(avg, __ATOMIC_RELAXED);
	int64_t d = (int64_t)sample_ns - (int64_t)a;

	__atomic_store_n(avg, (uint64_t)((int64_t)a + d / 8), __ATOMIC_RELAXED);
}

/*
 * Under ad->lock, for an I/O on an idle device: whether its caller should
 * wait for it, as far as the waits seen so far say: yes while they were
 * fast; while they were slow, one in AIO_WAIT_PROBE (a probe that keeps
 * wait_ns current). Asked only when the device is idle, so a deep queue
 * never touches these counters.
 */
static bool aio_waits_pay_locked(struct aio_dev *ad)
{
	if (__atomic_load_n(&ad->wait_ns, __ATOMIC_RELAXED) <= aio_wait_fast_ns)
		return true;
	if (++ad->wait_skips % AIO_WAIT_PROBE == 0)
		return true;
	ad->nr_wait_skipped++;
	return false;
}

/*
 * The kernel's completion ring, mapped at the context's address (fs/aio.c:
 * struct aio_ring; libaio reads it the same way): whether it holds events.
 */
struct aio_ring_hdr {
	unsigned int id, nr, head, tail, magic;
};
#define AIO_RING_MAGIC	0xa10a10a1u

static bool aio_ring_nonempty(struct aio_dev *ad)
{
	const struct aio_ring_hdr *ring = (const struct aio_ring_hdr *)ad->ctx;

	if (!ring || ring->magic != AIO_RING_MAGIC)
		return false;
	return __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE) !=
	       __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
}

/*
 * A READ/WRITE (@req built) on an idle, fast device: submit it here without
 * the eventfd signal and wait for it, at most AIO_WAIT_NS, ending in this
 * thread whatever is reaped meanwhile. false: nothing done (the device is
 * busy, slow or stopping, or the kernel did not take it), take the queue.
 */
static bool aio_submit_wait(struct aio_dev *ad, struct aio_req *req)
{
	struct iocb *cb = &req->iocb;
	uint64_t deadline, waited;
	bool mine = false, wake = false;
	int ret;

	/* an end_io it runs (aio_reaping) does not wait again */
	if (aio_reaping || __atomic_load_n(&ad->lat_ns, __ATOMIC_RELAXED) > aio_fast_ns)
		return false;
	pthread_mutex_lock(&ad->lock);
	if (ad->stopping || !list_empty(&ad->sq) || ad->inflight || !aio_waits_pay_locked(ad)) {
		pthread_mutex_unlock(&ad->lock);
		return false;
	}
	ad->inflight++;
	ad->nr_pending++;
	req->quiet = true;
	req->waiter = &mine;
	pthread_mutex_unlock(&ad->lock);

	cb->u.c.flags &= ~AIO_IOCB_RESFD;
	req->t_submit = blk_now_ns();
	deadline = req->t_submit + aio_wait_ns;
	__atomic_fetch_add(&ad->kernel_seq, 1, __ATOMIC_RELEASE);
	do
		ret = io_submit(ad->ctx, 1, &cb);
	while (ret == -EINTR);
	if (ret != 1) {
		/* EAGAIN, or refused: the queue's path retries or reports it */
		pthread_mutex_lock(&ad->lock);
		ad->inflight--;
		ad->nr_pending--;
		req->quiet = false;
		req->waiter = NULL;
		pthread_mutex_unlock(&ad->lock);
		io_set_eventfd(cb, ad->efd);
		return false;
	}

	/*
	 * Had the device done it inside io_submit()? An event in the ring
	 * says so: nothing else is in flight on an idle device (but what
	 * raced in since). A look, no syscall; the event stays for the wait.
	 */
	aio_avg_feed(&ad->inline_avg, aio_ring_nonempty(ad) ? AIO_INLINE_ONE : 0);
	while (!__atomic_load_n(&mine, __ATOMIC_ACQUIRE)) {
		LIST_HEAD(ends);
		uint64_t now = blk_now_ns();
		struct timespec left;

		if (now >= deadline)
			break;
		left.tv_sec = (time_t)((deadline - now) / 1000000000u);
		left.tv_nsec = (long)((deadline - now) % 1000000000u);
		if (aio_reap(ad, &ends, 1, &left))
			aio_drain(ad, false, &ends);
		aio_end(ad, &ends, AIO_END_CALLER);	/* may end @req's io, and free it */
	}
	/*
	 * What this wait took, to its end or to giving up (@req may be gone).
	 * A fast wait while the average says slow (a probe, once the load has
	 * gone) puts the waits back at once: the average would take dozens of
	 * probes, 32 I/Os apart, to come down.
	 */
	waited = blk_now_ns() - (deadline - aio_wait_ns);
	if (waited <= aio_wait_fast_ns)
		__atomic_store_n(&ad->wait_ns, waited, __ATOMIC_RELAXED);
	else
		aio_avg_feed(&ad->wait_ns, waited);

	pthread_mutex_lock(&ad->lock);
	ad->nr_waited++;
	ad->nr_submitted++;	/* taken by the kernel, as aio_drain() counts */
	ad->nr_submit_calls++;
	if (!__atomic_load_n(&mine, __ATOMIC_ACQUIRE)) {
		/* Not yet: the reaper must look for its event, which signals nothing. */
		req->waiter = NULL;
		ad->nr_orphans++;
		ad->nr_wait_missed++;
		wake = true;
	}
	pthread_mutex_unlock(&ad->lock);
	if (wake)
		aio_wake(ad);
	return true;
}

/*
 * After a submit: end what has completed meanwhile, in this thread, without
 * waiting for anything (see "Which threads reap" above), and what the
 * kernel refused of this thread's submits (already on @ends). With a plug
 * in force, the drain waits for its flush.
 */
static void aio_caller_reap(struct aio_dev *ad, struct list_head *ends)
{
	/* Refill the kernel first: the device works while end_io runs. */
	if (aio_reap(ad, ends, 0, NULL) && !aio_plugged(ad))
		aio_drain(ad, false, ends);
	aio_end(ad, ends, AIO_END_CALLER);
}

/*
 * The flush of a plug that deferred a drain of @arg (the device): what is
 * queued goes down, in one io_submit() per AIO_BATCH, and the events there
 * are ended here, as after any submit; then the plug's hold on the device is
 * let go. Inside an end_io (a flush before a wait, from a submit() that an
 * end_io made) it only drains: reaping there would nest.
 */
static void aio_unplug(void *arg)
{
	struct aio_dev *ad = arg;
	LIST_HEAD(ends);

	pthread_mutex_lock(&ad->lock);
	ad->nr_plug_flushes++;
	pthread_mutex_unlock(&ad->lock);
	aio_drain(ad, false, aio_reaping ? NULL : &ends);
	if (!aio_reaping)
		aio_caller_reap(ad, &ends);
	/* the last touch of @ad by this plug */
	__atomic_sub_fetch(&ad->nr_callers, 1, __ATOMIC_RELEASE);
}

/*
 * true: this thread's plug will drain @ad at its flush (the first deferral
 * takes a hold on the device for it); false: no plug: drain now.
 */
static bool aio_plugged(struct aio_dev *ad)
{
	int ret = blk_plug_defer(aio_unplug, ad);

	if (ret == 1)
		__atomic_add_fetch(&ad->nr_callers, 1, __ATOMIC_ACQUIRE);
	return ret != 0;
}

static int aio_submit_one(struct aio_dev *ad, struct blk_io *io);

static int aio_submit(struct blk_backend *be, struct blk_io *io)
{
	struct aio_dev *ad = (struct aio_dev *)be;
	int ret;

	__atomic_add_fetch(&ad->nr_callers, 1, __ATOMIC_ACQUIRE);
	ret = aio_submit_one(ad, io);
	/* the last touch of @ad */
	__atomic_sub_fetch(&ad->nr_callers, 1, __ATOMIC_RELEASE);
	return ret;
}

static int aio_submit_one(struct aio_dev *ad, struct blk_io *io)
{
	LIST_HEAD(ends);
	struct aio_req *req;
	bool to_sq = false, plugged = true;
	int ret;

	if (io->op > BLK_WRITE_ZEROES)
		return -EOPNOTSUPP;
	if (io->op == BLK_READ || io->op == BLK_WRITE) {
		if ((io->flags & BLK_IO_WAITED) && aio_submit_sync(ad, io, false))
			return 0;
		/* a thread serving a batch does not wait for one of its I/Os */
		plugged = blk_plugged();
		if (!plugged && aio_submit_sync(ad, io, true))
			return 0;
	}

	pthread_mutex_lock(&ad->lock);
	req = list_first_entry_or_null(&ad->free, struct aio_req, node);
	if (req)
		list_del_init(&req->node);
	pthread_mutex_unlock(&ad->lock);
	if (!req) {
		/*
		 * More requests than ever before (2 x queue_depth were made at
		 * open): the free list grows to the peak, counted.
		 */
		req = malloc(sizeof(*req));
		if (!req)
			return -ENOMEM;
		__atomic_add_fetch(&ad->nr_req_grown, 1, __ATOMIC_RELAXED);
	}
	memset(req, 0, sizeof(*req));
	req->io = io;

	if (io->op == BLK_READ || io->op == BLK_WRITE) {
		ret = aio_prep_rw(ad, req);
		if (ret) {
			/* back to the free list: it only ever grows */
			free(req->vec);
			pthread_mutex_lock(&ad->lock);
			list_add(&req->node, &ad->free);
			pthread_mutex_unlock(&ad->lock);
			return ret;
		}
		if (!plugged && aio_submit_wait(ad, req))
			return 0;
	} else if (io->op == BLK_FLUSH) {
		aio_prep_fdsync(ad, req);
	}

	pthread_mutex_lock(&ad->lock);
	/*
	 * After close() began only an end_io may still submit (the reaper is
	 * there until nr_pending is 0); once it has left, nothing can.
	 */
	if (ad->stopping && !ad->nr_pending) {
		list_add(&req->node, &ad->free);
		pthread_mutex_unlock(&ad->lock);
		return -ESHUTDOWN;
	}
	ad->nr_pending++;
	if (io->op == BLK_READ || io->op == BLK_WRITE ||
	    (io->op == BLK_FLUSH && !ad->no_fdsync)) {
		list_add_tail(&req->node, &ad->sq);
		ad->nr_sq++;
		to_sq = true;
	} else {
		/*
		 * fdatasync(), fallocate(), ioctls: the worker's, which ends
		 * them. An empty DISCARD / WRITE_ZEROES too (it only ends it):
		 * not here, where a submit() from an end_io would nest.
		 */
		list_add_tail(&req->node, &ad->wq);
		ad->nr_wq++;
		pthread_cond_signal(&ad->wq_cond);
	}
	pthread_mutex_unlock(&ad->lock);

	/*
	 * From an end_io of this device: it goes down with the batch's others;
	 * with a plug in force, at its flush.
	 */
	if (to_sq && aio_plug != ad && !aio_plugged(ad))
		aio_drain(ad, false, aio_reaping ? NULL : &ends);
	if (!aio_reaping)
		aio_caller_reap(ad, &ends);
	return 0;
}

/* ---- the reaper ---- */

/*
 * What one event means for its request: ended (on @ends), to be continued
 * (on @again, iocb rebuilt), or a FLUSH for the worker (on @to_worker).
 */
static void aio_event(struct aio_dev *ad, const struct io_event *ev, uint64_t now,
		      struct list_head *ends, struct list_head *again, struct list_head *to_worker,
		      bool *fdsync_refused, unsigned int *nr_nosig)
{
	struct aio_req *req = (struct aio_req *)ev->obj;
	long res = (long)ev->res;

	if (req->nosig) {
		req->nosig = false;
		(*nr_nosig)++;
	}

	if (req->quiet) {
		/* Its caller may be waiting (aio_submit_wait()), or gave up on it. */
		pthread_mutex_lock(&ad->lock);
		if (req->waiter)
			__atomic_store_n(req->waiter, true, __ATOMIC_RELEASE);
		else
			ad->nr_orphans--;
		req->waiter = NULL;
		req->quiet = false;
		pthread_mutex_unlock(&ad->lock);
	}
	if (req->io->op == BLK_FLUSH) {
		/* Some kernels take the iocb and fail it instead of refusing it. */
		if (res == -EINVAL) {
			*fdsync_refused = true;
			list_add_tail(&req->node, to_worker);
			return;
		}
		req->res = res < 0 ? (int)res : 0;
		list_add_tail(&req->node, ends);
		return;
	}
	if (res < 0) {
		req->res = (int)res;
		list_add_tail(&req->node, ends);
		return;
	}
	/*
	 * A transfer of nothing would only repeat; one that is not a whole
	 * number of blocks cannot be resumed with O_DIRECT: both are -EIO,
	 * never retried in silence.
	 */
	if (res == 0 || (uint64_t)res > req->cur || !blk_aligned(res, ad->geo.lbs)) {
		req->res = -EIO;
		list_add_tail(&req->node, ends);
		return;
	}
	if (now > req->t_submit)
		aio_avg_feed(&ad->lat_ns, now - req->t_submit);	/* it only steers aio_submit_wait() */
	req->done += res;
	if (req->done == req->io->len) {
		req->res = 0;
		list_add_tail(&req->node, ends);
		return;
	}
	if ((uint64_t)res < req->cur)
		__atomic_add_fetch(&ad->nr_short, 1, __ATOMIC_RELAXED);
	req->res = aio_prep_rw(ad, req);
	list_add_tail(&req->node, req->res ? ends : again);
}

/*
 * Take the events there are (with @min_nr 1, wait for one, at most
 * @timeout): ended requests onto @ends, continued ones back on the sq.
 * The number of events: when not 0, slots are free again and the sq may
 * hold continued requests, so the caller drains.
 */
static unsigned int aio_reap(struct aio_dev *ad, struct list_head *ends, long min_nr,
			     struct timespec *timeout)
{
	LIST_HEAD(again);
	LIST_HEAD(to_worker);
	struct io_event ev[AIO_EVENTS];
	struct timespec zero = { 0, 0 };
	bool fdsync_refused = false;
	unsigned int reaped = 0, nr_again = 0, nr_worker = 0, nr_nosig = 0;
	struct list_head *pos;
	int n, i;

	if (!timeout)
		timeout = &zero;
	do {
		n = io_getevents(ad->ctx, min_nr, AIO_EVENTS, ev, timeout);
		/* after the first call, only what is there: a signal ends the wait */
		min_nr = 0;
		timeout = &zero;
		if (n == -EINTR)
			continue;
		if (n < 0)
			break;		/* EFAULT/EINVAL: cannot happen with a live ctx */
		if (n) {
			uint64_t now = blk_now_ns();

			__atomic_load_n(&ad->kernel_seq, __ATOMIC_ACQUIRE);
			for (i = 0; i < n; i++)
				aio_event(ad, &ev[i], now, ends, &again, &to_worker,
					  &fdsync_refused, &nr_nosig);
		}
		reaped += n;
	} while (n == AIO_EVENTS || n == -EINTR);
	if (!reaped)
		return 0;	/* the common case of a submitter's look: no lock */

	list_for_each(pos, &again)
		nr_again++;
	list_for_each(pos, &to_worker)
		nr_worker++;
	pthread_mutex_lock(&ad->lock);
	ad->inflight -= reaped;
	ad->nr_nosig -= nr_nosig;
	/* Resumed transfers go first: they are the oldest. */
	list_splice_init(&again, &ad->sq);
	ad->nr_sq += nr_again;
	if (fdsync_refused)
		ad->no_fdsync = true;
	if (nr_worker) {
		list_splice_tail_init(&to_worker, &ad->wq);
		ad->nr_wq += nr_worker;
		pthread_cond_signal(&ad->wq_cond);
	}
	pthread_mutex_unlock(&ad->lock);
	return reaped;
}

/*
 * End every request on @ends, then give them back to the free list. The
 * counters move first, so a caller woken by its end_io sees itself counted;
 * nr_pending only after, so close() cannot finish while an end_io runs.
 * The end_ios run with aio_reaping set (a submit() from one of them does
 * not reap) and this device plugged (its submits are queued, then drained
 * here in one go). What the kernel refuses of that drain is ended in the
 * next round of the loop, not by a call from here: however many rounds,
 * the stack does not grow.
 */
static void aio_end(struct aio_dev *ad, struct list_head *ends, enum aio_ender who)
{
	struct aio_dev *plug = aio_plug;
	bool reaping = aio_reaping, drain, stop;
	struct aio_req *req;

	while (!list_empty(ends)) {
		uint64_t nr = 0, nr_err = 0;

		list_for_each_entry(req, ends, node) {
			nr++;
			if (req->res)
				nr_err++;
		}
		pthread_mutex_lock(&ad->lock);
		ad->nr_completed += nr;
		ad->nr_errors += nr_err;
		if (who == AIO_END_REAPER)
			ad->nr_end_reaper += nr;
		else if (who == AIO_END_WORKER)
			ad->nr_end_worker += nr;
		else
			ad->nr_end_caller += nr;
		pthread_mutex_unlock(&ad->lock);

		aio_reaping = true;
		aio_plug = ad;
		list_for_each_entry(req, ends, node) {
			struct blk_io *io = req->io;

			free(req->vec);
			req->vec = NULL;
			req->io = NULL;
			/* a partial completion: what was transferred before the failure */
			io->done = req->res ? req->done : 0;
			/* May free @io, or submit(): no lock is held here. */
			io->end_io(io, req->res);
		}
		aio_plug = plug;
		aio_reaping = reaping;

		pthread_mutex_lock(&ad->lock);
		list_splice_init(ends, &ad->free);
		ad->nr_pending -= nr;
		drain = !list_empty(&ad->sq);
		stop = who != AIO_END_REAPER && ad->stopping && !ad->nr_pending;
		pthread_mutex_unlock(&ad->lock);
		if (drain && (who != AIO_END_CALLER || !aio_plugged(ad)))
			aio_drain(ad, who == AIO_END_REAPER, ends);
		if (stop)
			aio_wake(ad);	/* close() waits in the reaper for nr_pending 0 */
	}
}

static void *aio_reaper_fn(void *arg)
{
	struct aio_dev *ad = arg;
	struct pollfd pfd = { .fd = ad->efd, .events = POLLIN };
	bool backoff, refused;
	unsigned int quiet;

	aio_reaping = true;	/* an end_io's submit() here neither reaps nor waits */
	for (;;) {
		LIST_HEAD(ends);
		uint64_t cnt;
		bool stop;

		/*
		 * Asleep from this lock hold on: iocbs batched after it signal
		 * the eventfd; those batched before are counted here.
		 */
		pthread_mutex_lock(&ad->lock);
		backoff = ad->backoff;
		quiet = ad->nr_orphans + ad->nr_nosig;
		/* refused iocbs wait on the done list: no sleep, no tick */
		refused = !list_empty(&ad->done);
		ad->reaper_asleep = !quiet && !refused;
		pthread_mutex_unlock(&ad->lock);

		if (refused) {
			/* take them (and what the kernel has) below, at once */
		} else if (quiet) {
			/*
			 * Iocbs that signal nothing (orphans, and those batched
			 * while this thread was awake): wait for events
			 * themselves, a tick (or the EAGAIN retry) at a time,
			 * then see what the eventfd says. Submitters reap them
			 * too; whoever comes first ends them.
			 */
			struct timespec tick = {
				0, backoff ? AIO_RETRY_MS * 1000000L : AIO_ORPHAN_TICK_NS
			};

			aio_reap(ad, &ends, 1, &tick);
			if (poll(&pfd, 1, 0) > 0)
				while (read(ad->efd, &cnt, sizeof(cnt)) < 0 && errno == EINTR)
					;
		} else if (poll(&pfd, 1, backoff ? AIO_RETRY_MS : -1) > 0) {
			while (read(ad->efd, &cnt, sizeof(cnt)) < 0 && errno == EINTR)
				;
		}

		pthread_mutex_lock(&ad->lock);
		ad->reaper_asleep = false;
		list_splice_tail_init(&ad->done, &ends);
		ad->backoff = false;
		pthread_mutex_unlock(&ad->lock);

		aio_reap(ad, &ends, 0, NULL);
		/* Refill the kernel first: the device works while end_io runs. */
		aio_drain(ad, true, &ends);
		aio_end(ad, &ends, AIO_END_REAPER);

		pthread_mutex_lock(&ad->lock);
		stop = ad->stopping && !ad->nr_pending;
		pthread_mutex_unlock(&ad->lock);
		if (stop)
			return NULL;
	}
}

/* ---- the worker: what has no asynchronous form ---- */

/* The error says the call cannot do this here, not that the storage failed. */
static bool aio_unsupported(int err)
{
	return err == EOPNOTSUPP || err == EINVAL || err == ENOTTY || err == ENOSYS;
}

/* O_DIRECT writes from a buffer of zeros: what works on anything writable. */
static int aio_write_zeroes(struct aio_dev *ad, uint64_t pos, uint64_t len)
{
	if (!ad->zero_buf) {
		size_t align = ad->geo.dma_align > 4096 ? ad->geo.dma_align : 4096;

		if (posix_memalign(&ad->zero_buf, align, AIO_ZERO_BUF))
			return -ENOMEM;
		memset(ad->zero_buf, 0, AIO_ZERO_BUF);
	}
	pthread_mutex_lock(&ad->lock);
	ad->nr_zero_writes++;
	pthread_mutex_unlock(&ad->lock);
	while (len) {
		size_t n = len < AIO_ZERO_BUF ? len : AIO_ZERO_BUF;
		ssize_t r = pwrite(ad->fd, ad->zero_buf, n, pos);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0 || !blk_aligned(r, ad->geo.lbs))
			return -EIO;
		pos += r;
		len -= r;
	}
	return 0;
}

/*
 * DISCARD and WRITE_ZEROES. Both leave zeros (backend.h); DISCARD may also
 * give the space back. On a block device BLKDISCARD would not do: a device
 * may return anything from discarded blocks. fallocate(PUNCH_HOLE) on a
 * block device is the kernel's zeroing discard (write-zeroes with unmap,
 * failing rather than writing), and BLKZEROOUT zeroes keeping the blocks
 * mapped, writing zero pages itself where the device has no command for it.
 */
static int aio_zero_range(struct aio_dev *ad, enum blk_op op, uint64_t pos, uint64_t len)
{
	int err;

	if (op == BLK_DISCARD && !ad->no_punch) {
		if (!fallocate(ad->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			       (off_t)pos, (off_t)len))
			return 0;
		err = errno;
		if (!aio_unsupported(err))
			return -err;
		ad->no_punch = true;
	}
	if (ad->bdev && !ad->no_zeroout) {
		uint64_t range[2] = { pos, len };

		if (!ioctl(ad->fd, BLKZEROOUT, range))
			return 0;
		err = errno;
		if (!aio_unsupported(err))
			return -err;
		ad->no_zeroout = true;
	}
	if (!ad->bdev && !ad->no_zero_range) {
		if (!fallocate(ad->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
			       (off_t)pos, (off_t)len))
			return 0;
		err = errno;
		if (!aio_unsupported(err))
			return -err;
		ad->no_zero_range = true;
	}
	return aio_write_zeroes(ad, pos, len);
}

static int aio_sync_op(struct aio_dev *ad, struct blk_io *io)
{
	if (io->op != BLK_FLUSH && !io->len)
		return 0;	/* an empty DISCARD / WRITE_ZEROES: nothing to do */
	switch (io->op) {
	case BLK_FLUSH:
		/* Covers every write that completed before: all that FLUSH promises. */
		return fdatasync(ad->fd) ? -errno : 0;
	case BLK_DISCARD:
	case BLK_WRITE_ZEROES:
		return aio_zero_range(ad, io->op, io->pos, io->len);
	default:
		return -EOPNOTSUPP;
	}
}

/*
 * The worker ends what it did itself, once the syscall has returned: the
 * result is on the storage, and a hand-off to the reaper would cost a
 * wake-up, or at depth up to a tick (AIO_ORPHAN_TICK_NS) of its wait. Its
 * end_ios run as the reaper's do (aio_reaping: a submit() from one neither
 * reaps nor waits; to this device it is queued and drained after).
 */
static void *aio_worker_fn(void *arg)
{
	struct aio_dev *ad = arg;

	aio_reaping = true;
	pthread_mutex_lock(&ad->lock);
	for (;;) {
		struct aio_req *req = list_first_entry_or_null(&ad->wq, struct aio_req, node);
		LIST_HEAD(ends);

		if (!req) {
			if (ad->worker_stop)
				break;
			pthread_cond_wait(&ad->wq_cond, &ad->lock);
			continue;
		}
		list_del_init(&req->node);
		pthread_mutex_unlock(&ad->lock);
		req->res = aio_sync_op(ad, req->io);
		pthread_mutex_lock(&ad->lock);
		ad->nr_wq--;
		pthread_mutex_unlock(&ad->lock);
		list_add_tail(&req->node, &ends);
		aio_end(ad, &ends, AIO_END_WORKER);
		pthread_mutex_lock(&ad->lock);
	}
	pthread_mutex_unlock(&ad->lock);
	return NULL;
}

/* ---- open: config, the storage, its geometry ---- */

/*
 * The config's keys, read by bk_parse() in this order (the order open()
 * read them by hand: a config with two bad values names the same one).
 * path is checked after all four are read (missing, empty), so each key
 * is marked used whatever fails.
 */
struct aio_conf {
	const char *path;
	unsigned int qd;
	bool create, exclusive;
};

#define AIO_PATH_FORMS	"a block device or an image file"

#define AIO_KNOBS(K)										\
	K(path,        text, path,      0, 0, 0, AIO_PATH_FORMS,				\
	  "the storage (relative to the config's directory; required)")			\
	K(queue_depth, uint, qd,        1, AIO_MAX_QD, AIO_DEF_QD, "I/Os",			\
	  "I/Os in flight (io_setup()'s depth)")						\
	K(create,      bool, create,    0, 1, 0, "yes/no",					\
	  "create an image file of the device's size if it is missing")			\
	K(exclusive,   bool, exclusive, 0, 1, 1, "yes/no",					\
	  "open a block device O_EXCL: a mounted or claimed disk is refused")

BK_BACKEND_DEFINE(aio, struct aio_conf, AIO_KNOBS);

/* @path relative to the directory of the config file, as a user reads it. */
static int aio_resolve_path(struct blk_params *p, const char *path, char *out, size_t len)
{
	const char *slash = p->file ? strrchr(p->file, '/') : NULL;
	int n;

	if (!*path)
		return blk_param_error(p, "path", "is empty (" AIO_PATH_FORMS ")");
	if (path[0] == '/' || !slash)
		n = snprintf(out, len, "%s", path);
	else
		n = snprintf(out, len, "%.*s/%s", (int)(slash - p->file), p->file, path);
	if (n < 0 || (size_t)n >= len)
		return blk_param_error(p, "path", "%s is too long", path);
	return 0;
}

/* A number from sysfs; 0 when it is not there. */
static uint64_t aio_sysfs_u64(const char *fmt, unsigned int maj, unsigned int min)
{
	char name[128], buf[32];
	uint64_t v = 0;
	ssize_t n;
	int fd;

	snprintf(name, sizeof(name), fmt, maj, min);
	fd = open(name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	v = strtoull(buf, NULL, 10);
	return v;
}

static int aio_bdev_geometry(struct aio_dev *ad, struct blk_params *p)
{
	const struct blk_geometry *cfg = &p->geo;
	struct blk_geometry *g = &ad->geo;
	unsigned int pbs = 0, io_min = 0, io_opt = 0;
	unsigned short max_sectors = 0;
	uint32_t dev_max;
	uint64_t size;
	int lbs;

	if (ioctl(ad->fd, BLKGETSIZE64, &size) || ioctl(ad->fd, BLKSSZGET, &lbs))
		return blk_param_error(p, "path", "%s: cannot read the device's size and block size: %s",
				       ad->path, strerror(errno));
	if (ioctl(ad->fd, BLKPBSZGET, &pbs) || !pbs)
		pbs = lbs;
	if (ioctl(ad->fd, BLKIOMIN, &io_min))
		io_min = 0;
	if (ioctl(ad->fd, BLKIOOPT, &io_opt))
		io_opt = 0;
	/* queue/max_sectors_kb in 512-byte sectors (capped at 65535 by the ioctl). */
	if (ioctl(ad->fd, BLKSECTGET, &max_sectors))
		max_sectors = 0;

	if (lbs < 512 || lbs > 65536 || !blk_is_pow2(lbs))
		return blk_param_error(p, "path", "%s has logical blocks of %d bytes (allowed: 512 ... 64K)",
				       ad->path, lbs);
	if (pbs < (unsigned int)lbs || !blk_is_pow2(pbs))
		pbs = lbs;
	if (!size)
		return blk_param_error(p, "path", "%s is empty (0 bytes)", ad->path);

	if (cfg->size && cfg->size != size)
		return blk_param_error(p, "size", "config says %llu but %s has %llu",
				       (unsigned long long)cfg->size, ad->path,
				       (unsigned long long)size);
	if (be_geo_given(p, "logical_block_size", cfg->lbs) && cfg->lbs != (uint32_t)lbs)
		return blk_param_error(p, "logical_block_size", "config says %u but %s has %d",
				       cfg->lbs, ad->path, lbs);
	if (be_geo_given(p, "physical_block_size", cfg->pbs) && cfg->pbs != pbs)
		return blk_param_error(p, "physical_block_size", "config says %u but %s has %u",
				       cfg->pbs, ad->path, pbs);

	g->size = size;
	g->lbs = lbs;
	g->pbs = pbs;
	g->dma_align = lbs;

	/*
	 * max_io: what the device takes in one request, at most 1M unless the
	 * config asks for more; a config may ask for less. Above the device's
	 * limit the kernel would split each I/O again: refused with both numbers.
	 */
	dev_max = max_sectors ? (uint32_t)max_sectors << 9 : AIO_DEF_MAX_IO;
	dev_max -= dev_max % pbs;
	if (dev_max < pbs)
		dev_max = pbs;
	if (be_geo_given(p, "max_io", cfg->max_io)) {
		if (cfg->max_io > dev_max)
			return blk_param_error(p, "max_io",
				"config says %u but %s takes at most %u per I/O (max_sectors_kb)",
				cfg->max_io, ad->path, dev_max);
		if (cfg->max_io % pbs)
			return blk_param_error(p, "max_io",
				"%u is not a multiple of the physical block size of %s (%u)",
				cfg->max_io, ad->path, pbs);
		g->max_io = cfg->max_io;
	} else {
		g->max_io = dev_max < AIO_DEF_MAX_IO ? dev_max : AIO_DEF_MAX_IO;
	}

	/* Hints: the config's word where given, else the device's. */
	if (be_geo_given(p, "io_min", cfg->io_min))
		g->io_min = cfg->io_min;
	else
		g->io_min = io_min >= (unsigned int)lbs && !(io_min % lbs) ? io_min : pbs;
	if (be_geo_given(p, "io_opt", cfg->io_opt))
		g->io_opt = cfg->io_opt;
	else
		g->io_opt = io_opt && !(io_opt % lbs) ? io_opt : g->max_io;
	return 0;
}

/*
 * The alignment O_DIRECT needs on an image file: what the filesystem says
 * (statx DIOALIGN, Linux 6.1), else the logical block size of the device
 * under it, else 512. Returns 0 when the filesystem says it cannot.
 */
static uint32_t aio_file_dio_align(struct aio_dev *ad, const struct stat *st)
{
	uint64_t v;

#ifdef STATX_DIOALIGN
	struct statx sx;

	if (!statx(ad->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) &&
	    (sx.stx_mask & STATX_DIOALIGN)) {
		uint32_t a = sx.stx_dio_offset_align;

		if (!a)
			return 0;
		if (sx.stx_dio_mem_align > a)
			a = sx.stx_dio_mem_align;
		return a > AIO_MIN_ALIGN ? a : AIO_MIN_ALIGN;
	}
#endif
	v = aio_sysfs_u64("/sys/dev/block/%u:%u/queue/logical_block_size",
			  major(st->st_dev), minor(st->st_dev));
	if (!v)	/* a partition: its queue is its disk's */
		v = aio_sysfs_u64("/sys/dev/block/%u:%u/../queue/logical_block_size",
				  major(st->st_dev), minor(st->st_dev));
	if (!blk_is_pow2(v) || v < AIO_MIN_ALIGN || v > 65536)
		v = AIO_MIN_ALIGN;
	return (uint32_t)v;
}

static int aio_file_geometry(struct aio_dev *ad, struct blk_params *p, const struct stat *st)
{
	struct blk_params q = *p;	/* a copy: a size from the file is not the config's */
	uint32_t align;
	void *buf;
	ssize_t r;
	int ret;

	if (!q.geo.size) {
		uint32_t lbs = q.geo.lbs ? q.geo.lbs : 512;

		q.geo.size = (uint64_t)st->st_size / lbs * lbs;
		if (!q.geo.size)
			return blk_param_error(p, "size",
				"not given, and %s holds %lld bytes, less than one logical block (%u)",
				ad->path, (long long)st->st_size, lbs);
	}
	ret = be_geo_from_params(&q, "aio", &ad->geo);
	if (ret)
		return ret;

	if ((uint64_t)st->st_size < ad->geo.size && ftruncate(ad->fd, (off_t)ad->geo.size))
		return blk_param_error(p, "size", "cannot extend %s from %lld to %llu bytes: %s",
				       ad->path, (long long)st->st_size,
				       (unsigned long long)ad->geo.size, strerror(errno));

	align = aio_file_dio_align(ad, st);
	if (!align)
		return blk_param_error(p, "path",
			"the filesystem holding %s cannot do O_DIRECT on it (statx reports no direct I/O alignment)",
			ad->path);
	if (align > ad->geo.lbs)
		return blk_param_error(p, "logical_block_size",
			"%u is too small for %s: its filesystem does O_DIRECT only in multiples of %u bytes (set logical_block_size = %u, or keep the image on another filesystem)",
			ad->geo.lbs, ad->path, align, align);
	ad->geo.dma_align = align;

	/* The proof: one logical block read with O_DIRECT into aligned memory. */
	if (posix_memalign(&buf, align > 4096 ? align : 4096, ad->geo.lbs))
		return blk_param_error(p, NULL, "out of memory");
	do {
		r = pread(ad->fd, buf, ad->geo.lbs, 0);
	} while (r < 0 && errno == EINTR);
	ret = errno;
	free(buf);
	if (r < 0 && ret == EINVAL)
		return blk_param_error(p, "path",
			"the filesystem holding %s refuses O_DIRECT reads of %u bytes (%s); it cannot do O_DIRECT at this logical_block_size (tmpfs could not at all before Linux 6.6): put the image on ext4, xfs or btrfs",
			ad->path, ad->geo.lbs, strerror(ret));
	if (r < 0)
		return blk_param_error(p, "path", "%s: O_DIRECT read of the first block: %s",
				       ad->path, strerror(ret));
	if (r != (ssize_t)ad->geo.lbs)
		return blk_param_error(p, "path", "%s: O_DIRECT read of the first block returned %zd of %u bytes",
				       ad->path, r, ad->geo.lbs);
	return 0;
}

/* How long an exclusive open waits for a block device's last holder to let go. */
#define EXCL_WAIT_MS 3000
/*
 * The pause between two tries of that open. Nothing tells us when the claim
 * goes (no event to wait on: the dead holder's last I/O completes, then a
 * kernel worker runs its deferred close), so we poll. 50 ms is short beside
 * a mount's own start-up, so a restart gets its device at most 50 ms after
 * it is free, and long enough that the whole EXCL_WAIT_MS is some 60 open()
 * calls, not a busy loop against the holder. It was chosen so, not
 * measured; only this open, at set-up, waits on it, never the I/O path.
 */
#define EXCL_POLL_MS 50

/* Open @ad->path, creating an image file if @create; reports errors itself. */
static int aio_open_path(struct aio_dev *ad, struct blk_params *p, bool create,
			 bool exclusive, bool *created)
{
	/* a read-only mount reads a read-only image or write-protected disk too */
	int flags = (p->read_only ? O_RDONLY : O_RDWR) | O_DIRECT | O_CLOEXEC;
	struct stat st;
	int err;

	*created = false;
	if (stat(ad->path, &st)) {
		err = errno;
		if (err == ENOENT && create && p->read_only)
			return blk_param_error(p, "path", "%s: %s (create = yes, but the mount is "
					       "read-only: nothing is created)", ad->path, strerror(err));
		if (err != ENOENT || !create)
			return blk_param_error(p, "path", "%s: %s%s", ad->path, strerror(err),
					       err == ENOENT ? " (create = yes makes an image file)" : "");
		if (!p->geo.size)
			return blk_param_error(p, "size", "needed to create %s (create = yes)",
					       ad->path);
		flags |= O_CREAT | O_EXCL;
	} else if (S_ISBLK(st.st_mode)) {
		if (exclusive)
			flags |= O_EXCL;
	} else if (!S_ISREG(st.st_mode)) {
		return blk_param_error(p, "path", "%s is not a block device or a regular file",
				       ad->path);
	}

	/*
	 * A claim on a block device outlives its holder by a moment: after a
	 * kill -9, the O_DIRECT I/O the dead process left in flight keeps its
	 * file open until it completes, and the last close is deferred to a
	 * kernel worker. So EBUSY is retried for up to EXCL_WAIT_MS before it
	 * means "in use": a daemon restarted after a crash gets its device.
	 */
	for (int waited = 0;; waited += EXCL_POLL_MS) {
		ad->fd = open(ad->path, flags, 0600);
		if (ad->fd >= 0 || errno != EBUSY || !(flags & O_EXCL) ||
		    (flags & O_CREAT) || waited >= EXCL_WAIT_MS)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = EXCL_POLL_MS * 1000000L }, NULL);
	}
	if (ad->fd >= 0) {
		*created = flags & O_CREAT;
		/*
		 * As root, an image file anyone else can change is refused:
		 * whoever writes it writes the device under root's filesystem.
		 * Checked on the open file, not the name, so it cannot be swapped.
		 */
		if (!fstat(ad->fd, &st) && S_ISREG(st.st_mode) && geteuid() == 0 &&
		    ((st.st_mode & 022) || st.st_uid != 0)) {
			close(ad->fd);
			ad->fd = -1;
			return blk_param_error(p, "path",
				"%s is writable by users other than root (mode %04o, owner uid %u); refused when running as root (chmod go-w, chown root)",
				ad->path, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid);
		}
		return 0;
	}
	err = errno;
	/* Old tmpfs makes the file, then fails the O_DIRECT open: take it back. */
	if ((flags & O_CREAT) && err != EEXIST && !stat(ad->path, &st) &&
	    S_ISREG(st.st_mode) && !st.st_size)
		unlink(ad->path);
	if (err == EBUSY && (flags & O_EXCL) && !(flags & O_CREAT))
		return blk_param_error(p, "path",
			"%s is in use (mounted, or held by a filesystem, RAID, LVM or another program; still after %d s); refused as mkfs would (exclusive = no overrides this)",
			ad->path, EXCL_WAIT_MS / 1000);
	if (err == EINVAL)
		return blk_param_error(p, "path",
			"%s: open with O_DIRECT: %s (its filesystem cannot do O_DIRECT; tmpfs could not before Linux 6.6)",
			ad->path, strerror(err));
	return blk_param_error(p, "path", "%s: %s", ad->path, strerror(err));
}

/* The reaper and worker take no signals: the daemon's handlers run elsewhere. */
static int aio_start_threads(struct aio_dev *ad)
{
	sigset_t all, old;
	int ret;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&ad->reaper, NULL, aio_reaper_fn, ad);
	if (!ret) {
		ret = pthread_create(&ad->worker, NULL, aio_worker_fn, ad);
		if (ret) {
			pthread_mutex_lock(&ad->lock);
			ad->stopping = true;
			pthread_mutex_unlock(&ad->lock);
			aio_wake(ad);
			pthread_join(ad->reaper, NULL);
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret)
		return -ret;
	pthread_setname_np(ad->reaper, "blkfs-aio-reap");
	pthread_setname_np(ad->worker, "blkfs-aio-work");
	return 0;
}

static void aio_free_reqs(struct aio_dev *ad)
{
	struct list_head *pos, *n;

	list_for_each_safe(pos, n, &ad->free)
		free(list_entry(pos, struct aio_req, node));
	list_init(&ad->free);
}

static struct blk_backend *aio_open(struct blk_params *p, struct blk_backend *next)
{
	bool create, exclusive, created = false;
	struct aio_conf conf;
	const char *path;
	struct aio_dev *ad;
	struct stat st;
	unsigned int i;
	int ret;

	(void)next;
	ad = calloc(1, sizeof(*ad));
	if (!ad) {
		blk_param_error(p, NULL, "out of memory");
		return ERR_PTR(-ENOMEM);
	}
	ad->fd = -1;
	ad->efd = -1;
	list_init(&ad->sq);
	list_init(&ad->wq);
	list_init(&ad->done);
	list_init(&ad->free);

	/* Every key first, so each is marked used whatever fails later. */
	ret = bk_parse(&bk_table, p, &conf);
	if (ret)
		goto out_free;
	path = conf.path;
	ad->qd = conf.qd;
	create = conf.create;
	exclusive = conf.exclusive;
	if (!path) {
		ret = blk_param_error(p, "path", "missing (required: " AIO_PATH_FORMS ")");
		goto out_free;
	}
	ret = aio_resolve_path(p, path, ad->path, sizeof(ad->path));
	if (ret)
		goto out_free;
	/* Refuse a bad config before a file is created for it. */
	if (create && p->geo.size) {
		struct blk_geometry geo;

		ret = be_geo_from_params(p, "aio", &geo);
		if (ret)
			goto out_free;
	}

	ret = aio_open_path(ad, p, create, exclusive, &created);
	if (ret)
		goto out_free;
	ad->read_only = p->read_only;
	if (fstat(ad->fd, &st)) {
		ret = -errno;
		blk_param_error(p, "path", "%s: %s", ad->path, strerror(-ret));
		goto out_close;
	}
	ad->bdev = S_ISBLK(st.st_mode);
	if (ad->bdev)
		ret = aio_bdev_geometry(ad, p);
	else
		ret = aio_file_geometry(ad, p, &st);
	if (ret)
		goto out_close;

	ret = -pthread_mutex_init(&ad->lock, NULL);
	if (ret) {
		blk_param_error(p, NULL, "cannot set up the aio backend: %s", strerror(-ret));
		goto out_close;
	}
	ret = -pthread_cond_init(&ad->wq_cond, NULL);
	if (ret) {
		blk_param_error(p, NULL, "cannot set up the aio backend: %s", strerror(-ret));
		goto out_destroy_lock;
	}
	/*
	 * 2 x queue_depth requests up front, touched (the I/O path must not
	 * fault memory in: under memory pressure that can wait for writeback
	 * only this device would finish): queue_depth in the kernel and as
	 * many waiting for a slot. The free list grows only past that.
	 */
	for (i = 0; i < 2 * ad->qd; i++) {
		struct aio_req *req = malloc(sizeof(*req));

		if (req)
			memset(req, 0, sizeof(*req));
		if (!req) {
			ret = -ENOMEM;
			blk_param_error(p, NULL, "out of memory");
			goto out_free_reqs;
		}
		list_add(&req->node, &ad->free);
	}
	ad->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ad->efd < 0) {
		ret = -errno;
		blk_param_error(p, NULL, "eventfd: %s", strerror(-ret));
		goto out_free_reqs;
	}
	ret = io_setup((int)ad->qd, &ad->ctx);
	if (ret) {
		blk_param_error(p, "queue_depth",
			"io_setup(%u): %s%s", ad->qd, strerror(-ret),
			ret == -EAGAIN ? " (raise /proc/sys/fs/aio-max-nr, or lower queue_depth)" : "");
		goto out_close_efd;
	}
	ret = aio_start_threads(ad);
	if (ret) {
		blk_param_error(p, NULL, "cannot start the aio threads: %s", strerror(-ret));
		goto out_destroy_ctx;
	}
	ad->be.ops = &aio_backend_ops;
	return &ad->be;

out_destroy_ctx:
	io_destroy(ad->ctx);
out_close_efd:
	close(ad->efd);
out_free_reqs:
	aio_free_reqs(ad);
	pthread_cond_destroy(&ad->wq_cond);
out_destroy_lock:
	pthread_mutex_destroy(&ad->lock);
out_close:
	close(ad->fd);
	if (created)
		unlink(ad->path);
out_free:
	free(ad);
	return ERR_PTR(ret);
}

/* ---- close, geometry, stat ---- */

static void aio_close(struct blk_backend *be)
{
	struct aio_dev *ad = (struct aio_dev *)be;

	/* The reaper leaves once every request submitted so far has ended. */
	pthread_mutex_lock(&ad->lock);
	ad->stopping = true;
	pthread_mutex_unlock(&ad->lock);
	aio_wake(ad);
	pthread_join(ad->reaper, NULL);

	pthread_mutex_lock(&ad->lock);
	ad->worker_stop = true;
	pthread_cond_signal(&ad->wq_cond);
	pthread_mutex_unlock(&ad->lock);
	pthread_join(ad->worker, NULL);

	/* A submit() that has only its look for others' events left (nr_callers). */
	while (__atomic_load_n(&ad->nr_callers, __ATOMIC_ACQUIRE))
		sched_yield();

	assert(!ad->inflight && list_empty(&ad->sq) && list_empty(&ad->wq) && list_empty(&ad->done));
	io_destroy(ad->ctx);
	close(ad->efd);
	close(ad->fd);
	aio_free_reqs(ad);
	free(ad->zero_buf);
	pthread_cond_destroy(&ad->wq_cond);
	pthread_mutex_destroy(&ad->lock);
	free(ad);
}

/*
 * blk_resize(): an image file grows to @size (extended with a hole: the new
 * space reads as zeros); with 0, the device takes the size the file or the
 * block device has now (after lvextend, or a file grown by someone else).
 * A block device cannot be made larger than it is (-ENOSPC). Shrinking is
 * refused (-EOPNOTSUPP): the storage's data past the end would stay there
 * and come back with a later grow; a file is not truncated behind its
 * owner's back.
 */
static int aio_resize(struct blk_backend *be, uint64_t *size)
{
	struct aio_dev *ad = (struct aio_dev *)be;
	uint64_t now, want = *size;
	struct stat st;

	if (fstat(ad->fd, &st)) {
		int err = errno;

		blk_err("aio: %s: cannot find its size: %s", ad->path, strerror(err));
		return -err;
	}
	if (ad->bdev) {
		if (ioctl(ad->fd, BLKGETSIZE64, &now)) {
			int err = errno;

			blk_err("aio: %s: cannot read the device's size: %s", ad->path, strerror(err));
			return -err;
		}
	} else {
		now = (uint64_t)st.st_size;
	}
	now = now / ad->geo.lbs * ad->geo.lbs;
	if (!want)
		want = now;
	if (want % ad->geo.lbs)
		return -EINVAL;
	if (want < ad->geo.size)
		return -EOPNOTSUPP;
	if (want > now) {
		if (ad->bdev)
			return -ENOSPC;
		if (ad->read_only)
			return -EROFS;
		if (ftruncate(ad->fd, (off_t)want)) {
			int err = errno;

			blk_err("aio: %s: cannot extend it to %llu bytes: %s", ad->path,
				(unsigned long long)want, strerror(err));
			return -err;
		}
	}
	ad->geo.size = want;
	*size = want;
	return 0;
}

static void aio_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	*geo = ((struct aio_dev *)be)->geo;
}

static size_t aio_stat(struct blk_backend *be, char *buf, size_t len)
{
	struct aio_dev *ad = (struct aio_dev *)be;
	unsigned long long nr_short = __atomic_load_n(&ad->nr_short, __ATOMIC_RELAXED);
	size_t n;

	pthread_mutex_lock(&ad->lock);
	/*
	 * inflight: iocbs in the kernel; queued: waiting for a slot; worker:
	 * FLUSH (fdatasync fallback), DISCARD, WRITE_ZEROES waiting or running;
	 * fdsync: 1 while FLUSH goes through IOCB_CMD_FDSYNC; sync: READ/WRITE
	 * done in the submitter's thread (counted in submitted and completed).
	 * ended_reaper / ended_callers / ended_worker: end_io calls made by
	 * the reaper / by threads that submit (after their submit, or waiting
	 * for their own I/O) / by the worker (FLUSH by fdatasync, DISCARD,
	 * WRITE_ZEROES); with sync, they add up to completed. plug_flushes:
	 * flushes of a thread's plug that had deferred this device's
	 * io_submit() (backends/lib/plug.h). nosig: iocbs in flight
	 * that signal no eventfd (the reaper was awake when they went down).
	 */
	n = be_stat_printf(buf, len,
			   "aio_queue_depth %u\naio_inflight %u\naio_queued %u\naio_worker %u\n"
			   "aio_submitted %llu\naio_submit_calls %llu\naio_completed %llu\n"
			   "aio_errors %llu\naio_short %llu\naio_eagain %llu\naio_zero_writes %llu\n"
			   "aio_fdsync %d\naio_sync %llu\naio_waited %llu\naio_wait_missed %llu\n"
			   "aio_orphans %u\naio_latency_ns %llu\naio_req_grown %llu\n"
			   "aio_ended_reaper %llu\naio_ended_callers %llu\naio_nosig %u\n"
			   "aio_ended_worker %llu\naio_plug_flushes %llu\naio_wait_latency_ns %llu\n"
			   "aio_wait_skipped %llu\naio_idle_sync %llu\naio_inline_pct %llu\n",
			   ad->qd, ad->inflight, ad->nr_sq, ad->nr_wq,
			   (unsigned long long)ad->nr_submitted,
			   (unsigned long long)ad->nr_submit_calls,
			   (unsigned long long)ad->nr_completed,
			   (unsigned long long)ad->nr_errors, nr_short,
			   (unsigned long long)ad->nr_eagain,
			   (unsigned long long)ad->nr_zero_writes, !ad->no_fdsync,
			   (unsigned long long)ad->nr_sync,
			   (unsigned long long)ad->nr_waited,
			   (unsigned long long)ad->nr_wait_missed, ad->nr_orphans,
			   (unsigned long long)__atomic_load_n(&ad->lat_ns, __ATOMIC_RELAXED),
			   (unsigned long long)__atomic_load_n(&ad->nr_req_grown, __ATOMIC_RELAXED),
			   (unsigned long long)ad->nr_end_reaper,
			   (unsigned long long)ad->nr_end_caller, ad->nr_nosig,
			   (unsigned long long)ad->nr_end_worker,
			   (unsigned long long)ad->nr_plug_flushes,
			   (unsigned long long)__atomic_load_n(&ad->wait_ns, __ATOMIC_RELAXED),
			   (unsigned long long)ad->nr_wait_skipped,
			   (unsigned long long)ad->nr_idle_sync,
			   (unsigned long long)(__atomic_load_n(&ad->inline_avg, __ATOMIC_RELAXED) *
						100 / AIO_INLINE_ONE));
	pthread_mutex_unlock(&ad->lock);
	return n;
}

const struct blk_backend_ops aio_backend_ops = {
	.name = "aio",
	.keys = aio_keys,
	.help = "aio: a block device or image file through libaio and O_DIRECT (path = ..., queue_depth, create, exclusive)",
	.open = aio_open,
	.close = aio_close,
	.geometry = aio_geometry,
	.resize = aio_resize,
	.submit = aio_submit,
	.stat = aio_stat,
};
