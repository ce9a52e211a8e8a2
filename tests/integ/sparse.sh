#!/usr/bin/env bash
# sparse.sh: a 16 TiB RAM device mounts on this machine; writes at 0, 8T,
# 16T-1M and a few more offsets (some unaligned) read back byte for byte;
# the daemon's resident memory grows with data written, not device size:
# right after mount it stays below cache + 64 MiB, after writing 64 MiB below
# cache + 64 MiB + the data written.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require dd cmp stat

T=$((1 << 40))
M=$((1 << 20))
SIZE=$((16 * T))
CACHE=$((32 * M))
start_blkfs "[cache]
size = 32M

[device big]
backend = ram
size = 16T
logical_block_size = 512
physical_block_size = 4096"
dev=$MNT/big
assert_eq "st_size" "$SIZE" "$(stat -c %s "$dev")"

rss0=$(vmrss_kb "$DAEMON_PID")
info "VmRSS after mount: ${rss0} KiB"
[ "$rss0" -lt $(((CACHE + 64 * M) / 1024)) ] ||
	fail "VmRSS after mounting a 16 TiB device is ${rss0} KiB (cache 32 MiB)"

src=$TDIR/src
mkdata "$src" $((8 * M))
# 8 writes of 8 MiB (the one at 16T-1M: 1 MiB), none overlapping.
offsets=(0 $((8 * T)) $((SIZE - M)) $((SIZE - 32 * M - 4096)) $((T + 12345))
	$((4 * T - 4096)) $((13 * T + 7 * M + 511)) $((2 * T)))
for off in "${offsets[@]}"; do
	len=$((8 * M))
	[ $((off + len)) -le "$SIZE" ] || len=$((SIZE - off))
	ddev if="$src" of="$dev" bs=1M oflag=seek_bytes seek="$off" iflag=count_bytes \
		count="$len" conv=notrunc,fsync
done
total=$((8 * 8 * M - 7 * M))	# the write at 16T-1M is 1 MiB

info "reading back"
for off in "${offsets[@]}"; do
	len=$((8 * M))
	[ $((off + len)) -le "$SIZE" ] || len=$((SIZE - off))
	cmp -n "$len" "$src" <(dd if="$dev" iflag=skip_bytes,count_bytes skip="$off" \
		count="$len" bs=1M status=none) || fail "data at $off differs"
done
# Untouched places read as zeros, the end is the end.
assert_zero "$dev" $((3 * T)) $((1 * M))
assert_zero "$dev" $((8 * T - M)) $((M))
chk "0 512 ENOSPC" "$dev" pread "$SIZE" 4096 pread $((SIZE - 512)) 4096 pwrite "$SIZE" 512
assert_eq "st_size at the end" "$SIZE" "$(stat -c %s "$dev")"

rss1=$(vmrss_kb "$DAEMON_PID")
limit=$(((CACHE + 64 * M + total) / 1024))
info "VmRSS after writing $((total / M)) MiB: ${rss1} KiB (limit ${limit} KiB)"
[ "$rss1" -lt "$limit" ] ||
	fail "VmRSS ${rss1} KiB after writing $((total / M)) MiB exceeds ${limit} KiB"
stop_blkfs "$MNT"
