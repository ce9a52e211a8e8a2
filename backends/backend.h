/* SPDX-License-Identifier: MIT */
/*
 * backends/backend.h - the one contract between blkfs's page cache and storage.
 *
 * A backend (ram, aio, nbd, null) or a filter (log, delay, fault, powerloss)
 * implements struct blk_backend_ops. core/ talks to storage only through this
 * header, and this header includes nothing from core/.
 *
 * Rules the cache keeps, and a backend may assert():
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
 *  - Neither side holds a lock across submit() or inside end_io that the
 *    other side could need.
 */
#ifndef BLKFS_BACKEND_H
#define BLKFS_BACKEND_H

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

struct blk_io {
	enum blk_op op;
	unsigned int flags;		/* BLK_IO_* */
	uint64_t pos;			/* bytes */
	uint64_t len;			/* bytes */
	const struct iovec *iov;	/* READ/WRITE: slices of cache memory */
	int iovcnt;
	void (*end_io)(struct blk_io *io, int res);
	void *private;			/* the submitter's */
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

struct blk_backend_ops {
	const char *name;
	bool is_filter;		/* passes I/O on to ->next */
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
};

struct blk_backend {
	const struct blk_backend_ops *ops;
	struct blk_backend *next;	/* filters only */
};

static inline int blk_submit(struct blk_backend *be, struct blk_io *io)
{
	return be->ops->submit(be, io);
}

/*
 * Messages: blkfs speaks in one place, core/log.c, which implements these
 * for every layer (to stderr: a time stamp on a terminal or in the daemon's
 * log file, a syslog priority prefix such as "<3>" when stderr is the
 * journal, so `journalctl -p err` finds failed I/O). Levels are syslog's.
 */
#define BLK_LOG_ERR	3	/* data at risk or lost, an I/O that failed */
#define BLK_LOG_WARNING	4	/* something the user should look at; blkfs carries on */
#define BLK_LOG_INFO	6	/* what happened: mounted, a simulated power cut, ... */
void blk_logl(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define blk_err(...)	blk_logl(BLK_LOG_ERR, __VA_ARGS__)
#define blk_warn(...)	blk_logl(BLK_LOG_WARNING, __VA_ARGS__)
#define blk_info(...)	blk_logl(BLK_LOG_INFO, __VA_ARGS__)

/* backends/util.c: "READ", "WRITE", "FLUSH", "DISCARD", "WRITE_ZEROES" (the log trace's names) */
const char *blk_op_name(enum blk_op op);

/* backends/registry.c */
const struct blk_backend_ops *blk_backend_find(const char *name);
/* "ram, null, ..." for messages (backends only, not filters); a static string */
const char *blk_backend_names(void);
/* "log, delay, ..." (filters only) */
const char *blk_filter_names(void);

/* backends/params.c: helpers for a backend's open() */
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
/* @key as plain decimal digits, @min to @max; @def when absent. -EINVAL (with p->err). */
int blk_param_uint(struct blk_params *p, const char *key, unsigned int def,
		   unsigned int min, unsigned int max, unsigned int *out);
/* yes/no/true/false/1/0/on/off, any case: 0, or -EINVAL. */
int blk_parse_bool(const char *s, bool *out);
/* @key as yes/no/true/false/1/0/on/off; @def when absent. */
int blk_param_bool(struct blk_params *p, const char *key, bool def, bool *out);

/*
 * The contract's rules for @io against @geo (the list at the top of this
 * file), for a backend's assert(): alignment, bounds, max_io, dma_align,
 * and the iovec adding up to len.
 */
bool blk_io_valid(const struct blk_geometry *geo, const struct blk_io *io);

/* Round helpers shared by everyone who shapes I/O. */
static inline bool blk_is_pow2(uint64_t v) { return v && !(v & (v - 1)); }
static inline bool blk_aligned(uint64_t v, uint64_t a) { return (v & (a - 1)) == 0; }

#endif
