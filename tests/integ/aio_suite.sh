#!/usr/bin/env bash
# aio_suite.sh: the checks the ram suite makes, against the aio backend on
# three kinds of real storage (issue 4): an image file (create = yes, in a
# directory whose filesystem takes O_DIRECT; that target is skipped with a
# message if none does), a loop device made with `losetup --sector-size 512`
# and one made with `--sector-size 4096`. The loop devices' geometry is not
# in the config: it must come from the device (`blkfs check` output,
# st_size, st_blksize), and on the 4096 device a 512-byte O_DIRECT write
# fails with EINVAL as it does on the device itself.
#
# Per target, first mount (a 16 MiB cache, so most data really goes to and
# comes back from the backend), the checks of suite.sh (dd_basic.sh and
# nbd_suite.sh make them too):
#  - geometry in `blkfs check`, st_size, st_blksize;
#  - a plain `dd of=` (O_TRUNC) keeps the size;
#  - dd at bs 512/4K/1M/16M, odd sizes, unaligned offsets, the device's
#    last bytes, against a reference file, cmp byte for byte (whole device
#    and unaligned ranges read with several block sizes);
#  - O_DIRECT: aligned writes and reads verify, misaligned offset or length
#    is EINVAL and changes nothing, buffered and direct paths agree;
#  - mmap_check (MAP_SHARED stores reach the device on msync / munmap+fsync);
#  - fio --verify=crc32c random writes, 4 jobs, psync and libaio O_DIRECT;
#  - the device equals the reference; after `blkfs umount` (exit 0) the
#    backing image / loop device itself equals the reference.
# Second mount (same config, same mount point): the device still equals the
# reference (read cold from the backend); then losetup + mkfs.ext4 + files +
# umount + fsck.ext4 -fn + mount + verify through blkfs; after
# `blkfs umount`, fsck.ext4 -fn on the backing store itself and the files
# verify there too (mounted read-only, without blkfs).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=suite.sh
. "$(dirname "$0")/suite.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check mmap_check
require dd cmp stat truncate fio losetup blockdev mkfs.ext4 fsck.ext4 sha256sum mount umount

M=$((1 << 20))
# 192 MiB: suite.sh's checks use the first 160 MiB and the last 2 MiB; more
# only lengthens the whole-device reads (cmp), mkfs.ext4 and fsck.
SIZE=$((192 * M))
src=$TDIR/src
mkdata "$src" $((40 * M))
ref=$TDIR/ref

# back_cmp NAME BACKING LOOPDEV: the backing store equals the reference (the
# backing file; and the loop device itself, read with O_DIRECT).
back_cmp() {
	cmp "$2" "$ref" || fail "$1: backing store $2 differs from the reference after blkfs umount"
	if [ -n "$3" ]; then
		dd if="$3" iflag=direct bs=1M status=none | cmp - "$ref" ||
			fail "$1: $3 read with O_DIRECT differs from the reference after blkfs umount"
	fi
}

# run_target NAME LBS BACKING LOOPDEV CONF_LINES
run_target() {
	local name=$1 lbs=$2 back=$3 loopdev=$4 lines=$5 dev pbs l

	info "=== $name: logical block size $lbs"
	suite_ref_new
	write_conf "[cache]
size = 16M

[device d]
backend = aio
$lines"

	# Geometry as blkfs sees it, before mounting.
	pbs=$lbs
	[ -z "$loopdev" ] || pbs=$(blockdev --getpbsz "$loopdev")
	suite_geometry "$name" "d: aio, $SIZE bytes, logical $lbs, physical $pbs,"

	start_blkfs "$CONF"
	dev=$MNT/d
	suite_data "$name" "$dev" "$lbs"
	stop_blkfs "$MNT"
	info "$name: the backing store equals the reference"
	back_cmp "$name" "$back" "$loopdev"

	info "$name: mount again: still the reference, read cold"
	remount_blkfs "$MNT"
	devcmp "$dev" || fail "$name: device differs from the reference after remount"
	suite_ext4 "$name" "$dev" "$lbs"
	stop_blkfs "$MNT"

	info "$name: ext4 on the backing store itself, without blkfs"
	if [ -n "$loopdev" ]; then
		l=$loopdev
	else
		attach_loop "$back" -r
		l=$LOOP
	fi
	suite_ext4_check "$name" "$l" "the backing store $l"
	[ -n "$loopdev" ] || detach_loop "$l"
}

# 1. An image file, created by blkfs.
if odirect_dir; then
	img=$ODIRECT_DIR/aio.img
	run_target img 512 "$img" "" "path = $img
size = $((SIZE >> 20))M
create = yes"
	assert_eq "image file size" "$SIZE" "$(stat -c %s "$img")"
else
	info "SKIP target img: neither $TDIR nor /var/tmp takes O_DIRECT"
fi

# 2. and 3. Loop devices; geometry from the device only.
for ss in 512 4096; do
	new_loop "$SIZE" --sector-size "$ss"
	lp=$LOOP
	run_target "loop$ss" "$ss" "$LOOP_FILE" "$lp" "path = $lp"
	detach_loop "$lp"
done
