#!/usr/bin/env bash
# async.sh: requests that wait for the device do not hold a thread (replies
# from completion), on devices with latency on every op (the delay filter):
#  - fio --verify=crc32c, mixed random reads and writes at queue depth 64,
#    O_DIRECT (libaio) and buffered (8 psync jobs), through a 16 MiB cache,
#    on ram and on aio over a loop device; more requests were in flight at
#    once than the daemon has threads (requests_in_flight_max: 16 threads
#    serving requests to the end could never have more than 16);
#  - a second device keeps serving while the first has 64 requests parked
#    on a slow backend (5 s per read: all 64 stay parked through a sample,
#    where with 100 ms a sample every 0.1 s could meet the moment the
#    whole batch completes at once, every time): fio verify on it completes while
#    the first still shows its 64 in flight, and none of its requests had
#    to wait for a slot.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio awk losetup

DELAY="filters = delay
delay.read = 1ms-3ms
delay.write = 1ms-3ms
delay.flush = 2ms
delay.discard = 2ms"

stat_of() {	# stat_of MNT DEV NAME
	awk -v k="$3" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$1/.sys/$2/blkfs_stat"
}

# fio_verify NAME FILE ARGS...: fio with crc32c verification; fails the test on an error.
fio_verify() {
	local name=$1 file=$2 rc
	shift 2
	fio --name="$name" --filename="$file" --verify=crc32c --verify_fatal=1 --do_verify=1 \
		--verify_state_save=0 --randrepeat=1 --fallocate=none --group_reporting \
		--output="$TDIR/$name.out" "$@" && rc=0 || rc=$?
	grep -E 'err=|READ:|WRITE:' "$TDIR/$name.out" | sed 's/^/    /' || true
	[ "$rc" -eq 0 ] || { cat "$TDIR/$name.out"; fail "fio $name exited $rc"; }
	grep -q 'err= 0' "$TDIR/$name.out" || fail "fio $name: no 'err= 0'"
}

# run_mixed NAME: the two fio passes on $MNT/$DEV, then the most requests in flight at once.
run_mixed() {
	local name=$1 max
	assert_live "$MNT"
	info "$name: libaio O_DIRECT, randrw 4k-16k, QD64, 16 MiB"
	fio_verify "$name-direct" "$MNT/$DEV" --ioengine=libaio --direct=1 --iodepth=64 \
		--rw=randrw --bsrange=4k-16k --blockalign=4k --size=16M --offset=0
	max=$(stat_of "$MNT" "$DEV" requests_in_flight_max)
	info "$name: at most $max requests in flight at once"
	[ "$max" -gt 16 ] || fail "$name: never more than $max requests in flight (16 threads' worth)"
	info "$name: psync buffered, randrw 4k, 8 jobs x 4 MiB"
	fio_verify "$name-buffered" "$MNT/$DEV" --ioengine=psync --rw=randrw --bs=4k \
		--numjobs=8 --size=4M --offset=32M --offset_increment=4M
}

# 1. ram behind delay
start_blkfs "[cache]
size = 16M
[device r0]
backend = ram
size = 128M
logical_block_size = 4096
physical_block_size = 4096
$DELAY"
DEV=r0
run_mixed ram
stop_blkfs

# 2. aio over a loop device behind delay
new_loop 128M --sector-size 4096
start_blkfs "[cache]
size = 16M
[device d0]
backend = aio
path = $LOOP
$DELAY"
DEV=d0
run_mixed aio
stop_blkfs
detach_loop "$LOOP"

# 3. a slow device with 64 requests parked does not hold up another
start_blkfs "[cache]
size = 32M
[device slow]
backend = ram
size = 64M
logical_block_size = 4096
filters = delay
delay.read = 5s
[device fast]
backend = ram
size = 64M
logical_block_size = 4096"
dd if=/dev/urandom of="$MNT/slow" bs=1M count=64 oflag=direct conv=notrunc,nocreat status=none
# Over FUSE over io_uring a CPU's requests, parked ones included, hold that
# CPU's ring entries (uring_queue_depth, 64): 64 parked reads from one CPU
# would take them all, and the fast device's requests from that CPU would
# wait in the kernel for an entry. So 32 parked there, half the entries.
# The mount's own word on its transport, not BLKFS_TRANSPORT: with the
# kernel's switch on (a global one, which another run may have left on),
# the default transport takes the ring too.
PARKED=64
grep -qx 'transport uring' <(timeout 30 cat "$MNT/.sys/.transport") && PARKED=32
WANT=$((PARKED - 4))
fio --name=parked --filename="$MNT/slow" --ioengine=libaio --direct=1 --iodepth=$PARKED \
	--rw=randread --bs=4k --size=64M --runtime=240 --time_based \
	--output="$TDIR/parked.out" &
slow_pid=$!
for ((i = 0; i < 600; i++)); do
	n=$(stat_of "$MNT" slow requests_in_flight)
	[ "$n" -ge "$WANT" ] && break
	sleep 0.1
done
[ "$n" -ge "$WANT" ] ||
	fail "the slow device never had $WANT requests in flight (60 s; last seen $n)"
info "slow: $(stat_of "$MNT" slow requests_in_flight) requests in flight; fio verify on fast"
fio_verify fast "$MNT/fast" --ioengine=libaio --direct=1 --iodepth=16 --rw=randrw \
	--bs=4k --size=32M
inflight=$(stat_of "$MNT" slow requests_in_flight)
[ "$inflight" -ge "$WANT" ] || fail "the slow device's requests drained while fast ran ($inflight left)"
assert_eq "fast's requests that waited for a slot" 0 "$(stat_of "$MNT" fast request_slot_waits)"
kill -INT "$slow_pid" 2>/dev/null || true
wait "$slow_pid" || true
stop_blkfs
