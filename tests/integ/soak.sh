#!/usr/bin/env bash
# soak.sh: load for SOAK_TIME seconds (60 by default, as in make test;
# `make soak` gives 600): 4 fio jobs of mixed random reads and writes, each
# on its own 64 MiB of a 256 MiB ram device, rewriting blocks at random and
# verifying them with crc32c as they go (verify_backlog), two buffered (psync, 4K and 4K-64K, an fsync every 64
# writes) and two O_DIRECT (libaio, iodepth 8), through a 64 MiB cache, with
# the delay filter holding every backend I/O 200us-1ms. Checked:
#  - fio: 0 verify errors, 0 I/O errors;
#  - the daemon's resident memory minus the ram backend's arena_bytes
#    (.sys/DEV/blkfs_stat), sampled every second, stays within the cache size
#    + 64 MiB + 16 MiB throughout (the 16: a parked O_DIRECT write keeps the
#    1 MiB receive buffer its data came in, and the two direct jobs park at
#    most 2 x 8);
#  - no write took over 10 s (fio's clat max for writes): a stall of the
#    cache, not a busy machine's late reply;
#  - `blkfs umount` writes everything back and the daemon log is clean.
# Prints a summary: IOPS, max latencies, peak RSS.
# With BLKFS_SAN=1 (make san: ASan+UBSan build, shorter run) memory and
# latency are the sanitizer's and are not judged; the data is, and at the
# unmount the daemon exits and LeakSanitizer reports any leak to the log,
# which fails the test (lib.sh's log_problems).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio awk

T=${SOAK_TIME:-60}
SAN=${BLKFS_SAN:-0}
MiB=$((1 << 20))
CACHE=$((64 * MiB))
PARKED=$((2 * 8 * MiB))		# the direct jobs' parked writes, one receive buffer each
LIMIT=$((CACHE + 64 * MiB + PARKED))	# resident memory minus the arena, at most
STALL_US=10000000		# a write slower than this is a stall (no busy machine is that late)

start_blkfs "[cache]
size = 64M

[device soak0]
backend = ram
size = 256M
logical_block_size = 512
physical_block_size = 4096
filters = delay
delay.read = 200us-1ms
delay.write = 200us-1ms
delay.flush = 200us-1ms
delay.discard = 200us-1ms"
dev=$MNT/soak0
stat_file=$MNT/.sys/soak0/blkfs_stat
cd "$TDIR"

# The memory sampler: one line per second, "RSS_BYTES ARENA_BYTES".
samples=$TDIR/samples
sampler() {
	local rss arena
	while pid_alive "$DAEMON_PID"; do
		rss=$(vmrss_kb "$DAEMON_PID" 2>/dev/null) || break
		arena=$(awk '$1 == "arena_bytes" { print $2 }' "$stat_file" 2>/dev/null) || break
		[ -n "$rss" ] && [ -n "$arena" ] && echo "$((rss * 1024)) $arena" >>"$samples"
		sleep 1
	done
}
sampler &
_BGPIDS+=($!)
sampler_pid=$!

info "fio: 4 jobs, random reads and writes with crc32c verify, ${T}s"
cat >"$TDIR/soak.fio" <<EOF
[global]
filename=$dev
rw=randrw
rwmixread=50
size=64M
verify=crc32c
verify_backlog=256
verify_fatal=1
verify_state_save=0
time_based
runtime=$T
fallocate=none
group_reporting
# blocks are rewritten at random (blockalign turns off fio's random map), so
# the cache sees overwrites of dirty blocks and of blocks under writeback;
# serialize_overlap keeps fio from having two writes of one block in flight,
# which would make its own verify expect either
blockalign=4k
serialize_overlap=1

[buf4k]
ioengine=psync
offset=0
bs=4k
fsync=64

[bufmix]
ioengine=psync
offset=64M
bsrange=4k-64k
fsync=64

[dio16k]
ioengine=libaio
direct=1
iodepth=8
offset=128M
bs=16k

[diomix]
ioengine=libaio
direct=1
iodepth=8
offset=192M
bsrange=4k-128k
EOF
rc=0
fio --output="$TDIR/fio.out" "$TDIR/soak.fio" || rc=$?
kill "$sampler_pid" 2>/dev/null || true
wait "$sampler_pid" 2>/dev/null || true
sed 's/^/    /' "$TDIR/fio.out" | grep -E 'IOPS=|clat \(|err=|verify' || true
[ "$rc" -eq 0 ] || { cat "$TDIR/fio.out"; fail "fio exited $rc"; }
grep -q 'err= 0' "$TDIR/fio.out" || fail "fio reports errors: $(grep 'err=' "$TDIR/fio.out")"
if grep -qiE 'verify.*(fail|mismatch|bad)' "$TDIR/fio.out"; then
	fail "fio reports verify failures"
fi
pid_alive "$DAEMON_PID" || fail "the daemon died"

# fio's group report: IOPS and clat max (in usec) per direction.
read -r r_iops w_iops r_max w_max < <(awk '
	function num(s) {	# "12.3k" -> 12300
		if (s ~ /k$/) return substr(s, 1, length(s) - 1) * 1000
		if (s ~ /M$/) return substr(s, 1, length(s) - 1) * 1000000
		return s + 0
	}
	/^ *read: IOPS=/ { dir = "r"; split($2, a, "[=,]"); iops["r"] = num(a[2]) }
	/^ *write: IOPS=/ { dir = "w"; split($2, a, "[=,]"); iops["w"] = num(a[2]) }
	/^ *clat \((nsec|usec|msec)\): / && dir != "" {
		unit = $2; gsub(/[():]/, "", unit)
		mul = unit == "nsec" ? 0.001 : unit == "msec" ? 1000 : 1
		for (i = 3; i <= NF; i++) if ($i ~ /^max=/) { v = $i; gsub(/max=|,/, "", v); mx[dir] = num(v) * mul }
	}
	END { printf "%d %d %d %d\n", iops["r"], iops["w"], mx["r"], mx["w"] }' "$TDIR/fio.out")
[ "$w_iops" -gt 0 ] || fail "no write IOPS in fio's report"

# Memory: peak resident, and peak resident minus the arena.
[ -s "$samples" ] || fail "no memory samples"
read -r n peak_rss peak_over < <(awk '
	{ n++; if ($1 > rss) rss = $1; d = $1 - $2; if (d > over) over = d }
	END { printf "%d %d %d\n", n, rss, over }' "$samples")
arena=$(awk '$1 == "arena_bytes" { print $2 }' "$stat_file")
wbytes=$(awk '$1 == "backend_write_bytes" { print $2 }' "$stat_file")

info "soak summary (${T}s, 4 jobs, 64 MiB cache, delay 200us-1ms):"
info "  read ${r_iops} IOPS, write ${w_iops} IOPS; clat max: read $((r_max / 1000)) ms, write $((w_max / 1000)) ms"
info "  peak RSS $((peak_rss / MiB)) MiB; peak RSS - arena_bytes $((peak_over / MiB)) MiB (limit $((LIMIT / MiB)) MiB); arena $((arena / MiB)) MiB; $n samples"
info "  backend writes $((wbytes / MiB)) MiB; verify errors 0"

if [ "$SAN" = 1 ]; then
	info "sanitizer build: memory and latency not judged"
else
	[ "$n" -ge $((T / 2)) ] || fail "only $n memory samples in ${T}s"
	[ "$peak_over" -le "$LIMIT" ] ||
		fail "resident memory minus arena_bytes reached $((peak_over / MiB)) MiB, over the cache size + 64 MiB + parked writes ($((LIMIT / MiB)) MiB)"
	[ "$w_max" -le "$STALL_US" ] || fail "a write took $((w_max / 1000)) ms (a stall over $((STALL_US / 1000000)) s)"
fi
stop_blkfs
