/* SPDX-License-Identifier: MIT */
/*
 * backends/backends_int.h - private to backends/: the ops of every backend
 * the registry knows, and helpers the backends share. Nothing outside
 * backends/ includes this; core/ sees only backend.h.
 */
#ifndef BLKFS_BACKENDS_INT_H
#define BLKFS_BACKENDS_INT_H

#include <pthread.h>

#include "backend.h"
#include "lib/clock.h"
#include "lib/list.h"
#include "lib/pool.h"

/* One line per backend; registry.c lists them in the same order. */
extern const struct blk_backend_ops ram_backend_ops;
extern const struct blk_backend_ops null_backend_ops;
extern const struct blk_backend_ops aio_backend_ops;
extern const struct blk_backend_ops nbd_backend_ops;
extern const struct blk_backend_ops rbd_backend_ops;
/*
 * Test hook: when set, the ram arena thread calls it with the device after
 * it has mapped and touched a reserve slab and before it takes alloc_lock
 * again to push it, so a unit test can run a discard in that window. NULL
 * outside tests.
 */
extern void (*ram_test_slab_mapped)(struct blk_backend *be);
/*
 * The aio backend's wait for an I/O on an idle, fast device (aio.c): the
 * longest a caller waits for its own I/O, and the average completion time
 * above which it does not wait. Tests change them before opening a device
 * (a wait of 0 makes every such I/O an orphan that the reaper must find);
 * the daemon keeps the defaults.
 */
extern uint64_t aio_wait_ns, aio_fast_ns;
/* Filters (is_filter): the same list, in the order blk_filter_names() gives. */
extern const struct blk_backend_ops log_filter_ops;
extern const struct blk_backend_ops delay_filter_ops;
extern const struct blk_backend_ops fault_filter_ops;
extern const struct blk_backend_ops flakey_filter_ops;
extern const struct blk_backend_ops throttle_filter_ops;
extern const struct blk_backend_ops powerloss_filter_ops;
extern const struct blk_backend_ops record_filter_ops;

/*
 * The knob tables (lib/knobs.h) of the layers that have one: every filter,
 * and the ram, nbd, aio and null backends (rbd still reads its keys by
 * hand). Each is defined by BK_DEFINE or BK_BACKEND_DEFINE in its file.
 */
struct bk_table;
extern const struct bk_table *const ram_knob_table;
extern const struct bk_table *const null_knob_table;
extern const struct bk_table *const nbd_knob_table;
extern const struct bk_table *const aio_knob_table;
extern const struct bk_table *const rbd_knob_table;
extern const struct bk_table *const log_knob_table;
extern const struct bk_table *const delay_knob_table;
extern const struct bk_table *const fault_knob_table;
extern const struct bk_table *const flakey_knob_table;
extern const struct bk_table *const throttle_knob_table;
extern const struct bk_table *const powerloss_knob_table;
extern const struct bk_table *const record_knob_table;

/**
 * blk_knob_table - the knob table of the backend or filter @name
 * (registry.c), for tests and tools that list every key with its type,
 * bounds, default and unit
 *
 * Returns: the table, or NULL for a name blkfs does not have or a layer
 * that reads its keys by hand (rbd).
 */
const struct bk_table *blk_knob_table(const char *name);

/**
 * be_geo_from_params - the geometry of a backend whose shape is all config
 * (ram, null)
 * @p: the device's parameters; p->geo as the config gave it
 * @backend: backend name, for the message
 * @geo: filled: p->geo with the defaults conf documents for fields left 0
 *	 (lbs 512, pbs = lbs, io_min = pbs, max_io = 1M rounded to pbs,
 *	 io_opt = max_io) and dma_align = 1
 *
 * Returns: 0, or -EINVAL with p->err set: no size, or a shape conf would
 * have refused (the backend checks again because tests and tools build
 * struct blk_params by hand).
 */
int be_geo_from_params(struct blk_params *p, const char *backend,
		       struct blk_geometry *geo);

/**
 * be_geo_given - did the config give geometry field @key, with value @val?
 * (for a backend whose geometry comes from its storage: aio, nbd)
 * @p: the device's parameters
 * @key: the field's config key ("logical_block_size")
 * @val: the field in p->geo
 *
 * conf fills defaults for what is absent only when `size` is given, so
 * without a size any non-zero field was given; with one, the key must be
 * in the section. (A non-zero size itself was always given: conf never
 * makes one up.)
 */
bool be_geo_given(const struct blk_params *p, const char *key, uint64_t val);

/*
 * The messages of blk_param_size/duration/uint/bool() for a value already
 * in hand (@s, the config's text for @key): the knob tables (lib/knobs.h)
 * read a key once and give the same words. 0, or -EINVAL with p->err.
 */
int be_param_size_value(struct blk_params *p, const char *key, const char *s, uint64_t *out);
int be_param_duration_value(struct blk_params *p, const char *key, const char *s,
			    uint64_t min_ns, uint64_t max_ns, uint64_t bare_unit_ns, uint64_t *out);
int be_param_uint_value(struct blk_params *p, const char *key, const char *s,
			unsigned int min, unsigned int max, unsigned int *out);
int be_param_bool_value(struct blk_params *p, const char *key, const char *s, bool *out);

/* backends/lib/util.c, and inline */

/**
 * be_stat_printf - format a ->stat text (see struct blk_backend_ops)
 * @buf, @len: what ->stat got
 *
 * Returns: the length written, at most @len - 1 (the text is cut short,
 * never unterminated), or 0 when @len is 0 or formatting failed.
 */
size_t be_stat_printf(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/**
 * be_attr_text - an attr's store input as a string
 * @buf, @len: what store got (not NUL-terminated; one trailing newline allowed)
 * @s, @cap: filled with the text without the newline, NUL-terminated
 *
 * Returns: 0, or -EINVAL when it is empty, holds a NUL or does not fit.
 */
int be_attr_text(const char *buf, size_t len, char *s, size_t cap);

/**
 * be_attr_out - an attr's show: @s and a newline into @buf
 *
 * Returns: the length, or -EOVERFLOW when it does not fit in @len.
 */
int be_attr_out(char *buf, size_t len, const char *s);

/* ---- what the fault-model filters share (util.c) ---- */

/* An errno name (EIO, eio) or number (5): the positive errno, or -EINVAL. */
int be_parse_errno(const char *s);
/* "EIO", or the number when the errno has no name; @buf holds the number. */
const char *be_errno_name(int e, char *buf, size_t len);
/* A decimal in [0, 1] ("0", "0.25", "1", "1e-3"); -EINVAL otherwise. */
int be_parse_probability(const char *s, double *out);

/*
 * Seeds. Every random choice of a filter comes from this splitmix64 stream
 * (any seed, 0 included, gives a good one; powerloss's cuts too), so a run
 * replays from its seed as long as the I/O comes in the same order.
 * `seed = auto` (or time, random) takes one from the clock; the filter
 * prints it to the daemon log and shows it in .sys.
 */
static inline uint64_t be_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double be_rand01(uint64_t *state)
{
	return (double)(be_rand(state) >> 11) / (double)(1ull << 53);
}

/* Uniform in [0, n) for n > 0 (the modulo bias is below n / 2^64). */
static inline uint64_t be_rand_below(uint64_t *state, uint64_t n)
{
	return be_rand(state) % n;
}

/*
 * "blkfs: FILTER: DEV: seed N (WHY; FILTER.seed = N replays it)" on stderr.
 * A filter says it at open (which `blkfs mount` prints: the daemon's log
 * does not exist yet), again at its first I/O (by then stderr is the
 * daemon's log) and at every store of `seed`.
 */
void be_say_seed(const char *filter, const char *dev, uint64_t seed, const char *why);

/* True once: for the first I/O's seed line. */
static inline bool be_first_io(bool *said)
{
	return !__atomic_load_n(said, __ATOMIC_RELAXED) &&
	       !__atomic_exchange_n(said, true, __ATOMIC_RELAXED);
}

/* A seed from the clock and the process, for `seed = auto`. */
uint64_t be_seed_from_clock(void);
/*
 * The one seed grammar of every filter: "auto", "time" or "random" (the
 * same: *is_auto = true, the filter takes one from be_seed_from_clock()),
 * or a decimal below 2^64; -EINVAL otherwise. Case does not matter.
 */
int be_parse_seed(const char *s, bool *is_auto, uint64_t *seed);

/*
 * The .sys knob every seeded filter has, on fields under the filter's
 * @lock: `seed` (a number, or auto: from the clock; storing one restarts
 * the stream @rng from it and says so). Return what an attr's show/store
 * returns. (A filter's errno and probability knobs are rows of its knob
 * table: lib/knobs.h.)
 */
int be_seed_show(pthread_mutex_t *lock, const uint64_t *seed, char *buf, size_t len);
int be_seed_store(pthread_mutex_t *lock, uint64_t *seed, uint64_t *rng, const char *filter,
		  const char *dev, const char *buf, size_t len);
/*
 * A filter's `seed` key: the seed it starts from (from the clock when the
 * key is absent or `auto`). -EINVAL with p->err when malformed.
 */
int be_param_seed(struct blk_params *p, uint64_t *seed);

/**
 * be_entries - the next entry of a list: the text up to @sep (a config
 * value is "a, b, c"; an attr takes one entry per line), blanks around it
 * cut, then split at blanks into at most @max tokens of < 32 bytes each.
 * @s, @n: what is left of the list; both advance past the entry
 * @tok: filled with NUL-terminated tokens
 *
 * Returns: the number of tokens (0 for a blank entry), -ENOENT at the end
 * of the list, or -EINVAL for more than @max tokens or a token too long.
 */
int be_entries(const char **s, size_t *n, char sep, char tok[][32], int max);

/* The per-I/O object pool (struct be_pool): lib/pool.h. */

/* The `pool` key every filter with per-I/O state takes: 1..65536, default 256. */
#define BE_POOL_DEF	256u
#define BE_POOL_MAX	65536u
int be_param_pool(struct blk_params *p, unsigned int *nr);

/*
 * A timer queue: a min-heap of due times and one thread that calls each
 * timer's fire() once it is due, with no lock held (fire may submit,
 * complete or add again). The heap is sized at init and grows past it only
 * when more are queued (counted in nr_grows). Ties fire in the order added.
 *
 * Lock: q->lock covers the heap and stop; fire() runs without it.
 */
struct be_timer {
	uint64_t due_ns;		/* CLOCK_MONOTONIC */
	uint64_t seq;
	void (*fire)(struct be_timer *t);
};

struct be_timerq {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;		/* to the thread: new earliest, or stop */
	struct be_timer **heap;		/* lock */
	size_t nr, cap;			/* lock */
	uint64_t seq;			/* lock */
	bool stop;			/* lock: fire everything now, then exit */
	uint64_t nr_grows;		/* lock */
};

/* Sized for @cap timers; starts the thread. 0 or -errno. */
int be_timerq_init(struct be_timerq *q, size_t cap);
/*
 * Fire @t at @due_ns (at once, from the thread, when it is past). Once the
 * queue is stopping, @t fires now in the caller's thread. 0, or -ENOMEM
 * when the heap had to grow and could not (@t is not queued).
 */
int be_timerq_add(struct be_timerq *q, struct be_timer *t, uint64_t due_ns);
size_t be_timerq_len(struct be_timerq *q);
/* How often the heap grew past its size at init (an allocation on the I/O path). */
uint64_t be_timerq_grows(struct be_timerq *q);
/* Fire everything queued now (nobody waits for the time any more) and join the thread. */
void be_timerq_stop(struct be_timerq *q);
/* After stop. */
void be_timerq_destroy(struct be_timerq *q);

/* A filter's ->geometry: the layer below's, unchanged. */
void be_filter_geometry(struct blk_backend *be, struct blk_geometry *geo);
/* A filter's ->resize that keeps nothing of the size: the layer below's. */
int be_filter_resize(struct blk_backend *be, uint64_t *size);

/*
 * A filter's ->snap: every call goes to the layer below, unchanged (one line
 * in a filter's ops: `.snap = &be_filter_snap_ops`). A filter with a table
 * of its own takes the calls it does not change from here.
 */
extern const struct blk_snap_ops be_filter_snap_ops;
int be_filter_snap_create(struct blk_backend *be, const char *name);
int be_filter_snap_destroy(struct blk_backend *be, const char *name);
int be_filter_snap_reset(struct blk_backend *be, const char *name);
int be_filter_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr);
int be_filter_snap_save(struct blk_backend *be, const char *name, const char *path);

/**
 * be_child_io - the blk_io a filter passes down in place of @parent
 * @parent: the I/O the filter took (the cache's)
 * @end_io: the filter's completion, which ends @parent in its turn
 * @private: the filter's, for @end_io
 *
 * The same op, flags and range over the parent's iovec: that memory stays
 * the cache's until the parent's end_io, so it outlives the child. A filter
 * that submits the child from another thread clears BLK_IO_WAITED.
 */
static inline struct blk_io be_child_io(const struct blk_io *parent,
					void (*end_io)(struct blk_io *, int), void *private)
{
	return (struct blk_io){
		.op = parent->op,
		.flags = parent->flags,
		.pos = parent->pos,
		.len = parent->len,
		.iov = parent->iov,
		.iovcnt = parent->iovcnt,
		.end_io = end_io,
		.private = private,
		.done = 0,
	};
}

#endif
