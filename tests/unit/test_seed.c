// SPDX-License-Identifier: MIT
/*
 * tests/unit/test_seed.c - one seed grammar for every filter: a number
 * below 2^64, or auto, time or random (all three: one from the clock, the
 * words powerloss.seed took first), in the config and in .sys.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "../../backends/backend.h"
#include "fake_backend.h"
#include "helpers.h"

static struct fake_be *fb;

static void setup(void)
{
	const struct blk_geometry geo = { .size = 1 * MiB, .lbs = 512, .pbs = 4096, .max_io = 64 * KiB };

	fb = fake_create(&geo);
	cr_assert_not_null(fb);
}

static void teardown(void)
{
	fake_destroy(fb);
	fb = NULL;
}

TestSuite(seed, .init = setup, .fini = teardown);

static const char *const seeded[] = { "delay", "fault", "flakey", "powerloss" };
static const char *const words[] = { "auto", "time", "random", "TIME", "Random" };

Test(seed, every_seeded_filter_takes_every_word)
{
	size_t f, w;

	for (f = 0; f < sizeof(seeded) / sizeof(seeded[0]); f++) {
		for (w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
			struct blk_backend *be;
			struct tparams tp;
			char key[32];

			filter_params_init(&tp, seeded[f], fake_backend(fb), "/etc/blkfs.conf", 2);
			snprintf(key, sizeof(key), "%s.seed", seeded[f]);
			tparams_add(&tp, key, words[w], 3);
			be = filter_open(&tp);
			/* and the live file takes it too */
			cr_assert_eq(attr_store(be, "seed", words[w]), 0, "%s: seed %s", seeded[f],
				     words[w]);
			cr_assert_eq(attr_store(be, "seed", "42\n"), 0);
			cr_assert_eq(attr_store(be, "seed", "tomorrow"), -EINVAL);
			be->ops->close(be);
		}
	}
}
