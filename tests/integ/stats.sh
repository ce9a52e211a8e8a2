#!/usr/bin/env bash
# stats.sh: the numbers of `blkfs stat -i` and --prometheus are exact (issue 37).
#  - on a ram device, whose writes take microseconds, `blkfs stat -i` shows
#    the device level's w_await above 0 and below 1 ms (each I/O's time is
#    kept in nanoseconds, not rounded down to 0 ms), and aqu-sz above 0
#    under fio at QD32; .sys/DEV/stat_ns has the 17 fields in nanoseconds.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd awk fio

start_blkfs "[cache]
size = 64M

[device ram0]
backend = ram
size = 64M
"

# ---- iostat's awaits on ram: microseconds, not 0
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

stop_blkfs
