#!/usr/bin/env bash
# sd_notify.sh: blkfs as a systemd service sees it (PID 1 here is not
# systemd, so the test plays the service manager). A datagram socket stands
# in for $NOTIFY_SOCKET (tests/integ/notify_listen.c) and a file named by
# $JOURNAL_STREAM for the journal; `blkfs mount -f` runs in the foreground,
# as the unit's ExecStart does, and `blkfs umount` stops it, as ExecStop.
#  - READY=1 arrives only once the mount answers: the listener, on
#    receiving it, finds MNT mounted and reads the device before it looks
#    at anything else;
#  - on stop: STOPPING=1, then STATUS= lines with the dirty bytes left
#    (more than 0 at first, never growing) and EXTEND_TIMEOUT_USEC= while
#    the final writeback (behind a 2 s delay.write) makes progress, then
#    "STATUS=All data written back"; the data is in the image;
#  - every line the daemon wrote to the journal stream has a syslog
#    priority prefix: <6> for "mounted", <4> for a SIGTERM during the final
#    writeback, <3> for a failed writeback (a fault filter on a second
#    device), so `journalctl -p err` finds the error.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper notify_listen
require dd cmp stat
odirect_dir || skip "no filesystem here takes O_DIRECT (needed for the aio image)"

M=$((1 << 20))
img=$ODIRECT_DIR/d.img
write_conf "[cache]
size = 32M
dirty_background = 90%
dirty_limit = 95%
dirty_expire = 3600s

[device d0]
backend = aio
path = $img
size = 32M
create = yes
filters = delay
delay.write = 2s

[device bad]
backend = ram
size = 16M
on_error = drop
filters = fault
fault.ops = write
fault.probability = 1"
chmod 600 "$CONF"
new_mountpoint
_MNTS+=("$MNT")
sock=$TDIR/notify.sock
journal=$TDIR/journal
msgs=$TDIR/msgs
: >"$journal"

"$BLKFS_TESTBIN/notify_listen" "$sock" "$MNT" d0 >"$msgs" 2>&1 &
lpid=$!
_BGPIDS+=("$lpid")
wait_until 60 "the listener's socket $sock" test -S "$sock"

# The journal's stream is identified by device and inode, as systemd does.
NOTIFY_SOCKET=$sock JOURNAL_STREAM=$(stat -c '%d:%i' "$journal") \
	"$BLKFS" mount -f "$MNT" -c "$CONF" 2>>"$journal" &
dpid=$!
_PID_OF[$MNT]=$dpid
for ((i = 0; i < 600; i++)); do grep -q '^CHECK ready' "$msgs" && break; sleep 0.1; done
grep -q '^CHECK ready' "$msgs" || fail "no READY=1 within 60 s: $(cat "$msgs")"
check=$(grep '^CHECK ready' "$msgs")
info "on READY=1: $check"
case $check in
"CHECK ready mounted=1 read=4096 errno=0") ;;
*) fail "READY=1 came before the mount answered: $check" ;;
esac
grep -q '^MSG [0-9]* STATUS=Serving 2 devices at ' "$msgs" || fail "no STATUS with READY: $(cat "$msgs")"
! grep -q 'STOPPING=1' "$msgs" || fail "STOPPING=1 before the stop"

mkdata "$TDIR/data" $((16 * M))
ddev if="$TDIR/data" of="$MNT/d0" bs=1M conv=notrunc
# a writeback that fails: the fault filter fails every write of "bad"
if dd if="$TDIR/data" of="$MNT/bad" bs=64K count=1 conv=notrunc,fsync status=none 2>/dev/null; then
	fail "fsync of a device whose writes all fail succeeded"
fi

info "blkfs umount (the unit's ExecStop), one SIGTERM during the final writeback"
"$BLKFS" umount "$MNT" >"$TDIR/umount.out" 2>&1 &
upid=$!
for ((i = 0; i < 600; i++)); do grep -q 'STATUS=Writing back: ' "$msgs" && break; sleep 0.1; done
grep -q 'STATUS=Writing back: ' "$msgs" || fail "no STATUS=Writing back within 60 s of blkfs umount: $(cat "$msgs")"
kill -TERM "$dpid" 2>/dev/null || fail "the daemon is gone before its final writeback ended"
wait "$upid" || fail "blkfs umount failed: $(cat "$TDIR/umount.out")"
wait "$dpid" && rc=0 || rc=$?
unset "_PID_OF[$MNT]"
assert_eq "daemon exit status" 0 "$rc"
wait "$lpid" || fail "the listener did not see the end of the final writeback: $(cat "$msgs")"
cmp -n $((16 * M)) "$TDIR/data" "$img" || fail "the image lacks data after the stop"

sed 's/^/    /' "$msgs"
# Order: READY, then STOPPING, then the writeback's STATUS lines, then the end.
awk '/ READY=1$/ { r = NR } / STOPPING=1$/ { s = NR } / STATUS=Writing back: / && !w { w = NR }
	/ STATUS=All data written back$/ { e = NR }
	END { exit !(r && s > r && w > s && e > w) }' "$msgs" ||
	fail "messages out of order (READY, STOPPING, STATUS=Writing back, STATUS=All data written back)"
grep -q ' EXTEND_TIMEOUT_USEC=[1-9][0-9]*$' "$msgs" || fail "no EXTEND_TIMEOUT_USEC during the final writeback"
left=$(awk '/ STATUS=Writing back: [0-9]+ bytes left/ { print $5 }' "$msgs")
first=$(head -n 1 <<<"$left")
[ "${first:-0}" -gt 0 ] || fail "the first STATUS line shows no bytes left to write: $left"
sort -n -r -c <<<"$left" || fail "bytes left grew during the final writeback: $left"

info "the journal stream"
sed 's/^/    /' "$journal"
if grep -nv '^<[0-7]>' "$journal"; then
	fail "lines without a priority prefix on the journal stream (above)"
fi
grep -q '^<6>blkfs: mounted ' "$journal" || fail "no <6> 'mounted' line"
grep -q '^<4>blkfs: .*during the final writeback' "$journal" || fail "no <4> line for the SIGTERM"
grep -q '^<3>blkfs: bad: writeback of .* failed' "$journal" || fail "no <3> line for the failed writeback"
