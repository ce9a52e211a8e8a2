/* SPDX-License-Identifier: MIT */
/*
 * fuse/control.c - the control file MNT/.sys/control (control.h): the
 * dispatch table of its verbs and the daemon side that runs a written line
 * (the client, `blkfs add|remove|...`, is ctl_client.c).
 *
 * And the file itself, its ops (file.h), open included: each write is
 * one command, run by bf_ctl_exec() in a detached thread of its own
 * (ctl_write(), ctl_job_fn()): a command may take long (remove writes a
 * device back), and the thread that received it, a FUSE worker or its
 * CPU's only ring queue thread, goes on serving. Only when no job or
 * thread can be had does the receiving thread run it itself, and never a
 * ring queue's thread (that one refuses: ENOMEM, EAGAIN), as a command may
 * notify the kernel. A line too long to run is refused at once, in the
 * receiving thread. The result is kept in the open file, where read(2) on
 * the same descriptor finds it. At unmount bf_ctl_jobs_wait() waits for the
 * commands still running, and gives up on those that make no progress.
 */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "bf.h"
#include "control.h"
#include "devs.h"
#include "devtab.h"
#include "file.h"
#include "live.h"
#include "rawio.h"
#include "shutdown.h"
#include "trace.h"

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

/* ------------------------------------------------------ the control file */

/*
 * Only the user who mounted, or root, runs commands: the file's mode says
 * so where the kernel checks it (allow_other brings default_permissions);
 * the request's uid is checked too, at open and at each write.
 */
bool bf_ctl_writer_ok(fuse_req_t req)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);

	return ctx && (ctx->uid == 0 || ctx->uid == getuid());
}

/*
 * The result of the last command written on an open .sys/control, which two
 * threads may write and read at once on one descriptor: held only to copy.
 */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;

/* An open control file: the message of the last command written on it. */
struct bf_ctlfile {
	struct bf_file f;	/* first (file.h) */
	size_t len;		/* ctl_lock */
	size_t rpos;		/* ctl_lock: where the next read starts */
	char buf[BF_SYS_BUF];	/* ctl_lock */
};
_Static_assert(offsetof(struct bf_ctlfile, f) == 0, "bf_ctlfile: f first");

static inline struct bf_ctlfile *ctlfile_of(struct bf_file *f)
{
	return bf_file_entry(f, struct bf_ctlfile);
}

static void ctl_read(fuse_req_t req, struct bf_file *f, size_t size, off_t off)
{
	struct bf_ctlfile *cf = ctlfile_of(f);
	size_t n;
	char *buf;

	(void)off;
	/*
	 * The message of the last command written on this descriptor, from
	 * where the last read stopped: the write moved the file offset past
	 * the command, so the offset says nothing here.
	 */
	buf = bf_rawio_req_buf();
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&ctl_lock);
	n = size < cf->len - cf->rpos ? size : cf->len - cf->rpos;
	memcpy(buf, cf->buf + cf->rpos, n);
	cf->rpos += n;
	pthread_mutex_unlock(&ctl_lock);
	fuse_reply_buf(req, buf, n);
}

/* The command's message into the open file (read back there), then the reply. */
static void ctl_done(fuse_req_t req, struct bf_file *f, int ret, const char *msg, size_t size)
{
	struct bf_ctlfile *cf = ctlfile_of(f);

	pthread_mutex_lock(&ctl_lock);
	cf->len = strlen(msg);
	if (cf->len > sizeof(cf->buf))
		cf->len = sizeof(cf->buf);
	memcpy(cf->buf, msg, cf->len);
	cf->rpos = 0;
	pthread_mutex_unlock(&ctl_lock);
	if (ret)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_write(req, size);
}

/*
 * A command runs in a thread of its own: it may take a while (remove
 * writes a device back), and the thread that received it must go on
 * serving. With FUSE over io_uring that thread is its CPU's only queue
 * thread: every request from that CPU would wait behind the command.
 */
struct ctl_job {
	struct ctl_job *next;	/* ctl_jobs_lock: in ctl_running */
	fuse_req_t req;
	struct bf_file *f;	/* the write holds the file open until its reply */
	bool replying;		/* ctl_jobs_lock: its thread answers it */
	bool given_up;		/* ctl_jobs_lock: the unmount answered it (ctl_jobs_give_up) */
	size_t size;
	char line[];		/* a copy: /dev/fuse's buffer is the receiver's */
};

static pthread_mutex_t ctl_jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ctl_jobs_cond;	/* blk_cond_init (bf_ctl_init): waited on with a timeout */
static struct ctl_job *ctl_running;	/* ctl_jobs_lock: commands running */

static void ctl_run(fuse_req_t req, struct bf_file *f, const char *buf, size_t size)
{
	char msg[BF_CTL_MSG_MAX];
	int ret = bf_ctl_exec(fuse_req_userdata(req), buf, size, msg, sizeof(msg));

	ctl_done(req, f, ret, msg, size);
}

static void *ctl_job_fn(void *arg)
{
	struct ctl_job *job = arg, **p;
	char msg[BF_CTL_MSG_MAX];
	bool reply;
	int ret;

	ret = bf_ctl_exec(fuse_req_userdata(job->req), job->line, job->size, msg, sizeof(msg));
	/* answered once: by this thread, or by an unmount that gave up on it */
	pthread_mutex_lock(&ctl_jobs_lock);
	reply = !job->given_up;
	job->replying = reply;
	pthread_mutex_unlock(&ctl_jobs_lock);
	if (reply)
		ctl_done(job->req, job->f, ret, msg, job->size);
	pthread_mutex_lock(&ctl_jobs_lock);
	for (p = &ctl_running; *p != job; p = &(*p)->next)
		;
	*p = job->next;
	pthread_cond_broadcast(&ctl_jobs_cond);
	pthread_mutex_unlock(&ctl_jobs_lock);
	free(job);
	return NULL;
}

/* ctl_jobs_lock held: a command neither finished nor given up on? */
static bool ctl_jobs_busy(void *arg)
{
	struct ctl_job *job;

	(void)arg;
	for (job = ctl_running; job; job = job->next)
		if (!job->given_up)
			return true;
	return false;
}

/*
 * Answer the commands still running with ESHUTDOWN (the client says the
 * mount went away with the device's data unwritten) and leave their
 * threads where they wait: on a hung backend, holding their locks. The
 * final writeback gives their devices up (shutdown.c) and waits for none
 * of those locks; nothing they may reach is freed (d->abandoned).
 */
static void ctl_jobs_give_up(struct bf_daemon *d)
{
	struct ctl_job *job;
	char t[32], msg[256];

	bf_devs_give_up(d);
	blk_format_duration(t, sizeof(t), d->conf.mount.shutdown_timeout_ms * 1000000ull);
	snprintf(msg, sizeof(msg), "the mount went away: the command made no progress for %s "
		 "(shutdown_timeout) and was given up on; what its device had not written back "
		 "is lost\n", t);
	for (;;) {
		fuse_req_t req = NULL;
		struct bf_file *f = NULL;
		size_t size = 0;
		int ll = 0;
		char line[128];

		pthread_mutex_lock(&ctl_jobs_lock);
		for (job = ctl_running; job; job = job->next) {
			if (job->given_up || job->replying)
				continue;
			job->given_up = true;
			req = job->req;
			f = job->f;
			size = job->size;
			ll = (int)(size && job->line[size - 1] == '\n' ? size - 1 : size);
			snprintf(line, sizeof(line), "%.*s", ll, job->line);
			break;
		}
		pthread_mutex_unlock(&ctl_jobs_lock);
		if (!req)
			break;
		blk_err("control: %s: given up at unmount: no progress for %s (shutdown_timeout); "
			"its thread is left waiting on the hung I/O", line, t);
		ctl_done(req, f, -ESHUTDOWN, msg, size);
	}
}

/*
 * Wait for the commands still running (the loop has ended: none comes),
 * as long as the devices make progress; false when they were given up on.
 */
bool bf_ctl_jobs_wait(struct bf_daemon *d)
{
	bool done = bf_final_wait_busy(d, ctl_jobs_busy, NULL, &ctl_jobs_lock, &ctl_jobs_cond);

	if (!done)
		ctl_jobs_give_up(d);
	/* those answering by themselves are done in a moment */
	pthread_mutex_lock(&ctl_jobs_lock);
	while (ctl_jobs_busy(NULL))
		pthread_cond_wait(&ctl_jobs_cond, &ctl_jobs_lock);
	pthread_mutex_unlock(&ctl_jobs_lock);
	return done;
}

/* One command per write, whatever the offset (a second write on the same descriptor is the next). */
static void ctl_write(fuse_req_t req, struct bf_file *f, const char *buf, size_t size, off_t off,
		      struct fuse_file_info *fi)
{
	pthread_attr_t attr;
	struct ctl_job *job;
	pthread_t t;
	char msg[128];

	(void)off;
	(void)fi;
	if (!bf_ctl_writer_ok(req)) {
		snprintf(msg, sizeof(msg), "only uid %u (who mounted) or root may run commands\n",
			 (unsigned)getuid());
		ctl_done(req, f, -EACCES, msg, size);
		return;
	}
	/* a line too long to run is refused at once, here */
	job = size <= BF_CTL_MAX_LINE ? malloc(sizeof(*job) + size) : NULL;
	if (!job && size <= BF_CTL_MAX_LINE && bf_rawio_queue_thread()) {
		/* not here: a command may notify the kernel (bf_rawio_offqueue()) */
		ctl_done(req, f, -ENOMEM, "no memory to run the command\n", size);
		return;
	}
	if (!job) {
		ctl_run(req, f, buf, size);
		return;
	}
	job->req = req;
	job->f = f;
	job->replying = false;
	job->given_up = false;
	job->size = size;
	memcpy(job->line, buf, size);
	pthread_mutex_lock(&ctl_jobs_lock);
	job->next = ctl_running;
	ctl_running = job;
	pthread_mutex_unlock(&ctl_jobs_lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, ctl_job_fn, job)) {
		struct ctl_job **p;

		pthread_mutex_lock(&ctl_jobs_lock);
		for (p = &ctl_running; *p != job; p = &(*p)->next)
			;
		*p = job->next;
		pthread_mutex_unlock(&ctl_jobs_lock);
		free(job);
		if (bf_rawio_queue_thread())	/* it may notify the kernel: not from there */
			ctl_done(req, f, -EAGAIN, "no thread to run the command\n", size);
		else
			ctl_run(req, f, buf, size);	/* no thread: here, as a last resort */
	}
	pthread_attr_destroy(&attr);
}

/*
 * Open: a writer must be one who may run commands; the file starts empty
 * (a command's result, once one is written, is what reads find).
 */
static int ctl_open(fuse_req_t req, const struct bf_inode *in, struct fuse_file_info *fi)
{
	struct bf_file *f;

	(void)in;
	if ((fi->flags & O_ACCMODE) != O_RDONLY && !bf_ctl_writer_ok(req))
		return -EACCES;
	f = bf_file_alloc(&bf_ctl_fops, sizeof(struct bf_ctlfile));
	if (!f)
		return -ENOMEM;
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->direct_io = 1;	/* every read and write reaches us */
	fi->nonseekable = 0;
	return 0;
}

const struct bf_file_ops bf_ctl_fops = {
	.open = ctl_open,
	.release = bf_file_free,
	.read = ctl_read,
	.write = ctl_write,
	.fsync = bf_file_fsync_none,
	.fallocate = bf_file_fallocate_none,
};

int bf_ctl_init(void)
{
	return -blk_cond_init(&ctl_jobs_cond);
}
