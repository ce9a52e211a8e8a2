#!/usr/bin/env bash
# integ-timeout: 600
# integ-needs: ceph
# rbd_suite.sh: the checks the ram, aio and nbd suites make (suite.sh),
# against the rbd backend on a 256 MiB image of its own in the runner's
# shared Ceph cluster (or, run alone, one it starts: tests/ceph/rbd.bash):
#  - geometry from the image in `blkfs check`: 512/4096, max_io the 4 MiB
#    object size;
#  - suite_data through a 16 MiB cache (dd at many sizes and offsets, O_DIRECT,
#    mmap, fio --verify=crc32c), then after `blkfs umount` the image itself
#    (`rbd export`) equals the reference;
#  - discard (fallocate --punch-hole) and write-zeroes (fallocate -z) read
#    back zeros, through blkfs and in the exported image;
#  - mount again: still the reference, read cold; ext4 on `blkfs attach`,
#    fsck clean; the exported image fscks clean and holds the files.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=suite.sh
. "$(dirname "$0")/suite.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
require_helper bdev_check mmap_check
rbd_require
require dd cmp stat fio losetup blockdev mkfs.ext4 fsck.ext4 fallocate mount umount

M=$((1 << 20))
SIZE=$((256 * M))
src=$TDIR/src
mkdata "$src" $((40 * M))
ref=$TDIR/ref

rbd_cluster_start
img=$(rbd_name suite)
rbd_create "$img" 256M
suite_ref_new
write_conf "$(RBD_CACHE_SIZE=16M rbd_conf "$img")"

suite_geometry rbd "d: rbd, $SIZE bytes, logical 512, physical 4096, max_io $((4 * M)),"
start_blkfs "$CONF"
dev=$MNT/d
suite_data rbd "$dev" 512

info "discard and write-zeroes read back zeros"
both "$dev" if="$src" bs=1M count=8 seek=200 conv=fsync
fallocate --punch-hole --keep-size -o $((200 * M + 4096)) -l $((3 * M + 512)) "$dev"
fallocate --zero-range --keep-size -o $((205 * M + 512)) -l $((M + 1024)) "$dev"
dd if=/dev/zero of="$ref" bs=512 seek=$(((200 * M + 4096) / 512)) count=$(((3 * M + 512) / 512)) conv=notrunc status=none
dd if=/dev/zero of="$ref" bs=512 seek=$(((205 * M + 512) / 512)) count=$(((M + 1024) / 512)) conv=notrunc status=none
sync "$dev"
cmp "$ref" "$dev" || fail "rbd: device differs from the reference after discard / write-zeroes"
stat=$MNT/.sys/d/blkfs_stat
assert_eq "rbd_errors" 0 "$(awk '$1 == "rbd_errors" { print $2 }' "$stat")"
[ "$(awk '$1 == "rbd_zeroes" { print $2 }' "$stat")" -gt 0 ] || fail "no DISCARD / WRITE_ZEROES reached rbd: $(cat "$stat")"
stop_blkfs "$MNT"
info "the image (rbd export) equals the reference"
rbd_export "$img" "$TDIR/export.img"
cmp "$TDIR/export.img" "$ref" || fail "rbd: the image differs from the reference after blkfs umount"
rm -f "$TDIR/export.img"

info "mount again: still the reference, read cold"
remount_blkfs "$MNT"
cmp "$ref" "$dev" || fail "rbd: device differs from the reference after remount"
suite_ext4 rbd "$dev" 512
stop_blkfs "$MNT"

info "ext4 on the exported image, without blkfs"
rbd_export "$img" "$TDIR/export.img"
attach_loop "$TDIR/export.img" -r
l=$LOOP
suite_ext4_check rbd "$l" "the image"
detach_loop "$l"
rm -f "$TDIR/export.img"
info "ok"
