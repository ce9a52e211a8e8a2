#!/usr/bin/env bash
# integ-serial: flips the kernel's enable_uring, and measures speed
# transport_probe.sh: transport = auto measures the two transports
# (`blkfs probe-transport`, [mount] transport_probe).
#  - switch off: the probe says dev (the kernel offers no ring) without
#    measuring, and an auto mount reports auto_choice dev, auto_probe no_ring;
#  - switch on: `blkfs probe-transport` prints a table (IOPS over each
#    transport, ring/dev per test, their geometric mean) and the choice,
#    leaves no mount, daemon or directory of its own, and caches the result
#    for this boot and kernel; `--cached` prints the same table at once;
#  - an auto mount (transport_probe = boot) takes the cached choice
#    (.sys/.transport: auto_choice, auto_probe cached, the transport);
#  - a cache file that is not one: the mount measures again and rewrites it;
#  - a probe whose worker fails with a private mount live, or hangs in it:
#    the watchdog aborts, detaches and removes everything (BLKFS_TPROBE_TEST);
#    a mount whose probe fails takes the ring and logs why;
#  - transport_probe = off: the ring, as before the probe;
#  - a bad value: the mount fails with FILE:LINE: transport_probe:.
# The kernel's switch is put back as found (lib.sh's exit trap), the
# probe's cache lives in this test's own $BLKFS_RUNDIR.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_uring

DEV='[device r]
backend = ram
size = 64M'
CACHE=$BLKFS_RUNDIR/transport-probe

# tfield NAME: a line of $MNT/.sys/.transport
tfield() {
	timeout 10 cat "$MNT/.sys/.transport" | awk -v n="$1" '$1 == n { print $2 }'
}

# probe ARGS...: `blkfs probe-transport ARGS` (60 s at most: its own watchdog
# is 20 s); sets OUT; fails unless it exits 0
probe() {
	OUT=$(timeout -k 5 60 "$BLKFS" probe-transport "$@" 2>&1) ||
		fail "blkfs probe-transport $*: exited $?: $OUT"
}

# nothing_left: the probe's private mounts, daemons and directory are gone
nothing_left() {
	local m
	m=$(mounts_under "$BLKFS_RUNDIR")
	[ -z "$m" ] || fail "mounts left under $BLKFS_RUNDIR: $m"
	compgen -G "$BLKFS_RUNDIR/probe.*" >/dev/null && fail "the probe left $(echo "$BLKFS_RUNDIR"/probe.*)"
	no_pids_matching "$BLKFS_RUNDIR/probe." || fail "a daemon of the probe still runs"
}

# ---------------------------------------------------------------------------
info "enable_uring = N: dev, without measuring"
uring_set N
probe
grep -qx 'choice: dev (kernel offers no ring: /sys/module/fuse/parameters/enable_uring is N)' <<<"$OUT" ||
	fail "switch off: $OUT"
probe -q
assert_eq "switch off, -q" "dev no_ring -" "$OUT"
[ ! -e "$CACHE" ] || fail "switch off: a cache was written"
start_blkfs "[mount]
transport = auto

$DEV"
assert_eq "switch off: auto_choice" dev "$(tfield auto_choice)"
assert_eq "switch off: auto_probe" no_ring "$(tfield auto_probe)"
assert_eq "switch off: transport" dev "$(tfield transport)"
stop_blkfs

# ---------------------------------------------------------------------------
info "enable_uring = Y: blkfs probe-transport measures, prints, caches"
uring_set Y
t0=$(date +%s%N)
probe
t1=$(date +%s%N)
printf '%s\n' "$OUT" | sed 's/^/  /'
info "  took $(((t1 - t0) / 1000000)) ms"
nothing_left
grep -qx 'source: measured' <<<"$OUT" || fail "no source line: $OUT"
grep -qE '^test +dev IOPS +uring IOPS +ring/dev$' <<<"$OUT" || fail "no table header: $OUT"
for t in qd1_read qd1_write qd32_rw; do
	grep -qE "^$t +[1-9][0-9]* +[1-9][0-9]* +[0-9]+\.[0-9]{3}$" <<<"$OUT" || fail "no $t line: $OUT"
done
gm=$(awk '/^geomean ring\/dev/ { print $3 }' <<<"$OUT")
[[ $gm =~ ^[0-9]+\.[0-9]{3}$ ]] || fail "no geomean: $OUT"
choice=$(awk '/^choice:/ { print $2 }' <<<"$OUT")
case $choice in uring | dev) ;; *) fail "no choice: $OUT" ;; esac
# the rule: the ring at a geometric mean of 0.97 or more
want=$(awk -v g="$gm" 'BEGIN { print (g >= 0.97 ? "uring" : "dev") }')
assert_eq "choice for geomean $gm" "$want" "$choice"

info "the cache file"
[ -s "$CACHE" ] || fail "no cache file $CACHE"
assert_eq "cache: first line" "blkfs-transport-probe 1" "$(head -n 1 "$CACHE")"
assert_eq "cache: kernel" "$(uname -r)" "$(awk '$1 == "kernel" { print $2 }' "$CACHE")"
assert_eq "cache: boot_id" "$(cat /proc/sys/kernel/random/boot_id)" "$(awk '$1 == "boot_id" { print $2 }' "$CACHE")"
assert_eq "cache: choice" "$choice" "$(awk '$1 == "choice" { print $2 }' "$CACHE")"
assert_eq "cache: geomean" "$gm" "$(awk '$1 == "geomean" { print $2 }' "$CACHE")"
[ "$(grep -c '^test ' "$CACHE")" -eq 3 ] || fail "cache: not 3 tests: $(cat "$CACHE")"
compgen -G "$CACHE.tmp" >/dev/null && fail "a temp cache file was left"

info "--cached: the same table, at once"
first=$OUT
t0=$(date +%s%N)
probe --cached
t1=$(date +%s%N)
ms=$(((t1 - t0) / 1000000))
[ "$ms" -lt 2000 ] || fail "--cached took $ms ms"
grep -qx 'source: cached (measured this boot)' <<<"$OUT" || fail "--cached: source: $OUT"
assert_eq "--cached: the table" "$(grep -v '^source:' <<<"$first")" "$(grep -v '^source:' <<<"$OUT")"
probe -q --cached
ratios=$(awk '/^qd1_read/ { a = $4 } /^qd1_write/ { b = $4 } /^qd32_rw/ { c = $4 } END { print a "," b "," c }' <<<"$first")
assert_eq "-q --cached" "$choice cached $ratios" "$OUT"
info "  --cached: $ms ms; -q: $OUT"

# ---------------------------------------------------------------------------
info "an auto mount takes the cached choice"
start_blkfs "[mount]
transport = auto

$DEV"
assert_eq "auto_choice" "$choice" "$(tfield auto_choice)"
assert_eq "auto_probe" cached "$(tfield auto_probe)"
assert_eq "transport" "$choice" "$(tfield transport)"
grep -q "transport = auto: the transport probe (transport_probe = boot) chose $choice (ring/dev: cached)" "$LOG" ||
	fail "the log does not say: $(grep transport "$LOG")"
watchdog 60 "$MNT" "dd over the chosen transport" \
	dd if=/dev/zero of="$MNT/r" bs=4K count=256 oflag=direct conv=notrunc,nocreat status=none
stop_blkfs

info "a bad cache file: the mount measures again and rewrites it"
echo garbage >"$CACHE"
start_blkfs "[mount]
transport = auto

$DEV"
ap=$(tfield auto_probe)
[[ $ap =~ ^[0-9]+\.[0-9]{3},[0-9]+\.[0-9]{3},[0-9]+\.[0-9]{3}$ ]] || fail "bad cache: auto_probe $ap"
assert_eq "bad cache: auto_choice" "$(awk '$1 == "choice" { print $2 }' "$CACHE")" "$(tfield auto_choice)"
assert_eq "bad cache: transport" "$(tfield auto_choice)" "$(tfield transport)"
assert_eq "bad cache: rewritten" "blkfs-transport-probe 1" "$(head -n 1 "$CACHE")"
info "  measured again: ring/dev $ap, $(tfield auto_choice)"
stop_blkfs
nothing_left

# ---------------------------------------------------------------------------
info "a worker that fails with its mount live, one that hangs: the watchdog cleans up"
for how in fail hang; do
	rc=0
	t0=$SECONDS
	OUT=$(BLKFS_TPROBE_TEST=$how timeout -k 5 60 "$BLKFS" probe-transport 2>&1) || rc=$?
	assert_eq "$how: exit" 1 "$rc"
	case $how in
	fail) grep -qF "made to fail by BLKFS_TPROBE_TEST" <<<"$OUT" || fail "$how: $OUT" ;;
	hang) grep -qF "not done within the watchdog's" <<<"$OUT" || fail "$how: $OUT" ;;
	esac
	wait_until 30 "$how: the probe's daemons gone" no_pids_matching "$BLKFS_RUNDIR/probe."
	nothing_left
	info "  $how: $OUT ($((SECONDS - t0)) s)"
done

info "transport_probe = always with a probe that fails: the ring, and the log says why"
write_conf "[mount]
transport = auto
transport_probe = always

$DEV"
new_mountpoint
_MNTS+=("$MNT")
BLKFS_TPROBE_TEST=fail _mount_blkfs
assert_eq "failed probe: auto_choice" uring "$(tfield auto_choice)"
assert_eq "failed probe: transport" uring "$(tfield transport)"
[[ $(tfield auto_probe) == failed:* ]] || fail "failed probe: auto_probe $(tfield auto_probe)"
grep -q 'warning: transport = auto: the transport probe failed (probe failed: .*made to fail by BLKFS_TPROBE_TEST.*): FUSE over io_uring, as without a probe' "$LOG" ||
	fail "failed probe: the log: $(grep transport "$LOG")"
stop_blkfs
nothing_left

# ---------------------------------------------------------------------------
info "transport_probe = off: the ring whenever offered"
start_blkfs "[mount]
transport = auto
transport_probe = off

$DEV"
assert_eq "off: auto_choice" uring "$(tfield auto_choice)"
assert_eq "off: auto_probe" off "$(tfield auto_probe)"
assert_eq "off: transport" uring "$(tfield transport)"
stop_blkfs

start_blkfs "[mount]
transport = dev

$DEV"
assert_eq "dev: auto_choice" none "$(tfield auto_choice)"
stop_blkfs

# ---------------------------------------------------------------------------
info "a bad transport_probe: FILE:LINE: transport_probe:"
write_conf "[mount]
transport = auto
transport_probe = sometimes

$DEV"
new_mountpoint
rc=0
out=$(timeout 30 "$BLKFS" mount "$MNT" -c "$CONF" 2>&1) || rc=$?
if is_mounted "$MNT"; then
	abort_fuse "$MNT"
	umount -l "$MNT"
	fail "a bad transport_probe mounted"
fi
assert_eq "bad value: exit" 1 "$rc"
grep -qF "$CONF:3: transport_probe: sometimes is not a choice (allowed: boot, always, off)" <<<"$out" ||
	fail "bad value: $out"
info "  $out"
info "all transport probe cases passed"
