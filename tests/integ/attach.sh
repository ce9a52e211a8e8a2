#!/usr/bin/env bash
# attach.sh: the loop path. `blkfs attach MNT DEV` on devices of three
# geometries (512/4096 with io_opt 1M; 4096/16384 with io_min 16K and
# io_opt 256K; 4096/4096):
#  - prints /dev/loopN alone on stdout; the loop device's sector size is the
#    device's logical block size, it runs buffered (no direct I/O), and
#    its backing file is the device file;
#  - says on stderr what the loop hides (physical block, io_min, io_opt)
#    and the mkfs.ext4 / mkfs.xfs options; made with those options, ext4
#    has the RAID stripe width (a) and XFS the sector size and stripe unit
#    and width (b) that the geometry asks for (dumpe2fs, xfs_info);
#  - a filesystem made and filled through it verifies after a remount;
#  - `blkfs umount` refuses while it is attached and names the loop device;
#    `blkfs detach` refuses while a filesystem on it is mounted, refuses a
#    loop device over some other file, and detaches by /dev/loopN or by
#    MNT DEV; then `blkfs umount` succeeds.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup blockdev mkfs.ext4 dumpe2fs fsck.ext4 mount umount sha256sum
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

write_conf "[cache]
size = 32M

[device a]
backend = ram
size = 256M
logical_block_size = 512
physical_block_size = 4096

[device b]
backend = ram
size = 1G
logical_block_size = 512
physical_block_size = 16K
io_min = 16K
io_opt = 256K

[device c]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096
max_io = 4096"
start_blkfs "$CONF"

# check_geometry DEV LBS PBS IO_MIN IO_OPT EXT4_OPTS XFS_OPTS
check_geometry() {
	local dev=$1 lbs=$2 pbs=$3 io_min=$4 io_opt=$5 ext=$6 xfs=$7 back
	blkfs_attach "$MNT" "$dev"
	assert_eq "$dev: loop sector size" "$lbs" "$(blockdev --getss "$LOOP")"
	back=$(losetup -n -O BACK-FILE,DIO "$LOOP" | awk '{ print $1, $2 }')
	assert_eq "$dev: backing file and direct I/O" "$MNT/$dev 0" "$back"
	grep -qF "physical block $pbs, io_min $io_min, io_opt $io_opt" <<<"$ATTACH_ERR" ||
		fail "$dev: attach does not state the hidden geometry: $ATTACH_ERR"
	assert_eq "$dev: mkfs.ext4 options" "$ext" "$(attach_mkfs_opts ext4)"
	assert_eq "$dev: mkfs.xfs options" "$xfs" "$(attach_mkfs_opts xfs)"
	info "$dev: $(grep 'mkfs' <<<"$ATTACH_ERR" | tr '\n' ';')"
}

check_geometry a 512 4096 4096 $((1 << 20)) " -E stripe_width=256" " -s size=4096 -d su=4096,sw=256"
loop_a=$LOOP
# ext4 with the printed options: the stripe width mkfs would take from the disk
# shellcheck disable=SC2046  # the options are words
mkfs.ext4 -q -F $(attach_mkfs_opts ext4) "$loop_a" || fail "a: mkfs.ext4 failed"
assert_eq "a: ext4 RAID stripe width" 256 \
	"$(dumpe2fs -h "$loop_a" 2>/dev/null | awk -F: '/^RAID stripe width/ { gsub(/ /, "", $2); print $2 }')"
fs=$TDIR/fs
mount_top "$loop_a" "$fs"
fs_fill "$fs" 50

info "blkfs umount refuses while attached, and names the loop device"
out=$("$BLKFS" umount "$MNT" 2>&1) && fail "blkfs umount succeeded with $loop_a attached and mounted"
grep -qF "loop device $loop_a is attached to $MNT/a" <<<"$out" || fail "umount does not name $loop_a: $out"
grep -qF "blkfs detach $loop_a" <<<"$out" || fail "umount does not say how to detach: $out"
is_mounted "$MNT" || fail "the refused umount unmounted anyway"

info "detach refuses while ext4 is mounted on it"
out=$("$BLKFS" detach "$loop_a" 2>&1) && fail "detach of a mounted loop device succeeded"
grep -q busy <<<"$out" || fail "detach of a mounted loop: $out"
[ "$(losetup -n -O BACK-FILE "$loop_a" | sed 's/ *$//')" = "$MNT/a" ] || fail "$loop_a was detached anyway"
umount "$fs"
fsck.ext4 -fn "$loop_a" >/dev/null 2>&1 || fail "a: fsck.ext4 found errors"
mount_top "$loop_a" "$fs"
fs_verify "$fs" "a: ext4 through blkfs attach"
umount "$fs"
"$BLKFS" detach "$loop_a" 2>/dev/null || fail "detach $loop_a failed"
[ -z "$(losetup -n -O BACK-FILE "$loop_a" 2>/dev/null)" ] || fail "$loop_a still attached after detach"

if command -v mkfs.xfs >/dev/null && command -v xfs_info >/dev/null; then
	check_geometry b 512 16384 16384 $((256 << 10)) " -E stride=4,stripe_width=64" \
		" -s size=4096 -d su=16384,sw=16"
	# shellcheck disable=SC2046
	mkfs.xfs -q -f $(attach_mkfs_opts xfs) "$LOOP" || fail "b: mkfs.xfs failed"
	mount_top "$LOOP" "$fs"
	info=$(xfs_info "$fs")
	umount "$fs"
	# the sector: the physical block, but at most the 4096-byte filesystem
	# block (the loop device alone would have given 512)
	grep -q 'sectsz=4096' <<<"$info" || fail "b: XFS sector size is not 4096: $info"
	# sunit/swidth in 4096-byte blocks: 16K = 4 blocks, 256K = 64 blocks
	grep -qE 'sunit=4 +swidth=64 blks' <<<"$info" || fail "b: XFS stripe is not 4/64 blocks: $info"
	info "b: XFS: $(grep -oE 'sectsz=[0-9]+|sunit=[0-9]+ +swidth=[0-9]+ blks' <<<"$info" | tr '\n' ' ')"
	"$BLKFS" detach "$MNT" b 2>/dev/null || fail "detach $MNT b failed"
	[ -z "$(losetup -n -O BACK-FILE "$LOOP" 2>/dev/null)" ] || fail "$LOOP still attached after detach MNT DEV"
else
	info "(no mkfs.xfs: the 4096/16384 device is checked for its geometry only)"
	check_geometry b 512 16384 16384 $((256 << 10)) " -E stride=4,stripe_width=64" \
		" -s size=4096 -d su=16384,sw=16"
	"$BLKFS" detach "$MNT" b 2>/dev/null || fail "detach $MNT b failed"
fi

info "nothing to restore on a plain 4096 device"
check_geometry c 4096 4096 4096 4096 "" ""
"$BLKFS" detach "$LOOP" 2>/dev/null || fail "detach $LOOP failed"

info "detach leaves a loop device over another file alone"
new_loop 16M
out=$("$BLKFS" detach "$LOOP" 2>&1) && fail "blkfs detach detached $LOOP over $LOOP_FILE"
grep -q 'not a blkfs device file' <<<"$out" || fail "detach of a foreign loop: $out"
detach_loop "$LOOP"
out=$("$BLKFS" detach "$MNT" a 2>&1) && fail "detach MNT DEV with nothing attached succeeded"
grep -q 'no loop device over it' <<<"$out" || fail "detach MNT DEV, nothing attached: $out"

stop_blkfs "$MNT"
