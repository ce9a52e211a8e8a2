#!/usr/bin/env bash
# inline_replies.sh: a request the whole stack finishes at once is answered
# by the thread that received it; one that must wait is parked, and both
# happen on one device in the same moment.
#  - ram behind the fault filter, reads hung until released: a direct read
#    is held (requests_in_flight 1, fault's hung 1) while direct and
#    buffered writes and a cached read to the same device each count in
#    inline_replies, and parked_replies does not move;
#  - released, the read completes with the data written and counts in
#    parked_replies (its reply came from the releasing thread);
#  - a direct write over blocks the cache holds clean is inline too (the
#    completion drops the clean copy itself when nobody holds it), and a
#    read after it sees the new data.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk

M=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((4 * M))

start_blkfs "[device r0]
backend = ram
size = 32M
logical_block_size = 4096
physical_block_size = 4096
filters = fault
fault.ops = read
fault.hang = yes
fault.hang_timeout = 0"
dev=$MNT/r0
sys=$MNT/.sys/r0/fault
[ -d "$sys" ] || fail "no $sys"

bstat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print "none" }' "$MNT/.sys/r0/blkfs_stat"
}
[ "$(bstat inline_replies)" != none ] || fail "blkfs_stat has no inline_replies"
[ "$(bstat parked_replies)" != none ] || fail "blkfs_stat has no parked_replies"

# 4 MiB written through the cache and flushed (writes only: nothing hangs)
ddev if="$src" of="$dev" bs=1M count=4 conv=notrunc,fsync

# a direct read of a block past the written range: to the backend, held there
# (after = 0: the next read the filter sees is held, once)
printf '0\n' >"$sys/after"
rm -f "$TDIR/r.rc"
(
	rc=0
	dd if="$dev" of="$TDIR/r.out" bs=4096 skip=2048 count=1 iflag=direct status=none || rc=$?
	echo "$rc" >"$TDIR/r.rc"
) &
rpid=$!
_BGPIDS+=("$rpid")
# an event, not a time: the filter says when it holds the read (generous: load 10)
for ((i = 0; i < 600; i++)); do
	[ "$(cat "$sys/hung")" = 1 ] && break
	sleep 0.1
done
assert_eq "reads the fault filter holds" 1 "$(cat "$sys/hung")"
assert_eq "requests in flight with the read held" 1 "$(bstat requests_in_flight)"

inl0=$(bstat inline_replies) park0=$(bstat parked_replies)
# while the read is held: 8 direct writes, 8 buffered writes, 4 cached reads
ddev if="$src" of="$dev" bs=4096 count=8 seek=4096 oflag=direct conv=notrunc
ddev if="$src" of="$dev" bs=4096 count=8 seek=4200 conv=notrunc
dd if="$dev" of="$TDIR/cached" bs=4096 count=4 status=none
cmp "$TDIR/cached" <(head -c 16384 "$src") || fail "a cached read during the hang returned other data"
inl1=$(bstat inline_replies) park1=$(bstat parked_replies)
assert_eq "the read is still held" 1 "$(cat "$sys/hung")"
assert_eq "requests in flight after the inline ones" 1 "$(bstat requests_in_flight)"
[ "$((inl1 - inl0))" -ge 20 ] ||
	fail "inline_replies rose by $((inl1 - inl0)) for 20 requests the device finished at once (parked_replies $park0 -> $park1)"
assert_eq "parked_replies while the one parked request is held" "$park0" "$park1"
info "with a read held: inline_replies $inl0 -> $inl1, parked_replies $park1"

echo 1 >"$sys/release"
wait "$rpid" || true
assert_eq "the held read's exit status" 0 "$(cat "$TDIR/r.rc")"
cmp "$TDIR/r.out" <(head -c 4096 /dev/zero) || fail "the held read returned other data than zeros"
park2=$(bstat parked_replies)
[ "$park2" -gt "$park1" ] || fail "parked_replies $park1 -> $park2 after the held read's reply"
info "released: parked_replies $park1 -> $park2"

# a direct write over blocks the cache holds clean: still inline, and the
# stale copy is gone for the next read
dd if="$dev" of=/dev/null bs=4096 count=16 skip=16 status=none	# cached now
inl3=$(bstat inline_replies) park3=$(bstat parked_replies) punt3=$(bstat punted_requests)
ddev if=<(head -c 65536 /dev/zero | tr '\0' '\132') of="$dev" bs=4096 count=16 seek=16 \
	oflag=direct conv=notrunc iflag=fullblock
inl4=$(bstat inline_replies) park4=$(bstat parked_replies) punt4=$(bstat punted_requests)
[ "$((inl4 - inl3))" -ge 16 ] ||
	fail "direct writes over clean cached blocks: inline_replies $inl3 -> $inl4, parked_replies $park3 -> $park4, punted_requests $punt3 -> $punt4"
assert_eq "punted requests for direct writes over clean cached blocks" "$punt3" "$punt4"
dd if="$dev" of="$TDIR/after" bs=4096 count=16 skip=16 status=none
cmp "$TDIR/after" <(head -c 65536 /dev/zero | tr '\0' '\132') ||
	fail "a read after direct writes over cached blocks returned the stale cached data"
info "direct writes over clean cached blocks: inline_replies $inl3 -> $inl4, punted_requests $punt4"
stop_blkfs
