/* SPDX-License-Identifier: MIT */
/*
 * fuse/ctl_client.c - the client of the control file (control.h's
 * bf_ctl_run): what `blkfs add|remove|resize|...` and `blkfs trace` run.
 * Opens MNT/.sys/control, writes one line, reads the result back; says in
 * words why when the mount is not there or went away meanwhile.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_client.h"
#include "mnt.h"

/*
 * The mount went away while the command ran: ESHUTDOWN is the daemon's
 * answer when its unmount gave up on the command (no progress for
 * shutdown_timeout: a hung backend), ENOTCONN or ECONNABORTED the
 * kernel's when the daemon exited (or was killed) without an answer.
 */
static int gone_msg(const char *verb, int argc, char **argv, const char *mnt, int err)
{
	static const char *const dev_verbs[] = { "remove", "resize", "snapshot", "reset", "save" };
	const char *dev = NULL;
	char what[256] = "";
	size_t i;

	for (i = 0; argc > 1 && i < sizeof(dev_verbs) / sizeof(dev_verbs[0]); i++)
		if (!strcmp(verb, dev_verbs[i]))
			dev = argv[1];
	if (dev)
		snprintf(what, sizeof(what), ": what %s had not written back %s", dev,
			 err == ESHUTDOWN ? "is lost (not written to its backend)" : "may be lost");
	if (err == ESHUTDOWN)
		fprintf(stderr, "blkfs: %s: the mount %s went away before the command finished: "
			"its device made no progress for [mount] shutdown_timeout (a hung backend?) "
			"and the daemon gave up on it%s; see the daemon's log and the report of "
			"blkfs umount\n", verb, mnt, what);
	else
		fprintf(stderr, "blkfs: %s: the mount %s went away before the command finished "
			"(its daemon exited: %s)%s\n", verb, mnt, strerror(err), what);
	return 1;
}

int bf_ctl_run(const char *mnt, int argc, char **argv)
{
	return bf_ctl_run_msg(mnt, argc, argv, NULL, 0);
}

int bf_ctl_run_msg(const char *mnt, int argc, char **argv, char *out, size_t outlen)
{
	char line[BF_CTL_MAX_LINE + 1], msg[BF_CTL_MSG_MAX + 1], path[PATH_MAX], cmnt[PATH_MAX];
	const char *verb = argv[0];
	size_t got = 0;
	ssize_t n;
	int len, fd, err, ret;

	len = bf_ctl_format(argc, argv, line, sizeof(line));
	if (len < 0) {
		fprintf(stderr, "blkfs: %s: %s\n", verb, len == -EINVAL ?
			"an argument holds a control character (a newline, ...)" :
			"the command is too long");
		return 2;
	}
	ret = bf_canon_mnt(mnt, cmnt, sizeof(cmnt));
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s: %s\n", verb, mnt, strerror(-ret));
		return 2;
	}
	if (snprintf(path, sizeof(path), "%s/.sys/control", cmnt) >= (int)sizeof(path)) {
		fprintf(stderr, "blkfs: %s: %s: path too long\n", verb, mnt);
		return 2;
	}
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		char type[64];

		err = errno;
		bf_mount_type(cmnt, type, sizeof(type));
		if (strcmp(type, "fuse.blkfs"))
			fprintf(stderr, "blkfs: %s: %s: not a blkfs mount\n", verb, cmnt);
		else if (err == ENOENT)
			fprintf(stderr, "blkfs: %s: %s: this daemon has no control file "
				"(an older blkfs: remount)\n", verb, cmnt);
		else
			fprintf(stderr, "blkfs: %s: %s: %s%s\n", verb, path, strerror(err),
				err == EACCES ? " (only the user who mounted, or root, may "
				"run commands)" : "");
		return 2;
	}
	/* one write is one command; its result is read back on the same descriptor */
	msg[0] = 0;
	n = write(fd, line, (size_t)len);
	err = n < 0 ? errno : 0;
	if (err == ESHUTDOWN || err == ENOTCONN || err == ECONNABORTED) {
		/* no daemon serves the read of the message any more */
		close(fd);
		return gone_msg(verb, argc, argv, cmnt, err);
	}
	for (;;) {
		ssize_t r = read(fd, msg + got, sizeof(msg) - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && !err && !got && (errno == ENOTCONN || errno == ECONNABORTED))
			/* done, then the mount went away (an unmount waited for it) */
			snprintf(msg, sizeof(msg), "%s: done; the mount went away before its message "
				 "could be read\n", verb);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == sizeof(msg) - 1)
			break;
	}
	if (!got)
		got = strlen(msg);
	msg[got] = 0;
	close(fd);
	if (n >= 0 && n != len) {
		fprintf(stderr, "blkfs: %s: short write to %s (%zd of %d bytes)\n", verb, path, n,
			len);
		return 1;
	}
	if (err) {
		if (got && msg[got - 1] == '\n')
			msg[--got] = 0;
		/* the daemon's message, then what errno the write failed with */
		if (got)
			fprintf(stderr, "blkfs: %s: %s (%s)\n", verb, msg, strerror(err));
		else
			fprintf(stderr, "blkfs: %s: %s\n", verb, strerror(err));
		/* refused by the daemon; EACCES from the kernel before it is the same */
		return 1;
	}
	if (out) {
		if (got && msg[got - 1] == '\n')
			msg[--got] = 0;
		snprintf(out, outlen, "%s", msg);
	} else if (got) {
		fputs(msg, stdout);
	}
	return 0;
}
