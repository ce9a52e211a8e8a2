#!/usr/bin/env bash
# resize.sh: a device's size changes while it is mounted (`blkfs resize`,
# and a write to .sys/DEV/size: 512-byte sectors, or bytes with a suffix).
#  - ext4 on an attached loop device grows online: grow the blkfs device,
#    `losetup -c`, `resize2fs` while mounted, fill the new space, umount,
#    `e2fsck -fn` clean and the files verify; the device file's st_size
#    changes at once for an opener that holds it open.
#  - A shrink is refused (EBUSY, nothing changed) while the loop device sits
#    on the file with its old, larger size.
#  - ram shrink then grow: the data before the new end stays, what lies past
#    it reads as zeros after the grow (also from the middle of a page).
#  - Dirty data that cannot be written back (a fault filter fails every
#    write) makes a resize fail with EIO and change nothing; once writes
#    work, the data is there and the resize goes through.
#  - Bad sizes are refused with EINVAL and change nothing: not a multiple of
#    the cache block, zero, garbage; `auto` on ram has no size to pick up.
#  - With kernel_cache = writeback a grow is seen at once and a shrink is
#    refused (EOPNOTSUPP).
#  - aio: an image file (create = yes) grows with the device; `auto` takes
#    the size of a file grown under it, and of a block device grown under
#    it (a loop device, `losetup -c`); a shrink is refused (EOPNOTSUPP), a
#    size past the block device's end too (ENOSPC).
#  - nbd: `auto` connects again and takes the export's new size.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup blockdev mkfs.ext4 e2fsck resize2fs mount umount stat cmp truncate df
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

M=$((1 << 20))

# sysw FILE VALUE: one write(2) of VALUE (fails with the write's errno).
sysw() {
	printf '%s' "$2" >"$1"
}

# resize DEV SPEC: blkfs resize (the control file)
resize() {
	"$BLKFS" resize "$MNT" "$1" "$2" >/dev/null
}

size_of() {
	stat -c %s "$MNT/$1"
}

write_conf "[cache]
size = 32M
dirty_background = 50%
dirty_limit = 75%
dirty_expire = 1h

[device r]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device z]
backend = ram
size = $((16 * M + 512))
logical_block_size = 512

[device f]
backend = ram
size = 16M
filters = fault
fault.ops = write
fault.probability = 1
fault.enabled = no"
start_blkfs "$CONF"

info "dirty data that cannot be written back: the resize is refused, nothing lost"
mkdata "$TDIR/fdata" $((1 * M))
ddev if="$TDIR/fdata" of="$MNT/f" bs=1M seek=12 conv=notrunc	# dirty in the cache
sysw "$MNT/.sys/f/fault/enabled" 1
expect_errno EIO "$BLKFS" resize "$MNT" f 8M
assert_eq "f after the refused shrink" $((16 * M)) "$(size_of f)"
grep -q "f: resize: the device's dirty data could not be written back" "$LOG" ||
	fail "the log does not say why the resize of f was refused"
sysw "$MNT/.sys/f/fault/enabled" 0
cmp_range "$TDIR/fdata" 0 "$MNT/f" $((12 * M)) $((1 * M))
resize f 14M	# written back now, then dropped past 14M as asked
assert_eq "f after the shrink" $((14 * M)) "$(size_of f)"
cmp_range "$TDIR/fdata" 0 "$MNT/f" $((12 * M)) $((1 * M))

info "bad sizes: EINVAL, nothing changed"
# 4096-byte cache block: 100001 sectors is not a multiple of it
expect_errno EINVAL sysw "$MNT/.sys/r/size" 100001
expect_errno EINVAL sysw "$MNT/.sys/r/size" 0
expect_errno EINVAL sysw "$MNT/.sys/r/size" "12Q"
expect_errno EINVAL sysw "$MNT/.sys/r/size" "-5"
expect_errno EINVAL sysw "$MNT/.sys/r/size" "auto"	# ram: no size of its own
assert_eq "r size after bad writes" $((64 * M)) "$(size_of r)"
assert_eq ".sys/r/size" $((64 * M / 512)) "$(cat "$MNT/.sys/r/size")"
grep -q "not a multiple of the device's cache block" "$LOG" ||
	fail "the log does not say why 100001 sectors was refused"
expect_errno EINVAL "$BLKFS" resize "$MNT" r 1000000
expect_errno ENOENT "$BLKFS" resize "$MNT" nosuchdev 128M
out=$("$BLKFS" resize "$MNT" r 1000000 2>&1) || true
case $out in *"not a multiple of the device's cache block (4096 bytes"*) ;; *) fail "resize to 1000000 says: $out" ;; esac
rc=0
"$BLKFS" resize "$MNT" r >/dev/null 2>&1 || rc=$?
assert_eq "exit status of a usage error" 2 "$rc"

info "ext4 on an attached loop device grows online"
out=$("$BLKFS" attach "$MNT" r 2>"$TDIR/attach.err") || fail "blkfs attach: $(cat "$TDIR/attach.err")"
LOOP=$out
_LOOPS+=("$LOOP")
_LOOP_FILE[$LOOP]=$MNT/r
mkfs.ext4 -q -F -b 4096 -E nodiscard "$LOOP"
mount_top "$LOOP" "$TDIR/fs"
fs_fill "$TDIR/fs" 20
blocks_before=$(df -B1 --output=size "$TDIR/fs" | tail -n 1)
# an opener holding the file sees the new size at once (fstat on its fd)
exec {fd}<"$MNT/r"
resize r 160M
assert_eq "st_size right after the resize" $((160 * M)) "$(size_of r)"
assert_eq "fstat of a descriptor opened before" $((160 * M)) "$(stat -L -c %s "/proc/self/fd/$fd")"
exec {fd}<&-
assert_eq ".sys/r/size" $((160 * M / 512)) "$(cat "$MNT/.sys/r/size")"
assert_eq "loop size before losetup -c" $((64 * M)) "$(blockdev --getsize64 "$LOOP")"

info "a shrink below the loop device on the file is refused"
expect_errno EBUSY sysw "$MNT/.sys/r/size" 48M
assert_eq "r size after the refused shrink" $((160 * M)) "$(size_of r)"
grep -q "$LOOP (67108864 bytes) sits on the file" "$LOG" ||
	fail "the log does not name the loop device that holds the shrink"

losetup -c "$LOOP"
assert_eq "loop size after losetup -c" $((160 * M)) "$(blockdev --getsize64 "$LOOP")"
expect_errno EBUSY sysw "$MNT/.sys/r/size" 96M
assert_eq "r size after the refused shrink" $((160 * M)) "$(size_of r)"
# ext4's online resize needs CAP_SYS_RESOURCE (a container may not have it):
# then the same grow offline, and XFS below shows the online path
capeff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
if (((0x$capeff >> 24) & 1)); then
	resize2fs "$LOOP" >"$TDIR/resize2fs.out" 2>&1 || fail "resize2fs: $(cat "$TDIR/resize2fs.out")"
else
	info "no CAP_SYS_RESOURCE here: ext4 cannot grow online; resize2fs after umount"
	umount "$TDIR/fs"
	e2fsck -f -p "$LOOP" >"$TDIR/fsck0.out" 2>&1 || fail "e2fsck -f before resize2fs: $(cat "$TDIR/fsck0.out")"
	resize2fs "$LOOP" >"$TDIR/resize2fs.out" 2>&1 || fail "resize2fs: $(cat "$TDIR/resize2fs.out")"
	mount "$LOOP" "$TDIR/fs" || fail "mount $LOOP after resize2fs"
fi
blocks_after=$(df -B1 --output=size "$TDIR/fs" | tail -n 1)
[ "$blocks_after" -gt $((blocks_before + 80 * M)) ] ||
	fail "ext4 did not grow: $blocks_before -> $blocks_after bytes"
# fill the new space: more than the old device could hold
dd if=/dev/urandom of="$TDIR/fs/filler" bs=1M count=100 conv=fsync status=none ||
	fail "cannot fill the grown filesystem"
sha_filler=$(sha256sum <"$TDIR/fs/filler")
fs_verify "$TDIR/fs" "ext4 after the grow"
umount "$TDIR/fs"
e2fsck -fn "$LOOP" >"$TDIR/fsck.out" 2>&1 || fail "e2fsck -fn after the grow: $(cat "$TDIR/fsck.out")"
mount_top "$LOOP" "$TDIR/fs"
assert_eq "filler after remount" "$sha_filler" "$(sha256sum <"$TDIR/fs/filler")"
fs_verify "$TDIR/fs" "ext4 after the grow and a remount"
umount "$TDIR/fs"
"$BLKFS" detach "$LOOP" || fail "blkfs detach $LOOP"

if command -v mkfs.xfs >/dev/null && command -v xfs_growfs >/dev/null; then
	info "XFS on an attached loop device grows online (xfs_growfs)"
	resize r 320M	# mkfs.xfs wants 300M at least; the ram device holds only what is written
	out=$("$BLKFS" attach "$MNT" r 2>"$TDIR/attach.err") || fail "blkfs attach: $(cat "$TDIR/attach.err")"
	LOOP=$out
	_LOOPS+=("$LOOP")
	_LOOP_FILE[$LOOP]=$MNT/r
	mkfs.xfs -q -f -K "$LOOP"
	mount_top "$LOOP" "$TDIR/xfs"
	dd if=/dev/urandom of="$TDIR/xfs/f1" bs=1M count=8 conv=fsync status=none
	sha1=$(sha256sum <"$TDIR/xfs/f1")
	xbefore=$(df -B1 --output=size "$TDIR/xfs" | tail -n 1)
	resize r 480M
	losetup -c "$LOOP"
	assert_eq "loop size after losetup -c" $((480 * M)) "$(blockdev --getsize64 "$LOOP")"
	xfs_growfs "$TDIR/xfs" >"$TDIR/growfs.out" 2>&1 || fail "xfs_growfs: $(cat "$TDIR/growfs.out")"
	xafter=$(df -B1 --output=size "$TDIR/xfs" | tail -n 1)
	[ "$xafter" -gt $((xbefore + 120 * M)) ] || fail "XFS did not grow: $xbefore -> $xafter bytes"
	# past what the old device held: 300M of the old size is taken by then
	for i in 1 2 3 4 5; do
		dd if=/dev/zero of="$TDIR/xfs/z$i" bs=1M count=64 conv=fsync status=none ||
			fail "cannot fill the grown XFS ($i)"
	done
	umount "$TDIR/xfs"
	xfs_repair -n "$LOOP" >"$TDIR/xfs_repair.out" 2>&1 || fail "xfs_repair -n: $(cat "$TDIR/xfs_repair.out")"
	mount "$LOOP" "$TDIR/xfs" || fail "mount XFS again"
	assert_eq "XFS f1" "$sha1" "$(sha256sum <"$TDIR/xfs/f1")"
	umount "$TDIR/xfs"
	"$BLKFS" detach "$LOOP" || fail "blkfs detach $LOOP"
fi

info "ram: shrink, then grow: zeros past the old end, also inside a page"
mkdata "$TDIR/zdata" $((16 * M + 512))
ddev if="$TDIR/zdata" of="$MNT/z" bs=1M conv=notrunc,fsync
cut=$((8 * M + 1536))	# the cache block is 512 (the size is 16M + 512)
sysw "$MNT/.sys/z/size" $((cut / 512))
assert_eq "z after the shrink" "$cut" "$(size_of z)"
cmp_range "$TDIR/zdata" 0 "$MNT/z" 0 "$cut"
[ "$(dd if="$MNT/z" bs=512 skip=$((cut / 512)) count=1 status=none | wc -c)" -eq 0 ] ||
	fail "a read past the new end returned data"
resize z 16M
assert_eq "z after the grow" $((16 * M)) "$(size_of z)"
cmp_range "$TDIR/zdata" 0 "$MNT/z" 0 "$cut"
assert_zero "$MNT/z" "$cut" $((16 * M - cut))
# the arena let go of the pages past the cut
arena=$(awk '$1 == "arena_bytes" { print $2 }' "$MNT/.sys/z/blkfs_stat")
[ "$arena" -le $((8 * M + 2 * 4096)) ] || fail "arena_bytes $arena after the shrink: pages past the end kept"
# and the device is usable to its new end
mkdata "$TDIR/tail" $((1 * M))
ddev if="$TDIR/tail" of="$MNT/z" bs=1M seek=15 conv=notrunc,fsync
cmp_range "$TDIR/tail" 0 "$MNT/z" $((15 * M)) $((1 * M))
grep -q "z: $((16 * M + 512)) -> $cut bytes" "$LOG" || fail "the log does not record the shrink"
stop_blkfs

info "kernel_cache = writeback: a grow is seen at once, a shrink refused"
start_blkfs "[device w]
backend = ram
size = 32M

[mount]
kernel_cache = writeback"
exec {fd}<"$MNT/w"
resize w 48M
assert_eq "w st_size after the grow" $((48 * M)) "$(size_of w)"
assert_eq "fstat of a descriptor opened before" $((48 * M)) "$(stat -L -c %s "/proc/self/fd/$fd")"
exec {fd}<&-
mkdata "$TDIR/wtail" $((1 * M))
dd if="$TDIR/wtail" of="$MNT/w" bs=1M seek=47 conv=notrunc,fsync,nocreat status=none
cmp_range "$TDIR/wtail" 0 "$MNT/w" $((47 * M)) $((1 * M))
expect_errno EOPNOTSUPP sysw "$MNT/.sys/w/size" 16M
assert_eq "w after the refused shrink" $((48 * M)) "$(size_of w)"
stop_blkfs

if odirect_dir; then
	info "aio: an image file grows with the device; auto takes a file's new size"
	start_blkfs "[device a]
backend = aio
path = $ODIRECT_DIR/a.img
create = yes
size = 8M"
	resize a 24M
	assert_eq "a st_size" $((24 * M)) "$(size_of a)"
	assert_eq "a.img size" $((24 * M)) "$(stat -c %s "$ODIRECT_DIR/a.img")"
	mkdata "$TDIR/adata" $((1 * M))
	ddev if="$TDIR/adata" of="$MNT/a" bs=1M seek=23 conv=notrunc,fsync
	cmp_range "$TDIR/adata" 0 "$ODIRECT_DIR/a.img" $((23 * M)) $((1 * M))
	truncate -s 40M "$ODIRECT_DIR/a.img"
	resize a auto
	assert_eq "a st_size after auto" $((40 * M)) "$(size_of a)"
	expect_errno EOPNOTSUPP sysw "$MNT/.sys/a/size" 8M
	assert_eq "a after the refused shrink" $((40 * M)) "$(size_of a)"
	stop_blkfs
else
	info "no directory takes O_DIRECT here: the aio part is skipped"
fi

info "aio on a block device: auto takes its new size (as after lvextend)"
new_loop 8M
start_blkfs "[device b]
backend = aio
path = $LOOP"
assert_eq "b st_size" $((8 * M)) "$(size_of b)"
expect_errno ENOSPC "$BLKFS" resize "$MNT" b 16M	# larger than the block device
truncate -s 24M "$LOOP_FILE"
losetup -c "$LOOP"
resize b auto
assert_eq "b st_size after auto" $((24 * M)) "$(size_of b)"
mkdata "$TDIR/bdata" $((1 * M))
ddev if="$TDIR/bdata" of="$MNT/b" bs=1M seek=23 conv=notrunc,fsync
cmp_range "$TDIR/bdata" 0 "$LOOP" $((23 * M)) $((1 * M))
stop_blkfs

if command -v nbdkit >/dev/null && command -v nbdinfo >/dev/null; then
	info "nbd: resize auto reconnects and takes the export's new size"
	nimg=$TDIR/nbd.img
	truncate -s 16M "$nimg"
	sock=$TDIR/nbd.sock
	nbdkit --unix "$sock" --foreground --exit-with-parent file "$nimg" >>"$TDIR/nbdkit.log" 2>&1 &
	_BGPIDS+=("$!")
	wait_until 60 "nbdkit answering on $sock" nbdinfo --size "nbd+unix:///?socket=$sock"
	start_blkfs "[device n]
backend = nbd
uri = nbd+unix:///?socket=$sock
connections = 2"
	assert_eq "n st_size" $((16 * M)) "$(size_of n)"
	truncate -s 40M "$nimg"
	expect_errno EOPNOTSUPP "$BLKFS" resize "$MNT" n 32M	# the export's size is the server's
	resize n auto
	assert_eq "n st_size after auto" $((40 * M)) "$(size_of n)"
	mkdata "$TDIR/ndata" $((1 * M))
	ddev if="$TDIR/ndata" of="$MNT/n" bs=1M seek=39 conv=notrunc,fsync
	cmp_range "$TDIR/ndata" 0 "$nimg" $((39 * M)) $((1 * M))
	cmp_range "$TDIR/ndata" 0 "$MNT/n" $((39 * M)) $((1 * M))
	grep -q "the export is now 41943040 bytes (was 16777216)" "$LOG" ||
		fail "the log does not record the reconnect for the new size"
	stop_blkfs
fi
