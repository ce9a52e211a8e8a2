#!/usr/bin/env bash
# mmap.sh: MAP_SHARED stores reach the device. mmap_check writes pattern A
# with O_DIRECT, stores pattern B through a shared mapping over whole pages
# and over pieces that are not page-, folio- or sector-aligned, then
# msync(MS_SYNC) + fsync (or munmap + fsync) and reads back with O_DIRECT:
# B where stored, A elsewhere. On devices with 512-byte logical blocks, where
# a 64K folio holds many blocks (the case where a kernel once lost such
# writes), with auto and forced 512-byte cache blocks, plus a 4K device.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper mmap_check
mc=$BLKFS_TESTBIN/mmap_check

start_blkfs "[cache]
folio_size = 64K

[device m512]
backend = ram
size = 32M
logical_block_size = 512
physical_block_size = 4096

[device m512f]
backend = ram
size = 32M
logical_block_size = 512
physical_block_size = 512
cache_block_size = 512

[device m4k]
backend = ram
size = 32M
logical_block_size = 4096
physical_block_size = 4096"

M=$((1 << 20))
for d in m512 m512f m4k; do
	dev=$MNT/$d
	assert_live "$MNT"
	info "$d: msync at 1M +2M"
	"$mc" "$dev" $((1 * M)) $((2 * M)) msync || fail "$d: mmap_check msync 1M+2M"
	info "$d: munmap + fsync at 0 +1M"
	"$mc" "$dev" 0 $((1 * M)) munmap || fail "$d: mmap_check munmap 0+1M"
	info "$d: msync at the device's last 1M"
	"$mc" "$dev" $((31 * M)) $((1 * M)) msync || fail "$d: mmap_check msync at the end"
	info "$d: msync at an odd 64K multiple, 1M+64K long"
	"$mc" "$dev" $((5 * M + 3 * 65536)) $((M + 65536)) msync ||
		fail "$d: mmap_check msync at 5M+192K"
done
stop_blkfs "$MNT"
