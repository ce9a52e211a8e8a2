#!/usr/bin/env bash
# integ-serial: flips enable_uring
# uring_suite.sh [fs]: the data-verifying integration tests again, over
# FUSE over io_uring (each mount's config gets `transport = uring` through
# lib.sh's BLKFS_TRANSPORT, and each mount is checked to be on the ring),
# with smaller data where a test allows it:
#   dd_basic    (BLKFS_DD_QUICK=1: without the small-cache remount)
#   fio_verify  (BLKFS_FIO_VERIFY_MB=8: 4 jobs x 8 MiB instead of 24)
#   odirect
# with `fs` (uring_suite_fs.sh; the parts are separate tests, each well
# within the runner's time limit on a busy machine):
#   mmap, ext4  (ext4 on a loop device over the device file)
#   aio_kill    (BLKFS_AIOKILL_ITERS=2: two kill -9 under a writer)
# and with `async` (uring_suite_async.sh): requests parked on slow devices,
# their replies made by the threads that complete them:
#   async, async_shutdown
# (uring.sh checks replies made by other threads, with fio verify.) The
# kernel's switch is turned on for the run and put back after; without root
# or without the switch the suite skips.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_uring
here=$(cd "$(dirname "$0")" && pwd)
uring_set Y

failed=()
ran=0
# sub NAME [ENV=VALUE...]: tests/integ/NAME.sh over the ring, under $TDIR
sub() {
	local name=$1 rc
	shift
	info "$name over io_uring${*:+ ($*)}"
	env BLKFS_TRANSPORT=uring BLKFS_TEST_BASE="$TDIR" "$@" \
		timeout -k 10 240 bash "$here/$name.sh" </dev/null >"$TDIR/$name.log" 2>&1 && rc=0 || rc=$?
	case $rc in
	0) ran=$((ran + 1)) ;;
	77) info "  SKIP: $(grep -m1 '^SKIP:' "$TDIR/$name.log" | cut -c7-)" ;;
	*)
		sed 's/^/    | /' "$TDIR/$name.log"
		failed+=("$name${*:+ ($*)}: exit $rc")
		;;
	esac
}

if [ "${1:-}" = fs ]; then
	sub mmap
	sub ext4
	sub aio_kill BLKFS_AIOKILL_ITERS=2
elif [ "${1:-}" = async ]; then
	sub async
	sub async_shutdown
else
	sub dd_basic BLKFS_DD_QUICK=1
	sub fio_verify BLKFS_FIO_VERIFY_MB=8
	sub odirect
fi

[ "${#failed[@]}" -eq 0 ] || fail "over io_uring: ${failed[*]}"
[ "$ran" -gt 0 ] || skip "every test of the suite skipped"
info "$ran tests passed over io_uring"
