#!/usr/bin/env bash
# kernel_cache.sh: [mount] kernel_cache = writeback. The kernel's page cache
# takes small writes first; blkfs's cache still tracks blocks and writes them
# back. What changes (README): the kernel owns the file size, so an O_TRUNC
# open is refused with EPERM instead of making the kernel believe the device
# is empty. Data written in small and large pieces, with and without
# O_DIRECT, verifies byte for byte, also after a remount of the same daemon's
# cache (the cache is dropped by reading through O_DIRECT).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp stat

start_blkfs "[mount]
kernel_cache = writeback
[cache]
size = 64M
[device ram0]
backend = ram
size = 256M
logical_block_size = 4096
physical_block_size = 4096"
dev=$MNT/ram0
size=$((256 << 20))
assert_eq "st_size" "$size" "$(stat -c %s "$dev")"

info "a plain dd of= (O_TRUNC) is refused, and nothing changes"
data=$TDIR/data
mkdata "$data" $((32 << 20))
assert_live "$MNT"
if out=$(dd if="$data" of="$dev" bs=1M count=1 2>&1); then
	fail "dd with O_TRUNC succeeded in kernel_cache = writeback mode"
fi
case $out in *"Operation not permitted"*) ;; *) fail "O_TRUNC refused with the wrong error: $out" ;; esac
assert_eq "st_size after refused O_TRUNC" "$size" "$(stat -c %s "$dev")"

info "4 KiB and 1 MiB buffered writes, fsync, verify through the cache and with O_DIRECT"
dd if="$data" of="$dev" bs=4k count=4096 conv=notrunc,nocreat,fsync status=none ||
	fail "dd bs=4k failed"
dd if="$data" of="$dev" bs=1M skip=16 seek=16 count=16 conv=notrunc,nocreat,fsync status=none ||
	fail "dd bs=1M failed"
cmp -n $((32 << 20)) "$data" "$dev" || fail "buffered read differs"
dd if="$dev" of="$TDIR/back" bs=1M count=32 iflag=direct status=none || fail "O_DIRECT read failed"
cmp "$data" "$TDIR/back" || fail "O_DIRECT read differs"
assert_eq "st_size" "$size" "$(stat -c %s "$dev")"

info "O_DIRECT write over cached data: buffered readers see it"
mkdata "$TDIR/d2" $((1 << 20))
dd if="$TDIR/d2" of="$dev" bs=1M seek=4 conv=notrunc,nocreat oflag=direct status=none ||
	fail "O_DIRECT write failed"
dd if="$dev" of="$TDIR/back2" bs=1M skip=4 count=1 status=none
cmp "$TDIR/d2" "$TDIR/back2" || fail "buffered read after O_DIRECT write is stale"

info "misaligned O_DIRECT is still refused"
expect_fail dd if="$data" of="$dev" bs=512 count=1 seek=1 conv=notrunc,nocreat oflag=direct status=none

info "blkfs's own counters saw the data"
uw=$(awk '$1 == "user_write_bytes" {print $2}' "$MNT/.sys/ram0/blkfs_stat")
[ "$uw" -ge $((16 << 20)) ] || fail "user_write_bytes $uw: blkfs's cache did not see the writes"
stop_blkfs
