// SPDX-License-Identifier: MIT
/*
 * tests/integ/odirect_race.c - O_DIRECT writers and readers on the same
 * blocks of a device file at once (odirect.sh). Each writer fills a whole
 * 4 KiB block with one 64-bit word (its id, a sequence number, the block);
 * each reader reads all the blocks in one request and checks that every
 * block is one word repeated: one write's version, never a mix of two
 * (the ram backend replies from its arena while writes go on).
 *
 * Usage: odirect_race DEV SECONDS BLOCKS
 * Exit: 0 and "reads N writes M" on stdout; 1 on a torn block or an error.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLK 4096
#define WORDS (BLK / 8)

static const char *path;
static int nblocks;
static volatile int stop;
static volatile int failed;
static unsigned long nr_reads, nr_writes;	/* atomic */

static void *writer(void *arg)
{
	uint64_t id = (uintptr_t)arg, seq = 0, *b;
	int fd = open(path, O_WRONLY | O_DIRECT), i, blk;

	if (fd < 0 || posix_memalign((void **)&b, BLK, BLK)) {
		perror(path);
		failed = 1;
		return NULL;
	}
	while (!stop && !failed) {
		for (blk = 0; blk < nblocks; blk++) {
			uint64_t w = id << 56 | (++seq & 0xffffffffffull) << 16 | (uint64_t)blk;

			for (i = 0; i < WORDS; i++)
				b[i] = w;
			if (pwrite(fd, b, BLK, (off_t)blk * BLK) != BLK) {
				perror("pwrite");
				failed = 1;
				break;
			}
			__atomic_add_fetch(&nr_writes, 1, __ATOMIC_RELAXED);
		}
	}
	free(b);
	close(fd);
	return NULL;
}

static void *reader(void *arg)
{
	size_t len = (size_t)nblocks * BLK;
	uint64_t *b;
	int fd = open(path, O_RDONLY | O_DIRECT), i, blk;

	(void)arg;
	if (fd < 0 || posix_memalign((void **)&b, BLK, len)) {
		perror(path);
		failed = 1;
		return NULL;
	}
	while (!stop && !failed) {
		ssize_t n = pread(fd, b, len, 0);

		if (n != (ssize_t)len) {
			fprintf(stderr, "pread: %zd: %s\n", n, n < 0 ? strerror(errno) : "short");
			failed = 1;
			break;
		}
		for (blk = 0; blk < nblocks; blk++) {
			const uint64_t *p = b + (size_t)blk * WORDS;

			for (i = 1; i < WORDS; i++)
				if (p[i] != p[0])
					break;
			if (i < WORDS || (p[0] & 0xffff) != (uint64_t)blk) {
				fprintf(stderr, "torn block %d: word 0 %#llx, word %d %#llx\n", blk,
					(unsigned long long)p[0], i,
					(unsigned long long)p[i < WORDS ? i : 0]);
				failed = 1;
				break;
			}
		}
		__atomic_add_fetch(&nr_reads, 1, __ATOMIC_RELAXED);
	}
	free(b);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[4];
	int secs, i;

	if (argc != 4) {
		fprintf(stderr, "usage: odirect_race DEV SECONDS BLOCKS\n");
		return 2;
	}
	path = argv[1];
	secs = atoi(argv[2]);
	nblocks = atoi(argv[3]);
	if (nblocks < 1 || nblocks > 64)
		return 2;
	/* every block one version before anyone reads: what was there is any data */
	{
		uint64_t *b;
		int fd = open(path, O_WRONLY | O_DIRECT), blk, k;

		if (fd < 0 || posix_memalign((void **)&b, BLK, BLK)) {
			perror(path);
			return 1;
		}
		for (blk = 0; blk < nblocks; blk++) {
			for (k = 0; k < WORDS; k++)
				b[k] = (uint64_t)blk;
			if (pwrite(fd, b, BLK, (off_t)blk * BLK) != BLK) {
				perror("pwrite");
				return 1;
			}
		}
		free(b);
		close(fd);
	}
	for (i = 0; i < 4; i++)
		if (pthread_create(&t[i], NULL, i < 2 ? writer : reader, (void *)(uintptr_t)(i + 1))) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	sleep((unsigned int)secs);
	stop = 1;
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("reads %lu writes %lu\n", nr_reads, nr_writes);
	return failed;
}
