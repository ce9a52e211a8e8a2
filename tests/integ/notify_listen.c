/* SPDX-License-Identifier: MIT */
/*
 * notify_listen SOCKET MNT DEV: the service manager's side of sd_notify, for
 * a test. Binds a datagram socket at SOCKET and prints every line of every
 * message it receives as "MSG <ms> LINE" (ms since start). The moment a
 * message holds READY=1 it checks, before reading the next one, that the
 * mount answers: MNT is a fuse.blkfs mount in /proc/self/mountinfo and a
 * pread of MNT/DEV returns data, and prints "CHECK ready mounted=0|1
 * read=N errno=E". Exits 0 after a STATUS= line that ends the final
 * writeback ("All data written back" or "Data could not be written back"),
 * 1 on error, 2 after 300 s without one.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Is a fuse.blkfs filesystem mounted at @mnt? (mountinfo only: never stat a mount) */
static int blkfs_mounted(const char *mnt)
{
	char line[8192], mp[4096], *sep;
	int found = 0;
	FILE *f = fopen("/proc/self/mountinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1 || strcmp(mp, mnt))
			continue;
		sep = strstr(line, " - ");
		found = sep && !strncmp(sep + 3, "fuse.blkfs ", 11);
	}
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char buf[4096], path[4096];
	long long start = now_ms();
	int fd;

	if (argc != 4 || strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "usage: notify_listen SOCKET MNT DEV\n");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	strcpy(sa.sun_path, argv[1]);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		perror("notify_listen: socket");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/%s", argv[2], argv[3]);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char *line, *save = NULL;
		int ready = 0, done = 0;
		ssize_t n;

		if (poll(&p, 1, 300000) != 1) {
			fprintf(stderr, "notify_listen: nothing for 300 s\n");
			return 2;
		}
		n = recv(fd, buf, sizeof(buf) - 1, 0);
		if (n < 0) {
			perror("notify_listen: recv");
			return 1;
		}
		buf[n] = 0;
		for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
			if (!strcmp(line, "READY=1"))
				ready = 1;
			if (!strcmp(line, "STATUS=All data written back") ||
			    !strncmp(line, "STATUS=Data could not be written back", 38))
				done = 1;
			printf("MSG %lld %s\n", now_ms() - start, line);
		}
		if (ready) {
			int mounted = blkfs_mounted(argv[2]), err = 0, dfd;
			ssize_t r = -1;

			dfd = open(path, O_RDONLY | O_CLOEXEC);
			if (dfd >= 0) {
				r = pread(dfd, buf, sizeof(buf), 0);
				if (r < 0)
					err = errno;
				close(dfd);
			} else {
				err = errno;
			}
			printf("CHECK ready mounted=%d read=%zd errno=%d\n", mounted, r, err);
		}
		if (done)
			break;
	}
	close(fd);
	unlink(argv[1]);
	return 0;
}
