#!/usr/bin/env bash
# uring_notify.sh: over FUSE over io_uring no ring queue thread sends a
# notification to the kernel (inval_inode, store). Such a notification
# makes the kernel write the file's dirty pages back, or wait for a folio
# a READ holds, through the very queue whose thread sent it: the mount
# hangs for good (an unkillable daemon; aborting the connection frees
# nothing). The requests whose handlers notify run off the queues instead:
# a store to drop_caches, to size, to the powerloss filter's trigger and
# restart, and the commands (resize, snapshot).
#
# 0. Over /dev/fuse: a grow whose new last page is the mapped, dirty old
#    last page keeps its dirty bytes (the store of the new last page used
#    to overwrite them in the kernel's page, which then went back).
# 1. The check (deterministic, safe on any code): every path runs with
#    nothing dirty in the kernel (mapped pages msync'ed, buffered writes
#    fsynced), so no notification can wait even where a queue thread sends
#    it. .sys/.transport counts the notifications sent and those a queue
#    thread tried to send (queue_thread_notifications: refused before the
#    kernel sees them): after each path the first has grown and the second
#    is still 0.
# 2. End to end, run only once 1 has passed: the same paths with dirty
#    pages (8 MiB of a shared mapping, then drop_caches; kernel_cache =
#    writeback with buffered writes, then drop_caches and a snapshot;
#    trigger and restart under dirty mapped pages; a grow with the last page
#    dirty in a mapping, through .sys/DEV/size and `blkfs resize`), each
#    step under a watchdog that aborts the connection and fails the test if
#    it hangs. What the mapping or the page cache held dirty is on the
#    device after the step (read with O_DIRECT), a grow's too.
# Part 0 and 1 try every path before the verdict (each failure is named).
# The kernel's switch (enable_uring) is turned on and put back as found.
# integ-timeout: 600
# integ-serial: flips the kernel's enable_uring, which every mount beside it would see
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_uring
require_helper mmap_hold
require dd cmp

mh=$BLKFS_TESTBIN/mmap_hold
M=$((1 << 20))
WD=180		# a step's bound (a hang, not a verdict on speed)

uring_set Y

# tfield NAME: a line of $MNT/.sys/.transport
tfield() {
	timeout 10 cat "$MNT/.sys/.transport" | awk -v n="$1" '$1 == n { print $2 }'
}

# stat_of DEV NAME: a line of $MNT/.sys/DEV/blkfs_stat
stat_of() {
	timeout 10 cat "$MNT/.sys/$1/blkfs_stat" | awk -v n="$2" '$1 == n { print $2 }'
}

sysw() {
	printf '%s' "$2" >"$1"
}

# counts: N_SENT, N_QUEUE from .sys/.transport
counts() {
	N_SENT=$(tfield notifications)
	N_QUEUE=$(tfield queue_thread_notifications)
	[ -n "$N_SENT" ] && [ -n "$N_QUEUE" ] && return 0
	fail ".sys/.transport counts no notifications: $(timeout 10 cat "$MNT/.sys/.transport" | tr '\n' ' ')"
}

# step WHAT CMD...: CMD under the watchdog; it must succeed, have sent a
# notification, and none from a ring queue thread.
step() {
	local what=$1 s0 q0 r0 rc
	shift
	counts
	s0=$N_SENT
	q0=$N_QUEUE
	r0=$(tfield ring_requests)
	watchdog "$WD" "$MNT" "$what" "$@" && rc=0 || rc=$?
	[ "$rc" -eq 0 ] || fail "$what: exited $rc"
	counts
	[ "$(tfield ring_requests)" -gt "$r0" ] || fail "$what: no request came over the ring"
	if [ "$N_QUEUE" -ne "$q0" ]; then
		# in part 1 every path is tried before the verdict
		BAD+=("$what: $((N_QUEUE - q0)) notification(s) from a ring queue thread (refused)")
		echo "FAIL: ${BAD[-1]}" >&2
		[ "$PART" -eq 1 ] || fail "${BAD[-1]}"
		return 0
	fi
	[ "$N_SENT" -gt "$s0" ] || fail "$what: no notification was sent to the kernel"
	info "  $what: $((N_SENT - s0)) notification(s), none from a ring queue thread"
}
BAD=()
PART=1

# hold FILE OFF LEN SEED clean|dirty: mmap_hold in the background, once
# its pages are stored (it printed "ready"); HOLD_IN / HOLD_OUT talk to it.
hold() {
	local line=''
	rm -f "$TDIR/h.in" "$TDIR/h.out"
	mkfifo "$TDIR/h.in" "$TDIR/h.out"
	"$mh" "$@" <"$TDIR/h.in" >"$TDIR/h.out" &
	HOLD_PID=$!
	_BGPIDS+=("$HOLD_PID")
	exec 7>"$TDIR/h.in" 8<"$TDIR/h.out"
	read -r -t "$WD" line <&8 || true
	[ "$line" = ready ] || fail "mmap_hold $*: not ready (got '$line')"
}

# unhold check|quit: "check" reads the mapping back (the pattern must be
# there), msyncs and unmaps; "quit" just unmaps.
unhold() {
	local line='' rc
	echo "$1" >&7
	if [ "$1" = check ]; then
		read -r -t "$WD" line <&8 || true
		[ "$line" = "done" ] || fail "mmap_hold: the mapping does not hold what was stored"
	fi
	exec 7>&- 8<&-
	watchdog_wait "$WD" "$MNT" "mmap_hold's end" "$HOLD_PID" && rc=0 || rc=$?
	[ "$rc" -eq 0 ] || fail "mmap_hold exited $rc"
}

# on_device DEV OFF LEN SEED: the device holds the pattern there (O_DIRECT)
on_device() {
	cmp <(dd if="$MNT/$1" iflag=direct,skip_bytes,count_bytes skip="$2" count="$3" bs=1M \
		status=none) <("$mh" --pattern "$4" "$2" "$3") ||
		fail "$1: [$2, +$3) does not hold what the mapping stored"
}

DEVS="[device r]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device p]
backend = ram
size = 16M
filters = powerloss

[device z]
backend = ram
size = $((16 * M + 512))
logical_block_size = 512"

# ---------------------------------------------------------------------------
info "0. over /dev/fuse: a grow keeps the dirty bytes of a mapped last page"
start_blkfs "[mount]
transport = dev

$DEVS"
hold "$MNT/z" $((16 * M)) 512 5 dirty
watchdog "$WD" "$MNT" "grow z over /dev/fuse" sysw "$MNT/.sys/z/size" $(((16 * M + 1024) / 512))
if cmp -s <(dd if="$MNT/z" iflag=direct,skip_bytes,count_bytes skip=$((16 * M)) count=512 \
	status=none) <("$mh" --pattern 5 $((16 * M)) 512); then
	unhold check
	info "  the grow kept them"
else
	BAD+=("a grow over /dev/fuse lost the dirty bytes of the mapped old last page")
	echo "FAIL: ${BAD[-1]}" >&2
	unhold quit
fi
stop_blkfs

# ---------------------------------------------------------------------------
info "1. nothing dirty in the kernel: no notification from a ring queue thread"
start_blkfs "[mount]
transport = uring

$DEVS"
hold "$MNT/r" 0 $((8 * M)) 1 clean
step "drop_caches under a clean shared mapping" sysw "$MNT/.sys/r/drop_caches" 1
unhold check
hold "$MNT/p" 0 $((4 * M)) 2 clean
step "powerloss trigger under clean mapped pages" sysw "$MNT/.sys/p/powerloss/trigger" 1
step "powerloss restart under clean mapped pages" sysw "$MNT/.sys/p/powerloss/restart" 1
unhold quit
hold "$MNT/z" $((16 * M)) 512 3 clean
step "grow through .sys/DEV/size, the last page mapped" \
	sysw "$MNT/.sys/z/size" $(((16 * M + 1024) / 512))
unhold check
hold "$MNT/r" $((64 * M - 4096)) 4096 4 clean
step "grow through blkfs resize, the last page mapped" "$BLKFS" resize "$MNT" r 128M
unhold check
assert_eq "r's size" $((128 * M)) "$(stat -c %s "$MNT/r")"
stop_blkfs

start_blkfs "[mount]
transport = uring
kernel_cache = writeback

$DEVS"
mkdata "$TDIR/src" $((8 * M))
ddev if="$TDIR/src" of="$MNT/r" bs=4K conv=notrunc,fsync
step "kernel_cache = writeback: drop_caches" sysw "$MNT/.sys/r/drop_caches" 1
step "kernel_cache = writeback: snapshot" "$BLKFS" snapshot "$MNT" r s1
stop_blkfs

[ "${#BAD[@]}" -eq 0 ] ||
	fail "${#BAD[@]} check(s) failed (above); the dirty runs over the ring are not tried"

# ---------------------------------------------------------------------------
info "2. end to end, dirty pages in the kernel"
PART=2
start_blkfs "[mount]
transport = uring

$DEVS"
hold "$MNT/r" 0 $((8 * M)) 11 dirty
step "drop_caches under 8 MiB of a dirty shared mapping" sysw "$MNT/.sys/r/drop_caches" 1
on_device r 0 $((8 * M)) 11	# the invalidation wrote them back
unhold check

hold "$MNT/p" 0 $((4 * M)) 12 dirty
step "powerloss trigger under dirty mapped pages" sysw "$MNT/.sys/p/powerloss/trigger" 1
step "powerloss restart" sysw "$MNT/.sys/p/powerloss/restart" 1
unhold quit
# the device is readable after the cut (what it holds is the cut's choice)
watchdog "$WD" "$MNT" "reading p after the cut" \
	dd if="$MNT/p" of=/dev/null bs=1M iflag=direct status=none

hold "$MNT/z" $((16 * M)) 512 13 dirty
step "grow through .sys/DEV/size, the last page dirty in a mapping" \
	sysw "$MNT/.sys/z/size" $(((16 * M + 1024) / 512))
on_device z $((16 * M)) 512 13	# written back before the store, not overwritten
unhold check
hold "$MNT/z" $((16 * M)) 1024 14 dirty
step "grow through blkfs resize, the last page dirty in a mapping" \
	"$BLKFS" resize "$MNT" z $((16 * M + 1536))
on_device z $((16 * M)) 1024 14
unhold check
assert_eq "z's size" $((16 * M + 1536)) "$(stat -c %s "$MNT/z")"
hold "$MNT/r" $((64 * M - 4096)) 4096 15 dirty
step "grow through blkfs resize, r's last page dirty in a mapping" "$BLKFS" resize "$MNT" r 128M
unhold check
on_device r $((64 * M - 4096)) 4096 15
stop_blkfs

start_blkfs "[mount]
transport = uring
kernel_cache = writeback

$DEVS"
w0=$(stat_of r user_write_bytes)
ddev if="$TDIR/src" of="$MNT/r" bs=4K conv=notrunc	# dirty in the kernel's page cache
step "kernel_cache = writeback: drop_caches under 8 MiB of buffered writes" \
	sysw "$MNT/.sys/r/drop_caches" 1
w1=$(stat_of r user_write_bytes)
[ $((w1 - w0)) -ge $((8 * M)) ] ||
	fail "drop_caches: $((w1 - w0)) bytes came down from the kernel, not 8 MiB"
cmp -n $((8 * M)) "$TDIR/src" <(dd if="$MNT/r" iflag=direct bs=1M count=8 status=none) ||
	fail "r does not hold the buffered writes after drop_caches"
mkdata "$TDIR/src2" $((4 * M))
ddev if="$TDIR/src2" of="$MNT/r" bs=4K seek=4096 conv=notrunc	# dirty again, at 16M
step "kernel_cache = writeback: snapshot under 4 MiB of buffered writes" \
	"$BLKFS" snapshot "$MNT" r s2
watchdog "$WD" "$MNT" "save s2" "$BLKFS" save "$MNT" r "$TDIR/s2.img" s2 >/dev/null
cmp -n $((4 * M)) "$TDIR/src2" <(dd if="$TDIR/s2.img" bs=1M skip=16 count=4 status=none) ||
	fail "snapshot s2 lacks the buffered writes made before it"
stop_blkfs
