/* SPDX-License-Identifier: MIT */
/*
 * fuse/cmd.h - the commands of `blkfs` (fuse/main.c dispatches): each
 * family's entry, called with the command's own argv (argv[0] the command's
 * name) and returning its exit status; and what they share (runfiles.c).
 */
#ifndef BLKFS_FUSE_CMD_H
#define BLKFS_FUSE_CMD_H

#include <stdbool.h>
#include <stddef.h>

struct bf_daemon;

/* The text of `blkfs --help` (usage.c), also printed after a usage error. */
extern const char bf_usage[];

/* cmd_mount.c */
int bf_cmd_mount(int argc, char **argv);
int bf_cmd_mount_fstab(int argc, char **argv);
int bf_cmd_check(int argc, char **argv);
/* cmd_umount.c */
int bf_cmd_umount(int argc, char **argv);
/* cmd_stat.c */
int bf_cmd_stat(int argc, char **argv);
/* cmd_probe.c */
int bf_cmd_probe(int argc, char **argv);
/* cmd_ctl.c */
int bf_cmd_ctl(int argc, char **argv);
bool bf_ctl_verb_known(const char *verb);

/* runfiles.c: the run directory, a mount point's file in it (@ext: pid, log, status) */
const char *bf_rundir(void);
void bf_run_file(char *out, size_t len, const char *mnt, const char *ext);
int bf_mkdir_p(const char *path);
int bf_write_file(const char *path, const char *text);
/* runfiles.c: the config file to use (-c @arg, else ./blkfs.conf, else /etc/blkfs.conf), loaded into @d */
const char *bf_pick_conf(const char *arg);
int bf_load_conf(struct bf_daemon *d, const char *path);

#endif
