# shellcheck shell=bash
# tests/ceph/rbd.bash - sourced by tests/integ/rbd_*.sh after lib.sh: the
# Ceph cluster (tests/ceph/cluster) a test's images live on. Skips (77)
# only when the Ceph binaries are missing.
#
# Shared or own: when the runner (tests/integ/run) has started one cluster
# for the tests whose header says `# integ-needs: ceph`, it exports
# BLKFS_CEPH_DIR=DIR and CEPH_CONF=DIR/ceph.conf; `rbd_cluster_start` then
# uses that cluster and never stops it. Tests may run beside each other on
# it: every image a test makes is named by `rbd_name` (the test's name and
# pid in front), and the EXIT trap removes every image with that prefix
# (snapshots too), also when the test fails, so the pool is left as found.
# Nothing may depend on cluster-wide state others change (`rbd ls` as a
# whole, the blocklist, the OSD's state). Without BLKFS_CEPH_DIR (a test
# run by hand), or with `rbd_cluster_start own` (a test that stops or kills
# the OSD), the test starts its own cluster in $TDIR/ceph, stopped by the
# EXIT trap before lib.sh's own cleanup runs, also when the test fails.
#
#   rbd_require                 skip unless ceph-mon, ceph-osd, ceph, rbd are there
#   rbd_cluster_start [own]     the shared cluster, or its own (always with
#                               `own`); exports CEPH_CONF, sets CEPH_DIR, and
#                               OSD_PID for its own only (empty when shared:
#                               the shared OSD is nobody's to stop)
#   rbd_cluster_stop            stop its own now (the trap does it otherwise)
#   rbd_name NAME               the image name to use for NAME: $RBD_PREFIX$NAME
#   rbd_cmd WHAT ARGS...        rbd ARGS, or fail; a hang (120 s) fails with
#                               the cluster's state (rbd_diag)
#   rbd_create IMAGE SIZE       rbd create --size SIZE rbd/IMAGE, or fail;
#                               IMAGE must be an rbd_name
#   rbd_conf IMAGE [DEVICE_LINES [CACHE_LINES]]
#                               a config: [cache] of $RBD_CACHE_SIZE (32M) with
#                               CACHE_LINES, [device d] on rbd/IMAGE with
#                               DEVICE_LINES (pool on line 6, image 7, conf 8)
#   rbd_export IMAGE FILE       the image as the cluster has it, or fail
#   rbd_image_size IMAGE        its size in bytes (rbd info)

_CEPH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CEPH_CLUSTER=$_CEPH_LIB_DIR/cluster
CEPH_DIR=
CEPH_OWN=0		# 1: CEPH_DIR is this test's own cluster, stopped at exit
OSD_PID=
# Every image of this test starts so: unique among tests running at once.
RBD_PREFIX=$TEST_NAME-$$-

rbd_require() {
	require ceph-mon ceph-osd ceph rbd
}

rbd_name() {
	printf '%s%s\n' "$RBD_PREFIX" "$1"
}

# rbd_remove_own: remove every image named with RBD_PREFIX, snapshots
# first; 1 if one is left. An image a killed client still watches cannot
# be removed until the OSD drops the watch (osd client watch timeout: 10 s
# on tests/ceph/cluster, 30 s by default): retried up to 60 s.
rbd_remove_own() {
	local img left end=$((SECONDS + 60))
	while :; do
		left=
		for img in $(timeout 30 rbd ls rbd 2>/dev/null | grep -F -- "$RBD_PREFIX"); do
			[ "${img#"$RBD_PREFIX"}" != "$img" ] || continue
			timeout 30 rbd snap purge --no-progress "rbd/$img" >/dev/null 2>&1
			timeout 60 rbd rm --no-progress "rbd/$img" >/dev/null 2>&1 || left="$left $img"
		done
		[ -n "$left" ] || return 0
		[ "$SECONDS" -lt "$end" ] || break
		sleep 1
	done
	echo "rbd.bash: could not remove image(s)$left from the shared cluster in $CEPH_DIR" >&2
	return 1
}

_rbd_trap() {
	local rc=$? m
	# the test's set -e must not end the trap at a failed umount: the
	# cluster would be left running and lib.sh's cleanup never run
	set +e
	if [ -n "$CEPH_DIR" ] && [ -d "$CEPH_DIR" ]; then
		# blkfs first, while the cluster still answers its last writes
		for m in "${_MNTS[@]}"; do
			is_mounted "$m" && timeout 30 "$BLKFS" umount "$m" >/dev/null 2>&1
		done
		if [ "$CEPH_OWN" = 1 ]; then
			"$CEPH_CLUSTER" stop "$CEPH_DIR" || echo "rbd.bash: stopping the cluster in $CEPH_DIR failed" >&2
		else
			# the shared cluster stays: leave its pool as found. A
			# daemon still there (a failed umount) would keep its
			# image open: gone first.
			for m in "${_MNTS[@]}"; do
				is_mounted "$m" && abort_fuse "$m"
			done
			[ "${#_PID_OF[@]}" -eq 0 ] || kill_pids "${_PID_OF[@]}"
			[ "${#_BGPIDS[@]}" -eq 0 ] || kill_pids "${_BGPIDS[@]}"
			if ! rbd_remove_own && [ "$rc" -eq 0 ]; then
				echo "FAIL: images left in the shared cluster's pool" >&2
				rc=1
			fi
		fi
	fi
	(exit "$rc")
	_cleanup
}

# rbd_cluster_start [own]: the shared cluster when the runner gave one
# (BLKFS_CEPH_DIR with its ceph.conf) and `own` is not asked; else a new
# one in $TDIR/ceph.
rbd_cluster_start() {
	local out t0=$SECONDS
	trap _rbd_trap EXIT
	if [ "${1:-}" != own ] && [ -n "${BLKFS_CEPH_DIR:-}" ] && [ -f "$BLKFS_CEPH_DIR/ceph.conf" ]; then
		CEPH_DIR=$BLKFS_CEPH_DIR
		CEPH_OWN=0
		export CEPH_CONF=$CEPH_DIR/ceph.conf
		OSD_PID=
		# it must answer: a dead shared cluster fails here, said so
		timeout 60 rbd ls rbd >/dev/null 2>"$TDIR/rbd.out" ||
			{ cat "$TDIR/rbd.out" >&2; rbd_diag; fail "the shared Ceph cluster in $CEPH_DIR does not answer"; }
		info "ceph: the shared cluster in $CEPH_DIR; images $RBD_PREFIX*"
		return 0
	fi
	CEPH_DIR=$TDIR/ceph
	CEPH_OWN=1
	out=$(BLKFS_CEPH_MEMSTORE=${BLKFS_CEPH_MEMSTORE:-768M} "$CEPH_CLUSTER" start "$CEPH_DIR") ||
		fail "the Ceph cluster did not start"
	export CEPH_CONF=$CEPH_DIR/ceph.conf
	# shellcheck disable=SC2034 # for the tests (the outage)
	OSD_PID=$(cat "$CEPH_DIR/osd.0.pid")
	info "ceph cluster up in $((SECONDS - t0)) s: ${out##*# }"
}

rbd_cluster_stop() {
	[ -n "$CEPH_DIR" ] && [ "$CEPH_OWN" = 1 ] || return 0
	"$CEPH_CLUSTER" stop "$CEPH_DIR"
	CEPH_DIR=
	CEPH_OWN=0
}

# rbd_diag: what the cluster says about itself, for a client command that
# hung (each part bounded: the cluster may be what hangs).
rbd_diag() {
	local d=$CEPH_DIR
	echo "--- rbd.bash: the cluster in $d"
	timeout 10 ceph -s 2>&1
	timeout 10 ceph health detail 2>&1
	timeout 10 ceph osd dump 2>&1 | grep -E '^(epoch|osd\.|blocklist)'
	timeout 10 ceph --admin-daemon "$d/osd.0.asok" dump_ops_in_flight 2>&1 | head -n 60
	timeout 10 ceph --admin-daemon "$d/osd.0.asok" dump_blocked_ops 2>&1 | head -n 40
	grep -v -e '^$' "$d/osd.0.log" 2>/dev/null | tail -n 30
	grep -v -e '^$' "$d/mon.a.log" 2>/dev/null | tail -n 15
	echo "--- rbd.bash: end of the cluster's state"
} >&2

# rbd_cmd WHAT ARGS...: an rbd command bounded to 120 s; a hang fails the
# test with the cluster's state (rbd_diag) instead of running into the
# test's own limit with nothing said.
rbd_cmd() {
	local what=$1 rc=0
	shift
	timeout 120 rbd "$@" >"$TDIR/rbd.out" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] && return 0
	cat "$TDIR/rbd.out" >&2
	[ "$rc" -ne 124 ] || { rbd_diag; fail "$what: rbd $* hung for 120 s (the cluster's state above)"; }
	fail "$what: rbd $* failed ($rc)"
}

# rbd_export IMAGE FILE: the image as the cluster has it, without blkfs.
rbd_export() {
	rm -f "$2"
	rbd_cmd "rbd export" export --no-progress "rbd/$1" "$2"
}

rbd_create() {
	case $1 in "$RBD_PREFIX"?*) ;; *) fail "rbd_create $1: not a name from rbd_name (unique to this test)" ;; esac
	rbd_cmd "rbd create" create --size "$2" "rbd/$1"
}

rbd_conf() {
	printf '[cache]\nsize = %s\n%s\n[device d]\nbackend = rbd\npool = rbd\nimage = %s\nconf = %s\n%s\n' \
		"${RBD_CACHE_SIZE:-32M}" "${3:-}" "$1" "$CEPH_CONF" "${2:-}"
}

rbd_image_size() {
	rbd info --format json "rbd/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])'
}
