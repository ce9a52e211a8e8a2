#!/usr/bin/env bash
# tests/tsan/mount.sh: the daemon built with ThreadSanitizer (make tsan runs
# it with BLKFS=build-tsan/blkfs) under a short mount test: about TSAN_MOUNT_TIME
# (20) seconds of concurrent fio (buffered psync and O_DIRECT libaio, with
# crc32c verify), dd, fsync, discards, and .sys reads and writes (the live
# knobs of the cache and of the log and delay filters) on two ram devices
# and an aio image file (its queue, and O_DIRECT and cache misses done in the
# requesting thread), then `blkfs umount`. TSan reports go to $TDIR/tsan.PID (TSAN_OPTIONS
# log_path, added here) and, with halt_on_error=1, stop the daemon: any
# report file, or a report in the daemon's log, fails the test.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../integ/lib.sh
. "$(dirname "$0")/../integ/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require fio dd
T=${TSAN_MOUNT_TIME:-20}
if [ -w "$URING_PARAM" ]; then
	uring_set Y
	export BLKFS_TRANSPORT=uring BLKFS_URING_TEST=handoff=3
	info "over FUSE over io_uring (every third reply from another thread)"
else
	info "no FUSE over io_uring here ($URING_PARAM): over /dev/fuse"
fi
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1} log_path=$TDIR/tsan"

# tsan_reports: the report files TSan wrote, if any.
tsan_reports() {
	local f
	for f in "$TDIR"/tsan.*; do
		[ -s "$f" ] && echo "$f"
	done
	return 0
}

# the aio device, where a filesystem here takes O_DIRECT
aio_dev=
if odirect_dir; then
	aio_dev="
[device a0]
backend = aio
path = $ODIRECT_DIR/a0.img
create = yes
size = 64M
queue_depth = 8"
else
	info "no filesystem here takes O_DIRECT: no aio device"
fi

start_blkfs "[cache]
size = 16M
dirty_background = 2M
dirty_limit = 4M
dirty_expire = 200ms

[device r0]
backend = ram
size = 128M
logical_block_size = 512
physical_block_size = 4096
max_io = 256K
filters = log, delay
log.path = trace
delay.write = 0-300us
delay.read = 0-100us

[device r1]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096
$aio_dev"
if [ -n "$(tsan_reports)" ]; then
	cat "$TDIR"/tsan.* >&2
	fail "ThreadSanitizer reported at mount (above)"
fi

cd "$TDIR"
pids=()
info "fio on r0 (psync buffered + libaio direct, verify), r1 and a0 (if there), for ${T}s"
fio --name=buf --filename="$MNT/r0" --rw=randrw --rwmixread=50 --ioengine=psync \
	--bsrange=512-64k --blockalign=512 --numjobs=2 --size=32M --offset_increment=32M \
	--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" --fallocate=none \
	--group_reporting --output="$TDIR/fio-buf.out" &
pids+=($!)
fio --name=dio --filename="$MNT/r0" --rw=randwrite --ioengine=libaio --direct=1 \
	--iodepth=16 --bsrange=4k-128k --blockalign=4k --serialize_overlap=1 --size=32M --offset=64M \
	--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" --fallocate=none \
	--output="$TDIR/fio-dio.out" &
pids+=($!)
fio --name=r1 --filename="$MNT/r1" --rw=randrw --ioengine=psync --bs=4k --size=32M \
	--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" --fallocate=none \
	--output="$TDIR/fio-r1.out" &
pids+=($!)
if [ -n "$aio_dev" ]; then
	fio --name=a0dio --filename="$MNT/a0" --rw=randrw --ioengine=libaio --direct=1 \
		--iodepth=16 --bsrange=4k-64k --blockalign=4k --serialize_overlap=1 --size=24M \
		--verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based --runtime="$T" \
		--fallocate=none --output="$TDIR/fio-a0dio.out" &
	pids+=($!)
	fio --name=a0buf --filename="$MNT/a0" --rw=randrw --ioengine=psync --bs=4k --size=24M \
		--offset=32M --verify=crc32c --verify_fatal=1 --verify_state_save=0 --time_based \
		--runtime="$T" --fallocate=none --output="$TDIR/fio-a0buf.out" &
	pids+=($!)
	# one at a time, O_DIRECT: the caller waits for its own I/O when the
	# device is idle and fast (aio.c's aio_submit_wait), beside the others
	fio --name=a0qd1 --filename="$MNT/a0" --rw=randrw --ioengine=psync --direct=1 --bs=4k \
		--size=8M --offset=56M --verify=crc32c --verify_fatal=1 --verify_state_save=0 \
		--time_based --runtime="$T" --fallocate=none --output="$TDIR/fio-a0qd1.out" &
	pids+=($!)
fi

info "meanwhile: dd, fsync, discards, .sys knobs"
end=$((SECONDS + T))
sys=$MNT/.sys
i=0 broke=
while [ "$SECONDS" -lt "$end" ] && [ -z "$broke" ]; do
	i=$((i + 1))
	{
		ddev if=/dev/urandom of="$MNT/r1" bs=64K count=16 seek=$((512 + i % 256)) \
			conv=notrunc,fsync &&
			dd if="$MNT/r0" of=/dev/null bs=1M count=8 skip=$((96 + i % 24)) status=none &&
			"$BLKFS_TESTBIN/bdev_check" "$MNT/r1" punch \
				$(((48 << 20) + (i % 64) * 65536)) 65536 fsync >/dev/null &&
			echo $((4 * (1 + i % 64))) >"$sys/r0/queue/max_sectors_kb" &&
			echo $((128 * (i % 4))) >"$sys/r1/queue/read_ahead_kb" &&
			echo "$((i % 3))00us-400us" >"$sys/r0/delay/write" &&
			echo $((i % 2)) >"$sys/r0/log/enabled" &&
			cat "$sys/r0/stat" "$sys/r0/blkfs_stat" "$sys/r1/blkfs_stat" >/dev/null &&
			"$BLKFS" stat "$MNT" >/dev/null
	} || broke="round $i failed"
	[ -z "$(tsan_reports)" ] || broke="reports"
done
rc=0
for p in "${pids[@]}"; do
	wait "$p" || rc=$?
done
if [ -n "$(tsan_reports)" ]; then
	cat "$TDIR"/tsan.* >&2
	fail "ThreadSanitizer reported (above)"
fi
for f in "$TDIR"/fio-*.out; do
	grep -E 'err=|IOPS' "$f" | sed 's/^/    /' || true
done
[ -z "$broke" ] || fail "dd, fsync, punch or .sys: $broke"
[ "$rc" -eq 0 ] || fail "fio exited $rc"
info "$i rounds of dd, fsync, punch and .sys writes"
# A report at shutdown stops the daemon before its status file: the
# unmount then fails, and the report is what says why.
fail() {
	[ -z "$(tsan_reports)" ] || cat "$TDIR"/tsan.* >&2
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}
stop_blkfs
if [ -n "$(tsan_reports)" ]; then
	cat "$TDIR"/tsan.* >&2
	fail "ThreadSanitizer reported at unmount (above)"
fi
info "no ThreadSanitizer reports"
