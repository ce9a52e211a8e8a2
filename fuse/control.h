/* SPDX-License-Identifier: MIT */
/*
 * fuse/control.h - the mount's control file, MNT/.sys/control: one command
 * per write(2), a line `VERB ARG...`, its result (or error) read back on the
 * same open file. The commands (`blkfs add|remove|resize|...`) are clients.
 *
 * Line syntax: tokens separated by blanks (space, tab); a double quote
 * starts a quoted part that ends at the next unescaped double quote and may
 * hold blanks; inside it \" is a quote and \\ a backslash (any other
 * backslash is kept as it is). Quoted and plain parts join into one token
 * (a"b c"d is `ab cd`). One trailing newline is allowed; any other control
 * character (a NUL, a second line) is refused.
 *
 * The tokenizer and the formatter (bf_ctl_parse, bf_ctl_format) are pure
 * functions of fuse/ctl_parse.c: the unit tests and the fuzzer link them
 * alone. The daemon side (bf_ctl_exec) is fuse/control.c, the client
 * (bf_ctl_run) fuse/ctl_client.c.
 */
#ifndef BLKFS_CONTROL_H
#define BLKFS_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#define BF_CTL_MAX_LINE 4096	/* bytes of one command, its newline included */
#define BF_CTL_MAX_ARGS 64	/* tokens of one command, the verb included */
#define BF_CTL_MSG_MAX 4096	/* a command's result or error message */

struct bf_daemon;

/*
 * A command's handler: argv[0] is the verb. Returns 0 or -errno; @msg
 * (@len bytes) gets the result on success (may stay empty) or the error,
 * one line without its newline.
 */
typedef int (*bf_cmd_fn)(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);

/**
 * bf_ctl_parse - split one command line into tokens
 * @line: the bytes written (not NUL-terminated; NULs are refused)
 * @len: their number
 * @store: receives the tokens, each NUL-terminated; needs @len + 1 bytes
 * @storelen: its size
 * @argv: receives pointers into @store
 * @maxargs: room in @argv (a NULL follows the last token when room is left)
 * @err, @errlen: on failure "message" (what and at which byte)
 *
 * Returns: the number of tokens (at least 1), or -EINVAL (bad syntax, an
 * empty line, longer than @storelen - 1 bytes, more than @maxargs tokens:
 * a bad line, as a bad value written to any .sys file).
 */
int bf_ctl_parse(const char *line, size_t len, char *store, size_t storelen, char **argv,
		 int maxargs, char *err, size_t errlen);

/**
 * bf_ctl_format - the line that bf_ctl_parse() splits back into @argv:
 * tokens that are empty or hold a blank, a quote or a backslash are quoted
 * @argc, @argv: the tokens
 * @buf, @len: receives the line with its newline, NUL-terminated
 *
 * Returns: the line's length, -EINVAL when a token holds a control
 * character (a newline cannot be sent), -E2BIG when it does not fit.
 */
int bf_ctl_format(int argc, char *const *argv, char *buf, size_t len);

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

/**
 * bf_ctl_run - the client: send one command to the mount at @mnt
 * @mnt: the mount point (as given)
 * @argc, @argv: the command, argv[0] the verb
 *
 * Opens MNT/.sys/control, writes the line, reads the message back, prints
 * it (stdout on success when not empty; "blkfs: VERB: message" on stderr
 * on failure).
 * Returns: the exit status: 0 done, 1 the daemon refused, 2 usage or the
 * mount cannot be reached.
 */
int bf_ctl_run(const char *mnt, int argc, char **argv);
/* As bf_ctl_run(), the success message (without its newline) into @out instead of stdout. */
int bf_ctl_run_msg(const char *mnt, int argc, char **argv, char *out, size_t outlen);

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
