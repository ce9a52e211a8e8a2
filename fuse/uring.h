/* SPDX-License-Identifier: MIT */
/*
 * fuse/uring.h - private to fuse/: FUSE over io_uring, the transport that
 * serves each request on the CPU that made it (fuse/uring.c). rawio.c
 * drives it: it creates the ring before mounting, arms it while it answers
 * INIT, starts it once the kernel has the answer, and hands it every reply
 * on the way to /dev/fuse; the ring takes the ones for its own requests.
 *
 * Lifecycle, one mount:
 *   bf_ring_create   before mounting: one thread and one io_uring per
 *                    possible CPU (a thread that cannot make its ring fails
 *                    the create, so `transport = uring` fails before mounting)
 *   bf_ring_arm      while answering INIT, before the reply is written: the
 *                    buffers and the /dev/fuse fd; on failure the reply does
 *                    not offer the ring and nothing else changes
 *   bf_ring_start    after the reply: every queue registers within the limit,
 *                    else the kernel is told to serve /dev/fuse again
 *   bf_ring_reply    each reply (any thread): the ring takes its own
 *   bf_ring_stop     after the request loop: replies to requests in hand are
 *                    committed, the threads end, rings and buffers go
 *   bf_ring_destroy
 *
 * Locking: ring->lock (start-up and stop) only; bf_ring_reply takes no
 * lock (the unique libfuse has for a ring request names its entry, and a
 * compare-and-swap on the entry makes the one reply).
 * The one callback, bf_ring_create()'s @failed (rawio.c's, registered at
 * start-up), is made with no ring lock held. The ring notes each request
 * it receives in opens.h's table itself, as /dev/fuse's reader does.
 */
#ifndef BLKFS_URING_H
#define BLKFS_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct bf_ring;
struct fuse_session;
struct fuse_in_header;

/* The kernel makes one queue per possible CPU: so does the ring. */
unsigned bf_ring_possible_cpus(void);
/* Memory of one entry whose payload buffer holds @payload bytes. */
size_t bf_ring_entry_bytes(size_t payload);

/**
 * bf_ring_create - the ring's threads and io_urings, before mounting
 * @se: the session whose requests the ring will carry
 * @depth: entries per queue ([mount] uring_queue_depth; the caller checked
 *         their memory with conf_check_uring())
 * @payload: the payload buffer each entry will need (the largest request)
 * @spin_us: [mount] uring_spin: how long past the mount's last request a
 *           queue thread with nothing to do looks for work before it sleeps
 * @failed: called (no ring lock held) when a queue's thread ends on an
 *          error after the ring was up: the session must end
 * @err, @errlen: why not, in a sentence for the user
 *
 * Creates one thread per possible CPU, pinned to that CPU when it is one
 * this process may run on, and lets each make its io_uring.
 * Returns: the ring, or NULL with @err set.
 */
struct bf_ring *bf_ring_create(struct fuse_session *se, unsigned depth, size_t payload,
			       unsigned spin_us,
			       void (*failed)(const char *why), char *err, size_t errlen);

/**
 * bf_ring_arm - before the INIT reply offers the ring: map every entry's
 * buffers (@payload bytes each, at least what the kernel will ask) and give
 * each io_uring the /dev/fuse fd @fuse_fd.
 * Returns: 0, or -errno with @why set (the reply must not offer the ring).
 */
int bf_ring_arm(struct bf_ring *r, int fuse_fd, size_t payload, char *why, size_t len);

/**
 * bf_ring_start - after the INIT reply accepted FUSE_OVER_IO_URING: every
 * queue registers its entries; waits at most @limit_ms for all of them.
 * Returns: 0 once every queue has registered; else -errno with @why set,
 * after telling the kernel to give the ring up and serve /dev/fuse (a
 * REGISTER that fails on purpose), so no request waits for a queue that
 * will never register.
 */
int bf_ring_start(struct bf_ring *r, unsigned limit_ms, char *why, size_t len);

/**
 * bf_ring_reply - a reply on its way out (libfuse's writev, any thread)
 * @iov, @count: the fuse_out_header, then the reply's data
 * @res: what writev would have returned, when the ring took the reply
 *
 * A reply to a ring request is copied into the entry the request came on
 * and committed there (COMMIT_AND_FETCH) by the queue's own thread: at once
 * when that thread replies, else through a hand-off list that wakes it.
 * Returns: true if the reply was a ring request's (taken), false if it
 * goes to /dev/fuse.
 */
bool bf_ring_reply(struct bf_ring *r, const struct iovec *iov, int count, ssize_t *res);

/**
 * bf_ring_stop - after the request loop: no new request is served; replies
 * still due (requests a handler holds) are waited for and committed, then
 * the threads end and the rings and buffers are freed.
 */
void bf_ring_stop(struct bf_ring *r);
/*
 * bf_ring_stop_within - bf_ring_stop(), but when the requests in hand go
 * @timeout_ms without one answered (0: never), give up: false, and the
 * ring is left as it is (threads, rings, buffers: a reply may still come;
 * bf_ring_destroy() then frees nothing). True once stopped.
 */
bool bf_ring_stop_within(struct bf_ring *r, uint64_t timeout_ms);
void bf_ring_destroy(struct bf_ring *r);

/* "name value" lines for .sys/.transport: queues, depth, memory, counters */
int bf_ring_show(struct bf_ring *r, char *buf, size_t len);

/* True in the handler of a request that came on the ring (its thread). */
bool bf_ring_in_request(void);
/*
 * True in a queue's thread (whatever it runs: its own requests, or those
 * another queue handed it). Such a thread must never wait for what only a
 * queue's thread can serve: see bf_rawio_offqueue() in rawio.h.
 */
bool bf_ring_queue_thread(void);
/*
 * In such a handler: the entry's payload buffer (page-aligned, the largest
 * request's size), valid until the reply; a reply whose data is there is
 * committed without a copy. The request's own payload (a WRITE's data) is
 * there too: only a handler done with it may write over it. Else NULL.
 */
char *bf_ring_req_payload(void);

#endif
