/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/crashexplore.h - the crash explorer's engine: the crash
 * points of a recorded dm-log-writes log, the states to check at each
 * (crashmodel.h's, listed or sampled), their ids, and the jobs that build
 * each state (in scratch image files, or in ram clones of a blkfs mount's
 * snapshot) and run a checker on it. `blkfs crashcheck` (fuse/crashcheck.c)
 * is its command line: it fills the options, calls these in order and
 * prints what they found.
 *
 * It lives beside crashmodel.c and logwrites.c, the two things it is built
 * on, and like them includes nothing of core/ or fuse/: a clone is made
 * through the mount's control file, whose line format the caller hands in
 * (cc->ctl_format), so the engine links, and is unit-tested, without the
 * daemon or a mount (a base of zeros or an image builds in scratch files).
 *
 * Use: cc_init(); set the options; cc_load(); then either
 * cc_materialize(), or cc_make_dirs(), cc_plan() and cc_run(); then
 * cc_destroy() (after any of them, failed or not). Each returns an exit
 * status of `blkfs crashcheck` (CC_EXIT_*), having said why on stderr.
 *
 * Threads: the caller's thread runs all of these; cc_run() starts
 * cc->jobs workers and waits for them. cc->lock covers the queue index
 * (next), done, failed and each job's running checker; a leaf lock.
 * SIGINT and SIGTERM, once cc_make_dirs() made the run's folder, only ask
 * the run to stop (cc_stop_signal()); the caller dies of the signal after
 * cc_destroy() cleaned up.
 */
#ifndef BLKFS_CRASHEXPLORE_H
#define BLKFS_CRASHEXPLORE_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crashmodel.h"
#include "logwrites.h"

#define CC_DEF_N	10	/* 2^10 states when each block has one write: a few seconds of checks */
#define CC_DEF_K	1	/* one block rolled back at a time: linear in the blocks touched */
#define CC_MAX_K	8	/* the largest --k */
#define CC_MAX_LIST	(1u << 22)	/* the most states one crash point may list */
/* The control file's limits (fuse/control.h: BF_CTL_MAX_LINE, BF_CTL_MSG_MAX; checked there). */
#define CC_CTL_MAX_LINE	4096
#define CC_CTL_MSG_MAX	4096

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

/* One state to check: a crash point's in-order state with some blocks rolled back. */
struct cc_task {
	size_t point;		/* index into cc->pts */
	size_t roll;		/* its rolled-back blocks: cc->rolls[roll, roll + nr_roll) */
	uint32_t nr_roll;	/* 0: the in-order state */
	int verdict;		/* enum cc_verdict, after the run */
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

struct cc_job;

struct cc {
	/* options (the command line's), set between cc_init() and cc_load() */
	const char *log_path, *base, *check, *state_id, *materialize, *scratch, *keep;
	unsigned int n, k, jobs;
	uint64_t max_states, seed, size;
	uint32_t pbs;
	bool each_write, attach;
	double timeout_s;
	/* the control file's line for argv (bf_ctl_format): only a snapshot base needs it */
	int (*ctl_format)(int argc, char *const *argv, char *buf, size_t len);

	/*
	 * The run's folder, scratch/blkfs-crash-PID: scratch images, the
	 * checkers' outputs, and the kept ones unless --keep says elsewhere.
	 * "" until made. keep_made: we made --keep's folder (removed if empty).
	 */
	char run_dir[PATH_MAX - 64];	/* room for the names in it */
	bool keep_made;

	/* input (cc_load) */
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

	/* the plan (cc_plan): points, their states in point order */
	struct cc_point *pts;
	size_t nr_pts;
	struct cc_task *tasks;
	size_t nr_tasks;
	struct cc_roll *rolls;	/* the tasks' rolled-back blocks */
	size_t nr_rolls;

	/* the run (cc_run): its jobs, its time, the jobs' times summed (see struct cc_job) */
	struct cc_job *jobv;
	double secs;
	uint64_t nr_built, build_ns, reset_ns, nr_resets, check_ns, nr_diffs;

	pthread_mutex_t lock;
	size_t next;		/* lock: next task to take */
	uint64_t done, failed;	/* lock */
	bool stop;
};

/* What cc_run() tells its progress callback, about every 100 ms and once at the end. */
struct cc_progress {
	uint64_t done, failed;		/* states checked, and failed, so far */
	const struct cc_point *at;	/* the point of the last state taken, or NULL */
	double secs;			/* since the jobs started */
	bool fin;			/* the last call: every state done, or the run stopped */
};

/* "blkfs crashcheck: " and the message, on stderr. */
void cc_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** cc_init - @cc with no options but the defaults (--n, --k, --jobs 1) */
void cc_init(struct cc *cc);

/**
 * cc_load - read the log at cc->log_path and find the base (cc->base:
 * MNT/DEV@SNAP, an image file, a block device, or "zeros"), and model the
 * log at cc->pbs (default: the log's sector size, at least 4096)
 *
 * Returns: 0, CC_EXIT_USAGE (the log or the base is not what it should be)
 * or CC_EXIT_ERROR.
 */
int cc_load(struct cc *cc);

/**
 * cc_materialize - write the state cc->state_id names to cc->materialize
 * (a file, truncated, or a block device), after cc_load()
 *
 * Returns: 0, CC_EXIT_USAGE (no such state, or a bad id) or CC_EXIT_ERROR.
 */
int cc_materialize(struct cc *cc);

/**
 * cc_make_dirs - the --keep folder (made if missing) and the run's folder
 * in cc->scratch, said on stderr; from here on SIGINT and SIGTERM ask the
 * run to stop, and cc_destroy() empties the folder.
 *
 * Returns: 0, CC_EXIT_USAGE (--keep cannot be made) or CC_EXIT_ERROR.
 */
int cc_make_dirs(struct cc *cc);

/**
 * cc_plan - the crash points and, at each, its states: the in-order state
 * first, then the rest of the point's default set (every combination of
 * prefixes when at most cc->n blocks are touched, else up to cc->k blocks
 * rolled back), or a sample of it (cc->max_states, cc->seed): into
 * cc->pts and cc->tasks. Touches no file.
 *
 * Returns: 0, CC_EXIT_USAGE (a point has more states than can be listed:
 * --n, --k or --states must change) or CC_EXIT_ERROR.
 */
int cc_plan(struct cc *cc);

/**
 * cc_run - check every planned state: cc->jobs workers, each with its
 * scratch image or ram clone, take them in order and run cc->check on
 * each; each task's verdict, cc->done, cc->failed and the times are set.
 * @progress: called on this thread about every 100 ms, and once with fin
 * @arg: passed to it
 *
 * Returns: 0 (every state checked, cc->failed of them failed) or
 * CC_EXIT_ERROR (set-up, a state that could not be built, a checker that
 * could not be run, or a signal).
 */
int cc_run(struct cc *cc, void (*progress)(const struct cc *, const struct cc_progress *, void *),
	   void *arg);

/** cc_destroy - remove the jobs' clones, images and loop devices, empty the run's folder, free */
void cc_destroy(struct cc *cc);

/* The signal (SIGINT, SIGTERM) that asked the run to stop, or 0. */
int cc_stop_signal(void);

/**
 * cc_state_id - a state's id, allocated (NULL: no memory): "EVENT", the
 * in-order state of the crash after event EVENT, or "EVENT:BLK=KEEP,..."
 * with each listed physical block rolled back to the first KEEP of its
 * unflushed writes ("BLK1-BLK2=KEEP" for a run of consecutive touched
 * blocks that keep the same)
 * @ev: the event the crash follows
 * @r, @n: the blocks rolled back, in increasing order
 */
char *cc_state_id(size_t ev, const struct cc_roll *r, uint32_t n);

/* The id of planned state @t (cc_state_id), allocated. */
char *cc_task_id(const struct cc *cc, const struct cc_task *t);

/**
 * cc_parse_rollbacks - the state an id's rolled-back part names
 * @pt: the id's crash point
 * @spec: what follows "EVENT:", or "" for the in-order state
 * @choice: receives the prefix each of @pt's blocks keeps
 * @why, @wlen: the reason, on failure
 *
 * Returns: 0, or -EINVAL.
 */
int cc_parse_rollbacks(const struct blk_cm_point *pt, const char *spec, uint32_t *choice,
		       char *why, size_t wlen);

#endif
