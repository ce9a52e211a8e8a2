/* SPDX-License-Identifier: MIT */
/*
 * fuse/devs.c - devices that come and go while the mount serves others:
 * lookup by name with a reference, and the control file's add and remove.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bf.h"

struct bf_dev *bf_dev_get(struct bf_daemon *d, const char *name)
{
	int i;

	for (i = 0; i < d->nr_devs; i++)
		if (!strcmp(d->devs[i].cd->name, name))
			return &d->devs[i];
	return NULL;
}

void bf_dev_put(struct bf_dev *dev)
{
	(void)dev;
}

int bf_cmd_add(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	(void)d; (void)argc; (void)argv;
	snprintf(msg, len, "add: not implemented yet");
	return -EOPNOTSUPP;
}

int bf_cmd_remove(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	(void)d; (void)argc; (void)argv;
	snprintf(msg, len, "remove: not implemented yet");
	return -EOPNOTSUPP;
}
