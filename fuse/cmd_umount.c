/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd_umount.c - `blkfs umount`: unmount, find who holds the mount (the
 * daemon and any process with the FUSE connection open: a /proc/PID/fdinfo
 * scan), wait for the daemon's final writeback and report what was lost.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "cmd.h"
#include "devs.h"
#include "mnt.h"

/* --------------------------------------------------------------- umount */

static bool pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

static pid_t read_pid(const char *mnt)
{
	char path[PATH_MAX], buf[32];
	ssize_t n;
	int fd;

	bf_run_file(path, sizeof(path), mnt, "pid");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return (pid_t)atoi(buf);
}

/*
 * The mount on top at @mnt, from /proc/self/mountinfo (never a stat: the
 * mount may hang): its mount ID and its FUSE connection (the device
 * number, as /sys/fs/fuse/connections and fdinfo name it). -ENOENT if none.
 */
static int mount_ids(const char *mnt, int *mnt_id, unsigned *conn)
{
	char line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "r");
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *fields[5];
		unsigned maj, min;

		if (bf_mountinfo_fields(line, fields, 5) < 5 || strcmp(fields[4], mnt) ||
		    sscanf(fields[2], "%u:%u", &maj, &min) != 2)
			continue;
		/* the last one listed is on top */
		*mnt_id = atoi(fields[0]);
		*conn = (maj << 20) | min;
		ret = 0;
	}
	fclose(f);
	return ret;
}

/* The value of "KEY:" in /proc/PID/fdinfo/FD, or -1. */
static long long fdinfo_val(int pid, int fd, const char *key)
{
	char path[PATH_MAX], line[256];
	size_t klen = strlen(key);
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/fdinfo/%d", pid, fd);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtoll(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static bool is_pid_dir(const char *name)
{
	if (!*name)
		return false;
	for (; *name; name++)
		if (*name < '0' || *name > '9')
			return false;
	return true;
}

static int fuse_holders(unsigned conn, pid_t *pids, int max);

/*
 * Does @pid's command line name @mnt (as it is, or relative to its working
 * directory)? Only the mount point's parent is resolved: a stat of the
 * mount itself could hang.
 */
static bool cmdline_names(int pid, const char *mnt)
{
	char path[64], buf[8192], cwd[PATH_MAX], abs[2 * PATH_MAX], canon[PATH_MAX];
	ssize_t n, l;
	size_t i;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	snprintf(path, sizeof(path), "/proc/%d/cwd", pid);
	l = readlink(path, cwd, sizeof(cwd) - 1);
	cwd[l < 0 ? 0 : l] = 0;
	for (i = 0; i < (size_t)n; i += strlen(buf + i) + 1) {
		const char *a = buf + i;

		if (!*a || *a == '-')
			continue;
		if (*a == '/')
			snprintf(abs, sizeof(abs), "%s", a);
		else if (l > 0)
			snprintf(abs, sizeof(abs), "%s/%s", cwd, a);
		else
			continue;
		if (!strcmp(abs, mnt) || (!bf_canon_mnt(abs, canon, sizeof(canon)) &&
					  !strcmp(canon, mnt)))
			return true;
	}
	return false;
}

/*
 * The processes that serve FUSE connection @conn: those with a descriptor
 * on /dev/fuse whose fdinfo says "fuse_connection: @conn" (the kernel's own
 * word, whatever the run directory, the command line or the transport).
 * The number is the mount's device number, which a later mount may get
 * again while the daemon of the earlier one still writes back (its mount
 * gone): of several holders, those whose command line names @mnt are
 * taken, if any does.
 * Returns how many (the first @max in @pids), or -ENOTSUP when descriptors
 * on /dev/fuse were seen and none said which connection it serves (a
 * kernel without that line).
 */
static int fuse_servers(unsigned conn, const char *mnt, pid_t *pids, int max)
{
	pid_t all[64];
	int i, k = 0, n = fuse_holders(conn, all, 64);

	if (n <= 1) {
		if (n == 1 && max)
			pids[0] = all[0];
		return n < max ? n : max;
	}
	for (i = 0; i < n && k < max; i++)
		if (cmdline_names((int)all[i], mnt))
			pids[k++] = all[i];
	for (i = 0; !k && i < n && i < max; i++)
		pids[i] = all[i];	/* none does: all of them, the current one among them */
	return k ? k : (n < max ? n : max);
}

/* fuse_servers' scan: every holder of @conn, or -ENOTSUP. */
static int fuse_holders(unsigned conn, pid_t *pids, int max)
{
	bool fuse_fds = false, told = false;
	struct dirent *pe, *fe;
	DIR *proc, *fds;
	int n = 0;

	proc = opendir("/proc");
	if (!proc)
		return -ENOTSUP;
	while ((pe = readdir(proc))) {
		char path[64], link[64];
		bool found = false;
		int pid;

		if (!is_pid_dir(pe->d_name) || (pid = atoi(pe->d_name)) == getpid())
			continue;
		snprintf(path, sizeof(path), "/proc/%d/fd", pid);
		fds = opendir(path);
		if (!fds)
			continue;	/* gone, or not ours to look at */
		while (!found && (fe = readdir(fds))) {
			char fdpath[PATH_MAX];
			long long c;
			ssize_t l;

			if (!is_pid_dir(fe->d_name))
				continue;
			snprintf(fdpath, sizeof(fdpath), "%s/%d", path, atoi(fe->d_name));
			l = readlink(fdpath, link, sizeof(link) - 1);
			if (l < 0)
				continue;
			link[l] = 0;
			if (strcmp(link, "/dev/fuse"))
				continue;
			fuse_fds = true;
			c = fdinfo_val(pid, atoi(fe->d_name), "fuse_connection");
			if (c < 0)
				continue;
			told = true;
			if ((unsigned long long)c == conn)
				found = true;
		}
		closedir(fds);
		if (found) {
			if (n < max)
				pids[n] = (pid_t)pid;
			n++;
		}
	}
	closedir(proc);
	if (!n && fuse_fds && !told)
		return -ENOTSUP;
	return n < max ? n : max;
}

/*
 * The run directory @pid was started with (its BLKFS_RUNDIR, as bf_rundir()
 * read it then): where it writes its status. Falls back on ours.
 */
static void daemon_rundir(pid_t pid, char *out, size_t len)
{
	char path[64], buf[65536], cwd[PATH_MAX];
	const char *dir = "/run/blkfs";
	ssize_t n, l;
	size_t i;
	int fd;

	snprintf(out, len, "%s", bf_rundir());
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	for (i = 0; i < (size_t)n; i += strlen(buf + i) + 1)
		if (!strncmp(buf + i, "BLKFS_RUNDIR=", 13) && buf[i + 13])
			dir = buf + i + 13;
	if (dir[0] == '/') {
		snprintf(out, len, "%s", dir);
		return;
	}
	/* relative: to the daemon's directory, which it never changes */
	snprintf(path, sizeof(path), "/proc/%d/cwd", (int)pid);
	l = readlink(path, cwd, sizeof(cwd) - 1);
	if (l < 0)
		return;
	cwd[l] = 0;
	if (snprintf(out, len, "%s/%s", cwd, dir) >= (int)len)
		snprintf(out, len, "%s", bf_rundir());
}

static bool under(const char *path, const char *mnt)
{
	size_t n = strlen(mnt);

	return !strncmp(path, mnt, n) && (path[n] == 0 || path[n] == '/');
}

/*
 * umount2 said EBUSY: is the mount held only by control commands still
 * running (`blkfs remove`, resize... holding MNT/.sys/control open)? Then
 * nobody's file is in the way: the holders are the daemon's own work.
 * Anything else keeps it busy: a descriptor on another file of the mount
 * (fdinfo's mnt_id), a working or root directory or a mapping below it,
 * a loop device over a device file, a mount below it. Returns how many
 * commands hold it, 0 when something else does (or nothing now).
 */
static int busy_with_commands(const char *mnt, int mnt_id)
{
	char ctl[PATH_MAX], line[4096], loop[1][32];
	struct dirent *pe, *fe;
	DIR *proc, *fds;
	int cmds = 0;
	bool other = false;
	FILE *f;

	if (snprintf(ctl, sizeof(ctl), "%s/.sys/control", mnt) >= (int)sizeof(ctl))
		return 0;
	if (bf_loops_over(mnt, false, loop, 1, NULL) > 0)
		return 0;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return 0;
	while (!other && fgets(line, sizeof(line), f)) {
		char *fields[5];

		if (bf_mountinfo_fields(line, fields, 5) < 5)
			continue;
		if (under(fields[4], mnt) && strcmp(fields[4], mnt))
			other = true;	/* a mount below it */
	}
	fclose(f);
	proc = opendir("/proc");
	if (!proc)
		return 0;
	while (!other && (pe = readdir(proc))) {
		char path[64], link[PATH_MAX];
		ssize_t l;
		int pid;

		if (!is_pid_dir(pe->d_name) || (pid = atoi(pe->d_name)) == getpid())
			continue;
		for (int k = 0; k < 2 && !other; k++) {
			snprintf(path, sizeof(path), "/proc/%d/%s", pid, k ? "root" : "cwd");
			l = readlink(path, link, sizeof(link) - 1);
			if (l >= 0) {
				link[l] = 0;
				other = under(link, mnt);
			}
		}
		snprintf(path, sizeof(path), "/proc/%d/maps", pid);
		f = fopen(path, "re");
		while (f && !other && fgets(line, sizeof(line), f)) {
			char *p = strchr(line, '/');

			if (p) {
				p[strcspn(p, "\n")] = 0;
				other = under(p, mnt);
			}
		}
		if (f)
			fclose(f);
		snprintf(path, sizeof(path), "/proc/%d/fd", pid);
		fds = opendir(path);
		while (fds && !other && (fe = readdir(fds))) {
			char fdpath[PATH_MAX];

			if (!is_pid_dir(fe->d_name) ||
			    fdinfo_val(pid, atoi(fe->d_name), "mnt_id") != mnt_id)
				continue;
			snprintf(fdpath, sizeof(fdpath), "%s/%d", path, atoi(fe->d_name));
			l = readlink(fdpath, link, sizeof(link) - 1);
			if (l < 0)
				continue;
			link[l] = 0;
			if (!strcmp(link, ctl))
				cmds++;
			else
				other = true;
		}
		if (fds)
			closedir(fds);
	}
	closedir(proc);
	return other ? 0 : cmds;
}

/* Wait until every one of @pids has exited (a zombie is gone for us). */
static void wait_pids_gone(const pid_t *pids, int n, const char *mnt)
{
	uint64_t start = blk_now_ms();
	bool said = false;

	for (int i = 0; i < n; i++) {
		pid_t pid = pids[i];
		int pfd = (int)syscall(SYS_pidfd_open, pid, 0);

		while (pid_alive(pid)) {
			if (pfd >= 0) {
				struct pollfd p = { .fd = pfd, .events = POLLIN };

				/* readable once the process has exited */
				if (poll(&p, 1, 1000) == 1)
					break;
			} else {
				usleep(20000);
			}
			if (!said && blk_now_ms() - start > 2000 && pid_alive(pid)) {
				fprintf(stderr, "blkfs: %s: waiting for the daemon (pid %d) to write back "
					"its cache\n", mnt, (int)pid);
				said = true;
			}
		}
		if (pfd >= 0)
			close(pfd);
	}
}

/* The daemon's status file, in its run directory @dir. */
static void status_file(char *out, size_t len, const char *dir, const char *mnt)
{
	char key[PATH_MAX];

	bf_run_file(key, sizeof(key), mnt, "status");
	/* bf_run_file's name, in @dir rather than ours */
	if (snprintf(out, len, "%s/%s", dir, strrchr(key, '/') + 1) >= (int)len)
		out[len - 1] = 0;	/* as bf_run_file(): truncated */
}

static int report_status(const char *mnt, const char *dir)
{
	char path[PATH_MAX], line[512];
	unsigned long long bytes, written = 0;
	char dev[128], why[256];
	int lost = 0, ndev = 0;
	FILE *f;

	status_file(path, sizeof(path), dir, mnt);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "blkfs: %s: unmounted, but the daemon left no status: "
			"data it had not written back may be lost\n", mnt);
		return 1;
	}
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "ok %127s %llu", dev, &bytes) == 2) {
			ndev++;
			written += bytes;
		} else if (sscanf(line, "lost %127s %llu %255[^\n]", dev, &bytes, why) == 3) {
			ndev++;
			lost++;
			fprintf(stderr, "blkfs: %s: %llu bytes of %s could not be written to its backend: %s\n",
				mnt, bytes, dev, why);
		} else if (!strncmp(line, "failed", 6)) {
			lost++;
		}
	}
	fclose(f);
	unlink(path);
	if (lost) {
		fprintf(stderr, "blkfs: %s: unmounted; data was lost\n", mnt);
		return 1;
	}
	printf("blkfs: %s: unmounted; all data written back (%d device%s)\n", mnt, ndev,
	       ndev == 1 ? "" : "s");
	(void)written;
	return 0;
}

static void umount_busy_msg(const char *mnt, int err)
{
	if (err == EBUSY) {
		char devs[64][32], files[64][PATH_MAX];
		int i, n = bf_loops_over(mnt, false, devs, 64, files);

		/* the usual holder after `blkfs attach`: named, with the way out */
		for (i = 0; i < n; i++)
			fprintf(stderr, "blkfs: %s: busy: loop device %s is attached to %s "
				"(umount what is mounted on it, then blkfs detach %s)\n",
				mnt, devs[i], files[i], devs[i]);
		if (!n)
			fprintf(stderr, "blkfs: %s: busy: a process has a device file open, or a "
				"loop device or filesystem still sits on one (see fuser -vm %s, "
				"losetup -a)\n", mnt, mnt);
	} else if (err == EPERM) {
		fprintf(stderr, "blkfs: %s: unmount needs root\n", mnt);
	} else {
		fprintf(stderr, "blkfs: %s: unmount: %s\n", mnt, strerror(err));
	}
}

#define MAX_SERVERS 8

/*
 * The daemon is found through the mount's FUSE connection (fuse_servers),
 * not through the pid file: a mount made with another BLKFS_RUNDIR has its
 * pid file elsewhere, and a pid file can outlive its daemon. Only a kernel
 * that does not say who serves a connection falls back on the pid file, and
 * then refuses to unmount without one rather than guess.
 */
int bf_cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX], type[64], dir[PATH_MAX], path[PATH_MAX];
	pid_t pids[MAX_SERVERS];
	unsigned conn = 0;
	int ret, n, mnt_id = 0, cmds;

	if (argc != 2) {
		fprintf(stderr, "blkfs umount: expected one mount point\n%s", bf_usage);
		return 2;
	}
	ret = bf_canon_mnt(argv[1], mnt, sizeof(mnt));
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	bf_mount_type(mnt, type, sizeof(type));
	if (strcmp(type, "fuse.blkfs") || mount_ids(mnt, &mnt_id, &conn)) {
		fprintf(stderr, "blkfs: %s: not a blkfs mount%s%s%s\n", mnt, *type ? " (it is " : "",
			type, *type ? ")" : "");
		return 1;
	}
	snprintf(dir, sizeof(dir), "%s", bf_rundir());
	n = fuse_servers(conn, mnt, pids, MAX_SERVERS);
	if (n > 0) {
		daemon_rundir(pids[0], dir, sizeof(dir));
	} else if (n < 0) {
		pids[0] = read_pid(mnt);
		n = pid_alive(pids[0]) ? 1 : 0;
		bf_run_file(path, sizeof(path), mnt, "pid");
		if (pids[0] < 0) {
			fprintf(stderr, "blkfs: %s: not unmounted: no pid file %s (was it mounted with "
				"another BLKFS_RUNDIR?), and this kernel does not say which process "
				"serves the mount, so blkfs umount cannot wait for its writeback; run "
				"it with the BLKFS_RUNDIR of the mount, or send the daemon SIGTERM "
				"(it writes back, unmounts and exits)\n", mnt, path);
			return 1;
		}
	}
	if (umount2(mnt, 0)) {
		int err = errno;

		cmds = err == EBUSY && n > 0 ? busy_with_commands(mnt, mnt_id) : 0;
		if (!cmds) {
			umount_busy_msg(mnt, err);
			return 1;
		}
		/*
		 * Only commands hold it (a remove writing its device back):
		 * the daemon's own work. It is asked to end as SIGTERM does:
		 * it waits for them while they make progress, gives up on
		 * them after shutdown_timeout without, writes back, unmounts.
		 */
		fprintf(stderr, "blkfs: %s: %d control command%s (blkfs remove, resize...) still "
			"running: asking the daemon (pid %d) to finish, write back and unmount\n",
			mnt, cmds, cmds == 1 ? "" : "s", (int)pids[0]);
		for (int i = 0; i < n; i++) {
			if (kill(pids[i], SIGTERM)) {
				fprintf(stderr, "blkfs: %s: cannot signal pid %d: %s\n", mnt,
					(int)pids[i], strerror(errno));
				return 1;
			}
		}
	}
	if (!n) {
		status_file(path, sizeof(path), dir, mnt);
		if (access(path, F_OK)) {
			fprintf(stderr, "blkfs: %s: unmounted; the daemon was not running, so what it "
				"had not written back is lost\n", mnt);
			return 1;
		}
	}
	wait_pids_gone(pids, n, mnt);
	return report_status(mnt, dir);
}
