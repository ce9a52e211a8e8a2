#!/usr/bin/env bash
# crash_clones.sh: clones are what they claim. A workload on a 4 MiB ram
# device (512/4096) whose snapshot "base" holds a pattern is recorded over
# four flush epochs (writes across two physical blocks, overlapping ones,
# partial blocks, marks, no flush at the end). `blkfs crashcheck --base
# MNT/r@base --each-write --jobs 2` builds every state on a ram clone (by
# reset plus writes, or by adding writes to the state before); the checker
# records the sha1 of the image it sees. For every state, `--state ID
# --materialize FILE` must write the same bytes. A second run whose
# checker scribbles on its clone after hashing (as a journal replay would)
# must see the same images: a reset undoes what the checker wrote.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd python3 sha1sum

log=$TDIR/w.log
scratch=$TDIR/scratch
mkdir -p "$scratch"

start_blkfs "[cache]
size = 16M

[device r]
backend = ram
size = 4M
logical_block_size = 512
physical_block_size = 4096
filters = record
record.path = $log"
rec=$MNT/.sys/r/record

# wr CHAR OFF LEN: LEN bytes of CHAR at byte OFF, one O_DIRECT write
wr() {
	head -c "$3" /dev/zero | tr '\0' "$1" >"$TDIR/d"
	dd if="$TDIR/d" of="$MNT/r" bs="$3" seek="$2" oflag=direct,seek_bytes conv=notrunc \
		status=none
}
fsync_dev() { dd if=/dev/null of="$MNT/r" conv=fsync,notrunc status=none; }

info "the base: a pattern over the first 32 blocks, then the recorded workload"
python3 -c 'import sys; sys.stdout.buffer.write(bytes((i * 7 + i // 4096) % 251 for i in range(131072)))' \
	>"$TDIR/pat"
dd if="$TDIR/pat" of="$MNT/r" bs=65536 oflag=direct conv=notrunc status=none
echo base >"$rec/start"
# epoch 1
wr a 4096 8192		# blocks 1, 2
wr b 8192 4096		# block 2, over a
wr c 12800 512		# inside block 3
fsync_dev
echo e1 >"$rec/mark"
# epoch 2
wr d 0 8192		# blocks 0, 1
wr e 20480 4096		# block 5
wr f 5120 1024		# inside block 1, over d
fsync_dev
echo e2 >"$rec/mark"
# epoch 3: a mark inside it
wr g 12288 4096		# block 3
wr h 24576 8192		# blocks 6, 7
echo e3 >"$rec/mark"
wr i 1024 2048		# inside block 0
fsync_dev
echo e4 >"$rec/mark"
# epoch 4: never flushed
wr j 8192 4096		# block 2
wr k 28672 1024		# inside block 7
wr l 8704 512		# inside block 2, over j
echo e5 >"$rec/mark"
echo 1 >"$rec/stop"

cc() { "$BLKFS" crashcheck "$log" --base "$MNT/r@base" --scratch "$scratch" "$@"; }
# shellcheck disable=SC2016  # the checker's shell expands them
hash='echo "$BLKFS_CRASH_STATE $(sha1sum <"$BLKFS_CRASH_DEV" | cut -c1-40)" >>"$IDS"'
# shellcheck disable=SC2016
scribble='printf ZZZZ | dd of="$BLKFS_CRASH_DEV" bs=1 seek=$(( (RANDOM % 32) * 4096 + 100 )) conv=notrunc status=none'
export IDS

info "every state on clones, --jobs 2"
IDS=$TDIR/clone.ids
: >"$IDS"
cc --each-write --jobs 2 --check "$hash" --json >"$TDIR/j" 2>"$TDIR/err" ||
	fail "crashcheck: $(cat "$TDIR/j" "$TDIR/err")"
python3 - "$TDIR/j" <<'PY' || fail "not built in clones, or no state added writes to the one before: $(cat "$TDIR/j")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j['scratch'] == 'clone', j['scratch']
assert j['extended'] > 0, j
PY
n=$(wc -l <"$IDS")
[ "$n" -ge 40 ] || fail "only $n states: $(cat "$IDS")"
[ "$(cut -d' ' -f1 "$IDS" | sort | uniq -d | wc -l)" -eq 0 ] || fail "an id checked twice"

info "--materialize writes what the clone showed, for each of the $n states"
bad=0
while read -r id sha; do
	cc --state "$id" --materialize "$TDIR/m.img" || fail "--materialize $id"
	got=$(sha1sum <"$TDIR/m.img" | cut -c1-40)
	if [ "$got" != "$sha" ]; then
		printf 'state %s: the clone showed %s, --materialize wrote %s\n' "$id" "$sha" "$got" >&2
		bad=$((bad + 1))
	fi
done <"$TDIR/clone.ids"
[ "$bad" -eq 0 ] || fail "$bad of $n states differ between the clone and --materialize"
# and the images are not all one: the workload changes them
[ "$(cut -d' ' -f2 "$TDIR/clone.ids" | sort -u | wc -l)" -ge 20 ] ||
	fail "too few distinct images: $(cat "$TDIR/clone.ids")"

info "the same $n states with a checker that writes to its clone"
IDS=$TDIR/scribble.ids
: >"$IDS"
cc --each-write --jobs 2 --check "$hash; $scribble" >"$TDIR/out" 2>"$TDIR/err" ||
	fail "crashcheck (scribbling): $(cat "$TDIR/out" "$TDIR/err")"
diff <(sort "$TDIR/clone.ids") <(sort "$IDS") >&2 ||
	fail "a checker's writes showed in a later state (above: clean run, scribbling run)"
stop_blkfs
