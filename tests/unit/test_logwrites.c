// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_logwrites.c - the strict dm-log-writes reader
 * (backends/lib/logwrites.c): a log built here with the encoder reads back
 * entry by entry and turns into the model's events; each refusal names
 * what is wrong, with the entry number and byte offset.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/lib/crashmodel.h"
#include "../../backends/lib/logwrites.h"

#define SS 512u

static unsigned char buf[64 * 1024];
static size_t len;
static uint64_t nr;

static void start(void)
{
	len = SS;
	nr = 0;
	memset(buf, 0, sizeof(buf));
}

static void add(uint64_t sector, uint64_t nsec, uint64_t flags, const char *text, int fill)
{
	struct lw_entry e = { .sector = sector, .nr_sectors = nsec, .flags = flags,
			      .data_len = text ? strlen(text) : 0 };

	lw_encode_entry(buf + len, SS, &e, text);
	len += SS;
	if (!(flags & (LW_DISCARD | LW_MARK))) {
		memset(buf + len, fill, nsec * SS);
		len += nsec * SS;
	}
	nr++;
}

static void finish(void)
{
	lw_encode_super(buf, SS, nr);
}

#define refused(l, dev, ss, want) refused_at(__LINE__, l, dev, ss, want)
static void refused_at(int line, size_t l, uint64_t dev, uint32_t ss, const char *want)
{
	struct lw_log log;
	char err[256] = "";

	cr_assert_eq(lw_parse(buf, l, dev, ss, &log, err, sizeof(err)), -EINVAL,
		     "line %d: taken, expected '%s'", line, want);
	cr_assert(strstr(err, want), "message '%s' lacks '%s'", err, want);
}

Test(logwrites, reads_back_and_models)
{
	struct lw_log log;
	struct blk_cm_log m;
	char err[256] = "";

	start();
	add(0, 8, 0, NULL, 'A');
	add(0, 0, LW_FLUSH, NULL, 0);
	add(8, 8, LW_DISCARD, NULL, 0);
	add(0, 0, LW_MARK, "committed 1", 0);
	add(16, 1, LW_FUA, NULL, 'B');
	finish();
	cr_assert_eq(lw_parse(buf, len, 1 << 20, SS, &log, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(log.nr, 5);
	cr_assert_eq(log.end, len);
	cr_assert_eq(log.v[0].data[0], 'A');
	cr_assert_eq(log.v[0].off, SS);
	cr_assert_eq(memcmp(log.v[3].data, "committed 1", 11), 0);
	cr_assert_eq(log.v[4].e.flags, LW_FUA);
	cr_assert_eq(lw_log_model(&log, 4096, &m), 0);
	cr_assert_eq(m.nr, 5);
	cr_assert_eq(m.ev[0].kind, BLK_CM_WRITE);
	cr_assert_eq(m.ev[0].len, 4096);
	cr_assert_eq(m.ev[1].kind, BLK_CM_FLUSH);
	cr_assert_eq(m.ev[1].covers, 1);
	cr_assert_eq(m.ev[2].data, NULL);
	cr_assert_eq(m.ev[3].kind, BLK_CM_MARK);
	cr_assert_eq(m.ev[4].flags, BLK_CM_FUA);
	cr_assert_eq(log.v[3].last_ev, 4);
	blk_cm_destroy(&m);
	lw_log_free(&log);
	/* bytes after the last entry are ignored */
	cr_assert_eq(lw_parse(buf, len + 1000, 1 << 20, 0, &log, err, sizeof(err)), 0, "%s", err);
	lw_log_free(&log);
}

Test(logwrites, refusals_name_entry_and_offset)
{
	start();
	add(0, 8, 0, NULL, 'A');
	add(8, 8, 0, NULL, 'B');
	finish();
	refused(20, 1 << 20, 0, "shorter than its 28-byte super block");
	refused(len - 1, 1 << 20, 0, "entry 1 at byte 5120: truncated: its 4096 bytes of data");
	refused(SS * 10 + 100, 1 << 20, 0, "entry 1 at byte 5120: truncated");
	refused(len, 1 << 20, 4096, "sectorsize 512 at byte 24, but the base's logical block size is 4096");
	refused(len, 6144, 0, "entry 1 at byte 5120: sectors 8 to 16 are past the base's end (12 sectors");
	buf[0] ^= 1;
	refused(len, 1 << 20, 0, "not a dm-log-writes log: magic");
	buf[0] ^= 1;
	buf[8] = 2;
	refused(len, 1 << 20, 0, "log version 2");
	buf[8] = 1;
	buf[25] = 3;	/* 768 */
	refused(len, 1 << 20, 0, "sectorsize 768 at byte 24: not a power of two");
	buf[25] = 2;
	buf[16] = 200;
	refused(len, 1 << 20, 0, "nr_entries 200 at byte 16");
	buf[16] = 2;
	buf[SS + 16] = 0x40;
	refused(len, 1 << 20, 0, "entry 0 at byte 512: unknown flags 0x40");
	buf[SS + 16] = 0;

	start();
	add(0, 0, LW_MARK, "x", 0);
	finish();
	buf[SS + 24] = 0xf0;	/* data_len 496 */
	buf[SS + 25] = 1;
	refused(len, 1 << 20, 0, "entry 0 at byte 512: a mark of 496 bytes and 0 sectors (at most 480 bytes");
}
