#!/usr/bin/env bash
# integ-timeout: 600
# rbd_live.sh: an rbd device that changes while mounted, on a throw-away
# Ceph cluster this test starts (tests/ceph/cluster, stopped at exit):
#  - `blkfs resize MNT d 96M` grows the image (rbd info says so) and the
#    file; data before the old end stays, the new part reads zeros;
#  - `rbd resize` by another client: the file's size follows (learnt
#    through librbd's header watch), growing and shrinking;
#  - `blkfs snapshot` is an RBD snapshot (`rbd snap ls`), listed in
#    .sys/d/snapshots; `blkfs reset` rolls the device back to it, dirty
#    data included in the snapshot; `blkfs snapshot -d` removes it;
#  - `blkfs save` is refused with EOPNOTSUPP and a message.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
rbd_require
require dd cmp stat

M=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((16 * M))

rbd_cluster_start
rbd create --size 64M rbd/live || fail "rbd create failed"
start_blkfs "[cache]
size = 32M

[device d]
backend = rbd
pool = rbd
image = live
conf = $CEPH_CONF"
dev=$MNT/d

image_size() {
	rbd info --format json rbd/live | python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])'
}
file_size_is() {
	[ "$(stat -c %s "$dev")" = "$1" ] || { echo "st_size $(stat -c %s "$dev")"; return 1; }
}

info "resize from blkfs"
ddev if="$src" of="$dev" bs=1M count=16 seek=48 conv=notrunc
"$BLKFS" resize "$MNT" d 96M || fail "blkfs resize d 96M failed"
assert_eq "image size after blkfs resize" $((96 * M)) "$(image_size)"
assert_eq "st_size after blkfs resize" $((96 * M)) "$(stat -c %s "$dev")"
cmp -n $((16 * M)) "$src" <(dd if="$dev" bs=1M skip=48 count=16 status=none) || fail "data before the old end changed"
cmp -n $((32 * M)) /dev/zero <(dd if="$dev" bs=1M skip=64 status=none) || fail "the grown part does not read zeros"

info "resize from outside (rbd resize)"
rbd resize --no-progress --size 128M rbd/live >/dev/null 2>&1 || fail "rbd resize 128M failed"
wait_until 60 "st_size $((128 * M)) after rbd resize" file_size_is $((128 * M))
rbd resize --no-progress --allow-shrink --size 80M rbd/live >/dev/null 2>&1 || fail "rbd resize 80M failed"
wait_until 60 "st_size $((80 * M)) after rbd resize --allow-shrink" file_size_is $((80 * M))
[ "$(awk '$1 == "rbd_outside_resizes" { print $2 }' "$MNT/.sys/d/blkfs_stat")" -ge 2 ] ||
	fail "rbd_outside_resizes: $(cat "$MNT/.sys/d/blkfs_stat")"
cmp -n $((16 * M)) "$src" <(dd if="$dev" bs=1M skip=48 count=16 status=none) || fail "data changed over the outside resizes"

info "snapshot, reset, delete"
dd if="$dev" of="$TDIR/before" bs=1M status=none
"$BLKFS" snapshot "$MNT" d base || fail "blkfs snapshot failed"
rbd snap ls rbd/live | grep -qw base || fail "rbd snap ls does not list base: $(rbd snap ls rbd/live)"
grep -q '^base' "$MNT/.sys/d/snapshots" || fail ".sys/d/snapshots: $(cat "$MNT/.sys/d/snapshots")"
ddev if=/dev/zero of="$dev" bs=1M count=8 seek=50 conv=notrunc,fsync
cmp -s "$TDIR/before" "$dev" && fail "the overwrite did not change the device"
"$BLKFS" reset "$MNT" d base || fail "blkfs reset failed"
cmp "$TDIR/before" "$dev" || fail "the device after reset differs from the snapshot"
out=$("$BLKFS" save "$MNT" d "$TDIR/save.img" 2>&1) && fail "blkfs save on rbd succeeded: $out"
case $out in *"rbd backend cannot do this"*) ;; *) fail "blkfs save on rbd: no reason given: $out" ;; esac
info "save: $out"
"$BLKFS" snapshot -d "$MNT" d base || fail "blkfs snapshot -d failed"
! rbd snap ls rbd/live | grep -qw base || fail "the snapshot is still in rbd snap ls"
stop_blkfs "$MNT"
info "ok"
