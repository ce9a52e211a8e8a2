#!/usr/bin/env bash
# trace_fuse.sh: the second level of `blkfs trace` (--fuse): the user's
# requests as FUSE received them, on their own device number, with the pid
# FUSE names in each, beside the device level.
#  - 64 O_DIRECT 4K writes, 8 O_DIRECT 64K reads and a buffered write with
#    fsync, traced at the FUSE level: blkparse reads the trace without
#    complaint; every event is on 241:N (N the minor of .sys/ram0/dev); the
#    writer's pid has exactly 64 completed 4K writes and the PROCESS note
#    names it "dd"; the reader's pid 8 completed 64K reads; the fsync is a
#    flush (F); every Q has its D and C.
#  - .sys/ram0/latency has the FUSE level's write, read and flush lines;
#    .sys/ram0/fuse_stat counted the 64 writes and their sectors.
#  - both levels traced at once on a device behind delay.write = 2ms: 20
#    writes at each level, btt's Q2C at the FUSE level (what the writer
#    waited) at least 1.5 ms and not below the device level's D2C.
#  - blkfs stat -i has FUSE level lines with writes; --prometheus has the
#    FUSE level's histograms and passes promtool; `reset` clears both levels.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd awk blkparse btt promtool

start_blkfs "[cache]
size = 64M

[device ram0]
backend = ram
size = 64M

[device slow]
backend = ram
size = 16M
filters = delay
delay.write = 2ms"

# events NAME: "ACTION RWBS SECTORS PID DEVICE COMMAND" per event
events() { blkparse -q -i "$TDIR/$1" -f "%a %d %n %p %M,%m %C\n" 2>/dev/null | grep -v "^Input file"; }

btt_avg() {
	blkparse -q -i "$TDIR/$1" -d "$TDIR/$1.bin" -o /dev/null >/dev/null 2>&1
	(cd "$TDIR" && btt -i "$1.bin") | awk -v r="$2" '$1 == r { print $3; f = 1; exit } END { if (!f) print 0 }'
}

minor=$(cut -d: -f2 "$MNT/.sys/ram0/dev")
fdev="241,$minor"
read -r -a fs0 <"$MNT/.sys/ram0/fuse_stat"

# ---- the FUSE level alone
trace_start f ram0 --fuse
# the trace thread names a pid from /proc/PID/comm when it first meets it (at
# most a few ms after the I/O, more under load): the writer outlives its writes
{
	head -c 262144 /dev/zero
	sleep 2
} | dd of="$MNT/ram0" bs=4k iflag=fullblock oflag=direct conv=nocreat status=none &
wpid=$!
wait "$wpid" || fail "the direct writer failed"
dd if="$MNT/ram0" of=/dev/null bs=64k count=8 iflag=direct status=none &
rpid=$!
wait "$rpid" || fail "the direct reader failed"
ddev if=/dev/zero of="$MNT/ram0" bs=4k count=1 seek=1000 conv=notrunc,fsync
trace_done f
read -r -a fs1 <"$MNT/.sys/ram0/fuse_stat"

out=$(blkparse -i "$TDIR/f" 2>&1) || fail "blkparse failed: $(printf '%s\n' "$out" | tail -n 5)"
# blkparse counts missing sequence numbers only in what it reads from a
# pipe (a file's "Skips" are always 0), in one batch (-b)
out=$(blkparse -b 100000000 -i - <"$TDIR/f.blktrace.0" 2>&1) ||
	fail "blkparse -i - failed: $(printf '%s\n' "$out" | tail -n 5)"
grep -q "^Skips: 0 forward" <<<"$out" || fail "blkparse reports skips: $(grep -i skip <<<"$out")"
events f >"$TDIR/f.ev"
[ -s "$TDIR/f.ev" ] || fail "no event at the FUSE level (does the request path call bt_req_begin?)"
other=$(awk -v d="$fdev" '$5 != d' "$TDIR/f.ev" | head -n 3)
[ -z "$other" ] || fail "events not on $fdev: $other"
info "FUSE level of ram0 is $fdev: $(wc -l <"$TDIR/f.ev") events"
nw=$(awk -v p="$wpid" '$1 == "C" && $2 ~ /W/ && $3 == 8 && $4 == p' "$TDIR/f.ev" | wc -l)
assert_eq "4K writes completed for the writer's pid $wpid" 64 "$nw"
awk -v p="$wpid" '$4 == p && $6 == "dd" { f = 1 } END { exit !f }' "$TDIR/f.ev" ||
	fail "the writer's events are not named dd: $(awk -v p="$wpid" '$4 == p' "$TDIR/f.ev" | head -n 2)"
nr=$(awk -v p="$rpid" '$1 == "C" && $2 ~ /R/ && $3 == 128 && $4 == p' "$TDIR/f.ev" | wc -l)
assert_eq "64K reads completed for the reader's pid $rpid" 8 "$nr"
awk '$1 == "C" && $2 ~ /F/ { f = 1 } END { exit !f }' "$TDIR/f.ev" ||
	fail "no flush (the fsync) at the FUSE level: $(awk '$1 == "C"' "$TDIR/f.ev" | tail -n 3)"
read -r q d c < <(awk '$1 == "Q" { q++ } $1 == "D" { d++ } $1 == "C" { c++ }
	END { print q + 0, d + 0, c + 0 }' "$TDIR/f.ev")
{ [ "$q" -eq "$d" ] && [ "$q" -eq "$c" ]; } || fail "Q $q, D $d, C $c: each request is one of each"

lat=$(cat "$MNT/.sys/ram0/latency")
for want in "fuse write count" "fuse read count" "fuse flush count"; do
	grep -q "^$want [1-9]" <<<"$lat" || fail ".sys/ram0/latency has no '$want': $lat"
done
# fuse_stat: field 5 writes, field 7 sectors written
[ $((fs1[4] - fs0[4])) -ge 65 ] || fail "fuse_stat counted $((fs1[4] - fs0[4])) writes, expected 65 or more"
[ $((fs1[6] - fs0[6])) -ge $((65 * 8)) ] ||
	fail "fuse_stat counted $((fs1[6] - fs0[6])) sectors written, expected $((65 * 8)) or more"

# ---- both levels at once, behind a 2 ms delay
echo reset >"$MNT/.sys/slow/latency"
trace_start sd slow
trace_start sf slow --fuse
ddev if=/dev/zero of="$MNT/slow" bs=4k count=20 oflag=direct
trace_done sf
trace_done sd
cf=$(events sf | awk '$1 == "C" && $2 ~ /W/' | wc -l)
cd=$(events sd | awk '$1 == "C" && $2 ~ /W/' | wc -l)
assert_eq "writes completed at the FUSE level" 20 "$cf"
assert_eq "writes completed at the device level" 20 "$cd"
q2c=$(btt_avg sf Q2C) d2c=$(btt_avg sd D2C)
info "delay.write = 2ms: the writer waited $q2c s (FUSE Q2C), the device took $d2c s (D2C)"
awk -v a="$q2c" -v b="$d2c" 'BEGIN { exit !(a >= 0.0015 && a >= b) }' ||
	fail "FUSE level Q2C $q2c s against device D2C $d2c s"
grep -q "^fuse write count 20 " "$MNT/.sys/slow/latency" ||
	fail ".sys/slow/latency: $(cat "$MNT/.sys/slow/latency")"

# ---- the stat views at both levels
"$BLKFS" stat "$MNT" ram0 -i 0.5 3 >"$TDIR/iostat" &
ipid=$!
_BGPIDS+=("$ipid")
for _ in 1 2 3; do
	ddev if=/dev/zero of="$MNT/ram0" bs=4k count=2048 oflag=direct
done
watchdog_wait 60 "$MNT" "blkfs stat -i" "$ipid" || fail "blkfs stat -i failed"
awk '$1 == "ram0" && $2 == "fuse" && $4 > 0 { f = 1 } END { exit !f }' "$TDIR/iostat" ||
	fail "blkfs stat -i saw no writes at the FUSE level: $(cat "$TDIR/iostat")"
"$BLKFS" stat "$MNT" --prometheus >"$TDIR/prom" || fail "blkfs stat --prometheus failed"
promtool check metrics <"$TDIR/prom" >"$TDIR/promtool.out" 2>&1 ||
	fail "promtool check metrics: $(cat "$TDIR/promtool.out")"
for want in 'blkfs_latency_seconds_count{device="ram0",level="fuse",op="write"} ' \
	'blkfs_latency_seconds_bucket{device="slow",level="fuse",op="write",le="+Inf"} 20' \
	'blkfs_ios_total{device="slow",level="fuse",op="write"} 20'; do
	grep -qF "$want" "$TDIR/prom" || fail "--prometheus has no line starting '$want'"
done
"$BLKFS" stat "$MNT" ram0 --json | grep '"latency_fuse_write": { "count": ' >/dev/null ||
	fail "blkfs stat --json has no latency_fuse_write"
echo reset >"$MNT/.sys/ram0/latency"
[ -z "$(cat "$MNT/.sys/ram0/latency")" ] || fail "reset left: $(cat "$MNT/.sys/ram0/latency")"

stop_blkfs
