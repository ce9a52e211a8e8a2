// SPDX-License-Identifier: MIT
/*
 * backends/registry.c - the backends and filters blkfs is built with, found
 * by the name a config gives. Adding one is one line in backend_table[] (and
 * its extern in backends_int.h); ops->is_filter says which list it joins.
 * A layer with a knob table (kit/knobs.h) has a line in knob_tables[] too.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "backends_int.h"

static const struct blk_backend_ops *const backend_table[] = {
	&ram_backend_ops,
	&null_backend_ops,
	&aio_backend_ops,
	&nbd_backend_ops,
	&rbd_backend_ops,
	&log_filter_ops,
	&delay_filter_ops,
	&fault_filter_ops,
	&flakey_filter_ops,
	&throttle_filter_ops,
	&powerloss_filter_ops,
	&record_filter_ops,
};

#define NR_BACKENDS (sizeof(backend_table) / sizeof(backend_table[0]))

const struct blk_backend_ops *blk_backend_find(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < NR_BACKENDS; i++)
		if (!strcmp(backend_table[i]->name, name))
			return backend_table[i];
	return NULL;
}

/* The layers with a knob table (kit/knobs.h): every one. */
static const struct {
	const char *name;
	const struct bk_table *const *table;
} knob_tables[] = {
	{ "ram", &ram_knob_table },
	{ "null", &null_knob_table },
	{ "nbd", &nbd_knob_table },
	{ "aio", &aio_knob_table },
	{ "rbd", &rbd_knob_table },
	{ "log", &log_knob_table },
	{ "delay", &delay_knob_table },
	{ "fault", &fault_knob_table },
	{ "flakey", &flakey_knob_table },
	{ "throttle", &throttle_knob_table },
	{ "powerloss", &powerloss_knob_table },
	{ "record", &record_knob_table },
};

const struct bk_table *blk_knob_table(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < sizeof(knob_tables) / sizeof(knob_tables[0]); i++)
		if (!strcmp(knob_tables[i].name, name))
			return *knob_tables[i].table;
	return NULL;
}

/*
 * "ram, null, ..." and "log, delay, ...": built from the table once, so the
 * lists in messages can never go stale.
 */
struct name_list {
	pthread_once_t once;
	bool filters;
	char buf[256];
};

static struct name_list backend_names = { PTHREAD_ONCE_INIT, false, "" };
static struct name_list filter_names = { PTHREAD_ONCE_INIT, true, "" };

static void name_list_build(struct name_list *l)
{
	size_t i, off = 0;

	for (i = 0; i < NR_BACKENDS; i++) {
		size_t room = sizeof(l->buf) - off;
		int n;

		if (backend_table[i]->is_filter != l->filters)
			continue;
		n = snprintf(l->buf + off, room, "%s%s", off ? ", " : "",
			     backend_table[i]->name);
		/* Names are short; a table that outgrows the buffer is cut at a name. */
		if (n < 0 || (size_t)n >= room) {
			l->buf[off] = '\0';
			break;
		}
		off += n;
	}
}

static void backend_names_init(void)
{
	name_list_build(&backend_names);
}

static void filter_names_init(void)
{
	name_list_build(&filter_names);
}

const char *blk_backend_names(void)
{
	pthread_once(&backend_names.once, backend_names_init);
	return backend_names.buf;
}

const char *blk_filter_names(void)
{
	pthread_once(&filter_names.once, filter_names_init);
	return filter_names.buf;
}
