// SPDX-License-Identifier: MIT
/*
 * mmap_hold: hold pages of a file in a shared mapping while a test acts
 * on the mount (tests/integ/uring_notify.sh).
 *
 *   mmap_hold FILE OFF LEN SEED clean|dirty
 *     maps [OFF, OFF + LEN) of FILE MAP_SHARED (OFF page-aligned), stores
 *     the pattern of SEED into it, msync(MS_SYNC)s it when `clean` (the
 *     kernel then holds the pages clean; `dirty` leaves them dirty), prints
 *     "ready" and waits for a line on stdin: "check" compares the mapping
 *     with the pattern (what the kernel reads back when it dropped the
 *     pages), then msync(MS_SYNC), munmap, and prints "done"; "quit" (or
 *     end of input) just unmaps.
 *   mmap_hold --pattern SEED OFF LEN
 *     writes the pattern of SEED for [OFF, OFF + LEN) to stdout.
 *
 * The pattern depends on the file offset, so any part of it can be made
 * alone. Exit 0, or 1 on a mismatch or a failed call, 2 on usage errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned char pat(uint64_t seed, uint64_t pos)
{
	uint64_t x = (pos / 8 + 1) * 0x9e3779b97f4a7c15ull ^ seed;

	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (unsigned char)(x >> (8 * (pos % 8)));
}

static int usage(void)
{
	fprintf(stderr, "usage: mmap_hold FILE OFF LEN SEED clean|dirty\n"
			"       mmap_hold --pattern SEED OFF LEN\n");
	return 2;
}

int main(int argc, char **argv)
{
	uint64_t off, len, seed, i;
	char line[64];
	unsigned char *p;
	bool clean;
	int fd;

	if (argc == 5 && !strcmp(argv[1], "--pattern")) {
		seed = strtoull(argv[2], NULL, 0);
		off = strtoull(argv[3], NULL, 0);
		len = strtoull(argv[4], NULL, 0);
		for (i = 0; i < len; i++)
			putchar(pat(seed, off + i));
		return fflush(stdout) ? 1 : 0;
	}
	if (argc != 6 || (strcmp(argv[5], "clean") && strcmp(argv[5], "dirty")))
		return usage();
	off = strtoull(argv[2], NULL, 0);
	len = strtoull(argv[3], NULL, 0);
	seed = strtoull(argv[4], NULL, 0);
	clean = !strcmp(argv[5], "clean");
	if (off % 4096 || !len)
		return usage();
	fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		fprintf(stderr, "mmap_hold: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
	if (p == MAP_FAILED) {
		fprintf(stderr, "mmap_hold: mmap: %s\n", strerror(errno));
		return 1;
	}
	for (i = 0; i < len; i++)
		p[i] = pat(seed, off + i);
	if (clean && msync(p, len, MS_SYNC)) {
		fprintf(stderr, "mmap_hold: msync: %s\n", strerror(errno));
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "check", 5)) {
		munmap(p, len);
		return 0;
	}
	for (i = 0; i < len; i++) {
		if (p[i] != pat(seed, off + i)) {
			fprintf(stderr, "mmap_hold: byte %llu of the mapping is %#x, not %#x\n",
				(unsigned long long)(off + i), p[i], pat(seed, off + i));
			return 1;
		}
	}
	if (msync(p, len, MS_SYNC) || munmap(p, len)) {
		fprintf(stderr, "mmap_hold: msync/munmap: %s\n", strerror(errno));
		return 1;
	}
	close(fd);
	printf("done\n");
	fflush(stdout);
	return 0;
}
