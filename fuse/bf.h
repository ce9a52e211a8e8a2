/* SPDX-License-Identifier: MIT */
/*
 * fuse/bf.h - private to fuse/: the daemon's state and the pieces main.c
 * and daemon.c share. Only fuse/ includes libfuse.
 */
#ifndef BLKFS_BF_H
#define BLKFS_BF_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "../core/conf.h"
#include "../core/pcache.h"
#include "slots.h"

struct bf_req;
struct bt_dev;

/*
 * A device. Devices come and go while mounted (devs.c): each is allocated
 * alone and published in a slot of d->devs; its memory lives until its last
 * reference goes.
 *
 * Lock order: d->add_lock -> dev->ctl_lock -> dev->live_lock (live.c) -> d->dev_lock ->
 * dev->slots.lock (slots.h);
 * d->ref_lock is a leaf. d->dev_lock is held only to look up or to change
 * the table (never across backend I/O, a FUSE reply or a notification).
 */
struct bf_dev {
	struct bf_daemon *d;
	struct blk_host host;		/* what the stack may call back: drop_volatile */
	const struct conf_device *cd;
	struct blk_backend *be;		/* top of the filter stack */
	struct pc_dev *pc;
	struct blk_geometry geo;
	struct bt_dev *bt;		/* its trace state, for the FUSE level (backends/lib/trace.h) */
	uint32_t cblk;
	uint64_t ino;
	uid_t uid;			/* owner of the device file */
	gid_t gid;

	int ref;			/* atomic: the table's, each open's, each bf_dev_get()'s */
	int opens;			/* atomic, raised under d->dev_lock: open device files */
	bool removing;			/* d->dev_lock (write): no new open, no bf_dev_get() */
	int slot;			/* in d->devs, -1 before publication */
	/*
	 * Commands that change the device (remove; resize, snapshot, reset):
	 * one at a time. A handler that took it after bf_dev_get() checks
	 * bf_dev_removed(): a remove may have gone first.
	 */
	pthread_mutex_t ctl_lock;
	bool removed;			/* ctl_lock: unpublished by remove */
	/* .sys/NAME/...: built before publication, fixed from then on */
	struct bf_node *nodes;
	size_t nr_nodes, cap_nodes;
	struct conf own;		/* an added device's config (cd points into it) */

	/* requests in flight: a pool of max_pending slots (slots.h), the entries daemon.c's */
	struct bf_slots slots;
	struct bf_req *reqs;		/* the entries */
	uint64_t req_inline;		/* atomic: answered by the thread that received them */
	uint64_t req_parked;		/* atomic: answered later, from another thread */

	/* resize, snapshot, reset, save: one at a time per device (live.c); before slots.lock */
	pthread_mutex_t live_lock;
};

/* The device's size now: changed live by bf_dev_resize(), read anywhere. */
static inline uint64_t bf_dev_size(const struct bf_dev *bd)
{
	return __atomic_load_n(&bd->geo.size, __ATOMIC_RELAXED);
}

/*
 * How long the kernel may keep an entry or attributes without asking.
 * Names come and go (add, remove) and sizes change (resize): each change
 * is notified (inval_entry, delete, inval_inode), and the timeout is what
 * bounds a stale answer when a notification cannot help: a lookup's reply
 * built before a remove and delivered after its notify_delete is cached
 * as it is. A second of staleness at most, one getattr a second per file.
 */
#define BF_TIMEOUT 1.0

#define BF_MAX_WRITE (1u << 20)	/* libfuse 3.14 fails above 1 MiB (measured here) */

#define BF_ROOT_INO 1
#define BF_DEV_INO 2		/* device files: from 2 up, never reused while mounted */
#define BF_SYS_INO (1u << 20)	/* .sys nodes: from here up, never reused while mounted */

/* A directory or attribute of the .sys tree. */
struct bf_node {
	uint64_t ino, parent;
	const char *name;
	bool dir;
	struct bf_dev *dev;		/* a device's node: lives as long as the device */
	const struct bf_dev_attr *da;	/* device attribute, or */
	struct blk_backend *be;		/* a layer's blk_attr */
	const struct blk_attr *ba;
	bool ctl;			/* .sys/control (control.h) */
};

struct bf_daemon {
	struct conf conf;
	const char *conf_path;
	struct pc_cache *pc;
	/*
	 * The devices, in slots (readdir order); dev_lock. Readers (lookup,
	 * getattr, open, readdir, .sys) hold it shared for a lookup and a copy;
	 * add and remove hold it exclusive to publish or unpublish.
	 */
	pthread_rwlock_t dev_lock;
	struct bf_dev *devs[PC_MAX_DEVS];
	int nr_devs;			/* dev_lock: devices in the table */
	uint64_t next_ino;		/* dev_lock (write): the next device file's */
	uint64_t next_sys_ino;		/* atomic: the next .sys node's */
	pthread_mutex_t add_lock;	/* add and remove: one at a time */
	pthread_mutex_t ref_lock;	/* with ref_cond: remove waits for the last reference */
	pthread_cond_t ref_cond;
	bool locks_ready;
	const char *mnt;		/* canonical mount point */
	int ready_fd;			/* daemon mode: pipe to the waiting parent, else -1 */
	int log_fd;			/* daemon mode: stderr after readiness */
	bool foreground;
	/* .sys, .sys/.transport, .sys/control: built before mounting, fixed */
	struct bf_node *nodes;
	void *se;			/* the fuse_session while serving, else NULL */
	size_t nr_nodes, cap_nodes;
	char fsname[PATH_MAX];		/* the mount's source: the config's absolute path */
	char kopts[1024];		/* mount options for the kernel (bf_mount_options) */
	/*
	 * bf_serve gave up on a hung I/O: threads still wait on it, and what
	 * it may reach (devices, cache, session) must never be freed: exit.
	 */
	bool abandoned;
	/*
	 * dev_lock (write), read atomically: at unmount, the control commands
	 * still running made no progress for shutdown_timeout and were given
	 * up on (daemon.c): the table changes no more, and what they hold is
	 * never freed.
	 */
	bool ctl_given_up;
};

/* daemon.c */
/*
 * bf_open_devices - open every device's backend, check its geometry, create
 * the cache and put the devices behind it. Writes "FILE:LINE: KEY: message"
 * to @err on failure. Returns 0 or -errno.
 */
int bf_open_devices(struct bf_daemon *d, bool create_cache, char *err, size_t errlen);
void bf_close_devices(struct bf_daemon *d);
/*
 * bf_serve - mount at d->mnt with d->kopts, d->fsname as the source, serve
 * until unmounted or signalled, write everything back (SIGTERM, SIGINT and
 * SIGHUP cannot stop that), unmount. Returns the process exit code (0, or
 * 1 if data was lost or the mount failed); @status receives the lines for
 * the status file.
 */
int bf_serve(struct bf_daemon *d, char *status, size_t statuslen);

/* mountopt.c */
/*
 * bf_mount_options - take the -o options of a mount (comma separated, as
 * mount.fuse3 passes an fstab line's): generic mount flags into d->kopts
 * (`ro` also sets d->conf.mount.read_only), [mount] keys and allow_other
 * into d->conf (overriding the file), fstab-only ones ignored. Call after
 * the config is parsed. Returns 0, or -EINVAL with @err naming the option.
 */
int bf_mount_options(struct bf_daemon *d, const char *opts, char *err, size_t errlen);

/* notify.c */
/*
 * bf_notify - send one sd_notify message ("READY=1", "STATUS=...", lines
 * separated by newlines) to $NOTIFY_SOCKET; nothing without it. Returns 0
 * or -errno (warned about once).
 */
int bf_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * Notifications to the kernel about a device file (inode @ino), the one
 * way fuse/ sends them: bf_notify_inval_inode() drops what the kernel
 * caches of it (attributes; with @off >= 0 also its pages in [@off,
 * @off + @len), @len 0: to the end, which first writes the dirty ones
 * back through this daemon); bf_notify_store() puts @len bytes at @off
 * into its page cache, moving its size up to cover them. They wait in the
 * kernel for requests of the file (its write-back, a READ holding a
 * folio): never called from a ring queue thread (bf_rawio_offqueue()), and
 * refused there (-EDEADLK; rawio.c). Nothing is sent while no session
 * serves (0). Returns 0 or -errno (-ENOENT: the kernel has no inode
 * cached).
 */
int bf_notify_inval_inode(struct bf_daemon *d, uint64_t ino, off_t off, off_t len);
int bf_notify_store(struct bf_daemon *d, uint64_t ino, off_t off, const void *buf, size_t len);
/* The mount is usable: tell the waiting parent and a service manager (READY=1). */
void bf_ready(struct bf_daemon *d);

/* shutdown.c */
/* Once serving has ended: SIGTERM, SIGINT and SIGHUP are noted, never fatal. */
void bf_final_signals(void);
/* Report the final writeback's progress (log, STATUS=) until _stop(). */
void bf_final_progress_start(struct bf_daemon *d);
void bf_final_progress_stop(void);
/*
 * The end of serving, bounded by [mount] shutdown_timeout: bf_final_begin
 * starts, per device, a thread that waits for its requests in flight and
 * then writes its cache back (NULL without memory: then the two calls
 * below do it in this thread, unbounded). bf_final_wait_drained waits
 * until every device's requests are answered or the device was given up
 * on (no progress for the timeout); true when none was. bf_final_end
 * waits for the writebacks likewise, writes the status lines ("ok DEV
 * BYTES", "lost DEV BYTES REASON") to @status, sets d->abandoned when a
 * device was given up on, and returns the exit code (0, or 1: data lost).
 */
struct bf_final;
/*
 * bf_final_wait_busy - before those: wait while @busy(@arg) (called with
 * @lock held; @cv is signalled when it may have changed) as long as the
 * devices make progress by the final writeback's measure, any device's.
 * Returns true once @busy is false; false after shutdown_timeout without
 * progress (never with shutdown_timeout = 0).
 */
bool bf_final_wait_busy(struct bf_daemon *d, bool (*busy)(void *), void *arg,
			pthread_mutex_t *lock, pthread_cond_t *cv);
struct bf_final *bf_final_begin(struct bf_daemon *d);
bool bf_final_wait_drained(struct bf_daemon *d, struct bf_final *f);
int bf_final_end(struct bf_daemon *d, struct bf_final *f, char *status, size_t statuslen);

/* rawio.c: the raw FUSE traffic between /dev/fuse and libfuse */
struct fuse_session;
/*
 * bf_rawio_attach - route @se's /dev/fuse reads and writes through blkfs's
 * hooks (before fuse_session_mount()), and prepare the transport [mount]
 * transport asks for: with FUSE over io_uring, one thread and ring per
 * possible CPU (fuse/uring.h), started when INIT is answered. @max_write
 * is the session's (the largest request). Returns the placeholder fd that
 * fuse_session_mount() replaces (the caller closes it after mounting), or
 * -errno with @err set ("FILE:LINE: KEY: message" for the config's
 * faults, such as transport = uring on a kernel that does not offer it).
 */
int bf_rawio_attach(struct bf_daemon *d, struct fuse_session *se, size_t max_write,
		    char *err, size_t errlen);
/*
 * bf_rawio_stop - after the request loop: the ring serves no new request,
 * commits the replies to those in hand, and lets go of /dev/fuse. When
 * those in hand go @timeout_ms without one answered (0: wait forever) it
 * gives up: false, and the ring stays allocated until exit.
 */
bool bf_rawio_stop(uint64_t timeout_ms);
/* bf_rawio_failed - the transport failed (the mount never became usable, or a ring queue died). */
bool bf_rawio_failed(void);
void bf_rawio_detach(void);
/*
 * bf_rawio_ring_request - in a request's handler, in its thread: true when
 * the request came over the ring. Its buffers, WRITE data included, then
 * stay valid until its reply is sent, from whatever thread: a handler that
 * parks it needs no copy. A /dev/fuse request's WRITE data lives in the
 * receiving thread's buffer until that thread's next receive.
 */
bool bf_rawio_ring_request(void);
/*
 * bf_rawio_queue_thread - is this a ring queue's thread? Such a thread
 * must never wait for a notification (bf_notify_inval_inode() and the
 * like): the kernel may first send requests to its own queue and wait.
 */
bool bf_rawio_queue_thread(void);
/*
 * A request's handler that may send such a notification, to be run off the
 * ring's queues: embedded in the caller's job, @fn gets it back.
 */
struct bf_offq {
	struct bf_offq *next;		/* rawio.c's list */
	void (*fn)(struct bf_offq *w);	/* runs the handler, replies, may free @w */
};
/*
 * bf_rawio_offqueue - in the handler of a ring request on a queue's thread
 * (bf_rawio_queue_thread()): run @w->fn in a thread that serves no queue.
 * The handler then returns at once without a reply: the request stays
 * parked, its buffers (WRITE data too) valid until @w->fn replies, and the
 * queue's thread serves its queue meanwhile (the write-back the
 * notification makes, for one). Returns 0, or -EAGAIN when no thread could
 * take it (the caller replies the error).
 */
int bf_rawio_offqueue(struct bf_offq *w);
/* bf_rawio_show - "name value" lines of .sys/.transport: transport, ring memory, counters */
int bf_rawio_show(char *buf, size_t len);
/*
 * bf_rawio_write_data - where the data of the WRITE being handled in this
 * thread is, for @buf as libfuse passes it to the write handler (WRITE data
 * is received page-aligned: from /dev/fuse into a buffer of the receiving
 * thread's, valid until that thread's next receive; from the ring in the
 * entry's payload buffer, where libfuse's @buf already points, valid until
 * the reply is sent).
 */
const char *bf_rawio_write_data(const char *buf);
/*
 * bf_rawio_req_buf - the handling thread's page-aligned receive buffer
 * (BF_MAX_WRITE bytes and more): a READ's reply data may be put there.
 * For a request that came on the ring, its entry's payload buffer (a
 * reply from there is committed without a copy; the request's own payload
 * is there, so only a handler done with it, such as READ's, uses this).
 * NULL without memory.
 */
char *bf_rawio_req_buf(void);
/* Is @data in the handling thread's receive buffer (bf_rawio_keep() takes it without a copy)? */
bool bf_rawio_in_thread_buf(const char *data, size_t len);
/*
 * bf_rawio_keep - the request being handled in this thread outlives its
 * handler, and its data at *@data (@len bytes: a WRITE's data, or the
 * bf_rawio_req_buf() buffer) must stay. The receive buffer goes with the
 * request (the thread receives into another from now on), or the data is
 * copied when it is not there (*@data then points at the copy). Returns
 * the buffer to give back with bf_rawio_release() when the request is
 * done, NULL when there is none to give back (a ring request: its data
 * stays in its entry until the reply), or ERR_PTR(-ENOMEM).
 */
char *bf_rawio_keep(const char **data, size_t len);
void bf_rawio_release(char *buf);
/* Receive buffers held by requests now, and requests that ever kept one. */
void bf_rawio_stats(uint64_t *kept, uint64_t *kept_total);

/* The pool of @n request slots of @bd ([mount] max_pending); 0 or -ENOMEM. */
int bf_dev_reqs_init(struct bf_dev *bd, uint32_t n);
void bf_dev_reqs_destroy(struct bf_dev *bd);
/* .sys/DEV/drop_caches: the device's clean cached data, blkfs's and the kernel's, goes. */
void bf_dev_drop_caches(struct bf_dev *bd);
/* live.c: a mount that changes while it serves */
/*
 * bf_dev_resize - give @bd a new size, or the size its storage has now
 * @spec: bytes, with an optional K/M/G/T suffix (binary), or "auto"
 * @msg: receives the result ("ram0: 1073741824 -> 2147483648 bytes") or why not
 *
 * Holds the device's requests, writes back and flushes its dirty data,
 * resizes the backend stack (blk_resize()) and the cache, then tells the
 * kernel (every opener sees the new size at once). Refused, with nothing
 * changed: a size not a multiple of the cache block (EINVAL); a shrink
 * below a loop device that sits on the file (EBUSY); a shrink with
 * kernel_cache = writeback, whose kernel keeps its own larger size
 * (EOPNOTSUPP); dirty data that cannot be written back (EIO); what the
 * backend refuses (blk_resize()). Returns 0 or -errno.
 */
int bf_dev_resize(struct bf_dev *bd, const char *spec, char *msg, size_t len);
/* .sys/DEV/snapshots: one line per snapshot, "NAME created=EPOCH data_bytes=N own_bytes=N". */
int bf_dev_snapshots_show(struct bf_dev *bd, char *buf, size_t len);
/* Does @bd's stack keep snapshots (the ram backend)? */
bool bf_dev_has_snapshots(struct bf_dev *bd);
/*
 * The control file's verbs (fuse/control.c's table): argv[0] is the verb;
 * 0 or -errno, @msg gets the result or the error.
 *   resize DEV SIZE|auto
 *   snapshot DEV SNAP          snapshot -d DEV SNAP (delete)
 *   reset DEV SNAP
 *   save DEV FILE [SNAP]       FILE: an absolute path
 */
int bf_cmd_resize(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_snapshot(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_reset(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_save(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
/* fuse/trace.c: `trace DEV [device|fuse]` (the daemon's side) and `blkfs trace` (the client) */
int bf_cmd_trace(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_trace_client(int argc, char **argv);
/* fuse/statx.c: `blkfs stat` as latency lines, as iostat -x (-i), as Prometheus's text */
void bf_stat_latency(const char *mnt, const char *dev, bool json, bool first_field);
int bf_stat_interval(const char *mnt, const char *dev, double secs, long count);
int bf_stat_prometheus(const char *mnt, const char *dev);

/* devs.c: devices that come and go while mounted */
/*
 * bf_dev_get - the device named @name with a reference (it cannot be freed
 * until bf_dev_put()), NULL if there is none or it is being removed.
 */
struct bf_dev *bf_dev_get(struct bf_daemon *d, const char *name);
void bf_dev_put(struct bf_dev *dev);
/* A reference more on a device one holds (or under d->dev_lock). */
void bf_dev_hold(struct bf_dev *dev);
/* Under dev->ctl_lock: has a remove taken the device away? */
bool bf_dev_removed(const struct bf_dev *dev);
/* Does a command hold @dev's ctl_lock now? (never waits for it) */
bool bf_dev_ctl_held(struct bf_dev *dev);
/* At unmount: the commands still running are given up on (d->ctl_given_up). */
void bf_devs_give_up(struct bf_daemon *d);
bool bf_devs_given_up(struct bf_daemon *d);
/* The device named @name in the table, removing or not; d->dev_lock held. */
struct bf_dev *bf_dev_find_locked(struct bf_daemon *d, const char *name);
/*
 * The @n-th device of the table (0 <= @n < d->nr_devs), in slot order: for
 * the final writeback, when no device comes or goes any more.
 */
struct bf_dev *bf_dev_nth(struct bf_daemon *d, int n);
/* The device whose file is inode @ino; d->dev_lock held. */
struct bf_dev *bf_dev_of_ino_locked(struct bf_daemon *d, uint64_t ino);
/*
 * bf_dev_create - a device of the config @c (@cd one of its devices, or
 * an added device's own): its stack opened, its geometry checked, its
 * owner resolved; with a cache (d->pc), put behind it with its request
 * slots and its .sys subtree built (bf_dev_attach). Not published. Returns the device or
 * ERR_PTR(-errno) with @err set ("FILE:LINE: KEY: message").
 */
struct bf_dev *bf_dev_create(struct bf_daemon *d, const struct conf *c, struct conf_device *cd,
			     char *err, size_t errlen);
/* Put a device created before the cache existed behind it (as bf_dev_create does after). */
int bf_dev_attach(struct bf_daemon *d, struct bf_dev *bd, char *err, size_t errlen);
/* Publish @bd in a free slot (0 or -ENOSPC). */
int bf_dev_publish(struct bf_daemon *d, struct bf_dev *bd);
/* Close and free a device that no request uses any more (an unpublished one, or at exit). */
void bf_dev_destroy(struct bf_dev *bd);
void bf_devs_locks_init(struct bf_daemon *d);
/* The control file's `add` and `remove` (control.h's bf_cmd_fn). */
int bf_cmd_add(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
int bf_cmd_remove(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len);
/* daemon.c: a simulated power cut of the device (blk_host.drop_volatile) */
void bf_dev_drop_volatile(void *ctx);
/* live.c: the storage's size changed outside (blk_host.size_changed): resize auto */
void bf_dev_size_changed(void *ctx);
/* daemon.c: the kernel forgets a name: inval_entry (added) or delete (removed, @child) */
void bf_notify_entry(struct bf_daemon *d, uint64_t parent, uint64_t child, const char *name);

/* sysfs.c; the _locked functions with d->dev_lock held (shared is enough) */
/* The fixed nodes: .sys, .sys/.transport, .sys/control. */
int bf_sys_build(struct bf_daemon *d);
/* @bd's subtree .sys/NAME/..., before it is published. */
int bf_sys_build_dev(struct bf_daemon *d, struct bf_dev *bd);
uint64_t bf_sys_root_ino(const struct bf_daemon *d);
struct bf_node *bf_sys_node_locked(struct bf_daemon *d, uint64_t ino);
struct bf_node *bf_sys_lookup_locked(struct bf_daemon *d, uint64_t parent, const char *name);
/*
 * The child of directory @parent at position *@pos or the first after it
 * (readdir order; positions stay where they are when devices come and
 * go), *@pos set to its position; NULL at the end.
 */
struct bf_node *bf_sys_next_locked(struct bf_daemon *d, uint64_t parent, uint64_t *pos);
bool bf_sys_writable(const struct bf_node *n);
/* Show and store: the caller holds a reference on n->dev when there is one. */
int bf_sys_show(struct bf_node *n, char *buf, size_t len);
int bf_sys_store(struct bf_node *n, const char *buf, size_t len);

/* loop.c */
/* `blkfs attach MNT DEV` and `blkfs detach /dev/loopN | MNT DEV`: exit codes. */
int bf_cmd_attach(int argc, char **argv);
int bf_cmd_detach(int argc, char **argv);
/*
 * bf_io_flusher - PR_SET_IO_FLUSHER for the calling thread and every thread
 * it creates later (call before the daemon's threads start); warns once
 * when the kernel refuses (it needs CAP_SYS_RESOURCE).
 */
void bf_io_flusher(void);

#endif
