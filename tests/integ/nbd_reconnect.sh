#!/usr/bin/env bash
# nbd_reconnect.sh: the nbd backend when its server goes away (issue 7).
# The server is nbdkit's file plugin on an image in the test's temp dir, so
# what it stored survives a restart on the same socket.
#
# 1. Killed mid-write (SIGKILL while writeback commands are in flight, the
#    server slowed by the delay filter): the writer's fsync fails, a held
#    descriptor's next fsync reports EIO, nothing hangs (each bounded well
#    below the test's timeout), the mount stays usable; the daemon log says
#    the connection was lost. The server comes back on the same socket:
#    blkfs reconnects by itself, a rewrite + fsync succeeds, the held
#    descriptor's fsync is OK again, the data verifies through blkfs and,
#    after `blkfs umount` (exit 0), in the image file itself.
# 2. Hung (SIGSTOP): in-flight writes fail after `timeout` (1s here), the
#    fsync fails instead of hanging; SIGCONT: blkfs reconnects, a rewrite +
#    fsync succeeds and verifies. (nbdkit 1.32 sometimes aborts on SIGCONT,
#    finding the connection closed under a reply; it is then restarted.)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper fsync_fd
require nbdkit nbdinfo dd cmp timeout
ff=$BLKFS_TESTBIN/fsync_fd

M=$((1 << 20))
img=$TDIR/disk.img
truncate -s $((256 * M)) "$img"
src=$TDIR/src
mkdata "$src" $((64 * M))
sock=$TDIR/nbd.sock
uri="nbd+unix:///?socket=$sock"
SRV_PID=

# start_nbdkit [FILTER PARAMS...]: nbdkit on $sock, in the background
# (killed at exit), the file plugin on $img behind the delay filter (params
# delay-write=... slow it down); waits until it answers. It must not inherit
# the test's descriptor 7 on the device file (umount would find it busy).
start_nbdkit() {
	local i
	rm -f "$sock"
	nbdkit --unix "$sock" --foreground --exit-with-parent --filter=delay file "$img" "$@" \
		>>"$TDIR/nbdkit.log" 2>&1 7>&- &
	SRV_PID=$!
	_BGPIDS+=("$SRV_PID")
	for ((i = 0; i < 600; i++)); do
		[ -S "$sock" ] && nbdinfo --size "$uri" >/dev/null 2>&1 && return 0
		pid_alive "$SRV_PID" || { cat "$TDIR/nbdkit.log" >&2; fail "nbdkit exited at start"; }
		sleep 0.1
	done
	fail "nbdkit does not answer on $sock after 60 s"
}

# stat_of NAME: a counter of the device's backend (blkfs_stat).
stat_of() {
	awk -v k="$1" '$1 == k { print $2 }' "$MNT/.sys/d/blkfs_stat"
}

# wait_stat NAME MIN SECONDS: until the counter reaches MIN.
wait_stat() {
	local i
	for ((i = 0; i < $3 * 20; i++)); do
		[ "$(stat_of "$1")" -ge "$2" ] && return 0
		sleep 0.05
	done
	fail "$1 stayed at $(stat_of "$1") (want >= $2) for $3 s"
}

# wait_clean SECONDS: until the cache has written back all of the device's
# data: dirty_bytes and writeback_bytes both 0. dirty_bytes alone is not
# enough: data under writeback is not counted as dirty, and a retry still in
# flight after a reconnect leaves the device's last writeback result a
# failure, for which the cache fails a writer that runs into the dirty limit
# with EIO (a loaded machine keeps the retry in flight long enough for the
# next dd to get there). Both from one read of blkfs_stat: a retry that
# fails between two reads moves its bytes from one to the other.
clean() {
	awk '$1 == "dirty_bytes" || $1 == "writeback_bytes" { printf "%s %s ", $1, $2; n += $2 }
		END { exit n != 0 }' "$MNT/.sys/d/blkfs_stat"
}
wait_clean() {
	wait_until "$1" "the cache to write back the device's data" clean
}

# bg_dd NAME DD_OPERANDS...: dd into the device in the background; its exit
# status goes to $TDIR/NAME.rc. Sets BG.
bg_dd() {
	local name=$1
	shift
	rm -f "$TDIR/$name.rc"
	(
		rc=0
		dd of="$dev" "$@" conv=notrunc,nocreat,fsync status=none 2>"$TDIR/$name.err" || rc=$?
		echo "$rc" >"$TDIR/$name.rc"
	) &
	BG=$!
	_BGPIDS+=("$BG")
}

# bg_wait NAME SECONDS: the background dd ends within SECONDS and failed.
bg_wait_failed() {
	wait_gone "$2" "$BG" || fail "$1: dd still running $2 s after the server went away (a hang)"
	[ -s "$TDIR/$1.rc" ] || fail "$1: dd left no exit status"
	[ "$(cat "$TDIR/$1.rc")" -ne 0 ] ||
		fail "$1: dd conv=fsync succeeded though the server went away mid-write"
	info "$1: dd failed as it should: $(tr '\n' ' ' <"$TDIR/$1.err")"
}

# ---- 1. killed mid-write, then back on the same socket

info "=== server killed mid-write"
start_nbdkit delay-write=30ms
start_blkfs "[cache]
size = 64M

[device d]
backend = nbd
uri = $uri
timeout = 2s"
dev=$MNT/d
assert_eq "st_size" $((256 * M)) "$(stat -c %s "$dev")"
ddev if="$src" of="$dev" bs=1M count=16 conv=notrunc,fsync
cmp -n $((16 * M)) "$src" "$dev" || fail "baseline data differs"

exec 7<>"$dev"
bg_dd kill if="$src" bs=1M count=48 seek=16 skip=16
for ((i = 0; i < 3000; i++)); do
	[ "$(stat_of nbd_inflight)" -gt 0 ] && break
	sleep 0.01
done
[ "$(stat_of nbd_inflight)" -gt 0 ] || fail "no NBD command in flight to kill the server under"
info "killing nbdkit with $(stat_of nbd_inflight) commands in flight"
t0=$(date +%s)
kill -KILL "$SRV_PID"
wait_gone 10 "$SRV_PID" || fail "nbdkit survived SIGKILL"
rm -f "$sock"
bg_wait_failed kill 60
out=$(timeout 60 "$ff" 7) || fail "fsync_fd hung or failed: $out"
assert_eq "fsync of a held descriptor while the server is gone" EIO "$out"
elapsed=$(($(date +%s) - t0))
# about the timeout; late only as a busy machine is late
[ "$elapsed" -le 60 ] || fail "failing took $elapsed s (timeout is 2 s)"
info "writer and fsync failed within $elapsed s"
assert_live "$MNT"
assert_eq "st_size while the server is gone" $((256 * M)) "$(stat -c %s "$dev")"
pid_alive "$DAEMON_PID" || fail "the daemon died"
grep -q "connection 0 to $uri: lost" "$LOG" || fail "the daemon log does not say the connection was lost"
[ "$(stat_of nbd_drops)" -ge 1 ] || fail "nbd_drops is $(stat_of nbd_drops)"

info "server back on the same socket"
start_nbdkit
wait_stat nbd_reconnects 1 60
grep -q "connection 0 to $uri: reconnected" "$LOG" || fail "the daemon log does not say it reconnected"
# The cache's flusher retries the data left dirty (its backoff is at most 5 s).
wait_clean 60
# A retry that failed while the server was gone is an error nobody has seen
# yet, and the kernel's errseq rule reports such an error to a new opener's
# fsync too (dd's below): the held descriptor sees it first (reported once),
# then it and every later opener are clean.
out=$("$ff" 7)
[ "$out" = OK ] || out=$("$ff" 7)
assert_eq "fsync of the held descriptor after the reconnect" OK "$out"
ddev if="$src" of="$dev" bs=1M count=48 seek=16 skip=16 conv=notrunc,fsync
assert_eq "fsync of the held descriptor after the rewrite" OK "$("$ff" 7)"
exec 7>&-
cmp -n $((64 * M)) "$src" "$dev" || fail "data differs after the reconnect"
stop_blkfs "$MNT"
cmp -n $((64 * M)) "$src" "$img" || fail "the image differs after blkfs umount"
kill_pids "$SRV_PID"

# ---- 2. hung server: the timeout

info "=== server hung (SIGSTOP)"
start_nbdkit delay-write=30ms
start_blkfs "[cache]
size = 64M

[device d]
backend = nbd
uri = $uri
timeout = 1s"
dev=$MNT/d
cmp -n $((64 * M)) "$src" "$dev" || fail "data differs after remount"
bg_dd hang if=/dev/zero bs=1M count=32 seek=100
for ((i = 0; i < 3000; i++)); do
	[ "$(stat_of nbd_inflight)" -gt 0 ] && break
	sleep 0.01
done
[ "$(stat_of nbd_inflight)" -gt 0 ] || fail "no NBD command in flight to stop the server under"
t0=$(date +%s)
kill -STOP "$SRV_PID"
bg_wait_failed hang 60
elapsed=$(($(date +%s) - t0))
[ "$elapsed" -le 60 ] || fail "failing took $elapsed s (timeout is 1 s)"
[ "$(stat_of nbd_timeouts)" -ge 1 ] || fail "nbd_timeouts is $(stat_of nbd_timeouts)"
grep -q "no reply for 1000 ms" "$LOG" || fail "the daemon log does not name the timeout"
kill -CONT "$SRV_PID"
# nbdkit 1.32 may abort when it resumes a reply on the connection blkfs
# closed meanwhile ("raw_send_socket: Assertion `sock >= 0' failed"): its
# own bug, not the case under test. Then it is started again (the image
# keeps what it stored). Waited for: blkfs reconnected and wrote back its
# dirty data with the server still alive, or the server's death.
resumed() {
	pid_alive "$SRV_PID" || return 0
	[ "$(stat_of nbd_reconnects)" -ge 1 ] && clean >/dev/null && pid_alive "$SRV_PID" && return 0
	echo "nbd_reconnects $(stat_of nbd_reconnects), $(clean)"
	return 1
}
wait_until 60 "blkfs to reconnect and write back after SIGCONT (or nbdkit to die)" resumed
if ! pid_alive "$SRV_PID"; then
	info "nbdkit died after SIGCONT ($(grep -m1 -o 'Assertion.*' "$TDIR/nbdkit.log" || echo 'no message')); starting it again"
	start_nbdkit
fi
wait_stat nbd_reconnects 1 60
wait_clean 60
# As in case 1: a retry that failed after the hung dd's fsync (while the
# server is stopped and until the reconnect, which a busy machine makes
# longer) is an error nobody has seen yet, which a new opener's fsync
# reports once (then it is clean), else the rewrite's fsync would get it.
exec 7<>"$dev"
out=$("$ff" 7)
[ "$out" = OK ] || {
	assert_eq "first fsync after the reconnect (OK, or the outage's error once)" EIO "$out"
	out=$("$ff" 7)
}
assert_eq "fsync after the reconnect" OK "$out"
exec 7>&-
ddev if="$src" of="$dev" bs=1M count=32 seek=100 conv=notrunc,fsync
cmp_range "$src" 0 "$dev" $((100 * M)) $((32 * M))
stop_blkfs "$MNT"
cmp_range "$src" 0 "$img" $((100 * M)) $((32 * M))
cmp -n $((64 * M)) "$src" "$img" || fail "the first 64 MiB of the image changed"
kill_pids "$SRV_PID"
