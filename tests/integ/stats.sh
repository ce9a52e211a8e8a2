#!/usr/bin/env bash
# stats.sh: the numbers of `blkfs stat -i` and --prometheus are exact (issue 37).
#  - on a ram device, whose writes take microseconds, `blkfs stat -i` shows
#    the device level's w_await above 0 and below 1 ms (each I/O's time is
#    kept in nanoseconds, not rounded down to 0 ms), and aqu-sz above 0
#    under fio at QD32; .sys/DEV/stat_ns has the 17 fields in nanoseconds.
#  - --prometheus scraped right after the mount (before any I/O), after
#    I/O, and after I/O and a `reset` of .sys/DEV/latency: promtool passes
#    each; every device has its 8 latency histograms (2 levels x 4 ops)
#    from the first scrape on; every histogram series of every scrape has
#    the same `le` set; no counter, bucket, _sum or _count goes backwards
#    or disappears from one scrape to the next; no name ends in
#    _total_total.
#  - the exposition has iostat's aqu-sz counter, the time-weighted in-flight
#    time (node_exporter's node_disk_io_time_weighted_seconds_total), per
#    device and level, equal to field 11 of .sys/DEV/stat_ns when idle.
#  - .sys/DEV/latency is never cut: with a delay map of 17 s, each of a
#    device's 8 histograms (2 levels x 4 ops) spans from its fastest I/O
#    (microseconds) to 17 s, 20 buckets or more, and the file beyond
#    16 KiB; a read returns it whole (its size, every histogram with all
#    its bucket lines, a newline at the end), --prometheus has the 8
#    histograms with the same counts, promtool clean, and `blkfs stat`
#    their 8 percentile lines.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd awk fio promtool

start_blkfs "[cache]
size = 64M

[device ram0]
backend = ram
size = 64M

[device slow]
backend = ram
size = 16M
filters = delay
delay.write = 2ms
delay.read = 500us

[device wide]
backend = ram
size = 16M
filters = delay
delay.map = 8M 1M 17s
"

problems=()
# scrape N: blkfs stat --prometheus into $TDIR/promN, which promtool must pass
scrape() {
	"$BLKFS" stat "$MNT" --prometheus >"$TDIR/prom$1" || fail "blkfs stat --prometheus failed"
	promtool check metrics <"$TDIR/prom$1" >"$TDIR/promtool$1" 2>&1 ||
		problems+=("scrape $1: promtool check metrics: $(cat "$TDIR/promtool$1")")
}
# le_sets FILE...: each latency histogram series' le values, one line per series
le_sets() {
	awk '/^blkfs_latency_seconds_bucket/ {
		s = $1; match(s, /,le="[^"]*"/); le = substr(s, RSTART + 5, RLENGTH - 6)
		sub(/,le="[^"]*"/, "", s); l[FILENAME " " s] = l[FILENAME " " s] " " le }
		END { for (k in l) print l[k] }' "$@"
}
# monotonic A B: every counter and histogram sample of A is in B, not smaller
monotonic() {
	awk 'FNR == 1 { f++ }
		/^# TYPE / { type[$3] = $4; next }
		/^#/ { next }
		{ fam = $1; sub(/\{.*/, "", fam)
		  if (!(fam in type)) sub(/_(bucket|sum|count)$/, "", fam)
		  if (type[fam] != "counter" && type[fam] != "histogram") next
		  if (f == 1) { v[$1] = $2; next }
		  seen[$1] = 1
		  if (($1 in v) && $2 + 0 < v[$1] + 0) print "went backwards: " $1 " " v[$1] " -> " $2 }
		END { for (k in v) if (!(k in seen)) print "disappeared: " k }' "$1" "$2"
}

# ---- iostat's awaits on ram: microseconds, not 0
# written once first: a ram device's first write of a page allocates it,
# which on a loaded machine made the first interval's w_await 1.001 ms
ddev if=/dev/zero of="$MNT/ram0" bs=1M count=32 oflag=direct
"$BLKFS" stat "$MNT" ram0 -i 1 3 >"$TDIR/iostat" &
ipid=$!
_BGPIDS+=("$ipid")
end=$((SECONDS + 4))
while [ "$SECONDS" -lt "$end" ]; do
	ddev if=/dev/zero of="$MNT/ram0" bs=1M count=32 oflag=direct
done
watchdog_wait 60 "$MNT" "blkfs stat -i" "$ipid" || fail "blkfs stat -i failed"
info "blkfs stat -i 1 3 under 1 MiB O_DIRECT writes:"
grep -E '^(Device|ram0 +device)' "$TDIR/iostat" | sed 's/^/#   /'
awk '$1 == "ram0" && $2 == "device" && $4 > 0 { n++; if (!($8 > 0 && $8 < 1)) bad = 1 }
	END { exit !(n && !bad) }' "$TDIR/iostat" ||
	fail "device level w_await not between 0 and 1 ms on ram: $(cat "$TDIR/iostat")"

assert_eq "stat_ns fields" 17 "$(wc -w <"$MNT/.sys/ram0/stat_ns")"
assert_eq "fuse_stat_ns fields" 17 "$(wc -w <"$MNT/.sys/ram0/fuse_stat_ns")"

# ---- aqu-sz under QD32
"$BLKFS" stat "$MNT" ram0 -i 1 2 >"$TDIR/iostat32" &
ipid=$!
_BGPIDS+=("$ipid")
fio --name=qd32 --filename="$MNT/ram0" --rw=randwrite --bs=4k --iodepth=32 \
	--ioengine=libaio --direct=1 --time_based --runtime=3 --size=32M \
	--output="$TDIR/fio.out" >/dev/null 2>&1 || fail "fio failed: $(tail -n 5 "$TDIR/fio.out")"
watchdog_wait 60 "$MNT" "blkfs stat -i" "$ipid" || fail "blkfs stat -i failed"
info "blkfs stat -i 1 2 under fio 4k randwrite QD32:"
grep -E '^(Device|ram0 +device)' "$TDIR/iostat32" | sed 's/^/#   /'
awk '$1 == "ram0" && $2 == "device" && $4 > 0 { n++; if (!($9 > 0)) bad = 1 }
	END { exit !(n && !bad) }' "$TDIR/iostat32" ||
	fail "device level aqu-sz 0 under QD32: $(cat "$TDIR/iostat32")"

# ---- Prometheus: fixed buckets from the mount on, counters that never go back
scrape 0	# before any I/O
ddev if=/dev/zero of="$MNT/ram0" bs=4k count=64 oflag=direct conv=notrunc
ddev if=/dev/zero of="$MNT/slow" bs=4k count=16 oflag=direct conv=notrunc
dd if="$MNT/slow" of=/dev/null bs=4k count=16 iflag=direct status=none
sync "$MNT/ram0"
scrape 1
echo reset >"$MNT/.sys/slow/latency"
echo reset >"$MNT/.sys/ram0/latency"
ddev if=/dev/zero of="$MNT/slow" bs=64k count=4 oflag=direct conv=notrunc
scrape 2
for d in ram0 slow; do
	n=$(grep -c "^blkfs_latency_seconds_count{device=\"$d\"," "$TDIR/prom0" || true)
	[ "$n" -eq 8 ] || problems+=("scrape 0 (before any I/O) has $n latency histograms of $d, not 8")
done
nsets=$(le_sets "$TDIR/prom0" "$TDIR/prom1" "$TDIR/prom2" | sort -u | wc -l)
[ "$nsets" -eq 1 ] ||
	problems+=("$nsets different le sets: $(le_sets "$TDIR/prom0" "$TDIR/prom1" "$TDIR/prom2" | sort | uniq -c)")
for p in "0 1" "1 2"; do
	set -- $p
	bad=$(monotonic "$TDIR/prom$1" "$TDIR/prom$2")
	[ -z "$bad" ] || problems+=("scrape $1 to $2: $(head -n 5 <<<"$bad") ($(wc -l <<<"$bad") in all)")
done
! grep -E '^[^#]*_total_total' "$TDIR/prom2" >/dev/null ||
	problems+=("doubled suffix: $(grep -oE '^[a-z_]*_total_total' "$TDIR/prom2" | sort -u)")
grep -q '^blkfs_latency_seconds_count{device="slow",level="device",op="write"} 20$' "$TDIR/prom2" ||
	problems+=("slow's device level write count is not 20 after the reset: $(grep '^blkfs_latency_seconds_count{device="slow",level="device",op="write"}' "$TDIR/prom2")")
grep -q "^device write count 4 " "$MNT/.sys/slow/latency" ||
	problems+=(".sys/slow/latency after the reset: $(head -n 1 "$MNT/.sys/slow/latency")")
if [ "${#problems[@]}" -gt 0 ]; then
	printf 'problem: %s\n' "${problems[@]}" >&2
	fail "${#problems[@]} problems with the exposition (above)"
fi
info "--prometheus: 3 scrapes, one le set, nothing went backwards, promtool clean"

# ---- aqu-sz: the time-weighted in-flight counter, as the kernel's field 11
for d in ram0 slow; do
	for l in device fuse; do
		grep -q "^blkfs_io_time_weighted_seconds_total{device=\"$d\",level=\"$l\"} " "$TDIR/prom2" ||
			fail "--prometheus has no blkfs_io_time_weighted_seconds_total of $d's $l level"
	done
done
grep -q '^# TYPE blkfs_io_time_weighted_seconds_total counter$' "$TDIR/prom2" ||
	fail "blkfs_io_time_weighted_seconds_total is not a counter"
scrape 3
q=$(awk '{ printf "%.9f\n", $11 / 1e9 }' "$MNT/.sys/ram0/stat_ns")
qp=$(awk '/^blkfs_io_time_weighted_seconds_total\{device="ram0",level="device"\} / { print $2 }' "$TDIR/prom3")
info "ram0's time-weighted in-flight time: $qp s (stat_ns field 11: $q s)"
assert_eq "blkfs_io_time_weighted_seconds_total of ram0 against stat_ns field 11" "$q" "$qp"
awk -v v="$q" 'BEGIN { exit !(v > 0) }' || fail "ram0's time-weighted in-flight time is 0 after fio at QD32"

# ---- .sys/DEV/latency beyond 16 KiB, read whole
W=$MNT/wide
ddev if=/dev/zero of="$W" bs=64k count=16 oflag=direct conv=notrunc
fast_ios() {	# the fastest of each op, at both levels: microseconds
	local i
	for i in $(seq 100); do
		dd if="$W" of=/dev/null bs=512 count=1 iflag=direct status=none
		dd if=/dev/zero of="$W" bs=512 count=1 oflag=direct conv=notrunc status=none
		fallocate -p -o 4096 -l 4096 "$W"
		sync "$W"
	done
}
fast_ios
# the slowest: 17 s each (the delay map's region at 8M, and delay.flush);
# the kernel runs the write, the punch and the fsync one after another
echo 17s >"$MNT/.sys/wide/delay/flush"
slow_ios() {
	local pids=() p rc=0
	# libaio: the write leaves the inode lock to the punch while it waits
	fio --filename="$W" --bs=512 --size=4k --ioengine=libaio --direct=1 --number_ios=1 \
		--name=r --rw=read --offset=$((8 * 1048576)) \
		--name=w --rw=write --offset=$((8 * 1048576 + 65536)) \
		--output="$TDIR/fio-slow.out" >/dev/null 2>&1 &
	pids+=($!)
	sleep 0.2
	fallocate -p -o $((8 * 1048576 + 524288)) -l 4096 "$W" &
	pids+=($!)
	sync "$W" &
	pids+=($!)
	for p in "${pids[@]}"; do wait "$p" || rc=1; done
	return "$rc"
}
t0=$SECONDS
watchdog 180 "$MNT" "the I/Os of 17 s" slow_ios || fail "an I/O of 17 s failed"
info "the I/Os of 17 s took $((SECONDS - t0)) s in all"
echo 0 >"$MNT/.sys/wide/delay/flush"
echo clear >"$MNT/.sys/wide/delay/map"
cat "$MNT/.sys/wide/latency" >"$TDIR/wide.lat"
# on a loaded machine the fastest I/O of 100 may be tens of microseconds,
# a bucket or two short of 16 KiB: more tries for a fast one
for try in 1 2 3; do
	[ "$(wc -c <"$TDIR/wide.lat")" -le 16384 ] || break
	info ".sys/wide/latency is $(wc -c <"$TDIR/wide.lat") bytes: 100 more fast I/Os of each op ($try)"
	fast_ios
	cat "$MNT/.sys/wide/latency" >"$TDIR/wide.lat"
done
size=$(dd if="$MNT/.sys/wide/latency" bs=1000 status=none | wc -c)	# in many reads
got=$(wc -c <"$TDIR/wide.lat")
info ".sys/wide/latency: $got bytes in one read, $size in reads of 1000"
awk '/ count [0-9]+ sum_ns / { h = $1 " " $2 } / -> / { n[h]++ } END { for (k in n) printf "#   %s: %d buckets\n", k, n[k] }' \
	"$TDIR/wide.lat" | sort >&2
assert_eq ".sys/wide/latency read in pieces against in one" "$got" "$size"
[ "$(tail -c 1 "$TDIR/wide.lat" | od -An -c | tr -d ' ')" = '\n' ] ||
	fail ".sys/wide/latency does not end in a newline: $(tail -c 100 "$TDIR/wide.lat")"
# each histogram: its line, the usecs header, then one line per bucket from
# its fastest to its slowest (17 s: 16777216 -> 33554431)
bad=$(awk '
	/ count [0-9]+ sum_ns / { if (h != "") chk(); h = $1 " " $2; c = $4; hdr = 0; n = 0; sum = 0; last = ""; next }
	/^ +usecs : count +distribution$/ { hdr++; next }
	/^ +[0-9]+ -> [0-9]+ +: [0-9]+ +\|[* ]+\|$/ { n++; sum += $5; last = $1; next }
	{ print "a line that is none of the three: " $0 }
	function chk() {
		if (hdr != 1 || n < 20 || sum != c || last != 16777216)
			print h ": header " hdr ", " n " buckets (20 or more wanted), counts " sum " of " c ", slowest from " last " us"
		seen++
	}
	END { if (h != "") chk(); if (seen != 8) print seen " histograms, not 8" }' "$TDIR/wide.lat")
[ -z "$bad" ] || fail ".sys/wide/latency is not whole: $bad"
# Past 16 KiB the old buffer cut the file. Loaded, the fastest I/O may stay
# tens of microseconds and the file a few lines short of it: then these
# checks pass on the old code too (test_trace.c shows all 40
# buckets of the 8 histograms, 29 KB, whole either way)
[ "$got" -gt 16384 ] ||
	info "NOTE: .sys/wide/latency is $got bytes, not beyond 16 KiB on this (loaded) run: its read is not the old cut's case"
"$BLKFS" stat "$MNT" wide --prometheus >"$TDIR/promw" || fail "blkfs stat wide --prometheus failed"
promtool check metrics <"$TDIR/promw" >"$TDIR/promtoolw" 2>&1 ||
	fail "promtool check metrics (wide): $(cat "$TDIR/promtoolw")"
while read -r l o c; do
	grep -q "^blkfs_latency_seconds_count{device=\"wide\",level=\"$l\",op=\"$o\"} $c\$" "$TDIR/promw" ||
		fail "--prometheus: wide's $l $o histogram is not there with count $c: $(grep "^blkfs_latency_seconds_count{device=\"wide\",level=\"$l\",op=\"$o\"}" "$TDIR/promw")"
	grep -q "^blkfs_latency_seconds_bucket{device=\"wide\",level=\"$l\",op=\"$o\",le=\"+Inf\"} $c\$" "$TDIR/promw" ||
		fail "--prometheus: wide's $l $o histogram has no +Inf bucket of $c"
done < <(awk '/ count [0-9]+ sum_ns / { print $1, $2, $4 }' "$TDIR/wide.lat")
n=$("$BLKFS" stat "$MNT" wide | grep -c '^ *latency ' || true)
assert_eq "blkfs stat's latency lines of wide (.sys/wide/latency past 16 KiB)" 8 "$n"
info ".sys/wide/latency read whole ($got bytes), its 8 histograms in --prometheus and blkfs stat, promtool clean"

stop_blkfs
