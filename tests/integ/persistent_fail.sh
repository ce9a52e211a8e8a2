#!/usr/bin/env bash
# persistent_fail.sh: a backend whose every write fails, for good (fault
# filter: after = 0, persistent = yes) under a small cache (16M, dirty limit
# 4M):
#  - a writer gets the sticky errno (EIO) once dirty data reaches the dirty
#    limit, instead of waiting forever; it wrote about the limit, not all;
#  - fsync on a descriptor opened before reports it;
#  - reads still work (from the cache) and the mount stays responsive;
#  - `blkfs umount` exits non-zero within its bounded retries and names the
#    device and the bytes lost; the mount and the daemon are gone.
# Every step runs under a timeout: nothing may hang.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper fsync_fd
require dd awk timeout date

MiB=$((1 << 20))

start_blkfs "[cache]
size = 16M
dirty_limit = 4M
dirty_background = 1M

[device r0]
backend = ram
size = 64M
filters = fault
fault.ops = write
fault.after = 0
fault.persistent = yes
fault.errno = EIO"
dev=$MNT/r0
sys=$MNT/.sys/r0

stat() {
	awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print 0 }' "$sys/blkfs_stat"
}

exec 7<>"$dev"

info "a writer runs into the dirty limit of a device whose writes all fail"
t0=$(date +%s)
out=$(timeout -k 5 60 dd if=/dev/urandom of="$dev" bs=1M count=32 conv=notrunc,nocreat 2>&1) &&
	rc=0 || rc=$?
t=$(($(date +%s) - t0))
info "dd: exit $rc after ${t}s: $(printf '%s' "$out" | tr '\n' ' ')"
{ [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || fail "the writer hung (killed by timeout)"
[ "$rc" -ne 0 ] || fail "dd wrote 32 MiB into a device whose every write fails"
case $out in
*"Input/output error"*) ;;
*) fail "dd did not get EIO: $out" ;;
esac
copied=$(printf '%s\n' "$out" | awk '/bytes/ && /copied/ { print $1; exit }')
[ -n "$copied" ] || copied=0
info "dd copied $copied bytes before EIO"
[ "$copied" -lt $((32 * MiB)) ] || fail "dd copied everything"
dirty=$(stat dirty_bytes)
info "dirty_bytes $dirty, fault_injected $(stat fault_injected), writeback_errors $(stat writeback_errors)"
[ "$dirty" -gt 0 ] || fail "no dirty data left: where did it go?"
[ "$dirty" -le $((16 * MiB)) ] || fail "dirty_bytes $dirty above the cache size"
[ "$(stat fault_injected)" -gt 0 ] || fail "no fault injected"

info "fsync reports it; so does a second writer"
r=$(timeout -k 5 30 "$BLKFS_TESTBIN/fsync_fd" 7) || fail "fsync_fd failed or hung"
assert_eq "fsync on a failing device" EIO "$r"
expect_errno EIO timeout -k 5 30 dd if=/dev/zero of="$dev" bs=1M count=16 seek=40 conv=notrunc,nocreat status=none

info "reads still work"
timeout -k 5 30 dd if="$dev" of=/dev/null bs=1M count=8 status=none || fail "reads fail or hang"
assert_live "$MNT"

exec 7>&-

info "blkfs umount: bounded retries, non-zero, names the loss"
pid=${_PID_OF[$MNT]}
t0=$(date +%s)
out=$(timeout -k 5 120 "$BLKFS" umount "$MNT" 2>&1) && rc=0 || rc=$?
t=$(($(date +%s) - t0))
printf '%s\n' "$out"
info "blkfs umount: exit $rc after ${t}s"
{ [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ]; } || fail "blkfs umount hung"
[ "$rc" -ne 0 ] || fail "blkfs umount exited 0 though every write failed"
# bounded: a couple of seconds quiet; late only as a busy machine is late
[ "$t" -le 90 ] || fail "blkfs umount took ${t}s"
case $out in
*"of r0 could not be written"*"Input/output error"*) ;;
*) fail "blkfs umount did not name the device and the error: $out" ;;
esac
lost=$(printf '%s\n' "$out" | awk '/could not be written/ { for (i = 1; i < NF; i++) if ($(i + 1) == "bytes") print $i; exit }')
{ [ -n "$lost" ] && [ "$lost" -gt 0 ]; } || fail "blkfs umount did not say how many bytes were lost: $out"
info "lost: $lost bytes"
! is_mounted "$MNT" || fail "$MNT still mounted after blkfs umount"
wait_gone 30 "$pid" || fail "daemon $pid still running after blkfs umount"
unset "_PID_OF[$MNT]"
grep -q "could not be written back" "$LOG" || fail "the daemon log does not say what was lost"
[ -z "$(log_problems)" ] || fail "the daemon log reports problems: $(log_problems)"
