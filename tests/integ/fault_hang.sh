#!/usr/bin/env bash
# fault_hang.sh: a hung I/O in a real mount (fault.hang over ram).
#  - hang_timeout = 3s: a reader of a block not in the cache blocks, the
#    hang shows in .sys (hung = 1, served while the reader waits), and the
#    read completes with the right data after 3 s (not before, not much
#    after).
#  - No timeout: a reader blocks until `echo 1 > .sys/DEV/fault/release`
#    (it is still blocked 2 s in), then completes with the right data.
#  - `echo EIO > release`: the blocked reader gets EIO.
#  - A write hung at writeback: fsync waits for it, returns once released.
# The .sys reads and a cached read during the hang show the daemon serving
# meanwhile; other devices beside a hung one are async.sh's to show.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk date
require_helper fsync_fd

M=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((8 * M))

start_blkfs "[device r0]
backend = ram
size = 32M
logical_block_size = 512
physical_block_size = 4096
filters = fault
fault.ops = read
fault.hang = yes
fault.hang_timeout = 3s"
dev=$MNT/r0
sys=$MNT/.sys/r0/fault
[ -d "$sys" ] || fail "no $sys"
assert_eq hang 1 "$(cat "$sys/hang")"
assert_eq hang_timeout 3s "$(cat "$sys/hang_timeout")"
assert_eq hung 0 "$(cat "$sys/hung")"
ddev if="$src" of="$dev" bs=1M count=8 conv=notrunc,fsync

bstat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/r0/blkfs_stat"
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# reader BLOCK OUT: read 4 KiB block BLOCK with O_DIRECT (the backend, not
# the cache) into OUT in the background; sets RPID. Its exit status goes to
# OUT.rc, its finish time (ms) to OUT.t.
reader() {
	local blk=$1 out=$2
	rm -f "$out" "$out.rc" "$out.t"
	(
		rc=0
		dd if="$dev" of="$out" bs=4096 skip="$blk" count=1 iflag=direct status=none \
			2>"$out.err" || rc=$?
		now_ms >"$out.t"
		echo "$rc" >"$out.rc"
	) &
	RPID=$!
}

# hung_is N: the filter holds N I/Os; else says how many.
hung_is() {
	local h
	h=$(cat "$sys/hung")
	[ "$h" = "$1" ] || { echo "hung $h"; return 1; }
}

# wait_hung N: the filter holds N I/Os (within a minute, for a busy machine).
wait_hung() {
	wait_until 60 "the filter to hold $1 I/Os" hung_is "$1"
}

# same_block OUT BLOCK: OUT holds block BLOCK of the data written
same_block() {
	cmp "$1" <(dd if="$src" bs=4096 skip="$2" count=1 status=none) ||
		fail "the read of block $2 after the hang returned other data"
}

# ---------------------------------------------------------------------------
info "a read hangs and goes on by itself after hang_timeout (3 s)"
printf '0\n' >"$sys/after"
t0=$(now_ms)
reader 100 "$TDIR/r1"
wait_hung 1
sleep 1
# (a busy machine may have held this shell past the timeout: then it is late, not early)
[ ! -e "$TDIR/r1.rc" ] || [ $(($(cat "$TDIR/r1.t") - t0)) -ge 3000 ] ||
	fail "the reader finished $(($(cat "$TDIR/r1.t") - t0)) ms into a 3 s hang"
# the daemon still answers: .sys, and a read of a block the cache holds
assert_eq "fault_hung_ios during the hang" 1 "$(bstat fault_hung_ios)"
dd if="$dev" of=/dev/null bs=4096 skip=5 count=1 status=none || fail "a read of a cached block failed during the hang"
wait "$RPID"
assert_eq "reader's exit status" 0 "$(cat "$TDIR/r1.rc")"
took=$(($(cat "$TDIR/r1.t") - t0))
info "the reader was blocked for $took ms"
[ "$took" -ge 3000 ] || fail "the hung read returned after $took ms, before the 3 s timeout"
# late only as a busy machine is late (that the timeout ended it, the stat says)
[ "$took" -lt 33000 ] || fail "the hung read returned after $took ms, long after the 3 s timeout"
same_block "$TDIR/r1" 100
assert_eq hung 0 "$(cat "$sys/hung")"
assert_eq fault_hangs_timed_out 1 "$(bstat fault_hangs_timed_out)"

# ---------------------------------------------------------------------------
info "no timeout: a read hangs until released"
printf '0\n' >"$sys/hang_timeout"
printf '0\n' >"$sys/after"
reader 200 "$TDIR/r2"
wait_hung 1
sleep 2
[ ! -e "$TDIR/r2.rc" ] || fail "the reader finished with no timeout and no release"
t0=$(now_ms)
printf '1\n' >"$sys/release"
wait "$RPID"
took=$(($(cat "$TDIR/r2.t") - t0))
assert_eq "reader's exit status after release" 0 "$(cat "$TDIR/r2.rc")"
[ "$took" -lt 30000 ] || fail "the reader took $took ms to finish after the release"
same_block "$TDIR/r2" 200
assert_eq fault_hangs_released 1 "$(bstat fault_hangs_released)"

# ---------------------------------------------------------------------------
info "released with EIO: the reader gets EIO"
printf '0\n' >"$sys/after"
reader 300 "$TDIR/r3"
wait_hung 1
printf 'EIO\n' >"$sys/release"
wait "$RPID"
[ "$(cat "$TDIR/r3.rc")" != 0 ] || fail "the reader of an I/O released with EIO succeeded"
grep -q "Input/output error" "$TDIR/r3.err" || fail "the reader's error is not EIO: $(cat "$TDIR/r3.err")"
assert_eq hung 0 "$(cat "$sys/hung")"

# ---------------------------------------------------------------------------
info "a write hung at writeback: fsync waits for it"
printf 'write\n' >"$sys/ops"
printf '0\n' >"$sys/after"
exec 7<>"$dev"
ddev if="$src" of="$dev" bs=1M count=1 seek=16 conv=notrunc
(
	rc=0
	"$BLKFS_TESTBIN/fsync_fd" 7 >"$TDIR/fs.out" || rc=$?
	echo "$rc" >"$TDIR/fs.rc"
) &
fpid=$!
wait_hung 1
sleep 1
[ ! -e "$TDIR/fs.rc" ] || fail "fsync returned while its write was hung"
printf 'all\n' >"$sys/release"
wait "$fpid"
assert_eq "fsync after the release" OK "$(cat "$TDIR/fs.out")"
exec 7>&-
cmp -n "$M" "$src" <(dd if="$dev" bs=1M skip=16 count=1 iflag=direct status=none) ||
	fail "the released write did not land"

info "hangs: $(bstat fault_hangs), timed out $(bstat fault_hangs_timed_out), released $(bstat fault_hangs_released)"
stop_blkfs
