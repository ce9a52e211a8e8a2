/* SPDX-License-Identifier: MIT */
/*
 * core/stack.h - open a device's backend and its filters, in config order:
 * `filters = log, delay` gives cache -> log -> delay -> backend.
 */
#ifndef BLKFS_STACK_H
#define BLKFS_STACK_H

#include "../backends/backend.h"
#include "conf.h"

/**
 * stack_open - open @d's backend, then its filters from the bottom up
 * @c: the config (file name for messages)
 * @d: the device; its params' used flags are updated
 * @host: what the daemon offers the layers (may be NULL)
 * @err, @errlen: "FILE:LINE: KEY: message" on failure
 *
 * Returns: the top of the stack (what the cache submits to), or
 * ERR_PTR(-errno); on failure nothing stays open.
 */
struct blk_backend *stack_open(const struct conf *c, struct conf_device *d,
			       const struct blk_host *host, char *err, size_t errlen);

/**
 * stack_stable_writes - must a write's memory stay unchanged until its end_io?
 * @top: the top of a stack (a backend alone is a stack of one)
 *
 * Returns: true when any layer from @top down sets ops->stable_writes (rbd
 * without librbd's copy): a filter above such a layer passes the cache's
 * folio memory down to it (backends/backend.h).
 */
bool stack_stable_writes(const struct blk_backend *top);

/** stack_close - close every layer, top first. */
void stack_close(struct blk_backend *top);

#endif
