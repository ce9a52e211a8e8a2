/* SPDX-License-Identifier: MIT */
/*
 * fuse/mnt.c - mount points and what sits on them, for the client (cmd_*.c,
 * loop.c, ctl_client.c) and the daemon (devs.c, live.c) alike: a mount
 * point's canonical path without stat()ing it, the type mounted there
 * (/proc/self/mountinfo), and the loop devices over a file or below a
 * directory (/sys/block/loop*). Calls nothing else of fuse/.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mnt.h"

/*
 * The canonical path of a mount point without stat()ing it: a dead or hung
 * FUSE mount blocks or fails on stat, so only its parent is resolved.
 */
int bf_canon_mnt(const char *arg, char *out, size_t len)
{
	char tmp[PATH_MAX], parent[PATH_MAX];
	const char *base;
	char *slash;
	size_t n;

	snprintf(tmp, sizeof(tmp), "%s", arg);
	n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = 0;
	slash = strrchr(tmp, '/');
	if (!slash) {
		base = tmp;
		snprintf(parent, sizeof(parent), ".");
	} else if (slash == tmp) {
		base = tmp + 1;
		snprintf(parent, sizeof(parent), "/");
	} else {
		*slash = 0;
		base = slash + 1;
		snprintf(parent, sizeof(parent), "%s", tmp);
	}
	if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) {
		/* "/", "x/.", "..": resolve it all */
		if (!realpath(arg, out))
			return -errno;
		return 0;
	}
	{
		char rp[PATH_MAX];

		if (!realpath(parent, rp))
			return -errno;
		if (snprintf(out, len, "%s/%s", strcmp(rp, "/") ? rp : "", base) >= (int)len)
			return -ENAMETOOLONG;
	}
	return 0;
}

/* Decode the octal escapes of /proc/self/mountinfo paths. */
static void unescape(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] && s[3]) {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = 0;
}

/*
 * Split a line of /proc/self/mountinfo into at most @max fields, the mount
 * point (field 4) decoded. Returns how many; fewer than 5: not a mount line.
 */
int bf_mountinfo_fields(char *line, char **fields, int max)
{
	char *save, *tok;
	int n = 0;

	for (tok = strtok_r(line, " \n", &save); tok && n < max; tok = strtok_r(NULL, " \n", &save))
		fields[n++] = tok;
	if (n >= 5)
		unescape(fields[4]);
	return n;
}

/* The filesystem type mounted at @mnt ("fuse.blkfs", ...), "" if none. */
void bf_mount_type(const char *mnt, char *type, size_t len)
{
	char line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "r");

	type[0] = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *fields[12], *sep;
		int n = bf_mountinfo_fields(line, fields, 12);

		if (n < 7 || strcmp(fields[4], mnt))
			continue;
		/* optional fields end with "-", then the type */
		sep = NULL;
		for (int i = 6; i < n; i++) {
			if (!strcmp(fields[i], "-") && i + 1 < n) {
				sep = fields[i + 1];
				break;
			}
		}
		if (sep)
			snprintf(type, len, "%s", sep);	/* the last one listed is on top */
	}
	fclose(f);
}

/* sysfs's backing_file of loop device @name ("loop3"), without the newline; -errno. */
int bf_loop_backing(const char *name, char *out, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno ? -errno : -EIO;	/* never 0: the caller skips on non-zero */
	n = read(fd, out, len - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -ENOENT;
	out[n] = 0;
	if (out[n - 1] == '\n')
		out[n - 1] = 0;
	return 0;
}

/* Is @file at or below directory @dir? */
static bool below(const char *file, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(file, dir, n) && (file[n] == '/' || (n == 1 && dir[0] == '/'));
}

int bf_loops_over(const char *prefix, bool exact, char (*devs)[32], int max,
		  char (*files)[PATH_MAX])
{
	struct dirent *de;
	DIR *dir = opendir("/sys/block");
	int n = 0;

	if (!dir)
		return 0;
	while ((de = readdir(dir)) && n < max) {
		char back[PATH_MAX] = "";	/* all defined: below() reads past a short name */

		if (strncmp(de->d_name, "loop", 4) || bf_loop_backing(de->d_name, back, sizeof(back)))
			continue;
		if (exact ? strcmp(back, prefix) : !below(back, prefix))
			continue;
		if (snprintf(devs[n], 32, "/dev/%s", de->d_name) >= 32)
			continue;	/* not a name the kernel gives */
		if (files)
			snprintf(files[n], PATH_MAX, "%s", back);
		n++;
	}
	closedir(dir);
	return n;
}
