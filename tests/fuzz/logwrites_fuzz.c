/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/logwrites_fuzz.c - libFuzzer target for the dm-log-writes
 * reader (backends/lib/logwrites.c) and what the explorer does with a log it
 * took: the model's events (lw_log_model) and the state set of a crash
 * after the last of them (backends/lib/crashmodel.h).
 *
 * Input: one byte choosing the base (its size and logical block size: the
 * low two bits index sizes[], the next two want_ss[]), then the log file.
 * Oracles: lw_parse returns 0 or -EINVAL with a message, and a refused
 * entry is named with its byte offset; a taken log's entries lie inside
 * the file and the base, each header re-encodes to the file's bytes, and
 * every piece of the in-order state (and of the state keeping the fewest
 * writes) lands inside the base.
 */
#include <errno.h>
#include <string.h>

#include "../../backends/lib/crashmodel.h"
#include "../../backends/lib/logwrites.h"
#include "fuzz.h"

static const uint64_t sizes[4] = { 64 * 1024, 1 << 20, 4096, 512 * 3 };
static const uint32_t want_ss[4] = { 0, 512, 4096, 0 };

struct bounds {
	uint64_t size;
};

static int in_base(void *ctx, uint64_t pos, uint64_t len, const void *data)
{
	const struct bounds *b = ctx;

	(void)data;
	fuzz_check(len && pos < b->size && len <= b->size - pos,
		   "a piece [%llu, +%llu) outside the base of %llu bytes",
		   (unsigned long long)pos, (unsigned long long)len, (unsigned long long)b->size);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lw_log log;
	struct blk_cm_log m;
	struct blk_cm_point pt;
	struct bounds b;
	char err[256] = "";
	uint32_t *choice;
	uint64_t i;
	int ret;

	if (!size)
		return 0;
	b.size = sizes[data[0] & 3];
	ret = lw_parse(data + 1, size - 1, b.size, want_ss[(data[0] >> 2) & 3], &log, err,
		       sizeof(err));
	if (ret) {
		fuzz_check(ret == -EINVAL, "lw_parse returned %d", ret);
		fuzz_check(err[0], "a refusal without a message");
		if (!strncmp(err, "entry ", 6))
			fuzz_check(strstr(err, " at byte "), "an entry refused without its offset: %s", err);
		return 0;
	}
	fuzz_check(log.end <= size - 1, "the log ends at %llu, past the file",
		   (unsigned long long)log.end);
	for (i = 0; i < log.nr; i++) {
		const struct lw_rec *r = &log.v[i];
		unsigned char hdr[65536];

		fuzz_check(r->off + log.sectorsize <= size - 1, "entry %llu's header past the file",
			   (unsigned long long)i);
		lw_encode_entry(hdr, log.sectorsize, &r->e, NULL);
		fuzz_check(!memcmp(hdr, data + 1 + r->off, LW_ENTRY_SIZE),
			   "entry %llu does not re-encode", (unsigned long long)i);
		if (!(r->e.flags & LW_MARK) && r->e.nr_sectors)
			fuzz_check((r->e.sector + r->e.nr_sectors) * log.sectorsize <= b.size,
				   "entry %llu past the base", (unsigned long long)i);
	}
	if (lw_log_model(&log, 4096 > log.sectorsize ? 4096 : log.sectorsize, &m) == 0) {
		if (blk_cm_point_init(&pt, &m, m.nr) == 0) {
			choice = calloc(pt.nr_blocks + 1, sizeof(*choice));
			if (choice) {
				fuzz_check(pt.nr_states >= 1, "no state");
				blk_cm_state_in_order(&pt, choice);
				fuzz_check(blk_cm_state_valid(&pt, choice), "in-order state invalid");
				blk_cm_apply(&pt, choice, in_base, &b);
				fuzz_check(blk_cm_state_nth(&pt, 0, choice) == 0, "no state 0");
				fuzz_check(blk_cm_state_valid(&pt, choice), "state 0 invalid");
				blk_cm_apply(&pt, choice, in_base, &b);
				free(choice);
			}
			blk_cm_point_destroy(&pt);
		}
		blk_cm_destroy(&m);
	}
	lw_log_free(&log);
	return 0;
}
