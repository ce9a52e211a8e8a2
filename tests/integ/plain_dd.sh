#!/usr/bin/env bash
# plain_dd.sh: a plain `dd of=` (no conv=notrunc), `cat >` and `cp` onto a
# 1 GiB device: O_TRUNC on open is ignored, the size stays, the bytes land,
# and nothing past what was written changes. Verified byte for byte over
# the whole device against a reference image.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp stat head truncate cp

start_blkfs "[device ram0]
backend = ram
size = 1G
logical_block_size = 512
physical_block_size = 4096"
dev=$MNT/ram0
size=$((1 << 30))
[ -f "$dev" ] || fail "$dev is not a regular file"
assert_eq "st_size of $dev" "$size" "$(stat -c %s "$dev")"

data=$TDIR/data
mkdata "$data" $((64 << 20))
ref=$TDIR/ref
cp "$data" "$ref"
truncate -s "$size" "$ref"

info "plain dd of= 64 MiB, bs=1M"
assert_live "$MNT"
dd if="$data" of="$dev" bs=1M status=none || fail "plain dd of=$dev failed"
assert_eq "st_size after plain dd" "$size" "$(stat -c %s "$dev")"
cmp -n $((64 << 20)) "$data" "$dev" || fail "data differs after plain dd"
assert_zero "$dev" $((64 << 20)) $((16 << 20))
assert_zero "$dev" $((size - (1 << 20))) $((1 << 20))

info "a shorter plain dd over the start keeps the rest (no truncation)"
small=$TDIR/small
mkdata "$small" $(((1 << 20) + 4096 + 123))
assert_live "$MNT"
dd if="$small" of="$dev" bs=1M status=none || fail "second plain dd failed"
dd if="$small" of="$ref" bs=1M conv=notrunc status=none
assert_eq "st_size after second dd" "$size" "$(stat -c %s "$dev")"
cmp_range "$ref" 0 "$dev" 0 $((64 << 20))

info "plain dd with conv=fsync at a 1M seek (with notrunc, as dd needs for a regular file)"
assert_live "$MNT"
dd if="$data" of="$dev" bs=1M seek=100 count=8 conv=fsync,notrunc status=none ||
	fail "dd seek=100 conv=fsync failed"
dd if="$data" of="$ref" bs=1M seek=100 count=8 conv=notrunc status=none

info "cat > device (O_WRONLY|O_CREAT|O_TRUNC)"
mkdata "$small" 333333
assert_live "$MNT"
cat "$small" >"$dev" || fail "cat > $dev failed"
dd if="$small" of="$ref" conv=notrunc status=none
assert_eq "st_size after cat >" "$size" "$(stat -c %s "$dev")"

info "cp onto the device"
mkdata "$small" $((2 << 20))
assert_live "$MNT"
cp "$small" "$dev" || fail "cp onto $dev failed"
dd if="$small" of="$ref" conv=notrunc status=none
assert_eq "st_size after cp" "$size" "$(stat -c %s "$dev")"

info "whole device against the reference"
cmp "$ref" "$dev" || fail "device differs from the reference image"
assert_eq "st_size at the end" "$size" "$(stat -c %s "$dev")"
stop_blkfs "$MNT"
