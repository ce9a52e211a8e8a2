#!/usr/bin/env bash
# filters.sh: the log and delay filters in a real mount.
#  - log: 4 MiB of random data written with dd bs=1M conv=fsync into a
#    512/4096 device with max_io = 64K; the trace (log.path relative to the
#    config file) shows only WRITEs whose POS and LEN are multiples of 512,
#    LEN <= 64K, covering exactly the range written, each once, and a FLUSH
#    after the last of them; the data reads back equal.
#  - delay: delay.write = 20ms makes a small dd conv=fsync take at least
#    20 ms, and with log above delay every WRITE line's latency includes it.
#  - If the mount serves .sys/DEV/FILTER/ATTR, the live knobs work there.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk sort date

MiB=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((4 * MiB))

# ms_since START_NS: milliseconds from START_NS (date +%s%N) to now.
ms_since() {
	echo $((($(date +%s%N) - $1) / 1000000))
}

# ---------------------------------------------------------------------------
info "log: what reaches the backend"
start_blkfs "[device r0]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096
max_io = 64K
filters = log
log.path = trace"
trace=$TDIR/trace
[ -f "$trace" ] || fail "no trace at $trace (log.path is relative to the config's directory)"
head -n 1 "$trace" | grep -q '^# blkfs log filter: device r0' ||
	fail "trace header: $(head -n 1 "$trace")"

# 4 MiB at 2 MiB: the range the WRITEs must cover, exactly.
ddev if="$src" of="$MNT/r0" bs=1M seek=2 conv=fsync,notrunc
start=$((2 * MiB))
end=$((6 * MiB))

# Every I/O line is well formed (grep -E: mawk has no {6}).
if grep -nvE '^(#|[0-9]+\.[0-9]{6} (READ|WRITE|FLUSH|DISCARD|WRITE_ZEROES) [0-9]+ [0-9]+ (0|-[0-9]+) [0-9]+$)' \
	"$trace"; then
	fail "malformed trace lines (above)"
fi

out=$(awk -v start="$start" -v end="$end" '
	/^#/ { next }
	$2 == "WRITE" {
		n++; sum += $4; last_write = NR
		if ($3 % 512 || $4 % 512 || $4 == 0 || $4 > 65536) {
			print "misshaped: line " NR ": " $0; bad = 1
		}
		if ($3 < start || $3 + $4 > end) { print "outside: line " NR ": " $0; bad = 1 }
		if ($5 != 0) { print "failed: line " NR ": " $0; bad = 1 }
	}
	$2 == "FLUSH" && $5 == 0 { last_flush = NR }
	END {
		if (!n) { print "no WRITE lines"; bad = 1 }
		if (sum != end - start) { print "WRITE bytes " sum ", want " end - start; bad = 1 }
		if (last_flush <= last_write) { print "no FLUSH after the last WRITE"; bad = 1 }
		print "writes " n " bytes " sum
		exit bad
	}' "$trace") || fail "trace: $out"
info "trace: $out"

# Together with the sum: sorted, each WRITE starts where the one before ended.
awk '$2 == "WRITE" { print $3, $4 }' "$trace" | sort -n |
	awk -v start="$start" -v end="$end" '
		{ if ($1 != (NR == 1 ? start : e)) { print "gap or overlap at " $1; bad = 1 } e = $1 + $2 }
		END { if (e != end) { print "ends at " e; bad = 1 } exit bad }' ||
	fail "WRITEs do not tile [$start, $end) exactly once"

cmp_range "$src" 0 "$MNT/r0" "$start" $((4 * MiB))
assert_zero "$MNT/r0" 0 "$start"

# The live knobs, where the mount serves them (.sys/DEV/FILTER/ATTR).
sys=$MNT/.sys/r0/log
if [ -e "$sys/enabled" ]; then
	assert_eq "log path attr" "$trace" "$(cat "$sys/path")"
	assert_eq "log enabled attr" 1 "$(cat "$sys/enabled")"
	echo 0 >"$sys/enabled"
	n=$(grep -vc '^#' "$trace")
	ddev if="$src" of="$MNT/r0" bs=64K count=4 seek=200 conv=fsync,notrunc
	assert_eq "trace lines while disabled" "$n" "$(grep -vc '^#' "$trace")"
	expect_fail sh -c "echo 2 >'$sys/enabled'" 2>/dev/null
	assert_eq "log enabled after a bad value" 0 "$(cat "$sys/enabled")"
	echo 1 >"$sys/enabled"
	ddev if="$src" of="$MNT/r0" bs=64K count=4 seek=220 conv=fsync,notrunc
	[ "$(grep -vc '^#' "$trace")" -gt "$n" ] || fail "no trace lines after enabled = 1"
else
	info "no $sys: live knobs not checked"
fi
stop_blkfs

# ---------------------------------------------------------------------------
info "delay: write latency"
start_blkfs "[device d0]
backend = ram
size = 16M
filters = delay
delay.write = 20ms

[device d1]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096
filters = log, delay
log.path = trace2
delay.write = 20ms"

t0=$(date +%s%N)
ddev if="$src" of="$MNT/d0" bs=64K count=4 conv=fsync,notrunc
ms=$(ms_since "$t0")
info "d0: dd of 256K with conv=fsync took $ms ms"
[ "$ms" -ge 20 ] || fail "d0: dd conv=fsync took $ms ms with delay.write = 20ms"
cmp_range "$src" 0 "$MNT/d0" 0 $((256 << 10))

t0=$(date +%s%N)
ddev if="$src" of="$MNT/d1" bs=64K count=4 seek=1 conv=fsync,notrunc
ms=$(ms_since "$t0")
[ "$ms" -ge 20 ] || fail "d1: dd conv=fsync took $ms ms with delay.write = 20ms"
cmp_range "$src" 0 "$MNT/d1" $((64 << 10)) $((256 << 10))
# log sits above delay: the latency it sees includes the 20 ms.
out=$(awk '$2 == "WRITE" { n++; if ($6 < 20000) { print "fast: " $0; bad = 1 } }
	END { if (!n) { print "no WRITE lines"; bad = 1 } exit bad }' "$TDIR/trace2") ||
	fail "d1 trace: $out"

sys=$MNT/.sys/d0/delay
if [ -e "$sys/write" ]; then
	assert_eq "delay write attr" 20ms "$(cat "$sys/write")"
	echo 1ms-3ms >"$sys/write"
	assert_eq "delay write attr after echo" 1ms-3ms "$(cat "$sys/write")"
	expect_fail sh -c "echo soon >'$sys/write'" 2>/dev/null
	assert_eq "delay write after a bad value" 1ms-3ms "$(cat "$sys/write")"
else
	info "no $sys: live knobs not checked"
fi
stop_blkfs
