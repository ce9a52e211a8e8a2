#!/usr/bin/env bash
# aio_kill.sh: kill -9 at random moments during a writer that logs each fsync
# it completed (issue 6); after the remount, every write an fsync
# acknowledged is on the device.
#
# Two aio devices, one on an image file (where the filesystem takes
# O_DIRECT; else skipped with a note) and one on a loop device with
# 4096-byte sectors; the iterations take turns. Each iteration:
#  1. snapshot the device's first SIZE bytes (the base);
#  2. crash_writer writes seeded records (1 byte to 256 KiB, mostly
#     unaligned, overlapping) with buffered pwrite, fsync after about every
#     fourth, and logs each fsync that returned 0;
#  3. after a seeded random delay (0.2 to 2.5 s), SIGKILL the daemon: in
#     the middle of writes, fsyncs and background writeback alike;
#  4. mount again and check: every byte is the base with the acknowledged
#     records replayed on it, or comes from a record started after the last
#     acknowledged fsync (crash_writer verify).
#
# Env: BLKFS_AIOKILL_ITERS (default 6; `make soak` runs 50),
# BLKFS_AIOKILL_SEEDS ("S1 S2 ...": exactly these), BLKFS_AIOKILL_SEED (the
# first; the others follow). The seeds are printed: rerun one with
# BLKFS_AIOKILL_SEEDS=S.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper crash_writer
require dd losetup blockdev

M=$((1 << 20))
SIZE=$((64 * M))
seed_list "${BLKFS_AIOKILL_ITERS:-6}" "${BLKFS_AIOKILL_SEEDS:-}" "${BLKFS_AIOKILL_SEED:-}"
seeds=("${SEEDS[@]}")
info "seeds: ${seeds[*]}"

conf() {
	printf '[cache]\nsize = 64M\nfolio_size = 64K\n\n[device d]\nbackend = aio\nqueue_depth = 32\n%s\n' "$1"
}

names=()
declare -A mnt_of conf_of
if odirect_dir; then
	img=$ODIRECT_DIR/kill.img
	start_blkfs "$(conf "path = $img
size = 128M
create = yes
logical_block_size = 512
physical_block_size = 4096")"
	names+=(img)
	mnt_of[img]=$MNT
	conf_of[img]=$CONF
else
	info "SKIP target img: neither $TDIR nor /var/tmp takes O_DIRECT"
fi
new_loop 128M --sector-size 4096
start_blkfs "$(conf "path = $LOOP")"
names+=(loop4096)
mnt_of[loop4096]=$MNT
conf_of[loop4096]=$CONF

total_acked=0
base=$TDIR/base
log=$TDIR/writer.log
for ((k = 0; k < ${#seeds[@]}; k++)); do
	seed=${seeds[$k]}
	name=${names[$((k % ${#names[@]}))]}
	mnt=${mnt_of[$name]}
	dev=$mnt/d
	dd if="$dev" of="$base" bs=1M count=$((SIZE / M)) status=none ||
		fail "seed $seed: reading the base from $dev failed"
	# the moment of the kill: 200..2500 ms, from the seed
	ms=$((200 + (seed * 7919) % 2301))
	info "seed $seed, $name: writer, kill -9 after $ms ms"
	"$BLKFS_TESTBIN/crash_writer" write "$dev" "$seed" "$SIZE" "$log" 2>"$TDIR/writer.err" &
	wpid=$!
	_BGPIDS+=("$wpid")
	sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
	pid_alive "$wpid" || { cat "$TDIR/writer.err" >&2; fail "seed $seed: the writer stopped before the kill"; }
	kill9_blkfs "$mnt"
	wait "$wpid" || fail "seed $seed: the writer exited $? (expected 0 once its mount died)"
	info "seed $seed: the writer stopped: $(cat "$TDIR/writer.err")"
	CONF=${conf_of[$name]}
	remount_blkfs "$mnt"
	out=$("$BLKFS_TESTBIN/crash_writer" verify "$dev" "$seed" "$SIZE" "$log" "$base" 2>&1) ||
		{ printf '%s\n' "$out" >&2; fail "seed $seed, $name: data acknowledged by fsync is missing after kill -9 (rerun: BLKFS_AIOKILL_SEEDS=$seed)"; }
	info "seed $seed, $name: $out"
	n=$(awk '/^synced/ { n = $2 } END { print n + 0 }' "$log")
	total_acked=$((total_acked + n))
done
[ "$total_acked" -gt 0 ] || fail "no fsync was acknowledged in any iteration: the check proved nothing"
info "${#seeds[@]} kills survived, $total_acked records acknowledged by fsync in all, all present"
for name in "${names[@]}"; do
	stop_blkfs "${mnt_of[$name]}"
done
