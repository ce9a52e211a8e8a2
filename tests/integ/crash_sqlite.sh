#!/usr/bin/env bash
# crash_sqlite.sh: a real database under `blkfs crashcheck`: Debian's
# sqlite3 on ext4 over `blkfs attach` on a 32 MiB ram device (512/4096)
# with the record filter.
#  - Setup (not recorded): mkfs.ext4 with the options attach prints, a
#    table t(id, v) and a one-row table s(total), sync; then record/start
#    takes snapshot `base` and the workload runs: 50 transactions, each
#    inserting row N (2000 bytes) and adding N to s.total, each COMMIT
#    followed by the mark "committed N" (the sqlite3 shell's .system).
#  - The states are built in ram clones of `base` (crashcheck --base
#    MNT/r@base). The checker (crashcheck --attach) mounts the state's
#    loop device (ext4 replays its journal), opens the database (sqlite
#    rolls back a hot journal or recovers the WAL), and requires PRAGMA
#    integrity_check = ok, rows 1..M with their bytes and s.total =
#    1+..+M (each transaction whole or absent), and M >= every N whose
#    mark is in BLKFS_CRASH_MARKS.
#  - synchronous = OFF: failing states (sqlite promises nothing).
#    synchronous = FULL in WAL mode and in rollback-journal mode with
#    journal_mode = TRUNCATE: no failing state over the default bounds.
#    journal_mode = DELETE (the default) needs synchronous = EXTRA for the
#    same (sqlite's documentation: FULL does not sync the directory after
#    the journal's unlink, which is the commit, so a power cut right after
#    COMMIT returns may bring the journal back and roll the transaction
#    back); with FULL the explorer finds exactly that: the failing states
#    are at "committed N" marks and the state holds the hot journal.
#  - The passing modes assert what ran: the checker (which writes each
#    state's id and marks to a file) saw every state the report counts,
#    each once, at least 2 per transaction, and the last crash point's
#    marks are every "committed N".
#  - Each mode says how many crash points were sampled (--states, below):
#    on a quiet machine none, the default bounds everywhere.
# Env: BLKFS_SQLITE_MODES (default "off delete-full delete-extra truncate-full
# wal-full"), BLKFS_SQLITE_TXNS (default 50).
# integ-timeout: 900
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require sqlite3 mkfs.ext4 losetup mount umount
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

modes=${BLKFS_SQLITE_MODES:-off delete-full delete-extra truncate-full wal-full}
txns=${BLKFS_SQLITE_TXNS:-50}
log=$TDIR/sql.log
scratch=$TDIR/scratch
fs=$TDIR/fs
mkdir -p "$scratch" "$fs"

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

# The checker: $1 is nothing; the state comes in the environment. It runs
# once per state (hundreds per mode): no more processes than mount, ls,
# sqlite3 and umount (the rest is bash builtins).
cat >"$TDIR/check.sh" <<'SH'
#!/bin/bash
printf '%s|%s\n' "$BLKFS_CRASH_STATE" "${BLKFS_CRASH_MARKS//$'\n'/,}" >>"$SEEN"
d=$CHECK_TMP/m.$$
mkdir "$d" || exit 1
trap 'umount "$d" 2>/dev/null; rmdir "$d"' EXIT
mount -t ext4 "$BLKFS_CRASH_LOOP" "$d" || { echo "state $BLKFS_CRASH_STATE: mount failed"; exit 1; }
want=0
while read -r m n; do
	[ "$m" = committed ] && [ "$n" -gt "$want" ] && want=$n
done <<<"$BLKFS_CRASH_MARKS"
ls -la "$d"
out=$(sqlite3 "$d/db" "PRAGMA integrity_check;
	SELECT count(*), coalesce(max(id), 0), coalesce(sum(id), 0),
		(SELECT total FROM s), count(*) FILTER (WHERE v = printf('%0*d', 2000, id)) FROM t;" 2>&1)
echo "state $BLKFS_CRASH_STATE, marks up to committed $want: $out"
{
	read -r first
	IFS='|' read -r cnt max sum total good
} <<<"$out"
[ "$first" = ok ] || exit 1
[ "$cnt" = "$max" ] && [ "$good" = "$cnt" ] || { echo "rows are not 1..$max whole"; exit 1; }
[ "$sum" = "$total" ] || { echo "s.total $total, rows sum to $sum: a torn transaction"; exit 1; }
[ "$max" -ge "$want" ] || { echo "committed $want is lost: the last row is $max"; exit 1; }
SH
chmod +x "$TDIR/check.sh"
export CHECK_TMP=$TDIR

# record MODE: mkfs, set up, record the workload; leaves the log in $log.
record() {
	local jm=${1%-*} sync=${1#*-} i sql=$TDIR/work.sql
	case $1 in off) jm=delete sync=off ;; esac
	mkfs.ext4 -q -F "${mkfs_opts[@]}" "$LOOP"
	mount_top "$LOOP" "$fs"
	sqlite3 "$fs/db" "PRAGMA journal_mode = $jm;
		CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
		CREATE TABLE s(total INTEGER); INSERT INTO s VALUES (0);" >/dev/null
	sync -f "$fs"
	{
		echo ".bail on"
		echo "PRAGMA journal_mode = $jm;"
		echo "PRAGMA synchronous = $sync;"
		for ((i = 1; i <= txns; i++)); do
			echo "BEGIN; INSERT INTO t VALUES ($i, printf('%0*d', 2000, $i));"
			echo "UPDATE s SET total = total + $i; COMMIT;"
			echo ".system echo 'committed $i' > $rec/mark"
		done
	} >"$sql"
	echo base >"$rec/start"
	sqlite3 "$fs/db" <"$sql" >/dev/null
	echo 1 >"$rec/stop"
	umount "$fs"
	_TOPMNTS=()
}

# explore MODE: crashcheck the log; sets ST (exit status) and JSON; the
# checker writes each state's id and marks to $SEEN.
explore() {
	local t0=$SECONDS max=${BLKFS_SQLITE_STATES:-256}
	export SEEN=$TDIR/$1.seen
	rm -f "$SEEN"
	set +e
	# The default bounds (--n, --k), and --states MAX as a guard that
	# changes no point whose default set has at most MAX states: on a
	# quiet machine every point of the FULL modes has one state (nothing
	# unflushed at a flush or at a mark right after one), none sampled.
	# --states MAX: a crash point whose default set has more than MAX
	# states (WAL pages the cache wrote back before a flush, more of them
	# when the machine is loaded: one state per block rolled back) checks
	# its in-order state and a sample of that set; every other point is
	# explored as without it. synchronous = OFF flushes nothing: every
	# point holds the whole workload unflushed (about 400 blocks, and as
	# many states in its default set, each a full mount and query: 50
	# points took 330 s), and its in-order states already fail: 8 each.
	[ "$1" = off ] && max=8
	[ "$max" = 0 ] && max=	# BLKFS_SQLITE_STATES=0: no --states at all
	"$BLKFS" crashcheck "$log" --base "$MNT/r@base" --attach --jobs 2 --json \
		${max:+--states "$max"} --scratch "$scratch" --keep "$scratch/keep-$1" --check "$TDIR/check.sh" \
		>"$TDIR/$1.json" 2>"$TDIR/$1.err"
	ST=$?
	set -e
	JSON=$TDIR/$1.json
	info "$1: exit $ST in $((SECONDS - t0)) s: $(python3 -c "
import json,sys; j=json.load(open('$JSON'))
print(j['states'], 'states', j['failures'], 'failed', j['timeouts'], 'timeouts;',
      j['sampled_points'], 'of', len(j['points']), 'points sampled (--states ${max:-none});',
      'scratch', j.get('scratch'), 'build_ms', j.get('build_ms'), 'reset_ms', j.get('reset_ms'),
      'check_ms', j.get('check_ms'), 'resets', j.get('resets'), 'extended', j.get('extended'))" 2>&1)"
	# where the failures are, and what the first one saw
	python3 - "$JSON" <<'PY' || true
import collections, json, sys
j = json.load(open(sys.argv[1]))
kinds = collections.Counter()
for p in j['points']:
    if p['failures']:
        kinds[(p['kind'], (p['mark'] or '').split(' ')[0])] += p['failures']
print('#   failures by crash point kind:', dict(kinds) or 'none')
for f in j['failed'][:1]:
    print('#   first failing state', f['state'], '(' + f['verdict'] + '):')
    for line in open(f['output']).read().splitlines()[-6:]:
        print('#     ' + line)
PY
}

for m in $modes; do
	info "mode $m"
	record "$m"
	explore "$m"
	case $m in
	off | delete-full)
		assert_eq "$m: exit status (failing states found)" 1 "$ST"
		# a committed transaction lost, never a corrupt database; with
		# DELETE, because the journal came back
		python3 - "$JSON" "$m" <<'PY' || fail "$m: failures of another kind (above)"
import json, sys
j = json.load(open(sys.argv[1]))
for f in j['failed']:
    out = open(f['output']).read()
    assert f['verdict'] == 'failed' and 'is lost' in out, (f['state'], out)
    if sys.argv[2] == 'delete-full':
        assert ' db-journal\n' in out, (f['state'], 'no journal', out)
PY
		;;
	*)
		[ "$ST" -eq 0 ] || fail "$m: failing states: $(head -c 3000 "$JSON"; cat "$TDIR/$m.err")"
		# what ran: the checker saw every state the report counts, at
		# least 2 per transaction (its COMMIT's flushes and its mark are
		# crash points), and the last point's marks are every commit
		python3 - "$JSON" "$SEEN" "$((2 * txns))" "$txns" <<'PY' || fail "$m: what ran (above)"
import json, sys
j = json.load(open(sys.argv[1]))
seen = [l.rstrip('\n').split('|', 1) for l in open(sys.argv[2])]
ids = {s for s, _ in seen}
least, txns = int(sys.argv[3]), int(sys.argv[4])
assert len(seen) == len(ids) == j['states'], ('checked', len(seen), 'distinct', len(ids), 'reported', j['states'])
assert j['states'] >= least, (j['states'], 'states, fewer than', least)
last = max(int(s.split(':')[0]) for s in ids)
want = ['committed %d' % i for i in range(1, txns + 1)]
for s, marks in seen:
    if int(s.split(':')[0]) == last:
        assert marks.split(',') == want, ('state', s, 'marks', marks)
print('#   %d states checked (at least %d), each once; the last point\'s marks: committed 1..%d'
      % (j['states'], least, txns))
PY
		;;
	esac
	"$BLKFS" snapshot -d "$MNT" r base
done
"$BLKFS" detach "$LOOP"
stop_blkfs
