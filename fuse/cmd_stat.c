/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd_stat.c - `blkfs stat`: every device's counters of a mount (or one
 * device's), as a table, --json, --prometheus, or every -i SECONDS; and the
 * mount's transport.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "devs.h"
#include "mnt.h"
#include "statx.h"

/* ----------------------------------------------------------------- stat */

static bool is_byte_counter(const char *name)
{
	size_t n = strlen(name);

	return n > 6 && !strcmp(name + n - 6, "_bytes");
}

static void human(unsigned long long v, char *buf, size_t len)
{
	const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 5) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", v);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
}

static int stat_one(const char *mnt, const char *dev, bool json, bool first)
{
	char path[PATH_MAX], line[256], name[128], hb[32];
	unsigned long long v;
	bool first_field = true;
	FILE *f;

	snprintf(path, sizeof(path), "%s/.sys/%s/blkfs_stat", mnt, dev);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "blkfs stat: %s: %s\n", path, strerror(errno));
		return 1;
	}
	if (json)
		printf("%s\n  \"%s\": {", first ? "" : ",", dev);
	else
		printf("%s%s:\n", first ? "" : "\n", dev);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%127s %llu", name, &v) != 2)
			continue;
		if (json) {
			printf("%s\n    \"%s\": %llu", first_field ? "" : ",", name, v);
		} else if (!strncmp(name, "write_size_", 11)) {
			if (v)
				printf("  %-28s %llu\n", name, v);
		} else if (is_byte_counter(name)) {
			human(v, hb, sizeof(hb));
			printf("  %-28s %llu (%s)\n", name, v, hb);
		} else {
			printf("  %-28s %llu\n", name, v);
		}
		first_field = false;
	}
	fclose(f);
	bf_stat_latency(mnt, dev, json, first_field);
	if (json)
		printf("\n  }");
	return 0;
}

/*
 * The mount's transport (.sys/.transport): "transport uring|dev", then
 * counters. Printed before the devices; absent from a daemon without it.
 */
static bool stat_transport(const char *mnt, bool json)
{
	char path[PATH_MAX], line[256], name[128], val[64], hb[32];
	bool first_field = true;
	FILE *f;

	if (snprintf(path, sizeof(path), "%s/.sys/.transport", mnt) >= (int)sizeof(path))
		return false;
	f = fopen(path, "r");
	if (!f)
		return false;
	if (json)
		printf("\n  \".transport\": {");
	else
		printf("transport:\n");
	while (fgets(line, sizeof(line), f)) {
		char *end;
		unsigned long long v;

		if (sscanf(line, "%127s %63s", name, val) != 2)
			continue;
		v = strtoull(val, &end, 10);
		if (json) {
			if (*end || end == val)
				printf("%s\n    \"%s\": \"%s\"", first_field ? "" : ",", name, val);
			else
				printf("%s\n    \"%s\": %llu", first_field ? "" : ",", name, v);
		} else if (!*end && end != val && is_byte_counter(name)) {
			human(v, hb, sizeof(hb));
			printf("  %-28s %llu (%s)\n", name, v, hb);
		} else {
			printf("  %-28s %s\n", name, val);
		}
		first_field = false;
	}
	fclose(f);
	if (json)
		printf("\n  }");
	else
		printf("\n");
	return true;
}

int bf_cmd_stat(int argc, char **argv)
{
	char mnt[PATH_MAX], type[64], path[PATH_MAX];
	const char *dev = NULL;
	bool json = false, first = true, prom = false;
	double interval = 0;
	long count = 0;
	struct dirent *de;
	int i, ret = 0;
	DIR *dir;

	mnt[0] = 0;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = true;
		else if (!strcmp(argv[i], "--prometheus"))
			prom = true;
		else if (!strcmp(argv[i], "-i") && i + 1 < argc) {
			char *end;

			interval = strtod(argv[++i], &end);
			if (*end || !(interval > 0)) {
				fprintf(stderr, "blkfs stat: -i %s: not a number of seconds\n", argv[i]);
				return 2;
			}
			if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
				count = strtol(argv[++i], &end, 10);
				if (*end || count <= 0) {
					fprintf(stderr, "blkfs stat: -i: %s: not a count\n", argv[i]);
					return 2;
				}
			}
		} else if (!mnt[0]) {
			ret = bf_canon_mnt(argv[i], mnt, sizeof(mnt));
			if (ret) {
				fprintf(stderr, "blkfs: %s: %s\n", argv[i], strerror(-ret));
				return 1;
			}
		} else if (!dev)
			dev = argv[i];
		else {
			fputs(bf_usage, stderr);
			return 2;
		}
	}
	if (!mnt[0]) {
		fprintf(stderr, "blkfs stat: expected a mount point\n%s", bf_usage);
		return 2;
	}
	bf_mount_type(mnt, type, sizeof(type));
	if (strcmp(type, "fuse.blkfs")) {
		fprintf(stderr, "blkfs: %s: not a blkfs mount\n", mnt);
		return 1;
	}
	if (interval > 0)
		return bf_stat_interval(mnt, dev, interval, count);
	if (prom)
		return bf_stat_prometheus(mnt, dev);
	if (json)
		printf("{");
	if (dev) {
		ret = stat_one(mnt, dev, json, true);
	} else {
		if (snprintf(path, sizeof(path), "%s/.sys", mnt) >= (int)sizeof(path)) {
			fprintf(stderr, "blkfs stat: %s: path too long\n", mnt);
			return 1;
		}
		dir = opendir(path);
		if (!dir) {
			fprintf(stderr, "blkfs stat: %s: %s\n", path, strerror(errno));
			return 1;
		}
		/* the devices follow the transport (after a comma in JSON) */
		first = !stat_transport(mnt, json) || !json;
		while ((de = readdir(dir))) {
			/* a device's directory; .transport and control are not */
			if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
			    !strcmp(de->d_name, "control"))
				continue;
			ret |= stat_one(mnt, de->d_name, json, first);
			first = false;
		}
		closedir(dir);
	}
	if (json)
		printf("\n}\n");
	return ret;
}
