/* SPDX-License-Identifier: MIT */
/*
 * fuse/control.h - the mount's control file, MNT/.sys/control, the daemon's
 * side (fuse/control.c): one command per write(2), a line `VERB ARG...`
 * (its syntax: ctl_parse.h), its result (or error) read back on the same
 * open file. The commands (`blkfs add|remove|resize|...`) are clients
 * (ctl_client.h).
 */
#ifndef BLKFS_CONTROL_H
#define BLKFS_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "ctl_parse.h"

struct bf_daemon;

/*
 * A command's handler: argv[0] is the verb. Returns 0 or -errno; @msg
 * (@len bytes) gets the result on success (may stay empty) or the error,
 * one line without its newline.
 */
typedef int (*bf_cmd_fn)(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);

/**
 * bf_ctl_exec - run one command written to the control file
 * @d: the daemon
 * @line, @len: the bytes written
 * @msg, @msglen: receives the result or the error, one line ending in "\n"
 *	(empty for a success without a result)
 *
 * Returns: 0 or -errno (then also logged with blk_err).
 * Locking: none held; the handlers take what they need.
 */
int bf_ctl_exec(struct bf_daemon *d, const char *line, size_t len, char *msg, size_t msglen);

/* The verbs of the dispatch table, ", "-separated, into @buf (for messages and --help). */
void bf_ctl_verbs(char *buf, size_t len);

/*
 * The daemon side of the file itself (control.c): its ops (file.h), which
 * run each command in a thread of its own, and the wait for those still
 * running at unmount. bf_ctl_init() once, before serving: 0 or -errno.
 */
struct bf_file_ops;
struct fuse_req;
extern const struct bf_file_ops bf_ctl_fops;
int bf_ctl_init(void);
/* Only the user who mounted, or root, runs commands (checked at open and at each write). */
bool bf_ctl_writer_ok(struct fuse_req *req);
/*
 * bf_ctl_jobs_wait - after the request loop (no command comes any more):
 * wait for the commands still running as long as the devices make
 * progress; false when they were given up on (answered ESHUTDOWN, their
 * threads left where they wait).
 */
bool bf_ctl_jobs_wait(struct bf_daemon *d);

#endif
