// SPDX-License-Identifier: MIT
/*
 * fuse/crashcheck.c - `blkfs crashcheck LOG --base BASE --check CMD`: run a
 * checker on the crash states of a recorded workload (a dm-log-writes log:
 * the record filter's, or the kernel's), and `--state ID --materialize
 * FILE` to write one state out. The command line alone: its options, the
 * progress line, the table or --json, the exit status. What the states
 * are, how they are named, built and checked is the engine's,
 * backends/lib/crashexplore.h.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../backends/lib/crashexplore.h"
#include "ctl_parse.h"
#include "crashcheck.h"

_Static_assert(CC_CTL_MAX_LINE == BF_CTL_MAX_LINE && CC_CTL_MSG_MAX == BF_CTL_MSG_MAX,
	       "the engine's room for a control line and its message");

/* ---- input ---- */

static int checker_ok(const char *cmd)
{
	char word[256], path[PATH_MAX + 300];
	const char *p = cmd, *env;
	size_t n = strcspn(p, " \t\n;|&");

	if (!n || n >= sizeof(word))
		return 0;
	memcpy(word, p, n);
	word[n] = 0;
	if (strchr(word, '/'))
		return access(word, X_OK) == 0;
	if (!strcmp(word, "true") || !strcmp(word, "false") || !strcmp(word, "test") ||
	    !strcmp(word, "exit") || !strcmp(word, "[") || !strcmp(word, "echo"))
		return 1;	/* shell builtins */
	env = getenv("PATH");
	if (!env)
		env = "/usr/bin:/bin";
	while (*env) {
		size_t l = strcspn(env, ":");

		if (l >= PATH_MAX)
			return 0;
		snprintf(path, sizeof(path), "%.*s/%s", (int)l, env, word);
		if (access(path, X_OK) == 0)
			return 1;
		env += l;
		if (*env)
			env++;
	}
	return 0;
}

/*
 * A command-line option's number (@opt names it in the message): a whole
 * C string, any base strtoull() takes (a --seed may be given in hex), with
 * an optional K, M or G (binary) for --size and the like; reports its own
 * error. Not sysfs.c's parse_attr_u64(), which reads a .sys file's write:
 * a buffer with a length and a trailing newline, decimal only, no suffix
 * (a .sys value has one unit, as in the kernel's sysfs), answered with
 * -EINVAL and no message. One parser for both would take the union of
 * their inputs, and each would accept what it must refuse.
 */
static int parse_opt_u64(const char *opt, const char *s, uint64_t *out)
{
	unsigned int shift = 0;
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	if (errno || end == s || *s == '-') {
		cc_err("%s %s: not a number", opt, s);
		return -1;
	}
	if (*end == 'K' || *end == 'k')
		shift = 10, end++;
	else if (*end == 'M')
		shift = 20, end++;
	else if (*end == 'G')
		shift = 30, end++;
	if (*end || *out > UINT64_MAX >> shift) {
		cc_err("%s %s: not a number", opt, s);
		return -1;
	}
	*out <<= shift;
	return 0;
}

static const char usage[] =
	"Usage: blkfs crashcheck LOG --base BASE --check CMD [--jobs N] [--n N] [--k K]\n"
	"           [--states MAX] [--seed S] [--each-write] [--attach] [--timeout SECS]\n"
	"           [--json] [--scratch DIR] [--keep DIR] [--size SIZE] [--pbs BYTES]\n"
	"       blkfs crashcheck LOG --base BASE --state ID --materialize FILE\n"
	"Exit status: 0 no state failed, 1 a state failed, 2 bad input, 3 an error of blkfs's own\n"
	"(set-up, I/O, scratch space); killed by SIGINT or SIGTERM, it cleans up and dies of it.\n";

/* One option of getopt_long's: 0, -1 (--help: printed, exit 0), or the exit status. */
static int parse_opt(struct cc *cc, bool *json, int c, const char *arg)
{
	uint64_t v;

	switch (c) {
	case 'b': cc->base = arg; break;
	case 'c': cc->check = arg; break;
	case 'j':
		if (parse_opt_u64("--jobs", arg, &v) || !v || v > 256) {
			cc_err("--jobs %s: 1 to 256", arg);
			return 2;
		}
		cc->jobs = (unsigned int)v;
		break;
	case 'N':
		if (parse_opt_u64("--n", arg, &v) || v > 63)
			return 2;
		cc->n = (unsigned int)v;
		break;
	case 'K':
		if (parse_opt_u64("--k", arg, &v) || v > CC_MAX_K)
			return 2;
		cc->k = (unsigned int)v;
		break;
	case 'S':
		if (parse_opt_u64("--states", arg, &cc->max_states) || !cc->max_states)
			return 2;
		break;
	case 's':
		if (parse_opt_u64("--seed", arg, &cc->seed))
			return 2;
		break;
	case 'w': cc->each_write = true; break;
	case 'a': cc->attach = true; break;
	case 't': {
		char *end;

		cc->timeout_s = strtod(arg, &end);
		if (*end || cc->timeout_s <= 0) {
			cc_err("--timeout %s: seconds, more than 0", arg);
			return 2;
		}
		break;
	}
	case 'J': *json = true; break;
	case 'd': cc->scratch = arg; break;
	case 'k': cc->keep = arg; break;
	case 'z':
		if (parse_opt_u64("--size", arg, &cc->size))
			return 2;
		break;
	case 'p':
		if (parse_opt_u64("--pbs", arg, &v) || v < 512 || v > 65536 || (v & (v - 1))) {
			cc_err("--pbs %s: a power of two from 512 to 65536", arg);
			return 2;
		}
		cc->pbs = (uint32_t)v;
		break;
	case 'i': cc->state_id = arg; break;
	case 'm': cc->materialize = arg; break;
	case 'h':
		fputs(usage, stdout);
		return -1;
	default:
		fputs(usage, stderr);
		return 2;
	}
	return 0;
}

/* ---- output ---- */

static const char *verdict_name(int v)
{
	return v == CC_OK ? "ok" : v == CC_FAIL ? "failed" : v == CC_TIMEOUT ? "timeout" : "error";
}

static const char *point_kind(const struct cc *cc, size_t ev)
{
	switch (cc->m.ev[ev].kind) {
	case BLK_CM_FLUSH:
		return "flush";
	case BLK_CM_MARK:
		return "mark";
	default:
		return "write";
	}
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* How a point was explored: "exhaustive" or "sampled K of N", into @buf. */
static const char *explored(const struct cc_point *p, char *buf, size_t len)
{
	if (!p->sampled)
		return "exhaustive";
	if (p->dflt == UINT64_MAX)
		snprintf(buf, len, "sampled %" PRIu64 " of >2^64", p->listed);
	else
		snprintf(buf, len, "sampled %" PRIu64 " of %" PRIu64, p->listed, p->dflt);
	return buf;
}

/* Each point's failures and first failing state (from the tasks' verdicts); the timeouts. */
static uint64_t count_failures(struct cc *cc)
{
	uint64_t timeouts = 0;
	size_t t;

	for (t = 0; t < cc->nr_tasks; t++) {
		struct cc_task *tk = &cc->tasks[t];
		struct cc_point *p = &cc->pts[tk->point];

		if (tk->verdict == CC_TIMEOUT)
			timeouts++;
		if (tk->verdict != CC_OK) {
			p->failed++;
			if (p->first_fail == SIZE_MAX)
				p->first_fail = t;
		}
	}
	return timeouts;
}

static size_t nr_sampled(const struct cc *cc)
{
	size_t i, n = 0;

	for (i = 0; i < cc->nr_pts; i++)
		n += cc->pts[i].sampled;
	return n;
}

/* A number, or null for UINT64_MAX (more than 2^64). */
static void json_u64(uint64_t v)
{
	if (v == UINT64_MAX)
		printf("null");
	else
		printf("%" PRIu64, v);
}

static void report_json(const struct cc *cc, uint64_t timeouts, double build_ms, double reset_ms,
			double check_ms)
{
	char how[64];
	size_t i, t;

	printf("{\"log\": ");
	json_str(stdout, cc->log_path);
	printf(", \"states\": %" PRIu64 ", \"failures\": %" PRIu64 ", \"timeouts\": %" PRIu64
	       ", \"seconds\": %.3f, \"scratch\": \"%s\", \"build_ms\": %.3f, \"reset_ms\": %.3f"
	       ", \"check_ms\": %.3f, \"resets\": %" PRIu64 ", \"extended\": %" PRIu64
	       ", \"sampled_points\": %zu, \"points\": [", cc->done, cc->failed, timeouts, cc->secs,
	       cc->clone ? "clone" : "file", build_ms, reset_ms, check_ms, cc->nr_resets,
	       cc->nr_diffs, nr_sampled(cc));
	for (i = 0; i < cc->nr_pts; i++) {
		const struct cc_point *p = &cc->pts[i];

		printf("%s\n  {\"event\": %zu, \"kind\": \"%s\", \"mark\": ", i ? "," : "", p->ev,
		       point_kind(cc, p->ev));
		if (cc->mark_text[p->ev])
			json_str(stdout, cc->mark_text[p->ev]);
		else
			printf("null");
		printf(", \"states\": %" PRIu64 ", \"full_set\": ", p->listed);
		json_u64(p->full);
		printf(", \"default_set\": ");
		json_u64(p->dflt);
		printf(", \"explored\": \"%s\"", explored(p, how, sizeof(how)));
		printf(", \"failures\": %" PRIu64 ", \"first_failure\": ", p->failed);
		if (p->first_fail != SIZE_MAX) {
			char *id = cc_task_id(cc, &cc->tasks[p->first_fail]);

			json_str(stdout, id);
			free(id);
		} else {
			printf("null");
		}
		printf("}");
	}
	printf("],\n \"failed\": [");
	for (t = 0, i = 0; t < cc->nr_tasks; t++) {
		const struct cc_task *tk = &cc->tasks[t];
		char *id;

		if (tk->verdict == CC_OK)
			continue;
		id = cc_task_id(cc, tk);
		printf("%s\n  {\"state\": ", i++ ? "," : "");
		json_str(stdout, id);
		printf(", \"verdict\": \"%s\", \"status\": %d, \"output\": ",
		       verdict_name(tk->verdict), tk->status);
		json_str(stdout, tk->out);
		printf("}");
		free(id);
	}
	printf("]}\n");
}

static void report_table(const struct cc *cc, uint64_t timeouts, double build_ms, double reset_ms,
			 double check_ms)
{
	double secs = cc->secs;
	char how[64];
	size_t i, t;

	printf("%-8s %-6s %-24s %10s %12s %-24s %9s  %s\n", "EVENT", "KIND", "MARK", "STATES",
	       "FULL SET", "EXPLORED", "FAILURES", "FIRST FAILING");
	for (i = 0; i < cc->nr_pts; i++) {
		const struct cc_point *p = &cc->pts[i];
		char full[24];
		char *first = p->first_fail != SIZE_MAX ? cc_task_id(cc, &cc->tasks[p->first_fail]) : NULL;

		if (p->full == UINT64_MAX)
			snprintf(full, sizeof(full), ">2^64");
		else
			snprintf(full, sizeof(full), "%" PRIu64, p->full);
		printf("%-8zu %-6s %-24.24s %10" PRIu64 " %12s %-24s %9" PRIu64 "  %s\n", p->ev,
		       point_kind(cc, p->ev), cc->mark_text[p->ev] ? cc->mark_text[p->ev] : "-",
		       p->listed, full, explored(p, how, sizeof(how)), p->failed, first ? first : "-");
		free(first);
	}
	printf("%" PRIu64 " states, %" PRIu64 " failed (%" PRIu64 " timed out), %.1f s, %.0f states/s\n",
	       cc->done, cc->failed, timeouts, secs, secs > 0 ? (double)cc->done / secs : 0.0);
	printf("%zu crash points, %zu of them sampled (--states)\n", cc->nr_pts, nr_sampled(cc));
	printf("per state: %.3f ms to build (in %s; %" PRIu64 " resets, %.3f ms each; %" PRIu64
	       " by adding writes to the state before), %.3f ms in the checker\n", build_ms,
	       cc->clone ? "ram clones" : "scratch files", cc->nr_resets, reset_ms, cc->nr_diffs,
	       check_ms);
	for (t = 0; t < cc->nr_tasks; t++)
		if (cc->tasks[t].verdict != CC_OK && cc->tasks[t].out) {
			char *id = cc_task_id(cc, &cc->tasks[t]);

			printf("failed %s (%s, status %d): output in %s\n", id ? id : "?",
			       verdict_name(cc->tasks[t].verdict), cc->tasks[t].status, cc->tasks[t].out);
			free(id);
		}
}

/* The run's result on stdout: a table, or one JSON object. */
static void report(struct cc *cc, bool json)
{
	double built = cc->nr_built ? (double)cc->nr_built : 1;
	double build_ms = (double)cc->build_ns / 1e6 / built;
	double reset_ms = cc->nr_resets ? (double)cc->reset_ns / 1e6 / (double)cc->nr_resets : 0;
	double check_ms = (double)cc->check_ns / 1e6 / built;
	uint64_t timeouts = count_failures(cc);

	if (json)
		report_json(cc, timeouts, build_ms, reset_ms, check_ms);
	else
		report_table(cc, timeouts, build_ms, reset_ms, check_ms);
}

/* The progress line on stderr: on a terminal rewritten every 0.5 s, else a line every 10 s. */
struct progress_line {
	bool tty;
	double last;	/* seconds into the run of the last line */
};

static void progress(const struct cc *cc, const struct cc_progress *pr, void *arg)
{
	struct progress_line *pl = arg;
	char how[64], at[96] = "";

	if (!pr->fin && pr->secs - pl->last < (pl->tty ? 0.5 : 10.0))
		return;
	/* the point of the last state taken, and how it is explored */
	if (pr->at)
		snprintf(at, sizeof(at), "; event %zu: %s", pr->at->ev,
			 explored(pr->at, how, sizeof(how)));
	fprintf(stderr, "%scrashcheck: %" PRIu64 "/%zu states, %.0f states/s, %" PRIu64
		" failed%s%s%s", pl->tty ? "\r" : "", pr->done, cc->nr_tasks,
		pr->secs > 0 ? (double)pr->done / pr->secs : 0.0, pr->failed, at,
		pl->tty ? "\033[K" : "", pl->tty ? "" : "\n");
	pl->last = pr->secs;
	if (pr->fin && pl->tty)
		fputc('\n', stderr);
}

/* ---- main ---- */

/* Every state checked: the plan, the run, the report. The exit status. */
static int check_all(struct cc *cc, bool json)
{
	struct progress_line pl = { .tty = isatty(2) };
	int ret;

	ret = cc_make_dirs(cc);
	if (!ret)
		ret = cc_plan(cc);
	if (ret)
		return ret;
	fprintf(stderr, "crashcheck: %zu crash points, %zu states", cc->nr_pts, cc->nr_tasks);
	if (cc->max_states)
		fprintf(stderr, "; %zu points sampled (--states %" PRIu64 " --seed %" PRIu64
			"), the rest exhaustive", nr_sampled(cc), cc->max_states, cc->seed);
	fputc('\n', stderr);
	ret = cc_run(cc, progress, &pl);
	if (ret)
		return ret;
	report(cc, json);
	return cc->failed ? CC_EXIT_FAILED : CC_EXIT_OK;
}

int bf_cmd_crashcheck(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "base", required_argument, NULL, 'b' },
		{ "check", required_argument, NULL, 'c' },
		{ "jobs", required_argument, NULL, 'j' },
		{ "n", required_argument, NULL, 'N' },
		{ "k", required_argument, NULL, 'K' },
		{ "states", required_argument, NULL, 'S' },
		{ "seed", required_argument, NULL, 's' },
		{ "each-write", no_argument, NULL, 'w' },
		{ "attach", no_argument, NULL, 'a' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'J' },
		{ "scratch", required_argument, NULL, 'd' },
		{ "keep", required_argument, NULL, 'k' },
		{ "size", required_argument, NULL, 'z' },
		{ "pbs", required_argument, NULL, 'p' },
		{ "state", required_argument, NULL, 'i' },
		{ "materialize", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cc cc;
	bool json = false;
	int c, sig, ret = 0;

	cc_init(&cc);
	cc.ctl_format = bf_ctl_format;
	while (!ret && (c = getopt_long(argc, argv, "h", lopts, NULL)) != -1)
		ret = parse_opt(&cc, &json, c, optarg);
	if (ret) {
		ret = ret < 0 ? 0 : ret;
		goto out;
	}
	ret = CC_EXIT_USAGE;
	if (optind != argc - 1 || !cc.base || (!cc.check && !cc.materialize) ||
	    (!!cc.state_id != !!cc.materialize)) {
		fputs(usage, stderr);
		goto out;
	}
	cc.log_path = argv[optind];
	if (cc.check && !checker_ok(cc.check)) {
		cc_err("--check %s: not an executable command", cc.check);
		goto out;
	}
	ret = cc_load(&cc);
	if (!ret)
		ret = cc.materialize ? cc_materialize(&cc) : check_all(&cc, json);
out:
	cc_destroy(&cc);
	sig = cc_stop_signal();
	if (sig) {
		/* clean, now die of it, as the shell that sent it expects */
		fprintf(stderr, "crashcheck: stopped by signal %d\n", sig);
		signal(sig, SIG_DFL);
		raise(sig);
		ret = CC_EXIT_ERROR;
	}
	return ret;
}
