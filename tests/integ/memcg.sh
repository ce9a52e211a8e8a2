#!/usr/bin/env bash
# memcg.sh: ext4 on `blkfs attach`, with the daemon and a writer in one
# memory cgroup whose limit is a fraction of what gets written. Reclaim in
# that cgroup waits for the writeback of the filesystem's pages, which goes
# through the loop device to the daemon; if the daemon then needs memory
# while it holds such a request (a page fault on fresh memory, a new
# buffer), its reclaim waits for writeback that only it can finish, and the
# cgroup deadlocks. The defences: PR_SET_IO_FLUSHER (needs
# CAP_SYS_RESOURCE) and I/O memory taken from pools filled before use.
#
# Per case (MEMCG_CASES, default "aio:96:16 ram:256:16": backend, limit in
# MiB, file size in MiB):
#  - the daemon is mounted from inside the cgroup (its cache is charged
#    there too); where the kernel allows PR_SET_IO_FLUSHER every one of its
#    threads must have PF_MEMALLOC_NOIO (/proc/PID/task/*/stat), and none
#    with BLKFS_NO_IO_FLUSHER=1;
#  - a writer in the cgroup writes MEMCG_WRITE_MB (default 4x the limit) of
#    files on ext4, fsync after each, deleting old ones (the device is
#    written over); it must finish within MEMCG_DEADLINE s (default 120)
#    and the cgroup must have reached its limit;
#  - fsck.ext4 -fn is clean and the files left verify after a remount.
# A hang is reported with the kernel stacks of the daemon's threads and the
# writer (and, for a thread stopped in a page fault, where in user space),
# then undone: the limit is lifted, the FUSE connection aborted, the tasks
# moved out and the cgroup removed. A watchdog does the same if any step of
# the test itself blocks (MEMCG_WATCHDOG s after the mount, default 200),
# so a hang cannot wedge the machine.
# Seen hanging here (no CAP_SYS_RESOURCE, so never an I/O flusher):
# MEMCG_CASES=aio:64:64 (or 48) and ram:180:64 with MEMCG_WRITE_MB=512.
# Takes about 20 s. cgroup v1 (a memory hierarchy) or v2.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require losetup mkfs.ext4 fsck.ext4 mount umount sha256sum timeout
[ -e /dev/loop-control ] || skip "no /dev/loop-control"
odirect_dir || skip "no filesystem here takes O_DIRECT (needed for the aio image)"

CASES=${MEMCG_CASES:-aio:96:16 ram:256:16}
DEADLINE=${MEMCG_DEADLINE:-120}
WATCHDOG=${MEMCG_WATCHDOG:-200}
CACHE=${MEMCG_CACHE:-16M}
DEV_MB=${MEMCG_DEV_MB:-160}
M=$((1 << 20))

# ---------------------------------------------------------------- cgroup
if awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { f = 1 } END { exit !f }' /proc/self/mountinfo; then
	CGV=1
	root=$(awk '$9 == "cgroup" && $NF ~ /(^|,)memory(,|$)/ { print $5; exit }' /proc/self/mountinfo)
	own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ { print $3; exit }' /proc/self/cgroup)
	orig_cg=$root${own%/}
	parent=$orig_cg
elif awk '$9 == "cgroup2" { f = 1 } END { exit !f }' /proc/self/mountinfo; then
	CGV=2
	root=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
	own=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
	orig_cg=$root${own%/}
	# a v2 cgroup with processes may not have children with controllers:
	# the test's cgroups go under the root, with memory enabled there
	parent=$root
	grep -qw memory "$root/cgroup.controllers" || skip "cgroup v2 without the memory controller"
	grep -qw memory "$root/cgroup.subtree_control" ||
		echo +memory >"$root/cgroup.subtree_control" || skip "cannot enable the v2 memory controller"
else
	skip "no memory cgroup controller mounted"
fi
CG=

# cg_unlimit: lift the limit (v1: the memory+swap limit first, which must
# never be below the memory limit).
cg_unlimit() {
	if [ "$CGV" = 1 ]; then
		[ ! -e "$CG/memory.memsw.limit_in_bytes" ] || echo -1 >"$CG/memory.memsw.limit_in_bytes" 2>/dev/null
		echo -1 >"$CG/memory.limit_in_bytes" 2>/dev/null
	else
		echo max >"$CG/memory.max" 2>/dev/null
	fi
	return 0
}

# cg_release: undo a hang, then remove the cgroup: lift the limit (new
# charges succeed), abort the FUSE connection (requests waited for fail, so
# writeback ends and whoever waits for it wakes), move the tasks out.
cg_release() {
	local p
	[ -n "$CG" ] && [ -d "$CG" ] || return 0
	cg_unlimit
	[ -z "${MNT:-}" ] || ! is_mounted "$MNT" || abort_fuse "$MNT"
	for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do
		echo "$p" >"$orig_cg/cgroup.procs" 2>/dev/null || true
	done
	rmdir "$CG" 2>/dev/null || echo "memcg.sh: could not remove $CG" >&2
	CG=
}
trap '_rc=$?; set +e; cg_release; (exit $_rc); _cleanup' EXIT

# cg_run CMD...: run CMD in the cgroup (a subshell that moves itself first).
cg_run() {
	(echo "$BASHPID" >"$CG/cgroup.procs" && exec "$@")
}

cg_peak() {
	if [ "$CGV" = 1 ]; then cat "$CG/memory.max_usage_in_bytes"; else cat "$CG/memory.peak"; fi
}

# io_flusher_threads PID: "N of M" threads with PF_MEMALLOC_NOIO (0x80000).
io_flusher_threads() {
	local t n=0 all=0 flags
	for t in /proc/"$1"/task/*; do
		flags=$(sed 's/.*) //' "$t/stat" 2>/dev/null | awk '{ print $7 }') || continue
		[ -n "$flags" ] || continue
		all=$((all + 1))
		if ((flags & 0x80000)); then n=$((n + 1)); fi
	done
	echo "$n of $all"
}

# user_pc TASKDIR: where in user space a task outside a system call (in a
# page fault) stopped. /proc/PID/maps needs the mmap lock, which a hung
# fault may hold: read with a timeout.
user_pc() {
	local pc range perms off dev inode file lo hi maps
	# (a task that ended meanwhile has no syscall file: not an error, under set -e)
	pc=$(awk '$1 == "-1" { print $3 }' "$1/syscall" 2>/dev/null) || return 0
	[ -n "$pc" ] || return 0
	pc=$((pc))
	maps=$(timeout -s KILL 3 cat "${1%/task/*}/maps" 2>/dev/null) ||
		{ printf '    user pc 0x%x (maps unreadable: the mmap lock is held)\n' "$pc"; return 0; }
	while read -r range perms off dev inode file; do
		[ -n "$off" ] || continue
		lo=$((16#${range%-*}))
		hi=$((16#${range#*-}))
		[ "$pc" -ge "$lo" ] && [ "$pc" -lt "$hi" ] || continue
		if [ -z "$file" ]; then
			printf '    user pc 0x%x (anonymous memory)\n' "$pc"
		else
			off=$(printf '0x%x' $((pc - lo + 16#$off)))
			echo "    user pc: $file+$off $(addr2line -f -C -e "$file" "$off" 2>/dev/null | tr '\n' ' ')"
		fi
		return 0
	done <<<"$maps"
}

dump_hang() {
	local t
	echo "--- hang: memory cgroup" >&2
	grep -E '^(total_)?(cache|rss|dirty|writeback|file|anon|file_dirty|file_writeback) ' \
		"$CG/memory.stat" >&2 || true
	for t in /proc/"$DAEMON_PID"/task/* $(for p in $(cat "$CG/cgroup.procs"); do
		[ "$p" = "$DAEMON_PID" ] || echo /proc/"$p"/task/*; done); do
		echo "--- $t ($(cat "$t/comm" 2>/dev/null)) state $(awk '/^State/ { print $2 }' "$t/status" 2>/dev/null)" >&2
		cat "$t/stack" >&2 2>/dev/null || true
		user_pc "$t" >&2
	done
}

# ---------------------------------------------------------------- one case
# run_case BACKEND LIMIT_MB FILE_MB
run_case() {
	local backend=$1 limit_mb=$2 file_mb=$3 write_mb dev flushers n all loop fs src nfiles keep
	local i sum start wpid took peak wd out
	write_mb=${MEMCG_WRITE_MB:-$((4 * limit_mb))}
	CG=$parent/blkfs-memcg.$$.$backend
	mkdir "$CG" || skip "cannot create a memory cgroup under $parent"
	if [ "$CGV" = 1 ]; then
		echo $((limit_mb * M)) >"$CG/memory.limit_in_bytes"
		[ ! -e "$CG/memory.memsw.limit_in_bytes" ] || echo $((limit_mb * M)) >"$CG/memory.memsw.limit_in_bytes"
	else
		echo $((limit_mb * M)) >"$CG/memory.max"
		[ ! -e "$CG/memory.swap.max" ] || echo 0 >"$CG/memory.swap.max"
	fi
	info "=== $backend: memory cgroup v$CGV, limit $limit_mb MiB; writing $write_mb MiB in files of $file_mb MiB"

	# ram: the arena takes memory on first write, in the I/O path (its
	# reserve is filled ahead); aio: no memory grows with the data.
	if [ "$backend" = ram ]; then
		dev="backend = ram"
	else
		rm -f "$ODIRECT_DIR/memcg.img"
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
	# mounted from inside the cgroup, so the daemon and the cache it
	# touches at mount are charged there; this shell goes back out at once
	echo "$$" >"$CG/cgroup.procs"
	start_blkfs "$CONF"
	echo "$$" >"$orig_cg/cgroup.procs"
	grep -q "blkfs-memcg.$$.$backend" "/proc/$DAEMON_PID/cgroup" || fail "the daemon is not in $CG"
	# If any step below blocks on a hung mount, the watchdog undoes the
	# hang; the step then fails and the test with it.
	# (its output goes to a file: a sleeper holding the test's stdout
	# would keep the runner waiting)
	rm -f "$TDIR/watchdog.stop"
	# (it polls its stop file every 0.1 s: the test's end waits for it)
	(
		for ((i = 0; i < WATCHDOG * 10; i++)); do
			[ ! -e "$TDIR/watchdog.stop" ] || exit 0
			sleep 0.1
		done
		echo "memcg.sh: watchdog: $WATCHDOG s since the mount; lifting the limit, aborting FUSE"
		touch "$TDIR/watchdog.fired"
		cg_unlimit
		abort_fuse "$MNT"
	) >>"$TDIR/watchdog.log" 2>&1 &
	wd=$!
	_BGPIDS+=("$wd")

	flushers=$(io_flusher_threads "$DAEMON_PID")
	info "$backend: daemon $DAEMON_PID, I/O flusher threads: $flushers"
	n=${flushers%% of *}
	all=${flushers##* of }
	if [ "${BLKFS_NO_IO_FLUSHER:-}" = 1 ]; then
		[ "$n" = 0 ] || fail "BLKFS_NO_IO_FLUSHER=1, yet $flushers threads are I/O flushers"
	elif ! (($(awk '/^CapEff:/ { print "0x" $2 }' "/proc/$DAEMON_PID/status") & (1 << 24))); then
		info "$backend: (no CAP_SYS_RESOURCE here: the daemon runs without PR_SET_IO_FLUSHER)"
	else
		[ "$n" = "$all" ] || fail "only $flushers daemon threads are I/O flushers"
	fi

	loop=$("$BLKFS" attach "$MNT" d 2>/dev/null) || fail "blkfs attach failed"
	_LOOPS+=("$loop")
	_LOOP_FILE[$loop]=$MNT/d
	mkfs.ext4 -q -F "$loop" || fail "mkfs.ext4 failed"
	fs=$TDIR/fs.$backend
	# discard: deleted files' blocks are discarded, so a ram arena frees
	# and takes memory again all along
	mount_top "$loop" "$fs" -o discard

	# Files of FILE_MB, fsync after each; the oldest goes once KEEP are
	# there, so the filesystem never fills and the device is written over.
	src=$TDIR/src.$file_mb
	[ -e "$src" ] || mkdata "$src" $((2 * file_mb * M))
	nfiles=$((write_mb / file_mb))
	keep=$(((DEV_MB / 2) / file_mb))
	[ "$keep" -ge 1 ] || keep=1
	cat >"$TDIR/writer.sh" <<WRITER
set -e
for ((i = 0; i < $nfiles; i++)); do
	dd if="$src" of="$fs/f\$i" bs=1M skip=\$((i % $file_mb)) count=$file_mb conv=fsync status=none
	[ \$i -lt $keep ] || rm "$fs/f\$((i - $keep))"
done
echo done >"$TDIR/writer.done"
WRITER
	rm -f "$TDIR/writer.done"
	: >"$TDIR/SUMS"
	for ((i = nfiles - keep; i < nfiles; i++)); do
		[ "$i" -ge 0 ] || continue
		sum=$(dd if="$src" bs=1M skip=$((i % file_mb)) count="$file_mb" status=none | sha256sum | cut -d' ' -f1)
		echo "$sum  ./f$i" >>"$TDIR/SUMS"
	done
	start=$(date +%s)
	cg_run bash "$TDIR/writer.sh" &
	wpid=$!
	_BGPIDS+=("$wpid")
	while [ ! -e "$TDIR/writer.done" ] && pid_alive "$wpid"; do
		if [ $(($(date +%s) - start)) -ge "$DEADLINE" ]; then
			dump_hang
			[ ! -e "$TDIR/watchdog.fired" ] || cat "$TDIR/watchdog.log" >&2
			fail "HANG ($backend): the writer has not written $write_mb MiB in $DEADLINE s"
		fi
		sleep 0.1
	done
	wait "$wpid" || fail "$backend: the writer failed"
	took=$(($(date +%s) - start))
	peak=$(cg_peak)
	info "$backend: wrote $write_mb MiB through a $limit_mb MiB cgroup in $took s; peak use $((peak / M)) MiB"
	[ "$peak" -ge $(((limit_mb - 2) * M)) ] ||
		fail "$backend: the cgroup never came near its limit: no pressure was tested"
	pid_alive "$DAEMON_PID" || fail "$backend: the daemon died (OOM?)"

	umount "$fs"
	out=$(fsck.ext4 -fn "$loop" 2>&1) || fail "$backend: fsck.ext4 found errors: $out"
	mount_top "$loop" "$fs"
	cp "$TDIR/SUMS" "$fs/SUMS"
	(cd "$fs" && sha256sum --quiet -c SUMS) || fail "$backend: files differ after the remount"
	umount "$fs"
	out=$("$BLKFS" detach "$loop" 2>&1) || fail "$backend: detach failed: $out"
	stop_blkfs "$MNT"
	touch "$TDIR/watchdog.stop"
	wait "$wd" 2>/dev/null || true
	[ ! -e "$TDIR/watchdog.fired" ] || fail "$backend: the watchdog fired: $(cat "$TDIR/watchdog.log")"
	cg_release
}

for c in $CASES; do
	IFS=: read -r b l f <<<"$c"
	run_case "$b" "$l" "$f"
done
