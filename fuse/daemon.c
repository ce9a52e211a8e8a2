/* SPDX-License-Identifier: MIT */
/*
 * fuse/daemon.c - the FUSE side of blkfs: libfuse3 low-level operations that
 * present each device as a regular file with block-device semantics (the
 * names, attributes and directories; an open finds what the inode is and
 * calls its kind's open, and each open file's release, reads and writes
 * go to the ops that open chose, file.h: devfile.c, sysfile.c,
 * control.c), the session (multithreaded, 1 MiB requests, direct mode with
 * shared mmap allowed), and the final writeback when the mount goes away.
 * Control commands do not run here: control.c runs each in a thread of
 * its own.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <grp.h>
#include <pwd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../backends/lib/list.h"
#include "../backends/lib/log.h"
#include "../backends/lib/trace.h"
#include "../core/stack.h"
#include "bf.h"
#include "control.h"
#include "daemon.h"
#include "devfile.h"
#include "devtab.h"
#include "file.h"
#include "notify.h"
#include "rawio.h"
#include "shutdown.h"
#include "slots.h"
#include "sysfile.h"
#include "sysfs.h"

#define BF_MIN_BACKGROUND 64	/* async requests the kernel may send at once, at least */
#ifndef BF_MAX_THREADS
#define BF_MAX_THREADS 16	/* FUSE worker threads */
#endif

static struct bf_daemon *bf_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The device of inode @ino; d->dev_lock held. */
static struct bf_dev *dev_of_ino(struct bf_daemon *d, fuse_ino_t ino)
{
	return bf_dev_of_ino_locked(d, ino);
}

/* ----------------------------------------------------------- attributes */

/* Attributes of @ino; d->dev_lock held. Returns false when there is no such inode. */
static bool fill_attr(struct bf_daemon *d, fuse_ino_t ino, struct stat *st)
{
	struct bf_dev *bd = dev_of_ino(d, ino);
	struct bf_node *n = bf_sys_node_locked(d, ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (n && n->ctl) {
		/* the mounter's (root may always write it) */
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = 0;
		st->st_blksize = 4096;
		return true;
	}
	if (n) {
		st->st_mode = n->dir ? S_IFDIR | 0555 : S_IFREG | (bf_sys_writable(n) ? 0644 : 0444);
		st->st_nlink = n->dir ? 2 : 1;
		st->st_size = n->dir ? 0 : 4096;	/* as sysfs: the content is made at open */
		st->st_blksize = 4096;
		return true;
	}
	if (!bd) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		st->st_blksize = 4096;
		return ino == BF_ROOT_INO;
	}
	st->st_mode = S_IFREG | bd->cd->mode;
	st->st_uid = bd->uid;
	st->st_gid = bd->gid;
	st->st_nlink = 1;
	st->st_size = (off_t)bf_dev_size(bd);
	st->st_blocks = (blkcnt_t)(bf_dev_size(bd) / 512);
	/* the block the cache tracks state in: writes of this size never read first */
	st->st_blksize = bd->cblk;
	return true;
}

/* --------------------------------------------------------------- session */

/* Every device's request slots together, as the kernel's u16 allows. */
static unsigned bf_max_background(const struct bf_daemon *d)
{
	uint64_t n = (uint64_t)d->conf.mount.max_pending * (uint64_t)(d->nr_devs ? d->nr_devs : 1);

	return n < BF_MIN_BACKGROUND ? BF_MIN_BACKGROUND : n > 65535 ? 65535 : (unsigned)n;
}

static void bf_init(void *userdata, struct fuse_conn_info *conn)
{
	struct bf_daemon *d = userdata;

	/* reads through splice were ~20x slower here */
	conn->want &= ~(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
			FUSE_CAP_WRITEBACK_CACHE);
	/*
	 * kernel_cache = writeback: the kernel's page cache takes small writes
	 * and sends them on in large requests (4 KiB dd ran ~6x faster here),
	 * at the price of owning the file size (see devfile.c's dev_open).
	 */
	if (d->conf.mount.kernel_writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	/* O_TRUNC reaches open(), which ignores it: a plain `dd of=` keeps the device */
	if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
		conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
	conn->max_write = BF_MAX_WRITE;
	conn->max_read = 0;
	/*
	 * The kernel holds back asynchronous requests (libaio O_DIRECT, readahead)
	 * past max_background for the whole mount: sized to every device's
	 * slots together, so that requests parked on one slow device never
	 * keep another's waiting in the kernel. Counted at INIT: devices added
	 * later (blkfs add) share what the mount's config asked for.
	 */
	conn->max_background = bf_max_background(d);
	conn->congestion_threshold = conn->max_background * 3 / 4;
}

static void bf_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct bf_daemon *d = bf_of(req);
	struct fuse_entry_param e;
	struct bf_node *n;
	int i, err = ENOENT;

	memset(&e, 0, sizeof(e));
	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_lookup_locked(d, parent, name);
	if (n) {
		e.ino = n->ino;
	} else if (parent != BF_ROOT_INO) {
		/* a device file is no directory; a directory gone with its device has nothing */
		err = dev_of_ino(d, parent) ? ENOTDIR : ENOENT;
	} else {
		for (i = 0; i < PC_MAX_DEVS; i++) {
			if (d->devs[i] && !strcmp(name, d->devs[i]->cd->name)) {
				e.ino = d->devs[i]->ino;
				break;
			}
		}
	}
	if (e.ino) {
		e.attr_timeout = BF_TIMEOUT;
		e.entry_timeout = BF_TIMEOUT;
		fill_attr(d, e.ino, &e.attr);
	}
	pthread_rwlock_unlock(&d->dev_lock);
	if (e.ino)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, err);
}

static void bf_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	struct stat st;
	bool ok;

	(void)fi;
	pthread_rwlock_rdlock(&d->dev_lock);
	ok = fill_attr(d, ino, &st);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!ok)
		fuse_reply_err(req, ENOENT);	/* a removed device the kernel still knows */
	else
		fuse_reply_attr(req, &st, BF_TIMEOUT);
}

/*
 * A device has the size it has: truncate to that size succeeds and changes
 * nothing, any other size is EINVAL. Times may be set (touch works) and are
 * not kept; owner and mode belong to the config.
 */
static void bf_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	int err = 0;

	if (to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		struct bf_dev *bd;
		struct bf_node *n;

		pthread_rwlock_rdlock(&d->dev_lock);
		bd = dev_of_ino(d, ino);
		n = bf_sys_node_locked(d, ino);
		/* `echo x > attr` without O_TRUNC reaching open: nothing to cut */
		if (!(n && !n->dir)) {
			if (!bd)
				err = n || ino == BF_ROOT_INO ? EISDIR : ENOENT;
			else if ((uint64_t)attr->st_size != bf_dev_size(bd))
				err = EINVAL;
		}
		pthread_rwlock_unlock(&d->dev_lock);
		if (err) {
			fuse_reply_err(req, err);
			return;
		}
	}
	bf_getattr(req, ino, fi);
}

/*
 * What the inode is, under dev_lock, then its kind's open (file.h): a
 * device file (devfile.c), a .sys attribute or directory (sysfile.c), the
 * control file (control.c).
 */
static void bf_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	const struct bf_file_ops *ops = NULL;
	struct bf_inode in = { 0 };
	int err = 0;

	pthread_rwlock_rdlock(&d->dev_lock);
	in.node = bf_sys_node_locked(d, ino);
	if (in.node) {
		if (in.node->dev)
			bf_dev_hold(in.node->dev);	/* its nodes live as long as it does */
		ops = in.node->ctl ? &bf_ctl_fops : &bf_sys_fops;
	} else {
		in.dev = dev_of_ino(d, ino);
		if (in.dev && in.dev->removing) {
			err = -EBUSY;		/* remove is writing it back */
		} else if (in.dev) {
			/* under dev_lock: remove checks opens with it held exclusive */
			bf_dev_hold(in.dev);
			__atomic_add_fetch(&in.dev->opens, 1, __ATOMIC_RELAXED);
			ops = &bf_dev_fops;	/* which takes both over */
		} else {
			err = ino == BF_ROOT_INO ? -EISDIR : -ENOENT;
		}
	}
	pthread_rwlock_unlock(&d->dev_lock);
	if (!err)
		err = ops->open(req, &in, fi);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_open(req, fi);
	if (in.node && in.node->dev)
		bf_dev_put(in.node->dev);
}

static void bf_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_file *f = bf_file_of(fi);

	(void)ino;
	f->ops->release(f);
	fuse_reply_err(req, 0);
}

/*
 * Reads, writes, fsyncs, fallocates: the file's own ops (file.h), chosen at
 * open. What every kind checks alike is checked here.
 */
static void bf_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)ino;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	bf_file_of(fi)->ops->read(req, bf_file_of(fi), size, off);
}

static void bf_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	(void)ino;
	buf = bf_rawio_write_data(buf);
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	bf_file_of(fi)->ops->write(req, bf_file_of(fi), buf, size, off, fi);
}

static void bf_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	(void)ino;
	(void)datasync;
	bf_file_of(fi)->ops->fsync(req, bf_file_of(fi));
}

static void bf_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
			 struct fuse_file_info *fi)
{
	(void)ino;
	bf_file_of(fi)->ops->fallocate(req, bf_file_of(fi), mode, off, len);
}

static void bf_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static void bf_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	struct bf_node *n;
	bool dir;

	pthread_rwlock_rdlock(&d->dev_lock);
	n = bf_sys_node_locked(d, ino);
	dir = ino == BF_ROOT_INO || (n && n->dir);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!dir) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	fuse_reply_open(req, fi);
}

/*
 * Offsets: 1 after ".", 2 after "..", then 3 + the position of the entry
 * (a slot for a device, bf_sys_next_locked()'s position in .sys): an entry
 * keeps its offset while others come and go, so a listing read in several
 * calls neither repeats nor skips a device that stays.
 */
static void bf_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct bf_daemon *d = bf_of(req);
	size_t used = 0, cap = size < 65536 ? size : 65536;
	struct bf_node *self = NULL;
	uint64_t pos;
	struct stat st;
	size_t need;
	char *buf;
	off_t i;

	(void)fi;
	if (off < 0) {		/* the kernel sends back only offsets we gave */
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(cap ? cap : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_rwlock_rdlock(&d->dev_lock);
	if (ino != BF_ROOT_INO) {
		self = bf_sys_node_locked(d, ino);
		if (!self || !self->dir)
			goto out_unlock;	/* gone with its device: empty */
	}
	for (i = off; i < 2; i++) {
		fill_attr(d, i == 0 || !self ? ino : self->parent, &st);
		need = fuse_add_direntry(req, buf + used, cap - used, i == 0 ? "." : "..", &st,
					 i + 1);
		if (need > cap - used)
			goto out_unlock;
		used += need;
	}
	pos = (uint64_t)(off > 2 ? off - 2 : 0);
	for (;;) {
		const char *name;
		fuse_ino_t child;

		if (self) {
			struct bf_node *c = bf_sys_next_locked(d, ino, &pos);

			if (!c)
				break;
			name = c->name;
			child = c->ino;
		} else {
			/* the root lists the devices; .sys is found by name only */
			while (pos < PC_MAX_DEVS && !d->devs[pos])
				pos++;
			if (pos >= PC_MAX_DEVS)
				break;
			name = d->devs[pos]->cd->name;
			child = d->devs[pos]->ino;
		}
		fill_attr(d, child, &st);
		need = fuse_add_direntry(req, buf + used, cap - used, name, &st, (off_t)pos + 3);
		if (need > cap - used)
			break;
		used += need;
		pos++;
	}
out_unlock:
	pthread_rwlock_unlock(&d->dev_lock);
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void bf_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct bf_daemon *d = bf_of(req);
	struct statvfs sv;
	uint64_t total = 0;
	int i;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	pthread_rwlock_rdlock(&d->dev_lock);
	for (i = 0; i < PC_MAX_DEVS; i++)
		if (d->devs[i])
			total += bf_dev_size(d->devs[i]);
	sv.f_files = (fsfilcnt_t)d->nr_devs + 1;
	pthread_rwlock_unlock(&d->dev_lock);
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = total / 4096;
	sv.f_namemax = CONF_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* Names are the config's: nothing is created, removed or renamed. */
static void bf_mknod(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t r)
{
	(void)p; (void)n; (void)m; (void)r;
	fuse_reply_err(req, EPERM);
}

static void bf_mkdir(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m)
{
	(void)p; (void)n; (void)m;
	fuse_reply_err(req, EPERM);
}

static void bf_unlink(fuse_req_t req, fuse_ino_t p, const char *n)
{
	(void)p; (void)n;
	fuse_reply_err(req, EPERM);
}

static void bf_symlink(fuse_req_t req, const char *l, fuse_ino_t p, const char *n)
{
	(void)l; (void)p; (void)n;
	fuse_reply_err(req, EPERM);
}

static void bf_rename(fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np,
		      const char *nn, unsigned int flags)
{
	(void)p; (void)n; (void)np; (void)nn; (void)flags;
	fuse_reply_err(req, EPERM);
}

static void bf_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t np, const char *nn)
{
	(void)ino; (void)np; (void)nn;
	fuse_reply_err(req, EPERM);
}

static void bf_create(fuse_req_t req, fuse_ino_t p, const char *n, mode_t m,
		      struct fuse_file_info *fi)
{
	(void)p; (void)n; (void)m; (void)fi;
	fuse_reply_err(req, EPERM);
}

static const struct fuse_lowlevel_ops bf_ops = {
	.init = bf_init,
	.lookup = bf_lookup,
	.getattr = bf_getattr,
	.setattr = bf_setattr,
	.open = bf_open,
	.release = bf_release,
	.read = bf_read,
	.write = bf_write,
	.fsync = bf_fsync,
	.flush = bf_flush,
	.fallocate = bf_fallocate,
	.opendir = bf_opendir,
	.readdir = bf_readdir,
	.statfs = bf_statfs,
	.mknod = bf_mknod,
	.mkdir = bf_mkdir,
	.rmdir = bf_unlink,
	.unlink = bf_unlink,
	.symlink = bf_symlink,
	.rename = bf_rename,
	.link = bf_link,
	.create = bf_create,
};

/* ------------------------------------------------------------- serving */

/* fsname= as a FUSE option: its commas and backslashes escaped (fuse_opt's rule). */
static void fsname_opt(const char *name, char *out, size_t len)
{
	size_t o = 0;

	for (; *name && o + 3 < len; name++) {
		if (*name == ',' || *name == '\\')
			out[o++] = '\\';
		out[o++] = *name;
	}
	out[o] = 0;
}

int bf_serve(struct bf_daemon *d, char *status, size_t statuslen)
{
	char opts[2048], fsname[2 * PATH_MAX], why[1024];
	char *argv[] = { "blkfs", "-o", opts, NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse_loop_config *lc;
	struct fuse_session *se;
	struct bf_final *fin;
	bool cmds_done;
	int dummy, ret, code = 0;

	/*
	 * The source is the config's absolute path, so `mount -a` and findmnt
	 * see an fstab line's mount as mounted. Private to the mounting user
	 * unless allow_other (config or mount option); then the kernel checks
	 * each file's mode and owner (default_permissions).
	 */
	ret = bf_ctl_init();
	if (ret) {
		fprintf(stderr, "blkfs: cannot set up the control file: %s\n", strerror(-ret));
		return 1;
	}
	fsname_opt(d->fsname[0] ? d->fsname : "blkfs", fsname, sizeof(fsname));
	if (snprintf(opts, sizeof(opts), "fsname=%s,subtype=blkfs%s%s%s", fsname,
		     d->conf.mount.allow_other ? ",allow_other,default_permissions" : "",
		     d->kopts[0] ? "," : "", d->kopts) >= (int)sizeof(opts)) {
		fprintf(stderr, "blkfs: mount options too long: %s\n", opts);
		return 1;
	}
	se = fuse_session_new(&args, &bf_ops, sizeof(bf_ops), d);
	if (!se) {
		fprintf(stderr, "blkfs: bad FUSE options: %s\n", opts);
		fuse_opt_free_args(&args);
		return 1;
	}
	dummy = bf_rawio_attach(d, se, BF_MAX_WRITE, why, sizeof(why));
	if (dummy < 0) {
		fprintf(stderr, "%s\n", why);
		code = 1;
		goto out_destroy;
	}
	d->se = se;
	if (fuse_session_mount(se, d->mnt)) {
		fprintf(stderr, "blkfs: cannot mount %s (see the message above)\n", d->mnt);
		close(dummy);
		code = 1;
		goto out_destroy;
	}
	close(dummy);
	if (fuse_set_signal_handlers(se)) {
		fprintf(stderr, "blkfs: cannot install signal handlers\n");
		code = 1;
		goto out_unmount;
	}
	ret = pc_cache_start(d->pc);
	if (ret) {
		fprintf(stderr, "blkfs: cannot start the flusher: %s\n", strerror(-ret));
		code = 1;
		goto out_stop;
	}

	lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lc, BF_MAX_THREADS);
	fuse_loop_cfg_set_clone_fd(lc, 0);
	ret = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	if (ret < 0 && ret != -ENODEV)
		blk_err("request loop ended: %s", strerror(-ret));

out_stop:
	/*
	 * A command's reply goes out while the transport still takes it. One
	 * that makes no progress for shutdown_timeout (a remove whose
	 * writeback hangs) is answered with an error and left running: its
	 * device is given up on with it, and nothing is freed.
	 */
	cmds_done = bf_ctl_jobs_wait(d);
	/*
	 * The ring serves no new request (as the ended loop does not) and its
	 * threads commit the replies to those in hand, then end: before the
	 * handlers go, since a dying queue signals the loop.
	 */
	if (!bf_rawio_stop(d->conf.mount.shutdown_timeout_ms))
		d->abandoned = true;	/* requests in hand on a hung device: exit, free nothing */
	/*
	 * Requests still in flight get their replies (the kernel drops those
	 * of a connection that is gone) before the final writeback, each
	 * device in a thread of its own, and a device that makes no progress
	 * for [mount] shutdown_timeout is given up on (fuse/shutdown.c).
	 */
	fin = bf_final_begin(d);
	if (!cmds_done)
		d->abandoned = true;	/* a command's thread still uses its file, its device */
	if (bf_final_wait_drained(d, fin) && !d->abandoned)
		bf_files_free_all();	/* else a request given up on may still use its file */
	if (bf_rawio_failed()) {
		/* callers waiting on the ring get ENOTCONN now, not after the writeback */
		code = 1;
		d->se = NULL;
		fuse_session_unmount(se);
	}
	/*
	 * From here a signal cannot stop the daemon before its data is
	 * written: ours replace libfuse's handlers (which would only end the
	 * loop, already ended) before libfuse removes its own, so no moment
	 * is left where the default action, death, applies.
	 */
	bf_final_signals();
	fuse_remove_signal_handlers(se);
	bf_notify("STOPPING=1\nSTATUS=Writing back before exit");
	bf_final_progress_start(d);
	/* everything dirty goes to the backend before the mount disappears */
	if (bf_final_end(d, fin, status, statuslen))
		code = 1;
	bf_final_progress_stop();
	bf_notify("STATUS=%s", d->abandoned ? "Gave up on a hung I/O: data lost (see the log)" :
		  code ? "Data could not be written back (see the log)" : "All data written back");
out_unmount:
	d->se = NULL;
	/* lazily, and the kernel ends what callers still wait for once we exit */
	fuse_session_unmount(se);
	if (d->abandoned) {
		/* a hung request may still reply through the session: it stays */
		fuse_opt_free_args(&args);
		return code;
	}
out_destroy:
	d->se = NULL;
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	bf_rawio_detach();
	return code;
}
