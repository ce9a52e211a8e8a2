/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd_ctl.c - the control client: `blkfs add`, remove, resize, snapshot,
 * reset and save, each one command to a mounted daemon through
 * MNT/.sys/control (bf_ctl_run), with its usage and help.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "ctl_client.h"
#include "mnt.h"

/* ------------------------------------------------ commands to the daemon */

/*
 * `blkfs VERB MNT ARG...` sends `VERB ARG...` through MNT/.sys/control
 * (bf_ctl_run). Options (-d) go with the arguments, wherever they stand;
 * MNT is the first word that is not one.
 */
static const struct {
	const char *verb;
	int min_args, max_args;	/* after MNT */
	const char *usage;
	const char *help;
} ctl_cmds[] = {
	{ "add", 1, BF_CTL_MAX_ARGS - 2, "blkfs add MNT NAME KEY=VALUE...",
	  "Add device NAME to the mount at MNT while it serves the others: the keys are\n"
	  "those of a [device NAME] section of blkfs.conf(5) (backend=ram size=1G\n"
	  "filters=delay delay.write=1ms ...; quote a value with blanks), checked with\n"
	  "the same messages. Its file MNT/NAME and MNT/.sys/NAME/ appear at once.\n"
	  "Relative paths (path=, image=, FILTER.path=) are taken from this directory.\n"
	  "Exit status: 0 added; 1 refused (a bad key, EINVAL; the name taken, EEXIST;\n"
	  "no room, ENOSPC; the backend cannot open), the reason on stderr; 2 usage, or\n"
	  "MNT is not a blkfs mount.\n" },
	{ "remove", 1, 1, "blkfs remove MNT NAME",
	  "Remove device NAME from the mount at MNT: its dirty data is written back and\n"
	  "flushed, its backend closed, its file gone. Refused (EBUSY, naming the\n"
	  "holder) while the file is open or a loop device sits on it, and when the\n"
	  "writeback fails (the error is given; nothing is dropped). There is no --force.\n"
	  "Exit status: 0 removed; 1 refused; 2 usage, or MNT is not a blkfs mount.\n" },
	{ "resize", 2, 2, "blkfs resize MNT NAME SIZE|auto",
	  "Change the size of device NAME while it is mounted: SIZE in bytes with an\n"
	  "optional K/M/G/T suffix, a multiple of its cache block; auto: the size its\n"
	  "storage has now. ram grows and shrinks (a shrink drops the data past the\n"
	  "end); aio grows an image file, or with auto takes a block device's or a\n"
	  "file's new size, and never shrinks; nbd reconnects to read the export's\n"
	  "size (auto). Requests are held for the moment, dirty data written back;\n"
	  "every opener sees the new size at once (then losetup -c, resize2fs).\n"
	  "Refused: a shrink below a loop device on the file, or with\n"
	  "kernel_cache = writeback; a ram shrink while it has snapshots.\n"
	  "Exit status: 0 done; 1 refused (the reason on stderr); 2 usage, or MNT is\n"
	  "not a blkfs mount.\n" },
	{ "snapshot", 2, 2, "blkfs snapshot [-d] MNT NAME SNAP",
	  "Take an instant copy-on-write snapshot SNAP of ram device NAME: its dirty\n"
	  "cache is written back first while new writes wait, nothing is copied.\n"
	  "-d deletes SNAP. MNT/.sys/NAME/snapshots lists them with the memory each\n"
	  "holds alone. Exit status: 0 done; 1 refused (a bad or taken name, no such\n"
	  "snapshot, a backend without snapshots: only ram has them); 2 usage.\n" },
	{ "reset", 2, 2, "blkfs reset MNT NAME SNAP",
	  "Return ram device NAME to snapshot SNAP in milliseconds: what was written\n"
	  "since is gone, also from blkfs's and the kernel's caches (unmount a\n"
	  "filesystem on it first). SNAP stays. Exit status: 0 done; 1 refused;\n"
	  "2 usage.\n" },
	{ "save", 2, 3, "blkfs save MNT NAME FILE [SNAP]",
	  "Write ram device NAME (its dirty cache first), or its snapshot SNAP, to\n"
	  "FILE as a sparse raw image, complete or not at all (written beside it and\n"
	  "renamed). `image = FILE` in a [device] section loads it. Exit status:\n"
	  "0 done; 1 refused or the image could not be written; 2 usage.\n" },
};

/* An argument the daemon takes as a path: made absolute, its cwd is not ours. */
static bool path_key(const char *verb, int idx, int nargs, const char *arg, size_t *val_off)
{
	const char *eq, *dot, *key_end;

	if (!strcmp(verb, "save")) {
		/* save NAME FILE [SNAP] */
		*val_off = 0;
		(void)nargs;
		return idx == 1 && arg[0] != '/';
	}
	if (strcmp(verb, "add") || idx == 0)
		return false;
	eq = strchr(arg, '=');
	if (!eq || eq[1] == '/' || !eq[1])
		return false;
	key_end = eq;
	for (dot = eq; dot > arg && dot[-1] != '.'; dot--)
		;
	*val_off = (size_t)(eq + 1 - arg);
	return (key_end - dot == 4 && !strncmp(dot, "path", 4)) ||
	       (key_end - dot == 5 && !strncmp(dot, "image", 5));
}

int bf_cmd_ctl(int argc, char **argv)
{
	char *args[BF_CTL_MAX_ARGS + 1], *mnt = NULL, cwd[PATH_MAX];
	char absbuf[BF_CTL_MAX_ARGS][PATH_MAX];
	const char *verb = argv[0];
	int i, n = 0, nargs, k = -1, code, opts = 0;
	size_t c;

	for (c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++)
		if (!strcmp(ctl_cmds[c].verb, verb))
			k = (int)c;
	if (k < 0)
		return 2;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("Usage: %s\n\n%s\nThe command is one line written to MNT/.sys/control; "
			       "see blkfs(1).\n", ctl_cmds[k].usage, ctl_cmds[k].help);
			return 0;
		}
	}
	args[n++] = (char *)verb;
	for (i = 1; i < argc; i++) {
		if (!mnt && argv[i][0] != '-') {
			mnt = argv[i];
			continue;
		}
		if (argv[i][0] == '-')
			opts++;
		if (n == BF_CTL_MAX_ARGS) {
			fprintf(stderr, "blkfs %s: too many arguments (at most %d)\n", verb,
				BF_CTL_MAX_ARGS - 1);
			return 2;
		}
		args[n++] = argv[i];
	}
	nargs = n - 1 - opts;
	if (!mnt || nargs < ctl_cmds[k].min_args || nargs > ctl_cmds[k].max_args) {
		fprintf(stderr, "Usage: %s\n(blkfs %s --help)\n", ctl_cmds[k].usage, verb);
		return 2;
	}
	if (!getcwd(cwd, sizeof(cwd)))
		cwd[0] = 0;
	for (i = 1; i < n; i++) {
		size_t off;

		if (!cwd[0] || !path_key(verb, i - 1, n - 1, args[i], &off))
			continue;
		if (snprintf(absbuf[i], sizeof(absbuf[i]), "%.*s%s/%s", (int)off, args[i], cwd,
			     args[i] + off) >= (int)sizeof(absbuf[i])) {
			fprintf(stderr, "blkfs %s: %s: path too long\n", verb, args[i]);
			return 2;
		}
		args[i] = absbuf[i];
	}
	args[n] = NULL;
	code = bf_ctl_run(mnt, n, args);
	return code;
}

/* Is @verb one of the commands sent to the daemon (bf_cmd_ctl())? */
bool bf_ctl_verb_known(const char *verb)
{
	for (size_t c = 0; c < sizeof(ctl_cmds) / sizeof(ctl_cmds[0]); c++)
		if (!strcmp(verb, ctl_cmds[c].verb))
			return true;
	return false;
}
