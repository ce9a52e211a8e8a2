/* SPDX-License-Identifier: MIT */
/*
 * fuse/main.c - the `blkfs` command: mount (daemonize, report readiness or
 * the error to the terminal), umount (unmount, wait for the daemon's final
 * writeback, report what was lost), check, help and version.
 *
 * Runtime files live in $BLKFS_RUNDIR (default /run/blkfs): for a mount
 * point P, K = P with '/' replaced by '_'; K.pid (the daemon), K.log (its
 * messages), K.status (written when it exits: "ok DEV BYTES" or
 * "lost DEV BYTES REASON" per device).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../core/log.h"
#include "bf.h"
#include "control.h"
#include "crashcheck.h"
#include "daemon.h"
#include "devs.h"
#include "loop.h"
#include "mnt.h"
#include "mountopt.h"
#include "statx.h"
#include "trace.h"

#define CONF_MAX_BYTES (1u << 20)

static const char usage[] =
"Usage:\n"
"  blkfs mount MNT [-c CONFIG] [-f] [-o OPTIONS]\n"
"  blkfs CONFIG MNT [-o OPTIONS]        (as mount.fuse3 runs it for fstab)\n"
"  blkfs umount MNT\n"
"  blkfs attach MNT DEV\n"
"  blkfs detach /dev/loopN | MNT DEV\n"
"  blkfs check [-c CONFIG]\n"
"  blkfs stat MNT [DEV] [--json | --prometheus | -i SECONDS [COUNT]]\n"
"  blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n"
"  blkfs add MNT NAME KEY=VALUE...\n"
"  blkfs remove MNT NAME\n"
"  blkfs resize MNT NAME SIZE|auto\n"
"  blkfs snapshot MNT NAME SNAP | blkfs snapshot -d MNT NAME SNAP\n"
"  blkfs reset MNT NAME SNAP\n"
"  blkfs save MNT NAME FILE [SNAP]\n"
"  blkfs crashcheck LOG --base BASE --check CMD | --state ID --materialize FILE\n"
"  blkfs --help | --version\n"
"\n"
"blkfs presents block devices as files: `blkfs mount /mnt/blk` shows one file\n"
"per device of the config (/mnt/blk/ram0, ...), which programs use as they use\n"
"/dev/sdX: dd, fio, losetup, mkfs. Every buffered write goes through blkfs's\n"
"own page cache (per-block uptodate/dirty state, writeback shaped to the\n"
"device's geometry); O_DIRECT opens bypass it.\n"
"\n"
"Commands:\n"
"  mount MNT    Mount the devices of CONFIG at directory MNT. Returns once the\n"
"               mount is usable; the daemon keeps running in the background.\n"
"               SIGTERM or SIGINT to the daemon: write back, unmount, exit\n"
"               (once that writeback has begun, only SIGKILL stops it).\n"
"  umount MNT   Unmount, wait until the daemon has written every dirty block\n"
"               to its backend and exited. Exit status 1 if any data could\n"
"               not be written (it says how much, on which device). A plain\n"
"               umount(8) returns before the daemon has finished.\n"
"  attach MNT DEV  A loop device over MNT/DEV (sector size: its logical block);\n"
"               prints /dev/loopN, and on stderr the geometry the loop hides\n"
"               and the mkfs.ext4 / mkfs.xfs options that keep its alignment.\n"
"  detach       Remove such a loop device (/dev/loopN, or all over MNT/DEV).\n"
"  check        Parse CONFIG and open its backends without mounting.\n"
"  stat MNT     Counters of every device (or DEV) of the mount: user and\n"
"               backend bytes and I/Os, cache hits, dirty and cached bytes,\n"
"               read-modify-write reads, splits, errors, backend write sizes.\n"
"               --json for programs. The same lives in MNT/.sys/DEV/blkfs_stat,\n"
"               next to a /sys/block/DEV-like tree (stat, queue/max_sectors_kb, ...).\n"
"  crashcheck LOG  Run CMD on every crash state of a recorded log (the record\n"
"               filter's, or dm-log-writes'); `blkfs crashcheck --help`.\n"
"  add, remove, resize, snapshot, reset, save\n"
"               Change a mounted blkfs: one command to the daemon through\n"
"               MNT/.sys/control (the mounter or root). `blkfs COMMAND --help`.\n"
"\n"
"Options:\n"
"  -c CONFIG    Config file (default: ./blkfs.conf, else /etc/blkfs.conf).\n"
"  -f           Stay in the foreground, messages to stderr.\n"
"  -o OPTIONS   Mount options, comma separated: ro, sync, nosuid, noatime, ...\n"
"               (as for any filesystem); allow_other and [mount] keys such as\n"
"               kernel_cache=writeback override the config. See blkfs(1).\n"
"\n"
"Config (INI; # or ; starts a comment; sizes take K/M/G/T, binary;\n"
"durations take ns, us, ms, s, m, h: 500us, 2m):\n"
"  [cache]\n"
"  size = 256M              hard bound on cached data\n"
"  folio_size = 64K         cache unit, power of two 4K..2M, >= every logical block\n"
"  dirty_background = 10%   the flusher starts above this (or bytes)\n"
"  dirty_limit = 40%        writers wait above this (or bytes)\n"
"  dirty_expire = 5s        dirty data older than this is written back\n"
"\n"
"  [device ram0]\n"
"  backend = ram            ram: sparse RAM arena; null: drops writes, reads zeros\n"
"  size = 1G\n"
"  logical_block_size = 512 O_DIRECT alignment, 512..64K\n"
"  physical_block_size = 4096\n"
"  max_io = 1M              largest single backend I/O\n"
"  io_min, io_opt           default: physical block size, max_io\n"
"  cache_block_size = auto  block of per-block state; a smaller power of two\n"
"                           forces finer tracking\n"
"\n"
"Manual: blkfs(1), blkfs.conf(5).\n"
"Environment: BLKFS_RUNDIR (default /run/blkfs) holds MNT's .pid, .log, .status.\n";

/* ------------------------------------------------------------ run files */

static const char *rundir(void)
{
	const char *d = getenv("BLKFS_RUNDIR");

	return d && *d ? d : "/run/blkfs";
}

static void run_file(char *out, size_t len, const char *mnt, const char *ext)
{
	char key[PATH_MAX];
	size_t i;

	snprintf(key, sizeof(key), "%s", mnt);
	for (i = 0; key[i]; i++)
		if (key[i] == '/')
			key[i] = '_';
	if (snprintf(out, len, "%s/%s.%s", rundir(), key, ext) >= (int)len)
		out[len - 1] = 0;	/* PATH_MAX-long mount points: truncated, still unique enough */
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

static int write_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f))
		return -errno;
	return rename(tmp, path) ? -errno : 0;
}

static char *read_conf(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	FILE *f = fopen(path, "r");

	if (!f)
		return NULL;
	/*
	 * Running as root, a config anyone else can change would let them pick
	 * what root opens and mounts: refused, checked on the open file.
	 */
	if (geteuid() == 0 && !fstat(fileno(f), &st) && S_ISREG(st.st_mode) &&
	    ((st.st_mode & 022) || st.st_uid != 0)) {
		fprintf(stderr, "blkfs: %s: writable by users other than root (mode %04o, owner uid %u); "
			"refused when running as root (chmod go-w %s; chown root %s)\n", path,
			(unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, path, path);
		fclose(f);
		errno = EPERM;
		return NULL;
	}
	buf = malloc(CONF_MAX_BYTES + 1);
	if (!buf) {
		fclose(f);
		errno = ENOMEM;
		return NULL;
	}
	*len = fread(buf, 1, CONF_MAX_BYTES + 1, f);
	if (ferror(f) || *len > CONF_MAX_BYTES) {
		int e = ferror(f) ? errno : EFBIG;

		fclose(f);
		free(buf);
		errno = e;
		return NULL;
	}
	fclose(f);
	buf[*len] = 0;
	return buf;
}

static const char *pick_conf(const char *arg)
{
	if (arg)
		return arg;
	if (!access("blkfs.conf", F_OK))
		return "blkfs.conf";
	return "/etc/blkfs.conf";
}

static int load_conf(struct bf_daemon *d, const char *path)
{
	char err[1024];
	size_t len;
	char *buf = read_conf(path, &len);
	int ret;

	d->conf_path = path;
	if (!buf) {
		if (errno != EPERM)
			fprintf(stderr, "blkfs: %s: %s\n", path, strerror(errno));
		return -1;
	}
	ret = conf_parse_buf(buf, len, path, &d->conf, err, sizeof(err));
	free(buf);
	if (ret) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	return 0;
}

/* ---------------------------------------------------------------- mount */

/* Parent side of daemonizing: echo the child's messages; a NUL means mounted. */
static int wait_for_child(pid_t pid, int fd)
{
	char buf[4096];
	int status;
	ssize_t n, i;

	for (;;) {
		n = read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (i = 0; i < n; i++) {
			if (buf[i] == 0) {
				fwrite(buf, 1, (size_t)i, stderr);
				return 0;
			}
		}
		fwrite(buf, 1, (size_t)n, stderr);
	}
	if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status))
		return WEXITSTATUS(status);
	return 1;
}

static int cmd_mount(int argc, char **argv)
{
	struct bf_daemon d = { .ready_fd = -1, .log_fd = -1 };
	const char *conf_arg = NULL;
	char mnt[PATH_MAX], type[64], err[1024], path[PATH_MAX], pidtxt[32];
	char status[4096] = "", opts[1024] = "";
	size_t olen = 0;
	struct stat st;
	int opt, pipefd[2], code, ret;
	pid_t pid;

	optind = 1;
	while ((opt = getopt(argc, argv, "c:fo:h")) != -1) {
		switch (opt) {
		case 'c':
			conf_arg = optarg;
			break;
		case 'f':
			d.foreground = true;
			break;
		case 'o':
			/* several -o add up, as with mount(8) */
			ret = snprintf(opts + olen, sizeof(opts) - olen, "%s%s", olen ? "," : "", optarg);
			if (ret < 0 || (size_t)ret >= sizeof(opts) - olen) {
				fprintf(stderr, "blkfs mount: -o: options too long\n");
				return 2;
			}
			olen += (size_t)ret;
			break;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "blkfs mount: expected one mount point\n%s", usage);
		return 2;
	}
	/* mount.fuse3's drop_privileges: it mounted, and hands over /dev/fd/N */
	if (!strncmp(argv[optind], "/dev/fd/", 8)) {
		fprintf(stderr, "blkfs: %s: a mount made by someone else (mount.fuse3's drop_privileges) "
			"is not supported: blkfs mounts itself (it keeps its run files by mount point "
			"and opens its devices with the privileges it has); remove drop_privileges\n",
			argv[optind]);
		return 1;
	}
	ret = bf_canon_mnt(argv[optind], mnt, sizeof(mnt));
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", argv[optind], strerror(-ret));
		return 1;
	}
	bf_mount_type(mnt, type, sizeof(type));
	if (!strcmp(type, "fuse.blkfs")) {
		fprintf(stderr, "blkfs: %s: already mounted (blkfs); `blkfs umount %s` first\n",
			mnt, mnt);
		return 1;
	}
	if (stat(mnt, &st)) {
		fprintf(stderr, "blkfs: mount point %s: %s\n", mnt, strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "blkfs: mount point %s: not a directory\n", mnt);
		return 1;
	}
	if (load_conf(&d, pick_conf(conf_arg)))
		return 1;
	d.mnt = mnt;
	/* the mount's source: findmnt and mount -a match it with an fstab line */
	if (!realpath(d.conf_path, d.fsname)) {
		fprintf(stderr, "blkfs: %s: %s\n", d.conf_path, strerror(errno));
		goto out_conf;
	}
	if (bf_mount_options(&d, opts, err, sizeof(err))) {
		fprintf(stderr, "blkfs: %s\n", err);
		goto out_conf;
	}

	ret = mkdir_p(rundir());
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", rundir(), strerror(-ret));
		goto out_conf;
	}
	if (!d.foreground) {
		if (pipe2(pipefd, O_CLOEXEC)) {
			perror("blkfs: pipe");
			goto out_conf;
		}
		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			perror("blkfs: fork");
			goto out_conf;
		}
		if (pid > 0) {
			close(pipefd[1]);
			code = wait_for_child(pid, pipefd[0]);
			conf_free(&d.conf);
			return code;
		}
		/* the daemon: its stderr goes to the parent until it is ready */
		close(pipefd[0]);
		setsid();
		d.ready_fd = pipefd[1];
		dup2(d.ready_fd, STDERR_FILENO);
		ret = open("/dev/null", O_RDWR);
		if (ret >= 0) {
			dup2(ret, STDIN_FILENO);
			dup2(ret, STDOUT_FILENO);
			if (ret > 2)
				close(ret);
		}
		run_file(path, sizeof(path), mnt, "log");
		d.log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (d.log_fd < 0) {
			fprintf(stderr, "blkfs: %s: %s\n", path, strerror(errno));
			_exit(1);
		}
	}

	/* before any thread exists: every thread the daemon makes inherits it */
	bf_io_flusher();
	ret = bf_open_devices(&d, true, err, sizeof(err));
	if (ret) {
		fprintf(stderr, "%s\n", err);
		conf_free(&d.conf);
		return 1;
	}
	run_file(path, sizeof(path), mnt, "status");
	unlink(path);
	run_file(path, sizeof(path), mnt, "pid");
	snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
	write_file(path, pidtxt);

	code = bf_serve(&d, status, sizeof(status));
	if (d.ready_fd >= 0) {
		/* never became ready: the parent reports our messages */
		close(d.ready_fd);
		d.ready_fd = -1;
	}
	blk_log("%s: exiting with status %d", mnt, code);
	run_file(path, sizeof(path), mnt, "status");
	write_file(path, *status ? status : (code ? "failed\n" : ""));
	run_file(path, sizeof(path), mnt, "pid");
	unlink(path);
	if (d.abandoned) {
		/*
		 * A hung backend I/O still points into the cache and its
		 * device, and threads wait for it: nothing is freed or closed
		 * (a backend's close would wait for it too). The kernel ends
		 * the connection, and with it what callers still wait for.
		 */
		fflush(NULL);
		_exit(code);
	}
	bf_close_devices(&d);
	conf_free(&d.conf);
	return code;

out_conf:
	conf_free(&d.conf);
	return 1;
}

/* `blkfs CONFIG MNT [OPTIONS]` as `blkfs mount MNT -c CONFIG [OPTIONS]`. */
static int cmd_mount_fstab(int argc, char **argv)
{
	char **args = calloc((size_t)argc + 3, sizeof(*args));
	int i, n = 0, code;

	if (!args) {
		perror("blkfs");
		return 1;
	}
	args[n++] = "mount";
	args[n++] = "-c";
	args[n++] = argv[1];
	for (i = 2; i < argc; i++)
		args[n++] = argv[i];
	code = cmd_mount(n, args);
	free(args);
	return code;
}

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

	run_file(path, sizeof(path), mnt, "pid");
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
 * The run directory @pid was started with (its BLKFS_RUNDIR, as rundir()
 * read it then): where it writes its status. Falls back on ours.
 */
static void daemon_rundir(pid_t pid, char *out, size_t len)
{
	char path[64], buf[65536], cwd[PATH_MAX];
	const char *dir = "/run/blkfs";
	ssize_t n, l;
	size_t i;
	int fd;

	snprintf(out, len, "%s", rundir());
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
		snprintf(out, len, "%s", rundir());
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

	run_file(key, sizeof(key), mnt, "status");
	/* run_file's name, in @dir rather than ours */
	snprintf(out, len, "%s/%s", dir, strrchr(key, '/') + 1);
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
static int cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX], type[64], dir[PATH_MAX], path[PATH_MAX];
	pid_t pids[MAX_SERVERS];
	unsigned conn = 0;
	int ret, n, mnt_id = 0, cmds;

	if (argc != 2) {
		fprintf(stderr, "blkfs umount: expected one mount point\n%s", usage);
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
	snprintf(dir, sizeof(dir), "%s", rundir());
	n = fuse_servers(conn, mnt, pids, MAX_SERVERS);
	if (n > 0) {
		daemon_rundir(pids[0], dir, sizeof(dir));
	} else if (n < 0) {
		pids[0] = read_pid(mnt);
		n = pid_alive(pids[0]) ? 1 : 0;
		run_file(path, sizeof(path), mnt, "pid");
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

/* ---------------------------------------------------------------- check */

static int cmd_check(int argc, char **argv)
{
	struct bf_daemon d = { .ready_fd = -1, .log_fd = -1 };
	const char *conf_arg = NULL;
	char err[1024];
	int opt, i;

	optind = 1;
	while ((opt = getopt(argc, argv, "c:h")) != -1) {
		if (opt != 'c') {
			fputs(usage, stderr);
			return 2;
		}
		conf_arg = optarg;
	}
	if (load_conf(&d, pick_conf(conf_arg)))
		return 1;
	if (bf_open_devices(&d, false, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		conf_free(&d.conf);
		return 1;
	}
	printf("%s: ok\n", d.conf_path);
	printf("  cache: %llu bytes in folios of %u\n", (unsigned long long)d.conf.cache.size,
	       d.conf.cache.folio_size);
	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct bf_dev *bd = d.devs[i];

		if (!bd)
			continue;
		printf("  %s: %s, %llu bytes, logical %u, physical %u, max_io %u, cache block %u\n",
		       bd->cd->name, bd->cd->ops->name, (unsigned long long)bd->geo.size,
		       bd->geo.lbs, bd->geo.pbs, bd->geo.max_io, bd->cblk);
	}
	bf_close_devices(&d);
	conf_free(&d.conf);
	return 0;
}

/* ----------------------------------------------------------------- stat */

static bool is_byte_counter(const char *name)
{
	size_t n = strlen(name);

	return n > 6 && !strcmp(name + n - 6, "_bytes");
}

static void human(unsigned long long v, char *buf, size_t len)
{
	const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", v);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
}

static int stat_one(const char *mnt, const char *dev, bool json, bool first)
{
	char path[PATH_MAX], line[256], name[128], hb[32];
	unsigned long long v;
	bool first_field = true;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.sys/%s/blkfs_stat", mnt, dev);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "blkfs stat: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (json)
		printf("%s\n  \"%s\": {", first ? "" : ",", dev);
	else
		printf("%s%s:\n", first ? "" : "\n", dev);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%127s %llu", name, &v) != 2)
			continue;
		if (json) {
			printf("%s\n    \"%s\": %llu", first_field ? "" : ",", name, v);
		} else if (!strncmp(name, "write_size_", 11)) {
			if (v)
				printf("  %-28s %llu\n", name, v);
		} else if (is_byte_counter(name)) {
			human(v, hb, sizeof(hb));
			printf("  %-28s %llu (%s)\n", name, v, hb);
		} else {
			printf("  %-28s %llu\n", name, v);
		}
		first_field = false;
	}
	fclose(f);
	bf_stat_latency(mnt, dev, json, first_field);
	if (json)
		printf("\n  }");
	return 0;
}

/*
 * The mount's transport (.sys/.transport): "transport uring|dev", then
 * counters. Printed before the devices; absent from a daemon without it.
 */
static bool stat_transport(const char *mnt, bool json)
{
	char path[PATH_MAX], line[256], name[128], val[64], hb[32];
	bool first_field = true;
	FILE *f;

	if (snprintf(path, sizeof(path), "%s/.sys/.transport", mnt) >= (int)sizeof(path))
		return false;
	f = fopen(path, "r");
	if (!f)
		return false;
	if (json)
		printf("\n  \".transport\": {");
	else
		printf("transport:\n");
	while (fgets(line, sizeof(line), f)) {
		char *end;
		unsigned long long v;

		if (sscanf(line, "%127s %63s", name, val) != 2)
			continue;
		v = strtoull(val, &end, 10);
		if (json) {
			if (*end || end == val)
				printf("%s\n    \"%s\": \"%s\"", first_field ? "" : ",", name, val);
			else
				printf("%s\n    \"%s\": %llu", first_field ? "" : ",", name, v);
		} else if (!*end && end != val && is_byte_counter(name)) {
			human(v, hb, sizeof(hb));
			printf("  %-28s %llu (%s)\n", name, v, hb);
		} else {
			printf("  %-28s %s\n", name, val);
		}
		first_field = false;
	}
	fclose(f);
	if (json)
		printf("\n  }");
	else
		printf("\n");
	return true;
}

static int cmd_stat(int argc, char **argv)
{
	char mnt[PATH_MAX], type[64], path[PATH_MAX];
	const char *dev = NULL;
	bool json = false, first = true, prom = false;
	double interval = 0;
	long count = 0;
	struct dirent *de;
	int i, ret = 0;
	DIR *dir;

	mnt[0] = 0;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--prometheus"))
			prom = true;
		else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
			char *end;

			interval = strtod(argv[++i], &end);
			if (*end || !(interval > 0)) {
				fprintf(stderr, "blkfs stat: -i %s: not a number of seconds\n", argv[i]);
				return 2;
			}
			if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
				count = strtol(argv[++i], &end, 10);
				if (*end || count <= 0) {
					fprintf(stderr, "blkfs stat: -i: %s: not a count\n", argv[i]);
					return 2;
				}
			}
		} else if (!mnt[0]) {
			ret = bf_canon_mnt(argv[i], mnt, sizeof(mnt));
			if (ret) {
				fprintf(stderr, "blkfs: %s: %s\n", argv[i], strerror(-ret));
				return 1;
			}
		} else if (!dev)
			dev = argv[i];
		else {
			fputs(usage, stderr);
			return 2;
		}
	}
	if (!mnt[0]) {
		fprintf(stderr, "blkfs stat: expected a mount point\n%s", usage);
		return 2;
	}
	bf_mount_type(mnt, type, sizeof(type));
	if (strcmp(type, "fuse.blkfs")) {
		fprintf(stderr, "blkfs: %s: not a blkfs mount\n", mnt);
		return 1;
	}
	if (interval > 0)
		return bf_stat_interval(mnt, dev, interval, count);
	if (prom)
		return bf_stat_prometheus(mnt, dev);
	if (json)
		printf("{");
	if (dev) {
		ret = stat_one(mnt, dev, json, true);
	} else {
		if (snprintf(path, sizeof(path), "%s/.sys", mnt) >= (int)sizeof(path)) {
			fprintf(stderr, "blkfs stat: %s: path too long\n", mnt);
			return 1;
		}
		dir = opendir(path);
		if (!dir) {
			fprintf(stderr, "blkfs stat: %s: %s\n", path, strerror(errno));
			return 1;
		}
		/* the devices follow the transport (after a comma in JSON) */
		first = !stat_transport(mnt, json) || !json;
		while ((de = readdir(dir))) {
			/* a device's directory; .transport and control are not */
			if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
			    !strcmp(de->d_name, "control"))
				continue;
			ret |= stat_one(mnt, de->d_name, json, first);
			first = false;
		}
		closedir(dir);
	}
	if (json)
		printf("\n}\n");
	return ret;
}

/* ------------------------------------------------ commands to the daemon */

/*
 * `blkfs VERB MNT ARG...` sends `VERB ARG...` through MNT/.sys/control
 * (bf_ctl_run). Options (-d) go with the arguments, wherever they stand;
 * MNT is the first word that is not one.
 */
static const struct {
	const char *verb;
	int min_args, max_args;	/* after MNT */
	const char *usage;
	const char *help;
} ctl_cmds[] = {
	{ "add", 1, BF_CTL_MAX_ARGS - 2, "blkfs add MNT NAME KEY=VALUE...",
	  "Add device NAME to the mount at MNT while it serves the others: the keys are\n"
	  "those of a [device NAME] section of blkfs.conf(5) (backend=ram size=1G\n"
	  "filters=delay delay.write=1ms ...; quote a value with blanks), checked with\n"
	  "the same messages. Its file MNT/NAME and MNT/.sys/NAME/ appear at once.\n"
	  "Relative paths (path=, image=, FILTER.path=) are taken from this directory.\n"
	  "Exit status: 0 added; 1 refused (a bad key, EINVAL; the name taken, EEXIST;\n"
	  "no room, ENOSPC; the backend cannot open), the reason on stderr; 2 usage, or\n"
	  "MNT is not a blkfs mount.\n" },
	{ "remove", 1, 1, "blkfs remove MNT NAME",
	  "Remove device NAME from the mount at MNT: its dirty data is written back and\n"
	  "flushed, its backend closed, its file gone. Refused (EBUSY, naming the\n"
	  "holder) while the file is open or a loop device sits on it, and when the\n"
	  "writeback fails (the error is given; nothing is dropped). There is no --force.\n"
	  "Exit status: 0 removed; 1 refused; 2 usage, or MNT is not a blkfs mount.\n" },
	{ "resize", 2, 2, "blkfs resize MNT NAME SIZE|auto",
	  "Change the size of device NAME while it is mounted: SIZE in bytes with an\n"
	  "optional K/M/G/T suffix, a multiple of its cache block; auto: the size its\n"
	  "storage has now. ram grows and shrinks (a shrink drops the data past the\n"
	  "end); aio grows an image file, or with auto takes a block device's or a\n"
	  "file's new size, and never shrinks; nbd reconnects to read the export's\n"
	  "size (auto). Requests are held for the moment, dirty data written back;\n"
	  "every opener sees the new size at once (then losetup -c, resize2fs).\n"
	  "Refused: a shrink below a loop device on the file, or with\n"
	  "kernel_cache = writeback; a ram shrink while it has snapshots.\n"
	  "Exit status: 0 done; 1 refused (the reason on stderr); 2 usage, or MNT is\n"
	  "not a blkfs mount.\n" },
	{ "snapshot", 2, 2, "blkfs snapshot [-d] MNT NAME SNAP",
	  "Take an instant copy-on-write snapshot SNAP of ram device NAME: its dirty\n"
	  "cache is written back first while new writes wait, nothing is copied.\n"
	  "-d deletes SNAP. MNT/.sys/NAME/snapshots lists them with the memory each\n"
	  "holds alone. Exit status: 0 done; 1 refused (a bad or taken name, no such\n"
	  "snapshot, a backend without snapshots: only ram has them); 2 usage.\n" },
	{ "reset", 2, 2, "blkfs reset MNT NAME SNAP",
	  "Return ram device NAME to snapshot SNAP in milliseconds: what was written\n"
	  "since is gone, also from blkfs's and the kernel's caches (unmount a\n"
	  "filesystem on it first). SNAP stays. Exit status: 0 done; 1 refused;\n"
	  "2 usage.\n" },
	{ "save", 2, 3, "blkfs save MNT NAME FILE [SNAP]",
	  "Write ram device NAME (its dirty cache first), or its snapshot SNAP, to\n"
	  "FILE as a sparse raw image, complete or not at all (written beside it and\n"
	  "renamed). `image = FILE` in a [device] section loads it. Exit status:\n"
	  "0 done; 1 refused or the image could not be written; 2 usage.\n" },
};

/* An argument the daemon takes as a path: made absolute, its cwd is not ours. */
static bool path_key(const char *verb, int idx, int nargs, const char *arg, size_t *val_off)
{
	const char *eq, *dot, *key_end;

	if (!strcmp(verb, "save")) {
		/* save NAME FILE [SNAP] */
		*val_off = 0;
		(void)nargs;
		return idx == 1 && arg[0] != '/';
	}
	if (strcmp(verb, "add") || idx == 0)
		return false;
	eq = strchr(arg, '=');
	if (!eq || eq[1] == '/' || !eq[1])
		return false;
	key_end = eq;
	for (dot = eq; dot > arg && dot[-1] != '.'; dot--)
		;
	*val_off = (size_t)(eq + 1 - arg);
	return (key_end - dot == 4 && !strncmp(dot, "path", 4)) ||
	       (key_end - dot == 5 && !strncmp(dot, "image", 5));
}

static int cmd_ctl(int argc, char **argv)
{
	char *args[BF_CTL_MAX_ARGS + 1], *mnt = NULL, cwd[PATH_MAX];
	char absbuf[BF_CTL_MAX_ARGS][PATH_MAX];
	const char *verb = argv[0];
	int i, n = 0, nargs, k = -1, code, opts = 0;
	size_t c;

	for (c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++)
		if (!strcmp(ctl_cmds[c].verb, verb))
			k = (int)c;
	if (k < 0)
		return 2;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("Usage: %s\n\n%s\nThe command is one line written to MNT/.sys/control; "
			       "see blkfs(1).\n", ctl_cmds[k].usage, ctl_cmds[k].help);
			return 0;
		}
	}
	args[n++] = (char *)verb;
	for (i = 1; i < argc; i++) {
		if (!mnt && argv[i][0] != '-') {
			mnt = argv[i];
			continue;
		}
		if (argv[i][0] == '-')
			opts++;
		if (n == BF_CTL_MAX_ARGS) {
			fprintf(stderr, "blkfs %s: too many arguments (at most %d)\n", verb,
				BF_CTL_MAX_ARGS - 1);
			return 2;
		}
		args[n++] = argv[i];
	}
	nargs = n - 1 - opts;
	if (!mnt || nargs < ctl_cmds[k].min_args || nargs > ctl_cmds[k].max_args) {
		fprintf(stderr, "Usage: %s\n(blkfs %s --help)\n", ctl_cmds[k].usage, verb);
		return 2;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		cwd[0] = 0;
	for (i = 1; i < n; i++) {
		size_t off;

		if (!cwd[0] || !path_key(verb, i - 1, n - 1, args[i], &off))
			continue;
		if (snprintf(absbuf[i], sizeof(absbuf[i]), "%.*s%s/%s", (int)off, args[i], cwd,
			     args[i] + off) >= (int)sizeof(absbuf[i])) {
			fprintf(stderr, "blkfs %s: %s: path too long\n", verb, args[i]);
			return 2;
		}
		args[i] = absbuf[i];
	}
	args[n] = NULL;
	code = bf_ctl_run(mnt, n, args);
	return code;
}

/* `blkfs COMMAND --help` for the commands that are not the control file's. */
static const struct {
	const char *cmd;
	const char *help;
} cmd_help[] = {
	{ "mount", "Usage: blkfs mount MNT [-c CONFIG] [-f] [-o OPTIONS]\n\n"
	  "Mount the devices of CONFIG (default ./blkfs.conf, else /etc/blkfs.conf) at\n"
	  "directory MNT. Returns once the mount is usable; the daemon keeps running in\n"
	  "the background (-f: in the foreground, messages on stderr). -o takes mount\n"
	  "options (ro, sync, allow_other, [mount] keys...).\n"
	  "Exit status: 0 mounted; 1 failed (the reason on stderr); 2 usage.\n" },
	{ "umount", "Usage: blkfs umount MNT\n\n"
	  "Unmount, wait until the daemon has written every dirty block to its backend\n"
	  "and exited. Exit status: 0 all written back; 1 not a blkfs mount, busy, or\n"
	  "data could not be written (how much, on which device); 2 usage.\n" },
	{ "unmount", NULL },
	{ "attach", "Usage: blkfs attach MNT DEV\n\n"
	  "A loop device over MNT/DEV (sector size: its logical block); prints\n"
	  "/dev/loopN, and on stderr the geometry the loop hides and the mkfs options\n"
	  "that keep its alignment. Exit status: 0 attached; 1 failed; 2 usage.\n" },
	{ "detach", "Usage: blkfs detach /dev/loopN | MNT DEV\n\n"
	  "Remove a loop device over a blkfs device file. Exit status: 0 detached;\n"
	  "1 not such a loop device, or busy; 2 usage.\n" },
	{ "check", "Usage: blkfs check [-c CONFIG]\n\n"
	  "Parse CONFIG and open its backends without mounting; print each device's\n"
	  "geometry. Exit status: 0 valid; 1 a config error or a backend that would\n"
	  "not open; 2 usage.\n" },
	{ "stat", "Usage: blkfs stat MNT [DEV] [--json | --prometheus | -i SECONDS [COUNT]]\n\n"
	  "Counters of every device of the mount (added ones included), or of DEV:\n"
	  "user and backend bytes and I/Os, cache hits, dirty and cached bytes, errors,\n"
	  "backend write sizes, latency percentiles; --json for programs; --prometheus\n"
	  "in Prometheus's text format; -i: an iostat -x line per device and level every\n"
	  "SECONDS (COUNT times, or until SIGINT). Exit status: 0 printed; 1 not a\n"
	  "blkfs mount or no such device; 2 usage.\n" },
	{ "trace", "Usage: blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n\n"
	  "DEV's I/O in blktrace's format, to stdout (| blkparse -i -) or into\n"
	  "NAME.blktrace.0 (blkparse -i NAME, btt, iowatcher), until SIGINT or for\n"
	  "SECONDS; then says how many events it wrote and dropped. --fuse: the user's\n"
	  "requests as FUSE received them instead of the I/O below the cache.\n"
	  "Exit status: 0 traced; 1 refused, or a write of the trace failed; 2 usage.\n" },
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage, stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("blkfs %s\n", BLKFS_VERSION);
		return 0;
	}
	if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
		for (size_t c = 0; c < sizeof(cmd_help) / sizeof(cmd_help[0]); c++) {
			if (strcmp(argv[1], cmd_help[c].cmd))
				continue;
			fputs(cmd_help[c].help ? cmd_help[c].help : cmd_help[c - 1].help, stdout);
			return 0;
		}
	}
	if (!strcmp(argv[1], "mount"))
		return cmd_mount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount") || !strcmp(argv[1], "unmount"))
		return cmd_umount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "attach"))
		return bf_cmd_attach(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return bf_trace_client(argc - 1, argv + 1);
	if (!strcmp(argv[1], "crashcheck"))
		return bf_cmd_crashcheck(argc - 1, argv + 1);
	if (!strcmp(argv[1], "detach"))
		return bf_cmd_detach(argc - 1, argv + 1);
	for (size_t c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++)
		if (!strcmp(argv[1], ctl_cmds[c].verb))
			return cmd_ctl(argc - 1, argv + 1);
	/*
	 * `blkfs CONFIG MNT [-o OPTS]`: how mount.fuse3 runs blkfs for an fstab
	 * line `CONFIG MNT fuse.blkfs OPTS 0 0` (or `mount -t fuse.blkfs CONFIG
	 * MNT`): a mount with -c CONFIG. Taken when the first word names a file
	 * (or a path), so a mistyped command is still "unknown command".
	 */
	if (argc >= 3 && argv[1][0] != '-' && (strchr(argv[1], '/') || !access(argv[1], F_OK)))
		return cmd_mount_fstab(argc, argv);
	fprintf(stderr, "blkfs: unknown command '%s'\n%s", argv[1], usage);
	return 2;
}
