#!/usr/bin/env bash
# dd_basic.sh: dd at bs 512, 4K, 1M and 16M, odd block sizes, unaligned
# offsets and lengths (seek_bytes/skip_bytes/count_bytes), the last bytes of
# the device; the same commands build a reference image in a plain file and
# every device must equal it byte for byte, read back with several block
# sizes and at unaligned ranges. Geometries 512/4096 and 4096/4096, forced
# 512-byte cache blocks, and a mount with an 8 MiB cache so eviction and
# writeback happen in the middle of the test. The checks are suite.sh's
# suite_dd, which aio_suite.sh and nbd_suite.sh run on their backends too.
# BLKFS_DD_QUICK=1 leaves out the small-cache mount (uring_suite.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=suite.sh
. "$(dirname "$0")/suite.sh"
require_root
require_fuse
require_blkfs
require dd cmp stat truncate

SIZE=$((64 << 20))
src=$TDIR/src
mkdata "$src" $((40 << 20))

ref=$TDIR/ref
suite_ref_new

start_blkfs "[device g512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device g4k]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096

[device f512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
cache_block_size = 512"
suite_dd g512 "$MNT/g512"
suite_dd g4k "$MNT/g4k"
suite_dd f512 "$MNT/f512"
stop_blkfs "$MNT"
[ "${BLKFS_DD_QUICK:-0}" != 1 ] || exit 0

info "small cache: 8 MiB for 64 MiB of writes"
start_blkfs "[cache]
size = 8M
folio_size = 64K

[device s512]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096

[device s4k]
backend = ram
size = 64M
logical_block_size = 4096
physical_block_size = 4096
max_io = 128K"
suite_dd s512 "$MNT/s512"
suite_dd s4k "$MNT/s4k"
# Once more after the other device pushed everything out of the cache.
cmp "$ref" "$MNT/s512" || fail "s512 differs after eviction"
stop_blkfs "$MNT"
