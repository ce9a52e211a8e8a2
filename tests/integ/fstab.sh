#!/usr/bin/env bash
# fstab.sh: blkfs from an fstab line, through mount(8) and mount.fuse3, as
# a user's /etc/fstab would have it:
#   CONFIG MNT fuse.blkfs defaults,nofail,x-blkfs-test 0 0
# mount(8) runs mount.fuse3, which runs `blkfs CONFIG MNT -o OPTS` through
# /bin/sh. mount(8) drops PATH from the helper's environment, so /bin/sh
# finds blkfs in its default path (/usr/local/sbin first): the test runs in
# a private mount namespace where a directory holding only `blkfs` (this
# build) is bind-mounted over /usr/local/sbin, so blkfs is found exactly as
# mount.fuse3 finds an installed one, and nothing outside the test changes.
#  1. `mount -T FSTAB MNT`: the device file is there, its source is the
#     config's absolute path (findmnt), `mount -a -T FSTAB` sees it mounted
#     and does not mount again; data written through an aio image behind a
#     slow delay.write (most of it still dirty); plain `umount MNT` returns
#     while the daemon is still writing back; once the daemon has exited,
#     every byte is in the image and the status file says so.
#  2. The same, with SIGTERM sent twice (and SIGINT once) while the daemon
#     writes back after the umount: it carries on, exits 0, every byte is
#     in the image, and its log says it carried on.
set -euo pipefail
if [ "${BLKFS_FSTAB_NS:-}" != 1 ]; then
	# (before lib.sh: the namespace must hold the whole test, its traps too)
	command -v unshare >/dev/null 2>&1 || { echo "SKIP: unshare not found" >&2; exit 77; }
	[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root" >&2; exit 77; }
	BLKFS_FSTAB_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require mount umount findmnt cmp dd
[ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ] || skip "mount.fuse3 not installed (package fuse3)"
odirect_dir || skip "no filesystem here takes O_DIRECT (needed for the aio image)"

M=$((1 << 20))
SIZE=$((24 * M))

# blkfs where /bin/sh looks for it when PATH is unset: /usr/local/sbin,
# in this namespace only.
bindir=$TDIR/sbin
mkdir -p "$bindir"
ln -s "$BLKFS" "$bindir/blkfs"
mount --bind "$bindir" /usr/local/sbin || fail "cannot bind $bindir over /usr/local/sbin"
_TOPMNTS+=(/usr/local/sbin)
[ "$(env -u PATH /bin/sh -c 'command -v blkfs')" = /usr/local/sbin/blkfs ] ||
	fail "/bin/sh without PATH does not find /usr/local/sbin/blkfs"

data=$TDIR/data
mkdata "$data" "$SIZE"

# run_case NAME SIGNALS: mount from the fstab file, write, plain umount,
# send SIGNALS ("TERM TERM INT" or "") while the daemon writes back.
run_case() {
	local name=$1 sigs=$2 img conf fstab pid src out i s alive_after
	img=$ODIRECT_DIR/$name.img
	conf=$TDIR/$name.conf
	fstab=$TDIR/$name.fstab
	new_mountpoint
	_MNTS+=("$MNT")
	# Writes stay dirty (no background writeback, no expiry) until the
	# final writeback, which the delay makes last a few seconds.
	cat >"$conf" <<EOF
[cache]
size = 32M
dirty_background = 90%
dirty_limit = 95%
dirty_expire = 3600s

[device d0]
backend = aio
path = $img
size = 64M
create = yes
max_io = 64K
filters = delay
delay.write = 3s
EOF
	chmod 600 "$conf"
	printf '%s %s fuse.blkfs defaults,nofail,x-blkfs-test 0 0\n' "$conf" "$MNT" >"$fstab"

	info "$name: mount -T $fstab $MNT"
	out=$(mount -T "$fstab" "$MNT" 2>&1) || fail "$name: mount -T failed: $out"
	assert_live "$MNT"
	[ -s "$PIDFILE" ] || fail "$name: no pid file $PIDFILE"
	pid=$(cat "$PIDFILE")
	_PID_OF[$MNT]=$pid
	pid_alive "$pid" || fail "$name: daemon $pid not running"
	assert_eq "$name: device files" d0 "$(ls "$MNT")"
	assert_eq "$name: size of d0" $((64 * M)) "$(stat -c %s "$MNT/d0")"
	src=$(findmnt -n -o SOURCE --mountpoint "$MNT")
	assert_eq "$name: the mount's source" "$conf" "$src"
	assert_eq "$name: type" fuse.blkfs "$(findmnt -n -o FSTYPE --mountpoint "$MNT")"
	out=$(mount -a -T "$fstab" 2>&1) || fail "$name: mount -a -T failed: $out"
	assert_eq "$name: mounts at $MNT after mount -a" 1 "$(mounts_at "$MNT" | wc -l)"

	ddev if="$data" of="$MNT/d0" bs=1M conv=notrunc
	cmp -n "$SIZE" "$data" "$MNT/d0" || fail "$name: data differs through the mount"
	umount "$MNT" || fail "$name: umount $MNT failed"
	! is_mounted "$MNT" || fail "$name: still mounted after umount"
	pid_alive "$pid" && alive_after=1 || alive_after=0
	if [ -n "$sigs" ]; then
		pid_alive "$pid" || fail "$name: the daemon had finished before the signals (writeback too fast for this test)"
	fi
	for s in $sigs; do
		kill -"$s" "$pid" 2>/dev/null || true
		sleep 0.3
		pid_alive "$pid" || grep -q '^ok d0' "$STATUS" 2>/dev/null ||
			fail "$name: SIG$s during the final writeback killed the daemon"
	done
	wait_gone 120 "$pid" || fail "$name: daemon $pid still running 120 s after umount"
	unset "_PID_OF[$MNT]"
	[ "$alive_after" = 1 ] ||
		info "$name: (the daemon had already finished when umount returned)"
	grep -q '^ok d0' "$STATUS" || fail "$name: status file: $(cat "$STATUS" 2>/dev/null)"
	if grep -qE 'lost|error' "$STATUS"; then fail "$name: status: $(cat "$STATUS")"; fi
	cmp -n "$SIZE" "$data" "$img" || fail "$name: the image lacks data after umount"
	if [ -n "$sigs" ]; then
		grep -q 'during the final writeback' "$LOG" ||
			fail "$name: the log does not say the signals came during the final writeback"
		grep 'during the final writeback' "$LOG" | while read -r l; do info "$name: log: $l"; done
	fi
	info "$name: every byte reached the image; umount returned with the daemon $([ "$alive_after" = 1 ] && echo still writing back || echo done)"
}

run_case plain ""
run_case signals "TERM TERM INT"
umount /usr/local/sbin || fail "cannot unmount the bind over /usr/local/sbin"
