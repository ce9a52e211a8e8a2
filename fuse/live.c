/* SPDX-License-Identifier: MIT */
/*
 * fuse/live.c - a mount that changes while it serves: a device's size
 * (bf_dev_resize: `blkfs resize`, a write to .sys/DEV/size) and the
 * snapshots of a ram device (`blkfs snapshot`, `reset`, `snapshot -d`,
 * `save`; .sys/DEV/snapshots).
 *
 * What each one holds, in this order (the device's ctl_lock, then
 * live_lock, are taken first: one such operation runs per device at a
 * time, never beside a remove's final writeback; see live_take()):
 *  - resize, snapshot, reset: the device's requests (bf_slots_freeze(): new
 *    ones wait for a slot, those in flight are answered first), so no I/O
 *    is in flight in any layer below while the stack changes; then the
 *    cache's dirty data is written back and flushed (reset drops it
 *    instead: the contents it belongs to are going). The kernel is told
 *    after the requests are released: an invalidation of the file's page
 *    cache may make it write dirty mmap pages (or, with kernel_cache =
 *    writeback, its own dirty pages) through this daemon first, which
 *    needs the device to serve.
 *  - save, delete: nothing of the device's I/O (the backend takes the
 *    contents at one instant); save writes back first, so what the users
 *    wrote before the command is in the image.
 * A command runs in a thread of its own (control.c), a store to
 * .sys/DEV/size in the request thread that received it over /dev/fuse and
 * in an off-queue thread over the ring (bf_rawio_offqueue()): the waits
 * are for other threads' work (the answers to requests in flight,
 * writeback I/O, the requests the kernel sends while it is told), never
 * for a request of the waiting thread's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "bf.h"
#include "devtab.h"
#include "live.h"
#include "mnt.h"
#include "notify.h"
#include "slots.h"

/* How long requests in flight may take to end before a freeze gives up. */
#define BF_FREEZE_TIMEOUT_MS 10000

#define MSG(...) snprintf(msg, len, __VA_ARGS__)

/* Milliseconds since @t0 (blk_now_ns()), to the microsecond (the messages print "%.3f ms"). */
static double ms_since(uint64_t t0)
{
	return (double)(blk_now_ns() - t0) / 1e6;
}

/*
 * Take the device for one of these operations: its ctl_lock first (a
 * remove holds it through its final writeback, so neither runs on a device
 * the other is changing), then live_lock. -ENOENT when a remove got there
 * first.
 */
static int live_take(struct bf_dev *bd, const char *what, char *msg, size_t len)
{
	pthread_mutex_lock(&bd->ctl_lock);
	if (bf_dev_removed(bd)) {
		pthread_mutex_unlock(&bd->ctl_lock);
		MSG("%s: %s: the device has been removed", bd->cd->name, what);
		return -ENOENT;
	}
	pthread_mutex_lock(&bd->live_lock);
	return 0;
}

static void live_release(struct bf_dev *bd)
{
	pthread_mutex_unlock(&bd->live_lock);
	pthread_mutex_unlock(&bd->ctl_lock);
}

static int freeze(struct bf_dev *bd, const char *what, char *msg, size_t len)
{
	int ret = bf_slots_freeze(&bd->slots, BF_FREEZE_TIMEOUT_MS);

	if (ret)
		MSG("%s: %s: requests in flight did not end within %u s (a hung or very slow "
		    "backend?); nothing changed", bd->cd->name, what, BF_FREEZE_TIMEOUT_MS / 1000);
	return ret ? -EBUSY : 0;
}

/*
 * Write back and flush everything dirty, wait for writeback in flight.
 * An error that was there before (nobody had seen it) is reported by the
 * first fsync and marked seen: the second says whether this one failed.
 */
static int writeback(struct bf_dev *bd, const char *what, char *msg, size_t len)
{
	pc_errseq_t since = pc_errseq_sample(bd->pc);
	struct pc_stats st;
	int ret;

	ret = pc_fsync(bd->pc, &since);
	if (ret) {
		since = pc_errseq_sample(bd->pc);
		ret = pc_fsync(bd->pc, &since);
	}
	pc_dev_stats(bd->pc, &st);
	if (!ret && (st.dirty_bytes || st.writeback_bytes))
		ret = -EIO;
	if (ret)
		MSG("%s: %s: the device's dirty data could not be written back (%s; %llu bytes "
		    "dirty); nothing changed", bd->cd->name, what, strerror(-ret),
		    (unsigned long long)(st.dirty_bytes + st.writeback_bytes));
	return ret;
}

/* The kernel's cached attributes of the file (and its pages in [@off, end), @off >= 0). */
static void tell_kernel(struct bf_dev *bd, off_t off)
{
	int ret = bf_notify_inval_inode(bd->d, bd->ino, off, 0);

	/* -ENOENT: the kernel has no inode for the file cached; nothing to tell */
	if (ret && ret != -ENOENT)
		blk_warn("%s: cannot tell the kernel that the file changed: %s", bd->cd->name,
			 strerror(-ret));
}

/*
 * With kernel_cache = writeback the kernel holds dirty pages of the file
 * that blkfs has not seen: invalidating its page cache makes it write them
 * through this daemon first. Over the ring too: the commands that call
 * this run in a thread of their own, never a queue's (bf_rawio_offqueue()).
 */
static void kernel_writeback_pages(struct bf_dev *bd)
{
	if (bd->d->conf.mount.kernel_writeback)
		tell_kernel(bd, 0);
}

/*
 * The kernel learns a larger size at once from a store of the file's last
 * page (its true contents), which moves its i_size up in the same write;
 * that also holds with kernel_cache = writeback, where the kernel takes no
 * size from GETATTR. The page is invalidated first, so that a dirty copy
 * of it in the kernel (a shared mapping of the old last page, when the old
 * size ends inside it) is written back before its contents are read here,
 * not overwritten by the store; and again after, so the page cache keeps
 * nothing this daemon does not see written.
 */
static void tell_kernel_grow(struct bf_dev *bd, uint64_t size)
{
	uint64_t pos = (size - 1) & ~(uint64_t)4095;
	size_t n = (size_t)(size - pos);
	char *buf;
	ssize_t r;
	int ret;

	if (!bd->d->se)
		return;
	buf = malloc(n);
	if (!buf)
		goto out_attr;
	ret = bf_notify_inval_inode(bd->d, bd->ino, (off_t)pos, (off_t)n);
	if (ret && ret != -ENOENT) {
		free(buf);
		goto out_attr;
	}
	r = pc_read(bd->pc, buf, n, pos);
	if (r != (ssize_t)n) {
		free(buf);
		goto out_attr;
	}
	ret = bf_notify_store(bd->d, bd->ino, (off_t)pos, buf, n);
	free(buf);
	if (ret && ret != -ENOENT)
		blk_warn("%s: cannot tell the kernel the new size: %s", bd->cd->name,
			 strerror(-ret));
	if (!ret)
		bf_notify_inval_inode(bd->d, bd->ino, (off_t)pos, (off_t)n);
out_attr:
	tell_kernel(bd, -1);
}

/* Loop devices on @bd's file larger than @size: their names into @who; the count. */
static int loops_larger(struct bf_dev *bd, uint64_t size, char *who, size_t wlen)
{
	char devs[16][32], path[PATH_MAX];
	int n, i, found = 0;
	size_t used = 0;

	if (snprintf(path, sizeof(path), "%s/%s", bd->d->mnt, bd->cd->name) >= (int)sizeof(path))
		return 0;
	n = bf_loops_over(path, true, devs, 16, NULL);
	who[0] = 0;
	for (i = 0; i < n; i++) {
		char sys[128];
		unsigned long long sectors = 0;
		FILE *f;

		snprintf(sys, sizeof(sys), "/sys/block/%s/size", devs[i] + 5);
		f = fopen(sys, "r");
		if (f) {
			if (fscanf(f, "%llu", &sectors) != 1)
				sectors = ~0ULL / 512;	/* unreadable: assume it covers all */
			fclose(f);
		} else {
			sectors = ~0ULL / 512;
		}
		if (sectors * 512 <= size)
			continue;
		used += (size_t)snprintf(who + used, wlen - used, "%s%s (%llu bytes)",
					 found ? ", " : "", devs[i], sectors * 512);
		if (used >= wlen)
			used = wlen - 1;
		found++;
	}
	return found;
}

static int parse_spec(const char *spec, uint64_t *size)
{
	if (!strcmp(spec, "auto")) {
		*size = 0;
		return 0;
	}
	if (blk_parse_size(spec, size) || !*size)
		return -EINVAL;
	return 0;
}

int bf_dev_resize(struct bf_dev *bd, const char *spec, char *msg, size_t len)
{
	const char *name = bd->cd->name;
	uint64_t old, want, size;
	uint64_t t0;
	char who[512];
	int ret;

	t0 = blk_now_ns();
	if (parse_spec(spec, &want)) {
		MSG("%s: resize: '%s' is not a size (allowed: bytes with an optional K, M, G or "
		    "T suffix, such as 2G, or auto)", name, spec);
		return -EINVAL;
	}
	if (bd->d->conf.mount.read_only) {
		MSG("%s: resize: the mount is read-only", name);
		return -EROFS;
	}
	if (want % bd->cblk) {
		MSG("%s: resize: %llu is not a multiple of the device's cache block (%u bytes; "
		    "logical block %u); nothing changed", name, (unsigned long long)want,
		    bd->cblk, bd->geo.lbs);
		return -EINVAL;
	}
	ret = live_take(bd, "resize", msg, len);
	if (ret)
		return ret;
	old = bf_dev_size(bd);
	if (want && want < old && bd->d->conf.mount.kernel_writeback) {
		MSG("%s: resize: cannot shrink with kernel_cache = writeback: the kernel keeps "
		    "its own size of the file and only ever takes a larger one (remount without "
		    "it to shrink); nothing changed", name);
		ret = -EOPNOTSUPP;
		goto out_unlock;
	}
	if (want && want < old && loops_larger(bd, want, who, sizeof(who))) {
		MSG("%s: resize: %s sits on the file and is larger than %llu bytes: a shrink "
		    "would cut its end off under it (detach it, or make it smaller first); "
		    "nothing changed", name, who, (unsigned long long)want);
		ret = -EBUSY;
		goto out_unlock;
	}
	ret = freeze(bd, "resize", msg, len);
	if (ret)
		goto out_unlock;
	ret = writeback(bd, "resize", msg, len);
	if (ret)
		goto out_thaw;
	size = want;
	ret = blk_resize(bd->be, &size);
	if (!ret && size % bd->cblk) {
		/* auto: the storage's size, cut to whole cache blocks */
		uint64_t cut = size / bd->cblk * bd->cblk;

		ret = cut >= old ? blk_resize(bd->be, &cut) : -EOPNOTSUPP;
		if (!ret)
			size = cut;
	}
	if (ret) {
		switch (ret) {
		case -EOPNOTSUPP:
			if (!bd->be->ops->resize && bd->be->ops->is_filter)
				MSG("%s: resize: a layer of the device's stack cannot change size", name);
			else
				MSG("%s: resize: the %s backend cannot %s (%s)", name, bd->cd->ops->name,
				    want ? (want < old ? "shrink" : "take that size") : "find a new size",
				    !strcmp(bd->cd->ops->name, "aio") ?
				    "aio grows an image file and takes a grown disk's size; it never shrinks" :
				    !strcmp(bd->cd->ops->name, "nbd") ?
				    "the export's size is the server's: resize NAME auto reads it" :
				    "see blkfs(1)");
			break;
		case -EBUSY:
			MSG("%s: resize: refused while the device has snapshots (they hold the "
			    "data a shrink would drop: delete them first) or a simulated power "
			    "cut is under way; nothing changed", name);
			break;
		case -EINVAL:
			MSG("%s: resize: %s", name, want ? "not a size the backend takes" :
			    "the ram backend has no size of its own to pick up: give a size");
			break;
		case -ENOSPC:
			MSG("%s: resize: the block device under it is smaller than %llu bytes", name,
			    (unsigned long long)want);
			break;
		default:
			MSG("%s: resize: %s (see the daemon log)", name, strerror(-ret));
		}
		goto out_thaw;
	}
	if (size != old) {
		ret = pc_dev_set_size(bd->pc, size);
		if (ret) {
			/* checked above: a multiple of the cache block; put the stack back */
			uint64_t back = old;

			blk_resize(bd->be, &back);
			MSG("%s: resize: the cache cannot take %llu bytes", name,
			    (unsigned long long)size);
			goto out_thaw;
		}
		__atomic_store_n(&bd->geo.size, size, __ATOMIC_RELAXED);
	}
	bf_slots_thaw(&bd->slots);
	if (size > old)
		tell_kernel_grow(bd, size);
	else if (size < old)
		tell_kernel(bd, (off_t)(size & ~(uint64_t)4095));
	live_release(bd);
	MSG("%s: %llu -> %llu bytes (%.3f ms)", name, (unsigned long long)old,
	    (unsigned long long)size, ms_since(t0));
	blk_info("%s", msg);
	return 0;

out_thaw:
	bf_slots_thaw(&bd->slots);
out_unlock:
	live_release(bd);
	return ret;
}

/* ---------------------------------------------------------- snapshots */

bool bf_dev_has_snapshots(struct bf_dev *bd)
{
	return blk_snap_list(bd->be, NULL, 0) >= 0;
}

int bf_dev_snapshots_show(struct bf_dev *bd, char *buf, size_t len)
{
	struct blk_snap_info *v;
	size_t used = 0;
	int n, i;

	v = calloc(BLK_SNAP_MAX, sizeof(*v));
	if (!v)
		return -ENOMEM;
	n = blk_snap_list(bd->be, v, BLK_SNAP_MAX);
	for (i = 0; i < n && i < BLK_SNAP_MAX && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used,
					 "%s created=%llu data_bytes=%llu own_bytes=%llu\n",
					 v[i].name, (unsigned long long)v[i].created,
					 (unsigned long long)v[i].data_bytes,
					 (unsigned long long)v[i].own_bytes);
	free(v);
	if (n < 0)
		return n;
	return (int)(used < len ? used : len);
}

/* The snapshot calls need a stack that keeps them: EOPNOTSUPP with the reason. */
static int need_snapshots(struct bf_dev *bd, const char *verb, char *msg, size_t len)
{
	if (bf_dev_has_snapshots(bd))
		return 0;
	MSG("%s: %s: the %s backend keeps no snapshots (ram and rbd do)", bd->cd->name, verb,
	    bd->cd->ops->name);
	return -EOPNOTSUPP;
}

static void snap_errmsg(struct bf_dev *bd, const char *verb, const char *snap, int err,
			char *msg, size_t len)
{
	const char *name = bd->cd->name;

	switch (err) {
	case -EINVAL:
		MSG("%s: %s: '%s' is not a snapshot name (1 to %d letters, digits, '.', '_', "
		    "'-', '+', '@', ':', not starting with '.' or '-')", name, verb, snap,
		    BLK_SNAP_NAME_MAX);
		break;
	case -EEXIST:
		MSG("%s: %s: a snapshot named %s exists", name, verb, snap);
		break;
	case -ENOENT:
		MSG("%s: %s: no snapshot named %s", name, verb, snap);
		break;
	case -EMLINK:
		MSG("%s: %s: the device holds %d snapshots, the most it may", name, verb,
		    BLK_SNAP_MAX);
		break;
	case -EBUSY:
		MSG("%s: %s: a layer of the stack is busy (a simulated power cut under way?)",
		    name, verb);
		break;
	case -EOPNOTSUPP:
		MSG("%s: %s: the %s backend cannot do this (%s)", name, verb, bd->cd->ops->name,
		    strerror(EOPNOTSUPP));
		break;
	default:
		MSG("%s: %s %s: %s", name, verb, snap, strerror(-err));
	}
}

static int snap_create(struct bf_dev *bd, const char *snap, char *msg, size_t len)
{
	uint64_t t0;
	int ret;

	t0 = blk_now_ns();
	if (!blk_snap_name_valid(snap)) {
		snap_errmsg(bd, "snapshot", snap, -EINVAL, msg, len);
		return -EINVAL;
	}
	ret = live_take(bd, "snapshot", msg, len);
	if (ret)
		return ret;
	kernel_writeback_pages(bd);
	ret = freeze(bd, "snapshot", msg, len);
	if (ret)
		goto out_unlock;
	/* what the users wrote is on the device, and nothing new comes meanwhile */
	ret = writeback(bd, "snapshot", msg, len);
	if (!ret) {
		ret = blk_snap_create(bd->be, snap);
		if (ret)
			snap_errmsg(bd, "snapshot", snap, ret, msg, len);
	}
	bf_slots_thaw(&bd->slots);
	if (!ret) {
		MSG("%s: snapshot %s taken (%.3f ms)", bd->cd->name, snap,
		    ms_since(t0));
		blk_info("%s", msg);
	}
out_unlock:
	live_release(bd);
	return ret;
}

static int snap_delete(struct bf_dev *bd, const char *snap, char *msg, size_t len)
{
	int ret = blk_snap_destroy(bd->be, snap);

	if (ret) {
		snap_errmsg(bd, "snapshot -d", snap, ret, msg, len);
		return ret;
	}
	MSG("%s: snapshot %s deleted", bd->cd->name, snap);
	blk_info("%s", msg);
	return 0;
}

/*
 * Reset: the contents the cache and the kernel describe are going. The
 * cache's dirty data is dropped (counted in dropped_bytes), writeback
 * already in flight ends (an fsync with nothing dirty waits for it and
 * flushes), so no I/O is anywhere in the stack when it resets (powerloss
 * drops its journal); then what is cached of the old contents, clean or
 * not, goes, blkfs's and the kernel's.
 */
static int snap_reset(struct bf_dev *bd, const char *snap, char *msg, size_t len)
{
	pc_errseq_t since;
	uint64_t t0;
	int ret;

	t0 = blk_now_ns();
	if (!blk_snap_name_valid(snap)) {
		snap_errmsg(bd, "reset", snap, -EINVAL, msg, len);
		return -EINVAL;
	}
	if (bd->d->conf.mount.read_only) {
		MSG("%s: reset: the mount is read-only: the device's contents cannot change",
		    bd->cd->name);
		return -EROFS;
	}
	ret = live_take(bd, "reset", msg, len);
	if (ret)
		return ret;
	/* refused before anything is dropped: the name must exist */
	{
		struct blk_snap_info *v = calloc(BLK_SNAP_MAX, sizeof(*v));
		int n, i;

		if (!v) {
			ret = -ENOMEM;
			MSG("%s: reset: out of memory", bd->cd->name);
			goto out_unlock;
		}
		n = blk_snap_list(bd->be, v, BLK_SNAP_MAX);
		for (i = 0; i < n && strcmp(v[i].name, snap); i++)
			;
		free(v);
		if (n < 0 || i == n) {
			ret = n < 0 ? n : -ENOENT;
			snap_errmsg(bd, "reset", snap, ret, msg, len);
			goto out_unlock;
		}
	}
	kernel_writeback_pages(bd);	/* they come down, and are dropped below */
	ret = freeze(bd, "reset", msg, len);
	if (ret)
		goto out_unlock;
	pc_dev_drop_all(bd->pc);
	since = pc_errseq_sample(bd->pc);
	(void)pc_fsync(bd->pc, &since);	/* waits for writeback in flight; errors concern the old contents */
	ret = blk_snap_reset(bd->be, snap);
	/* the old contents are gone or not: nothing cached may describe them either way */
	pc_dev_drop_all(bd->pc);
	bf_slots_thaw(&bd->slots);
	tell_kernel(bd, 0);
	if (ret) {
		snap_errmsg(bd, "reset", snap, ret, msg, len);
		goto out_unlock;
	}
	MSG("%s: reset to %s (%.3f ms)", bd->cd->name, snap, ms_since(t0));
	blk_info("%s", msg);
out_unlock:
	live_release(bd);
	return ret;
}

static int dev_save(struct bf_dev *bd, const char *path, const char *snap, char *msg,
		    size_t len)
{
	uint64_t t0;
	int ret;

	t0 = blk_now_ns();
	if (path[0] != '/') {
		MSG("%s: save: %s: the image's path must be absolute (the daemon's working "
		    "directory is not the caller's)", bd->cd->name, path);
		return -EINVAL;
	}
	if (snap && !blk_snap_name_valid(snap)) {
		snap_errmsg(bd, "save", snap, -EINVAL, msg, len);
		return -EINVAL;
	}
	ret = live_take(bd, "save", msg, len);
	if (ret)
		return ret;
	if (!snap) {
		kernel_writeback_pages(bd);
		ret = writeback(bd, "save", msg, len);
		if (ret)
			goto out_unlock;
	}
	ret = blk_snap_save(bd->be, snap, path);
	if (ret) {
		if (ret == -ENOENT || ret == -EOPNOTSUPP || (ret == -EINVAL && snap))
			snap_errmsg(bd, "save", snap ? snap : "", ret, msg, len);
		else
			MSG("%s: save %s: %s (see the daemon log)", bd->cd->name, path,
			    strerror(-ret));
		goto out_unlock;
	}
	MSG("%s: %s saved to %s (%.3f ms)", bd->cd->name, snap ? snap : "the device", path,
	    ms_since(t0));
	blk_info("%s", msg);
out_unlock:
	live_release(bd);
	return ret;
}

/* ------------------------------------------------------ control verbs */

static struct bf_dev *dev_arg(struct bf_daemon *d, const char *verb, const char *name,
			      char *msg, size_t len)
{
	struct bf_dev *bd = bf_dev_get(d, name);

	if (!bd)
		MSG("%s: no device named %s", verb, name);
	return bd;
}

/*
 * blk_host.size_changed: the storage's size changed outside blkfs (an
 * `rbd resize` by another client). Called on a backend's thread, which
 * must not wait for the device's I/O: a detached thread of ours takes the
 * device by name (a device being removed is left alone) and takes the
 * storage's size (outside_resize()).
 */
struct size_job {
	struct bf_daemon *d;
	char name[256];
};

/*
 * Take a size the storage already has. Unlike `resize auto` nothing is
 * written back first: after a shrink the data past the new end is gone
 * from the storage, and what the cache holds dirty there can be written
 * nowhere (the writeback would fail, and the resize with it, leaving the
 * file larger than the device for good). It is dropped instead, counted
 * in dropped_bytes and said in the log. Dirty data before the new end
 * stays dirty and is written back as usual.
 */
static int outside_resize(struct bf_dev *bd, char *msg, size_t len)
{
	const char *name = bd->cd->name;
	uint64_t old, size = 0, cut, dropped = 0;
	uint64_t t0;
	char who[512];
	int ret;

	t0 = blk_now_ns();
	ret = live_take(bd, "resize", msg, len);
	if (ret)
		return ret;
	old = bf_dev_size(bd);
	ret = freeze(bd, "resize", msg, len);
	if (ret)
		goto out_unlock;
	ret = blk_resize(bd->be, &size);
	if (ret) {
		MSG("%s: resize: reading the storage's new size: %s", name, strerror(-ret));
		goto out_thaw;
	}
	/* whole cache blocks: a tail of less than one stays unused */
	cut = size / bd->cblk * bd->cblk;
	if (!cut) {
		MSG("%s: resize: the storage is %llu bytes now, less than one cache block (%u): "
		    "the device keeps %llu bytes and its I/O past the end fails", name,
		    (unsigned long long)size, bd->cblk, (unsigned long long)old);
		ret = -EINVAL;
		goto out_thaw;
	}
	if (cut < old) {
		if (bd->d->conf.mount.kernel_writeback)
			blk_warn("%s: shrunk outside blkfs with kernel_cache = writeback: the "
				 "kernel keeps its own larger size of the file", name);
		if (loops_larger(bd, cut, who, sizeof(who)))
			blk_warn("%s: shrunk outside blkfs under %s: its end is gone", name, who);
	}
	if (cut != old) {
		ret = cut < old ? pc_dev_shrink_drop(bd->pc, cut, &dropped) :
				  pc_dev_set_size(bd->pc, cut);
		if (ret) {
			MSG("%s: resize: the cache cannot take %llu bytes", name,
			    (unsigned long long)cut);
			goto out_thaw;
		}
		__atomic_store_n(&bd->geo.size, cut, __ATOMIC_RELAXED);
	}
	bf_slots_thaw(&bd->slots);
	if (cut > old)
		tell_kernel_grow(bd, cut);
	else if (cut < old)
		tell_kernel(bd, (off_t)(cut & ~(uint64_t)4095));
	live_release(bd);
	if (dropped)
		blk_err("%s: the storage shrank outside blkfs to %llu bytes below data not yet "
			"written back: %llu dirty bytes past the new end are lost (dropped_bytes)",
			name, (unsigned long long)size, (unsigned long long)dropped);
	MSG("%s: %llu -> %llu bytes, changed outside blkfs (%.3f ms)", name,
	    (unsigned long long)old, (unsigned long long)cut, ms_since(t0));
	blk_info("%s", msg);
	return 0;

out_thaw:
	bf_slots_thaw(&bd->slots);
out_unlock:
	live_release(bd);
	return ret;
}

static void *size_changed_fn(void *arg)
{
	struct size_job *job = arg;
	struct bf_dev *bd = bf_dev_get(job->d, job->name);
	char msg[512];

	if (bd) {
		if (outside_resize(bd, msg, sizeof(msg)))
			blk_warn("%s: the storage's size changed outside blkfs, and taking it "
				 "failed: %s", job->name, msg);
		bf_dev_put(bd);
	}
	free(job);
	return NULL;
}

void bf_dev_size_changed(void *ctx)
{
	struct bf_dev *bd = ctx;
	struct size_job *job = calloc(1, sizeof(*job));
	pthread_attr_t attr;
	pthread_t t;

	if (!job) {
		blk_err("%s: the storage's size changed outside blkfs; out of memory to take it "
			"(blkfs resize MNT %s auto does)", bd->cd->name, bd->cd->name);
		return;
	}
	job->d = bd->d;
	snprintf(job->name, sizeof(job->name), "%s", bd->cd->name);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, size_changed_fn, job)) {
		blk_err("%s: the storage's size changed outside blkfs; no thread to take it "
			"(blkfs resize MNT %s auto does)", bd->cd->name, bd->cd->name);
		free(job);
	}
	pthread_attr_destroy(&attr);
}

int bf_cmd_resize(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	struct bf_dev *bd;
	int ret;

	if (argc != 3) {
		MSG("usage: resize DEV SIZE|auto");
		return -EINVAL;
	}
	bd = dev_arg(d, "resize", argv[1], msg, len);
	if (!bd)
		return -ENOENT;
	ret = bf_dev_resize(bd, argv[2], msg, len);
	bf_dev_put(bd);
	return ret;
}

int bf_cmd_snapshot(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	bool del = argc == 4 && !strcmp(argv[1], "-d");
	struct bf_dev *bd;
	int ret;

	if (argc != 3 && !del) {
		MSG("usage: snapshot DEV SNAP | snapshot -d DEV SNAP");
		return -EINVAL;
	}
	bd = dev_arg(d, "snapshot", argv[del ? 2 : 1], msg, len);
	if (!bd)
		return -ENOENT;
	ret = need_snapshots(bd, del ? "snapshot -d" : "snapshot", msg, len);
	if (!ret)
		ret = del ? snap_delete(bd, argv[3], msg, len) : snap_create(bd, argv[2], msg, len);
	bf_dev_put(bd);
	return ret;
}

int bf_cmd_reset(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	struct bf_dev *bd;
	int ret;

	if (argc != 3) {
		MSG("usage: reset DEV SNAP");
		return -EINVAL;
	}
	bd = dev_arg(d, "reset", argv[1], msg, len);
	if (!bd)
		return -ENOENT;
	ret = need_snapshots(bd, "reset", msg, len);
	if (!ret)
		ret = snap_reset(bd, argv[2], msg, len);
	bf_dev_put(bd);
	return ret;
}

int bf_cmd_save(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	struct bf_dev *bd;
	int ret;

	if (argc != 3 && argc != 4) {
		MSG("usage: save DEV FILE [SNAP]");
		return -EINVAL;
	}
	bd = dev_arg(d, "save", argv[1], msg, len);
	if (!bd)
		return -ENOENT;
	ret = need_snapshots(bd, "save", msg, len);
	if (!ret)
		ret = dev_save(bd, argv[2], argc == 4 ? argv[3] : NULL, msg, len);
	bf_dev_put(bd);
	return ret;
}

/* ------------------------------------------------- caches above the device */

/*
 * A simulated power cut (the powerloss filter): what is volatile above the
 * device dies. blkfs's cache for the device is dropped without writeback,
 * and the kernel's page cache of the file (kernel_cache = writeback, shared
 * mmap) is invalidated so readers see the device's post-crash state. Called
 * from the filter's trigger and restart, .sys stores: over the ring in an
 * off-queue thread (sys_write()), as the invalidation needs.
 */
void bf_dev_drop_volatile(void *ctx)
{
	struct bf_dev *bd = ctx;

	if (bd->pc)
		pc_dev_drop_all(bd->pc);
	bf_notify_inval_inode(bd->d, bd->ino, 0, 0);
}

void bf_dev_drop_caches(struct bf_dev *bd)
{
	pc_dev_drop_clean(bd->pc);
	bf_notify_inval_inode(bd->d, bd->ino, 0, 0);
}
