/* SPDX-License-Identifier: MIT */
/*
 * fuse/trace.c - `blkfs trace MNT DEV`: a device's events in blktrace's
 * format (backends/lib/trace.h), the daemon's side and the client.
 *
 * How the events reach the client: the client opens its output itself
 * (stdout, or NAME.blktrace.0 in its own directory, with its own rights)
 * and hands that open file to the daemon, whose trace thread then writes
 * the records straight into it: no copy through the client, nothing that
 * goes through FUSE (a trace read through the mount would trace itself),
 * and a pipe to blkparse works as a file does. The control file is a FUSE
 * file and cannot carry a descriptor, so:
 *  1. `trace DEV [device|fuse]` written to .sys/control (the mounter or
 *     root, as every command) answers "SOCKET TOKEN": an abstract unix
 *     socket of the daemon and a one-time token (random, good for 60 s);
 *  2. the client connects, sends "TOKEN\n" with the descriptor attached
 *     (SCM_RIGHTS) and gets "ok\n";
 *  3. at SIGINT or after -w it sends "stop\n" and gets "written N dropped
 *     M\n" once everything taken has been written. A client that dies
 *     closes the socket, which ends its session the same way.
 * The token is what makes a connection to the abstract socket (open to any
 * local process) as good as a command through the control file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "../backends/lib/trace.h"
#include "bf.h"
#include "ctl_client.h"
#include "devtab.h"
#include "trace.h"

#define TR_MAX		16	/* pending tokens and live sessions, each */
#define TR_TOKEN_NS	60000000000ull

struct tr_pending {
	char token[33];
	struct bt_dev *bt;
	int level;
	uint64_t since_ns;
};

struct tr_conn {
	int sock;
	struct bt_session *s;	/* NULL until its token came */
};

static pthread_mutex_t tr_lock = PTHREAD_MUTEX_INITIALIZER;	/* all below */
static struct tr_pending tr_pend[TR_MAX];
static int tr_listen = -1;
static char tr_name[64];	/* the abstract socket's name, without its NUL */

static int tr_addr(struct sockaddr_un *a, const char *name)
{
	size_t n = strlen(name);

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (n + 1 > sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path + 1, name, n);	/* abstract: a leading NUL */
	return (int)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void tr_reply(int sock, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tr_reply(int sock, const char *fmt, ...)
{
	char buf[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && send(sock, buf, (size_t)n, MSG_NOSIGNAL) < 0)
		blk_warn("trace: cannot answer the client: %s", strerror(errno));
}

/* The first message of a connection: the token, and the descriptor to write into. */
static void tr_hello(struct tr_conn *c)
{
	char buf[64], cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *cm;
	struct bt_session *s;
	ssize_t n = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC);
	int fd = -1, i;

	for (cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (n <= 0 || fd < 0) {
		tr_reply(c->sock, "error: expected a token with a descriptor\n");
		goto out_close;
	}
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	pthread_mutex_lock(&tr_lock);
	for (i = 0; i < TR_MAX; i++)
		if (tr_pend[i].bt && !strcmp(tr_pend[i].token, buf))
			break;
	if (i == TR_MAX || blk_now_ns() - tr_pend[i].since_ns > TR_TOKEN_NS) {
		pthread_mutex_unlock(&tr_lock);
		tr_reply(c->sock, "error: no such token (or it expired)\n");
		goto out_close;
	}
	s = bt_session_start(tr_pend[i].bt, tr_pend[i].level, fd);
	tr_pend[i].bt = NULL;
	pthread_mutex_unlock(&tr_lock);
	if (IS_ERR(s)) {
		tr_reply(c->sock, "error: %s\n", strerror((int)-PTR_ERR(s)));
		goto out_close;
	}
	c->s = s;
	tr_reply(c->sock, "ok\n");
	return;
out_close:
	if (fd >= 0)
		close(fd);
	close(c->sock);
	c->sock = -1;
}

/* "stop", or the client went away: the session ends. */
static void tr_end(struct tr_conn *c)
{
	uint64_t written = 0, dropped = 0;
	int err = bt_session_stop(c->s, &written, &dropped);

	if (err)
		tr_reply(c->sock, "written %llu dropped %llu error %s\n",
			 (unsigned long long)written, (unsigned long long)dropped, strerror(-err));
	else
		tr_reply(c->sock, "written %llu dropped %llu\n", (unsigned long long)written,
			 (unsigned long long)dropped);
	close(c->sock);
	c->sock = -1;
	c->s = NULL;
}

/* Serves the socket for the daemon's life: connections, tokens, stops. */
static void *tr_main(void *arg)
{
	struct tr_conn conn[TR_MAX];
	struct pollfd pf[TR_MAX + 1];
	int nr = 0, i;

	(void)arg;
	for (;;) {
		pf[0].fd = tr_listen;
		pf[0].events = POLLIN;
		for (i = 0; i < nr; i++) {
			pf[i + 1].fd = conn[i].sock;
			pf[i + 1].events = POLLIN;
		}
		if (poll(pf, (nfds_t)nr + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			blk_err("trace: poll: %s", strerror(errno));
			return NULL;
		}
		for (i = 0; i < nr; i++) {
			if (!pf[i + 1].revents)
				continue;
			if (!conn[i].s) {
				tr_hello(&conn[i]);
			} else {
				char b[16];

				(void)!recv(conn[i].sock, b, sizeof(b), MSG_DONTWAIT);	/* "stop", or EOF */
				tr_end(&conn[i]);
			}
		}
		for (i = 0; i < nr; i++)
			if (conn[i].sock < 0)
				conn[i--] = conn[--nr];
		if (pf[0].revents & POLLIN) {
			int s = accept4(tr_listen, NULL, NULL, SOCK_CLOEXEC);

			if (s >= 0 && nr == TR_MAX) {
				tr_reply(s, "error: too many trace sessions\n");
				close(s);
			} else if (s >= 0) {
				conn[nr].sock = s;
				conn[nr++].s = NULL;
			}
		}
	}
	return NULL;
}

/* The socket and its thread, made at the first `trace`. Caller holds tr_lock. */
static int tr_start_locked(void)
{
	struct sockaddr_un a;
	unsigned int r = 0;
	pthread_attr_t attr;
	pthread_t t;
	int fd, alen, ret;

	if (tr_listen >= 0)
		return 0;
	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		r = (unsigned int)blk_now_ns();
	snprintf(tr_name, sizeof(tr_name), "blkfs-trace-%d-%08x", (int)getpid(), r);
	alen = tr_addr(&a, tr_name);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, (socklen_t)alen) || listen(fd, 8)) {
		ret = -errno;
		close(fd);
		return ret;
	}
	tr_listen = fd;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	ret = -pthread_create(&t, &attr, tr_main, NULL);
	pthread_attr_destroy(&attr);
	if (ret) {
		close(fd);
		tr_listen = -1;
	}
	return ret;
}

int bf_cmd_trace(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	struct bf_dev *bd;
	struct bt_dev *bt;
	unsigned char rnd[16];
	int level = BT_LEVEL_DEV, i, slot = -1, ret;
	uint64_t now = blk_now_ns();

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "device") &&
				     strcmp(argv[2], "fuse"))) {
		snprintf(msg, len, "usage: trace DEV [device|fuse]");
		return -EINVAL;
	}
	if (argc == 3 && !strcmp(argv[2], "fuse"))
		level = BT_LEVEL_FUSE;
	bd = bf_dev_get(d, argv[1]);
	if (!bd) {
		snprintf(msg, len, "trace: no device '%s'", argv[1]);
		return -ENOENT;
	}
	bt = bt_dev_get(argv[1]);
	bf_dev_put(bd);
	if (!bt)
		return -ENOMEM;
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EAGAIN;
	pthread_mutex_lock(&tr_lock);
	ret = tr_start_locked();
	if (ret) {
		pthread_mutex_unlock(&tr_lock);
		snprintf(msg, len, "trace: cannot serve a trace socket: %s", strerror(-ret));
		return ret;
	}
	for (i = 0; i < TR_MAX; i++)
		if (!tr_pend[i].bt || now - tr_pend[i].since_ns > TR_TOKEN_NS) {
			slot = i;
			break;
		}
	if (slot < 0) {
		pthread_mutex_unlock(&tr_lock);
		snprintf(msg, len, "trace: too many traces being set up");
		return -EBUSY;
	}
	for (i = 0; i < 16; i++)
		snprintf(tr_pend[slot].token + 2 * i, 3, "%02x", rnd[i]);
	tr_pend[slot].bt = bt;
	tr_pend[slot].level = level;
	tr_pend[slot].since_ns = now;
	snprintf(msg, len, "%s %s", tr_name, tr_pend[slot].token);
	pthread_mutex_unlock(&tr_lock);
	return 0;
}

/* ---------------------------------------------------------------- client */

static volatile sig_atomic_t tr_stop;

static void tr_sig(int sig)
{
	(void)sig;
	tr_stop = 1;
}

/* Read one line from @sock into @buf; false when it closed first. */
static bool tr_line(int sock, char *buf, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		ssize_t n = recv(sock, buf + got, 1, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (buf[got++] == '\n')
			break;
	}
	buf[got] = 0;
	if (got && buf[got - 1] == '\n')
		buf[got - 1] = 0;
	return got > 0;
}

int bf_trace_client(int argc, char **argv)
{
	const char *mnt = NULL, *dev = NULL, *name = NULL, *level = "device";
	char msg[BF_CTL_MSG_MAX + 1], sname[128], token[64], line[256], path[PATH_MAX];
	char cbuf[CMSG_SPACE(sizeof(int))];
	char *cargv[3];
	double wait_s = 0;
	struct sockaddr_un a;
	struct sigaction sa;
	int i, out, sock, alen, ret;
	uint64_t deadline = 0;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc) {
			name = argv[++i];
		} else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
			char *end;

			wait_s = strtod(argv[++i], &end);
			if (*end || wait_s <= 0) {
				fprintf(stderr, "blkfs trace: -w %s: not a number of seconds\n", argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--fuse")) {
			level = "fuse";
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "blkfs trace: unknown option %s\n"
				"Usage: blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n", argv[i]);
			return 2;
		} else if (!mnt) {
			mnt = argv[i];
		} else if (!dev) {
			dev = argv[i];
		} else {
			fprintf(stderr, "Usage: blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n");
			return 2;
		}
	}
	if (!dev) {
		fprintf(stderr, "Usage: blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n");
		return 2;
	}
	if (name) {
		if (snprintf(path, sizeof(path), "%s.blktrace.0", name) >= (int)sizeof(path)) {
			fprintf(stderr, "blkfs trace: %s: name too long\n", name);
			return 2;
		}
		out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (out < 0) {
			fprintf(stderr, "blkfs trace: %s: %s\n", path, strerror(errno));
			return 1;
		}
	} else {
		out = STDOUT_FILENO;
	}
	cargv[0] = (char *)"trace";
	cargv[1] = (char *)dev;
	cargv[2] = (char *)level;
	ret = bf_ctl_run_msg(mnt, 3, cargv, msg, sizeof(msg));
	if (ret)
		return ret;
	if (sscanf(msg, "%127s %63s", sname, token) != 2) {
		fprintf(stderr, "blkfs trace: the daemon answered '%s'\n", msg);
		return 1;
	}
	sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	alen = tr_addr(&a, sname);
	if (sock < 0 || alen < 0 || connect(sock, (struct sockaddr *)&a, (socklen_t)alen)) {
		fprintf(stderr, "blkfs trace: cannot reach the daemon's trace socket: %s\n",
			strerror(errno));
		return 1;
	}
	{
		struct iovec iov;
		struct msghdr mh = { 0 };
		struct cmsghdr *cm;

		snprintf(line, sizeof(line), "%s\n", token);
		iov.iov_base = line;
		iov.iov_len = strlen(line);
		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &out, sizeof(int));
		if (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0) {
			fprintf(stderr, "blkfs trace: %s\n", strerror(errno));
			return 1;
		}
	}
	if (!tr_line(sock, line, sizeof(line)) || strcmp(line, "ok")) {
		fprintf(stderr, "blkfs trace: %s: %s\n", dev, line[0] ? line : "no answer");
		return 1;
	}
	if (out != STDOUT_FILENO)
		close(out);	/* the daemon has its own */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = tr_sig;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (wait_s > 0)
		deadline = blk_now_ns() + (uint64_t)(wait_s * 1e9);
	fprintf(stderr, "blkfs trace: tracing %s (%s level)%s%s\n", dev, level,
		name ? " into " : "", name ? path : "");
	while (!tr_stop) {
		struct pollfd pf = { sock, POLLIN, 0 };
		int ms = 200;

		if (deadline) {
			uint64_t now = blk_now_ns();

			if (now >= deadline)
				break;
			if ((deadline - now) / 1000000 < (uint64_t)ms)
				ms = (int)((deadline - now) / 1000000) + 1;
		}
		if (poll(&pf, 1, ms) > 0) {
			fprintf(stderr, "blkfs trace: the daemon ended the trace\n");
			break;
		}
	}
	(void)!send(sock, "stop\n", 5, MSG_NOSIGNAL);
	if (!tr_line(sock, line, sizeof(line))) {
		fprintf(stderr, "blkfs trace: %s: the daemon went away\n", dev);
		return 1;
	}
	{
		unsigned long long w, d;

		if (sscanf(line, "written %llu dropped %llu", &w, &d) != 2) {
			fprintf(stderr, "blkfs trace: %s\n", line);
			return 1;
		}
		fprintf(stderr, "blkfs trace: %s: %llu events written, %llu dropped%s%s\n", dev, w,
			d, strstr(line, "error") ? ": " : "",
			strstr(line, "error") ? strstr(line, "error") + 6 : "");
		close(sock);
		return strstr(line, "error") ? 1 : 0;
	}
}
