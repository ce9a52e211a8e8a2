#!/usr/bin/env bash
# hang_remove.sh: a control command whose writeback hangs never holds up
# `blkfs umount` past [mount] shutdown_timeout without progress.
# Device h0 hangs writes (fault.hang, never released); p0 beside it is aio
# on an image file with dirty data only the final writeback saves.
#  (a) `blkfs remove h0` hangs in its writeback (the client holds
#      .sys/control open, so umount2 alone is EBUSY); `blkfs umount`
#      returns within a bound, not before shutdown_timeout (3 s), exit
#      status 1, naming h0's bytes as lost to an abandoned hung I/O; the
#      remove client gets an error saying the mount went away with h0's data
#      not written back; p0's image holds its data byte for byte; the
#      daemon, the mount and the client are gone.
#  (b) A remove whose writeback is slow but moves (8 MiB through a 4 MiB/s
#      throttle, shutdown_timeout = 1s) is waited for: the remove succeeds,
#      blkfs umount exits 0, the image holds the data.
# Before the bound, the daemon waited for a running command without limit
# (ctl_jobs_wait), and blkfs umount refused a mount held only by a command
# (EBUSY, exit 1 at once, the remove still hung).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk date timeout

M=$((1 << 20))
TIMEOUT_MS=3000
BOUND_MS=90000		# shutdown_timeout plus all a machine at load 10 may need
src=$TDIR/src
mkdata "$src" $((8 * M))

now_ms() { echo $(($(date +%s%N) / 1000000)); }

stat_of() {	# stat_of DEV NAME
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/$1/blkfs_stat"
}

# wait_file FILE SECONDS WHAT: FILE appears within SECONDS.
wait_file() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	fail "$3: $1 did not appear within $2 s"
}

# umount_timed: blkfs umount $MNT under a watchdog; sets OUT, RC, TOOK.
umount_timed() {
	local t0
	t0=$(now_ms)
	OUT=$(timeout -s KILL $((BOUND_MS / 1000 + 30)) "$BLKFS" umount "$MNT" 2>&1) && RC=0 || RC=$?
	TOOK=$(($(now_ms) - t0))
	printf '%s\n' "$OUT" | sed 's/^/    /'
	info "blkfs umount returned $RC after $TOOK ms"
	[ "$RC" != 137 ] || fail "blkfs umount still ran after $((BOUND_MS / 1000 + 30)) s (killed)"
}

# ---------------------------------------------------------------------------
info "(a) blkfs remove h0 hangs in its writeback; blkfs umount gives up on it"
img=$TDIR/p0.img
start_blkfs "[cache]
size = 64M
dirty_expire = 1h

[mount]
shutdown_timeout = 3s

[device h0]
backend = ram
size = 16M
filters = fault
fault.ops = write
fault.hang = yes

[device p0]
backend = aio
path = $img
create = yes
size = 16M"
ddev if="$src" of="$MNT/h0" bs=1M count=1 conv=notrunc
ddev if="$src" of="$MNT/p0" bs=1M count=4 conv=notrunc
lost=$(stat_of h0 dirty_bytes)
[ "$lost" -gt 0 ] || fail "(a) h0 has nothing dirty"
[ "$(stat_of p0 dirty_bytes)" -gt 0 ] ||
	fail "(a) p0 has nothing dirty for the final writeback"
# the next write to reach h0's backend (the remove's writeback) hangs
printf '0\n' >"$MNT/.sys/h0/fault/after"
bg rm "$BLKFS" remove "$MNT" h0
rm_pid=$BGPID
for ((i = 0; i < 600; i++)); do
	[ "$(cat "$MNT/.sys/h0/fault/hung")" = 1 ] && break
	sleep 0.1
done
assert_eq "(a) h0's hung writes" 1 "$(cat "$MNT/.sys/h0/fault/hung")"
[ ! -e "$TDIR/rm.rc" ] || fail "(a) the remove returned while its writeback hung: $(cat "$TDIR/rm.err")"
pid=$DAEMON_PID
umount_timed
[ "$TOOK" -lt "$BOUND_MS" ] || fail "(a) blkfs umount took $TOOK ms"
[ "$TOOK" -ge $((TIMEOUT_MS - 200)) ] ||
	fail "(a) blkfs umount returned after $TOOK ms, before shutdown_timeout: nothing was waited for"
assert_eq "(a) blkfs umount exit status" 1 "$RC"
case $OUT in
*"$lost bytes of h0 could not be written to its backend: a hung I/O was abandoned after 3s"*) ;;
*) fail "(a) blkfs umount does not report $lost bytes of h0 lost to an abandoned hung I/O" ;;
esac
case $OUT in *"data was lost"*) ;; *) fail "(a) blkfs umount does not say that data was lost" ;; esac
! pid_alive "$pid" || fail "(a) the daemon still runs after blkfs umount returned"
! is_mounted "$MNT" || fail "(a) $MNT is still mounted"
unset "_PID_OF[$MNT]"
cmp -n $((4 * M)) "$src" "$img" || fail "(a) p0's image does not hold the data written to it"
grep -q "control: remove h0: given up at unmount" "$LOG" ||
	fail "(a) the daemon log does not say the remove was given up on"
# the client was answered: an error, that says what happened
wait_file "$TDIR/rm.rc" 60 "(a) the remove client"
wait_gone 10 "$rm_pid" || fail "(a) the remove client still runs"
info "(a) remove: exit $(cat "$TDIR/rm.rc"): $(cat "$TDIR/rm.err")"
[ "$(cat "$TDIR/rm.rc")" != 0 ] || fail "(a) the hung remove succeeded"
grep -q "the mount $MNT went away before the command finished" "$TDIR/rm.err" ||
	fail "(a) the remove's error does not say the mount went away: $(cat "$TDIR/rm.err")"
grep -q "what h0 had not written back is lost" "$TDIR/rm.err" ||
	fail "(a) the remove's error does not say h0's data was not written back: $(cat "$TDIR/rm.err")"
[ -z "$(pids_matching "$TDIR/mnt")" ] || fail "(a) processes left: $(pids_matching "$TDIR/mnt")"

# ---------------------------------------------------------------------------
info "(b) a slow remove that makes progress is waited for (shutdown_timeout = 1s)"
img=$TDIR/s0.img
start_blkfs "[cache]
size = 64M
dirty_expire = 1h
dirty_background = 50%
dirty_limit = 90%

[mount]
shutdown_timeout = 1s

[device s0]
backend = aio
path = $img
create = yes
size = 16M
filters = throttle
throttle.write_mbps = 4

[device r0]
backend = ram
size = 16M"
ddev if="$src" of="$MNT/s0" bs=1M count=8 conv=notrunc
assert_eq "(b) s0 dirty" $((8 * M)) "$(stat_of s0 dirty_bytes)"
bg rms "$BLKFS" remove "$MNT" s0
# the remove's writeback has begun (bytes reached s0's backend), or it ended
for ((i = 0; i < 600; i++)); do
	[ -e "$TDIR/rms.rc" ] && break
	[ "$(stat_of s0 backend_write_bytes)" -gt 0 ] && break
	sleep 0.1
done
pid=$DAEMON_PID
umount_timed
[ -e "$TDIR/rms.rc" ] || wait_file "$TDIR/rms.rc" 60 "(b) the remove client"
info "(b) remove: exit $(cat "$TDIR/rms.rc"): $(cat "$TDIR/rms.out" "$TDIR/rms.err")"
assert_eq "(b) the slow remove's exit status" 0 "$(cat "$TDIR/rms.rc")"
assert_eq "(b) blkfs umount exit status" 0 "$RC"
case $OUT in
*"still running"*) info "(b) blkfs umount waited for the running remove" ;;
*) info "(b) the remove ended before blkfs umount looked: the wait was not needed this time" ;;
esac
! pid_alive "$pid" || fail "(b) the daemon still runs after blkfs umount returned"
! is_mounted "$MNT" || fail "(b) $MNT is still mounted"
unset "_PID_OF[$MNT]"
cmp -n $((8 * M)) "$src" "$img" || fail "(b) s0's image does not hold the data"
info "done"
