#!/usr/bin/env bash
# record.sh: the record filter on a mounted ram device (64 MiB, 512/4096).
#  - .sys/r/record/start takes snapshot `base` and starts a dm-log-writes
#    log; dd (O_DIRECT and buffered, conv=fsync), fio randwrite with fsync
#    and marks go in; stop ends it.
#  - The log, read back by a small reader here: the super block (magic,
#    version 1, nr_entries, sectorsize 512), every entry complete, a flush
#    after the last data write, the marks in order with their text; the
#    base snapshot (saved to an image) with the log's writes applied is the
#    device byte for byte.
#  - A mark too long for one sector is EINVAL; a mark with no recording is
#    EBADFD; stat shows the entries.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require dd cmp python3 fio

M=$((1 << 20))
log=$TDIR/r.log

# fails_with MESSAGE CMD...: CMD fails and says MESSAGE (errno names lib.sh lacks).
fails_with() {
	local msg=$1 out
	shift
	if out=$("$@" 2>&1); then
		fail "succeeded, expected '$msg': $*"
	fi
	case $out in *"$msg"*) ;; *) fail "expected '$msg' from: $*; got: $out" ;; esac
}

start_blkfs "[cache]
size = 32M

[device r]
backend = ram
size = 64M
logical_block_size = 512
physical_block_size = 4096
filters = record
record.path = $log"
rec=$MNT/.sys/r/record

info "before the start"
mkdata "$TDIR/pre" $((2 * M))
dd if="$TDIR/pre" of="$MNT/r" bs=1M conv=fsync status=none
fails_with "File descriptor in bad state" bash -c "echo early > '$rec/mark'"
assert_eq "record state" stopped "$(cat "$rec/state")"

info "record: dd, fio, marks"
echo base >"$rec/start"
assert_eq "record state" recording "$(cat "$rec/state")"
mkdata "$TDIR/d1" $((4 * M))
dd if="$TDIR/d1" of="$MNT/r" bs=64K seek=16 oflag=direct conv=fsync,notrunc status=none
echo "committed 1" >"$rec/mark"
dd if="$TDIR/d1" of="$MNT/r" bs=1M seek=20 conv=fsync,notrunc status=none
echo "committed 2" >"$rec/mark"
fio --name=rw --filename="$MNT/r" --rw=randwrite --bs=4k --size=8M --offset=32M \
	--direct=1 --ioengine=psync --io_size=2M --fsync=16 --end_fsync=1 --randseed=7 \
	--output=/dev/null
echo "committed 3" >"$rec/mark"
long=$(head -c 481 /dev/zero | tr '\0' x)
expect_errno EINVAL bash -c "echo $long > '$rec/mark'"
echo "${long:0:480}" >"$rec/mark"
grep -q "^record_entries [1-9]" "$MNT/.sys/r/blkfs_stat" || fail "no record_entries in blkfs_stat"
echo 1 >"$rec/stop"
assert_eq "record state" stopped "$(cat "$rec/state")"
fails_with "Operation already in progress" bash -c "echo 1 > '$rec/stop'"

info "the log"
"$BLKFS" save "$MNT" r "$TDIR/base.img" base || fail "cannot save snapshot base"
dd if="$MNT/r" of="$TDIR/dev.img" bs=1M status=none
python3 - "$log" "$TDIR/base.img" "$TDIR/replayed.img" <<'PY' || fail "the log is wrong"
import struct, sys
log = open(sys.argv[1], 'rb').read()
img = bytearray(open(sys.argv[2], 'rb').read())
magic, ver, nr, ss = struct.unpack_from('<QQQI', log, 0)
assert magic == 0x6a736677736872, hex(magic)
assert ver == 1 and ss == 512, (ver, ss)
off, marks, last_write, last_flush, writes = ss, [], -1, -1, 0
for i in range(nr):
    assert off + ss <= len(log), 'entry %d past the end at %d' % (i, off)
    sector, nsec, flags, dlen = struct.unpack_from('<QQQQ', log, off)
    if flags & 8:
        marks.append(log[off + 32:off + 32 + dlen].decode())
        off += ss
        continue
    off += ss
    if flags & 1:
        last_flush = i
    if flags & 4:
        img[sector * ss:(sector + nsec) * ss] = bytes(nsec * ss)
        last_write = i
    elif nsec:
        img[sector * ss:(sector + nsec) * ss] = log[off:off + nsec * ss]
        off += nsec * ss
        last_write = i
        writes += 1
assert off == len(log), 'trailing bytes: %d' % (len(log) - off)
assert marks[:3] == ['committed 1', 'committed 2', 'committed 3'], marks
assert len(marks) == 4 and marks[3] == 'x' * 480
assert last_flush > last_write, (last_flush, last_write)
assert writes >= 64 + 4 + 1, writes
print('# %d entries, %d writes, marks %s' % (nr, writes, marks[:3]))
open(sys.argv[3], 'wb').write(img)
PY
cmp "$TDIR/replayed.img" "$TDIR/dev.img" || fail "base + log is not the device"
cmp -n $((2 * M)) "$TDIR/base.img" "$TDIR/pre" || fail "the base snapshot lacks what was written before the start"
stop_blkfs
