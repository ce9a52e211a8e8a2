#!/usr/bin/env bash
# crashcheck.sh: record a workload with the record filter, then explore its
# crash states with `blkfs crashcheck`.
#  - The workload (O_DIRECT dd on a 16 MiB ram device, 512/4096): block 0
#    written and fsynced, mark "committed 1"; then one 8 KiB write over
#    physical blocks 1 and 2 with no fsync, mark "m2"; fsync, mark
#    "committed 2".
#  - A checker that holds only what the disk promises (data fsynced before
#    a committed mark is there) passes every state: exit 0. One that wants
#    the 8 KiB write atomic fails exactly the two torn states at "m2" (of
#    its 4: the table says so), exit 1, and --state ID --materialize
#    writes a state the checker fails again, byte for byte.
#  - The checker sees BLKFS_CRASH_MARKS (oldest first) and BLKFS_CRASH_STATE;
#    the same verdicts from the base as MNT/DEV@SNAP, as an image, with
#    --jobs 2, and --json; a checker past --timeout counts as a timeout.
#  - A checker that writes to its state (a journal replay at mount) leaves
#    the next state as the model says: in scratch files, and in ram clones
#    (through the file and through its loop device), where a state that
#    only adds writes to the one before is built without a reset when the
#    checker wrote nothing.
#  - Bad input is exit 2 with a message: a file that is not a log, a
#    truncated one (entry and byte named), a base snapshot that does not
#    exist, a checker that is not executable, a base of another logical
#    block size.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp python3 od

log=$TDIR/w.log
scratch=$TDIR/scratch
mkdir -p "$scratch"

start_blkfs "[cache]
size = 16M

[device r]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096
filters = record
record.path = $log

[device big]
backend = ram
size = 16M
logical_block_size = 4096"
rec=$MNT/.sys/r/record

info "record"
echo base >"$rec/start"
head -c 4096 /dev/zero | tr '\0' a >"$TDIR/a"
head -c 8192 /dev/zero | tr '\0' b >"$TDIR/b"
dd if="$TDIR/a" of="$MNT/r" bs=4096 oflag=direct conv=fsync,notrunc status=none
echo "committed 1" >"$rec/mark"
dd if="$TDIR/b" of="$MNT/r" bs=8192 seek=1 oflag=direct,seek_bytes conv=notrunc status=none \
	2>/dev/null || dd if="$TDIR/b" of="$MNT/r" bs=4096 seek=1 count=2 oflag=direct conv=notrunc status=none
echo m2 >"$rec/mark"
dd if=/dev/null of="$MNT/r" conv=fsync,notrunc status=none
echo "committed 2" >"$rec/mark"
echo 1 >"$rec/stop"

# The checkers. byte DEV OFF: the byte at OFF as a letter or 0.
cat >"$TDIR/promise.sh" <<'SH'
#!/bin/sh
byte() { od -An -c -j "$2" -N1 "$1" | tr -d ' '; }
echo "state $BLKFS_CRASH_STATE marks [$(echo "$BLKFS_CRASH_MARKS" | tr '\n' ,)]"
echo "$BLKFS_CRASH_STATE|$(echo "$BLKFS_CRASH_MARKS" | tr '\n' ,)" >>"${SEEN:-/dev/null}"
case "$BLKFS_CRASH_MARKS" in *"committed 1"*) [ "$(byte "$BLKFS_CRASH_DEV" 0)" = a ] || exit 1 ;; esac
case "$BLKFS_CRASH_MARKS" in *"committed 2"*)
	[ "$(byte "$BLKFS_CRASH_DEV" 4096)" = b ] && [ "$(byte "$BLKFS_CRASH_DEV" 8192)" = b ] || exit 1 ;;
esac
exit 0
SH
cat >"$TDIR/atomic.sh" <<'SH'
#!/bin/sh
byte() { od -An -c -j "$2" -N1 "$1" | tr -d ' '; }
[ "$(byte "$BLKFS_CRASH_DEV" 4096)" = "$(byte "$BLKFS_CRASH_DEV" 8192)" ]
SH
cat >"$TDIR/env.sh" <<'SH'
#!/bin/sh
printf '%s|%s\n' "$BLKFS_CRASH_STATE" "$(echo "$BLKFS_CRASH_MARKS" | tr '\n' ,)" >>"$ENVOUT"
SH
chmod +x "$TDIR"/*.sh
cc() { "$BLKFS" crashcheck "$log" --scratch "$scratch" "$@"; }

info "every state keeps the promise"
SEEN=$TDIR/seen cc --base "$MNT/r@base" --check "$TDIR/promise.sh" --json >"$TDIR/out" 2>"$TDIR/err" ||
	fail "the promise checker failed: $(cat "$TDIR/out" "$TDIR/err")"
# what ran: every state the report counts, each once, at least 6 (1 at
# "committed 1", the 4 of "m2", 1 at "committed 2"), and at the last point
# both committed marks
python3 - "$TDIR/out" "$TDIR/seen" 6 <<'PY' || fail "what ran: $(cat "$TDIR/out" "$TDIR/seen")"
import json, sys
j = json.load(open(sys.argv[1]))
seen = [l.rstrip('\n').split('|', 1) for l in open(sys.argv[2])]
ids = {s for s, _ in seen}
assert len(seen) == len(ids) == j['states'], ('checked', len(seen), 'distinct', len(ids), 'reported', j['states'])
assert j['states'] >= int(sys.argv[3]), (j['states'], 'states, fewer than', sys.argv[3])
last = max(int(s.split(':')[0]) for s in ids)
for s, m in seen:
    if int(s.split(':')[0]) == last:
        assert {'committed 1', 'committed 2'} <= set(m.split(',')), (s, m)
print('#', j['states'], 'states checked, each once; the last point has both committed marks')
PY

info "a checker wanting an atomic 8 KiB write finds the torn states"
set +e
cc --base "$MNT/r@base" --check "$TDIR/atomic.sh" --jobs 2 --json >"$TDIR/json" 2>"$TDIR/err"
st=$?
set -e
assert_eq "exit status of a failing run" 1 "$st"
python3 - "$TDIR/json" >"$TDIR/first" <<'PY' || fail "json: $(cat "$TDIR/json")"
import json, sys
j = json.load(open(sys.argv[1]))
pts = {p['mark']: p for p in j['points'] if p['kind'] == 'mark'}
assert pts['committed 1']['states'] == 1 and pts['committed 1']['failures'] == 0, pts
m2 = pts['m2']
assert m2['states'] == 4 and m2['full_set'] == 4 and m2['failures'] == 2, m2
assert pts['committed 2']['failures'] == 0, pts
assert j['failures'] == 2 and j['timeouts'] == 0, j
print(m2['first_failure'])
PY
id=$(cat "$TDIR/first")
cc --base "$MNT/r@base" --state "$id" --materialize "$TDIR/state.img"
if BLKFS_CRASH_DEV=$TDIR/state.img "$TDIR/atomic.sh"; then
	fail "the materialized state $id passes the checker it failed"
fi

info "other bases give the same verdicts"
"$BLKFS" save "$MNT" r "$TDIR/base.img" base
set +e
cc --base "$TDIR/base.img" --check "$TDIR/atomic.sh" >"$TDIR/out2" 2>/dev/null
st2=$?
cc --base zeros --size 16M --check "$TDIR/atomic.sh" >"$TDIR/out3" 2>/dev/null
st3=$?
set -e
assert_eq "image base" 1 "$st2"
assert_eq "zeros base" 1 "$st3"
grep -q "2 failed" "$TDIR/out2" || fail "image base: $(cat "$TDIR/out2")"
cc --base zeros --size 16M --state "$id" --materialize "$TDIR/state2.img"
cmp "$TDIR/state.img" "$TDIR/state2.img" || fail "state $id differs between bases"

info "what the checker sees"
ENVOUT=$TDIR/env.out cc --base zeros --size 16M --check "$TDIR/env.sh" >/dev/null 2>&1 ||
	fail "the env checker failed"
export ENVOUT
grep -q "|committed 1,m2,committed 2,$" "$TDIR/env.out" || fail "marks: $(cat "$TDIR/env.out")"
grep -q "^[0-9]*|committed 1,$" "$TDIR/env.out" || fail "marks: $(cat "$TDIR/env.out")"

info "a checker that writes to the state does not change the next one"
cat >"$TDIR/writer.sh" <<'SH'
#!/bin/sh
[ "$(od -An -c -j 12288 -N1 "$BLKFS_CRASH_DEV" | tr -d ' ')" = '\0' ] || exit 1
printf Z | dd of="$BLKFS_CRASH_DEV" bs=1 seek=12288 conv=notrunc status=none
SH
chmod +x "$TDIR/writer.sh"
cc --base zeros --size 16M --check "$TDIR/writer.sh" >"$TDIR/wout" 2>&1 ||
	fail "a state saw what the checker wrote into the one before: $(cat "$TDIR/wout")"
# in ram clones (a state that only adds writes to the one before is built
# without a reset unless the checker wrote): through the file, and through
# the loop device, whose cache holds the write when the checker exits
cc --base "$MNT/r@base" --each-write --check "$TDIR/writer.sh" >"$TDIR/wout" 2>&1 ||
	fail "clones: a state saw what the checker wrote into the one before: $(cat "$TDIR/wout")"
grep -q "in ram clones" "$TDIR/wout" || fail "clones: not built in clones: $(cat "$TDIR/wout")"
cat >"$TDIR/lwriter.sh" <<'SH'
#!/bin/sh
[ "$(od -An -c -j 12288 -N1 "$BLKFS_CRASH_LOOP" | tr -d ' ')" = '\0' ] || exit 1
printf Z | dd of="$BLKFS_CRASH_LOOP" bs=1 seek=12288 conv=notrunc status=none
SH
chmod +x "$TDIR/lwriter.sh"
if [ -e /dev/loop-control ]; then
	cc --base "$MNT/r@base" --each-write --attach --check "$TDIR/lwriter.sh" >"$TDIR/wout" 2>&1 ||
		fail "clones: a state saw what the checker wrote through its loop device: $(cat "$TDIR/wout")"
fi
# and a checker that writes nothing: states after the first are built by adding writes
cc --base "$MNT/r@base" --each-write --check true --json >"$TDIR/ej" 2>&1 || fail "clones: $(cat "$TDIR/ej")"
grep -q '"extended": [1-9]' "$TDIR/ej" || fail "clones: no state built by adding writes: $(cat "$TDIR/ej")"

info "timeout"
set +e
cc --base zeros --size 16M --check "sleep 30" --timeout 0.3 --jobs 2 --json >"$TDIR/tj" 2>/dev/null
st=$?
set -e
assert_eq "exit status with timeouts" 1 "$st"
grep -q '"timeouts": [1-9]' "$TDIR/tj" || fail "no timeouts counted: $(cat "$TDIR/tj")"

info "bad input"
bad() {
	local want=$1 out st
	shift
	set +e
	out=$("$BLKFS" crashcheck "$@" 2>&1)
	st=$?
	set -e
	assert_eq "exit status of: $*" 2 "$st"
	case $out in *"$want"*) ;; *) fail "expected '$want' from: $*; got: $out" ;; esac
}
head -c 4096 /dev/urandom >"$TDIR/junk"
bad "not a dm-log-writes log: magic" "$TDIR/junk" --base zeros --check true
head -c $((512 * 12)) "$log" >"$TDIR/trunc.log"
python3 -c "
import struct,sys
b=bytearray(open('$TDIR/trunc.log','rb').read())
struct.pack_into('<Q',b,16,5)
open('$TDIR/trunc.log','wb').write(b)"
bad "truncated" "$TDIR/trunc.log" --base zeros --check true
bad "at byte" "$TDIR/trunc.log" --base zeros --check true
bad "r has no snapshot named nosuch" "$log" --base "$MNT/r@nosuch" --check true
bad "not an executable command" "$log" --base zeros --check /nonexistent/checker
"$BLKFS" snapshot "$MNT" big x
bad "but the base's logical block size is 4096" "$log" --base "$MNT/big@x" --check true
bad "past the base's end" "$log" --base zeros --size 4096 --check true
# only the kept outputs of failing states stay (a folder per failing run)
left=$(find "$scratch" -maxdepth 1 -type f)
[ -z "$left" ] || fail "crashcheck left scratch files: $left"
[ "$(find "$scratch" -name 'state-*.out' | wc -l)" -ge 4 ] || fail "failing outputs not kept"
stop_blkfs
