/* SPDX-License-Identifier: MIT */
/*
 * fuse/loop.c - the loop path: `blkfs attach MNT DEV` puts a loop device
 * over a device file (its sector size = the device's logical block size,
 * buffered I/O: blkfs's cache is the one that matters), `blkfs detach`
 * takes it away, and the daemon marks itself an I/O flusher.
 *
 * A loop device shows one sector size as logical block, physical block and
 * minimum I/O, whatever the file below it, so mkfs cannot see the geometry
 * blkfs gives the device. attach prints what the loop hides and the mkfs
 * options that give the filesystem the alignment mkfs would have chosen on
 * a real disk of that geometry.
 *
 * Memory pressure: reclaim may write dirty pages of the loop device, whose
 * writes wait for blkfs; if blkfs's own allocation waits in reclaim for
 * those pages, nothing moves again. PR_SET_IO_FLUSHER (per thread,
 * inherited by threads created later) makes the daemon's allocations
 * GFP_NOIO-like and exempts it from dirty throttling, as the kernel asks of
 * user-space block device daemons.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../backends/lib/log.h"
#include "bf.h"
#include "loop.h"
#include "mnt.h"

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

/*
 * detach: how long and how often to try the exclusive open again while the
 * loop device is busy (detach_one()). A filesystem unmounted a moment ago
 * drops its claim when its last reference goes, soon after umount(8)
 * returns; a device still busy after 2 s is taken to be in use, not
 * closing, and detach says so rather than wait on. 100 ms between tries:
 * the open is cheap (20 of them at most), and a person running detach
 * waits at most 100 ms past the moment the claim goes. Neither figure was
 * measured; they bound a command a person runs, not a hot path.
 */
#define DETACH_BUSY_WAIT_MS	2000
#define DETACH_BUSY_POLL_MS	100

void bf_io_flusher(void)
{
	const char *off = getenv("BLKFS_NO_IO_FLUSHER");

	/* a debug switch: the memory-pressure test proves the flag matters by going without */
	if (off && !strcmp(off, "1")) {
		blk_warn("BLKFS_NO_IO_FLUSHER=1: not an I/O flusher (a loop device over this "
			 "mount may deadlock under memory pressure)");
		return;
	}
	if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0)) {
		if (errno == EPERM)
			blk_warn("not an I/O flusher (PR_SET_IO_FLUSHER needs CAP_SYS_RESOURCE): a "
				 "loop device over this mount may deadlock under memory pressure");
		else
			blk_warn("PR_SET_IO_FLUSHER: %s: a loop device over this mount may "
				 "deadlock under memory pressure", strerror(errno));
	}
}

/* A .sys attribute of device @dev of mount @mnt as a number; 0 if unreadable. */
static unsigned long long sys_num(const char *mnt, const char *dev, const char *attr)
{
	char path[PATH_MAX], buf[64];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.sys/%s/%s", mnt, dev, attr);
	f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f) || sscanf(buf, "%llu", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/*
 * The mkfs options that give a filesystem on @loop what mkfs would pick
 * from the real topology (lbs/pbs/io_min/io_opt), as blkid reports it for
 * a disk: ext4's RAID stride and stripe width in filesystem blocks, XFS's
 * sector size, stripe unit and width.
 */
/* Append to the string in @buf (@len bytes), truncating. */
static void __attribute__((format(printf, 3, 4)))
addf(char *buf, size_t len, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf + n, len - n, fmt, ap);
	va_end(ap);
}

static void print_mkfs(const char *loop, unsigned lbs, unsigned pbs, unsigned io_min,
		       unsigned io_opt)
{
	unsigned ebs = lbs > 4096 ? lbs : 4096;	/* ext4's default block, or the sector if larger */
	char e[256] = "", x[256] = "";

	if (lbs > 4096)
		addf(e, sizeof(e), " -b %u", ebs);
	if ((io_min > ebs && io_min % ebs == 0) || (io_opt > ebs && io_opt % ebs == 0)) {
		addf(e, sizeof(e), " -E ");
		if (io_min > ebs && io_min % ebs == 0)
			addf(e, sizeof(e), "stride=%u%s", io_min / ebs,
			     io_opt > ebs && io_opt % ebs == 0 ? "," : "");
		if (io_opt > ebs && io_opt % ebs == 0)
			addf(e, sizeof(e), "stripe_width=%u", io_opt / ebs);
	}
	if (lbs > 4096)
		addf(x, sizeof(x), " -b size=%u", lbs);
	/*
	 * XFS's sector (its log's write unit): the physical block when larger
	 * than the logical one, but never above the filesystem block (mkfs.xfs
	 * refuses that; on a real disk it falls back the same way).
	 */
	if ((pbs < ebs ? pbs : ebs) > lbs)
		addf(x, sizeof(x), " -s size=%u", pbs < ebs ? pbs : ebs);
	/* a stripe: su a multiple of the filesystem block, sw whole stripe units */
	if (io_min >= ebs && io_min % ebs == 0 && io_opt > io_min && io_opt % io_min == 0)
		addf(x, sizeof(x), " -d su=%u,sw=%u", io_min, io_opt / io_min);
	fprintf(stderr, "blkfs: mkfs.ext4%s %s\n", e, loop);
	fprintf(stderr, "blkfs: mkfs.xfs%s %s\n", x, loop);
}

/* A free loop device with @fd under it; its name in @name. Returns 0 or -errno. */
static int loop_setup(int fd, unsigned lbs, bool ro, const char *file, char *name, size_t len)
{
	struct loop_config cfg;
	int ctl, nr, lfd = -1, tries, ret = 0;

	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return -errno;
	for (tries = 0; tries < 16; tries++) {
		nr = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (nr < 0) {
			ret = -errno;
			break;
		}
		snprintf(name, len, "/dev/loop%d", nr);
		lfd = open(name, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
		if (lfd < 0) {
			ret = -errno;
			break;
		}
		memset(&cfg, 0, sizeof(cfg));
		cfg.fd = (unsigned)fd;
		cfg.block_size = lbs;
		cfg.info.lo_flags = ro ? LO_FLAGS_READ_ONLY : 0;
		/* shown by losetup when sysfs is not there; cut to its 64 bytes */
		memcpy(cfg.info.lo_file_name, file,
		       strnlen(file, sizeof(cfg.info.lo_file_name) - 1));
		if (!ioctl(lfd, LOOP_CONFIGURE, &cfg)) {
			ret = 0;
			break;
		}
		ret = -errno;
		close(lfd);
		lfd = -1;
		/* taken by someone else between GET_FREE and CONFIGURE: the next one */
		if (ret != -EBUSY)
			break;
	}
	close(ctl);
	if (lfd >= 0)
		close(lfd);
	return ret;
}

int bf_cmd_attach(int argc, char **argv)
{
	char mnt[PATH_MAX], type[64], file[PATH_MAX], loop[64];
	unsigned lbs, pbs, io_min, io_opt;
	const char *dev;
	struct stat st;
	bool ro = false;
	int fd, ret, lfd;

	if (argc != 3) {
		fprintf(stderr, "blkfs attach: expected a mount point and a device name\n"
			"Usage: blkfs attach MNT DEV\n");
		return 2;
	}
	dev = argv[2];
	ret = bf_canon_mnt(argv[1], mnt, sizeof(mnt));
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	bf_mount_type(mnt, type, sizeof(type));
	if (strcmp(type, "fuse.blkfs")) {
		fprintf(stderr, "blkfs: %s: not a blkfs mount\n", mnt);
		return 1;
	}
	if (!*dev || strchr(dev, '/') || dev[0] == '.') {
		fprintf(stderr, "blkfs attach: %s: not a device name (the name of a file in %s)\n",
			dev, mnt);
		return 2;
	}
	if (snprintf(file, sizeof(file), "%s/%s", mnt, dev) >= (int)sizeof(file)) {
		fprintf(stderr, "blkfs: %s/%s: %s\n", mnt, dev, strerror(ENAMETOOLONG));
		return 1;
	}
	fd = open(file, O_RDWR | O_CLOEXEC);
	if (fd < 0 && (errno == EROFS || errno == EACCES)) {
		/* a read-only mount (or a device file we may only read): a read-only loop */
		fd = open(file, O_RDONLY | O_CLOEXEC);
		ro = true;
	}
	if (fd < 0 || fstat(fd, &st)) {
		fprintf(stderr, "blkfs: %s: %s\n", file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	lbs = (unsigned)sys_num(mnt, dev, "queue/logical_block_size");
	pbs = (unsigned)sys_num(mnt, dev, "queue/physical_block_size");
	io_min = (unsigned)sys_num(mnt, dev, "queue/minimum_io_size");
	io_opt = (unsigned)sys_num(mnt, dev, "queue/optimal_io_size");
	if (!lbs || !pbs) {
		fprintf(stderr, "blkfs: %s: cannot read its geometry from %s/.sys/%s/queue\n", file,
			mnt, dev);
		close(fd);
		return 1;
	}
	ret = loop_setup(fd, lbs, ro, file, loop, sizeof(loop));
	close(fd);
	if (ret) {
		fprintf(stderr, "blkfs: %s: cannot set up a loop device: %s%s\n", file, strerror(-ret),
			ret == -ENOENT ? " (no /dev/loop-control: modprobe loop)" : "");
		return 1;
	}
	/* the loop device must show the device's logical block as its sector */
	lfd = open(loop, O_RDONLY | O_CLOEXEC);
	if (lfd >= 0) {
		int ss = 0;

		if (!ioctl(lfd, BLKSSZGET, &ss) && (unsigned)ss != lbs)
			fprintf(stderr, "blkfs: %s: the kernel gave it %d-byte sectors, not %u\n", loop,
				ss, lbs);
		close(lfd);
	}
	printf("%s\n", loop);
	fflush(stdout);
	fprintf(stderr, "blkfs: %s over %s%s: %u-byte sectors; the loop device shows %u as "
		"physical block and minimum I/O too\n", loop, file, ro ? " (read-only)" : "", lbs, lbs);
	fprintf(stderr, "blkfs: the device has: physical block %u, io_min %u, io_opt %u; mkfs "
		"options that keep that alignment:\n", pbs, io_min, io_opt);
	print_mkfs(loop, lbs, pbs, io_min, io_opt);
	fprintf(stderr, "blkfs: blkfs detach %s removes it\n", loop);
	return 0;
}

/* Detach one loop device (a blkfs one: its backing file is in a blkfs mount). */
static int detach_one(const char *loop)
{
	char back[PATH_MAX], type[64], mnt[PATH_MAX];
	const char *name = strrchr(loop, '/');
	struct stat st;
	char *slash;
	int fd;

	name = name ? name + 1 : loop;
	if (stat(loop, &st) || !S_ISBLK(st.st_mode) || strncmp(name, "loop", 4)) {
		fprintf(stderr, "blkfs: %s: not a loop device\n", loop);
		return 1;
	}
	if (bf_loop_backing(name, back, sizeof(back))) {
		fprintf(stderr, "blkfs: %s: not attached\n", loop);
		return 1;
	}
	snprintf(mnt, sizeof(mnt), "%s", back);
	slash = strrchr(mnt, '/');
	if (slash)
		*slash = 0;
	bf_mount_type(mnt, type, sizeof(type));
	if (strcmp(type, "fuse.blkfs")) {
		fprintf(stderr, "blkfs: %s: over %s, not a blkfs device file (losetup -d detaches "
			"any loop device)\n", loop, back);
		return 1;
	}
	/*
	 * An exclusive open fails while a filesystem is mounted on it or
	 * something else claims it: refused, rather than LOOP_CLR_FD turning
	 * into a detach deferred to whenever that ends.
	 */
	fd = open(loop, O_RDONLY | O_EXCL | O_CLOEXEC);
	/*
	 * A filesystem unmounted a moment ago may hold its claim a little
	 * longer (its last reference goes after umount(8) returns on a busy
	 * machine): a detach right after it waits up to DETACH_BUSY_WAIT_MS
	 * for that.
	 */
	for (int i = 0; fd < 0 && errno == EBUSY && i < DETACH_BUSY_WAIT_MS / DETACH_BUSY_POLL_MS;
	     i++) {
		usleep(DETACH_BUSY_POLL_MS * 1000);
		fd = open(loop, O_RDONLY | O_EXCL | O_CLOEXEC);
	}
	if (fd < 0) {
		if (errno == EBUSY)
			fprintf(stderr, "blkfs: %s: busy: a filesystem on it is mounted, or it is "
				"claimed (see findmnt %s, ls /sys/block/%s/holders)\n", loop, loop,
				name);
		else
			fprintf(stderr, "blkfs: %s: %s\n", loop, strerror(errno));
		return 1;
	}
	if (ioctl(fd, LOOP_CLR_FD, 0)) {
		fprintf(stderr, "blkfs: %s: detach: %s\n", loop, strerror(errno));
		close(fd);
		return 1;
	}
	close(fd);
	/* another opener (a dd, a blkid) makes the kernel detach it when that closes */
	if (!bf_loop_backing(name, back, sizeof(back)))
		fprintf(stderr, "blkfs: %s: still open by a process; it goes when that closes it\n",
			loop);
	else
		fprintf(stderr, "blkfs: %s: detached from %s\n", loop, back);
	return 0;
}

int bf_cmd_detach(int argc, char **argv)
{
	char mnt[PATH_MAX], file[PATH_MAX], devs[64][32];
	int i, n, ret;

	if (argc == 2)
		return detach_one(argv[1]);
	if (argc != 3) {
		fprintf(stderr, "blkfs detach: expected /dev/loopN, or a mount point and a device\n"
			"Usage: blkfs detach /dev/loopN | blkfs detach MNT DEV\n");
		return 2;
	}
	ret = bf_canon_mnt(argv[1], mnt, sizeof(mnt));
	if (ret) {
		fprintf(stderr, "blkfs: %s: %s\n", argv[1], strerror(-ret));
		return 1;
	}
	if (snprintf(file, sizeof(file), "%s/%s", mnt, argv[2]) >= (int)sizeof(file)) {
		fprintf(stderr, "blkfs: %s/%s: %s\n", mnt, argv[2], strerror(ENAMETOOLONG));
		return 1;
	}
	n = bf_loops_over(file, true, devs, 64, NULL);
	if (!n) {
		fprintf(stderr, "blkfs: %s: no loop device over it\n", file);
		return 1;
	}
	for (ret = 0, i = 0; i < n; i++)
		ret |= detach_one(devs[i]);
	return ret;
}
