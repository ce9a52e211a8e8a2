#!/usr/bin/env bash
# integ-timeout: 300
# rbd_outage.sh: the OSD stopped (kill -STOP) and continued (kill -CONT)
# under a running writer, on a throw-away Ceph cluster of this test's own
# (tests/ceph/cluster, stopped at exit: the shared one's OSD is nobody's to
# stop). With `timeout = 5s`:
#  - while the OSD is stopped, fsync fails with EIO within timeout + 5 s of
#    the stop and the data stays dirty (dirty_bytes > 0, rbd_errors > 0);
#    before the fix in rbd.c (the top, "down") it took twice `timeout`: the
#    fsync waited for the writeback in flight to time out, then wrote the
#    same data again and waited for that to time out;
#  - a `stat` of the mount and a read of .sys/d/blkfs_stat answer within
#    1 s throughout (a prober times each, every 0.2 s, from before the stop
#    to after the first good fsync);
#  - after -CONT, the next fsync succeeds within 30 s;
#  - after a remount every acknowledged byte is in the image (rbd export):
#    crash_writer's records up to its last acknowledged fsync (it stops at
#    its first failed one), and up to 16 MiB a second writer wrote across the
#    outage (until the fsync after -CONT), acknowledged by the last fsync.
# BLKFS_RBD_DIAG_LOG=FILE: append the timings and the cluster's state
# (rbd_diag) after the outage to FILE (for repeated runs).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
require_helper crash_writer fsync_fd
rbd_require
require dd cmp python3

M=$((1 << 20))
TMO=5
src=$TDIR/src
mkdata "$src" $((16 * M))
now_ms() { echo $(($(date +%s%N) / 1000000)); }

rbd_cluster_start own
img=$(rbd_name out)
rbd_create "$img" 64M
start_blkfs "$(rbd_conf "$img" "timeout = ${TMO}s")"
dev=$MNT/d
stat=$MNT/.sys/d/blkfs_stat
dd if="$dev" of="$TDIR/base" bs=1M count=16 status=none

# the prober: a stat of the mount and a read of .sys, each timed (ms), in
# one process (a fork per probe took over a second at nice 19 beside
# stress-ng: what was timed would be the fork)
prober() {
	python3 -u - "$MNT" "$stat" "$TDIR/probe.stop" <<'PY'
import os, sys, time
mnt, sysf, stop = sys.argv[1:4]
while not os.path.exists(stop):
    for what, f in (("stat", lambda: os.stat(mnt)), ("sys", lambda: open(sysf, "rb").read())):
        t0 = time.monotonic()
        try:
            f()
        except OSError as e:
            print(what, "failed", e)
        print(what, int((time.monotonic() - t0) * 1000))
    time.sleep(0.2)
PY
}
prober >"$TDIR/probe.log" 2>&1 &
ppid=$!
_BGPIDS+=("$ppid")

# writer 1: crash_writer over the first 16 MiB, logging its acknowledged fsyncs
"$BLKFS_TESTBIN/crash_writer" write "$dev" 5 $((16 * M)) "$TDIR/writer.log" 2>"$TDIR/writer.err" &
wpid=$!
_BGPIDS+=("$wpid")
# writer 2: src into 32M..48M, 64 KiB at a time, across the outage, until
# told to stop (TDIR/w2.stop); TDIR/w2.done counts the chunks written. Not
# a fixed count: beside stress-ng --cpu 2 this test at nice 19 gets a few
# percent of a CPU, and 256 dd took longer than 120 s
(
	for ((i = 0; i < 256; i++)); do
		[ ! -e "$TDIR/w2.stop" ] || break
		dd if="$src" of="$dev" bs=64K count=1 skip=$i seek=$((512 + i)) conv=notrunc,nocreat status=none ||
			exit 1
		echo $((i + 1)) >"$TDIR/w2.done"
		sleep 0.05
	done
) &
w2pid=$!
_BGPIDS+=("$w2pid")
wait_until 60 "crash_writer acknowledged 10 fsyncs" \
	sh -c "[ \$(grep -c '^synced' '$TDIR/writer.log' 2>/dev/null || echo 0) -ge 10 ]"

exec 7<>"$dev"
kill -STOP "$OSD_PID"
stopped=$(now_ms)
info "OSD $OSD_PID stopped"
# written while the OSD is stopped: dirty until it runs again
dd if="$src" of="$dev" bs=1M count=1 skip=15 seek=48 conv=notrunc,nocreat status=none
t0=$(now_ms)
out=$(watchdog 120 "$MNT" "fsync with the OSD stopped" "$BLKFS_TESTBIN/fsync_fd" 7) ||
	{ kill -CONT "$OSD_PID"; fail "fsync_fd: $out"; }
t_fsync=$(($(now_ms) - t0))
t_eio=$(($(now_ms) - stopped))
[ "$out" = EIO ] || { kill -CONT "$OSD_PID"; fail "fsync with the OSD stopped gave '$out' after $t_fsync ms, not EIO"; }
# from the stop, not only from the fsync: the dd before it may wait too
[ "$t_eio" -le $(((TMO + 5) * 1000)) ] ||
	{ kill -CONT "$OSD_PID"; fail "fsync with the OSD stopped failed $t_eio ms after the stop ($t_fsync ms in fsync; at most $((TMO + 5)) s)"; }
dirty=$(awk '$1 == "dirty_bytes" { print $2 }' "$stat")
errs=$(awk '$1 == "rbd_errors" { print $2 }' "$stat")
info "OSD stopped: fsync EIO $t_eio ms after the stop ($t_fsync ms in fsync), dirty_bytes $dirty, rbd_errors $errs"
[ "$errs" -gt 0 ] || { kill -CONT "$OSD_PID"; fail "rbd_errors is 0 after a failed fsync: $(cat "$stat")"; }
[ "$dirty" -gt 0 ] || { kill -CONT "$OSD_PID"; fail "the failed data is not kept dirty: $(cat "$stat")"; }
# a second fsync fails too while the OSD stays stopped
out=$(watchdog 120 "$MNT" "the second fsync with the OSD stopped" "$BLKFS_TESTBIN/fsync_fd" 7) ||
	{ kill -CONT "$OSD_PID"; fail "fsync_fd: $out"; }
[ "$out" = EIO ] || { kill -CONT "$OSD_PID"; fail "the second fsync with the OSD stopped gave '$out', not EIO"; }
kill -CONT "$OSD_PID"
t_stopped=$(($(now_ms) - stopped))
info "OSD continued after $t_stopped ms"

# after -CONT: the next fsync succeeds within 30 s
t0=$(now_ms)
while :; do
	out=$(watchdog 120 "$MNT" "fsync after the OSD's -CONT" "$BLKFS_TESTBIN/fsync_fd" 7) || fail "fsync_fd: $out"
	[ "$out" != OK ] || break
	[ $(($(now_ms) - t0)) -le 30000 ] || fail "no fsync succeeded within 30 s of the OSD's -CONT (last: $out)"
	sleep 0.2
done
t_ok=$(($(now_ms) - t0))
info "fsync OK $t_ok ms after -CONT"
touch "$TDIR/w2.stop"
# one dd of 64 KiB at most is left: a writer blocked on the mount is a hang
wait_until 120 "writer 2 to stop after -CONT" sh -c "! kill -0 $w2pid 2>/dev/null"
wait "$w2pid" || fail "writer 2 failed"
w2=$(cat "$TDIR/w2.done" 2>/dev/null || echo 0)
kill "$wpid" 2>/dev/null || true
wait "$wpid" 2>/dev/null || true
out=$(watchdog 60 "$MNT" "the last fsync" "$BLKFS_TESTBIN/fsync_fd" 7) || fail "fsync_fd: $out"
[ "$out" = OK ] || fail "the fsync after the writers gave '$out'"
exec 7>&-
touch "$TDIR/probe.stop"
wait "$ppid" || true

# every probe answered within 1 s
grep -q 'failed' "$TDIR/probe.log" && fail "a probe failed: $(grep -m3 failed "$TDIR/probe.log" | tr '\n' ' ')"
n=$(grep -c '^stat ' "$TDIR/probe.log")
[ "$n" -ge 10 ] || fail "only $n probes ran"
max_stat=$(awk '$1 == "stat" && $2 > m { m = $2 } END { print m + 0 }' "$TDIR/probe.log")
max_sys=$(awk '$1 == "sys" && $2 > m { m = $2 } END { print m + 0 }' "$TDIR/probe.log")
info "$n probes: stat of the mount at most $max_stat ms, read of .sys at most $max_sys ms"
[ "$max_stat" -le 1000 ] || fail "a stat of the mount took $max_stat ms (at most 1000)"
[ "$max_sys" -le 1000 ] || fail "a read of .sys took $max_sys ms (at most 1000)"

acked=$(awk '/^synced/ { n = $2 } END { print n + 0 }' "$TDIR/writer.log")
stop_blkfs "$MNT"
t0=$(now_ms)
rbd_export "$img" "$TDIR/export.img"
t_export=$(($(now_ms) - t0))
out=$("$BLKFS_TESTBIN/crash_writer" verify "$TDIR/export.img" 5 $((16 * M)) "$TDIR/writer.log" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "crash_writer's acknowledged records are missing from the image"; }
[ "$w2" -gt 0 ] || fail "writer 2 wrote nothing"
info "rbd export ($t_export ms), writer 2: $w2 chunks of 64 KiB, crash_writer ($acked records acknowledged): $out"
cmp -n $((w2 * 64 * 1024)) "$src" <(dd if="$TDIR/export.img" bs=1M skip=32 count=16 status=none) ||
	fail "writer 2's data (across the outage, $w2 chunks of 64 KiB) is not in the image"
cmp -n $((1 * M)) <(dd if="$src" bs=1M skip=15 count=1 status=none) \
	<(dd if="$TDIR/export.img" bs=1M skip=48 count=1 status=none) ||
	fail "the data written while the OSD was stopped is not in the image"
# and through blkfs after a remount
remount_blkfs "$MNT"
cmp -n $((w2 * 64 * 1024)) "$src" <(dd if="$dev" bs=1M skip=32 count=16 status=none) ||
	fail "writer 2's data differs through blkfs after the remount"
out=$("$BLKFS_TESTBIN/crash_writer" verify "$dev" 5 $((16 * M)) "$TDIR/writer.log" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "crash_writer's acknowledged records are missing through blkfs"; }
stop_blkfs "$MNT"
if [ -n "${BLKFS_RBD_DIAG_LOG:-}" ]; then
	{
		echo "=== $(date -u +%FT%TZ) rbd_outage: fsync EIO ${t_eio} ms after the stop (${t_fsync} ms in fsync), OSD stopped ${t_stopped} ms," \
			"fsync OK ${t_ok} ms after -CONT, export ${t_export} ms, $n probes max stat ${max_stat} ms" \
			"max .sys ${max_sys} ms, dirty ${dirty}, rbd_errors ${errs}, ${acked} records acked, writer 2 ${w2} chunks, load $(cut -d' ' -f1-3 /proc/loadavg)"
		rbd_diag 2>&1
	} >>"$BLKFS_RBD_DIAG_LOG"
fi
info "ok"
