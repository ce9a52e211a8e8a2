#!/usr/bin/env bash
# integ-timeout: 600
# integ-needs: ceph
# rbd_live.sh: an rbd device that changes while mounted, an image of its own
# in the runner's shared Ceph cluster (or, run alone, one it starts:
# tests/ceph/rbd.bash):
#  - `blkfs resize MNT d 96M` grows the image (rbd info says so) and the
#    file; data before the old end stays, the new part reads zeros; the
#    header notice it causes is not counted as an outside resize;
#  - `rbd resize` by another client: the file's size follows (learnt
#    through librbd's header watch), growing and shrinking;
#  - an outside shrink below data the cache holds dirty: the file follows,
#    the dirty data past the new end is dropped and counted
#    (dropped_bytes), the daemon log says so, the dirty data before the
#    end reaches the image at the next fsync;
#  - `blkfs snapshot` is an RBD snapshot (`rbd snap ls`), listed in
#    .sys/d/snapshots; `blkfs reset` rolls the device back to it, dirty
#    data included in the snapshot, and to its size after a `blkfs resize`
#    (not counted as an outside resize); `blkfs snapshot -d` removes it;
#  - `blkfs save` is refused with EOPNOTSUPP and a message;
#  - .sys/d/snapshots: data_bytes and own_bytes against known writes, by
#    whole objects (an image with fast-diff) and by exact extents (without);
#  - (test hooks, BLKFS_RBD_TEST) a failed rbd_get_features fails `blkfs
#    check` and `blkfs mount` within 10 s, saying why; a header notice whose
#    size reads fail twice is still taken (read again each second).
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
img=$(rbd_name live)
rbd_create "$img" 64M
start_blkfs "$(rbd_conf "$img" "" "dirty_background = 16M
dirty_limit = 24M
dirty_expire = 1h")"
dev=$MNT/d
file_size_is() {
	[ "$(stat -c %s "$dev")" = "$1" ] || { echo "st_size $(stat -c %s "$dev")"; return 1; }
}

info "resize from blkfs"
ddev if="$src" of="$dev" bs=1M count=16 seek=48 conv=notrunc
"$BLKFS" resize "$MNT" d 96M || fail "blkfs resize d 96M failed"
assert_eq "image size after blkfs resize" $((96 * M)) "$(rbd_image_size "$img")"
assert_eq "st_size after blkfs resize" $((96 * M)) "$(stat -c %s "$dev")"
cmp -n $((16 * M)) "$src" <(dd if="$dev" bs=1M skip=48 count=16 status=none) || fail "data before the old end changed"
cmp -n $((32 * M)) /dev/zero <(dd if="$dev" bs=1M skip=64 status=none) || fail "the grown part does not read zeros"
stat_of() { awk -v k="$1" '$1 == k { print $2 }' "$MNT/.sys/d/blkfs_stat"; }
# the resize's header notice reaches the watch within moments; it must not
# count as (or be taken for) a resize from outside
sleep 2
assert_eq "rbd_outside_resizes after blkfs's own resize" 0 "$(stat_of rbd_outside_resizes)"

info "resize from outside (rbd resize)"
rbd resize --no-progress --size 128M "rbd/$img" >/dev/null 2>&1 || fail "rbd resize 128M failed"
wait_until 60 "st_size $((128 * M)) after rbd resize" file_size_is $((128 * M))
rbd resize --no-progress --allow-shrink --size 80M "rbd/$img" >/dev/null 2>&1 || fail "rbd resize 80M failed"
wait_until 60 "st_size $((80 * M)) after rbd resize --allow-shrink" file_size_is $((80 * M))
[ "$(awk '$1 == "rbd_outside_resizes" { print $2 }' "$MNT/.sys/d/blkfs_stat")" -ge 2 ] ||
	fail "rbd_outside_resizes: $(cat "$MNT/.sys/d/blkfs_stat")"
cmp -n $((16 * M)) "$src" <(dd if="$dev" bs=1M skip=48 count=16 status=none) || fail "data changed over the outside resizes"

info "an outside shrink below dirty data: dropped, counted, in the log"
d0=$(stat_of dropped_bytes)
# dirty, not written back (dirty_expire = 1h, under dirty_background):
# 4 MiB past the coming end, 2 MiB before it
ddev if="$src" of="$dev" bs=1M count=4 skip=4 seek=72 conv=notrunc
ddev if="$src" of="$dev" bs=1M count=2 seek=60 conv=notrunc
[ "$(stat_of dirty_bytes)" -ge $((6 * M)) ] || fail "the writes are not dirty: $(cat "$MNT/.sys/d/blkfs_stat")"
rbd resize --no-progress --allow-shrink --size 68M "rbd/$img" >/dev/null 2>&1 || fail "rbd resize 68M failed"
wait_until 60 "st_size $((68 * M)) after a shrink below dirty data" file_size_is $((68 * M))
assert_eq "dropped_bytes after the shrink" $((4 * M)) $(($(stat_of dropped_bytes) - d0))
grep -q "d: the storage shrank outside blkfs to $((68 * M)) bytes below data not yet written back: $((4 * M)) dirty bytes past the new end are lost" "$LOG" ||
	fail "the daemon log does not report the lost data: $(tail -n 5 "$LOG")"
sync "$dev" || fail "fsync after the shrink failed"
assert_eq "dirty_bytes after fsync" 0 "$(stat_of dirty_bytes)"
rbd_export "$img" "$TDIR/export.img"
assert_eq "image size" $((68 * M)) "$(stat -c %s "$TDIR/export.img")"
cmp -n $((2 * M)) "$src" <(dd if="$TDIR/export.img" bs=1M skip=60 count=2 status=none) ||
	fail "dirty data before the new end did not reach the image"
rm -f "$TDIR/export.img"

info "snapshot, reset, delete"
dd if="$dev" of="$TDIR/before" bs=1M status=none
"$BLKFS" snapshot "$MNT" d base || fail "blkfs snapshot failed"
rbd snap ls "rbd/$img" | grep -qw base || fail "rbd snap ls does not list base: $(rbd snap ls "rbd/$img")"
grep -q '^base' "$MNT/.sys/d/snapshots" || fail ".sys/d/snapshots: $(cat "$MNT/.sys/d/snapshots")"
ddev if=/dev/zero of="$dev" bs=1M count=8 seek=50 conv=notrunc,fsync
cmp -s "$TDIR/before" "$dev" && fail "the overwrite did not change the device"
# a snapshot of another size: the reset takes the device back to it
"$BLKFS" resize "$MNT" d 72M || fail "blkfs resize d 72M failed"
o0=$(stat_of rbd_outside_resizes)
"$BLKFS" reset "$MNT" d base || fail "blkfs reset failed"
wait_until 10 "st_size $((68 * M)) (the snapshot's) after the reset" file_size_is $((68 * M))
cmp "$TDIR/before" "$dev" || fail "the device after reset differs from the snapshot"
sleep 2
assert_eq "rbd_outside_resizes after blkfs's resize and reset" "$o0" "$(stat_of rbd_outside_resizes)"
out=$("$BLKFS" save "$MNT" d "$TDIR/save.img" 2>&1) && fail "blkfs save on rbd succeeded: $out"
case $out in *"rbd backend cannot do this"*) ;; *) fail "blkfs save on rbd: no reason given: $out" ;; esac
info "save: $out"
"$BLKFS" snapshot -d "$MNT" d base || fail "blkfs snapshot -d failed"
! rbd snap ls "rbd/$img" | grep -qw base || fail "the snapshot is still in rbd snap ls"
stop_blkfs "$MNT"

# data_bytes and own_bytes against known writes (objects of 4 MiB), on an
# image with a fast-diff object map (counted by whole objects) and on one
# without (exact extents): s1 after 4K at 0 (object 0) and 1M at 8M (2);
# s2 after 4K at 4K (0) and 64K at 12M (3); then 4K at 8K (0). own_bytes is
# what deleting frees, the objects written both before and after a
# snapshot: object 0 for s1 and for s2, one object (4 MiB) each.
snap_field() { # SNAP FIELD
	awk -v s="$1" -v f="$2=" '$1 == s { for (i = 2; i <= NF; i++) if (index($i, f) == 1) print substr($i, length(f) + 1) }' \
		"$MNT/.sys/d/snapshots"
}
conf_live=$CONF mnt_live=$MNT
for feat in default layering,exclusive-lock; do
	info "data_bytes and own_bytes, image features: $feat"
	uimg=$(rbd_name "usage-${feat%%,*}")
	if [ "$feat" = default ]; then
		rbd_create "$uimg" 32M
	else
		rbd_cmd "rbd create ($feat)" create --size 32M --image-feature "$feat" "rbd/$uimg"
	fi
	K=1024
	start_blkfs "$(rbd_conf "$uimg")"
	ddev if="$src" of="$MNT/d" bs=4K count=1 conv=notrunc
	ddev if="$src" of="$MNT/d" bs=1M count=1 seek=8 conv=notrunc,fsync
	"$BLKFS" snapshot "$MNT" d s1 || fail "blkfs snapshot s1 failed"
	ddev if="$src" of="$MNT/d" bs=4K count=1 seek=1 conv=notrunc
	ddev if="$src" of="$MNT/d" bs=64K count=1 seek=192 conv=notrunc,fsync
	"$BLKFS" snapshot "$MNT" d s2 || fail "blkfs snapshot s2 failed"
	if rbd info "rbd/$uimg" | grep -q 'features:.*fast-diff'; then
		d1=$((8 * M)) d2=$((12 * M))	# whole objects: 0 and 2; 0, 2 and 3
	else
		d1=$((4 * K + M)) d2=$((8 * K + M + 64 * K))
	fi
	assert_eq "s1 data_bytes ($feat)" "$d1" "$(snap_field s1 data_bytes)"
	assert_eq "s2 data_bytes ($feat)" "$d2" "$(snap_field s2 data_bytes)"
	assert_eq "s1 own_bytes ($feat)" $((4 * M)) "$(snap_field s1 own_bytes)"
	assert_eq "s2 own_bytes before the head wrote over it ($feat)" 0 "$(snap_field s2 own_bytes)"
	ddev if="$src" of="$MNT/d" bs=4K count=1 seek=2 conv=notrunc,fsync
	assert_eq "s2 own_bytes ($feat)" $((4 * M)) "$(snap_field s2 own_bytes)"
	info "$feat: $(tr '\n' ' ' <"$MNT/.sys/d/snapshots")"
	# deleting s1 frees its own object: s2 then holds object 0 alone too
	"$BLKFS" snapshot -d "$MNT" d s1 || fail "blkfs snapshot -d s1 failed"
	assert_eq "s2 own_bytes after s1's deletion ($feat)" $((4 * M)) "$(snap_field s2 own_bytes)"
	stop_blkfs "$MNT"
done
CONF=$conf_live MNT=$mnt_live

# The test hooks (BLKFS_RBD_TEST, backends/rbd.c) make librbd fail on cue.
info "a failed rbd_get_features fails the open, saying why"
t0=$SECONDS
out=$(BLKFS_RBD_TEST=features timeout 60 "$BLKFS" check -c "$CONF" 2>&1) &&
	fail "blkfs check opened rbd/$img although rbd_get_features failed: $out"
[ $((SECONDS - t0)) -le 10 ] || fail "blkfs check took $((SECONDS - t0)) s to refuse (at most 10)"
case $out in
*"image: rbd_get_features of rbd/$img: Input/output error (the lock cannot be taken without knowing them)"*) ;;
*) fail "a features error: the refusal does not say why: $out" ;;
esac
case $out in *"no exclusive-lock feature"*) fail "a features error warned of a missing feature: $out" ;; esac
lmnt=$MNT
out=$(BLKFS_RBD_TEST=features timeout 60 "$BLKFS" mount "$lmnt" -c "$CONF" 2>&1) &&
	fail "blkfs mount opened rbd/$img although rbd_get_features failed: $out"
! is_mounted "$lmnt" || fail "a refused mount left $lmnt mounted"
info "features error: $(printf '%s\n' "$out" | grep -m1 rbd_get_features)"

info "a resize notice whose size read fails is read again"
BLKFS_RBD_TEST=notice_size=2 remount_blkfs "$lmnt"
sz=$(stat -c %s "$dev")
rbd resize --no-progress --size $((sz / M + 8))M "rbd/$img" >/dev/null 2>&1 || fail "rbd resize failed"
wait_until 30 "st_size $((sz + 8 * M)) after rbd resize, its first two size reads failing" file_size_is $((sz + 8 * M))
grep -q "rbd: d: reading the size of rbd/$img after a header notice: Input/output error; trying again each second" "$LOG" ||
	fail "the daemon log does not say the size read failed: $(tail -n 5 "$LOG")"
assert_eq "rbd_outside_resizes after the retried notice" 1 "$(stat_of rbd_outside_resizes)"
stop_blkfs "$MNT"
info "ok"
