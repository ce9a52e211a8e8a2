# shellcheck shell=bash
# shellcheck disable=SC2154  # SIZE, src and ref are the sourcing test's
# tests/integ/suite.sh - the data checks of a backend's suite, sourced after
# lib.sh by dd_basic.sh (ram), aio_suite.sh and nbd_suite.sh, so that one
# set of checks serves every backend.
#
# The caller sets SIZE (the device's size in bytes), src (a file of 40 MiB
# of random data, from mkdata) and ref (the reference image; suite_ref_new
# makes it SIZE zero bytes, as a new device reads). Every check writes the
# same data into the device and into $ref and compares the two, so the
# checks can run one after the other on one device, each in its own range:
#   suite_plain_dd  the first 8 MiB (the device must be new: zeros)
#   suite_dd        the first 64 MiB and the last 1 MiB + 77 bytes
#   suite_odirect   64 MiB .. 78 MiB
#   suite_mmap      79 MiB .. 86 MiB and the last 2 MiB
#   suite_fio       96 MiB .. 160 MiB
# suite_data runs them all (a device of at least 164 MiB; aio_suite and
# nbd_suite use 192 MiB: every byte more is read several times); suite_ext4 puts
# a filesystem on the device, and suite_ext4_check verifies it where blkfs
# wrote it (the backing store), without blkfs.

# _ref_dd: $ref when it holds the dd sequence (apply) and nothing was
# written into it since; every write into $ref here clears it. suite_dd on
# several new devices (dd_basic.sh: five) then builds the reference once.
_ref_dd=

# wr TARGET DD_OPERANDS...: one write into the device or the reference
# (oflag=direct is dropped for the reference).
wr() {
	local t=$1 a args=()
	shift
	if [ "$t" = "$ref" ]; then
		_ref_dd=
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

# apply TARGET: the dd sequence: bs 512, 4K, 1M and 16M, odd block sizes,
# unaligned offsets and lengths, the last bytes of the device.
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

# devcmp DEV: the whole device equals the reference, read in 4 MiB blocks.
# A plain `cmp` reads 4 KiB at a time, so the kernel's FUSE readahead sends
# 128 KiB requests: five times slower than 4 MiB ones (20 s for 1 GiB
# over nbd). suite_dd reads the whole device that way once (the small-read
# path); the later whole-device comparisons check the data only.
devcmp() {
	dd if="$1" bs=4M status=none | cmp - "$ref"
}

# sync_ref DEV OFF LEN: copy a range the test cannot model (mmap_check's
# and fio's patterns, each verified by its tool) from the device into the
# reference, so the backing store is compared there too.
sync_ref() {
	_ref_dd=
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

# suite_ref_new: $ref becomes SIZE zero bytes.
suite_ref_new() {
	_ref_dd=
	rm -f "$ref"
	truncate -s "$SIZE" "$ref"
}

# suite_geometry NAME WANT: `blkfs check -c $CONF` (before mounting) says WANT.
suite_geometry() {
	local name=$1 want=$2 out
	out=$("$BLKFS" check -c "$CONF" 2>&1) || fail "$name: blkfs check -c $CONF failed: $out"
	case $out in
	*"$want"*) ;;
	*) fail "$name: blkfs check does not say '$want': $out" ;;
	esac
}

# suite_stat NAME DEV: st_size is SIZE, st_blksize the 4096-byte cache block.
suite_stat() {
	local name=$1 dev=$2
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"
	assert_eq "$name st_blksize (cache block)" 4096 "$(stat -c %o "$dev")"
	chk "$SIZE 4096" "$dev" size blksize
}

# suite_plain_dd NAME DEV: a plain `dd of=` (O_TRUNC) keeps the size.
suite_plain_dd() {
	local name=$1 dev=$2
	info "$name: plain dd of= (O_TRUNC) keeps the size"
	assert_live "$MNT"
	dd if="$src" of="$dev" bs=1M count=4 status=none || fail "$name: plain dd of=$dev failed"
	_ref_dd=
	dd if="$src" of="$ref" bs=1M count=4 conv=notrunc status=none
	assert_eq "$name st_size after plain dd" "$SIZE" "$(stat -c %s "$dev")"
	cmp -n $((4 << 20)) "$src" "$dev" || fail "$name: data differs after plain dd"
	assert_zero "$dev" $((4 << 20)) $((4 << 20))
}

# suite_dd NAME DEV: the dd sequence (apply), then the device equals the
# reference byte for byte, read whole and at unaligned ranges with several
# block sizes. The reference gets the sequence unless it has it already
# (_ref_dd: the same writes again would change nothing).
suite_dd() {
	local name=$1 dev=$2
	info "$name: dd sequence, bs 512/4K/1M/16M, unaligned"
	if [ "$_ref_dd" != "$ref" ]; then
		apply "$ref"
		_ref_dd=$ref
	fi
	apply "$dev"
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"
	cmp "$ref" "$dev" || fail "$name: device differs from the reference after the dd sequence"
	dd if="$dev" bs=16M status=none | cmp - "$ref" || fail "$name: read with bs=16M differs"
	readcmp "$dev" 0 $((8 << 20)) 512
	readcmp "$dev" 0 $((8 << 20)) 4K
	readcmp "$dev" 12345 999999 4K
	readcmp "$dev" 777770 8000 7
	readcmp "$dev" $((65536 - 3)) 7 1
	readcmp "$dev" $(((20 << 20) - 1)) $(((17 << 20) + 2)) 1M
	readcmp "$dev" $((SIZE - 5000)) 5000 4K
}

# suite_odirect NAME DEV LBS: O_DIRECT writes and reads aligned to the
# logical block size LBS verify; a misaligned offset or length is EINVAL
# (and changes nothing: the caller compares the whole device later);
# buffered and direct paths agree in both directions.
suite_odirect() {
	local name=$1 dev=$2 lbs=$3 M=$((1 << 20))
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
	_ref_dd=
	chk OK "$ref" fill $((75 * M)) "$lbs" 165
	# a WRITE's data arrives page-aligned (fuse/rawio.c rx_read), reads
	# are answered from aligned buffers: O_DIRECT is never copied on the way
	assert_eq "$name: direct_copy_bytes after aligned O_DIRECT" 0 \
		"$(awk '$1 == "direct_copy_bytes" { print $2 }' "$(dirname "$dev")/.sys/$(basename "$dev")/blkfs_stat")"

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
}

# suite_mmap NAME DEV: MAP_SHARED stores reach the device on msync and on
# munmap + fsync (mmap_check verifies its own pattern).
suite_mmap() {
	local name=$1 dev=$2 M=$((1 << 20))
	info "$name: mmap MAP_SHARED"
	assert_live "$MNT"
	"$BLKFS_TESTBIN/mmap_check" "$dev" $((80 * M)) $((2 * M)) msync ||
		fail "$name: mmap_check msync 80M+2M"
	"$BLKFS_TESTBIN/mmap_check" "$dev" $((84 * M)) $((1 * M)) munmap ||
		fail "$name: mmap_check munmap 84M+1M"
	"$BLKFS_TESTBIN/mmap_check" "$dev" $((SIZE - M)) $((1 * M)) msync ||
		fail "$name: mmap_check msync at the end"
	sync_ref "$dev" $((79 * M)) $((7 * M))
	sync_ref "$dev" $((SIZE - 2 * M)) $((2 * M))
}

# suite_fio NAME DEV: fio --verify=crc32c random writes, 4 jobs each, psync
# buffered and libaio O_DIRECT, then the psync regions verified again.
suite_fio() {
	local name=$1 dev=$2
	info "$name: fio --verify=crc32c, psync buffered and libaio O_DIRECT"
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M
	fio_run "$dev" "$name-libaio" --ioengine=libaio --direct=1 --iodepth=16 \
		--bsrange=4k-64k --blockalign=4k --offset=128M
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M --verify_only
	sync_ref "$dev" $((96 << 20)) $((64 << 20))
}

# suite_data NAME DEV LBS: every check above on a new device, mounted with
# a small cache (most data really goes to and comes back from the backend);
# then the device equals the reference.
suite_data() {
	local name=$1 dev=$2 lbs=$3
	suite_stat "$name" "$dev"
	suite_plain_dd "$name" "$dev"
	suite_dd "$name" "$dev"
	suite_odirect "$name" "$dev" "$lbs"
	suite_mmap "$name" "$dev"
	suite_fio "$name" "$dev"
	devcmp "$dev" || fail "$name: device differs from the reference"
}

# suite_ext4 NAME DEV LBS: through a loop device (LBS-byte sectors) over
# DEV: mkfs.ext4, files with their checksums in SUMS, umount, a new loop
# device, fsck.ext4 -fn, mount, every file verifies. DEV stays mounted;
# its filesystem is for suite_ext4_check.
suite_ext4() {
	local name=$1 dev=$2 lbs=$3 fs=$TDIR/fs-$1 l
	info "$name: ext4 through a loop device over $dev"
	assert_live "$MNT"
	attach_loop "$dev" --sector-size "$lbs"
	l=$LOOP
	assert_eq "$name: loop over the device: size" "$SIZE" "$(blockdev --getsize64 "$l")"
	mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$l" ||
		fail "$name: mkfs.ext4 on $l failed"
	mount_top "$l" "$fs"
	fs_fill "$fs" 100
	umount "$fs" || fail "$name: umount $fs failed"
	detach_loop "$l"
	assert_live "$MNT"
	attach_loop "$dev" --sector-size "$lbs"
	l=$LOOP
	fsck.ext4 -fn "$l" || fail "$name: fsck.ext4 -fn $l (through blkfs) found problems"
	mount_top "$l" "$fs"
	fs_verify "$fs" "$name: after remount"
	umount "$fs" || fail "$name: umount $fs failed"
	detach_loop "$l"
}

# suite_ext4_check NAME BLOCKDEV WHAT: suite_ext4's filesystem, on BLOCKDEV
# (WHAT says what that is: "the backing store"), without blkfs: fsck.ext4
# -fn is clean, and mounted read-only every file verifies.
suite_ext4_check() {
	local name=$1 l=$2 what=$3 fs=$TDIR/fs-$1
	fsck.ext4 -fn "$l" || fail "$name: fsck.ext4 -fn on $what found problems"
	mount_top "$l" "$fs" -o ro
	fs_verify "$fs" "$name: on $what"
	umount "$fs" || fail "$name: umount $fs failed"
}
