/* SPDX-License-Identifier: MIT */
/*
 * tests/integ/unaligned_write.c - what most programs do: write whole,
 * aligned ranges from a buffer that is not page-aligned (a malloc'd
 * buffer, Python's bytes). The kernel cuts each such write into two FUSE
 * requests at a point inside a block.
 *
 *   unaligned_write FILE START MIB SEED [SKEW]
 *	pwrite MIB 1 MiB ranges at START MiB, START + 1 MiB, ... from a buffer
 *	SKEW bytes (default 16) into a page, holding seeded data; then fsync.
 *	Prints "short N RET" for every pwrite that did not return 1 MiB, then
 *	"fsync OK" or "fsync ERRNAME". Exit 0 when every call was made.
 *   unaligned_write -v FILE START MIB SEED
 *	read back and compare; exit 1 with the first wrong offset.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1u << 20)

static void fill(unsigned char *b, size_t len, uint64_t pos, unsigned seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (pos + i + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xBF58476D1CE4E5B9ull;

		x ^= x >> 29;
		b[i] = (unsigned char)(x * 0x94D049BB133111EBull >> 56);
	}
}

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);

	return n ? n : "E?";
}

int main(int argc, char **argv)
{
	int verify = argc > 1 && !strcmp(argv[1], "-v");
	char **a = argv + verify;
	unsigned char *mem, *buf, *exp;
	unsigned long start, n, seed, skew = 16, i;
	int fd;

	if (argc - verify < 5) {
		fprintf(stderr, "usage: unaligned_write [-v] FILE START MIB SEED [SKEW]\n");
		return 2;
	}
	start = strtoul(a[2], NULL, 0);
	n = strtoul(a[3], NULL, 0);
	seed = strtoul(a[4], NULL, 0);
	if (argc - verify > 5)
		skew = strtoul(a[5], NULL, 0);
	if (posix_memalign((void **)&mem, 4096, MiB + 8192))
		return 2;
	buf = mem + skew;
	exp = malloc(MiB);
	fd = open(a[1], verify ? O_RDONLY : O_WRONLY);
	if (fd < 0 || !exp) {
		perror(a[1]);
		return 2;
	}
	for (i = start; i < start + n; i++) {
		ssize_t r;

		fill(verify ? exp : buf, MiB, (uint64_t)i * MiB, (unsigned)seed);
		if (verify) {
			r = pread(fd, buf, MiB, (off_t)i * MiB);
			if (r != MiB) {
				fprintf(stderr, "read at %lu MiB: %zd (%s)\n", i, r, ename(errno));
				return 1;
			}
			for (size_t k = 0; k < MiB; k++)
				if (buf[k] != exp[k]) {
					fprintf(stderr, "wrong byte at %llu\n",
						(unsigned long long)i * MiB + k);
					return 1;
				}
			continue;
		}
		r = pwrite(fd, buf, MiB, (off_t)i * MiB);
		if (r != MiB)
			printf("short %lu %zd %s\n", i, r, r < 0 ? ename(errno) : "");
	}
	if (!verify)
		printf("fsync %s\n", fsync(fd) ? ename(errno) : "OK");
	free(exp);
	free(mem);
	return close(fd) ? 2 : 0;
}
