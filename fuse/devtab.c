/* SPDX-License-Identifier: MIT */
/*
 * fuse/devtab.c - the table devices are published in (d->devs) and their
 * references: look up by name, by inode, by position; hold and put; the
 * state a command checks (removed, ctl_lock held, given up). devs.c
 * creates, publishes and removes devices; every other file finds them
 * here. Calls nothing else of fuse/.
 */
#include <assert.h>
#include <pthread.h>
#include <string.h>

#include "../backends/lib/clock.h"
#include "bf.h"
#include "devtab.h"

/* a mount's config always fits the table */
_Static_assert(CONF_MAX_DEVICES <= PC_MAX_DEVS, "the device table holds a config's devices");

int bf_devs_locks_init(struct bf_daemon *d)
{
	int ret;

	if (d->locks_ready)
		return 0;
	/* waited on with a timeout (devs.c): without it a removal's bound is on the wall clock */
	ret = blk_cond_init(&d->ref_cond);
	if (ret)
		return -ret;
	pthread_rwlock_init(&d->dev_lock, NULL);
	pthread_mutex_init(&d->add_lock, NULL);
	pthread_mutex_init(&d->ref_lock, NULL);
	d->next_ino = BF_DEV_INO;
	d->locks_ready = true;
	return 0;
}

void bf_dev_hold(struct bf_dev *dev)
{
	__atomic_add_fetch(&dev->ref, 1, __ATOMIC_RELAXED);
}

void bf_dev_put(struct bf_dev *dev)
{
	struct bf_daemon *d = dev->d;
	int n = __atomic_sub_fetch(&dev->ref, 1, __ATOMIC_ACQ_REL);

	assert(n >= 1);		/* the last one is remove's, which frees the device itself */
	if (n == 1) {
		/* remove may wait for this one (it checks under ref_lock) */
		pthread_mutex_lock(&d->ref_lock);
		pthread_cond_broadcast(&d->ref_cond);
		pthread_mutex_unlock(&d->ref_lock);
	}
}

bool bf_dev_removed(const struct bf_dev *dev)
{
	return dev->removed;
}

bool bf_dev_ctl_held(struct bf_dev *dev)
{
	if (pthread_mutex_trylock(&dev->ctl_lock))
		return true;
	pthread_mutex_unlock(&dev->ctl_lock);
	return false;
}

void bf_devs_give_up(struct bf_daemon *d)
{
	pthread_rwlock_wrlock(&d->dev_lock);
	__atomic_store_n(&d->ctl_given_up, true, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&d->dev_lock);
}

bool bf_devs_given_up(struct bf_daemon *d)
{
	return __atomic_load_n(&d->ctl_given_up, __ATOMIC_ACQUIRE);
}

struct bf_dev *bf_dev_find_locked(struct bf_daemon *d, const char *name)
{
	int i;

	for (i = 0; i < PC_MAX_DEVS; i++)
		if (d->devs[i] && !strcmp(d->devs[i]->cd->name, name))
			return d->devs[i];
	return NULL;
}

struct bf_dev *bf_dev_get(struct bf_daemon *d, const char *name)
{
	struct bf_dev *bd;

	pthread_rwlock_rdlock(&d->dev_lock);
	bd = bf_dev_find_locked(d, name);
	if (bd && bd->removing)
		bd = NULL;
	if (bd)
		bf_dev_hold(bd);
	pthread_rwlock_unlock(&d->dev_lock);
	return bd;
}

struct bf_dev *bf_dev_nth(struct bf_daemon *d, int n)
{
	int i;

	for (i = 0; i < PC_MAX_DEVS; i++)
		if (d->devs[i] && !n--)
			return d->devs[i];
	assert(0);	/* n < d->nr_devs */
	return NULL;
}

struct bf_dev *bf_dev_of_ino_locked(struct bf_daemon *d, uint64_t ino)
{
	int i;

	if (ino < BF_DEV_INO || ino >= BF_SYS_INO)
		return NULL;
	for (i = 0; i < PC_MAX_DEVS; i++)
		if (d->devs[i] && d->devs[i]->ino == ino)
			return d->devs[i];
	return NULL;
}
