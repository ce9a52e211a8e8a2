#!/usr/bin/env bash
# unaligned.sh: writes of whole, aligned 1 MiB ranges from a buffer that is
# not page-aligned, as most programs write (the kernel sends each as two
# FUSE requests split inside a block), on 4096/4096 blocks:
#  - every pwrite returns its full length, the device gets 2 requests per
#    write, and nothing is read (rmw_read_bytes 0: the second request
#    completes the block the first left partial);
#  - with the fault filter's bad-block map over the whole device, every
#    pwrite still returns its full length (nothing is read at write time)
#    and fsync reports EIO; after `clear` a second fsync succeeds and every
#    byte verifies.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper unaligned_write
require awk

start_blkfs "[cache]
size = 64M
[device d0]
backend = ram
size = 256M
logical_block_size = 4096
physical_block_size = 4096
filters = fault
fault.ops = all"
dev=$MNT/d0
sysd=$MNT/.sys/d0

stat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$sysd/blkfs_stat"
}

uw() {
	"$BLKFS_TESTBIN/unaligned_write" "$@"
}

# 1. 48 writes through a 64 MiB cache: full lengths, two requests each, no read
w0=$(stat user_writes)
out=$(uw "$dev" 0 48 1)
assert_eq "writes of 1 MiB from buffer+16" "fsync OK" "$out"
writes=$(($(stat user_writes) - w0))
[ "$writes" -eq 96 ] || fail "48 writes from buffer+16 came as $writes requests, not 96"
assert_eq rmw_read_bytes 0 "$(stat rmw_read_bytes)"
uw -v "$dev" 0 48 1 || fail "data written from buffer+16 does not read back"

# 2. every block bad: writes to blocks not cached are taken whole, fsync
# reports the failure
printf '0 268435456 EIO\n' >"$sysd/fault/badblocks"
out=$(uw "$dev" 128 16 2)
case $out in
*short*) fail "a pwrite over bad blocks came back short: $out" ;;
"fsync EIO") ;;
*) fail "expected fsync EIO over bad blocks, got: $out" ;;
esac
assert_eq "rmw_read_bytes over bad blocks" 0 "$(stat rmw_read_bytes)"
[ "$(stat dirty_bytes)" -eq $((16 << 20)) ] || fail "dirty_bytes $(stat dirty_bytes), want 16 MiB"
printf 'clear\n' >"$sysd/fault/badblocks"
"$BLKFS_TESTBIN/fsync_fd" 0 <"$dev" | grep -qx OK || fail "fsync after clear failed"
assert_eq "dirty after the retry" 0 "$(stat dirty_bytes)"
uw -v "$dev" 128 16 2 || fail "data written over bad blocks does not read back after clear"
stop_blkfs
