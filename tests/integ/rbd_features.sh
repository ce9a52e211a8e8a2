#!/usr/bin/env bash
# integ-timeout: 600
# rbd_features.sh: what the rbd backend adds to the suite, on a throw-away
# Ceph cluster this test starts (tests/ceph/cluster, stopped at exit), never
# the runner's shared one: steps 2 and 3 kill -9
# blkfs, leaving a dead client's watch and lock (3's break_lock blocklists
# the dead holder, cluster-wide):
#  1. bad config fails `blkfs check` and `blkfs mount` within 10 s, with
#     a message naming the key and the cause: no pool key, no image key, no
#     such pool, no such image, a conf that does not exist, a keyring that
#     does not exist, a monitor that does not answer (timeout = 2s),
#     create = yes without size; a timeout below 30 s is taken with a
#     warning that says what it costs;
#  2. acknowledged fsyncs are in the image (rbd export) after kill -9 of
#     blkfs, with rbd_cache off (the default) and on; two fsyncs, since
#     librbd's cache stays writethrough until the first flush, so only the
#     second one's data went through its writeback;
#  3. the exclusive lock: a second opener is refused naming the holder;
#     a second blkfs with break_lock = yes is refused too while the holder
#     lives (it still watches the image), and the holder keeps its lock and
#     its writes; kill -9 of the holder under crash_writer (a logging
#     writer): a new mount is refused while the dead holder's lock is
#     there; with break_lock = yes it is refused, saying why, while the OSD
#     still keeps the dead holder's watch (osd client watch timeout, 10 s on
#     tests/ceph/cluster), and succeeds once the watch is gone; every fsync
#     the writer got acknowledged is in the image (checked in an `rbd
#     export` and through the new mount);
#  4. (the OSD stopped under a writer: tests/integ/rbd_outage.sh)
#  5. a power cut through the powerloss filter over rbd under crash_writer:
#     after the restart every record an fsync acknowledged before the cut
#     is on the device, through blkfs and in the image (rbd export);
#  6. the other keys: create = yes makes the image with `size`; a
#     read-only mount (-o ro) reads, refuses writes and takes no lock;
#     exclusive = no lets two mounts share an image; an image without the
#     exclusive-lock feature opens with a warning; namespace = NS opens an
#     image in that namespace of the pool.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=../ceph/rbd.bash
. "$(dirname "$0")/../ceph/rbd.bash"
require_root
require_fuse
require_blkfs
require_helper crash_writer
rbd_require
require dd cmp

M=$((1 << 20))
src=$TDIR/src
mkdata "$src" $((16 * M))

rbd_cluster_start own
img=$(rbd_name img)
rbd_create "$img" 64M

# ---------------------------------------------------------------- 1
# bad CONFIG_BODY WANT...: blkfs check fails within 10 s, saying every WANT
# (60 s bounds a hang, which is then said as such).
bad() {
	local body=$1 out rc t0=$SECONDS w
	shift
	printf '%s\n' "$body" >"$TDIR/bad.conf"
	out=$(timeout 60 "$BLKFS" check -c "$TDIR/bad.conf" 2>&1) && rc=0 || rc=$?
	[ "$rc" -ne 0 ] || fail "blkfs check took a bad config: $body"
	[ "$rc" -ne 124 ] || fail "blkfs check of a bad config hung for 60 s: $body"
	[ $((SECONDS - t0)) -le 10 ] ||
		fail "blkfs check took $((SECONDS - t0)) s to refuse a bad config (at most 10): $body"
	for w in "$@"; do
		case $out in
		*"$w"*) ;;
		*) fail "blkfs check does not say '$w' ($((SECONDS - t0)) s): $out" ;;
		esac
	done
	info "refused in $((SECONDS - t0)) s: $(printf '%s\n' "$out" | grep -m1 -F -- "$1")"
}

info "1. bad config"
bad "$(rbd_conf "$img" | grep -v '^pool')" "bad.conf:" "pool: missing"
bad "$(rbd_conf "$img" | grep -v '^image')" "image: missing"
bad "$(rbd_conf "$img" | sed 's/^pool = rbd/pool = nopool/')" "bad.conf:6: pool: nopool: no such pool"
nope=$(rbd_name nope)
bad "$(rbd_conf "$nope")" "bad.conf:7: image: $nope in pool rbd: no such image"
bad "$(rbd_conf "$img" | sed "s|^conf = .*|conf = $TDIR/none.conf|")" \
	"bad.conf:8: conf: $TDIR/none.conf: No such file or directory"
bad "$(rbd_conf "$img" "keyring = $TDIR/none.keyring")" \
	"bad.conf:9: keyring: $TDIR/none.keyring: No such file or directory"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
sed "s|^mon host = .*|mon host = [v2:127.0.0.1:$port]|" "$CEPH_CONF" >"$TDIR/dead.conf"
bad "$(rbd_conf "$img" 'timeout = 2s' | sed "s|^conf = .*|conf = $TDIR/dead.conf|")" \
	"conf: connecting to the cluster of $TDIR/dead.conf: Connection timed out" "no monitor answered"
bad "$(rbd_conf "$(rbd_name newimg)" 'create = yes')" "size: needed to create rbd/$(rbd_name newimg)"
# a timeout below an OSD failover's time is taken, with a warning; 30 s is not warned about
printf '%s\n' "$(rbd_conf "$img" 'timeout = 5s')" >"$TDIR/short.conf"
out=$(timeout 60 "$BLKFS" check -c "$TDIR/short.conf" 2>&1) || fail "blkfs check refused timeout = 5s: $out"
case $out in
*"timeout = 5s is below 30s"*"OSD failover"*EIO*) ;;
*) fail "timeout = 5s: no warning saying what it costs: $out" ;;
esac
info "timeout = 5s: $(printf '%s\n' "$out" | grep -m1 'timeout = 5s')"
printf '%s\n' "$(rbd_conf "$img" 'timeout = 30s')" >"$TDIR/short.conf"
out=$(timeout 60 "$BLKFS" check -c "$TDIR/short.conf" 2>&1) || fail "blkfs check refused timeout = 30s: $out"
case $out in *"is below 30s"*) fail "timeout = 30s warned about: $out" ;; esac
# the mount itself fails the same way, and leaves nothing mounted
rbd_conf "$nope" >"$TDIR/bad.conf"
new_mountpoint
t0=$SECONDS
out=$(timeout 60 "$BLKFS" mount "$MNT" -c "$TDIR/bad.conf" 2>&1) && fail "blkfs mount took image = $nope"
[ $((SECONDS - t0)) -le 10 ] || fail "blkfs mount took $((SECONDS - t0)) s to refuse image = $nope (at most 10)"
case $out in *"image: $nope in pool rbd: no such image"*) ;; *) fail "blkfs mount: $out" ;; esac
! is_mounted "$MNT" || fail "a failed mount left $MNT mounted"

# ---------------------------------------------------------------- 2
for cache in no yes; do
	info "2. rbd_cache = $cache: acknowledged fsyncs survive kill -9"
	dur=$(rbd_name "dur-$cache")
	rbd_create "$dur" 64M
	start_blkfs "$(rbd_conf "$dur" "rbd_cache = $cache")"
	assert_eq "rbd_cache in blkfs_stat" "$([ $cache = yes ] && echo 1 || echo 0)" \
		"$(awk '$1 == "rbd_cache" { print $2 }' "$MNT/.sys/d/blkfs_stat")"
	ddev if="$src" of="$MNT/d" bs=1M count=8 conv=notrunc,fsync
	# after the first flush librbd's cache is writeback (rbd_cache = yes):
	# this fsync's data is what it holds until the flush
	ddev if="$src" of="$MNT/d" bs=1M count=4 skip=8 seek=8 conv=notrunc,fsync
	# written after the fsyncs, never acknowledged: may be lost, must not matter
	ddev if=/dev/zero of="$MNT/d" bs=4K count=8 seek=4000 conv=notrunc
	kill9_blkfs "$MNT"
	rbd_export "$dur" "$TDIR/export.img"
	cmp -n $((12 * M)) "$src" "$TDIR/export.img" ||
		fail "rbd_cache = $cache: data acknowledged by fsync is not in the image after kill -9"
done

# ---------------------------------------------------------------- 3
info "3. the exclusive lock"
lock=$(rbd_name lock)
rbd_create "$lock" 64M
start_blkfs "$(rbd_conf "$lock")"
lmnt=$MNT
out=$(timeout 60 "$BLKFS" check -c "$CONF" 2>&1) && fail "a second opener of rbd/$lock was let in: $out"
case $out in
*"image: rbd/$lock is locked by client."[0-9]*" at "[0-9]*"break_lock = yes"*) ;;
*) fail "the second opener's refusal does not name the holder and break_lock: $out" ;;
esac
info "second opener: ${out%%$'\n'*}"
# break_lock = yes takes no lock from a live holder: a second blkfs is
# refused naming it, and the holder keeps its lock (it is not blocklisted:
# its writes still reach the image)
CONF_NOBREAK=$CONF
rbd_conf "$lock" 'break_lock = yes' >"$TDIR/break.conf"
lmnt2=$TDIR/mnt-break
mkdir -p "$lmnt2"
_MNTS+=("$lmnt2")
out=$(timeout 60 "$BLKFS" mount "$lmnt2" -c "$TDIR/break.conf" 2>&1) &&
	fail "break_lock = yes took the lock of a live holder: a second blkfs mounted rbd/$lock: $out"
case $out in
*"image: rbd/$lock is locked by client."[0-9]*"still watches the image"*"not broken"*) ;;
*) fail "the refusal of break_lock against a live holder does not name it and say why: $out" ;;
esac
! is_mounted "$lmnt2" || fail "a refused mount left $lmnt2 mounted"
info "break_lock against a live holder: $(printf '%s\n' "$out" | grep -m1 'locked by')"
ddev if="$src" of="$lmnt/d" bs=1M count=2 conv=notrunc,fsync
rbd_export "$lock" "$TDIR/export.img"
cmp -n $((2 * M)) "$src" "$TDIR/export.img" ||
	fail "the live holder's fsync after the refused break_lock is not in the image"
dd if="$lmnt/d" of="$TDIR/base" bs=1M count=32 status=none
"$BLKFS_TESTBIN/crash_writer" write "$lmnt/d" 7 $((32 * M)) "$TDIR/writer.log" 2>"$TDIR/writer.err" &
wpid=$!
_BGPIDS+=("$wpid")
wait_until 60 "crash_writer acknowledged 20 fsyncs" \
	sh -c "[ \$(grep -c '^synced' '$TDIR/writer.log' 2>/dev/null || echo 0) -ge 20 ]"
kill9_blkfs "$lmnt"
killed=$SECONDS
wait "$wpid" || fail "crash_writer exited $?"
acked=$(awk '/^synced/ { n = $2 } END { print n + 0 }' "$TDIR/writer.log")
info "killed the holder after $acked acknowledged records"
out=$(timeout 60 "$BLKFS" mount "$lmnt" -c "$CONF" 2>&1) && fail "a mount took the dead holder's lock without break_lock: $out"
case $out in *"is locked by "*"break_lock = yes"*) ;; *) fail "refusal: $out" ;; esac
! is_mounted "$lmnt" || fail "a refused mount left $lmnt mounted"
# break_lock = yes while the OSD still keeps the dead holder's watch (10 s
# after its last ping on this cluster): refused, saying why and how long
write_conf "$TDIR/break.conf"
out=$(timeout 60 "$BLKFS" mount "$lmnt" -c "$CONF" 2>&1) && rc=0 || rc=$?
if [ "$rc" -eq 0 ]; then
	# only when the watch could have lapsed already (a slow machine)
	[ $((SECONDS - killed)) -ge 10 ] ||
		fail "break_lock broke a lock whose holder still watched the image ($((SECONDS - killed)) s after its kill): $out"
	info "break_lock: the dead holder's watch was gone already ($((SECONDS - killed)) s after the kill)"
else
	case $out in
	*"still watches the image"*"osd_client_watch_timeout"*) ;;
	*) fail "break_lock against a holder that still watches: the refusal does not say why: $out" ;;
	esac
	info "break_lock $((SECONDS - killed)) s after the kill: $(printf '%s\n' "$out" | grep -m1 'locked by')"
	! is_mounted "$lmnt" || fail "a refused mount left $lmnt mounted"
	# the watch lapses 10 s after the last ping; 60 s leaves room for a slow OSD
	wait_until 60 "the OSD to drop the dead holder's watch" \
		sh -c "timeout 30 rbd status 'rbd/$lock' | grep -q 'Watchers: none'"
	info "the dead holder's watch was gone $((SECONDS - killed)) s after the kill"
	remount_blkfs "$lmnt"
fi
rbd_export "$lock" "$TDIR/export.img"
out=$("$BLKFS_TESTBIN/crash_writer" verify "$TDIR/export.img" 7 $((32 * M)) "$TDIR/writer.log" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "acknowledged records are missing from the image after kill -9"; }
info "rbd export: $out"
is_mounted "$lmnt" || remount_blkfs "$lmnt"
assert_eq "rbd_locks_broken" 1 "$(awk '$1 == "rbd_locks_broken" { print $2 }' "$lmnt/.sys/d/blkfs_stat")"
out=$("$BLKFS_TESTBIN/crash_writer" verify "$lmnt/d" 7 $((32 * M)) "$TDIR/writer.log" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "acknowledged records are missing through the new mount"; }
info "through blkfs after break_lock: $out"
stop_blkfs "$lmnt"
CONF=$CONF_NOBREAK
# released at umount: the next opener needs no break
out=$(timeout 60 "$BLKFS" check -c "$CONF" 2>&1) || fail "rbd/$lock still locked after blkfs umount: $out"

# ---------------------------------------------------------------- 4
# The OSD stopped under a writer: rbd_outage.sh (its own cluster, in make test).

# ---------------------------------------------------------------- 5
info "5. a power cut (powerloss filter) over rbd"
plimg=$(rbd_name pl)
rbd_create "$plimg" 64M
start_blkfs "$(rbd_conf "$plimg" "filters = powerloss
powerloss.seed = 11" "dirty_background = 64K
dirty_expire = 100ms")"
pl=$MNT/.sys/d/powerloss
dd if="$MNT/d" of="$TDIR/base" bs=1M count=32 status=none
rm -f "$TDIR/writer.log"
"$BLKFS_TESTBIN/crash_writer" write "$MNT/d" 11 $((32 * M)) "$TDIR/writer.log" 2>"$TDIR/writer.err" &
wpid=$!
_BGPIDS+=("$wpid")
wait_until 60 "crash_writer acknowledged 20 fsyncs" \
	sh -c "[ \$(grep -c '^synced' '$TDIR/writer.log' 2>/dev/null || echo 0) -ge 20 ]"
# what was acknowledged before the cut (an fsync after it is a lie the cut tells)
acked=$(awk '/^synced/ { n = $2 } END { print n + 0 }' "$TDIR/writer.log")
echo 1 >"$pl/trigger" || fail "powerloss trigger failed"
assert_eq "state after the cut" dark "$(cat "$pl/state")"
kill "$wpid" 2>/dev/null || true
wait "$wpid" 2>/dev/null || true
awk -v a="$acked" '!/^synced/ || $2 <= a' "$TDIR/writer.log" >"$TDIR/writer.cut"
echo 1 >"$pl/restart" || fail "powerloss restart failed"
out=$("$BLKFS_TESTBIN/crash_writer" verify "$MNT/d" 11 $((32 * M)) "$TDIR/writer.cut" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "records acknowledged before the power cut are missing"; }
info "after the cut: $out"
stop_blkfs "$MNT"
rbd_export "$plimg" "$TDIR/export.img"
out=$("$BLKFS_TESTBIN/crash_writer" verify "$TDIR/export.img" 11 $((32 * M)) "$TDIR/writer.cut" "$TDIR/base" 2>&1) ||
	{ printf '%s\n' "$out" >&2; fail "records acknowledged before the power cut are missing from the image"; }

# ---------------------------------------------------------------- 6
info "6. create, read-only, exclusive = no, no exclusive-lock feature, namespace"
made=$(rbd_name made)
start_blkfs "$(rbd_conf "$made" "create = yes
size = 32M")"
ddev if="$src" of="$MNT/d" bs=1M count=4 conv=notrunc,fsync
stop_blkfs "$MNT"
assert_eq "size of the image create = yes made" $((32 * M)) "$(rbd_image_size "$made")"
rbd_export "$made" "$TDIR/export.img"
cmp -n $((4 * M)) "$src" "$TDIR/export.img" || fail "create = yes: the data is not in the image"

# read-only: reads, refuses writes, asks no lock (a writer may open it beside)
start_blkfs "$(rbd_conf "$made")" -o ro
romnt=$MNT
cmp -n $((4 * M)) "$src" "$romnt/d" || fail "read-only: reads differ from the image"
expect_fail dd if=/dev/zero of="$romnt/d" bs=4K count=1 conv=notrunc status=none
out=$(timeout 60 "$BLKFS" check -c "$CONF" 2>&1) || fail "a read-only mount holds the lock: $out"
stop_blkfs "$romnt"

# exclusive = no: two mounts share the image on purpose
start_blkfs "$(rbd_conf "$made" 'exclusive = no')"
sh1=$MNT
start_blkfs "$(rbd_conf "$made" 'exclusive = no')"
sh2=$MNT
ddev if="$src" of="$sh1/d" bs=1M count=1 skip=4 seek=4 conv=notrunc,fsync
stop_blkfs "$sh1"
ddev if="$src" of="$sh2/d" bs=1M count=1 skip=5 seek=5 conv=notrunc,fsync
stop_blkfs "$sh2"
rbd_export "$made" "$TDIR/export.img"
cmp -n $((6 * M)) "$src" "$TDIR/export.img" || fail "exclusive = no: the two mounts' writes are not in the image"

# an image without the exclusive-lock feature: opened, with a warning
plain=$(rbd_name plain)
rbd_cmd "rbd create (layering only)" create --size 16M --image-feature layering "rbd/$plain"
rbd_conf "$plain" >"$TDIR/plain.conf"
out=$(timeout 60 "$BLKFS" check -c "$TDIR/plain.conf" 2>&1) || fail "an image without exclusive-lock refused: $out"
case $out in
*"rbd/$plain has no exclusive-lock feature: nothing keeps a second client"*) ;;
*) fail "no warning for an image without exclusive-lock: $out" ;;
esac
start_blkfs "$TDIR/plain.conf"
ddev if="$src" of="$MNT/d" bs=1M count=1 conv=notrunc,fsync
stop_blkfs "$MNT"

# namespace = NS: the image in that namespace of the pool
rbd_cmd "rbd namespace create" namespace create --pool rbd --namespace blkfs-ns
nsimg=$(rbd_name nsimg)
rbd_cmd "rbd create (namespace)" create --size 16M "rbd/blkfs-ns/$nsimg"
start_blkfs "$(rbd_conf "$nsimg" 'namespace = blkfs-ns')"
ddev if="$src" of="$MNT/d" bs=1M count=2 conv=notrunc,fsync
stop_blkfs "$MNT"
rm -f "$TDIR/export.img"
rbd_cmd "rbd export (namespace)" export --no-progress "rbd/blkfs-ns/$nsimg" "$TDIR/export.img"
cmp -n $((2 * M)) "$src" "$TDIR/export.img" || fail "namespace: the data is not in rbd/blkfs-ns/$nsimg"
info "ok"
