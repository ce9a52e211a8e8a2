#!/usr/bin/env bash
# integ-serial: flips enable_uring
# uring_suite_async.sh: the third part of uring_suite.sh (async and
# async_shutdown over FUSE over io_uring: parked requests whose replies come
# from the completing threads); see there.
exec bash "$(dirname "$0")/uring_suite.sh" async
