#!/usr/bin/env bash
# odirect.sh: O_DIRECT opens bypass the cache like a real block device:
# aligned writes and reads succeed and verify; an offset or length that is
# not a multiple of the logical block size gets EINVAL (dd oflag=direct with
# bs=512 on a 4096-byte-block device says "Invalid argument") and changes
# nothing; buffered and direct paths never disagree in either direction.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require_helper odirect_race
require dd cmp truncate

SIZE=$((16 << 20))
start_blkfs "[device d512]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096

[device d4k]
backend = ram
size = 16M
logical_block_size = 4096
physical_block_size = 4096"

src=$TDIR/src
mkdata "$src" $((8 << 20))

# wr DEV DD_OPERANDS...: the same write into the device and its reference.
wr() {
	local dev=$1 ref a args=()
	ref=$TDIR/${dev##*/}.ref
	shift
	ddev of="$dev" "$@" conv=notrunc
	for a in "$@"; do
		[ "$a" = oflag=direct ] || args+=("$a")
	done
	dd of="$ref" "${args[@]}" conv=notrunc status=none
}

# same DEV: the device equals its reference, read directly and buffered.
same() {
	local dev=$1 ref
	ref=$TDIR/${dev##*/}.ref
	dd if="$dev" iflag=direct bs=1M status=none | cmp - "$ref" ||
		fail "$dev: O_DIRECT read differs from the reference"
	cmp "$dev" "$ref" || fail "$dev: buffered read differs from the reference"
}

for d in d512 d4k; do
	truncate -s "$SIZE" "$TDIR/$d.ref"
done

for d in d512 d4k; do
	dev=$MNT/$d
	info "$d: aligned O_DIRECT writes, bs 4K, 64K, 1M"
	wr "$dev" if="$src" bs=4K count=100 seek=3 oflag=direct
	wr "$dev" if="$src" bs=64K count=20 seek=17 skip=5 oflag=direct
	wr "$dev" if="$src" bs=1M count=4 seek=8 skip=2 oflag=direct
	wr "$dev" if="$src" bs=1M count=1 seek=15 skip=7 oflag=direct
	same "$dev"
	# direct reads of aligned pieces
	cmp <(dd if="$dev" iflag=direct bs=4K skip=5 count=33 status=none) \
		<(dd if="$TDIR/$d.ref" bs=4K skip=5 count=33 status=none) ||
		fail "$d: O_DIRECT read bs=4K differs"
done

info "d512: 512-byte O_DIRECT I/O is aligned there"
wr "$MNT/d512" if="$src" bs=512 count=77 seek=1001 skip=9 oflag=direct
cmp <(dd if="$MNT/d512" iflag=direct bs=512 skip=999 count=81 status=none) \
	<(dd if="$TDIR/d512.ref" bs=512 skip=999 count=81 status=none) ||
	fail "d512: O_DIRECT read bs=512 differs"
same "$MNT/d512"

info "d4k: misaligned O_DIRECT gets EINVAL and changes nothing"
assert_live "$MNT"
expect_errno EINVAL dd if="$src" of="$MNT/d4k" bs=512 count=1 oflag=direct conv=notrunc,nocreat status=none
expect_errno EINVAL dd if="$src" of="$MNT/d4k" bs=512 count=8 seek=3 oflag=direct conv=notrunc,nocreat status=none
expect_errno EINVAL dd if="$src" of="$MNT/d4k" bs=4K count=1 oflag=direct,seek_bytes seek=512 conv=notrunc,nocreat status=none
expect_errno EINVAL dd if="$MNT/d4k" of=/dev/null bs=512 count=1 iflag=direct status=none
same "$MNT/d4k"

# bdev_check: exact errno per call.
dev=$MNT/d4k
chk 4096 -d "$dev" pwrite 0 4096 1
chk EINVAL -d "$dev" pwrite 512 4096
chk EINVAL -d "$dev" pwrite 0 4608
chk EINVAL -d "$dev" pwrite 4096 512
chk EINVAL -d "$dev" pread 4096 100
chk EINVAL -d "$dev" pread 2048 4096
chk 8192 -d "$dev" pread 8192 8192
chk 0 -d "$dev" pread "$SIZE" 4096
chk ENOSPC -d "$dev" pwrite "$SIZE" 4096
chk OK -d "$dev" expect 0 4096 1
dev=$MNT/d512
chk 512 -d "$dev" pwrite 512 512 2
chk 1536 -d "$dev" pread 1024 1536
chk EINVAL -d "$dev" pwrite 100 512
chk EINVAL -d "$dev" pwrite 0 100
chk EINVAL -d "$dev" pread 0 1000
chk EINVAL -d "$dev" pread 511 512
chk OK -d "$dev" expect 512 512 2
# keep the references in step with the bdev_check writes
chk OK "$TDIR/d4k.ref" fill 0 4096 1
chk OK "$TDIR/d512.ref" fill 512 512 2
same "$MNT/d512"
same "$MNT/d4k"

for d in d512 d4k; do
	dev=$MNT/$d
	info "$d: buffered writes (still dirty in the cache), then O_DIRECT reads"
	wr "$dev" if="$src" bs=1000 count=70 oflag=seek_bytes seek=5000 skip=13
	wr "$dev" if="$src" bs=4K count=300 seek=700 skip=44
	wr "$dev" if="$src" bs=1 count=1 oflag=seek_bytes seek=$((3 << 20))
	dd if="$dev" iflag=direct bs=1M status=none | cmp - "$TDIR/$d.ref" ||
		fail "$d: O_DIRECT read does not see buffered writes"

	info "$d: buffered read fills the cache, O_DIRECT write, buffered read sees it"
	cmp "$dev" "$TDIR/$d.ref" || fail "$d: buffered read differs"
	wr "$dev" if="$src" bs=64K count=40 seek=3 skip=77 oflag=direct
	wr "$dev" if="$src" bs=4K count=1 seek=1 skip=999 oflag=direct
	cmp "$dev" "$TDIR/$d.ref" || fail "$d: buffered read after O_DIRECT write shows stale data"
	dd if="$dev" bs=4K skip=1 count=1 status=none |
		cmp - <(dd if="$src" bs=4K skip=999 count=1 status=none) ||
		fail "$d: block 1 stale after O_DIRECT write"

	info "$d: partial buffered overwrite of O_DIRECT data, then O_DIRECT read"
	wr "$dev" if="$src" bs=777 count=3 oflag=seek_bytes seek=$((3 * 65536 + 100)) skip=5
	same "$dev"
done

# O_DIRECT reads over /dev/fuse on ram are answered from the arena itself
# (BLK_IO_MAPPED): direct_read_mapped counts them. Over FUSE over io_uring
# (BLKFS_TRANSPORT=uring) ram copies straight into the ring entry instead,
# and the counter stays as it was.
mapped() {
	awk '$1 == "direct_read_mapped" { print $2 }' "$MNT/.sys/$1/blkfs_stat"
}
before=$(mapped d4k)
dd if="$MNT/d4k" iflag=direct bs=4K count=64 status=none | cmp - <(head -c $((64 * 4096)) "$TDIR/d4k.ref") ||
	fail "d4k: mapped O_DIRECT reads differ from the reference"
after=$(mapped d4k)
if grep -qx 'transport uring' <(timeout 10 cat "$MNT/.sys/.transport"); then
	[ -n "$after" ] && [ "$after" -eq "$before" ] ||
		fail "d4k: direct_read_mapped went from '$before' to '$after' over the ring"
else
	[ -n "$after" ] && [ "$after" -ge $((before + 64)) ] ||
		fail "d4k: direct_read_mapped went from '$before' to '$after' over 64 O_DIRECT reads"
fi

# Writers and readers of the same blocks at once: each block a reader gets
# is one write's version, never torn (a reply from the arena holds the
# page's in-place writes off until it is sent).
for d in d4k d512; do
	info "$d: O_DIRECT writers and readers of the same blocks"
	out=$("$BLKFS_TESTBIN/odirect_race" "$MNT/$d" 3 4) || fail "$d: odirect_race: $out"
	info "$d: $out"
done
stop_blkfs "$MNT"
