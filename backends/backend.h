/* SPDX-License-Identifier: MIT */
/*
 * backends/backend.h - the one contract between blkfs's page cache and storage.
 *
 * A backend (ram, aio, nbd, null, rbd: backends/) or a filter (log, delay,
 * fault, flakey, throttle, powerloss, record: backends/filters/) implements
 * struct blk_backend_ops. core/ talks to storage only through this header,
 * and this header includes nothing from core/.
 *
 * Rules every submitter keeps (the cache, and a filter for what it passes
 * on or issues itself), checked at blk_submit() in the test builds:
 *  - READ/WRITE: pos and len are multiples of geo.lbs, 0 < len <= geo.max_io,
 *    pos + len <= geo.size; every iovec base and length is a multiple of
 *    geo.dma_align; the iovec lengths add up to len.
 *  - DISCARD/WRITE_ZEROES: pos and len are multiples of geo.lbs, inside the
 *    device, any length (a backend splits them itself if it must); no iovec.
 *  - FLUSH: pos = len = 0; completes once every write that completed before
 *    the flush was submitted is on stable storage.
 *  - The cache owns each blk_io (and the memory its iovec points at) from
 *    submit until end_io; end_io is called exactly once, with 0 or -errno,
 *    from any thread, possibly before submit() returns. A submit() that
 *    returns -errno did not take the I/O and will not call end_io.
 *  - A partial completion (a READ or WRITE that failed part way, as a disk
 *    completes a request up to a bad sector): end_io gets -errno and
 *    blk_io.done says how many bytes from pos completed before the failure,
 *    exactly as a smaller I/O would have (a READ's data there is valid, a
 *    WRITE's is on the device, volatile until a flush), a multiple of lbs
 *    below len. The submitter zeroes done; a layer that cannot tell leaves
 *    it, and a filter ending its parent from a child copies the child's.
 *  - Neither side holds a lock across submit() or inside end_io that the
 *    other side could need. (A READ with BLK_IO_MAPPED is ended with the
 *    backend's lock held shared: its end_io may only reply or copy; see
 *    the flag.)
 *  - When submit() may sleep: it takes the layer's own locks for short
 *    stretches and may allocate, but it does not wait for I/O: its caller
 *    may be a thread that completions need (a FUSE ring's queue thread, a
 *    backend's reaper inside end_io submitting the next piece), and end_io
 *    may run inside it. A layer that must hold an I/O back (a delay, a
 *    rate) queues it and submits it later from a thread of its own. The
 *    one wait allowed: with BLK_IO_WAITED the backend may do the transfer
 *    in the calling thread (aio's preadv/pwritev), since the submitter
 *    sleeps until end_io anyway. One filter still waits in submit(),
 *    bounded by the layer below: record, while its gate is shut for a cut.
 *    (powerloss reads what a write overwrites asynchronously and starts an
 *    overlapping write from the earlier one's end_io: core/THREADS.md R7.)
 */
#ifndef BLKFS_BACKEND_H
#define BLKFS_BACKEND_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* ERR_PTR / PTR_ERR / IS_ERR, as in the kernel and liburing. */
#define BLK_MAX_ERRNO 4095
static inline void *ERR_PTR(long err) { return (void *)err; }
static inline long PTR_ERR(const void *p) { return (long)p; }
static inline bool IS_ERR(const void *p)
{
	return (unsigned long)p >= (unsigned long)-BLK_MAX_ERRNO;
}
static inline bool IS_ERR_OR_NULL(const void *p) { return !p || IS_ERR(p); }

/*
 * Geometry is the backend's word (like the kernel's queue_limits): the cache
 * shapes every I/O to it. All sizes in bytes.
 */
struct blk_geometry {
	uint64_t size;		/* multiple of lbs */
	uint32_t lbs;		/* logical block size: 512 .. 64K, power of two */
	uint32_t pbs;		/* physical block size: >= lbs, power of two */
	uint32_t io_min;	/* preferred minimum I/O size */
	uint32_t io_opt;	/* optimal I/O size */
	uint32_t max_io;	/* largest single READ/WRITE; multiple of pbs */
	uint32_t dma_align;	/* iovec base/len alignment a data op needs (1: any) */
};

enum blk_op {
	BLK_READ,
	BLK_WRITE,
	BLK_FLUSH,
	BLK_DISCARD,		/* contents become zero; memory/space may be freed */
	BLK_WRITE_ZEROES,	/* contents become zero */
};

/*
 * blk_io.flags. BLK_IO_WAITED: the submitter sleeps until end_io anyway, so
 * a backend may do the transfer in the calling thread and end it before
 * submit() returns (aio does: no hand-off to another thread and back). A
 * filter passes it on (be_child_io() copies it) and clears it when it
 * submits from a thread of its own (delay, for a held I/O).
 */
#define BLK_IO_WAITED	(1u << 0)

/*
 * BLK_IO_MAPPED (READ only): the submitter takes the data as a mapping.
 * A backend that supports it may, instead of copying into io->iov, set
 * io->map and io->mapcnt to a vector over its own memory that holds the
 * I/O's bytes (io->len in all) and call end_io with 0. The rules:
 *  - The mapping is valid only until end_io returns: the submitter sends
 *    it (a FUSE reply) or copies it inside end_io, and keeps no pointer.
 *  - end_io may then run with the backend's lock held shared (ram: the
 *    arena's read lock, and its stripe of each mapped page, which keeps
 *    in-place writes of those pages out), so it must not submit I/O, take
 *    a lock the I/O path takes, or block; a write(2) of the reply to
 *    /dev/fuse or a memcpy is what it is for.
 *  - io->iov still names the submitter's buffer, which the backend leaves
 *    alone; with an error (res < 0) map is NULL and the buffer holds what
 *    io->done says, as without the flag.
 *  - A backend that does not support it ignores the flag, copies into
 *    io->iov as before and leaves map NULL. The submitter sets map NULL
 *    and mapcnt 0 before submit().
 *  - A filter does not pass it down (be_child_io() clears it; a layer
 *    that passes the I/O itself on is under no cache that sets it: the
 *    cache sets it only when the top of the stack is a backend).
 * Everything above (R1-R10 in core/THREADS.md, end_io exactly once, the
 * iovec rules) holds as without it.
 */
#define BLK_IO_MAPPED	(1u << 1)

#ifdef BLKFS_CONTRACT_CHECK
/*
 * What blk_submit() keeps in each I/O to check its completion (see
 * blk_submit()): the submitter's end_io, the layer the I/O was first passed
 * to, and whether it is in flight. In the I/O itself, so the check
 * allocates nothing; absent without the switch, so it costs nothing there.
 */
struct blk_io;
struct blk_backend;
struct blk_io_check {
	void (*end_io)(struct blk_io *io, int res);	/* the submitter's */
	struct blk_backend *be;		/* the outermost layer it was passed to */
	const struct blk_io *self;	/* this I/O while in flight (a copy is not) */
	uint32_t lbs;			/* that layer's, for done */
	uint32_t state;			/* BLK_CHECK_* */
};
#endif

struct blk_io {
	enum blk_op op;
	unsigned int flags;		/* BLK_IO_* */
	uint64_t pos;			/* bytes */
	uint64_t len;			/* bytes */
	const struct iovec *iov;	/* READ/WRITE: slices of cache memory */
	int iovcnt;
	void (*end_io)(struct blk_io *io, int res);
	void *private;			/* the submitter's */
	uint64_t done;			/* with res < 0: bytes from pos that completed */
	/* BLK_IO_MAPPED: the backend's answer, valid until end_io returns */
	const struct iovec *map;
	unsigned int mapcnt;
#ifdef BLKFS_CONTRACT_CHECK
	struct blk_io_check check;	/* blk_submit()'s own: no one else touches it */
#endif
};

/* One `key = value` line of a [device NAME] section that core/ did not take. */
struct blk_param {
	const char *key;
	const char *value;
	int line;
	bool used;		/* set by blk_param_get() */
};

/*
 * What the layers above a backend offer it (the daemon fills it in): a
 * power-loss filter drops everything volatile above the device, as a real
 * power cut would (blkfs's cached data for the device without writeback,
 * and the kernel's page cache of the device file).
 */
struct blk_host {
	void *ctx;
	void (*drop_volatile)(void *ctx);
	/*
	 * The storage's size changed outside blkfs (rbd: an `rbd resize` by
	 * another client). The daemon takes the new size in a thread of its
	 * own, as `blkfs resize DEV auto` does (blk_resize() with 0). Callable
	 * from any thread but one that must finish for I/O to complete (it
	 * returns at once; the resize waits for I/O in flight); NULL: nobody
	 * listens.
	 */
	void (*size_changed)(void *ctx);
};

/*
 * What open() gets: the device's config section, and where to say what is
 * wrong. A filter's keys are written `NAME.key` in the config (`delay.write`);
 * blk_param_*() add the prefix, so the filter asks for "write".
 */
struct blk_params {
	const char *prefix;	/* "delay." for a filter, NULL for a backend */
	const char *file;	/* config file name, for messages */
	int line;		/* line of the [device NAME] header */
	const char *dev;	/* device name */
	struct blk_geometry geo; /* from the config; a 0 field was not given */
	struct blk_param *v;
	int n;
	char *err;		/* open() writes "FILE:LINE: KEY: message" here */
	size_t errlen;
	/*
	 * Set by the daemon before the stack is used; a filter keeps the
	 * pointer (it stays valid until close) and calls it only after open.
	 */
	const struct blk_host *host;
	/*
	 * The mount is read-only (mount option `ro`): open the storage for
	 * reading (a read-only image or export is fine); no WRITE, DISCARD or
	 * WRITE_ZEROES will be submitted.
	 */
	bool read_only;
};

struct blk_backend;

/*
 * A live knob, shown as .sys/DEV/NAME/ATTR in the mount (NAME = ops->name):
 * `cat` calls show, `echo VALUE >` calls store.
 */
struct blk_attr {
	const char *name;
	/* Write the value and a newline into @buf; returns the length or -errno. */
	int (*show)(struct blk_backend *be, char *buf, size_t len);
	/*
	 * Parse and apply @buf (not NUL-terminated; a trailing newline is
	 * allowed). A bad value returns -EINVAL and changes nothing.
	 * NULL: read-only.
	 */
	int (*store)(struct blk_backend *be, const char *buf, size_t len);
};

/*
 * Snapshots: instant copies of a device's contents that share its memory
 * until one side changes (the ram backend has them). A snapshot is named:
 * 1 to BLK_SNAP_NAME_MAX bytes of letters, digits, '.', '_', '-', '+', '@'
 * or ':', not starting with '.' or '-' (blk_snap_name_valid()).
 */
#define BLK_SNAP_NAME_MAX	64
/* The most snapshots one device holds (a list of this many always fits). */
#define BLK_SNAP_MAX		1024

/* What blk_snap_list() tells of one snapshot. */
struct blk_snap_info {
	char name[BLK_SNAP_NAME_MAX + 1];
	uint64_t created;	/* when it was taken: CLOCK_REALTIME, seconds */
	uint64_t data_bytes;	/* the device bytes it holds data for (never written: none) */
	uint64_t own_bytes;	/* memory no one else references: what deleting it frees */
};

/**
 * struct blk_snap_ops - snapshot operations of a backend (optional)
 *
 * A backend that keeps snapshots points blk_backend_ops.snap at its table;
 * a filter points it at be_filter_snap_ops (backends/kit/filter.h), which passes
 * each call to the layer below, or at a table of its own when a call
 * concerns it too (powerloss drops its journal on @reset). Call them
 * through the blk_snap_*() wrappers below, on the top of a device's stack:
 * they return -EOPNOTSUPP when no layer keeps snapshots.
 *
 * The caller (the daemon) serializes nothing: the backend serializes these
 * calls among themselves, and each is safe against I/O in flight except
 * @reset (see blk_snap_reset()). None of them is called from end_io or with
 * a lock the I/O path needs. What the cache above holds is the caller's
 * business: it writes back dirty data before @create and @save, and drops
 * its cached view of the device after @reset.
 */
struct blk_snap_ops {
	int (*create)(struct blk_backend *be, const char *name);
	int (*destroy)(struct blk_backend *be, const char *name);
	int (*reset)(struct blk_backend *be, const char *name);
	int (*list)(struct blk_backend *be, struct blk_snap_info *v, int nr);
	int (*save)(struct blk_backend *be, const char *name, const char *path);
};

struct blk_backend_ops {
	const char *name;
	bool is_filter;		/* passes I/O on to ->next */
	/*
	 * The backend may read a WRITE's iovec after submit() returns (rbd:
	 * librbd without its own copy), so the memory must not change until
	 * end_io: the cache then keeps a folio under writeback stable, as the
	 * kernel does for a queue with stable_writes (core/pcache.c invariant
	 * 7). false (ram, aio, nbd, null, every filter): a write to a folio
	 * under writeback copies in at once; the I/O in flight may carry a
	 * mix of both versions, and the block, dirty again, is written again.
	 * A filter is stable when any layer below it asks.
	 */
	bool stable_writes;
	/* NULL-terminated list of the config keys open() takes (config checks it) */
	const char *const *keys;
	const char *help;	/* one line for `blkfs --help` */
	/*
	 * Parse own keys with blk_param_*(), open the storage, and return the
	 * backend (embedding struct blk_backend first) or ERR_PTR(-errno) with
	 * p->err filled. @next is the layer below for a filter, else NULL.
	 */
	struct blk_backend *(*open)(struct blk_params *p, struct blk_backend *next);
	void (*close)(struct blk_backend *be);
	void (*geometry)(struct blk_backend *be, struct blk_geometry *geo);
	int (*submit)(struct blk_backend *be, struct blk_io *io);
	/* Optional: append "name value\n" lines of backend counters; returns length. */
	size_t (*stat)(struct blk_backend *be, char *buf, size_t len);
	/* Optional: live knobs, ended by an entry whose name is NULL. */
	const struct blk_attr *attrs;
	/* Optional: snapshots (struct blk_snap_ops); NULL: none. */
	const struct blk_snap_ops *snap;
	/*
	 * Optional: the device's size changes while it is open; NULL: the
	 * size is fixed. Call it through blk_resize() on the top of the stack.
	 */
	int (*resize)(struct blk_backend *be, uint64_t *size);
	/*
	 * Optional: the geometry blk_submit()'s check holds I/O to where the
	 * backend takes more than ->geometry says (rbd: for a moment after a
	 * shrink from outside, writeback may still reach past the new end,
	 * and fails in the backend); NULL: ->geometry.
	 */
	void (*check_geometry)(struct blk_backend *be, struct blk_geometry *geo);
};

struct blk_backend {
	const struct blk_backend_ops *ops;
	struct blk_backend *next;	/* filters only */
};

/**
 * blk_submit - pass @io to the layer @be: the one door every I/O goes through
 * @be: the layer (a backend, a filter, the top of a stack)
 * @io: the I/O, the caller's until its end_io
 *
 * The cache (core/submit.c, core/writeback.c) and every filter, for the
 * I/O it passes on and for the I/O it issues itself, call this, never
 * ops->submit directly. Built with -DBLKFS_CONTRACT_CHECK (the test,
 * sanitizer and fuzz builds; GNUmakefile's CHECKS=1), it checks the rules
 * at the top of this file on every hop, as nbdkit's server/backend.c does
 * for every call into a plugin or a filter: blk_io_valid() against @be's
 * geometry; end_io called exactly once, with 0 or -errno and done <= len
 * (with -errno, a multiple of lbs); no end_io from a submit() that returned
 * -errno. A violation aborts, naming the layer, the op, pos and len.
 *
 * Returns: what ops->submit returns (0, or -errno: the I/O was not taken).
 */
#ifdef BLKFS_CONTRACT_CHECK
int blk_submit_checked(struct blk_backend *be, struct blk_io *io);

static inline int blk_submit(struct blk_backend *be, struct blk_io *io)
{
	return blk_submit_checked(be, io);
}
#else
static inline int blk_submit(struct blk_backend *be, struct blk_io *io)
{
	return be->ops->submit(be, io);
}
#endif

/**
 * blk_snap_create - take a snapshot of the device's current contents
 * @be: the top of the device's stack
 * @name: the new snapshot's name (see BLK_SNAP_NAME_MAX)
 *
 * Instant: no data is copied; the device and the snapshot share memory
 * until the device writes (the first write to a shared page copies it).
 * Safe with I/O in flight: a write in flight is in the snapshot or not,
 * whole. To capture what the device's users have written, the caller
 * first writes back the device's dirty cache and holds new writes until
 * this returns.
 *
 * Returns: 0; -EINVAL for a bad name; -EEXIST if the device has a snapshot
 * of that name; -EMLINK when it holds BLK_SNAP_MAX already; -ENOMEM;
 * -EOPNOTSUPP when no layer keeps snapshots.
 *
 * Locking: takes the backend's locks; waits for I/O inside the backend to
 * leave it (microseconds), never for I/O held above it.
 */
static inline int blk_snap_create(struct blk_backend *be, const char *name)
{
	return be->ops->snap ? be->ops->snap->create(be, name) : -EOPNOTSUPP;
}

/**
 * blk_snap_destroy - delete a snapshot and free the memory only it held
 * @be: the top of the device's stack
 * @name: the snapshot
 *
 * The device is unchanged, also if it was reset to this snapshot (it keeps
 * its own reference to what they share). Safe with I/O in flight; I/O on
 * the device waits while the memory is freed (the ram backend: about 10 ms
 * of CPU per GiB held only by the snapshot, measured on a 2-CPU VM).
 *
 * Returns: 0; -ENOENT if there is no such snapshot; -EINVAL for a bad name;
 * -EOPNOTSUPP.
 *
 * Locking: as blk_snap_create().
 */
static inline int blk_snap_destroy(struct blk_backend *be, const char *name)
{
	return be->ops->snap ? be->ops->snap->destroy(be, name) : -EOPNOTSUPP;
}

/**
 * blk_snap_reset - return the device to a snapshot, instantly
 * @be: the top of the device's stack
 * @name: the snapshot, which stays (reset to it again as often as needed)
 *
 * The device drops its contents and shares the snapshot's again: the cost
 * is freeing what was written since (the ram backend: 3-8 ms of CPU per GiB
 * on a 2-CPU VM; memory goes back to the system afterwards, off this
 * path), never a copy. A filter that keeps state about the device's contents drops it
 * (powerloss: its undo journal).
 *
 * The caller must quiesce the device first: no I/O in flight in any layer
 * and none submitted until this returns (the daemon holds new requests
 * and waits for those in flight); afterwards it drops every cached view
 * of the device (blkfs's cache, the kernel's page cache of the file),
 * which describes contents that are gone. A backend asserts that no I/O
 * is in flight: a reset racing a write is a bug of the caller.
 *
 * Returns: 0; -ENOENT; -EINVAL for a bad name; -EBUSY if a layer is in a
 * state that forbids it (powerloss in the middle of a power cut); -ENOMEM
 * (nothing changed); -EOPNOTSUPP.
 *
 * Locking: as blk_snap_create().
 */
static inline int blk_snap_reset(struct blk_backend *be, const char *name)
{
	return be->ops->snap ? be->ops->snap->reset(be, name) : -EOPNOTSUPP;
}

/**
 * blk_snap_list - the device's snapshots, oldest first
 * @be: the top of the device's stack
 * @v: filled with up to @nr entries (may be NULL when @nr is 0)
 * @nr: room in @v; BLK_SNAP_MAX entries always hold every snapshot
 *
 * own_bytes (data and index memory that only the snapshot references) is
 * counted now: it grows as the device overwrites what they shared. The
 * cost is a walk of each snapshot's index (about 5 ms per GiB of data).
 * Safe with I/O in flight, whose effect on the counts may or may not show.
 *
 * Returns: the number of snapshots (also when more than @nr), or
 * -EOPNOTSUPP (so blk_snap_list(be, NULL, 0) says whether the stack keeps
 * snapshots at all).
 */
static inline int blk_snap_list(struct blk_backend *be, struct blk_snap_info *v, int nr)
{
	return be->ops->snap ? be->ops->snap->list(be, v, nr) : -EOPNOTSUPP;
}

/**
 * blk_snap_save - write a snapshot, or the device, to a sparse image file
 * @be: the top of the device's stack
 * @name: the snapshot; NULL for the device's current contents
 * @path: the image file; replaced whole, or left as it was on failure
 *
 * The image is a raw image of the device's size (what `dd` of the device
 * file would give) with holes wherever the data reads as zeros, so it is
 * as big on disk as the data. It is written to a temporary file next to
 * @path (mode 0600), synced, and renamed over @path, so a crash or an
 * error never leaves half an image under the name. The device's contents
 * are taken at one instant (an internal snapshot for the time of the
 * save), so I/O may go on meanwhile; for the device, the caller writes
 * back its dirty cache first. `image = FILE` in a ram device's config
 * loads such a file.
 *
 * Returns: 0; -ENOENT (no such snapshot); -EINVAL for a bad name; -errno
 * of the file system (the backend also logs which call failed on which
 * file); -EOPNOTSUPP.
 *
 * Locking: as blk_snap_create(); other snapshot calls on the device wait
 * until the save is done.
 */
static inline int blk_snap_save(struct blk_backend *be, const char *name, const char *path)
{
	return be->ops->snap ? be->ops->snap->save(be, name, path) : -EOPNOTSUPP;
}

/**
 * blk_resize - change the device's size, or pick up the storage's new size
 * @be: the top of the device's stack
 * @size: in: the new size in bytes (a multiple of the logical block size),
 *	  or 0 for the size the storage has now ("auto": a block device after
 *	  lvextend, an NBD export that was grown); out: the device's size now
 *
 * The backend makes the storage that size, or checks that it is: ram grows
 * and shrinks its arena (a shrink drops the data past the end; refused
 * while the device has snapshots; a snapshot has no size of its own: after
 * a grow it reads, saves and resets as its data followed by zeros); aio extends an image file, and takes a
 * block device's or a file's new size with 0; nbd connects again to learn
 * the export's size (0, or the size it has). Every filter passes the call
 * down and then takes the new size for itself (be_filter_resize() for one
 * that keeps nothing of it). Afterwards ->geometry() reports the new size;
 * the other fields never change.
 *
 * The caller quiesces the device first, as for blk_snap_reset(): no I/O in
 * flight in any layer and none submitted until this returns. It has also
 * written back and flushed what it caches (a shrink drops what lies past
 * the end: that must not be data the device's users still expect there).
 *
 * Returns: 0 (also when the size did not change); -EINVAL (not a multiple
 * of the logical block size, or 0 where the storage has no size of its
 * own: ram); -EBUSY (ram: snapshots hold the data a shrink would drop);
 * -EOPNOTSUPP (the backend cannot take that change: aio shrinks, an
 * explicit size for nbd that is not the export's); -ENOSPC (aio: a block
 * device smaller than @size); -ENOMEM, or the storage's -errno (logged by
 * the backend); nothing changed on failure.
 */
static inline int blk_resize(struct blk_backend *be, uint64_t *size)
{
	return be->ops->resize ? be->ops->resize(be, size) : -EOPNOTSUPP;
}

/* backends/lib/names.c: is @name a valid snapshot name (see BLK_SNAP_NAME_MAX)? */
bool blk_snap_name_valid(const char *name);

/*
 * Messages: blkfs speaks in one place, backends/lib/log.c, which implements
 * these for every layer (to stderr: a time stamp on a terminal or in the
 * daemon's log file, a syslog priority prefix such as "<3>" when stderr is the
 * journal, so `journalctl -p err` finds failed I/O). Levels are syslog's.
 */
#define BLK_LOG_ERR	3	/* data at risk or lost, an I/O that failed */
#define BLK_LOG_WARNING	4	/* something the user should look at; blkfs carries on */
#define BLK_LOG_INFO	6	/* what happened: mounted, a simulated power cut, ... */
void blk_logl(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define blk_err(...)	blk_logl(BLK_LOG_ERR, __VA_ARGS__)
#define blk_warn(...)	blk_logl(BLK_LOG_WARNING, __VA_ARGS__)
#define blk_info(...)	blk_logl(BLK_LOG_INFO, __VA_ARGS__)

/* backends/lib/names.c: "READ", "WRITE", "FLUSH", "DISCARD", "WRITE_ZEROES" (the log trace's names) */
const char *blk_op_name(enum blk_op op);

/* backends/registry.c */
const struct blk_backend_ops *blk_backend_find(const char *name);
/* "ram, null, ..." for messages (backends only, not filters); a static string */
const char *blk_backend_names(void);
/* "log, delay, ..." (filters only) */
const char *blk_filter_names(void);

/* backends/lib/params.c: helpers for a backend's open() */
/* The value of @key (and mark it used), or NULL if the section has none. */
const char *blk_param_get(struct blk_params *p, const char *key);
/* The line @key is on, or the section's line when absent. */
int blk_param_line(const struct blk_params *p, const char *key);
/*
 * Format "FILE:LINE: KEY: message" into p->err (LINE from blk_param_line())
 * and return -EINVAL. @key may be NULL for a message about the section.
 */
int blk_param_error(struct blk_params *p, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A size: decimal digits with an optional K/M/G/T (binary, as dd) suffix. */
int blk_parse_size(const char *s, uint64_t *out);
/* @key as a size; @def when absent. -EINVAL (with p->err) when malformed. */
int blk_param_size(struct blk_params *p, const char *key, uint64_t def, uint64_t *out);
/*
 * Durations: one grammar for every key and attr that takes a time. Decimal
 * digits and a unit: ns, us, ms, s, m (minutes) or h, lower case, nothing
 * between them ("500us", "2m"). "0" needs no unit. Another bare number is
 * taken in @bare_unit_ns where a key has always meant a unit by it (plain
 * seconds: 1000000000), and refused where @bare_unit_ns is 0 ("2": 2 what?).
 * Returns 0 with *@ns set, -EINVAL (malformed), or -ERANGE (more than
 * UINT64_MAX ns, about 584 years).
 */
int blk_parse_duration(const char *s, uint64_t bare_unit_ns, uint64_t *ns);
/* For messages: what blk_parse_duration() takes. */
#define BLK_DURATION_HELP "digits and a unit: ns, us, ms, s, m or h, such as 500us, 2ms, 5s"
/* @ns in the largest unit that says it exactly ("0", "1500us", "2m"); snprintf's result. */
int blk_format_duration(char *buf, size_t len, uint64_t ns);
/*
 * @key as a duration from @min_ns to @max_ns (bare numbers in @bare_unit_ns,
 * see blk_parse_duration); @def_ns when absent. -EINVAL with p->err.
 */
int blk_param_duration(struct blk_params *p, const char *key, uint64_t def_ns,
		       uint64_t min_ns, uint64_t max_ns, uint64_t bare_unit_ns, uint64_t *out);
/* @key as plain decimal digits, @min to @max; @def when absent. -EINVAL (with p->err). */
int blk_param_uint(struct blk_params *p, const char *key, unsigned int def,
		   unsigned int min, unsigned int max, unsigned int *out);
/* yes/no/true/false/1/0/on/off, any case: 0, or -EINVAL. */
int blk_parse_bool(const char *s, bool *out);
/* @key as yes/no/true/false/1/0/on/off; @def when absent. */
int blk_param_bool(struct blk_params *p, const char *key, bool def, bool *out);

/*
 * The contract's rules for @io against @geo (the list at the top of this
 * file): alignment, bounds, max_io, dma_align, and the iovec adding up to
 * len. blk_submit() checks it on every hop under BLKFS_CONTRACT_CHECK.
 */
bool blk_io_valid(const struct blk_geometry *geo, const struct blk_io *io);

/* Round helpers shared by everyone who shapes I/O. */
static inline bool blk_is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
static inline bool blk_aligned(uint64_t v, uint64_t a) { return (v & (a - 1)) == 0; }

#endif
