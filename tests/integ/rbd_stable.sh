#!/usr/bin/env bash
# integ-timeout: 600
# integ-needs: ceph
# rbd_stable.sh: stable pages on rbd (core/pcache.c invariant 7, issue 42),
# an image of its own in the runner's shared Ceph cluster (or, run alone,
# one it starts: tests/ceph/rbd.bash). librbd sends from the folio itself
# (rbd_disable_zero_copy_writes = false), so the cache must not change a
# folio under writeback:
#  - version A of 1 MiB is written; the flusher writes it back (dirty_expire
#    1 s) and the fault filter holds that write (fault.after = 0: the first
#    write below the cache hangs). No fsync: the kernel holds the file's
#    inode lock across a FUSE fsync, which would hold the rewrite back in
#    the kernel, not in the daemon;
#  - version B of the same 1 MiB is written meanwhile: it waits (2 s in it
#    has not returned) for the held writeback, as the kernel's
#    folio_wait_stable();
#  - the filter is armed again (B's writeback will be held), A's write
#    released: the rewrite returns, and the image (rbd export, the
#    cluster's copy) holds A whole, the version the held write was built
#    with, never B or a mix; the device reads B (from the cache);
#  - B's writeback released, fsync: the image holds B whole; after
#    `blkfs umount` too.
# Before the cache kept stable pages, the rewrite returned at once and the
# held write carried B.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
require_helper fsync_fd
rbd_require
require dd cmp

M=$((1 << 20))
OFF_MB=8
verA=$TDIR/a
verB=$TDIR/b
mkdata "$verA" "$M"
mkdata "$verB" "$M"

rbd_cluster_start
img=$(rbd_name stable)
rbd_create "$img" 64M
start_blkfs "$(rbd_conf "$img" "filters = fault
fault.ops = write
fault.hang = yes
fault.after = 0" "dirty_background = 16M
dirty_limit = 24M
dirty_expire = 1s")"
dev=$MNT/d
sys=$MNT/.sys/d/fault
[ -d "$sys" ] || fail "no $sys"

hung_is() {
	local h
	h=$(cat "$sys/hung")
	[ "$h" = "$1" ] || { echo "hung $h"; return 1; }
}

# image_has FILE WHAT: the image's MiB at OFF_MB, as the cluster has it, is FILE
image_has() {
	rbd_export "$img" "$TDIR/export.img"
	cmp -n "$M" "$1" <(dd if="$TDIR/export.img" bs=1M skip="$OFF_MB" count=1 status=none) ||
		fail "the image does not hold $2 whole at ${OFF_MB} MiB"
	rm -f "$TDIR/export.img"
}

info "version A, its writeback (the flusher's) held below the cache"
ddev if="$verA" of="$dev" bs=1M count=1 seek="$OFF_MB" conv=notrunc
wait_until 60 "the filter to hold A's writeback" hung_is 1

info "version B, written while A's writeback is held: it waits"
(
	rc=0
	dd if="$verB" of="$dev" bs=1M count=1 seek="$OFF_MB" conv=notrunc,nocreat status=none \
		2>"$TDIR/w.err" || rc=$?
	echo "$rc" >"$TDIR/w.rc"
) &
wpid=$!
sleep 2
[ ! -e "$TDIR/w.rc" ] ||
	fail "the rewrite of a folio under writeback returned at once: rbd's pages are not stable"
hung_is 1 >/dev/null || fail "the filter holds $(cat "$sys/hung") I/Os, not 1"

info "A released (B's writeback will be held): A lands whole, B is in the cache"
printf '0\n' >"$sys/after"
printf '1\n' >"$sys/release"
wait "$wpid"
assert_eq "the rewrite's exit status" 0 "$(cat "$TDIR/w.rc")"
wait_until 60 "the filter to hold B's writeback" hung_is 1
image_has "$verA" "version A (the held write's, unchanged while held)"
cmp -n "$M" "$verB" <(dd if="$dev" bs=1M skip="$OFF_MB" count=1 status=none) ||
	fail "the device does not read version B"

info "B released, fsync: the image holds B whole"
printf '1\n' >"$sys/release"
exec 7<>"$dev"
"$BLKFS_TESTBIN/fsync_fd" 7 >"$TDIR/fs.out"
exec 7>&-
assert_eq "fsync" OK "$(cat "$TDIR/fs.out")"
image_has "$verB" "version B"
assert_eq hung 0 "$(cat "$sys/hung")"
stop_blkfs "$MNT"
image_has "$verB" "version B after umount"
info "ok"
