/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/attr.h - what every backend and filter writes for its
 * ->stat text and its .sys attrs (struct blk_backend_ops): the text cut
 * to the buffer, one line of input without its newline, one line out.
 *
 * Lock: none; pure functions on the caller's buffers.
 */
#ifndef BLKFS_KIT_ATTR_H
#define BLKFS_KIT_ATTR_H

#include <stddef.h>

/**
 * be_stat_printf - format a ->stat text (see struct blk_backend_ops)
 * @buf, @len: what ->stat got
 *
 * Returns: the length written, at most @len - 1 (the text is cut short,
 * never unterminated), or 0 when @len is 0 or formatting failed.
 */
size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/**
 * be_attr_text - an attr's store input as a string
 * @buf, @len: what store got (not NUL-terminated; one trailing newline allowed)
 * @s, @cap: filled with the text without the newline, NUL-terminated
 *
 * Returns: 0, or -EINVAL when it is empty, holds a NUL or does not fit.
 */
int be_attr_text(const char *buf, size_t len, char *s, size_t cap);

/**
 * be_attr_out - an attr's show: @s and a newline into @buf
 *
 * Returns: the length, or -EOVERFLOW when it does not fit in @len.
 */
int be_attr_out(char *buf, size_t len, const char *s);

#endif
