#!/usr/bin/env bash
# crash_xfs.sh: crash_ext4.sh with XFS (xfs_repair -n after log recovery);
# skips without xfsprogs. Same env: BLKFS_CRASH_ITERS, BLKFS_CRASH_SEEDS,
# BLKFS_CRASH_SEED.
BLKFS_CRASH_FS=xfs exec bash "$(dirname "$0")/crash_ext4.sh" "$@"
