// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_record.c - the record filter (backends/filters/record.c) and the
 * dm-log-writes layout it writes (backends/lib/logwrites.h): the encoder's
 * bytes against the kernel's struct layout, a recording over ram and over
 * the fake read back entry by entry, the order of writes around a flush in
 * flight, a failed flush, a mark waiting for a flush in flight, marks and
 * their limit, a log that cannot be written, and a plugged write or flush
 * at the gate of a start that flushes its plug (backends/lib/plug.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "../../backends/lib/clock.h"
#include "../../backends/lib/logwrites.h"
#include "../../backends/lib/plug.h"
#include "../../core/conf.h"
#include "../../core/stack.h"
#include "fake_backend.h"
#include "helpers.h"

static char path[64];

static void setup(void)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/blkfs-record-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
}

static void teardown(void)
{
	unlink(path);
}

TestSuite(record, .init = setup, .fini = teardown);

/* ---- reading a log back ---- */

struct rlog {
	unsigned char *buf;
	size_t len;
	uint64_t nr;
	uint32_t s;
	struct lw_entry e[64];
	size_t data_off[64];	/* where each entry's data (or mark text) starts */
};

static void rlog_read(struct rlog *l)
{
	struct stat st;
	size_t off;
	uint64_t i;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	l->len = (size_t)st.st_size;
	l->buf = malloc(l->len + 1);
	cr_assert_not_null(l->buf);
	cr_assert_eq(read(fd, l->buf, l->len), (ssize_t)l->len);
	close(fd);
	cr_assert_geq(l->len, LW_SUPER_SIZE);
	cr_assert_eq(lw_get64(l->buf), LW_MAGIC);
	cr_assert_eq(lw_get64(l->buf + 8), 1);
	l->nr = lw_get64(l->buf + 16);
	l->s = (uint32_t)l->buf[24] | (uint32_t)l->buf[25] << 8 | (uint32_t)l->buf[26] << 16 |
	       (uint32_t)l->buf[27] << 24;
	cr_assert_leq(l->nr, 64);
	off = l->s;
	for (i = 0; i < l->nr; i++) {
		cr_assert_leq(off + l->s, l->len, "entry %llu past the end", (unsigned long long)i);
		lw_decode_entry(l->buf + off, &l->e[i]);
		if (l->e[i].flags & LW_MARK) {
			l->data_off[i] = off + LW_ENTRY_SIZE;
			off += l->s;
		} else {
			off += l->s;
			l->data_off[i] = off;
			if (!(l->e[i].flags & LW_DISCARD))
				off += l->e[i].nr_sectors * l->s;
		}
	}
	cr_assert_eq(off, l->len, "the file has %zu bytes after its %llu entries",
		     l->len - off, (unsigned long long)l->nr);
}

static void rlog_free(struct rlog *l)
{
	free(l->buf);
}

/* ================================================================== */

Test(record, encoder_layout_is_the_kernels)
{
	unsigned char sb[512], en[512];
	struct lw_entry e = { .sector = 0x0102030405060708ull, .nr_sectors = 3,
			      .flags = LW_MARK, .data_len = 5 };
	static const unsigned char want_sb[28] = {
		0x72, 0x68, 0x73, 0x77, 0x66, 0x73, 0x6a, 0x00,	/* magic, little-endian */
		1, 0, 0, 0, 0, 0, 0, 0,				/* version */
		7, 0, 0, 0, 0, 0, 0, 0,				/* nr_entries */
		0x00, 0x02, 0, 0,				/* sectorsize 512 */
	};
	size_t i;

	memset(sb, 0xaa, sizeof(sb));
	lw_encode_super(sb, 512, 7);
	cr_assert_eq(memcmp(sb, want_sb, sizeof(want_sb)), 0);
	for (i = sizeof(want_sb); i < sizeof(sb); i++)
		cr_assert_eq(sb[i], 0, "super byte %zu not zero", i);
	memset(en, 0xaa, sizeof(en));
	lw_encode_entry(en, 512, &e, "hello");
	cr_assert_eq(en[0], 0x08);
	cr_assert_eq(en[7], 0x01);
	cr_assert_eq(en[8], 3);
	cr_assert_eq(en[16], 8);	/* LOG_MARK_FLAG = 1 << 3 */
	cr_assert_eq(en[24], 5);
	cr_assert_eq(memcmp(en + 32, "hello", 5), 0);
	for (i = 37; i < sizeof(en); i++)
		cr_assert_eq(en[i], 0, "entry byte %zu not zero", i);
	cr_assert_eq(LW_FLUSH, 1);
	cr_assert_eq(LW_FUA, 2);
	cr_assert_eq(LW_DISCARD, 4);
	cr_assert_eq(LW_MARK_MAX(512), 480);
}

static struct blk_backend *open_ram(struct conf *conf, const char *extra)
{
	char text[512], cerr[512];
	struct blk_backend *top;

	snprintf(text, sizeof(text),
		 "[device r0]\nbackend = ram\nsize = 4M\nphysical_block_size = 4096\n"
		 "filters = record\nrecord.path = %s\n%s", path, extra);
	cr_assert_eq(conf_parse_buf(text, strlen(text), "t.conf", conf, cerr, sizeof(cerr)), 0,
		     "%s", cerr);
	top = stack_open(conf, &conf->devs[0], NULL, cerr, sizeof(cerr));
	cr_assert(!IS_ERR_OR_NULL(top), "%s", cerr);
	cr_assert_str_eq(top->ops->name, "record");
	return top;
}

Test(record, over_ram_writes_flushes_discards_marks_in_order)
{
	struct conf conf;
	struct blk_backend *be = open_ram(&conf, "");
	unsigned char a[4096], b[4096], snapdata[4096];
	struct blk_snap_info si[2];
	struct rlog l;

	fill_pattern(a, sizeof(a), 0, 1);
	fill_pattern(b, sizeof(b), 8192, 2);
	/* before the start: in the snapshot, not in the log */
	cr_assert_eq(tio_do(be, BLK_WRITE, 0, 4096, b, 0, NULL), 0);
	cr_assert_str_eq(attr_show(be, "state"), "stopped\n");
	cr_assert_eq(attr_store(be, "mark", "early\n"), -EBADFD);
	cr_assert_eq(attr_store(be, "start", "base\n"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "recording\n");
	cr_assert_eq(attr_store(be, "start", "base2\n"), -EBUSY);
	cr_assert_eq(blk_snap_list(be, si, 2), 1);
	cr_assert_str_eq(si[0].name, "base");

	cr_assert_eq(tio_do(be, BLK_WRITE, 0, 4096, a, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_WRITE, 8192, 1024, b, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_FLUSH, 0, 0, NULL, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_DISCARD, 4096, 4096, NULL, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_WRITE_ZEROES, 16384, 512, NULL, 0, NULL), 0);
	cr_assert_eq(attr_store(be, "mark", "committed 17\n"), 0);
	cr_assert_eq(tio_do(be, BLK_READ, 0, 512, NULL, 0, NULL), 0);	/* reads are not logged */
	cr_assert_eq(stat_get(be, "record_entries"), 6);
	cr_assert_eq(stat_get(be, "record_marks"), 1);
	cr_assert_eq(attr_store(be, "stop", "1\n"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "stopped\n");
	cr_assert_eq(attr_store(be, "stop", "1\n"), -EALREADY);
	/* after the stop: not logged */
	cr_assert_eq(tio_do(be, BLK_WRITE, 0, 4096, b, 0, NULL), 0);

	rlog_read(&l);
	cr_assert_eq(l.s, 512);
	cr_assert_eq(l.nr, 6);
	cr_assert_eq(l.e[0].sector, 0);
	cr_assert_eq(l.e[0].nr_sectors, 8);
	cr_assert_eq(l.e[0].flags, 0);
	cr_assert_eq(memcmp(l.buf + l.data_off[0], a, 4096), 0);
	cr_assert_eq(l.e[1].sector, 16);
	cr_assert_eq(l.e[1].nr_sectors, 2);
	cr_assert_eq(memcmp(l.buf + l.data_off[1], b, 1024), 0);
	cr_assert_eq(l.e[2].flags, LW_FLUSH);
	cr_assert_eq(l.e[2].nr_sectors, 0);
	cr_assert_eq(l.e[3].flags, LW_DISCARD);
	cr_assert_eq(l.e[3].sector, 8);
	cr_assert_eq(l.e[3].nr_sectors, 8);
	cr_assert_eq(l.e[4].flags, LW_DISCARD);
	cr_assert_eq(l.e[4].sector, 32);
	cr_assert_eq(l.e[4].nr_sectors, 1);
	cr_assert_eq(l.e[5].flags, LW_MARK);
	cr_assert_eq(l.e[5].data_len, 12);
	cr_assert_eq(memcmp(l.buf + l.data_off[5], "committed 17", 12), 0);
	rlog_free(&l);

	/* the snapshot holds what was there at the start */
	cr_assert_eq(blk_snap_reset(be, "base"), 0);
	cr_assert_eq(tio_do(be, BLK_READ, 0, 4096, NULL, 0, snapdata), 0);
	cr_assert_eq(memcmp(snapdata, b, 1024), 0);
	stack_close(be);
	conf_free(&conf);
}

Test(record, marks_up_to_one_sector)
{
	struct conf conf;
	struct blk_backend *be = open_ram(&conf, "");
	char m[600];
	struct rlog l;

	cr_assert_eq(attr_store(be, "start", "-\n"), 0);	/* no snapshot */
	memset(m, 'x', sizeof(m));
	m[480] = 0;
	cr_assert_eq(attr_store(be, "mark", m), 0);
	m[480] = 'x';
	m[481] = 0;
	cr_assert_eq(attr_store(be, "mark", m), -EINVAL);
	cr_assert_eq(attr_store(be, "mark", "\n"), -EINVAL);
	cr_assert_eq(attr_store(be, "mark", "two\nlines\n"), -EINVAL);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);
	rlog_read(&l);
	cr_assert_eq(l.nr, 1);
	cr_assert_eq(l.e[0].data_len, 480);
	rlog_free(&l);
	stack_close(be);
	conf_free(&conf);
}

/* ---- over the fake: a write completing while a flush is in flight ---- */

static struct blk_backend *open_over(struct blk_backend *next, struct tparams *tp)
{
	filter_params_init(tp, "record", next, "/etc/blkfs.conf", 2);
	tparams_add(tp, "record.path", path, 3);
	return filter_open(tp);
}

Test(record, a_write_completing_during_a_flush_is_logged_after_it)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 4096, .pbs = 4096 };
	struct fake_be *fb = fake_create(&geo);
	struct tparams tp;
	struct blk_backend *be;
	struct tio w1, w2, fl;
	unsigned char a[4096];
	struct rlog l;

	cr_assert_not_null(fb);
	be = open_over(fake_backend(fb), &tp);
	memset(a, 0x5a, sizeof(a));
	cr_assert_eq(attr_store(be, "start", "-"), 0);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&w1, BLK_WRITE, 0, 4096, a, 0);
	tio_init(&w2, BLK_WRITE, 8192, 4096, a, 0);
	tio_init(&fl, BLK_FLUSH, 0, 0, NULL, 0);
	cr_assert_eq(tio_submit(be, &w1), 0);
	cr_assert_eq(tio_submit(be, &w2), 0);
	cr_assert(fake_complete_one(fb, 0));		/* w1 completes */
	cr_assert(tio_wait(&w1, WAIT_MS));
	cr_assert_eq(tio_submit(be, &fl), 0);		/* the flush, while w2 is in flight */
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));	/* w2 completes during it */
	cr_assert(tio_wait(&w2, WAIT_MS));
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_FLUSH)));
	cr_assert(tio_wait(&fl, WAIT_MS));
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);
	rlog_read(&l);
	cr_assert_eq(l.s, 4096);
	cr_assert_eq(l.nr, 3);
	cr_assert_eq(l.e[0].sector, 0);
	cr_assert_eq(l.e[1].flags, LW_FLUSH);
	cr_assert_eq(l.e[2].sector, 2);
	rlog_free(&l);
	tio_free(&w1);
	tio_free(&w2);
	be->ops->close(be);
	fake_destroy(fb);
}

/*
 * A flush that fails is no flush: no entry, and what completed while it was
 * in flight is logged in order all the same, before the next flush that
 * succeeds.
 */
Test(record, a_failed_flush_is_not_logged)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 4096, .pbs = 4096 };
	const struct fake_fault f = { .op_mask = FAKE_OP(BLK_FLUSH), .countdown = 1, .err = -EIO };
	struct fake_be *fb = fake_create(&geo);
	struct tparams tp;
	struct blk_backend *be;
	struct tio w1, w2, fl, fl2;
	unsigned char a[4096];
	struct rlog l;

	cr_assert_not_null(fb);
	be = open_over(fake_backend(fb), &tp);
	memset(a, 0x5a, sizeof(a));
	cr_assert_eq(attr_store(be, "start", "-"), 0);
	fake_set_mode(fb, FAKE_MANUAL);
	tio_init(&w1, BLK_WRITE, 0, 4096, a, 0);
	tio_init(&w2, BLK_WRITE, 8192, 4096, a, 0);
	tio_init(&fl, BLK_FLUSH, 0, 0, NULL, 0);
	tio_init(&fl2, BLK_FLUSH, 0, 0, NULL, 0);
	cr_assert_eq(tio_submit(be, &w1), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));
	cr_assert(tio_wait(&w1, WAIT_MS));
	fake_fault_set(fb, &f);
	cr_assert_eq(tio_submit(be, &fl), 0);		/* fails when it completes */
	cr_assert_eq(tio_submit(be, &w2), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));	/* w2 completes during it */
	cr_assert(tio_wait(&w2, WAIT_MS));
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_FLUSH)));
	cr_assert(tio_wait(&fl, WAIT_MS));
	cr_assert_eq(fl.res, -EIO);
	cr_assert_eq(stat_get(be, "record_flushes"), 0);
	cr_assert_eq(tio_submit(be, &fl2), 0);		/* this one succeeds */
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_FLUSH)));
	cr_assert(tio_wait(&fl2, WAIT_MS));
	cr_assert_eq(fl2.res, 0);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);
	rlog_read(&l);
	cr_assert_eq(l.nr, 3, "%llu entries", (unsigned long long)l.nr);
	cr_assert_eq(l.e[0].flags, 0);
	cr_assert_eq(l.e[0].sector, 0);
	cr_assert_eq(l.e[1].flags, 0);
	cr_assert_eq(l.e[1].sector, 2);
	cr_assert_eq(memcmp(l.buf + l.data_off[1], a, 4096), 0);
	cr_assert_eq(l.e[2].flags, LW_FLUSH);
	rlog_free(&l);
	tio_free(&w1);
	tio_free(&w2);
	be->ops->close(be);
	fake_destroy(fb);
}

struct mark_thread {
	struct blk_backend *be;
	const char *text;
	int ret;
	int done;			/* atomic */
};

static void *mark_main(void *arg)
{
	struct mark_thread *m = arg;

	m->ret = attr_store(m->be, "mark", m->text);
	__atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * Until the filter has taken @n marks (a mark held counts), then a little
 * longer: a mark that does not wait has returned by then.
 */
static void wait_marks(struct blk_backend *be, uint64_t n)
{
	uint64_t end = blk_now_ns() + WAIT_MS * 1000000ull;

	while (stat_get(be, "record_marks") < n) {
		cr_assert_lt(blk_now_ns(), end, "the mark was not taken");
		usleep(1000);
	}
	usleep(50 * 1000);
}

/*
 * A mark written while a flush is held waits for it: the log has the
 * writes completed before the flush was submitted, the flush, the write
 * that completed during it (before the mark), the mark, and the write that
 * completed after the mark. The writer of the mark returns only then. A
 * second mark, while a flush that fails is in flight, comes after it with
 * no flush entry.
 */
Test(record, a_mark_waits_for_the_flushes_in_flight)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 4096, .pbs = 4096 };
	const struct fake_fault f = { .op_mask = FAKE_OP(BLK_FLUSH), .countdown = 1, .err = -EIO };
	struct fake_be *fb = fake_create(&geo);
	struct tparams tp;
	struct blk_backend *be;
	struct tio w[4], fl, fl2;
	unsigned char a[4096];
	struct mark_thread m = { .text = "m1" }, m2 = { .text = "m2" };
	pthread_t t;
	struct rlog l;
	int i;

	cr_assert_not_null(fb);
	be = open_over(fake_backend(fb), &tp);
	m.be = m2.be = be;
	memset(a, 0x33, sizeof(a));
	cr_assert_eq(attr_store(be, "start", "-"), 0);
	fake_set_mode(fb, FAKE_MANUAL);
	for (i = 0; i < 4; i++)
		tio_init(&w[i], BLK_WRITE, (uint64_t)i * 4096, 4096, a, 0);
	tio_init(&fl, BLK_FLUSH, 0, 0, NULL, 0);
	tio_init(&fl2, BLK_FLUSH, 0, 0, NULL, 0);
	cr_assert_eq(tio_submit(be, &w[0]), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));
	cr_assert(tio_wait(&w[0], WAIT_MS));
	cr_assert_eq(tio_submit(be, &fl), 0);		/* held */
	cr_assert_eq(tio_submit(be, &w[1]), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));	/* during the flush */
	cr_assert(tio_wait(&w[1], WAIT_MS));
	cr_assert_eq(pthread_create(&t, NULL, mark_main, &m), 0);
	wait_marks(be, 1);
	cr_assert_eq(__atomic_load_n(&m.done, __ATOMIC_ACQUIRE), 0,
		     "the mark returned while the flush before it was in flight");
	cr_assert_eq(tio_submit(be, &w[2]), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));	/* after the mark */
	cr_assert(tio_wait(&w[2], WAIT_MS));
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_FLUSH)));
	cr_assert(tio_wait(&fl, WAIT_MS));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(m.ret, 0);

	/* a failing flush in flight: the mark waits, and no flush entry comes */
	fake_fault_set(fb, &f);
	cr_assert_eq(tio_submit(be, &fl2), 0);
	cr_assert_eq(pthread_create(&t, NULL, mark_main, &m2), 0);
	wait_marks(be, 2);
	cr_assert_eq(__atomic_load_n(&m2.done, __ATOMIC_ACQUIRE), 0);
	cr_assert_eq(tio_submit(be, &w[3]), 0);
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_WRITE)));
	cr_assert(tio_wait(&w[3], WAIT_MS));
	cr_assert(fake_complete_op(fb, FAKE_OP(BLK_FLUSH)));
	cr_assert(tio_wait(&fl2, WAIT_MS));
	cr_assert_eq(fl2.res, -EIO);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(m2.ret, 0);
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);

	rlog_read(&l);
	cr_assert_eq(l.nr, 7, "%llu entries", (unsigned long long)l.nr);
	cr_assert_eq(l.e[0].flags, 0);
	cr_assert_eq(l.e[0].sector, 0);
	cr_assert_eq(l.e[1].flags, LW_FLUSH);
	cr_assert_eq(l.e[2].flags, 0);
	cr_assert_eq(l.e[2].sector, 1);
	cr_assert_eq(memcmp(l.buf + l.data_off[2], a, 4096), 0);
	cr_assert_eq(l.e[3].flags, LW_MARK);
	cr_assert_eq(memcmp(l.buf + l.data_off[3], "m1", 2), 0);
	cr_assert_eq(l.e[4].flags, 0);
	cr_assert_eq(l.e[4].sector, 2);
	cr_assert_eq(l.e[5].flags, LW_MARK);
	cr_assert_eq(memcmp(l.buf + l.data_off[5], "m2", 2), 0);
	cr_assert_eq(l.e[6].flags, 0);
	cr_assert_eq(l.e[6].sector, 3);
	rlog_free(&l);
	for (i = 0; i < 4; i++)
		tio_free(&w[i]);
	be->ops->close(be);
	fake_destroy(fb);
}

/*
 * Writes completing late and out of order (the fake's deferred mode) while
 * flushes, one of them failing, are in flight one at a time: every write is
 * logged once with its data; a write that completed before a flush was
 * submitted comes before that flush's entry, one submitted after the
 * flush completed comes after it; the failed flush has no entry.
 */
Test(record, writes_and_flushes_out_of_order_keep_the_flush_order)
{
	enum { NW = 40, NF = 8 };
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 4096, .pbs = 4096 };
	const struct fake_fault f = { .op_mask = FAKE_OP(BLK_FLUSH), .countdown = 3, .err = -EIO };
	struct fake_be *fb = fake_create(&geo);
	struct tparams tp;
	struct blk_backend *be;
	struct tio w[NW], fl[NF];
	long at[NW], fat[NF];
	int nf = 0, i, k, ok = 0;
	unsigned char d[4096];
	struct rlog l;

	cr_assert_not_null(fb);
	be = open_over(fake_backend(fb), &tp);
	cr_assert_eq(attr_store(be, "start", "-"), 0);
	fake_set_seed(fb, 7);
	fake_set_delay(fb, 400);
	fake_set_mode(fb, FAKE_DEFERRED);
	fake_fault_set(fb, &f);
	tio_done_reset();
	for (i = 0; i < NW; i++) {
		memset(d, i + 1, sizeof(d));
		tio_init(&w[i], BLK_WRITE, (uint64_t)i * 4096, 4096, d, 0);
		cr_assert_eq(tio_submit(be, &w[i]), 0);
		if (i % 5 == 2) {
			if (nf)
				cr_assert(tio_wait(&fl[nf - 1], WAIT_MS));
			tio_init(&fl[nf], BLK_FLUSH, 0, 0, NULL, 0);
			cr_assert_eq(tio_submit(be, &fl[nf]), 0);
			nf++;
		}
		usleep(100);
	}
	cr_assert(tio_done_wait(NW + nf, WAIT_MS));
	fake_set_mode(fb, FAKE_INLINE);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);

	rlog_read(&l);
	for (i = 0; i < NW; i++)
		at[i] = -1;
	for (k = 0; k < (int)l.nr; k++) {
		if (l.e[k].flags == LW_FLUSH) {
			/* the k-th flush that succeeded, in submission order */
			while (ok < nf && fl[ok].res)
				ok++;
			cr_assert_lt(ok, nf, "more flush entries than flushes that succeeded");
			fat[ok++] = k;
			continue;
		}
		cr_assert_eq(l.e[k].flags, 0);
		i = (int)l.e[k].sector;
		cr_assert_lt(i, NW);
		cr_assert_eq(at[i], -1, "write %d logged twice", i);
		at[i] = k;
		memset(d, i + 1, sizeof(d));
		cr_assert_eq(memcmp(l.buf + l.data_off[k], d, 4096), 0);
	}
	while (ok < nf && fl[ok].res)
		ok++;
	cr_assert_eq(ok, nf, "a flush that succeeded has no entry");
	cr_assert_eq(fl[2].res, -EIO);
	for (i = 0; i < NW; i++)
		cr_assert_neq(at[i], -1, "write %d not logged", i);
	for (k = 0; k < nf; k++) {
		if (fl[k].res)
			continue;
		for (i = 0; i < NW; i++) {
			if (w[i].done_ns < fl[k].submit_ns)
				cr_assert_lt(at[i], fat[k], "write %d completed before flush %d was "
					     "submitted, logged after it", i, k);
			if (w[i].submit_ns > fl[k].done_ns)
				cr_assert_gt(at[i], fat[k], "write %d submitted after flush %d "
					     "completed, logged before it", i, k);
		}
	}
	rlog_free(&l);
	for (i = 0; i < NW; i++)
		tio_free(&w[i]);
	be->ops->close(be);
	fake_destroy(fb);
}

Test(record, must_sit_directly_above_the_backend)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 512, .pbs = 4096 };
	struct fake_be *fb = fake_create(&geo);
	struct tparams tp, tp2;
	struct blk_backend *pl;

	cr_assert_not_null(fb);
	filter_params_init(&tp, "powerloss", fake_backend(fb), "/etc/blkfs.conf", 2);
	pl = filter_open(&tp);
	filter_params_init(&tp2, "record", pl, "/etc/blkfs.conf", 2);
	filter_open_fails(&tp2, "directly above the backend");
	pl->ops->close(pl);
	fake_destroy(fb);
}

/*
 * The log file may grow to 64 KiB only (RLIMIT_FSIZE; Criterion runs each
 * test in a process of its own): the recording fails with EFBIG, says so
 * in state and stat, and the device goes on serving.
 */
Test(record, a_log_that_cannot_be_written_stops_the_recording)
{
	struct rlimit rl = { .rlim_cur = 64 * KiB, .rlim_max = RLIM_INFINITY };
	struct conf conf;
	struct blk_backend *be;
	unsigned char a[65536], back[65536];
	uint64_t end = blk_now_ns() + WAIT_MS * 1000000ull;
	int i;

	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	be = open_ram(&conf, "");
	cr_assert_eq(attr_store(be, "start", "s"), 0);
	fill_pattern(a, sizeof(a), 0, 3);
	for (i = 0; i < 4; i++)
		cr_assert_eq(tio_do(be, BLK_WRITE, (uint64_t)i * 65536, 65536, a, 0, NULL), 0);
	/* the log is mapped: the failure may have come at the first write already */
	i = attr_store(be, "mark", "m");
	cr_assert(i == 0 || i == -EBADFD, "mark: %d", i);
	while (strcmp(attr_show(be, "state"), "recording\n") == 0) {
		cr_assert_lt(blk_now_ns(), end, "the recording went on past the file size limit");
		usleep(1000);
	}
	cr_assert_str_eq(attr_show(be, "state"), "failed: File too large\n");
	cr_assert_eq(stat_get(be, "record_failed"), 1);
	cr_assert_eq(stat_get(be, "record_error_errno"), EFBIG);
	cr_assert_eq(attr_store(be, "mark", "m2"), -EBADFD);
	/* the device serves on */
	cr_assert_eq(tio_do(be, BLK_WRITE, 65536, 65536, a, 0, NULL), 0);
	cr_assert_eq(tio_do(be, BLK_READ, 65536, 65536, NULL, 0, back), 0);
	cr_assert_eq(memcmp(a, back, sizeof(a)), 0);
	cr_assert_eq(attr_store(be, "stop", "1"), 0);
	cr_assert_str_eq(attr_show(be, "state"), "failed: File too large\n");
	stack_close(be);
	conf_free(&conf);
}

/* ---- the gate and a plugged submitter (backends/lib/plug.h) ---- */

/* How long a plugged submitter may sit at the gate before the test calls it stuck. */
#define PLUG_WAIT_MS 3000u

/*
 * A start closes the gate and waits for the writes in flight; a plugged
 * thread (a ring queue thread's batch) whose own plug holds one of them
 * back, and which now submits a write or a flush, must flush its plug at
 * the gate, or it waits for the start that waits for it. Here the plug
 * holds the first write's completion (a callback deferred to it, as aio
 * defers its io_submit()); without the flush the second I/O sits at the
 * gate, the test sees it after PLUG_WAIT_MS, ends the first write itself
 * to let everything go, and fails.
 */
struct gate_run {
	struct blk_backend *be;
	struct fake_be *fb;
	struct tio w1, io2;		/* a write in flight, then the I/O at the gate */
	int submit1, submit2;		/* their submit()s' results */
	int deferred;			/* blk_plug_defer() of the held work: 1 */
	int runs;			/* the held work's runs */
	int runs_at_return;		/* its runs when io2's submit() returned */
	int ready, go, done;		/* atomic: the submitter's steps */
	pthread_t submitter, starter;
	pid_t starter_tid;		/* atomic: 0 until the starter runs */
	int start_ret;
};

/* The plug's deferred work: send (here: end) the write it held back. */
static void gate_held_send(void *data)
{
	struct gate_run *g = data;

	g->runs++;
	fake_complete_op(g->fb, FAKE_OP(BLK_WRITE));
}

static void *gate_submitter(void *arg)
{
	struct gate_run *g = arg;
	struct blk_plug plug;

	blk_plug_start(&plug);
	g->submit1 = tio_submit(g->be, &g->w1);
	g->deferred = blk_plug_defer(gate_held_send, g);
	__atomic_store_n(&g->ready, 1, __ATOMIC_RELEASE);
	while (!__atomic_load_n(&g->go, __ATOMIC_ACQUIRE))
		sched_yield();
	g->submit2 = tio_submit(g->be, &g->io2);
	g->runs_at_return = g->runs;
	blk_plug_finish(&plug);
	__atomic_store_n(&g->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *gate_starter(void *arg)
{
	struct gate_run *g = arg;

	__atomic_store_n(&g->starter_tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	g->start_ret = attr_store(g->be, "start", "-");
	return NULL;
}

/* Is thread @tid of this process asleep (the starter waiting for the writes in flight)? */
static bool task_sleeps(pid_t tid)
{
	char name[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(name, sizeof(name), "/proc/self/task/%d/stat", (int)tid);
	fd = open(name, O_RDONLY);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

/*
 * One try: true when io2 met the closed gate (the test's case), false when
 * it came before the start closed it (nothing shown: the caller tries again).
 */
static bool gate_try(enum blk_op op2)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 4096, .pbs = 4096 };
	struct gate_run g = { .submit1 = 1, .submit2 = 1, .deferred = -1, .start_ret = 1 };
	uint64_t end = blk_now_ns() + PLUG_WAIT_MS * 1000000ull;
	struct tparams tp;
	struct rlog l;
	pid_t tid;
	bool met;

	g.fb = fake_create(&geo);
	cr_assert_not_null(g.fb);
	g.be = open_over(fake_backend(g.fb), &tp);
	fake_set_mode(g.fb, FAKE_MANUAL);
	tio_init(&g.w1, BLK_WRITE, 0, 4096, NULL, 0x11);
	if (op2 == BLK_WRITE)
		tio_init(&g.io2, BLK_WRITE, 8192, 4096, NULL, 0x22);
	else
		tio_init(&g.io2, BLK_FLUSH, 0, 0, NULL, 0);

	/* the plugged thread: w1 in flight, its end held by the plug */
	cr_assert_eq(pthread_create(&g.submitter, NULL, gate_submitter, &g), 0);
	cr_assert(flag_wait(&g.ready, PLUG_WAIT_MS));
	cr_assert_eq(g.submit1, 0);
	cr_assert_eq(g.deferred, 1);
	cr_assert_eq(fake_pending(g.fb), 1);

	/* a start: closes the gate, then sleeps until w1 ends */
	cr_assert_eq(pthread_create(&g.starter, NULL, gate_starter, &g), 0);
	while (!(tid = __atomic_load_n(&g.starter_tid, __ATOMIC_ACQUIRE)) || !task_sleeps(tid)) {
		cr_assert_lt(blk_now_ns(), end, "the start never waited for the write in flight");
		sched_yield();
	}

	/* the plugged thread submits io2 at the closed gate */
	__atomic_store_n(&g.go, 1, __ATOMIC_RELEASE);
	if (!flag_wait(&g.done, PLUG_WAIT_MS)) {
		/* stuck at the gate on its own held write: end it here, then fail */
		fake_complete_op(g.fb, FAKE_OP(BLK_WRITE));
		pthread_join(g.starter, NULL);
		pthread_join(g.submitter, NULL);
		fake_complete_all(g.fb, false);
		cr_assert_fail("a plugged %s sat %u ms at record's gate, the start waiting for "
			       "the write its own plug held back: no blk_plug_flush() at the gate",
			       op2 == BLK_WRITE ? "write" : "flush", PLUG_WAIT_MS);
	}
	pthread_join(g.submitter, NULL);
	pthread_join(g.starter, NULL);
	met = g.runs_at_return > 0;
	cr_assert_eq(g.runs, 1, "the held work ran %d times", g.runs);
	cr_assert_eq(g.submit2, 0);
	cr_assert_eq(g.start_ret, 0);
	cr_assert_eq(tio_calls(&g.w1), 1, "w1 did not end at the flush");
	cr_assert_eq(g.w1.res, 0);
	fake_complete_all(g.fb, false);
	cr_assert(tio_wait(&g.io2, WAIT_MS));
	cr_assert_eq(g.io2.res, 0);
	fake_set_mode(g.fb, FAKE_INLINE);
	cr_assert_eq(attr_store(g.be, "stop", "1"), 0);
	if (met) {
		/* w1 ended before the log began, io2 came after: the log holds io2 alone */
		rlog_read(&l);
		cr_assert_eq(l.nr, 1, "%llu entries", (unsigned long long)l.nr);
		if (op2 == BLK_WRITE)
			cr_assert(l.e[0].sector == 2 && l.e[0].nr_sectors == 1 && !l.e[0].flags);
		else
			cr_assert_eq(l.e[0].flags, LW_FLUSH);
		rlog_free(&l);
	}
	tio_free(&g.w1);
	tio_free(&g.io2);
	g.be->ops->close(g.be);
	fake_destroy(g.fb);
	return met;
}

/*
 * The start's sleep is seen from outside (the thread's state), so io2 may
 * still, rarely, come before the gate closes (the starter asleep on
 * something else); such a try shows nothing and is made again.
 */
static void gate_test(enum blk_op op2)
{
	int i;

	for (i = 0; i < 20; i++)
		if (gate_try(op2)) {
			if (i)
				cr_log_info("the gate met at try %d", i + 1);
			return;
		}
	cr_assert_fail("in 20 tries the %s never met the closed gate",
		       op2 == BLK_WRITE ? "write" : "flush");
}

Test(record, a_plugged_write_at_the_gate_flushes_its_plug, .timeout = 60)
{
	gate_test(BLK_WRITE);
}

Test(record, a_plugged_flush_at_the_gate_flushes_its_plug, .timeout = 60)
{
	gate_test(BLK_FLUSH);
}
