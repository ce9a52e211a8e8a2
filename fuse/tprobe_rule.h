/* SPDX-License-Identifier: MIT */
/*
 * fuse/tprobe_rule.h - transport = auto's rule: from what `blkfs
 * probe-transport` measured (IOPS of each test over /dev/fuse and over the
 * ring), which transport to take; and its cache file
 * ($BLKFS_RUNDIR/transport-probe), written and read back. Pure: no I/O,
 * so the unit test (tests/unit/test_tprobe.c) links it alone.
 */
#ifndef BLKFS_FUSE_TPROBE_RULE_H
#define BLKFS_FUSE_TPROBE_RULE_H

#include <stdbool.h>
#include <stddef.h>

/* The tests of a probe, in table order: QD1 pread, QD1 pwrite, QD32 libaio (4 KiB, O_DIRECT). */
#define TPROBE_NR_TESTS 3
extern const char *const tprobe_test_names[TPROBE_NR_TESTS];

/*
 * The ring is taken when the geometric mean of its ratios to /dev/fuse is
 * at least this: a tie (within the noise of 250 ms runs) goes to the ring,
 * which gains most where /dev/fuse's wake-ups cost most (QD1 under load).
 */
#define TPROBE_RING_MIN_GEOMEAN 0.97

struct tprobe_result {
	double dev_iops[TPROBE_NR_TESTS];
	double ring_iops[TPROBE_NR_TESTS];
	double ratio[TPROBE_NR_TESTS];	/* ring / dev; 0 when either is not a positive number */
	double geomean;			/* of ratio[]; 0 when any ratio is 0 */
	bool ring;			/* the choice: the ring (else /dev/fuse) */
};

/*
 * tprobe_choose - fill @r's ratios, geomean and choice from its IOPS.
 * An IOPS that is zero, negative, infinite or NaN makes that ratio and the
 * geometric mean 0, and the choice /dev/fuse (a probe that could not
 * measure does not vouch for the ring). Returns @r->ring.
 */
bool tprobe_choose(struct tprobe_result *r);

/*
 * tprobe_ratios_str - @r's ratios as one word, "1.234,0.950,0.880" (no
 * spaces: a value of .sys/.transport). Returns @buf.
 */
char *tprobe_ratios_str(const struct tprobe_result *r, char *buf, size_t len);

/*
 * tprobe_cache_format - the cache file's text for @r measured under kernel
 * @release and boot @boot_id. Returns its length, or -ENOSPC when @len is
 * too small.
 */
int tprobe_cache_format(const struct tprobe_result *r, const char *release, const char *boot_id,
			char *buf, size_t len);

/*
 * tprobe_cache_parse - read back a cache file's text (@buf, NUL-terminated)
 * into @r, its choice recomputed from the IOPS by tprobe_choose().
 * Returns 0; -EINVAL when the text is not such a file (a missing, bad or
 * out-of-range field); -ESTALE when it is from another kernel release or
 * another boot than @release and @boot_id. Either error means: probe again.
 */
int tprobe_cache_parse(const char *buf, const char *release, const char *boot_id,
		       struct tprobe_result *r);

#endif
