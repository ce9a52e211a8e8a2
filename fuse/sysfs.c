/* SPDX-License-Identifier: MIT */
/*
 * fuse/sysfs.c - the mount's .sys tree: /MNT/.sys/DEV/ mirrors the kernel's
 * /sys/block/DEV/ (size, stat, queue/...), adds blkfs_stat, and shows each
 * filter's live knobs under .sys/DEV/FILTER/. Files are served in direct
 * mode from a snapshot taken at open; a write is one store, and a bad value
 * fails with EINVAL and changes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/lib/log.h"
#include "../backends/lib/trace.h"
#include "bf.h"
#include "devfile.h"
#include "live.h"
#include "rawio.h"
#include "slots.h"
#include "sysfs.h"

struct bf_dev_attr {
	const char *name;
	int (*show)(struct bf_dev *bd, char *buf, size_t len);
	int (*store)(struct bf_dev *bd, const char *buf, size_t len);
};

#define SHOW(buf, len, ...) snprintf(buf, len, __VA_ARGS__)

/*
 * A .sys file's write: a non-negative decimal in @buf (@len bytes, not a C
 * string) with an optional trailing newline, as `echo N > file` writes it;
 * -EINVAL otherwise, no message (the writer gets the errno, as from the
 * kernel's sysfs). Not crashcheck.c's parse_opt_u64(), which reads a
 * command-line option: a C string, any base, K/M/G suffixes, its own error
 * message. A .sys value has one unit (sectors, KiB) and no suffix.
 */
static int parse_attr_u64(const char *buf, size_t len, uint64_t *out)
{
	char tmp[32], *end;
	unsigned long long v;

	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	if (!len || len >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, buf, len);
	tmp[len] = 0;
	if (tmp[0] < '0' || tmp[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(tmp, &end, 10);
	if (errno || end != tmp + len)
		return -EINVAL;
	*out = v;
	return 0;
}

static int show_size(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%llu\n", (unsigned long long)(bf_dev_size(bd) / 512));
}

/*
 * A new size (bf_dev_resize()): a bare number in 512-byte sectors, the unit
 * it is shown in (so `cat size > size` changes nothing); a number with a
 * K, M, G or T suffix in bytes; or "auto". A refusal is logged with why.
 */
static int store_size(struct bf_dev *bd, const char *buf, size_t len)
{
	char spec[64], msg[1024];
	uint64_t sectors;
	int ret;

	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	if (!len || len >= sizeof(spec) || memchr(buf, 0, len)) {
		blk_err(".sys/%s/size: not a size", bd->cd->name);
		return -EINVAL;
	}
	memcpy(spec, buf, len);
	spec[len] = 0;
	if (!parse_attr_u64(spec, len, &sectors)) {
		if (!sectors || sectors > UINT64_MAX / 512) {
			blk_err(".sys/%s/size: %s sectors is not a size", bd->cd->name, spec);
			return -EINVAL;
		}
		snprintf(spec, sizeof(spec), "%llu", (unsigned long long)(sectors * 512));
	}
	ret = bf_dev_resize(bd, spec, msg, sizeof(msg));
	if (ret)
		blk_err(".sys/%s/size: %s", bd->cd->name, msg);
	return ret;
}

static int show_snapshots(struct bf_dev *bd, char *buf, size_t len)
{
	return bf_dev_snapshots_show(bd, buf, len);
}

static const struct bf_dev_attr snapshots_attr = { "snapshots", show_snapshots, NULL };

/*
 * The 17 fields of Documentation/block/stat.rst. Times are kept in
 * nanoseconds (as the kernel's part_stat nsecs[]) and shown divided by
 * @div: 1000000 in `stat` and `fuse_stat` (milliseconds, the kernel's unit,
 * from the sums, so no I/O is rounded on its own), 1 in `stat_ns` and
 * `fuse_stat_ns`, which `blkfs stat -i` and --prometheus read, so that a
 * ram device's microseconds are not lost to the millisecond.
 */
static int show_fields(char *buf, size_t len, const uint64_t ios[BT_NR_OPS],
		       const uint64_t bytes[BT_NR_OPS], const uint64_t ticks_ns[BT_NR_OPS],
		       uint64_t in_flight, uint64_t io_ticks_ns, uint64_t queue_ns, uint64_t div)
{
#define T(x) (unsigned long long)((x) / div)
	return SHOW(buf, len,
		    "%8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu %8llu "
		    "%8llu %8llu %8llu %8llu %8llu %8llu\n",
		    (unsigned long long)ios[BT_OP_READ], 0ULL,
		    (unsigned long long)(bytes[BT_OP_READ] / 512), T(ticks_ns[BT_OP_READ]),
		    (unsigned long long)ios[BT_OP_WRITE], 0ULL,
		    (unsigned long long)(bytes[BT_OP_WRITE] / 512), T(ticks_ns[BT_OP_WRITE]),
		    (unsigned long long)in_flight, T(io_ticks_ns), T(queue_ns),
		    (unsigned long long)ios[BT_OP_DISCARD], 0ULL,
		    (unsigned long long)(bytes[BT_OP_DISCARD] / 512), T(ticks_ns[BT_OP_DISCARD]),
		    (unsigned long long)ios[BT_OP_FLUSH], T(ticks_ns[BT_OP_FLUSH]));
#undef T
}

/* What reaches the backend (pc_stats). */
static int show_dev_stat(struct bf_dev *bd, char *buf, size_t len, uint64_t div)
{
	struct pc_stats st;
	uint64_t ios[BT_NR_OPS], bytes[BT_NR_OPS], ticks[BT_NR_OPS];

	pc_dev_stats(bd->pc, &st);
	ios[BT_OP_READ] = st.backend_read_ios;
	bytes[BT_OP_READ] = st.backend_read_bytes;
	ticks[BT_OP_READ] = st.read_ticks_ns;
	ios[BT_OP_WRITE] = st.backend_write_ios;
	bytes[BT_OP_WRITE] = st.backend_write_bytes;
	ticks[BT_OP_WRITE] = st.write_ticks_ns;
	ios[BT_OP_DISCARD] = st.backend_discards;
	bytes[BT_OP_DISCARD] = st.backend_discard_bytes;
	ticks[BT_OP_DISCARD] = st.discard_ticks_ns;
	ios[BT_OP_FLUSH] = st.backend_flushes;
	bytes[BT_OP_FLUSH] = 0;
	ticks[BT_OP_FLUSH] = st.flush_ticks_ns;
	return show_fields(buf, len, ios, bytes, ticks, st.in_flight, st.io_ticks_ns,
			   st.time_in_queue_ns, div);
}

static int show_stat(struct bf_dev *bd, char *buf, size_t len)
{
	return show_dev_stat(bd, buf, len, 1000000);
}

static int show_stat_ns(struct bf_dev *bd, char *buf, size_t len)
{
	return show_dev_stat(bd, buf, len, 1);
}

static int show_blkfs_stat(struct bf_dev *bd, char *buf, size_t len)
{
	struct pc_stats st;
	struct blk_backend *be;
	size_t n = 0;
	unsigned i;

	pc_dev_stats(bd->pc, &st);
#define F(name) n += (size_t)snprintf(buf + n, len - n, "%s %llu\n", #name, \
				      (unsigned long long)st.name); if (n >= len) return (int)len
	F(user_read_bytes); F(user_write_bytes); F(user_reads); F(user_writes);
	F(backend_read_bytes); F(backend_write_bytes); F(backend_read_ios); F(backend_write_ios);
	F(backend_flushes); F(backend_discards); F(backend_discard_bytes);
	F(direct_read_bytes); F(direct_write_bytes);
	F(rmw_read_bytes); F(split_ios); F(writeback_copy_bytes); F(direct_copy_bytes);
	F(direct_read_mapped);
	F(dirty_bytes); F(writeback_bytes); F(cached_bytes);
	F(cache_hits); F(cache_misses); F(readahead_bytes);
	F(partial_pblk_writes); F(dropped_bytes); F(writeback_errors); F(read_errors);
	F(punted_requests); F(pool_fallback_allocs); F(write_through_writes);
#undef F
	/* backend write sizes: write_size_<=N (bytes) count */
	for (i = 0; i < PC_HIST_BUCKETS; i++) {
		if (i == PC_HIST_BUCKETS - 1)
			n += (size_t)snprintf(buf + n, len - n, "write_size_gt_%llu %llu\n",
					      512ULL << (i - 1), (unsigned long long)st.write_hist[i]);
		else
			n += (size_t)snprintf(buf + n, len - n, "write_size_le_%llu %llu\n",
					      512ULL << i, (unsigned long long)st.write_hist[i]);
		if (n >= len)
			return (int)len;
	}
	{
		struct bf_slots_stats ss;
		uint64_t in_flight, peak, waits, slots, kept, kept_total, inl, parked;

		bf_slots_stats(&bd->slots, &ss);
		in_flight = ss.in_use;
		peak = ss.peak;
		waits = ss.waits;
		slots = ss.nr;
		bf_rawio_stats(&kept, &kept_total);
		bf_dev_reply_counts(bd, &inl, &parked);
		n += (size_t)snprintf(buf + n, len - n,
				      "requests_in_flight %llu\nrequests_in_flight_max %llu\n"
				      "request_slots %llu\n"
				      "request_slot_waits %llu\nreceive_buffers_kept %llu\n"
				      "receive_buffers_kept_total %llu\n"
				      "inline_replies %llu\nparked_replies %llu\n",
				      (unsigned long long)in_flight, (unsigned long long)peak,
				      (unsigned long long)slots,
				      (unsigned long long)waits, (unsigned long long)kept,
				      (unsigned long long)kept_total,
				      (unsigned long long)inl, (unsigned long long)parked);
		if (n >= len)
			return (int)len;
	}
	/* then each layer's own counters (the ram backend's arena_bytes, ...) */
	for (be = bd->be; be; be = be->next)
		if (be->ops->stat && n < len)
			n += be->ops->stat(be, buf + n, len - n);
	return (int)(n < len ? n : len);
}

static int show_lbs(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->geo.lbs);
}

static int show_pbs(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->geo.pbs);
}

static int show_io_min(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->geo.io_min);
}

static int show_io_opt(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->geo.io_opt);
}

static int show_max_hw(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->geo.max_io / 1024);
}

static int show_max_sectors(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", pc_dev_max_io(bd->pc) / 1024);
}

static int store_max_sectors(struct bf_dev *bd, const char *buf, size_t len)
{
	uint64_t kb;

	if (parse_attr_u64(buf, len, &kb) || kb > UINT32_MAX / 1024)
		return -EINVAL;
	return pc_dev_set_max_io(bd->pc, kb * 1024);
}

static int show_read_ahead(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", pc_dev_read_ahead(bd->pc) / 1024);
}

static int store_read_ahead(struct bf_dev *bd, const char *buf, size_t len)
{
	uint64_t kb;

	if (parse_attr_u64(buf, len, &kb) || kb > UINT32_MAX / 1024)
		return -EINVAL;
	return pc_dev_set_read_ahead(bd->pc, kb * 1024);
}

static int show_write_cache(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%s\n", pc_dev_write_through(bd->pc) ? "write through" : "write back");
}

/* As the kernel's queue/write_cache: "write back" or "write through" (a newline allowed). */
static int store_write_cache(struct bf_dev *bd, const char *buf, size_t len)
{
	if (len && buf[len - 1] == '\n')
		len--;
	if (len == 10 && !memcmp(buf, "write back", 10))
		pc_dev_set_write_through(bd->pc, false);
	else if (len == 13 && !memcmp(buf, "write through", 13))
		pc_dev_set_write_through(bd->pc, true);
	else
		return -EINVAL;
	return 0;
}

/*
 * As /proc/sys/vm/drop_caches for one device: "1" drops what blkfs and the
 * kernel's page cache of the file hold clean; dirty data stays.
 */
static int store_drop_caches(struct bf_dev *bd, const char *buf, size_t len)
{
	if (len && buf[len - 1] == '\n')
		len--;
	if (len != 1 || buf[0] != '1')
		return -EINVAL;
	bf_dev_drop_caches(bd);
	return 0;
}

static int show_zero(struct bf_dev *bd, char *buf, size_t len)
{
	(void)bd;
	return SHOW(buf, len, "0\n");
}

/* As /sys/block/DEV/ro: 1 on a read-only mount (-o ro), where every device refuses writes. */
static int show_ro(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%d\n", bd->d->conf.mount.read_only ? 1 : 0);
}

static int show_cache_block(struct bf_dev *bd, char *buf, size_t len)
{
	return SHOW(buf, len, "%u\n", bd->cblk);
}

/* The mount's transport (.sys/.transport): a name no device can have. */
static int show_transport(struct bf_dev *bd, char *buf, size_t len)
{
	(void)bd;
	return bf_rawio_show(buf, len);
}

/* As /sys/block/X/dev: the number blkparse shows the device level's events under. */
static int show_dev(struct bf_dev *bd, char *buf, size_t len)
{
	struct bt_dev *t = bt_dev_get(bd->cd->name);

	if (!t)
		return -ENOMEM;
	return SHOW(buf, len, "%u:%u\n", t->devnum[BT_LEVEL_DEV] >> BT_MINORBITS,
		    t->devnum[BT_LEVEL_DEV] & ((1u << BT_MINORBITS) - 1));
}

/* The FUSE level's requests in the fields of `stat` (what `blkfs stat -i` shows for it). */
static int show_fuse_fields(struct bf_dev *bd, char *buf, size_t len, uint64_t div)
{
	struct bt_dev *t = bt_dev_get(bd->cd->name);
	struct bt_counts c;

	if (!t)
		return -ENOMEM;
	bt_fuse_counts(t, &c);
	return show_fields(buf, len, c.ios, c.bytes, c.ticks_ns, c.in_flight, c.io_ticks_ns,
			   c.ticks_ns[0] + c.ticks_ns[1] + c.ticks_ns[2] + c.ticks_ns[3], div);
}

static int show_fuse_stat(struct bf_dev *bd, char *buf, size_t len)
{
	return show_fuse_fields(bd, buf, len, 1000000);
}

static int show_fuse_stat_ns(struct bf_dev *bd, char *buf, size_t len)
{
	return show_fuse_fields(bd, buf, len, 1);
}

static int show_latency(struct bf_dev *bd, char *buf, size_t len)
{
	struct bt_dev *t = bt_dev_get(bd->cd->name);

	if (!t)
		return -ENOMEM;
	return (int)bt_latency_show(t, buf, len);
}

static int show_latency_total(struct bf_dev *bd, char *buf, size_t len)
{
	struct bt_dev *t = bt_dev_get(bd->cd->name);

	if (!t)
		return -ENOMEM;
	return (int)bt_latency_total_show(t, buf, len);
}

/* `reset` starts both levels' histograms over (latency_total goes on counting). */
static int store_latency(struct bf_dev *bd, const char *buf, size_t len)
{
	struct bt_dev *t = bt_dev_get(bd->cd->name);

	while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
		len--;
	if (len != 5 || memcmp(buf, "reset", 5))
		return -EINVAL;
	if (!t)
		return -ENOMEM;
	bt_hist_reset(t);
	return 0;
}

static const struct bf_dev_attr transport_attr = { ".transport", show_transport, NULL };

static const struct bf_dev_attr dev_attrs[] = {
	{ "size", show_size, store_size },
	{ "stat", show_stat, NULL },
	{ "blkfs_stat", show_blkfs_stat, NULL },
	{ "ro", show_ro, NULL },
	{ "drop_caches", show_zero, store_drop_caches },
	{ "cache_block_size", show_cache_block, NULL },
	{ "dev", show_dev, NULL },
	{ "latency", show_latency, store_latency },
	{ "latency_total", show_latency_total, NULL },
	{ "fuse_stat", show_fuse_stat, NULL },
	{ "stat_ns", show_stat_ns, NULL },
	{ "fuse_stat_ns", show_fuse_stat_ns, NULL },
	{ NULL, NULL, NULL },
};

static const struct bf_dev_attr queue_attrs[] = {
	{ "logical_block_size", show_lbs, NULL },
	{ "hw_sector_size", show_lbs, NULL },
	{ "physical_block_size", show_pbs, NULL },
	{ "minimum_io_size", show_io_min, NULL },
	{ "optimal_io_size", show_io_opt, NULL },
	{ "max_hw_sectors_kb", show_max_hw, NULL },
	{ "max_sectors_kb", show_max_sectors, store_max_sectors },
	{ "read_ahead_kb", show_read_ahead, store_read_ahead },
	{ "rotational", show_zero, NULL },
	{ "write_cache", show_write_cache, store_write_cache },
	{ NULL, NULL, NULL },
};

/* ------------------------------------------------------------ the tree */

/*
 * Two kinds of node blocks: the daemon's (.sys, .transport, control), fixed
 * before mounting, and each device's (.sys/NAME/...: nodes[0] is NAME),
 * built before the device is published and fixed from then on. A block's
 * inode numbers are consecutive from its first node's; numbers are never
 * reused while mounted, so the kernel never mistakes one node for another.
 */
static struct bf_node *add_node(struct bf_node **nodes, size_t *nr, size_t *cap,
				uint64_t parent, const char *name, bool dir)
{
	struct bf_node *n;

	if (*nr == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		struct bf_node *v = realloc(*nodes, c * sizeof(*v));

		if (!v)
			return NULL;
		*nodes = v;
		*cap = c;
	}
	n = &(*nodes)[*nr];
	memset(n, 0, sizeof(*n));
	n->ino = 0;		/* numbered once the block is complete */
	n->parent = parent;
	n->name = name;
	n->dir = dir;
	(*nr)++;
	return n;
}

/* Number a complete block: its inodes, and parents given as block indexes. */
static void number_block(struct bf_daemon *d, struct bf_node *nodes, size_t nr,
			 uint64_t outside_parent)
{
	uint64_t base = __atomic_fetch_add(&d->next_sys_ino, nr, __ATOMIC_RELAXED);
	size_t i;

	for (i = 0; i < nr; i++) {
		nodes[i].ino = base + i;
		/* parents were recorded as index + 1 within the block, 0 = outside */
		nodes[i].parent = nodes[i].parent ? base + nodes[i].parent - 1 : outside_parent;
	}
}

int bf_sys_build(struct bf_daemon *d)
{
	struct bf_node *n;

	if (!d->next_sys_ino)
		d->next_sys_ino = BF_SYS_INO;
	/* parents as block index + 1 until numbered; 0: the mount's root */
	if (!add_node(&d->nodes, &d->nr_nodes, &d->cap_nodes, 0, ".sys", true))
		return -ENOMEM;
	n = add_node(&d->nodes, &d->nr_nodes, &d->cap_nodes, 1, transport_attr.name, false);
	if (!n)
		return -ENOMEM;
	n->da = &transport_attr;
	n = add_node(&d->nodes, &d->nr_nodes, &d->cap_nodes, 1, "control", false);
	if (!n)
		return -ENOMEM;
	n->ctl = true;
	number_block(d, d->nodes, d->nr_nodes, BF_ROOT_INO);
	return 0;
}

uint64_t bf_sys_root_ino(const struct bf_daemon *d)
{
	return d->nodes[0].ino;
}

int bf_sys_build_dev(struct bf_daemon *d, struct bf_dev *bd)
{
	struct bf_node **v = &bd->nodes;
	size_t *nr = &bd->nr_nodes, *cap = &bd->cap_nodes;
	const struct bf_dev_attr *a;
	const struct blk_attr *ba;
	struct blk_backend *be;
	struct bf_node *n;
	uint64_t q, f;

	if (!add_node(v, nr, cap, 0, bd->cd->name, true))
		return -ENOMEM;
	for (a = dev_attrs; a->name; a++) {
		n = add_node(v, nr, cap, 1, a->name, false);
		if (!n)
			return -ENOMEM;
		n->da = a;
	}
	if (bf_dev_has_snapshots(bd)) {
		n = add_node(v, nr, cap, 1, snapshots_attr.name, false);
		if (!n)
			return -ENOMEM;
		n->da = &snapshots_attr;
	}
	if (!add_node(v, nr, cap, 1, "queue", true))
		return -ENOMEM;
	q = *nr;
	for (a = queue_attrs; a->name; a++) {
		n = add_node(v, nr, cap, q, a->name, false);
		if (!n)
			return -ENOMEM;
		n->da = a;
	}
	for (be = bd->be; be; be = be->next) {
		if (!be->ops->attrs)
			continue;
		if (!add_node(v, nr, cap, 1, be->ops->name, true))
			return -ENOMEM;
		f = *nr;
		for (ba = be->ops->attrs; ba->name; ba++) {
			n = add_node(v, nr, cap, f, ba->name, false);
			if (!n)
				return -ENOMEM;
			n->be = be;
			n->ba = ba;
		}
	}
	for (size_t i = 0; i < *nr; i++)
		(*v)[i].dev = bd;
	number_block(d, *v, *nr, bf_sys_root_ino(d));
	return 0;
}

static bool in_block(const struct bf_node *nodes, size_t nr, uint64_t ino)
{
	return nr && ino >= nodes[0].ino && ino < nodes[0].ino + nr;
}

struct bf_node *bf_sys_node_locked(struct bf_daemon *d, uint64_t ino)
{
	int i;

	if (ino < BF_SYS_INO)
		return NULL;
	if (in_block(d->nodes, d->nr_nodes, ino))
		return &d->nodes[ino - d->nodes[0].ino];
	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct bf_dev *bd = d->devs[i];

		if (bd && in_block(bd->nodes, bd->nr_nodes, ino))
			return &bd->nodes[ino - bd->nodes[0].ino];
	}
	return NULL;
}

static struct bf_node *find_in(struct bf_node *nodes, size_t nr, uint64_t parent,
			       const char *name)
{
	size_t i;

	for (i = 0; i < nr; i++)
		if (nodes[i].parent == parent && !strcmp(nodes[i].name, name))
			return &nodes[i];
	return NULL;
}

struct bf_node *bf_sys_lookup_locked(struct bf_daemon *d, uint64_t parent, const char *name)
{
	struct bf_node *n = find_in(d->nodes, d->nr_nodes, parent, name);
	int i;

	if (n || parent < BF_SYS_INO)
		return n;
	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct bf_dev *bd = d->devs[i];

		if (!bd || !bd->nr_nodes)
			continue;
		/* .sys/NAME is the block's first node; the rest are below it */
		if (parent == bf_sys_root_ino(d) ? !strcmp(bd->nodes[0].name, name) :
		    in_block(bd->nodes, bd->nr_nodes, parent))
			return find_in(bd->nodes, bd->nr_nodes, parent, name);
	}
	return NULL;
}

/*
 * Positions: in .sys, the daemon's nodes by index, then device NAME at
 * d->nr_nodes + slot; in a device's directory, the index in its block.
 */
struct bf_node *bf_sys_next_locked(struct bf_daemon *d, uint64_t parent, uint64_t *pos)
{
	uint64_t p = *pos;
	int i;

	if (parent == bf_sys_root_ino(d)) {
		for (; p < d->nr_nodes; p++)
			if (d->nodes[p].parent == parent) {
				*pos = p;
				return &d->nodes[p];
			}
		if (p - d->nr_nodes >= PC_MAX_DEVS)
			return NULL;
		for (i = (int)(p - d->nr_nodes); i < PC_MAX_DEVS; i++)
			if (d->devs[i] && d->devs[i]->nr_nodes) {
				*pos = d->nr_nodes + (uint64_t)i;
				return &d->devs[i]->nodes[0];
			}
		return NULL;
	}
	for (i = 0; i < PC_MAX_DEVS; i++) {
		struct bf_dev *bd = d->devs[i];

		if (!bd || !in_block(bd->nodes, bd->nr_nodes, parent))
			continue;
		for (; p < bd->nr_nodes; p++)
			if (bd->nodes[p].parent == parent) {
				*pos = p;
				return &bd->nodes[p];
			}
		return NULL;
	}
	return NULL;
}

bool bf_sys_writable(const struct bf_node *n)
{
	if (n->ctl)
		return true;
	return n->da ? n->da->store != NULL : n->ba && n->ba->store != NULL;
}

int bf_sys_show(struct bf_node *n, char *buf, size_t len)
{
	if (n->ctl)
		return 0;	/* a command's result, once one is written */
	if (n->da)
		return n->da->show(n->dev, buf, len);
	if (n->ba && n->ba->show)
		return n->ba->show(n->be, buf, len);
	return -EINVAL;
}

int bf_sys_store(struct bf_node *n, const char *buf, size_t len)
{
	if (n->da && n->da->store)
		return n->da->store(n->dev, buf, len);
	if (n->ba && n->ba->store)
		return n->ba->store(n->be, buf, len);
	return -EACCES;
}
