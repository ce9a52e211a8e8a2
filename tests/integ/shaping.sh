#!/usr/bin/env bash
# shaping.sh: what reaches the backend, read from the log filter's trace, on
# ram devices with 512-byte logical and 4096-byte physical blocks, max_io 1M.
#  - A live `echo 16 > .sys/DEV/queue/max_sectors_kb`: a 4 MiB dd bs=1M
#    conv=fsync then reaches the backend only in WRITEs of at most 16K that
#    tile the range (split_ios counts the cuts, writeback_copy_bytes stays 0),
#    and the data reads back equal; after `echo 1024`, WRITEs above 16K
#    come back.
#  - 512-byte writes at odd sectors, each with conv=fsync, over data put
#    there with O_DIRECT (so the cache does not hold the rest of the
#    physical block): with rmw = cache (the default) every WRITE has POS and
#    LEN multiples of 4096 and blkfs_stat reports rmw_read_bytes > 0, both
#    with the automatic 4K cache block and with cache_block_size = 512; with
#    rmw = device (and cache_block_size = 512) WRITEs of LEN 512 reach the
#    backend. The data always reads back as expected.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk sort cp

MiB=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((8 * MiB))

start_blkfs "[cache]
size = 64M

[device ram0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
max_io = 1M
filters = log
log.path = trace0

[device c512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
max_io = 1M
cache_block_size = 512
filters = log
log.path = trace1

[device d512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
max_io = 1M
cache_block_size = 512
rmw = device
filters = log
log.path = trace2"

for t in trace0 trace1 trace2; do
	[ -f "$TDIR/$t" ] || fail "no trace at $TDIR/$t"
done

# mark TRACE: the number of lines in TRACE now (the start of what comes next)
mark() {
	wc -l <"$1"
}

# since TRACE MARK [END]: the I/O lines of TRACE after line MARK (up to line END)
since() {
	sed -n "$(($2 + 1)),${3:-\$}p" "$1" | grep -v '^#' || true
}

# bstat DEV NAME: a blkfs_stat value, read now
bstat() {
	awk -v n="$2" '$1 == n { print $2; f = 1 } END { exit !f }' "$MNT/.sys/$1/blkfs_stat" ||
		fail "$1: blkfs_stat has no $2"
}

# ---------------------------------------------------------------------------
info "max_sectors_kb = 16: a 4 MiB dd reaches the backend in WRITEs <= 16K"
trace=$TDIR/trace0
q=$MNT/.sys/ram0/queue
assert_eq max_sectors_kb 1024 "$(cat "$q/max_sectors_kb")"
echo 16 >"$q/max_sectors_kb"
assert_eq "max_sectors_kb after echo 16" 16 "$(cat "$q/max_sectors_kb")"
m=$(mark "$trace")
splits0=$(bstat ram0 split_ios)
ddev if="$src" of="$MNT/ram0" bs=1M count=4 seek=4 conv=fsync,notrunc
start=$((4 * MiB))
end=$((8 * MiB))
out=$(since "$trace" "$m" | awk -v start="$start" -v end="$end" '
	$2 == "WRITE" {
		n++; sum += $4
		if ($4 > 16384 || $4 == 0) { print "too large: " $0; bad = 1 }
		if ($3 % 512 || $4 % 512) { print "not 512-aligned: " $0; bad = 1 }
		if ($3 < start || $3 + $4 > end) { print "outside: " $0; bad = 1 }
		if ($5 != 0) { print "failed: " $0; bad = 1 }
	}
	END {
		if (sum != end - start) { print "WRITE bytes " sum ", want " end - start; bad = 1 }
		print "writes " n " bytes " sum
		exit bad
	}') || fail "max_sectors_kb 16: $out"
info "trace: $out"
since "$trace" "$m" | awk '$2 == "WRITE" { print $3, $4 }' | sort -n |
	awk -v start="$start" -v end="$end" '
		{ if ($1 != (NR == 1 ? start : e)) { print "gap or overlap at " $1; bad = 1 } e = $1 + $2 }
		END { if (e != end) { print "ends at " e; bad = 1 } exit bad }' ||
	fail "WRITEs after max_sectors_kb = 16 do not tile [$start, $end) exactly once"
cmp_range "$src" 0 "$MNT/ram0" "$start" $((4 * MiB))
[ "$(bstat ram0 split_ios)" -gt "$splits0" ] ||
	fail "split_ios did not grow ($splits0 -> $(bstat ram0 split_ios)) with max_sectors_kb 16"
assert_eq writeback_copy_bytes 0 "$(bstat ram0 writeback_copy_bytes)"

info "max_sectors_kb = 1024 again: larger WRITEs come back"
echo 1024 >"$q/max_sectors_kb"
assert_eq "max_sectors_kb after echo 1024" 1024 "$(cat "$q/max_sectors_kb")"
m=$(mark "$trace")
ddev if="$src" of="$MNT/ram0" bs=1M count=4 seek=16 conv=fsync,notrunc
out=$(since "$trace" "$m" | awk '
	$2 == "WRITE" { n++; sum += $4; if ($4 > max) max = $4
		if ($4 > 1048576) { print "above max_io: " $0; bad = 1 } }
	END {
		if (max <= 16384) { print "no WRITE above 16K (largest " max ")"; bad = 1 }
		if (sum != 4 * 1048576) { print "WRITE bytes " sum; bad = 1 }
		print "writes " n " largest " max
		exit bad
	}') || fail "max_sectors_kb 1024: $out"
info "trace: $out"
cmp_range "$src" 0 "$MNT/ram0" $((16 * MiB)) $((4 * MiB))

# ---------------------------------------------------------------------------
# 512-byte writes at odd sectors of [0, 1 MiB), each dd with conv=fsync, over
# data written with O_DIRECT (dropped from the cache: the rest of each
# physical block is not uptodate). Several land in one physical block.
sectors="1 3 9 15 17 100 255 1001 1023 1500 2047"

# rmw_case DEV TRACE: run the writes, then check the data against a copy
# with the same writes applied; leaves M and M2, the trace marks before and
# after the writes (the checks read).
rmw_case() {
	local dev=$1 trace=$2 s k=0 exp=$TDIR/expected.$1
	ddev if="$src" of="$MNT/$dev" bs=1M count=1 oflag=direct conv=fsync,notrunc
	dd if="$src" of="$exp" bs=1M count=1 status=none
	M=$(mark "$trace")
	for s in $sectors; do
		k=$((k + 1))
		# sector s of the device gets sector 4096 + k of the source
		ddev if="$src" of="$MNT/$dev" bs=512 count=1 skip=$((4096 + k)) seek="$s" \
			conv=fsync,notrunc
		dd if="$src" of="$exp" bs=512 count=1 skip=$((4096 + k)) seek="$s" \
			conv=notrunc status=none
	done
	M2=$(mark "$trace")
	cmp_range "$exp" 0 "$MNT/$dev" 0 "$MiB"
	# and what reached the backend, too: read past the cache with O_DIRECT
	cmp <(dd if="$MNT/$dev" bs=1M count=1 iflag=direct status=none) "$exp" ||
		fail "$dev: O_DIRECT read differs from the expected data"
}

for dev in ram0 c512; do
	case $dev in ram0) trace=$TDIR/trace0 ;; c512) trace=$TDIR/trace1 ;; esac
	info "$dev: 512-byte writes, rmw = cache: only whole physical blocks"
	rmw0=$(bstat "$dev" rmw_read_bytes)
	rmw_case "$dev" "$trace"
	out=$(since "$trace" "$M" "$M2" | awk '
		$2 == "WRITE" { n++
			if ($3 % 4096 || $4 % 4096) { print "not whole physical blocks: " $0; bad = 1 }
			if ($3 >= 1048576) { print "outside: " $0; bad = 1 } }
		END { if (n < 11) { print "only " n " WRITEs for 11 fsynced writes"; bad = 1 }
			print "writes " n; exit bad }') || fail "$dev: $out"
	info "$dev trace: $out"
	rmw1=$(bstat "$dev" rmw_read_bytes)
	[ "$rmw1" -gt "$rmw0" ] || fail "$dev: rmw_read_bytes $rmw0 -> $rmw1 after 512-byte writes"
	info "$dev: rmw_read_bytes $rmw1"
done
assert_eq "c512 cache block" 512 "$(cat "$MNT/.sys/c512/cache_block_size")"
assert_eq "c512 partial_pblk_writes" 0 "$(bstat c512 partial_pblk_writes)"

info "d512: rmw = device: the 512-byte writes go as they are"
trace=$TDIR/trace2
rmw_case d512 "$trace"
out=$(since "$trace" "$M" "$M2" | awk '
	$2 == "WRITE" { n++
		if ($3 % 512 || $4 % 512) { print "not 512-aligned: " $0; bad = 1 }
		if ($4 == 512) n512++ }
	$2 == "READ" { r++ }
	END { if (n512 < 1) { print "no WRITE of LEN 512"; bad = 1 }
		if (r) { print r " READs (rmw = device reads nothing)"; bad = 1 }
		print "writes " n ", " n512 " of 512"; exit bad }') || fail "d512: $out"
info "d512 trace: $out"
[ "$(bstat d512 partial_pblk_writes)" -gt 0 ] || fail "d512: partial_pblk_writes 0"

stop_blkfs
