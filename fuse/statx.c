/* SPDX-License-Identifier: MIT */
/*
 * fuse/statx.c - the other views of `blkfs stat`: latency percentiles
 * (from .sys/DEV/latency), iostat -x style lines per interval (-i, from
 * .sys/DEV/stat and .sys/DEV/fuse_stat), and Prometheus's text exposition
 * format (--prometheus). Clients: they read the mount's .sys files only.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../backends/lib/clock.h"
#include "bf.h"
#include "statx.h"

#define MAX_DEVS 256

/* The devices of the mount (@dev alone when given); returns how many, or -1. */
static int list_devs(const char *mnt, const char *dev, char names[][NAME_MAX + 1], int max)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *dir;
	int n = 0;

	if (dev) {
		snprintf(names[0], NAME_MAX + 1, "%s", dev);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.sys", mnt);
	dir = opendir(path);
	if (!dir) {
		fprintf(stderr, "blkfs stat: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((de = readdir(dir)) && n < max) {
		if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) ||
		    !strcmp(de->d_name, "control"))
			continue;
		snprintf(names[n++], NAME_MAX + 1, "%s", de->d_name);
	}
	closedir(dir);
	return n;
}

/* One "LEVEL OP count N sum_ns S avg_ns ... max_ns M" line of .sys/DEV/latency. */
struct lat_line {
	char level[16], op[16];
	unsigned long long count, sum, avg, p50, p90, p99, p999, max;
};

static bool parse_lat(const char *line, struct lat_line *l)
{
	return sscanf(line, "%15s %15s count %llu sum_ns %llu avg_ns %llu p50_ns %llu p90_ns %llu "
		      "p99_ns %llu p99.9_ns %llu max_ns %llu", l->level, l->op, &l->count, &l->sum,
		      &l->avg, &l->p50, &l->p90, &l->p99, &l->p999, &l->max) == 10;
}

static FILE *open_sys(const char *mnt, const char *dev, const char *file)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/.sys/%s/%s", mnt, dev, file) >= (int)sizeof(path))
		return NULL;
	return fopen(path, "r");
}

void bf_stat_latency(const char *mnt, const char *dev, bool json, bool first_field)
{
	char line[512];
	struct lat_line l;
	FILE *f = open_sys(mnt, dev, "latency");

	if (!f)
		return;		/* an older daemon */
	while (fgets(line, sizeof(line), f)) {
		if (!parse_lat(line, &l))
			continue;
		if (json) {
			printf("%s\n    \"latency_%s_%s\": { \"count\": %llu, \"sum_ns\": %llu, "
			       "\"p50_ns\": %llu, \"p90_ns\": %llu, \"p99_ns\": %llu, "
			       "\"p99.9_ns\": %llu, \"max_ns\": %llu }", first_field ? "" : ",",
			       l.level, l.op, l.count, l.sum, l.p50, l.p90, l.p99, l.p999, l.max);
			first_field = false;
		} else {
			printf("  latency %s %-7s count %llu avg %.1f us p50 %.1f p90 %.1f p99 %.1f "
			       "p99.9 %.1f max %.1f us\n", l.level, l.op, l.count, l.avg / 1e3,
			       l.p50 / 1e3, l.p90 / 1e3, l.p99 / 1e3, l.p999 / 1e3, l.max / 1e3);
		}
	}
	fclose(f);
}

/* ------------------------------------------------------------ iostat */

/* The 17 fields of a /sys/block/X/stat line, times in nanoseconds. */
struct io_fields {
	unsigned long long v[17];
};

enum { RD_IOS, RD_MERGES, RD_SECT, RD_TICKS, WR_IOS, WR_MERGES, WR_SECT, WR_TICKS, IN_FLIGHT,
       IO_TICKS, TIME_IN_QUEUE, DC_IOS, DC_MERGES, DC_SECT, DC_TICKS, FL_IOS, FL_TICKS };

/*
 * @file's fields ("stat" or "fuse_stat"): from its _ns twin, whose times
 * are nanoseconds, or, from a daemon without one, from @file itself, whose
 * milliseconds are made nanoseconds.
 */
static bool read_fields(const char *mnt, const char *dev, const char *file, struct io_fields *s)
{
	static const int ticks[] = { RD_TICKS, WR_TICKS, IO_TICKS, TIME_IN_QUEUE, DC_TICKS, FL_TICKS };
	char ns_file[32];
	FILE *f;
	bool ms = false;
	int n = 0;
	unsigned i;

	memset(s, 0, sizeof(*s));
	snprintf(ns_file, sizeof(ns_file), "%s_ns", file);
	f = open_sys(mnt, dev, ns_file);
	if (!f && errno == ENOENT) {
		f = open_sys(mnt, dev, file);
		ms = true;
	}
	if (!f)
		return false;
	while (n < 17 && fscanf(f, "%llu", &s->v[n]) == 1)
		n++;
	fclose(f);
	if (ms)
		for (i = 0; i < sizeof(ticks) / sizeof(ticks[0]); i++)
			s->v[ticks[i]] *= 1000000;
	return n >= 11;
}

static volatile sig_atomic_t stop_now;

static void on_sig(int sig)
{
	(void)sig;
	stop_now = 1;
}

int bf_stat_interval(const char *mnt, const char *dev, double secs, long count)
{
	static const char *const files[2] = { "stat", "fuse_stat" };
	static const char *const lvl[2] = { "device", "fuse" };
	static char names[MAX_DEVS][NAME_MAX + 1];
	static struct io_fields prev[MAX_DEVS][2];
	struct sigaction sa;
	uint64_t t_prev, t_next;
	int nr = list_devs(mnt, dev, names, MAX_DEVS), i, l;
	long round;

	if (nr < 0)
		return 1;
	if (dev && !read_fields(mnt, dev, "stat", &prev[0][0])) {
		fprintf(stderr, "blkfs stat: %s: no such device\n", dev);
		return 1;
	}
	for (i = 0; i < nr; i++)
		for (l = 0; l < 2; l++)
			read_fields(mnt, names[i], files[l], &prev[i][l]);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	t_prev = blk_now_ns();
	t_next = t_prev;
	for (round = 0; !count || round < count; round++) {
		uint64_t now;
		double dt;

		t_next += (uint64_t)(secs * 1e9);
		while (!stop_now && (now = blk_now_ns()) < t_next) {
			struct timespec ts = { (time_t)((t_next - now) / 1000000000ull),
					       (long)((t_next - now) % 1000000000ull) };

			nanosleep(&ts, NULL);
		}
		if (stop_now)
			break;
		now = blk_now_ns();
		dt = (double)(now - t_prev) / 1e9;
		t_prev = now;
		printf("%-16s %-6s %10s %10s %8s %8s %8s %8s %7s %6s\n", "Device", "level", "r/s",
		       "w/s", "rMB/s", "wMB/s", "r_await", "w_await", "aqu-sz", "%util");
		for (i = 0; i < nr; i++)
			for (l = 0; l < 2; l++) {
				struct io_fields cur, *p = &prev[i][l];
				double r, w, ra, wa, util;

				if (!read_fields(mnt, names[i], files[l], &cur))
					continue;
				/* ns busy / ns elapsed, in percent */
				util = (double)(cur.v[IO_TICKS] - p->v[IO_TICKS]) / 1e7 / dt;
				r = (double)(cur.v[RD_IOS] - p->v[RD_IOS]);
				w = (double)(cur.v[WR_IOS] - p->v[WR_IOS]);
				ra = r ? (double)(cur.v[RD_TICKS] - p->v[RD_TICKS]) / 1e6 / r : 0;
				wa = w ? (double)(cur.v[WR_TICKS] - p->v[WR_TICKS]) / 1e6 / w : 0;
				printf("%-16s %-6s %10.2f %10.2f %8.2f %8.2f %8.3f %8.3f %7.3f %6.1f\n",
				       names[i], lvl[l], r / dt, w / dt,
				       (double)(cur.v[RD_SECT] - p->v[RD_SECT]) * 512 / 1048576 / dt,
				       (double)(cur.v[WR_SECT] - p->v[WR_SECT]) * 512 / 1048576 / dt,
				       ra, wa,
				       (double)(cur.v[TIME_IN_QUEUE] - p->v[TIME_IN_QUEUE]) / 1e9 / dt,
				       util < 100 ? util : 100.0);
				*p = cur;
			}
		printf("\n");
		fflush(stdout);
	}
	return 0;
}

/* ---------------------------------------------------------- Prometheus */

/* blkfs_stat's gauges (levels); every other line is a counter. */
static bool is_gauge(const char *name)
{
	static const char *const g[] = {
		"dirty_bytes", "writeback_bytes", "cached_bytes", "requests_in_flight",
		"requests_in_flight_max", "request_slots", "receive_buffers_kept", NULL,
	};
	int i;

	for (i = 0; g[i]; i++)
		if (!strcmp(name, g[i]))
			return true;
	/*
	 * A layer's levels and settings: arena and slabs, in flight, queued,
	 * held or hung now, up or down now, pool sizes and limits. Exported as
	 * counters they went down (a pool's size, a queue's length), which
	 * a counter must never do.
	 */
	static const char *const lg[] = {
		"aio_queue_depth", "aio_queued", "aio_worker", "aio_fdsync", "aio_orphans",
		"slab_bytes", "slab_spare_bytes", "node_bytes", "delay_held_ios",
		"fault_badblock_ranges", "fault_hung_ios", "throttle_queue_len",
		"powerloss_unflushed_bytes", "powerloss_unflushed_writes",
		"powerloss_save_pool_bytes", "powerloss_save_pool_limit", NULL,
	};
	size_t n = strlen(name);

	for (i = 0; lg[i]; i++)
		if (!strcmp(name, lg[i]))
			return true;
	/* a filter's pool of per-I/O state: its size (NAME_pool) */
	if (n > 5 && !strcmp(name + n - 5, "_pool"))
		return true;
	return strstr(name, "inflight") || strstr(name, "in_flight") || strstr(name, "queued_now") ||
	       strstr(name, "arena") || !strcmp(name, "flakey_down") || strstr(name, "_peak") ||
	       strstr(name, "_max");
}

/* A name Prometheus takes: [a-zA-Z0-9_] (a '.' or '-' becomes '_'). */
static void prom_name(char *out, size_t len, const char *in)
{
	size_t i;

	for (i = 0; in[i] && i + 1 < len; i++)
		out[i] = (in[i] >= 'a' && in[i] <= 'z') || (in[i] >= 'A' && in[i] <= 'Z') ||
			 (in[i] >= '0' && in[i] <= '9') || in[i] == '_' ? in[i] : '_';
	out[i] = 0;
}

struct prom_sample {
	char name[128];
	char dev[NAME_MAX + 1];
	unsigned long long v;
	double scale;		/* to seconds, for a name that ended in _us, _ns, _ms; else 0 */
	bool gauge;
};

/* Prometheus wants base units: NAME_us becomes NAME_seconds (the value / 1e6). */
static double to_seconds(char *name)
{
	static const struct { const char *sfx; double scale; } u[] = {
		{ "_ns", 1e-9 }, { "_us", 1e-6 }, { "_ms", 1e-3 },
	};
	size_t n = strlen(name), i;

	for (i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (n > 3 && !strcmp(name + n - 3, u[i].sfx) && n + 6 < 128) {
			strcpy(name + n - 3, "_seconds");
			return u[i].scale;
		}
	return 0;
}

static int cmp_sample(const void *a, const void *b)
{
	const struct prom_sample *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : strcmp(x->dev, y->dev);
}

/*
 * The fields of `stat` (the device level) and `fuse_stat` (the FUSE level)
 * as families labelled by device, level and op: what `blkfs stat -i`
 * shows, for a dashboard to take rates of.
 */
static void prom_levels(const char *mnt, char names[][NAME_MAX + 1], int nr)
{
	static const char *const files[2] = { "stat", "fuse_stat" };
	static const char *const lvl[2] = { "device", "fuse" };
	/* op: its ios, sectors and ticks (ns) fields; -1 where `stat` has none */
	static const struct { const char *op; int ios, sect, ticks; } ops[] = {
		{ "read", RD_IOS, RD_SECT, RD_TICKS }, { "write", WR_IOS, WR_SECT, WR_TICKS },
		{ "discard", DC_IOS, DC_SECT, DC_TICKS }, { "flush", FL_IOS, -1, FL_TICKS },
	};
	static const struct { const char *name, *type, *help; } fam[] = {
		{ "blkfs_ios_total", "counter", "I/Os completed without error" },
		{ "blkfs_io_bytes_total", "counter", "Bytes of the I/Os completed without error" },
		{ "blkfs_io_time_seconds_total", "counter",
		  "Time the I/Os completed without error took, added up" },
		{ "blkfs_io_busy_seconds_total", "counter",
		  "Time with at least one I/O in flight (iostat's %util)" },
		{ "blkfs_ios_in_flight", "gauge", "I/Os in flight now" },
		{ "blkfs_io_time_weighted_seconds_total", "counter",
		  "Time of every I/O in flight added up, each counted while in flight "
		  "(iostat's aqu-sz is its rate)" },
	};
	static struct io_fields f[MAX_DEVS][2];
	bool ok[MAX_DEVS][2];
	unsigned k, o;
	int d, l;

	for (d = 0; d < nr; d++)
		for (l = 0; l < 2; l++)
			ok[d][l] = read_fields(mnt, names[d], files[l], &f[d][l]);
	for (k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		printf("# HELP %s %s, by device, level (device: the layer below the cache; fuse: "
		       "the user's requests) and op.\n", fam[k].name, fam[k].help);
		printf("# TYPE %s %s\n", fam[k].name, fam[k].type);
		for (d = 0; d < nr; d++)
			for (l = 0; l < 2; l++) {
				const unsigned long long *v = f[d][l].v;

				if (!ok[d][l])
					continue;
				if (k == 3 || k == 5) {
					/*
					 * node_exporter's node_disk_io_time_seconds_total and
					 * node_disk_io_time_weighted_seconds_total: the weighted
					 * one counts failed I/Os too, so the per-op times do not
					 * add up to it
					 */
					printf("%s{device=\"%s\",level=\"%s\"} %.9f\n", fam[k].name, names[d],
					       lvl[l], (double)v[k == 3 ? IO_TICKS : TIME_IN_QUEUE] / 1e9);
					continue;
				}
				if (k == 4) {
					printf("%s{device=\"%s\",level=\"%s\"} %llu\n", fam[k].name,
					       names[d], lvl[l], v[IN_FLIGHT]);
					continue;
				}
				for (o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
					if (k == 1 && ops[o].sect < 0)
						continue;
					printf("%s{device=\"%s\",level=\"%s\",op=\"%s\"} ", fam[k].name,
					       names[d], lvl[l], ops[o].op);
					if (k == 0)
						printf("%llu\n", v[ops[o].ios]);
					else if (k == 1)
						printf("%llu\n", v[ops[o].sect] * 512);
					else
						printf("%.9f\n", (double)v[ops[o].ticks] / 1e9);
				}
			}
	}
}

/*
 * The latency histograms, from .sys/DEV/latency_total: every level and op
 * of every device from the mount on, with the same buckets, so that
 * histogram_quantile() over rate() works: biolatency's log2 buckets of
 * 2 us up to 2^PROM_LAT_BUCKETS us (67 s), slower in +Inf. The counts are
 * totals a `reset` of .sys/DEV/latency does not take back.
 */
#define PROM_LAT_BUCKETS 26
#define LAT_LOG2 40		/* the buckets of a latency_total line (BH_LOG2) */

static void prom_latency(const char *mnt, char names[][NAME_MAX + 1], int nr)
{
	char line[2048];
	int d;

	printf("# HELP blkfs_latency_seconds Latency of I/O by device, level (device: the layer "
	       "below the cache; fuse: the user's requests) and op.\n");
	printf("# TYPE blkfs_latency_seconds histogram\n");
	for (d = 0; d < nr; d++) {
		FILE *f = open_sys(mnt, names[d], "latency_total");

		if (!f)
			continue;	/* an older daemon */
		while (fgets(line, sizeof(line), f)) {
			char level[16], op[16];
			unsigned long long count, sum, b[LAT_LOG2], cum = 0;
			int off = 0, k;
			char *p;

			if (sscanf(line, "%15s %15s count %llu sum_ns %llu usecs_log2%n", level, op, &count,
				   &sum, &off) != 4 || !off)
				continue;
			p = line + off;
			for (k = 0; k < LAT_LOG2; k++) {
				char *end;

				b[k] = strtoull(p, &end, 10);
				if (end == p)
					break;
				p = end;
			}
			if (k < LAT_LOG2)
				continue;
			for (k = 0; k < PROM_LAT_BUCKETS; k++) {
				/* bucket k holds [2^k, 2^(k+1)) us (k = 0: 0 and 1 us) */
				cum += b[k];
				printf("blkfs_latency_seconds_bucket{device=\"%s\",level=\"%s\",op=\"%s\","
				       "le=\"%.9g\"} %llu\n", names[d], level, op,
				       (double)(2ull << k) / 1e6, cum);
			}
			for (; k < LAT_LOG2; k++)
				cum += b[k];
			/* the fine histogram's count is the count: the log2 one may lag a little */
			if (count > cum)
				cum = count;
			printf("blkfs_latency_seconds_bucket{device=\"%s\",level=\"%s\",op=\"%s\","
			       "le=\"+Inf\"} %llu\n", names[d], level, op, cum);
			printf("blkfs_latency_seconds_sum{device=\"%s\",level=\"%s\",op=\"%s\"} %.9f\n",
			       names[d], level, op, (double)sum / 1e9);
			printf("blkfs_latency_seconds_count{device=\"%s\",level=\"%s\",op=\"%s\"} %llu\n",
			       names[d], level, op, cum);
		}
		fclose(f);
	}
}

int bf_stat_prometheus(const char *mnt, const char *dev)
{
	static char names[MAX_DEVS][NAME_MAX + 1];
	struct prom_sample *s = NULL;
	size_t nr_s = 0, cap = 0, i;
	int nr = list_devs(mnt, dev, names, MAX_DEVS), d;
	char line[512];

	if (nr < 0)
		return 1;
	/* counters and gauges: blkfs_stat's lines, grouped by family */
	for (d = 0; d < nr; d++) {
		FILE *f = open_sys(mnt, names[d], "blkfs_stat");

		if (!f) {
			fprintf(stderr, "blkfs stat: %s/.sys/%s/blkfs_stat: %s\n", mnt, names[d],
				strerror(errno));
			free(s);
			return 1;
		}
		while (fgets(line, sizeof(line), f)) {
			char n[128];
			unsigned long long v;

			if (sscanf(line, "%127s %llu", n, &v) != 2 || !strncmp(n, "write_size_", 11))
				continue;
			if (nr_s == cap) {
				struct prom_sample *ns = realloc(s, (cap = cap ? 2 * cap : 256) * sizeof(*s));

				if (!ns) {
					fclose(f);
					free(s);
					return 1;
				}
				s = ns;
			}
			prom_name(s[nr_s].name, sizeof(s[nr_s].name), n);
			s[nr_s].scale = to_seconds(s[nr_s].name);
			snprintf(s[nr_s].dev, sizeof(s[nr_s].dev), "%s", names[d]);
			s[nr_s].v = v;
			s[nr_s].gauge = is_gauge(n);
			nr_s++;
		}
		fclose(f);
	}
	if (nr_s)
		qsort(s, nr_s, sizeof(*s), cmp_sample);
	for (i = 0; i < nr_s; i++) {
		/* a counter's name ends in _total once (receive_buffers_kept_total) */
		size_t nl = strlen(s[i].name);
		const char *suffix = s[i].gauge || (nl > 6 && !strcmp(s[i].name + nl - 6, "_total")) ?
				     "" : "_total";

		if (!i || strcmp(s[i].name, s[i - 1].name)) {
			printf("# HELP blkfs_%s%s blkfs_stat's %s.\n", s[i].name, suffix, s[i].name);
			printf("# TYPE blkfs_%s%s %s\n", s[i].name, suffix, s[i].gauge ? "gauge" : "counter");
		}
		if (s[i].scale)
			printf("blkfs_%s%s{device=\"%s\"} %.9g\n", s[i].name, suffix, s[i].dev,
			       (double)s[i].v * s[i].scale);
		else
			printf("blkfs_%s%s{device=\"%s\"} %llu\n", s[i].name, suffix, s[i].dev, s[i].v);
	}
	free(s);
	/* the backend write sizes: a histogram (sum and count: the bytes and writes) */
	printf("# HELP blkfs_backend_write_size_bytes Sizes of the writes that reached the backend.\n");
	printf("# TYPE blkfs_backend_write_size_bytes histogram\n");
	for (d = 0; d < nr; d++) {
		FILE *f = open_sys(mnt, names[d], "blkfs_stat");
		unsigned long long cum = 0, sum = 0, ios = 0, v, le;

		if (!f)
			continue;
		while (fgets(line, sizeof(line), f)) {
			if (sscanf(line, "write_size_le_%llu %llu", &le, &v) == 2) {
				cum += v;
				printf("blkfs_backend_write_size_bytes_bucket{device=\"%s\",le=\"%llu\"} "
				       "%llu\n", names[d], le, cum);
			} else if (sscanf(line, "write_size_gt_%llu %llu", &le, &v) == 2) {
				cum += v;
			} else if (sscanf(line, "backend_write_bytes %llu", &v) == 1) {
				sum = v;
			} else if (sscanf(line, "backend_write_ios %llu", &v) == 1) {
				ios = v;
			}
		}
		fclose(f);
		printf("blkfs_backend_write_size_bytes_bucket{device=\"%s\",le=\"+Inf\"} %llu\n",
		       names[d], cum);
		printf("blkfs_backend_write_size_bytes_sum{device=\"%s\"} %llu\n", names[d], sum);
		printf("blkfs_backend_write_size_bytes_count{device=\"%s\"} %llu\n", names[d], cum);
		(void)ios;
	}
	/* iostat's counters at both levels: .sys/DEV/stat and .sys/DEV/fuse_stat */
	prom_levels(mnt, names, nr);
	/* latencies: biolatency's buckets, cumulative, in seconds */
	prom_latency(mnt, names, nr);
	return 0;
}
