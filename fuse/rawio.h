/* SPDX-License-Identifier: MIT */
/* fuse/rawio.h - the raw FUSE traffic between /dev/fuse (or the ring) and libfuse (rawio.c). */
#ifndef BLKFS_FUSE_RAWIO_H
#define BLKFS_FUSE_RAWIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;

struct fuse_session;
/*
 * bf_rawio_attach - route @se's /dev/fuse reads and writes through blkfs's
 * hooks (before fuse_session_mount()), and prepare the transport [mount]
 * transport asks for: with FUSE over io_uring, one thread and ring per
 * possible CPU (fuse/uring.h), started when INIT is answered. @max_write
 * is the session's (the largest request). Returns the placeholder fd that
 * fuse_session_mount() replaces (the caller closes it after mounting), or
 * -errno with @err set ("FILE:LINE: KEY: message" for the config's
 * faults, such as transport = uring on a kernel that does not offer it).
 */
int bf_rawio_attach(struct bf_daemon *d, struct fuse_session *se, size_t max_write,
		    char *err, size_t errlen);
/*
 * bf_rawio_stop - after the request loop: the ring serves no new request,
 * commits the replies to those in hand, and lets go of /dev/fuse. When
 * those in hand go @timeout_ms without one answered (0: wait forever) it
 * gives up: false, and the ring stays allocated until exit.
 */
bool bf_rawio_stop(uint64_t timeout_ms);
/* bf_rawio_failed - the transport failed (the mount never became usable, or a ring queue died). */
bool bf_rawio_failed(void);
void bf_rawio_detach(void);
/*
 * bf_rawio_ring_request - in a request's handler, in its thread: true when
 * the request came over the ring. Its buffers, WRITE data included, then
 * stay valid until its reply is sent, from whatever thread: a handler that
 * parks it needs no copy. A /dev/fuse request's WRITE data lives in the
 * receiving thread's buffer until that thread's next receive.
 */
bool bf_rawio_ring_request(void);
/*
 * bf_rawio_queue_thread - is this a ring queue's thread? Such a thread
 * must never wait for a notification (bf_notify_inval_inode() and the
 * like): the kernel may first send requests to its own queue and wait.
 */
bool bf_rawio_queue_thread(void);
/*
 * A request's handler that may send such a notification, to be run off the
 * ring's queues: embedded in the caller's job, @fn gets it back.
 */
struct bf_offq {
	struct bf_offq *next;		/* rawio.c's list */
	void (*fn)(struct bf_offq *w);	/* runs the handler, replies, may free @w */
};
/*
 * bf_rawio_offqueue - in the handler of a ring request on a queue's thread
 * (bf_rawio_queue_thread()): run @w->fn in a thread that serves no queue.
 * The handler then returns at once without a reply: the request stays
 * parked, its buffers (WRITE data too) valid until @w->fn replies, and the
 * queue's thread serves its queue meanwhile (the write-back the
 * notification makes, for one). Returns 0, or -EAGAIN when no thread could
 * take it (the caller replies the error).
 */
int bf_rawio_offqueue(struct bf_offq *w);
/* bf_rawio_show - "name value" lines of .sys/.transport: transport, ring memory, counters */
int bf_rawio_show(char *buf, size_t len);
/*
 * bf_rawio_write_data - where the data of the WRITE being handled in this
 * thread is, for @buf as libfuse passes it to the write handler (WRITE data
 * is received page-aligned: from /dev/fuse into a buffer of the receiving
 * thread's, valid until that thread's next receive; from the ring in the
 * entry's payload buffer, where libfuse's @buf already points, valid until
 * the reply is sent).
 */
const char *bf_rawio_write_data(const char *buf);
/*
 * bf_rawio_req_buf - the handling thread's page-aligned receive buffer
 * (BF_MAX_WRITE bytes and more): a READ's reply data may be put there.
 * For a request that came on the ring, its entry's payload buffer (a
 * reply from there is committed without a copy; the request's own payload
 * is there, so only a handler done with it, such as READ's, uses this).
 * NULL without memory.
 */
char *bf_rawio_req_buf(void);
/*
 * Is the request being handled in this thread a ring's, whose reply is
 * built in its entry (bf_rawio_req_buf())? A reply from anywhere else is
 * copied there: a direct READ over the ring has the backend copy straight
 * into the entry (one copy) rather than reply from the backend's memory
 * (BLK_IO_MAPPED: one copy too, under the backend's lock); over /dev/fuse
 * the mapping saves the copy into the receive buffer.
 */
bool bf_rawio_req_in_ring(void);
/* Is @data in the handling thread's receive buffer (bf_rawio_keep() takes it without a copy)? */
bool bf_rawio_in_thread_buf(const char *data, size_t len);
/*
 * bf_rawio_keep - the request being handled in this thread outlives its
 * handler, and its data at *@data (@len bytes: a WRITE's data, or the
 * bf_rawio_req_buf() buffer) must stay. The receive buffer goes with the
 * request (the thread receives into another from now on), or the data is
 * copied when it is not there (*@data then points at the copy). Returns
 * the buffer to give back with bf_rawio_release() when the request is
 * done, NULL when there is none to give back (a ring request: its data
 * stays in its entry until the reply), or ERR_PTR(-ENOMEM).
 */
char *bf_rawio_keep(const char **data, size_t len);
void bf_rawio_release(char *buf);
/* Receive buffers held by requests now, and requests that ever kept one. */
void bf_rawio_stats(uint64_t *kept, uint64_t *kept_total);

#endif
