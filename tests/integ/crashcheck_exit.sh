#!/usr/bin/env bash
# crashcheck_exit.sh: `blkfs crashcheck`'s exit statuses and its one folder
# per run, on a dm-log-writes log written here by hand (--base zeros or an
# image file: no blkfs mount).
#  - Exit 0 when no state failed, 1 when one did, 2 for bad input (an
#    unknown option, a log that cannot be read, one that is no log), 3 for
#    an error of its own (here: --scratch on a 1 MiB tmpfs, too small for
#    the scratch images of a 1 MiB base).
#  - Each run prints its folder, scratch/blkfs-crash-PID, and leaves in
#    --scratch (a private one: others run crashcheck beside this test)
#    exactly the blkfs-crash-* entries it had before: after a passing run,
#    a failing one with --keep elsewhere (the outputs there, and named), a
#    run that stops on an error, and runs stopped by SIGTERM and SIGINT
#    (which die of that signal, their checkers killed). A failing run
#    without --keep keeps its folder with the failing states' outputs and
#    nothing else, and says so.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_blkfs
require python3 timeout

# mklog OUT SPEC...: a dm-log-writes log with 4096-byte sectors. SPEC:
# wN (write block N), f (flush), mTEXT (mark).
mklog() {
	python3 - "$@" <<'PY'
import struct, sys
S = 4096
out, specs = sys.argv[1], sys.argv[2:]
ents = b''
for sp in specs:
    if sp[0] == 'w':
        n = int(sp[1:])
        ents += struct.pack('<QQQQ', n, 1, 0, 0).ljust(S, b'\0') + bytes([n % 251 + 1]) * S
    elif sp == 'f':
        ents += struct.pack('<QQQQ', 0, 0, 1, 0).ljust(S, b'\0')
    elif sp[0] == 'm':
        t = sp[1:].encode()
        ents += (struct.pack('<QQQQ', 0, 0, 8, len(t)) + t).ljust(S, b'\0')
sup = struct.pack('<QQQI', 0x6a736677736872, 1, len(specs), S).ljust(S, b'\0')
open(out, 'wb').write(sup + ents)
PY
}

scratch=$TDIR/scratch
mkdir -p "$scratch"
log=$TDIR/a.log
mklog "$log" w0 w1 f m1 w2 w3 m2	# 3 crash points, 6 states

# entries: the blkfs-crash-* entries in the scratch folder.
entries() { find "$scratch" -mindepth 1 -maxdepth 1 -name 'blkfs-crash-*' | sort; }
# run WANT WHAT ARGS...: crashcheck ARGS (60 s at most) exits WANT.
run() {
	local want=$1 what=$2 st
	shift 2
	set +e
	timeout -k 5 60 "$BLKFS" crashcheck "$@" >"$TDIR/out" 2>"$TDIR/err"
	st=$?
	set -e
	[ "$st" = "$want" ] ||
		fail "$what: exit $st, expected $want: $(cat "$TDIR/out" "$TDIR/err")"
}
# same WHAT: the scratch folder holds the blkfs-crash-* entries it held before.
same() {
	[ "$(entries)" = "$before" ] ||
		fail "$1: blkfs-crash-* entries in $scratch: before [$before], after [$(entries)]: $(ls -lR "$scratch")"
}
# folder: the folder the last run printed.
folder() { sed -n 's/^crashcheck: scratch folder //p' "$TDIR/err"; }

before=$(entries)
info "0: no state failed"
run 0 "a passing run" "$log" --base zeros --scratch "$scratch" --check true
[ -n "$(folder)" ] || fail "the folder is not printed: $(cat "$TDIR/err")"
case $(folder) in "$scratch"/blkfs-crash-[0-9]*) ;; *) fail "folder $(folder) is not in $scratch" ;; esac
same "a passing run"

info "1: a state failed; --keep elsewhere"
run 1 "a failing run" "$log" --base zeros --scratch "$scratch" --check false --keep "$TDIR/kept"
same "a failing run with --keep"
[ "$(find "$TDIR/kept" -name 'state-*.out' | wc -l)" = 6 ] || fail "--keep: $(ls "$TDIR/kept")"
grep -q "kept the output of 6 failing states in $TDIR/kept" "$TDIR/err" ||
	fail "where the outputs are kept is not said: $(cat "$TDIR/err")"

info "1: a state failed; the outputs kept in the run's folder, alone"
run 1 "a failing run" "$log" --base zeros --scratch "$scratch" --check false
dir=$(folder)
[ "$(entries)" = "$(printf '%s\n' "$before" "$dir" | sed '/^$/d' | sort)" ] ||
	fail "a failing run: entries [$(entries)], expected its folder $dir"
if [ "$(find "$dir" -mindepth 1 | wc -l)" != 6 ] || [ "$(find "$dir" -name 'state-*.out' | wc -l)" != 6 ]; then
	fail "a failing run's folder holds more than the 6 outputs: $(ls -l "$dir")"
fi
grep -q "kept the output of 6 failing states in $dir" "$TDIR/err" ||
	fail "where the outputs are kept is not said: $(cat "$TDIR/err")"
rm -r "$dir"

info "2: bad input"
run 2 "an unknown option" "$log" --base zeros --scratch "$scratch" --check true --no-such-option
run 2 "a log that cannot be read" "$TDIR/nosuch.log" --base zeros --scratch "$scratch" --check true
head -c 4096 /dev/urandom >"$TDIR/junk"
run 2 "a file that is no log" "$TDIR/junk" --base zeros --scratch "$scratch" --check true
grep -q "not a dm-log-writes log" "$TDIR/err" || fail "junk: $(cat "$TDIR/err")"
head -c 100 "$log" >"$TDIR/short.log"
run 2 "a truncated log" "$TDIR/short.log" --base zeros --scratch "$scratch" --check true
same "bad input"

info "3: an error of its own: the scratch space runs out"
if [ "$(id -u)" = 0 ]; then
	head -c 1M /dev/urandom >"$TDIR/base.img"
	small=$TDIR/small
	mount_top tmpfs "$small" -t tmpfs -o size=1M
	run 3 "scratch space too small" "$log" --base "$TDIR/base.img" --scratch "$small" --check true
	grep -q "No space left on device" "$TDIR/err" || fail "ENOSPC: $(cat "$TDIR/err")"
	grep -q "^crashcheck: scratch folder $small/blkfs-crash-" "$TDIR/err" ||
		fail "the run made no folder before its error: $(cat "$TDIR/err")"
	[ -z "$(find "$small" -mindepth 1)" ] || fail "left in the scratch folder: $(ls -lR "$small")"
	# a 4 MiB one is enough: the same run passes there
	umount "$small"
	mount tmpfs "$small" -t tmpfs -o size=4M
	run 0 "scratch space enough" "$log" --base "$TDIR/base.img" --scratch "$small" --check true
	[ -z "$(find "$small" -mindepth 1)" ] || fail "left in the scratch folder: $(ls -lR "$small")"
	umount "$small"
else
	info "not root: no tmpfs (exit 3 from a --scratch that is a file, below)"
fi
: >"$TDIR/afile"
run 3 "a --scratch that is a file" "$log" --base zeros --scratch "$TDIR/afile" --check true
same "errors"

info "signals: the run stops, cleans up, and dies of it"
cat >"$TDIR/slow.sh" <<'SH'
#!/bin/sh
sleep 60
SH
chmod +x "$TDIR/slow.sh"
two_checkers() {
	local n
	n=$(pids_matching "$TDIR/slow.sh" | wc -l)
	[ "$n" -ge 2 ] || { echo "$n checkers"; return 1; }
}
for sig in TERM INT; do
	"$BLKFS" crashcheck "$log" --base zeros --scratch "$scratch" --jobs 2 \
		--check "$TDIR/slow.sh" >"$TDIR/out" 2>"$TDIR/err" &
	pid=$!
	_BGPIDS+=("$pid")
	# both checkers running
	wait_until 30 "two checkers running" two_checkers
	[ -d "$scratch/blkfs-crash-$pid" ] || fail "SIG$sig: no folder $scratch/blkfs-crash-$pid"
	kill -"$sig" "$pid"
	wait_gone 30 "$pid" || fail "crashcheck still runs 30 s after SIG$sig"
	st=0
	wait "$pid" || st=$?
	want=$((128 + $(kill -l "$sig")))
	[ "$st" = "$want" ] || fail "SIG$sig: exit $st, expected $want: $(cat "$TDIR/err")"
	wait_until 10 "the checkers killed" no_pids_matching "$TDIR/slow.sh"
	same "a run stopped by SIG$sig"
done
