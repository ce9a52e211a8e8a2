/* SPDX-License-Identifier: MIT */
/*
 * backends/lib/params.h - the backend side of params.c, beside the
 * blk_param_*() readers backend.h declares for every layer: the geometry
 * of a backend from its config, and the readers' checks for a value
 * already in hand (the knob tables, kit/knobs.h, read a key once and give
 * the same words). These stay beside the readers because be_geo_given()
 * looks a key up without marking it used, which only params.c can do.
 *
 * Lock: none; a struct blk_params belongs to the open() that reads it.
 */
#ifndef BLKFS_LIB_PARAMS_H
#define BLKFS_LIB_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "../backend.h"

/**
 * be_geo_from_params - the geometry of a backend whose shape is all config
 * (ram, null)
 * @p: the device's parameters; p->geo as the config gave it
 * @backend: backend name, for the message
 * @geo: filled: p->geo with the defaults conf documents for fields left 0
 *	 (lbs 512, pbs = lbs, io_min = pbs, max_io = 1M rounded to pbs,
 *	 io_opt = max_io) and dma_align = 1
 *
 * Returns: 0, or -EINVAL with p->err set: no size, or a shape conf would
 * have refused (the backend checks again because tests and tools build
 * struct blk_params by hand).
 */
int be_geo_from_params(struct blk_params *p, const char *backend,
		       struct blk_geometry *geo);

/**
 * be_geo_given - did the config give geometry field @key, with value @val?
 * (for a backend whose geometry comes from its storage: aio, nbd)
 * @p: the device's parameters
 * @key: the field's config key ("logical_block_size")
 * @val: the field in p->geo
 *
 * conf fills defaults for what is absent only when `size` is given, so
 * without a size any non-zero field was given; with one, the key must be
 * in the section. (A non-zero size itself was always given: conf never
 * makes one up.)
 */
bool be_geo_given(const struct blk_params *p, const char *key, uint64_t val);

/*
 * The messages of blk_param_size/duration/uint/bool() for a value already
 * in hand (@s, the config's text for @key): the knob tables (kit/knobs.h)
 * read a key once and give the same words. 0, or -EINVAL with p->err.
 */
int be_param_size_value(struct blk_params *p, const char *key, const char *s, uint64_t *out);
int be_param_duration_value(struct blk_params *p, const char *key, const char *s,
			    uint64_t min_ns, uint64_t max_ns, uint64_t bare_unit_ns, uint64_t *out);
int be_param_uint_value(struct blk_params *p, const char *key, const char *s,
			unsigned int min, unsigned int max, unsigned int *out);
int be_param_bool_value(struct blk_params *p, const char *key, const char *s, bool *out);

#endif
