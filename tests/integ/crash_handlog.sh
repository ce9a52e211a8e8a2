#!/usr/bin/env bash
# crash_handlog.sh: a dm-log-writes log built here byte for byte the way the
# kernel's target writes it (drivers/md/dm-log-writes.c; xfstests'
# src/log-writes/log-writes.h): a super block of one sector (magic,
# version, nr_entries, sectorsize), then per entry a sector holding sector,
# nr_sectors, flags, data_len (a mark's text inline after them), a write's
# data in whole sectors after it. The kernel logs a write that is not FUA
# only when a flush that covers it completes (its group comes right before
# that flush), a FUA write and a mark when they complete, and at the end
# the writes no flush covered, then the mark "dm-log-writes-end".
#
# The log (512-byte sectors, 4096-byte physical blocks B0..B3), its events:
#   0  W_a  [2048, 6144)   'a'   across B0 and B1
#   1  W_b  [512, 1536)    'b'   B0
#   2  W_c  [1024, 2560)   'c'   B0, over W_b and W_a
#   3  FLUSH                     covers W_a, W_b, W_c
#   4  W_e  [12288, 12800) 'e'   B3, FUA
#   5  MARK one
#   6  W_d  [8192, 12288)  'd'   B2; completed while the flush (3) was in
#                                flight: logged after it, with the next group
#   7  DISCARD [4096, 8192)      B1
#   8  W_f  [4608, 5632)   'f'   B1, flagged METADATA (a hint)
#   9  W_g  [8704, 9216)   'g'   B2, over W_d
#  10  FLUSH
#  11  MARK two
#  12  W_h  [0, 8192)      'h'   across B0 and B1, no flush covers it
#  13  MARK dm-log-writes-end
#
# `blkfs crashcheck --base zeros` (with and without --each-write) runs a
# checker that records each state's id and the sha1 of its image; the set
# of (crash point, image) must equal the one written out below by hand,
# each block's possible contents at each point (what a disk could hold:
# flushed data kept, FUA durable, each block a prefix of its unflushed
# writes, blocks on their own), with one state per image: no state a disk
# could not produce, none missing, none twice.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_blkfs
require python3 sha1sum

python3 - "$TDIR/hand.log" <<'PY'
import struct, sys
S = 512
FLUSH, FUA, DISCARD, MARK, METADATA = 1, 2, 4, 8, 16
ents = []
def w(off, n, c, flags=0):
    assert off % S == 0 and n % S == 0
    ents.append(struct.pack('<QQQQ', off // S, n // S, flags, 0).ljust(S, b'\0') + c * n)
def flush():
    ents.append(struct.pack('<QQQQ', 0, 0, FLUSH, 0).ljust(S, b'\0'))
def discard(off, n):
    ents.append(struct.pack('<QQQQ', off // S, n // S, DISCARD, 0).ljust(S, b'\0'))
def mark(t):
    t = t.encode()
    ents.append((struct.pack('<QQQQ', 0, 0, MARK, len(t)) + t).ljust(S, b'\0'))
w(2048, 4096, b'a')
w(512, 1024, b'b')
w(1024, 1536, b'c')
flush()
w(12288, 512, b'e', FUA)
mark('one')
w(8192, 4096, b'd')
discard(4096, 4096)
w(4608, 1024, b'f', METADATA)
w(8704, 512, b'g')
flush()
mark('two')
w(0, 8192, b'h')
mark('dm-log-writes-end')
sup = struct.pack('<QQQI', 0x6a736677736872, 1, len(ents), S).ljust(S, b'\0')
open(sys.argv[1], 'wb').write(sup + b''.join(ents))
PY

# The states by hand: per point, each block's possible contents, as fills
# (offset in the block, length, byte) over zeros.
python3 - "$TDIR" <<'PY'
import hashlib, itertools, sys
d = sys.argv[1]
P = 4096
Z = ()
A0 = ((2048, 2048, b'a'),)
AB = A0 + ((512, 1024, b'b'),)
ABC = AB + ((1024, 1536, b'c'),)
A1 = ((0, 2048, b'a'),)
F = ((512, 1024, b'f'),)
D = ((0, 4096, b'd'),)
DG = D + ((512, 512, b'g'),)
E = ((0, 512, b'e'),)
H = ((0, 4096, b'h'),)
# point: (B0, B1, B2, B3), each a list of what the block may hold
pts = {
    0: ([Z, A0], [Z, A1], [Z], [Z]),
    1: ([Z, A0, AB], [Z, A1], [Z], [Z]),
    2: ([Z, A0, AB, ABC], [Z, A1], [Z], [Z]),
    3: ([ABC], [A1], [Z], [Z]),
    4: ([ABC], [A1], [Z], [E]),		# FUA: durable at once
    5: ([ABC], [A1], [Z], [E]),
    6: ([ABC], [A1], [Z, D], [E]),
    7: ([ABC], [A1, Z], [Z, D], [E]),
    8: ([ABC], [A1, Z, F], [Z, D], [E]),
    9: ([ABC], [A1, Z, F], [Z, D, DG], [E]),
    10: ([ABC], [F], [DG], [E]),
    11: ([ABC], [F], [DG], [E]),
    12: ([ABC, H], [F, H], [DG], [E]),
    13: ([ABC, H], [F, H], [DG], [E]),
}
def image(blocks):
    img = bytearray(1 << 20)
    for b, fills in enumerate(blocks):
        for off, n, c in fills:
            img[b * P + off:b * P + off + n] = c * n
    return hashlib.sha1(img).hexdigest()
with open(d + '/want.each', 'w') as each, open(d + '/want.points', 'w') as marks:
    for p, alts in sorted(pts.items()):
        for combo in itertools.product(*alts):
            line = '%d %s\n' % (p, image(combo))
            each.write(line)
            if p in (3, 5, 10, 11, 13):	# flushes and marks
                marks.write(line)
PY

# shellcheck disable=SC2016  # the checker's shell expands it
rec='echo "$BLKFS_CRASH_STATE $(sha1sum <"$BLKFS_CRASH_DEV" | cut -c1-40)" >>"$IDS"'
export IDS

# compare WANT IDS: one state per image, the (point, image) sets equal
compare() {
	python3 - "$1" "$2" <<'PY'
import collections, sys
want = collections.Counter(l.split()[0] + ' ' + l.split()[1] for l in open(sys.argv[1]))
got = collections.Counter()
ids = collections.Counter()
for l in open(sys.argv[2]):
    sid, sha = l.split()
    ids[sid] += 1
    got[sid.split(':')[0] + ' ' + sha] += 1
bad = 0
for k in sorted(set(got) - set(want), key=lambda s: int(s.split()[0])):
    print('a state no disk could hold: point', k, file=sys.stderr); bad = 1
for k in sorted(set(want) - set(got), key=lambda s: int(s.split()[0])):
    print('missing: point', k, file=sys.stderr); bad = 1
for k, n in got.items():
    if n > 1:
        print('%d states with the image of point %s' % (n, k), file=sys.stderr); bad = 1
for k, n in ids.items():
    if n > 1:
        print('id %s checked %d times' % (k, n), file=sys.stderr); bad = 1
sys.exit(bad)
PY
}

for mode in each points; do
	opts=()
	[ "$mode" = each ] && opts=(--each-write)
	info "crashcheck --base zeros ${opts[*]}"
	IDS=$TDIR/$mode.ids
	: >"$IDS"
	"$BLKFS" crashcheck "$TDIR/hand.log" --base zeros --scratch "$TDIR" "${opts[@]}" \
		--check "$rec" >"$TDIR/$mode.out" 2>"$TDIR/$mode.err" ||
		fail "crashcheck: $(cat "$TDIR/$mode.out" "$TDIR/$mode.err")"
	compare "$TDIR/want.$mode" "$IDS" || fail "the states differ from those written by hand (above)"
	info "$(wc -l <"$IDS") states, as written by hand"
done
