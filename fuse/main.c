/* SPDX-License-Identifier: MIT */
/*
 * fuse/main.c - the `blkfs` command: `COMMAND --help`, and which file serves
 * each command: cmd_mount.c (mount, its fstab form, check),
 * cmd_umount.c (umount), cmd_stat.c (stat), cmd_ctl.c (add, remove, resize,
 * snapshot, reset, save: the control client), loop.c (attach, detach),
 * trace.c (trace), crashcheck.c (crashcheck), cmd_probe.c
 * (probe-transport); runfiles.c holds what they
 * share (the run directory, the config file), usage.c the usage text.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "crashcheck.h"
#include "loop.h"
#include "trace.h"

/* `blkfs COMMAND --help` for the commands that are not the control file's. */
static const struct {
	const char *cmd;
	const char *help;
} cmd_help[] = {
	{ "mount", "Usage: blkfs mount MNT [-c CONFIG] [-f] [-o OPTIONS]\n\n"
	  "Mount the devices of CONFIG (default ./blkfs.conf, else /etc/blkfs.conf) at\n"
	  "directory MNT. Returns once the mount is usable; the daemon keeps running in\n"
	  "the background (-f: in the foreground, messages on stderr). -o takes mount\n"
	  "options (ro, sync, allow_other, [mount] keys...).\n"
	  "Exit status: 0 mounted; 1 failed (the reason on stderr); 2 usage.\n" },
	{ "umount", "Usage: blkfs umount MNT\n\n"
	  "Unmount, wait until the daemon has written every dirty block to its backend\n"
	  "and exited. Exit status: 0 all written back; 1 not a blkfs mount, busy, or\n"
	  "data could not be written (how much, on which device); 2 usage.\n" },
	{ "unmount", NULL },
	{ "attach", "Usage: blkfs attach MNT DEV\n\n"
	  "A loop device over MNT/DEV (sector size: its logical block); prints\n"
	  "/dev/loopN, and on stderr the geometry the loop hides and the mkfs options\n"
	  "that keep its alignment. Exit status: 0 attached; 1 failed; 2 usage.\n" },
	{ "detach", "Usage: blkfs detach /dev/loopN | MNT DEV\n\n"
	  "Remove a loop device over a blkfs device file. Exit status: 0 detached;\n"
	  "1 not such a loop device, or busy; 2 usage.\n" },
	{ "check", "Usage: blkfs check [-c CONFIG]\n\n"
	  "Parse CONFIG and open its backends without mounting; print each device's\n"
	  "geometry. Exit status: 0 valid; 1 a config error or a backend that would\n"
	  "not open; 2 usage.\n" },
	{ "stat", "Usage: blkfs stat MNT [DEV] [--json | --prometheus | -i SECONDS [COUNT]]\n\n"
	  "Counters of every device of the mount (added ones included), or of DEV:\n"
	  "user and backend bytes and I/Os, cache hits, dirty and cached bytes, errors,\n"
	  "backend write sizes, latency percentiles; --json for programs; --prometheus\n"
	  "in Prometheus's text format; -i: an iostat -x line per device and level every\n"
	  "SECONDS (COUNT times, or until SIGINT). Exit status: 0 printed; 1 not a\n"
	  "blkfs mount or no such device; 2 usage.\n" },
	{ "trace", "Usage: blkfs trace MNT DEV [-o NAME] [-w SECONDS] [--fuse]\n\n"
	  "DEV's I/O in blktrace's format, to stdout (| blkparse -i -) or into\n"
	  "NAME.blktrace.0 (blkparse -i NAME, btt, iowatcher), until SIGINT or for\n"
	  "SECONDS; then says how many events it wrote and dropped. --fuse: the user's\n"
	  "requests as FUSE received them instead of the I/O below the cache.\n"
	  "Exit status: 0 traced; 1 refused, or a write of the trace failed; 2 usage.\n" },
	{ "probe-transport", "Usage: blkfs probe-transport [-q] [--cached]\n\n"
	  "Measure FUSE over io_uring against /dev/fuse on this machine, as transport = auto\n"
	  "does at mount: a private mount of a 64 MiB RAM device over each, 3 rounds of\n"
	  "250 ms of 4 KiB O_DIRECT QD1 reads, QD1 writes and QD32 libaio; prints IOPS\n"
	  "and the ring/dev ratio per test and the choice (the ring when the geometric\n"
	  "mean of the ratios is at least 0.97), and caches it in\n"
	  "$BLKFS_RUNDIR/transport-probe. --cached: the cached result of this boot and\n"
	  "kernel if there is one. -q: one line, CHOICE SOURCE RATIOS. Needs the kernel's\n"
	  "ring on (/sys/module/fuse/parameters/enable_uring = Y), else prints dev.\n"
	  "Exit status: 0 a choice printed; 1 the probe failed; 2 usage.\n" },
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fputs(bf_usage, stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		fputs(bf_usage, stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("blkfs %s\n", BLKFS_VERSION);
		return 0;
	}
	if (argc >= 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
		for (size_t c = 0; c < sizeof(cmd_help) / sizeof(cmd_help[0]); c++) {
			if (strcmp(argv[1], cmd_help[c].cmd))
				continue;
			fputs(cmd_help[c].help ? cmd_help[c].help : cmd_help[c - 1].help, stdout);
			return 0;
		}
	}
	if (!strcmp(argv[1], "mount"))
		return bf_cmd_mount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "umount") || !strcmp(argv[1], "unmount"))
		return bf_cmd_umount(argc - 1, argv + 1);
	if (!strcmp(argv[1], "check"))
		return bf_cmd_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "stat"))
		return bf_cmd_stat(argc - 1, argv + 1);
	if (!strcmp(argv[1], "attach"))
		return bf_cmd_attach(argc - 1, argv + 1);
	if (!strcmp(argv[1], "trace"))
		return bf_trace_client(argc - 1, argv + 1);
	if (!strcmp(argv[1], "crashcheck"))
		return bf_cmd_crashcheck(argc - 1, argv + 1);
	if (!strcmp(argv[1], "probe-transport"))
		return bf_cmd_probe(argc - 1, argv + 1);
	if (!strcmp(argv[1], "detach"))
		return bf_cmd_detach(argc - 1, argv + 1);
	if (bf_ctl_verb_known(argv[1]))
		return bf_cmd_ctl(argc - 1, argv + 1);
	/*
	 * `blkfs CONFIG MNT [-o OPTS]`: how mount.fuse3 runs blkfs for an fstab
	 * line `CONFIG MNT fuse.blkfs OPTS 0 0` (or `mount -t fuse.blkfs CONFIG
	 * MNT`): a mount with -c CONFIG. Taken when the first word names a file
	 * (or a path), so a mistyped command is still "unknown command".
	 */
	if (argc >= 3 && argv[1][0] != '-' && (strchr(argv[1], '/') || !access(argv[1], F_OK)))
		return bf_cmd_mount_fstab(argc, argv);
	fprintf(stderr, "blkfs: unknown command '%s'\n%s", argv[1], bf_usage);
	return 2;
}
