# shellcheck shell=bash
# tests/ceph/rbd.bash - sourced by tests/integ/rbd_*.sh after lib.sh: a
# throw-away Ceph cluster (tests/ceph/cluster) in the test's $TDIR, stopped
# by the EXIT trap before lib.sh's own cleanup runs, also when the test
# fails. Skips (77) only when the Ceph binaries are missing.
#
#   rbd_require                 skip unless ceph-mon, ceph-osd, ceph, rbd are there
#   rbd_cluster_start           start it; exports CEPH_CONF, sets CEPH_DIR, OSD_PID
#   rbd_cluster_stop            stop it now (the trap does it otherwise)
#   rbd_cmd WHAT ARGS...        rbd ARGS, or fail; a hang (120 s) fails with
#                               the cluster's state (rbd_diag)
#   rbd_create IMAGE SIZE       rbd create --size SIZE rbd/IMAGE, or fail
#   rbd_conf IMAGE [DEVICE_LINES [CACHE_LINES]]
#                               a config: [cache] of $RBD_CACHE_SIZE (32M) with
#                               CACHE_LINES, [device d] on rbd/IMAGE with
#                               DEVICE_LINES (pool on line 6, image 7, conf 8)
#   rbd_export IMAGE FILE       the image as the cluster has it, or fail
#   rbd_image_size IMAGE        its size in bytes (rbd info)

_CEPH_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CEPH_CLUSTER=$_CEPH_LIB_DIR/cluster
CEPH_DIR=
OSD_PID=

rbd_require() {
	require ceph-mon ceph-osd ceph rbd
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
		"$CEPH_CLUSTER" stop "$CEPH_DIR" || echo "rbd.bash: stopping the cluster in $CEPH_DIR failed" >&2
	fi
	(exit "$rc")
	_cleanup
}

rbd_cluster_start() {
	local out t0=$SECONDS
	CEPH_DIR=$TDIR/ceph
	trap _rbd_trap EXIT
	out=$(BLKFS_CEPH_MEMSTORE=${BLKFS_CEPH_MEMSTORE:-768M} "$CEPH_CLUSTER" start "$CEPH_DIR") ||
		fail "the Ceph cluster did not start"
	export CEPH_CONF=$CEPH_DIR/ceph.conf
	# shellcheck disable=SC2034 # for the tests (the outage)
	OSD_PID=$(cat "$CEPH_DIR/osd.0.pid")
	info "ceph cluster up in $((SECONDS - t0)) s: ${out##*# }"
}

rbd_cluster_stop() {
	[ -n "$CEPH_DIR" ] || return 0
	"$CEPH_CLUSTER" stop "$CEPH_DIR"
	CEPH_DIR=
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
	rbd_cmd "rbd create" create --size "$2" "rbd/$1"
}

rbd_conf() {
	printf '[cache]\nsize = %s\n%s\n[device d]\nbackend = rbd\npool = rbd\nimage = %s\nconf = %s\n%s\n' \
		"${RBD_CACHE_SIZE:-32M}" "${3:-}" "$1" "$CEPH_CONF" "${2:-}"
}

rbd_image_size() {
	rbd info --format json "rbd/$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["size"])'
}
