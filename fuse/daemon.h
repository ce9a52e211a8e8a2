/* SPDX-License-Identifier: MIT */
/* fuse/daemon.h - the FUSE session (daemon.c): serve the mount until it goes. */
#ifndef BLKFS_FUSE_DAEMON_H
#define BLKFS_FUSE_DAEMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bf_daemon;

/*
 * bf_serve - mount at d->mnt with d->kopts, d->fsname as the source, serve
 * until unmounted or signalled, write everything back (SIGTERM, SIGINT and
 * SIGHUP cannot stop that), unmount. Returns the process exit code (0, or
 * 1 if data was lost or the mount failed); @status receives the lines for
 * the status file.
 */
int bf_serve(struct bf_daemon *d, char *status, size_t statuslen);

#endif
