#!/usr/bin/env bash
# aio_durability.sh: what fsync and `blkfs umount` promise on the aio
# backend (issue 4), on an image file (in a directory whose filesystem takes
# O_DIRECT; skipped with a message if none does) and on a loop device with
# 4096-byte sectors.
#
# The cache is large and lazy (128M, dirty_background 90%, dirty_expire 60s),
# so nothing is written back on its own during the test: the fsync (or the
# umount) is what moves the data.
#  1. Crash: 32 MiB of random data at 32 scattered offsets (bs 512 to 1M,
#     some offsets unaligned), fsync (must say OK), then 8 MiB more without
#     fsync, then `kill -9` the daemon and clean up the dead mount. Mount
#     the same backing store again at the same mount point: every byte
#     written before the fsync is there, and nothing outside the written
#     ranges changed (the unsynced ranges may hold old or new data).
#  2. Clean unmount: another 32 MiB at scattered offsets, no fsync,
#     `blkfs umount` exits 0: the backing store itself equals the
#     reference, and so does the device after mounting again.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require dd cmp stat truncate losetup blockdev

M=$((1 << 20))
SIZE=$((256 * M))
SLOT=$((8 * M))		# piece i lives in [i * SLOT, (i + 1) * SLOT)
src=$TDIR/src
mkdata "$src" $((32 * M))
src2=$TDIR/src2
mkdata "$src2" $((32 * M))
ref=$TDIR/ref

# put DEV SRC SRCOFF OFF LEN BS: write SRC[SRCOFF, +LEN) at OFF into the
# device and the reference.
put() {
	local dev=$1 s=$2 soff=$3 off=$4 len=$5 bs=$6
	ddev if="$s" of="$dev" bs="$bs" iflag=skip_bytes,count_bytes oflag=seek_bytes \
		skip="$soff" seek="$off" count="$len" conv=notrunc
	dd if="$s" of="$ref" bs="$bs" iflag=skip_bytes,count_bytes oflag=seek_bytes \
		skip="$soff" seek="$off" count="$len" conv=notrunc status=none
}

# piece_off I: where piece I of the first round starts (inside its slot's
# first 4 MiB; every 4th one not even sector-aligned).
piece_off() {
	local i=$1 o
	o=$(((i * 777 * 4096) % (3 * M)))
	[ $((i % 4)) -ne 3 ] || o=$((o + i * 37 + 1))
	echo $((i * SLOT + o))
}

# piece_bs I: the dd block size for piece I.
piece_bs() {
	local b=(512 4K 64K 1M 7000 1M 128K 16M)
	echo "${b[$(($1 % 8))]}"
}

# unsynced_off I: the second round's 256K in slot I, after the first 5 MiB.
unsynced_off() {
	echo $(($1 * SLOT + 5 * M + ($1 % 3) * 4096 + 100))
}

# on_backing BACKING: how many first-round pieces the backing store holds.
on_backing() {
	local i n=0
	for ((i = 0; i < 32; i++)); do
		cmp -s -n "$M" "$1" "$src" "$(piece_off "$i")" $((i * M)) && n=$((n + 1))
	done
	echo "$n"
}

# devread DEV: the whole device, read in 1 MiB requests (cmp reading the
# device file itself would send the daemon one small request per buffer:
# 4 KiB ones, tens of thousands for 256 MiB).
devread() {
	dd if="$1" bs=1M status=none
}

# run_target NAME BACKING CONF_LINES
run_target() {
	local name=$1 back=$2 lines=$3 dev i off mnt0 n

	info "=== $name"
	rm -f "$ref"
	truncate -s "$SIZE" "$ref"
	start_blkfs "[cache]
size = 128M
dirty_background = 90%
dirty_limit = 95%
dirty_expire = 60s

[device d]
backend = aio
$lines"
	dev=$MNT/d
	mnt0=$MNT
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"

	info "$name: 32 MiB at 32 offsets, then fsync"
	for ((i = 0; i < 32; i++)); do
		put "$dev" "$src" $((i * M)) "$(piece_off "$i")" "$M" "$(piece_bs "$i")"
	done
	n=$(on_backing "$back")
	info "$name: before fsync, $n of 32 pieces are on the backing store already"
	chk OK "$dev" fsync
	n=$(on_backing "$back")
	assert_eq "$name: pieces on the backing store right after fsync" 32 "$n"

	info "$name: 8 MiB more without fsync, then kill -9"
	for ((i = 0; i < 32; i++)); do
		put "$dev" "$src2" $((i * 256 * 1024)) "$(unsynced_off "$i")" $((256 * 1024)) 64K
	done
	kill9_blkfs "$mnt0"

	info "$name: mount again: everything written before the fsync is there"
	remount_blkfs "$mnt0"
	for ((i = 0; i < 32; i++)); do
		off=$(piece_off "$i")
		cmp -n "$M" <(dd if="$dev" iflag=skip_bytes,count_bytes skip="$off" count="$M" \
			bs=1M status=none) "$src" 0 $((i * M)) ||
			fail "$name: piece $i (1 MiB at $off), fsynced before kill -9, differs"
	done
	# The unsynced ranges hold whatever survived; the rest equals the reference.
	for ((i = 0; i < 32; i++)); do
		off=$(unsynced_off "$i")
		dd if="$dev" of="$ref" iflag=skip_bytes,count_bytes oflag=seek_bytes \
			skip="$off" seek="$off" count=$((256 * 1024)) bs=64K conv=notrunc status=none
	done
	cmp "$ref" <(devread "$dev") || fail "$name: after kill -9 and remount, data outside the written ranges changed"

	info "$name: 32 MiB more, no fsync, blkfs umount"
	for ((i = 0; i < 32; i++)); do
		# overlapping the first round's pieces, at other unaligned offsets
		put "$dev" "$src2" $((i * M)) $((i * SLOT + 2 * M + i * 4096 + (i % 5) * 99)) \
			"$M" "$(piece_bs $((i + 3)))"
	done
	cmp "$ref" <(devread "$dev") || fail "$name: device differs from the reference before umount"
	stop_blkfs "$mnt0"
	cmp "$back" "$ref" || fail "$name: backing store $back differs from the reference after blkfs umount"

	info "$name: mount again: the same"
	remount_blkfs "$mnt0"
	cmp "$ref" <(devread "$dev") || fail "$name: device differs from the reference after remount"
	stop_blkfs "$mnt0"
}

if odirect_dir; then
	img=$ODIRECT_DIR/aio.img
	run_target img "$img" "path = $img
size = 256M
create = yes"
else
	info "SKIP target img: neither $TDIR nor /var/tmp takes O_DIRECT"
fi

new_loop "$SIZE" --sector-size 4096
lp=$LOOP
run_target loop4096 "$LOOP_FILE" "path = $lp"
detach_loop "$lp"
