#!/usr/bin/env bash
# crash_replaylog.sh: a blkfs log read by another tool. When xfstests'
# replay-log is on PATH (src/log-writes in xfstests' source; it is not
# packaged: build it with `make -C src/log-writes` or `cc -o replay-log
# replay-log.c log-writes.c`), it replays a log the record filter wrote
# (`replay-log --log L --replay DEV --check flush --fsck CMD`, DEV a copy of
# the base), and at every flush the bytes of DEV must be those of blkfs's
# in-order state there (`blkfs crashcheck --state ID --materialize`); so
# at every mark (`replay-log --end-mark TEXT`, which replays up to and
# including that mark). Without replay-log: SKIP.
#  - The record filter logs a flush when it completes, and only if it
#    succeeded, after the writes that completed before it was submitted;
#    a write completing while it is in flight comes after it, and a mark
#    after the flushes in flight when it was written. replay-log's check at
#    a flush entry sees the writes logged before it: blkfs's crash point at
#    that event, where nothing is unflushed (one state).
#  - A state id is EVENT for the in-order state of the crash after event
#    EVENT of the log's model (entries counted from 0: a record log has no
#    flush with data, so one event per entry), EVENT:BLK=KEEP,... for
#    others.
#  - The workload (16 MiB ram device, 512/4096): O_DIRECT and buffered dd
#    with fsync, fio 4k random writes with an fsync every 8, a discard and
#    a write-zeroes (fallocate -p, -z), marks between.
#  - crashcheck --states 1 runs one checker per crash point, on its in-order
#    state (the first of every point, its id EVENT); the ids at the flush
#    and mark points are materialized.
#  - replay-log's fsck command hashes DEV at each flush; the two lists of
#    hashes must be equal, flush for flush, and as many as the log's flush
#    entries and as blkfs's flush points.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
command -v replay-log >/dev/null 2>&1 ||
	skip "replay-log (xfstests' src/log-writes) is not on PATH"
require dd fio python3 sha1sum fallocate

M=$((1 << 20))
log=$TDIR/w.log
start_blkfs "[cache]
size = 16M

[device r]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096
filters = record
record.path = $log"
rec=$MNT/.sys/r/record

info "record"
mkdata "$TDIR/d" $((2 * M))
dd if="$TDIR/d" of="$MNT/r" bs=1M conv=fsync,notrunc status=none
echo base >"$rec/start"
dd if="$TDIR/d" of="$MNT/r" bs=64K seek=40 oflag=direct conv=fsync,notrunc status=none
echo "committed 1" >"$rec/mark"
dd if="$TDIR/d" of="$MNT/r" bs=1M seek=4 conv=fsync,notrunc status=none
echo "committed 2" >"$rec/mark"
fio --name=rw --filename="$MNT/r" --rw=randwrite --bs=4k --size=8M --offset=8M \
	--direct=1 --ioengine=psync --io_size=1M --fsync=8 --end_fsync=1 --randseed=3 \
	--output=/dev/null
echo "committed 3" >"$rec/mark"
# a discard and a write-zeroes (logged as discards; replay-log writes zeros
# on a file), then a flush
fallocate -p -o $((9 * M)) -l $((256 * 1024)) "$MNT/r"
fallocate -z -o $((12 * M)) -l $((128 * 1024)) "$MNT/r"
dd if=/dev/null of="$MNT/r" conv=fsync,notrunc status=none
# writes left unflushed at the end: the last point is a mark, not a flush
dd if="$TDIR/d" of="$MNT/r" bs=4K count=3 seek=100 oflag=direct conv=notrunc status=none
echo end >"$rec/mark"
echo 1 >"$rec/stop"
"$BLKFS" save "$MNT" r "$TDIR/base.img" base
stop_blkfs

# the log's entries: each flush's and each mark's index (its event), and the mark's text
python3 - "$log" >"$TDIR/entries" <<'PY' || fail "the log lacks the discards"
import struct, sys
b = open(sys.argv[1], 'rb').read()
ss = struct.unpack_from('<I', b, 24)[0]
off, disc = ss, 0
for i in range(struct.unpack_from('<Q', b, 16)[0]):
    sec, nr, flags, dlen = struct.unpack_from('<QQQQ', b, off)
    assert not (flags & 1 and nr), 'a flush with data in a record log'
    disc += bool(flags & 4)
    if flags & 1:
        print(i, 'flush')
    if flags & 8:
        print(i, 'mark', b[off + 32:off + 32 + dlen].decode())
    off += ss + (nr * ss if not flags & 12 else 0)
assert disc >= 2, disc
PY

info "replay-log at every flush"
cp "$TDIR/base.img" "$TDIR/replay.img"
replay-log --log "$log" --replay "$TDIR/replay.img" --check flush \
	--fsck "sha1sum < '$TDIR/replay.img' >> '$TDIR/replay.sums'" >"$TDIR/replay.out" 2>&1 ||
	fail "replay-log failed: $(cat "$TDIR/replay.out")"
[ -s "$TDIR/replay.sums" ] || fail "replay-log ran no check: $(cat "$TDIR/replay.out")"

info "blkfs's in-order state at every flush"
# shellcheck disable=SC2016  # the checker's shell expands it
"$BLKFS" crashcheck "$log" --base "$TDIR/base.img" --states 1 --json --scratch "$TDIR" \
	--check 'echo "$BLKFS_CRASH_STATE" >> '"'$TDIR/ids'" >"$TDIR/cc.json" 2>"$TDIR/cc.err" ||
	fail "crashcheck failed: $(cat "$TDIR/cc.err")"
# The flush points (and the mark points, with their text) are the log's
# flush (mark) entries, event for entry; each was checked once, on its
# in-order state, whose id is the event alone.
python3 - "$TDIR/cc.json" "$TDIR/ids" "$TDIR/entries" "$TDIR" <<'PY' ||
import json, sys
j = json.load(open(sys.argv[1]))
ids = [l.strip() for l in open(sys.argv[2])]
ents = [l.rstrip('\n').split(' ', 2) for l in open(sys.argv[3])]
flush = sorted(p['event'] for p in j['points'] if p['kind'] == 'flush')
marks = sorted((p['event'], p['mark']) for p in j['points'] if p['kind'] == 'mark')
assert flush == [int(e[0]) for e in ents if e[1] == 'flush'], ('flush points', flush, ents)
assert marks == [(int(e[0]), e[2]) for e in ents if e[1] == 'mark'], ('mark points', marks, ents)
assert len(ids) == len(set(ids)) == len(j['points']), ('one state per point', ids)
for ev in flush + [m[0] for m in marks]:
    assert str(ev) in ids, ('point %d: its in-order state (id %d) was not checked' % (ev, ev), ids)
with open(sys.argv[4] + '/flush.ids', 'w') as f:
    f.writelines('%d\n' % ev for ev in flush)
with open(sys.argv[4] + '/mark.ids', 'w') as f:
    f.writelines('%d %s\n' % m for m in marks)
PY
	fail "the crash points or their ids (above): $(cat "$TDIR/cc.json")"
while read -r id; do
	"$BLKFS" crashcheck "$log" --base "$TDIR/base.img" --state "$id" --materialize "$TDIR/s.img"
	sha1sum <"$TDIR/s.img" >>"$TDIR/blkfs.sums"
done <"$TDIR/flush.ids"
n=$(wc -l <"$TDIR/replay.sums")
info "$n flushes replayed by replay-log, $(wc -l <"$TDIR/blkfs.sums") flush points in blkfs"
[ "$n" -ge 10 ] || fail "only $n flushes in the log"
if ! cmp -s "$TDIR/replay.sums" "$TDIR/blkfs.sums"; then
	diff <(nl "$TDIR/replay.sums") <(nl "$TDIR/blkfs.sums") | head -n 20 >&2
	fail "replay-log's device and blkfs's in-order state differ (above: flush number, sum)"
fi
info "the same bytes at every flush"

info "replay-log up to each mark against blkfs's in-order state there"
nm=0
while read -r id text; do
	cp "$TDIR/base.img" "$TDIR/replay.img"
	replay-log --log "$log" --replay "$TDIR/replay.img" --end-mark "$text" \
		>"$TDIR/replay.out" 2>&1 || fail "replay-log --end-mark '$text': $(cat "$TDIR/replay.out")"
	"$BLKFS" crashcheck "$log" --base "$TDIR/base.img" --state "$id" --materialize "$TDIR/s.img"
	cmp -s "$TDIR/replay.img" "$TDIR/s.img" ||
		fail "mark '$text' (event $id): replay-log's device and blkfs's in-order state differ"
	nm=$((nm + 1))
done <"$TDIR/mark.ids"
[ "$nm" -ge 4 ] || fail "only $nm marks"
info "the same bytes at all $nm marks"
