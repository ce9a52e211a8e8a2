/* SPDX-License-Identifier: MIT */
/*
 * core/pcache.h - blkfs's page cache: folios with per-block uptodate/dirty
 * state in front of a backend, writeback shaped to the device geometry.
 *
 * Locks, outer first, each edge with the function that creates it (as the
 * top of the kernel's mm/filemap.c does):
 *
 *   folio exclusive hold (f->excl, a sleeping hold built on f->lock: fills,
 *     completing partial blocks, partial writes, invalidation, discard)
 *     -> another folio's exclusive hold, only in ascending folio index
 *        (folios_fill takes all of a read's folios that way)
 *     -> pc->lock, f->lock, everything below; it is held across backend
 *        I/O and waits (the holder waits for its own reads), but never
 *        while waiting for a free folio or for dirty throttling
 *   pc->lock (index, LRU, free and parked lists, device list, free_cond)
 *     -> f->lock          folio_alloc_locked() (is it busy?), pc_collect()
 *                         (only dirty ones), folio_unpark()
 *     -> dev->err_lock    wb_balance_dirty() -> stuck_dirty_bytes() and
 *                         pc_wait_for_folio_locked() -> wb_dev_failing()
 *     -> pc->fl_lock      pc_wait_for_folio_locked() -> wb_kick()
 *   f->lock (block state and records, users, excl, waiters, wb_ios)
 *     -> the writeback pool's lock  wb_add_locked() -> wb_io_alloc() ->
 *                         be_pool_get_size() (dirty accounting under f->lock
 *                         is atomic counters only)
 *     -> the trace's ring_lock  wb_trace_add() -> bt_event() -> ring_get(),
 *                         on a thread's first traced event only
 *   leaves, nothing taken under them: dev->err_lock (errseq, failing),
 *     stat_lock (submit.c: per-thread counts), pc->fl_lock (flusher kick and stop),
 *     dev->wq_lock, the pools' locks, pc_sync.lock, pc_batch.lock, the
 *     log's rate limiter. core/THREADS.md has the whole process's chain.
 *
 * pc->flusher_running is written only by wb_flusher_start()/stop(), by the
 * thread that owns the cache, and read atomically anywhere.
 * No mutex is held across a backend submit() or while the caller replies;
 * end_io may run inside submit(), in the submitting thread.
 *
 * Asynchronous requests (struct pc_aio, core/aio.c). Threads come in two
 * kinds:
 *  - non-blocking: whoever calls a pc_*_async() entry point (a FUSE
 *    request thread, a ring's queue thread), backend completions (end_io,
 *    on a backend's or filter's thread or inside submit()), and
 *    pc_aio.done. They take the mutexes above for short stretches and wait
 *    for nothing else; the one bounded wait allowed is for another
 *    writer's shared hold of a folio to end (a memcpy). What would wait
 *    (a free folio, dirty throttling, a folio held exclusively, a folio
 *    under writeback on a stable_writes device (pcache.c, invariant 7), a
 *    read to complete a partial block, writeback before direct I/O, fsync
 *    with dirty data, discard) is handed to the device's workers instead:
 *    "punted", with the request's own state, holding nothing.
 *  - blocking: the device's workers (PC_DEV_WORKERS threads per device),
 *    the flusher, and callers of the synchronous API (pc_write() and its
 *    siblings, tools, tests, the final writeback). They may wait for
 *    anything; the device's workers and the flusher never wait for a worker
 *    of their own device (R4), while a synchronous caller may (pc_fsync()
 *    punts to them when anything is dirty).
 * Rules, and the cycles each one breaks:
 *  R1. A completion never waits and never submits I/O; what it needs that
 *      could wait is punted. Cycle: a direct write completes on the
 *      backend's thread and invalidates the cached range; the invalidation
 *      waits for a folio's exclusive hold, held by a read whose completion
 *      needs that same backend thread (the cycle BENCHMARKS.md warned of).
 *      So the completion tries first (no folio of the range held: done
 *      there, under the folio's lock alone) and punts only what is held.
 *      Also: a completion submitting into a backend whose queue is freed
 *      only by completions on that thread.
 *  R2. A punted request holds no folio reference and no exclusive hold
 *      while it waits for a worker (only I/O in flight keeps folios, and
 *      its completion needs no worker). Cycle: a worker waits for a free
 *      folio, or for a hold, that only a request queued behind it would
 *      release.
 *  R3. An exclusive hold taken by a non-blocking thread is taken without
 *      waiting (try, else punt), and is released by its own completion.
 *      Cycle: two non-blocking threads each holding one folio and waiting
 *      for the other's; or a non-blocking thread waiting for a hold whose
 *      release needs that thread.
 *  R4. A worker never waits for another item of its device's queue (fsync
 *      waits for writeback I/O, never for a queued request). Cycle: all
 *      workers waiting for work that sits behind them in the queue.
 * How many requests may be in flight is the caller's to bound (fuse/: a
 * pool of request slots per device, [mount] max_pending).
 */
#ifndef BLKFS_PCACHE_H
#define BLKFS_PCACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "../backends/backend.h"

struct pc_cache;
struct pc_dev;

#define PC_MAX_DEVS 64		/* devices one cache serves at once */
struct pc_folio;

struct pc_cache_params {
	uint64_t size;			/* bytes of folio memory: the hard bound */
	uint32_t folio_size;		/* power of two, 4K..2M */
	uint32_t min_block;		/* smallest cache block of any device */
	uint64_t dirty_background;	/* bytes: the flusher starts above this */
	uint64_t dirty_limit;		/* bytes: writers wait above this */
	uint32_t dirty_expire_ms;	/* dirty data older than this is written */
};

/*
 * Counters of one device; all monotonic except the gauges dirty_bytes (dirty,
 * not yet under writeback), writeback_bytes (under writeback), cached_bytes
 * and in_flight. backend_* count I/Os that succeeded; *_ticks_ns add up each
 * backend I/O's time from submit to completion, io_ticks_ns the time with
 * at least one in flight (the fields of the kernel's /sys/block/X/stat, in
 * nanoseconds as the kernel's part_stat nsecs[]: no I/O is rounded on its
 * own; .sys/DEV/stat shows the sums in milliseconds).
 */
#define PC_HIST_BUCKETS 18	/* backend write sizes: <= 512 << i, the last open-ended */
struct pc_stats {
	uint64_t user_read_bytes, user_write_bytes;
	uint64_t user_reads, user_writes;
	uint64_t backend_read_bytes, backend_write_bytes;
	uint64_t backend_read_ios, backend_write_ios;
	uint64_t backend_flushes, backend_discards, backend_discard_bytes;
	uint64_t read_ticks_ns, write_ticks_ns, discard_ticks_ns, flush_ticks_ns;
	uint64_t io_ticks_ns, time_in_queue_ns;
	uint64_t direct_read_bytes, direct_write_bytes;
	uint64_t cache_hits, cache_misses;	/* in cache blocks */
	uint64_t readahead_bytes;		/* read for sequential readers beyond their reads */
	uint64_t rmw_read_bytes;		/* read to complete a partial block */
	uint64_t partial_pblk_writes;		/* writes of part of a physical block (rmw = device) */
	uint64_t dropped_bytes;			/* dirty data dropped (on_error, power cut, outside shrink) */
	uint64_t writeback_errors, read_errors;
	uint64_t split_ios;			/* I/Os cut at max_io */
	uint64_t punted_requests;		/* requests handed to the device's workers */
	uint64_t write_through_writes;		/* writes on stable storage before their reply */
	uint64_t pool_fallback_allocs;		/* per-I/O state from malloc: the pool was empty */
	uint64_t writeback_copy_bytes;		/* bytes copied on the way out: stays 0 */
	uint64_t direct_copy_bytes;		/* O_DIRECT bytes copied through an aligned buffer */
	uint64_t direct_read_mapped;		/* O_DIRECT reads answered from the backend's memory */
	uint64_t write_hist[PC_HIST_BUCKETS];
	uint64_t in_flight;			/* gauge */
	uint64_t dirty_bytes, writeback_bytes, cached_bytes; /* gauges */
};

/* An errseq_t, as in the kernel: a counter, an errno, and a seen flag. */
typedef uint32_t pc_errseq_t;

/**
 * pc_cache_create - allocate the folio pool (touched once, reused forever)
 * @p: parameters; size / folio_size folios, at least 8
 *
 * Returns: the cache, or ERR_PTR(-errno).
 * Does not start threads: call pc_cache_start() in the process that serves.
 */
struct pc_cache *pc_cache_create(const struct pc_cache_params *p);

/** pc_cache_start - start the background flusher. Returns: 0 or -errno. */
int pc_cache_start(struct pc_cache *pc);

/** pc_cache_stop - stop the background flusher (before removing devices). */
void pc_cache_stop(struct pc_cache *pc);

/**
 * pc_cache_destroy - stop the flusher and free everything. Devices must have
 * been removed with pc_dev_remove(); dirty data still cached is dropped.
 */
void pc_cache_destroy(struct pc_cache *pc);

/**
 * pc_dev_add - put a backend behind the cache
 * @pc: the cache
 * @name: device name (copied)
 * @be: the opened backend stack; the device does not close it
 * @cache_block: forced cache block size, 0 = conf_cache_block() rule
 *
 * Returns: the device or ERR_PTR(-EINVAL) if the geometry does not fit the
 * cache (folio smaller than the cache block), ERR_PTR(-ENOSPC) when the
 * cache serves PC_MAX_DEVS devices already. May be called while the cache
 * serves other devices (the flusher running).
 */
struct pc_dev *pc_dev_add(struct pc_cache *pc, const char *name,
			  struct blk_backend *be, uint32_t cache_block);

/**
 * pc_dev_remove - drop a device's folios (write nothing) and free it. The
 * caller has ended every request of the device (none in flight, none to
 * come); the other devices keep being served meanwhile.
 */
void pc_dev_remove(struct pc_dev *dev);

const char *pc_dev_name(const struct pc_dev *dev);
void pc_dev_geometry(const struct pc_dev *dev, struct blk_geometry *geo);
uint32_t pc_dev_cache_block(const struct pc_dev *dev);
void pc_dev_stats(struct pc_dev *dev, struct pc_stats *st);

/**
 * pc_dev_set_max_io - change the largest backend I/O live (max_sectors_kb)
 * @bytes: a multiple of the physical block size, at most the backend's own
 *	   max_io (the device's max_hw_sectors_kb)
 * Returns: 0 or -EINVAL (nothing changed).
 */
int pc_dev_set_max_io(struct pc_dev *dev, uint64_t bytes);
uint32_t pc_dev_max_io(const struct pc_dev *dev);

/**
 * pc_dev_set_policy - how writeback treats a device
 * @rmw_device: false (rmw = cache): a write of part of a physical block
 *	reads the rest into the cache once and writes the whole block; true
 *	(rmw = device): the logical-block-aligned write goes as it is and the
 *	device does its own read-modify-write
 * @on_error_drop: false (keep): a failed write stays dirty and is retried;
 *	true: it is dropped and counted. The next fsync reports the error either way.
 */
void pc_dev_set_policy(struct pc_dev *dev, bool rmw_device, bool on_error_drop);

/**
 * pc_dev_set_write_through - the device's write cache, as the kernel's
 * queue/write_cache: false ("write back"): a completed write may be
 * volatile until a flush; true ("write through"): every write is written
 * back and flushed before its completion, as a write with @fua is either way.
 */
void pc_dev_set_write_through(struct pc_dev *dev, bool on);
bool pc_dev_write_through(const struct pc_dev *dev);

/**
 * pc_dev_set_read_ahead - bytes a sequential reader gets fetched ahead of
 * its reads (read_ahead_kb); 0 turns readahead off.
 * Returns: 0 or -EINVAL (more than 64 MiB, or not a multiple of 512).
 */
int pc_dev_set_read_ahead(struct pc_dev *dev, uint64_t bytes);
uint32_t pc_dev_read_ahead(const struct pc_dev *dev);

/**
 * pc_write - buffered write
 * @dev: device
 * @buf: data
 * @len: bytes
 * @pos: byte offset
 *
 * Copies @buf into folios and marks the covered blocks uptodate and dirty
 * under one acquisition of each folio's lock. A block only partly covered
 * and not uptodate is read first (only that block).
 *
 * Returns: bytes written (shortened at the device end), -ENOSPC if @pos is
 * at or past the end, or -errno (a failed read of a partial block, or the
 * device's sticky writeback error once dirty data reached the dirty limit).
 * An error after some folios were written returns the bytes written before
 * it (folio by folio, in order); the folio that failed was not changed.
 * Locking: takes pc->lock and folio locks; may sleep for free folios,
 * and on a stable_writes device for the end of a folio's writeback
 * (pcache.c, invariant 7).
 */
ssize_t pc_write(struct pc_dev *dev, const void *buf, size_t len, uint64_t pos);

/* Up to PC_READ_MAX bytes per pc_read_begin(): the FUSE request bound. */
#define PC_READ_MAX (1u << 20)
#define PC_READ_IOV (PC_READ_MAX / 4096 + 2)

/* A buffered read's result: slices of folio memory, valid until pc_read_end(). */
struct pc_read {
	struct iovec iov[PC_READ_IOV];
	int iovcnt;
	struct pc_folio *folios[PC_READ_IOV];
	int nr_folios;
};

/**
 * pc_read_begin - buffered read without a copy
 * @dev: device
 * @rd: receives iovecs into folio memory and the folio references behind them
 * @len: bytes wanted (at most PC_READ_MAX are served)
 * @pos: byte offset
 *
 * Fetches the blocks that are not uptodate (contiguous missing blocks merged
 * into one backend read, split at max_io). Returns bytes available in
 * @rd->iov (0 at or past the end), or -errno; on success the caller replies
 * from @rd->iov and then calls pc_read_end(). The read is never short but
 * at the device end or PC_READ_MAX. When the cache cannot pin every folio
 * of the range at once, @rd->iov is one slice of a per-thread bounce buffer
 * instead, valid until the same thread's next pc_read_begin().
 */
ssize_t pc_read_begin(struct pc_dev *dev, struct pc_read *rd, size_t len, uint64_t pos);
void pc_read_end(struct pc_read *rd);

/** pc_read - pc_read_begin() + copy into @buf + pc_read_end(). */
ssize_t pc_read(struct pc_dev *dev, void *buf, size_t len, uint64_t pos);

/**
 * pc_direct_write - O_DIRECT write, bypassing the cache
 *
 * @pos and @len must be multiples of the logical block size (-EINVAL).
 * Dirty cached data overlapping the range is written back first; cached data
 * overlapping it is dropped afterwards. Returns bytes written (shortened at
 * the end), -ENOSPC at or past the end, or -errno.
 */
ssize_t pc_direct_write(struct pc_dev *dev, const void *buf, size_t len, uint64_t pos);

/** pc_direct_read - O_DIRECT read; same alignment rules; 0 at or past the end. */
ssize_t pc_direct_read(struct pc_dev *dev, void *buf, size_t len, uint64_t pos);

/**
 * pc_discard - drop cached data in the range and discard it on the backend
 * (reads return zeros afterwards). pc_write_zeroes - the same with
 * BLK_WRITE_ZEROES. Both take logical-block-aligned ranges inside the device.
 * Returns: 0 or -errno.
 */
int pc_discard(struct pc_dev *dev, uint64_t pos, uint64_t len);
int pc_write_zeroes(struct pc_dev *dev, uint64_t pos, uint64_t len);

/* ----------------------------------------------------- asynchronous forms */

enum pc_aio_op {
	PC_AIO_READ,		/* pc_read_async */
	PC_AIO_WRITE,		/* pc_write_async */
	PC_AIO_DREAD,		/* pc_direct_read_async */
	PC_AIO_DWRITE,		/* pc_direct_write_async */
	PC_AIO_FSYNC,		/* pc_fsync_async */
	PC_AIO_DISCARD,		/* pc_discard_async */
	PC_AIO_ZEROES,		/* pc_write_zeroes_async */
	PC_AIO_INVAL,		/* core's own: a direct write's invalidation, punted */
	PC_AIO_WSYNC,		/* core's own: a write through: its range to the device, a flush */
};

#define PC_AIO_IOV 32		/* read runs an asynchronous fill can have */
#define PC_AIO_RA 32		/* readahead folios an asynchronous read can take */

/* A set of I/Os someone waits for (synchronously) or that ends in a callback. */
struct pc_batch {
	pthread_mutex_t lock;	/* synchronous batches: pending and err */
	pthread_cond_t cond;
	int pending;		/* atomic in asynchronous batches */
	int err;		/* the first error */
	uint64_t fail_pos;	/* the lowest byte that failed (partial completions), or ~0 */
	void (*end)(struct pc_batch *b);	/* NULL: synchronous (pc_batch_wait) */
};

/*
 * One backend I/O as core/submit.c sends it (private to core/): taken from
 * the device's pool (with room for a vector's slices after it), or, for an
 * unsplit direct I/O, the one in its pc_aio (no pool, no lock).
 */
struct pc_sio {
	struct blk_io io;
	struct pc_dev *dev;
	struct pc_batch *batch;
	uint64_t start_ns;
	bool pooled;		/* from the pool: its end puts it back */
};

/*
 * One asynchronous request (struct kiocb in spirit). The caller sets
 * @done, @waited, @fua and @map_ok, keeps the struct and the buffers it
 * names alive until @done has run, and calls one pc_*_async() entry
 * point. @done runs exactly once, with bytes (or 0) or -errno, from any
 * thread: possibly inside the entry point, a backend completion, or a
 * device worker (pcache.h's rules: it must not wait). Everything below
 * "private to core/" is core's (@map and @mapcnt are core's too, read by
 * @done).
 */
struct pc_aio {
	void (*done)(struct pc_aio *aio, ssize_t res);
	bool waited;			/* the caller sleeps until done: a backend may
					 * do the I/O in its thread (BLK_IO_WAITED) */
	bool fua;			/* WRITE, DWRITE: on stable storage before done
					 * (O_DSYNC, O_SYNC: a disk's FUA) */
	/*
	 * DREAD: @done may take the data as the backend's mapping (@map)
	 * instead of in the buffer: it may run inside the backend's end_io
	 * with the backend's lock held shared, where it replies from @map
	 * and neither blocks nor submits I/O (BLK_IO_MAPPED, backend.h).
	 */
	bool map_ok;
	/*
	 * DREAD, set by core for @done's time only: the data, @mapcnt
	 * segments of the backend's memory, valid until @done returns; NULL:
	 * the data is in the buffer.
	 */
	const struct iovec *map;
	unsigned int mapcnt;

	/* private to core/ */
	struct pc_dev *dev;
	enum pc_aio_op op;
	uint64_t pos;
	size_t len;
	size_t progress;		/* WRITE: bytes in the cache so far */
	const void *wbuf;		/* WRITE, DWRITE */
	void *rbuf;			/* DREAD */
	struct pc_read *rd;		/* READ */
	pc_errseq_t *since;		/* FSYNC */
	ssize_t res;			/* DWRITE: the write's result, before invalidating */
	struct pc_aio *next;		/* the device's work queue */
	struct pc_batch batch;		/* the I/O in flight for it */
	struct pc_sio sio;		/* DREAD, DWRITE: the backend I/O when unsplit */
	struct iovec iov[PC_AIO_IOV];
	bool ra_seq;			/* READ: sequential (readahead applies) */
	uint64_t fill_pos, fill_len;	/* READ: what the fill covers (readahead too) */
	int nr_ra;
	struct pc_folio *ra[PC_AIO_RA];
	unsigned long need[(PC_READ_IOV + PC_AIO_RA + 63) / 64];	/* folios being filled */
};

/**
 * pc_read_async - pc_read_begin() without waiting: @rd holds the result
 * when @aio->done runs with bytes > 0; the caller replies from @rd->iov,
 * then calls pc_read_end(@rd).
 */
void pc_read_async(struct pc_dev *dev, struct pc_aio *aio, struct pc_read *rd, size_t len,
		   uint64_t pos);
/** pc_write_async - pc_write() without waiting; @buf must live until done. */
void pc_write_async(struct pc_dev *dev, struct pc_aio *aio, const void *buf, size_t len,
		    uint64_t pos);
/** pc_direct_read_async, pc_direct_write_async - the O_DIRECT forms; @buf lives until done. */
void pc_direct_read_async(struct pc_dev *dev, struct pc_aio *aio, void *buf, size_t len,
			  uint64_t pos);
void pc_direct_write_async(struct pc_dev *dev, struct pc_aio *aio, const void *buf, size_t len,
			   uint64_t pos);
/** pc_fsync_async - pc_fsync() without waiting; *@since is advanced before done runs. */
void pc_fsync_async(struct pc_dev *dev, struct pc_aio *aio, pc_errseq_t *since);
/** pc_discard_async, pc_write_zeroes_async - done gets 0 or -errno. */
void pc_discard_async(struct pc_dev *dev, struct pc_aio *aio, uint64_t pos, uint64_t len);
void pc_write_zeroes_async(struct pc_dev *dev, struct pc_aio *aio, uint64_t pos, uint64_t len);

/**
 * pc_dev_drop_clean - forget every clean cached block of @dev (dirty data
 * stays): the next reads come from the device, as after the kernel's
 * drop_caches. Cannot fail.
 */
void pc_dev_drop_clean(struct pc_dev *dev);

/**
 * pc_dev_set_size - the device's size changed (its backend was resized)
 * @size: the new size, a multiple of the cache block (pc_dev_cache_block())
 *
 * A shrink drops what the cache holds past the new end, dirty or not.
 * Locking: the caller has quiesced the device (no request in flight or to
 * come until this returns): the size is read unlocked on every request.
 * Returns: 0 or -EINVAL (nothing changed).
 */
int pc_dev_set_size(struct pc_dev *dev, uint64_t size);

/**
 * pc_dev_shrink_drop - pc_dev_set_size() for a shrink the storage already
 * made (an `rbd resize --allow-shrink` by another client): what was dirty
 * past @size cannot be written anywhere any more; it is dropped with the
 * rest, counted in dropped_bytes and returned in @dropped.
 * Locking: as pc_dev_set_size(). Returns: 0 or -EINVAL (nothing changed).
 */
int pc_dev_shrink_drop(struct pc_dev *dev, uint64_t size, uint64_t *dropped);

/**
 * pc_dev_drop_all - forget every cached block of @dev without writing it
 * back (a simulated power cut): dirty data is dropped and counted in
 * dropped_bytes, writeback already in flight completes as the device decides.
 */
void pc_dev_drop_all(struct pc_dev *dev);

/**
 * pc_errseq_sample - what an opener records to see later errors once. An
 * error nobody has seen yet samples as 0, so a new opener's first fsync
 * reports it too (the kernel's rule).
 */
pc_errseq_t pc_errseq_sample(struct pc_dev *dev);

/**
 * pc_fsync - write every dirty block of @dev, wait for writeback already in
 * flight, flush the backend.
 * @since: the caller's errseq (from pc_errseq_sample()); advanced
 *
 * Returns: 0, or the first writeback error since @since (reported once per
 * @since), or the error of this call's own writes or flush.
 */
int pc_fsync(struct pc_dev *dev, pc_errseq_t *since);

/**
 * pc_dev_sync_final - write back everything before the device goes away:
 * up to @attempts rounds with backoff (100 ms, doubling) while writes
 * fail, then a flush.
 * @deadline_ms: NULL, or where the caller keeps its deadline (blk_now_ms()
 *	time, 0: none; read atomically each round, so the caller may move it
 *	while this runs): no retry starts whose backoff would end past it
 * @lost: receives the dirty bytes that could not be written
 *
 * A backend I/O that never completes (a hung device) blocks this call
 * where it waits for writeback in flight or for the flush, and the I/O
 * points into folio memory and this call's stack: a caller that must not
 * wait forever runs it in a thread of its own, stops waiting for that
 * thread, and never frees the cache or the device after that (the daemon
 * exits: fuse/shutdown.c).
 *
 * Returns: 0, or the last error (then *@lost > 0 or the flush failed).
 */
int pc_dev_sync_final(struct pc_dev *dev, int attempts, const uint64_t *deadline_ms,
		      uint64_t *lost);

#endif
