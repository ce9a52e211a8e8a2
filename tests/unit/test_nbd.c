// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_nbd.c - the nbd backend (libnbd) through the contract
 * (backend.h), against a real nbdkit that each test starts on a Unix socket
 * in its own temp dir (fork/exec; killed and the dir removed in the
 * fixture's teardown, and --exit-with-parent if the test dies). Filters
 * shape the server: blocksize-policy for odd geometry (with
 * blocksize-error-policy=error, so one misaligned or oversized command
 * fails the test), error for injected EIO, delay for latency, nozero and
 * multi-conn to take features away. Killing, stopping and restarting the
 * server checks the failure paths: in-flight I/O fails with EIO, nothing
 * hangs, and the backend reconnects. Skipped where nbdkit is not installed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <libnbd.h>

#include "../../backends/backend.h"
#include "async_backend.h"
#include "helpers.h"

/* Wait (at most @secs) until stat @name reaches @want. */
/* How long a wait for something that must happen gives up after (helpers.h). */
#define WAIT_S (WAIT_MS / 1000)

static void wait_stat(struct blk_backend *be, const char *name, uint64_t want, double secs)
{
	double end = now_s() + secs;

	while (stat_get(be, name) < want) {
		cr_assert(now_s() < end, "%s stayed at %llu (want %llu) for %.1f s", name,
			  (unsigned long long)stat_get(be, name), (unsigned long long)want, secs);
		usleep(20000);
	}
}

/* ---- the server: nbdkit on a Unix socket in this test's temp dir ---- */

static char tdir[64];		/* removed by teardown */
static char sock[96];		/* tdir/sock */
static pid_t srv_pid;		/* killed by teardown */
static char *srv_args[32];	/* what srv_restart() starts again */
static int srv_nargs;

static bool have_nbdkit(void)
{
	return system("command -v nbdkit >/dev/null 2>&1") == 0;
}

static void fixture_setup(void)
{
	srv_pid = 0;
	srv_nargs = 0;
	snprintf(tdir, sizeof(tdir), "/tmp/blkfs-nbd-XXXXXX");
	if (!mkdtemp(tdir)) {
		tdir[0] = '\0';
		return;
	}
	snprintf(sock, sizeof(sock), "%s/sock", tdir);
}

/* The server's state letter in /proc (R, S, T...). */
static char srv_state(void)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)srv_pid);
	f = fopen(path, "r");
	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] && p[2] ? p[2] : '?';
}

static void srv_kill(int sig)
{
	if (srv_pid <= 0)
		return;
	kill(srv_pid, sig);
	if (sig == SIGSTOP) {
		double end = now_s() + WAIT_S;

		/* kill() returns before every thread has stopped. */
		while (srv_state() != 'T' && now_s() < end)
			usleep(1000);
		cr_assert_eq(srv_state(), 'T', "nbdkit %d in state %c %d s after SIGSTOP",
			     (int)srv_pid, srv_state(), WAIT_S);
		usleep(10000);
	}
	if (sig == SIGKILL || sig == SIGTERM) {
		waitpid(srv_pid, NULL, 0);
		srv_pid = 0;
		/* nbdkit does not take over a stale socket. */
		unlink(sock);
	}
}

/* Stop the server and forget its arguments: the next srv_start() is a new one. */
static void srv_reset(void)
{
	int i;

	if (srv_pid > 0) {
		kill(srv_pid, SIGCONT);
		srv_kill(SIGKILL);
	}
	for (i = 0; i < srv_nargs; i++)
		free(srv_args[i]);
	srv_nargs = 0;
}

static void fixture_teardown(void)
{
	char cmd[256];
	int st;

	srv_reset();
	if (tdir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
		st = system(cmd);
		(void)st;
		tdir[0] = '\0';
	}
}

static bool sock_accepts(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	ok = fd >= 0 && !connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Start nbdkit with srv_args; wait until the socket accepts. */
static void srv_exec(void)
{
	char *argv[48], log[256];
	int n = 0, i;
	double end;

	argv[n++] = "nbdkit";
	argv[n++] = "--unix";
	argv[n++] = sock;
	argv[n++] = "--foreground";
	argv[n++] = "--exit-with-parent";
	for (i = 0; i < srv_nargs; i++)
		argv[n++] = srv_args[i];
	argv[n] = NULL;
	snprintf(log, sizeof(log), "%s/nbdkit.log", tdir);

	srv_pid = fork();
	cr_assert(srv_pid >= 0);
	if (!srv_pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp("nbdkit", argv);
		_exit(127);
	}
	end = now_s() + WAIT_S;
	while (!sock_accepts()) {
		int st;

		if (waitpid(srv_pid, &st, WNOHANG) == srv_pid) {
			srv_pid = 0;
			cr_assert_fail("nbdkit exited at start (see %s)", log);
		}
		cr_assert(now_s() < end, "nbdkit did not listen on %s", sock);
		usleep(10000);
	}
}

/* srv_start("--filter=delay", "memory", "64M", "delay-write=10ms", NULL) */
static void srv_start(const char *arg, ...)
{
	va_list ap;

	if (!have_nbdkit())
		cr_skip_test("nbdkit is not installed");
	cr_assert(tdir[0], "no temp dir");
	va_start(ap, arg);
	for (; arg; arg = va_arg(ap, const char *)) {
		cr_assert(srv_nargs < 30);
		srv_args[srv_nargs++] = strdup(arg);
	}
	va_end(ap);
	srv_exec();
}

/* The same server again, on the same socket (a memory plugin starts empty). */
static void srv_restart(void)
{
	cr_assert_eq(srv_pid, 0);
	srv_exec();
}

/* ---- hand-built params, as core/ hands them over after parsing a config ---- */

/* A [device remote0] in "blkfs.conf". */
static void td_init_nbd(struct test_dev *td)
{
	td_init(td, "nbd", "blkfs.conf", "remote0");
}

static void td_uri(struct test_dev *td)
{
	td_set(td, "uri", "nbd+unix:///?socket=%s", sock);
}

/* A plain memory server of @size and a backend on it, with @key=@val pairs. */
static struct blk_backend *open_plain(struct test_dev *td, const char *k1, const char *v1)
{
	srv_start("memory", "64M", NULL);
	td_init_nbd(td);
	td_uri(td);
	if (k1)
		td_set(td, k1, "%s", v1);
	return td_open_ok(td);
}

TestSuite(nbd, .init = fixture_setup, .fini = fixture_teardown, .timeout = 180);

/* ---- open, config, geometry ---- */

Test(nbd, registered)
{
	const struct blk_backend_ops *ops = blk_backend_find("nbd");
	const char *const *k;
	bool uri = false, conns = false, qd = false, tmo = false;

	cr_assert_not_null(ops);
	cr_assert_str_eq(ops->name, "nbd");
	cr_assert(!ops->is_filter);
	cr_assert(strstr(blk_backend_names(), "nbd"));
	for (k = ops->keys; *k; k++) {
		uri |= !strcmp(*k, "uri");
		conns |= !strcmp(*k, "connections");
		qd |= !strcmp(*k, "queue_depth");
		tmo |= !strcmp(*k, "timeout");
	}
	cr_assert(uri && conns && qd && tmo);
}

Test(nbd, bad_keys)
{
	static const char *const bad_qd[] = { "0", "1025", "abc", "-1", "8x", "" };
	static const char *const bad_tmo[] = { "abc", "-1", "5x", "5 s", "1.5s" };
	static const char *const far_tmo[] = { "0", "5ms", "9999us", "25h", "99999999999" };
	struct test_dev td;
	size_t i;

	cr_assert(tdir[0]);
	td_init_nbd(&td);
	td_open_fails(&td, "uri", "missing (required", NULL);
	for (i = 0; i < sizeof(bad_qd) / sizeof(bad_qd[0]); i++) {
		td_init_nbd(&td);
		td_set(&td, "uri", "nbd+unix:///?socket=%s", sock);
		td_set(&td, "queue_depth", "%s", bad_qd[i]);
		td_open_fails(&td, "queue_depth", "is not a number from 1 to 1024", NULL);
	}
	td_init_nbd(&td);
	td_set(&td, "uri", "nbd+unix:///?socket=%s", sock);
	td_set(&td, "connections", "17");
	td_open_fails(&td, "connections", "is not a number from 1 to 16", NULL);
	for (i = 0; i < sizeof(bad_tmo) / sizeof(bad_tmo[0]); i++) {
		td_init_nbd(&td);
		td_set(&td, "uri", "nbd+unix:///?socket=%s", sock);
		td_set(&td, "timeout", "%s", bad_tmo[i]);
		td_open_fails(&td, "timeout", "is not a duration", NULL);
	}
	for (i = 0; i < sizeof(far_tmo) / sizeof(far_tmo[0]); i++) {
		td_init_nbd(&td);
		td_set(&td, "uri", "nbd+unix:///?socket=%s", sock);
		td_set(&td, "timeout", "%s", far_tmo[i]);
		td_open_fails(&td, "timeout", "is out of range (allowed: 10ms..24h", NULL);
	}
	td_init_nbd(&td);
	td_set(&td, "uri", "nbd+unix:///?socket=%s", sock);
	td_set(&td, "timeout", "10500us");
	td_open_fails(&td, "timeout", "is finer than 1ms", NULL);
}

Test(nbd, no_server)
{
	struct test_dev td;
	double t0 = now_s();

	cr_assert(tdir[0]);
	td_init_nbd(&td);
	td_uri(&td);
	td_open_fails(&td, "uri", "cannot connect to nbd+unix:///?socket=", sock, NULL);
	td_init_nbd(&td);
	td_set(&td, "uri", "not a uri");
	cr_assert(IS_ERR(td_open(&td)));
	cr_assert(strstr(td.err, "blkfs.conf:5: uri: "), "%s", td.err);
	cr_assert(now_s() - t0 < 20, "open took %.1f s", now_s() - t0);
}

/* A server that accepts but never answers: open gives up after `timeout`. */
Test(nbd, open_times_out)
{
	struct test_dev td;
	double t0;

	srv_start("memory", "64M", NULL);
	srv_kill(SIGSTOP);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "timeout", "300ms");
	t0 = now_s();
	td_open_fails(&td, "uri", "no answer within 300 ms", NULL);
	cr_assert(now_s() - t0 < 0.3 + 20, "open took %.1f s", now_s() - t0);
	kill(srv_pid, SIGCONT);
}

Test(nbd, geometry_plain)
{
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, NULL, NULL);
	struct blk_geometry g;

	be->ops->geometry(be, &g);
	/* nbdkit's memory plugin sends no block sizes: 512, and 32M requests. */
	cr_assert_eq(g.size, 64 * MiB);
	cr_assert_eq(g.lbs, 512);
	cr_assert_eq(g.pbs, 512);
	cr_assert_eq(g.max_io, 32 * MiB);
	cr_assert_eq(g.io_min, 512);
	cr_assert_eq(g.io_opt, 32 * MiB);
	cr_assert_eq(g.dma_align, 1);
	cr_assert_eq(stat_get(be, "nbd_connections"), 1);
	cr_assert_eq(stat_get(be, "nbd_connected"), 1);
	cr_assert_eq(stat_get(be, "nbd_queue_depth"), 64);
	cr_assert_eq(stat_get(be, "nbd_timeout_ms"), 5000);
	cr_assert_eq(stat_get(be, "nbd_can_flush"), 1);
	cr_assert_eq(stat_get(be, "nbd_can_zero"), 1);
	be->ops->close(be);
}

static void srv_start_policy(const char *min, const char *pref, const char *max)
{
	char a[3][64];

	snprintf(a[0], sizeof(a[0]), "blocksize-minimum=%s", min);
	snprintf(a[1], sizeof(a[1]), "blocksize-preferred=%s", pref);
	snprintf(a[2], sizeof(a[2]), "blocksize-maximum=%s", max);
	/* error: a command the advertised sizes do not allow fails (EINVAL). */
	srv_start("--filter=blocksize-policy", "memory", "64M", a[0], a[1], a[2],
		  "blocksize-error-policy=error", NULL);
}

Test(nbd, geometry_from_server)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	srv_start_policy("4096", "16384", "1M");
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 64 * MiB);
	cr_assert_eq(g.lbs, 4096);
	cr_assert_eq(g.pbs, 16384);
	cr_assert_eq(g.max_io, 1 * MiB);
	cr_assert_eq(g.io_min, 16384);
	cr_assert_eq(stat_get(be, "nbd_block_min"), 4096);
	cr_assert_eq(stat_get(be, "nbd_block_preferred"), 16384);
	cr_assert_eq(stat_get(be, "nbd_block_max"), 1 * MiB);
	be->ops->close(be);

	/* What the config may say: the same, or tighter. */
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "size", "64M");
	td_set(&td, "logical_block_size", "4096");
	td_set(&td, "physical_block_size", "16384");
	td_set(&td, "max_io", "256K");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.max_io, 256 * KiB);
	cr_assert_eq(g.io_opt, 256 * KiB);
	be->ops->close(be);

	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "logical_block_size", "8192");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.lbs, 8192);
	cr_assert_eq(g.pbs, 16384);
	be->ops->close(be);
}

/* A config that contradicts the server: refused, naming both values. */
Test(nbd, geometry_contradictions)
{
	struct test_dev td;

	srv_start_policy("4096", "4096", "1M");
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "logical_block_size", "512");
	td_open_fails(&td, "logical_block_size", "config says 512",
		      "the server's minimum block size is 4096", NULL);

	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "size", "32M");
	td_open_fails(&td, "size", "config says 33554432", "has 67108864 bytes", NULL);

	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "max_io", "2M");
	td_open_fails(&td, "max_io", "config says 2097152",
		      "the server takes at most 1048576 bytes per request", NULL);

	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "physical_block_size", "4096");
	td_set(&td, "max_io", "6K");
	td_open_fails(&td, "max_io", "6144 is not a multiple of the physical block size (4096)",
		      NULL);

	/* Above the backend's own 32M limit on a server with none. */
	srv_reset();
	srv_start("memory", "128M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "max_io", "64M");
	td_open_fails(&td, "max_io", "config says 67108864", "at most 33554432",
		      "the nbd backend's limit", NULL);
}

Test(nbd, geometry_refused)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	/*
	 * A physical block larger than the server takes in one request.
	 * (A minimum block above 64K, which blkfs refuses too, is one nbdkit
	 * itself will not advertise.)
	 */
	srv_start_policy("4096", "4096", "4096");
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "physical_block_size", "16384");
	td_open_fails(&td, "physical_block_size", "config says 16384",
		      "the server takes at most 4096 bytes per request", NULL);
	srv_reset();

	/* Read-only. */
	srv_start("--readonly", "memory", "64M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_open_fails(&td, "uri", "read-only", NULL);
	srv_reset();

	/* Less than one block; a size that is not whole blocks is cut. */
	srv_start("memory", "500", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_open_fails(&td, "uri", "has 500 bytes, less than one logical block (512)", NULL);
	srv_reset();
	srv_start("memory", "1049000", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1048576);
	be->ops->close(be);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "size", "1049000");
	td_open_fails(&td, "size", "config says 1049000",
		      "has 1048576 bytes (rounded down to the logical block size)", NULL);
}

/* ---- data ---- */

Test(nbd, write_read_multi_segment)
{
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, NULL, NULL);
	unsigned char *a = malloc(64 * KiB), *b = malloc(64 * KiB), *c = malloc(64 * KiB);
	unsigned char *want = malloc(192 * KiB), *got = malloc(192 * KiB);
	struct iovec iov[3];
	uint64_t cmds;

	/* Three separate buffers: three commands, no copy. */
	fill_pattern(want, 192 * KiB, 1 * MiB, 1);
	memcpy(a, want, 64 * KiB);
	memcpy(b, want + 64 * KiB, 64 * KiB);
	memcpy(c, want + 128 * KiB, 64 * KiB);
	iov[0] = (struct iovec){ a, 64 * KiB };
	iov[1] = (struct iovec){ b, 64 * KiB };
	iov[2] = (struct iovec){ c, 64 * KiB };
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_WRITE, 1 * MiB, 192 * KiB, iov, 3), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 3);

	/* Read back as one buffer cut in adjacent slices: one command. */
	memset(got, 0, 192 * KiB);
	iov[0] = (struct iovec){ got, 4 * KiB };
	iov[1] = (struct iovec){ got + 4 * KiB, 60 * KiB };
	iov[2] = (struct iovec){ got + 64 * KiB, 128 * KiB };
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_READ, 1 * MiB, 192 * KiB, iov, 3), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 1);
	cr_assert_eq(memcmp(got, want, 192 * KiB), 0);

	/* Odd slices of separate buffers (512-byte units) read back too. */
	memset(a, 0, 64 * KiB);
	memset(b, 0, 64 * KiB);
	memset(c, 0, 64 * KiB);
	free(c);
	c = malloc(128 * KiB);
	iov[0] = (struct iovec){ a, 512 };
	iov[1] = (struct iovec){ b, 64 * KiB - 512 };
	iov[2] = (struct iovec){ c, 128 * KiB };
	cr_assert_eq(do_io(be, BLK_READ, 1 * MiB, 192 * KiB, iov, 3), 0);
	cr_assert_eq(memcmp(a, want, 512), 0);
	cr_assert_eq(memcmp(b, want + 512, 64 * KiB - 512), 0);
	cr_assert_eq(memcmp(c, want + 64 * KiB, 128 * KiB), 0);

	/* Never written: zeros. The last block of the device. */
	cr_assert_eq(do_rw(be, BLK_READ, 32 * MiB, got, 64 * KiB), 0);
	cr_assert(all_zero(got, 64 * KiB));
	fill_pattern(want, 512, 64 * MiB - 512, 2);
	cr_assert_eq(do_rw(be, BLK_WRITE, 64 * MiB - 512, want, 512), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 64 * MiB - 512, got, 512), 0);
	cr_assert_eq(memcmp(got, want, 512), 0);
	cr_assert_eq(stat_get(be, "nbd_bounced"), 0);
	cr_assert_eq(stat_get(be, "nbd_errors"), 0);
	be->ops->close(be);
	free(a);
	free(b);
	free(c);
	free(want);
	free(got);
}

/*
 * A 32M I/O (max_io) goes as commands of at most 4M, several in flight:
 * three 10M/10M/12M buffers make 3 + 3 + 3 commands; one 32M buffer 8.
 */
Test(nbd, large_io_in_4m_commands)
{
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, NULL, NULL);
	unsigned char *want = malloc(32 * MiB), *a = malloc(10 * MiB), *b = malloc(10 * MiB);
	unsigned char *c = malloc(12 * MiB), *got = malloc(32 * MiB);
	struct iovec iov[3];
	uint64_t cmds;

	fill_pattern(want, 32 * MiB, 0, 15);
	memcpy(a, want, 10 * MiB);
	memcpy(b, want + 10 * MiB, 10 * MiB);
	memcpy(c, want + 20 * MiB, 12 * MiB);
	iov[0] = (struct iovec){ a, 10 * MiB };
	iov[1] = (struct iovec){ b, 10 * MiB };
	iov[2] = (struct iovec){ c, 12 * MiB };
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_WRITE, 16 * MiB, 32 * MiB, iov, 3), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 9);
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_rw(be, BLK_READ, 16 * MiB, got, 32 * MiB), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 8);
	cr_assert_eq(memcmp(got, want, 32 * MiB), 0);

	/* Adjacent slices across a 4M boundary: cut there, not at the slices. */
	iov[0] = (struct iovec){ got, 3 * MiB };
	iov[1] = (struct iovec){ got + 3 * MiB, 2 * MiB };
	iov[2] = (struct iovec){ got + 5 * MiB, 1 * MiB };
	memset(got, 0, 6 * MiB);
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_READ, 16 * MiB, 6 * MiB, iov, 3), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 2);
	cr_assert_eq(memcmp(got, want, 6 * MiB), 0);
	be->ops->close(be);
	free(want);
	free(a);
	free(b);
	free(c);
	free(got);
}

/*
 * 4096-byte server blocks, misaligned commands refused by the server:
 * slices that cannot be cut at 4K go through one copy; the rest do not.
 */
Test(nbd, aligned_commands_on_4k_server)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *want = malloc(1 * MiB), *got = malloc(1 * MiB), *x = malloc(8 * KiB);
	struct iovec iov[4];

	srv_start_policy("4096", "4096", "1M");
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	fill_pattern(want, 1 * MiB, 0, 3);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, want, 1 * MiB), 0);
	cr_assert_eq(stat_get(be, "nbd_bounced"), 0);

	/* 2K + 6K from two buffers: a run ends at 2048, not a server block. */
	memset(got, 0, 8 * KiB);
	memset(x, 0, 8 * KiB);
	iov[0] = (struct iovec){ got, 2 * KiB };
	iov[1] = (struct iovec){ x, 6 * KiB };
	cr_assert_eq(do_io(be, BLK_READ, 16 * KiB, 8 * KiB, iov, 2), 0);
	cr_assert_eq(memcmp(got, want + 16 * KiB, 2 * KiB), 0);
	cr_assert_eq(memcmp(x, want + 18 * KiB, 6 * KiB), 0);
	cr_assert_eq(stat_get(be, "nbd_bounced"), 1);
	fill_pattern(got, 2 * KiB, 0, 4);
	fill_pattern(x, 6 * KiB, 0, 5);
	cr_assert_eq(do_io(be, BLK_WRITE, 16 * KiB, 8 * KiB, iov, 2), 0);
	memcpy(want + 16 * KiB, got, 2 * KiB);
	memcpy(want + 18 * KiB, x, 6 * KiB);
	cr_assert_eq(do_rw(be, BLK_READ, 0, got, 1 * MiB), 0);
	cr_assert_eq(memcmp(got, want, 1 * MiB), 0);
	cr_assert_eq(stat_get(be, "nbd_errors"), 0);
	be->ops->close(be);
	free(want);
	free(got);
	free(x);
}

Test(nbd, zeroes_and_discard)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = malloc(8 * MiB), *want = malloc(8 * MiB);
	uint64_t cmds;

	/* 1M requests at most, enforced by the server: 8M of zeroes is split. */
	srv_start_policy("512", "4096", "1M");
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	fill_pattern(want, 8 * MiB, 0, 6);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, want, 1 * MiB), 0);	/* max_io 1M */
	cr_assert_eq(do_rw(be, BLK_WRITE, 1 * MiB, want + 1 * MiB, 1 * MiB), 0);

	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 512, 8 * MiB - 1024, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 8);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 1 * MiB), 0);
	cr_assert_eq(memcmp(buf, want, 512), 0);
	cr_assert(all_zero(buf + 512, 1 * MiB - 512));

	cr_assert_eq(do_rw(be, BLK_WRITE, 0, want, 1 * MiB), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 4096, 8192, NULL, 0), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 1 * MiB), 0);
	cr_assert_eq(memcmp(buf, want, 4096), 0);
	cr_assert(all_zero(buf + 4096, 8192));
	cr_assert_eq(memcmp(buf + 12288, want + 12288, 1 * MiB - 12288), 0);

	/* Empty ranges end at once. */
	cr_assert_eq(do_io(be, BLK_DISCARD, 0, 0, NULL, 0), 0);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 0, 0, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "nbd_zero_writes"), 0);
	cr_assert_eq(stat_get(be, "nbd_errors"), 0);
	be->ops->close(be);
	free(buf);
	free(want);
}

/* A server without WRITE_ZEROES: zeros are written as data. */
Test(nbd, zeroes_without_can_zero)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = malloc(4 * MiB), *want = malloc(4 * MiB);

	srv_start("--filter=nozero", "memory", "64M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	cr_assert_eq(stat_get(be, "nbd_can_zero"), 0);
	fill_pattern(want, 4 * MiB, 0, 7);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, want, 4 * MiB), 0);
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 4096, 3 * MiB, NULL, 0), 0);
	cr_assert_eq(do_io(be, BLK_DISCARD, 3 * MiB + 8192, 4096, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "nbd_zero_writes"), 2);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 4 * MiB), 0);
	cr_assert_eq(memcmp(buf, want, 4096), 0);
	cr_assert(all_zero(buf + 4096, 3 * MiB));
	cr_assert_eq(memcmp(buf + 3 * MiB + 4096, want + 3 * MiB + 4096, 4096), 0);
	cr_assert(all_zero(buf + 3 * MiB + 8192, 4096));
	be->ops->close(be);
	free(buf);
	free(want);
}

Test(nbd, flush)
{
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, NULL, NULL);
	unsigned char buf[4096];
	uint64_t cmds;

	fill_pattern(buf, sizeof(buf), 0, 8);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), 0);
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 1);
	be->ops->close(be);
}

/* ---- queueing ---- */

/* Far more I/O than queue_depth, on a slow server: all of it ends, in bounds. */
Test(nbd, many_in_flight)
{
	enum { N = 300, LEN = 16 * KiB };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(N, sizeof(*t));
	unsigned char *data = malloc((size_t)N * LEN), *got = malloc((size_t)N * LEN);
	struct waiter w;
	uint64_t max_inflight = 0;
	int i;

	srv_start("--filter=delay", "memory", "64M", "delay-write=2ms", "delay-read=2ms", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "queue_depth", "8");
	be = td_open_ok(&td);
	fill_pattern(data, (size_t)N * LEN, 0, 9);
	waiter_init(&w);
	for (i = 0; i < N; i++) {
		test_io_init_buf(&t[i], &w, BLK_WRITE, (uint64_t)i * LEN, data + (size_t)i * LEN, LEN);
		submit_async(be, &t[i]);
	}
	/* submit() never waits for a slot: most are still queued now. */
	cr_assert(stat_get(be, "nbd_queued") + stat_get(be, "nbd_inflight") > 8);
	for (;;) {
		uint64_t n = stat_get(be, "nbd_inflight");
		int left;

		if (n > max_inflight)
			max_inflight = n;
		pthread_mutex_lock(&w.lock);
		left = w.outstanding;
		pthread_mutex_unlock(&w.lock);
		if (!left)
			break;
		usleep(1000);
	}
	waiter_wait(&w);
	cr_assert(max_inflight <= 8, "%llu commands in flight, queue_depth 8",
		  (unsigned long long)max_inflight);
	cr_assert(max_inflight >= 2, "never more than %llu in flight",
		  (unsigned long long)max_inflight);
	for (i = 0; i < N; i++)
		cr_assert(t[i].calls == 1 && t[i].res == 0, "io %d: %d calls, res %d", i,
			  t[i].calls, t[i].res);

	/* Read it all back, again all at once. */
	waiter_init(&w);
	for (i = 0; i < N; i++) {
		test_io_init_buf(&t[i], &w, BLK_READ, (uint64_t)i * LEN, got + (size_t)i * LEN, LEN);
		submit_async(be, &t[i]);
	}
	waiter_wait(&w);
	cr_assert_eq(w.errors, 0);
	cr_assert_eq(memcmp(got, data, (size_t)N * LEN), 0);
	cr_assert_eq(stat_get(be, "nbd_completed"), 2 * N);
	be->ops->close(be);
	free(t);
	free(data);
	free(got);
}

/* end_io may submit again, from the backend's thread. */
struct chain {
	struct test_io t;
	struct blk_backend *be;
	int left;
	unsigned char buf[4096];
};

static void chain_end_io(struct blk_io *io, int res)
{
	struct chain *ch = (struct chain *)io;

	if (!res && --ch->left > 0) {
		ch->t.io.pos += 4096;
		if (!blk_submit(ch->be, &ch->t.io))
			return;
		res = -EIO;
	}
	test_end_io(io, res);
}

Test(nbd, end_io_resubmits)
{
	struct test_dev td;
	struct chain ch;
	struct waiter w;

	memset(&ch, 0, sizeof(ch));
	ch.be = open_plain(&td, NULL, NULL);
	ch.left = 50;
	waiter_init(&w);
	test_io_init(&ch.t, &w, BLK_WRITE, 0, 4096);
	ch.t.io.end_io = chain_end_io;
	ch.t.iov[0] = (struct iovec){ ch.buf, 4096 };
	ch.t.io.iov = ch.t.iov;
	ch.t.io.iovcnt = 1;
	submit_async(ch.be, &ch.t);
	waiter_wait(&w);
	cr_assert_eq(ch.t.res, 0);
	cr_assert_eq(ch.left, 0);
	cr_assert_eq(stat_get(ch.be, "nbd_completed"), 50);
	ch.be->ops->close(ch.be);
}

/* ---- errors and failures ---- */

Test(nbd, injected_error_once)
{
	struct test_dev td;
	struct blk_backend *be;
	char flag[256], arg[300];
	unsigned char buf[8192];
	struct test_io t;
	struct waiter w;
	int fd;

	cr_assert(tdir[0]);
	snprintf(flag, sizeof(flag), "%s/fail-writes", tdir);
	snprintf(arg, sizeof(arg), "error-pwrite-file=%s", flag);
	srv_start("--filter=error", "memory", "64M", "error-pwrite=EIO",
		  "error-pwrite-rate=100%", arg, NULL);
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	fill_pattern(buf, sizeof(buf), 0, 10);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), 0);

	fd = open(flag, O_CREAT | O_WRONLY, 0600);
	cr_assert(fd >= 0);
	close(fd);
	waiter_init(&w);
	test_io_init_buf(&t, &w, BLK_WRITE, 8192, buf, 8192);
	submit_async(be, &t);
	waiter_wait(&w);
	usleep(100000);		/* a second end_io would show by now */
	cr_assert_eq(t.calls, 1);
	cr_assert_eq(t.res, -EIO);
	cr_assert_eq(stat_get(be, "nbd_errors"), 1);
	/* A server error is no connection failure. */
	cr_assert_eq(stat_get(be, "nbd_drops"), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, sizeof(buf)), 0);

	unlink(flag);
	cr_assert_eq(do_rw(be, BLK_WRITE, 8192, buf, sizeof(buf)), 0);
	be->ops->close(be);
}

Test(nbd, enospc_passes_through)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char buf[4096] = { 1 };

	srv_start("--filter=error", "memory", "64M", "error-pwrite=ENOSPC",
		  "error-pwrite-rate=100%", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	be = td_open_ok(&td);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), -ENOSPC);
	be->ops->close(be);
}

/* Submit @n writes of @len at 0, len, 2 len...; returns the array. */
static struct test_io *submit_writes(struct blk_backend *be, struct waiter *w, int n, uint64_t len,
				     unsigned char *data)
{
	struct test_io *t = calloc(n, sizeof(*t));
	int i;

	for (i = 0; i < n; i++) {
		test_io_init_buf(&t[i], w, BLK_WRITE, (uint64_t)i * len, data + (size_t)i * len, len);
		submit_async(be, &t[i]);
	}
	return t;
}

/*
 * The server dies with writes in flight and queued: every one ends with
 * -EIO, once, within about `timeout`; a server started again on the same
 * socket is found again, and I/O works.
 */
Test(nbd, server_killed_then_back)
{
	enum { N = 32 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *data = malloc(N * 64 * KiB);
	struct test_io *t;
	struct waiter w;
	double t0;
	int i;

	/*
	 * Each write stays at the server 1 s, so they are still in flight when
	 * it is killed even if this thread is held up a while; `timeout` 3s
	 * is longer than that, so a delayed write is no timeout.
	 */
	srv_start("--filter=delay", "memory", "64M", "delay-write=1000ms", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "queue_depth", "8");
	td_set(&td, "timeout", "3s");
	be = td_open_ok(&td);
	fill_pattern(data, N * 64 * KiB, 0, 11);
	waiter_init(&w);
	t = submit_writes(be, &w, N, 64 * KiB, data);
	wait_stat(be, "nbd_inflight", 1, WAIT_S);
	t0 = now_s();
	srv_kill(SIGKILL);
	waiter_wait_for(&w, WAIT_S);
	/* within about `timeout`: a bound only a wait without end misses */
	cr_assert(now_s() - t0 < 3 + 20, "failing took %.1f s", now_s() - t0);
	for (i = 0; i < N; i++)
		cr_assert(t[i].calls == 1 && t[i].res == -EIO, "io %d: %d calls, res %d", i,
			  t[i].calls, t[i].res);
	cr_assert_eq(stat_get(be, "nbd_drops"), 1);
	cr_assert_eq(stat_get(be, "nbd_inflight"), 0);
	free(t);

	/*
	 * Down for longer than `timeout`: new I/O fails at once. One that
	 * waited would wait the whole 3 s `timeout`: 2 s leaves a busy
	 * machine room and still tells them apart.
	 */
	usleep(3200000);
	t0 = now_s();
	cr_assert_eq(do_rw(be, BLK_READ, 0, data, 4096), -EIO);
	cr_assert(now_s() - t0 < 2, "a read on a dead server took %.1f s", now_s() - t0);

	srv_restart();
	wait_stat(be, "nbd_reconnects", 1, WAIT_S);
	cr_assert_eq(stat_get(be, "nbd_connected"), 1);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, data, 64 * KiB), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 0, data + 64 * KiB, 64 * KiB), 0);
	cr_assert_eq(memcmp(data, data + 64 * KiB, 64 * KiB), 0);
	be->ops->close(be);
	free(data);
}

/* I/O submitted while the server is briefly gone waits for the reconnect. */
Test(nbd, queued_io_survives_a_quick_restart)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char buf[4096];
	struct test_io t;
	struct waiter w;

	srv_start("memory", "64M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "timeout", "5s");
	be = td_open_ok(&td);
	srv_kill(SIGKILL);
	wait_stat(be, "nbd_drops", 1, WAIT_S);
	fill_pattern(buf, sizeof(buf), 0, 12);
	waiter_init(&w);
	test_io_init_buf(&t, &w, BLK_WRITE, 0, buf, sizeof(buf));
	submit_async(be, &t);
	usleep(200000);
	srv_restart();
	waiter_wait(&w);
	cr_assert_eq(t.res, 0);
	cr_assert_eq(stat_get(be, "nbd_reconnects"), 1);
	be->ops->close(be);
}

/* A server that stops answering: in-flight I/O fails after `timeout`. */
Test(nbd, hung_server_times_out)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char buf[65536];
	struct test_io t;
	struct waiter w;
	double t0;

	srv_start("memory", "64M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "timeout", "500ms");
	be = td_open_ok(&td);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), 0);
	srv_kill(SIGSTOP);
	waiter_init(&w);
	test_io_init_buf(&t, &w, BLK_READ, 0, buf, sizeof(buf));
	t0 = now_s();
	submit_async(be, &t);
	waiter_wait_for(&w, WAIT_S);
	cr_assert_eq(t.res, -EIO);
	/* after `timeout`, and late only as a busy machine is late */
	cr_assert(now_s() - t0 >= 0.4 && now_s() - t0 < 0.5 + 20, "timed out after %.2f s",
		  now_s() - t0);
	cr_assert_eq(stat_get(be, "nbd_timeouts"), 1);

	kill(srv_pid, SIGCONT);
	wait_stat(be, "nbd_reconnects", 1, WAIT_S);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, sizeof(buf)), 0);
	be->ops->close(be);
}

/*
 * Writes acknowledged but not flushed when the connection went: the next
 * FLUSH fails (the server may have lost them), once.
 */
Test(nbd, flush_after_lost_connection_fails_once)
{
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, NULL, NULL);
	unsigned char buf[4096] = { 7 };

	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), 0);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	/* Flushed: losing the connection now loses nothing. */
	srv_kill(SIGKILL);
	wait_stat(be, "nbd_drops", 1, WAIT_S);
	srv_restart();
	wait_stat(be, "nbd_reconnects", 1, WAIT_S);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);

	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, sizeof(buf)), 0);
	srv_kill(SIGKILL);
	wait_stat(be, "nbd_drops", 2, WAIT_S);
	srv_restart();
	wait_stat(be, "nbd_reconnects", 2, WAIT_S);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), -EIO);
	cr_assert_eq(stat_get(be, "nbd_lost_flushes"), 1);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	be->ops->close(be);
}

/* close() with the server gone and I/O queued: returns within about `timeout`. */
Test(nbd, close_with_dead_server)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *data = malloc(16 * 4096);
	struct test_io *t;
	struct waiter w;
	double t0;

	srv_start("memory", "64M", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "timeout", "500ms");
	be = td_open_ok(&td);
	srv_kill(SIGKILL);
	wait_stat(be, "nbd_drops", 1, WAIT_S);
	waiter_init(&w);
	t = submit_writes(be, &w, 16, 4096, data);
	t0 = now_s();
	be->ops->close(be);
	/* about `timeout` (500ms), not a wait without end */
	cr_assert(now_s() - t0 < 0.5 + 20, "close took %.1f s", now_s() - t0);
	/* close has ended every I/O: nothing to wait for */
	waiter_wait_for(&w, 1);
	cr_assert_eq(w.errors, 16);
	free(t);
	free(data);
}

/* ---- multi-conn ---- */

Test(nbd, multi_conn)
{
	enum { N = 64 };
	struct test_dev td;
	struct blk_backend *be = open_plain(&td, "connections", "4");
	unsigned char *data = malloc(N * 64 * KiB), *got = malloc(N * 64 * KiB);
	struct test_io *t;
	struct waiter w;
	uint64_t cmds;

	cr_assert_eq(stat_get(be, "nbd_can_multi_conn"), 1);
	cr_assert_eq(stat_get(be, "nbd_connections"), 4);
	cr_assert_eq(stat_get(be, "nbd_connected"), 4);
	fill_pattern(data, N * 64 * KiB, 0, 13);
	waiter_init(&w);
	t = submit_writes(be, &w, N, 64 * KiB, data);
	waiter_wait(&w);
	cr_assert_eq(w.errors, 0);
	free(t);
	/* FLUSH goes to every connection. */
	cmds = stat_get(be, "nbd_commands");
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	cr_assert_eq(stat_get(be, "nbd_commands") - cmds, 4);
	cr_assert_eq(do_rw(be, BLK_READ, 0, got, N * 64 * KiB), 0);
	cr_assert_eq(memcmp(got, data, N * 64 * KiB), 0);
	be->ops->close(be);
	free(data);
	free(got);
}

Test(nbd, multi_conn_refused_by_server)
{
	struct test_dev td;
	struct blk_backend *be;

	srv_start("--filter=multi-conn", "memory", "64M", "multi-conn-mode=disable", NULL);
	td_init_nbd(&td);
	td_uri(&td);
	td_set(&td, "connections", "4");
	be = td_open_ok(&td);
	cr_assert_eq(stat_get(be, "nbd_can_multi_conn"), 0);
	cr_assert_eq(stat_get(be, "nbd_connections"), 1);
	be->ops->close(be);
}

/* ---- TLS ---- */

Test(nbd, tls_psk)
{
	struct nbd_handle *h = nbd_create();
	struct test_dev td;
	struct blk_backend *be;
	char psk[256], arg[300];
	unsigned char buf[4096], got[4096];
	FILE *f;
	bool tls;

	cr_assert_not_null(h);
	tls = nbd_supports_tls(h) == 1;
	nbd_close(h);
	if (!tls)
		cr_skip_test("this libnbd has no TLS");
	cr_assert(tdir[0]);
	snprintf(psk, sizeof(psk), "%s/keys.psk", tdir);
	f = fopen(psk, "w");
	cr_assert_not_null(f);
	fprintf(f, "alice:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n");
	fclose(f);
	snprintf(arg, sizeof(arg), "--tls-psk=%s", psk);
	srv_start("--tls=require", arg, "memory", "64M", NULL);

	/* Without TLS the server refuses. */
	td_init_nbd(&td);
	td_uri(&td);
	cr_assert(IS_ERR(td_open(&td)));

	td_init_nbd(&td);
	td_set(&td, "uri", "nbds+unix://alice@/?socket=%s&tls-psk-file=%s", sock, psk);
	be = td_open_ok(&td);
	fill_pattern(buf, sizeof(buf), 0, 14);
	cr_assert_eq(do_rw(be, BLK_WRITE, 4096, buf, sizeof(buf)), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 4096, got, sizeof(got)), 0);
	cr_assert_eq(memcmp(buf, got, sizeof(buf)), 0);
	be->ops->close(be);
}
