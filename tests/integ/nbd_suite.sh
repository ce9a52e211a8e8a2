#!/usr/bin/env bash
# integ-timeout: 600
# nbd_suite.sh: the checks the ram and aio suites make, against the nbd
# backend (issue 7) on NBD servers this test starts on Unix sockets in its
# temp dir (killed at exit):
#  - nbdkit memory (192 MiB, what suite.sh's ranges need): no block sizes
#    advertised: 512/512, max_io 32M;
#  - nbdkit --filter=blocksize (minblock=4096: the filter does the
#    read-modify-write, advertises preferred 4096): 512/4096;
#  - nbdkit --filter=blocksize-policy: minimum 4096, preferred 16384,
#    maximum 4M, with blocksize-error-policy=error, so a single command
#    that is misaligned or too large fails (and the test with it): 4096/16384;
#  - qemu-storage-daemon's NBD export of an image file, when installed (a
#    second, independent server): a basic dd / cmp / fsync / remount case;
#  - README.md's remote-storage recipe, read from README.md itself: both
#    server lines (nbdkit file, qemu-storage-daemon) and the config, with
#    only the image, host and port replaced (127.0.0.1 and a free port;
#    nbdkit kept in the foreground): both advertise multi-conn, so all 4
#    connections are up; data through blkfs; the image on the server holds
#    it after `blkfs umount`.
# The geometry is never in the config: it must come from the server
# (`blkfs check`, st_size, st_blksize, O_DIRECT alignment).
#
# Per nbdkit target, first mount (a 16 MiB cache, so most data really goes
# to and comes back from the server), the checks of suite.sh (dd_basic.sh
# and aio_suite.sh make them too):
#  - geometry in `blkfs check`, st_size, st_blksize;
#  - a plain `dd of=` (O_TRUNC) keeps the size;
#  - dd at bs 512/4K/1M/16M, odd sizes, unaligned offsets, the device's last
#    bytes, against a reference file, cmp byte for byte (whole device and
#    unaligned ranges read with several block sizes);
#  - O_DIRECT: aligned writes and reads verify, misaligned offset or length
#    is EINVAL and changes nothing, buffered and direct paths agree;
#  - mmap_check (MAP_SHARED stores reach the device on msync / munmap+fsync);
#  - fio --verify=crc32c random writes, 4 jobs, psync and libaio O_DIRECT;
#  - the device equals the reference, no NBD errors, drops or bounces; after
#    `blkfs umount` (exit 0) the export itself, read with nbdcopy, equals
#    the reference.
# Second mount: still the reference (read cold from the server); then
# losetup + mkfs.ext4 + files + umount + fsck.ext4 -fn + mount + verify
# through blkfs; after `blkfs umount`, fsck.ext4 -fn on a copy of the export
# taken with nbdcopy, and the files verify there too.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=suite.sh
. "$(dirname "$0")/suite.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check mmap_check
require nbdkit nbdcopy nbdinfo
require dd cmp stat fio losetup blockdev mkfs.ext4 fsck.ext4 sha256sum mount umount

M=$((1 << 20))
# 192 MiB: suite.sh's checks use the first 160 MiB and the last 2 MiB; every
# byte between is compared too (cmp, nbdcopy), so a bigger export only
# multiplies the time of the whole-device reads, mkfs.ext4 and fsck.
SIZE=$((192 * M))
src=$TDIR/src
mkdata "$src" $((40 * M))
ref=$TDIR/ref

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
	for ((i = 0; i < 600; i++)); do
		[ -S "$SOCK" ] && nbdinfo --size "nbd+unix:///$NBD_EXPORT?socket=$SOCK" \
			>/dev/null 2>&1 && return 0
		pid_alive "$SRV_PID" || { cat "$TDIR/$name.log" >&2; fail "$name exited at start"; }
		sleep 0.1
	done
	fail "$name does not answer on $SOCK after 60 s"
}

stop_server() {
	kill_pids "$SRV_PID"
	rm -f "$SOCK"
}

# export_cmp NAME: the export itself (read with nbdcopy, not through blkfs)
# equals the reference.
export_cmp() {
	nbdcopy "$URI" - | cmp - "$ref" ||
		fail "$1: the export differs from the reference after blkfs umount"
}

# run_target NAME LBS PBS MAX_IO: an nbdkit server is up on $SOCK.
run_target() {
	local name=$1 lbs=$2 pbs=$3 max_io=$4 dev l stat k

	info "=== $name: logical $lbs, physical $pbs, max_io $max_io"
	URI="nbd+unix:///?socket=$SOCK"
	suite_ref_new
	write_conf "[cache]
size = 16M

[device d]
backend = nbd
uri = $URI"

	# Geometry as blkfs sees it, before mounting: the server's.
	suite_geometry "$name" "d: nbd, $SIZE bytes, logical $lbs, physical $pbs, max_io $max_io,"

	start_blkfs "$CONF"
	dev=$MNT/d
	stat=$MNT/.sys/d/blkfs_stat
	assert_eq "$name nbd_connected" 1 "$(awk '$1 == "nbd_connected" { print $2 }' "$stat")"
	suite_data "$name" "$dev" "$lbs"
	for k in nbd_errors nbd_drops nbd_bounced; do
		assert_eq "$name $k" 0 "$(awk -v k=$k '$1 == k { print $2 }' "$stat")"
	done
	stop_blkfs "$MNT"
	info "$name: the export equals the reference"
	export_cmp "$name"

	info "$name: mount again: still the reference, read cold"
	remount_blkfs "$MNT"
	devcmp "$dev" || fail "$name: device differs from the reference after remount"
	suite_ext4 "$name" "$dev" "$lbs"
	stop_blkfs "$MNT"

	info "$name: ext4 on the export itself (an nbdcopy of it), without blkfs"
	nbdcopy "$URI" "$TDIR/export.img" || fail "$name: nbdcopy of the export failed"
	attach_loop "$TDIR/export.img" -r
	l=$LOOP
	suite_ext4_check "$name" "$l" "the export"
	detach_loop "$l"
	rm -f "$TDIR/export.img"
}

NBD_EXPORT=

# 1. nbdkit memory: no block sizes advertised.
start_server mem nbdkit --unix "$TDIR/mem.sock" --foreground --exit-with-parent memory "$SIZE"
run_target mem 512 512 $((32 * M))
stop_server

# 2. The blocksize filter: 4096-byte blocks by read-modify-write in the
# server, 4096 advertised as preferred.
start_server bs nbdkit --unix "$TDIR/bs.sock" --foreground --exit-with-parent \
	--filter=blocksize memory "$SIZE" minblock=4096
run_target blocksize 512 4096 $((32 * M))
stop_server

# 3. blocksize-policy: the server refuses any command off its block sizes.
start_server pol nbdkit --unix "$TDIR/pol.sock" --foreground --exit-with-parent \
	--filter=blocksize-policy memory "$SIZE" blocksize-minimum=4096 blocksize-preferred=16K \
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

# 5. README.md's remote-storage recipe, as the README has it.
readme=$(cd "$(dirname "$0")/../.." && pwd)/README.md
recipe_line() {
	grep -m1 "^$1 " "$readme" || fail "README.md has no '$1' line in its remote-storage recipe"
}
recipe_conf=$(awk '/^\[device remote\]$/ { p = 1 } p && /^```$/ { exit } p' "$readme")
grep -q '^uri = nbd://storage1:10809/disk$' <<<"$recipe_conf" ||
	fail "README.md's remote config is not the one this test knows: $recipe_conf"
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
		echo $((20000 + $$ % 20000))
}
# run_recipe NAME CONNECTIONS CMD...: the server CMD is running; mount the
# README's config against it, check, write, unmount, compare the image.
run_recipe() {
	local name=$1 want=$2 img=$TDIR/remote.img
	info "=== README recipe: $name"
	for ((i = 0; i < 600; i++)); do
		nbdinfo --size "nbd://127.0.0.1:$port/disk" >/dev/null 2>&1 && break
		pid_alive "$SRV_PID" || { cat "$TDIR/$name.log" >&2; fail "$name exited at start"; }
		sleep 0.1
	done
	write_conf "[cache]
size = 16M

${recipe_conf//storage1:10809/127.0.0.1:$port}"
	start_blkfs "$CONF"
	assert_eq "$name: nbd_connections" "$want" \
		"$(awk '$1 == "nbd_connections" { print $2 }' "$MNT/.sys/remote/blkfs_stat")"
	assert_eq "$name: nbd_connected" "$want" \
		"$(awk '$1 == "nbd_connected" { print $2 }' "$MNT/.sys/remote/blkfs_stat")"
	ddev if="$src" of="$MNT/remote" bs=1M count=16 conv=notrunc,fsync
	ddev if="$src" of="$MNT/remote" bs=4K count=100 seek=$((8192 + 5)) skip=3 conv=notrunc
	cmp -n $((16 * M)) "$src" "$MNT/remote" || fail "$name: data differs through blkfs"
	stop_blkfs "$MNT"
	cmp -n $((16 * M)) "$src" "$img" || fail "$name: the image on the server lacks the data"
	cmp_range "$src" $((3 * 4096)) "$img" $(((8192 + 5) * 4096)) $((100 * 4096))
	stop_server
}

truncate -s 256M "$TDIR/remote.img"
port=$(free_port)
line=$(recipe_line nbdkit)
line=${line//--port 10809/--ipaddr 127.0.0.1 --port $port}
line=${line//\/srv\/disk.img/$TDIR/remote.img}
info "nbdkit: $line"
read -r -a cmd <<<"$line"
SOCK=$TDIR/none
"${cmd[@]}" --foreground --exit-with-parent >"$TDIR/readme-nbdkit.log" 2>&1 &
SRV_PID=$!
_BGPIDS+=("$SRV_PID")
run_recipe readme-nbdkit 4
if command -v qemu-storage-daemon >/dev/null 2>&1; then
	rm -f "$TDIR/remote.img"
	truncate -s 256M "$TDIR/remote.img"
	port=$(free_port)
	line=$(recipe_line qemu-storage-daemon)
	line=${line//addr.host=0.0.0.0,addr.port=10809/addr.host=127.0.0.1,addr.port=$port}
	line=${line//\/srv\/disk.img/$TDIR/remote.img}
	info "qemu-storage-daemon: $line"
	read -r -a cmd <<<"$line"
	"${cmd[@]}" >"$TDIR/readme-qsd.log" 2>&1 &
	SRV_PID=$!
	_BGPIDS+=("$SRV_PID")
	run_recipe readme-qsd 4
fi
