/* SPDX-License-Identifier: MIT */
/* fuse/sysfs.h - the .sys tree (sysfs.c). */
#ifndef BLKFS_FUSE_SYSFS_H
#define BLKFS_FUSE_SYSFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;
struct bf_dev;
struct bf_node;

/* The _locked functions with d->dev_lock held (shared is enough) */
/* The fixed nodes: .sys, .sys/.transport, .sys/control. */
int bf_sys_build(struct bf_daemon *d);
/* @bd's subtree .sys/NAME/..., before it is published. */
int bf_sys_build_dev(struct bf_daemon *d, struct bf_dev *bd);
uint64_t bf_sys_root_ino(const struct bf_daemon *d);
struct bf_node *bf_sys_node_locked(struct bf_daemon *d, uint64_t ino);
struct bf_node *bf_sys_lookup_locked(struct bf_daemon *d, uint64_t parent, const char *name);
/*
 * The child of directory @parent at position *@pos or the first after it
 * (readdir order; positions stay where they are when devices come and
 * go), *@pos set to its position; NULL at the end.
 */
struct bf_node *bf_sys_next_locked(struct bf_daemon *d, uint64_t parent, uint64_t *pos);
bool bf_sys_writable(const struct bf_node *n);
/* Show and store: the caller holds a reference on n->dev when there is one. */
int bf_sys_show(struct bf_node *n, char *buf, size_t len);
int bf_sys_store(struct bf_node *n, const char *buf, size_t len);

#endif
