#!/usr/bin/env bash
# aio_suite.sh: the checks the ram suite makes, against the aio backend on
# three kinds of real storage (issue 4): an image file (create = yes, in a
# directory whose filesystem takes O_DIRECT; that target is skipped with a
# message if none does), a loop device made with `losetup --sector-size 512`
# and one made with `--sector-size 4096`. The loop devices' geometry is not
# in the config: it must come from the device (`blkfs check` output,
# st_size, st_blksize), and on the 4096 device a 512-byte O_DIRECT write
# fails with EINVAL as it does on the device itself.
#
# Per target, first mount (a 16 MiB cache, so most data really goes to and
# comes back from the backend):
#  - geometry in `blkfs check`, st_size, st_blksize;
#  - a plain `dd of=` (O_TRUNC) keeps the size;
#  - dd at bs 512/4K/1M/16M, odd sizes, unaligned offsets, the device's
#    last bytes, against a reference file, cmp byte for byte (whole device
#    and unaligned ranges read with several block sizes);
#  - O_DIRECT: aligned writes and reads verify, misaligned offset or length
#    is EINVAL and changes nothing, buffered and direct paths agree;
#  - mmap_check (MAP_SHARED stores reach the device on msync / munmap+fsync);
#  - fio --verify=crc32c random writes, 4 jobs, psync and libaio O_DIRECT;
#  - the device equals the reference; after `blkfs umount` (exit 0) the
#    backing image / loop device itself equals the reference.
# Second mount (same config, same mount point): the device still equals the
# reference (read cold from the backend); then losetup + mkfs.ext4 + files +
# umount + fsck.ext4 -fn + mount + verify through blkfs; after
# `blkfs umount`, fsck.ext4 -fn on the backing store itself and the files
# verify there too (mounted read-only, without blkfs).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check mmap_check
require dd cmp stat truncate fio losetup blockdev mkfs.ext4 fsck.ext4 sha256sum mount umount
bc=$BLKFS_TESTBIN/bdev_check
mc=$BLKFS_TESTBIN/mmap_check

M=$((1 << 20))
SIZE=$((256 * M))
src=$TDIR/src
mkdata "$src" $((40 * M))
ref=$TDIR/ref

chk() { # chk WANT BDEV_CHECK_ARGS...: WANT is every output line, space-separated
	local want=$1 got
	shift
	got=$("$bc" "$@") || fail "bdev_check $* failed: $got"
	got=${got//$'\n'/ }
	[ "$got" = "$want" ] || fail "bdev_check $*: expected $want, got $got"
}

# wr TARGET DD_OPERANDS...: one write into the device or the reference
# (oflag=direct is dropped for the reference).
wr() {
	local t=$1 a args=()
	shift
	if [ "$t" = "$ref" ]; then
		for a in "$@"; do
			[ "$a" = oflag=direct ] || args+=("$a")
		done
		dd of="$t" "${args[@]}" conv=notrunc status=none
	else
		ddev of="$t" "$@" conv=notrunc
	fi
}

# both DEV DD_OPERANDS...: the same write into the device and the reference.
both() {
	local dev=$1
	shift
	wr "$dev" "$@"
	wr "$ref" "$@"
}

# apply TARGET: the dd sequence of dd_basic.sh, in the first 64 MiB and at
# the end of the device.
apply() {
	local t=$1
	wr "$t" if="$src" bs=16M count=2
	wr "$t" if="$src" bs=1M count=5 seek=40 skip=3
	wr "$t" if="$src" bs=4K count=300 seek=3001 skip=17
	wr "$t" if="$src" bs=512 count=1000 seek=12345 skip=77
	wr "$t" if="$src" bs=4K oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=1000001 skip=333 count=123457
	wr "$t" if="$src" bs=1 count=1 oflag=seek_bytes iflag=skip_bytes seek=65535 skip=5
	wr "$t" if="$src" bs=512 oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((65536 * 10 - 100)) skip=999 count=200
	wr "$t" if="$src" bs=7 count=1001 oflag=seek_bytes seek=777777 skip=3
	wr "$t" if="$src" bs=100 count=3 oflag=seek_bytes seek=4000 skip=11
	wr "$t" if="$src" bs=4K oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((SIZE - 1000)) skip=4242 count=1000
	wr "$t" if="$src" bs=16M oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$(((48 << 20) + 511)) skip=1234567 count=$((10 << 20)) conv=fsync
	wr "$t" if="$src" bs=1M count=3 seek=1 skip=20 conv=fsync
	wr "$t" if="$src" bs=4K count=50 seek=100 skip=9000
	wr "$t" if="$src" bs=16M oflag=seek_bytes iflag=count_bytes \
		seek=$(((20 << 20) + 3)) count=$(((16 << 20) + 12345))
	wr "$t" if="$src" bs=512 count=7 oflag=seek_bytes seek=$((SIZE - 3584)) skip=1
	wr "$t" if="$src" bs=1M oflag=seek_bytes iflag=skip_bytes,count_bytes \
		seek=$((SIZE - (1 << 20) - 77)) skip=7 count=$(((1 << 20) + 77))
}

# readcmp DEV SKIP COUNT BS: an unaligned read range equals the reference.
readcmp() {
	cmp <(dd if="$1" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs="$4" status=none) \
		<(dd if="$ref" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs=1M status=none) ||
		fail "$1: range $2 +$3 read with bs=$4 differs"
}

# sync_ref DEV OFF LEN: copy a range the test cannot model (mmap_check's
# and fio's patterns, each verified by its tool) from the device into the
# reference, so the backing store is compared there too.
sync_ref() {
	dd if="$1" of="$ref" bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes \
		skip="$2" seek="$2" count="$3" conv=notrunc status=none ||
		fail "copying $1@$2 +$3 into the reference failed"
}

# fio_run DEV NAME ARGS...: fio, 4 jobs, --verify=crc32c; fails on non-zero exit.
fio_run() {
	local dev=$1 name=$2 rc
	shift 2
	assert_live "$MNT"
	(cd "$TDIR" && fio --name="$name" --filename="$dev" --rw=randwrite --numjobs=4 \
		--size=8M --offset_increment=8M --verify=crc32c --verify_fatal=1 \
		--do_verify=1 --fallocate=none --verify_state_save=0 --randrepeat=1 \
		--group_reporting --output="$TDIR/$name.out" "$@") && rc=0 || rc=$?
	grep -E 'err=|WRITE:|READ:' "$TDIR/$name.out" | sed 's/^/    /' || true
	if [ "$rc" -ne 0 ]; then
		cat "$TDIR/$name.out"
		fail "fio $name exited $rc"
	fi
	grep -q 'err= 0' "$TDIR/$name.out" || fail "fio $name: no 'err= 0' in its output"
}

# back_cmp NAME BACKING LOOPDEV: the backing store equals the reference (the
# backing file; and the loop device itself, read with O_DIRECT).
back_cmp() {
	cmp "$2" "$ref" || fail "$1: backing store $2 differs from the reference after blkfs umount"
	if [ -n "$3" ]; then
		dd if="$3" iflag=direct bs=1M status=none | cmp - "$ref" ||
			fail "$1: $3 read with O_DIRECT differs from the reference after blkfs umount"
	fi
}

# run_target NAME LBS BACKING LOOPDEV CONF_LINES
run_target() {
	local name=$1 lbs=$2 back=$3 loopdev=$4 lines=$5 dev out pbs want fs mnt0 l

	info "=== $name: logical block size $lbs"
	rm -f "$ref"
	truncate -s "$SIZE" "$ref"
	write_conf "[cache]
size = 16M

[device d]
backend = aio
$lines"

	# Geometry as blkfs sees it, before mounting.
	out=$("$BLKFS" check -c "$CONF" 2>&1) || fail "$name: blkfs check -c $CONF failed: $out"
	pbs=$lbs
	[ -z "$loopdev" ] || pbs=$(blockdev --getpbsz "$loopdev")
	want="d: aio, $SIZE bytes, logical $lbs, physical $pbs,"
	case $out in
	*"$want"*) ;;
	*) fail "$name: blkfs check does not say '$want': $out" ;;
	esac

	start_blkfs "$CONF"
	dev=$MNT/d
	mnt0=$MNT
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"
	assert_eq "$name st_blksize (cache block)" 4096 "$(stat -c %o "$dev")"
	chk "$SIZE 4096" "$dev" size blksize

	info "$name: plain dd of= (O_TRUNC) keeps the size"
	assert_live "$MNT"
	dd if="$src" of="$dev" bs=1M count=4 status=none || fail "$name: plain dd of=$dev failed"
	dd if="$src" of="$ref" bs=1M count=4 conv=notrunc status=none
	assert_eq "$name st_size after plain dd" "$SIZE" "$(stat -c %s "$dev")"
	cmp -n $((4 * M)) "$src" "$dev" || fail "$name: data differs after plain dd"
	assert_zero "$dev" $((4 * M)) $((4 * M))

	info "$name: dd sequence, bs 512/4K/1M/16M, unaligned"
	apply "$ref"
	apply "$dev"
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"
	cmp "$ref" "$dev" || fail "$name: device differs from the reference after the dd sequence"
	dd if="$dev" bs=16M status=none | cmp - "$ref" || fail "$name: read with bs=16M differs"
	readcmp "$dev" 0 $((8 * M)) 512
	readcmp "$dev" 0 $((8 * M)) 4K
	readcmp "$dev" 12345 999999 4K
	readcmp "$dev" 777770 8000 7
	readcmp "$dev" $((65536 - 3)) 7 1
	readcmp "$dev" $(((20 << 20) - 1)) $(((17 << 20) + 2)) 1M
	readcmp "$dev" $((SIZE - 5000)) 5000 4K

	info "$name: O_DIRECT, aligned"
	both "$dev" if="$src" bs="$lbs" count=77 seek=$(((64 * M) / lbs + 3)) skip=9 oflag=direct
	both "$dev" if="$src" bs=4K count=100 seek=$(((65 * M) / 4096 + 1)) oflag=direct
	both "$dev" if="$src" bs=64K count=20 seek=$(((66 * M) / 65536 + 5)) skip=5 oflag=direct
	both "$dev" if="$src" bs=1M count=4 seek=70 skip=2 oflag=direct
	cmp <(dd if="$dev" iflag=direct bs="$lbs" skip=$(((64 * M) / lbs)) count=200 status=none) \
		<(dd if="$ref" bs="$lbs" skip=$(((64 * M) / lbs)) count=200 status=none) ||
		fail "$name: O_DIRECT read bs=$lbs differs"
	cmp <(dd if="$dev" iflag=direct bs=1M skip=64 count=14 status=none) \
		<(dd if="$ref" bs=1M skip=64 count=14 status=none) ||
		fail "$name: O_DIRECT read bs=1M differs"
	chk "$lbs OK" -d "$dev" pwrite $((75 * M)) "$lbs" 165 expect $((75 * M)) "$lbs" 165
	chk OK "$ref" fill $((75 * M)) "$lbs" 165

	info "$name: O_DIRECT, misaligned: EINVAL, nothing changes"
	assert_live "$MNT"
	if [ "$lbs" -eq 4096 ]; then
		expect_errno EINVAL dd if="$src" of="$dev" bs=512 count=1 oflag=direct \
			conv=notrunc,nocreat status=none
		expect_errno EINVAL dd if="$src" of="$dev" bs=512 count=8 seek=3 oflag=direct \
			conv=notrunc,nocreat status=none
		expect_errno EINVAL dd if="$dev" of=/dev/null bs=512 count=1 iflag=direct status=none
		chk EINVAL -d "$dev" pwrite 512 4096
		chk EINVAL -d "$dev" pwrite 4096 512
		chk EINVAL -d "$dev" pread 2048 4096
	fi
	expect_errno EINVAL dd if="$src" of="$dev" bs="$lbs" count=1 oflag=direct,seek_bytes \
		seek=$((64 * M + 100)) conv=notrunc,nocreat status=none
	chk EINVAL -d "$dev" pwrite 100 "$lbs"
	chk EINVAL -d "$dev" pwrite "$lbs" $((lbs + 100))
	chk EINVAL -d "$dev" pread 511 "$lbs"
	chk EINVAL -d "$dev" pread 0 1000
	chk ENOSPC -d "$dev" pwrite "$SIZE" "$lbs"
	chk 0 -d "$dev" pread "$SIZE" "$lbs"

	info "$name: buffered and direct paths agree"
	both "$dev" if="$src" bs=1000 count=70 oflag=seek_bytes seek=$((67 * M + 5000)) skip=13
	both "$dev" if="$src" bs=1 count=1 oflag=seek_bytes seek=$((68 * M + 1))
	dd if="$dev" iflag=direct bs=1M skip=64 count=14 status=none |
		cmp - <(dd if="$ref" bs=1M skip=64 count=14 status=none) ||
		fail "$name: O_DIRECT read does not see buffered writes"
	both "$dev" if="$src" bs=64K count=8 seek=$(((69 * M) / 65536)) skip=77 oflag=direct
	cmp <(dd if="$dev" bs=1M skip=64 count=14 status=none) \
		<(dd if="$ref" bs=1M skip=64 count=14 status=none) ||
		fail "$name: buffered read after O_DIRECT write shows stale data"

	info "$name: mmap MAP_SHARED"
	assert_live "$MNT"
	"$mc" "$dev" $((80 * M)) $((2 * M)) msync || fail "$name: mmap_check msync 80M+2M"
	"$mc" "$dev" $((84 * M)) $((1 * M)) munmap || fail "$name: mmap_check munmap 84M+1M"
	"$mc" "$dev" $((SIZE - M)) $((1 * M)) msync || fail "$name: mmap_check msync at the end"
	sync_ref "$dev" $((79 * M)) $((7 * M))
	sync_ref "$dev" $((SIZE - 2 * M)) $((2 * M))

	info "$name: fio --verify=crc32c, psync buffered and libaio O_DIRECT"
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M
	fio_run "$dev" "$name-libaio" --ioengine=libaio --direct=1 --iodepth=16 \
		--bsrange=4k-64k --blockalign=4k --offset=128M
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M --verify_only
	sync_ref "$dev" $((96 * M)) $((64 * M))

	cmp "$ref" "$dev" || fail "$name: device differs from the reference"
	stop_blkfs "$MNT"
	info "$name: the backing store equals the reference"
	back_cmp "$name" "$back" "$loopdev"

	info "$name: mount again: still the reference, read cold"
	remount_blkfs "$mnt0"
	cmp "$ref" "$dev" || fail "$name: device differs from the reference after remount"

	info "$name: ext4 through a loop device over $dev"
	fs=$TDIR/fs-$name
	assert_live "$MNT"
	attach_loop "$dev" --sector-size "$lbs"
	l=$LOOP
	assert_eq "$name: loop over the device: size" "$SIZE" "$(blockdev --getsize64 "$l")"
	mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$l" ||
		fail "$name: mkfs.ext4 on $l failed"
	mount_top "$l" "$fs"
	mkdir -p "$fs/a/b/c"
	mkdata "$fs/big1" $((6 * M))
	mkdata "$fs/big2" $((3 * M))
	mkdata "$fs/a/b/c/odd" 123457
	for i in $(seq 1 100); do
		head -c $((i * 37)) /dev/urandom >"$fs/a/small.$i"
	done
	(cd "$fs" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$TDIR/SUMS"
	cp "$TDIR/SUMS" "$fs/SUMS"
	sync -f "$fs/SUMS"
	umount "$fs" || fail "$name: umount $fs failed"
	detach_loop "$l"
	assert_live "$MNT"
	attach_loop "$dev" --sector-size "$lbs"
	l=$LOOP
	fsck.ext4 -fn "$l" || fail "$name: fsck.ext4 -fn $l (through blkfs) found problems"
	mount_top "$l" "$fs"
	[ "$(wc -l <"$fs/SUMS")" -eq 103 ] || fail "$name: SUMS has $(wc -l <"$fs/SUMS") lines, want 103"
	(cd "$fs" && sha256sum --quiet -c SUMS) || fail "$name: files differ after remount"
	umount "$fs" || fail "$name: umount $fs failed"
	detach_loop "$l"
	stop_blkfs "$MNT"

	info "$name: ext4 on the backing store itself, without blkfs"
	if [ -n "$loopdev" ]; then
		l=$loopdev
	else
		attach_loop "$back" -r
		l=$LOOP
	fi
	fsck.ext4 -fn "$l" || fail "$name: fsck.ext4 -fn on the backing store $l found problems"
	mount_top "$l" "$fs" -o ro
	(cd "$fs" && sha256sum --quiet -c SUMS) || fail "$name: files differ on the backing store"
	umount "$fs" || fail "$name: umount $fs failed"
	[ -n "$loopdev" ] || detach_loop "$l"
}

# 1. An image file, created by blkfs.
if odirect_dir; then
	img=$ODIRECT_DIR/aio.img
	run_target img 512 "$img" "" "path = $img
size = 256M
create = yes"
	assert_eq "image file size" "$SIZE" "$(stat -c %s "$img")"
else
	info "SKIP target img: neither $TDIR nor /var/tmp takes O_DIRECT"
fi

# 2. and 3. Loop devices; geometry from the device only.
for ss in 512 4096; do
	new_loop "$SIZE" --sector-size "$ss"
	lp=$LOOP
	run_target "loop$ss" "$ss" "$LOOP_FILE" "$lp" "path = $lp"
	detach_loop "$lp"
done
