/* SPDX-License-Identifier: MIT */
/*
 * fuse/mountopt.c - mount options: what `blkfs mount -o OPTS` and an fstab
 * line's fourth field (through mount(8) and mount.fuse3) give blkfs.
 *
 * mount.fuse3 (libfuse 3.14, util/mount.fuse.c) runs `blkfs SOURCE MNT -o
 * OPTS` through /bin/sh: it drops user, nouser, users, auto, noauto,
 * _netdev, nofail, setuid=USER (it switches to USER first) and
 * drop_privileges (it mounts itself and passes /dev/fd/N as MNT), and
 * appends dev and suid unless nodev or nosuid was given. mount(8) itself
 * keeps `defaults` and x-* options to itself. Every option is one of:
 *  - a generic mount flag (ro, rw, [no]suid, [no]dev, [no]exec, sync, async,
 *    dirsync, the atime variants): passed to the kernel through libfuse;
 *    `ro` also makes every device read-only in blkfs itself;
 *  - an SELinux context (context=, fscontext=, defcontext=, rootcontext=):
 *    passed to the kernel;
 *  - one only mount(8) or fstab acts on (defaults, auto, noauto, nofail,
 *    _netdev, user, users, nouser, owner, group, x-*, comment=): accepted
 *    and ignored, so the same line works with mount.fuse3 and by hand;
 *  - blkfs's own: allow_other and every [mount] key (`kernel_cache=`),
 *    which override the config file;
 *  - anything else is refused, with its name.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf.h"
#include "mountopt.h"

/* Mount flags libfuse 3.14 knows (lib/mount.c's mount_flags): to the kernel as given. */
static const char *const kernel_flags[] = {
	"rw", "ro", "suid", "nosuid", "dev", "nodev", "exec", "noexec", "async", "sync",
	"dirsync", "atime", "noatime", "diratime", "nodiratime", "lazytime", "nolazytime",
	"relatime", "norelatime", "strictatime", "nostrictatime", NULL,
};

/* Kernel options with a value that libfuse passes on unchanged. */
static const char *const kernel_valued[] = {
	"context=", "fscontext=", "defcontext=", "rootcontext=", NULL,
};

/* For mount(8) and fstab only: nothing to do here. */
static const char *const userspace_only[] = {
	"defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser",
	"owner", "group", NULL,
};

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strcmp(*list, s))
			return true;
	return false;
}

static bool has_prefix_in(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (!strncmp(*list, s, strlen(*list)))
			return true;
	return false;
}

/* Append @opt to d->kopts (comma separated); -E2BIG when it does not fit. */
static int kopt_add(struct bf_daemon *d, const char *opt)
{
	size_t used = strlen(d->kopts);
	int n = snprintf(d->kopts + used, sizeof(d->kopts) - used, "%s%s", used ? "," : "", opt);

	if (n < 0 || (size_t)n >= sizeof(d->kopts) - used) {
		d->kopts[used] = 0;
		return -E2BIG;
	}
	return 0;
}

int bf_mount_options(struct bf_daemon *d, const char *opts, char *err, size_t errlen)
{
	char *copy, *save = NULL, *opt;
	int ret = 0;

	if (!opts || !*opts)
		return 0;
	copy = strdup(opts);
	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (opt = strtok_r(copy, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(opt, '=');

		if (in_list(kernel_flags, opt)) {
			/* the last of ro and rw wins, as with mount(8) */
			if (!strcmp(opt, "ro"))
				d->conf.mount.read_only = true;
			else if (!strcmp(opt, "rw"))
				d->conf.mount.read_only = false;
			ret = kopt_add(d, opt);
		} else if (has_prefix_in(kernel_valued, opt)) {
			ret = kopt_add(d, opt);
		} else if (in_list(userspace_only, opt) || !strncmp(opt, "x-", 2) ||
			   !strncmp(opt, "comment=", 8)) {
			continue;
		} else {
			if (eq)
				*eq = 0;
			ret = conf_mount_set(&d->conf, opt, eq ? eq + 1 : NULL, err, errlen);
			if (ret == -ENOENT) {
				snprintf(err, errlen, "mount option %s: unknown (allowed: the "
					 "generic ones, e.g. ro, nosuid, noatime; allow_other, "
					 "kernel_cache=none|writeback; see blkfs(1))", opt);
				ret = -EINVAL;
			}
		}
		if (ret == -E2BIG)
			snprintf(err, errlen, "mount options too long: %s", opts);
		if (ret)
			break;
	}
	free(copy);
	return ret;
}
