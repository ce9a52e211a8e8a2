#!/usr/bin/env bash
# ext4.sh: a loop device over MNT/ram0, mkfs.ext4, mount, write files (a few
# MiB, checksummed), unmount, detach the loop device (so nothing is served
# from its cache), attach a new one, fsck.ext4 -fn must be clean, mount
# again and every file must verify. All within one blkfs mount (RAM is
# volatile); the loop device is always detached.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup blockdev mkfs.ext4 fsck.ext4 sha256sum mount umount
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

start_blkfs "[device ram0]
backend = ram
size = 256M
logical_block_size = 512
physical_block_size = 4096"
dev=$MNT/ram0
fs=$TDIR/fs

assert_live "$MNT"
attach_loop "$dev"
loop1=$LOOP
assert_eq "loop device size" $((256 << 20)) "$(blockdev --getsize64 "$loop1")"
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$loop1" ||
	fail "mkfs.ext4 on $loop1 failed"
mount_top "$loop1" "$fs"

info "writing files"
fs_fill "$fs" 200
umount "$fs" || fail "umount $fs failed"
detach_loop "$loop1"

info "fsck.ext4 -fn through a new loop device"
assert_live "$MNT"
attach_loop "$dev"
loop2=$LOOP
fsck.ext4 -fn "$loop2" || fail "fsck.ext4 -fn $loop2 found problems (exit $?)"

info "mount again and verify"
mount_top "$loop2" "$fs"
fs_verify "$fs" "after remount"
umount "$fs" || fail "umount $fs failed"
detach_loop "$loop2"
# losetup -d of a device still open (udev's blkid probing it after the
# umount, more often when other tests run beside this one) only marks it
# to go at its last close: wait for that, bounded, instead of checking at once
no_loops_here() {
	local l
	l=$(loops_under "$TDIR")
	[ -z "$l" ] || { echo "still attached: $l"; return 1; }
}
wait_until 30 "the loop device to detach" no_loops_here
stop_blkfs "$MNT"
