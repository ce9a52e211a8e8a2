#!/usr/bin/env bash
# crash_rename.sh: what a random power cut rarely shows, found by
# `blkfs crashcheck`: ext4 (mounted with noauto_da_alloc, over `blkfs
# attach` on a 32 MiB ram device, 512/4096, with the record filter).
#  - Setup (not recorded): f holds 16 KiB of its old version, g exists,
#    sync. Then record/start takes snapshot `base` and the program runs:
#    the new version (48 KiB) is written to f.tmp, f.tmp is renamed over f,
#    another file g is written and fsynced, and the mark "renamed" is
#    written.
#  - The checker mounts each state (ext4 replays its journal) and, once the
#    mark is in BLKFS_CRASH_MARKS, requires f to be the old or the new
#    version whole.
#  - With no fsync of f.tmp: the explorer finds states where f is empty or
#    short (the fsync of g commits the rename while f.tmp's delayed
#    allocation has no blocks yet). With f.tmp fsynced before the rename:
#    no failing state.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require mkfs.ext4 losetup mount umount dd cmp python3
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

log=$TDIR/ren.log
scratch=$TDIR/scratch
fs=$TDIR/fs
mkdir -p "$scratch" "$fs"
head -c 16384 /dev/zero | tr '\0' o >"$TDIR/old"
head -c 49152 /dev/zero | tr '\0' n >"$TDIR/new"

start_blkfs "[cache]
size = 32M

[device r]
backend = ram
size = 32M
logical_block_size = 512
physical_block_size = 4096
filters = record
record.path = $log"
rec=$MNT/.sys/r/record
blkfs_attach "$MNT" r
read -ra mkfs_opts <<<"$(attach_mkfs_opts ext4)"

cat >"$TDIR/check.sh" <<'SH'
#!/bin/bash
printf '%s|%s\n' "$BLKFS_CRASH_STATE" "${BLKFS_CRASH_MARKS//$'\n'/,}" >>"$CHECK_TMP/seen$SYNC"
d=$CHECK_TMP/m.$$
mkdir "$d" || exit 1
trap 'umount "$d" 2>/dev/null; rmdir "$d"' EXIT
mount -t ext4 "$BLKFS_CRASH_LOOP" "$d" || { echo "state $BLKFS_CRASH_STATE: mount failed"; exit 1; }
size=$(stat -c %s "$d/f" 2>/dev/null || echo none)
echo "state $BLKFS_CRASH_STATE: f has $size bytes; marks: ${BLKFS_CRASH_MARKS//$'\n'/,}"
case $'\n'$BLKFS_CRASH_MARKS$'\n' in *$'\n'renamed$'\n'*) ;; *) exit 0 ;; esac
cmp -s "$d/f" "$CHECK_TMP/old" || cmp -s "$d/f" "$CHECK_TMP/new" || {
	echo "f is neither version whole"
	exit 1
}
SH
chmod +x "$TDIR/check.sh"
export CHECK_TMP=$TDIR

# run SYNC: record the program; SYNC=1 fsyncs f.tmp before the rename.
run() {
	mkfs.ext4 -q -F "${mkfs_opts[@]}" "$LOOP"
	mount_top "$LOOP" "$fs" -o noauto_da_alloc
	cp "$TDIR/old" "$fs/f"
	echo g >"$fs/g"
	sync -f "$fs"
	echo base >"$rec/start"
	if [ "$1" = 1 ]; then
		dd if="$TDIR/new" of="$fs/f.tmp" bs=16K conv=fsync status=none
	else
		dd if="$TDIR/new" of="$fs/f.tmp" bs=16K status=none
	fi
	mv "$fs/f.tmp" "$fs/f"
	echo g2 | dd of="$fs/g" conv=fsync status=none
	echo renamed >"$rec/mark"
	echo 1 >"$rec/stop"
	umount "$fs"
	_TOPMNTS=()
	export SYNC=$1
	rm -f "$TDIR/seen$1"
	set +e
	"$BLKFS" crashcheck "$log" --base "$MNT/r@base" --attach --jobs 2 --json \
		--scratch "$scratch" --keep "$scratch/keep-$1" --check "$TDIR/check.sh" \
		>"$TDIR/out$1.json" 2>"$TDIR/err$1"
	ST=$?
	set -e
	"$BLKFS" snapshot -d "$MNT" r base
}

info "rename over f with no fsync of the data"
run 0
assert_eq "exit status without the fsync (failing states)" 1 "$ST"
python3 - "$TDIR/out0.json" <<'PY' || fail "no state with f empty or short: $(cat "$TDIR/out0.json")"
import json, re, sys
j = json.load(open(sys.argv[1]))
short = []
for f in j['failed']:
    out = open(f['output']).read()
    m = re.search(r'f has (\d+) bytes', out)
    if m and int(m.group(1)) < 49152 and int(m.group(1)) != 16384:
        short.append(f"{f['state']}: {m.group(1)} bytes")
print(f"{j['states']} states, {j['failures']} failed, {len(short)} with f empty or short:",
      ', '.join(short))
assert short
PY

info "the same with f.tmp fsynced before the rename"
run 1
[ "$ST" -eq 0 ] || fail "failing states with the fsync: $(cat "$TDIR/out1.json" "$TDIR/err1")"
# what ran: the checker saw every state the report counts, each once, at
# least 4 (crash points at the fsync of f.tmp, at the journal commit of
# the fsync of g and at the mark, one state or more each: 5 when written),
# and the mark at the last point
python3 - "$TDIR/out1.json" "$TDIR/seen1" 4 <<'PY' || fail "what ran (above)"
import json, sys
j = json.load(open(sys.argv[1]))
seen = [l.rstrip('\n').split('|', 1) for l in open(sys.argv[2])]
ids = {s for s, _ in seen}
assert len(seen) == len(ids) == j['states'], ('checked', len(seen), 'distinct', len(ids), 'reported', j['states'])
assert j['states'] >= int(sys.argv[3]), (j['states'], 'states, fewer than', sys.argv[3])
last = max(int(s.split(':')[0]) for s in ids)
assert all(m == 'renamed' for s, m in seen if int(s.split(':')[0]) == last), seen
print(j['states'], 'states checked, each once, none failed; the last point\'s marks: renamed')
PY
"$BLKFS" detach "$LOOP"
stop_blkfs
