/* SPDX-License-Identifier: MIT */
/*
 * fuse/control.c - the control file MNT/.sys/control (control.h): the
 * dispatch table of its verbs and the daemon side that runs a written line
 * (the client, `blkfs add|remove|...`, is ctl_client.c).
 *
 * The file itself (its node, the per-open result, the writer's uid check)
 * is served by daemon.c: a write runs bf_ctl_exec() in the FUSE thread that
 * received it and keeps the message in the open file, where read(2) on the
 * same descriptor finds it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/log.h"
#include "bf.h"
#include "mnt.h"
#include "control.h"

/* One line per verb; argv[0] is the verb. */
static const struct {
	const char *verb;
	bf_cmd_fn fn;
} bf_cmds[] = {
	{ "add", bf_cmd_add },
	{ "remove", bf_cmd_remove },
	{ "resize", bf_cmd_resize },
	{ "snapshot", bf_cmd_snapshot },
	{ "reset", bf_cmd_reset },
	{ "save", bf_cmd_save },
	{ "trace", bf_cmd_trace },
};

#define NR_CMDS (sizeof(bf_cmds) / sizeof(bf_cmds[0]))

void bf_ctl_verbs(char *buf, size_t len)
{
	size_t i, o = 0;

	buf[0] = 0;
	for (i = 0; i < NR_CMDS && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", bf_cmds[i].verb);
}

/* @msg as one line ending in "\n" (or empty): a handler's newlines become "; ". */
static void one_line(char *msg, size_t len)
{
	size_t n, i;

	for (i = 0; msg[i]; i++)
		if (msg[i] == '\n' && msg[i + 1])
			msg[i] = ';';
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
		msg[--n] = 0;
	if (!n)
		return;
	if (n + 2 > len)
		n = len - 2;	/* cut: the newline ends it */
	msg[n] = '\n';
	msg[n + 1] = 0;
}

int bf_ctl_exec(struct bf_daemon *d, const char *line, size_t len, char *msg, size_t msglen)
{
	char store[BF_CTL_MAX_LINE + 1], verbs[256];
	char *argv[BF_CTL_MAX_ARGS + 1];
	int argc, ret;
	size_t i;

	msg[0] = 0;
	argc = bf_ctl_parse(line, len, store, sizeof(store), argv, BF_CTL_MAX_ARGS, msg, msglen);
	if (argc < 0) {
		ret = argc;
		goto out;
	}
	for (i = 0; i < NR_CMDS; i++)
		if (!strcmp(argv[0], bf_cmds[i].verb))
			break;
	if (i == NR_CMDS) {
		bf_ctl_verbs(verbs, sizeof(verbs));
		snprintf(msg, msglen, "unknown command '%s' (commands: %s)", argv[0], verbs);
		ret = -EINVAL;
		goto out;
	}
	ret = bf_cmds[i].fn(d, argc, argv, msg, msglen);
	if (ret > 0 || ret < -4095)
		ret = -EIO;	/* a handler's bug: never a success nor a made-up errno */
	if (ret && !msg[0])
		snprintf(msg, msglen, "%s", strerror(-ret));
out:
	one_line(msg, msglen);
	{
		char shown[513];
		int ll = (int)(len && line[len - 1] == '\n' ? len - 1 : len);
		int ml = (int)(msg[0] ? strlen(msg) - 1 : 0);	/* without its newline */

		if (ll > 512)
			ll = 512;	/* the log gets the start of a line too long to run */
		/* one log line: a refused line's control characters shown as '?' */
		for (int k = 0; k < ll; k++)
			shown[k] = (unsigned char)line[k] < 0x20 || line[k] == 0x7f ? '?' : line[k];
		line = shown;

		if (ret)
			blk_err("control: %.*s: %.*s", ll, line, ml, msg);
		else
			blk_info("control: %.*s: done%s%.*s", ll, line, ml ? ": " : "", ml, msg);
	}
	return ret;
}
