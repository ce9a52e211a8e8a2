#!/usr/bin/env bash
# tests/tsan/rbd.sh: the daemon built with ThreadSanitizer (make tsan runs it
# with BLKFS=build-tsan/blkfs) on an rbd device, against a throw-away Ceph
# cluster of its own (tests/ceph/cluster, stopped at exit); skips (77)
# without the Ceph binaries. About TSAN_RBD_TIME (15) seconds of concurrent
# fio (buffered psync and O_DIRECT libaio, crc32c verify), dd with fsync,
# reads and .sys reads (blkfs_stat, snapshots: rbd_diff_iterate2), with
# `blkfs resize` (blkfs's own) and `rbd resize` (another client's: the
# header watch thread) in the middle; then the OSD stopped for longer than
# `timeout` (kill -STOP) under a writer, so that I/O times out and the
# device goes down and up again (the probe thread); then `blkfs umount`.
# librbd and librados are not instrumented: what TSan says from inside
# them is suppressed by library name (tests/tsan/tsan.supp, with why).
# Any other report fails the test.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../integ/lib.sh
. "$(dirname "$0")/../integ/lib.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
require_helper fsync_fd
rbd_require
require fio dd
T=${TSAN_RBD_TIME:-15}
M=$((1 << 20))
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1} log_path=$TDIR/tsan"

tsan_reports() {
	local f
	for f in "$TDIR"/tsan.*; do
		[ -s "$f" ] && echo "$f"
	done
	return 0
}
check_reports() {
	if [ -n "$(tsan_reports)" ]; then
		cat "$TDIR"/tsan.* >&2
		fail "ThreadSanitizer reported $1 (above)"
	fi
}

# A report stops the daemon (halt_on_error): a mount, an I/O or the
# unmount then fails, and the report is what says why.
fail() {
	[ -z "$(tsan_reports)" ] || cat "$TDIR"/tsan.* >&2
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

rbd_cluster_start own
img=$(rbd_name tsan)
rbd_create "$img" 96M
start_blkfs "$(rbd_conf "$img" 'timeout = 3s
queue_depth = 8' 'dirty_background = 2M
dirty_limit = 8M
dirty_expire = 200ms')"
dev=$MNT/d
check_reports "at mount"
"$BLKFS" snapshot "$MNT" d s0 || fail "blkfs snapshot failed"

info "fio (buffered and O_DIRECT, verify), dd + fsync, reads, .sys, two resizes, for ${T}s"
pids=()
fio --name=buf --filename="$dev" --rw=randrw --rwmixread=50 --ioengine=psync \
	--bsrange=512-64k --blockalign=512 --numjobs=2 --size=16M --offset_increment=16M \
	--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" --fallocate=none \
	--group_reporting --output="$TDIR/fio-buf.out" &
pids+=($!)
fio --name=dio --filename="$dev" --rw=randwrite --ioengine=libaio --direct=1 \
	--iodepth=16 --bsrange=4k-128k --blockalign=4k --serialize_overlap=1 --size=16M --offset=32M \
	--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" --fallocate=none \
	--output="$TDIR/fio-dio.out" &
pids+=($!)
end=$((SECONDS + T))
i=0 broke= resized=0
while [ "$SECONDS" -lt "$end" ] && [ -z "$broke" ]; do
	i=$((i + 1))
	{
		ddev if=/dev/urandom of="$dev" bs=64K count=8 seek=$((768 + i % 128)) conv=notrunc,fsync &&
			dd if="$dev" of=/dev/null bs=1M count=4 skip=$((56 + i % 8)) status=none &&
			cat "$MNT/.sys/d/blkfs_stat" "$MNT/.sys/d/snapshots" >/dev/null &&
			"$BLKFS" stat "$MNT" >/dev/null
	} || broke="round $i failed"
	if [ "$resized" = 0 ] && [ "$SECONDS" -ge $((end - T / 2)) ]; then
		resized=1
		"$BLKFS" resize "$MNT" d 112M >/dev/null || broke="blkfs resize failed"
		timeout 60 rbd resize --no-progress --size 128M "rbd/$img" >/dev/null 2>&1 ||
			broke="rbd resize failed"
	fi
	[ -z "$(tsan_reports)" ] || broke="reports"
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=$?
done
check_reports "under I/O"
[ -z "$broke" ] || fail "dd, fsync, reads, .sys or resize: $broke"
[ "$rc" -eq 0 ] || fail "fio exited $rc"
wait_until 30 "the size rbd resize set" sh -c "[ \$(stat -c %s '$dev') = $((128 * M)) ]"
info "$i rounds; $(grep -hE 'err=' "$TDIR"/fio-*.out | tr -s ' ' | tr '\n' ' ')"

info "the OSD stopped under a writer (timeout = 3s): down, probed, up"
exec 7<>"$dev"
kill -STOP "$OSD_PID"
ddev if=/dev/urandom of="$dev" bs=1M count=2 seek=100 conv=notrunc
out=$(watchdog 60 "$MNT" "fsync with the OSD stopped" "$BLKFS_TESTBIN/fsync_fd" 7) ||
	{ kill -CONT "$OSD_PID"; fail "fsync_fd: $out"; }
ddev if=/dev/urandom of="$dev" bs=64K count=4 seek=1700 conv=notrunc
cat "$MNT/.sys/d/blkfs_stat" >/dev/null
kill -CONT "$OSD_PID"
[ "$out" = EIO ] || fail "fsync with the OSD stopped gave '$out', not EIO"
wait_until 60 "fsync succeeds once the OSD runs again" \
	sh -c "[ \"\$('$BLKFS_TESTBIN/fsync_fd' 7)\" = OK ]"
exec 7>&-
grep -E '^rbd_(errors|downs|fast_fails) ' "$MNT/.sys/d/blkfs_stat" | tr '\n' ' '
echo
check_reports "around the outage"
stop_blkfs
check_reports "at unmount"
info "no ThreadSanitizer reports"
