// SPDX-License-Identifier: MIT
/*
 * backends/lib/plug.c - a thread's plug (plug.h): the callbacks deferred
 * to the end of a batch, run once each at its flush.
 */
#include <stddef.h>

#include "plug.h"

static __thread struct blk_plug *plug_cur;

void blk_plug_start(struct blk_plug *plug)
{
	plug->nr = 0;
	if (!plug_cur)
		plug_cur = plug;
}

/* Run and empty @plug's callbacks, with no plug in force meanwhile. */
static void plug_run(struct blk_plug *plug)
{
	struct blk_plug *saved = plug_cur;
	unsigned int i, nr = plug->nr;
	struct blk_plug_cb cb[BLK_PLUG_MAX_CBS];

	for (i = 0; i < nr; i++)
		cb[i] = plug->cb[i];
	plug->nr = 0;
	plug_cur = NULL;
	for (i = 0; i < nr; i++)
		cb[i].fn(cb[i].data);
	plug_cur = saved;
}

void blk_plug_finish(struct blk_plug *plug)
{
	if (plug_cur != plug)
		return;		/* an inner plug: the outer one flushes */
	plug_run(plug);
	plug_cur = NULL;
}

void blk_plug_flush(void)
{
	if (plug_cur && plug_cur->nr)
		plug_run(plug_cur);
}

bool blk_plug_pending(void)
{
	return plug_cur && plug_cur->nr;
}

bool blk_plugged(void)
{
	return plug_cur;
}

int blk_plug_defer(void (*fn)(void *data), void *data)
{
	struct blk_plug *plug = plug_cur;
	unsigned int i;

	if (!plug)
		return 0;
	for (i = 0; i < plug->nr; i++)
		if (plug->cb[i].fn == fn && plug->cb[i].data == data)
			return 2;
	if (plug->nr == BLK_PLUG_MAX_CBS)
		return 0;
	plug->cb[plug->nr++] = (struct blk_plug_cb){ fn, data };
	return 1;
}
