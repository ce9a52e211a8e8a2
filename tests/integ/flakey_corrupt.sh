#!/usr/bin/env bash
# flakey_corrupt.sh: silent corruption from the flakey filter, caught by a
# checksumming reader (fio --verify=crc32c), at the offset the seed chose.
#  - fio writes 16 MiB with crc32c headers (O_DIRECT, 4k, one job, QD1);
#    the device then goes down with random_read_corrupt = 0.01 only inside
#    corrupt_ranges (4M..12M), so one read in about a hundred there has one
#    byte XORed. fio's verify pass (O_DIRECT: the backend's data, not the
#    cache's) fails, and the offset it reports is the 4 KiB block of the
#    byte the filter says it corrupted (daemon log, last_corruption), inside
#    the range.
#  - The same seed again replays it: the same byte, the same fio report;
#    another seed picks another block.
#  - Back up, the same verify passes: the device itself was never changed.
#  - Write corruption: random_write_corrupt = 1 over one block, down while
#    fio writes; up again, fio's verify fails at that block and only there,
#    and the cache's copy of the data was never touched.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio awk grep

SEED=20240601
OTHER=777
M=$((1 << 20))

start_blkfs "[device r0]
backend = ram
size = 32M
logical_block_size = 512
physical_block_size = 4096
filters = flakey
flakey.up_interval = 0
flakey.down_interval = 0
flakey.random_read_corrupt = 0.01
flakey.corrupt_ranges = 4M 8M
flakey.seed = $SEED"
dev=$MNT/r0
sys=$MNT/.sys/r0/flakey
[ -d "$sys" ] || fail "no $sys"
assert_eq state up "$(cat "$sys/state")"
assert_eq seed "$SEED" "$(cat "$sys/seed")"

# fio_run OUT ARGS...: fio over $dev, 4k, one job, QD1, O_DIRECT; its output in OUT.
# A failed verify saves no state file (fio's default would write one into the
# current directory).
fio_run() {
	local out=$1
	shift
	fio --name=v --filename="$dev" --bs=4k --size=16M --direct=1 --ioengine=psync \
		--verify=crc32c --verify_fatal=1 --verify_state_save=0 "$@" >"$out" 2>&1
}

# failed_offset OUT: the offset fio's verify failure names.
failed_offset() {
	grep -oE 'verify.* at file [^ ]+ offset [0-9]+' "$1" | head -n1 | awk '{ print $NF }'
}

info "fio writes 16 MiB with crc32c (the device is up)"
fio_run "$TDIR/w.out" --rw=write --do_verify=0 || { cat "$TDIR/w.out"; fail "fio write failed"; }
fio_run "$TDIR/v0.out" --rw=write --verify_only || { cat "$TDIR/v0.out"; fail "verify before any fault failed"; }
grep -q "flakey: r0: seed $SEED (first I/O" "$LOG" || fail "the seed is not in the daemon log"

# verify_down NAME: down, run fio's verify; it must fail. Sets OFF (fio's
# offset) and BYTE (the device offset of the corrupted byte).
verify_down() {
	local name=$1 last
	printf '1\n' >"$sys/down_interval"
	assert_eq "state ($name)" down "$(cat "$sys/state")"
	if fio_run "$TDIR/$name.out" --rw=write --verify_only; then
		cat "$TDIR/$name.out"
		fail "$name: fio's verify passed over a corrupted read"
	fi
	OFF=$(failed_offset "$TDIR/$name.out")
	[ -n "$OFF" ] || { cat "$TDIR/$name.out"; fail "$name: fio names no offset"; }
	last=$(cat "$sys/last_corruption")
	read -r _ BYTE _ _ <<<"$last"
	info "$name: fio: verify failed at offset $OFF; flakey: $last"
	printf '0\n' >"$sys/down_interval"
}

info "down: fio's verify reads a corrupted block and says where"
verify_down run1
off1=$OFF byte1=$BYTE
assert_eq "fio's offset is the corrupted byte's block" $((byte1 / 4096 * 4096)) "$off1"
[ "$byte1" -ge $((4 * M)) ] && [ "$byte1" -lt $((12 * M)) ] ||
	fail "corrupted byte $byte1 is outside corrupt_ranges (4M..12M)"
# the daemon log names the same byte (the first corruption said)
grep -q "flakey: r0: corrupted READ $off1+4096 at byte $byte1:" "$LOG" ||
	fail "the daemon log does not name READ $off1+4096 at byte $byte1"
reads=$(awk '$1 == "flakey_read_corruptions" { print $2 }' "$MNT/.sys/r0/blkfs_stat")
assert_eq "flakey_read_corruptions (fio stops at the first)" 1 "$reads"

info "the same seed replays it"
printf '%s\n' "$SEED" >"$sys/seed"
verify_down run2
assert_eq "replayed fio offset" "$off1" "$OFF"
assert_eq "replayed corrupted byte" "$byte1" "$BYTE"

info "another seed, another block"
printf '%s\n' "$OTHER" >"$sys/seed"
verify_down run3
[ "$OFF" != "$off1" ] || fail "seed $OTHER chose the same block as seed $SEED ($OFF)"
assert_eq "fio's offset (seed $OTHER)" $((BYTE / 4096 * 4096)) "$OFF"

info "up: the same verify passes (the device was never changed)"
assert_eq state up "$(cat "$sys/state")"
fio_run "$TDIR/v4.out" --rw=write --verify_only || { cat "$TDIR/v4.out"; fail "verify failed with the device up"; }

info "write corruption: one block, down while fio writes"
wblk=$((9 * M + 40960))
printf '0\n' >"$sys/random_read_corrupt"
printf 'clear\n' >"$sys/corrupt_ranges"
printf '%s 4096\n' "$wblk" >"$sys/corrupt_ranges"
printf '1\n' >"$sys/random_write_corrupt"
printf '1\n' >"$sys/down_interval"
# buffered this time: the cache takes the data, writeback corrupts the copy it sends
fio --name=w --filename="$dev" --bs=4k --size=16M --rw=write --verify=crc32c --do_verify=0 \
	--verify_state_save=0 --end_fsync=1 >"$TDIR/w2.out" 2>&1 || { cat "$TDIR/w2.out"; fail "fio write (down) failed"; }
printf '0\n' >"$sys/down_interval"
last=$(cat "$sys/last_corruption")
read -r op byte _ _ <<<"$last"
assert_eq "last corruption op" write "$op"
[ "$byte" -ge "$wblk" ] && [ "$byte" -lt $((wblk + 4096)) ] || fail "write corrupted at $byte, outside $wblk+4096"
# the cache's copy is intact: buffered reads that hit it verify
fio --name=w --filename="$dev" --bs=4k --size=16M --rw=write --verify=crc32c --verify_only \
	--verify_fatal=1 --verify_state_save=0 >"$TDIR/v5.out" 2>&1 || { cat "$TDIR/v5.out"; fail "the cache's copy was corrupted"; }
# the device's copy is not: O_DIRECT reads fail at that block, and only there
if fio_run "$TDIR/v6.out" --rw=write --verify_only; then
	cat "$TDIR/v6.out"
	fail "verify of the device passed over a corrupted write"
fi
assert_eq "fio's offset after a corrupted write" "$wblk" "$(failed_offset "$TDIR/v6.out")"
fio_run "$TDIR/v7.out" --rw=write --verify_only --verify_fatal=0 >/dev/null 2>&1 || true
n=$(grep -cE 'verify.* at file .* offset [0-9]+' "$TDIR/v7.out" || true)
assert_eq "blocks failing verify after one corrupted write" 1 "$n"

info "corruptions: $(grep -E '^flakey_(read|write)_corruptions' "$MNT/.sys/r0/blkfs_stat" | tr '\n' ' ')"
stop_blkfs
