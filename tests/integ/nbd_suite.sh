#!/usr/bin/env bash
# nbd_suite.sh: the checks the ram and aio suites make, against the nbd
# backend (issue 7) on NBD servers this test starts on Unix sockets in its
# temp dir (killed at exit):
#  - nbdkit memory 1G: no block sizes advertised: 512/512, max_io 32M;
#  - nbdkit --filter=blocksize (minblock=4096: the filter does the
#    read-modify-write, advertises preferred 4096): 512/4096;
#  - nbdkit --filter=blocksize-policy: minimum 4096, preferred 16384,
#    maximum 4M, with blocksize-error-policy=error, so a single command
#    that is misaligned or too large fails (and the test with it): 4096/16384;
#  - qemu-storage-daemon's NBD export of an image file, when installed (a
#    second, independent server): a basic dd / cmp / fsync / remount case.
# The geometry is never in the config: it must come from the server
# (`blkfs check`, st_size, st_blksize, O_DIRECT alignment).
#
# Per nbdkit target, first mount (a 16 MiB cache, so most data really goes
# to and comes back from the server):
#  - geometry in `blkfs check`, st_size, st_blksize;
#  - a plain `dd of=` (O_TRUNC) keeps the size;
#  - dd at bs 512/4K/1M/16M, odd sizes, unaligned offsets, the device's last
#    bytes, against a reference file, cmp byte for byte;
#  - O_DIRECT: aligned writes and reads verify, misaligned offset or length
#    is EINVAL, buffered and direct paths agree;
#  - fio --verify=crc32c random writes, 4 jobs, psync and libaio O_DIRECT;
#  - after `blkfs umount` (exit 0) the export itself, read with nbdcopy,
#    equals the reference.
# Second mount: still the reference (read cold from the server); then
# losetup + mkfs.ext4 + files + umount + fsck.ext4 -fn + mount + verify
# through blkfs; after `blkfs umount`, fsck.ext4 -fn on a copy of the export
# taken with nbdcopy, and the files verify there too.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require nbdkit nbdcopy nbdinfo
require dd cmp stat fio losetup blockdev mkfs.ext4 fsck.ext4 sha256sum mount umount
bc=$BLKFS_TESTBIN/bdev_check

M=$((1 << 20))
SIZE=$((1024 * M))
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

# start_server NAME CMD...: run CMD (a server) in the background, killed at
# exit; wait until $TDIR/NAME.sock accepts. Sets SRV_PID, SOCK.
start_server() {
	local name=$1 i
	shift
	SOCK=$TDIR/$name.sock
	rm -f "$SOCK"
	"$@" >"$TDIR/$name.log" 2>&1 &
	SRV_PID=$!
	_BGPIDS+=("$SRV_PID")
	for ((i = 0; i < 100; i++)); do
		[ -S "$SOCK" ] && nbdinfo --size "nbd+unix:///$NBD_EXPORT?socket=$SOCK" \
			>/dev/null 2>&1 && return 0
		pid_alive "$SRV_PID" || { cat "$TDIR/$name.log" >&2; fail "$name exited at start"; }
		sleep 0.1
	done
	fail "$name does not answer on $SOCK"
}

stop_server() {
	kill_pids "$SRV_PID"
	rm -f "$SOCK"
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

# sync_ref DEV OFF LEN: copy a range the test cannot model (fio's patterns,
# verified by fio) from the device into the reference.
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

# export_cmp NAME: the export itself (read with nbdcopy, not through blkfs)
# equals the reference.
export_cmp() {
	nbdcopy "$URI" - | cmp - "$ref" ||
		fail "$1: the export differs from the reference after blkfs umount"
}

# run_target NAME LBS PBS MAX_IO: an nbdkit server is up on $SOCK.
run_target() {
	local name=$1 lbs=$2 pbs=$3 max_io=$4 dev out want fs mnt0 l stat k

	info "=== $name: logical $lbs, physical $pbs, max_io $max_io"
	URI="nbd+unix:///?socket=$SOCK"
	rm -f "$ref"
	truncate -s "$SIZE" "$ref"
	write_conf "[cache]
size = 16M

[device d]
backend = nbd
uri = $URI"

	# Geometry as blkfs sees it, before mounting: the server's.
	out=$("$BLKFS" check -c "$CONF" 2>&1) || fail "$name: blkfs check -c $CONF failed: $out"
	want="d: nbd, $SIZE bytes, logical $lbs, physical $pbs, max_io $max_io,"
	case $out in
	*"$want"*) ;;
	*) fail "$name: blkfs check does not say '$want': $out" ;;
	esac

	start_blkfs "$CONF"
	dev=$MNT/d
	mnt0=$MNT
	stat=$MNT/.sys/d/blkfs_stat
	assert_eq "$name st_size" "$SIZE" "$(stat -c %s "$dev")"
	assert_eq "$name st_blksize (cache block)" 4096 "$(stat -c %o "$dev")"
	chk "$SIZE 4096" "$dev" size blksize
	assert_eq "$name nbd_connected" 1 "$(awk '$1 == "nbd_connected" { print $2 }' "$stat")"

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

	info "$name: O_DIRECT, misaligned: EINVAL"
	assert_live "$MNT"
	if [ "$lbs" -eq 4096 ]; then
		expect_errno EINVAL dd if="$src" of="$dev" bs=512 count=1 oflag=direct \
			conv=notrunc,nocreat status=none
		chk EINVAL -d "$dev" pwrite 512 4096
		chk EINVAL -d "$dev" pwrite 4096 512
		chk EINVAL -d "$dev" pread 2048 4096
	fi
	expect_errno EINVAL dd if="$src" of="$dev" bs="$lbs" count=1 oflag=direct,seek_bytes \
		seek=$((64 * M + 100)) conv=notrunc,nocreat status=none
	chk EINVAL -d "$dev" pwrite 100 "$lbs"
	chk EINVAL -d "$dev" pread 511 "$lbs"
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

	info "$name: fio --verify=crc32c, psync buffered and libaio O_DIRECT"
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M
	fio_run "$dev" "$name-libaio" --ioengine=libaio --direct=1 --iodepth=16 \
		--bsrange=4k-64k --blockalign=4k --offset=128M
	fio_run "$dev" "$name-psync" --ioengine=psync --bs=4k --offset=96M --verify_only
	sync_ref "$dev" $((96 * M)) $((64 * M))

	cmp "$ref" "$dev" || fail "$name: device differs from the reference"
	for k in nbd_errors nbd_drops nbd_bounced; do
		assert_eq "$name $k" 0 "$(awk -v k=$k '$1 == k { print $2 }' "$stat")"
	done
	stop_blkfs "$MNT"
	info "$name: the export equals the reference"
	export_cmp "$name"

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

	info "$name: ext4 on the export itself (an nbdcopy of it), without blkfs"
	nbdcopy "$URI" "$TDIR/export.img" || fail "$name: nbdcopy of the export failed"
	fsck.ext4 -fn "$TDIR/export.img" || fail "$name: fsck.ext4 -fn on the export found problems"
	attach_loop "$TDIR/export.img" -r
	l=$LOOP
	mount_top "$l" "$fs" -o ro
	(cd "$fs" && sha256sum --quiet -c SUMS) || fail "$name: files differ on the export"
	umount "$fs" || fail "$name: umount $fs failed"
	detach_loop "$l"
	rm -f "$TDIR/export.img"
}

NBD_EXPORT=

# 1. nbdkit memory: no block sizes advertised.
start_server mem nbdkit --unix "$TDIR/mem.sock" --foreground --exit-with-parent memory 1G
run_target mem 512 512 $((32 * M))
stop_server

# 2. The blocksize filter: 4096-byte blocks by read-modify-write in the
# server, 4096 advertised as preferred.
start_server bs nbdkit --unix "$TDIR/bs.sock" --foreground --exit-with-parent \
	--filter=blocksize memory 1G minblock=4096
run_target blocksize 512 4096 $((32 * M))
stop_server

# 3. blocksize-policy: the server refuses any command off its block sizes.
start_server pol nbdkit --unix "$TDIR/pol.sock" --foreground --exit-with-parent \
	--filter=blocksize-policy memory 1G blocksize-minimum=4096 blocksize-preferred=16K \
	blocksize-maximum=4M blocksize-error-policy=error
run_target policy 4096 16384 $((4 * M))
stop_server

# 4. qemu-storage-daemon: another NBD server implementation, an image file.
if command -v qemu-storage-daemon >/dev/null 2>&1; then
	info "=== qemu-storage-daemon NBD export"
	img=$TDIR/qsd.img
	truncate -s 256M "$img"
	NBD_EXPORT=disk
	start_server qsd qemu-storage-daemon \
		--blockdev "driver=file,node-name=f0,filename=$img" \
		--nbd-server "addr.type=unix,addr.path=$TDIR/qsd.sock" \
		--export "type=nbd,id=e0,node-name=f0,name=disk,writable=on"
	URI="nbd+unix:///disk?socket=$SOCK"
	write_conf "[cache]
size = 16M

[device q]
backend = nbd
uri = $URI"
	out=$("$BLKFS" check -c "$CONF" 2>&1) || fail "qsd: blkfs check failed: $out"
	info "qsd: $(grep ' q: ' <<<"$out")"
	start_blkfs "$CONF"
	q=$MNT/q
	assert_eq "qsd st_size" $((256 * M)) "$(stat -c %s "$q")"
	ddev if="$src" of="$q" bs=1M count=40 conv=notrunc,fsync
	ddev if="$src" of="$q" bs=4K count=1000 seek=$((100 * 256 + 3)) skip=7 conv=notrunc
	ddev if="$src" of="$q" bs=512 count=3 oflag=seek_bytes seek=$((200 * M + 1000)) conv=notrunc,fsync
	cmp -n $((40 * M)) "$src" "$q" || fail "qsd: data differs"
	cmp_range "$src" $((7 * 4096)) "$q" $(((100 * 256 + 3) * 4096)) $((1000 * 4096))
	cmp_range "$src" 0 "$q" $((200 * M + 1000)) 1536
	stop_blkfs "$MNT"
	cmp -n $((40 * M)) "$src" "$img" || fail "qsd: the image file differs after blkfs umount"
	cmp_range "$src" 0 "$img" $((200 * M + 1000)) 1536
	remount_blkfs "$MNT"
	cmp -n $((40 * M)) "$src" "$q" || fail "qsd: data differs after remount"
	stop_blkfs "$MNT"
	stop_server
else
	info "SKIP qemu-storage-daemon target: not installed (package qemu-system-common)"
fi
