#!/usr/bin/env bash
# aio_enospc.sh: a real fault on the aio backend (issue 4). A sparse 128 MiB
# image file lives on a 48 MiB tmpfs; 80 MiB written through blkfs cannot
# all reach it.
#
# What is expected, step by step. The cache (256M, dirty_background 80%,
# dirty_expire 60s) holds all 80 MiB dirty, so the writes themselves succeed
# and writeback happens at the first fsync. (With a smaller cache the
# flusher would write back early and writers could get the error before any
# fsync, which is correct too, but not what this test checks.)
#  1. Two descriptors A and B are opened on the device, then 80 MiB are
#     written (buffered, no fsync): dd exits 0.
#  2. fsync(A) fails with ENOSPC. The data stays dirty, so fsync(A) again
#     writes back again and fails again with ENOSPC, and so does
#     `dd conv=fsync` on a new descriptor ("No space left on device",
#     exit 1). The daemon log names the failed writeback.
#  3. Meanwhile blkfs keeps serving: all 80 MiB read back right, unwritten
#     ranges read as zeros (also with O_DIRECT), a new buffered write
#     elsewhere succeeds and reads back.
#  4. Space is freed (the tmpfs is remounted with size=256M): fsync(A)
#     succeeds. B, which has not seen the error yet, gets it once
#     (ENOSPC), its next fsync succeeds (the kernel's errseq rule: each open
#     file sees each error once); a new descriptor's fsync succeeds.
#  5. `blkfs umount` exits 0 and the image file holds exactly the data.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check fsync_fd
require dd cmp stat truncate mount umount df
grep -qw tmpfs /proc/filesystems || skip "no tmpfs"
ff=$BLKFS_TESTBIN/fsync_fd

M=$((1 << 20))

# fsyncs WANT FD...: fsync_fd's lines, space-separated, must be WANT.
fsyncs() {
	local want=$1 got
	shift
	got=$("$ff" "$@") || fail "fsync_fd $* failed: $got"
	got=${got//$'\n'/ }
	[ "$got" = "$want" ] || fail "fsync of descriptor(s) $*: expected $want, got $got"
	info "fsync of descriptor(s) $*: $got"
}

tfs=$TDIR/tfs
mount_top tmpfs "$tfs" -t tmpfs -o size=48M
if ! dd if=/dev/zero of="$tfs/probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
	umount "$tfs"
	skip "tmpfs refuses O_DIRECT on this kernel"
fi
rm -f "$tfs/probe"
img=$tfs/img
data=$TDIR/data
mkdata "$data" $((80 * M))
extra=$TDIR/extra
mkdata "$extra" $((4 * M))
ref=$TDIR/ref
truncate -s $((128 * M)) "$ref"
dd if="$data" of="$ref" bs=1M conv=notrunc status=none
dd if="$extra" of="$ref" bs=1M seek=100 conv=notrunc status=none

start_blkfs "[cache]
size = 256M
dirty_limit = 90%
dirty_background = 80%
dirty_expire = 60s

[device d]
backend = aio
path = $img
size = 128M
create = yes"
dev=$MNT/d
assert_eq "image size" $((128 * M)) "$(stat -c %s "$img")"
[ "$(stat -c %b "$img")" -lt 2048 ] ||
	fail "the image file is not sparse: $(stat -c %b "$img") blocks allocated"

info "1. open A and B, write 80 MiB (no fsync)"
assert_live "$MNT"
exec 7<>"$dev" 8<>"$dev"
ddev if="$data" of="$dev" bs=1M conv=notrunc || fail "buffered write of 80 MiB failed"
info "tmpfs after the writes: $(df -h --output=used,avail "$tfs" | tail -n 1)"

info "2. fsync fails with ENOSPC, and again: the data stays dirty"
fsyncs ENOSPC 7
fsyncs ENOSPC 7
assert_live "$MNT"
expect_errno ENOSPC dd if=/dev/null of="$dev" conv=fsync,notrunc,nocreat status=none
grep -q "No space left on device" "$LOG" ||
	fail "the daemon log does not mention the failed writeback"
info "tmpfs: $(df -h --output=used,avail "$tfs" | tail -n 1)"

info "3. blkfs keeps serving meanwhile"
pid_alive "$DAEMON_PID" || fail "daemon $DAEMON_PID died"
cmp -n $((80 * M)) "$data" "$dev" || fail "the 80 MiB (still dirty) read back wrong"
assert_zero "$dev" $((80 * M)) $((20 * M))
chk OK -d "$dev" expect $((110 * M)) $((4 * M)) 0
ddev if="$extra" of="$dev" bs=1M seek=100 conv=notrunc ||
	fail "a buffered write while writeback fails did not succeed"
cmp -n $((4 * M)) "$extra" <(dd if="$dev" bs=1M skip=100 count=4 status=none) ||
	fail "the write while writeback fails reads back wrong"
fsyncs ENOSPC 7

info "4. free space: fsync succeeds; B sees the error once"
mount -o remount,size=256M "$tfs" || fail "mount -o remount,size=256M $tfs failed"
fsyncs OK 7
fsyncs "ENOSPC OK" 8 8
chk OK "$dev" fsync
fsyncs "OK OK" 7 8
exec 7>&- 8>&-

info "5. blkfs umount, the image file holds the data"
cmp "$ref" "$dev" || fail "the device differs from the reference"
stop_blkfs "$MNT"
assert_eq "image size" $((128 * M)) "$(stat -c %s "$img")"
cmp "$img" "$ref" || fail "the image file differs from what was written"
umount "$tfs" || fail "umount $tfs failed"
