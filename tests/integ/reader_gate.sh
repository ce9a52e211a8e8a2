#!/usr/bin/env bash
# reader_gate.sh: one worker at a time waits in read(2) of /dev/fuse, the
# one that served last serves next, more read only while requests queue,
# and a handler that waits never leaves the connection without a reader
# (fuse/rawio.c, the reader gate; counters in .sys/.transport).
#  - 4000 direct 4 KiB writes, one at a time (dd): almost all taken by the
#    worker that took the one before (dev_reader_switches under 10% of the
#    requests; with every worker in read(2), each request went to the
#    worker that had waited longest: nearly every one switched);
#  - fio at iodepth 32: requests queue, and a second worker reads beside
#    the first (dev_reads_beside or dev_reader_handoffs rise);
#  - a store to .sys/r0/size waits in its receiving thread (the freeze
#    waits for a read the fault filter holds): meanwhile every stat of the
#    mount and direct reads of another device are answered, and
#    dev_reader_rescues counts the parked worker that read in its place.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd fio awk timeout

start_blkfs "[mount]
transport = dev
[device r0]
backend = ram
size = 32M
logical_block_size = 4096
physical_block_size = 4096
filters = fault
fault.ops = read
fault.hang = yes
fault.hang_timeout = 0
[device r1]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096"
tr=$MNT/.sys/.transport
tstat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print "none" }' "$tr"
}
for k in dev_reader_switches dev_reads_beside dev_reader_handoffs dev_reader_rescues; do
	[ "$(tstat $k)" != none ] || fail ".sys/.transport has no $k"
done

# one request at a time
req0=$(tstat dev_requests) sw0=$(tstat dev_reader_switches)
ddev if=/dev/zero of="$MNT/r1" bs=4096 count=4000 oflag=direct conv=notrunc
req1=$(tstat dev_requests) sw1=$(tstat dev_reader_switches)
reqs=$((req1 - req0)) sw=$((sw1 - sw0))
info "4000 direct writes at QD1: $reqs requests, $sw taken by another worker than the last"
[ "$reqs" -ge 4000 ] || fail "dev_requests rose by $reqs for 4000 writes"
[ $((sw * 10)) -lt "$reqs" ] ||
	fail "$sw of $reqs requests at QD1 switched worker (at most 10% expected)"

# a queue
b0=$(($(tstat dev_reads_beside) + $(tstat dev_reader_handoffs)))
fio --name=gate --filename="$MNT/r1" --rw=randwrite --bs=4k --ioengine=libaio --iodepth=32 \
	--direct=1 --size=64M --runtime=2 --time_based --output=/dev/null
b1=$(($(tstat dev_reads_beside) + $(tstat dev_reader_handoffs)))
info "fio iodepth 32: reads beside another or handed off: $((b1 - b0)); readers at once, peak: $(tstat dev_readers_peak)"
[ "$b1" -gt "$b0" ] || fail "at iodepth 32 no worker read beside another (dev_reads_beside, dev_reader_handoffs)"

# a handler that waits: hold a read of r0, then a store to its size freezes it
sys=$MNT/.sys/r0/fault
printf '0\n' >"$sys/after"
dd if="$MNT/r0" of=/dev/null bs=4096 count=1 iflag=direct status=none &
_BGPIDS+=("$!")
for ((i = 0; i < 600; i++)); do
	[ "$(cat "$sys/hung")" = 1 ] && break
	sleep 0.1
done
assert_eq "reads the fault filter holds" 1 "$(cat "$sys/hung")"
resc0=$(tstat dev_reader_rescues)
(echo 64M >"$MNT/.sys/r0/size" 2>/dev/null || true) &
_BGPIDS+=("$!")
# each round: a stat and a direct read of r1 must be answered while the store
# waits; until a parked worker has read in the stuck one's place
for ((i = 0; i < 50; i++)); do
	timeout 20 stat "$MNT/r1" >/dev/null || fail "a stat of the mount was not answered while a handler waited"
	timeout 20 dd if="$MNT/r1" of=/dev/null bs=4096 count=4 iflag=direct status=none ||
		fail "a direct read of r1 was not answered while a handler of r0 waited"
	[ "$(tstat dev_reader_rescues)" -gt "$resc0" ] && break
	sleep 0.1
done
resc1=$(tstat dev_reader_rescues)
info "while a store to .sys/r0/size waited: dev_reader_rescues $resc0 -> $resc1"
[ "$resc1" -gt "$resc0" ] || fail "no parked worker read while a handler waited (dev_reader_rescues $resc0)"
echo 1 >"$sys/release"
wait
stop_blkfs
