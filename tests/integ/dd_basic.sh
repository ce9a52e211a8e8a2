#!/usr/bin/env bash
# dd_basic.sh: dd at bs 512, 4K, 1M and 16M, odd block sizes, unaligned
# offsets and lengths (seek_bytes/skip_bytes/count_bytes), the last bytes of
# the device; the same commands build a reference image in a plain file and
# every device must equal it byte for byte, read back with several block
# sizes and at unaligned ranges. Geometries 512/4096 and 4096/4096, forced
# 512-byte cache blocks, and a mount with an 8 MiB cache so eviction and
# writeback happen in the middle of the test.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp stat truncate

SIZE=$((64 << 20))
src=$TDIR/src
mkdata "$src" $((40 << 20))

# wr TARGET DD_OPERANDS...: one write into the device or the reference.
wr() {
	local t=$1
	shift
	if [ "$t" = "$ref" ]; then
		dd of="$t" "$@" conv=notrunc status=none
	else
		ddev of="$t" "$@" conv=notrunc
	fi
}

# apply TARGET: the write sequence.
apply() {
	local t=$1
	wr "$t" if="$src" bs=16M count=2
	wr "$t" if="$src" bs=1M count=5 seek=40 skip=3
	wr "$t" if="$src" bs=4K count=300 seek=3001 skip=17
	wr "$t" if="$src" bs=512 count=1000 seek=12345 skip=77
	wr "$t" if="$src" bs=4K oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=1000001 skip=333 count=123457
	wr "$t" if="$src" bs=1 count=1 oflag=seek_bytes iflag=skip_bytes seek=65535 skip=5
	wr "$t" if="$src" bs=512 oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((65536 * 10 - 100)) skip=999 count=200
	wr "$t" if="$src" bs=7 count=1001 oflag=seek_bytes seek=777777 skip=3
	wr "$t" if="$src" bs=100 count=3 oflag=seek_bytes seek=4000 skip=11
	wr "$t" if="$src" bs=4K oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((SIZE - 1000)) skip=4242 count=1000
	wr "$t" if="$src" bs=16M oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$(((48 << 20) + 511)) skip=1234567 count=$((10 << 20)) conv=fsync
	wr "$t" if="$src" bs=1M count=3 seek=1 skip=20 conv=fsync
	wr "$t" if="$src" bs=4K count=50 seek=100 skip=9000
	wr "$t" if="$src" bs=16M oflag=seek_bytes iflag=count_bytes \
		seek=$(((20 << 20) + 3)) count=$(((16 << 20) + 12345))
	wr "$t" if="$src" bs=512 count=7 oflag=seek_bytes seek=$((SIZE - 3584)) skip=1
	wr "$t" if="$src" bs=1M oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((SIZE - (1 << 20) - 77)) skip=7 count=$(((1 << 20) + 77))
}

# readcmp DEV SKIP COUNT BS: an unaligned read range equals the reference.
readcmp() {
	cmp <(dd if="$1" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs="$4" status=none) \
		<(dd if="$ref" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs=1M status=none) ||
		fail "$1: range $2 +$3 read with bs=$4 differs"
}

ref=$TDIR/ref
truncate -s "$SIZE" "$ref"
apply "$ref"

check_dev() {
	local dev=$1
	info "writing $dev"
	apply "$dev"
	assert_eq "st_size of $dev" "$SIZE" "$(stat -c %s "$dev")"
	info "verifying $dev"
	cmp "$ref" "$dev" || fail "$dev differs from the reference image"
	dd if="$dev" bs=16M status=none | cmp - "$ref" || fail "$dev read with bs=16M differs"
	readcmp "$dev" 0 $((8 << 20)) 512
	readcmp "$dev" 0 $((8 << 20)) 4K
	readcmp "$dev" 12345 999999 4K
	readcmp "$dev" 777770 8000 7
	readcmp "$dev" $((65536 - 3)) 7 1
	readcmp "$dev" $(((20 << 20) - 1)) $(((17 << 20) + 2)) 1M
	readcmp "$dev" $((SIZE - 5000)) 5000 4K
}

start_blkfs "[device g512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device g4k]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096

[device f512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
cache_block_size = 512"
check_dev "$MNT/g512"
check_dev "$MNT/g4k"
check_dev "$MNT/f512"
stop_blkfs "$MNT"

info "small cache: 8 MiB for 64 MiB of writes"
start_blkfs "[cache]
size = 8M
folio_size = 64K

[device s512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device s4k]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096
max_io = 128K"
check_dev "$MNT/s512"
check_dev "$MNT/s4k"
# Once more after the other device pushed everything out of the cache.
cmp "$ref" "$MNT/s512" || fail "s512 differs after eviction"
stop_blkfs "$MNT"
