#!/usr/bin/env bash
# fault.sh: the fault filter in a real mount (filters = fault over ram).
#  - An injected write EIO during writeback: the next fsync fails once with
#    EIO, the data stays dirty (blkfs_stat dirty_bytes), and once the fault
#    is lifted a later fsync succeeds and the data verifies on the backend
#    (read back with O_DIRECT, which bypasses the cache), both for a one-off
#    fault (after = 0, persistent = no) and a persistent one.
#  - A read EIO from a bad block reaches the reader as EIO (dd, O_DIRECT
#    dd, cat all fail), not as zeros; the blocks next to it read fine; after
#    `clear` the same read works.
#  - A bad block with ENOSPC under a write: fsync reports ENOSPC.
#  - The attrs show the config's keys and refuse garbage.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper fsync_fd
require dd cmp awk

MiB=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((8 * MiB))

start_blkfs "[device r0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
filters = fault
fault.ops = write
fault.persistent = no"
dev=$MNT/r0
sys=$MNT/.sys/r0/fault
[ -d "$sys" ] || fail "no $sys"

# stat NAME: a counter of .sys/r0/blkfs_stat (0 when absent).
stat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$MNT/.sys/r0/blkfs_stat"
}

# fsync_fd FD: OK or the errno name of fsync on an fd this shell holds.
fsync_fd() {
	"$BLKFS_TESTBIN/fsync_fd" "$@"
}

# set_attr ATTR VALUE
set_attr() {
	printf '%s\n' "$2" >"$sys/$1" || fail "echo $2 > $sys/$1 failed"
}

# expect_attr_refuses ATTR VALUE: EINVAL, and the value shown stays.
expect_attr_refuses() {
	local before
	before=$(cat "$sys/$1")
	expect_errno EINVAL bash -c "printf '%s\n' '$2' >'$sys/$1'"
	assert_eq "$1 after refusing '$2'" "$before" "$(cat "$sys/$1")"
}

info "attrs from the config"
assert_eq ops write "$(cat "$sys/ops")"
assert_eq persistent 0 "$(cat "$sys/persistent")"
assert_eq errno EIO "$(cat "$sys/errno")"
assert_eq after off "$(cat "$sys/after")"
assert_eq probability 0 "$(cat "$sys/probability")"
assert_eq enabled 1 "$(cat "$sys/enabled")"
assert_eq badblocks "" "$(cat "$sys/badblocks")"
expect_attr_refuses ops "write,trim"
expect_attr_refuses errno EWHATEVER
expect_attr_refuses probability 1.5
expect_attr_refuses after -3
expect_attr_refuses persistent perhaps
expect_attr_refuses badblocks "1M"
expect_attr_refuses badblocks "64M 4096 EIO"
expect_attr_refuses badblocks "63M 2M EIO"
assert_eq badblocks "" "$(cat "$sys/badblocks")"

# The fd every fsync below goes through: opened before the writes, so each
# writeback error is reported to it once (errseq).
exec 7<>"$dev"

# ---------------------------------------------------------------------------
info "one write EIO during writeback: fsync fails once, then succeeds"
set_attr after 0
ddev if="$src" of="$dev" bs=1M count=4 conv=notrunc
assert_eq "fsync after the injected EIO" EIO "$(fsync_fd 7)"
assert_eq "after disarmed itself" off "$(cat "$sys/after")"
assert_eq "the next fsync" OK "$(fsync_fd 7)"
assert_eq "dirty bytes after fsync" 0 "$(stat dirty_bytes)"
assert_eq fault_injected 1 "$(stat fault_injected)"
# on the backend (O_DIRECT bypasses the cache), not only in the cache
cmp -n $((4 * MiB)) "$src" <(dd if="$dev" bs=1M count=4 iflag=direct status=none) ||
	fail "data on the backend differs after the fault was lifted"

# ---------------------------------------------------------------------------
info "persistent write EIO: fsync fails, the data stays dirty, lifted: fsync succeeds"
set_attr persistent yes
set_attr after 0
ddev if="$src" of="$dev" bs=1M skip=4 seek=8 count=4 conv=notrunc
assert_eq "fsync while every write fails" EIO "$(fsync_fd 7)"
dirty=$(stat dirty_bytes)
[ "$dirty" -ge $((4 * MiB)) ] || fail "dirty_bytes $dirty after a failed fsync, want >= 4 MiB"
# the cache still serves what it could not write
cmp_range "$src" $((4 * MiB)) "$dev" $((8 * MiB)) $((4 * MiB))
set_attr enabled 0
# background retries may have failed since the last report: at most one more EIO
r=$(fsync_fd 7)
[ "$r" = OK ] || r=$(fsync_fd 7)
assert_eq "fsync once the fault is lifted" OK "$r"
assert_eq "dirty bytes after a good fsync" 0 "$(stat dirty_bytes)"
cmp -n $((4 * MiB)) <(dd if="$src" bs=1M skip=4 count=4 status=none) \
	<(dd if="$dev" bs=1M skip=8 count=4 iflag=direct status=none) ||
	fail "data on the backend differs after the persistent fault was lifted"
injected=$(stat fault_injected)
[ "$injected" -ge 2 ] || fail "fault_injected $injected"
info "faults injected so far: $injected"
set_attr enabled 1
set_attr persistent no

# ---------------------------------------------------------------------------
info "read EIO from a bad block reaches the reader"
bad=$((32 * MiB))	# never written nor read: not in the cache
set_attr badblocks "$bad 4096 EIO"
assert_eq badblocks "$bad 4096 EIO" "$(cat "$sys/badblocks")"
expect_errno EIO dd if="$dev" of=/dev/null bs=4096 skip=$((bad / 4096)) count=1 status=none
expect_errno EIO dd if="$dev" of=/dev/null bs=4096 skip=$((bad / 4096)) count=1 iflag=direct status=none
expect_errno EIO dd if="$dev" of=/dev/null bs=512 skip=$((bad / 512 + 7)) count=1 status=none
expect_errno EIO cat "$dev"
# its neighbours read fine
dd if="$dev" of=/dev/null bs=4096 skip=$((bad / 4096 - 1)) count=1 status=none ||
	fail "the block before the bad one does not read"
dd if="$dev" of=/dev/null bs=4096 skip=$((bad / 4096 + 1)) count=1 status=none ||
	fail "the block after the bad one does not read"
# a failed read must not leave zeros in the cache for the next reader
expect_errno EIO dd if="$dev" of=/dev/null bs=4096 skip=$((bad / 4096)) count=1 status=none
before=$(stat fault_badblock_injected)
[ "$before" -ge 4 ] || fail "fault_badblock_injected $before"
set_attr badblocks clear
assert_eq badblocks "" "$(cat "$sys/badblocks")"
assert_zero "$dev" "$bad" 4096

# ---------------------------------------------------------------------------
info "a bad block with ENOSPC under a write: fsync says ENOSPC"
set_attr badblocks "$((40 * MiB)) 512 ENOSPC"
ddev if="$src" of="$dev" bs=64K count=1 seek=$((40 * MiB / 65536)) conv=notrunc
assert_eq "fsync over an ENOSPC bad block" ENOSPC "$(fsync_fd 7)"
set_attr badblocks clear
r=$(fsync_fd 7)
[ "$r" = OK ] || r=$(fsync_fd 7)
assert_eq "fsync after clear" OK "$r"
cmp -n 65536 "$src" <(dd if="$dev" bs=64K skip=$((40 * MiB / 65536)) count=1 iflag=direct status=none) ||
	fail "the write over the cleared bad block did not land"

# ---------------------------------------------------------------------------
info "badblocks_partial_io: O_DIRECT comes back short at the bad block, buffered reads fail"
set_attr badblocks "$((48 * MiB + 20480)) 4096 EIO"
set_attr badblocks_partial_io yes
# a short read, which dd takes as a partial record
out=$(dd if="$dev" of="$TDIR/part" bs=64K count=1 skip=$((48 * MiB / 65536)) iflag=direct 2>&1) ||
	fail "an O_DIRECT read over a bad block 20 KiB in failed instead of coming back short: $out"
case $out in
*"0+1 records in"*"20480 bytes"*) ;;
*) fail "O_DIRECT read over a bad block 20 KiB in: $out" ;;
esac
cmp -n 20480 "$TDIR/part" <(dd if="$dev" bs=4096 count=5 skip=$((48 * MiB / 4096)) iflag=direct status=none) ||
	fail "the part before the bad block differs"
expect_errno EIO dd if="$dev" of=/dev/null bs=64K count=1 skip=$((48 * MiB / 65536)) status=none
[ "$(stat fault_partial_ios)" -ge 1 ] || fail "fault_partial_ios $(stat fault_partial_ios)"
set_attr badblocks_partial_io no
set_attr badblocks clear

exec 7>&-
info "faults injected: $(stat fault_injected) (bad-block: $(stat fault_badblock_injected))"
stop_blkfs
