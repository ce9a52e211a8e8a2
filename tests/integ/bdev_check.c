/* SPDX-License-Identifier: MIT */
/*
 * tests/integ/bdev_check.c - run single system calls against a blkfs device
 * file and print each result, so a test compares exact errno names instead
 * of parsing tool messages.
 *
 *   bdev_check [-d] [-r] [-w] [-t] [-a] [-c] [-x] FILE OP ARGS [OP ARGS ...]
 *	-d O_DIRECT, -r O_RDONLY, -w O_WRONLY (default O_RDWR), -t O_TRUNC,
 *	-a O_APPEND, -c O_CREAT, -x O_CREAT|O_EXCL.
 *	Every OP prints one line: a number, OK, or an errno name (EINVAL).
 *	size | blksize | fsync | fdatasync
 *	pread OFF LEN			bytes read
 *	pwrite OFF LEN [BYTE]		bytes written (BYTE default 0x5a)
 *	fill OFF LEN BYTE		pwrite, then OK if all written
 *	expect OFF LEN BYTE		OK, SHORT n or MISMATCH ...
 *	pattern OFF LEN SEED		pwrite a pattern of absolute offsets
 *	verify OFF LEN SEED		OK, SHORT n or MISMATCH ...
 *	truncate SIZE			ftruncate
 *	punch|zero|zerokeep|alloc OFF LEN	fallocate PUNCH_HOLE|KEEP_SIZE,
 *					ZERO_RANGE, ZERO_RANGE|KEEP_SIZE, 0
 *	fallocate MODE OFF LEN		fallocate with any MODE (a number); OK
 *	write LEN [BYTE]		write(2) at the file position: bytes
 *	read LEN			read(2) at the file position: bytes
 *	lseek OFF set|cur|end|data|hole	the new offset
 *	setxattr NAME VALUE | getxattr NAME | removexattr NAME
 *					OK or bytes (getxattr), or the errno
 *	listxattr			bytes of the name list
 *	ioctl REQ			ioctl(fd, REQ, buf of 4096 zero bytes): its
 *					return value or the errno
 *	pwrite and pread offsets may be up to 2^64 - 1 (an off_t below 0
 *	is passed as it is: the kernel says EINVAL).
 *   bdev_check create|mkdir|rmdir|unlink|mknod PATH
 *   bdev_check rename|link|symlink|exchange|noreplace A B
 *					(exchange, noreplace: renameat2 flags)
 *   bdev_check chmod PATH MODE | chown PATH UID GID | utimes PATH
 *   bdev_check strerror NAME		strerror() of an errno name
 * Numbers take K/M/G/T suffixes (binary). Exit: 0 when every op ran (whatever
 * it returned), 1 when FILE cannot be opened, 2 on usage errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>

static void usage(void)
{
	fprintf(stderr, "usage: bdev_check [-d] [-r] [-w] [-t] [-a] [-c] [-x] FILE OP ARGS...  (see the source)\n");
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

static uint64_t num(const char *s)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		usage();
	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	case 'T': v <<= 40; end++; break;
	}
	if (*end)
		usage();
	return v;
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The pattern byte at absolute device offset @pos for @seed. */
static uint8_t pat(uint64_t pos, uint64_t seed)
{
	return splitmix64((pos >> 3) ^ (seed << 40)) >> ((pos & 7) * 8);
}

static void *abuf(uint64_t len)
{
	void *p;

	if (posix_memalign(&p, 65536, len ? len : 1)) {
		fprintf(stderr, "bdev_check: out of memory\n");
		exit(2);
	}
	return p;
}

/* pread until @len or EOF; returns bytes or -errno. */
static int64_t read_full(int fd, uint8_t *buf, uint64_t len, uint64_t off)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t r = pread(fd, buf + done, len - done, off + done);

		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += r;
	}
	return done;
}

/* Compare @len bytes read at @off against the expected bytes (fixed @byte
 * when @seed < 0, else the pattern) and print one line. */
static void check(int fd, uint64_t off, uint64_t len, int byte, int64_t seed)
{
	uint8_t *buf = abuf(len);
	int64_t r = read_full(fd, buf, len, off);
	uint64_t i, bad = 0, first = 0;
	uint8_t got = 0, want = 0;

	if (r < 0) {
		printf("%s\n", ename(-r));
		goto out;
	}
	if ((uint64_t)r < len) {
		printf("SHORT %" PRId64 "\n", r);
		goto out;
	}
	for (i = 0; i < len; i++) {
		uint8_t w = seed < 0 ? (uint8_t)byte : pat(off + i, seed);

		if (buf[i] != w) {
			if (!bad++) {
				first = off + i;
				got = buf[i];
				want = w;
			}
		}
	}
	if (bad)
		printf("MISMATCH at %" PRIu64 ": got 0x%02x want 0x%02x; %" PRIu64
		       " bytes differ\n", first, got, want, bad);
	else
		printf("OK\n");
out:
	free(buf);
}

static void print_res(int64_t r)
{
	if (r < 0)
		printf("%s\n", ename(-r));
	else
		printf("%" PRId64 "\n", r);
}

static int path_op(int argc, char **argv)
{
	const char *op = argv[0];
	int r = -1, e;

	if (!strcmp(op, "strerror") && argc == 2) {
		for (e = 1; e < 200; e++) {
			const char *n = strerrorname_np(e);

			if (n && !strcmp(n, argv[1])) {
				printf("%s\n", strerror(e));
				return 0;
			}
		}
		usage();
	}
	if (argc == 2) {
		if (!strcmp(op, "create")) {
			r = open(argv[1], O_CREAT | O_WRONLY, 0644);
			if (r >= 0)
				close(r);
		} else if (!strcmp(op, "mkdir")) {
			r = mkdir(argv[1], 0755);
		} else if (!strcmp(op, "rmdir")) {
			r = rmdir(argv[1]);
		} else if (!strcmp(op, "unlink")) {
			r = unlink(argv[1]);
		} else if (!strcmp(op, "mknod")) {
			r = mknod(argv[1], S_IFREG | 0644, 0);
		} else if (!strcmp(op, "utimes")) {
			r = utimes(argv[1], NULL);
		} else {
			return -1;
		}
	} else if (argc == 3) {
		if (!strcmp(op, "rename"))
			r = rename(argv[1], argv[2]);
		else if (!strcmp(op, "link"))
			r = link(argv[1], argv[2]);
		else if (!strcmp(op, "symlink"))
			r = symlink(argv[1], argv[2]);
		else if (!strcmp(op, "exchange"))
			r = renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_EXCHANGE);
		else if (!strcmp(op, "noreplace"))
			r = renameat2(AT_FDCWD, argv[1], AT_FDCWD, argv[2], RENAME_NOREPLACE);
		else if (!strcmp(op, "chmod"))
			r = chmod(argv[1], (mode_t)strtoul(argv[2], NULL, 8));
		else
			return -1;
	} else if (argc == 4 && !strcmp(op, "chown")) {
		r = chown(argv[1], (uid_t)num(argv[2]), (gid_t)num(argv[3]));
	} else {
		return -1;
	}
	printf("%s\n", r < 0 ? ename(errno) : "OK");
	return 0;
}

int main(int argc, char **argv)
{
	int flags = O_RDWR, extra = 0, opt, fd, i;
	struct stat st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "+drwtacx")) != -1) {
		switch (opt) {
		case 'd': extra |= O_DIRECT; break;
		case 'r': flags = O_RDONLY; break;
		case 'w': flags = O_WRONLY; break;
		case 't': extra |= O_TRUNC; break;
		case 'a': extra |= O_APPEND; break;
		case 'c': extra |= O_CREAT; break;
		case 'x': extra |= O_CREAT | O_EXCL; break;
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage();
	if (argc <= 4 && path_op(argc, argv) == 0)
		return 0;
	if (argc < 2)
		usage();

	fd = open(argv[0], flags | extra, 0644);
	if (fd < 0) {
		printf("open: %s\n", ename(errno));
		return 1;
	}
	for (i = 1; i < argc;) {
		const char *op = argv[i++];
#define ARG(n) (i + (n) <= argc ? argv[i + (n) - 1] : (usage(), ""))
		if (!strcmp(op, "size") || !strcmp(op, "blksize")) {
			if (fstat(fd, &st) < 0)
				print_res(-errno);
			else
				printf("%" PRIu64 "\n", !strcmp(op, "size") ?
				       (uint64_t)st.st_size : (uint64_t)st.st_blksize);
		} else if (!strcmp(op, "fsync")) {
			printf("%s\n", fsync(fd) < 0 ? ename(errno) : "OK");
		} else if (!strcmp(op, "fdatasync")) {
			printf("%s\n", fdatasync(fd) < 0 ? ename(errno) : "OK");
		} else if (!strcmp(op, "pread")) {
			uint64_t off = num(ARG(1)), len = num(ARG(2));
			void *buf = abuf(len);
			ssize_t r = pread(fd, buf, len, off);

			print_res(r < 0 ? -errno : r);
			free(buf);
			i += 2;
		} else if (!strcmp(op, "pwrite") || !strcmp(op, "fill") ||
			   !strcmp(op, "pattern")) {
			uint64_t off = num(ARG(1)), len = num(ARG(2)), k;
			int has3 = strcmp(op, "pwrite") || (i + 2 < argc &&
				   argv[i + 2][0] >= '0' && argv[i + 2][0] <= '9');
			uint64_t v = has3 ? num(ARG(3)) : 0x5a;
			uint8_t *buf = abuf(len);
			ssize_t r;

			for (k = 0; k < len; k++)
				buf[k] = strcmp(op, "pattern") ? (uint8_t)v : pat(off + k, v);
			r = pwrite(fd, buf, len, off);
			if (!strcmp(op, "pwrite"))
				print_res(r < 0 ? -errno : r);
			else if (r < 0)
				printf("%s\n", ename(errno));
			else if ((uint64_t)r != len)
				printf("SHORT %zd\n", r);
			else
				printf("OK\n");
			free(buf);
			i += 2 + has3;
		} else if (!strcmp(op, "expect")) {
			check(fd, num(ARG(1)), num(ARG(2)), (int)num(ARG(3)), -1);
			i += 3;
		} else if (!strcmp(op, "verify")) {
			check(fd, num(ARG(1)), num(ARG(2)), 0, (int64_t)num(ARG(3)));
			i += 3;
		} else if (!strcmp(op, "write") || !strcmp(op, "read")) {
			uint64_t len = num(ARG(1)), k;
			int has2 = !strcmp(op, "write") && i + 1 < argc &&
				   argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9';
			uint64_t v = has2 ? num(ARG(2)) : 0x5a;
			uint8_t *buf = abuf(len);
			ssize_t r;

			for (k = 0; k < len; k++)
				buf[k] = (uint8_t)v;
			r = !strcmp(op, "write") ? write(fd, buf, len) : read(fd, buf, len);
			print_res(r < 0 ? -errno : r);
			free(buf);
			i += 1 + has2;
		} else if (!strcmp(op, "lseek")) {
			const char *w = ARG(2);
			int whence = !strcmp(w, "set") ? SEEK_SET : !strcmp(w, "cur") ? SEEK_CUR :
				     !strcmp(w, "end") ? SEEK_END : !strcmp(w, "data") ? SEEK_DATA :
				     !strcmp(w, "hole") ? SEEK_HOLE : (usage(), 0);
			off_t r = lseek(fd, (off_t)num(ARG(1)), whence);

			print_res(r < 0 ? -errno : r);
			i += 2;
		} else if (!strcmp(op, "setxattr")) {
			const char *v = ARG(2);

			printf("%s\n", fsetxattr(fd, ARG(1), v, strlen(v), 0) < 0 ? ename(errno) : "OK");
			i += 2;
		} else if (!strcmp(op, "getxattr")) {
			char v[4096];
			ssize_t r = fgetxattr(fd, ARG(1), v, sizeof(v));

			print_res(r < 0 ? -errno : r);
			i += 1;
		} else if (!strcmp(op, "removexattr")) {
			printf("%s\n", fremovexattr(fd, ARG(1)) < 0 ? ename(errno) : "OK");
			i += 1;
		} else if (!strcmp(op, "listxattr")) {
			char v[4096];
			ssize_t r = flistxattr(fd, v, sizeof(v));

			print_res(r < 0 ? -errno : r);
		} else if (!strcmp(op, "ioctl")) {
			uint8_t *buf = abuf(4096);
			int r;

			memset(buf, 0, 4096);
			r = ioctl(fd, (unsigned long)num(ARG(1)), buf);
			print_res(r < 0 ? -errno : r);
			free(buf);
			i += 1;
		} else if (!strcmp(op, "fallocate")) {
			printf("%s\n", fallocate(fd, (int)num(ARG(1)), (off_t)num(ARG(2)),
						 (off_t)num(ARG(3))) < 0 ? ename(errno) : "OK");
			i += 3;
		} else if (!strcmp(op, "truncate")) {
			printf("%s\n", ftruncate(fd, num(ARG(1))) < 0 ? ename(errno) : "OK");
			i += 1;
		} else if (!strcmp(op, "punch") || !strcmp(op, "zero") ||
			   !strcmp(op, "zerokeep") || !strcmp(op, "alloc")) {
			int mode = !strcmp(op, "punch") ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE :
				   !strcmp(op, "zero") ? FALLOC_FL_ZERO_RANGE :
				   !strcmp(op, "zerokeep") ? FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE : 0;

			printf("%s\n", fallocate(fd, mode, num(ARG(1)), num(ARG(2))) < 0 ?
			       ename(errno) : "OK");
			i += 2;
		} else {
			usage();
		}
#undef ARG
	}
	close(fd);
	return 0;
}
