#!/usr/bin/env bash
# ram_image.sh: `image = FILE` starts a ram device from an image file.
#  - A sparse image with data at a few places (and a size that is no
#    multiple of 512) is the device byte for byte (cmp), without a size
#    (the device takes the image's, rounded up to the logical block) and
#    inside a larger device (the rest reads as zeros); the path is relative
#    to the config's directory; the arena holds the image's data, not its
#    size, and no page of zeros.
#  - A golden ext4 image (mkfs.ext4 -d on a plain file) is a clean
#    filesystem on the device (e2fsck -fn on the device file) with its files
#    (debugfs cat); writes to the device never reach the image.
#  - Refused by `blkfs check` and `blkfs mount`, as FILE:LINE: image: ...:
#    an image larger than size, a missing one, one that users other than
#    root can write (this test runs as root).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp stat truncate sha256sum mkfs.ext4 e2fsck debugfs

M=$((1 << 20))

# stat_of DEV NAME: a counter of .sys/DEV/blkfs_stat.
stat_of() {
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "none" }' "$MNT/.sys/$1/blkfs_stat"
}

# A sparse image: 3 MiB of data at 1M, 64 KiB at 10M + 4K, a page of zeros
# written out at 12M, and 1000 bytes at the end of a 16M + 1000 byte file.
img=$TDIR/golden.img
isize=$((16 * M + 1000))
truncate -s "$isize" "$img"
mkdata "$TDIR/d1" $((3 * M))
mkdata "$TDIR/d2" $((64 * 1024))
mkdata "$TDIR/d3" 1000
dd if="$TDIR/d1" of="$img" bs=1M seek=1 conv=notrunc status=none
dd if="$TDIR/d2" of="$img" bs=4K seek=$(((10 * M + 4096) / 4096)) conv=notrunc status=none
dd if=/dev/zero of="$img" bs=4K seek=$((12 * M / 4096)) count=1 conv=notrunc status=none
dd if="$TDIR/d3" of="$img" bs=1000 oflag=seek_bytes seek=$((16 * M)) conv=notrunc status=none
assert_eq "image size" "$isize" "$(stat -c %s "$img")"
sum=$(sha256sum <"$img")

info "image = golden.img, no size: the device is the image"
start_blkfs "[device ram0]
backend = ram
image = golden.img

[device big]
backend = ram
size = 32M
logical_block_size = 4096
image = $img"
# 16M + 1000 rounded up to 512: 24 bytes of zeros after the image.
assert_eq "ram0 size" $((16 * M + 1024)) "$(stat -c %s "$MNT/ram0")"
# (read in 1 MiB pieces: cmp alone reads st_blksize at a time, a FUSE request each)
cmp_range "$img" 0 "$MNT/ram0" 0 "$isize"
assert_zero "$MNT/ram0" "$isize" 24
# Memory: the data (3 MiB, 64 KiB, the last page), no page of zeros, not 16M.
arena=$(stat_of ram0 arena_bytes)
assert_eq "ram0 arena_bytes" $((3 * M + 64 * 1024 + 4096)) "$arena"

info "the same image in a 32M device with 4K blocks: the rest reads as zeros"
assert_eq "big size" $((32 * M)) "$(stat -c %s "$MNT/big")"
cmp_range "$img" 0 "$MNT/big" 0 "$isize"
assert_zero "$MNT/big" "$isize" $((32 * M - isize))

# Writes go to the device, never to the image.
ddev if=/dev/urandom of="$MNT/ram0" bs=1M count=2 seek=5 conv=notrunc,fsync
stop_blkfs
assert_eq "image after writes to the device" "$sum" "$(sha256sum <"$img")"

info "a golden ext4 image"
mkdir "$TDIR/root"
mkdata "$TDIR/root/hello" 123457
echo "a small file" >"$TDIR/root/small"
fsimg=$TDIR/ext4.img
truncate -s 32M "$fsimg"
mkfs.ext4 -q -F -b 4096 -d "$TDIR/root" "$fsimg"
fssum=$(sha256sum <"$fsimg")
start_blkfs "[device fs]
backend = ram
size = 32M
logical_block_size = 4096
image = ext4.img"
cmp_range "$fsimg" 0 "$MNT/fs" 0 $((32 * M))
e2fsck -fn "$MNT/fs" >"$TDIR/fsck.out" 2>&1 || { cat "$TDIR/fsck.out"; fail "e2fsck of the device"; }
debugfs -R "cat /hello" "$MNT/fs" 2>/dev/null >"$TDIR/hello.out"
cmp "$TDIR/root/hello" "$TDIR/hello.out" || fail "/hello read through debugfs differs"
ddev if=/dev/urandom of="$MNT/fs" bs=4K count=16 seek=2000 conv=notrunc,fsync
stop_blkfs
assert_eq "ext4.img after writes to the device" "$fssum" "$(sha256sum <"$fsimg")"

info "refused: bigger than size, missing, writable by others"
# check_refused CONF_TEXT WANT: blkfs check and blkfs mount exit 1 with WANT.
check_refused() {
	local out rc
	write_conf "$1"
	out=$("$BLKFS" check -c "$CONF" 2>&1) && rc=0 || rc=$?
	[ "$rc" -eq 1 ] || fail "blkfs check exited $rc, want 1: $out"
	grep -qF -- "$CONF:$2" <<<"$out" || fail "blkfs check: want '$CONF:$2' in: $out"
	info "  $(grep -F -- "$CONF:" <<<"$out" | head -n 1)"
	new_mountpoint
	out=$("$BLKFS" mount "$MNT" -c "$CONF" 2>&1) && rc=0 || rc=$?
	! is_mounted "$MNT" || fail "mounted with $CONF"
	[ "$rc" -eq 1 ] || fail "blkfs mount exited $rc, want 1: $out"
	grep -qF -- "$CONF:$2" <<<"$out" || fail "blkfs mount: want '$CONF:$2' in: $out"
}
check_refused "[device r]
backend = ram
size = 8M
image = golden.img" "4: image: $TDIR/golden.img holds $isize bytes, more than the device's size $((8 * M))"
check_refused "[device r]
backend = ram
image = nothere.img" "3: image: cannot open $TDIR/nothere.img: No such file or directory"
chmod 0666 "$img"
check_refused "[device r]
backend = ram
image = golden.img" "3: image: $TDIR/golden.img is writable by users other than root (mode 0666, owner uid 0)"
chmod 0644 "$img"
