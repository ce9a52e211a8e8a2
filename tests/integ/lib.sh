# shellcheck shell=bash
# shellcheck disable=SC2034,SC2119,SC2120  # LOG, STATUS etc. are for the tests
# tests/integ/lib.sh - sourced by every integration test (nbdkit's
# tests/functions.sh is the model).
#
#   . "$(dirname "$0")/lib.sh"
#   require_root; require_fuse; require dd cmp
#   start_blkfs "[device ram0]
#   backend = ram
#   size = 64M"                   # sets MNT, CONF, DAEMON_PID, LOG, PIDFILE
#   ddev if=data of="$MNT/ram0" bs=1M conv=notrunc
#   stop_blkfs                    # blkfs umount; exit 0, mount and daemon gone
#
# Every test gets its own temp dir $TDIR (under $BLKFS_TEST_BASE when the
# runner sets it) and its own $BLKFS_RUNDIR inside it. An EXIT trap always
# cleans up, also after a failure or a signal: FUSE connections of mounts
# still there are aborted through fusectl (a hung daemon would otherwise
# block umount and every reader in an uninterruptible wait), then filesystems
# mounted on top, loop devices and blkfs mounts are detached, daemons killed
# and $TDIR removed. Nothing here ever stats a path that may be a hung
# mount: mount state is read from /proc/self/mountinfo only.
#
# With BLKFS_LIB_NOINIT=1 only the functions are defined (tests/integ/run
# uses them to find and clean what a test left behind).
#
# BLKFS_TRANSPORT=uring|dev|auto: start_blkfs adds `transport = ...` to
# [mount] of every config that names no transport (uring_suite.sh reruns
# the data tests so, over FUSE over io_uring); with uring, each mount is
# checked to really use the ring. BLKFS_URING_DEPTH likewise sets
# uring_queue_depth.

_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${BLKFS:=$_LIB_DIR/../../build/blkfs}"
: "${BLKFS_TESTBIN:=$_LIB_DIR/../../build/integ}"
export BLKFS BLKFS_TESTBIN

# ---------------------------------------------------------------------------
# Messages and assertions

info() { printf '# %s\n' "$*"; }
skip() { printf 'SKIP: %s\n' "$*" >&2; exit 77; }
fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

# require CMD...: skip (77) unless every command is there.
require() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null 2>&1 || skip "$c not found"
	done
}

require_root() {
	[ "$(id -u)" -eq 0 ] || skip "needs root"
}

require_fuse() {
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	grep -qw fuse /proc/filesystems || skip "kernel has no fuse"
}

# The blkfs binary and the C helpers are build products: missing is an error.
require_blkfs() {
	[ -x "$BLKFS" ] || fail "BLKFS=$BLKFS is not an executable (run make)"
}

require_helper() {
	local h
	for h in "$@"; do
		[ -x "$BLKFS_TESTBIN/$h" ] ||
			fail "helper $BLKFS_TESTBIN/$h missing (make $BLKFS_TESTBIN/$h)"
	done
}

# expect_fail CMD...: CMD must exit non-zero.
expect_fail() {
	if "$@"; then
		fail "expected to fail but succeeded: $*"
	fi
	return 0
}

# errno_msg NAME: strerror() text of an errno name (EINVAL -> Invalid argument).
errno_msg() {
	case $1 in
	EPERM) echo "Operation not permitted" ;;
	ENOENT) echo "No such file or directory" ;;
	EIO) echo "Input/output error" ;;
	EBADF) echo "Bad file descriptor" ;;
	EACCES) echo "Permission denied" ;;
	EBUSY) echo "Device or resource busy" ;;
	EEXIST) echo "File exists" ;;
	ENODEV) echo "No such device" ;;
	ENOTDIR) echo "Not a directory" ;;
	EISDIR) echo "Is a directory" ;;
	EINVAL) echo "Invalid argument" ;;
	EFBIG) echo "File too large" ;;
	ENOSPC) echo "No space left on device" ;;
	EROFS) echo "Read-only file system" ;;
	ENOSYS) echo "Function not implemented" ;;
	EOPNOTSUPP | ENOTSUP) echo "Operation not supported" ;;
	ENOTCONN) echo "Transport endpoint is not connected" ;;
	*) fail "errno_msg: unknown errno name $1" ;;
	esac
}

# expect_errno NAME CMD...: CMD must fail and say strerror(NAME) on stderr.
expect_errno() {
	local name=$1 msg out rc
	shift
	msg=$(errno_msg "$name")
	out=$("$@" 2>&1 >/dev/null) && rc=0 || rc=$?
	[ "$rc" -ne 0 ] || fail "expected $name but succeeded: $*"
	case $out in
	*"$msg"*) ;;
	*) fail "expected $name ($msg) from: $*; got exit $rc: $out" ;;
	esac
}

# open_errno FLAGS PATH [CMD...]: open(2) PATH with FLAGS (os.O_* names
# joined by |, e.g. O_WRONLY|O_TRUNC) and close it, nothing read or
# written; prints the errno's name (EROFS), or OK when it opened. CMD
# (e.g. setpriv --reuid=nobody ...) runs the open. Unlike expect_errno on
# a shell redirection or dd, this tells a refused open from a refused
# write (require python3).
open_errno() {
	local flags=$1 path=$2
	shift 2
	"$@" python3 - "$flags" "$path" <<'PY'
import errno, os, sys
fl = 0
for n in sys.argv[1].split("|"):
    fl |= getattr(os, n)
try:
    os.close(os.open(sys.argv[2], fl))
    print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
PY
}

# assert_eq WHAT EXPECTED ACTUAL
assert_eq() {
	[ "$2" = "$3" ] || fail "$1: expected '$2', got '$3'"
}

# chk WANT BDEV_CHECK_ARGS...: bdev_check (require_helper bdev_check) prints
# a line per call; WANT is every output line, space-separated.
chk() {
	local want=$1 got
	shift
	got=$("$BLKFS_TESTBIN/bdev_check" "$@") || fail "bdev_check $* failed: $got"
	got=${got//$'\n'/ }
	[ "$got" = "$want" ] || fail "bdev_check $*: expected $want, got $got"
}

# ---------------------------------------------------------------------------
# Mount state, read from /proc/self/mountinfo only (never stat a mount that
# may hang).

# mounts_at PATH: "MAJ:MIN FSTYPE" of every mount at PATH, bottom to top.
mounts_at() {
	awk -v p="$1" '$5 == p {
		for (i = 7; i <= NF; i++) if ($i == "-") { print $3, $(i + 1); break }
	}' /proc/self/mountinfo
}

is_mounted() {
	[ -n "$(mounts_at "$1")" ]
}

# mounts_under DIR: mount points at or below DIR, deepest (last mounted) first.
mounts_under() {
	awk -v d="$1" '$5 == d || index($5, d "/") == 1 { print $5 }' \
		/proc/self/mountinfo | tac
}

# fuse_mounts: "MOUNTPOINT FSTYPE" of every FUSE mount.
fuse_mounts() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") {
		if ($(i + 1) ~ /^fuse/) print $5, $(i + 1); break } }' /proc/self/mountinfo
}

fusectl_ensure() {
	awk '$3 == "fusectl" { f = 1 } END { exit !f }' /proc/mounts && return 0
	[ -d /sys/fs/fuse/connections ] || return 1
	mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null
}

# abort_fuse PATH: abort the FUSE connection of every FUSE mount at PATH.
# The connection's number is its device number (MIN when MAJ is 0).
abort_fuse() {
	local dev type maj min conn
	fusectl_ensure || true
	while read -r dev type; do
		case $type in fuse*) ;; *) continue ;; esac
		maj=${dev%%:*}
		min=${dev##*:}
		conn=$(((maj << 20) | min))
		if [ -e "/sys/fs/fuse/connections/$conn/abort" ]; then
			echo 1 >"/sys/fs/fuse/connections/$conn/abort" 2>/dev/null || true
		fi
	done < <(mounts_at "$1")
}

# ---------------------------------------------------------------------------
# Processes

# pid_alive PID: running and not a zombie.
pid_alive() {
	local st
	[ -n "${1:-}" ] && [ -r "/proc/$1/status" ] || return 1
	st=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

# _wait_gone SECONDS PID...: 0 once none of PID is alive, 1 after SECONDS.
_wait_gone() {
	local end=$((SECONDS + $1)) p alive
	shift
	while :; do
		alive=0
		for p in "$@"; do pid_alive "$p" && alive=1; done
		[ "$alive" -eq 0 ] && return 0
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.1
	done
}

# wait_gone SECONDS PID...: 0 once none of PID is alive; else 1, and on
# stderr which are still there and in what state (the last seen).
wait_gone() {
	local t=$1 p
	shift
	_wait_gone "$t" "$@" && return 0
	for p in "$@"; do
		pid_alive "$p" || continue
		printf 'wait_gone: after %s s, %s (%s) is still there: %s, waiting in %s\n' "$t" "$p" \
			"$(cat "/proc/$p/comm" 2>/dev/null)" \
			"$(awk '/^State:/ { print $2, $3 }' "/proc/$p/status" 2>/dev/null)" \
			"$(cat "/proc/$p/wchan" 2>/dev/null)" >&2
	done
	return 1
}

# wait_until SECONDS WHAT CMD...: poll CMD (every 0.1 s) until it succeeds.
# A wait for an event the test cannot be told of otherwise, so SECONDS is
# generous (a machine at load 10); on giving up it fails the test with WHAT
# and what CMD printed the last time (the value it saw).
wait_until() {
	local secs=$1 what=$2 end=$((SECONDS + $1)) out
	shift 2
	while :; do
		out=$("$@" 2>&1) && return 0
		[ "$SECONDS" -lt "$end" ] || break
		sleep 0.1
	done
	fail "waited $secs s for $what; last seen: ${out:-(nothing printed)}"
}

# kill_pids PID...: SIGTERM, then SIGKILL after a few seconds.
kill_pids() {
	local p live=()
	for p in "$@"; do
		[ "$p" = "$$" ] || [ "$p" = "${BASHPID:-}" ] && continue
		pid_alive "$p" && live+=("$p")
	done
	[ "${#live[@]}" -gt 0 ] || return 0
	kill -TERM "${live[@]}" 2>/dev/null || true
	_wait_gone 5 "${live[@]}" && return 0
	kill -KILL "${live[@]}" 2>/dev/null || true
	wait_gone 10 "${live[@]}" || true
}

# pids_matching STRING: processes whose command line contains STRING
# (a unique temp path, within one argument), not this shell. One grep over
# every /proc/PID/cmdline (a fork per process took a second at load 10,
# and the runner asks after every test), given STRING on a pipe so that
# its own command line does not hold it.
pids_matching() {
	local f p
	while read -r f; do
		p=${f#/proc/}
		p=${p%/cmdline}
		[ "$p" = "$$" ] || [ "$p" = "${BASHPID:-}" ] && continue
		echo "$p"
	done < <(grep -lsaF -f <(printf '%s\n' "$1") /proc/[0-9]*/cmdline)
}

# no_pids_matching STRING: no process's command line contains STRING; else
# prints them (for wait_until).
no_pids_matching() {
	local p
	p=$(pids_matching "$1")
	[ -z "$p" ] || { echo "processes $p"; return 1; }
}

# ---------------------------------------------------------------------------
# Loop devices

# loops_under DIR: loop devices whose backing file is below DIR.
loops_under() {
	losetup -l -n -O NAME,BACK-FILE 2>/dev/null |
		awk -v d="$1/" 'index($2, d) == 1 { print $1 }'
}

# ---------------------------------------------------------------------------
# Runtime files

# rundir_key PATH: the key blkfs derives from a mount point's realpath.
rundir_key() {
	local p=$1
	echo "${p//\//_}"
}

# show_logs [DIR]: print every daemon log and status file (on failure).
show_logs() {
	local d=${1:-${BLKFS_RUNDIR:-}} f
	[ -n "$d" ] && [ -d "$d" ] || return 0
	for f in "$d"/*.log "$d"/*.status; do
		[ -f "$f" ] || continue
		printf -- '--- %s (last 100 lines)\n' "$f" >&2
		tail -n 100 "$f" >&2
	done
}

# log_problems [DIR]: sanitizer reports, failed assertions and crashes in
# the daemon logs (the daemon's stderr goes to its log once it is ready).
log_problems() {
	local d=${1:-${BLKFS_RUNDIR:-}}
	[ -n "$d" ] && [ -d "$d" ] || return 0
	grep -HE 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|WARNING: ThreadSanitizer|runtime error:|Assertion .* failed|SUMMARY: [A-Za-z]+Sanitizer' \
		"$d"/*.log 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# Teardown of everything below a directory: used by the EXIT trap (for
# $TDIR) and by tests/integ/run (for a test's whole base directory).
#
# Order matters: aborting the FUSE connections first makes every later step
# fast even when a daemon hangs (requests fail with ENOTCONN instead of
# waiting), then filesystems on top, loop devices, the FUSE mounts, the
# processes, and last the files.
cleanup_tree() {
	local dir=$1 m l p pids
	[ -n "$dir" ] && [ -d "$dir" ] || return 0
	for m in $(mounts_under "$dir"); do
		abort_fuse "$m"
	done
	for m in $(mounts_under "$dir"); do
		case $(mounts_at "$m" | tail -n 1) in
		*" fuse"*) ;;
		*) umount -l "$m" 2>/dev/null || true ;;
		esac
	done
	for l in $(loops_under "$dir"); do
		losetup -d "$l" 2>/dev/null || true
	done
	for m in $(mounts_under "$dir"); do
		umount -l "$m" 2>/dev/null || true
	done
	pids=()
	for p in "$dir"/run/*.pid "$dir"/*/run/*.pid; do
		[ -f "$p" ] && pids+=("$(cat "$p" 2>/dev/null)")
	done
	for p in $(pids_matching "$dir"); do
		pids+=("$p")
	done
	[ "${#pids[@]}" -eq 0 ] || kill_pids "${pids[@]}"
	if [ -z "$(mounts_under "$dir")" ]; then
		rm -rf --one-file-system "$dir"
	else
		echo "lib.sh: not removing $dir: still mounted below it" >&2
	fi
}

# cpu_snap PID: the CPU ticks (utime + stime, all threads) and the context
# switches (voluntary + involuntary, all threads) PID has had so far, as
# "TICKS CTXSW"; "- -" when PID is empty or gone. Two snapshots around a
# run give its cost per I/O (../shared/tools/cpu-per-io's method).
cpu_snap() {
	if [ -z "${1:-}" ] || [ ! -r "/proc/$1/stat" ]; then
		echo "- -"
		return
	fi
	echo "$(awk '{ print $14 + $15 }' "/proc/$1/stat")" \
		"$(cat "/proc/$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { s += $2 } END { print s + 0 }')"
}

[ "${BLKFS_LIB_NOINIT:-0}" = 1 ] && return 0

# ---------------------------------------------------------------------------
# FUSE over io_uring: the kernel's global switch

URING_PARAM=/sys/module/fuse/parameters/enable_uring

# require_uring: skip (77) unless this test may turn FUSE over io_uring on
# and off: root, and a kernel that has it (the parameter exists).
require_uring() {
	[ "$(id -u)" -eq 0 ] || skip "FUSE over io_uring: turning it on needs root"
	[ -e "$URING_PARAM" ] ||
		skip "FUSE over io_uring: this kernel has no $URING_PARAM (CONFIG_FUSE_IO_URING, 6.14+)"
	[ -w "$URING_PARAM" ] || skip "FUSE over io_uring: $URING_PARAM is not writable here"
}

# uring_set Y|N: set the kernel's switch; the exit trap puts back the value
# the test found.
uring_set() {
	[ -n "$_URING_PREV" ] || _URING_PREV=$(cat "$URING_PARAM") ||
		fail "cannot read $URING_PARAM"
	echo "$1" >"$URING_PARAM" || fail "cannot write $1 to $URING_PARAM"
	[ "$(cat "$URING_PARAM")" = "$1" ] || fail "$URING_PARAM did not take $1"
	_URING_SET=$1
}

# ---------------------------------------------------------------------------
# Per-test set-up

TEST_NAME=$(basename "$0" .sh)
TDIR=$(mktemp -d "${BLKFS_TEST_BASE:-${TMPDIR:-/tmp}}/blkfs-$TEST_NAME.XXXXXX")
TDIR=$(realpath -e "$TDIR")
export BLKFS_RUNDIR=$TDIR/run
mkdir -p "$BLKFS_RUNDIR"

_NMNT=0
_MNTS=()		# blkfs mount points this test created
_TOPMNTS=()		# filesystems mounted on top (ext4 on a loop device)
_LOOPS=()		# loop devices this test attached
_BGPIDS=()		# background processes to kill at exit
_XDIRS=()		# directories outside $TDIR (odirect_dir), removed at exit
_NLOOPF=0
_URING_PREV=		# enable_uring as the test found it, once uring_set changed it
_URING_SET=		# what uring_set wrote last
declare -A _PID_OF=()	# mount point -> daemon pid
declare -A _LOOP_FILE=()	# loop device -> the file it was attached over

_cleanup() {
	local rc=$? i m
	trap - EXIT INT TERM
	set +e
	if [ "$rc" -eq 0 ]; then
		for m in "${_MNTS[@]}" "${_TOPMNTS[@]}"; do
			if is_mounted "$m"; then
				echo "FAIL: the test ended with $m still mounted" >&2
				rc=1
			fi
		done
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
		show_logs
		# the switch is global: a test run beside this one may have flipped it
		if [ -n "$_URING_SET" ] && [ "$(cat "$URING_PARAM" 2>/dev/null)" != "$_URING_SET" ]; then
			echo "lib.sh: $URING_PARAM is $(cat "$URING_PARAM" 2>/dev/null), not the $_URING_SET this test set: something else changed the kernel's switch meanwhile" >&2
		fi
	fi
	for m in "${_MNTS[@]}"; do
		is_mounted "$m" && abort_fuse "$m"
	done
	for ((i = ${#_TOPMNTS[@]} - 1; i >= 0; i--)); do
		is_mounted "${_TOPMNTS[i]}" && umount -l "${_TOPMNTS[i]}" 2>/dev/null
	done
	# only while it is still over the file we attached: a number detached
	# by the test itself may be someone else's by now
	for m in "${_LOOPS[@]}"; do
		[ "$(losetup -n -O BACK-FILE "$m" 2>/dev/null | sed 's/ *$//')" = "${_LOOP_FILE[$m]:-}" ] &&
			losetup -d "$m" 2>/dev/null
	done
	for m in "${_MNTS[@]}"; do
		while is_mounted "$m"; do umount -l "$m" 2>/dev/null || break; done
	done
	[ "${#_BGPIDS[@]}" -eq 0 ] || kill_pids "${_BGPIDS[@]}"
	[ "${#_PID_OF[@]}" -eq 0 ] || kill_pids "${_PID_OF[@]}"
	if [ "$rc" -eq 0 ] && [ -n "$(log_problems)" ]; then
		log_problems >&2
		show_logs
		echo "FAIL: the daemon log reports problems (above)" >&2
		rc=1
	fi
	for m in "${_XDIRS[@]}"; do
		cleanup_tree "$m"
	done
	cleanup_tree "$TDIR"
	# the kernel's switch back as the test found it, once its mounts are gone
	if [ -n "$_URING_PREV" ]; then
		echo "$_URING_PREV" >"$URING_PARAM" 2>/dev/null ||
			echo "lib.sh: could not restore $URING_PARAM to $_URING_PREV" >&2
	fi
	exit "$rc"
}
trap _cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------
# blkfs mounts

# new_mountpoint: make an empty directory for a mount; sets MNT (realpath).
new_mountpoint() {
	_NMNT=$((_NMNT + 1))
	MNT=$TDIR/mnt$_NMNT
	mkdir "$MNT"
	MNT=$(realpath -e "$MNT")
	PIDFILE=$BLKFS_RUNDIR/$(rundir_key "$MNT").pid
	LOG=$BLKFS_RUNDIR/$(rundir_key "$MNT").log
	STATUS=$BLKFS_RUNDIR/$(rundir_key "$MNT").status
}

# write_conf TEXT_OR_FILE: sets CONF to a file with that config.
write_conf() {
	if [ -f "$1" ]; then
		CONF=$1
	else
		CONF=$TDIR/blkfs$((_NMNT + 1)).conf
		printf '%s\n' "$1" >"$CONF"
	fi
	_conf_mount_key transport "${BLKFS_TRANSPORT:-}"
	_conf_mount_key uring_queue_depth "${BLKFS_URING_DEPTH:-}"
}

# _conf_mount_key KEY VALUE: add `KEY = VALUE` to [mount] of $CONF unless
# VALUE is empty, the config sets KEY already, or $CONF is not this test's.
_conf_mount_key() {
	local key=$1 val=$2
	[ -n "$val" ] || return 0
	case $CONF in "$TDIR"/*) ;; *) return 0 ;; esac
	grep -qE "^[[:space:]]*${key}[[:space:]]*=" "$CONF" && return 0
	if grep -qE '^[[:space:]]*\[mount\][[:space:]]*$' "$CONF"; then
		sed -i -E "/^[[:space:]]*\[mount\][[:space:]]*\$/a $key = $val" "$CONF"
	else
		printf '\n[mount]\n%s = %s\n' "$key" "$val" >>"$CONF"
	fi
}

# start_blkfs CONF_TEXT_OR_FILE [MOUNT ARGS...]: mount at a new temp mount
# point; sets MNT, CONF, PIDFILE, LOG, STATUS, DAEMON_PID. Fails the test
# unless `blkfs mount` exits 0 with the mount usable and the daemon running.
start_blkfs() {
	write_conf "$1"
	shift
	new_mountpoint
	_MNTS+=("$MNT")
	_mount_blkfs "$@"
}

# remount_blkfs MNT [MOUNT ARGS...]: mount $CONF again at MNT, a mount point
# this test made and that is no longer mounted (after stop_blkfs or
# kill9_blkfs); sets MNT, PIDFILE, LOG, STATUS, DAEMON_PID like start_blkfs.
remount_blkfs() {
	MNT=$1
	shift
	PIDFILE=$BLKFS_RUNDIR/$(rundir_key "$MNT").pid
	LOG=$BLKFS_RUNDIR/$(rundir_key "$MNT").log
	STATUS=$BLKFS_RUNDIR/$(rundir_key "$MNT").status
	! is_mounted "$MNT" || fail "remount_blkfs: $MNT is still mounted"
	_mount_blkfs "$@"
}

# _mount_blkfs [MOUNT ARGS...]: blkfs mount $MNT -c $CONF and the checks.
_mount_blkfs() {
	local out rc
	out=$("$BLKFS" mount "$MNT" -c "$CONF" "$@" 2>&1) && rc=0 || rc=$?
	if [ "$rc" -ne 0 ]; then
		printf '%s\n' "$out" >&2
		fail "blkfs mount $MNT -c $CONF $* exited $rc"
	fi
	is_mounted "$MNT" || fail "blkfs mount returned 0 but $MNT is not in mountinfo"
	case $(mounts_at "$MNT") in
	*" fuse"*) ;;
	*) fail "$MNT: not a FUSE mount: $(mounts_at "$MNT")" ;;
	esac
	[ "$(mounts_at "$MNT" | wc -l)" -eq 1 ] ||
		fail "$MNT: mounted more than once: $(mounts_at "$MNT" | tr '\n' ' ')"
	wait_until 60 "the pid file $PIDFILE after blkfs mount returned 0" test -s "$PIDFILE"
	DAEMON_PID=$(cat "$PIDFILE")
	pid_alive "$DAEMON_PID" || fail "daemon pid $DAEMON_PID from $PIDFILE is not running"
	_PID_OF[$MNT]=$DAEMON_PID
	if grep -qE '^[[:space:]]*transport[[:space:]]*=[[:space:]]*uring' "$CONF"; then
		# the config says uring: the mount must really be on the ring
		grep -qx 'transport uring' <(timeout 10 cat "$MNT/.sys/.transport") ||
			fail "$MNT: the config says transport = uring but .sys/.transport says: $(timeout 10 cat "$MNT/.sys/.transport" 2>&1 | head -n 1)"
		info "mounted $MNT (daemon $DAEMON_PID, FUSE over io_uring)"
	else
		info "mounted $MNT (daemon $DAEMON_PID)"
	fi
}

# kill9_blkfs [MNT]: a crash: SIGKILL the daemon of MNT (nothing is written
# back), then clean up the dead mount as the EXIT trap would (abort the FUSE
# connection, lazy unmount). MNT can be mounted again with remount_blkfs.
kill9_blkfs() {
	local mnt=${1:-$MNT} pid
	pid=${_PID_OF[$mnt]:-}
	[ -n "$pid" ] || fail "kill9_blkfs: no daemon known for $mnt"
	pid_alive "$pid" || fail "kill9_blkfs: daemon $pid of $mnt is not running"
	kill -KILL "$pid" || fail "kill -KILL $pid failed"
	wait_gone 10 "$pid" || fail "daemon $pid still there 10 s after SIGKILL"
	abort_fuse "$mnt"
	while is_mounted "$mnt"; do umount -l "$mnt" 2>/dev/null || break; done
	! is_mounted "$mnt" || fail "kill9_blkfs: cannot unmount $mnt"
	unset "_PID_OF[$mnt]"
	info "killed daemon $pid (SIGKILL), $mnt unmounted"
}

# stop_blkfs [MNT]: `blkfs umount MNT` must exit 0, and when it returns the
# mount must be gone and the daemon must have exited.
stop_blkfs() {
	local mnt=${1:-$MNT} pid out rc
	pid=${_PID_OF[$mnt]:-}
	out=$("$BLKFS" umount "$mnt" 2>&1) && rc=0 || rc=$?
	[ -z "$out" ] || printf '%s\n' "$out"
	if [ "$rc" -ne 0 ]; then
		fail "blkfs umount $mnt exited $rc"
	fi
	! is_mounted "$mnt" || fail "blkfs umount $mnt exited 0 but it is still mounted"
	if [ -n "$pid" ] && pid_alive "$pid"; then
		fail "blkfs umount $mnt returned while daemon $pid still runs"
	fi
	unset "_PID_OF[$mnt]"
	if [ -n "$(log_problems)" ]; then
		fail "the daemon log reports problems: $(log_problems)"
	fi
	info "unmounted $mnt"
}

# assert_live MNT: the mount is there (checked before writing into it, since
# dd onto an unmounted mount point silently creates a plain file).
assert_live() {
	is_mounted "$1" || fail "$1 is not mounted"
	case $(mounts_at "$1" | tail -n 1) in
	*" fuse"*) ;;
	*) fail "$1: top mount is not FUSE" ;;
	esac
}

# ddev OPERANDS...: dd into or out of a device file: checks that the of=
# target's directory is mounted, adds conv=nocreat and status=none.
ddev() {
	local a of=
	for a in "$@"; do
		case $a in of=*) of=${a#of=} ;; esac
	done
	[ -z "$of" ] || assert_live "$(dirname "$of")"
	dd "$@" conv=nocreat status=none
}

# ---------------------------------------------------------------------------
# Loop devices and filesystems on top

# attach_loop FILE [LOSETUP ARGS...]: sets LOOP.
attach_loop() {
	local f=$1
	shift
	LOOP=$(losetup -f --show "$@" "$f") || fail "losetup $f failed"
	_LOOPS+=("$LOOP")
	_LOOP_FILE[$LOOP]=$(realpath -ms "$f")	# lexical: never stats the file
	info "attached $LOOP -> $f"
}

# new_loop SIZE [LOSETUP ARGS...]: a loop device over a new sparse file of
# SIZE bytes in $TDIR (e.g. new_loop 256M --sector-size 4096); sets LOOP and
# LOOP_FILE. With --sector-size N the device must report N (else skip: the
# kernel or losetup cannot). Detached at exit.
new_loop() {
	local size=$1 a prev='' want=''
	shift
	for a in "$@"; do
		case $a in --sector-size=*) want=${a#--sector-size=} ;; esac
		[ "$prev" != --sector-size ] || want=$a
		prev=$a
	done
	[ -e /dev/loop-control ] || skip "no /dev/loop-control"
	_NLOOPF=$((_NLOOPF + 1))
	LOOP_FILE=$TDIR/loop$_NLOOPF.img
	truncate -s "$size" "$LOOP_FILE" || fail "truncate -s $size $LOOP_FILE failed"
	attach_loop "$LOOP_FILE" "$@"
	if [ -n "$want" ] && [ "$(blockdev --getss "$LOOP")" != "$want" ]; then
		skip "losetup $* made $LOOP with $(blockdev --getss "$LOOP")-byte sectors, not $want"
	fi
}

# detach_loop LOOP: detach now (the exit trap detaches what is left, and only
# while it is still over the file this test attached).
detach_loop() {
	losetup -d "$1" || fail "losetup -d $1 failed"
}

# blkfs_attach MNT DEV: `blkfs attach MNT DEV`, as a user puts a filesystem
# on a device; sets LOOP and ATTACH_ERR (what it said on stderr: the
# geometry and the mkfs options). Detached at exit unless the test does it
# (`blkfs detach $LOOP`).
blkfs_attach() {
	local out
	out=$("$BLKFS" attach "$1" "$2" 2>"$TDIR/attach.err") ||
		fail "blkfs attach $1 $2: $(cat "$TDIR/attach.err")"
	ATTACH_ERR=$(cat "$TDIR/attach.err")
	[ "$(wc -l <<<"$out")" -eq 1 ] || fail "blkfs attach printed more than the device on stdout: $out"
	case $out in /dev/loop[0-9]*) ;; *) fail "blkfs attach printed '$out', not /dev/loopN" ;; esac
	LOOP=$out
	_LOOPS+=("$LOOP")
	_LOOP_FILE[$LOOP]=$1/$2
	info "blkfs attach: $LOOP -> $1/$2"
}

# attach_mkfs_opts FS: the options the last blkfs_attach gave for mkfs.FS.
attach_mkfs_opts() {
	sed -n "s|^blkfs: mkfs\\.$1\\(.*\\) $LOOP\$|\\1|p" <<<"$ATTACH_ERR"
}

# mount_top DEV DIR [MOUNT ARGS...]: mount a filesystem; unmounted at exit.
mount_top() {
	local dev=$1 dir=$2
	shift 2
	mkdir -p "$dir"
	mount "$@" "$dev" "$dir" || fail "mount $dev $dir failed"
	_TOPMNTS+=("$dir")
}

# odirect_dir: sets ODIRECT_DIR to a directory for image files on a
# filesystem that takes O_DIRECT: $TDIR/img if $TDIR's does, else a new
# directory under /var/tmp (removed at exit). Returns 1, ODIRECT_DIR empty,
# when neither does (the caller skips what needs it).
odirect_dir() {
	local d
	ODIRECT_DIR=
	for d in "$TDIR/img" /var/tmp; do
		if [ "$d" = /var/tmp ]; then
			[ -d /var/tmp ] || continue
			d=$(mktemp -d "/var/tmp/blkfs-$TEST_NAME.XXXXXX") || continue
			d=$(realpath -e "$d")
			_XDIRS+=("$d")
		fi
		mkdir -p "$d"
		if dd if=/dev/zero of="$d/.odirect" bs=4096 count=1 oflag=direct \
			status=none 2>/dev/null; then
			rm -f "$d/.odirect"
			ODIRECT_DIR=$d
			return 0
		fi
		rm -rf "$d"
	done
	return 1
}

# seed_list ITERS SEEDS FIRST: sets the array SEEDS: the seeds in the string
# SEEDS ("S1 S2 ...") when it is not empty, else ITERS seeds counting up from
# FIRST (default: from the clock). Seeded tests print them for a rerun.
seed_list() {
	local iters=$1 list=$2 first=${3:-$(($(date +%s%N) % 1000000000))} k
	SEEDS=()
	if [ -n "$list" ]; then
		read -r -a SEEDS <<<"$list"
	else
		for ((k = 0; k < iters; k++)); do SEEDS+=($((first + k))); done
	fi
}

# ---------------------------------------------------------------------------
# Data

# mkdata FILE BYTES: random data.
mkdata() {
	head -c "$2" /dev/urandom >"$1"
	[ "$(stat -c %s "$1")" -eq "$2" ] || fail "mkdata $1 $2: short"
}

# fs_fill DIR NSMALL: files on a filesystem to verify later: a tree with
# two big files (9 MiB), an odd size, NSMALL small ones and a sparse one;
# their sha256 in DIR/SUMS (and $TDIR/SUMS), synced. fs_verify checks them.
fs_fill() {
	local fs=$1 n=$2 i
	mkdir -p "$fs/a/b/c"
	mkdata "$fs/big1" $((6 << 20))
	mkdata "$fs/big2" $((3 << 20))
	mkdata "$fs/a/b/c/odd" 123457
	for ((i = 1; i <= n; i++)); do
		head -c $((i * 37)) /dev/urandom >"$fs/a/small.$i"
	done
	mkdata "$fs/a/b/sparse_src" 65536
	dd if="$fs/a/b/sparse_src" of="$fs/a/b/sparse" bs=64K seek=100 status=none
	(cd "$fs" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$TDIR/SUMS"
	cp "$TDIR/SUMS" "$fs/SUMS"
	sync -f "$fs/SUMS"
}

# fs_verify DIR WHAT: DIR/SUMS is the list fs_fill wrote, and every file in
# it verifies (WHAT names DIR in the messages).
fs_verify() {
	cmp -s "$TDIR/SUMS" "$1/SUMS" || fail "$2: SUMS is not the list that was written"
	(cd "$1" && sha256sum --quiet -c SUMS) || fail "$2: files differ"
}

# cmp_range A AOFF B BOFF LEN: the byte ranges are identical.
cmp_range() {
	cmp <(dd if="$1" iflag=skip_bytes,count_bytes skip="$2" count="$5" bs=1M status=none) \
		<(dd if="$3" iflag=skip_bytes,count_bytes skip="$4" count="$5" bs=1M status=none) ||
		fail "differ: $1@$2 vs $3@$4, $5 bytes"
}

# assert_zero FILE OFF LEN: the range reads as zeros.
assert_zero() {
	cmp -n "$3" <(dd if="$1" iflag=skip_bytes,count_bytes skip="$2" count="$3" bs=1M status=none) \
		/dev/zero || fail "$1@$2 +$3 is not all zeros (or short)"
}

# vmrss_kb PID
vmrss_kb() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# watchdog SECS MNT WHAT CMD...: run CMD (a step that could hang on MNT:
# one waiting on an unanswered FUSE request, whom `timeout` cannot kill)
# and return its status; see watchdog_wait.
watchdog() {
	local secs=$1 mnt=$2 what=$3
	shift 3
	"$@" &
	watchdog_wait "$secs" "$mnt" "$what" $!
}

# watchdog_wait SECS MNT WHAT PID: wait for PID, a child of this shell, and
# return its status; when it has not ended within SECS, print the threads
# of MNT's daemon (state, where each sleeps), abort MNT's FUSE connection
# and fail the test. SECS bounds a hang, it is no verdict on speed: make it
# generous (a machine at load 10).
watchdog_wait() {
	local secs=$1 mnt=$2 what=$3 pid=$4 i rc t d
	for ((i = 0; i < secs * 10; i++)); do
		pid_alive "$pid" || break
		sleep 0.1
	done
	if pid_alive "$pid"; then
		d=${_PID_OF[$mnt]:-}
		echo "watchdog: $what: not done after $secs s; the daemon's threads:" >&2
		if [ -n "$d" ]; then
			for t in /proc/"$d"/task/*; do
				echo "  $(cat "$t/comm" 2>/dev/null) $(awk '/^State:/ { print $2 }' \
					"$t/status" 2>/dev/null) $(cat "$t/wchan" 2>/dev/null)" >&2
			done
		fi
		abort_fuse "$mnt"
		fail "$what: hung for $secs s (the FUSE connection of $mnt is aborted)"
	fi
	wait "$pid" && rc=0 || rc=$?
	return "$rc"
}

# trace_start NAME DEV [--fuse]: `blkfs trace` of DEV on $MNT into
# $TDIR/NAME.blktrace.0, its messages in $TDIR/NAME.err; returns once it
# says it is tracing. TPID[NAME] is its pid (killed at exit if still running).
declare -A TPID
trace_start() {
	"$BLKFS" trace "$MNT" "$2" ${3:+"$3"} -o "$TDIR/$1" -w 600 2>"$TDIR/$1.err" &
	TPID[$1]=$!
	_BGPIDS+=("$!")
	wait_until 60 "blkfs trace $2 to start" grep -q "^blkfs trace: tracing" "$TDIR/$1.err"
}

# trace_stop NAME: SIGINT to trace_start's NAME; it must exit 0 (a watchdog
# bounds the wait); its last line (what it wrote and dropped) is shown.
trace_stop() {
	local rc=0
	kill -INT "${TPID[$1]}"
	watchdog_wait 60 "$MNT" "blkfs trace $1 to stop" "${TPID[$1]}" || rc=$?
	[ "$rc" -eq 0 ] || fail "blkfs trace $1 exited $rc: $(cat "$TDIR/$1.err")"
	info "$1: $(tail -n 1 "$TDIR/$1.err")"
}

# trace_done NAME: trace_stop, and it must have dropped nothing
trace_done() {
	trace_stop "$1"
	grep -q " events written, 0 dropped" "$TDIR/$1.err" ||
		fail "blkfs trace: $(cat "$TDIR/$1.err")"
}

# bg NAME CMD...: run CMD in the background; its exit status goes to
# $TDIR/NAME.rc, its output to $TDIR/NAME.out and .err; sets BGPID (killed
# at exit if still running).
bg() {
	local name=$1
	shift
	rm -f "$TDIR/$name.rc"
	(
		rc=0
		"$@" >"$TDIR/$name.out" 2>"$TDIR/$name.err" || rc=$?
		echo "$rc" >"$TDIR/$name.rc"
	) &
	BGPID=$!
	_BGPIDS+=("$BGPID")
}

# mklog OUT SPEC...: a dm-log-writes log with 4096-byte sectors (the
# crashcheck tests run the explorer on such hand-made logs). SPEC:
# wN (write block N, every byte N % 251 + 1), f (flush), mTEXT (mark).
mklog() {
	python3 - "$@" <<'PY'
import struct, sys
S = 4096
out, specs = sys.argv[1], sys.argv[2:]
ents = b''
for sp in specs:
    if sp[0] == 'w':
        n = int(sp[1:])
        ents += struct.pack('<QQQQ', n, 1, 0, 0).ljust(S, b'\0') + bytes([n % 251 + 1]) * S
    elif sp == 'f':
        ents += struct.pack('<QQQQ', 0, 0, 1, 0).ljust(S, b'\0')
    elif sp[0] == 'm':
        t = sp[1:].encode()
        ents += (struct.pack('<QQQQ', 0, 0, 8, len(t)) + t).ljust(S, b'\0')
sup = struct.pack('<QQQI', 0x6a736677736872, 1, len(specs), S).ljust(S, b'\0')
open(out, 'wb').write(sup + ents)
PY
}
