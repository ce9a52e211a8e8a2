// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_aio.c - the aio backend (libaio + O_DIRECT) through the
 * contract (backend.h): on image files in a temp dir on a filesystem that
 * does O_DIRECT (skipped where none does), and, when run as root with
 * losetup, on loop devices with 512- and 4096-byte sectors (always detached
 * again in the fixture's teardown). Opened from hand-built struct
 * blk_params, as core/ would after parsing a config. Completions arrive on
 * the backend's reaper thread, so every test waits on a counter.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../backends/backends_int.h"
#include "../../backends/lib/clock.h"
#include "../../backends/lib/plug.h"
#include "async_backend.h"
#include "helpers.h"

static void *abuf(size_t len)
{
	void *p = NULL;

	cr_assert_eq(posix_memalign(&p, 4096, len ? len : 4096), 0);
	memset(p, 0xA5, len);
	return p;
}

/* ---- the temp dir and hand-built params ---- */

static char tdir[512];		/* this test's directory; removed by teardown */
static char loopdev[64];	/* attached by this test; detached by teardown */
static int zram_idx = -1;	/* added by this test; removed by teardown */
static struct blk_backend *zram_be;	/* open on it: closed by teardown first */

/* A directory on a filesystem that takes O_DIRECT, or skip the test. */
static void tdir_setup(void)
{
	static const char *const bases[] = { "/var/tmp", "build", "/tmp" };
	size_t i;

	for (i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		char probe[PATH_MAX + 16];
		void *buf;
		int fd;

		snprintf(tdir, sizeof(tdir), "%s/blkfs-aio-XXXXXX", bases[i]);
		if (!mkdtemp(tdir))
			continue;
		snprintf(probe, sizeof(probe), "%s/probe", tdir);
		fd = open(probe, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
		if (fd >= 0) {
			bool ok;

			buf = abuf(4096);
			ok = !ftruncate(fd, 4096) && pread(fd, buf, 4096, 0) == 4096;
			free(buf);
			close(fd);
			unlink(probe);
			if (ok) {
				char *real = realpath(tdir, NULL);

				snprintf(tdir, sizeof(tdir), "%s", real);
				free(real);
				return;
			}
		}
		rmdir(tdir);
	}
	tdir[0] = '\0';
}

static void run(const char *cmd)
{
	int st = system(cmd);

	(void)st;
}

static void tdir_teardown(void)
{
	char cmd[PATH_MAX + 64];

	if (zram_be) {
		zram_be->ops->close(zram_be);
		zram_be = NULL;
	}
	if (zram_idx >= 0) {
		snprintf(cmd, sizeof(cmd),
			 "echo %d >/sys/class/zram-control/hot_remove 2>/dev/null", zram_idx);
		run(cmd);
		zram_idx = -1;
	}

	if (loopdev[0]) {
		snprintf(cmd, sizeof(cmd), "losetup -d %s 2>/dev/null", loopdev);
		run(cmd);
		loopdev[0] = '\0';
	}
	if (tdir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tdir);
		run(cmd);
		tdir[0] = '\0';
	}
}

static void need_tdir(void)
{
	if (!tdir[0])
		cr_skip_test("no filesystem here takes O_DIRECT");
}

/* A [device disk0] in "<tdir>/blkfs.conf" of @size and @lbs, as conf gives them (0: not given). */
static void td_init_aio(struct test_dev *td, uint64_t size, uint32_t lbs)
{
	char file[PATH_MAX];

	snprintf(file, sizeof(file), "%s/blkfs.conf", tdir);
	td_init(td, "aio", file, "disk0");
	td->p.geo.size = size;
	td->p.geo.lbs = lbs;
}

static void tpath(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", tdir, name);
}

/* A plain file of @len bytes, written with a pattern. */
static void make_file(const char *name, uint64_t len)
{
	char path[PATH_MAX];
	unsigned char *buf = malloc(len ? len : 1);
	int fd;

	tpath(path, sizeof(path), name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert(fd >= 0);
	fill_pattern(buf, len, 0, 99);
	cr_assert_eq(pwrite(fd, buf, len, 0), (ssize_t)len);
	close(fd);
	free(buf);
}

static uint64_t file_size(const char *name)
{
	char path[PATH_MAX];
	struct stat st;

	tpath(path, sizeof(path), name);
	cr_assert_eq(stat(path, &st), 0, "stat %s", path);
	return st.st_size;
}

/* An image of @size created by the backend (create = yes, relative path). */
static struct blk_backend *open_image(struct test_dev *td, uint64_t size, unsigned int qd)
{
	td_init_aio(td, size, 0);
	td_set(td, "path", "disk.img");
	td_set(td, "create", "yes");
	if (qd)
		td_set(td, "queue_depth", "%u", qd);
	return td_open_ok(td);
}

TestSuite(aio, .init = tdir_setup, .fini = tdir_teardown, .timeout = 180);

/* ---- open, config, geometry ---- */

Test(aio, registered)
{
	const struct blk_backend_ops *ops = blk_backend_find("aio");
	const char *const *k;
	bool path = false, qd = false, create = false, excl = false;

	cr_assert_not_null(ops);
	cr_assert_str_eq(ops->name, "aio");
	cr_assert(!ops->is_filter);
	cr_assert(strstr(blk_backend_names(), "aio"));
	for (k = ops->keys; *k; k++) {
		path |= !strcmp(*k, "path");
		qd |= !strcmp(*k, "queue_depth");
		create |= !strcmp(*k, "create");
		excl |= !strcmp(*k, "exclusive");
	}
	cr_assert(path && qd && create && excl);
}

Test(aio, create_makes_the_file)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	need_tdir();
	be = open_image(&td, 4 * MiB, 0);
	cr_assert_eq(file_size("disk.img"), 4 * MiB);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 4 * MiB);
	cr_assert_eq(g.lbs, 512);
	cr_assert_eq(g.pbs, 512);
	cr_assert_eq(g.max_io, 1 * MiB);
	cr_assert(g.dma_align >= 512 && g.dma_align <= g.lbs && blk_is_pow2(g.dma_align),
		  "dma_align %u", g.dma_align);
	cr_assert_eq(stat_get(be, "aio_queue_depth"), 64);
	be->ops->close(be);
}

Test(aio, create_needs_size)
{
	struct test_dev td;
	char path[PATH_MAX];

	need_tdir();
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "new.img");
	td_set(&td, "create", "yes");
	td_open_fails(&td, "size", "needed to create", NULL);
	tpath(path, sizeof(path), "new.img");
	cr_assert_eq(access(path, F_OK), -1, "%s was created", path);
}

Test(aio, bad_geometry_creates_nothing)
{
	struct test_dev td;
	char path[PATH_MAX];

	need_tdir();
	td_init_aio(&td, 1 * MiB, 768);
	td_set(&td, "path", "new.img");
	td_set(&td, "create", "yes");
	cr_assert(IS_ERR(td_open(&td)));
	cr_assert(strstr(td.err, "logical_block_size"), "%s", td.err);
	tpath(path, sizeof(path), "new.img");
	cr_assert_eq(access(path, F_OK), -1, "a refused config left %s behind", path);
}

Test(aio, missing_path_error)
{
	struct test_dev td;
	char want[PATH_MAX + 32];

	need_tdir();
	td_init_aio(&td, 1 * MiB, 0);
	td_set(&td, "queue_depth", "4");
	td_set(&td, "path", "nothere.img");
	tpath(want, sizeof(want), "nothere.img");
	strcat(want, ": No such file or directory");
	td_open_fails(&td, "path", want, NULL);
	cr_assert(strstr(td.err, "create = yes"), "%s", td.err);

	td_init_aio(&td, 1 * MiB, 0);
	td_open_fails(&td, "path", "missing", NULL);
}

Test(aio, absolute_path_and_directory)
{
	struct test_dev td;
	char path[PATH_MAX];
	struct blk_backend *be;

	need_tdir();
	make_file("abs.img", 64 * KiB);
	tpath(path, sizeof(path), "abs.img");
	td_init_aio(&td, 0, 0);
	td.p.file = "elsewhere/blkfs.conf";	/* absolute paths ignore it */
	td_set(&td, "path", "%s", path);
	be = td_open_ok(&td);
	be->ops->close(be);

	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "%s", tdir);
	td_open_fails(&td, "path", "not a block device or a regular file", NULL);
}

Test(aio, bad_keys)
{
	static const char *const bad[] = { "0", "1025", "abc", "-1", "8x", "" };
	struct test_dev td;
	size_t i;

	need_tdir();
	make_file("k.img", 64 * KiB);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		td_init_aio(&td, 0, 0);
		td_set(&td, "path", "k.img");
		td_set(&td, "queue_depth", "%s", bad[i]);
		td_open_fails(&td, "queue_depth", "is not a number from 1 to 1024", NULL);
	}
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "k.img");
	td_set(&td, "create", "maybe");
	td_open_fails(&td, "create", "'maybe' is not yes/no", NULL);
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "k.img");
	td_set(&td, "exclusive", "2");
	td_open_fails(&td, "exclusive", "'2' is not yes/no", NULL);
}

Test(aio, size_from_existing_file)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	need_tdir();
	make_file("old.img", 1 * MiB + 1000);
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "old.img");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1 * MiB + 512, "size %llu", (unsigned long long)g.size);
	cr_assert_eq(g.lbs, 512);
	be->ops->close(be);

	td_init_aio(&td, 0, 4096);
	td_set(&td, "path", "old.img");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1 * MiB);
	cr_assert_eq(g.lbs, 4096);
	cr_assert_eq(g.pbs, 4096);
	be->ops->close(be);
	cr_assert_eq(file_size("old.img"), 1 * MiB + 1000, "the file was changed");

	/* Smaller than one block, and no size given. */
	make_file("tiny.img", 100);
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "tiny.img");
	td_open_fails(&td, "size", "less than one logical block", NULL);
}

Test(aio, size_extends_or_limits)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;
	unsigned char *buf = abuf(4096), *want = malloc(4096);

	need_tdir();
	make_file("small.img", 64 * KiB);
	td_init_aio(&td, 2 * MiB, 0);
	td_set(&td, "path", "small.img");
	be = td_open_ok(&td);
	cr_assert_eq(file_size("small.img"), 2 * MiB, "not extended");
	/* What was there stays; the extension reads as zeros. */
	cr_assert_eq(do_rw(be, BLK_READ, 60 * KiB, buf, 4096), 0);
	fill_pattern(want, 4096, 60 * KiB, 99);
	cr_assert_eq(memcmp(buf, want, 4096), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 1 * MiB, buf, 4096), 0);
	cr_assert(all_zero(buf, 4096));
	be->ops->close(be);

	/* A larger file: only `size` of it is the device. */
	td_init_aio(&td, 1 * MiB, 0);
	td_set(&td, "path", "small.img");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 1 * MiB);
	be->ops->close(be);
	cr_assert_eq(file_size("small.img"), 2 * MiB);
	free(buf);
	free(want);
}

/* ---- data ---- */

Test(aio, write_read_multi_segment)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *a = abuf(64 * KiB), *b = abuf(64 * KiB), *c = abuf(64 * KiB);
	unsigned char *want = malloc(64 * KiB), *disk = malloc(64 * KiB);
	struct iovec wv[3], rv[4];
	char path[PATH_MAX];
	int fd;

	need_tdir();
	be = open_image(&td, 4 * MiB, 0);

	/* 4K + 512 + 8K = 12.5K at an odd sector, from three separate buffers. */
	fill_pattern(want, 12800, 3 * 512, 1);
	memcpy(a, want, 4096);
	memcpy(b, want + 4096, 512);
	memcpy(c, want + 4608, 8192);
	wv[0] = (struct iovec){ a, 4096 };
	wv[1] = (struct iovec){ b, 512 };
	wv[2] = (struct iovec){ c, 8192 };
	cr_assert_eq(do_io(be, BLK_WRITE, 3 * 512, 12800, wv, 3), 0);

	/* Read back cut differently: 512, 1024, 3584 + 7680. */
	memset(a, 0, 64 * KiB);
	memset(b, 0, 64 * KiB);
	rv[0] = (struct iovec){ a, 512 };
	rv[1] = (struct iovec){ b, 1024 };
	rv[2] = (struct iovec){ a + 4096, 3584 };
	rv[3] = (struct iovec){ b + 8192, 7680 };
	cr_assert_eq(do_io(be, BLK_READ, 3 * 512, 12800, rv, 4), 0);
	cr_assert_eq(memcmp(a, want, 512), 0);
	cr_assert_eq(memcmp(b, want + 512, 1024), 0);
	cr_assert_eq(memcmp(a + 4096, want + 1536, 3584), 0);
	cr_assert_eq(memcmp(b + 8192, want + 5120, 7680), 0);

	/* And it is in the file, at that offset (the write went through). */
	tpath(path, sizeof(path), "disk.img");
	fd = open(path, O_RDONLY);
	cr_assert(fd >= 0);
	cr_assert_eq(pread(fd, disk, 12800 + 1024, 1024), 12800 + 1024);
	cr_assert(all_zero(disk, 512));
	cr_assert_eq(memcmp(disk + 512, want, 12800), 0);
	cr_assert(all_zero(disk + 512 + 12800, 512));
	close(fd);

	/* One max_io read over the whole first MiB. */
	{
		unsigned char *big = abuf(1 * MiB);

		cr_assert_eq(do_rw(be, BLK_READ, 0, big, 1 * MiB), 0);
		cr_assert(all_zero(big, 1536));
		cr_assert_eq(memcmp(big + 1536, want, 12800), 0);
		cr_assert(all_zero(big + 1536 + 12800, 1 * MiB - 1536 - 12800));
		free(big);
	}
	cr_assert_eq(stat_get(be, "aio_errors"), 0);
	be->ops->close(be);
	free(a);
	free(b);
	free(c);
	free(want);
	free(disk);
}

/*
 * BLK_IO_WAITED (the submitter sleeps until end_io anyway): done in the
 * caller's thread, ended before submit() returns, counted as aio_sync, with
 * the same data and errors as through the reaper.
 */
static int waited_io(struct blk_backend *be, enum blk_op op, uint64_t pos, uint64_t len,
		     const struct iovec *iov, int iovcnt)
{
	int calls, res;

	res = do_io_flags(be, op, pos, len, iov, iovcnt, BLK_IO_WAITED, &calls);
	cr_assert_eq(calls, 1, "a waited %s had not ended when submit() returned",
		     blk_op_name(op));
	return res;
}

Test(aio, waited_io_ends_in_the_callers_thread)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *a = abuf(64 * KiB), *b = abuf(64 * KiB);
	unsigned char *want = malloc(64 * KiB);
	struct iovec v[3];
	char path[PATH_MAX];

	need_tdir();
	aio_sync_inline = UINT64_MAX;	/* do_rw() below goes by io_submit(), not preadv */
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, 20480, 7 * 512, 21);
	memcpy(a, want, 4096);
	memcpy(b, want + 4096, 16384);
	v[0] = (struct iovec){ a, 4096 };
	v[1] = (struct iovec){ b, 16384 };
	cr_assert_eq(waited_io(be, BLK_WRITE, 7 * 512, 20480, v, 2), 0);
	cr_assert_eq(stat_get(be, "aio_sync"), 1);
	memset(a, 0, 64 * KiB);
	memset(b, 0, 64 * KiB);
	v[0] = (struct iovec){ b, 1536 };
	v[1] = (struct iovec){ a, 18432 };
	v[2] = (struct iovec){ b + 4096, 512 };
	cr_assert_eq(waited_io(be, BLK_READ, 7 * 512, 20480, v, 3), 0);
	cr_assert_eq(memcmp(b, want, 1536), 0);
	cr_assert_eq(memcmp(a, want + 1536, 18432), 0);
	cr_assert_eq(memcmp(b + 4096, want + 19968, 512), 0);
	/* and through the queue it reads the same */
	memset(a, 0, 64 * KiB);
	cr_assert_eq(do_rw(be, BLK_READ, 7 * 512, a, 20480), 0);
	cr_assert_eq(memcmp(a, want, 20480), 0);
	cr_assert_eq(stat_get(be, "aio_sync"), 2);

	/* past the end of a shrunken file: -EIO, also for the half that is there */
	tpath(path, sizeof(path), "disk.img");
	cr_assert_eq(truncate(path, 4096), 0);
	v[0] = (struct iovec){ a, 8192 };
	cr_assert_eq(waited_io(be, BLK_READ, 0, 8192, v, 1), -EIO);
	v[0].iov_len = 4096;
	cr_assert_eq(waited_io(be, BLK_READ, 64 * KiB, 4096, v, 1), -EIO);
	cr_assert_eq(stat_get(be, "aio_errors"), 2);
	cr_assert_eq(stat_get(be, "aio_inflight"), 0);
	be->ops->close(be);
	free(a);
	free(b);
	free(want);
}

/*
 * Any READ/WRITE on an idle device whose I/Os are fast: its caller submits
 * it without the eventfd signal and waits for it in io_getevents(), so
 * end_io runs in the caller's thread before submit() returns (the reply of
 * a FUSE request leaves from the thread that received it). When the caller
 * gives up (aio_wait_ns), the I/O is an orphan that signals nothing: the
 * reaper must find it, and close() must wait for it.
 */
struct tid_io {
	struct blk_io io;	/* must come first */
	struct iovec iov;
	pthread_t tid;		/* the thread end_io ran in */
	int calls;		/* atomic; tid and res are set before it */
	int res;
};

static void tid_end_io(struct blk_io *io, int res)
{
	struct tid_io *t = (struct tid_io *)io;

	t->tid = pthread_self();
	t->res = res;
	__atomic_add_fetch(&t->calls, 1, __ATOMIC_RELEASE);
}

static void tid_submit(struct blk_backend *be, struct tid_io *t, enum blk_op op, uint64_t pos,
		       void *buf, uint64_t len)
{
	memset(t, 0, sizeof(*t));
	t->iov = (struct iovec){ buf, len };
	t->io = (struct blk_io){ .op = op, .pos = pos, .len = len, .iov = &t->iov, .iovcnt = 1,
				 .end_io = tid_end_io };
	cr_assert_eq(be->ops->submit(be, &t->io), 0);
}

/* end_io's calls, once it has been called or after WAIT_MS (a hang: fail). */
static int tid_wait(struct tid_io *t)
{
	double end = now_s() + WAIT_MS / 1000.0;
	int calls;

	while (!(calls = __atomic_load_n(&t->calls, __ATOMIC_ACQUIRE)) && now_s() < end)
		usleep(1000);
	cr_assert_eq(calls, 1, "end_io called %d times after %u ms", calls, WAIT_MS);
	return t->res;
}

/* The orphan count falls back to @want, or fail after WAIT_MS saying what it was. */
static void orphans_wait(struct blk_backend *be, uint64_t want)
{
	double end = now_s() + WAIT_MS / 1000.0;
	uint64_t n;

	while ((n = stat_get(be, "aio_orphans")) != want && now_s() < end)
		usleep(1000);
	cr_assert_eq(n, want, "aio_orphans %llu after %u ms, want %llu", (unsigned long long)n,
		     WAIT_MS, (unsigned long long)want);
}

Test(aio, idle_io_ends_in_its_submitters_thread)
{
	enum { N = 16 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	int i;

	need_tdir();
	/* however slow this machine is: wait for it (the daemon waits 100 us) */
	aio_wait_ns = 60ull * 1000000000u;
	aio_fast_ns = UINT64_MAX;
	aio_sync_inline = UINT64_MAX;	/* the wait in io_getevents(), never preadv/pwritev */
	aio_wait_fast_ns = UINT64_MAX;
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, N * 4096, 0, 5);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1,
			     "write %d had not ended when submit() returned", i);
		cr_assert(pthread_equal(t.tid, pthread_self()), "write %d ended in another thread", i);
		cr_assert_eq(t.res, 0);
	}
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert(pthread_equal(t.tid, pthread_self()));
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_waited"), 2 * N);
	cr_assert_eq(stat_get(be, "aio_wait_missed"), 0);
	cr_assert_eq(stat_get(be, "aio_sync"), 0);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	/* a read past the end of a shrunken file fails the same way here */
	{
		char path[PATH_MAX];

		tpath(path, sizeof(path), "disk.img");
		cr_assert_eq(truncate(path, 4096), 0);
		tid_submit(be, &t, BLK_READ, 8192, buf, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert_eq(t.res, -EIO);
	}
	be->ops->close(be);
	free(buf);
	free(want);
}

/*
 * While the callers' waits are slow (aio_wait_latency_ns above
 * aio_wait_fast_ns: a loaded machine), an idle device's I/O goes by the
 * queue; one in AIO_WAIT_PROBE (32) still waits, to keep measuring. When the
 * waits are fast again every I/O is waited for again.
 */
Test(aio, slow_waits_stop_the_callers_wait_but_probes_go_on)
{
	enum { N = 64 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	int i;

	need_tdir();
	aio_wait_ns = 60ull * 1000000000u;
	aio_fast_ns = UINT64_MAX;
	aio_sync_inline = UINT64_MAX;	/* the wait in io_getevents(), never preadv/pwritev */
	aio_wait_fast_ns = 0;		/* any wait is slow */
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, N * 4096, 0, 13);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(tid_wait(&t), 0);
		cr_assert_eq(t.res, 0);
	}
	/* the first waits (nothing measured yet), then 1 of the next 63: the 32nd */
	cr_assert_eq(stat_get(be, "aio_waited"), 2);
	cr_assert_eq(stat_get(be, "aio_wait_skipped"), N - 2);
	cr_assert_gt(stat_get(be, "aio_wait_latency_ns"), 0);

	aio_wait_fast_ns = UINT64_MAX;	/* the waits are fast again */
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1,
			     "read %d had not ended when submit() returned", i);
		cr_assert(pthread_equal(t.tid, pthread_self()), "read %d ended in another thread", i);
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_waited"), 2 + N);
	cr_assert_eq(stat_get(be, "aio_wait_skipped"), N - 2);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	be->ops->close(be);
	free(buf);
	free(want);
}

Test(aio, given_up_io_is_found_by_the_reaper)
{
	enum { N = 16 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	int i;

	need_tdir();
	aio_wait_ns = 0;		/* every caller gives up at once */
	aio_fast_ns = UINT64_MAX;
	aio_sync_inline = UINT64_MAX;	/* the wait in io_getevents(), never preadv/pwritev */
	aio_wait_fast_ns = UINT64_MAX;
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, N * 4096, 0, 9);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(tid_wait(&t), 0);
		cr_assert(!pthread_equal(t.tid, pthread_self()), "write %d ended in its caller", i);
		orphans_wait(be, 0);
	}
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(tid_wait(&t), 0);
		orphans_wait(be, 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_wait_missed"), 2 * N);
	/* close() right after: it waits for the orphan's end */
	tid_submit(be, &t, BLK_WRITE, 0, buf, 4096);
	be->ops->close(be);
	cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1, "close returned before end_io");
	cr_assert_eq(t.res, 0);
	free(buf);
	free(want);
}

/*
 * On an idle device that does its work inside the submitting syscall
 * (zram, brd: aio_inline_pct at or above aio_sync_inline), the caller does
 * its READ/WRITE with one preadv/pwritev: no io_submit(), no
 * io_getevents(), end_io in its thread before submit() returns. One such
 * I/O in 32 goes by io_submit() and the wait, to keep measuring; its time
 * feeds the device's latency.
 */
Test(aio, idle_inline_io_is_one_syscall_in_its_callers_thread)
{
	enum { N = 16 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	int i;

	need_tdir();
	aio_wait_ns = 60ull * 1000000000u;
	aio_fast_ns = UINT64_MAX;
	aio_wait_fast_ns = UINT64_MAX;
	aio_sync_inline = 0;		/* whatever the image file does: an inline device */
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, N * 4096, 0, 29);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1,
			     "write %d had not ended when submit() returned", i);
		cr_assert(pthread_equal(t.tid, pthread_self()), "write %d ended in another thread", i);
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(stat_get(be, "aio_submit_calls"), 0, "an idle inline I/O went by io_submit()");
	cr_assert_gt(stat_get(be, "aio_latency_ns"), 0, "pwritev's times feed no latency");
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert(pthread_equal(t.tid, pthread_self()));
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	/* the 32nd was the probe: io_submit() and the caller's wait */
	cr_assert_eq(stat_get(be, "aio_idle_sync"), 2 * N - 1);
	cr_assert_eq(stat_get(be, "aio_sync"), 2 * N - 1);
	cr_assert_eq(stat_get(be, "aio_waited"), 1);
	cr_assert_eq(stat_get(be, "aio_submit_calls"), 1);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	cr_assert_eq(stat_get(be, "aio_errors"), 0);

	/* not an inline device: back to io_submit() and the wait */
	aio_sync_inline = UINT64_MAX;
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(stat_get(be, "aio_idle_sync"), 2 * N - 1);
	cr_assert_eq(stat_get(be, "aio_waited"), 1 + N);

	/* a read past the end of a shrunken file fails here as by the queue */
	aio_sync_inline = 0;
	{
		char path[PATH_MAX];

		tpath(path, sizeof(path), "disk.img");
		cr_assert_eq(truncate(path, 4096), 0);
		tid_submit(be, &t, BLK_READ, 8192, buf, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert_eq(t.res, -EIO);
		cr_assert_eq(stat_get(be, "aio_idle_sync"), 2 * N);
		cr_assert_eq(stat_get(be, "aio_errors"), 1);
	}
	be->ops->close(be);
	free(buf);
	free(want);
}

/*
 * An inline device's I/O is done by its caller even while the callers'
 * waits are slow (a loaded machine): its thread does not sleep, and the
 * queue would do the same work in io_submit() and wake the reaper besides.
 * Only the probes (one in 32) ask whether a wait pays.
 */
Test(aio, inline_io_is_done_by_its_caller_whatever_the_waits)
{
	enum { N = 64 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	int i;

	need_tdir();
	aio_fast_ns = UINT64_MAX;
	aio_wait_fast_ns = 0;		/* any wait is slow */
	aio_sync_inline = 0;
	be = open_image(&td, 4 * MiB, 0);
	fill_pattern(want, N * 4096, 0, 31);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(tid_wait(&t), 0);
		if ((i + 1) % 32)
			cr_assert(pthread_equal(t.tid, pthread_self()),
				  "write %d ended in another thread", i);
	}
	/*
	 * The probes, the 32nd and the 64th: the first waits (no wait measured
	 * yet), the second finds the waits slow and goes by the queue.
	 */
	cr_assert_eq(stat_get(be, "aio_idle_sync"), N - 2);
	cr_assert_eq(stat_get(be, "aio_waited"), 1);
	cr_assert_eq(stat_get(be, "aio_wait_skipped"), 1);
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(tid_wait(&t), 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_idle_sync"), 2 * N - 4);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	be->ops->close(be);
	free(buf);
	free(want);
}

/* Waited and queued I/O from many threads against queue_depth 4: each ends once. */
struct mixer {
	struct blk_backend *be;
	unsigned char *buf;
	int first, n, errors;
	unsigned int max_inflight;
};

static void *mixer_fn(void *arg)
{
	struct mixer *m = arg;
	int i;

	for (i = m->first; i < m->first + m->n; i++) {
		struct iovec v = { m->buf + (size_t)i * 4096, 4096 };
		struct waiter w;
		struct test_io t;
		unsigned int inflight;

		waiter_init(&w);
		test_io_init(&t, &w, BLK_WRITE, (uint64_t)i * 4096, 4096);
		t.io.flags = (i & 1) ? BLK_IO_WAITED : 0;
		t.io.iov = &v;
		t.io.iovcnt = 1;
		submit_async(m->be, &t);
		inflight = (unsigned int)stat_get(m->be, "aio_inflight");
		if (inflight > m->max_inflight)
			m->max_inflight = inflight;
		waiter_wait(&w);
		if (t.calls != 1 || t.res)
			m->errors++;
	}
	return NULL;
}

Test(aio, waited_and_queued_from_many_threads)
{
	enum { NT = 6, PER = 64, N = NT * PER };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf((size_t)N * 4096), *back = abuf((size_t)N * 4096);
	struct mixer m[NT];
	pthread_t th[NT];
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 4);
	fill_pattern(buf, (size_t)N * 4096, 0, 17);
	for (i = 0; i < NT; i++) {
		m[i] = (struct mixer){ be, buf, i * PER, PER, 0, 0 };
		pthread_create(&th[i], NULL, mixer_fn, &m[i]);
	}
	for (i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(m[i].errors, 0, "thread %d: %d I/Os failed or ended twice", i,
			     m[i].errors);
		cr_assert_leq(m[i].max_inflight, 4, "thread %d saw %u in flight, queue_depth 4",
			      i, m[i].max_inflight);
	}
	cr_assert_eq(stat_get(be, "aio_completed"), N);
	cr_assert_gt(stat_get(be, "aio_sync"), 0);
	cr_assert_leq(stat_get(be, "aio_sync"), N / 2);
	cr_assert_eq(do_rw(be, BLK_READ, 0, back, (uint64_t)N * 4096 / 2), 0);
	cr_assert_eq(do_rw(be, BLK_READ, (uint64_t)N * 4096 / 2, back + N * 4096 / 2,
			   (uint64_t)N * 4096 / 2), 0);
	cr_assert_eq(memcmp(buf, back, (size_t)N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_inflight"), 0);
	cr_assert_eq(stat_get(be, "aio_queued"), 0);
	be->ops->close(be);
	free(buf);
	free(back);
}

/* More iovecs than one iocb takes (IOV_MAX): the backend goes on in pieces. */
Test(aio, more_iovecs_than_iov_max)
{
	enum { NV = 2048, SEG = 512 };
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;
	struct iovec *v = calloc(NV, sizeof(*v));
	unsigned char *buf = abuf((size_t)NV * SEG), *want = malloc((size_t)NV * SEG);
	int i;

	need_tdir();
	td_init_aio(&td, 4 * MiB, 0);
	td.p.geo.max_io = 1 * MiB;
	td_set(&td, "path", "disk.img");
	td_set(&td, "create", "yes");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	if (g.dma_align > SEG) {
		be->ops->close(be);
		cr_skip_test("dma_align %u", g.dma_align);
	}
	/* Segments in reverse memory order, so a wrong seam shows. */
	fill_pattern(want, (size_t)NV * SEG, 0, 5);
	for (i = 0; i < NV; i++) {
		v[i].iov_base = buf + (size_t)(NV - 1 - i) * SEG;
		v[i].iov_len = SEG;
		memcpy(v[i].iov_base, want + (size_t)i * SEG, SEG);
	}
	cr_assert_eq(do_io(be, BLK_WRITE, 1 * MiB, (uint64_t)NV * SEG, v, NV), 0);
	memset(buf, 0, (size_t)NV * SEG);
	cr_assert_eq(do_rw(be, BLK_READ, 1 * MiB, buf, (uint64_t)NV * SEG), 0);
	cr_assert_eq(memcmp(buf, want, (size_t)NV * SEG), 0);
	be->ops->close(be);
	free(v);
	free(buf);
	free(want);
}

/* 512 I/Os at once against queue_depth 8: none fails, each ends once. */
Test(aio, more_inflight_than_queue_depth)
{
	enum { N = 512, BS = 4096 };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(N, sizeof(*t));
	unsigned char *buf = abuf((size_t)N * BS), *want = malloc((size_t)N * BS);
	struct waiter w;
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 8);
	waiter_init(&w);
	fill_pattern(want, (size_t)N * BS, 0, 3);
	memcpy(buf, want, (size_t)N * BS);
	/* Shuffled offsets, so neighbours in the queue are not neighbours on disk. */
	for (i = 0; i < N; i++) {
		int blk = (i * 167) % N;

		test_io_init_buf(&t[i], &w, BLK_WRITE, (uint64_t)blk * BS, buf + (size_t)blk * BS, BS);
		submit_async(be, &t[i]);
		cr_assert_leq(stat_get(be, "aio_inflight"), 8);
	}
	waiter_wait(&w);
	for (i = 0; i < N; i++) {
		cr_assert_eq(t[i].calls, 1, "io %d ended %d times", i, t[i].calls);
		cr_assert_eq(t[i].res, 0, "io %d: %d", i, t[i].res);
	}
	cr_assert_eq(stat_get(be, "aio_inflight"), 0);
	cr_assert_eq(stat_get(be, "aio_queued"), 0);
	cr_assert_eq(stat_get(be, "aio_completed"), N);

	/* Read it all back the same way, into a cleared buffer. */
	memset(buf, 0, (size_t)N * BS);
	for (i = 0; i < N; i++) {
		int blk = (i * 389) % N;

		test_io_init_buf(&t[i], &w, BLK_READ, (uint64_t)blk * BS, buf + (size_t)blk * BS, BS);
		submit_async(be, &t[i]);
	}
	waiter_wait(&w);
	for (i = 0; i < N; i++)
		cr_assert_eq(t[i].calls, 1);
	cr_assert_eq(w.errors, 0);
	cr_assert_eq(memcmp(buf, want, (size_t)N * BS), 0);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	be->ops->close(be);
	free(t);
	free(buf);
	free(want);
}

/* Many threads submitting at once (the submitter hand-off). */
struct hammer {
	struct blk_backend *be;
	struct waiter *w;
	struct test_io *t;
	unsigned char *buf;
	int first, n;
};

static void *hammer_fn(void *arg)
{
	struct hammer *h = arg;
	int i;

	for (i = h->first; i < h->first + h->n; i++) {
		test_io_init_buf(&h->t[i], h->w, BLK_WRITE, (uint64_t)i * 4096,
				 h->buf + (size_t)i * 4096, 4096);
		waiter_add(h->w, 1);
		if (blk_submit(h->be, &h->t[i].io))
			waiter_add(h->w, -1);
	}
	return NULL;
}

Test(aio, concurrent_submitters)
{
	enum { NT = 4, PER = 128, N = NT * PER };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(N, sizeof(*t));
	unsigned char *buf = abuf((size_t)N * 4096), *back = abuf((size_t)N * 4096);
	struct hammer h[NT];
	pthread_t th[NT];
	struct waiter w;
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 16);
	waiter_init(&w);
	fill_pattern(buf, (size_t)N * 4096, 0, 11);
	for (i = 0; i < NT; i++) {
		h[i] = (struct hammer){ be, &w, t, buf, i * PER, PER };
		pthread_create(&th[i], NULL, hammer_fn, &h[i]);
	}
	for (i = 0; i < NT; i++)
		pthread_join(th[i], NULL);
	waiter_wait(&w);
	for (i = 0; i < N; i++)
		cr_assert_eq(t[i].calls, 1, "io %d ended %d times", i, t[i].calls);
	cr_assert_eq(w.ended, N);
	cr_assert_eq(w.errors, 0);
	cr_assert_eq(do_rw(be, BLK_READ, 0, back, (uint64_t)N * 4096 / 2), 0);
	cr_assert_eq(do_rw(be, BLK_READ, (uint64_t)N * 4096 / 2, back + N * 4096 / 2,
			   (uint64_t)N * 4096 / 2), 0);
	cr_assert_eq(memcmp(buf, back, (size_t)N * 4096), 0);
	be->ops->close(be);
	free(t);
	free(buf);
	free(back);
}

/* ---- submitting from inside end_io ---- */

struct chain {
	struct test_io t;	/* must come first */
	struct blk_backend *be;
	unsigned char *buf;
	int next, count;	/* I/O number this is, and how many in all */
	int rounds;		/* end_io calls */
	int errors;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool finished;
};

/* Each write's end_io submits the next write, then a read of what it wrote. */
static void chain_end_io(struct blk_io *io, int res)
{
	struct chain *c = (struct chain *)io;
	int ret;

	c->rounds++;
	if (res)
		c->errors++;
	if (++c->next < c->count) {
		c->t.io.op = (c->next & 1) ? BLK_READ : BLK_WRITE;
		c->t.io.pos = (uint64_t)(c->next / 2) * 4096;
		c->t.iov[0] = (struct iovec){ c->buf + (size_t)(c->next / 2) * 4096, 4096 };
		if (c->t.io.op == BLK_READ)
			c->t.iov[0].iov_base = c->buf + (size_t)c->count * 4096;
		ret = blk_submit(c->be, &c->t.io);
		if (!ret)
			return;
		c->errors++;
	}
	pthread_mutex_lock(&c->lock);
	c->finished = true;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

Test(aio, submit_from_end_io)
{
	enum { COUNT = 400 };
	struct test_dev td;
	struct blk_backend *be;
	struct chain c;
	uint64_t end;
	unsigned char *back = abuf(COUNT / 2 * 4096);

	need_tdir();
	be = open_image(&td, 4 * MiB, 1);
	memset(&c, 0, sizeof(c));
	c.be = be;
	c.count = COUNT;
	c.buf = abuf((size_t)(COUNT + 1) * 4096);
	fill_pattern(c.buf, (size_t)COUNT * 4096, 0, 13);
	pthread_mutex_init(&c.lock, NULL);
	/* waited on with a timeout below: CLOCK_MONOTONIC (backends/lib/clock.h) */
	cr_assert_eq(blk_cond_init(&c.cond), 0);
	c.t.io.op = BLK_WRITE;
	c.t.io.pos = 0;
	c.t.io.len = 4096;
	c.t.iov[0] = (struct iovec){ c.buf, 4096 };
	c.t.io.iov = c.t.iov;
	c.t.io.iovcnt = 1;
	c.t.io.end_io = chain_end_io;
	cr_assert_eq(blk_submit(be, &c.t.io), 0);

	end = blk_now_ns() + 10ull * 1000000000u;
	pthread_mutex_lock(&c.lock);
	while (!c.finished)
		cr_assert_neq(blk_cond_wait_until(&c.cond, &c.lock, end), ETIMEDOUT,
			      "stuck after %d rounds", c.rounds);
	pthread_mutex_unlock(&c.lock);
	cr_assert_eq(c.rounds, COUNT);
	cr_assert_eq(c.errors, 0);
	cr_assert_eq(do_rw(be, BLK_READ, 0, back, COUNT / 2 * 4096), 0);
	cr_assert_eq(memcmp(back, c.buf, COUNT / 2 * 4096), 0);
	be->ops->close(be);
	free(c.buf);
	free(back);
}

/* ---- completions at depth: the reaper and the submitters both end I/O ---- */

/*
 * Each unit is a write whose end_io submits a read of the block it wrote;
 * the read's end_io checks the data. Several threads keep units in flight
 * against one queue_depth, so completions land on the reaper and on the
 * submitting threads in any order (aio_ended_reaper, aio_ended_callers).
 * end_io_depth counts the end_ios running in this thread: a backend that
 * reaped again from the submit() inside an end_io would nest a second one.
 */
static __thread int end_io_depth;
static int end_io_depth_max;		/* atomic: the deepest seen, any thread */

struct depth_thread {
	struct blk_backend *be;
	unsigned char *wbuf, *rbuf;	/* this thread's blocks, written and read back */
	struct depth_unit *u;
	int first, n, inflight_max;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int inflight;			/* lock: units not yet read back */
	int bad;			/* atomic: wrong data, errors, submit failures */
};

struct depth_unit {
	struct blk_io io;		/* must come first */
	struct iovec iov;
	struct depth_thread *th;
	int blk;			/* the block, and the index into the buffers */
	int wcalls, rcalls;		/* atomic: end_io calls of the write and the read */
};

static void depth_enter(void)
{
	int d = ++end_io_depth, max = __atomic_load_n(&end_io_depth_max, __ATOMIC_RELAXED);

	while (d > max && !__atomic_compare_exchange_n(&end_io_depth_max, &max, d, false,
						      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

static void depth_unit_done(struct depth_thread *th)
{
	pthread_mutex_lock(&th->lock);
	th->inflight--;
	pthread_cond_broadcast(&th->cond);
	pthread_mutex_unlock(&th->lock);
}

static void depth_read_end_io(struct blk_io *io, int res)
{
	struct depth_unit *u = (struct depth_unit *)io;
	struct depth_thread *th = u->th;
	size_t off = (size_t)(u->blk - th->first) * 4096;

	depth_enter();
	__atomic_add_fetch(&u->rcalls, 1, __ATOMIC_RELAXED);
	if (res || memcmp(th->rbuf + off, th->wbuf + off, 4096))
		__atomic_add_fetch(&th->bad, 1, __ATOMIC_RELAXED);
	depth_unit_done(th);
	end_io_depth--;
}

static void depth_write_end_io(struct blk_io *io, int res)
{
	struct depth_unit *u = (struct depth_unit *)io;
	struct depth_thread *th = u->th;

	depth_enter();
	__atomic_add_fetch(&u->wcalls, 1, __ATOMIC_RELAXED);
	if (res)
		__atomic_add_fetch(&th->bad, 1, __ATOMIC_RELAXED);
	/* submit again from here: the read of what was just written */
	u->iov = (struct iovec){ th->rbuf + (size_t)(u->blk - th->first) * 4096, 4096 };
	u->io = (struct blk_io){ .op = BLK_READ, .pos = (uint64_t)u->blk * 4096, .len = 4096,
				 .iov = &u->iov, .iovcnt = 1, .end_io = depth_read_end_io };
	if (blk_submit(th->be, &u->io)) {
		__atomic_add_fetch(&th->bad, 1, __ATOMIC_RELAXED);
		depth_unit_done(th);
	}
	end_io_depth--;
}

static void *depth_fn(void *arg)
{
	struct depth_thread *th = arg;
	int i;

	for (i = 0; i < th->n; i++) {
		struct depth_unit *u = &th->u[th->first + i];

		pthread_mutex_lock(&th->lock);
		while (th->inflight >= th->inflight_max)
			pthread_cond_wait(&th->cond, &th->lock);
		th->inflight++;
		pthread_mutex_unlock(&th->lock);

		u->th = th;
		u->blk = th->first + i;
		u->iov = (struct iovec){ th->wbuf + (size_t)i * 4096, 4096 };
		u->io = (struct blk_io){ .op = BLK_WRITE, .pos = (uint64_t)u->blk * 4096,
					 .len = 4096, .iov = &u->iov, .iovcnt = 1,
					 .end_io = depth_write_end_io };
		if (blk_submit(th->be, &u->io)) {
			__atomic_add_fetch(&th->bad, 1, __ATOMIC_RELAXED);
			depth_unit_done(th);
		}
	}
	pthread_mutex_lock(&th->lock);
	while (th->inflight > 0)	/* an end_io called twice takes it below 0 */
		pthread_cond_wait(&th->cond, &th->lock);
	pthread_mutex_unlock(&th->lock);
	return NULL;
}

Test(aio, completions_at_depth_end_once_in_any_thread)
{
	enum { NT = 8, PER = 384, N = NT * PER, QD = 16 };
	struct test_dev td;
	struct blk_backend *be;
	struct depth_unit *u = calloc(N, sizeof(*u));
	unsigned char *wbuf = abuf((size_t)N * 4096), *rbuf = abuf((size_t)N * 4096);
	unsigned char *back = abuf((size_t)N * 4096);
	struct depth_thread th[NT];
	pthread_t tid[NT];
	uint64_t by_reaper, by_callers;
	int i;

	need_tdir();
	aio_fast_ns = 0;	/* no caller waits for its own I/O: all of it goes by the queue */
	aio_sync_inline = UINT64_MAX;
	be = open_image(&td, (uint64_t)N * 4096, QD);
	fill_pattern(wbuf, (size_t)N * 4096, 0, 23);
	memset(rbuf, 0, (size_t)N * 4096);
	for (i = 0; i < NT; i++) {
		th[i] = (struct depth_thread){ .be = be, .u = u, .first = i * PER, .n = PER,
					       .wbuf = wbuf + (size_t)i * PER * 4096,
					       .rbuf = rbuf + (size_t)i * PER * 4096,
					       .inflight_max = 2 + i % 4 };	/* 2..5 each, 28 in all */
		pthread_mutex_init(&th[i].lock, NULL);
		pthread_cond_init(&th[i].cond, NULL);
	}
	for (i = 0; i < NT; i++)
		cr_assert_eq(pthread_create(&tid[i], NULL, depth_fn, &th[i]), 0);
	for (i = 0; i < NT; i++) {
		pthread_join(tid[i], NULL);
		cr_assert_eq(th[i].bad, 0, "thread %d: %d I/Os failed or read back wrong", i,
			     th[i].bad);
	}
	for (i = 0; i < N; i++)
		cr_assert(u[i].wcalls == 1 && u[i].rcalls == 1,
			  "unit %d: the write ended %d times, the read %d times", i, u[i].wcalls,
			  u[i].rcalls);
	cr_assert_eq(end_io_depth_max, 1, "an end_io ran inside another one in its thread "
		     "(%d deep): the submit() from an end_io reaped", end_io_depth_max);

	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	by_reaper = stat_get(be, "aio_ended_reaper");
	by_callers = stat_get(be, "aio_ended_callers");
	cr_assert_eq(by_reaper + by_callers, 2 * N, "reaper %llu + callers %llu",
		     (unsigned long long)by_reaper, (unsigned long long)by_callers);
	/* both took part: the last completions are the reaper's, the rest are shared */
	cr_assert_gt(by_reaper, 0);
	cr_assert_gt(by_callers, 0);
	cr_assert_eq(stat_get(be, "aio_nosig"), 0);
	cr_assert_eq(stat_get(be, "aio_inflight"), 0);
	cr_assert_eq(stat_get(be, "aio_queued"), 0);
	cr_log_info("ended by the reaper %llu, by the submitting threads %llu; "
		    "%llu io_submit() calls for %llu iocbs",
		    (unsigned long long)by_reaper, (unsigned long long)by_callers,
		    (unsigned long long)stat_get(be, "aio_submit_calls"),
		    (unsigned long long)stat_get(be, "aio_submitted"));

	/* and on the storage, as written (max_io at a time) */
	for (i = 0; i < N; i += 256)
		cr_assert_eq(do_rw(be, BLK_READ, (uint64_t)i * 4096, back + (size_t)i * 4096,
				   256 * 4096), 0);
	cr_assert_eq(memcmp(back, wbuf, (size_t)N * 4096), 0);
	be->ops->close(be);
	for (i = 0; i < NT; i++) {
		pthread_mutex_destroy(&th[i].lock);
		pthread_cond_destroy(&th[i].cond);
	}
	free(u);
	free(wbuf);
	free(rbuf);
	free(back);
}

/*
 * An end_io of an I/O its caller did with preadv/pwritev (an idle fast
 * device) submits the next: that one is queued and goes down after the
 * end_io returns, never done inside it, so a chain of end_ios that submit
 * does not nest however long it is.
 */
Test(aio, idle_sync_end_io_that_submits_does_not_nest)
{
	enum { N = 256 };
	struct test_dev td;
	struct blk_backend *be;
	struct depth_unit *u = calloc(N, sizeof(*u));
	unsigned char *wbuf = abuf((size_t)N * 4096), *rbuf = abuf((size_t)N * 4096);
	struct depth_thread th;
	int i;

	need_tdir();
	aio_fast_ns = UINT64_MAX;
	aio_wait_fast_ns = UINT64_MAX;
	aio_sync_inline = 0;
	be = open_image(&td, (uint64_t)N * 4096, 0);
	fill_pattern(wbuf, (size_t)N * 4096, 0, 37);
	memset(rbuf, 0, (size_t)N * 4096);
	/* one unit at a time: each write finds the device idle */
	th = (struct depth_thread){ .be = be, .u = u, .first = 0, .n = N, .wbuf = wbuf,
				    .rbuf = rbuf, .inflight_max = 1 };
	pthread_mutex_init(&th.lock, NULL);
	pthread_cond_init(&th.cond, NULL);
	depth_fn(&th);
	cr_assert_eq(th.bad, 0, "%d I/Os failed or read back wrong", th.bad);
	for (i = 0; i < N; i++)
		cr_assert(u[i].wcalls == 1 && u[i].rcalls == 1,
			  "unit %d: the write ended %d times, the read %d times", i, u[i].wcalls,
			  u[i].rcalls);
	cr_assert_eq(end_io_depth_max, 1, "an end_io ran inside another one in its thread "
		     "(%d deep): the submit() from an end_io did its I/O there", end_io_depth_max);
	/* every write but the probes (one in 32) */
	cr_assert_eq(stat_get(be, "aio_idle_sync"), N - N / 32);
	cr_assert_eq(stat_get(be, "aio_completed"), 2 * N);
	be->ops->close(be);
	pthread_mutex_destroy(&th.lock);
	pthread_cond_destroy(&th.cond);
	free(u);
	free(wbuf);
	free(rbuf);
}

/*
 * A thread with a plug in force (backends/lib/plug.h: a FUSE ring queue
 * thread serving a batch) defers its io_submit() to the plug's flush, and
 * does not wait for its own I/O: the batch goes down in one call. A flush
 * before a wait (blk_plug_flush()) sends what is deferred and keeps the
 * plug; blk_plug_finish() sends the rest.
 */
Test(aio, plug_sends_a_batch_in_one_io_submit)
{
	enum { N = 24 };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(2 * N, sizeof(*t));
	unsigned char *buf = abuf(N * 4096), *back = abuf(N * 4096);
	struct blk_plug plug;
	struct waiter w;
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 64);
	fill_pattern(buf, N * 4096, 0, 41);

	/* Nothing has woken the reaper since open: only the flush drains. */
	waiter_init(&w);
	blk_plug_start(&plug);
	for (i = 0; i < N; i++) {
		test_io_init_buf(&t[i], &w, BLK_WRITE, (uint64_t)i * 4096, buf + (size_t)i * 4096,
				 4096);
		submit_async(be, &t[i]);
	}
	cr_assert_eq(stat_get(be, "aio_submit_calls"), 0,
		     "%llu io_submit() calls before the plug's flush",
		     (unsigned long long)stat_get(be, "aio_submit_calls"));
	cr_assert_eq(stat_get(be, "aio_queued"), N);
	cr_assert_eq(stat_get(be, "aio_waited"), 0, "a plugged thread waited for its own I/O");
	cr_assert(blk_plug_pending());
	blk_plug_flush();
	cr_assert(!blk_plug_pending());
	cr_assert_eq(stat_get(be, "aio_submit_calls"), 1);
	cr_assert_eq(stat_get(be, "aio_submitted"), N);
	cr_assert_eq(stat_get(be, "aio_plug_flushes"), 1);
	waiter_wait(&w);
	for (i = 0; i < N; i++)
		cr_assert(t[i].calls == 1 && t[i].res == 0, "write %d: %d calls, %d", i, t[i].calls,
			  t[i].res);

	/* Still plugged: reads of it all, sent by blk_plug_finish(). */
	waiter_init(&w);
	memset(back, 0, N * 4096);
	for (i = 0; i < N; i++) {
		test_io_init_buf(&t[N + i], &w, BLK_READ, (uint64_t)i * 4096,
				 back + (size_t)i * 4096, 4096);
		submit_async(be, &t[N + i]);
	}
	blk_plug_finish(&plug);
	cr_assert(!blk_plug_pending() && !blk_plugged());
	waiter_wait(&w);
	for (i = 0; i < N; i++)
		cr_assert(t[N + i].calls == 1 && t[N + i].res == 0);
	cr_assert_eq(memcmp(back, buf, N * 4096), 0);
	cr_assert_eq(stat_get(be, "aio_submitted"), 2 * N);
	cr_log_info("%llu io_submit() calls for %d iocbs",
		    (unsigned long long)stat_get(be, "aio_submit_calls"), 2 * N);
	be->ops->close(be);
	free(t);
	free(buf);
	free(back);
}

/* ---- FLUSH, DISCARD, WRITE_ZEROES ---- */

Test(aio, flush)
{
	enum { N = 64 };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(N + 8, sizeof(*t));
	unsigned char *buf = abuf(N * 4096);
	struct waiter w;
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 4);
	fill_pattern(buf, N * 4096, 0, 17);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, 4096), 0);
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);

	/* Flushes mixed into a stream of writes: each ends once, all succeed. */
	waiter_init(&w);
	for (i = 0; i < N + 8; i++) {
		if (i % 9 == 8) {
			test_io_init(&t[i], &w, BLK_FLUSH, 0, 0);
		} else {
			int k = i - i / 9;

			test_io_init_buf(&t[i], &w, BLK_WRITE, (uint64_t)k * 4096,
					 buf + (size_t)k * 4096, 4096);
		}
		submit_async(be, &t[i]);
	}
	waiter_wait(&w);
	for (i = 0; i < N + 8; i++) {
		cr_assert_eq(t[i].calls, 1);
		cr_assert_eq(t[i].res, 0, "op %d: %d", i, t[i].res);
	}
	cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
	/* ext4, xfs, btrfs and block devices take IOCB_CMD_FDSYNC on this kernel. */
	cr_log_info("aio_fdsync %llu", (unsigned long long)stat_get(be, "aio_fdsync"));
	be->ops->close(be);
	free(t);
	free(buf);
}

static void check_zeroing(struct blk_backend *be, enum blk_op op, uint32_t lbs)
{
	unsigned char *buf = abuf(1 * MiB), *want = malloc(1 * MiB);
	uint64_t zpos = 3 * lbs, zlen = 256 * KiB + lbs;	/* not 4K-aligned when lbs is 512 */

	fill_pattern(want, 1 * MiB, 0, 23);
	memcpy(buf, want, 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, 1 * MiB), 0);
	cr_assert_eq(do_io(be, op, zpos, zlen, NULL, 0), 0, "op %d", op);
	memset(want + zpos, 0, zlen);
	memset(buf, 0xEE, 1 * MiB);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 1 * MiB), 0);
	cr_assert_eq(memcmp(buf, want, 1 * MiB), 0, "op %d did not leave zeros, or hit neighbours", op);
	/* Length 0 is a no-op that still ends. */
	cr_assert_eq(do_io(be, op, 0, 0, NULL, 0), 0);
	free(buf);
	free(want);
}

Test(aio, discard_reads_zeros)
{
	struct test_dev td;
	struct blk_backend *be;

	need_tdir();
	be = open_image(&td, 4 * MiB, 0);
	check_zeroing(be, BLK_DISCARD, 512);
	be->ops->close(be);
}

Test(aio, write_zeroes_reads_zeros)
{
	struct test_dev td;
	struct blk_backend *be;

	need_tdir();
	be = open_image(&td, 4 * MiB, 0);
	check_zeroing(be, BLK_WRITE_ZEROES, 512);
	/* The whole device at once. */
	cr_assert_eq(do_io(be, BLK_WRITE_ZEROES, 0, 4 * MiB, NULL, 0), 0);
	be->ops->close(be);
}

/*
 * What the worker does (DISCARD, WRITE_ZEROES, a FLUSH by fdatasync() where
 * the kernel refuses IOCB_CMD_FDSYNC; an empty DISCARD or WRITE_ZEROES too)
 * it ends itself: end_io runs on the worker thread (named blkfs-aio-work),
 * once, and the zeros are on the storage when it runs. Before, the worker
 * handed each result to the reaper, whose wait at depth is a tick of 1 ms.
 */
struct who_io {
	struct blk_io io;	/* must come first */
	char thread[16];	/* the name of the thread end_io ran in */
	int fd;			/* the image, read in end_io: the zeros are there */
	unsigned char *seen;	/* what end_io read there (io.len bytes) */
	int calls;		/* atomic; the rest is set before it */
	int res;
};

static void who_end_io(struct blk_io *io, int res)
{
	struct who_io *w = (struct who_io *)io;

	pthread_getname_np(pthread_self(), w->thread, sizeof(w->thread));
	if (io->len && pread(w->fd, w->seen, io->len, (off_t)io->pos) != (ssize_t)io->len)
		memset(w->seen, 0xEE, io->len);
	w->res = res;
	__atomic_add_fetch(&w->calls, 1, __ATOMIC_RELEASE);
}

Test(aio, worker_results_end_in_the_worker)
{
	static const struct { enum blk_op op; uint64_t pos, len; } ops[] = {
		{ BLK_DISCARD, 8192, 64 * KiB },
		{ BLK_WRITE_ZEROES, 128 * KiB, 36 * KiB },
		{ BLK_DISCARD, 0, 0 },
		{ BLK_WRITE_ZEROES, 0, 0 },
	};
	enum { NOPS = sizeof(ops) / sizeof(ops[0]) };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(1 * MiB), *back = abuf(1 * MiB), *zeros = calloc(1, 1 * MiB);
	char path[PATH_MAX];
	int fd, i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 4);
	fill_pattern(buf, 1 * MiB, 0, 31);
	cr_assert_eq(do_rw(be, BLK_WRITE, 0, buf, 1 * MiB), 0);
	/* a buffered reader of the same file: fallocate() drops its page cache */
	tpath(path, sizeof(path), "disk.img");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert(fd >= 0);

	for (i = 0; i < NOPS; i++) {
		struct who_io w = { .fd = fd, .seen = malloc(ops[i].len + 1) };
		double end = now_s() + WAIT_MS / 1000.0;

		w.io = (struct blk_io){ .op = ops[i].op, .pos = ops[i].pos, .len = ops[i].len,
					.end_io = who_end_io };
		cr_assert_eq(be->ops->submit(be, &w.io), 0);
		while (!__atomic_load_n(&w.calls, __ATOMIC_ACQUIRE) && now_s() < end)
			usleep(1000);
		/* a second call, if any, would come right after the first */
		usleep(20000);
		cr_assert_eq(__atomic_load_n(&w.calls, __ATOMIC_ACQUIRE), 1,
			     "%s %llu+%llu: end_io called %d times", blk_op_name(ops[i].op),
			     (unsigned long long)ops[i].pos, (unsigned long long)ops[i].len, w.calls);
		cr_assert_eq(w.res, 0);
		cr_assert_str_eq(w.thread, "blkfs-aio-work",
				 "%s of %llu bytes ended in thread %s, not in the worker that did it",
				 blk_op_name(ops[i].op), (unsigned long long)ops[i].len, w.thread);
		cr_assert_eq(memcmp(w.seen, zeros, ops[i].len), 0,
			     "%s: end_io ran before the zeros were on the storage",
			     blk_op_name(ops[i].op));
		free(w.seen);
	}
	/* (the write before went by the queue, not the worker) */
	cr_assert_eq(stat_get(be, "aio_ended_worker"), NOPS);
	cr_assert_eq(stat_get(be, "aio_worker"), 0);

	/* the neighbours are untouched */
	memset(buf + 8192, 0, 64 * KiB);
	memset(buf + 128 * KiB, 0, 36 * KiB);
	cr_assert_eq(do_rw(be, BLK_READ, 0, back, 1 * MiB), 0);
	cr_assert_eq(memcmp(back, buf, 1 * MiB), 0);
	close(fd);
	be->ops->close(be);
	free(buf);
	free(back);
	free(zeros);
}

/*
 * A WRITE that io_submit() refuses (the image opened read-only: EBADF) is
 * ended by the thread that was refused, before its submit() returns; it
 * does not wait for the reaper (a wake-up, or a tick at depth).
 */
Test(aio, refused_io_ends_in_its_submitter)
{
	enum { N = 8 };
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(4096);
	struct tid_io t;
	int i;

	need_tdir();
	aio_fast_ns = 0;	/* by the queue: what the reaper would have ended */
	aio_sync_inline = UINT64_MAX;	/* refused by io_submit(), not failed by pwritev */
	be = open_image(&td, 1 * MiB, 4);
	be->ops->close(be);
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "disk.img");
	td.p.read_only = true;
	be = td_open_ok(&td);
	for (i = 0; i < N; i++) {
		tid_submit(be, &t, BLK_WRITE, (uint64_t)i * 4096, buf, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1,
			     "refused write %d had not ended when submit() returned", i);
		cr_assert(pthread_equal(t.tid, pthread_self()), "refused write %d ended in another thread", i);
		cr_assert_eq(t.res, -EBADF);
	}
	cr_assert_eq(stat_get(be, "aio_errors"), N);
	cr_assert_eq(stat_get(be, "aio_ended_reaper"), 0);
	/* reads still work */
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 4096), 0);
	be->ops->close(be);
	free(buf);
}

/* ---- errors and close ---- */

/* The file shrinks under the backend: a read past its end is -EIO, not zeros. */
Test(aio, read_past_eof_is_eio)
{
	struct test_dev td;
	struct blk_backend *be;
	unsigned char *buf = abuf(8192);
	char path[PATH_MAX];

	need_tdir();
	be = open_image(&td, 1 * MiB, 0);
	tpath(path, sizeof(path), "disk.img");
	cr_assert_eq(truncate(path, 4096), 0);
	cr_assert_eq(do_rw(be, BLK_READ, 64 * KiB, buf, 4096), -EIO);
	/* Half there: the first part comes, the rest is an error. */
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 8192), -EIO);
	cr_assert_eq(do_rw(be, BLK_READ, 0, buf, 4096), 0);
	cr_assert_geq(stat_get(be, "aio_errors"), 2);
	be->ops->close(be);
	free(buf);
}

/* close() with hundreds of I/Os queued: every end_io runs before it returns. */
Test(aio, close_waits_for_everything)
{
	enum { N = 256 };
	struct test_dev td;
	struct blk_backend *be;
	struct test_io *t = calloc(N, sizeof(*t));
	unsigned char *buf = abuf(N * 4096);
	struct waiter w;
	int i;

	need_tdir();
	be = open_image(&td, 4 * MiB, 2);
	waiter_init(&w);
	for (i = 0; i < N; i++) {
		enum blk_op op = i % 17 == 16 ? BLK_FLUSH : i % 13 == 12 ? BLK_DISCARD : BLK_WRITE;

		test_io_init(&t[i], &w, op, op == BLK_FLUSH ? 0 : (uint64_t)i * 4096,
			 op == BLK_FLUSH ? 0 : 4096);
		if (op == BLK_WRITE) {
			t[i].iov[0] = (struct iovec){ buf + (size_t)i * 4096, 4096 };
			t[i].io.iov = t[i].iov;
			t[i].io.iovcnt = 1;
		}
		submit_async(be, &t[i]);
	}
	be->ops->close(be);
	pthread_mutex_lock(&w.lock);
	cr_assert_eq(w.ended, N, "%d of %d ended before close returned", w.ended, N);
	pthread_mutex_unlock(&w.lock);
	for (i = 0; i < N; i++)
		cr_assert_eq(t[i].calls, 1);
	cr_assert_eq(w.errors, 0);
	free(t);
	free(buf);
}

Test(aio, stat_lines)
{
	struct test_dev td;
	struct blk_backend *be;
	char buf[1024];
	size_t n;

	need_tdir();
	be = open_image(&td, 1 * MiB, 0);
	n = be->ops->stat(be, buf, sizeof(buf));
	cr_assert(n > 0 && buf[n - 1] == '\n');
	cr_assert(!strncmp(buf, "aio_queue_depth 64\naio_inflight 0\naio_queued 0\n", 47), "%s", buf);
	/* A short buffer is cut, terminated. */
	n = be->ops->stat(be, buf, 10);
	cr_assert_eq(n, 9);
	cr_assert_eq(buf[9], '\0');
	cr_assert_eq(be->ops->stat(be, buf, 0), 0);
	be->ops->close(be);
}

/* ---- loop devices (root and losetup only) ---- */

/* Attach a loop device over a fresh @size file with @sector-byte sectors. */
static void loop_attach(uint64_t size, unsigned int sector)
{
	char back[PATH_MAX], cmd[PATH_MAX + 128];
	FILE *f;
	int fd;

	need_tdir();
	if (geteuid())
		cr_skip_test("loop devices need root");
	tpath(back, sizeof(back), "loop.back");
	fd = open(back, O_RDWR | O_CREAT | O_TRUNC, 0600);
	cr_assert(fd >= 0);
	cr_assert_eq(ftruncate(fd, (off_t)size), 0);
	close(fd);
	snprintf(cmd, sizeof(cmd), "losetup -f --show --sector-size %u '%s' 2>/dev/null",
		 sector, back);
	f = popen(cmd, "r");
	if (!f)
		cr_skip_test("no losetup");
	if (!fgets(loopdev, sizeof(loopdev), f))
		loopdev[0] = '\0';
	pclose(f);
	loopdev[strcspn(loopdev, "\n")] = '\0';
	if (strncmp(loopdev, "/dev/loop", 9)) {
		loopdev[0] = '\0';
		cr_skip_test("losetup -f could not attach a loop device");
	}
}

static void td_init_loop(struct test_dev *td)
{
	td_init_aio(td, 0, 0);
	td_set(td, "path", "%s", loopdev);
}

Test(aio, loop_4096_geometry_and_data)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	loop_attach(8 * MiB, 4096);
	td_init_loop(&td);
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 8 * MiB);
	cr_assert_eq(g.lbs, 4096);
	cr_assert_eq(g.pbs, 4096);
	cr_assert_eq(g.dma_align, 4096);
	cr_assert(g.max_io >= 4096 && g.max_io <= 1 * MiB && g.max_io % 4096 == 0,
		  "max_io %u", g.max_io);
	cr_assert(g.io_min >= 4096 && g.io_opt >= g.io_min, "io_min %u io_opt %u",
		  g.io_min, g.io_opt);
	{
		unsigned char *buf = abuf(64 * KiB), *want = malloc(64 * KiB);

		fill_pattern(want, 64 * KiB, 0, 29);
		memcpy(buf, want, 64 * KiB);
		cr_assert_eq(do_rw(be, BLK_WRITE, 4 * MiB, buf, 64 * KiB), 0);
		cr_assert_eq(do_io(be, BLK_FLUSH, 0, 0, NULL, 0), 0);
		memset(buf, 0, 64 * KiB);
		cr_assert_eq(do_rw(be, BLK_READ, 4 * MiB, buf, 64 * KiB), 0);
		cr_assert_eq(memcmp(buf, want, 64 * KiB), 0);
		free(buf);
		free(want);
	}
	check_zeroing(be, BLK_DISCARD, 4096);
	check_zeroing(be, BLK_WRITE_ZEROES, 4096);
	be->ops->close(be);
}

Test(aio, loop_512_geometry)
{
	struct test_dev td;
	struct blk_backend *be;
	struct blk_geometry g;

	loop_attach(4 * MiB, 512);
	td_init_loop(&td);
	td_set(&td, "queue_depth", "16");
	be = td_open_ok(&td);
	be->ops->geometry(be, &g);
	cr_assert_eq(g.size, 4 * MiB);
	cr_assert_eq(g.lbs, 512);
	cr_assert_eq(g.dma_align, 512);
	check_zeroing(be, BLK_WRITE_ZEROES, 512);
	check_zeroing(be, BLK_DISCARD, 512);
	be->ops->close(be);
}

Test(aio, loop_config_contradicts_device)
{
	struct test_dev td;
	char want[128];
	struct blk_backend *be;

	loop_attach(8 * MiB, 4096);

	td_init_loop(&td);
	td_set(&td, "logical_block_size", "512");
	snprintf(want, sizeof(want), "config says 512 but %s has 4096", loopdev);
	td_open_fails(&td, "logical_block_size", want, NULL);

	td_init_loop(&td);
	td_set(&td, "physical_block_size", "8192");
	snprintf(want, sizeof(want), "config says 8192 but %s has 4096", loopdev);
	td_open_fails(&td, "physical_block_size", want, NULL);

	/* As conf hands it: size given, so lbs/pbs/... hold its defaults. */
	td_init_loop(&td);
	td_set(&td, "size", "16M");
	td.p.geo.lbs = 512;
	td.p.geo.pbs = 512;
	td.p.geo.max_io = 1 * MiB;
	snprintf(want, sizeof(want), "config says %llu but %s has %llu",
		 16 * MiB, loopdev, 8 * MiB);
	td_open_fails(&td, "size", want, NULL);

	/* The same with the right size: the defaults conf filled do not count. */
	td.p.geo.size = 8 * MiB;
	be = td_open_ok(&td);
	be->ops->close(be);

	/* Agreeing values are fine. */
	td_init_loop(&td);
	td_set(&td, "logical_block_size", "4096");
	be = td_open_ok(&td);
	be->ops->close(be);
}

/* Two exclusive opens of one device: the second is refused, with why. */
Test(aio, loop_exclusive)
{
	struct test_dev td1, td2;
	struct blk_backend *be1, *be2;

	loop_attach(4 * MiB, 512);
	td_init_loop(&td1);
	be1 = td_open_ok(&td1);

	td_init_loop(&td2);
	td_open_fails(&td2, "path", "is in use", NULL);
	cr_assert(strstr(td2.err, "exclusive = no"), "%s", td2.err);

	td_init_loop(&td2);
	td_set(&td2, "exclusive", "no");
	be2 = td_open_ok(&td2);
	be2->ops->close(be2);
	be1->ops->close(be1);

	/* Released at close. */
	td_init_loop(&td2);
	be2 = td_open_ok(&td2);
	be2->ops->close(be2);
}

/* ---- zram (root and zram-control only) ---- */

/* Add a zram device of @size (hot_add), or skip; teardown removes it. */
static void zram_add(uint64_t size)
{
	char path[128];
	FILE *f;

	if (geteuid())
		cr_skip_test("zram devices need root");
	f = fopen("/sys/class/zram-control/hot_add", "r");
	if (!f)
		cr_skip_test("no zram-control here");
	if (fscanf(f, "%d", &zram_idx) != 1)
		zram_idx = -1;
	fclose(f);
	if (zram_idx < 0)
		cr_skip_test("zram hot_add gave no device");
	snprintf(path, sizeof(path), "/sys/block/zram%d/disksize", zram_idx);
	f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fprintf(f, "%llu\n", (unsigned long long)size);
	cr_assert_eq(fclose(f), 0, "%s: %s", path, strerror(errno));
}

/*
 * zram compresses inside the submitting syscall: the idle callers' waits
 * find their I/O ended when io_submit() returns, aio_inline_pct climbs past
 * aio_sync_inline, and from then on the caller does each I/O with one
 * pwritev/preadv (one in 32 still measures). The data is the data.
 */
Test(aio, zram_is_seen_to_work_inside_the_syscall)
{
	enum { N = 128 };
	struct test_dev td;
	unsigned char *buf = abuf(N * 4096), *want = malloc(N * 4096);
	struct tid_io t;
	uint64_t synced;
	int i;

	need_tdir();
	/* every I/O not done by pwritev waits and measures, loaded or not */
	aio_wait_ns = 60ull * 1000000000u;
	aio_fast_ns = UINT64_MAX;
	aio_wait_fast_ns = UINT64_MAX;
	zram_add(16 * MiB);
	td_init_aio(&td, 0, 0);
	td_set(&td, "path", "/dev/zram%d", zram_idx);
	zram_be = td_open_ok(&td);
	fill_pattern(want, N * 4096, 0, 41);
	memcpy(buf, want, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(zram_be, &t, BLK_WRITE, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1,
			     "write %d had not ended when submit() returned", i);
		cr_assert_eq(t.res, 0);
	}
	cr_assert_geq(stat_get(zram_be, "aio_inline_pct"), 75);
	synced = stat_get(zram_be, "aio_idle_sync");
	/* 8 to 16 waits bring the average to 3/4, then all but the probes */
	cr_assert_geq(synced, N / 2, "%llu of %d writes by pwritev",
		      (unsigned long long)synced, N);
	memset(buf, 0, N * 4096);
	for (i = 0; i < N; i++) {
		tid_submit(zram_be, &t, BLK_READ, (uint64_t)i * 4096, buf + i * 4096, 4096);
		cr_assert_eq(__atomic_load_n(&t.calls, __ATOMIC_ACQUIRE), 1);
		cr_assert_eq(t.res, 0);
	}
	cr_assert_eq(memcmp(buf, want, N * 4096), 0);
	cr_assert_geq(stat_get(zram_be, "aio_idle_sync"), synced + N - N / 32 - 1);
	zram_be->ops->close(zram_be);
	zram_be = NULL;
	free(buf);
	free(want);
}
