/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/entries.h - list values: a config key's "a, b, c" or a
 * .sys store's one entry per line, each entry cut into blank-separated
 * tokens (fault's and flakey's ranges through kit/ranges.h, delay's and
 * throttle's per-op lists).
 *
 * Lock: none.
 */
#ifndef BLKFS_KIT_ENTRIES_H
#define BLKFS_KIT_ENTRIES_H

#include <stddef.h>

/**
 * be_entries - the next entry of a list: the text up to @sep (a config
 * value is "a, b, c"; an attr takes one entry per line), blanks around it
 * cut, then split at blanks into at most @max tokens of < 32 bytes each.
 * @s, @n: what is left of the list; both advance past the entry
 * @tok: filled with NUL-terminated tokens
 *
 * Returns: the number of tokens (0 for a blank entry), -ENOENT at the end
 * of the list, or -EINVAL for more than @max tokens or a token too long.
 */
int be_entries(const char **s, size_t *n, char sep, char tok[][32], int max);

#endif
