#!/usr/bin/env bash
# mount_options.sh: -o options, as `blkfs mount -o` and an fstab line (the
# `blkfs CONFIG MNT -o OPTS` form mount.fuse3 runs) give them.
#  - ro: the mount is read-only (findmnt), opening a device file for
#    writing fails with EROFS (buffered, O_DIRECT), reading works, and an
#    aio image on a read-only filesystem (a read-only bind mount) or an
#    NBD export served read-only (nbdkit -r) mounts only with ro; a loop device from `blkfs attach` over
#    a ro mount is read-only; with the kernel's read-only flag lifted
#    behind the daemon's back (mount -o remount,rw), the daemon itself
#    refuses open(2) for writing (O_WRONLY, O_RDWR) with EROFS and the
#    device keeps its data; `rw` after `ro` wins;
#  - sync: every write reaches the backend, flushed, before it returns (the
#    log filter's trace shows WRITE then FLUSH); so does dd oflag=dsync on
#    a mount without it;
#  - generic flags reach the kernel (nosuid, nodev, noexec, noatime,
#    dirsync show in findmnt); fstab-only ones (defaults, nofail, _netdev,
#    auto, noauto, user, x-*, comment=) are accepted;
#  - blkfs's own override the file: allow_other (findmnt shows it with
#    default_permissions), kernel_cache=writeback (a plain `dd of=` is then
#    refused with EPERM, the documented price);
#  - an unknown option, a bad value and a mount point from mount.fuse3's
#    drop_privileges (/dev/fd/N) are refused, naming what is wrong, and
#    nothing is mounted;
#  - the fstab form mounts with no options at all, and a mistyped command
#    is still "unknown command".
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp findmnt losetup blockdev python3

M=$((1 << 20))
# a small cache: every mount here allocates (and touches) all of it
SMALL="[cache]
size = 4M
"
RAM="$SMALL
[device r]
backend = ram
size = 16M"
mkdata "$TDIR/data" $((1 * M))

opts_of() { findmnt -n -o OPTIONS --mountpoint "$1"; }

info "ro"
# the device starts from an image: its data must survive the refused opens
start_blkfs "$SMALL
[device r]
backend = ram
size = 16M
image = $TDIR/data" -o ro
ro_mnt=$MNT
case ",$(opts_of "$MNT")," in *,ro,*) ;; *) fail "ro: findmnt shows $(opts_of "$MNT")" ;; esac
expect_errno EROFS dd if="$TDIR/data" of="$MNT/r" bs=64K count=1 conv=notrunc,nocreat
expect_errno EROFS dd if="$TDIR/data" of="$MNT/r" bs=64K count=1 oflag=direct conv=notrunc,nocreat
dd if="$MNT/r" of=/dev/null bs=1M status=none || fail "ro: reading failed"
assert_eq "ro: .sys/r/ro, as /sys/block/DEV/ro" 1 "$(cat "$MNT/.sys/r/ro")"
if [ -e /dev/loop-control ]; then
	loop=$("$BLKFS" attach "$MNT" r 2>"$TDIR/attach.err") || fail "ro: attach: $(cat "$TDIR/attach.err")"
	_LOOPS+=("$loop")
	_LOOP_FILE[$loop]=$MNT/r
	assert_eq "ro: the loop device is read-only" 1 "$(blockdev --getro "$loop")"
	grep -q '(read-only)' "$TDIR/attach.err" || fail "ro: attach does not say read-only: $(cat "$TDIR/attach.err")"
	"$BLKFS" detach "$loop" 2>/dev/null || fail "ro: detach $loop failed"
fi
# The kernel refused the writes above itself. Lift its read-only flag (root
# may remount a FUSE mount; -i: no mount.fuse helper) and the opens reach
# the daemon, which must refuse them too: no handle that could write.
mount -i -o remount,rw "$MNT" || fail "ro: cannot remount rw to reach the daemon's check"
case ",$(opts_of "$MNT")," in *,rw,*) ;; *) fail "ro: remount rw: findmnt shows $(opts_of "$MNT")" ;; esac
# the kernel now passes opens for writing on (a writable .sys file opens)
assert_eq "ro, kernel rw: O_WRONLY open of .sys/r/queue/read_ahead_kb" OK \
	"$(open_errno O_WRONLY "$MNT/.sys/r/queue/read_ahead_kb")"
for fl in O_WRONLY O_RDWR "O_WRONLY|O_DIRECT" "O_RDWR|O_TRUNC"; do
	assert_eq "ro, kernel rw: $fl open of the device" EROFS "$(open_errno "$fl" "$MNT/r")"
done
assert_eq "ro, kernel rw: O_RDONLY open of the device" OK "$(open_errno O_RDONLY "$MNT/r")"
cmp -n "$M" "$TDIR/data" "$MNT/r" || fail "ro: the device's data changed after the refused opens"
assert_eq "ro: the device's size after the refused opens" $((16 * M)) "$(stat -c %s "$MNT/r")"
stop_blkfs "$MNT"

info "rw after ro wins"
start_blkfs "$RAM" -o ro,rw
assert_eq "rw after ro: .sys/r/ro" 0 "$(cat "$MNT/.sys/r/ro")"
ddev if="$TDIR/data" of="$MNT/r" bs=64K conv=notrunc
stop_blkfs "$MNT"

info "ro and read-only storage"
if odirect_dir; then
	mkdir -p "$ODIRECT_DIR/rw" "$ODIRECT_DIR/ro"
	truncate -s 16M "$ODIRECT_DIR/rw/ro.img"
	dd if="$TDIR/data" of="$ODIRECT_DIR/rw/ro.img" conv=notrunc status=none
	# root may write any file: a read-only filesystem is what stops it
	mount_top "$ODIRECT_DIR/rw" "$ODIRECT_DIR/ro" --bind
	mount -o remount,ro,bind "$ODIRECT_DIR/ro" || fail "cannot make the bind mount read-only"
	img=$ODIRECT_DIR/ro/ro.img
	write_conf "$SMALL
[device i]
backend = aio
path = $img"
	new_mountpoint
	out=$("$BLKFS" mount "$MNT" -c "$CONF" 2>&1) && fail "aio: a read-only image mounted read-write"
	grep -q 'Read-only file system' <<<"$out" || fail "aio: unclear refusal of the read-only image: $out"
	! is_mounted "$MNT" || fail "aio: mounted after the refusal"
	rmdir "$MNT"
	start_blkfs "$CONF" -o ro
	cmp -n "$M" "$TDIR/data" "$MNT/i" || fail "aio: ro mount of a read-only image reads wrong data"
	stop_blkfs "$MNT"
	umount "$ODIRECT_DIR/ro" || fail "cannot unmount the read-only bind mount"
	info "  an image missing with create = yes is not created on a ro mount"
	write_conf "$SMALL
[device i]
backend = aio
path = $ODIRECT_DIR/new.img
size = 16M
create = yes"
	new_mountpoint
	out=$("$BLKFS" mount "$MNT" -c "$CONF" -o ro 2>&1) && fail "aio: ro mount created an image"
	grep -q 'read-only' <<<"$out" || fail "aio: unclear refusal: $out"
	[ ! -e "$ODIRECT_DIR/new.img" ] || fail "aio: a ro mount created $ODIRECT_DIR/new.img"
	rmdir "$MNT"
fi
if command -v nbdkit >/dev/null 2>&1 && command -v nbdinfo >/dev/null 2>&1; then
	sock=$TDIR/nbd.sock
	nbdkit --unix "$sock" --foreground --exit-with-parent -r memory 16M >"$TDIR/nbdkit.log" 2>&1 &
	_BGPIDS+=("$!")
	wait_until 60 "nbdkit answering on $sock" nbdinfo --size "nbd+unix:///?socket=$sock"
	write_conf "$SMALL
[device n]
backend = nbd
uri = nbd+unix:///?socket=$sock"
	new_mountpoint
	out=$("$BLKFS" mount "$MNT" -c "$CONF" 2>&1) && fail "nbd: a read-only export mounted read-write"
	grep -q 'read-only' <<<"$out" || fail "nbd: unclear refusal: $out"
	rmdir "$MNT"
	start_blkfs "$CONF" -o ro
	dd if="$MNT/n" of=/dev/null bs=1M status=none || fail "nbd: reading the ro export failed"
	stop_blkfs "$MNT"
else
	info "  (no nbdkit: the read-only NBD export case is skipped)"
fi

info "sync, and O_DSYNC without it"
trace=$TDIR/trace
write_conf "$SMALL
[device r]
backend = ram
size = 16M
filters = log
log.path = $trace"
start_blkfs "$CONF" -o sync
ddev if="$TDIR/data" of="$MNT/r" bs=64K count=3 conv=notrunc
# each write: WRITE and FLUSH in the trace before dd goes on to the next
ops=$(awk '!/^#/ { printf "%s ", $2 }' "$trace")
assert_eq "sync: backend ops" "WRITE FLUSH WRITE FLUSH WRITE FLUSH " "$ops"
stop_blkfs "$MNT"
start_blkfs "$CONF"
ddev if="$TDIR/data" of="$MNT/r" bs=64K count=2 oflag=dsync conv=notrunc
assert_eq "O_DSYNC: backend ops" "WRITE FLUSH WRITE FLUSH " "$(awk '!/^#/ { printf "%s ", $2 }' "$trace")"
ddev if="$TDIR/data" of="$MNT/r" bs=64K count=2 conv=notrunc
assert_eq "plain writes: no backend op yet" "WRITE FLUSH WRITE FLUSH " \
	"$(awk '!/^#/ { printf "%s ", $2 }' "$trace")"
stop_blkfs "$MNT"

info "generic flags, fstab-only options"
start_blkfs "$RAM" -o nosuid,nodev,noexec,noatime,dirsync,defaults,nofail,_netdev,auto,noauto,user,x-systemd.requires=foo,comment=x
o=,$(opts_of "$MNT"),
for f in nosuid nodev noexec noatime dirsync; do
	case $o in *,$f,*) ;; *) fail "$f not in the mount's options: $o" ;; esac
done
stop_blkfs "$MNT"

info "allow_other and kernel_cache override the file"
write_conf "$RAM

[mount]
allow_other = no
kernel_cache = none"
start_blkfs "$CONF" -o allow_other,kernel_cache=writeback
o=,$(opts_of "$MNT"),
case $o in *,allow_other,*) ;; *) fail "allow_other not in the options: $o" ;; esac
case $o in *,default_permissions,*) ;; *) fail "allow_other without default_permissions: $o" ;; esac
expect_errno EPERM dd if="$TDIR/data" of="$MNT/r" bs=64K count=1 conv=nocreat
stop_blkfs "$MNT"
start_blkfs "$CONF" -o allow_other=no
case ,$(opts_of "$MNT"), in *,allow_other,*) fail "allow_other=no: still allow_other" ;; esac
ddev if="$TDIR/data" of="$MNT/r" bs=64K count=1
stop_blkfs "$MNT"

info "refused"
write_conf "$RAM"
new_mountpoint
for bad in "bogus:mount option bogus: unknown" \
	"ro,max_read=4096:mount option max_read: unknown" \
	"kernel_cache=maybe:mount option kernel_cache: maybe is not a choice (allowed: none, writeback)" \
	"kernel_cache:mount option kernel_cache: needs a value" \
	"allow_other=maybe:mount option allow_other: maybe is not a choice (allowed: yes, no)"; do
	o=${bad%%:*}
	want=${bad#*:}
	out=$("$BLKFS" "$CONF" "$MNT" -o "$o" 2>&1) && fail "-o $o was accepted"
	grep -qF "$want" <<<"$out" || fail "-o $o: expected '$want', got: $out"
	! is_mounted "$MNT" || fail "-o $o: mounted anyway"
	info "  -o $o: $out"
done
out=$("$BLKFS" "$CONF" /dev/fd/3 -o dev,suid 3<"$CONF" 2>&1) && fail "/dev/fd/3 was accepted"
grep -q 'drop_privileges' <<<"$out" || fail "/dev/fd/N: unclear refusal: $out"
out=$("$BLKFS" muont "$MNT" 2>&1) && fail "a mistyped command ran"
grep -q "unknown command 'muont'" <<<"$out" || fail "mistyped command: $out"
rmdir "$MNT"

info "the fstab form without options"
write_conf "$RAM"
new_mountpoint
_MNTS+=("$MNT")
out=$("$BLKFS" "$CONF" "$MNT" 2>&1) || fail "blkfs CONFIG MNT failed: $out"
assert_eq "source" "$CONF" "$(findmnt -n -o SOURCE --mountpoint "$MNT")"
_PID_OF[$MNT]=$(cat "$PIDFILE")
ddev if="$TDIR/data" of="$MNT/r" bs=64K conv=notrunc
stop_blkfs "$MNT"
: "$ro_mnt"
