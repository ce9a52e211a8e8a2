#!/usr/bin/env bash
# write_cache.sh: .sys/DEV/queue/write_cache, as the kernel's, under the
# powerloss filter's power cuts (which drop blkfs's cached data, and keep,
# drop or tear every write no flush covered):
#  - write_cache = write through (config): each write is on stable storage
#    before it returns (no dirty data, no unflushed write after it), so a
#    cut with no fsync loses nothing;
#  - switched live to write back: a plain write without fsync is lost by a
#    cut (it was only in the cache): the test could fail;
#  - write back with O_DSYNC writes (dd oflag=dsync), honoured per write as
#    a disk's FUA: they survive the cut too;
#  - the attribute refuses anything but its two values, the config names
#    the file, line and key of a bad one.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk

MiB=$((1 << 20))
A=$TDIR/a B=$TDIR/b C=$TDIR/c
mkdata "$A" $((4 * MiB))
mkdata "$B" $((4 * MiB))
mkdata "$C" $((4 * MiB))

start_blkfs "[device r0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
write_cache = write through
filters = powerloss"
dev=$MNT/r0
wc=$MNT/.sys/r0/queue/write_cache
pl=$MNT/.sys/r0/powerloss
stat_of() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/r0/blkfs_stat"
}
cut() {
	echo 1 >"$pl/trigger" || fail "trigger failed"
	echo 1 >"$pl/restart" || fail "restart failed"
}

assert_eq "write_cache from the config" "write through" "$(cat "$wc")"
ddev if="$A" of="$dev" bs=64K
assert_eq "dirty bytes after writes through" 0 "$(stat_of dirty_bytes)"
assert_eq "unflushed bytes after writes through" 0 "$(cat "$pl/unflushed_bytes")"
[ "$(stat_of write_through_writes)" -ge 64 ] || fail "write_through_writes $(stat_of write_through_writes)"
cut
cmp -n $((4 * MiB)) "$A" "$dev" || fail "a write through was lost by the power cut"

echo "write back" >"$wc"
assert_eq "write_cache after switching" "write back" "$(cat "$wc")"
ddev if="$B" of="$dev" bs=64K seek=64
cut
if cmp -s -n $((4 * MiB)) "$B" <(dd if="$dev" bs=64K skip=64 count=64 status=none); then
	fail "a write back without fsync survived a power cut: the cut tests nothing"
fi

ddev if="$C" of="$dev" bs=64K seek=128 oflag=dsync
assert_eq "unflushed bytes after O_DSYNC writes" 0 "$(cat "$pl/unflushed_bytes")"
cut
cmp -n $((4 * MiB)) "$C" <(dd if="$dev" bs=64K skip=128 count=64 status=none) ||
	fail "an O_DSYNC write was lost by the power cut"

expect_errno EINVAL bash -c "echo writeback >'$wc'"
expect_errno EINVAL bash -c "echo 'write  back' >'$wc'"
assert_eq "write_cache after refusals" "write back" "$(cat "$wc")"
stop_blkfs

printf '[device r0]\nbackend = ram\nsize = 64M\nwrite_cache = maybe\n' >"$TDIR/bad.conf"
out=$("$BLKFS" check -c "$TDIR/bad.conf" 2>&1) && fail "write_cache = maybe accepted"
case $out in
*"bad.conf:4: write_cache: maybe is not a choice (allowed: write back, write through)"*) ;;
*) fail "write_cache = maybe: $out" ;;
esac
