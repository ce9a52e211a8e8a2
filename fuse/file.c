/* SPDX-License-Identifier: MIT */
/*
 * fuse/file.c - the list of open files (file.h): allocated at open, freed
 * at release, or at exit for those the kernel never released.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "../backends/lib/list.h"
#include "file.h"

static pthread_mutex_t open_files_lock = PTHREAD_MUTEX_INITIALIZER;
static struct list_head open_files = LIST_HEAD_INIT(open_files);	/* open_files_lock */

struct bf_file *bf_file_alloc(const struct bf_file_ops *ops, size_t size)
{
	struct bf_file *f;

	assert(size >= sizeof(*f));
	f = calloc(1, size);
	if (!f)
		return NULL;
	f->ops = ops;
	pthread_mutex_lock(&open_files_lock);
	list_add_tail(&f->node_open, &open_files);
	pthread_mutex_unlock(&open_files_lock);
	return f;
}

void bf_file_free(struct bf_file *f)
{
	pthread_mutex_lock(&open_files_lock);
	list_del_init(&f->node_open);
	pthread_mutex_unlock(&open_files_lock);
	free(f);
}

/* The handles the kernel never released (files open at exit). */
void bf_files_free_all(void)
{
	struct list_head *pos, *n;

	pthread_mutex_lock(&open_files_lock);
	list_for_each_safe(pos, n, &open_files) {
		list_del_init(pos);
		free(list_entry(pos, struct bf_file, node_open));
	}
	pthread_mutex_unlock(&open_files_lock);
}

void bf_file_fsync_none(fuse_req_t req, struct bf_file *f)
{
	(void)f;
	fuse_reply_err(req, 0);
}

void bf_file_fallocate_none(fuse_req_t req, struct bf_file *f, int mode, off_t off, off_t len)
{
	(void)f;
	(void)mode;
	(void)off;
	(void)len;
	fuse_reply_err(req, EOPNOTSUPP);
}
