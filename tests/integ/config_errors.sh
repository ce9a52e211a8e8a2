#!/usr/bin/env bash
# config_errors.sh: every config error the foundation issue lists is reported
# as "FILE:LINE: KEY: message" with the right line and key, by `blkfs check`
# (exit 1) and, for several, by `blkfs mount`, which must exit 1 and leave
# nothing mounted and no daemon behind. Valid configs with comments and
# size suffixes pass `blkfs check`.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs

DEV0='[device ram0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096'

# err_case NAME KEY LINE_TEXT [KEY LINE_TEXT]...: stdin is the config.
# LINE_TEXT is the offending line (its last occurrence gives LINE); any of
# the KEY/LINE pairs is accepted. Sets ERRFILE and ERRWANT (what matched).
err_case() {
	local name=$1 f out rc key text line want ok=0 wants=()
	shift
	f=$TDIR/$name.conf
	cat >"$f"
	out=$("$BLKFS" check -c "$f" 2>&1) && rc=0 || rc=$?
	while [ $# -ge 2 ]; do
		key=$1 text=$2
		shift 2
		line=$(grep -nxF -- "$text" "$f" | tail -n 1 | cut -d: -f1)
		[ -n "$line" ] || fail "test bug: '$text' is not a line of $name.conf"
		want="$f:$line: $key:"
		wants+=("'$want'")
		if grep -qF -- "$want" <<<"$out"; then
			ok=1
			ERRWANT=$want
		fi
	done
	[ "$rc" -eq 1 ] || fail "$name: blkfs check exited $rc, want 1; output: $out"
	[ "$ok" -eq 1 ] || fail "$name: want ${wants[*]} in the output of blkfs check; got: $out"
	info "$name: $(grep -F -- "$ERRWANT" <<<"$out" | head -n 1)"
	ERRFILE=$f
}

# mount_fails: `blkfs mount` of $ERRFILE prints $ERRWANT, exits 1, and leaves
# nothing behind.
mount_fails() {
	local out rc
	new_mountpoint
	out=$("$BLKFS" mount "$MNT" -c "$ERRFILE" 2>&1) && rc=0 || rc=$?
	! is_mounted "$MNT" || { abort_fuse "$MNT"; umount -l "$MNT"; fail "mount of $ERRFILE: mounted"; }
	[ "$rc" -eq 1 ] || fail "blkfs mount -c $ERRFILE exited $rc, want 1; output: $out"
	grep -qF -- "$ERRWANT" <<<"$out" ||
		fail "blkfs mount -c $ERRFILE: want '$ERRWANT' in: $out"
	# the daemon may still be on its way out
	wait_until 30 "no process left after the failed mount" no_pids_matching "$MNT"
	! pid_alive "$(cat "$PIDFILE" 2>/dev/null)" || fail "daemon from $PIDFILE still runs"
	[ -z "$(ls -A "$MNT")" ] || fail "$MNT is not empty after a failed mount"
	info "  blkfs mount: same message, exit 1, nothing mounted"
}

info "valid configs pass"
cat >"$TDIR/ok.conf" <<'CONF'
# comment at the start of a line
; semicolon comment
[cache]   # comment after a section header
size = 64M    # comment after a value
folio_size = 64K ; semicolon comment after a value

[device ram0]
backend = ram
size = 1G
logical_block_size = 512
physical_block_size = 4096
max_io = 1M
cache_block_size = auto

	# indented comment
[device big]
backend = ram
size = 2T
logical_block_size = 4096
physical_block_size = 16K

[device tiny]
backend = ram
size = 4096K
logical_block_size = 64K
physical_block_size = 64K
CONF
out=$("$BLKFS" check -c "$TDIR/ok.conf" 2>&1) || fail "blkfs check of a valid config failed: $out"
printf '%s\n' "$DEV0" >"$TDIR/ok2.conf"
out=$("$BLKFS" check -c "$TDIR/ok2.conf" 2>&1) || fail "blkfs check of a minimal config failed: $out"

info "errors"
err_case size_not_multiple size 'size = 1000000' <<'CONF'
[device ram0]
backend = ram
size = 1000000
logical_block_size = 4096
physical_block_size = 4096
CONF
mount_fails

err_case size_not_multiple_512 size 'size = 1048577' <<'CONF'
[cache]
size = 64M

[device ram0]
backend = ram
size = 1048577
logical_block_size = 512
CONF

err_case lbs_not_pow2 logical_block_size 'logical_block_size = 1000' <<CONF
$DEV0

[device ram1]
backend = ram
size = 64M
logical_block_size = 1000
physical_block_size = 4096
CONF

err_case lbs_too_small logical_block_size 'logical_block_size = 256' <<'CONF'
[device ram0]
backend = ram
size = 64M
logical_block_size = 256
CONF

err_case lbs_too_large logical_block_size 'logical_block_size = 128K' <<'CONF'
[cache]
folio_size = 256K
[device ram0]
backend = ram
size = 64M
logical_block_size = 128K
CONF

err_case pbs_not_pow2 physical_block_size 'physical_block_size = 6144' <<'CONF'
[device ram0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 6144
CONF

err_case pbs_too_large physical_block_size 'physical_block_size = 131072' <<'CONF'
[device ram0]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 131072
CONF

err_case pbs_below_lbs physical_block_size 'physical_block_size = 512' \
	logical_block_size 'logical_block_size = 4096' <<'CONF'
[device ram0]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 512
CONF
mount_fails

err_case folio_below_lbs folio_size 'folio_size = 4K' \
	logical_block_size 'logical_block_size = 16K' <<'CONF'
[cache]
size = 64M
folio_size = 4K

[device ram0]
backend = ram
size = 64M
logical_block_size = 16K
physical_block_size = 16K
CONF

err_case folio_not_pow2 folio_size 'folio_size = 48K' <<CONF
[cache]
folio_size = 48K

$DEV0
CONF

err_case folio_too_large folio_size 'folio_size = 4M' <<CONF
[cache]
folio_size = 4M

$DEV0
CONF

err_case unknown_section 'disk foo' '[disk foo]' '[disk foo]' '[disk foo]' \
	disk '[disk foo]' section '[disk foo]' <<CONF
$DEV0

[disk foo]
backend = ram
size = 64M
CONF
mount_fails

err_case unknown_section_cachee cachee '[cachee]' '[cachee]' '[cachee]' \
	section '[cachee]' <<CONF
[cachee]
size = 64M
$DEV0
CONF

err_case unknown_key_device colour 'colour = blue' <<CONF
$DEV0
colour = blue
CONF

err_case unknown_key_cache sise 'sise = 64M' <<CONF
[cache]
sise = 64M
$DEV0
CONF

err_case unknown_backend backend 'backend = floppy' <<'CONF'
[device fd0]
backend = floppy
size = 1440K
CONF
mount_fails

err_case duplicate_device 'device ram0' '[device ram0]' '[device ram0]' '[device ram0]' \
	ram0 '[device ram0]' device '[device ram0]' <<CONF
$DEV0

$DEV0
CONF
mount_fails

err_case ram_takes_no_path path 'path = /tmp/blkfs-no-such.img' <<CONF
$DEV0
path = /tmp/blkfs-no-such.img
CONF
mount_fails

err_case ram_takes_no_queue_depth queue_depth 'queue_depth = 4' <<CONF
[device ram0]
backend = ram
queue_depth = 4
size = 64M
CONF

err_case duplicate_key size 'size = 128M' <<'CONF'
[device ram0]
backend = ram
size = 64M
size = 128M
CONF

err_case bad_size_syntax size 'size = 12Q' <<'CONF'
[device ram0]
backend = ram
size = 12Q
CONF

err_case cache_block_not_pow2 cache_block_size 'cache_block_size = 1000' <<CONF
$DEV0
cache_block_size = 1000
CONF

# says_too WHAT: blkfs check of $ERRFILE says WHAT as well
# (the output is taken whole first: grep -q would end the pipe early, and
# pipefail would count blkfs's SIGPIPE as grep's failure)
says_too() {
	local out

	out=$("$BLKFS" check -c "$ERRFILE" 2>&1) || true
	grep -qF -- "$1" <<<"$out" || fail "$ERRFILE: blkfs check does not say '$1': $out"
}

err_case bad_transport transport 'transport = fuse' <<CONF
[mount]
transport = fuse

$DEV0
CONF
says_too "fuse is not a choice (allowed: auto, uring, dev)"
mount_fails

err_case uring_depth_zero uring_queue_depth 'uring_queue_depth = 0' <<CONF
$DEV0

[mount]
uring_queue_depth = 0
CONF
says_too "0 is not a queue depth (allowed: 1 to 256 entries per CPU)"
mount_fails

err_case uring_depth_absurd uring_queue_depth 'uring_queue_depth = 100000' <<CONF
[mount]
transport = auto
uring_queue_depth = 100000

$DEV0
CONF
says_too "100000 is not a queue depth (allowed: 1 to 256 entries per CPU)"
