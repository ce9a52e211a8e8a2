/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd_probe.c - `blkfs probe-transport [-q] [--cached]`: measure FUSE
 * over io_uring against /dev/fuse on this machine, for transport = auto
 * (fuse/tprobe_rule.c decides from the numbers); and bf_tprobe_run(), which
 * a mounting daemon uses to run it as a child.
 *
 * Why measure: on this 2-vCPU guest the ring gave 0.84-0.91x of /dev/fuse
 * at QD32 on a quiet machine and up to 8x at QD1 under load; which wins
 * depends on the machine and on what else it runs.
 *
 * How: a private mount of a 64 MiB RAM device over each transport, three
 * rounds alternating which goes first, each mount 250 ms of QD1 pread,
 * QD1 pwrite and QD32 libaio (half reads, half writes), 4 KiB O_DIRECT at
 * random 4 KiB offsets; the median of the rounds per test and transport.
 * A worker process mounts and measures; this process is its watchdog
 * (20 s): when the worker fails or runs late it is killed, the private
 * mounts' FUSE connections aborted (a hung daemon would block the
 * unmount), the mounts detached, their daemons killed and the directory
 * removed. The result goes to $BLKFS_RUNDIR/transport-probe, written
 * atomically (rename), under flock of $BLKFS_RUNDIR/transport-probe.lock
 * so that two mounts never probe at once (they would measure each other).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd.h"
#include "tprobe.h"
#include "tprobe_rule.h"

extern char **environ;

#define PROBE_ROUNDS 3
#define PROBE_TEST_MS 250
#define PROBE_WARM_MS 30
#define PROBE_WATCHDOG_MS 20000
#define PROBE_LOCK_MS 30000	/* another probe holds the lock: its watchdog ends it first */
#define PROBE_DEV_SIZE (64ull << 20)
#define PROBE_BS 4096
#define PROBE_QD 32
#define URING_PARAM "/sys/module/fuse/parameters/enable_uring"

static const char *const tname[2] = { "dev", "uring" };

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int bf_enable_uring(void)
{
	char c = 0;
	int fd = open(URING_PARAM, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == 'Y' || c == 'y' || c == '1';
}

static int read_small(const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = 0;
	return (int)n;
}

/* This boot and kernel: what a cached result must have been measured under. */
static int boot_and_kernel(char *boot, size_t blen, char *rel, size_t rlen)
{
	struct utsname u;
	int n = read_small("/proc/sys/kernel/random/boot_id", boot, blen);

	if (n <= 0)
		return n < 0 ? n : -EIO;
	boot[strcspn(boot, "\n")] = 0;
	if (uname(&u))
		return -errno;
	snprintf(rel, rlen, "%s", u.release);
	return 0;
}

/* ------------------------------------------------------------ measuring */

struct probe_dirs {
	char top[PATH_MAX];		/* $BLKFS_RUNDIR/probe.XXXXXX */
	char run[PATH_MAX + 8];		/* the private mounts' run directory */
	char mnt[2][PATH_MAX + 16];	/* mount points, by transport */
	char conf[2][PATH_MAX + 16];
	char out[PATH_MAX + 16];	/* what the last mount or umount said */
};

static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static off_t rnd_off(uint64_t *s)
{
	return (off_t)(rnd_next(s) % (PROBE_DEV_SIZE / PROBE_BS)) * PROBE_BS;
}

/* QD1: one request at a time for @ms; IOPS, or -errno. */
static double run_qd1(int fd, bool wr, char *buf, unsigned ms, uint64_t *seed)
{
	uint64_t t0 = now_ns(), end = t0 + (uint64_t)ms * 1000000, ops = 0, t;
	ssize_t n;

	do {
		off_t off = rnd_off(seed);

		n = wr ? pwrite(fd, buf, PROBE_BS, off) : pread(fd, buf, PROBE_BS, off);
		if (n != PROBE_BS)
			return n < 0 ? -errno : -EIO;
		ops++;
		t = now_ns();
	} while (t < end);
	return (double)ops * 1e9 / (double)(t - t0);
}

static void prep(struct iocb *cb, int fd, char *buf, unsigned i, uint64_t *seed)
{
	if (i & 1)
		io_prep_pwrite(cb, fd, buf, PROBE_BS, rnd_off(seed));
	else
		io_prep_pread(cb, fd, buf, PROBE_BS, rnd_off(seed));
	cb->data = (void *)(uintptr_t)i;
}

/* QD32 with libaio, half reads and half writes, for @ms; IOPS, or -errno. */
static double run_qd32(int fd, char *bufs, unsigned ms, uint64_t *seed)
{
	struct iocb cbs[PROBE_QD], *cbp[PROBE_QD];
	struct io_event ev[PROBE_QD];
	io_context_t ctx = 0;
	uint64_t t0, end, ops = 0, t;
	unsigned i, inflight = 0;
	double iops = -EIO;
	int n, r;

	r = io_setup(PROBE_QD, &ctx);
	if (r)
		return r;
	for (i = 0; i < PROBE_QD; i++) {
		prep(&cbs[i], fd, bufs + (size_t)i * PROBE_BS, i, seed);
		cbp[i] = &cbs[i];
	}
	t0 = now_ns();
	end = t0 + (uint64_t)ms * 1000000;
	r = io_submit(ctx, PROBE_QD, cbp);
	if (r != PROBE_QD) {
		iops = r < 0 ? r : -EIO;
		inflight = r > 0 ? (unsigned)r : 0;
		goto out_drain;
	}
	inflight = PROBE_QD;
	t = t0;
	while (t < end) {
		struct timespec ts = { 1, 0 };

		n = io_getevents(ctx, 1, PROBE_QD, ev, &ts);
		if (n < 0 && n != -EINTR) {
			iops = n;
			goto out_drain;
		}
		t = now_ns();
		for (int k = 0; k < n; k++) {
			struct iocb *cb = ev[k].obj;

			inflight--;
			if (ev[k].res != PROBE_BS) {
				iops = -EIO;
				goto out_drain;
			}
			ops++;
			if (t >= end)
				continue;
			prep(cb, fd, (char *)cb->u.c.buf, (unsigned)(uintptr_t)cb->data, seed);
			r = io_submit(ctx, 1, &cb);
			if (r != 1) {
				iops = r < 0 ? r : -EIO;
				goto out_drain;
			}
			inflight++;
		}
	}
	iops = (double)ops * 1e9 / (double)(t - t0);
out_drain:
	while (inflight) {
		struct timespec ts = { 5, 0 };

		n = io_getevents(ctx, 1, PROBE_QD, ev, &ts);
		if (n <= 0)
			break;	/* the watchdog takes over */
		inflight -= (unsigned)n;
	}
	io_destroy(ctx);
	return iops;
}

/* Run `blkfs ARGS...` (this binary), its output into @pd->out; its exit status, or -errno. */
static int run_blkfs(const struct probe_dirs *pd, char *const args[])
{
	pid_t pid;
	int st, fd;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		fd = open(pd->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execv("/proc/self/exe", args);
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The first line of what the last command said, for a message. */
static const char *said(const struct probe_dirs *pd, char *buf, size_t len)
{
	if (read_small(pd->out, buf, len) <= 0)
		snprintf(buf, len, "(no message)");
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

/* One mount over transport @t: warm up, the three tests, unmount. */
static int measure_one(const struct probe_dirs *pd, int t, char *bufs, double iops[],
		       uint64_t *seed, int out_fd)
{
	char *mount_args[] = { "blkfs", "mount", (char *)pd->mnt[t], "-c", (char *)pd->conf[t], NULL };
	char *umount_args[] = { "blkfs", "umount", (char *)pd->mnt[t], NULL };
	char path[PATH_MAX + 32], msg[512];
	const char *test_mode = getenv("BLKFS_TPROBE_TEST");
	int fd, rc, i;

	rc = run_blkfs(pd, mount_args);
	if (rc) {
		dprintf(out_fd, "E mount over %s failed (%d): %s\n", tname[t], rc, said(pd, msg, sizeof(msg)));
		return -EIO;
	}
	snprintf(path, sizeof(path), "%s/r", pd->mnt[t]);
	fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		dprintf(out_fd, "E %s: %s\n", path, strerror(errno));
		run_blkfs(pd, umount_args);
		return -EIO;
	}
	/*
	 * BLKFS_TPROBE_TEST=fail: the worker fails here, its mount left
	 * live; =hang: it waits here for good, the file open. Both for the
	 * watchdog's cleanup (tests/integ/transport_probe.sh).
	 */
	if (test_mode && !strcmp(test_mode, "fail")) {
		dprintf(out_fd, "E made to fail by BLKFS_TPROBE_TEST, %s still mounted\n", pd->mnt[t]);
		return -EIO;
	}
	while (test_mode && !strcmp(test_mode, "hang"))
		pause();
	/* the first requests touch fresh ring and arena memory: not measured */
	if (run_qd1(fd, true, bufs, PROBE_WARM_MS, seed) < 0 ||
	    run_qd1(fd, false, bufs, PROBE_WARM_MS, seed) < 0)
		iops[0] = -EIO;
	else
		iops[0] = run_qd1(fd, false, bufs, PROBE_TEST_MS, seed);
	iops[1] = iops[0] < 0 ? -EIO : run_qd1(fd, true, bufs, PROBE_TEST_MS, seed);
	iops[2] = iops[1] < 0 ? -EIO : run_qd32(fd, bufs, PROBE_TEST_MS, seed);
	close(fd);
	for (i = 0; i < TPROBE_NR_TESTS; i++) {
		if (iops[i] < 0) {
			dprintf(out_fd, "E %s over %s: %s\n", tprobe_test_names[i], tname[t],
				strerror((int)-iops[i]));
			run_blkfs(pd, umount_args);
			return -EIO;
		}
	}
	rc = run_blkfs(pd, umount_args);
	if (rc) {
		dprintf(out_fd, "E umount over %s failed (%d): %s\n", tname[t], rc, said(pd, msg, sizeof(msg)));
		return -EIO;
	}
	return 0;
}

/* The worker: every round, each transport; "R ROUND T IOPS IOPS IOPS" lines to @out_fd. */
static int worker(const struct probe_dirs *pd, int out_fd)
{
	uint64_t seed = (uint64_t)now_ns() | 1;
	double iops[TPROBE_NR_TESTS];
	char *bufs;
	int round, k, t;

	setenv("BLKFS_RUNDIR", pd->run, 1);
	if (posix_memalign((void **)&bufs, PROBE_BS, (size_t)PROBE_QD * PROBE_BS)) {
		dprintf(out_fd, "E out of memory\n");
		return 1;
	}
	memset(bufs, 0x5a, (size_t)PROBE_QD * PROBE_BS);
	for (round = 0; round < PROBE_ROUNDS; round++) {
		for (k = 0; k < 2; k++) {
			/* alternate which goes first: a drift of the machine hits both */
			t = (round + k) % 2;
			if (measure_one(pd, t, bufs, iops, &seed, out_fd))
				return 1;
			dprintf(out_fd, "R %d %d %.0f %.0f %.0f\n", round, t, iops[0], iops[1], iops[2]);
		}
	}
	return 0;
}

static int write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) ? -errno : 0;
}

static int dirs_make(struct probe_dirs *pd, const char *rundir)
{
	static const char dev[] = "[device r]\nbackend = ram\nsize = 64M\n"
				  "logical_block_size = 4096\nphysical_block_size = 4096\n";
	char text[512];
	char path[sizeof(pd->mnt[0])];
	int t;

	_Static_assert(sizeof(pd->mnt[0]) == sizeof(pd->conf[0]), "one buffer for both");
	snprintf(pd->top, sizeof(pd->top), "%s/probe.XXXXXX", rundir);
	if (!mkdtemp(pd->top))
		return -errno;
	snprintf(pd->run, sizeof(pd->run), "%s/run", pd->top);
	snprintf(pd->out, sizeof(pd->out), "%s/out", pd->top);
	if (mkdir(pd->run, 0700))
		return -errno;
	for (t = 0; t < 2; t++) {
		/*
		 * Through a buffer of the same size: writing pd->mnt[t] from
		 * pd->top is fine, but gcc -O1 (the sanitizer build) cannot
		 * tell the two members apart under -Wrestrict.
		 */
		snprintf(path, sizeof(path), "%s/mnt-%s", pd->top, tname[t]);
		memcpy(pd->mnt[t], path, sizeof(path));
		snprintf(path, sizeof(path), "%s/%s.conf", pd->top, tname[t]);
		memcpy(pd->conf[t], path, sizeof(path));
		if (mkdir(pd->mnt[t], 0700))
			return -errno;
		/* a small cache: O_DIRECT bypasses it, and its pool is filled at mount */
		snprintf(text, sizeof(text), "[cache]\nsize = 8M\n\n[mount]\ntransport = %s\n"
			 "transport_probe = off\n\n%s", tname[t], dev);
		if (write_text(pd->conf[t], text))
			return -errno;
	}
	return 0;
}

/* Is @mnt a mount point (mountinfo, never a stat: it may hang)? Its device number in *@dev. */
static bool mounted_at(const char *mnt, unsigned *maj, unsigned *min)
{
	char line[4096], mp[PATH_MAX];
	bool found = false;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned a, b;

		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &a, &b, mp) == 3 && !strcmp(mp, mnt)) {
			*maj = a;
			*min = b;
			found = true;	/* the last one: on top */
		}
	}
	fclose(f);
	return found;
}

static void abort_conn(unsigned maj, unsigned min)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/abort", (maj << 20) | min);
	if (access(path, F_OK))
		mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, NULL);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "1", 1) < 0) {
			/* nothing more to do: the detach below still ends the mount */
		}
		close(fd);
	}
}

/* Kill the daemon of every pid file in the private run directory. */
static void kill_daemons(const struct probe_dirs *pd)
{
	char path[2 * PATH_MAX], buf[32];
	struct dirent *de;
	DIR *d = opendir(pd->run);

	if (!d)
		return;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		long pid;

		if (n < 5 || strcmp(de->d_name + n - 4, ".pid"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", pd->run, de->d_name);
		if (read_small(path, buf, sizeof(buf)) <= 0)
			continue;
		pid = strtol(buf, NULL, 10);
		if (pid > 1)
			kill((pid_t)pid, SIGKILL);
	}
	closedir(d);
}

static void rm_tree(const char *dir)
{
	char path[2 * PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(dir);

	if (d) {
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (de->d_type == DT_DIR)
				rm_tree(path);
			else
				unlink(path);
		}
		closedir(d);
	}
	rmdir(dir);
}

/* Whatever state the worker left: no mount, no daemon, no directory. */
static void dirs_clean(const struct probe_dirs *pd)
{
	unsigned maj, min;
	int t, tries;

	for (t = 0; t < 2; t++) {
		for (tries = 0; tries < 4 && mounted_at(pd->mnt[t], &maj, &min); tries++) {
			/* abort first: a hung daemon would hold the unmount */
			abort_conn(maj, min);
			umount2(pd->mnt[t], MNT_DETACH);
		}
	}
	kill_daemons(pd);
	rm_tree(pd->top);
}

static volatile sig_atomic_t probe_stop;

static void on_stop(int sig)
{
	probe_stop = sig;
}

static double median3(double a, double b, double c)
{
	if (a > b) {
		double x = a;

		a = b;
		b = x;
	}
	/* a <= b */
	return c <= a ? a : c >= b ? b : c;
}

/*
 * Run the worker under the watchdog. Returns 0 with @r filled, or -errno
 * with @why set.
 */
static int measure(const char *rundir, struct tprobe_result *r, char *why, size_t wlen)
{
	double v[PROBE_ROUNDS][2][TPROBE_NR_TESTS];
	bool got[PROBE_ROUNDS][2] = { { false } };
	struct sigaction sa = { .sa_handler = on_stop }, old_term, old_int;
	struct probe_dirs pd;
	const char *test_mode;
	unsigned wd_ms;
	uint64_t deadline;
	char buf[4096], line[1024];
	size_t have = 0;
	int p[2], ret, st, i, t;
	pid_t pid;

	memset(&pd, 0, sizeof(pd));
	memset(v, 0, sizeof(v));
	ret = dirs_make(&pd, rundir);
	if (ret) {
		snprintf(why, wlen, "cannot make the probe's directory in %s: %s", rundir, strerror(-ret));
		if (pd.top[0] && strcmp(pd.top + strlen(pd.top) - 6, "XXXXXX"))
			rm_tree(pd.top);
		return ret;
	}
	if (pipe2(p, O_CLOEXEC)) {
		ret = -errno;
		snprintf(why, wlen, "pipe: %s", strerror(-ret));
		goto out_clean;
	}
	/* no SA_RESTART: a SIGTERM wakes the poll below, which cleans up */
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGINT, &sa, &old_int);
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		snprintf(why, wlen, "fork: %s", strerror(-ret));
		close(p[0]);
		close(p[1]);
		goto out_sig;
	}
	if (!pid) {
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		close(p[0]);
		_exit(worker(&pd, p[1]));
	}
	close(p[1]);
	/* a test of the watchdog need not wait its whole time */
	test_mode = getenv("BLKFS_TPROBE_TEST");
	wd_ms = test_mode && !strcmp(test_mode, "hang") ? 3000 : PROBE_WATCHDOG_MS;
	deadline = now_ms() + wd_ms;
	why[0] = 0;
	for (;;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		uint64_t now = now_ms();
		ssize_t n;
		char *nl;

		if (probe_stop) {
			snprintf(why, wlen, "stopped by %s", strsignal(probe_stop));
			ret = -EINTR;
			break;
		}
		if (now >= deadline) {
			snprintf(why, wlen, "not done within the watchdog's %u s", wd_ms / 1000);
			ret = -ETIMEDOUT;
			break;
		}
		if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
			continue;
		n = read(p[0], buf + have, sizeof(buf) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = 0;	/* the worker ended: its status says how */
			break;
		}
		have += (size_t)n;
		buf[have] = 0;
		while ((nl = strchr(buf, '\n'))) {
			int round, tt;
			double a, b, c;

			size_t len = (size_t)(nl - buf);

			*nl = 0;
			memcpy(line, buf, len < sizeof(line) ? len + 1 : sizeof(line));
			line[sizeof(line) - 1] = 0;
			memmove(buf, nl + 1, have - len);	/* the rest, its NUL included */
			have -= len + 1;
			if (line[0] == 'E' && !why[0]) {
				snprintf(why, wlen, "%.400s", line + 2);
			} else if (sscanf(line, "R %d %d %lf %lf %lf", &round, &tt, &a, &b, &c) == 5 &&
				   round >= 0 && round < PROBE_ROUNDS && (tt == 0 || tt == 1)) {
				v[round][tt][0] = a;
				v[round][tt][1] = b;
				v[round][tt][2] = c;
				got[round][tt] = true;
			}
		}
		if (have == sizeof(buf) - 1)
			have = 0;	/* a line longer than any the worker writes: dropped */
	}
	close(p[0]);
	if (ret) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	} else if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		ret = -EIO;
		if (!why[0])
			snprintf(why, wlen, "the worker failed");
	}
	for (i = 0; !ret && i < PROBE_ROUNDS; i++)
		for (t = 0; t < 2; t++)
			if (!got[i][t]) {
				ret = -EIO;
				snprintf(why, wlen, "round %d over %s not measured", i + 1, tname[t]);
			}
	if (!ret) {
		memset(r, 0, sizeof(*r));
		for (i = 0; i < TPROBE_NR_TESTS; i++) {
			r->dev_iops[i] = median3(v[0][0][i], v[1][0][i], v[2][0][i]);
			r->ring_iops[i] = median3(v[0][1][i], v[1][1][i], v[2][1][i]);
		}
		tprobe_choose(r);
	}
out_sig:
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGINT, &old_int, NULL);
out_clean:
	dirs_clean(&pd);
	return ret;
}

/* ------------------------------------------------------------ the command */

static void print_result(const struct tprobe_result *r, bool cached, bool quiet)
{
	char ratios[64];
	int i;

	if (quiet) {
		printf("%s %s %s\n", r->ring ? "uring" : "dev", cached ? "cached" : "measured",
		       tprobe_ratios_str(r, ratios, sizeof(ratios)));
		return;
	}
	printf("source: %s\n", cached ? "cached (measured this boot)" : "measured");
	printf("%-10s %12s %12s %9s\n", "test", "dev IOPS", "uring IOPS", "ring/dev");
	for (i = 0; i < TPROBE_NR_TESTS; i++)
		printf("%-10s %12.0f %12.0f %9.3f\n", tprobe_test_names[i], r->dev_iops[i],
		       r->ring_iops[i], r->ratio[i]);
	printf("geomean ring/dev %.3f (the ring needs >= %.2f)\n", r->geomean,
	       TPROBE_RING_MIN_GEOMEAN);
	printf("choice: %s\n", r->ring ? "uring" : "dev");
}

/* The cached result, if it is valid for this boot and kernel. */
static bool cache_read(const char *path, const char *rel, const char *boot, struct tprobe_result *r)
{
	char buf[2048];

	if (read_small(path, buf, sizeof(buf)) <= 0)
		return false;
	return !tprobe_cache_parse(buf, rel, boot, r);
}

static int cache_write(const char *path, const char *rel, const char *boot,
		       const struct tprobe_result *r)
{
	char buf[2048], tmp[PATH_MAX + 16];
	int n, fd, ret = 0;

	n = tprobe_cache_format(r, rel, boot, buf, sizeof(buf));
	if (n < 0)
		return n;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, (size_t)n) != n)
		ret = -EIO;
	if (close(fd) && !ret)
		ret = -errno;
	/* a reader sees the old file or the whole new one, never a part */
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret)
		unlink(tmp);
	return ret;
}

/* flock the probe's lock, waiting for another probe at most PROBE_LOCK_MS. */
static int lock_probe(const char *path)
{
	uint64_t end = now_ms() + PROBE_LOCK_MS;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX | LOCK_NB)) {
		if (errno != EWOULDBLOCK || now_ms() >= end) {
			int ret = errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;

			close(fd);
			return ret;
		}
		usleep(50000);
	}
	return fd;
}

int bf_cmd_probe(int argc, char **argv)
{
	char cache[PATH_MAX], lock[PATH_MAX], boot[64], rel[256], why[512];
	const char *rundir = bf_rundir();
	struct tprobe_result r;
	bool quiet = false, cached = false;
	int i, on, fd, ret;

	/*
	 * Run by a mounting daemon, this process may have inherited its open
	 * files (a backend's device): the private mounts' daemons must not
	 * hold them.
	 */
	closefrom(3);
	memset(&r, 0, sizeof(r));
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-q")) {
			quiet = true;
		} else if (!strcmp(argv[i], "--cached")) {
			cached = true;
		} else {
			fprintf(stderr, "blkfs probe-transport: unknown argument '%s'\n%s", argv[i], bf_usage);
			return 2;
		}
	}
	on = bf_enable_uring();
	if (on != 1) {
		/* nothing to measure: the kernel's switch is its owner's, not ours to flip */
		if (quiet)
			printf("dev no_ring -\n");
		else
			printf("choice: dev (kernel offers no ring: %s)\n",
			       on < 0 ? "this kernel has no " URING_PARAM : URING_PARAM " is N");
		return 0;
	}
	ret = boot_and_kernel(boot, sizeof(boot), rel, sizeof(rel));
	if (ret) {
		fprintf(stderr, "blkfs probe-transport: cannot read this boot's id: %s\n", strerror(-ret));
		return 1;
	}
	ret = bf_mkdir_p(rundir);
	if (ret) {
		fprintf(stderr, "blkfs probe-transport: %s: %s\n", rundir, strerror(-ret));
		return 1;
	}
	snprintf(cache, sizeof(cache), "%s/transport-probe", rundir);
	snprintf(lock, sizeof(lock), "%s/transport-probe.lock", rundir);
	if (cached && cache_read(cache, rel, boot, &r)) {
		print_result(&r, true, quiet);
		return 0;
	}
	fd = lock_probe(lock);
	if (fd < 0) {
		fprintf(stderr, "blkfs probe-transport: %s: %s\n", lock,
			fd == -ETIMEDOUT ? "another probe holds it" : strerror(-fd));
		return 1;
	}
	/* another mount may have probed while this one waited for the lock */
	if (cached && cache_read(cache, rel, boot, &r)) {
		close(fd);
		print_result(&r, true, quiet);
		return 0;
	}
	ret = measure(rundir, &r, why, sizeof(why));
	if (ret) {
		close(fd);
		fprintf(stderr, "blkfs probe-transport: %s\n", why);
		return 1;
	}
	ret = cache_write(cache, rel, boot, &r);
	close(fd);
	if (ret)
		fprintf(stderr, "blkfs probe-transport: %s: %s (the result is not cached)\n", cache,
			strerror(-ret));
	print_result(&r, false, quiet);
	return 0;
}

/* ------------------------------------------------------------ at mount */

int bf_tprobe_run(bool cached, unsigned limit_ms, char *choice, size_t clen, char *detail,
		  size_t dlen)
{
	char *args[] = { "blkfs", "probe-transport", "-q", cached ? "--cached" : NULL, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t sa;
	sigset_t none, all;
	char out[1024] = "", src[32], c[16], rat[128];
	uint64_t deadline;
	size_t have = 0;
	int p[2], st, ret;
	bool timed_out = false;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return snprintf(detail, dlen, "pipe: %s", strerror(errno)), -EIO;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDERR_FILENO);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	/* the caller's blocked or caught signals are not the probe's: SIGTERM must reach it */
	posix_spawnattr_init(&sa);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&sa, &none);
	posix_spawnattr_setsigdefault(&sa, &all);
	posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	ret = posix_spawn(&pid, "/proc/self/exe", &fa, &sa, args, environ);
	posix_spawnattr_destroy(&sa);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (ret) {
		close(p[0]);
		snprintf(detail, dlen, "cannot run blkfs probe-transport: %s", strerror(ret));
		return -ret;
	}
	deadline = now_ms() + limit_ms;
	for (;;) {
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		uint64_t now = now_ms();
		ssize_t n;

		if (now >= deadline) {
			timed_out = true;
			break;
		}
		if (poll(&pfd, 1, (int)(deadline - now)) <= 0)
			continue;
		n = read(p[0], out + have, sizeof(out) - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		out[have] = 0;
		if (have == sizeof(out) - 1)
			break;
	}
	close(p[0]);
	if (timed_out) {
		/* SIGTERM first: the probe then cleans its mounts up itself */
		kill(pid, SIGTERM);
		for (int i = 0; i < 100 && waitpid(pid, &st, WNOHANG) == 0; i++)
			usleep(50000);
		if (waitpid(pid, &st, WNOHANG) == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
		}
		snprintf(detail, dlen, "timeout after %u s", limit_ms / 1000);
		return -ETIMEDOUT;
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			break;
	out[strcspn(out, "\n")] = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) ||
	    sscanf(out, "%15s %31s %127s", c, src, rat) != 3 ||
	    (strcmp(c, "uring") && strcmp(c, "dev"))) {
		snprintf(detail, dlen, "probe failed: %s", out[0] ? out : "(no output)");
		return -EIO;
	}
	snprintf(choice, clen, "%s", c);
	if (!strcmp(src, "cached"))
		snprintf(detail, dlen, "cached");
	else if (!strcmp(src, "no_ring"))
		snprintf(detail, dlen, "no_ring");
	else
		snprintf(detail, dlen, "%s", rat);
	return 0;
}
