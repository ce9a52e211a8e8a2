/* SPDX-License-Identifier: MIT */
/* core/stack.c - opening and closing a device's backend stack. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "stack.h"

static struct blk_backend *open_layer(const struct conf *c, struct conf_device *d,
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
	};
	struct blk_backend *be;

	err[0] = 0;
	be = ops->open(&p, next);
	if (IS_ERR(be) && !err[0])
		snprintf(err, errlen, "%s:%d: [device %s]: cannot open %s: %s", c->file, d->line,
			 d->name, ops->name, strerror((int)-PTR_ERR(be)));
	return be;
}

struct blk_backend *stack_open(const struct conf *c, struct conf_device *d, char *err,
			       size_t errlen)
{
	return open_layer(c, d, d->ops, NULL, NULL, err, errlen);
}

void stack_close(struct blk_backend *top)
{
	while (top) {
		struct blk_backend *next = top->next;

		top->ops->close(top);
		top = next;
	}
}
