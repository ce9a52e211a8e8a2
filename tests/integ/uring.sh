#!/usr/bin/env bash
# integ-serial: flips the kernel's enable_uring, which every mount beside it would see
# uring.sh: FUSE over io_uring as blkfs's transport ([mount] transport).
#  - switch off (enable_uring = N): `transport = uring` refuses to mount and
#    says how to turn it on; `auto` serves /dev/fuse and logs why;
#  - switch on: `auto` (transport_probe = off) and `uring` use the ring (the log, .sys/.transport,
#    blkfs stat and its JSON say so, with the queues, depth and memory),
#    `dev` does not; depths 1 and 64 carry verified data, and so do replies
#    made by another thread than the handler's (as replies from I/O
#    completions are: BLKFS_URING_TEST=handoff), a queue thread that
#    spins before it sleeps (uring_spin: its counters move, and stay 0
#    with it off), and 16 MiB writes and
#    reads, and 1 MiB requests 16 at a time from one CPU (some handed to
#    the other CPU's thread);
#  - a queue that does not register in time: `uring` fails the mount in
#    time with the reason, `auto` falls back to /dev/fuse and works;
#  - a queue that dies: its CPU's callers get an error, not a hang; the
#    daemon says why and exits 1;
#  - kill -9 with a request inside a handler: the caller gets an error
#    before anyone aborts the connection, new requests get ENOTCONN;
#  - SIGTERM under a writer that logs its fsyncs (aio image): no caller
#    hangs, the daemon writes back and exits 0, every fsynced byte is
#    there after a remount;
#  - lazy unmount with fio in flight: fio finishes and verifies, then the
#    daemon writes back and exits 0.
# The test turns the kernel's switch (/sys/module/fuse/parameters/
# enable_uring) on and off and puts back what it found; without root or
# without the switch it skips. The data tests over the ring are
# uring_suite.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_uring
require_helper bdev_check crash_writer
require fio dd cmp python3 taskset

DEV='[device r]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096'
possible=$(cat /sys/devices/system/cpu/possible)
NQ=$(awk -F, '{ n = 0; for (i = 1; i <= NF; i++) { split($i, r, "-"); n += (r[2] == "" ? 1 : r[2] - r[1] + 1) } print n }' <<<"$possible")
info "possible CPUs: $possible ($NQ queues)"

# threads PID: each thread of PID with its state and where it sleeps
threads() {
	local t
	for t in /proc/"$1"/task/*; do
		echo "$(cat "$t/comm" 2>/dev/null) $(awk '/^State:/ { print $2 }' "$t/status" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)"
	done | sort | uniq -c | tr '\n' ';'
}

# tfield MNT NAME: a line of MNT/.sys/.transport
tfield() {
	timeout 10 cat "$1/.sys/.transport" | awk -v n="$2" '$1 == n { print $2 }'
}

# mount_must_fail WHAT [MOUNT ENV...]: `blkfs mount $MNT -c $CONF` exits 1
# (within 30 s), leaves nothing mounted and no daemon; sets OUT.
mount_must_fail() {
	local what=$1 rc
	shift
	OUT=$(env "$@" timeout 30 "$BLKFS" mount "$MNT" -c "$CONF" 2>&1) && rc=0 || rc=$?
	if is_mounted "$MNT"; then
		abort_fuse "$MNT"
		umount -l "$MNT"
		fail "$what: mounted; output: $OUT"
	fi
	[ "$rc" -eq 1 ] || fail "$what: blkfs mount exited $rc, want 1; output: $OUT"
	# the daemon may still be on its way out
	wait_until 30 "$what: no process left" no_pids_matching "$MNT"
}

# stat_at_least MNT DEV NAME MIN: DEV's counter NAME (blkfs_stat) is at least MIN; else prints it.
stat_at_least() {
	local n
	n=$(awk -v k="$3" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' \
		"$1/.sys/$2/blkfs_stat")
	[ "$n" -ge "$4" ] || { echo "$3 $n"; return 1; }
}

# ---------------------------------------------------------------------------
info "enable_uring = N: transport = uring refuses, auto serves /dev/fuse"
uring_set N
write_conf "[mount]
transport = uring

$DEV"
new_mountpoint
mount_must_fail "uring with the switch off"
line=$(grep -n 'transport = uring' "$CONF" | cut -d: -f1)
grep -qF "$CONF:$line: transport: uring: FUSE over io_uring is off in the kernel" <<<"$OUT" ||
	fail "no FILE:LINE: transport: message: $OUT"
grep -qF "echo Y > /sys/module/fuse/parameters/enable_uring" <<<"$OUT" ||
	fail "the message does not say how to turn it on: $OUT"
grep -qF "fuse.enable_uring=1" <<<"$OUT" || fail "the message does not name the boot option: $OUT"
info "  $OUT"

start_blkfs "[mount]
transport = auto

$DEV"
assert_eq "auto, switch off: transport" dev "$(tfield "$MNT" transport)"
grep -q 'transport: /dev/fuse (FUSE over io_uring is off in the kernel' "$LOG" ||
	fail "the log does not say why /dev/fuse: $(grep transport: "$LOG")"
stop_blkfs

# ---------------------------------------------------------------------------
info "enable_uring = Y: auto and uring take the ring, dev does not"
uring_set Y
mkdata "$TDIR/src" $((8 << 20))
# auto without the probe (transport_probe.sh tests it): the ring whenever offered
for t in auto uring; do
	start_blkfs "[mount]
transport = $t
transport_probe = off

$DEV"
	assert_eq "$t: transport" uring "$(tfield "$MNT" transport)"
	grep -q "transport: FUSE over io_uring, $NQ queues (one per possible CPU) x 64 entries" "$LOG" ||
		fail "$t: the log does not name the ring: $(grep transport: "$LOG")"
	before=$(tfield "$MNT" ring_requests)
	ddev if="$TDIR/src" of="$MNT/r" bs=1M conv=notrunc,fsync
	ddev if="$TDIR/src" of="$MNT/r" bs=4K seek=4096 count=512 conv=notrunc,fsync
	cmp -n $((8 << 20)) "$TDIR/src" "$MNT/r" || fail "$t: data differs"
	cmp <(dd if="$MNT/r" bs=4K skip=4096 count=512 iflag=direct status=none) \
		<(head -c $((2 << 20)) "$TDIR/src") || fail "$t: data at 16M differs"
	after=$(tfield "$MNT" ring_requests)
	[ "$after" -ge $((before + 8 + 512 + 512)) ] ||
		fail "$t: ring_requests went from $before to $after: the requests did not take the ring"
	assert_eq "$t: queues" "$NQ" "$(tfield "$MNT" queues)"
	assert_eq "$t: queue_depth" 64 "$(tfield "$MNT" queue_depth)"
	assert_eq "$t: payload_bytes" $((1 << 20)) "$(tfield "$MNT" payload_bytes)"
	rb=$(tfield "$MNT" ring_bytes)
	if [ "$rb" -lt $((NQ * 64 * (1 << 20))) ] || [ "$rb" -gt $((NQ * 64 * (1 << 20) * 11 / 10)) ]; then
		fail "$t: ring_bytes $rb for $NQ x 64 entries of 1 MiB"
	fi
	res=$(tfield "$MNT" ring_resident_bytes)
	if [ "$res" -le 0 ] || [ "$res" -gt "$rb" ]; then
		fail "$t: ring_resident_bytes $res of $rb"
	fi
	out=$(timeout 10 "$BLKFS" stat "$MNT") || fail "blkfs stat failed: $out"
	grep -qE '^  transport +uring$' <<<"$out" || fail "blkfs stat does not show the transport: $out"
	grep -qE '^  ring_bytes +[0-9]+ \(' <<<"$out" || fail "blkfs stat does not show ring_bytes: $out"
	timeout 10 "$BLKFS" stat "$MNT" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
t = j[".transport"]
assert t["transport"] == "uring", t
assert t["queues"] >= 1 and t["ring_bytes"] > 0, t
assert j["r"]["user_write_bytes"] > 0, j["r"]
' || fail "blkfs stat --json: no valid .transport and device objects"
	stop_blkfs
done
start_blkfs "[mount]
transport = dev

$DEV"
assert_eq "dev, switch on: transport" dev "$(tfield "$MNT" transport)"
grep -q 'transport: /dev/fuse (transport = dev)' "$LOG" || fail "dev: log: $(grep transport: "$LOG")"
stop_blkfs

# ---------------------------------------------------------------------------
for depth in 1 64; do
	info "uring_queue_depth = $depth: fio verify, libaio QD16 and psync"
	start_blkfs "[mount]
transport = uring
uring_queue_depth = $depth

$DEV"
	assert_eq "depth $depth" "$depth" "$(tfield "$MNT" queue_depth)"
	for eng in "--ioengine=libaio --iodepth=16 --direct=1" "--ioengine=psync --numjobs=2 --offset_increment=16M"; do
		# shellcheck disable=SC2086
		fio --name=d$depth --filename="$MNT/r" --rw=randwrite --bsrange=4k-256k --blockalign=4k \
			--size=12M --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
			--fallocate=none --output="$TDIR/fio.out" $eng ||
			{ cat "$TDIR/fio.out"; fail "depth $depth: fio $eng failed"; }
	done
	stop_blkfs
done

# ---------------------------------------------------------------------------
for spin in off 200us; do
	info "uring_spin = $spin: fio verify, psync QD1 and libaio QD16; the spin's counters"
	start_blkfs "[mount]
transport = uring
uring_spin = $spin

$DEV"
	grep -q "transport: FUSE over io_uring, .*; uring_spin $spin\$" "$LOG" ||
		fail "uring_spin $spin: log: $(grep transport: "$LOG")"
	for eng in "--ioengine=psync" "--ioengine=libaio --iodepth=16"; do
		# shellcheck disable=SC2086
		fio --name=spin --filename="$MNT/r" --rw=randrw --bsrange=4k-64k --blockalign=4k \
			--size=12M --direct=1 --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
			--fallocate=none --output="$TDIR/fio.out" $eng ||
			{ cat "$TDIR/fio.out"; fail "uring_spin $spin: fio $eng failed"; }
	done
	spins=$(tfield "$MNT" ring_spins) hits=$(tfield "$MNT" ring_spin_hits)
	spun=$(tfield "$MNT" ring_spin_us) limit=$(tfield "$MNT" uring_spin_limit_us)
	yielded=$(tfield "$MNT" ring_spin_yielded)
	info "  limit ${limit}us: $spins spins, $hits ended by work, $yielded by a busy CPU, ${spun}us spent"
	if [ "$spin" = off ]; then
		assert_eq "uring_spin off: limit" 0 "$limit"
		assert_eq "uring_spin off: spins" 0 "$spins"
	else
		assert_eq "uring_spin $spin: limit" 200 "$limit"
		# a QD1 request comes well within 200 us of the reply before it;
		# on a busy machine the spin gives way at once instead
		[ "$spins" -gt 0 ] || fail "uring_spin $spin: no spin"
		[ $((hits + yielded)) -gt 0 ] ||
			fail "uring_spin $spin: $spins spins, none ended by work or by a busy CPU"
		[ "$spun" -gt 0 ] || fail "uring_spin $spin: no time counted"
	fi
	stop_blkfs
done

# ---------------------------------------------------------------------------
info "every reply from another thread: fio verify, O_DIRECT and 16 MiB dd"
write_conf "[mount]
transport = uring

$DEV"
new_mountpoint
_MNTS+=("$MNT")
BLKFS_URING_TEST=handoff _mount_blkfs
for eng in "--ioengine=libaio --iodepth=16 --direct=1" "--ioengine=psync --numjobs=2 --offset_increment=16M"; do
	# shellcheck disable=SC2086
	fio --name=handoff --filename="$MNT/r" --rw=randrw --bsrange=512-256k --blockalign=512 \
		--size=12M --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
		--fallocate=none --output="$TDIR/fio.out" $eng ||
		{ cat "$TDIR/fio.out"; fail "handoff: fio $eng failed"; }
done
ddev if="$TDIR/src" of="$MNT/r" bs=1M oflag=direct conv=notrunc
ddev if="$TDIR/src" of="$MNT/r" bs=4K seek=8192 count=100 oflag=direct conv=notrunc
cmp <(dd if="$MNT/r" bs=1M count=8 iflag=direct status=none) "$TDIR/src" ||
	fail "handoff: O_DIRECT data differs"
cmp <(dd if="$MNT/r" bs=4K skip=8192 count=100 iflag=direct status=none) <(head -c 409600 "$TDIR/src") ||
	fail "handoff: O_DIRECT 4K data differs"
hr=$(tfield "$MNT" ring_handoff_replies)
rq=$(tfield "$MNT" ring_requests)
if [ "$hr" -le 500 ] || [ $((hr * 10)) -lt $((rq * 9)) ]; then
	fail "handoff: $hr of $rq replies came through the hand-off list"
fi
info "  $hr of $rq replies came through the hand-off list"
stop_blkfs

info "16 MiB writes and reads: large requests of one CPU spread to the others"
start_blkfs "[mount]
transport = uring

$DEV"
mkdata "$TDIR/src48" $((48 << 20))
for bs in 16M 4M; do
	ddev if="$TDIR/src48" of="$MNT/r" bs=$bs conv=notrunc,fsync
	cmp <(dd if="$MNT/r" bs=$bs count=$(((48 << 20) / $(numfmt --from=iec $bs))) status=none) "$TDIR/src48" ||
		fail "bs=$bs: data differs"
	cmp <(dd if="$MNT/r" bs=$bs count=$(((48 << 20) / $(numfmt --from=iec $bs))) iflag=direct status=none) "$TDIR/src48" ||
		fail "bs=$bs, O_DIRECT read: data differs"
done
# 1 MiB requests 16 at a time from one CPU: some go to the idle other CPU.
# A request moves only when its queue's thread takes two or more large ones
# in one wait while the other queue's thread waits idle: how the scheduler
# lines them up. On a busy machine one run may meet no such moment, so fio
# runs again (each run verified) until ring_moved_requests moves, ten runs
# at most; a quiet machine moves some in the first.
moved=0
for ((try = 1; try <= 10; try++)); do
	taskset -c 0 fio --name=big --filename="$MNT/r" --rw=randrw --bs=1M --ioengine=libaio \
		--iodepth=16 --direct=1 --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--verify_state_save=0 --fallocate=none --output="$TDIR/fio.out" ||
		{ cat "$TDIR/fio.out"; fail "1 MiB QD16: fio failed"; }
	[ "$NQ" -gt 1 ] || break
	moved=$(tfield "$MNT" ring_moved_requests)
	[ "$moved" -eq 0 ] || break
done
if [ "$NQ" -gt 1 ]; then
	[ "$moved" -gt 0 ] || fail "no request of 1 MiB went to another queue's thread in 10 runs of fio"
	info "  $moved requests of 1 MiB served on another queue's thread (fio run $try)"
fi
# 4 KiB requests 32 at a time from one CPU: a wait that brings four or more
# gives every other one to the idle other CPU's thread. The same rule for a
# busy machine: up to ten verified runs until some move.
if [ "$NQ" -gt 1 ]; then
	base=$(tfield "$MNT" ring_moved_requests)
	moved=0
	for ((try = 1; try <= 10; try++)); do
		taskset -c 0 fio --name=small --filename="$MNT/r" --rw=randrw --bs=4k --ioengine=libaio \
			--iodepth=32 --direct=1 --size=16M --verify=crc32c --verify_fatal=1 --do_verify=1 \
			--verify_state_save=0 --fallocate=none --output="$TDIR/fio.out" ||
			{ cat "$TDIR/fio.out"; fail "4 KiB QD32: fio failed"; }
		moved=$(($(tfield "$MNT" ring_moved_requests) - base))
		[ "$moved" -eq 0 ] || break
	done
	[ "$moved" -gt 0 ] ||
		fail "no request of 4 KiB went to another queue's thread in 10 runs of fio at iodepth 32"
	info "  $moved requests of 4 KiB served on another queue's thread (fio run $try)"
fi
stop_blkfs

# ---------------------------------------------------------------------------
info "a queue that never registers: uring fails in time, auto falls back"
noq=$((NQ > 1 ? 1 : 0))
write_conf "[mount]
transport = uring

$DEV"
new_mountpoint
t0=$SECONDS
mount_must_fail "a queue never registers" BLKFS_URING_TEST=noregister=$noq,limit=2000
# in time: the registration limit is 2 s; late only as a busy machine is late
[ $((SECONDS - t0)) -le 45 ] || fail "the failed mount took $((SECONDS - t0)) s"
grep -qF "transport: uring: FUSE over io_uring could not start: queue $noq" <<<"$OUT" ||
	fail "no reason given: $OUT"
grep -qF "did not register in time" <<<"$OUT" || fail "no reason given: $OUT"
info "  $(grep -F 'did not register' <<<"$OUT")"
write_conf "[mount]
transport = auto
transport_probe = off

$DEV"
new_mountpoint
_MNTS+=("$MNT")
BLKFS_URING_TEST=noregister=$noq,limit=2000 _mount_blkfs
assert_eq "fallback: transport" dev "$(tfield "$MNT" transport)"
grep -q "transport: /dev/fuse (FUSE over io_uring could not start: queue $noq .* did not register in time)" "$LOG" ||
	fail "the log does not say why: $(grep transport: "$LOG")"
ddev if="$TDIR/src" of="$MNT/r" bs=64K conv=notrunc,fsync
cmp -n $((8 << 20)) "$TDIR/src" "$MNT/r" || fail "fallback: data differs"
stop_blkfs

# ---------------------------------------------------------------------------
info "a queue that dies: its callers get an error, the daemon says why and exits 1"
write_conf "[mount]
transport = uring

$DEV"
new_mountpoint
_MNTS+=("$MNT")
BLKFS_URING_TEST=die=200 _mount_blkfs
pid=$DAEMON_PID
rc=0
timeout 30 taskset -c 0 dd if=/dev/zero of="$MNT/r" bs=4K count=4000 oflag=direct conv=notrunc,nocreat \
	2>"$TDIR/dd.err" || rc=$?
[ "$rc" -ne 124 ] || fail "a writer on CPU 0 hung after its queue died"
[ "$rc" -ne 0 ] || fail "4000 writes on CPU 0 succeeded though queue 0 died after 200 requests"
info "  the writer on CPU 0: $(tail -n 1 "$TDIR/dd.err")"
wait_gone 60 "$pid" || fail "the daemon still runs 60 s after its queue died"
grep -q 'FUSE ring queue 0 (CPU 0) stopped: made to fail by BLKFS_URING_TEST after 200 requests; ending the session' "$LOG" ||
	fail "the log does not say why: $(tail -n 5 "$LOG")"
grep -q 'exiting with status 1' "$LOG" || fail "the daemon did not exit 1: $(tail -n 3 "$LOG")"
if is_mounted "$MNT"; then
	# the daemon unmounted before it wrote back: a new request fails at once
	expect_errno ENOTCONN timeout 10 stat "$MNT/r"
	abort_fuse "$MNT"
	umount -l "$MNT"
fi
unset "_PID_OF[$MNT]"

# ---------------------------------------------------------------------------
info "kill -9 with a write inside a handler: the caller gets an error by itself"
start_blkfs "[mount]
transport = uring

[device slow]
backend = ram
size = 64M
filters = delay
delay.write = 3s"
pid=$DAEMON_PID
dd if=/dev/zero of="$MNT/slow" bs=4K count=1 oflag=direct conv=notrunc,nocreat 2>"$TDIR/dd.err" &
ddpid=$!
_BGPIDS+=("$ddpid")
# the write inside its handler (3 s of delay): the daemon counts it
wait_until 60 "the write in flight on slow" stat_at_least "$MNT" slow requests_in_flight 1
kill -KILL "$pid"
wait_gone 30 "$pid" || fail "daemon $pid still there 30 s after SIGKILL"
# no abort, no unmount yet: the kernel alone must end the request
wait_gone 30 "$ddpid" || fail "the writer still waits 30 s after the daemon died"
rc=0
wait "$ddpid" || rc=$?
[ "$rc" -ne 0 ] || fail "the write the daemon never answered succeeded"
info "  the writer: $(tail -n 1 "$TDIR/dd.err")"
expect_errno ENOTCONN timeout 10 stat "$MNT/slow"
unset "_PID_OF[$MNT]"
abort_fuse "$MNT"
while is_mounted "$MNT"; do umount -l "$MNT" 2>/dev/null || break; done

# ---------------------------------------------------------------------------
info "SIGTERM under a writer that logs its fsyncs: everything fsynced survives"
if odirect_dir; then
	img=$ODIRECT_DIR/term.img
	start_blkfs "[mount]
transport = uring

[cache]
size = 64M

[device d]
backend = aio
path = $img
size = 128M
create = yes
logical_block_size = 512
physical_block_size = 4096"
	dev=$MNT/d
	SIZE=$((64 << 20))
	dd if="$dev" of="$TDIR/base" bs=1M count=64 status=none
	"$BLKFS_TESTBIN/crash_writer" write "$dev" 4242 "$SIZE" "$TDIR/w.log" 2>"$TDIR/w.err" &
	wpid=$!
	_BGPIDS+=("$wpid")
	# SIGTERM once the writer has an fsync acknowledged (else the check proves nothing)
	wait_until 60 "an fsync acknowledged to the writer" grep -q '^synced' "$TDIR/w.log"
	pid_alive "$wpid" || { cat "$TDIR/w.err"; fail "the writer stopped before SIGTERM"; }
	pid=$DAEMON_PID
	kill -TERM "$pid"
	wait_gone 30 "$pid" ||
		fail "the daemon still runs 30 s after SIGTERM: $(threads "$pid"); log: $(tail -n 5 "$LOG")"
	wait_gone 30 "$wpid" || fail "the writer hangs after the daemon exited"
	wait "$wpid" || fail "the writer exited $?"
	grep -q 'exiting with status 0' "$LOG" || fail "SIGTERM: the daemon did not exit 0: $(tail -n 3 "$LOG")"
	grep -q '^ok d ' "$STATUS" || fail "SIGTERM: status: $(cat "$STATUS")"
	unset "_PID_OF[$MNT]"
	while is_mounted "$MNT"; do umount -l "$MNT" 2>/dev/null || break; done
	acked=$(awk '/^synced/ { n = $2 } END { print n + 0 }' "$TDIR/w.log")
	[ "$acked" -gt 0 ] || fail "no fsync was acknowledged before SIGTERM: the check proves nothing"
	remount_blkfs "$MNT"
	out=$("$BLKFS_TESTBIN/crash_writer" verify "$dev" 4242 "$SIZE" "$TDIR/w.log" "$TDIR/base" 2>&1) ||
		{ printf '%s\n' "$out" >&2; fail "SIGTERM: data acknowledged by fsync is missing"; }
	info "  $acked records fsynced before SIGTERM: $out"
	stop_blkfs
else
	info "SKIP: neither $TDIR nor /var/tmp takes O_DIRECT: no aio image for the SIGTERM case"
fi

# ---------------------------------------------------------------------------
info "lazy unmount with fio in flight: fio finishes and verifies, then the daemon exits 0"
start_blkfs "[mount]
transport = uring

$DEV"
pid=$DAEMON_PID
# fio reopens its file for the verify pass, after the mount point is gone:
# through the open descriptor this shell keeps (a /proc link reaches the
# file on a detached mount, as a path cannot)
exec {hold}<"$MNT/r"
fio --name=lazy --filename="/proc/$BASHPID/fd/$hold" --rw=randwrite --ioengine=libaio \
	--iodepth=16 --direct=1 --bsrange=4k-64k --blockalign=4k --size=48M --time_based \
	--runtime=4 --verify=crc32c --verify_fatal=1 --verify_state_save=0 --fallocate=none \
	--output="$TDIR/lazy.out" &
fpid=$!
_BGPIDS+=("$fpid")
# unmount once fio writes
wait_until 60 "fio's first writes on r" stat_at_least "$MNT" r direct_write_bytes 1
pid_alive "$fpid" || { cat "$TDIR/lazy.out"; fail "fio ended before the unmount"; }
umount -l "$MNT" || fail "umount -l failed"
! is_mounted "$MNT" || fail "$MNT still mounted after umount -l"
wait "$fpid" || { cat "$TDIR/lazy.out"; fail "fio failed after a lazy unmount"; }
grep -q 'err= 0' "$TDIR/lazy.out" || fail "fio: $(grep err= "$TDIR/lazy.out")"
grep -qE 'READ: bw=[1-9]' "$TDIR/lazy.out" || fail "fio verified nothing: $(grep -E 'READ|WRITE' "$TDIR/lazy.out")"
pid_alive "$pid" || fail "the daemon ended while a file of its detached mount was open"
exec {hold}<&-
wait_gone 60 "$pid" || fail "the daemon still runs 60 s after its last file closed"
grep -q 'exiting with status 0' "$LOG" || fail "lazy unmount: exit: $(tail -n 3 "$LOG")"
grep -q '^ok r ' "$STATUS" || fail "lazy unmount: status: $(cat "$STATUS")"
unset "_PID_OF[$MNT]"
info "all transport cases passed"
