/* SPDX-License-Identifier: MIT */
/*
 * fuse/ctl_parse.h - the control file's line (MNT/.sys/control, see
 * control.h): its sizes, and the tokenizer and formatter both sides use.
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
 * alone. The daemon side (bf_ctl_exec) is fuse/control.c (control.h), the
 * client (bf_ctl_run) fuse/ctl_client.c (ctl_client.h).
 */
#ifndef BLKFS_CTL_PARSE_H
#define BLKFS_CTL_PARSE_H

#include <stddef.h>

#define BF_CTL_MAX_LINE 4096	/* bytes of one command, its newline included */
#define BF_CTL_MAX_ARGS 64	/* tokens of one command, the verb included */
#define BF_CTL_MSG_MAX 4096	/* a command's result or error message */

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

#endif
