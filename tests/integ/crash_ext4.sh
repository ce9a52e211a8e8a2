#!/usr/bin/env bash
# crash_ext4.sh: crash consistency end to end, with the powerloss filter.
#
# A filesystem (ext4 here; XFS when run as crash_xfs.sh, i.e. with
# BLKFS_CRASH_FS=xfs) on a loop device over a blkfs ram device with
# `filters = powerloss`. Each iteration:
#  1. mkfs, mount, and run a workload in the background: files created,
#     appended to, fsynced, renamed into place with the directory fsynced
#     (each one's name and sha256 recorded once that is done); an append-only
#     log fsynced after each append (its durable length recorded); a state
#     file replaced atomically (write, fsync, rename, fsync the directory;
#     every version recorded before its rename, the durable one after);
#     files written with O_DIRECT and never fsynced (unflushed at the cut);
#  2. at a random moment, once the filter holds unflushed writes (if none
#     come within 2 s, the workload pauses between two steps while the
#     scribbler writes on): snapshot the records, set the iteration's seed
#     and cut the power (echo 1 > .sys/DEV/powerloss/trigger);
#  3. stop the workload, unmount the filesystem (umount -l if it will not
#     go), detach the loop device (their writes now go nowhere), restart;
#  4. a new loop device; ext4: `fsck.ext4 -fy` (journal replay) and then
#     `fsck.ext4 -fn` must be clean; XFS: mount (log recovery), then
#     `xfs_repair -n` must be clean;
#  5. mount again: every file recorded before the cut is there with its
#     checksum, the log holds at least its durable length with the right
#     bytes, the state file is its durable version or a later one.
#
# Env: BLKFS_CRASH_ITERS (default 5; the long suite uses 50), BLKFS_CRASH_SEEDS
# ("S1 S2 ...": exactly these seeds), BLKFS_CRASH_SEED (the first seed; the
# others follow it; default from the clock). The seeds are printed first, and
# each cut's seed is in the daemon log: rerun one with BLKFS_CRASH_SEEDS=S.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

FS=${BLKFS_CRASH_FS:-ext4}
require_root
require_fuse
require_blkfs
require losetup mount umount sha256sum awk head timeout sync
[ -e /dev/loop-control ] || skip "no /dev/loop-control"
case $FS in
ext4)
	require mkfs.ext4 fsck.ext4
	size=256M
	;;
xfs)
	{ command -v mkfs.xfs >/dev/null 2>&1 && command -v xfs_repair >/dev/null 2>&1; } ||
		skip "mkfs.xfs / xfs_repair not found (tools/install-deps installs xfsprogs)"
	grep -qw xfs /proc/filesystems || modprobe xfs 2>/dev/null || true
	grep -qw xfs /proc/filesystems || skip "the kernel has no XFS"
	size=512M	# mkfs.xfs wants at least 300 MB
	;;
*) fail "BLKFS_CRASH_FS=$FS: ext4 or xfs" ;;
esac

seed_list "${BLKFS_CRASH_ITERS:-5}" "${BLKFS_CRASH_SEEDS:-}" "${BLKFS_CRASH_SEED:-}"
seeds=("${SEEDS[@]}")
info "$FS: ${#seeds[@]} power cuts, seeds: ${seeds[*]}"

# blkfs's own cache writes back at once (dirty_expire 100ms, a low background
# level), so the filesystem's writes reach the powerloss filter between
# flushes too, not only at fsync: a cut finds unflushed writes to decide.
start_blkfs "[cache]
size = 64M
dirty_background = 64K
dirty_expire = 100ms

[device r0]
backend = ram
size = $size
logical_block_size = 512
physical_block_size = 4096
filters = powerloss"
dev=$MNT/r0
pl=$MNT/.sys/r0/powerloss
[ -d "$pl" ] || fail "no $pl"
assert_eq "powerloss state" running "$(cat "$pl/state")"
fs=$TDIR/fs
W=$TDIR/work		# the workload's records, outside the crashing filesystem
mkdir -p "$W"

# workload DIR: runs until $W/stop exists. Records (one line each, appended
# only once the data is durable):
#   file NAME SHA256	a file fsynced, renamed into place, directory fsynced
#   log LEN		DIR/w/log holds at least LEN durable bytes ($W/log.copy)
#   state N SHA256	DIR/w/state is version N, durably
# and $W/versions: "N SHA256" of every state version, before its rename.
workload() {
	local d=$1/w i=0 n sum len
	mkdir -p "$d"
	sync "$d" "$1"
	: >"$d/log"
	sync "$d/log" "$d"
	while [ ! -e "$W/stop" ]; do
		# paused by the cut (see below): the scribbler alone writes on
		if [ -e "$W/pause" ]; then
			touch "$W/paused"
			while [ -e "$W/pause" ] && [ ! -e "$W/stop" ]; do
				sleep 0.02
			done
		fi
		i=$((i + 1))
		case $((i % 4)) in
		0 | 1)
			# create, append, fsync, rename into place, fsync the directory
			n=$((RANDOM % 96 * 1024 + RANDOM % 4096 + 1))
			head -c "$n" /dev/urandom >"$d/tmp.$i"
			head -c $((RANDOM % 8192 + 1)) /dev/urandom >>"$d/tmp.$i"
			sync "$d/tmp.$i"
			sum=$(sha256sum <"$d/tmp.$i" | cut -d' ' -f1)
			mv "$d/tmp.$i" "$d/f.$i"
			sync "$d"
			echo "file f.$i $sum" >>"$W/records"
			;;
		2)
			# an append-only log, fsynced after each append
			head -c $((RANDOM % 3000 + 1)) /dev/urandom >"$W/chunk"
			cat "$W/chunk" >>"$d/log"
			cat "$W/chunk" >>"$W/log.copy"
			sync "$d/log"
			len=$(stat -c %s "$W/log.copy")
			echo "log $len" >>"$W/records"
			;;
		3)
			# atomic replace; and a file never fsynced, renamed around
			{ echo "version $i"; head -c $((RANDOM % 20000)) /dev/urandom; } >"$d/state.new"
			sync "$d/state.new"
			sum=$(sha256sum <"$d/state.new" | cut -d' ' -f1)
			echo "$i $sum" >>"$W/versions"
			mv "$d/state.new" "$d/state"
			sync "$d"
			echo "state $i $sum" >>"$W/records"
			head -c $((RANDOM % 65536 + 1)) /dev/urandom >"$d/u.$i"
			[ $((i % 8)) -ne 3 ] || mv "$d/u.$i" "$d/v.$i"
			# O_DIRECT, never fsynced: reaches the device at once, unflushed
			dd if=/dev/urandom of="$d/d.$((i % 16))" bs=64K count=$((RANDOM % 8 + 1)) \
				oflag=direct conv=notrunc status=none 2>/dev/null || true
			;;
		esac
	done
}

# scribbler DIR: O_DIRECT writes, never fsynced, in bursts, until $W/stop:
# they reach the device between the workload's flushes.
scribbler() {
	local d=$1/w j=0
	while [ ! -e "$W/stop" ]; do
		j=$((j + 1))
		dd if=/dev/urandom of="$d/scribble.$((j % 4))" bs=64K count=$((j % 16 + 1)) \
			oflag=direct conv=notrunc status=none 2>/dev/null || true
		sleep 0.0$((j % 5))
	done
}

# loop_gone LOOP: wait until the loop device is detached from our device
# (autoclear after a lazy unmount happens when the last user lets go). A test
# running beside this one may attach the freed number to its own file at
# once: that counts as gone too.
loop_gone() {
	local i f
	for ((i = 0; i < 300; i++)); do
		f=$(losetup -n -O BACK-FILE "$1" 2>/dev/null | sed 's/ *$//') || return 0
		[ "$f" = "${_LOOP_FILE[$1]}" ] || return 0
		sleep 0.1
	done
	return 1
}

# check_fs LOOP: the repair tools call the filesystem clean after recovery.
check_fs() {
	local loop=$1 rc out
	case $FS in
	ext4)
		out=$(timeout -k 5 120 fsck.ext4 -fy "$loop" 2>&1) && rc=0 || rc=$?
		[ "$rc" -le 1 ] || { printf '%s\n' "$out" >&2; fail "fsck.ext4 -fy exited $rc"; }
		# what -fy changed beyond replaying the journal, for the record
		# (summary counters are not journaled: "Free blocks count wrong" is normal)
		printf '%s\n' "$out" | grep -vE '^(e2fsck|Pass [0-9]|/dev/loop|recovering journal|Clearing orphaned|Setting free|Free (blocks|inodes) count wrong|Fix\? yes|$)' |
			sed 's/^/#   fsck -fy: /' | head -n 20 || true
		out=$(timeout -k 5 120 fsck.ext4 -fn "$loop" 2>&1) && rc=0 || rc=$?
		[ "$rc" -eq 0 ] || { printf '%s\n' "$out" >&2; fail "fsck.ext4 -fn after -fy exited $rc: not clean"; }
		;;
	xfs)
		# the log is replayed by mounting; xfs_repair -n then must find nothing
		mount_top "$loop" "$fs"
		timeout -k 5 60 umount "$fs" || fail "umount $fs after log recovery failed"
		out=$(timeout -k 5 120 xfs_repair -n "$loop" 2>&1) && rc=0 || rc=$?
		[ "$rc" -eq 0 ] || { printf '%s\n' "$out" >&2; fail "xfs_repair -n exited $rc: not clean"; }
		;;
	esac
}

# verify DIR SNAPSHOT: what the records promised is there.
verify() {
	local d=$1/w snap=$2 kind name sum nfiles=0 loglen=0 state=-1 got n
	while read -r kind name sum; do
		case $kind in
		file)
			# a line the snapshot caught half-written has a short sum: skip it
			[ "${#sum}" -eq 64 ] || continue
			[ -f "$d/$name" ] || fail "seed $seed: fsynced file $name is missing"
			got=$(sha256sum <"$d/$name" | cut -d' ' -f1)
			[ "$got" = "$sum" ] || fail "seed $seed: fsynced file $name differs ($got, want $sum)"
			nfiles=$((nfiles + 1))
			;;
		log)
			[[ $name =~ ^[0-9]+$ ]] && [ "$name" -gt "$loglen" ] && loglen=$name
			;;
		state)
			[ "${#sum}" -eq 64 ] && [[ $name =~ ^[0-9]+$ ]] && state=$name
			;;
		esac
	done <"$snap"
	if [ "$loglen" -gt 0 ]; then
		n=$(stat -c %s "$d/log")
		[ "$n" -ge "$loglen" ] || fail "seed $seed: log has $n bytes, $loglen were fsynced"
		cmp -n "$loglen" "$d/log" "$W/log.copy" ||
			fail "seed $seed: the log's first $loglen (fsynced) bytes differ"
	fi
	if [ "$state" -ge 0 ]; then
		[ -f "$d/state" ] || fail "seed $seed: state file missing (version $state was durable)"
		got=$(sha256sum <"$d/state" | cut -d' ' -f1)
		awk -v v="$state" -v s="$got" '$1 >= v && $2 == s { f = 1 } END { exit !f }' \
			"$W/versions" || fail "seed $seed: state is not version $state or a later one"
	fi
	info "seed $seed: verified $nfiles fsynced files, $loglen log bytes, state version $state"
	verified=$((verified + nfiles))
}

# wait_unflushed N: poll N times, 10 ms apart, until the filter holds
# unflushed writes; false if it never did. (`read`, a builtin: no fork
# between seeing them and the cut.)
wait_unflushed() {
	local k v
	for ((k = 0; k < $1; k++)); do
		read -r v <"$pl/unflushed_bytes" || v=0
		[ "$v" = 0 ] || return 0
		sleep 0.01
	done
	return 1
}

verified=0
cut_writes=0
iter=0
for seed in "${seeds[@]}"; do
	iter=$((iter + 1))
	RANDOM=$seed
	rm -rf "${W:?}"/*
	: >"$W/records"
	: >"$W/versions"
	: >"$W/log.copy"

	assert_live "$MNT"
	attach_loop "$dev"
	loop=$LOOP
	case $FS in
	ext4) mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$loop" ;;
	xfs) mkfs.xfs -q -f -K "$loop" ;;
	esac || fail "mkfs.$FS on $loop failed"
	mount_top "$loop" "$fs"

	workload "$fs" &
	wpid=$!
	scribbler "$fs" &
	spid=$!
	_BGPIDS+=("$wpid" "$spid")
	# 0.5 to 2.5 s of work
	sleep "$((RANDOM % 2)).$((RANDOM % 10))"
	sleep 0.5
	pid_alive "$wpid" || fail "the workload died before the cut"

	echo "$seed" >"$pl/seed"
	# cut at a moment with unflushed writes, if one comes within 2 s; XFS
	# forces its log (a flush) so often that the window may never come while
	# the workload runs: then pause the workload between two of its steps
	# and let the scribbler's writes wait for a flush that does not come
	# (records only grow: a snapshot taken before the cut lists only what
	# was durable before it; taking it first keeps the cut right after the
	# poll that saw the unflushed writes, before a flush can take them)
	paused=
	cp "$W/records" "$W/records.snap"
	if ! wait_unflushed 200; then
		touch "$W/pause"
		for ((k = 0; k < 500; k++)); do
			[ ! -e "$W/paused" ] || break
			sleep 0.01
		done
		cp "$W/records" "$W/records.snap"
		wait_unflushed 300 && paused=" (workload paused)"
	fi
	echo 1 >"$pl/trigger" || fail "trigger failed"
	assert_eq "state after the cut" dark "$(cat "$pl/state")"
	assert_eq "last_seed" "$seed" "$(cat "$pl/last_seed")"
	grep -q "power cut, seed $seed:" "$LOG" || fail "the daemon log does not give seed $seed"
	info "iteration $iter/${#seeds[@]}: cut with seed $seed$paused; $(grep -c . "$W/records.snap") records before it"
	grep "power cut, seed $seed:" "$LOG" | tail -n 1 | sed 's/^.*blkfs: /#   /'
	cut=$(grep "power cut, seed $seed:" "$LOG" | tail -n 1)
	[[ $cut =~ :\ ([0-9]+)\ unflushed ]] && cut_writes=$((cut_writes + BASH_REMATCH[1]))

	# the workload runs on in the dark, then stops
	touch "$W/stop"
	wait_gone 60 "$wpid" "$spid" || fail "the workload hangs after the cut"
	wait "$wpid" "$spid" 2>/dev/null || true
	if ! timeout -k 5 60 umount "$fs" 2>/dev/null; then
		info "umount $fs failed after the cut; lazy unmount"
		umount -l "$fs" || fail "umount -l $fs failed"
	fi
	losetup -d "$loop" 2>/dev/null || true
	loop_gone "$loop" || fail "$loop is still attached 30 s after the unmount"

	echo 1 >"$pl/restart" || fail "restart failed"
	assert_eq "state after restart" running "$(cat "$pl/state")"

	attach_loop "$dev"
	loop=$LOOP
	check_fs "$loop"
	mount_top "$loop" "$fs"
	verify "$fs" "$W/records.snap"
	timeout -k 5 60 umount "$fs" || fail "umount $fs failed"
	detach_loop "$loop"
done

info "$FS: ${#seeds[@]} power cuts survived (seeds ${seeds[*]}); $cut_writes unflushed writes decided; $verified fsynced files verified in all"
[ "$cut_writes" -gt 0 ] || fail "no cut found an unflushed write: the filter was never exercised"
stop_blkfs
