#!/usr/bin/env bash
# fio_verify.sh: fio random writes with 4 jobs and --verify=crc32c, each job
# on its own region of the device: ioengine=psync (buffered) and libaio
# (O_DIRECT, iodepth 16, 4K-64K blocks), through a 16 MiB cache so most data
# is evicted and read back from the backend (4 jobs x 12 MiB, three times the
# cache); then a --verify_only pass over the psync regions after the libaio
# jobs ran. fio's exit status decides.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio

start_blkfs "[cache]
size = 16M

[device ram0]
backend = ram
size = 256M
logical_block_size = 512
physical_block_size = 4096"
dev=$MNT/ram0
# 12 MiB a job: 48 MiB is three times the cache, as much eviction as the
# check needs (24 MiB a job only doubled the time).
MB=${BLKFS_FIO_VERIFY_MB:-12}
case $MB in [1-9] | [12][0-9] | 3[0-2]) ;; *) fail "BLKFS_FIO_VERIFY_MB=$MB (allowed: 1 to 32)" ;; esac
cd "$TDIR"

# fio_run NAME ARGS...: run fio, show its summary, fail on a non-zero exit.
fio_run() {
	local name=$1 rc
	shift
	assert_live "$MNT"
	fio --name="$name" --filename="$dev" --rw=randwrite --numjobs=4 \
		--size="${MB}M" --offset_increment=32M --verify=crc32c --verify_fatal=1 \
		--do_verify=1 --fallocate=none --verify_state_save=0 --randrepeat=1 \
		--group_reporting --output="$TDIR/$name.out" "$@" && rc=0 || rc=$?
	grep -E 'err=|WRITE:|READ:|verify' "$TDIR/$name.out" | sed 's/^/    /' || true
	if [ "$rc" -ne 0 ]; then
		cat "$TDIR/$name.out"
		fail "fio $name exited $rc"
	fi
	grep -q 'err= 0' "$TDIR/$name.out" || fail "fio $name: no 'err= 0' in its output"
}

info "psync, buffered, 4 jobs x $MB MiB, bs=4k"
fio_run psync --ioengine=psync --bs=4k --offset=0

info "libaio, O_DIRECT, 4 jobs x $MB MiB, bs 4k-64k, iodepth 16"
fio_run libaio --ioengine=libaio --direct=1 --iodepth=16 --bsrange=4k-64k \
	--blockalign=4k --offset=128M

info "verify_only over the psync regions"
fio_run psync --ioengine=psync --bs=4k --offset=0 --verify_only

stop_blkfs "$MNT"
