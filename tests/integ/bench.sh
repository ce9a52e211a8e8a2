#!/usr/bin/env bash
# integ-serial: measures speed (blkfs-bench, blkfs-ab: its figures mean something only on a machine to itself) and runs stress-ng --cpu 2, all of a 2-CPU machine
# bench.sh: tools/blkfs-bench runs and its output is well-formed; the numbers
# themselves are not judged.
#  - `blkfs-bench split --quick --out DIR` exits 0, shows its progress on
#    stderr and prints the split table on stdout: the expected header, the
#    separator, then one row per max_sectors_kb (16, 64, 256, 1024) whose
#    cells are numbers (MB/s as "N" or "N (MIN..MAX)");
#  - DIR/results.md holds the same table;
#  - it leaves nothing behind: its work directory (under $TMPDIR, here the
#    test's own) is gone, nothing is mounted below it, no process of it runs;
#  - an unknown experiment or option is refused with exit 2 before anything
#    is started;
#  - `blkfs-ab BLKFS BLKFS --backend ram --runs 1 --seconds 1 --load quiet
#    --any-load` prints its table (a row of numbers per test asked for) and
#    leaves nothing behind either; with `--load stress` the table is the
#    loaded one and no stress-ng of it is left running; nor
#    does an aio run stopped with SIGTERM while it is mounted (its loop
#    device and /dev/shm image are gone too). (SIGTERM: a background job
#    of a script starts with SIGINT ignored.)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio dd awk numfmt fusermount3 python3 losetup stress-ng

bench=$(realpath "$_LIB_DIR/../../tools/blkfs-bench")
out=$TDIR/out
work=$TDIR/tmp
mkdir -p "$work"

rc=0
TMPDIR=$work BLKFS=$BLKFS timeout -k 10 240 "$bench" split --quick --out "$out" \
	>"$TDIR/stdout" 2>"$TDIR/stderr" || rc=$?
if [ "$rc" -ne 0 ]; then
	cat "$TDIR/stderr" >&2
	fail "blkfs-bench split --quick exited $rc"
fi
info "blkfs-bench split --quick: $(grep -c . "$TDIR/stdout") lines of output"

hdr='| max_sectors_kb | MB/s | vs 1024 | backend writes per GiB | split_ios per GiB | writeback_copy_bytes |'

# check_table FILE: the split table in FILE is well-formed
check_table() {
	awk -v hdr="$hdr" '
		$0 == hdr { state = 1; next }
		state == 1 { if ($0 != "|---|---|---|---|---|---|") { print "bad separator: " $0; bad = 1 }
			state = 2; next }
		state == 2 && /^\|/ {
			n = split($0, c, "|")
			if (n != 8) { print "not 6 cells: " $0; bad = 1; next }
			for (i = 2; i <= 7; i++) { gsub(/^ +| +$/, "", c[i]) }
			want = (rows == 0) ? 16 : (rows == 1) ? 64 : (rows == 2) ? 256 : 1024
			if (c[2] != want) { print "row " rows + 1 ": max_sectors_kb " c[2] ", expected " want; bad = 1 }
			if (c[3] !~ /^[0-9]+( \([0-9]+\.\.[0-9]+\))?$/) { print "MB/s not a number: " c[3]; bad = 1 }
			if (c[4] !~ /^[0-9]+\.[0-9]+$/) { print "ratio not a number: " c[4]; bad = 1 }
			for (i = 5; i <= 7; i++)
				if (c[i] !~ /^[0-9]+$/) { print "count not a number: " c[i]; bad = 1 }
			rows++
			next
		}
		state == 2 { state = 3 }
		END {
			if (!state) { print "no table header"; exit 1 }
			if (rows != 4) { print rows " rows, expected 4"; bad = 1 }
			exit bad
		}' "$1"
}

msg=$(check_table "$TDIR/stdout") || fail "stdout: $msg"
[ -f "$out/results.md" ] || fail "no $out/results.md"
msg=$(check_table "$out/results.md") || fail "results.md: $msg"
diff <(grep '^|' "$TDIR/stdout") <(grep '^|' "$out/results.md") >&2 ||
	fail "results.md does not hold the tables printed on stdout"
grep -q 'split: max_sectors_kb=16 run 1/1' "$TDIR/stderr" || fail "no progress on stderr"

# nothing left behind
left=$(find "$work" -mindepth 1 -maxdepth 1)
[ -z "$left" ] || fail "blkfs-bench left $left"
[ -z "$(mounts_under "$work")" ] || fail "still mounted: $(mounts_under "$work")"
[ -z "$(pids_matching "$work")" ] || fail "still running: $(pids_matching "$work")"

# refused before anything starts
rc=0
TMPDIR=$work BLKFS=$BLKFS "$bench" nosuch >/dev/null 2>"$TDIR/err" || rc=$?
assert_eq "exit status for an unknown experiment" 2 "$rc"
grep -q "unknown experiment 'nosuch'" "$TDIR/err" || fail "unknown experiment: $(cat "$TDIR/err")"
rc=0
TMPDIR=$work BLKFS=$BLKFS "$bench" split --runs 0 >/dev/null 2>&1 || rc=$?
assert_eq "exit status for --runs 0" 2 "$rc"
[ -z "$(find "$work" -mindepth 1 -maxdepth 1)" ] || fail "a refused run left files in $work"
info "output well-formed, nothing left behind"

# blkfs-ab: the same binary twice, the table's form only
ab=$(realpath "$_LIB_DIR/../../tools/blkfs-ab")
rc=0
# (--any-load: inside make test the machine is never quiet; the numbers are not judged)
TMPDIR=$work timeout -k 10 240 "$ab" "$BLKFS" "$BLKFS" --backend ram --runs 1 --seconds 1 \
	--load quiet --any-load --tests w1,r32,W32,R32,dd4k >"$TDIR/ab.out" 2>"$TDIR/ab.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$TDIR/ab.err" >&2; fail "blkfs-ab exited $rc"; }
# ab_rows FILE ROW...: FILE has the table header and one well-formed row for each ROW
ab_rows() {
	local f=$1 t
	shift
	grep -qx '| test | OLD | NEW | NEW/OLD | CPU us/IO OLD, NEW (NEW/OLD) | ctxsw/IO OLD, NEW |' "$f" ||
		fail "blkfs-ab: no table header: $(cat "$f")"
	# a fio row has the daemon's CPU and context switches per I/O, dd's none
	local n='[0-9]+\.[0-9]+' cost
	cost="($n, $n \\($n\\) \\| $n, $n|- \\| -)"
	for t in "$@"; do
		grep -qE "^\| $(sed 's/[()]/\\&/g' <<<"$t") \| [0-9]+ \([0-9]+\.\.[0-9]+\) \| [0-9]+ \([0-9]+\.\.[0-9]+\) \| $n \| $cost \|$" \
			"$f" || fail "blkfs-ab: no well-formed row '$t': $(cat "$f")"
	done
}
ab_rows "$TDIR/ab.out" "4k randwrite psync QD1 (IOPS)" "4k randread QD32 (IOPS)" \
	"1M write QD32 (MiB/s)" "1M read QD32 (MiB/s)" "dd bs=4K buffered (MB/s)"
grep -q 'a quiet machine' "$TDIR/ab.out" || fail "blkfs-ab: the quiet table is not named: $(cat "$TDIR/ab.out")"
grep -q 'stress-ng' "$TDIR/ab.out" && fail "blkfs-ab --load quiet printed a loaded table"
grep -q 'quiet run 1/1 new: dd4k' "$TDIR/ab.err" || fail "blkfs-ab: no progress on stderr"
[ -z "$(find "$work" -mindepth 1 -maxdepth 1)" ] || fail "blkfs-ab left $(find "$work" -mindepth 1 -maxdepth 1)"
# under load: the loaded table, and its stress-ng gone after
rc=0
TMPDIR=$work timeout -k 10 240 "$ab" "$BLKFS" "$BLKFS" --backend ram --runs 1 --seconds 1 \
	--load stress --tests w1 >"$TDIR/ab3.out" 2>"$TDIR/ab3.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$TDIR/ab3.err" >&2; fail "blkfs-ab --load stress exited $rc"; }
ab_rows "$TDIR/ab3.out" "4k randwrite psync QD1 (IOPS)"
grep -q 'stress-ng --cpu 2 beside it' "$TDIR/ab3.out" || fail "blkfs-ab: no loaded table: $(cat "$TDIR/ab3.out")"
grep -q 'a quiet machine' "$TDIR/ab3.out" && fail "blkfs-ab --load stress printed a quiet table"
# stress_left ERRFILE: the stress-ng process group blkfs-ab named, if any of it still runs
stress_left() {
	local g
	g=$(sed -n 's/^blkfs-ab: stress-ng --cpu 2 started: process group \([0-9]*\)$/\1/p' "$1")
	[ -n "$g" ] || fail "blkfs-ab named no stress-ng process group: $(cat "$1")"
	pgrep -g "$g" || true
}
[ -z "$(stress_left "$TDIR/ab3.err")" ] || fail "blkfs-ab left its stress-ng running"
[ -z "$(find "$work" -mindepth 1 -maxdepth 1)" ] || fail "blkfs-ab left $(find "$work" -mindepth 1 -maxdepth 1)"
[ -z "$(mounts_under "$work")" ] || fail "blkfs-ab: still mounted: $(mounts_under "$work")"
[ -z "$(pids_matching "$work")" ] || fail "blkfs-ab: still running: $(pids_matching "$work")"

# interrupted while mounted on its loop device
TMPDIR=$work "$ab" "$BLKFS" "$BLKFS" --runs 1 --seconds 2 --load stress --tests w1,r1 \
	>/dev/null 2>"$TDIR/ab2.err" &
abpid=$!
_BGPIDS+=("$abpid")
# (generous: stress-ng starts first, and the machine may be at load 10)
for ((i = 0; i < 600; i++)); do
	[ -z "$(mounts_under "$work")" ] || break
	sleep 0.1
done
[ -n "$(mounts_under "$work")" ] || { cat "$TDIR/ab2.err" >&2; fail "blkfs-ab (aio) never mounted in 60 s"; }
kill -TERM "$abpid"
wait_gone 60 "$abpid" || fail "blkfs-ab did not stop 60 s after SIGTERM"
wait "$abpid" 2>/dev/null || true
grep -q 'run 1/1 new: r1' "$TDIR/ab2.err" && fail "blkfs-ab ran to its end: the signal was not what stopped it"
[ -z "$(stress_left "$TDIR/ab2.err")" ] || fail "interrupted blkfs-ab left its stress-ng running"
[ -z "$(find "$work" -mindepth 1 -maxdepth 1)" ] || fail "interrupted blkfs-ab left $(find "$work" -mindepth 1 -maxdepth 1)"
[ -z "$(pids_matching "$work")" ] || fail "interrupted blkfs-ab: still running: $(pids_matching "$work")"
left=$(losetup -l -n -O NAME,BACK-FILE | awk '$2 ~ /^\/dev\/shm\/blkfs-ab\./')
[ -z "$left" ] || fail "interrupted blkfs-ab left a loop device: $left"
compgen -G "/dev/shm/blkfs-ab.$abpid.img" >/dev/null && fail "interrupted blkfs-ab left /dev/shm/blkfs-ab.$abpid.img"
rc=0
"$ab" "$BLKFS" "$BLKFS" --runs x >/dev/null 2>&1 || rc=$?
assert_eq "blkfs-ab exit status for --runs x" 2 "$rc"
info "blkfs-ab: table well-formed, nothing left behind"
