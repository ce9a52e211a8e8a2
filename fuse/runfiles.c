/* SPDX-License-Identifier: MIT */
/*
 * fuse/runfiles.c - what the commands of `blkfs` share: the run directory
 * ($BLKFS_RUNDIR, default /run/blkfs) and a mount point's files in it, and
 * the config file (which one, read and parsed into the daemon's devices).
 *
 * For a mount point P, K = P with '/' replaced by '_'; K.pid (the daemon),
 * K.log (its messages), K.status (written when it exits: "ok DEV BYTES" or
 * "lost DEV BYTES REASON" per device).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bf.h"
#include "cmd.h"

#define CONF_MAX_BYTES (1u << 20)

/* ------------------------------------------------------------ run files */

const char *bf_rundir(void)
{
	const char *d = getenv("BLKFS_RUNDIR");

	return d && *d ? d : "/run/blkfs";
}

void bf_run_file(char *out, size_t len, const char *mnt, const char *ext)
{
	char key[PATH_MAX];
	size_t i;

	snprintf(key, sizeof(key), "%s", mnt);
	for (i = 0; key[i]; i++)
		if (key[i] == '/')
			key[i] = '_';
	if (snprintf(out, len, "%s/%s.%s", bf_rundir(), key, ext) >= (int)len)
		out[len - 1] = 0;	/* PATH_MAX-long mount points: truncated, still unique enough */
}

int bf_mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	char *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0700) && errno != EEXIST)
		return -errno;
	return 0;
}

int bf_write_file(const char *path, const char *text)
{
	char tmp[PATH_MAX + 8];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f))
		return -errno;
	return rename(tmp, path) ? -errno : 0;
}

static char *read_conf(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	FILE *f = fopen(path, "r");

	if (!f)
		return NULL;
	/*
	 * Running as root, a config anyone else can change would let them pick
	 * what root opens and mounts: refused, checked on the open file.
	 */
	if (geteuid() == 0 && !fstat(fileno(f), &st) && S_ISREG(st.st_mode) &&
	    ((st.st_mode & 022) || st.st_uid != 0)) {
		fprintf(stderr, "blkfs: %s: writable by users other than root (mode %04o, owner uid %u); "
			"refused when running as root (chmod go-w %s; chown root %s)\n", path,
			(unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, path, path);
		fclose(f);
		errno = EPERM;
		return NULL;
	}
	buf = malloc(CONF_MAX_BYTES + 1);
	if (!buf) {
		fclose(f);
		errno = ENOMEM;
		return NULL;
	}
	*len = fread(buf, 1, CONF_MAX_BYTES + 1, f);
	if (ferror(f) || *len > CONF_MAX_BYTES) {
		int e = ferror(f) ? errno : EFBIG;

		fclose(f);
		free(buf);
		errno = e;
		return NULL;
	}
	fclose(f);
	buf[*len] = 0;
	return buf;
}

const char *bf_pick_conf(const char *arg)
{
	if (arg)
		return arg;
	if (!access("blkfs.conf", F_OK))
		return "blkfs.conf";
	return "/etc/blkfs.conf";
}

int bf_load_conf(struct bf_daemon *d, const char *path)
{
	char err[1024];
	size_t len;
	char *buf = read_conf(path, &len);
	int ret;

	d->conf_path = path;
	if (!buf) {
		if (errno != EPERM)
			fprintf(stderr, "blkfs: %s: %s\n", path, strerror(errno));
		return -1;
	}
	ret = conf_parse_buf(buf, len, path, &d->conf, err, sizeof(err));
	free(buf);
	if (ret) {
		fprintf(stderr, "%s\n", err);
		return -1;
	}
	return 0;
}
