/* SPDX-License-Identifier: MIT */
/*
 * tests/integ/mmap_check.c - do MAP_SHARED stores reach the device?
 *
 *   mmap_check FILE OFF LEN [msync|munmap]
 *
 * Writes pattern A with O_DIRECT over [OFF - 64K, OFF + LEN + 64K) (clipped
 * to the device), maps [OFF, OFF + LEN) MAP_SHARED through a buffered
 * descriptor, checks the mapping shows A, stores pattern B over several
 * ranges of the mapping (a whole page; pieces that are not page-, folio- or
 * even sector-aligned; ranges crossing page and 64K folio boundaries; single
 * bytes), then either msync(MS_SYNC) + fsync (default) or munmap + fsync, and
 * reads everything back with O_DIRECT: B must be where it was stored and A
 * everywhere else. The same is checked through a buffered read. OFF and LEN
 * must be multiples of 64K and LEN at least 1M. Prints what differs and exits
 * 1 on any mismatch or failed call; 2 on usage errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAD (64u << 10)

struct range { uint64_t off, len; };

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint8_t pat(uint64_t pos, uint64_t seed)
{
	return splitmix64((pos >> 3) ^ (seed << 40)) >> ((pos & 7) * 8);
}

static void die(const char *what)
{
	printf("mmap_check: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void *abuf(size_t len)
{
	void *p;

	if (posix_memalign(&p, PAD, len)) {
		printf("mmap_check: out of memory\n");
		exit(1);
	}
	return p;
}

/* Print the differing ranges (at most 20); returns the number of bytes. */
static uint64_t report(const char *how, const uint8_t *got, const uint8_t *want,
		       uint64_t base, uint64_t len, uint64_t moff)
{
	uint64_t i = 0, total = 0;
	int shown = 0;

	while (i < len) {
		uint64_t j;

		if (got[i] == want[i]) {
			i++;
			continue;
		}
		for (j = i; j < len && got[j] != want[j]; j++)
			;
		total += j - i;
		if (shown++ < 20)
			printf("mmap_check: %s: bytes [%" PRIu64 ", %" PRIu64 ") differ "
			       "(device offset %" PRIu64 ", mapping offset %" PRId64
			       "): first got 0x%02x want 0x%02x\n", how, base + i,
			       base + j, base + i, (int64_t)(base + i - moff), got[i], want[i]);
		i = j;
	}
	return total;
}

static void read_full(int fd, uint8_t *buf, uint64_t len, uint64_t off, const char *what)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, buf + done, len - done, off + done);

		if (r < 0)
			die(what);
		if (r == 0) {
			printf("mmap_check: %s: unexpected EOF at %" PRIu64 "\n", what, off + done);
			exit(1);
		}
		done += r;
	}
}

int main(int argc, char **argv)
{
	const uint64_t seed_a = 0xa, seed_b = 0xb;
	uint64_t off, len, start, end, i, bad;
	const char *mode = argc > 4 ? argv[4] : "msync";
	int fd_d, fd_b, r;
	struct stat st;
	uint8_t *want, *got, *map;

	if (argc < 4 || (strcmp(mode, "msync") && strcmp(mode, "munmap"))) {
		fprintf(stderr, "usage: mmap_check FILE OFF LEN [msync|munmap]\n");
		return 2;
	}
	off = strtoull(argv[2], NULL, 0);
	len = strtoull(argv[3], NULL, 0);
	if (off % PAD || len % PAD || len < (1u << 20)) {
		fprintf(stderr, "mmap_check: OFF and LEN must be multiples of 64K, LEN >= 1M\n");
		return 2;
	}

	/* The stores, relative to the mapping. */
	const struct range stores[] = {
		{ 0, 4096 },			/* one whole page */
		{ 5000, 3000 },			/* inside one page, unaligned */
		{ 8190, 5 },			/* crosses a page boundary */
		{ PAD - 700, 2000 },		/* crosses the first 64K folio boundary */
		{ 200001, 1 },			/* a single byte */
		{ 303104 + 512, 512 },		/* one 512-byte sector, not a page */
		{ 400000, 200000 },		/* many pages and folios, unaligned both ends */
		{ 3 * PAD, PAD },		/* exactly one folio */
		{ len - 100, 100 },		/* the mapping's last bytes */
	};

	fd_d = open(argv[1], O_RDWR | O_DIRECT);
	if (fd_d < 0)
		die("open O_DIRECT");
	fd_b = open(argv[1], O_RDWR);
	if (fd_b < 0)
		die("open");
	if (fstat(fd_b, &st) < 0)
		die("fstat");
	if (off + len > (uint64_t)st.st_size) {
		fprintf(stderr, "mmap_check: range past the device end\n");
		return 2;
	}
	start = off >= PAD ? off - PAD : 0;
	end = off + len + PAD <= (uint64_t)st.st_size ? off + len + PAD : off + len;

	want = abuf(end - start);
	got = abuf(end - start);
	for (i = start; i < end; i++)
		want[i - start] = pat(i, seed_a);
	if (pwrite(fd_d, want, end - start, start) != (ssize_t)(end - start))
		die("pwrite O_DIRECT pattern A");

	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_b, off);
	if (map == MAP_FAILED)
		die("mmap MAP_SHARED");

	bad = report("mapping before stores", map, want + (off - start), off, len, off);
	if (bad) {
		printf("mmap_check: FAIL: the mapping does not show what O_DIRECT wrote (%" PRIu64
		       " bytes)\n", bad);
		return 1;
	}

	for (i = 0; i < sizeof(stores) / sizeof(stores[0]); i++) {
		uint64_t k;

		for (k = stores[i].off; k < stores[i].off + stores[i].len; k++) {
			map[k] = pat(off + k, seed_b);
			want[off - start + k] = map[k];
		}
	}

	if (!strcmp(mode, "msync")) {
		if (msync(map, len, MS_SYNC) < 0)
			die("msync MS_SYNC");
		if (fsync(fd_b) < 0)
			die("fsync");
	} else {
		if (munmap(map, len) < 0)
			die("munmap");
		map = NULL;
		if (fsync(fd_b) < 0)
			die("fsync");
	}

	memset(got, 0, end - start);
	read_full(fd_d, got, end - start, start, "pread O_DIRECT");
	bad = report("O_DIRECT read back", got, want, start, end - start, off);

	memset(got, 0, end - start);
	read_full(fd_b, got, end - start, start, "pread buffered");
	bad += report("buffered read back", got, want, start, end - start, off);

	if (map && munmap(map, len) < 0)
		die("munmap");
	r = close(fd_b);
	if (r < 0)
		die("close");
	close(fd_d);
	free(want);
	free(got);
	if (bad) {
		printf("mmap_check: FAIL: %" PRIu64 " bytes differ (mode %s, off %" PRIu64
		       ", len %" PRIu64 ")\n", bad, mode, off, len);
		return 1;
	}
	printf("mmap_check: OK (mode %s, off %" PRIu64 ", len %" PRIu64 ")\n", mode, off, len);
	return 0;
}
