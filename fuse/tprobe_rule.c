/* SPDX-License-Identifier: MIT */
/*
 * fuse/tprobe_rule.c - which transport `auto` takes from what the probe
 * measured, and the probe's cache file (fuse/tprobe_rule.h). Pure functions:
 * cmd_probe.c measures, rawio.c asks.
 *
 * Why a geometric mean: the tests answer different questions (a QD1 caller
 * waits for each wake-up, QD32 is throughput), and on this 2-vCPU guest the
 * ring lost 10-15% at QD32 on a quiet machine while it won up to 8x at QD1
 * under load; the geometric mean weighs a 2x win and a 2x loss alike, so
 * neither a huge QD1 win nor a small QD32 loss decides alone.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tprobe_rule.h"

const char *const tprobe_test_names[TPROBE_NR_TESTS] = { "qd1_read", "qd1_write", "qd32_rw" };

#define CACHE_MAGIC "blkfs-transport-probe 1"

static bool usable(double v)
{
	return isfinite(v) && v > 0;
}

bool tprobe_choose(struct tprobe_result *r)
{
	double logsum = 0;
	bool ok = true;
	int i;

	for (i = 0; i < TPROBE_NR_TESTS; i++) {
		if (usable(r->dev_iops[i]) && usable(r->ring_iops[i])) {
			r->ratio[i] = r->ring_iops[i] / r->dev_iops[i];
			logsum += log(r->ratio[i]);
		} else {
			r->ratio[i] = 0;
			ok = false;
		}
	}
	r->geomean = ok ? exp(logsum / TPROBE_NR_TESTS) : 0;
	/* compare in the printed precision: a printed 0.970 never means dev */
	r->ring = ok && r->geomean >= TPROBE_RING_MIN_GEOMEAN - 5e-4;
	return r->ring;
}

char *tprobe_ratios_str(const struct tprobe_result *r, char *buf, size_t len)
{
	size_t n = 0;
	int i, w;

	if (!len)
		return buf;
	buf[0] = 0;
	for (i = 0; i < TPROBE_NR_TESTS && n < len; i++) {
		w = snprintf(buf + n, len - n, "%s%.3f", i ? "," : "", r->ratio[i]);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	return buf;
}

int tprobe_cache_format(const struct tprobe_result *r, const char *release, const char *boot_id,
			char *buf, size_t len)
{
	size_t n;
	int w, i;

	w = snprintf(buf, len, CACHE_MAGIC "\nkernel %s\nboot_id %s\nchoice %s\ngeomean %.3f\n",
		     release, boot_id, r->ring ? "uring" : "dev", r->geomean);
	if (w < 0 || (size_t)w >= len)
		return -ENOSPC;
	n = (size_t)w;
	for (i = 0; i < TPROBE_NR_TESTS; i++) {
		w = snprintf(buf + n, len - n, "test %s dev %.0f uring %.0f ratio %.3f\n",
			     tprobe_test_names[i], r->dev_iops[i], r->ring_iops[i], r->ratio[i]);
		if (w < 0 || (size_t)w >= len - n)
			return -ENOSPC;
		n += (size_t)w;
	}
	return (int)n;
}

/* The rest of the line after "@key ", one word, into @out; false if the line is not that. */
static bool word_after(const char *line, const char *key, char *out, size_t len)
{
	size_t k = strlen(key), n;

	if (strncmp(line, key, k) || line[k] != ' ')
		return false;
	line += k + 1;
	n = strcspn(line, " \n");
	if (!n || n >= len || (line[n] && line[n] != '\n'))
		return false;
	memcpy(out, line, n);
	out[n] = 0;
	return true;
}

int tprobe_cache_parse(const char *buf, const char *release, const char *boot_id,
		       struct tprobe_result *r)
{
	char kernel[256] = "", boot[64] = "", choice[16] = "", name[32], *end;
	const char *line = buf;
	bool seen[TPROBE_NR_TESTS] = { false };
	bool stale = false;
	int i, field = 0;

	memset(r, 0, sizeof(*r));
	if (!buf || strncmp(buf, CACHE_MAGIC "\n", strlen(CACHE_MAGIC) + 1))
		return -EINVAL;
	for (line = strchr(buf, '\n') + 1; *line; line = end + 1) {
		double dev, ring, ratio;
		int used = 0;

		end = strchr(line, '\n');
		if (!end)
			return -EINVAL;	/* a file cut short: every line ends */
		if (word_after(line, "kernel", kernel, sizeof(kernel))) {
			field |= 1;
		} else if (word_after(line, "boot_id", boot, sizeof(boot))) {
			field |= 2;
		} else if (word_after(line, "choice", choice, sizeof(choice))) {
			field |= 4;
		} else if (!strncmp(line, "geomean ", 8)) {
			field |= 8;	/* recomputed from the IOPS below */
		} else if (sscanf(line, "test %31s dev %lf uring %lf ratio %lf%n", name, &dev, &ring,
				  &ratio, &used) == 4 && line + used == end) {
			for (i = 0; i < TPROBE_NR_TESTS; i++)
				if (!strcmp(name, tprobe_test_names[i]))
					break;
			if (i == TPROBE_NR_TESTS || seen[i] || !usable(dev) || !usable(ring))
				return -EINVAL;
			seen[i] = true;
			r->dev_iops[i] = dev;
			r->ring_iops[i] = ring;
		} else {
			return -EINVAL;
		}
	}
	if (field != 15)
		return -EINVAL;
	for (i = 0; i < TPROBE_NR_TESTS; i++)
		if (!seen[i])
			return -EINVAL;
	if (strcmp(choice, "uring") && strcmp(choice, "dev"))
		return -EINVAL;
	stale = strcmp(kernel, release) || strcmp(boot, boot_id);
	tprobe_choose(r);
	if (r->ring != !strcmp(choice, "uring"))
		return -EINVAL;	/* its choice is not the rule's: written by something else */
	return stale ? -ESTALE : 0;
}
