#!/usr/bin/env bash
# flakey_ext4.sh: ext4 over a loop device on a flakey device, as xfstests
# uses dm-flakey (its _flakey_drop_and_remount):
#  - a workload on ext4; some files fsynced (the fs_fill set, synced, and
#    files fsynced one by one), some not;
#  - the device switched to drop_writes as the last state (up 0, down 180,
#    the table xfstests loads), more writes, then the filesystem unmounted:
#    everything it writes from the switch on is acknowledged and dropped;
#  - the device switched back, the filesystem mounted again: the journal
#    replays, every file fsynced before the switch is intact, and fsck is
#    clean afterwards.
# blkfs's own cache still holds what was dropped (written back "fine"): a
# filesystem's unmount does not empty it, as it empties the kernel's cache of
# a block device. So blkfs is unmounted and mounted again between the two
# halves, over an aio image file that keeps what reached it. A filesystem
# makes no promise when writes vanish under it while it runs, so nothing
# is read between the switch and the unmount.
# The loop device comes from `blkfs attach` and goes with `blkfs detach`,
# and mkfs takes the options attach gives, as a user does.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require mkfs.ext4 e2fsck dumpe2fs losetup sha256sum awk
[ -e /dev/loop-control ] || skip "no /dev/loop-control"
odirect_dir || skip "neither $TDIR nor /var/tmp takes O_DIRECT (the aio backend needs it)"

img=$ODIRECT_DIR/flakey.img
start_blkfs "[cache]
size = 64M

[device d0]
backend = aio
path = $img
size = 128M
create = yes
filters = flakey
flakey.up_interval = 0
flakey.down_interval = 0
flakey.drop_writes = yes"
mnt0=$MNT
sys=$MNT/.sys/d0/flakey
[ -d "$sys" ] || fail "no $sys"
assert_eq state up "$(cat "$sys/state")"

bstat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$mnt0/.sys/d0/blkfs_stat"
}

blkfs_attach "$mnt0" d0
lp=$LOOP
# shellcheck disable=SC2046  # the options attach printed, one word each
mkfs.ext4 -q -F -b 4096 $(attach_mkfs_opts ext4) "$lp" || fail "mkfs.ext4 $(attach_mkfs_opts ext4) failed"
fs=$TDIR/fs
mount_top "$lp" "$fs"

info "workload: fs_fill (synced), files fsynced one by one, files never fsynced"
fs_fill "$fs" 40
mkdir -p "$fs/one"
: >"$TDIR/FSYNCED"
for ((i = 1; i <= 30; i++)); do
	head -c $((i * 4099)) /dev/urandom >"$fs/one/f.$i"
	sync "$fs/one/f.$i"
	(cd "$fs" && sha256sum "one/f.$i") >>"$TDIR/FSYNCED"
done
sync "$fs/one"
for ((i = 1; i <= 10; i++)); do
	head -c $((i * 8191)) /dev/urandom >"$fs/one/unsynced.$i"
done

info "switch to drop_writes (up 0, down 180), write on, unmount"
dropped0=$(bstat flakey_dropped_writes)
printf '180\n' >"$sys/down_interval"
assert_eq state down "$(cat "$sys/state")"
for ((i = 1; i <= 10; i++)); do
	head -c $((i * 12345)) /dev/urandom >"$fs/one/after.$i"
	echo "overwritten after the switch $i" >"$fs/one/f.$i"
done
sync "$fs/one/after.1"
rm -f "$fs/big2"
umount "$fs" || fail "umount $fs failed"
_TOPMNTS=()
"$BLKFS" detach "$lp" || fail "blkfs detach $lp failed"
dropped=$(($(bstat flakey_dropped_writes) - dropped0))
info "writes dropped since the switch: $dropped"
[ "$dropped" -gt 0 ] || fail "nothing was dropped: the test would prove nothing"
assert_eq "dirty bytes left in blkfs after the filesystem's unmount" 0 "$(bstat dirty_bytes)"

info "switch back, blkfs mounted again (its cache holds the dropped writes)"
printf '0\n' >"$sys/down_interval"
assert_eq state up "$(cat "$sys/state")"
stop_blkfs "$mnt0"
remount_blkfs "$mnt0"
assert_eq "state after remount" up "$(cat "$sys/state")"

info "mount: journal replay; every file fsynced before the switch is intact"
blkfs_attach "$mnt0" d0
lp=$LOOP
# the unmount's own writes were dropped: the journal still needs replaying
dumpe2fs -h "$lp" 2>/dev/null | grep -q '^Filesystem features:.*needs_recovery' ||
	fail "the filesystem does not need recovery: its unmount was not dropped"
mount_top "$lp" "$fs"
fs_verify "$fs" "fs_fill set after drop_writes"
(cd "$fs" && sha256sum --quiet -c "$TDIR/FSYNCED") || fail "a file fsynced before the switch differs"
[ ! -e "$fs/one/after.1" ] || fail "a file written after the switch survived its dropped writes"
umount "$fs" || fail "umount $fs failed"
_TOPMNTS=()

info "fsck is clean"
e2fsck -fn "$lp" >"$TDIR/fsck.out" 2>&1 || { cat "$TDIR/fsck.out"; fail "e2fsck -fn found errors"; }
"$BLKFS" detach "$lp" || fail "blkfs detach $lp failed"
stop_blkfs "$mnt0"
