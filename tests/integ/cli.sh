#!/usr/bin/env bash
# cli.sh: the blkfs command. --help and --version exit 0; mount on a missing
# mount point fails clearly; a second mount on the same point fails with
# "already mounted" and the first keeps working; `blkfs umount` returns only
# after the daemon exited, exit 0, and says so; SIGTERM and SIGINT to the
# daemon write back and unmount; umount of a path that is not a blkfs mount
# fails and leaves such a mount alone; ./blkfs.conf is the default config;
# -f stays in the foreground.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp

CONFTEXT="[device ram0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096"

info "--help, --version"
out=$("$BLKFS" --help 2>&1) || fail "blkfs --help exited $?"
for w in mount umount check; do
	grep -qw -- "$w" <<<"$out" || fail "blkfs --help does not mention '$w': $out"
done
out=$("$BLKFS" --version 2>&1) || fail "blkfs --version exited $?"
grep -qE '[0-9]+\.[0-9]+' <<<"$out" || fail "blkfs --version prints no version: $out"
expect_fail "$BLKFS" no-such-command >/dev/null 2>&1
expect_fail "$BLKFS" >/dev/null 2>&1

info "blkfs check of a valid config"
printf '%s\n' "$CONFTEXT" >"$TDIR/ok.conf"
out=$("$BLKFS" check -c "$TDIR/ok.conf" 2>&1) || fail "blkfs check failed: $out"

info "mount on a missing mount point"
out=$("$BLKFS" mount "$TDIR/no-such-dir" -c "$TDIR/ok.conf" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "mount on a missing mount point succeeded"
grep -qE 'no-such-dir|No such file' <<<"$out" || fail "unclear message: $out"
! is_mounted "$TDIR/no-such-dir" || fail "something is mounted at $TDIR/no-such-dir"
[ ! -e "$TDIR/no-such-dir" ] || fail "mount created $TDIR/no-such-dir"
[ -z "$(pids_matching "$TDIR/no-such-dir")" ] || fail "process left after the failed mount"
info "  $out"

info "second mount on the same point"
start_blkfs "$TDIR/ok.conf"
first=$MNT
pid1=$DAEMON_PID
data=$TDIR/data
mkdata "$data" $((4 << 20))
ddev if="$data" of="$MNT/ram0" bs=1M conv=notrunc
out=$("$BLKFS" mount "$MNT" -c "$TDIR/ok.conf" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "a second mount on $MNT succeeded"
grep -qi 'already mounted' <<<"$out" || fail "second mount: no 'already mounted' in: $out"
info "  $out"
assert_eq "mounts at $MNT" 1 "$(mounts_at "$MNT" | wc -l)"
assert_eq "pid file after the failed second mount" "$pid1" "$(cat "$PIDFILE")"
pid_alive "$pid1" || fail "the first daemon died"
cmp -n $((4 << 20)) "$data" "$MNT/ram0" || fail "first mount lost data after the second mount attempt"
ddev if="$data" of="$MNT/ram0" bs=1M seek=10 conv=notrunc
cmp_range "$data" 0 "$MNT/ram0" $((10 << 20)) $((4 << 20))

info "blkfs umount with dirty data returns after the daemon exited"
ddev if="$data" of="$MNT/ram0" bs=4K seek=5000 conv=notrunc
out=$("$BLKFS" umount "$MNT" 2>&1) && rc=0 || rc=$?
alive=0
pid_alive "$pid1" && alive=1
[ "$rc" -eq 0 ] || fail "blkfs umount exited $rc: $out"
[ "$alive" -eq 0 ] || fail "blkfs umount returned while daemon $pid1 still ran"
! is_mounted "$MNT" || fail "still mounted after blkfs umount"
[ -n "$out" ] || fail "blkfs umount said nothing (it should say that all data was written)"
info "  $out"
unset "_PID_OF[$MNT]"

# no_loss FILE: the status file (written at daemon exit: "ok DEV BYTES" or
# "lost DEV BYTES REASON" per device, fuse/runfiles.c) reports no lost data.
no_loss() {
	[ -s "$1" ] || fail "$1 is missing or empty"
	if grep -qiE '^lost|(lost|unwritten|not written)[^0-9]*[1-9]' "$1"; then
		cat "$1"
		fail "$1 reports lost data"
	fi
	grep -q '^ok ram0' "$1" || fail "$1 has no 'ok ram0' line: $(cat "$1")"
}
# blkfs umount consumes the status file and reports it (fuse/cmd_umount.c)
grep -q 'all data written back' <<<"$out" || fail "blkfs umount does not say all data was written: $out"

for sig in TERM INT; do
	info "SIG$sig to the daemon writes back and unmounts"
	start_blkfs "$TDIR/ok.conf"
	ddev if="$data" of="$MNT/ram0" bs=4K seek=77 conv=notrunc
	ddev if="$data" of="$MNT/ram0" bs=1M seek=30 conv=notrunc
	kill -"$sig" "$DAEMON_PID"
	wait_gone 60 "$DAEMON_PID" || fail "daemon $DAEMON_PID still runs 60s after SIG$sig"
	! is_mounted "$MNT" || fail "$MNT still mounted after SIG$sig"
	unset "_PID_OF[$MNT]"
	no_loss "$STATUS"
	info "  status: $(head -c 300 "$STATUS" | tr '\n' ' ')"
done

info "umount of paths that are not blkfs mounts"
mkdir "$TDIR/plain"
out=$("$BLKFS" umount "$TDIR/plain" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "blkfs umount of a plain directory succeeded"
info "  $out"
out=$("$BLKFS" umount "$TDIR/no-such-dir" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "blkfs umount of a missing path succeeded"
info "  $out"
mount_top tmpfs "$TDIR/tmpfs" -t tmpfs -o size=1M
out=$("$BLKFS" umount "$TDIR/tmpfs" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "blkfs umount of a tmpfs succeeded"
is_mounted "$TDIR/tmpfs" || fail "blkfs umount unmounted a tmpfs"
info "  $out"
umount "$TDIR/tmpfs"
out=$("$BLKFS" umount "$first" 2>&1) && rc=0 || rc=$?
[ "$rc" -ne 0 ] || fail "blkfs umount of an already unmounted point succeeded"
info "  $out"

info "./blkfs.conf is the default config"
mkdir "$TDIR/cwd"
printf '[device cwddev]\nbackend = ram\nsize = 16M\n' >"$TDIR/cwd/blkfs.conf"
new_mountpoint
_MNTS+=("$MNT")
(cd "$TDIR/cwd" && "$BLKFS" mount "$MNT") || fail "blkfs mount without -c in a dir with blkfs.conf failed"
is_mounted "$MNT" || fail "not mounted"
_PID_OF[$MNT]=$(cat "$PIDFILE")
[ -f "$MNT/cwddev" ] || fail "$MNT/cwddev missing: ./blkfs.conf not used"
stop_blkfs "$MNT"

info "-f stays in the foreground"
new_mountpoint
_MNTS+=("$MNT")
"$BLKFS" mount "$MNT" -c "$TDIR/ok.conf" -f >"$TDIR/fg.out" 2>&1 &
fg=$!
_BGPIDS+=("$fg")
for ((i = 0; i < 600; i++)); do
	is_mounted "$MNT" && break
	pid_alive "$fg" || break
	sleep 0.1
done
is_mounted "$MNT" || { cat "$TDIR/fg.out"; fail "blkfs mount -f did not mount within 60 s"; }
pid_alive "$fg" || fail "blkfs mount -f returned while mounted"
ddev if="$data" of="$MNT/ram0" bs=1M conv=notrunc
cmp -n $((4 << 20)) "$data" "$MNT/ram0" || fail "-f mount: data differs"
_PID_OF[$MNT]=$fg
stop_blkfs "$MNT"
wait "$fg" && rc=0 || rc=$?
[ "$rc" -eq 0 ] || { cat "$TDIR/fg.out"; fail "blkfs mount -f exited $rc after blkfs umount"; }
