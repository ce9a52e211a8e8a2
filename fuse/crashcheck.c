// SPDX-License-Identifier: MIT
/*
 * fuse/crashcheck.c - `blkfs crashcheck LOG --base BASE --check CMD`: run a
 * checker on the crash states of a recorded workload (a dm-log-writes log:
 * the record filter's, or the kernel's), as backends/lib/crashmodel.h defines
 * them, and `--state ID --materialize FILE` to write one state out.
 *
 * Crash points: after every flush and every mark (with --each-write, after
 * every write too). At each, the in-order state first, then the rest of
 * the point's default set: when at most N physical blocks are touched by
 * unflushed writes (and their combinations number at most CC_MAX_LIST),
 * every combination of their prefixes; else the in-order state with up to
 * K blocks rolled back to an earlier prefix, at any size. --states MAX
 * samples, without replacement and repeatably from --seed, only at points
 * whose default set has more than MAX states: the in-order state and MAX-1
 * others of that set. Every other point is explored exactly as without
 * --states. The progress line, the table and --json say which.
 *
 * A state's id names it at any size: "EVENT" is the in-order state of the
 * crash after event EVENT (0-based, in the model's events);
 * "EVENT:BLK=KEEP,..." is that state with each listed physical block
 * rolled back to the first KEEP of its unflushed writes (blocks in
 * increasing order; "BLK1-BLK2=KEEP" for a run of touched blocks that all
 * keep KEEP). An id names the same bytes on every run with the same --pbs.
 *
 * Where states are built. A base MNT/DEV@SNAP of a ram device: each job
 * adds a ram device to that mount cloned from the snapshot (`blkfs add
 * MNT cc-PID-J backend=ram clone=DEV@SNAP`: it shares the base's pages
 * copy on write, so a job costs only the memory it writes), keeps the
 * durable contents of the crash point it is at as a snapshot of its clone
 * (taken at each new durable prefix, the old one deleted), and builds a
 * state as a reset to that snapshot plus the state's unflushed pieces: at
 * most one epoch of writes, whatever the checker wrote meanwhile. The
 * clones are removed at the end; the recording device is never written.
 * Any other base (an image file, zeros, a snapshot of a backend that
 * cannot clone: saved to an image first with `blkfs save`) builds in
 * scratch image files (one per job, in --scratch, default /dev/shm), each
 * holding the durable contents of its crash point, a state adding its
 * unflushed pieces and the physical blocks they touched put back after
 * the checker ran (the whole file copied again if the checker wrote).
 * That path needs no mount, and costs the base's size per job in
 * --scratch: a file system of its own cannot share pages. Jobs take states
 * in crash-point order from one queue, so each job only moves forward.
 *
 * Threads: the main thread prints progress; --jobs workers each run one
 * checker at a time. cc->lock covers the queue index and the results.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/crashmodel.h"
#include "../backends/lib/logwrites.h"
#include "control.h"
#include "crashcheck.h"

#define CC_DEF_N	10	/* 2^10 states when each block has one write: a few seconds of checks */
#define CC_DEF_K	1	/* one block rolled back at a time: linear in the blocks touched */
#define CC_MAX_K	8	/* the largest --k */
#define CC_MAX_LIST	(1u << 22)	/* the most states one crash point may list */

enum cc_verdict { CC_OK, CC_FAIL, CC_TIMEOUT, CC_ERROR };

/* Exit statuses (fuse/blkfs.1 says the same). */
enum {
	CC_EXIT_OK = 0,		/* no state failed */
	CC_EXIT_FAILED = 1,	/* a state failed (or timed out) */
	CC_EXIT_USAGE = 2,	/* bad input: an option, the log, the base, the checker */
	CC_EXIT_ERROR = 3,	/* an error of blkfs's own: set-up, I/O, scratch space, memory */
};

/* A block rolled back from the in-order state. */
struct cc_roll {
	uint64_t blk;		/* physical block number */
	uint32_t bi;		/* its index in the point's blocks (blk_cm_point.b) */
	uint32_t keep;		/* the prefix of its unflushed writes it keeps */
};

struct cc_task {
	size_t point;		/* index into cc->pts */
	size_t roll;		/* its rolled-back blocks: cc->rolls[roll, roll + nr_roll) */
	uint32_t nr_roll;	/* 0: the in-order state */
	int verdict;
	int status;		/* the checker's exit status, or -signal */
	char *out;		/* a failing state's output file, kept */
};

struct cc_point {
	size_t ev;		/* the crash follows event ev */
	uint64_t full;		/* states in the full set (UINT64_MAX: more) */
	uint64_t dflt;		/* states in the default set (UINT64_MAX: more) */
	bool sampled;		/* listed: a sample of the default set (--states) */
	uint64_t listed;
	uint64_t failed;
	size_t first_fail;	/* task index, or SIZE_MAX */
	size_t first_task;
};

struct cc {
	/* options */
	const char *log_path, *base, *check, *state_id, *materialize, *scratch, *keep;
	unsigned int n, k, jobs;
	uint64_t max_states, seed, size;
	uint32_t pbs;
	bool each_write, attach, json;
	double timeout_s;

	/*
	 * The run's folder, scratch/blkfs-crash-PID: scratch images, the
	 * checkers' outputs, and the kept ones unless --keep says elsewhere.
	 * "" until made. keep_made: we made --keep's folder (removed if empty).
	 */
	char run_dir[PATH_MAX - 64];	/* room for the names in it */
	bool keep_made;

	/* input */
	unsigned char *map;
	size_t map_len;
	struct lw_log lw;
	struct blk_cm_log m;
	char *base_img;		/* the base as an image file; NULL: zeros */
	bool base_tmp;		/* base_img is ours to delete */
	char *snap_mnt;		/* a base MNT/DEV@SNAP: MNT, DEV and SNAP (one allocation) */
	const char *snap_dev, *snap_name;
	bool clone;		/* jobs build states in clones of it (else in files) */
	uint64_t dev_size;
	const char **mark_text;	/* per model event: a mark's text (owned) or NULL */

	struct cc_point *pts;
	size_t nr_pts;
	struct cc_task *tasks;
	size_t nr_tasks;
	struct cc_roll *rolls;	/* the tasks' rolled-back blocks */
	size_t nr_rolls;

	/* after the run: the jobs' times, summed (see struct cc_job) */
	uint64_t nr_built, build_ns, reset_ns, nr_resets, check_ns, nr_diffs;

	pthread_mutex_t lock;
	size_t next;		/* lock: next task to take */
	uint64_t done, failed;	/* lock */
	bool stop;
};

static void usage_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void usage_err(const char *fmt, ...)
{
	va_list ap;

	fputs("blkfs crashcheck: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the run's folder, and signals ---- */

/* SIGINT or SIGTERM received: the run stops, cleans up, then dies of it. */
static volatile sig_atomic_t cc_signal;

static void on_signal(int sig)
{
	cc_signal = sig;
}

/*
 * Make the run's folder, scratch/blkfs-crash-PID, once, and say where it
 * is; from here on SIGINT and SIGTERM only ask the run to stop, so that
 * every exit goes through run_dir_finish(). A folder of that name already
 * there was left by a process of our pid that is gone (SIGKILL): ours now.
 */
static int run_dir_make(struct cc *cc)
{
	struct sigaction sa = { .sa_handler = on_signal };

	if (cc->run_dir[0])
		return 0;
	if ((size_t)snprintf(cc->run_dir, sizeof(cc->run_dir), "%s/blkfs-crash-%d", cc->scratch,
			     (int)getpid()) >= sizeof(cc->run_dir))
		errno = ENAMETOOLONG;
	else if (mkdir(cc->run_dir, 0700) == 0 || errno == EEXIST)
		errno = 0;
	if (errno) {
		usage_err("--scratch %s: %s", cc->scratch, strerror(errno));
		cc->run_dir[0] = 0;
		return CC_EXIT_ERROR;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fprintf(stderr, "crashcheck: scratch folder %s\n", cc->run_dir);
	return 0;
}

/*
 * Every exit once the folder is made: remove from it all but the kept
 * outputs (state-*.out, when it is also the --keep folder), then the
 * folder itself if nothing is kept; remove a --keep folder we made that
 * holds nothing. Say where the kept outputs are.
 */
static void run_dir_finish(struct cc *cc, size_t nr_kept)
{
	bool keep_here = cc->keep && !strcmp(cc->keep, cc->run_dir);
	DIR *d;

	if (!cc->run_dir[0]) {
		if (cc->keep_made && cc->keep)
			rmdir(cc->keep);	/* the run stopped before it began */
		return;
	}
	d = opendir(cc->run_dir);
	if (d) {
		struct dirent *e;

		while ((e = readdir(d))) {
			if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			if (keep_here && nr_kept && !strncmp(e->d_name, "state-", 6))
				continue;
			if (unlinkat(dirfd(d), e->d_name, 0) && errno != ENOENT)
				usage_err("%s/%s: %s", cc->run_dir, e->d_name, strerror(errno));
		}
		closedir(d);
	}
	if ((!keep_here || !nr_kept) && rmdir(cc->run_dir) && errno != ENOENT)
		usage_err("%s: %s", cc->run_dir, strerror(errno));
	if (!keep_here && cc->keep && cc->keep_made && !nr_kept)
		rmdir(cc->keep);
	if (nr_kept)
		fprintf(stderr, "crashcheck: kept the output of %zu failing states in %s\n", nr_kept,
			cc->keep);
}

/* ---- the base ---- */

static int read_sys_u32(const char *mnt, const char *dev, const char *file, uint32_t *out)
{
	char path[PATH_MAX], buf[32];
	FILE *f;
	int ok;

	snprintf(path, sizeof(path), "%s/.sys/%s/queue/%s", mnt, dev, file);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	ok = fgets(buf, sizeof(buf), f) != NULL;
	fclose(f);
	if (!ok)
		return -EIO;
	*out = (uint32_t)strtoul(buf, NULL, 10);
	return 0;
}

/* Does MNT/.sys/DEV/snapshots list @snap? 1, 0, or -errno (no such file: the backend keeps none). */
static int snapshot_listed(const char *mnt, const char *dev, const char *snap)
{
	char path[PATH_MAX], line[512];
	size_t n = strlen(snap);
	int found = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.sys/%s/snapshots", mnt, dev);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, snap, n) && (line[n] == ' ' || line[n] == '\n'))
			found = 1;
	fclose(f);
	return found;
}

/*
 * MNT/DEV@SNAP: the device's block sizes and size, and the snapshot must
 * exist. Nothing is copied here: the jobs clone it, or base_save() saves
 * it to an image.
 */
static int base_from_snapshot(struct cc *cc, uint32_t *lbs)
{
	char *spec = strdup(cc->base), *at, *slash, path[PATH_MAX];
	struct stat st;
	int ret;

	if (!spec)
		return CC_EXIT_ERROR;
	at = strrchr(spec, '@');
	*at = 0;
	slash = strrchr(spec, '/');
	if (!slash || !slash[1] || !at[1]) {
		usage_err("--base %s: expected MNT/DEV@SNAP, an image file, or zeros", cc->base);
		free(spec);
		return 2;
	}
	*slash = 0;
	cc->snap_mnt = spec;
	cc->snap_dev = slash + 1;
	cc->snap_name = at + 1;
	if (!*spec)
		cc->snap_mnt = strcpy(spec, "/");	/* "/DEV@SNAP": the mount is / */
	if (read_sys_u32(cc->snap_mnt, cc->snap_dev, "logical_block_size", lbs)) {
		usage_err("--base %s: %s is not a device of a blkfs mount at %s", cc->base,
			  cc->snap_dev, cc->snap_mnt);
		return 2;
	}
	if (!cc->pbs && read_sys_u32(cc->snap_mnt, cc->snap_dev, "physical_block_size", &cc->pbs))
		cc->pbs = 0;
	snprintf(path, sizeof(path), "%s/%s", cc->snap_mnt, cc->snap_dev);
	if (stat(path, &st)) {
		usage_err("--base %s: %s: %s", cc->base, path, strerror(errno));
		return 2;
	}
	cc->size = (uint64_t)st.st_size;
	ret = snapshot_listed(cc->snap_mnt, cc->snap_dev, cc->snap_name);
	if (ret <= 0) {
		if (ret == -ENOENT)
			usage_err("--base %s: %s keeps no snapshots", cc->base, cc->snap_dev);
		else if (ret)
			usage_err("--base %s: %s/.sys/%s/snapshots: %s", cc->base, cc->snap_mnt,
				  cc->snap_dev, strerror(-ret));
		else
			usage_err("--base %s: %s has no snapshot named %s", cc->base, cc->snap_dev,
				  cc->snap_name);
		return 2;
	}
	return 0;
}

/* The snapshot to an image in the scratch folder (`blkfs save MNT DEV TMP SNAP`). */
static int base_save(struct cc *cc)
{
	char img[PATH_MAX], self[PATH_MAX];
	ssize_t n;
	pid_t pid;
	int st = -1;

	if (run_dir_make(cc))
		return CC_EXIT_ERROR;
	snprintf(img, sizeof(img), "%s/base.img", cc->run_dir);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		usage_err("cannot find the blkfs binary: %s", strerror(errno));
		return CC_EXIT_ERROR;
	}
	self[n] = 0;
	pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		if (fd >= 0)
			dup2(fd, 1);
		execl(self, "blkfs", "save", cc->snap_mnt, cc->snap_dev, img, cc->snap_name,
		      (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		usage_err("--base %s: cannot save snapshot %s of %s", cc->base, cc->snap_name,
			  cc->snap_dev);
		unlink(img);
		return CC_EXIT_ERROR;
	}
	free(cc->base_img);
	cc->base_img = strdup(img);
	cc->base_tmp = true;
	return cc->base_img ? 0 : CC_EXIT_ERROR;
}

static int resolve_base(struct cc *cc, uint32_t *lbs)
{
	struct stat st;

	*lbs = 0;
	if (!strcmp(cc->base, "zeros")) {
		cc->base_img = NULL;
		return 0;
	}
	if (stat(cc->base, &st) == 0) {
		if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
			usage_err("--base %s: not an image file", cc->base);
			return 2;
		}
		cc->base_img = strdup(cc->base);
		if (S_ISBLK(st.st_mode)) {
			int fd = open(cc->base, O_RDONLY);
			uint64_t sz = 0;

			if (fd < 0 || ioctl(fd, BLKGETSIZE64, &sz)) {
				usage_err("--base %s: %s", cc->base, strerror(errno));
				if (fd >= 0)
					close(fd);
				return 2;
			}
			close(fd);
			cc->size = sz;
		} else {
			cc->size = (uint64_t)st.st_size;
		}
		return cc->base_img ? 0 : CC_EXIT_ERROR;
	}
	if (strchr(cc->base, '@'))
		return base_from_snapshot(cc, lbs);
	usage_err("--base %s: %s", cc->base, strerror(errno));
	return 2;
}

/* ---- scratch images ---- */

static const unsigned char zero_buf[1 << 16];

static int pwrite_all(int fd, const void *data, uint64_t len, uint64_t pos)
{
	while (len) {
		size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t n;

		if (!data)
			chunk = chunk < sizeof(zero_buf) ? chunk : sizeof(zero_buf);
		n = pwrite(fd, data ? data : zero_buf, chunk, (off_t)pos);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (data)
			data = (const char *)data + n;
		len -= (uint64_t)n;
		pos += (uint64_t)n;
	}
	return 0;
}

/*
 * @src's first @size bytes (fewer if it ends first) to the same place in
 * @dst: copy_file_range, or read and write where it cannot (EXDEV: the
 * base on another file system than --scratch, with older kernels).
 */
static int copy_range(int src, int dst, uint64_t size)
{
	unsigned char *buf = NULL;
	loff_t in = 0, out = 0;
	int ret = 0;

	while ((uint64_t)in < size && !ret) {
		size_t len = size - (uint64_t)in;
		ssize_t n;

		if (!buf) {
			n = copy_file_range(src, &in, dst, &out, len, 0);
			if (n > 0)
				continue;
			if (n == 0)
				break;
			if (errno != EXDEV && errno != EINVAL && errno != EOPNOTSUPP && errno != ENOSYS)
				return -errno;
			buf = malloc(1 << 16);
			if (!buf)
				return -ENOMEM;
		}
		n = pread(src, buf, len < (1 << 16) ? len : (1 << 16), in);
		if (n <= 0) {
			ret = n ? -errno : 0;
			break;
		}
		ret = pwrite_all(dst, buf, (uint64_t)n, (uint64_t)in);
		in += n;
	}
	free(buf);
	return ret;
}

static int copy_base(struct cc *cc, int dst)
{
	int src, ret;

	if (ftruncate(dst, (off_t)cc->dev_size))
		return -errno;
	if (!cc->base_img)
		return 0;
	src = open(cc->base_img, O_RDONLY | O_CLOEXEC);
	if (src < 0)
		return -errno;
	ret = copy_range(src, dst, cc->dev_size);
	close(src);
	return ret;
}

/* @dst becomes a copy of @src's first @size bytes. */
static int copy_file(int src, int dst, uint64_t size)
{
	if (ftruncate(dst, 0) || ftruncate(dst, (off_t)size))
		return -errno;
	return copy_range(src, dst, size);
}

/* A checker's output to --keep on another file system. */
static int move_file(const char *from, const char *to)
{
	int src = open(from, O_RDONLY | O_CLOEXEC), dst, ret = -EIO;
	struct stat st;

	if (src < 0)
		return -errno;
	dst = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (dst >= 0 && !fstat(src, &st))
		ret = copy_file(src, dst, (uint64_t)st.st_size);
	if (dst >= 0)
		close(dst);
	close(src);
	if (ret)
		unlink(to);
	return ret;
}

static int write_piece(void *ctx, uint64_t pos, uint64_t len, const void *data)
{
	return pwrite_all(*(int *)ctx, data, len, pos);
}

/* ---- which states ---- */

/* splitmix64: a sample depends on --seed alone, on every machine */
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The states listed so far: each the in-order state with a run of r[] rolled back. */
struct list {
	struct cc_task *v;	/* only roll and nr_roll are set here */
	size_t n, cap;
	struct cc_roll *r;
	size_t nr, rcap;
};

/* Append the in-order state with the @n blocks of @r (in increasing order) rolled back. */
static int list_add(struct list *l, const struct cc_roll *r, uint32_t n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct cc_task *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (l->nr + n > l->rcap) {
		size_t cap = l->rcap ? 2 * l->rcap : 64;
		struct cc_roll *v;

		while (cap < l->nr + n)
			cap *= 2;
		v = realloc(l->r, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->r = v;
		l->rcap = cap;
	}
	if (n)
		memcpy(l->r + l->nr, r, n * sizeof(*r));
	memset(&l->v[l->n], 0, sizeof(l->v[0]));
	l->v[l->n].roll = l->nr;
	l->v[l->n].nr_roll = n;
	l->n++;
	l->nr += n;
	return 0;
}

/* Append @choice, a state of @pt, as the blocks where it differs from the in-order state. */
static int list_add_choice(struct list *l, const struct blk_cm_point *pt, const uint32_t *choice,
			   struct cc_roll *tmp)
{
	uint32_t n = 0;
	size_t b;

	for (b = 0; b < pt->nr_blocks; b++)
		if (choice[b] != pt->b[b].nr)
			tmp[n++] = (struct cc_roll){ .blk = pt->b[b].blk, .bi = (uint32_t)b,
						     .keep = choice[b] };
	return list_add(l, tmp, n);
}

/*
 * In-order with up to @k more blocks rolled back, from block @from on;
 * @st holds the @depth blocks rolled back already. @first: where the
 * point's states start in @l.
 */
static int rollbacks(const struct blk_cm_point *pt, struct cc_roll *st, uint32_t depth,
		     size_t from, unsigned int k, struct list *l, size_t first)
{
	size_t b;
	uint32_t p;
	int ret;

	if (!k)
		return 0;
	for (b = from; b < pt->nr_blocks; b++) {
		for (p = pt->b[b].min; p < pt->b[b].nr; p++) {
			if (l->n - first >= CC_MAX_LIST)
				return -E2BIG;
			st[depth] = (struct cc_roll){ .blk = pt->b[b].blk, .bi = (uint32_t)b, .keep = p };
			ret = list_add(l, st, depth + 1);
			if (!ret)
				ret = rollbacks(pt, st, depth + 1, b + 1, k - 1, l, first);
			if (ret)
				return ret;
		}
	}
	return 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
	return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* The states with at most @k blocks rolled back, the in-order one counted (UINT64_MAX: more). */
static uint64_t rollback_set_size(const struct blk_cm_point *pt, unsigned int k)
{
	uint64_t e[CC_MAX_K + 1] = { 1 }, n = 0;
	unsigned int s;
	size_t b;

	/* e[s]: ways to roll back exactly s of the blocks seen so far */
	for (b = 0; b < pt->nr_blocks; b++)
		for (s = k; s > 0; s--)
			e[s] = sat_add(e[s], sat_mul(e[s - 1], pt->b[b].nr - pt->b[b].min));
	for (s = 0; s <= k; s++)
		n = sat_add(n, e[s]);
	return n;
}

static int size_cmp(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Keep @m of the states listed from @from on, chosen uniformly without
 * replacement (a partial Fisher-Yates shuffle from @seed), in the order
 * they were listed: a sampled point checks a subsequence of what it
 * would check without --states.
 */
static int list_sample(struct list *l, size_t from, size_t m, uint64_t seed)
{
	size_t c = l->n - from, i, wr, *ix;

	if (m >= c)
		return 0;
	ix = malloc(c * sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	for (i = 0; i < c; i++)
		ix[i] = i;
	for (i = 0; i < m && i < c; i++) {
		size_t j = i + (size_t)(rng_next(&seed) % (c - i)), t = ix[i];

		ix[i] = ix[j];
		ix[j] = t;
	}
	qsort(ix, m, sizeof(*ix), size_cmp);
	/* in place: ix[i] >= i, so entry from + ix[i] is still unmoved */
	wr = l->v[from].roll;
	for (i = 0; i < m; i++) {
		struct cc_task t = l->v[from + ix[i]];

		memmove(l->r + wr, l->r + t.roll, t.nr_roll * sizeof(*l->r));
		t.roll = wr;
		wr += t.nr_roll;
		l->v[from + i] = t;
	}
	l->n = from + m;
	l->nr = wr;
	free(ix);
	return 0;
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static uint64_t roll_hash(const struct cc_roll *r, uint32_t n)
{
	uint64_t h = 0x243f6a8885a308d3ull ^ n;
	uint32_t i;

	for (i = 0; i < n; i++) {
		uint64_t x = h ^ ((uint64_t)r[i].bi << 32 | r[i].keep);

		h = rng_next(&x);
	}
	return h | 1;	/* 0 marks a free slot */
}

/*
 * @m states with 1 to @k blocks rolled back, drawn uniformly without
 * replacement, for a set too large to list (more than CC_MAX_LIST). The
 * draw weighs each choice by the states that remain: W(i, s), the ways
 * blocks i.. roll back exactly s of themselves (in doubles: they only
 * weigh). A repeat is found by its hash and drawn again (two states with
 * one hash: the second is dropped, never listed twice).
 */
static int rollbacks_draw(const struct blk_cm_point *pt, unsigned int k, size_t m, uint64_t seed,
			  struct list *l)
{
	size_t nb = pt->nr_blocks, i, got = 0, tries = 0, hcap = 64;
	double *w = malloc((nb + 1) * (k + 1) * sizeof(*w)), tot = 0;
	struct cc_roll st[CC_MAX_K];
	uint64_t *seen;
	unsigned int s;
	int ret = 0;

	while (hcap < 2 * m + 2)
		hcap *= 2;
	seen = calloc(hcap, sizeof(*seen));
	if (!w || !seen) {
		ret = -ENOMEM;
		goto out;
	}
#define W(i, s) w[(i) * (k + 1) + (s)]
	for (s = 0; s <= k; s++)
		W(nb, s) = s == 0;
	for (i = nb; i-- > 0;) {
		double r = (double)(pt->b[i].nr - pt->b[i].min);

		for (s = 0; s <= k; s++)
			W(i, s) = W(i + 1, s) + (s ? r * W(i + 1, s - 1) : 0);
	}
	for (s = 1; s <= k; s++)
		tot += W(0, s);
	while (got < m && tries++ < 64 * m + 1024 && !ret) {
		double u = rng_unit(&seed) * tot;
		uint32_t n = 0;
		uint64_t h;
		size_t j;

		for (s = 1; s < k && u >= W(0, s); s++)
			u -= W(0, s);
		for (i = 0; i < nb && s; i++) {
			uint32_t r = pt->b[i].nr - pt->b[i].min;

			if (!r || rng_unit(&seed) * W(i, s) >= (double)r * W(i + 1, s - 1))
				continue;
			st[n++] = (struct cc_roll){ .blk = pt->b[i].blk, .bi = (uint32_t)i,
						    .keep = pt->b[i].min + (uint32_t)(rng_next(&seed) % r) };
			s--;
		}
		if (s)
			continue;	/* rounding left a roll-back undrawn: draw again */
		h = roll_hash(st, n);
		for (j = h & (hcap - 1); seen[j] && seen[j] != h; j = (j + 1) & (hcap - 1))
			;
		if (seen[j])
			continue;
		seen[j] = h;
		ret = list_add(l, st, n);
		got++;
	}
#undef W
out:
	free(seen);
	free(w);
	return ret;
}

/*
 * The states of one crash point into @l: the in-order state first, then
 * its default set (every combination within --n, else up to --k blocks
 * rolled back), or with --states MAX, where that set has more than MAX
 * states, MAX-1 of them drawn without replacement from the point's own
 * seed (--seed and the point: a sample does not change with the points
 * before it).
 */
static int point_states(struct cc *cc, const struct blk_cm_point *pt, struct cc_point *cp,
			struct list *l)
{
	bool all = pt->nr_blocks <= cc->n && pt->nr_states <= CC_MAX_LIST;
	uint64_t n = all ? pt->nr_states : rollback_set_size(pt, cc->k), x = cp->ev + 1;
	uint64_t seed = cc->seed ^ rng_next(&x);
	size_t first = l->n, m;
	struct cc_roll *tmp = NULL;
	uint32_t *choice = NULL;
	int ret;

	cp->dflt = n;
	cp->sampled = cc->max_states && n > cc->max_states;
	m = cp->sampled ? (size_t)cc->max_states - 1 : 0;
	ret = list_add(l, NULL, 0);	/* the in-order state, whatever the size */
	if (ret)
		return ret;
	if (cp->sampled && !m)
		return 0;	/* --states 1: the in-order state alone */
	if (cp->sampled && n > CC_MAX_LIST)
		return rollbacks_draw(pt, cc->k, m, seed, l);
	if (n > CC_MAX_LIST) {
		usage_err("crash point after event %zu: more than %u states within --k %u; "
			  "use --states MAX to sample", cp->ev, CC_MAX_LIST, cc->k);
		return -E2BIG;
	}
	tmp = calloc(pt->nr_blocks + 1, sizeof(*tmp));
	choice = calloc(pt->nr_blocks + 1, sizeof(*choice));
	if (!tmp || !choice) {
		ret = -ENOMEM;
		goto out;
	}
	if (all) {
		uint64_t in_order, i;

		blk_cm_state_in_order(pt, choice);
		in_order = blk_cm_state_index(pt, choice);
		for (i = 0; i < n && !ret; i++) {
			if (i == in_order)
				continue;
			blk_cm_state_nth(pt, i, choice);
			ret = list_add_choice(l, pt, choice, tmp);
		}
	} else {
		ret = rollbacks(pt, tmp, 0, 0, cc->k, l, first);
	}
	if (!ret && cp->sampled)
		ret = list_sample(l, first + 1, m, seed);
out:
	free(choice);
	free(tmp);
	return ret;
}

/*
 * A state's id (see the top of the file), allocated: "EVENT", or
 * "EVENT:BLK=KEEP,..." with runs of consecutive touched blocks that keep
 * the same prefix as "BLK1-BLK2=KEEP".
 */
static char *state_id(size_t ev, const struct cc_roll *r, uint32_t n)
{
	size_t cap = 24 + (size_t)n * 56, len;
	char *s = malloc(cap);
	uint32_t i, j;

	if (!s)
		return NULL;
	len = (size_t)snprintf(s, cap, "%zu", ev);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && r[j].bi == r[j - 1].bi + 1 && r[j].keep == r[i].keep; j++)
			;
		len += (size_t)snprintf(s + len, cap - len, "%c%" PRIu64, i ? ',' : ':', r[i].blk);
		if (j - i > 1)
			len += (size_t)snprintf(s + len, cap - len, "-%" PRIu64, r[j - 1].blk);
		len += (size_t)snprintf(s + len, cap - len, "=%" PRIu32, r[i].keep);
	}
	return s;
}

static char *task_id(const struct cc *cc, const struct cc_task *t)
{
	return state_id(cc->pts[t->point].ev, cc->rolls + t->roll, t->nr_roll);
}

/*
 * The state an id's rolled-back part names (@spec: what follows "EVENT:",
 * or "" for the in-order state) into @choice. 0, or -EINVAL with @why.
 */
static int parse_rollbacks(const struct blk_cm_point *pt, const char *spec, uint32_t *choice,
			   char *why, size_t wlen)
{
	const char *p = spec;
	long last = -1;

	blk_cm_state_in_order(pt, choice);
	while (*p) {
		unsigned long long a, b, keep;
		long ia, ib, i;
		char *end;

		errno = 0;
		if (*p < '0' || *p > '9')
			goto out_syntax;
		a = b = strtoull(p, &end, 10);
		if (*end == '-') {
			if (end[1] < '0' || end[1] > '9')
				goto out_syntax;
			b = strtoull(end + 1, &end, 10);
		}
		if (*end != '=' || end[1] < '0' || end[1] > '9')
			goto out_syntax;
		keep = strtoull(end + 1, &end, 10);
		if (errno || (*end && *end != ','))
			goto out_syntax;
		ia = blk_cm_find_block(pt, a);
		ib = blk_cm_find_block(pt, b);
		if (ia < 0 || ib < 0) {
			snprintf(why, wlen, "no unflushed write touches physical block %llu at this "
				 "crash point", ia < 0 ? a : b);
			return -EINVAL;
		}
		if (ia <= last || ib < ia) {
			snprintf(why, wlen, "blocks must come in increasing order, each once (at %llu)", a);
			return -EINVAL;
		}
		for (i = ia; i <= ib; i++) {
			if (keep < pt->b[i].min || keep > pt->b[i].nr) {
				snprintf(why, wlen, "block %" PRIu64 " keeps %" PRIu32 " to %" PRIu32
					 " of its writes, not %llu", pt->b[i].blk, pt->b[i].min,
					 pt->b[i].nr, keep);
				return -EINVAL;
			}
			choice[i] = (uint32_t)keep;
		}
		last = ib;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			goto out_syntax;
	}
	return 0;
out_syntax:
	snprintf(why, wlen, "expected EVENT or EVENT:BLK=KEEP,... (BLK1-BLK2=KEEP for a run) "
		 "as the table or --json names it");
	return -EINVAL;
}

/* ---- running the checker ---- */

static int marks_env(struct cc *cc, size_t upto, char **out)
{
	size_t i, len = 1;
	char *s;

	for (i = 0; i < upto; i++)
		if (cc->mark_text[i])
			len += strlen(cc->mark_text[i]) + 1;
	s = malloc(len);
	if (!s)
		return -ENOMEM;
	s[0] = 0;
	len = 0;
	for (i = 0; i < upto; i++) {
		if (!cc->mark_text[i])
			continue;
		len += (size_t)sprintf(s + len, "%s%s", len ? "\n" : "", cc->mark_text[i]);
	}
	*out = s;
	return 0;
}

/*
 * Run the checker on one state; *cur holds its pid (cc->lock) from its
 * spawn until it is reaped, so that a signal to the run can kill its group.
 */
static int run_checker(struct cc *cc, const char *dev, const char *loop, const char *id,
		       const char *marks, const char *outp, int *status, pid_t *cur)
{
	static const char *const names[] = { "BLKFS_CRASH_DEV=", "BLKFS_CRASH_LOOP=",
					     "BLKFS_CRASH_STATE=", "BLKFS_CRASH_MARKS=" };
	const char *vals[] = { dev, loop, id, marks };
	char *argv[] = { "sh", "-c", (char *)cc->check, NULL }, **envp, *own[4];
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	siginfo_t si;
	bool timed_out = false;
	struct pollfd pfd;
	size_t nenv = 0, e = 0, i, nown = 0;
	pid_t pid;
	int pidfd, st, ret, ms;

	/*
	 * posix_spawn (a vfork underneath), not fork: a fork copies the page
	 * tables of this process, whose log and model grow with the log; the
	 * spawn costs the same whatever their size.
	 */
	while (environ[nenv])
		nenv++;
	envp = calloc(nenv + 5, sizeof(*envp));
	if (!envp)
		return CC_ERROR;
	for (i = 0; i < nenv; i++)
		if (strncmp(environ[i], "BLKFS_CRASH_", 12))
			envp[e++] = environ[i];
	for (i = 0; i < 4; i++) {
		if (!vals[i])
			continue;
		own[nown] = malloc(strlen(names[i]) + strlen(vals[i]) + 1);
		if (!own[nown])
			break;
		sprintf(own[nown], "%s%s", names[i], vals[i]);
		envp[e++] = own[nown++];
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	posix_spawnattr_init(&attr);
	/* its own group, so that a timeout kills all it started; the jobs block SIGINT and SIGTERM */
	sigemptyset(&none);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setsigmask(&attr, &none);
	ret = i == 4 ? posix_spawn(&pid, "/bin/sh", &fa, &attr, argv, envp) : ENOMEM;
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	while (nown)
		free(own[--nown]);
	free(envp);
	if (ret)
		return CC_ERROR;
	pthread_mutex_lock(&cc->lock);
	*cur = pid;
	if (cc->stop && cc_signal)
		kill(-pid, SIGKILL);	/* spawned after the run's loop killed the others */
	pthread_mutex_unlock(&cc->lock);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	ms = cc->timeout_s > 0 ? (int)(cc->timeout_s * 1000) : -1;
	if (pidfd >= 0) {
		pfd.fd = pidfd;
		pfd.events = POLLIN;
		timed_out = poll(&pfd, 1, ms) == 0;
		close(pidfd);
		if (timed_out)
			kill(-pid, SIGKILL);
	}
	/*
	 * Wait without reaping: a zombie keeps its pid, so its group can
	 * still be named, by the kill below (what it left behind in it) and
	 * by a signal to the run until *cur is cleared.
	 */
	while (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
		;
	kill(-pid, SIGKILL);
	pthread_mutex_lock(&cc->lock);
	*cur = 0;
	pthread_mutex_unlock(&cc->lock);
	if (waitpid(pid, &st, 0) < 0)
		return CC_ERROR;
	if (timed_out) {
		*status = -SIGKILL;
		return CC_TIMEOUT;
	}
	if (WIFEXITED(st)) {
		*status = WEXITSTATUS(st);
		return *status ? CC_FAIL : CC_OK;
	}
	*status = WIFSIGNALED(st) ? -WTERMSIG(st) : -1;
	return CC_FAIL;
}

struct cc_job {
	struct cc *cc;
	unsigned int id;
	char path[PATH_MAX];
	char dpath[PATH_MAX];	/* the durable contents alone, for a checker that wrote */
	char loop[64];
	int fd, dfd, loop_fd;
	size_t ev_done;		/* durable writes applied: events before this index */
	uint64_t durable;
	int err;
	pid_t checker;		/* cc->lock: the running checker, or 0 */

	/* a clone: its name in the mount, the control file, its durable snapshot */
	char name[64];
	int ctl_fd;
	bool added;
	unsigned int nr_snaps;	/* snapshots taken: the next one's number */
	char snap[32];		/* "" before the first */
	bool at_snap;		/* the clone holds exactly snap: no reset needed */
	/*
	 * The clone holds snap plus state kch[] of the crash point with
	 * knr_ev events (blocks kblk[]): the next state of the same durable
	 * prefix that only adds writes to it costs those writes, no reset.
	 * Known only when the checker wrote nothing: wbytes, the clone's
	 * written bytes (blkfs_stat), came out as predicted. diff_ok: writes
	 * reach the daemon when made (no kernel writeback cache), so they can
	 * be counted.
	 */
	bool known, diff_ok;
	size_t knr_ev, knr;
	uint64_t *kblk;
	uint32_t *kch;
	uint64_t wbytes, wpending;	/* the counter last read; bytes written since */
	uint64_t nr_diffs;

	/* time: building states (reset, pieces, moving forward), and the checker */
	uint64_t nr_built, build_ns, reset_ns, nr_resets, check_ns;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * One control command on the job's descriptor of MNT/.sys/control: the
 * line written and, when it failed, the daemon's message read back (into
 * @msg; "" on success). 0 or -errno.
 */
static int job_ctl(struct cc_job *j, char *msg, size_t len, int argc, char **argv)
{
	char line[BF_CTL_MAX_LINE + 1];
	size_t got = 0;
	ssize_t n;
	int l, err;

	msg[0] = 0;
	l = bf_ctl_format(argc, argv, line, sizeof(line));
	if (l < 0)
		return l;
	n = write(j->ctl_fd, line, (size_t)l);
	err = n < 0 ? -errno : n != l ? -EIO : 0;
	msg[0] = 0;
	/* a success's message is not needed: one FUSE round trip less per reset */
	for (; err; ) {
		ssize_t r = read(j->ctl_fd, msg + got, len - 1 - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == len - 1)
			break;
	}
	msg[got] = 0;
	if (got && msg[got - 1] == '\n')
		msg[got - 1] = 0;
	return err;
}

static int job_ctl2(struct cc_job *j, const char *verb, const char *a, const char *b,
		    const char *c)
{
	char *argv[] = { (char *)verb, (char *)a, (char *)b, (char *)c, NULL };
	char msg[BF_CTL_MSG_MAX + 1];
	int argc = c ? 4 : b ? 3 : 2, ret;

	ret = job_ctl(j, msg, sizeof(msg), argc, argv);
	if (ret)
		usage_err("%s %s %s: %s", verb, a, b ? b : "", msg[0] ? msg : strerror(-ret));
	return ret;
}

/* The clone back to its durable snapshot (what a state and a checker wrote goes). */
static int clone_reset(struct cc_job *j)
{
	uint64_t t0 = now_ns();
	int ret;

	if (j->at_snap)
		return 0;
	ret = job_ctl2(j, "reset", j->name, j->snap, NULL);
	j->reset_ns += now_ns() - t0;
	j->nr_resets++;
	if (!ret) {
		j->at_snap = true;
		j->known = true;	/* the snapshot: no unflushed write kept */
		j->knr = j->knr_ev = 0;
	}
	return ret;
}

/* Take the clone's contents now as its durable snapshot; the one before goes. */
static int clone_snapshot(struct cc_job *j)
{
	char name[32];
	int ret;

	snprintf(name, sizeof(name), "d%u", j->nr_snaps++);
	ret = job_ctl2(j, "snapshot", j->name, name, NULL);
	if (ret)
		return ret;
	if (j->snap[0] && job_ctl2(j, "snapshot", "-d", j->name, j->snap))
		return -EIO;
	snprintf(j->snap, sizeof(j->snap), "%s", name);
	j->at_snap = true;
	j->known = true;
	j->knr = j->knr_ev = 0;
	return 0;
}

/* The bytes written to the clone so far, as its blkfs_stat counts them (sum of the write counters). */
static int clone_wbytes(struct cc_job *j, uint64_t *out)
{
	static const char *const keys[] = { "user_write_bytes ", "direct_write_bytes ",
					    "backend_discard_bytes ", "backend_discards " };
	char path[PATH_MAX], line[128];
	uint64_t sum = 0;
	int found = 0;
	size_t k;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.sys/%s/blkfs_stat", j->cc->snap_mnt, j->name);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f))
		for (k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
			if (!strncmp(line, keys[k], strlen(keys[k]))) {
				sum += strtoull(line + strlen(keys[k]), NULL, 10);
				found++;
			}
	fclose(f);
	if (found != (int)(sizeof(keys) / sizeof(keys[0])))
		return -ENODATA;
	*out = sum;
	return 0;
}

struct piece_ctx {
	int fd;
	uint64_t bytes;
};

static int write_piece_counted(void *ctx, uint64_t pos, uint64_t len, const void *data)
{
	struct piece_ctx *pc = ctx;

	pc->bytes += len;
	return pwrite_all(pc->fd, data, len, pos);
}

/*
 * The known state of the clone extends to @choice at @pt: every block it
 * kept a prefix of keeps at least as much. Then write only the pieces
 * that extend it (per block, in completion order). 1 done, 0 not an
 * extension (nothing written), or -errno.
 */
static int clone_extend(struct cc_job *j, const struct blk_cm_point *pt, const uint32_t *choice,
			uint64_t *bytes)
{
	uint64_t pbs = pt->log->pbs;
	size_t b, k = 0;
	uint32_t *old;
	int ret = 0;

	if (!j->known || !j->diff_ok || pt->nr_events < j->knr_ev)
		return 0;
	old = calloc(pt->nr_blocks + 1, sizeof(*old));
	if (!old)
		return -ENOMEM;
	for (b = 0; b < pt->nr_blocks; b++) {
		while (k < j->knr && j->kblk[k] < pt->b[b].blk)
			k++;	/* a block of the known state that is not here: not the same epoch */
		if (k < j->knr && j->kblk[k] == pt->b[b].blk)
			old[b] = j->kch[k++];
		if (old[b] > choice[b])
			goto out_not;
	}
	/* every block of the known state must be among this point's */
	for (b = 0, k = 0; k < j->knr; k++) {
		while (b < pt->nr_blocks && pt->b[b].blk < j->kblk[k])
			b++;
		if (b == pt->nr_blocks || pt->b[b].blk != j->kblk[k])
			goto out_not;
	}
	for (b = 0; b < pt->nr_blocks && !ret; b++) {
		uint64_t lo = pt->b[b].blk * pbs, hi = lo + pbs;
		uint32_t r;

		for (r = old[b]; r < choice[b] && !ret; r++) {
			const struct blk_cm_event *e = &pt->log->ev[pt->b[b].ev[r]];
			uint64_t s = e->pos > lo ? e->pos : lo;
			uint64_t t = e->pos + e->len < hi ? e->pos + e->len : hi;

			if (s >= t)
				continue;
			ret = pwrite_all(j->fd, e->data ? (const char *)e->data + (s - e->pos) : NULL,
					 t - s, s);
			*bytes += t - s;
		}
	}
	free(old);
	return ret ? ret : 1;
out_not:
	free(old);
	return 0;
}

/* Remember the clone's contents: @choice at @pt (valid only if the checker writes nothing). */
static int clone_remember(struct cc_job *j, const struct blk_cm_point *pt, const uint32_t *choice)
{
	size_t b;

	free(j->kblk);
	free(j->kch);
	j->kblk = malloc((pt->nr_blocks + 1) * sizeof(*j->kblk));
	j->kch = malloc((pt->nr_blocks + 1) * sizeof(*j->kch));
	if (!j->kblk || !j->kch)
		return -ENOMEM;
	for (b = 0; b < pt->nr_blocks; b++) {
		j->kblk[b] = pt->b[b].blk;
		j->kch[b] = choice[b];
	}
	j->knr = pt->nr_blocks;
	j->knr_ev = pt->nr_events;
	return 0;
}

/*
 * The job's clone: `add NAME backend=ram clone=DEV@SNAP` on the base's
 * mount, its file open, its first durable snapshot (the base). -ENODEV
 * (with @why) when the base's device cannot be cloned (not ram).
 */
static int clone_add(struct cc_job *j, char *why, size_t wlen)
{
	struct cc *cc = j->cc;
	char path[PATH_MAX], spec[PATH_MAX], msg[BF_CTL_MSG_MAX + 1];
	char *argv[4];
	int ret;

	snprintf(j->name, sizeof(j->name), "cc-%d-%u", (int)getpid(), j->id);
	snprintf(j->path, sizeof(j->path), "%s/%s", cc->snap_mnt, j->name);
	snprintf(path, sizeof(path), "%s/.sys/control", cc->snap_mnt);
	j->ctl_fd = open(path, O_RDWR | O_CLOEXEC);
	if (j->ctl_fd < 0) {
		ret = -errno;
		snprintf(why, wlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	snprintf(spec, sizeof(spec), "clone=%s@%s", cc->snap_dev, cc->snap_name);
	argv[0] = "add";
	argv[1] = j->name;
	argv[2] = "backend=ram";
	argv[3] = spec;
	ret = job_ctl(j, msg, sizeof(msg), 4, argv);
	if (ret) {
		snprintf(why, wlen, "%s", msg[0] ? msg : strerror(-ret));
		return strstr(msg, "no ram device named") ? -ENODEV : ret;
	}
	j->added = true;
	j->fd = open(j->path, O_RDWR | O_CLOEXEC);
	if (j->fd < 0) {
		ret = -errno;
		snprintf(why, wlen, "%s: %s", j->path, strerror(-ret));
		return ret;
	}
	ret = clone_snapshot(j);
	if (ret) {
		snprintf(why, wlen, "cannot take a snapshot of %s", j->name);
		return ret;
	}
	/*
	 * Can the clone's write counters tell whether a checker wrote? Only
	 * if a write reaches the daemon when it is made: a block written back
	 * as it is must count its bytes at once (not with kernel_cache =
	 * writeback, where the kernel holds it).
	 */
	{
		uint64_t c0 = 0, c1 = 0;
		char buf[4096];

		if (!clone_wbytes(j, &c0) && pread(j->fd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) &&
		    pwrite(j->fd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf) &&
		    !clone_wbytes(j, &c1) && c1 - c0 == sizeof(buf)) {
			j->diff_ok = true;
			j->wbytes = c1;
		}
	}
	return 0;
}

static void detach_loop(struct cc_job *j);

static void clone_remove(struct cc_job *j)
{
	int i, ret = 0;

	detach_loop(j);
	j->loop[0] = 0;
	if (j->fd >= 0)
		close(j->fd);
	j->fd = -1;
	if (j->added) {
		char *argv[] = { "remove", j->name, NULL };
		char msg[BF_CTL_MSG_MAX + 1];

		/* the kernel releases a file closed a moment ago in the background */
		for (i = 0; i < 10; i++) {
			ret = job_ctl(j, msg, sizeof(msg), 2, argv);
			if (ret != -EBUSY)
				break;
			usleep(200000);
		}
		if (ret)
			usage_err("remove %s: %s (remove it with blkfs remove %s %s)", j->name,
				  msg[0] ? msg : strerror(-ret), j->cc->snap_mnt, j->name);
	}
	if (j->ctl_fd >= 0)
		close(j->ctl_fd);
	j->ctl_fd = -1;
	free(j->kblk);
	free(j->kch);
	j->kblk = NULL;
	j->kch = NULL;
}

static int attach_loop(struct cc_job *j)
{
	char cmd[PATH_MAX + 64];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "losetup -f --show '%s'", j->path);
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	if (!fgets(j->loop, sizeof(j->loop), p)) {
		pclose(p);
		return -ENODEV;
	}
	pclose(p);
	j->loop[strcspn(j->loop, "\n")] = 0;
	j->loop_fd = open(j->loop, O_RDONLY | O_CLOEXEC);
	return j->loop_fd < 0 ? -errno : 0;
}

static void detach_loop(struct cc_job *j)
{
	char cmd[128];

	if (!j->loop[0])
		return;
	if (j->loop_fd >= 0)
		close(j->loop_fd);
	snprintf(cmd, sizeof(cmd), "losetup -d %s", j->loop);
	if (system(cmd))
		fprintf(stderr, "blkfs crashcheck: %s: cannot detach\n", j->loop);
}

/*
 * Move the job's scratch forward to the durable contents of @pt. A clone
 * is reset to its durable snapshot first, and the new durable contents
 * become its snapshot.
 */
static int job_advance(struct cc_job *j, const struct blk_cm_point *pt)
{
	const struct blk_cm_log *m = pt->log;
	bool moved = false;
	size_t i;
	int ret;

	for (i = j->ev_done; i < pt->nr_events; i++) {
		const struct blk_cm_event *e = &m->ev[i];

		if (e->kind != BLK_CM_WRITE)
			continue;
		if (e->seq >= pt->durable)
			break;
		if (!moved && j->added) {
			ret = clone_reset(j);
			if (ret)
				return ret;
		}
		moved = true;
		j->wpending += e->len;
		ret = pwrite_all(j->fd, e->data, e->len, e->pos);
		if (!ret && j->dfd >= 0)
			ret = pwrite_all(j->dfd, e->data, e->len, e->pos);
		if (ret)
			return ret;
	}
	j->ev_done = i;
	if (moved && j->added)
		return clone_snapshot(j);
	return 0;
}

static int run_state(struct cc_job *j, size_t ti)
{
	struct cc *cc = j->cc;
	struct cc_task *t = &cc->tasks[ti];
	const struct cc_point *cp = &cc->pts[t->point];
	struct blk_cm_point pt;
	uint32_t *choice = NULL;
	unsigned char *saved = NULL;
	char outp[PATH_MAX], *id = NULL, *marks = NULL;
	uint64_t t0, t1;
	size_t b;
	int ret;

	ret = blk_cm_point_init(&pt, &cc->m, cp->ev + 1);
	if (ret)
		return ret;
	choice = calloc(pt.nr_blocks + 1, sizeof(*choice));
	saved = malloc(pt.nr_blocks * (size_t)cc->pbs + 1);
	if (!choice || !saved) {
		ret = -ENOMEM;
		goto out;
	}
	t0 = now_ns();
	ret = job_advance(j, &pt);
	if (ret)
		goto out;
	blk_cm_state_in_order(&pt, choice);
	for (b = 0; b < t->nr_roll; b++)
		choice[cc->rolls[t->roll + b].bi] = cc->rolls[t->roll + b].keep;
	if (j->added) {
		uint64_t bytes = 0;

		/* the clone holds a state this one only adds writes to: write those */
		ret = clone_extend(j, &pt, choice, &bytes);
		if (ret < 0)
			goto out;
		j->wpending += bytes;
		if (ret) {
			j->nr_diffs++;
			ret = clone_remember(j, &pt, choice);
			if (ret)
				goto out;
			j->at_snap = false;
			goto built;
		}
		/* else what the last state and its checker wrote goes */
		ret = clone_reset(j);
		if (ret)
			goto out;
	} else {
		for (b = 0; b < pt.nr_blocks; b++)
			if (pread(j->fd, saved + b * cc->pbs, cc->pbs,
				  (off_t)(pt.b[b].blk * cc->pbs)) != (ssize_t)cc->pbs)
				memset(saved + b * cc->pbs, 0, cc->pbs);
	}
	{
		struct piece_ctx pc = { .fd = j->fd };

		ret = blk_cm_apply_volatile(&pt, choice, write_piece_counted, &pc);
		j->wpending += pc.bytes;
		if (ret)
			goto out;
		if (j->added) {
			ret = clone_remember(j, &pt, choice);
			if (ret)
				goto out;
			if (pc.bytes)
				j->at_snap = false;
		}
	}
built:
	if (j->loop_fd >= 0)
		ioctl(j->loop_fd, BLKFLSBUF, 0);	/* the loop device's own cache is stale */
	/*
	 * A checker may write to the state (a journal replay at mount): the
	 * file's mtime, set to 1 s past the epoch here, says whether it did.
	 * A clone needs no telling: every state starts with a reset.
	 */
	if (!j->added) {
		const struct timespec tv[2] = { { .tv_sec = 1 }, { .tv_sec = 1 } };

		futimens(j->fd, tv);
	}
	id = task_id(cc, t);
	if (!id) {
		ret = -ENOMEM;
		goto out;
	}
	snprintf(outp, sizeof(outp), "%s/job-%u.out", cc->run_dir, j->id);
	ret = marks_env(cc, cp->ev + 1, &marks);
	if (ret)
		goto out;
	t1 = now_ns();
	j->build_ns += t1 - t0;
	j->nr_built++;
	t->verdict = run_checker(cc, j->path, j->loop[0] ? j->loop : NULL, id, marks, outp,
				 &t->status, &j->checker);
	j->check_ns += now_ns() - t1;
	if (cc_signal) {
		/* the run stops: this checker was killed, its state did not fail */
		t->verdict = CC_OK;
		unlink(outp);
		goto out;
	}
	if (t->verdict == CC_ERROR) {
		ret = -ECHILD;	/* the checker could not be run: the run stops (exit 3) */
		goto out;
	}
	if (t->verdict != CC_OK) {
		char keep[PATH_MAX];

		/* the id names the file, unless too long for a name */
		if (strlen(id) < 200)
			snprintf(keep, sizeof(keep), "%s/state-%s.out", cc->keep, id);
		else
			snprintf(keep, sizeof(keep), "%s/state-%zu-%zu.out", cc->keep, cp->ev,
				 ti - cp->first_task);
		if (rename(outp, keep) == 0 || (errno == EXDEV && !move_file(outp, keep)))
			t->out = strdup(keep);
	}
	unlink(outp);
	if (j->added) {
		uint64_t now = 0;

		/*
		 * Did the checker write? Its loop device's cache first (a write
		 * it left there would land in a later state), then the clone's
		 * counters against what this job wrote itself. If it did, or
		 * nobody can tell, the next state starts with a reset.
		 */
		if (j->loop_fd >= 0)
			ioctl(j->loop_fd, BLKFLSBUF, 0);
		if (!j->diff_ok || clone_wbytes(j, &now) || now != j->wbytes + j->wpending) {
			j->known = false;
			j->at_snap = false;
		}
		j->wbytes = now;
		j->wpending = 0;
		goto out;
	}
	/* Put back the physical blocks the state touched, or all of it if the checker wrote. */
	{
		struct stat st;

		if (j->loop_fd >= 0)
			ioctl(j->loop_fd, BLKFLSBUF, 0);
		if (fstat(j->fd, &st) || st.st_mtim.tv_sec != 1 || st.st_mtim.tv_nsec) {
			ret = copy_file(j->dfd, j->fd, cc->dev_size);
			goto out;
		}
	}
	for (b = 0; b < pt.nr_blocks && !ret; b++)
		ret = pwrite_all(j->fd, saved + b * cc->pbs, cc->pbs, pt.b[b].blk * cc->pbs);
out:
	free(id);
	free(marks);
	free(saved);
	free(choice);
	blk_cm_point_destroy(&pt);
	return ret;
}

static void *job_main(void *arg)
{
	struct cc_job *j = arg;
	struct cc *cc = j->cc;

	for (;;) {
		size_t ti;
		int ret;

		pthread_mutex_lock(&cc->lock);
		if (cc->stop || cc->next >= cc->nr_tasks) {
			pthread_mutex_unlock(&cc->lock);
			break;
		}
		ti = cc->next++;
		pthread_mutex_unlock(&cc->lock);
		ret = run_state(j, ti);
		pthread_mutex_lock(&cc->lock);
		if (ret) {
			j->err = ret;
			cc->stop = true;
		}
		cc->done++;
		if (cc->tasks[ti].verdict != CC_OK)
			cc->failed++;
		pthread_mutex_unlock(&cc->lock);
	}
	return NULL;
}

/* ---- output ---- */

static const char *verdict_name(int v)
{
	return v == CC_OK ? "ok" : v == CC_FAIL ? "failed" : v == CC_TIMEOUT ? "timeout" : "error";
}

static const char *point_kind(const struct cc *cc, size_t ev)
{
	switch (cc->m.ev[ev].kind) {
	case BLK_CM_FLUSH:
		return "flush";
	case BLK_CM_MARK:
		return "mark";
	default:
		return "write";
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* How a point was explored: "exhaustive" or "sampled K of N", into @buf. */
static const char *explored(const struct cc_point *p, char *buf, size_t len)
{
	if (!p->sampled)
		return "exhaustive";
	if (p->dflt == UINT64_MAX)
		snprintf(buf, len, "sampled %" PRIu64 " of >2^64", p->listed);
	else
		snprintf(buf, len, "sampled %" PRIu64 " of %" PRIu64, p->listed, p->dflt);
	return buf;
}

static void report(struct cc *cc, double secs)
{
	double built = cc->nr_built ? (double)cc->nr_built : 1;
	double build_ms = (double)cc->build_ns / 1e6 / built;
	double reset_ms = cc->nr_resets ? (double)cc->reset_ns / 1e6 / (double)cc->nr_resets : 0;
	double check_ms = (double)cc->check_ns / 1e6 / built;
	size_t i, t, nr_sampled = 0;
	uint64_t timeouts = 0;
	char how[64];

	for (t = 0; t < cc->nr_tasks; t++) {
		struct cc_task *tk = &cc->tasks[t];
		struct cc_point *p = &cc->pts[tk->point];

		if (tk->verdict == CC_TIMEOUT)
			timeouts++;
		if (tk->verdict != CC_OK) {
			p->failed++;
			if (p->first_fail == SIZE_MAX)
				p->first_fail = t;
		}
	}
	for (i = 0; i < cc->nr_pts; i++)
		nr_sampled += cc->pts[i].sampled;
	if (cc->json) {
		printf("{\"log\": ");
		json_str(stdout, cc->log_path);
		printf(", \"states\": %" PRIu64 ", \"failures\": %" PRIu64 ", \"timeouts\": %" PRIu64
		       ", \"seconds\": %.3f, \"scratch\": \"%s\", \"build_ms\": %.3f, \"reset_ms\": %.3f"
		       ", \"check_ms\": %.3f, \"resets\": %" PRIu64 ", \"extended\": %" PRIu64
		       ", \"sampled_points\": %zu, \"points\": [", cc->done, cc->failed, timeouts, secs,
		       cc->clone ? "clone" : "file", build_ms, reset_ms, check_ms, cc->nr_resets,
		       cc->nr_diffs, nr_sampled);
		for (i = 0; i < cc->nr_pts; i++) {
			struct cc_point *p = &cc->pts[i];

			printf("%s\n  {\"event\": %zu, \"kind\": \"%s\", \"mark\": ", i ? "," : "", p->ev,
			       point_kind(cc, p->ev));
			if (cc->mark_text[p->ev])
				json_str(stdout, cc->mark_text[p->ev]);
			else
				printf("null");
			printf(", \"states\": %" PRIu64 ", \"full_set\": ", p->listed);
			if (p->full == UINT64_MAX)
				printf("null");
			else
				printf("%" PRIu64, p->full);
			printf(", \"default_set\": ");
			if (p->dflt == UINT64_MAX)
				printf("null");
			else
				printf("%" PRIu64, p->dflt);
			printf(", \"explored\": \"%s\"", explored(p, how, sizeof(how)));
			printf(", \"failures\": %" PRIu64 ", \"first_failure\": ", p->failed);
			if (p->first_fail != SIZE_MAX) {
				char *id = task_id(cc, &cc->tasks[p->first_fail]);

				json_str(stdout, id);
				free(id);
			} else {
				printf("null");
			}
			printf("}");
		}
		printf("],\n \"failed\": [");
		for (t = 0, i = 0; t < cc->nr_tasks; t++) {
			struct cc_task *tk = &cc->tasks[t];
			char *id;

			if (tk->verdict == CC_OK)
				continue;
			id = task_id(cc, tk);
			printf("%s\n  {\"state\": ", i++ ? "," : "");
			json_str(stdout, id);
			printf(", \"verdict\": \"%s\", \"status\": %d, \"output\": ",
			       verdict_name(tk->verdict), tk->status);
			json_str(stdout, tk->out);
			printf("}");
			free(id);
		}
		printf("]}\n");
		return;
	}
	printf("%-8s %-6s %-24s %10s %12s %-24s %9s  %s\n", "EVENT", "KIND", "MARK", "STATES",
	       "FULL SET", "EXPLORED", "FAILURES", "FIRST FAILING");
	for (i = 0; i < cc->nr_pts; i++) {
		struct cc_point *p = &cc->pts[i];
		char full[24];
		char *first = p->first_fail != SIZE_MAX ? task_id(cc, &cc->tasks[p->first_fail]) : NULL;

		if (p->full == UINT64_MAX)
			snprintf(full, sizeof(full), ">2^64");
		else
			snprintf(full, sizeof(full), "%" PRIu64, p->full);
		printf("%-8zu %-6s %-24.24s %10" PRIu64 " %12s %-24s %9" PRIu64 "  %s\n", p->ev,
		       point_kind(cc, p->ev), cc->mark_text[p->ev] ? cc->mark_text[p->ev] : "-",
		       p->listed, full, explored(p, how, sizeof(how)), p->failed, first ? first : "-");
		free(first);
	}
	printf("%" PRIu64 " states, %" PRIu64 " failed (%" PRIu64 " timed out), %.1f s, %.0f states/s\n",
	       cc->done, cc->failed, timeouts, secs, secs > 0 ? (double)cc->done / secs : 0.0);
	printf("%zu crash points, %zu of them sampled (--states)\n", cc->nr_pts, nr_sampled);
	printf("per state: %.3f ms to build (in %s; %" PRIu64 " resets, %.3f ms each; %" PRIu64
	       " by adding writes to the state before), %.3f ms in the checker\n", build_ms,
	       cc->clone ? "ram clones" : "scratch files", cc->nr_resets, reset_ms, cc->nr_diffs,
	       check_ms);
	for (t = 0; t < cc->nr_tasks; t++)
		if (cc->tasks[t].verdict != CC_OK && cc->tasks[t].out) {
			char *id = task_id(cc, &cc->tasks[t]);

			printf("failed %s (%s, status %d): output in %s\n", id ? id : "?",
			       verdict_name(cc->tasks[t].verdict), cc->tasks[t].status, cc->tasks[t].out);
			free(id);
		}
}

/* ---- materialize ---- */

static int materialize(struct cc *cc)
{
	struct blk_cm_point pt;
	uint32_t *choice;
	unsigned long long ev;
	char *end, why[256];
	struct stat st;
	int fd, ret;

	errno = 0;
	ev = strtoull(cc->state_id, &end, 10);
	if (errno || end == cc->state_id || (*end && (*end != ':' || !end[1]))) {
		usage_err("--state %s: expected EVENT or EVENT:BLK=KEEP,... as the table or --json "
			  "names it", cc->state_id);
		return 2;
	}
	if (ev >= cc->m.nr) {
		usage_err("--state %s: no such state (the log has %zu events)", cc->state_id, cc->m.nr);
		return 2;
	}
	if (blk_cm_point_init(&pt, &cc->m, (size_t)ev + 1)) {
		usage_err("%s", strerror(ENOMEM));
		return CC_EXIT_ERROR;
	}
	choice = calloc(pt.nr_blocks + 1, sizeof(*choice));
	if (!choice || parse_rollbacks(&pt, *end ? end + 1 : end, choice, why, sizeof(why))) {
		usage_err("--state %s: %s", cc->state_id, choice ? why : strerror(ENOMEM));
		ret = choice ? CC_EXIT_USAGE : CC_EXIT_ERROR;
		free(choice);
		blk_cm_point_destroy(&pt);
		return ret;
	}
	fd = open(cc->materialize, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0) {
		usage_err("%s: %s", cc->materialize, strerror(errno));
		ret = 2;
		goto out;
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ftruncate(fd, 0)) {
		usage_err("%s: %s", cc->materialize, strerror(errno));
		ret = CC_EXIT_ERROR;
		goto out_close;
	}
	ret = S_ISREG(st.st_mode) ? copy_base(cc, fd) : 0;
	if (!S_ISREG(st.st_mode)) {
		/* A block device: the base first, byte for byte. */
		int src = cc->base_img ? open(cc->base_img, O_RDONLY) : -1;
		static unsigned char buf[1 << 20];
		uint64_t p;

		for (p = 0; p < cc->dev_size && !ret; p += sizeof(buf)) {
			size_t n = cc->dev_size - p < sizeof(buf) ? (size_t)(cc->dev_size - p) : sizeof(buf);

			if (src < 0 || pread(src, buf, n, (off_t)p) != (ssize_t)n)
				memset(buf, 0, n);
			ret = pwrite_all(fd, buf, n, p);
		}
		if (src >= 0)
			close(src);
	}
	if (!ret)
		ret = blk_cm_apply(&pt, choice, write_piece, &fd);
	if (!ret && fsync(fd))
		ret = -errno;
	if (ret) {
		usage_err("%s: %s", cc->materialize, strerror(-ret));
		ret = CC_EXIT_ERROR;	/* an I/O error, not a failing state */
	}
out_close:
	close(fd);
out:
	free(choice);
	blk_cm_point_destroy(&pt);
	return ret;
}

/* ---- main ---- */

static int checker_ok(const char *cmd)
{
	char word[256], path[PATH_MAX + 300];
	const char *p = cmd, *env;
	size_t n = strcspn(p, " \t\n;|&");

	if (!n || n >= sizeof(word))
		return 0;
	memcpy(word, p, n);
	word[n] = 0;
	if (strchr(word, '/'))
		return access(word, X_OK) == 0;
	if (!strcmp(word, "true") || !strcmp(word, "false") || !strcmp(word, "test") ||
	    !strcmp(word, "exit") || !strcmp(word, "[") || !strcmp(word, "echo"))
		return 1;	/* shell builtins */
	env = getenv("PATH");
	if (!env)
		env = "/usr/bin:/bin";
	while (*env) {
		size_t l = strcspn(env, ":");

		if (l >= PATH_MAX)
			return 0;
		snprintf(path, sizeof(path), "%.*s/%s", (int)l, env, word);
		if (access(path, X_OK) == 0)
			return 1;
		env += l;
		if (*env)
			env++;
	}
	return 0;
}

static int parse_u64(const char *opt, const char *s, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-') {
		usage_err("%s %s: not a number", opt, s);
		return -1;
	}
	if (*end == 'K' || *end == 'k')
		*out <<= 10, end++;
	else if (*end == 'M')
		*out <<= 20, end++;
	else if (*end == 'G')
		*out <<= 30, end++;
	if (*end) {
		usage_err("%s %s: not a number", opt, s);
		return -1;
	}
	return 0;
}

static const char usage[] =
	"Usage: blkfs crashcheck LOG --base BASE --check CMD [--jobs N] [--n N] [--k K]\n"
	"           [--states MAX] [--seed S] [--each-write] [--attach] [--timeout SECS]\n"
	"           [--json] [--scratch DIR] [--keep DIR] [--size SIZE] [--pbs BYTES]\n"
	"       blkfs crashcheck LOG --base BASE --state ID --materialize FILE\n"
	"Exit status: 0 no state failed, 1 a state failed, 2 bad input, 3 an error of blkfs's own\n"
	"(set-up, I/O, scratch space); killed by SIGINT or SIGTERM, it cleans up and dies of it.\n";

int bf_cmd_crashcheck(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "check", required_argument, NULL, 'c' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "n", required_argument, NULL, 'N' },
		{ "k", required_argument, NULL, 'K' },
		{ "states", required_argument, NULL, 'S' },
		{ "seed", required_argument, NULL, 's' },
		{ "each-write", no_argument, NULL, 'w' },
		{ "attach", no_argument, NULL, 'a' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'J' },
		{ "scratch", required_argument, NULL, 'd' },
		{ "keep", required_argument, NULL, 'k' },
		{ "size", required_argument, NULL, 'z' },
		{ "pbs", required_argument, NULL, 'p' },
		{ "state", required_argument, NULL, 'i' },
		{ "materialize", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cc cc = { .n = CC_DEF_N, .k = CC_DEF_K, .jobs = 1, .timeout_s = 0 };
	struct cc_job *jobs = NULL;
	struct list l = { 0 };
	char err[512] = "";
	uint32_t lbs = 0;
	uint64_t v;
	struct stat st;
	double t0;
	struct timespec ts;
	size_t i, p, nr_sampled = 0;
	sigset_t sigs;
	int c, fd, ret = CC_EXIT_USAGE;

	while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		switch (c) {
		case 'b': cc.base = optarg; break;
		case 'c': cc.check = optarg; break;
		case 'j':
			if (parse_u64("--jobs", optarg, &v) || !v || v > 256) {
				usage_err("--jobs %s: 1 to 256", optarg);
				return 2;
			}
			cc.jobs = (unsigned int)v;
			break;
		case 'N':
			if (parse_u64("--n", optarg, &v) || v > 63)
				return 2;
			cc.n = (unsigned int)v;
			break;
		case 'K':
			if (parse_u64("--k", optarg, &v) || v > CC_MAX_K)
				return 2;
			cc.k = (unsigned int)v;
			break;
		case 'S':
			if (parse_u64("--states", optarg, &cc.max_states) || !cc.max_states)
				return 2;
			break;
		case 's':
			if (parse_u64("--seed", optarg, &cc.seed))
				return 2;
			break;
		case 'w': cc.each_write = true; break;
		case 'a': cc.attach = true; break;
		case 't': {
			char *end;

			cc.timeout_s = strtod(optarg, &end);
			if (*end || cc.timeout_s <= 0) {
				usage_err("--timeout %s: seconds, more than 0", optarg);
				return 2;
			}
			break;
		}
		case 'J': cc.json = true; break;
		case 'd': cc.scratch = optarg; break;
		case 'k': cc.keep = optarg; break;
		case 'z':
			if (parse_u64("--size", optarg, &cc.size))
				return 2;
			break;
		case 'p':
			if (parse_u64("--pbs", optarg, &v) || v < 512 || v > 65536 || (v & (v - 1))) {
				usage_err("--pbs %s: a power of two from 512 to 65536", optarg);
				return 2;
			}
			cc.pbs = (uint32_t)v;
			break;
		case 'i': cc.state_id = optarg; break;
		case 'm': cc.materialize = optarg; break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind != argc - 1 || !cc.base || (!cc.check && !cc.materialize) ||
	    (!!cc.state_id != !!cc.materialize)) {
		fputs(usage, stderr);
		return 2;
	}
	cc.log_path = argv[optind];
	if (!cc.scratch)
		cc.scratch = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	if (cc.check && !checker_ok(cc.check)) {
		usage_err("--check %s: not an executable command", cc.check);
		return 2;
	}

	fd = open(cc.log_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		usage_err("%s: %s", cc.log_path, strerror(errno));
		return 2;
	}
	cc.map_len = (size_t)st.st_size;
	cc.map = cc.map_len ? mmap(NULL, cc.map_len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
	close(fd);
	if (cc.map == MAP_FAILED) {
		usage_err("%s: %s", cc.log_path, strerror(errno));
		return 2;
	}
	ret = resolve_base(&cc, &lbs);
	if (ret)
		goto out;
	/* --materialize writes a file: the snapshot as an image to start from */
	if (cc.snap_mnt && cc.materialize) {
		ret = base_save(&cc);
		if (ret)
			goto out;
	}
	ret = CC_EXIT_ERROR;
	if (!cc.size && !cc.base_img) {
		/* zeros: as large as the log reaches, unless --size says */
		cc.size = UINT64_MAX;
	}
	if (cc.base_img && cc.base_tmp) {
		if (stat(cc.base_img, &st)) {
			usage_err("%s: %s", cc.base_img, strerror(errno));
			goto out;	/* our own image */
		}
		cc.size = (uint64_t)st.st_size;
	}
	ret = lw_parse(cc.map ? cc.map : (const unsigned char *)"", cc.map_len, cc.size, lbs,
		       &cc.lw, err, sizeof(err));
	if (ret) {
		usage_err("%s: %s", cc.log_path, ret == -ENOMEM ? strerror(ENOMEM) : err);
		ret = ret == -ENOMEM ? CC_EXIT_ERROR : CC_EXIT_USAGE;
		goto out;
	}
	ret = CC_EXIT_ERROR;
	cc.dev_size = cc.size;
	if (cc.dev_size == UINT64_MAX) {
		uint64_t end = 0;

		for (i = 0; i < cc.lw.nr; i++)
			if (!(cc.lw.v[i].e.flags & LW_MARK) && cc.lw.v[i].e.nr_sectors)
				end = end > (cc.lw.v[i].e.sector + cc.lw.v[i].e.nr_sectors) * cc.lw.sectorsize ?
				      end : (cc.lw.v[i].e.sector + cc.lw.v[i].e.nr_sectors) * cc.lw.sectorsize;
		cc.dev_size = (end + (1u << 20) - 1) & ~((uint64_t)(1u << 20) - 1);
		if (!cc.dev_size)
			cc.dev_size = 1u << 20;
	}
	if (!cc.pbs)
		cc.pbs = cc.lw.sectorsize > 4096 ? cc.lw.sectorsize : 4096;
	if (cc.pbs < cc.lw.sectorsize) {
		usage_err("--pbs %u is smaller than the log's sectorsize %u", cc.pbs, cc.lw.sectorsize);
		ret = CC_EXIT_USAGE;
		goto out;
	}
	if (lw_log_model(&cc.lw, cc.pbs, &cc.m)) {
		usage_err("%s", strerror(ENOMEM));
		goto out;
	}
	cc.mark_text = calloc(cc.m.nr + 1, sizeof(*cc.mark_text));
	if (!cc.mark_text)
		goto out;
	for (i = 0; i < cc.lw.nr; i++)
		if ((cc.lw.v[i].e.flags & LW_MARK) && cc.lw.v[i].last_ev)
			cc.mark_text[cc.lw.v[i].last_ev - 1] =
				strndup((const char *)cc.lw.v[i].data, (size_t)cc.lw.v[i].e.data_len);

	if (cc.materialize) {
		ret = materialize(&cc);
		goto out;
	}

	/* The run's folder first: every exit from here on empties it. */
	if (!cc.keep) {
		cc.keep = cc.run_dir;
	} else if (mkdir(cc.keep, 0700) == 0) {
		cc.keep_made = true;
	} else if (errno != EEXIST) {
		usage_err("--keep %s: %s", cc.keep, strerror(errno));
		ret = CC_EXIT_USAGE;
		goto out;
	}
	if (run_dir_make(&cc))
		goto out;

	/* Crash points and their states. */
	cc.pts = calloc(cc.m.nr + 1, sizeof(*cc.pts));
	if (!cc.pts)
		goto out;
	for (i = 0; i < cc.m.nr; i++) {
		enum blk_cm_kind k = cc.m.ev[i].kind;
		struct blk_cm_point pt;
		struct cc_point *cp;
		size_t before = l.n;

		if (k == BLK_CM_WRITE && !cc.each_write)
			continue;
		if (cc_signal)
			goto out;
		if (blk_cm_point_init(&pt, &cc.m, i + 1))
			goto out;
		cp = &cc.pts[cc.nr_pts++];
		cp->ev = i;
		cp->full = pt.nr_states;
		cp->first_fail = SIZE_MAX;
		cp->first_task = before;
		ret = point_states(&cc, &pt, cp, &l);
		if (ret) {
			/* more states than can be listed: --n, --k or --states must change */
			ret = ret == -E2BIG ? CC_EXIT_USAGE : CC_EXIT_ERROR;
			blk_cm_point_destroy(&pt);
			goto out;
		}
		ret = CC_EXIT_ERROR;
		cp->listed = l.n - before;
		nr_sampled += cp->sampled;
		blk_cm_point_destroy(&pt);
	}
	/* the list becomes the tasks */
	cc.nr_tasks = l.n;
	cc.tasks = l.v ? l.v : calloc(1, sizeof(*cc.tasks));
	cc.rolls = l.r;
	cc.nr_rolls = l.nr;
	l.v = NULL;
	l.r = NULL;
	if (!cc.tasks)
		goto out;
	for (p = 0; p < cc.nr_pts; p++)
		for (i = 0; i < cc.pts[p].listed; i++)
			cc.tasks[cc.pts[p].first_task + i].point = p;
	fprintf(stderr, "crashcheck: %zu crash points, %zu states", cc.nr_pts, cc.nr_tasks);
	if (cc.max_states)
		fprintf(stderr, "; %zu points sampled (--states %" PRIu64 " --seed %" PRIu64
			"), the rest exhaustive", nr_sampled, cc.max_states, cc.seed);
	fputc('\n', stderr);

	pthread_mutex_init(&cc.lock, NULL);
	jobs = calloc(cc.jobs, sizeof(*jobs));
	if (!jobs)
		goto out;
	for (i = 0; i < cc.jobs; i++) {
		jobs[i].cc = &cc;
		jobs[i].id = (unsigned int)i;
		jobs[i].loop_fd = jobs[i].fd = jobs[i].dfd = jobs[i].ctl_fd = -1;
	}
	/* A ram snapshot: a clone per job; another backend's: saved to an image. */
	cc.clone = cc.snap_mnt != NULL;
	for (i = 0; cc.clone && i < cc.jobs; i++) {
		struct cc_job *j = &jobs[i];
		char why[BF_CTL_MSG_MAX + 64];

		ret = clone_add(j, why, sizeof(why));
		if (ret == -ENODEV && i == 0) {
			clone_remove(j);
			cc.clone = false;
			ret = base_save(&cc);
			if (ret)
				goto out_jobs;
			ret = CC_EXIT_ERROR;
			break;
		}
		if (ret || (cc.attach && attach_loop(j))) {
			usage_err("scratch clone %s of %s@%s: %s", j->name, cc.snap_dev, cc.snap_name,
				  ret ? why : "cannot attach a loop device");
			ret = CC_EXIT_ERROR;
			goto out_jobs;
		}
	}
	for (i = 0; !cc.clone && i < cc.jobs; i++) {
		struct cc_job *j = &jobs[i];
		int e;

		snprintf(j->path, sizeof(j->path), "%s/job-%zu.img", cc.run_dir, i);
		snprintf(j->dpath, sizeof(j->dpath), "%s/job-%zu.durable", cc.run_dir, i);
		j->fd = open(j->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		j->dfd = open(j->dpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		e = j->fd < 0 || j->dfd < 0 ? -errno : copy_base(&cc, j->fd);
		if (!e)
			e = copy_base(&cc, j->dfd);
		if (!e && cc.attach)
			e = attach_loop(j);
		if (e) {
			usage_err("scratch image %s: %s", j->path, strerror(-e));
			goto out_jobs;
		}
	}
	if (cc_signal)
		goto out_jobs;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	{
		pthread_t *th = calloc(cc.jobs ? cc.jobs : 1, sizeof(*th));
		bool tty = isatty(2);
		double last = t0, now;
		unsigned int started = 0;
		int jerr = 0;

		if (!th)
			goto out_jobs;
		/* SIGINT and SIGTERM reach this thread only: its loop sees cc_signal */
		sigemptyset(&sigs);
		sigaddset(&sigs, SIGINT);
		sigaddset(&sigs, SIGTERM);
		pthread_sigmask(SIG_BLOCK, &sigs, NULL);
		for (i = 0; i < cc.jobs; i++)
			if (!pthread_create(&th[i], NULL, job_main, &jobs[i]))
				started++;
			else
				break;
		pthread_sigmask(SIG_UNBLOCK, &sigs, NULL);
		for (;;) {
			char how[64], at[96] = "";
			uint64_t d, f;
			bool fin;

			usleep(100000);
			clock_gettime(CLOCK_MONOTONIC, &ts);
			now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
			pthread_mutex_lock(&cc.lock);
			if (cc_signal && !cc.stop) {
				/* no more states; the running checkers' groups are killed */
				cc.stop = true;
				for (i = 0; i < cc.jobs; i++)
					if (jobs[i].checker > 0)
						kill(-jobs[i].checker, SIGKILL);
			}
			d = cc.done;
			f = cc.failed;
			fin = d >= cc.nr_tasks || cc.stop;
			/* the point of the last state taken, and how it is explored */
			if (cc.next) {
				const struct cc_point *cp = &cc.pts[cc.tasks[cc.next - 1].point];

				snprintf(at, sizeof(at), "; event %zu: %s", cp->ev,
					 explored(cp, how, sizeof(how)));
			}
			pthread_mutex_unlock(&cc.lock);
			if (fin || now - last >= (tty ? 0.5 : 10.0)) {
				fprintf(stderr, "%scrashcheck: %" PRIu64 "/%zu states, %.0f states/s, %"
					PRIu64 " failed%s%s%s", tty ? "\r" : "", d, cc.nr_tasks,
					now > t0 ? (double)d / (now - t0) : 0.0, f, at,
					tty ? "\033[K" : "", tty ? "" : "\n");
				last = now;
			}
			if (fin)
				break;
		}
		if (tty)
			fputc('\n', stderr);
		for (i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		free(th);
		for (i = 0; i < cc.jobs; i++) {
			if (jobs[i].err)
				jerr = jobs[i].err;
			cc.nr_built += jobs[i].nr_built;
			cc.build_ns += jobs[i].build_ns;
			cc.reset_ns += jobs[i].reset_ns;
			cc.nr_resets += jobs[i].nr_resets;
			cc.check_ns += jobs[i].check_ns;
			cc.nr_diffs += jobs[i].nr_diffs;
		}
		if (cc_signal)
			goto out_jobs;
		if (jerr) {
			usage_err("%s: %s", jerr == -ECHILD ? "cannot run the checker" :
				  "building a state failed", strerror(-jerr));
			goto out_jobs;
		}
		report(&cc, now - t0);
		ret = cc.failed ? CC_EXIT_FAILED : CC_EXIT_OK;
	}
out_jobs:
	for (i = 0; i < cc.jobs; i++) {
		if (jobs[i].ctl_fd >= 0) {
			clone_remove(&jobs[i]);
			continue;
		}
		if (jobs[i].fd >= 0)
			close(jobs[i].fd);
		if (jobs[i].dfd >= 0)
			close(jobs[i].dfd);
		if (jobs[i].dpath[0])
			unlink(jobs[i].dpath);
		detach_loop(&jobs[i]);
		if (jobs[i].path[0])
			unlink(jobs[i].path);
	}
	free(jobs);
out:
	if (cc.base_tmp && cc.base_img)
		unlink(cc.base_img);
	for (i = 0, p = 0; i < cc.nr_tasks; i++)
		p += cc.tasks[i].out != NULL;
	run_dir_finish(&cc, p);
	free(cc.base_img);
	free(cc.snap_mnt);
	free(l.v);
	free(l.r);
	free(cc.rolls);
	if (cc.mark_text)
		for (i = 0; i < cc.m.nr; i++)
			free((char *)cc.mark_text[i]);
	free(cc.mark_text);
	for (i = 0; i < cc.nr_tasks; i++)
		free(cc.tasks[i].out);
	free(cc.tasks);
	free(cc.pts);
	blk_cm_destroy(&cc.m);
	lw_log_free(&cc.lw);
	if (cc.map && cc.map != MAP_FAILED)
		munmap(cc.map, cc.map_len);
	if (cc_signal) {
		int sig = cc_signal;

		/* clean, now die of it, as the shell that sent it expects */
		fprintf(stderr, "crashcheck: stopped by signal %d\n", sig);
		signal(sig, SIG_DFL);
		raise(sig);
		ret = CC_EXIT_ERROR;
	}
	return ret;
}
