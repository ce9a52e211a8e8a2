/* SPDX-License-Identifier: MIT */
/* fuse/devtab.h - the device table and references (devtab.c). */
#ifndef BLKFS_FUSE_DEVTAB_H
#define BLKFS_FUSE_DEVTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;
struct bf_dev;

/*
 * bf_dev_get - the device named @name with a reference (it cannot be freed
 * until bf_dev_put()), NULL if there is none or it is being removed.
 */
struct bf_dev *bf_dev_get(struct bf_daemon *d, const char *name);
void bf_dev_put(struct bf_dev *dev);
/* A reference more on a device one holds (or under d->dev_lock). */
void bf_dev_hold(struct bf_dev *dev);
/* Under dev->ctl_lock: has a remove taken the device away? */
bool bf_dev_removed(const struct bf_dev *dev);
/* Does a command hold @dev's ctl_lock now? (never waits for it) */
bool bf_dev_ctl_held(struct bf_dev *dev);
/* At unmount: the commands still running are given up on (d->ctl_given_up). */
void bf_devs_give_up(struct bf_daemon *d);
bool bf_devs_given_up(struct bf_daemon *d);
/* The device named @name in the table, removing or not; d->dev_lock held. */
struct bf_dev *bf_dev_find_locked(struct bf_daemon *d, const char *name);
/*
 * The @n-th device of the table (0 <= @n < d->nr_devs), in slot order: for
 * the final writeback, when no device comes or goes any more.
 */
struct bf_dev *bf_dev_nth(struct bf_daemon *d, int n);
/* The device whose file is inode @ino; d->dev_lock held. */
struct bf_dev *bf_dev_of_ino_locked(struct bf_daemon *d, uint64_t ino);

/* The table's locks, once (before the first device is created): 0 or -errno. */
int bf_devs_locks_init(struct bf_daemon *d);

#endif
