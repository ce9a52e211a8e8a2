#!/usr/bin/env bash
# snapshot.sh: snapshots of a ram device, from the consumer's side.
#  - mkfs.ext4 on an attached loop device, `blkfs snapshot`, then 20 cycles
#    of what a test suite does between cases: mount ext4, write files,
#    umount, `blkfs reset`; after each reset e2fsck -fn is clean and the
#    files are gone (they were there before it). The time per cycle is
#    printed against mkfs.ext4's (print only).
#  - A snapshot captures what was written to the device file and still sat
#    dirty in blkfs's cache; a reset brings it back after overwrites.
#  - Snapshots, deletes and grows while fio writes with crc32c verify on
#    the device: every block verifies (requests are held, not lost).
#  - .sys/DEV/snapshots lists each snapshot with the memory it holds alone;
#    `blkfs snapshot -d` deletes one; bad names (EINVAL), a name taken
#    (EEXIST), an unknown one (ENOENT), a backend without snapshots
#    (EOPNOTSUPP) are refused.
#  - With kernel_cache = writeback, pages a writer still holds dirty in the
#    kernel's cache are in the snapshot (pushed down first), and a reset
#    drops the kernel's cache of the file.
#  - `blkfs save` writes the device, or a snapshot, to a sparse image that a
#    ram device with `image =` loads byte for byte.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup mkfs.ext4 e2fsck debugfs mount umount cmp sha256sum stat fio python3
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

M=$((1 << 20))
CYCLES=${BLKFS_SNAPSHOT_CYCLES:-20}

# ctl VERB [-d] DEV ARG...: blkfs VERB [-d] MNT DEV ARG... (through the
# control file); stderr has the daemon's message on failure.
ctl() {
	local verb=$1 del=()
	shift
	if [ "${1:-}" = -d ]; then
		del=(-d)
		shift
	fi
	"$BLKFS" "$verb" "${del[@]}" "$MNT" "$@"
}

# devread DEV: a device file in 1 MiB requests (cmp reading it itself sends
# the daemon one request per 4 KiB, sha256sum per 32 KiB).
devread() {
	dd if="$1" bs=1M status=none
}

now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# files_in DEV: the names in the root directory of the ext4 on DEV.
files_in() {
	debugfs -R "ls -p /" "$1" 2>/dev/null | awk -F/ 'NF > 5 && $6 != "." && $6 != ".." { print $6 }' | sort | tr '\n' ' '
}

start_blkfs "[cache]
size = 32M
dirty_background = 50%
dirty_limit = 75%
dirty_expire = 1h

[device s]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device n]
backend = null
size = 16M

[device v]
backend = ram
size = 32M"

info "refusals"
[ ! -e "$MNT/.sys/n/snapshots" ] || fail "a null device shows .sys/n/snapshots"
[ -e "$MNT/.sys/s/snapshots" ] || fail "no .sys/s/snapshots"
expect_errno EOPNOTSUPP ctl snapshot n base
expect_errno EOPNOTSUPP ctl reset n base
expect_errno EOPNOTSUPP ctl save n "$TDIR/n.img"
out=$(ctl snapshot n base 2>&1) && fail "snapshot of a null device succeeded"
case $out in *"the null backend keeps no snapshots"*) ;; *) fail "no reason for EOPNOTSUPP: $out" ;; esac
expect_errno ENOENT ctl snapshot nosuchdev base
out=$("$BLKFS" snapshot "$MNT" s 2>&1) && fail "snapshot without SNAP succeeded"
rc=0
"$BLKFS" snapshot "$MNT" s >/dev/null 2>&1 || rc=$?
assert_eq "exit status of a usage error" 2 "$rc"
expect_errno EINVAL ctl snapshot s ".hidden"
expect_errno EINVAL ctl snapshot s "has/slash"
expect_errno ENOENT ctl reset s nosuch

info "a snapshot captures data still dirty in blkfs's cache"
mkdata "$TDIR/d1" $((4 * M))
mkdata "$TDIR/d2" $((4 * M))
ddev if="$TDIR/d1" of="$MNT/s" bs=1M seek=40 conv=notrunc	# no fsync: dirty in the cache
dirty=$(awk '$1 == "dirty_bytes" { print $2 }' "$MNT/.sys/s/blkfs_stat")
[ "$dirty" -ge $((4 * M)) ] || fail "the data was written back before the snapshot: $dirty bytes dirty"
ctl snapshot s early
expect_errno EEXIST ctl snapshot s early
ddev if="$TDIR/d2" of="$MNT/s" bs=1M seek=40 conv=notrunc,fsync
cmp_range "$TDIR/d2" 0 "$MNT/s" $((40 * M)) $((4 * M))
# the snapshot holds 4 MiB that only it references now
own=$(awk '$1 == "early" { sub("own_bytes=", "", $4); print $4 }' "$MNT/.sys/s/snapshots")
[ -n "$own" ] && [ "$own" -ge $((4 * M)) ] ||
	fail "snapshot early owns '$own' bytes after 4 MiB were overwritten: $(cat "$MNT/.sys/s/snapshots")"
ctl reset s early
cmp_range "$TDIR/d1" 0 "$MNT/s" $((40 * M)) $((4 * M))
ctl snapshot -d s early
[ -z "$(cat "$MNT/.sys/s/snapshots")" ] || fail "early still listed: $(cat "$MNT/.sys/s/snapshots")"
expect_errno ENOENT ctl reset s early
# the device kept its contents through the delete
cmp_range "$TDIR/d1" 0 "$MNT/s" $((40 * M)) $((4 * M))
ddev if=/dev/zero of="$MNT/s" bs=1M seek=40 count=4 conv=notrunc,fsync

info "snapshots, deletes and grows while fio writes and verifies on the device"
fio --name=live --filename="$MNT/v" --rw=randwrite --bs=4k --size=16M --ioengine=libaio \
	--direct=1 --iodepth=16 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 --loops=8 \
	>"$TDIR/fio.out" 2>&1 &
fio_pid=$!
_BGPIDS+=("$fio_pid")
k=0
while kill -0 "$fio_pid" 2>/dev/null && [ "$k" -lt 40 ]; do
	k=$((k + 1))
	ctl snapshot v "s$k" >/dev/null
	[ "$k" -lt 2 ] || ctl snapshot -d v "s$((k - 1))" >/dev/null
	"$BLKFS" resize "$MNT" v $((32 + k))M >/dev/null || fail "resize of v to $((32 + k))M during fio"
done
wait "$fio_pid" || fail "fio verify failed while snapshots were taken: $(tail -n 20 "$TDIR/fio.out")"
grep -q 'err= 0' "$TDIR/fio.out" || fail "fio: no 'err= 0': $(tail -n 20 "$TDIR/fio.out")"
[ "$k" -ge 2 ] || fail "fio ended before the commands ran ($k rounds)"
info "$k rounds of snapshot, delete and grow while fio verified"

info "mkfs.ext4 on an attached loop device, then a snapshot"
out=$("$BLKFS" attach "$MNT" s 2>"$TDIR/attach.err") || fail "blkfs attach: $(cat "$TDIR/attach.err")"
LOOP=$out
_LOOPS+=("$LOOP")
_LOOP_FILE[$LOOP]=$MNT/s
mkfs_total=0
for i in 1 2 3; do
	t0=$(now_ms)
	mkfs.ext4 -q -F -b 4096 -E nodiscard "$LOOP"
	mkfs_total=$((mkfs_total + $(now_ms) - t0))
done
mkfs_ms=$((mkfs_total / 3))
e2fsck -fn "$LOOP" >"$TDIR/fsck.out" 2>&1 || fail "e2fsck on the fresh filesystem: $(cat "$TDIR/fsck.out")"
fresh=$(files_in "$LOOP")
assert_eq "files of the fresh filesystem" "lost+found " "$fresh"
ctl snapshot s base
grep -q "^base created=[0-9]* data_bytes=[0-9]* own_bytes=[0-9]*\$" "$MNT/.sys/s/snapshots" ||
	fail ".sys/s/snapshots: $(cat "$MNT/.sys/s/snapshots")"
dd if="$MNT/s" of="$TDIR/base.img" bs=1M status=none	# the device as the snapshot has it

info "$CYCLES cycles: mount, write, umount, reset, fsck"
cycle_total=0
reset_total=0
for ((c = 1; c <= CYCLES; c++)); do
	t0=$(now_ms)
	mount_top "$LOOP" "$TDIR/fs"
	mkdata "$TDIR/fs/big.$c" $((2 * M))
	for ((k = 0; k < 20; k++)); do
		echo "cycle $c file $k" >"$TDIR/fs/small.$c.$k"
	done
	mkdir "$TDIR/fs/dir.$c"
	umount "$TDIR/fs"
	# the files are on the device before the reset (the test would pass
	# trivially if they never got there)
	case $(files_in "$LOOP") in *"big.$c "*) ;; *) fail "cycle $c: big.$c is not on the device before the reset" ;; esac
	out=$(ctl reset s base)
	# the daemon's own measure ("s: reset to base (1.234 ms)"), in microseconds
	us=$(sed -n 's/.*(\([0-9]*\)\.\([0-9]*\) ms)$/\1\2/p' <<<"$out")
	[ -n "$us" ] || fail "cycle $c: reset said: $out"
	reset_total=$((reset_total + 10#$us))
	cycle_total=$((cycle_total + $(now_ms) - t0))
	e2fsck -fn "$LOOP" >"$TDIR/fsck.out" 2>&1 || fail "cycle $c: e2fsck -fn after the reset: $(cat "$TDIR/fsck.out")"
	assert_eq "cycle $c: files after the reset" "$fresh" "$(files_in "$LOOP")"
done
cmp "$TDIR/base.img" <(devread "$MNT/s") || fail "the device differs from the snapshot after $CYCLES resets"
info "per cycle: $((cycle_total / CYCLES)) ms (mount, write 2 MiB and 20 files, umount, blkfs reset); the reset itself $((reset_total / CYCLES)) us in the daemon; mkfs.ext4 of the 64 MiB device instead: $mkfs_ms ms"
"$BLKFS" detach "$LOOP" || fail "blkfs detach $LOOP"

info "save the device and the snapshot; image = loads them byte for byte"
ddev if="$TDIR/d1" of="$MNT/s" bs=1M seek=50 conv=notrunc	# dirty: save writes back first
ctl save s "$TDIR/dev.img"
ctl save s "$TDIR/snap.img" base
expect_errno ENOENT ctl save s "$TDIR/x.img" nosuch
# the client makes a relative FILE absolute; the daemon refuses one that is not
(cd "$TDIR" && "$BLKFS" save "$MNT" s rel.img base) || fail "blkfs save with a relative path"
cmp "$TDIR/base.img" "$TDIR/rel.img" || fail "rel.img differs from the snapshot"
expect_errno EINVAL bash -c "printf 'save s relative.img' >'$MNT/.sys/control'"
assert_eq "saved image size" $((64 * M)) "$(stat -c %s "$TDIR/dev.img")"
cmp <(devread "$MNT/s") "$TDIR/dev.img" || fail "the saved image differs from the device"
cmp "$TDIR/base.img" "$TDIR/snap.img" || fail "the saved snapshot differs from the device at the snapshot"
# sparse: far less on disk than the device's 64 MiB
used=$(($(stat -c %b "$TDIR/snap.img") * $(stat -c %B "$TDIR/snap.img")))
[ "$used" -lt $((32 * M)) ] || fail "the saved snapshot takes $used bytes on disk: not sparse"
sum_dev=$(sha256sum <"$TDIR/dev.img")
stop_blkfs

info "kernel_cache = writeback: the kernel's dirty pages are in the snapshot, its cache goes at a reset"
start_blkfs "[device k]
backend = ram
size = 16M

[mount]
kernel_cache = writeback"
# a writer that keeps the file open (every close makes the kernel write back)
python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, open(sys.argv[2], "rb").read(), 4 << 20)
open(sys.argv[3], "w").close()
time.sleep(60)
' "$MNT/k" "$TDIR/d1" "$TDIR/written" &
writer=$!
_BGPIDS+=("$writer")
i=0
while [ ! -e "$TDIR/written" ] && [ "$i" -lt 600 ]; do
	sleep 0.1
	i=$((i + 1))
done
[ -e "$TDIR/written" ] || fail "the writer did not write"
if grep -qx 'transport uring' <(cat "$MNT/.sys/.transport"); then
	info "(over FUSE over io_uring the kernel's pages are not pushed first: fsync)"
	python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT/k"
fi
ctl snapshot k w1 >/dev/null
kill "$writer"
wait "$writer" 2>/dev/null || true
dd if="$TDIR/d2" of="$MNT/k" bs=1M seek=4 conv=notrunc,nocreat,fsync status=none
cmp_range "$TDIR/d2" 0 "$MNT/k" $((4 * M)) $((4 * M))
ctl reset k w1 >/dev/null
cmp_range "$TDIR/d1" 0 "$MNT/k" $((4 * M)) $((4 * M))
stop_blkfs

start_blkfs "[device g]
backend = ram
image = $TDIR/dev.img

[device b]
backend = ram
image = $TDIR/snap.img"
assert_eq "g from the saved device" "$sum_dev" "$(devread "$MNT/g" | sha256sum)"
cmp "$TDIR/base.img" <(devread "$MNT/b") || fail "b differs from the saved snapshot"
e2fsck -fn "$MNT/b" >"$TDIR/fsck.out" 2>&1 || fail "e2fsck on the loaded snapshot: $(cat "$TDIR/fsck.out")"
stop_blkfs
