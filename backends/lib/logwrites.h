/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/logwrites.h - the on-disk format of the kernel's dm-log-writes
 * target (drivers/md/dm-log-writes.c; xfstests' src/log-writes reads it),
 * which the record filter writes and the crash explorer reads.
 *
 * All fields little-endian. With S = sectorsize (the recorded device's
 * logical block size):
 *
 *   offset 0        struct log_write_super, the rest of the S bytes zero
 *   offset S        entry 0: struct log_write_entry, padded to S bytes;
 *                   a mark's text follows the header inside those S bytes
 *                   (data_len bytes, no NUL);
 *                   then nr_sectors * S bytes of data for a write
 *                   (none for a flush, a mark or a discard)
 *   ...             entry 1, and so on: nr_entries of them.
 *
 * sector and nr_sectors count S-byte sectors of the recorded device.
 * Flags: FLUSH (a flush; the writes logged before it are the ones that had
 * completed when it was submitted), FUA (durable on completion: never
 * written by blkfs), DISCARD (the range reads as zeros: blkfs logs
 * DISCARD and WRITE_ZEROES so), MARK (a named point, data_len bytes of text).
 * Nothing here locks or allocates.
 */
#ifndef BLKFS_LOGWRITES_H
#define BLKFS_LOGWRITES_H

#include <stdint.h>
#include <string.h>

#define LW_MAGIC		0x6a736677736872ull
#define LW_VERSION		1ull
#define LW_FLUSH		(1ull << 0)
#define LW_FUA			(1ull << 1)
#define LW_DISCARD		(1ull << 2)
#define LW_MARK			(1ull << 3)
#define LW_METADATA		(1ull << 4)	/* a hint only; ignored */

#define LW_SUPER_SIZE		28	/* magic, version, nr_entries (8 each), sectorsize (4) */
#define LW_ENTRY_SIZE		32	/* sector, nr_sectors, flags, data_len (8 each) */
/* The longest mark in a log of sector size @s: it shares the entry's sector. */
#define LW_MARK_MAX(s)		((s) - LW_ENTRY_SIZE)

struct lw_entry {
	uint64_t sector;
	uint64_t nr_sectors;
	uint64_t flags;
	uint64_t data_len;
};

static inline void lw_put64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t lw_get64(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* The super block into @p (@sectorsize bytes, zero-padded). */
static inline void lw_encode_super(unsigned char *p, uint32_t sectorsize, uint64_t nr_entries)
{
	memset(p, 0, sectorsize);
	lw_put64(p, LW_MAGIC);
	lw_put64(p + 8, LW_VERSION);
	lw_put64(p + 16, nr_entries);
	p[24] = (unsigned char)sectorsize;
	p[25] = (unsigned char)(sectorsize >> 8);
	p[26] = (unsigned char)(sectorsize >> 16);
	p[27] = (unsigned char)(sectorsize >> 24);
}

/* An entry's header sector into @p (@sectorsize bytes); @text: a mark's, data_len bytes. */
static inline void lw_encode_entry(unsigned char *p, uint32_t sectorsize, const struct lw_entry *e,
				   const void *text)
{
	memset(p, 0, sectorsize);
	lw_put64(p, e->sector);
	lw_put64(p + 8, e->nr_sectors);
	lw_put64(p + 16, e->flags);
	lw_put64(p + 24, e->data_len);
	if (text && e->data_len)
		memcpy(p + LW_ENTRY_SIZE, text, (size_t)e->data_len);
}

static inline void lw_decode_entry(const unsigned char *p, struct lw_entry *e)
{
	e->sector = lw_get64(p);
	e->nr_sectors = lw_get64(p + 8);
	e->flags = lw_get64(p + 16);
	e->data_len = lw_get64(p + 24);
}

/* ---- the reader (logwrites.c) ---- */

/* One entry of a parsed log. */
struct lw_rec {
	struct lw_entry e;
	size_t off;			/* the header's byte offset in the file */
	const unsigned char *data;	/* a write's data, a mark's text; NULL for others */
	size_t last_ev;			/* set by lw_log_model(): model events up to this entry */
};

struct lw_log {
	const unsigned char *buf;	/* the caller's, which must outlive the log */
	size_t len;
	uint32_t sectorsize;
	uint64_t nr;
	struct lw_rec *v;
	uint64_t end;			/* the byte after the last entry */
};

/**
 * lw_parse - read a log from a buffer, strictly
 * @buf, @len: the whole file
 * @dev_size: the base's size in bytes: an entry past it is refused
 * @want_ss: the base's logical block size (0: any); another sectorsize is refused
 * @log: filled on success; lw_log_free() frees it (pointers go into @buf)
 * @err, @errlen: on -EINVAL, why: wrong magic or version, a bad sectorsize,
 *	a file shorter than the super block's sector, a truncated entry or
 *	one past the base's end (named by entry number
 *	and byte offset), unknown flags, a mark too long
 *
 * Bytes after the last of nr_entries entries are ignored (a log device is
 * larger than its log). Returns: 0, -EINVAL, -ENOMEM.
 */
int lw_parse(const void *buf, size_t len, uint64_t dev_size, uint32_t want_ss,
	     struct lw_log *log, char *err, size_t errlen);
void lw_log_free(struct lw_log *log);

struct blk_cm_log;
/*
 * The model's events (backends/lib/crashmodel.h) of @log, for physical block
 * size @pbs: each write, discard (zeros), flush (covering every write
 * logged before it) and mark; FUA carried. Sets each entry's last_ev.
 * Returns 0 or -ENOMEM (and @m is empty).
 */
int lw_log_model(const struct lw_log *log, uint32_t pbs, struct blk_cm_log *m);

#endif
