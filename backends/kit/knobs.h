/* SPDX-License-Identifier: MIT */
/*
 * backends/kit/knobs.h - a filter's knobs, described once. One list per
 * filter names each knob: its name, its type, the field of the filter's
 * state it lives in, its bounds and default, its unit, and what a live
 * store does. From that list come the config keys the filter takes
 * (ops->keys), its open() parsing (bk_params()) and its .sys files
 * (ops->attrs, with show/store through bk_show()/bk_store()).
 *
 * A filter writes its list as a macro of rows and hands it to BK_DEFINE:
 *
 *	#define THROTTLE_KNOBS(K)						\
 *		K(mbps,  uint, all.mbps, 0, THROTTLE_MAX_MBPS, 0, "MiB/s", RW, active_changed) \
 *		K(burst, size, burst,    0, UINT64_MAX,        0, "bytes", RW, NULL)	\
 *		K(pool,  pool, nr_pool,  1, BE_POOL_MAX, BE_POOL_DEF, "I/Os", CONF, NULL)
 *	BK_DEFINE(throttle, struct throttle_dev, lock, dispatch_be, THROTTLE_KNOBS);
 *
 * which defines throttle_keys[] and throttle_attrs[] for the ops and the
 * table bk_table for bk_params(). The columns of a row:
 *
 *	name	the config key (FILTER.name) and the attr (.sys/DEV/FILTER/name)
 *	type	one of the bk_type_NAME below, or the filter's own (a
 *		struct bk_type bk_type_NAME and a `#define BK_AUX_NAME(f_) 0`
 *		before BK_DEFINE, as delay's range): how a value is read,
 *		checked and shown
 *	field	the member of the state the value lives in (offsetof)
 *	min, max
 *		the bounds, in the type's own terms (ns for a duration)
 *	def	the value when the key is absent
 *	unit	what the value counts, for the reader; the text types
 *		(errno, probability and the filter's own) quote it in their
 *		message for a bad value, as "(allowed: UNIT)"
 *	live	what the knob is at run time:
 *		RW	a key, and an attr whose store applies the value under
 *			the filter's lock (then the row's hook, still under it,
 *			then the table's after hook, without it); a type with a
 *			store of its own (seed) takes the lock itself, and the
 *			hook runs under it after
 *		CONF	a key only (read at open)
 *		LIVE	an attr as RW, but no key (set at open by the filter)
 *		RO	an attr that only shows (state, not config)
 *		OWN	a key whose open() parsing and attr the filter writes
 *			itself (attr_NAME_show, attr_NAME_store): lists, maps
 *		OWNKEY	the same with a show only (attr_NAME_show): a path
 *		OWNRO	an attr that only shows, the filter's own (attr_NAME_show)
 *		ACT	an attr only, the filter's own (attr_NAME_show,
 *			attr_NAME_store): an action such as `release`
 *	hook	void fn(struct blk_backend *), called by a store under the lock
 *		once the field is set (NULL: none): what else must change with it
 *
 * Messages for bad config values are "FILE:LINE: FILTER.KEY: ..." through
 * blk_param_error(); a bad store returns -EINVAL and changes nothing.
 *
 * A backend (ram, nbd, aio, null, rbd) describes its keys the same way, with a
 * help column in place of live and hook (a backend's keys are all read at
 * open and have no .sys files), and parses them into a struct of its own
 * with bk_parse():
 *
 *	#define NBD_KNOBS(K)							\
 *		K(uri,     text, uri,     0, 0, 0, "a URI", "the server")	\
 *		K(timeout, msec, timeout_ms, 10, 86400000, 5000, "ms", "...")
 *	BK_BACKEND_DEFINE(nbd, struct nbd_conf, NBD_KNOBS);
 *
 * which defines nbd_keys[] for the ops and the table bk_table. Both
 * macros also define PFX_knob_table, a pointer to the table, which
 * blk_knob_table() (registry.c) finds by name for tests and tools.
 *
 * Lock: the filter's own (the BK_DEFINE lock member), taken by show and
 * store around the field; a row's hook runs under it, the after hook not.
 * A field of 1, 4 or 8 bytes is written (and shown) with a relaxed atomic
 * access, so the I/O path may read it with __atomic_load_n and no lock.
 */
#ifndef BLKFS_KNOBS_H
#define BLKFS_KNOBS_H

#include <stddef.h>
#include <stdint.h>

#include "../backend.h"

struct bk_knob;
struct bk_table;

/*
 * How values of one type are read and shown. @field points into the
 * state; @out is a field-sized scratch.
 */
struct bk_type {
	size_t size;			/* of the field */
	/*
	 * Set @field to the knob's default (absent key). NULL: param is
	 * called when the key is absent too, with @s NULL, and finds its own
	 * default (a seed from the clock, the pool's size).
	 */
	void (*set_def)(const struct bk_knob *k, void *field);
	/* The config's text @s: 0, or blk_param_error(p, k->name, ...). */
	int (*param)(struct blk_params *p, const struct bk_knob *k, const char *s, void *out);
	/* A store's text @s (NUL-terminated, no newline): 0 or -EINVAL. */
	int (*parse)(const struct bk_knob *k, const char *s, void *out);
	/* @val as text (no newline) into @buf; snprintf's result. */
	int (*format)(const struct bk_knob *k, const void *val, char *buf, size_t len);
	/*
	 * Optional: the whole store, for a type whose store does more than
	 * set the field (a seed restarts the stream and says so).
	 */
	int (*store)(const struct bk_table *t, const struct bk_knob *k, struct blk_backend *state,
		     const char *s);
};

enum bk_live { BK_RW, BK_LIVE, BK_CONF, BK_RO, BK_OWN, BK_OWNKEY, BK_OWNRO, BK_ACT };

struct bk_knob {
	const char *name;
	const struct bk_type *type;
	size_t off;			/* of the field in the state */
	uint64_t min, max, def;
	const char *unit;
	enum bk_live live;
	void (*hook)(struct blk_backend *be);	/* after a store, under the lock; NULL: none */
	size_t aux_off;			/* 0, or a field that starts as a copy (a seed's stream) */
	const char *help;		/* a backend's row: what the key does; NULL for a filter's */
};

struct bk_table {
	const char *filter;		/* "throttle" or a backend's "nbd": messages, seeds */
	const struct bk_knob *knobs;
	size_t nr;
	size_t lock_off;		/* of the pthread_mutex_t in the state */
	size_t dev_off;			/* of the `const char *dev` in the state */
	void (*after)(struct blk_backend *be);	/* after every store, no lock held; NULL: none */
};

/* The types every filter may use. */
extern const struct bk_type bk_type_uint;	/* unsigned int, decimal digits */
extern const struct bk_type bk_type_u64;	/* uint64_t, decimal digits */
extern const struct bk_type bk_type_size;	/* uint64_t bytes, K/M/G/T suffixes */
extern const struct bk_type bk_type_duration;	/* uint64_t ns, a unit needed */
extern const struct bk_type bk_type_seconds;	/* uint64_t ns, a bare number in seconds */
extern const struct bk_type bk_type_bool;	/* bool */
extern const struct bk_type bk_type_probability;	/* double in [0, 1] */
extern const struct bk_type bk_type_errno;	/* int, a positive errno */
extern const struct bk_type bk_type_seed;	/* uint64_t; aux_off: the stream */
extern const struct bk_type bk_type_pool;	/* unsigned int, `pool` (be_param_pool) */
/*
 * Types a backend's rows use (a filter may too). text: a `const char *`,
 * the config's text as it stands (valid while the parameters are), NULL
 * when absent; no bounds, no default but NULL, never a bad value.
 * size_max: as size, but a value above max says "N is too large
 * (allowed: UNIT)". msec: an unsigned int of milliseconds, read as a
 * duration (a bare number is seconds) with min and max in ms; a value
 * finer than 1ms is refused. sec: the same in whole seconds (min and max
 * in s); a value finer than 1s is refused with "'V' is finer than 1s
 * (UNIT)", the row's unit saying why (rbd: librados takes whole seconds).
 */
extern const struct bk_type bk_type_text;
extern const struct bk_type bk_type_size_max;
extern const struct bk_type bk_type_msec;
extern const struct bk_type bk_type_sec;
/* An OWN, OWNRO, RO or ACT row's type when its code is the filter's own. */
extern const struct bk_type bk_type_none;

/**
 * bk_params - read every key of @t from @p into @state
 * @state: the filter's state (calloc'ed; the fields @t names are set)
 *
 * In the order of the list: each field gets its default, or the config's
 * value. OWN rows are left to the filter.
 *
 * Returns: 0, or -EINVAL with p->err set ("FILE:LINE: FILTER.KEY: ...")
 * for the first bad value.
 */
int bk_params(const struct bk_table *t, struct blk_params *p, struct blk_backend *state);

/**
 * bk_parse - bk_params() for a backend: read every key of @t from @p into
 * @conf, the struct the table's rows name fields of
 *
 * Returns: 0, or -EINVAL with p->err set ("FILE:LINE: KEY: ...") for the
 * first bad value, in the order of the list.
 */
int bk_parse(const struct bk_table *t, struct blk_params *p, void *conf);

/**
 * bk_parse_key - read the one key @name of @t into @conf, as bk_parse()
 * does: for a backend whose keys depend on one of them (ram's clone, read
 * before the others so that a clone's conflicts speak first)
 *
 * Returns: 0, or -EINVAL with p->err set; -ENOENT when @t has no such row.
 */
int bk_parse_key(const struct bk_table *t, struct blk_params *p, const char *name, void *conf);

/**
 * bk_format_def - the default of @k as text, as the type shows a value
 * (a size in bytes, a duration with its unit), into @buf
 * Returns: snprintf's result, or -EINVAL for a type with no default of its
 * own (seed, pool, text, none).
 */
int bk_format_def(const struct bk_knob *k, char *buf, size_t len);

/**
 * bk_format_bound - @v, a bound of @k (k->min or k->max), as text in the
 * type's terms (a duration "10ms", a msec row's bound "24h")
 * Returns: snprintf's result, or -EINVAL for a type without bounds.
 */
int bk_format_bound(const struct bk_knob *k, uint64_t v, char *buf, size_t len);

/**
 * bk_show - an attr's show: the field of @k under the lock, and a newline
 * Returns: the length, or -EOVERFLOW.
 */
int bk_show(const struct bk_table *t, const struct bk_knob *k, struct blk_backend *state,
	    char *buf, size_t len);

/**
 * bk_store - an attr's store: parse @buf (one trailing newline allowed),
 * set the field of @k under the lock, run the row's hook, drop the lock,
 * run the table's after hook.
 * Returns: 0, or -EINVAL (nothing changed).
 */
int bk_store(const struct bk_table *t, const struct bk_knob *k, struct blk_backend *state,
	     const char *buf, size_t len);

/* ---- BK_DEFINE: a row list into keys, attrs and the table ---- */

/*
 * A row's name and type reach the macros below only pasted or quoted, never
 * as bare arguments: `errno` and `bool` are macros themselves.
 */
#define BK_ENUM_(n_, t_, f_, min_, max_, def_, unit_, live_, hook_) bk_i_##n_,

#define BK_ROW_(n_, t_, f_, min_, max_, def_, unit_, live_, hook_)			\
	[bk_i_##n_] = { .name = #n_, .type = &bk_type_##t_,				\
			.off = offsetof(bk_state_t, f_), .min = (min_), .max = (max_),	\
			.def = (def_), .unit = (unit_), .live = BK_##live_,		\
			.hook = (hook_), .aux_off = BK_AUX_##t_(f_) },

/* A seed's stream is the field named rng beside it; no other type has a second field. */
#define BK_AUX_seed(f_)		offsetof(bk_state_t, rng)
#define BK_AUX_uint(f_)		0
#define BK_AUX_u64(f_)		0
#define BK_AUX_size(f_)		0
#define BK_AUX_duration(f_)	0
#define BK_AUX_seconds(f_)	0
#define BK_AUX_bool(f_)		0
#define BK_AUX_probability(f_)	0
#define BK_AUX_errno(f_)	0
#define BK_AUX_pool(f_)		0
#define BK_AUX_none(f_)		0
#define BK_AUX_text(f_)		0
#define BK_AUX_size_max(f_)	0
#define BK_AUX_msec(f_)		0
#define BK_AUX_sec(f_)		0

#define BK_KEY_RW(s)		s,
#define BK_KEY_LIVE(s)
#define BK_KEY_CONF(s)		s,
#define BK_KEY_RO(s)
#define BK_KEY_OWN(s)		s,
#define BK_KEY_OWNKEY(s)	s,
#define BK_KEY_OWNRO(s)
#define BK_KEY_ACT(s)
#define BK_KEY_(n_, t_, f_, min_, max_, def_, unit_, live_, hook_) BK_KEY_##live_(#n_)

/* s: the name; gs, gw: the generic show and store; os, ow: the filter's own */
#define BK_ATTR_RW(s, gs, gw, os, ow)		{ s, gs, gw },
#define BK_ATTR_LIVE(s, gs, gw, os, ow)		{ s, gs, gw },
#define BK_ATTR_CONF(s, gs, gw, os, ow)
#define BK_ATTR_RO(s, gs, gw, os, ow)		{ s, gs, NULL },
#define BK_ATTR_OWN(s, gs, gw, os, ow)		{ s, os, ow },
#define BK_ATTR_OWNKEY(s, gs, gw, os, ow)	{ s, os, NULL },
#define BK_ATTR_OWNRO(s, gs, gw, os, ow)	{ s, os, NULL },
#define BK_ATTR_ACT(s, gs, gw, os, ow)		{ s, os, ow },
#define BK_ATTR_(n_, t_, f_, min_, max_, def_, unit_, live_, hook_)			\
	BK_ATTR_##live_(#n_, bk_show_##n_, bk_store_##n_, attr_##n_##_show, attr_##n_##_store)

#define BK_SHOW_FN_(gs, i)								\
static int gs(struct blk_backend *be, char *buf, size_t len)				\
{											\
	return bk_show(&bk_table, &bk_knobs[i], be, buf, len);				\
}
#define BK_STORE_FN_(gw, i)								\
static int gw(struct blk_backend *be, const char *buf, size_t len)			\
{											\
	return bk_store(&bk_table, &bk_knobs[i], be, buf, len);				\
}
#define BK_FNS_RW(gs, gw, i)		BK_SHOW_FN_(gs, i) BK_STORE_FN_(gw, i)
#define BK_FNS_LIVE(gs, gw, i)		BK_SHOW_FN_(gs, i) BK_STORE_FN_(gw, i)
#define BK_FNS_CONF(gs, gw, i)
#define BK_FNS_RO(gs, gw, i)		BK_SHOW_FN_(gs, i)
#define BK_FNS_OWN(gs, gw, i)
#define BK_FNS_OWNKEY(gs, gw, i)
#define BK_FNS_OWNRO(gs, gw, i)
#define BK_FNS_ACT(gs, gw, i)
#define BK_FNS_(n_, t_, f_, min_, max_, def_, unit_, live_, hook_)			\
	BK_FNS_##live_(bk_show_##n_, bk_store_##n_, bk_i_##n_)

/*
 * BK_DEFINE(pfx, STATE, lock, after_hook, LIST): from LIST's rows,
 * `static const struct bk_table bk_table` (for bk_params()), and
 * `pfx_keys` and `pfx_attrs` for the filter's ops. STATE embeds struct
 * blk_backend first and has `const char *dev` and the mutex @lock.
 * The filter's own attr functions (OWN, OWNKEY, OWNRO, ACT rows) are declared
 * before it.
 */
#define BK_DEFINE(pfx, state, lock_, after_, LIST)					\
typedef state bk_state_t;								\
enum { LIST(BK_ENUM_) bk_nr_knobs };							\
static const struct bk_knob bk_knobs[] = { LIST(BK_ROW_) };				\
static const struct bk_table bk_table __attribute__((unused)) = {			\
	.filter = #pfx,									\
	.knobs = bk_knobs,								\
	.nr = bk_nr_knobs,								\
	.lock_off = offsetof(bk_state_t, lock_),					\
	.dev_off = offsetof(bk_state_t, dev),						\
	.after = (after_),								\
};											\
LIST(BK_FNS_)										\
const struct bk_table *const pfx##_knob_table = &bk_table;				\
static const char *const pfx##_keys[] = { LIST(BK_KEY_) NULL };			\
static const struct blk_attr pfx##_attrs[] = { LIST(BK_ATTR_) { .name = NULL } }

/* ---- BK_BACKEND_DEFINE: a backend's rows into keys and the table ---- */

#define BK_BENUM_(n_, t_, f_, min_, max_, def_, unit_, help_) bk_i_##n_,
#define BK_BROW_(n_, t_, f_, min_, max_, def_, unit_, help_)				\
	[bk_i_##n_] = { .name = #n_, .type = &bk_type_##t_,				\
			.off = offsetof(bk_state_t, f_), .min = (min_), .max = (max_),	\
			.def = (def_), .unit = (unit_), .live = BK_CONF,		\
			.aux_off = BK_AUX_##t_(f_), .help = (help_) },
#define BK_BKEY_(n_, t_, f_, min_, max_, def_, unit_, help_) #n_,

/*
 * BK_BACKEND_DEFINE(pfx, CONF, LIST): from LIST's rows (name, type, field
 * of CONF, min, max, def, unit, help), `static const struct bk_table
 * bk_table` for bk_parse(), `pfx_keys` for the backend's ops and
 * `pfx_knob_table`. An empty LIST (null: no keys of its own) is a table of
 * no rows.
 */
#define BK_BACKEND_DEFINE(pfx, conf_, LIST)						\
typedef conf_ bk_state_t;								\
enum { LIST(BK_BENUM_) bk_nr_knobs };							\
static const struct bk_knob bk_knobs[bk_nr_knobs + 1] = { LIST(BK_BROW_) };		\
static const struct bk_table bk_table = {						\
	.filter = #pfx,									\
	.knobs = bk_knobs,								\
	.nr = bk_nr_knobs,								\
};											\
const struct bk_table *const pfx##_knob_table = &bk_table;				\
static const char *const pfx##_keys[] = { LIST(BK_BKEY_) NULL }

#endif
