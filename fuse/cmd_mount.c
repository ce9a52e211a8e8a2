/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd_mount.c - `blkfs mount` (daemonize, report readiness or the error
 * to the terminal), its fstab form `blkfs CONFIG MNT -o OPTS` (as mount.fuse3
 * runs it), and `blkfs check` (the config parsed and its backends opened,
 * without mounting).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../backends/lib/log.h"
#include "bf.h"
#include "cmd.h"
#include "daemon.h"
#include "devs.h"
#include "loop.h"
#include "mnt.h"
#include "mountopt.h"

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

int bf_cmd_mount(int argc, char **argv)
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
			fputs(bf_usage, stderr);
			return 2;
		}
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "blkfs mount: expected one mount point\n%s", bf_usage);
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
	if (bf_load_conf(&d, bf_pick_conf(conf_arg)))
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

	ret = bf_mkdir_p(bf_rundir());
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", bf_rundir(), strerror(-ret));
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
		bf_run_file(path, sizeof(path), mnt, "log");
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
	bf_run_file(path, sizeof(path), mnt, "status");
	unlink(path);
	bf_run_file(path, sizeof(path), mnt, "pid");
	snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
	bf_write_file(path, pidtxt);

	code = bf_serve(&d, status, sizeof(status));
	if (d.ready_fd >= 0) {
		/* never became ready: the parent reports our messages */
		close(d.ready_fd);
		d.ready_fd = -1;
	}
	blk_log("%s: exiting with status %d", mnt, code);
	bf_run_file(path, sizeof(path), mnt, "status");
	bf_write_file(path, *status ? status : (code ? "failed\n" : ""));
	bf_run_file(path, sizeof(path), mnt, "pid");
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
int bf_cmd_mount_fstab(int argc, char **argv)
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
	code = bf_cmd_mount(n, args);
	free(args);
	return code;
}

/* ---------------------------------------------------------------- check */

int bf_cmd_check(int argc, char **argv)
{
	struct bf_daemon d = { .ready_fd = -1, .log_fd = -1 };
	const char *conf_arg = NULL;
	char err[1024];
	int opt, i;

	optind = 1;
	while ((opt = getopt(argc, argv, "c:h")) != -1) {
		if (opt != 'c') {
			fputs(bf_usage, stderr);
			return 2;
		}
		conf_arg = optarg;
	}
	if (bf_load_conf(&d, bf_pick_conf(conf_arg)))
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
