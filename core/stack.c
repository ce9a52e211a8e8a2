/* SPDX-License-Identifier: MIT */
/*
 * core/stack.c - opening and closing a device's backend stack: the backend
 * first, then each filter of `filters` from the bottom (listed last) to the
 * top (listed first), so every filter's open() sees the layer below it
 * already open and can ask for its geometry.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../backends/lib/trace.h"
#include "stack.h"

static struct blk_backend *open_layer(const struct conf *c, struct conf_device *d,
				      const struct blk_host *host,
				      const struct blk_backend_ops *ops, const char *prefix,
				      struct blk_backend *next, char *err, size_t errlen)
{
	struct blk_params p = {
		.prefix = prefix,
		.file = c->file,
		.line = d->line,
		.dev = d->name,
		.geo = d->geo,
		.v = d->params,
		.n = d->nr_params,
		.err = err,
		.errlen = errlen,
		.host = host,
		.read_only = c->mount.read_only,
	};
	struct blk_backend *be;

	err[0] = 0;
	be = ops->open(&p, next);
	if (IS_ERR(be) && !err[0])
		snprintf(err, errlen, "%s:%d: [device %s]: cannot open %s: %s", c->file, d->line,
			 d->name, ops->name, strerror((int)-PTR_ERR(be)));
	return be;
}

struct blk_backend *stack_open(const struct conf *c, struct conf_device *d,
			       const struct blk_host *host, char *err, size_t errlen)
{
	struct blk_backend *top;
	int i;

	/* its trace number, before any layer asks: devices are numbered in config order */
	(void)bt_dev_get(d->name);
	top = open_layer(c, d, host, d->ops, NULL, NULL, err, errlen);
	if (IS_ERR(top))
		return top;
	for (i = d->nr_filters - 1; i >= 0; i--) {
		const struct blk_backend_ops *ops = d->filters[i];
		char prefix[64];
		struct blk_backend *be;

		/* The filter reads `log.path` as "path"; params.c adds this. */
		snprintf(prefix, sizeof(prefix), "%s.", ops->name);
		be = open_layer(c, d, host, ops, prefix, top, err, errlen);
		if (IS_ERR(be)) {
			stack_close(top);
			return be;
		}
		/* A filter that forgot to link itself would cut the stack in two. */
		be->next = top;
		top = be;
	}
	return top;
}

bool stack_stable_writes(const struct blk_backend *top)
{
	/* a filter passes the memory on: any layer below that reads it late decides */
	for (; top; top = top->next)
		if (top->ops->stable_writes)
			return true;
	return false;
}

void stack_close(struct blk_backend *top)
{
	while (top) {
		struct blk_backend *next = top->next;

		top->ops->close(top);
		top = next;
	}
}
