// SPDX-License-Identifier: MIT
/*
 * backends/lib/logwrites.c - the strict reader of dm-log-writes logs
 * (logwrites.h has the format): a pure buffer-to-struct parser with no I/O,
 * so the fuzz target drives it as it is, and the explorer hands it a
 * mapped file. Everything it refuses is named by entry number and byte
 * offset, so a log from elsewhere that blkfs cannot take says why.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crashmodel.h"
#include "logwrites.h"

static int lw_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int lw_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

void lw_log_free(struct lw_log *log)
{
	free(log->v);
	memset(log, 0, sizeof(*log));
}

#define KNOWN_FLAGS (LW_FLUSH | LW_FUA | LW_DISCARD | LW_MARK | LW_METADATA)

int lw_parse(const void *buf, size_t len, uint64_t dev_size, uint32_t want_ss,
	     struct lw_log *log, char *err, size_t errlen)
{
	const unsigned char *p = buf;
	uint64_t magic, version, nr, i, off;
	uint32_t ss;

	memset(log, 0, sizeof(*log));
	if (len < LW_SUPER_SIZE)
		return lw_error(err, errlen, "not a dm-log-writes log: %zu bytes, shorter than its "
				"%d-byte super block", len, LW_SUPER_SIZE);
	magic = lw_get64(p);
	if (magic != LW_MAGIC)
		return lw_error(err, errlen, "not a dm-log-writes log: magic %#llx at byte 0, "
				"expected %#llx", (unsigned long long)magic,
				(unsigned long long)LW_MAGIC);
	version = lw_get64(p + 8);
	if (version != LW_VERSION)
		return lw_error(err, errlen, "log version %llu at byte 8: only version %llu is known",
				(unsigned long long)version, (unsigned long long)LW_VERSION);
	nr = lw_get64(p + 16);
	ss = (uint32_t)p[24] | (uint32_t)p[25] << 8 | (uint32_t)p[26] << 16 |
	     (uint32_t)p[27] << 24;
	if (ss < 512 || ss > 65536 || (ss & (ss - 1)))
		return lw_error(err, errlen, "sectorsize %u at byte 24: not a power of two from "
				"512 to 65536", ss);
	if (want_ss && ss != want_ss)
		return lw_error(err, errlen, "sectorsize %u at byte 24, but the base's logical "
				"block size is %u", ss, want_ss);
	/* The super block fills its sector (the log's first entry starts after it). */
	if (len < ss)
		return lw_error(err, errlen, "truncated: %zu bytes, shorter than the super block's "
				"sector of %u bytes (sectorsize at byte 24)", len, ss);
	/* Each entry takes at least one sector: a count the file cannot hold is a lie. */
	if (nr > (len - ss) / ss)
		return lw_error(err, errlen, "nr_entries %llu at byte 16: the file has room for "
				"at most %zu entries (%zu bytes)", (unsigned long long)nr,
				(len - ss) / ss, len);
	log->v = calloc(nr ? (size_t)nr : 1, sizeof(*log->v));
	if (!log->v)
		return -ENOMEM;
	log->sectorsize = ss;
	log->nr = nr;
	log->buf = p;
	log->len = len;
	off = ss;
	for (i = 0; i < nr; i++) {
		struct lw_rec *r = &log->v[i];
		struct lw_entry *e = &r->e;
		uint64_t dlen;

		if (off > len || len - off < ss) {
			lw_error(err, errlen, "entry %llu at byte %llu: truncated: its header needs "
				 "%u bytes, the file ends at byte %zu", (unsigned long long)i,
				 (unsigned long long)off, ss, len);
			goto out_free;
		}
		lw_decode_entry(p + off, e);
		r->off = off;
		if (e->flags & ~KNOWN_FLAGS) {
			lw_error(err, errlen, "entry %llu at byte %llu: unknown flags %#llx",
				 (unsigned long long)i, (unsigned long long)off,
				 (unsigned long long)(e->flags & ~KNOWN_FLAGS));
			goto out_free;
		}
		if (e->flags & LW_MARK) {
			if (e->data_len > LW_MARK_MAX(ss) || e->nr_sectors) {
				lw_error(err, errlen, "entry %llu at byte %llu: a mark of %llu bytes "
					 "and %llu sectors (at most %u bytes, no sectors)",
					 (unsigned long long)i, (unsigned long long)off,
					 (unsigned long long)e->data_len,
					 (unsigned long long)e->nr_sectors, LW_MARK_MAX(ss));
				goto out_free;
			}
			r->data = p + off + LW_ENTRY_SIZE;
			off += ss;
			continue;
		}
		off += ss;
		if (e->nr_sectors &&
		    (e->nr_sectors > dev_size / ss || e->sector > dev_size / ss - e->nr_sectors)) {
			lw_error(err, errlen, "entry %llu at byte %llu: sectors %llu to %llu are past "
				 "the base's end (%llu sectors of %u bytes)", (unsigned long long)i,
				 (unsigned long long)r->off, (unsigned long long)e->sector,
				 (unsigned long long)(e->sector + e->nr_sectors),
				 (unsigned long long)(dev_size / ss), ss);
			goto out_free;
		}
		if (e->flags & LW_DISCARD)
			continue;
		/* A kernel log may carry data_len for data it wrote inline: skip it. */
		dlen = e->nr_sectors * ss;
		if (e->data_len && !e->nr_sectors) {
			lw_error(err, errlen, "entry %llu at byte %llu: data_len %llu without sectors",
				 (unsigned long long)i, (unsigned long long)r->off,
				 (unsigned long long)e->data_len);
			goto out_free;
		}
		if (len - off < dlen) {
			lw_error(err, errlen, "entry %llu at byte %llu: truncated: its %llu bytes of "
				 "data from byte %llu run past the file's end at byte %zu",
				 (unsigned long long)i, (unsigned long long)r->off,
				 (unsigned long long)dlen, (unsigned long long)off, len);
			goto out_free;
		}
		r->data = p + off;
		off += dlen;
	}
	log->end = off;
	return 0;

out_free:
	lw_log_free(log);
	return -EINVAL;
}

int lw_log_model(const struct lw_log *log, uint32_t pbs, struct blk_cm_log *m)
{
	uint64_t i;
	int ret;

	blk_cm_init(m, pbs);
	for (i = 0; i < log->nr; i++) {
		const struct lw_rec *r = &log->v[i];
		uint64_t ss = log->sectorsize;

		if (r->e.flags & LW_MARK) {
			ret = blk_cm_mark(m);
		} else {
			ret = 0;
			/* A flush with data (REQ_PREFLUSH): the flush, then the write. */
			if (r->e.flags & LW_FLUSH)
				ret = blk_cm_flush(m, m->nr_writes);
			if (!ret && r->e.nr_sectors)
				ret = blk_cm_write(m, r->e.sector * ss, r->e.nr_sectors * ss,
						   r->e.flags & LW_DISCARD ? NULL : r->data,
						   r->e.flags & LW_FUA ? BLK_CM_FUA : 0);
		}
		if (ret) {
			blk_cm_destroy(m);
			return ret;
		}
		log->v[i].last_ev = m->nr;
	}
	return 0;
}
