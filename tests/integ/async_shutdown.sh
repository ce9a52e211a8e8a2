#!/usr/bin/env bash
# async_shutdown.sh: a mount goes away while requests are parked on a slow
# device (64 O_DIRECT reads in flight behind delay.read = 300ms, no thread
# holding any of them), in each of the three ways it can:
#  - `blkfs umount` refuses (EBUSY: the file is open) without touching the
#    parked requests, which all complete;
#  - SIGTERM to the daemon: it answers what is parked, writes back, exits 0;
#    fio sees its remaining requests fail (ENOTCONN) instead of hanging;
#  - the FUSE connection aborted (fusectl): the kernel fails the requests,
#    the daemon drops the replies it still makes, writes back and exits.
# Each time every byte written and fsynced before is in the aio image
# afterwards, and no process or mount is left (the ASan build runs this
# test too: nothing leaks at exit).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio awk cmp

odirect_dir || skip "no filesystem here takes O_DIRECT for the image file"
img=$ODIRECT_DIR/disk.img
ref=$TDIR/ref
MiB=$((1 << 20))
mkdata "$ref" $((32 * MiB))

conf="[cache]
size = 16M
[device d0]
backend = aio
path = $img
create = yes
size = 32M
logical_block_size = 4096
filters = delay
delay.read = 300ms"

stat_of() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/d0/blkfs_stat"
}

# park: fill the device (fsynced), then start 64 parked O_DIRECT reads.
park() {
	local i
	ddev if="$ref" of="$MNT/d0" bs=1M conv=notrunc,fsync
	fio --name=parked --filename="$MNT/d0" --ioengine=libaio --direct=1 --iodepth=64 \
		--rw=randread --bs=4k --size=32M --runtime=60 --time_based \
		--output="$TDIR/parked.out" >/dev/null 2>&1 &
	FIO_PID=$!
	for ((i = 0; i < 600; i++)); do
		[ "$(stat_of requests_in_flight)" -ge 60 ] && return 0
		sleep 0.1
	done
	fail "never 60 requests in flight in 60 s ($(stat_of requests_in_flight))"
}

# gone WHAT [dead]: the daemon has exited (within 30 s), the mount is gone
# (with "dead": an aborted connection's mount stays until unmounted, as the
# kernel leaves it) and the image holds the reference.
gone() {
	wait_gone 30 "$DAEMON_PID" || fail "the daemon is still there 30 s after $1"
	if [ "${2:-}" = dead ]; then
		while is_mounted "$MNT"; do umount -l "$MNT" 2>/dev/null || break; done
	fi
	! is_mounted "$MNT" || fail "$MNT still mounted after $1"
	unset "_PID_OF[$MNT]"
	timeout 60 tail --pid="$FIO_PID" -f /dev/null || fail "fio still hangs 60 s after $1"
	wait "$FIO_PID" || true
	cmp "$ref" "$img" || fail "the image differs from what was written after $1"
	info "$1: daemon gone, fio ended, image intact"
}

# 1. blkfs umount while requests are parked: EBUSY, the requests complete
start_blkfs "$conf"
park
out=$("$BLKFS" umount "$MNT" 2>&1) && fail "blkfs umount of a busy mount succeeded"
case $out in *busy*) ;; *) fail "blkfs umount of a busy mount: $out" ;; esac
is_mounted "$MNT" || fail "blkfs umount took the busy mount away"
kill -INT "$FIO_PID"
wait "$FIO_PID" || true
grep -q 'err= 0' "$TDIR/parked.out" || fail "fio's parked reads failed: $(grep err= "$TDIR/parked.out")"
assert_eq "requests in flight after fio" 0 "$(stat_of requests_in_flight)"
stop_blkfs

# 2. SIGTERM with requests parked
remount_blkfs "$MNT"
park
kill -TERM "$DAEMON_PID"
gone SIGTERM
grep -q '^ok d0 ' "$STATUS" || fail "status after SIGTERM: $(cat "$STATUS")"

# 3. the connection aborted with requests parked
remount_blkfs "$MNT"
park
abort_fuse "$MNT"
gone "an aborted connection" dead
