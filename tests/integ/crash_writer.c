/* SPDX-License-Identifier: MIT */
/*
 * tests/integ/crash_writer.c - a writer that logs every fsync it completed,
 * and the check that after a crash every write those fsyncs acknowledged is
 * on the device.
 *
 *   crash_writer write DEV SEED SIZE LOG
 *	Writes records 0, 1, 2, ... into the first SIZE bytes of DEV with
 *	buffered pwrite: record i's offset, length (1 byte to 256 KiB, mostly
 *	not block-aligned) and bytes all follow from (SEED, i). Before record i
 *	it appends "start i" to LOG; after roughly every fourth record it calls
 *	fsync, and once that returned 0 it appends "synced N" (records 0..N-1
 *	are acknowledged). Runs until an error (the daemon was killed: the
 *	mount is aborted) and exits 0 then, or 2 on usage errors.
 *
 *   crash_writer verify DEV SEED SIZE LOG BASE
 *	BASE holds the first SIZE bytes of DEV before the writer ran. Replays
 *	the acknowledged records onto BASE and compares with DEV: every byte
 *	must be the model's, or that of a record started after the last
 *	acknowledged fsync that covers it (written, maybe written back, never
 *	promised). Prints what it checked; exit 0 if every byte is accounted
 *	for, 1 with the first offsets that are not, 2 on other errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REC (256 * 1024)

struct rec {
	uint64_t off;
	uint32_t len;
	bool sync;	/* fsync after this record */
	uint64_t fill;	/* seed of its bytes */
};

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static struct rec rec_params(uint64_t seed, uint64_t i, uint64_t size)
{
	uint64_t s = seed * 0x100000001b3ULL ^ (i * 0xff51afd7ed558ccdULL);
	uint64_t r = splitmix(&s), len;
	struct rec rc;

	switch (r % 4) {
	case 0:		/* a few whole 4 KiB blocks, aligned */
		len = 4096 * (1 + splitmix(&s) % 16);
		break;
	case 1:		/* small and unaligned */
		len = 1 + splitmix(&s) % 8192;
		break;
	default:	/* anything up to 256 KiB */
		len = 1 + splitmix(&s) % MAX_REC;
		break;
	}
	if (len > size)
		len = size;
	rc.len = len;
	rc.off = splitmix(&s) % (size - len + 1);
	if (r % 4 == 0)
		rc.off &= ~4095ULL;
	rc.sync = splitmix(&s) % 4 == 0;
	rc.fill = splitmix(&s);
	return rc;
}

static void rec_fill(const struct rec *rc, unsigned char *buf)
{
	uint64_t s = rc->fill, v;
	uint32_t k;

	for (k = 0; k + 8 <= rc->len; k += 8) {
		v = splitmix(&s);
		memcpy(buf + k, &v, 8);
	}
	if (k < rc->len) {
		v = splitmix(&s);
		memcpy(buf + k, &v, rc->len - k);
	}
}

static void logf_line(int fd, const char *what, uint64_t n)
{
	char line[64];
	int l = snprintf(line, sizeof(line), "%s %" PRIu64 "\n", what, n);

	if (write(fd, line, l) != l) {
		perror("crash_writer: log");
		exit(2);
	}
}

static int do_write(const char *dev, uint64_t seed, uint64_t size, const char *log)
{
	static unsigned char buf[MAX_REC];
	int fd, lfd;
	uint64_t i;

	fd = open(dev, O_WRONLY);
	lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (fd < 0 || lfd < 0) {
		fprintf(stderr, "crash_writer: open %s: %s\n", fd < 0 ? dev : log, strerror(errno));
		return 2;
	}
	for (i = 0;; i++) {
		struct rec rc = rec_params(seed, i, size);
		uint32_t done = 0;
		ssize_t n;

		rec_fill(&rc, buf);
		logf_line(lfd, "start", i);
		while (done < rc.len) {
			n = pwrite(fd, buf + done, rc.len - done, rc.off + done);
			if (n <= 0) {
				fprintf(stderr, "crash_writer: record %" PRIu64 ": write: %s\n", i,
					n < 0 ? strerror(errno) : "wrote nothing");
				return 0;
			}
			done += n;
		}
		if (rc.sync) {
			if (fsync(fd)) {
				fprintf(stderr, "crash_writer: fsync after record %" PRIu64 ": %s\n",
					i, strerror(errno));
				return 0;
			}
			logf_line(lfd, "synced", i + 1);
		}
	}
}

static int read_all(const char *path, unsigned char *buf, uint64_t size)
{
	uint64_t done = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY);

	if (fd < 0) {
		fprintf(stderr, "crash_writer: open %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (done < size) {
		n = pread(fd, buf + done, size - done, done);
		if (n <= 0) {
			fprintf(stderr, "crash_writer: read %s at %" PRIu64 ": %s\n", path, done,
				n < 0 ? strerror(errno) : "end of file");
			close(fd);
			return -1;
		}
		done += n;
	}
	close(fd);
	return 0;
}

static int do_verify(const char *dev, uint64_t seed, uint64_t size, const char *log,
		     const char *base)
{
	static unsigned char buf[MAX_REC];
	unsigned char *model = malloc(size), *got = malloc(size);
	uint64_t acked = 0, started = 0, v, i, p, bad = 0, acked_bytes = 0, diff = 0;
	struct rec *late = NULL;
	unsigned char **late_buf = NULL;
	char what[16];
	FILE *f;

	if (!model || !got) {
		fprintf(stderr, "crash_writer: out of memory\n");
		return 2;
	}
	f = fopen(log, "r");
	if (!f) {
		fprintf(stderr, "crash_writer: open %s: %s\n", log, strerror(errno));
		return 2;
	}
	while (fscanf(f, "%15s %" SCNu64, what, &v) == 2) {
		if (!strcmp(what, "start") && v + 1 > started)
			started = v + 1;
		else if (!strcmp(what, "synced") && v > acked)
			acked = v;
	}
	fclose(f);
	if (read_all(base, model, size) || read_all(dev, got, size))
		return 2;

	for (i = 0; i < acked; i++) {
		struct rec rc = rec_params(seed, i, size);

		rec_fill(&rc, buf);
		memcpy(model + rc.off, buf, rc.len);
		acked_bytes += rc.len;
	}
	if (started > acked) {
		late = calloc(started - acked, sizeof(*late));
		late_buf = calloc(started - acked, sizeof(*late_buf));
		if (!late || !late_buf)
			return 2;
		for (i = acked; i < started; i++) {
			late[i - acked] = rec_params(seed, i, size);
			late_buf[i - acked] = malloc(MAX_REC);
			if (!late_buf[i - acked])
				return 2;
			rec_fill(&late[i - acked], late_buf[i - acked]);
		}
	}
	for (p = 0; p < size; p++) {
		bool ok = false;

		if (got[p] == model[p])
			continue;
		diff++;
		for (i = 0; i < started - acked && !ok; i++) {
			struct rec *rc = &late[i];

			if (p >= rc->off && p < rc->off + rc->len)
				ok = late_buf[i][p - rc->off] == got[p];
		}
		if (ok)
			continue;
		if (bad++ < 5)
			fprintf(stderr,
				"crash_writer: byte %" PRIu64 " is 0x%02x: the acknowledged state has 0x%02x and no later record wrote that\n",
				p, got[p], model[p]);
	}
	printf("%" PRIu64 " records acknowledged by fsync (%" PRIu64 " bytes), %" PRIu64
	       " started after the last acknowledged fsync; %" PRIu64
	       " bytes differ from the acknowledged state, %" PRIu64 " of them not written by those: %s\n",
	       acked, acked_bytes, started - acked, diff, bad, bad ? "LOST DATA" : "ok");
	if (bad)
		fprintf(stderr, "crash_writer: %" PRIu64 " bytes acknowledged by fsync are not on %s\n",
			bad, dev);
	for (i = 0; late_buf && i < started - acked; i++)
		free(late_buf[i]);
	free(late_buf);
	free(late);
	free(model);
	free(got);
	return bad ? 1 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: crash_writer write DEV SEED SIZE LOG\n"
			"       crash_writer verify DEV SEED SIZE LOG BASE\n");
	exit(2);
}

int main(int argc, char **argv)
{
	uint64_t seed, size;
	char *end;

	if (argc < 6)
		usage();
	seed = strtoull(argv[3], &end, 0);
	if (*end)
		usage();
	size = strtoull(argv[4], &end, 0);
	if (*end || size < 4096)
		usage();
	if (!strcmp(argv[1], "write") && argc == 6)
		return do_write(argv[2], seed, size, argv[5]);
	if (!strcmp(argv[1], "verify") && argc == 7)
		return do_verify(argv[2], seed, size, argv[5], argv[6]);
	usage();
	return 2;
}
