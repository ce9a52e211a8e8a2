/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/errnames.h - errnos by name (EIO, eio) or number, for the
 * filters that fail I/O on purpose (fault, flakey) and their knob tables:
 * what a config or a .sys store says, and what a show or a trace prints.
 *
 * Lock: none.
 */
#ifndef BLKFS_KIT_ERRNAMES_H
#define BLKFS_KIT_ERRNAMES_H

#include <stddef.h>

/* An errno name (EIO, eio) or number (5): the positive errno, or -EINVAL. */
int be_parse_errno(const char *s);
/* "EIO", or the number when the errno has no name; @buf holds the number. */
const char *be_errno_name(int e, char *buf, size_t len);

#endif
