/* SPDX-License-Identifier: MIT */
/*
 * fuse/fuse_uring_abi.h - the FUSE-over-io_uring part of the kernel's FUSE
 * protocol (include/uapi/linux/fuse.h, protocol 7.42 and later: kernels 6.14
 * to 6.18), which Debian 12's linux-libc-dev (6.1, protocol 7.38) lacks, and
 * the part of struct io_uring_sqe that a uring command uses. Written from
 * the uapi header's layout; every size and offset is asserted below, so a
 * system header that defines them differently fails the build.
 *
 * The protocol (fs/fuse/dev_uring.c):
 *  - INIT: the kernel offers FUSE_OVER_IO_URING in flags2 when
 *    /sys/module/fuse/parameters/enable_uring is Y; the daemon accepts by
 *    setting it in its reply.
 *  - REGISTER (IORING_OP_URING_CMD on /dev/fuse, SQE128, cmd_op 1):
 *    sqe->addr points at two iovecs (sqe->len = 2): a header buffer of at
 *    least sizeof(struct fuse_uring_req_header) and a payload buffer of at
 *    least max(FUSE_MIN_READ_BUFFER, max_write, max_pages * 4096). The
 *    entry waits in the kernel; the command completes (res 0) when a request
 *    is in the buffers: the fuse_in_header in in_out, the op's header (its
 *    first argument, size fixed per op) in op_in, the rest of the request in
 *    the payload buffer, payload_sz bytes, and commit_id in ring_ent_in_out.
 *    -EAGAIN until INIT has been answered.
 *  - COMMIT_AND_FETCH (cmd_op 2): the reply's fuse_out_header in in_out, its
 *    payload (payload_sz bytes) in the payload buffer, commit_id and qid in
 *    the SQE's command area; the same entry then waits for the next request.
 *  - Queue qid serves the requests of callers running on CPU qid; the ring
 *    starts carrying requests once every possible CPU's queue holds an entry.
 */
#ifndef BLKFS_FUSE_URING_ABI_H
#define BLKFS_FUSE_URING_ABI_H

#include <liburing.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>

#ifndef FUSE_OVER_IO_URING
#define FUSE_OVER_IO_URING (1ULL << 41)	/* INIT flags2 bit 9 */

#define FUSE_URING_IN_OUT_HEADER_SZ 128
#define FUSE_URING_OP_IN_OUT_SZ 128

/* The last part of struct fuse_uring_req_header. */
struct fuse_uring_ent_in_out {
	uint64_t flags;
	/* the request's unique id: the commit_id of its COMMIT_AND_FETCH */
	uint64_t commit_id;
	/* bytes in the payload buffer: the request's, then the reply's */
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};

/* The header buffer of a ring entry (iov[0] of REGISTER). */
struct fuse_uring_req_header {
	char in_out[FUSE_URING_IN_OUT_HEADER_SZ];	/* fuse_in_header, then fuse_out_header */
	char op_in[FUSE_URING_OP_IN_OUT_SZ];		/* the op's header (fuse_write_in, ...) */
	struct fuse_uring_ent_in_out ring_ent_in_out;
};

enum fuse_uring_cmd {
	FUSE_IO_URING_CMD_INVALID = 0,
	FUSE_IO_URING_CMD_REGISTER = 1,
	FUSE_IO_URING_CMD_COMMIT_AND_FETCH = 2,
};

/* In the 80-byte command area of a 128-byte SQE. */
struct fuse_uring_cmd_req {
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};
#endif

/* Where the command area starts in an SQE, and how much of it SQE128 gives. */
#define BF_SQE_CMD_OFF 48
#define BF_SQE128_CMD_LEN 80

_Static_assert(FUSE_OVER_IO_URING == 1ULL << 41, "FUSE_OVER_IO_URING");
_Static_assert(FUSE_URING_IN_OUT_HEADER_SZ == 128 && FUSE_URING_OP_IN_OUT_SZ == 128,
	       "fuse_uring_req_header areas");
_Static_assert(FUSE_IO_URING_CMD_REGISTER == 1 && FUSE_IO_URING_CMD_COMMIT_AND_FETCH == 2,
	       "fuse_uring_cmd values");

_Static_assert(sizeof(struct fuse_uring_ent_in_out) == 32, "fuse_uring_ent_in_out size");
_Static_assert(offsetof(struct fuse_uring_ent_in_out, flags) == 0, "ent_in_out.flags");
_Static_assert(offsetof(struct fuse_uring_ent_in_out, commit_id) == 8, "ent_in_out.commit_id");
_Static_assert(offsetof(struct fuse_uring_ent_in_out, payload_sz) == 16, "ent_in_out.payload_sz");
_Static_assert(offsetof(struct fuse_uring_ent_in_out, padding) == 20, "ent_in_out.padding");
_Static_assert(offsetof(struct fuse_uring_ent_in_out, reserved) == 24, "ent_in_out.reserved");

_Static_assert(sizeof(struct fuse_uring_req_header) == 288, "fuse_uring_req_header size");
_Static_assert(offsetof(struct fuse_uring_req_header, in_out) == 0, "req_header.in_out");
_Static_assert(offsetof(struct fuse_uring_req_header, op_in) == 128, "req_header.op_in");
_Static_assert(offsetof(struct fuse_uring_req_header, ring_ent_in_out) == 256,
	       "req_header.ring_ent_in_out");

_Static_assert(sizeof(struct fuse_uring_cmd_req) == 24, "fuse_uring_cmd_req size");
_Static_assert(offsetof(struct fuse_uring_cmd_req, flags) == 0, "cmd_req.flags");
_Static_assert(offsetof(struct fuse_uring_cmd_req, commit_id) == 8, "cmd_req.commit_id");
_Static_assert(offsetof(struct fuse_uring_cmd_req, qid) == 16, "cmd_req.qid");
_Static_assert(offsetof(struct fuse_uring_cmd_req, padding) == 18, "cmd_req.padding");
_Static_assert(sizeof(struct fuse_uring_cmd_req) <= BF_SQE128_CMD_LEN, "cmd_req fits the SQE");

/* The headers the ring carries, as /dev/fuse carries them. */
_Static_assert(sizeof(struct fuse_in_header) == 40, "fuse_in_header size");
_Static_assert(sizeof(struct fuse_in_header) <= FUSE_URING_IN_OUT_HEADER_SZ, "in header fits");
_Static_assert(sizeof(struct fuse_out_header) == 16, "fuse_out_header size");
_Static_assert(sizeof(struct fuse_write_in) == 40, "fuse_write_in size");
_Static_assert(sizeof(struct fuse_write_in) <= FUSE_URING_OP_IN_OUT_SZ, "write header fits");

/* The SQE as liburing 2.3 lays it out, for the fields filled by hand. */
_Static_assert(sizeof(struct io_uring_sqe) == 64, "io_uring_sqe size (the first half of SQE128)");
_Static_assert(offsetof(struct io_uring_sqe, opcode) == 0, "sqe.opcode");
_Static_assert(offsetof(struct io_uring_sqe, flags) == 1, "sqe.flags");
_Static_assert(offsetof(struct io_uring_sqe, fd) == 4, "sqe.fd");
_Static_assert(offsetof(struct io_uring_sqe, cmd_op) == 8, "sqe.cmd_op");
_Static_assert(offsetof(struct io_uring_sqe, addr) == 16, "sqe.addr");
_Static_assert(offsetof(struct io_uring_sqe, len) == 24, "sqe.len");
_Static_assert(offsetof(struct io_uring_sqe, user_data) == 32, "sqe.user_data");
_Static_assert(offsetof(struct io_uring_sqe, cmd) == BF_SQE_CMD_OFF, "sqe.cmd");
_Static_assert(BF_SQE_CMD_OFF + BF_SQE128_CMD_LEN == 128, "SQE128 command area");

#endif
