/* SPDX-License-Identifier: MIT */
/*
 * fuse/notify.c - telling others what changed. The kernel: what it caches
 * of a device file (bf_notify_inval_inode, bf_notify_store: every inode
 * notification of fuse/ goes through these). A service manager: how the
 * daemon is doing (bf_notify), the
 * sd_notify protocol (one datagram of "KEY=VALUE" lines to the AF_UNIX
 * socket named by $NOTIFY_SOCKET: READY=1 once the mount is usable,
 * STATUS=..., STOPPING=1, EXTEND_TIMEOUT_USEC=...). A waiting parent and
 * the service manager both: the mount is usable (bf_ready, once INIT is
 * answered).
 *
 * Spoken directly rather than through libsystemd's sd_notify(): the
 * protocol is one sendmsg() (systemd documents it as a stable interface
 * for exactly this use), and linking libsystemd would add a build and
 * run-time dependency to every blkfs for something only a unit uses.
 * Without $NOTIFY_SOCKET every call does nothing.
 */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../backends/lib/log.h"
#include "bf.h"
#include "notify.h"

int bf_notify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	static bool warned;	/* atomic: one warning, whichever thread */
	char msg[1024];
	socklen_t salen;
	size_t len;
	va_list ap;
	ssize_t n;
	int fd, n2;

	if (!path || !*path)
		return 0;
	len = strlen(path);
	/* a path, or an abstract socket written "@name" */
	if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sa.sun_path)) {
		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			blk_warn("NOTIFY_SOCKET=%s: not a socket path blkfs can use (a path or "
				 "@abstract); no readiness notification", path);
		return -EAFNOSUPPORT;
	}
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = 0;
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);

	va_start(ap, fmt);
	n2 = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n2 < 0)
		return -EINVAL;
	len = (size_t)n2 < sizeof(msg) ? (size_t)n2 : sizeof(msg) - 1;

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendto(fd, msg, len, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	if (n < 0) {
		int err = errno;

		if (!__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
			blk_warn("NOTIFY_SOCKET=%s: %s (the service manager does not hear "
				 "from blkfs)", path, strerror(err));
		close(fd);
		return -err;
	}
	close(fd);
	return 0;
}

/*
 * The kernel's side of these waits for requests of the file: a ring queue
 * thread must not be the one that waits (the top of rawio.c). Callers make
 * sure of it (bf_rawio_offqueue()); rawio.c's writev hook, which every
 * notification passes, refuses and counts one from such a thread.
 */
int bf_notify_inval_inode(struct bf_daemon *d, uint64_t ino, off_t off, off_t len)
{
	struct fuse_session *se = d->se;

	if (!se)
		return 0;
	return fuse_lowlevel_notify_inval_inode(se, ino, off, len);
}

int bf_notify_store(struct bf_daemon *d, uint64_t ino, off_t off, const void *buf, size_t len)
{
	struct fuse_session *se = d->se;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(len);

	if (!se)
		return 0;
	bv.buf[0].mem = (void *)buf;
	return fuse_lowlevel_notify_store(se, ino, off, &bv, 0);
}

/*
 * Called once the kernel has taken the INIT reply: from then on the mount
 * answers, so this is where a waiting parent and a service manager hear it.
 */
void bf_ready(struct bf_daemon *d)
{
	char nul = 0;

	bf_notify("READY=1\nSTATUS=Serving %d device%s at %s%s", d->nr_devs,
		  d->nr_devs == 1 ? "" : "s", d->mnt, d->conf.mount.read_only ? " (read-only)" : "");
	if (d->ready_fd >= 0) {
		/* a NUL ends the parent's echo of our stderr: success */
		if (write(d->ready_fd, &nul, 1) < 0) {
			/* the parent is gone; nothing to tell */
		}
		fflush(stderr);
		dup2(d->log_fd, STDERR_FILENO);
		close(d->ready_fd);
		d->ready_fd = -1;
	}
	blk_info("mounted %s at %s (pid %d%s)", d->fsname, d->mnt, (int)getpid(),
		 d->conf.mount.read_only ? ", read-only" : "");
}

/* The kernel forgets a name: inval_entry (added) or delete (removed, @child). */
void bf_notify_entry(struct bf_daemon *d, uint64_t parent, uint64_t child, const char *name)
{
	struct fuse_session *se = d->se;
	int ret;

	if (!se)
		return;
	ret = child ? fuse_lowlevel_notify_delete(se, parent, child, name, strlen(name)) :
		      fuse_lowlevel_notify_inval_entry(se, parent, name, strlen(name));
	/* ENOENT: the kernel had nothing cached under the name */
	if (ret && ret != -ENOENT)
		blk_warn("%s: cannot tell the kernel that %s %s: %s (it may see the old entry "
			 "for up to %.0f s)", name, name, child ? "is gone" : "exists",
			 strerror(-ret), BF_TIMEOUT);
}
