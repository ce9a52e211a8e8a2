/* SPDX-License-Identifier: MIT */
/*
 * tests/fuzz/conf_fuzz.c - libFuzzer target for the config parser.
 *
 * Feeds the input, as is (not NUL-terminated, NUL bytes and all), to
 * conf_parse_buf(); on success checks what the parser promises about the
 * result, then gives each device the geometry its backend would report
 * (the config's, with the documented defaults; a made-up size for a
 * backend that takes its size from the device) and checks it with
 * conf_check_geometry() and conf_cache_block(), once as reported and once
 * with one field changed, which must be refused when the config gave it.
 * On failure the message must be one "FILE:LINE: KEY: message" line, and
 * a second parse with a small error buffer must fail the same way with the
 * message cut, not overrun. Buffers are malloc'ed to their exact size so
 * ASan sees any access past them.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "../../core/conf.h"
#include "fuzz.h"

#define FILE_NAME "fuzz.conf"
#define ERR_LEN 512

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* One line, NUL-terminated inside @len, starting with the file name. */
static void check_msg(const char *err, size_t len, bool full)
{
	const char *nul = memchr(err, '\0', len);
	const char *s;

	fuzz_check(nul != NULL, "error message not terminated inside its buffer");
	for (s = err; s < nul; s++)
		fuzz_check((unsigned char)*s >= 0x20 && *s != 0x7f,
			   "control character 0x%02x in message: %s", (unsigned char)*s, err);
	if (full) {
		fuzz_check(!strncmp(err, FILE_NAME ":", strlen(FILE_NAME ":")),
			   "message does not start with the file name: %s", err);
		fuzz_check(strstr(err, ": ") != NULL, "message has no KEY: %s", err);
	}
}

static const struct blk_param *param(const struct conf_device *d, const char *key)
{
	int i;

	for (i = 0; i < d->nr_params; i++)
		if (!strcmp(d->params[i].key, key))
			return &d->params[i];
	return NULL;
}

/* What a ram or null backend reports for this section (be_geo_from_params). */
static struct blk_geometry reported(const struct conf_device *d, const uint8_t *data,
				    size_t size)
{
	struct blk_geometry g = d->geo;

	if (!g.lbs)
		g.lbs = 512;
	if (!g.pbs)
		g.pbs = g.lbs;
	if (!g.io_min)
		g.io_min = g.pbs;
	if (!g.max_io)
		g.max_io = g.pbs > (1u << 20) ? g.pbs : 1u << 20;
	if (!g.io_opt)
		g.io_opt = g.max_io;
	if (!g.size)	/* aio without size: the device decides; any multiple */
		g.size = (uint64_t)g.lbs * (1 + (size ? data[size / 2] : 0));
	g.dma_align = 1;
	return g;
}

static void check_geometry(const struct conf *c, const struct conf_device *d,
			   const uint8_t *data, size_t size)
{
	struct blk_geometry g = reported(d, data, size), h;
	char *err = malloc(ERR_LEN);
	uint32_t cb;
	int ret;

	if (!err)
		abort();
	ret = conf_check_geometry(c, d, &g, err, ERR_LEN);
	/*
	 * A section that gives its size gives its whole shape: what the parser
	 * took, a backend of that shape must pass (conf checks it all early).
	 */
	if (d->geo.size)
		fuzz_check(ret == 0, "parser took [device %s] but its geometry fails: %s",
			   d->name, err);
	if (ret) {
		fuzz_check(ret == -EINVAL, "conf_check_geometry returned %d", ret);
		check_msg(err, ERR_LEN, true);
	} else {
		cb = conf_cache_block(&g, d->cache_block_size);
		fuzz_check(is_pow2(cb) && cb >= g.lbs && g.size % cb == 0 &&
			   cb <= c->cache.folio_size,
			   "cache block %u for lbs %u size %llu folio %u", cb, g.lbs,
			   (unsigned long long)g.size, c->cache.folio_size);
	}

	/* The device disagrees with the config: refused where the config spoke. */
	h = g;
	switch (size ? data[0] % 4 : 0) {
	case 0:
		h.lbs = g.lbs == 512 ? 4096 : g.lbs / 2;
		ret = conf_check_geometry(c, d, &h, err, ERR_LEN);
		if (param(d, "logical_block_size"))
			fuzz_check(ret == -EINVAL, "lbs %u against config %u accepted",
				   h.lbs, d->geo.lbs);
		break;
	case 1:
		h.size = g.size + g.lbs;
		ret = conf_check_geometry(c, d, &h, err, ERR_LEN);
		if (param(d, "size"))
			fuzz_check(ret == -EINVAL, "size %llu against config %llu accepted",
				   (unsigned long long)h.size, (unsigned long long)d->geo.size);
		break;
	case 2:
		h.pbs = g.pbs * 2;
		ret = conf_check_geometry(c, d, &h, err, ERR_LEN);
		if (param(d, "physical_block_size") || h.pbs > CONF_MAX_BLOCK)
			fuzz_check(ret == -EINVAL, "pbs %u accepted", h.pbs);
		break;
	default:
		h.max_io = g.max_io + g.pbs / 2;	/* not a multiple of pbs */
		ret = conf_check_geometry(c, d, &h, err, ERR_LEN);
		fuzz_check(ret == -EINVAL, "max_io %u with pbs %u accepted", h.max_io, h.pbs);
		break;
	}
	if (ret)
		check_msg(err, ERR_LEN, true);
	/* a tiny buffer is cut, never overrun */
	ret = conf_check_geometry(c, d, &h, err, 3);
	if (ret)
		check_msg(err, 3, false);
	free(err);
}

/* What conf_parse_buf() promises about a config it took. */
static void check_conf(const struct conf *c)
{
	const struct conf_cache *cc = &c->cache;
	int i, j;

	fuzz_check(c->nr_devs >= 1 && c->nr_devs <= CONF_MAX_DEVICES, "%d devices", c->nr_devs);
	fuzz_check(c->file && !strcmp(c->file, FILE_NAME), "file name");
	fuzz_check(is_pow2(cc->folio_size) && cc->folio_size >= CONF_MIN_FOLIO &&
		   cc->folio_size <= CONF_MAX_FOLIO, "folio_size %u", cc->folio_size);
	fuzz_check(cc->size >= (1u << 20) && cc->size >= 8ull * cc->folio_size &&
		   cc->size <= (1ull << 40), "cache size %llu", (unsigned long long)cc->size);
	fuzz_check(cc->dirty_background < cc->dirty_limit && cc->dirty_limit <= cc->size,
		   "dirty %llu / %llu of %llu", (unsigned long long)cc->dirty_background,
		   (unsigned long long)cc->dirty_limit, (unsigned long long)cc->size);
	fuzz_check(cc->dirty_expire_ms >= 100 && cc->dirty_expire_ms <= 3600000,
		   "dirty_expire %u ms", cc->dirty_expire_ms);
	for (i = 0; i < c->nr_devs; i++) {
		const struct conf_device *d = &c->devs[i];
		const struct blk_geometry *g = &d->geo;
		size_t n = strlen(d->name);

		fuzz_check(n >= 1 && n <= CONF_NAME_MAX && d->name[0] != '.' &&
			   !strchr(d->name, '/'), "device name '%s'", d->name);
		for (j = 0; j < i; j++)
			fuzz_check(strcmp(c->devs[j].name, d->name), "device %s twice", d->name);
		fuzz_check(d->ops && !d->ops->is_filter, "device %s: backend", d->name);
		fuzz_check(d->nr_filters >= 0 && d->nr_filters <= CONF_MAX_FILTERS,
			   "%d filters", d->nr_filters);
		for (j = 0; j < d->nr_filters; j++)
			fuzz_check(d->filters[j] && d->filters[j]->is_filter, "filter %d", j);
		if (g->lbs)
			fuzz_check(is_pow2(g->lbs) && g->lbs >= CONF_MIN_BLOCK &&
				   g->lbs <= CONF_MAX_BLOCK && g->lbs <= cc->folio_size,
				   "lbs %u", g->lbs);
		if (g->pbs)
			fuzz_check(is_pow2(g->pbs) && g->pbs >= (g->lbs ? g->lbs : 512) &&
				   g->pbs <= CONF_MAX_BLOCK, "pbs %u", g->pbs);
		if (g->size)
			fuzz_check(g->size % (g->lbs ? g->lbs : 512) == 0 && g->size <= (1ull << 62),
				   "size %llu", (unsigned long long)g->size);
		if (d->cache_block_size)
			fuzz_check(is_pow2(d->cache_block_size) &&
				   d->cache_block_size <= cc->folio_size,
				   "cache_block_size %u", d->cache_block_size);
		fuzz_check(d->read_ahead % 512 == 0 && d->read_ahead <= CONF_MAX_READ_AHEAD,
			   "read_ahead %u", d->read_ahead);
		for (j = 0; j < d->nr_params; j++)
			fuzz_check(d->params[j].key[0] && d->params[j].value[0] &&
				   d->params[j].line >= 1, "param %d", j);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data;
	struct conf c, c2;
	size_t small;
	char *err, *err2;
	int ret, ret2, i;

	err = malloc(ERR_LEN);
	if (!err)
		abort();
	ret = conf_parse_buf(buf, size, FILE_NAME, &c, err, ERR_LEN);
	if (ret == 0) {
		fuzz_check(!err[0], "success with a message: %s", err);
		check_conf(&c);
		for (i = 0; i < c.nr_devs; i++)
			check_geometry(&c, &c.devs[i], data, size);
		conf_free(&c);
		fuzz_check(!c.devs && !c.strings && !c.nr_devs, "conf_free left state");
		conf_free(&c);		/* a freed (zeroed) conf may be freed again */
		free(err);
		return 0;
	}

	fuzz_check(ret == -EINVAL || ret == -ENOMEM, "conf_parse_buf returned %d", ret);
	fuzz_check(!c.devs && !c.strings && !c.nr_devs, "failed parse left state");
	check_msg(err, ERR_LEN, true);

	/* The same text with a small message buffer: same result, message cut. */
	small = 1 + (size ? data[size - 1] % 24 : 0);
	err2 = malloc(small);
	if (!err2)
		abort();
	ret2 = conf_parse_buf(buf, size, FILE_NAME, &c2, err2, small);
	fuzz_check(ret2 == ret, "second parse returned %d, first %d", ret2, ret);
	check_msg(err2, small, false);
	fuzz_check(!strncmp(err, err2, small - 1), "cut message '%s' is not a prefix of '%s'",
		   err2, err);
	free(err2);
	/* no buffer at all */
	ret2 = conf_parse_buf(buf, size, NULL, &c2, NULL, 0);
	fuzz_check(ret2 == ret, "parse without a message buffer returned %d, first %d", ret2, ret);
	free(err);
	return 0;
}
