#!/usr/bin/env bash
# memcg.sh: ext4 on `blkfs attach`, with the daemon and a writer in one
# memory cgroup whose limit is a fraction of what gets written. Reclaim in
# that cgroup writes back dirty pages of the loop device, which waits for
# the daemon; if the daemon's own allocations wait for that reclaim, the
# cgroup deadlocks (the reason for PR_SET_IO_FLUSHER and for taking the
# daemon's I/O memory from pools filled at mount).
#  - the daemon (mounted from inside the cgroup, so its cache is charged
#    there too) reports whether every one of its threads is an I/O flusher
#    (PF_MEMALLOC_NOIO in /proc/PID/task/*/stat); where the kernel allows
#    it (CAP_SYS_RESOURCE) all must be, and none with BLKFS_NO_IO_FLUSHER=1;
#  - a writer in the cgroup writes MEMCG_WRITE_MB (default 4x the limit) of
#    files on ext4 with fsync each; it must finish within MEMCG_DEADLINE s
#    (default 150), and the cgroup must really have hit its limit;
#  - fsck.ext4 is clean and every file verifies after a remount.
# A hang is reported with the stacks of the daemon's threads and the
# writer, then undone: the limit is lifted, the FUSE connection aborted,
# the tasks moved out and the cgroup removed, so nothing stays wedged.
# cgroup v1 (a memory hierarchy mounted) or v2 (memory in
# cgroup.controllers). MEMCG_BACKEND (ram or aio), MEMCG_LIMIT_MB (256),
# MEMCG_DEV_MB (160), MEMCG_CACHE (16M), MEMCG_WRITE_MB (4x the limit),
# MEMCG_DEADLINE (150 s).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup mkfs.ext4 fsck.ext4 mount umount sha256sum
[ -e /dev/loop-control ] || skip "no /dev/loop-control"
odirect_dir || skip "no filesystem here takes O_DIRECT (needed for the aio image)"

BACKEND=${MEMCG_BACKEND:-ram}
LIMIT_MB=${MEMCG_LIMIT_MB:-256}
WRITE_MB=${MEMCG_WRITE_MB:-$((4 * LIMIT_MB))}
DEADLINE=${MEMCG_DEADLINE:-150}
CACHE=${MEMCG_CACHE:-16M}
FILE_MB=${MEMCG_FILE_MB:-16}
M=$((1 << 20))

# ---------------------------------------------------------------- cgroup
CGV=
if awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { f = 1 } END { exit !f }' /proc/self/mountinfo; then
	CGV=1
	root=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
	own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3; exit }' /proc/self/cgroup)
elif awk '$9 == "cgroup2" { f = 1 } END { exit !f }' /proc/self/mountinfo; then
	CGV=2
	root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
	own=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
	grep -qw memory "$root$own/cgroup.controllers" 2>/dev/null ||
		grep -qw memory "$root/cgroup.controllers" || skip "cgroup v2 without the memory controller"
else
	skip "no memory cgroup controller mounted"
fi
parent=$root${own%/}
[ "$own" != / ] || parent=$root
CG=$parent/blkfs-memcg.$$
if [ "$CGV" = 2 ]; then
	# a v2 cgroup with processes cannot have children: use the root's
	# subtree (the memory controller must be enabled for it)
	parent=$root
	CG=$root/blkfs-memcg.$$
	grep -qw memory "$root/cgroup.subtree_control" ||
		echo +memory >"$root/cgroup.subtree_control" || skip "cannot enable the v2 memory controller"
fi
orig_cg=$root${own%/}
[ "$own" != / ] || orig_cg=$root
mkdir "$CG" || skip "cannot create a memory cgroup under $parent"
if [ "$CGV" = 1 ]; then
	echo $((LIMIT_MB * M)) >"$CG/memory.limit_in_bytes"
	[ ! -e "$CG/memory.memsw.limit_in_bytes" ] ||
		echo $((LIMIT_MB * M)) >"$CG/memory.memsw.limit_in_bytes" 2>/dev/null || true
else
	echo $((LIMIT_MB * M)) >"$CG/memory.max"
	[ ! -e "$CG/memory.swap.max" ] || echo 0 >"$CG/memory.swap.max"
fi
info "memory cgroup v$CGV $CG, limit $LIMIT_MB MiB; writing $WRITE_MB MiB"

# Undo a hang before lib.sh's cleanup runs: lift the limit, abort the FUSE
# connection, move every task out, remove the cgroup.
cg_release() {
	local p
	[ -d "$CG" ] || return 0
	if [ "$CGV" = 1 ]; then
		echo -1 >"$CG/memory.limit_in_bytes" 2>/dev/null || true
	else
		echo max >"$CG/memory.max" 2>/dev/null || true
	fi
	[ -z "${MNT:-}" ] || abort_fuse "$MNT"
	for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do
		echo "$p" >"$orig_cg/cgroup.procs" 2>/dev/null || true
	done
	rmdir "$CG" 2>/dev/null || echo "memcg.sh: could not remove $CG" >&2
}
trap '_rc=$?; set +e; cg_release; (exit $_rc); _cleanup' EXIT

# cg_run CMD...: run CMD in the cgroup (a subshell that moves itself first).
cg_run() {
	(echo "$BASHPID" >"$CG/cgroup.procs" && exec "$@")
}

# io_flusher_threads PID: "N of M" threads with PF_MEMALLOC_NOIO (0x80000).
io_flusher_threads() {
	local t n=0 all=0 flags
	for t in /proc/"$1"/task/*; do
		flags=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $7 }') || continue
		[ -n "$flags" ] || continue
		all=$((all + 1))
		((flags & 0x80000)) && n=$((n + 1))
	done
	echo "$n of $all"
}

# cg_peak: the most the cgroup has used, in bytes.
cg_peak() {
	if [ "$CGV" = 1 ]; then
		cat "$CG/memory.max_usage_in_bytes"
	else
		cat "$CG/memory.peak"
	fi
}

dump_hang() {
	local t
	echo "--- hang: memory cgroup" >&2
	grep -E '^(total_)?(cache|rss|dirty|writeback|file|anon|file_dirty|file_writeback) ' \
		"$CG/memory.stat" >&2 || true
	for t in /proc/"$DAEMON_PID"/task/* $(for p in $(cat "$CG/cgroup.procs"); do echo /proc/"$p"/task/*; done); do
		echo "--- $t ($(cat "$t/comm" 2>/dev/null)) state $(awk '/^State/ { print $2 }' "$t/status" 2>/dev/null)" >&2
		cat "$t/stack" >&2 2>/dev/null || true
	done
}

# ---------------------------------------------------------------- the mount
# ram (the default): the arena maps memory on first write, in the I/O path,
# while the cgroup is full of the filesystem's dirty pages (the harder
# case); aio: all the daemon's I/O memory is taken at mount.
DEV_MB=${MEMCG_DEV_MB:-160}
if [ "$BACKEND" = ram ]; then
	dev="backend = ram"
else
	dev="backend = aio
path = $ODIRECT_DIR/memcg.img
create = yes"
fi
write_conf "[cache]
size = $CACHE

[device d]
$dev
size = ${DEV_MB}M"
chmod 600 "$CONF"
# mount from inside the cgroup: the daemon (and the cache it touches at
# mount) is charged there; this shell goes back out at once
echo "$$" >"$CG/cgroup.procs"
start_blkfs "$CONF"
echo "$$" >"$orig_cg/cgroup.procs"
grep -q "blkfs-memcg.$$" "/proc/$DAEMON_PID/cgroup" || fail "the daemon is not in $CG"
flushers=$(io_flusher_threads "$DAEMON_PID")
info "daemon $DAEMON_PID ($BACKEND, $DEV_MB MiB, cache $CACHE): I/O flusher threads: $flushers"
if [ "${BLKFS_NO_IO_FLUSHER:-}" = 1 ]; then
	[ "${flushers%% *}" = 0 ] || fail "BLKFS_NO_IO_FLUSHER=1, yet $flushers threads are I/O flushers"
elif ! (($(awk '/^CapEff:/ { print "0x" $2 }' "/proc/$DAEMON_PID/status") & (1 << 24))); then
	info "(this machine withholds CAP_SYS_RESOURCE: the daemon runs without PR_SET_IO_FLUSHER)"
else
	[ "${flushers%% of *}" = "${flushers##* of }" ] || fail "only $flushers daemon threads are I/O flushers"
fi

loop=$("$BLKFS" attach "$MNT" d 2>/dev/null) || fail "blkfs attach failed"
_LOOPS+=("$loop")
_LOOP_FILE[$loop]=$MNT/d
mkfs.ext4 -q -F "$loop" || fail "mkfs.ext4 failed"
fs=$TDIR/fs
mount_top "$loop" "$fs" -o discard

# ---------------------------------------------------------------- the writer
# Files of FILE_MB, each written with fsync; the oldest goes once KEEP are
# there, so the filesystem never fills and the device is written over.
src=$TDIR/src
mkdata "$src" $((2 * FILE_MB * M))
nfiles=$((WRITE_MB / FILE_MB))
keep=$(((DEV_MB / 2) / FILE_MB))
[ "$keep" -ge 1 ] || keep=1
cat >"$TDIR/writer.sh" <<WRITER
set -e
for ((i = 0; i < $nfiles; i++)); do
	dd if="$src" of="$fs/f\$i" bs=1M skip=\$((i % $FILE_MB)) count=$FILE_MB conv=fsync status=none
	[ \$i -lt $keep ] || rm "$fs/f\$((i - $keep))"
done
echo done >"$TDIR/writer.done"
WRITER
: >"$TDIR/SUMS"
for ((i = nfiles - keep; i < nfiles; i++)); do
	[ "$i" -ge 0 ] || continue
	sum=$(dd if="$src" bs=1M skip=$((i % FILE_MB)) count=$FILE_MB status=none | sha256sum | cut -d' ' -f1)
	echo "$sum  ./f$i" >>"$TDIR/SUMS"
done
start=$(date +%s)
cg_run bash "$TDIR/writer.sh" &
wpid=$!
_BGPIDS+=("$wpid")
while [ ! -e "$TDIR/writer.done" ] && pid_alive "$wpid"; do
	if [ $(($(date +%s) - start)) -ge "$DEADLINE" ]; then
		dump_hang
		fail "HANG: the writer has not written $WRITE_MB MiB in $DEADLINE s"
	fi
	sleep 1
done
wait "$wpid" || fail "the writer failed"
took=$(($(date +%s) - start))
peak=$(cg_peak)
info "wrote $WRITE_MB MiB through a $LIMIT_MB MiB cgroup in $took s; peak use $((peak / M)) MiB"
[ "$peak" -ge $(((LIMIT_MB - 2) * M)) ] || fail "the cgroup never came near its limit: no pressure was tested"
pid_alive "$DAEMON_PID" || fail "the daemon died (OOM?)"

umount "$fs"
out=$(fsck.ext4 -fn "$loop" 2>&1) || fail "fsck.ext4 found errors: $out"
mount_top "$loop" "$fs" -o discard
cp "$TDIR/SUMS" "$fs/SUMS"
(cd "$fs" && sha256sum --quiet -c SUMS) || fail "files differ after the remount"
umount "$fs"
"$BLKFS" detach "$loop" 2>/dev/null || fail "detach failed"
stop_blkfs "$MNT"
