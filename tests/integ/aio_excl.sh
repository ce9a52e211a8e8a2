#!/usr/bin/env bash
# aio_excl.sh: the aio backend refuses a block device it must not take
# (issue 4).
#  - A loop device with ext4 mounted on it is in use: `blkfs mount` and
#    `blkfs check` exit 1 with a message that names the device and says it
#    is in use (the O_EXCL open fails with EBUSY), and nothing is mounted.
#    With `exclusive = no` the open goes through (`blkfs check` succeeds;
#    nothing is written to the mounted filesystem). Once the filesystem is
#    unmounted, the exclusive config mounts.
#  - A loop device with 4096-byte sectors: a config saying
#    logical_block_size = 512, or a size other than the device's, is
#    refused by `blkfs check` and `blkfs mount` with a message naming the
#    key and both values; the config that agrees with the device mounts.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup blockdev mkfs.ext4 mount umount

M=$((1 << 20))

# refused WHAT PATTERN... : `blkfs check` and `blkfs mount` with $CONF both
# exit 1, say every PATTERN (a glob), and leave nothing mounted.
refused() {
	local what=$1 out rc p
	shift
	out=$("$BLKFS" check -c "$CONF" 2>&1) && rc=0 || rc=$?
	assert_eq "$what: blkfs check exit status (output: $out)" 1 "$rc"
	for p in "$@"; do
		# shellcheck disable=SC2254 # the patterns are globs
		case $out in
		$p) ;;
		*) fail "$what: blkfs check does not say $p: $out" ;;
		esac
	done
	info "$what: blkfs check: $out"
	new_mountpoint
	_MNTS+=("$MNT")
	out=$("$BLKFS" mount "$MNT" -c "$CONF" 2>&1) && rc=0 || rc=$?
	! is_mounted "$MNT" || fail "$what: blkfs mount exited $rc but $MNT is mounted: $out"
	assert_eq "$what: blkfs mount exit status (output: $out)" 1 "$rc"
	for p in "$@"; do
		# shellcheck disable=SC2254
		case $out in
		$p) ;;
		*) fail "$what: blkfs mount does not say $p: $out" ;;
		esac
	done
	if [ -s "$PIDFILE" ] && pid_alive "$(cat "$PIDFILE")"; then
		fail "$what: a refused mount left a daemon running"
	fi
}

info "ext4 mounted on a loop device: refused"
new_loop $((64 * M)) --sector-size 512
lp=$LOOP
mkfs.ext4 -q -F "$lp" || fail "mkfs.ext4 $lp failed"
fs=$TDIR/fs
mount_top "$lp" "$fs"
write_conf "[device d]
backend = aio
path = $lp"
refused "mounted ext4" "*$lp*" "*in use*" "*exclusive = no*"

info "exclusive = no: the open goes through (blkfs check only)"
write_conf "[device d]
backend = aio
path = $lp
exclusive = no"
out=$("$BLKFS" check -c "$CONF" 2>&1) ||
	fail "blkfs check with exclusive = no on $lp (ext4 mounted) failed: $out"
case $out in
*"d: aio, $((64 * M)) bytes, logical 512,"*) ;;
*) fail "blkfs check with exclusive = no: unexpected output: $out" ;;
esac
umount "$fs" || fail "umount $fs failed"

info "unmounted: the exclusive config mounts"
write_conf "[device d]
backend = aio
path = $lp"
# The kernel lets go of the loop device a moment after umount(8) returns; on
# a loaded machine (CI runs this beside the unit suite) that moment was more
# than blkfs's own 3 s of retries. blkfs check's exclusive open says when.
wait_until 60 "umount $fs to release $lp" "$BLKFS" check -c "$CONF"
start_blkfs "$CONF"
assert_eq "st_size" $((64 * M)) "$(stat -c %s "$MNT/d")"
stop_blkfs "$MNT"
detach_loop "$lp"

info "4096-byte sectors: a config that contradicts the device is refused"
new_loop $((64 * M)) --sector-size 4096
lp=$LOOP
write_conf "[device d]
backend = aio
path = $lp
logical_block_size = 512"
refused "logical_block_size = 512 on 4096" "*logical_block_size*" "*512*" "*4096*" "*$lp*"
write_conf "[device d]
backend = aio
path = $lp
size = 32M"
refused "size = 32M on a 64M device" "*size*" "*$((32 * M))*" "*$((64 * M))*" "*$lp*"
write_conf "[device d]
backend = aio
path = $lp
logical_block_size = 4096
physical_block_size = 4096
size = 64M"
start_blkfs "$CONF"
assert_eq "st_size" $((64 * M)) "$(stat -c %s "$MNT/d")"
assert_eq "st_blksize" 4096 "$(stat -c %o "$MNT/d")"
stop_blkfs "$MNT"
detach_loop "$lp"
