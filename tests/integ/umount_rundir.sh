#!/usr/bin/env bash
# umount_rundir.sh: `blkfs umount` finds the mount's daemon without its pid
# file (through the mount's FUSE connection), so a BLKFS_RUNDIR other than
# the mount's at umount neither returns early nor reports a loss.
#  (a) Mounted with this test's BLKFS_RUNDIR, 4 MiB dirty on an aio image
#      behind a delay filter, unmounted with BLKFS_RUNDIR set to an empty
#      directory: exit 0, "all data written back", the daemon is gone when
#      umount returns (it did not return before the writeback), the image
#      holds the data byte for byte.
#  (b) The same with BLKFS_RUNDIR unset (the default /run/blkfs).
#  (c) A daemon that is really gone (kill -9): umount still reports that
#      what it had not written back is lost, exit 1, with either run
#      directory.
# Before: (a) and (b) unmounted at once and exited 1 with "the daemon was
# not running, so what it had not written back is lost".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk timeout

M=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((4 * M))
other=$TDIR/other-run
mkdir "$other"

conf() {
	printf '%s\n' "[cache]
size = 64M
dirty_expire = 1h

[device d0]
backend = aio
path = $1
create = yes
size = 16M
max_io = 256K
filters = delay
delay.write = 100ms"
}

stat_of() {	# stat_of DEV NAME
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/$1/blkfs_stat"
}

# umount_with WHAT ENV...: blkfs umount $MNT under `env ENV...`, with a
# watchdog; sets OUT and RC.
umount_with() {
	local what=$1
	shift
	OUT=$(env "$@" timeout -s KILL 120 "$BLKFS" umount "$MNT" 2>&1) && RC=0 || RC=$?
	printf '%s\n' "$OUT" | sed 's/^/    /'
	info "$what: blkfs umount exited $RC"
	[ "$RC" != 137 ] || fail "$what: blkfs umount still ran after 120 s (killed)"
}

# written_back WHAT ENV...: dirty data, then umount with ENV: exit 0, the
# daemon gone by then, the data in the image.
written_back() {
	local what=$1 img=$TDIR/$2.img pid
	shift 2
	start_blkfs "$(conf "$img")"
	ddev if="$src" of="$MNT/d0" bs=1M count=4 conv=notrunc
	assert_eq "$what: d0 dirty" $((4 * M)) "$(stat_of d0 dirty_bytes)"
	pid=$DAEMON_PID
	umount_with "$what" "$@"
	! pid_alive "$pid" || fail "$what: blkfs umount returned while daemon $pid still runs (before its writeback)"
	assert_eq "$what: blkfs umount exit status" 0 "$RC"
	case $OUT in *"unmounted; all data written back (1 device)"*) ;;
	*) fail "$what: blkfs umount does not say all data was written back" ;; esac
	! is_mounted "$MNT" || fail "$what: $MNT is still mounted"
	unset "_PID_OF[$MNT]"
	cmp -n $((4 * M)) "$src" "$img" || fail "$what: the image does not hold the data"
	[ ! -e "$STATUS" ] || fail "$what: the status file $STATUS was left behind"
}

written_back "(a) another BLKFS_RUNDIR" a BLKFS_RUNDIR="$other"
written_back "(b) BLKFS_RUNDIR unset" b -u BLKFS_RUNDIR
[ -z "$(ls -A "$other")" ] || fail "files left in $other: $(ls -A "$other")"

# ---------------------------------------------------------------------------
for how in mine other; do
	info "(c) kill -9 of the daemon, then blkfs umount (run directory: $how)"
	start_blkfs "$(conf "$TDIR/c-$how.img")"
	ddev if="$src" of="$MNT/d0" bs=1M count=4 conv=notrunc
	pid=$DAEMON_PID
	kill -KILL "$pid"
	wait_gone 30 "$pid" || fail "(c) daemon $pid still there 30 s after SIGKILL"
	unset "_PID_OF[$MNT]"
	if [ "$how" = mine ]; then
		umount_with "(c) $how" BLKFS_RUNDIR="$BLKFS_RUNDIR"
	else
		umount_with "(c) $how" BLKFS_RUNDIR="$other"
	fi
	assert_eq "(c) blkfs umount exit status" 1 "$RC"
	case $OUT in *"unmounted; the daemon was not running, so what it had not written back is lost"*) ;;
	*) fail "(c) blkfs umount does not report the data of a dead daemon lost" ;; esac
	! is_mounted "$MNT" || fail "(c) $MNT is still mounted"
	rm -f "$PIDFILE"	# SIGKILL left it
done
info "done"
