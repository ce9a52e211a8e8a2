// SPDX-License-Identifier: MIT
/*
 * backends/util.c - small pieces every backend or filter would otherwise
 * write again: an op's name, the ->stat text, an attr's one-line value in
 * and out, a filter's geometry, which is the layer below's, and a filter's
 * snapshot calls, which go to the layer below.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends_int.h"

const char *blk_op_name(enum blk_op op)
{
	switch (op) {
	case BLK_READ: return "READ";
	case BLK_WRITE: return "WRITE";
	case BLK_FLUSH: return "FLUSH";
	case BLK_DISCARD: return "DISCARD";
	case BLK_WRITE_ZEROES: return "WRITE_ZEROES";
	}
	return "UNKNOWN";
}

size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!len)
		return 0;
	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return 0;
	return (size_t)n < len ? (size_t)n : len - 1;
}

int be_attr_text(const char *buf, size_t len, char *s, size_t cap)
{
	if (len && buf[len - 1] == '\n')
		len--;
	if (!len || len >= cap || memchr(buf, '\0', len))
		return -EINVAL;
	memcpy(s, buf, len);
	s[len] = '\0';
	return 0;
}

int be_attr_out(char *buf, size_t len, const char *s)
{
	int n = snprintf(buf, len, "%s\n", s);

	if (n < 0 || (size_t)n >= len)
		return -EOVERFLOW;
	return n;
}

int be_pool_init(struct be_pool *pool, size_t size, unsigned int n)
{
	unsigned int i;
	int ret;

	memset(pool, 0, sizeof(*pool));
	pool->size = size < sizeof(void *) ? sizeof(void *) : size;
	ret = -pthread_mutex_init(&pool->lock, NULL);
	if (ret)
		return ret;
	for (i = 0; i < n; i++) {
		/* calloc touches nothing: the memset does, once, here */
		void *obj = malloc(pool->size);

		if (!obj) {
			be_pool_destroy(pool);
			return -ENOMEM;
		}
		memset(obj, 0, pool->size);
		*(void **)obj = pool->free;
		pool->free = obj;
		pool->nr_objs++;
	}
	return 0;
}

void *be_pool_get(struct be_pool *pool)
{
	void *obj;

	pthread_mutex_lock(&pool->lock);
	obj = pool->free;
	if (obj)
		pool->free = *(void **)obj;
	pthread_mutex_unlock(&pool->lock);
	if (!obj) {
		/* more in use at once than ever before: grow to the peak */
		obj = malloc(pool->size);
		if (!obj)
			return NULL;
		pthread_mutex_lock(&pool->lock);
		pool->nr_objs++;
		pool->nr_grown++;
		pthread_mutex_unlock(&pool->lock);
	}
	memset(obj, 0, pool->size);
	return obj;
}

void be_pool_put(struct be_pool *pool, void *obj)
{
	if (!obj)
		return;
	pthread_mutex_lock(&pool->lock);
	*(void **)obj = pool->free;
	pool->free = obj;
	pthread_mutex_unlock(&pool->lock);
}

void be_pool_destroy(struct be_pool *pool)
{
	while (pool->free) {
		void *obj = pool->free;

		pool->free = *(void **)obj;
		free(obj);
	}
	pool->nr_objs = 0;
	pthread_mutex_destroy(&pool->lock);
}

size_t be_pool_stat(struct be_pool *pool, const char *prefix, char *buf, size_t len)
{
	uint64_t objs, grown;

	pthread_mutex_lock(&pool->lock);
	objs = pool->nr_objs;
	grown = pool->nr_grown;
	pthread_mutex_unlock(&pool->lock);
	return be_stat_printf(buf, len, "%s_pool_objs %llu\n%s_pool_grown %llu\n", prefix,
			      (unsigned long long)objs, prefix, (unsigned long long)grown);
}

void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo)
{
	be->next->ops->geometry(be->next, geo);
}

bool blk_snap_name_valid(const char *name)
{
	size_t i;

	if (!name || !name[0] || name[0] == '.' || name[0] == '-')
		return false;
	for (i = 0; name[i]; i++) {
		char c = name[i];

		if (i == BLK_SNAP_NAME_MAX)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-' || c == '+' || c == '@' || c == ':'))
			return false;
	}
	return true;
}

int be_filter_snap_create(struct blk_backend *be, const char *name)
{
	return blk_snap_create(be->next, name);
}

int be_filter_snap_destroy(struct blk_backend *be, const char *name)
{
	return blk_snap_destroy(be->next, name);
}

int be_filter_snap_reset(struct blk_backend *be, const char *name)
{
	return blk_snap_reset(be->next, name);
}

int be_filter_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	return blk_snap_list(be->next, v, nr);
}

int be_filter_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	return blk_snap_save(be->next, name, path);
}

const struct blk_snap_ops be_filter_snap_ops = {
	.create = be_filter_snap_create,
	.destroy = be_filter_snap_destroy,
	.reset = be_filter_snap_reset,
	.list = be_filter_snap_list,
	.save = be_filter_snap_save,
};
