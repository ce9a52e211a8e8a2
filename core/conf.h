/* SPDX-License-Identifier: MIT */
/*
 * core/conf.h - the blkfs.conf parser: a pure buffer-to-struct function, no I/O.
 *
 * Format (INI):
 *   # or ; at the start of a line, or after whitespace, starts a comment.
 *   [cache]        size, folio_size, dirty_background, dirty_limit, dirty_expire
 *   [mount]        kernel_cache, allow_other, transport, transport_probe, uring_queue_depth, uring_spin
 *   [device NAME]  backend, size, logical_block_size, physical_block_size,
 *                  io_min, io_opt, max_io, cache_block_size, filters, the
 *                  keys the backend lists in its ops->keys, and FILTER.KEY
 *                  for each filter in `filters` and each key it lists.
 * `filters = log, delay` (commas and/or spaces) stacks filters between the
 * cache and the backend, the first listed on top (nearest the cache).
 * Sizes: digits with an optional K/M/G/T suffix (binary: K = 1024, as dd).
 * Every error is "FILE:LINE: KEY: message" and says what is allowed.
 */
#ifndef BLKFS_CONF_H
#define BLKFS_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../backends/backend.h"

#define CONF_NAME_MAX 32	/* device name length, without the NUL */
#define CONF_MAX_DEVICES 64
#define CONF_MAX_FILTERS 8	/* filters per device */
#define CONF_MIN_BLOCK 512
#define CONF_MAX_BLOCK (64u << 10)
#define CONF_MIN_FOLIO (4u << 10)
#define CONF_MAX_FOLIO (2u << 20)
#define CONF_DEF_READ_AHEAD (128u << 10)
#define CONF_DEF_MODE 0600
#define CONF_MAX_READ_AHEAD (64u << 20)
/*
 * [mount] uring_queue_depth: fio 4k randwrite QD32 on ram gave the same
 * IOPS from 2 to 64 entries (1: a quarter fewer, more CPU per request).
 * 64 is the kernel's max_background blkfs sets: one CPU's caller can have
 * all its asynchronous requests in hand, parked on a slow device (a QD64
 * job), for 1 MiB of reserved memory per entry, touched only as used. The
 * default is lowered to what fits where the machine has many CPUs and
 * little memory (conf_check_uring's quarter); a given value is not.
 */
#define CONF_DEF_URING_DEPTH 64
#define CONF_MAX_URING_DEPTH 256

struct conf_cache {
	uint64_t size;			/* bytes; default 256M */
	uint32_t folio_size;		/* bytes; default 64K */
	/* dirty thresholds, resolved to bytes (the config takes N% of size or bytes) */
	uint64_t dirty_background;	/* bytes, resolved; default 10% */
	uint64_t dirty_limit;		/* bytes, resolved; default 40% */
	uint32_t dirty_expire_ms;	/* default 5000 */
	int line;			/* line of [cache], 0 if absent */
};

/*
 * [mount] transport: how requests travel between the kernel and the daemon.
 * auto (default): FUSE over io_uring when the kernel offers it and
 * [mount] transport_probe finds it no slower here, else /dev/fuse.
 * uring: io_uring or no mount. dev: /dev/fuse only.
 */
enum conf_transport {
	CONF_TRANSPORT_AUTO,
	CONF_TRANSPORT_URING,
	CONF_TRANSPORT_DEV,
};

/*
 * [mount] transport_probe: how transport = auto chooses when the kernel
 * offers the ring (fuse/cmd_probe.c measures both). boot (default): the
 * result cached for this boot, measured once when there is none; always:
 * measured at every such mount; off: the ring whenever offered.
 */
enum conf_transport_probe {
	CONF_TPROBE_BOOT,
	CONF_TPROBE_ALWAYS,
	CONF_TPROBE_OFF,
};

/*
 * [mount] kernel_cache = none | writeback. none (default): every read and
 * write reaches the daemon (FUSE direct mode). writeback: the kernel's page
 * cache batches small writes first (FUSE writeback cache).
 */
#define CONF_MAX_PENDING_DEFAULT 128
#define CONF_MAX_PENDING 4096
/*
 * [mount] shutdown_timeout: the end of a mount waits at most this long, in
 * all, for requests in flight and the final writeback; then it gives up on
 * what a hung I/O holds (counted as lost) and exits 1. 0: wait forever.
 */
#define CONF_SHUTDOWN_TIMEOUT_DEFAULT_MS 30000
#define CONF_MAX_SHUTDOWN_TIMEOUT_MS (24ull * 3600 * 1000)
/*
 * [mount] uring_spin: over the ring, a queue thread with nothing to do
 * keeps its CPU busy looking for work (yielding it at each look) for this
 * long after the mount's last request, before it sleeps; 0 (off): it
 * sleeps at once. An idle vCPU that halts costs a wake-up of tens of
 * microseconds; a busy one lets the requester's wake-up stay where it is.
 * It stops at once when the CPU has other work (fuse/uring.c).
 */
#define CONF_DEF_URING_SPIN_US 0
#define CONF_MAX_URING_SPIN_US 1000

struct conf_mount {
	bool kernel_writeback;
	int kernel_cache_line;
	bool allow_other;		/* allow_other = yes: users other than the mounter */
	int allow_other_line;
	enum conf_transport transport;
	int transport_line;
	enum conf_transport_probe transport_probe;
	int transport_probe_line;
	uint32_t uring_queue_depth;	/* ring entries per CPU queue; 1..CONF_MAX_URING_DEPTH */
	int uring_queue_depth_line;
	uint32_t uring_spin_us;		/* 0..CONF_MAX_URING_SPIN_US */
	int uring_spin_line;
	uint32_t max_pending;		/* requests in flight per device */
	int max_pending_line;
	uint64_t shutdown_timeout_ms;	/* 0: wait forever */
	int shutdown_timeout_line;
	/*
	 * The mount option `ro` (not a config key: a read-only mount is the
	 * mounter's choice, as with any filesystem). Every device is read-only.
	 */
	bool read_only;
	int line;			/* line of [mount], 0 if absent */
};

struct conf_device {
	char name[CONF_NAME_MAX + 1];
	int line;			/* line of [device NAME] */
	const struct blk_backend_ops *ops;
	/*
	 * As the config gives them; 0 = not given. conf fills the documented
	 * defaults where the config gives the value and the rule is local
	 * (pbs = lbs, io_min = pbs, max_io = 1M, io_opt = max_io) when `size`
	 * is given, i.e. for backends that take their geometry from the config.
	 */
	struct blk_geometry geo;
	uint32_t cache_block_size;	/* 0 = auto */
	bool rmw_device;		/* rmw = device (default cache) */
	bool on_error_drop;		/* on_error = drop (default keep) */
	bool write_through;		/* write_cache = write through (default write back) */
	uint32_t read_ahead;		/* bytes; default 128K, 0 = off */
	uint32_t mode;			/* permission bits of the device file; default 0600 */
	const char *owner, *group;	/* uid / gid as given (number or name), NULL = the mounter's */
	/*
	 * `filters`, in config order: filters[0] is on top (the cache submits
	 * to it), filters[nr_filters - 1] sits just above the backend.
	 */
	const struct blk_backend_ops *filters[CONF_MAX_FILTERS];
	int nr_filters;
	/*
	 * Every key of the section in file order, with its line; the keys conf
	 * took itself are marked used, the backend's and the filters' (`log.path`)
	 * are not: their open() takes them with blk_param_get().
	 */
	struct blk_param *params;
	int nr_params;
};

struct conf {
	const char *file;		/* as given to conf_parse_buf() */
	struct conf_cache cache;
	struct conf_mount mount;
	struct conf_device *devs;
	int nr_devs;
	char *strings;			/* owned storage for all strings above */
};

/**
 * conf_parse_buf - parse a whole config
 * @buf: the text (need not be NUL-terminated)
 * @len: its length
 * @file: name used in messages
 * @c: filled on success; release with conf_free()
 * @err: receives "FILE:LINE: KEY: message" on failure
 * @errlen: size of @err
 *
 * Returns: 0, or -EINVAL (with @err set; @c is left empty), -ENOMEM.
 * Checks everything that can be checked without opening a backend:
 * syntax, unknown sections and keys, filter names (registered, each once,
 * at most CONF_MAX_FILTERS) and FILTER.KEY keys (the filter is listed in
 * `filters` and takes KEY), duplicate devices and keys, block
 * sizes (powers of two, 512..64K, physical >= logical), size a multiple of
 * the logical block size, folio_size >= every logical block size, cache
 * size bounds, cache_block_size.
 */
int conf_parse_buf(const char *buf, size_t len, const char *file, struct conf *c,
		   char *err, size_t errlen);

/**
 * conf_mount_set - set a [mount] key from outside the file: a mount option
 * (`-o kernel_cache=writeback`, `allow_other` in an fstab line), which
 * overrides what the file says
 * @c: a parsed config
 * @key: the key
 * @val: its value; NULL for a bare option (`allow_other` means yes)
 * @err, @errlen: "mount option KEY: message" on -EINVAL
 *
 * Returns: 0; -ENOENT if @key is not a [mount] key (nothing written to
 * @err); -EINVAL for a bad value.
 */
int conf_mount_set(struct conf *c, const char *key, const char *val, char *err, size_t errlen);

/**
 * conf_section_keys - the keys the parser itself takes in a section (its
 * own tables; a backend's and a filter's are in their ops->keys)
 * @section: "cache", "mount" or "device"
 * @n: receives the number of keys
 *
 * Returns: the table, or NULL (and *@n = 0) for another section. Used by the
 * test that checks blkfs.conf(5) documents every key.
 */
const char *const *conf_section_keys(const char *section, size_t *n);

/** conf_free - release what conf_parse_buf() allocated; @c may be zeroed. */
void conf_free(struct conf *c);

/**
 * conf_check_geometry - check a device's final geometry (after the backend
 * reported it) against the cache and the config
 * @c: the config
 * @d: the device
 * @geo: what the backend says
 * @err, @errlen: "FILE:LINE: KEY: message" naming both values on conflict
 *
 * Returns: 0 or -EINVAL.
 */
int conf_check_geometry(const struct conf *c, const struct conf_device *d,
			const struct blk_geometry *geo, char *err, size_t errlen);

/**
 * conf_check_uring - check the memory FUSE over io_uring would take on this
 * machine: one buffer of @entry_bytes per ring entry, uring_queue_depth
 * entries on each of @nr_queues queues (one per possible CPU)
 * @c: the config
 * @nr_queues: possible CPUs
 * @entry_bytes: bytes one ring entry takes (payload and headers)
 * @mem_bytes: the machine's memory; the rings may take at most a quarter
 * @err, @errlen: "FILE:LINE: uring_queue_depth: message" when they would not fit
 *
 * Returns: 0 or -EINVAL.
 */
int conf_check_uring(const struct conf *c, unsigned nr_queues, uint64_t entry_bytes,
		     uint64_t mem_bytes, char *err, size_t errlen);

/**
 * conf_cache_block - the block size the cache tracks state in (the kernel's
 * set_init_blocksize rule): start at the logical block size and double
 * while below 4096 and the device size is a multiple of the doubled size;
 * @forced (non-zero) wins. The one place the rule is computed: the daemon
 * (st_blksize, .sys) and pc_dev_add() both call it.
 * @geo: the device's geometry (size, lbs)
 * @forced: config cache_block_size, 0 for auto
 *
 * Returns: the cache block, or 0 when @geo->lbs is 0 and nothing is forced.
 */
uint32_t conf_cache_block(const struct blk_geometry *geo, uint32_t forced);

#endif
