/* SPDX-License-Identifier: MIT */
/*
 * core/aio.c - requests that must not hold their caller's thread: each
 * device has PC_DEV_WORKERS threads that run what an asynchronous entry
 * point cannot finish without waiting (pcache.h: the rules of blocking and
 * non-blocking threads), and the synchronous API is a thin wrapper that
 * waits for an asynchronous request.
 *
 * A punted request joins its device's queue in arrival order. A worker
 * takes the first one; an fsync takes every fsync queued behind it too,
 * since one writeback pass and one flush serve them all (each still gets
 * its own errseq result).
 */
#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/lib/log.h"
#include "pcache_int.h"

#define FSYNC_GROUP 64		/* fsyncs one pass serves at most */

void pc_aio_init(struct pc_aio *aio, struct pc_dev *dev, enum pc_aio_op op, uint64_t pos,
		 size_t len)
{
	aio->dev = dev;
	aio->op = op;
	aio->pos = pos;
	aio->len = len;
	aio->progress = 0;
	aio->res = 0;
	aio->next = NULL;
	aio->nr_ra = 0;
	aio->ra_seq = false;
	aio->map = NULL;
	aio->mapcnt = 0;
}

void pc_punt(struct pc_aio *aio)
{
	struct pc_dev *dev = aio->dev;

	STAT_ADD(dev, punted_requests, 1);
	aio->next = NULL;
	pthread_mutex_lock(&dev->wq_lock);
	assert(!dev->wq_stop);
	*dev->wq_tail = aio;
	dev->wq_tail = &aio->next;
	pthread_cond_signal(&dev->wq_cond);
	pthread_mutex_unlock(&dev->wq_lock);
}

/* Take the first queued request, and the fsyncs queued behind it if it is one. */
static int wq_take_locked(struct pc_dev *dev, struct pc_aio **v)
{
	struct pc_aio **pp, *a;
	int n = 1;

	v[0] = dev->wq_head;
	dev->wq_head = v[0]->next;
	if (!dev->wq_head)
		dev->wq_tail = &dev->wq_head;
	if (v[0]->op != PC_AIO_FSYNC)
		return 1;
	for (pp = &dev->wq_head; (a = *pp) && n < FSYNC_GROUP;) {
		if (a->op != PC_AIO_FSYNC) {
			pp = &a->next;
			continue;
		}
		*pp = a->next;
		v[n++] = a;
	}
	dev->wq_tail = pp;
	while (*dev->wq_tail)
		dev->wq_tail = &(*dev->wq_tail)->next;
	return n;
}

static void *worker_main(void *arg)
{
	struct pc_dev *dev = arg;
	struct pc_aio *v[FSYNC_GROUP];
	sigset_t all;
	int n;

	/* signals belong to the thread that serves requests */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&dev->wq_lock);
	for (;;) {
		while (!dev->wq_head && !dev->wq_stop)
			pthread_cond_wait(&dev->wq_cond, &dev->wq_lock);
		if (!dev->wq_head)
			break;
		n = wq_take_locked(dev, v);
		dev->wq_busy++;
		pthread_mutex_unlock(&dev->wq_lock);
		pc_aio_run(v, n);
		pthread_mutex_lock(&dev->wq_lock);
		dev->wq_busy--;
	}
	pthread_mutex_unlock(&dev->wq_lock);
	return NULL;
}

int pc_workers_start(struct pc_dev *dev)
{
	int i, err;

	pthread_mutex_init(&dev->wq_lock, NULL);
	pthread_cond_init(&dev->wq_cond, NULL);
	dev->wq_head = NULL;
	dev->wq_tail = &dev->wq_head;
	dev->wq_stop = false;
	for (i = 0; i < PC_DEV_WORKERS; i++) {
		err = pthread_create(&dev->workers[i], NULL, worker_main, dev);
		if (err) {
			pc_workers_stop(dev);
			return -err;
		}
		dev->nr_workers++;
	}
	return 0;
}

/* The queue drains first: a request queued is a caller waiting for its reply. */
void pc_workers_stop(struct pc_dev *dev)
{
	int i;

	pthread_mutex_lock(&dev->wq_lock);
	dev->wq_stop = true;
	pthread_cond_broadcast(&dev->wq_cond);
	pthread_mutex_unlock(&dev->wq_lock);
	for (i = 0; i < dev->nr_workers; i++)
		pthread_join(dev->workers[i], NULL);
	dev->nr_workers = 0;
	assert(!dev->wq_head);
	pthread_mutex_destroy(&dev->wq_lock);
	pthread_cond_destroy(&dev->wq_cond);
}

/* ------------------------------------------------------- synchronous forms */

/* An asynchronous request and its caller, who waits for it. */
struct pc_sync {
	struct pc_aio aio;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	ssize_t res;
	void *buf;		/* pc_read(): where done() copies the data */
};

static void sync_done(struct pc_aio *aio, ssize_t res)
{
	struct pc_sync *s = (struct pc_sync *)aio;

	pthread_mutex_lock(&s->lock);
	s->res = res;
	s->done = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

static void sync_init(struct pc_sync *s)
{
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->done = false;
	s->aio.done = sync_done;
	s->aio.waited = true;
	s->aio.fua = false;
	s->aio.map_ok = false;	/* the data goes to the caller's buffer */
	s->buf = NULL;
}

static ssize_t sync_wait(struct pc_sync *s)
{
	pthread_mutex_lock(&s->lock);
	while (!s->done)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	return s->res;
}

ssize_t pc_write(struct pc_dev *dev, const void *buf, size_t len, uint64_t pos)
{
	struct pc_sync s;

	sync_init(&s);
	pc_write_async(dev, &s.aio, buf, len, pos);
	return sync_wait(&s);
}

ssize_t pc_direct_write(struct pc_dev *dev, const void *buf, size_t len, uint64_t pos)
{
	struct pc_sync s;

	sync_init(&s);
	pc_direct_write_async(dev, &s.aio, buf, len, pos);
	return sync_wait(&s);
}

ssize_t pc_direct_read(struct pc_dev *dev, void *buf, size_t len, uint64_t pos)
{
	struct pc_sync s;

	sync_init(&s);
	pc_direct_read_async(dev, &s.aio, buf, len, pos);
	return sync_wait(&s);
}

int pc_fsync(struct pc_dev *dev, pc_errseq_t *since)
{
	struct pc_sync s;

	sync_init(&s);
	pc_fsync_async(dev, &s.aio, since);
	return (int)sync_wait(&s);
}

/*
 * A read's data is copied out inside done(): a read a worker served from
 * its own bounce buffer is valid only until that worker's next request.
 */
static void read_copy_done(struct pc_aio *aio, ssize_t res)
{
	struct pc_sync *s = (struct pc_sync *)aio;
	char *dst = s->buf;
	int i;

	if (res > 0) {
		for (i = 0; i < aio->rd->iovcnt; i++) {
			memcpy(dst, aio->rd->iov[i].iov_base, aio->rd->iov[i].iov_len);
			dst += aio->rd->iov[i].iov_len;
		}
		pc_read_end(aio->rd);
	}
	sync_done(aio, res);
}

ssize_t pc_read(struct pc_dev *dev, void *buf, size_t len, uint64_t pos)
{
	struct pc_read *rd = malloc(sizeof(*rd));
	size_t done = 0;
	ssize_t ret = 0;

	if (!rd)
		return -ENOMEM;
	while (done < len) {
		struct pc_sync s;

		sync_init(&s);
		s.aio.done = read_copy_done;
		s.buf = (char *)buf + done;
		pc_read_async(dev, &s.aio, rd, len - done, pos + done);
		ret = sync_wait(&s);
		if (ret <= 0)
			break;
		done += (size_t)ret;
	}
	free(rd);
	return done ? (ssize_t)done : ret;
}
