#!/usr/bin/env bash
# integ-serial: flips enable_uring
# uring_suite_fs.sh: the second half of uring_suite.sh (mmap, ext4, aio_kill
# over FUSE over io_uring); see there.
exec bash "$(dirname "$0")/uring_suite.sh" fs
