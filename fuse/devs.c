/* SPDX-License-Identifier: MIT */
/*
 * fuse/devs.c - devices that come and go while the mount serves others:
 * creation (for the config at mount, and for `add`), the table they are
 * published in, references, and the control file's add and remove.
 *
 * Lifetime of a device:
 *   created (stack open, behind the cache, .sys subtree built)
 *   -> published in a slot of d->devs (lookup, open, .sys find it)
 *   -> removing (remove has checked nothing holds it: no new open, no
 *      bf_dev_get(); writeback runs; a failure takes it back to published)
 *   -> unpublished (the kernel told: notify_delete), remove waits for the
 *      last transient reference, then closes and frees it.
 * References (dev->ref): the table's, each open device file's, each
 * bf_dev_get()'s and each .sys access's while it runs. Requests in flight
 * come from open files, so a device without opens has none; a device is
 * never removed while open, so a request never sees its device go.
 */
#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "../backends/lib/log.h"
#include "../backends/lib/trace.h"
#include "../core/stack.h"
#include "bf.h"
#include "devfile.h"
#include "devs.h"
#include "devtab.h"
#include "live.h"
#include "mnt.h"
#include "notify.h"
#include "sysfs.h"

/* ------------------------------------------------------------- creation */

/* uid/gid of a device file: a number or a name; the mounter's by default. */
static int resolve_id(const struct conf *c, struct conf_device *cd, const char *key,
		      const char *val, bool user, unsigned *out, char *err, size_t errlen)
{
	char buf[4096], *end;
	struct passwd pw, *pwp = NULL;
	struct group gr, *grp = NULL;
	unsigned long n;

	if (!val) {
		*out = user ? getuid() : getgid();
		return 0;
	}
	n = strtoul(val, &end, 10);
	if (!*end && end != val && n < 0xffffffffUL) {
		*out = (unsigned)n;
		return 0;
	}
	if (user ? getpwnam_r(val, &pw, buf, sizeof(buf), &pwp) || !pwp :
		   getgrnam_r(val, &gr, buf, sizeof(buf), &grp) || !grp) {
		snprintf(err, errlen, "%s:%d: %s: no %s named %s on this machine", c->file,
			 blk_param_line(&(struct blk_params){ .v = cd->params, .n = cd->nr_params,
							      .line = cd->line }, key),
			 key, user ? "user" : "group", val);
		return -EINVAL;
	}
	*out = user ? pwp->pw_uid : grp->gr_gid;
	return 0;
}

static int resolve_owner(const struct conf *c, struct conf_device *cd, struct bf_dev *bd,
			 char *err, size_t errlen)
{
	unsigned uid = 0, gid = 0;
	int ret;

	ret = resolve_id(c, cd, "uid", cd->owner, true, &uid, err, errlen);
	if (!ret)
		ret = resolve_id(c, cd, "gid", cd->group, false, &gid, err, errlen);
	bd->uid = uid;
	bd->gid = gid;
	return ret;
}

void bf_dev_destroy(struct bf_dev *bd)
{
	if (bd->pc)
		pc_dev_remove(bd->pc);
	bd->pc = NULL;
	bf_dev_reqs_destroy(bd);
	if (bd->be && !IS_ERR(bd->be))
		stack_close(bd->be);
	bd->be = NULL;
	free(bd->nodes);
	conf_free(&bd->own);
	pthread_mutex_destroy(&bd->ctl_lock);
	free(bd);
}

/*
 * bf_dev_create - see devs.h. @own: @c is an added device's own config,
 * moved into the device (freed with it, also on failure); else @c is the
 * mount's and outlives its devices.
 */
static struct bf_dev *dev_create(struct bf_daemon *d, struct conf *c, int idx, bool own,
				 char *err, size_t errlen)
{
	struct bf_dev *bd = calloc(1, sizeof(*bd));
	struct conf_device *cd;
	struct blk_backend *be;
	int ret;

	if (!bd) {
		snprintf(err, errlen, "%s:%d: [device %s]: out of memory", c->file,
			 c->devs[idx].line, c->devs[idx].name);
		if (own)
			conf_free(c);
		return ERR_PTR(-ENOMEM);
	}
	if (own) {
		bd->own = *c;
		memset(c, 0, sizeof(*c));
		c = &bd->own;
	}
	cd = &c->devs[idx];
	pthread_mutex_init(&bd->ctl_lock, NULL);
	bd->d = d;
	bd->ref = 1;
	bd->slot = -1;
	bd->cd = cd;
	bd->bt = bt_dev_get(cd->name);	/* the FUSE level's counts (NULL: not counted) */
	bd->host.ctx = bd;
	bd->host.drop_volatile = bf_dev_drop_volatile;
	bd->host.size_changed = bf_dev_size_changed;
	be = stack_open(c, cd, &bd->host, err, errlen);
	if (IS_ERR(be)) {
		ret = (int)PTR_ERR(be);
		goto out_free;
	}
	bd->be = be;
	be->ops->geometry(be, &bd->geo);
	ret = conf_check_geometry(c, cd, &bd->geo, err, errlen);
	if (ret)
		goto out_free;
	ret = resolve_owner(c, cd, bd, err, errlen);
	if (ret)
		goto out_free;
	bd->cblk = conf_cache_block(&bd->geo, cd->cache_block_size);
	if (!d->pc)
		return bd;	/* `blkfs check`, or a mount before its cache exists */
	ret = bf_dev_attach(d, bd, err, errlen);
	if (ret)
		goto out_free;
	return bd;

out_free:
	bf_dev_destroy(bd);
	return ERR_PTR(ret);
}

int bf_dev_attach(struct bf_daemon *d, struct bf_dev *bd, char *err, size_t errlen)
{
	const struct conf_device *cd = bd->cd;
	const char *file = bd->own.file ? bd->own.file : d->conf.file;
	int ret;

	bd->pc = pc_dev_add(d->pc, cd->name, bd->be, bd->cblk);
	if (IS_ERR(bd->pc)) {
		ret = (int)PTR_ERR(bd->pc);
		bd->pc = NULL;
		snprintf(err, errlen, "%s:%d: [device %s]: the cache cannot take this device: %s%s",
			 file, cd->line, cd->name, strerror(-ret),
			 ret == -ENOSPC ? " (it serves as many devices as it can)" : "");
		return ret;
	}
	pc_dev_set_policy(bd->pc, cd->rmw_device, cd->on_error_drop);
	pc_dev_set_write_through(bd->pc, cd->write_through);
	pc_dev_set_read_ahead(bd->pc, cd->read_ahead);
	ret = bf_dev_reqs_init(bd, d->conf.mount.max_pending);
	if (ret) {
		snprintf(err, errlen, "%s: [mount] max_pending: cannot allocate %u request "
			 "slots for %s", d->conf.file, d->conf.mount.max_pending, cd->name);
		return ret;
	}
	ret = bf_sys_build_dev(d, bd);
	if (ret)
		snprintf(err, errlen, "%s: cannot build .sys/%s: %s", file, cd->name,
			 strerror(-ret));
	return ret;
}

struct bf_dev *bf_dev_create(struct bf_daemon *d, const struct conf *c, struct conf_device *cd,
			     char *err, size_t errlen)
{
	return dev_create(d, (struct conf *)c, (int)(cd - c->devs), false, err, errlen);
}

int bf_dev_publish(struct bf_daemon *d, struct bf_dev *bd)
{
	int i, ret = -ENOSPC;

	pthread_rwlock_wrlock(&d->dev_lock);
	if (bf_devs_given_up(d)) {
		ret = -ESHUTDOWN;	/* an add that hung past the unmount: the table is final */
		goto out_unlock;
	}
	if (d->next_ino >= BF_SYS_INO) {
		ret = -EOVERFLOW;	/* a million adds: inode numbers are never reused */
		goto out_unlock;
	}
	for (i = 0; i < PC_MAX_DEVS; i++) {
		if (d->devs[i])
			continue;
		bd->slot = i;
		bd->ino = d->next_ino++;
		d->devs[i] = bd;
		d->nr_devs++;
		ret = 0;
		break;
	}
out_unlock:
	pthread_rwlock_unlock(&d->dev_lock);
	return ret;
}

/* ------------------------------------------------------------------ add */

static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

/*
 * The parser's "control:LINE: KEY: message" as the command's: line L of
 * the text built from the command is its argument L (1 is NAME); the lines
 * after the arguments are the mount's [cache], which the device must fit.
 */
static void cmd_msg(const char *err, int argc, char *msg, size_t len)
{
	static const char file[] = "control:";
	const char *p = err;
	char *end;
	long line;

	if (strncmp(p, file, sizeof(file) - 1)) {
		snprintf(msg, len, "%s", err);
		return;
	}
	p += sizeof(file) - 1;
	line = strtol(p, &end, 10);
	if (end == p || *end != ':') {
		snprintf(msg, len, "%s", err);
		return;
	}
	p = end + 1;
	while (*p == ' ')
		p++;
	if (line >= 1 && line < argc)
		snprintf(msg, len, "argument %ld: %s", line, p);
	else
		snprintf(msg, len, "the mount's [cache]: %s", p);
	/* "(first given on line 3)": a line is an argument here */
	{
		char *at = strstr(msg, " on line ");

		if (at && strlen(msg) + 4 < len) {
			memmove(at + 13, at + 9, strlen(at + 9) + 1);
			memcpy(at, " in argument ", 13);
		}
	}
}

int bf_cmd_add(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	char err[1024], *text;
	const char *name;
	struct conf own = { 0 };
	struct bf_dev *bd;
	size_t cap = 256, n = 0;
	int i, ret;

	if (argc < 2) {
		snprintf(msg, len, "usage: add NAME KEY=VALUE... (the keys of a [device NAME] "
			 "section of blkfs.conf)");
		return -EINVAL;
	}
	name = argv[1];
	if (!strcmp(name, "control")) {
		snprintf(msg, len, "argument 1: %s: the name of .sys/control (choose another)", name);
		return -EINVAL;
	}
	for (i = 1; i < argc; i++)
		cap += strlen(argv[i]) + 8;
	text = malloc(cap);
	if (!text) {
		snprintf(msg, len, "out of memory");
		return -ENOMEM;
	}
	/* the section the same parser reads from a file: argument i on line i */
	n += (size_t)snprintf(text + n, cap - n, "[device %s]\n", name);
	for (i = 2; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *k, *v;

		for (k = a; k < (eq ? eq : a + strlen(a)) && key_char(*k); k++)
			;
		if (!eq || eq == a || k != eq) {
			snprintf(msg, len, "argument %d: '%s': expected KEY=VALUE (a key of [device] in "
				 "blkfs.conf(5): backend=ram size=1G ...)", i, a);
			ret = -EINVAL;
			goto out_text;
		}
		/* the file would cut the value there: a comment */
		for (v = eq + 1; *v; v++)
			if ((*v == '#' || *v == ';') && (v == eq + 1 || v[-1] == ' ' || v[-1] == '\t')) {
				snprintf(msg, len, "argument %d: %.*s: a value cannot hold '%c' at its "
					 "start or after a blank (blkfs.conf reads a comment there)",
					 i, (int)(eq - a), a, *v);
				ret = -EINVAL;
				goto out_text;
			}
		n += (size_t)snprintf(text + n, cap - n, "%.*s = %s\n", (int)(eq - a), a, eq + 1);
	}
	/* the cache the device joins: the parser checks the device fits it */
	n += (size_t)snprintf(text + n, cap - n, "[cache]\nsize = %llu\nfolio_size = %u\n",
			      (unsigned long long)d->conf.cache.size, d->conf.cache.folio_size);
	assert(n < cap);
	ret = conf_parse_buf(text, n, "control", &own, err, sizeof(err));
	if (ret) {
		cmd_msg(err, argc, msg, len);
		goto out_text;
	}
	assert(own.nr_devs == 1);

	pthread_mutex_lock(&d->add_lock);
	pthread_rwlock_rdlock(&d->dev_lock);
	bd = bf_dev_find_locked(d, name);
	ret = bd ? -EEXIST : d->nr_devs == PC_MAX_DEVS ? -ENOSPC : 0;
	if (bd)
		snprintf(msg, len, "%s: a device of this name exists%s", name,
			 bd->removing ? " (being removed)" : "");
	else if (ret)
		snprintf(msg, len, "%s: the mount serves %d devices, as many as it can", name,
			 PC_MAX_DEVS);
	pthread_rwlock_unlock(&d->dev_lock);
	if (ret) {
		conf_free(&own);
		goto out_unlock;
	}
	/* the backend opens (a file, a connection) under add_lock only: requests go on */
	bd = dev_create(d, &own, 0, true, err, sizeof(err));
	if (IS_ERR(bd)) {
		ret = (int)PTR_ERR(bd);
		cmd_msg(err, argc, msg, len);
		goto out_unlock;
	}
	ret = bf_dev_publish(d, bd);
	if (ret) {
		snprintf(msg, len, "%s: %s", name, ret == -ENOSPC ? "no free slot" :
			 ret == -ESHUTDOWN ? "the mount is going away" :
			 "inode numbers used up (remount)");
		bf_dev_destroy(bd);
		goto out_unlock;
	}
	/* the kernel may hold a negative entry for the name */
	bf_notify_entry(d, BF_ROOT_INO, 0, name);
	bf_notify_entry(d, bf_sys_root_ino(d), 0, name);
	snprintf(msg, len, "added %s: %s, %llu bytes, logical block %u, physical %u (%s/%s)", name,
		 bd->cd->ops->name, (unsigned long long)bd->geo.size, bd->geo.lbs, bd->geo.pbs,
		 d->mnt ? d->mnt : "", name);
out_unlock:
	pthread_mutex_unlock(&d->add_lock);
out_text:
	free(text);
	return ret;
}

/* --------------------------------------------------------------- remove */

/* Wait up to @ms for @bd's open count to reach 0 (bf_dev_put() signals ref_cond). */
static void wait_opens_gone(struct bf_daemon *d, struct bf_dev *bd, unsigned ms)
{
	uint64_t until = blk_now_ns() + (uint64_t)ms * 1000000u;

	pthread_mutex_lock(&d->ref_lock);
	while (__atomic_load_n(&bd->opens, __ATOMIC_RELAXED) &&
	       blk_cond_wait_until(&d->ref_cond, &d->ref_lock, until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&d->ref_lock);
}

int bf_cmd_remove(struct bf_daemon *d, int argc, char **argv, char *msg, size_t len)
{
	char path[PATH_MAX], loops[4][32];
	const char *name;
	struct bf_dev *bd;
	uint64_t lost = 0, ino, dir_ino;
	int ret = 0, opens, nloops;

	if (argc != 2) {
		snprintf(msg, len, "usage: remove NAME");
		return -EINVAL;
	}
	name = argv[1];
	pthread_mutex_lock(&d->add_lock);
	pthread_rwlock_rdlock(&d->dev_lock);
	bd = bf_dev_find_locked(d, name);
	pthread_rwlock_unlock(&d->dev_lock);
	if (!bd) {
		snprintf(msg, len, "%s: no such device", name);
		ret = -ENOENT;
		goto out_unlock;
	}
	/* a loop device keeps the file open: named, with the way out */
	snprintf(path, sizeof(path), "%s/%s", d->mnt ? d->mnt : "", name);
	nloops = bf_loops_over(path, true, loops, 4, NULL);
	if (nloops) {
		snprintf(msg, len, "%s: loop device %s%s sits on %s (umount what is mounted on it, "
			 "then blkfs detach %s)", name, loops[0], nloops > 1 ? " and others" : "",
			 path, loops[0]);
		ret = -EBUSY;
		goto out_unlock;
	}
	/*
	 * The kernel sends RELEASE in the background after the last close: a
	 * file closed a moment ago (`dd of=MNT/NAME; blkfs remove ...`) may
	 * still count. Up to a second for those before calling it open.
	 */
	wait_opens_gone(d, bd, 1000);
	/*
	 * Opens are counted under dev_lock shared and checked here under it
	 * exclusive: an open either came first and is seen, or comes after
	 * and finds the device removing.
	 */
	pthread_rwlock_wrlock(&d->dev_lock);
	opens = __atomic_load_n(&bd->opens, __ATOMIC_RELAXED);
	if (!opens) {
		bd->removing = true;
		bf_dev_hold(bd);
	}
	pthread_rwlock_unlock(&d->dev_lock);
	if (opens) {
		snprintf(msg, len, "%s: %s is open (%d open file%s: see fuser -v %s)", name, path,
			 opens, opens == 1 ? "" : "s", path);
		ret = -EBUSY;
		goto out_unlock;
	}

	pthread_mutex_lock(&bd->ctl_lock);
	/* everything dirty to the backend, then its flush: nothing is ever dropped */
	ret = pc_dev_sync_final(bd->pc, 3, NULL, &lost);
	if (ret || lost) {
		if (!ret)
			ret = -EIO;
		snprintf(msg, len, "%s: writeback failed, %llu bytes not written (%s): not removed, "
			 "its data stays cached", name, (unsigned long long)lost, strerror(-ret));
		pthread_rwlock_wrlock(&d->dev_lock);
		bd->removing = false;
		pthread_rwlock_unlock(&d->dev_lock);
		pthread_mutex_unlock(&bd->ctl_lock);
		bf_dev_put(bd);
		goto out_unlock;
	}
	pthread_rwlock_wrlock(&d->dev_lock);
	if (bf_devs_given_up(d)) {
		/*
		 * Its writeback ended after the unmount gave up on it: the
		 * final writeback has the device as abandoned, the table stays
		 * as it is and nothing is freed (the daemon is exiting).
		 */
		pthread_rwlock_unlock(&d->dev_lock);
		pthread_mutex_unlock(&bd->ctl_lock);
		snprintf(msg, len, "%s: the mount went away during the remove", name);
		ret = -ESHUTDOWN;
		goto out_unlock;
	}
	d->devs[bd->slot] = NULL;
	d->nr_devs--;
	pthread_rwlock_unlock(&d->dev_lock);
	bd->removed = true;
	pthread_mutex_unlock(&bd->ctl_lock);

	ino = bd->ino;
	dir_ino = bd->nodes[0].ino;
	bf_notify_entry(d, BF_ROOT_INO, ino, name);
	bf_notify_entry(d, bf_sys_root_ino(d), dir_ino, name);
	/* the table's reference; then wait for the transient ones (a .sys read, a lookup) */
	bf_dev_put(bd);
	pthread_mutex_lock(&d->ref_lock);
	while (__atomic_load_n(&bd->ref, __ATOMIC_ACQUIRE) > 1)
		pthread_cond_wait(&d->ref_cond, &d->ref_lock);
	pthread_mutex_unlock(&d->ref_lock);
	snprintf(msg, len, "removed %s (written back and flushed)", name);
	/* given up on meanwhile (a transient reference hung): the exiting daemon frees nothing */
	if (!bf_devs_given_up(d))
		bf_dev_destroy(bd);
out_unlock:
	pthread_mutex_unlock(&d->add_lock);
	return ret;
}

/* ------------------------------------------------ the mount's devices */

int bf_open_devices(struct bf_daemon *d, bool create_cache, char *err, size_t errlen)
{
	struct pc_cache_params cp = { 0 };
	int i, ret;

	assert(!d->nr_devs);
	ret = bf_devs_locks_init(d);
	if (ret) {
		snprintf(err, errlen, "the device table's condition variable: %s", strerror(-ret));
		return ret;
	}
	for (i = 0; i < d->conf.nr_devs; i++) {
		if (!strcmp(d->conf.devs[i].name, "control")) {
			snprintf(err, errlen, "%s:%d: [device control]: the name of .sys/control "
				 "(choose another)", d->conf.file, d->conf.devs[i].line);
			return -EINVAL;
		}
	}
	/* every backend opens before the cache's memory is taken */
	for (i = 0; i < d->conf.nr_devs; i++) {
		struct bf_dev *bd = bf_dev_create(d, &d->conf, &d->conf.devs[i], err, errlen);

		if (IS_ERR(bd)) {
			ret = (int)PTR_ERR(bd);
			goto out_close;
		}
		ret = bf_dev_publish(d, bd);
		assert(!ret);	/* the config holds at most CONF_MAX_DEVICES = PC_MAX_DEVS */
	}
	if (!create_cache)
		return 0;

	cp.size = d->conf.cache.size;
	cp.folio_size = d->conf.cache.folio_size;
	cp.dirty_background = d->conf.cache.dirty_background;
	cp.dirty_limit = d->conf.cache.dirty_limit;
	cp.dirty_expire_ms = d->conf.cache.dirty_expire_ms;
	d->pc = pc_cache_create(&cp);
	if (IS_ERR(d->pc)) {
		ret = (int)PTR_ERR(d->pc);
		d->pc = NULL;
		snprintf(err, errlen, "%s: [cache]: cannot allocate %llu bytes of cache: %s",
			 d->conf.file, (unsigned long long)cp.size, strerror(-ret));
		goto out_close;
	}
	/* .sys first: each device's subtree hangs below it */
	ret = bf_sys_build(d);
	if (ret) {
		snprintf(err, errlen, "blkfs: cannot build the .sys tree: %s", strerror(-ret));
		goto out_close;
	}
	for (i = 0; i < PC_MAX_DEVS; i++) {
		if (!d->devs[i])
			continue;
		ret = bf_dev_attach(d, d->devs[i], err, errlen);
		if (ret)
			goto out_close;
	}
	return 0;

out_close:
	bf_close_devices(d);
	return ret;
}

void bf_close_devices(struct bf_daemon *d)
{
	int i;

	/* the flusher walks the device list: it stops before devices go */
	if (d->pc)
		pc_cache_stop(d->pc);
	for (i = 0; i < PC_MAX_DEVS; i++) {
		if (!d->devs[i])
			continue;
		bf_dev_destroy(d->devs[i]);
		d->devs[i] = NULL;
	}
	d->nr_devs = 0;
	if (d->pc)
		pc_cache_destroy(d->pc);
	d->pc = NULL;
	free(d->nodes);
	d->nodes = NULL;
	d->nr_nodes = d->cap_nodes = 0;
}
