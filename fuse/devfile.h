/* SPDX-License-Identifier: MIT */
/*
 * fuse/devfile.h - the device file (devfile.c): its operations, and the
 * requests in flight that take the device's slots.
 */
#ifndef BLKFS_FUSE_DEVFILE_H
#define BLKFS_FUSE_DEVFILE_H

#include <stdint.h>

struct bf_dev;

extern const struct bf_file_ops bf_dev_fops;

/* The pool of @n request slots of @bd ([mount] max_pending); 0 or -ENOMEM. */
int bf_dev_reqs_init(struct bf_dev *bd, uint32_t n);
void bf_dev_reqs_destroy(struct bf_dev *bd);
/*
 * bf_dev_reply_counts - @bd's replies so far: answered by the thread that
 * received the request (@inl), and later from another thread (@parked);
 * every thread's own count summed with the exited threads'.
 * Locking: takes reply_lock (a leaf) for the sum.
 */
void bf_dev_reply_counts(struct bf_dev *bd, uint64_t *inl, uint64_t *parked);

#endif
