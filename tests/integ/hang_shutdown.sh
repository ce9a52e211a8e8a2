#!/usr/bin/env bash
# hang_shutdown.sh: a hung I/O never wedges blkfs ([mount] shutdown_timeout).
# Device h0 has fault.hang on writes (one write hangs at writeback, no
# timeout, never released); device p0 beside it is plain (aio on an image
# file, so what its final writeback wrote can be read after the daemon).
#  (a) While h0's write is hung, an fsync and an O_DIRECT reader of its
#      range blocked on it, p0 serves writes and reads (verified byte for
#      byte) and .sys answers.
#  (c) SIGTERM with that hang: within shutdown_timeout (3 s) plus a margin
#      the daemon gives up on h0, writes p0 back (its image holds the data
#      after the exit), says in its log and status file that a hung I/O on
#      h0 was abandoned and how many bytes are lost, and exits; the blocked
#      callers get an error, the mount and the daemon are gone.
#  (b) `blkfs umount` with a hung writeback: returns within the timeout
#      plus a margin, exit status 1, names h0 and the bytes lost (those
#      .sys showed dirty and under writeback), daemon and mount gone.
#  (b2) A plain umount(8): the daemon ends the same way on its own (the
#      timeout given as a mount option, -o shutdown_timeout=2s).
#  (e) SIGTERM with a read hung (an O_DIRECT reader blocked) and dirty data
#      on the same device (aio on an image): its requests are waited for
#      3 s, then its cache is written back anyway (the image holds the
#      data), the unanswered request is reported, exit status 1.
#  (f) A slow device that keeps making progress is not a hung one: 8 MiB
#      through a 4 MiB/s throttle with shutdown_timeout = 1s: blkfs umount
#      waits the 2 s and more it takes and exits 0, everything written.
#  (d) kill -9 of a daemon with a hung I/O and a blocked fsync: the dead
#      mount is cleaned (connection aborted, lazy unmount), the fsync ends
#      with an error, nothing is left.
# Without the bound the daemon waited forever in its final writeback: (c)
# and (b) hang (the umount never returns) instead.
# BLKFS_HANG_CASES="a c b b2 e f d" (the default) runs a subset; (c) runs on
# (a)'s mount, so it runs (a)'s set-up too.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk date umount
require_helper fsync_fd

M=$((1 << 20))
TIMEOUT_MS=3000
# how late past shutdown_timeout a daemon may exit: late only as a busy
# machine is late (one hung in its final writeback never exits)
MARGIN_MS=30000
src=$TDIR/src
mkdata "$src" $((8 * M))

CASES=" ${BLKFS_HANG_CASES:-a c b b2 e f d} "
want() { case $CASES in *" $1 "*) return 0 ;; esac; return 1; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

stat_of() {	# stat_of DEV NAME
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/$1/blkfs_stat"
}

# hung_is N: h0's fault filter holds N I/Os; else says how many.
hung_is() {
	local h
	h=$(cat "$MNT/.sys/h0/fault/hung")
	[ "$h" = "$1" ] || { echo "h0: hung $h"; return 1; }
}

# wait_hung N: h0's fault filter holds N I/Os (within a minute, for a busy machine).
wait_hung() {
	wait_until 60 "h0's fault filter to hold $1 I/Os" hung_is "$1"
}

# conf IMG [CACHE_KEYS]: h0 (hangs writes when armed) and p0 (aio on IMG)
conf() {
	printf '%s\n' "[cache]
size = 64M
${2:-}

[mount]
shutdown_timeout = 3s

[device h0]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096
filters = fault
fault.ops = write
fault.hang = yes

[device p0]
backend = aio
path = $1
create = yes
size = 16M"
}

# hang_h0: write 1 MiB at 4 MiB of h0 and arm the fault: the next write
# that reaches its backend (that one's writeback) hangs.
hang_h0() {
	ddev if="$src" of="$MNT/h0" bs=1M count=1 seek=4 conv=notrunc
	printf '0\n' >"$MNT/.sys/h0/fault/after"
}

# daemon_gone_by PID T0 WHAT [TIMEOUT_MS]: the daemon exits within the
# timeout + margin, not before the timeout.
daemon_gone_by() {
	local pid=$1 t0=$2 what=$3 tmo=${4:-$TIMEOUT_MS} took
	wait_gone $(((tmo + MARGIN_MS) / 1000)) "$pid" ||
		fail "$what: the daemon still runs $(((tmo + MARGIN_MS) / 1000)) s later (hung in its final writeback)"
	took=$(($(now_ms) - t0))
	info "$what: the daemon exited after $took ms"
	[ "$took" -ge $((tmo - 200)) ] ||
		fail "$what: the daemon gave up after $took ms, before shutdown_timeout"
}

# status_says DEV BYTES [TIMEOUT]: the status file and the log name DEV,
# the bytes lost and the abandoned hung I/O.
status_says() {
	local dev=$1 bytes=$2 tmo=${3:-3s}
	grep -q "^lost $dev $bytes a hung I/O was abandoned after $tmo" "$STATUS" ||
		fail "status file: no 'lost $dev $bytes a hung I/O was abandoned': $(cat "$STATUS")"
	grep -q "$dev: a hung I/O was abandoned: .*$bytes bytes of dirty data not written back are lost" "$LOG" ||
		fail "the daemon log does not say that a hung I/O on $dev was abandoned with $bytes bytes lost"
}

# gone MNT: no mount left at MNT, no daemon.
gone() {
	! is_mounted "$1" || fail "$1 is still mounted"
	unset "_PID_OF[$1]"
}

# ---------------------------------------------------------------------------
if want a || want c; then
	info "(a) h0's write hangs at writeback; p0 serves meanwhile"
	img=$TDIR/p0.img
	# p0's data left dirty for (c) stays so: below dirty_background (10%), young
	start_blkfs "$(conf "$img" "dirty_expire = 1h")"
	mnt_a=$MNT
	hang_h0
	exec 7<>"$MNT/h0"
	bg fsync "$BLKFS_TESTBIN/fsync_fd" 7
	fsync_pid=$BGPID
	wait_hung 1
	# an O_DIRECT read of the range: the cache writes it back first, so it waits
	bg dread dd if="$MNT/h0" of="$TDIR/dread.data" bs=4096 skip=1024 count=16 iflag=direct status=none
	dread_pid=$BGPID
	exec 7>&-
	sleep 1
	[ ! -e "$TDIR/fsync.rc" ] || fail "(a) fsync returned while its write was hung: $(cat "$TDIR/fsync.rc")"
	[ ! -e "$TDIR/dread.rc" ] || fail "(a) the O_DIRECT reader returned while the write was hung"
	t0=$(now_ms)
	ddev if="$src" of="$MNT/p0" bs=1M count=8 conv=notrunc,fsync
	cmp "$src" <(dd if="$MNT/p0" bs=1M count=8 iflag=direct status=none) ||
		fail "(a) p0: the data read back (O_DIRECT) differs from what was written"
	cmp "$src" <(dd if="$MNT/p0" bs=1M count=8 status=none) ||
		fail "(a) p0: the data read back (cached) differs from what was written"
	info "(a) p0: 8 MiB written with fsync and read back twice in $(($(now_ms) - t0)) ms"
	assert_eq "(a) h0 hung" 1 "$(cat "$MNT/.sys/h0/fault/hung")"
	[ "$(stat_of h0 writeback_bytes)" -gt 0 ] || fail "(a) h0: nothing under writeback during the hang"
	[ "$(stat_of p0 dirty_bytes)" = 0 ] || fail "(a) p0: dirty after its fsync"
	[ ! -e "$TDIR/fsync.rc" ] || fail "(a) fsync returned while its write was still hung"
	if ! want c; then
		# released: the blocked callers finish with the right data
		printf '1\n' >"$MNT/.sys/h0/fault/release"
		wait_gone 30 "$fsync_pid" "$dread_pid" || fail "(a) released, but the callers still wait"
		assert_eq "(a) fsync after the release" OK "$(cat "$TDIR/fsync.out")"
		cmp "$TDIR/dread.data" <(dd if="$src" bs=4096 count=16 status=none) ||
			fail "(a) the O_DIRECT read after the release returned other data"
		stop_blkfs
	fi
fi

# ---------------------------------------------------------------------------
if want c; then
	info "(c) SIGTERM with the hang: the daemon gives up on h0 after 3 s, p0 is written back"
	# dirty data on p0 that only the final writeback can save
	dd if="$src" bs=1M count=4 skip=4 status=none >"$TDIR/p0.tail"
	ddev if="$TDIR/p0.tail" of="$MNT/p0" bs=1M count=4 seek=8 conv=notrunc
	[ "$(stat_of p0 dirty_bytes)" -gt 0 ] || fail "(c) p0 has no dirty data to write back"
	lost=$(($(stat_of h0 dirty_bytes) + $(stat_of h0 writeback_bytes)))
	pid=$DAEMON_PID
	t0=$(now_ms)
	kill -TERM "$pid"
	daemon_gone_by "$pid" "$t0" "(c) SIGTERM"
	gone "$mnt_a"
	status_says h0 "$lost"
	info "(c) status: $(grep h0 "$STATUS")"
	grep -q "^ok p0 " "$STATUS" || fail "(c) p0 was not written back: $(cat "$STATUS")"
	grep -q "exiting with status 1" "$LOG" || fail "(c) the daemon did not exit with status 1"
	cmp -n $((8 * M)) "$src" "$img" || fail "(c) p0's image: the first 8 MiB differ"
	cmp -i $((8 * M)):0 -n $((4 * M)) "$img" "$TDIR/p0.tail" ||
		fail "(c) p0's image: the 4 MiB left dirty at SIGTERM are not there"
	# the callers blocked on the hang got an error, not a hang
	wait_gone 30 "$fsync_pid" "$dread_pid" || fail "(c) the blocked fsync or reader still waits"
	[ "$(cat "$TDIR/fsync.out")" != OK ] || fail "(c) the fsync of the abandoned write succeeded"
	[ "$(cat "$TDIR/dread.rc")" != 0 ] || fail "(c) the O_DIRECT read behind the abandoned write succeeded"
	info "(c) fsync: $(cat "$TDIR/fsync.out"); reader: $(head -n 1 "$TDIR/dread.err")"
fi

# ---------------------------------------------------------------------------
if want b; then
	info "(b) blkfs umount with a hung writeback (the flusher's): exit 1 within 3 s + margin"
	start_blkfs "$(conf "$TDIR/p0b.img" "dirty_expire = 100ms")"
	printf '0\n' >"$MNT/.sys/h0/fault/after"
	ddev if="$src" of="$MNT/h0" bs=1M count=1 seek=2 conv=notrunc
	ddev if="$src" of="$MNT/p0" bs=1M count=2 conv=notrunc
	wait_hung 1
	lost=$(($(stat_of h0 dirty_bytes) + $(stat_of h0 writeback_bytes)))
	[ "$lost" -gt 0 ] || fail "(b) h0: nothing dirty or under writeback"
	pid=$DAEMON_PID
	t0=$(now_ms)
	out=$("$BLKFS" umount "$MNT" 2>&1) && rc=0 || rc=$?
	took=$(($(now_ms) - t0))
	printf '%s\n' "$out" | sed 's/^/    /'
	info "(b) blkfs umount returned $rc after $took ms"
	[ "$took" -lt $((TIMEOUT_MS + MARGIN_MS)) ] || fail "(b) blkfs umount took $took ms"
	[ "$took" -ge $((TIMEOUT_MS - 200)) ] || fail "(b) blkfs umount gave up after $took ms, before shutdown_timeout"
	assert_eq "(b) blkfs umount exit status" 1 "$rc"
	case $out in
	*"$lost bytes of h0 could not be written to its backend: a hung I/O was abandoned after 3s"*) ;;
	*) fail "(b) blkfs umount does not say that $lost bytes of h0 were lost to an abandoned hung I/O" ;;
	esac
	case $out in *"data was lost"*) ;; *) fail "(b) blkfs umount does not say that data was lost" ;; esac
	! pid_alive "$pid" || fail "(b) the daemon still runs after blkfs umount returned"
	gone "$MNT"
	cmp -n $((2 * M)) "$src" "$TDIR/p0b.img" || fail "(b) p0's data is not in its image"
fi

# ---------------------------------------------------------------------------
if want b2; then
	info "(b2) a plain umount(8) with a hung writeback: the daemon gives up and exits"
	info "(b2) shutdown_timeout = 2s as a mount option, over the config's 3s"
	start_blkfs "$(conf "$TDIR/p0c.img" "dirty_expire = 100ms")" -o shutdown_timeout=2s
	printf '0\n' >"$MNT/.sys/h0/fault/after"
	ddev if="$src" of="$MNT/h0" bs=1M count=1 seek=2 conv=notrunc
	wait_hung 1
	lost=$(($(stat_of h0 dirty_bytes) + $(stat_of h0 writeback_bytes)))
	pid=$DAEMON_PID
	t0=$(now_ms)
	umount "$MNT" || fail "(b2) umount $MNT failed"
	gone "$MNT"
	daemon_gone_by "$pid" "$t0" "(b2) umount(8)" 2000
	status_says h0 "$lost" 2s
fi

# ---------------------------------------------------------------------------
if want e; then
	info "(e) SIGTERM with a hung read and dirty data on the same device"
	start_blkfs "[cache]
size = 64M
dirty_expire = 1h

[mount]
shutdown_timeout = 3s

[device h0]
backend = aio
path = $TDIR/h0e.img
create = yes
size = 16M
filters = fault
fault.ops = read
fault.hang = yes"
	ddev if="$src" of="$MNT/h0" bs=1M count=2 conv=notrunc
	[ "$(stat_of h0 dirty_bytes)" = $((2 * M)) ] || fail "(e) h0: $(stat_of h0 dirty_bytes) bytes dirty, want 2 MiB"
	printf '0\n' >"$MNT/.sys/h0/fault/after"
	bg dread_e dd if="$MNT/h0" of=/dev/null bs=4096 skip=2048 count=1 iflag=direct status=none
	rpid=$BGPID
	wait_hung 1
	pid=$DAEMON_PID
	t0=$(now_ms)
	kill -TERM "$pid"
	daemon_gone_by "$pid" "$t0" "(e) SIGTERM"
	gone "$MNT"
	info "(e) status: $(cat "$STATUS")"
	grep -q "^lost h0 0 1 hung request was not answered after 3s without progress (shutdown_timeout); the cached data was written back" "$STATUS" ||
		fail "(e) the status file does not report the unanswered request: $(cat "$STATUS")"
	grep -q "exiting with status 1" "$LOG" || fail "(e) the daemon did not exit with status 1"
	cmp -n $((2 * M)) "$src" "$TDIR/h0e.img" || fail "(e) h0's dirty data was not written back"
	wait_gone 30 "$rpid" || fail "(e) the reader of the hung read still waits"
	[ "$(cat "$TDIR/dread_e.rc")" != 0 ] || fail "(e) the hung read succeeded"
fi

# ---------------------------------------------------------------------------
if want f; then
	info "(f) slow but not hung: a final writeback longer than shutdown_timeout completes"
	start_blkfs "[cache]
size = 64M
dirty_expire = 1h
dirty_background = 50%
dirty_limit = 90%

[mount]
shutdown_timeout = 1s

[device s0]
backend = aio
path = $TDIR/s0.img
create = yes
size = 16M
filters = throttle
throttle.write_mbps = 4"
	ddev if="$src" of="$MNT/s0" bs=1M count=8 conv=notrunc
	[ "$(stat_of s0 dirty_bytes)" = $((8 * M)) ] || fail "(f) s0: $(stat_of s0 dirty_bytes) bytes dirty, want 8 MiB"
	t0=$(now_ms)
	out=$("$BLKFS" umount "$MNT" 2>&1) && rc=0 || rc=$?
	took=$(($(now_ms) - t0))
	printf '%s\n' "$out" | sed 's/^/    /'
	info "(f) blkfs umount returned $rc after $took ms"
	assert_eq "(f) blkfs umount exit status" 0 "$rc"
	[ "$took" -ge 1500 ] || fail "(f) the writeback took $took ms: not longer than the timeout, proves nothing"
	gone "$MNT"
	cmp -n $((8 * M)) "$src" "$TDIR/s0.img" || fail "(f) s0's data is not in its image"
fi

# ---------------------------------------------------------------------------
if want d; then
	info "(d) kill -9 of a daemon with a hung I/O and a blocked fsync"
	start_blkfs "$(conf "$TDIR/p0d.img")"
	hang_h0
	exec 7<>"$MNT/h0"
	bg fsync_d "$BLKFS_TESTBIN/fsync_fd" 7
	fsync_pid=$BGPID
	exec 7>&-
	wait_hung 1
	sleep 0.5
	[ ! -e "$TDIR/fsync_d.rc" ] || fail "(d) fsync returned while its write was hung"
	pid=$DAEMON_PID
	kill9_blkfs "$MNT"
	! pid_alive "$pid" || fail "(d) the daemon survived SIGKILL"
	wait_gone 30 "$fsync_pid" || fail "(d) the fsync still waits on the dead mount"
	[ "$(cat "$TDIR/fsync_d.out")" != OK ] || fail "(d) the fsync on the killed daemon succeeded"
	gone "$MNT"
	[ -z "$(pids_matching "$TDIR/blkfs")" ] || fail "(d) processes left: $(pids_matching "$TDIR/blkfs")"
fi

info "done:$CASES"
