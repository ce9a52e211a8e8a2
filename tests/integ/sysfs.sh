#!/usr/bin/env bash
# sysfs.sh: the mount's .sys tree and `blkfs stat`, on a 1 GiB ram device
# with 512/4096 blocks and max_io 1M.
#  - `ls -A MNT` shows only the device; .sys/ram0 mirrors /sys/block/DEV:
#    size in sectors, queue/* geometry, read_ahead_kb 128, rotational 0.
#  - stat has the kernel's 17 fields; its write I/O and sector counters grow
#    after a dd conv=fsync.
#  - blkfs_stat has every counter the issue names, the write size histogram,
#    and plausible values (user_write_bytes = bytes written, no copies, the
#    arena holds the data); `blkfs stat` prints it for a person and as JSON.
#  - queue/max_sectors_kb and queue/read_ahead_kb take good values live and
#    refuse bad ones with EINVAL, changing nothing; read-only files refuse
#    writes.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp awk wc

MiB=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((4 * MiB))

start_blkfs "[cache]
size = 64M

[device ram0]
backend = ram
size = 1G
logical_block_size = 512
physical_block_size = 4096
max_io = 1M"
sys=$MNT/.sys/ram0
q=$sys/queue

# ---------------------------------------------------------------------------
info "the tree"
# what a person sees with ls (readdir of the root lists the devices only)
# shellcheck disable=SC2012
assert_eq "ls -A $MNT" ram0 "$(ls -A "$MNT" | tr '\n' ' ' | sed 's/ $//')"
[ -d "$MNT/.sys" ] || fail "no $MNT/.sys"
# the devices, and the mount's transport (a name no device can have)
# shellcheck disable=SC2012
assert_eq "ls .sys" ".transport control ram0" "$(ls -A "$MNT/.sys" | tr '\n' ' ' | sed 's/ $//')"
grep -qxE 'transport (dev|uring)' "$MNT/.sys/.transport" ||
	fail ".sys/.transport does not start with the transport: $(head -n 1 "$MNT/.sys/.transport")"
for f in size stat blkfs_stat queue/logical_block_size queue/physical_block_size \
	queue/minimum_io_size queue/optimal_io_size queue/max_hw_sectors_kb \
	queue/max_sectors_kb queue/read_ahead_kb queue/rotational; do
	[ -f "$sys/$f" ] || fail "no $sys/$f"
done

# ---------------------------------------------------------------------------
info "geometry"
assert_eq "size (sectors)" 2097152 "$(cat "$sys/size")"
assert_eq logical_block_size 512 "$(cat "$q/logical_block_size")"
assert_eq physical_block_size 4096 "$(cat "$q/physical_block_size")"
assert_eq "minimum_io_size (io_min defaults to pbs)" 4096 "$(cat "$q/minimum_io_size")"
assert_eq "optimal_io_size (io_opt defaults to max_io)" 1048576 "$(cat "$q/optimal_io_size")"
assert_eq max_hw_sectors_kb 1024 "$(cat "$q/max_hw_sectors_kb")"
assert_eq max_sectors_kb 1024 "$(cat "$q/max_sectors_kb")"
assert_eq read_ahead_kb 128 "$(cat "$q/read_ahead_kb")"
assert_eq rotational 0 "$(cat "$q/rotational")"
assert_eq hw_sector_size 512 "$(cat "$q/hw_sector_size")"
assert_eq ro 0 "$(cat "$sys/ro")"
assert_eq "cache_block_size (1 GiB, 512/4096: 4K)" 4096 "$(cat "$sys/cache_block_size")"

# ---------------------------------------------------------------------------
info "stat: 17 fields, write counters grow"
# stat_field N: field N (1-based) of .sys/ram0/stat
stat_field() {
	awk -v n="$1" '{ print $n }' "$sys/stat"
}
assert_eq "stat lines" 1 "$(wc -l <"$sys/stat")"
assert_eq "stat fields" 17 "$(wc -w <"$sys/stat")"
grep -qE '^( *[0-9]+){17}$' "$sys/stat" || fail "stat is not 17 numbers: $(cat "$sys/stat")"
w_ios0=$(stat_field 5)
w_sec0=$(stat_field 7)

ddev if="$src" of="$MNT/ram0" bs=1M seek=8 conv=fsync,notrunc
w_ios1=$(stat_field 5)
w_sec1=$(stat_field 7)
assert_eq "stat fields after writing" 17 "$(wc -w <"$sys/stat")"
[ "$w_ios1" -gt "$w_ios0" ] || fail "stat write I/Os: $w_ios0 -> $w_ios1 after dd conv=fsync"
[ "$((w_sec1 - w_sec0))" -ge $((4 * MiB / 512)) ] ||
	fail "stat write sectors: $w_sec0 -> $w_sec1 after 4 MiB with conv=fsync"
cmp_range "$src" 0 "$MNT/ram0" $((8 * MiB)) $((4 * MiB))

# ---------------------------------------------------------------------------
info "blkfs_stat"
bs=$TDIR/blkfs_stat
cat "$sys/blkfs_stat" >"$bs"
if grep -nvE '^[a-z_0-9<=>]+ [0-9]+$' "$bs"; then
	fail "blkfs_stat lines that are not 'name value' (above)"
fi
# bstat NAME: the value of NAME in the snapshot
bstat() {
	awk -v n="$1" '$1 == n { print $2; f = 1 } END { exit !f }' "$bs" ||
		fail "blkfs_stat has no $1"
}
for n in user_read_bytes user_write_bytes backend_read_bytes backend_write_bytes \
	backend_read_ios backend_write_ios rmw_read_bytes split_ios writeback_copy_bytes \
	dirty_bytes cached_bytes arena_bytes cache_hits cache_misses writeback_errors; do
	bstat "$n" >/dev/null
done
nh=$(grep -c '^write_size_' "$bs" || true)
[ "$nh" -ge 2 ] || fail "blkfs_stat: no write size histogram ($nh write_size_* lines)"
assert_eq user_write_bytes $((4 * MiB)) "$(bstat user_write_bytes)"
assert_eq writeback_copy_bytes 0 "$(bstat writeback_copy_bytes)"
assert_eq writeback_errors 0 "$(bstat writeback_errors)"
assert_eq "dirty_bytes after conv=fsync" 0 "$(bstat dirty_bytes)"
[ "$(bstat backend_write_bytes)" -ge $((4 * MiB)) ] ||
	fail "backend_write_bytes $(bstat backend_write_bytes) < 4 MiB written with fsync"
[ "$(bstat backend_write_ios)" -ge 4 ] ||
	fail "backend_write_ios $(bstat backend_write_ios) for 4 MiB with max_io 1M"
[ "$(bstat arena_bytes)" -ge $((4 * MiB)) ] ||
	fail "arena_bytes $(bstat arena_bytes) after 4 MiB reached the ram backend"
[ "$(bstat cached_bytes)" -gt 0 ] || fail "cached_bytes 0 right after writing"
hist=$(awk '/^write_size_/ { s += $2 } END { print s + 0 }' "$bs")
assert_eq "sum of write_size_* = backend_write_ios" "$(bstat backend_write_ios)" "$hist"
# the stat file agrees with blkfs_stat
assert_eq "stat write sectors = backend_write_bytes / 512" \
	$(($(bstat backend_write_bytes) / 512)) "$(stat_field 7)"

# reads count too
dd if="$MNT/ram0" of=/dev/null bs=1M count=2 skip=8 status=none
cat "$sys/blkfs_stat" >"$bs"
[ "$(bstat user_read_bytes)" -ge $((2 * MiB)) ] ||
	fail "user_read_bytes $(bstat user_read_bytes) after reading 2 MiB"
[ "$(bstat cache_hits)" -gt 0 ] || fail "cache_hits 0 after reading data just written"

# ---------------------------------------------------------------------------
info "blkfs stat"
out=$("$BLKFS" stat "$MNT") || fail "blkfs stat $MNT exited $?"
case $out in
*ram0*user_write_bytes*) ;;
*) fail "blkfs stat $MNT: $out" ;;
esac
"$BLKFS" stat "$MNT" ram0 >/dev/null || fail "blkfs stat $MNT ram0 failed"
json=$("$BLKFS" stat "$MNT" ram0 --json) || fail "blkfs stat $MNT ram0 --json exited $?"
if command -v python3 >/dev/null 2>&1; then
	printf '%s\n' "$json" | python3 -m json.tool >/dev/null ||
		fail "blkfs stat --json is not JSON: $json"
	printf '%s\n' "$json" | python3 -c '
import json, sys
d = json.load(sys.stdin)
s = d["ram0"]
assert s["user_write_bytes"] == int(sys.argv[1]), s["user_write_bytes"]
assert s["writeback_copy_bytes"] == 0
assert s["arena_bytes"] > 0
' $((4 * MiB)) || fail "blkfs stat --json values: $json"
	json=$("$BLKFS" stat "$MNT" --json) || fail "blkfs stat $MNT --json exited $?"
	printf '%s\n' "$json" | python3 -m json.tool >/dev/null ||
		fail "blkfs stat $MNT --json is not JSON: $json"
else
	printf '%s\n' "$json" | grep -q '"ram0": *{' || fail "--json: no \"ram0\": { in $json"
	printf '%s\n' "$json" | grep -q "\"user_write_bytes\": *$((4 * MiB))" ||
		fail "--json: user_write_bytes in $json"
fi
expect_fail "$BLKFS" stat "$MNT" nosuchdev 2>/dev/null

# ---------------------------------------------------------------------------
info "queue/max_sectors_kb: live, EINVAL for bad values"
# put VALUE FILE: echo VALUE > FILE (as a shell user would)
put() {
	bash -c 'printf "%s\n" "$1" >"$2"' bash "$1" "$2"
}
put 64 "$q/max_sectors_kb" || fail "echo 64 > max_sectors_kb failed"
assert_eq "max_sectors_kb after echo 64" 64 "$(cat "$q/max_sectors_kb")"
assert_eq "max_hw_sectors_kb is not changed by it" 1024 "$(cat "$q/max_hw_sectors_kb")"
# 3: 3K is not a multiple of the physical block; 2048: above max_hw_sectors_kb
for v in garbage -4 "" 3 2 1 0 2048 4194304 99999999999999999999999 "64 junk" 0x40 "6 4" 64.0; do
	expect_errno EINVAL put "$v" "$q/max_sectors_kb"
	assert_eq "max_sectors_kb after writing '$v'" 64 "$(cat "$q/max_sectors_kb")"
done
put 4 "$q/max_sectors_kb" || fail "echo 4 (= pbs) > max_sectors_kb failed"
assert_eq "max_sectors_kb after echo 4" 4 "$(cat "$q/max_sectors_kb")"
put 1024 "$q/max_sectors_kb" || fail "echo 1024 > max_sectors_kb failed"
assert_eq "max_sectors_kb after echo 1024" 1024 "$(cat "$q/max_sectors_kb")"

info "queue/read_ahead_kb"
put 0 "$q/read_ahead_kb" || fail "echo 0 > read_ahead_kb failed"
assert_eq "read_ahead_kb after echo 0" 0 "$(cat "$q/read_ahead_kb")"
put 256 "$q/read_ahead_kb" || fail "echo 256 > read_ahead_kb failed"
assert_eq "read_ahead_kb after echo 256" 256 "$(cat "$q/read_ahead_kb")"
for v in garbage -1 "" 65537 99999999999999999999999 "128 junk"; do
	expect_errno EINVAL put "$v" "$q/read_ahead_kb"
	assert_eq "read_ahead_kb after writing '$v'" 256 "$(cat "$q/read_ahead_kb")"
done

info "size: writable (a resize; resize.sh has the cases), bad values EINVAL"
before=$(cat "$sys/size")
for v in abc 1 -8 ""; do
	if out=$(put "$v" "$sys/size" 2>&1); then
		fail "size took '$v'"
	fi
	case $out in *"$(errno_msg EINVAL)"*) ;; *) fail "size '$v': not EINVAL: $out" ;; esac
done
assert_eq "size after refused writes" "$before" "$(cat "$sys/size")"

info "read-only attributes"
for f in stat blkfs_stat ro cache_block_size queue/logical_block_size \
	queue/hw_sector_size queue/physical_block_size queue/minimum_io_size \
	queue/optimal_io_size queue/max_hw_sectors_kb queue/rotational; do
	before=$(cat "$sys/$f")
	if out=$(put 1 "$sys/$f" 2>&1); then
		fail "writing $f succeeded"
	fi
	case $out in
	*"$(errno_msg EACCES)"* | *"$(errno_msg EPERM)"* | *"$(errno_msg EROFS)"*) ;;
	*) fail "writing read-only $f: unexpected error: $out" ;;
	esac
	case $f in
	stat | blkfs_stat) ;;	# counters may move
	*) assert_eq "$f after a refused write" "$before" "$(cat "$sys/$f")" ;;
	esac
done
# the device still works, and the counters did not go backwards
ddev if="$src" of="$MNT/ram0" bs=1M count=1 seek=100 conv=fsync,notrunc
cmp_range "$src" 0 "$MNT/ram0" $((100 * MiB)) $MiB
[ "$(stat_field 5)" -gt "$w_ios1" ] || fail "stat write I/Os did not grow again"

info "drop_caches: clean cached data goes, dirty data stays"
bs=$TDIR/blkfs_stat.now
bstat() {	# live, not the snapshot above
	cat "$sys/blkfs_stat" >"$bs"
	awk -v n="$1" '$1 == n { print $2; f = 1 } END { exit !f }' "$bs" ||
		fail "blkfs_stat has no $1"
}
dd if="$MNT/ram0" of=/dev/null bs=1M count=4 skip=100 status=none
[ "$(bstat cached_bytes)" -gt 0 ] || fail "nothing cached after a read"
ddev if="$src" of="$MNT/ram0" bs=64K count=1 seek=$((120 * 16)) conv=notrunc
echo 1 >"$sys/drop_caches" || fail "echo 1 > drop_caches failed"
# what is left cached is what is still dirty (the flusher may have written it)
[ "$(bstat cached_bytes)" -le "$(bstat dirty_bytes)" ] ||
	fail "cached_bytes $(bstat cached_bytes) after drop_caches, dirty $(bstat dirty_bytes)"
expect_errno EINVAL bash -c "echo 2 >'$sys/drop_caches'"
cmp_range "$src" 0 "$MNT/ram0" $((120 * MiB)) 65536
cmp_range "$src" 0 "$MNT/ram0" $((100 * MiB)) $MiB

stop_blkfs
