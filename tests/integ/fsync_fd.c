/* SPDX-License-Identifier: MIT */
/*
 * tests/integ/fsync_fd.c - fsync descriptors the caller holds open, so a
 * test can see the once-per-open-file error reporting of fsync: the shell
 * opens the device file (`exec 7<>"$dev"`), every run of this helper
 * inherits the same open file description, hence the same FUSE file handle.
 *
 *   fsync_fd [-d] FD [FD ...]
 *	fsync (fdatasync with -d) each FD in turn and print one line for each:
 *	OK, or the errno name (ENOSPC). Exit: 0 when every call was made
 *	(whatever it returned), 2 on usage errors or an FD that is not open.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr, "usage: fsync_fd [-d] FD [FD ...]\n");
	exit(2);
}

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	static char buf[32];

	if (n)
		return n;
	snprintf(buf, sizeof(buf), "E%d", e);
	return buf;
}

int main(int argc, char **argv)
{
	int i = 1, datasync = 0;

	if (i < argc && !strcmp(argv[i], "-d")) {
		datasync = 1;
		i++;
	}
	if (i >= argc)
		usage();
	for (; i < argc; i++) {
		char *end;
		long fd;
		int r;

		errno = 0;
		fd = strtol(argv[i], &end, 10);
		if (errno || end == argv[i] || *end || fd < 0 || fd > 1000000)
			usage();
		if (fcntl((int)fd, F_GETFD) < 0) {
			fprintf(stderr, "fsync_fd: descriptor %ld is not open\n", fd);
			return 2;
		}
		r = datasync ? fdatasync((int)fd) : fsync((int)fd);
		printf("%s\n", r ? ename(errno) : "OK");
		fflush(stdout);
	}
	return 0;
}
