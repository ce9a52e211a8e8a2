#!/usr/bin/env bash
# blockdev.sh: block-device semantics with exact errnos (bdev_check prints
# each call's result): the directory shows exactly the configured devices as
# regular files with st_size = device size and st_blksize = the cache block;
# O_TRUNC is ignored; reads at or past the end return 0 bytes, a read
# crossing it is shortened; a write starting at or past the end fails with
# ENOSPC, one crossing it is shortened; truncate to the own size succeeds,
# any other size is EINVAL; creating, removing or renaming entries is EPERM;
# fallocate PUNCH_HOLE|KEEP_SIZE discards and ZERO_RANGE writes zeros, both
# also over dirty cached data; misaligned ZERO_RANGE is EINVAL.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require dd cmp stat truncate ls

# entries: the names in $MNT, sorted, dot files too.
entries() {
	local f out=()
	for f in "$MNT"/* "$MNT"/.[!.]*; do
		[ -e "$f" ] && out+=("${f##*/}")
	done
	echo "${out[*]}"
}

S=$((8 << 20))
start_blkfs "[device ram0]
backend = ram
size = 8M
logical_block_size = 512
physical_block_size = 4096

[device odd]
backend = ram
size = $((S + 512))
logical_block_size = 512
physical_block_size = 512

[device d4k]
backend = ram
size = 8M
logical_block_size = 4096
physical_block_size = 16384

[device forced]
backend = ram
size = 8M
logical_block_size = 512
physical_block_size = 4096
cache_block_size = 1024

[device d64k]
backend = ram
size = 8M
logical_block_size = 64K
physical_block_size = 64K"
dev=$MNT/ram0

info "directory listing and stat"
assert_eq "entries" "d4k d64k forced odd ram0" "$(entries)"
for d in ram0 odd d4k forced d64k; do
	assert_eq "$d type" "regular file" "$(stat -c %F "$MNT/$d")"
done
assert_eq "ram0 st_size" "$S" "$(stat -c %s "$MNT/ram0")"
assert_eq "odd st_size" "$((S + 512))" "$(stat -c %s "$MNT/odd")"
assert_eq "d4k st_size" "$S" "$(stat -c %s "$MNT/d4k")"
assert_eq "ram0 st_blksize (cache block)" 4096 "$(stat -c %o "$MNT/ram0")"
assert_eq "odd st_blksize (cache block)" 512 "$(stat -c %o "$MNT/odd")"
assert_eq "d4k st_blksize (cache block)" 4096 "$(stat -c %o "$MNT/d4k")"
assert_eq "forced st_blksize (cache_block_size = 1024)" 1024 "$(stat -c %o "$MNT/forced")"
assert_eq "d64k st_blksize (cache block)" 65536 "$(stat -c %o "$MNT/d64k")"
assert_eq "d64k st_size" "$S" "$(stat -c %s "$MNT/d64k")"
chk "$S" "$dev" size
chk 4096 "$dev" blksize

info "never-written blocks read as zeros"
chk OK "$dev" expect 0 "$S" 0

info "O_TRUNC on open is ignored"
chk OK "$dev" fill 0 65536 171
chk "$S" -t "$dev" size
chk OK -t "$dev" expect 0 65536 171
chk "$S" "$dev" size
assert_eq "st_size after O_TRUNC" "$S" "$(stat -c %s "$dev")"

info "reads at, past and across the end"
chk 0 "$dev" pread "$S" 512
chk 0 "$dev" pread $((S + 1)) 1
chk 0 "$dev" pread $((S + (1 << 30))) 4096
chk 512 "$dev" pread $((S - 512)) 4096
chk 1 "$dev" pread $((S - 1)) 100
chk 0 -r "$dev" pread "$S" 1
chk 512 -d "$dev" pread $((S - 512)) 4096

info "writes at, past and across the end"
chk ENOSPC "$dev" pwrite "$S" 512
chk ENOSPC "$dev" pwrite "$S" 1
chk ENOSPC "$dev" pwrite $((S + 4096)) 4096
chk ENOSPC "$dev" pwrite $((S + (1 << 40))) 1
chk 512 "$dev" pwrite $((S - 512)) 1024 7
chk 1 "$dev" pwrite $((S - 1)) 4096 9
chk "OK OK" "$dev" expect $((S - 512)) 511 7 expect $((S - 1)) 1 9
chk ENOSPC -d "$dev" pwrite "$S" 512
chk 512 -d "$dev" pwrite $((S - 512)) 1024 11
chk OK -d "$dev" expect $((S - 512)) 512 11
chk "$S" "$dev" size
assert_live "$MNT"
expect_errno ENOSPC dd if=/dev/zero of="$dev" bs=512 count=1 seek=$((S / 512)) conv=notrunc,nocreat status=none
chk 512 "$MNT/odd" pwrite "$S" 4096 13
chk ENOSPC "$MNT/odd" pwrite $((S + 512)) 1
chk OK "$MNT/odd" expect "$S" 512 13

info "truncate"
chk OK "$dev" truncate "$S"
chk EINVAL "$dev" truncate 0
chk EINVAL "$dev" truncate $((S - 512))
chk EINVAL "$dev" truncate $((S + 4096))
chk EINVAL "$dev" truncate $((S * 2))
expect_errno EINVAL truncate -s 0 "$dev"
expect_errno EINVAL truncate -s 1G "$dev"
truncate -s "$S" "$dev" || fail "truncate -s to the own size failed"
chk "$S" "$dev" size
chk OK "$dev" expect 0 65536 171

info "creating, removing, renaming entries: EPERM"
chk EPERM create "$MNT/new"
chk EPERM mkdir "$MNT/dir"
chk EPERM mknod "$MNT/node"
chk EPERM unlink "$dev"
chk EPERM rename "$dev" "$MNT/ram9"
chk EPERM rename "$dev" "$MNT/odd"
chk EPERM link "$dev" "$MNT/ram1"
chk EPERM symlink ram0 "$MNT/sym"
assert_eq "entries afterwards" "d4k d64k forced odd ram0" "$(entries)"
chk "$S" "$dev" size

info "fallocate PUNCH_HOLE|KEEP_SIZE discards"
chk "OK OK" "$dev" fill $((1 << 20)) $((1 << 20)) 170 fsync
chk OK "$dev" punch $(((1 << 20) + 65536)) 131072
chk OK "$dev" expect $((1 << 20)) 65536 170
chk OK "$dev" expect $(((1 << 20) + 65536)) 131072 0
chk OK "$dev" expect $(((1 << 20) + 196608)) $(((1 << 20) - 196608)) 170
chk OK -d "$dev" expect $(((1 << 20) + 65536)) 131072 0
chk "$S" "$dev" size
info "punch over dirty cached data (no fsync between)"
chk "OK OK" "$dev" fill $((3 << 20)) 262144 66 punch $(((3 << 20) + 4096)) 8192
chk "OK OK" "$dev" expect $((3 << 20)) 4096 66 expect $(((3 << 20) + 4096)) 8192 0
chk OK "$dev" expect $(((3 << 20) + 12288)) $((262144 - 12288)) 66
chk OK -d "$dev" expect $(((3 << 20) + 4096)) 8192 0
chk OK "$dev" fsync
chk "OK OK" "$dev" expect $(((3 << 20) + 4096)) 8192 0 expect $(((3 << 20) + 12288)) 4096 66

info "fallocate ZERO_RANGE writes zeros"
chk OK "$dev" fill $((5 << 20)) 65536 77
chk OK "$dev" zero $(((5 << 20) + 512)) 1024
chk "OK OK" "$dev" expect $((5 << 20)) 512 77 expect $(((5 << 20) + 512)) 1024 0
chk OK "$dev" expect $(((5 << 20) + 1536)) $((65536 - 1536)) 77
chk OK "$dev" zerokeep $(((5 << 20) + 8192)) 4096
chk "OK OK" "$dev" expect $(((5 << 20) + 8192)) 4096 0 expect $(((5 << 20) + 12288)) 4096 77
chk OK "$dev" fsync
chk OK -d "$dev" expect $(((5 << 20) + 512)) 1024 0
chk EINVAL "$dev" zero $(((5 << 20) + 100)) 512
chk EINVAL "$dev" zero $((5 << 20)) 100
chk EINVAL -d "$MNT/d64k" pwrite 0 4096
chk EINVAL -d "$MNT/d64k" pwrite 4096 65536
chk 65536 -d "$MNT/d64k" pwrite 65536 65536 5
chk OK "$MNT/d64k" expect 65536 65536 5
chk EINVAL "$MNT/d4k" zero 512 4096
chk EINVAL "$MNT/d4k" zero 0 512
chk OK "$dev" expect $((5 << 20)) 512 77
chk "$S" "$dev" size

stop_blkfs "$MNT"
