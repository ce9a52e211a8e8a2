#!/usr/bin/env bash
# bad_input.sh: hostile input at the mount's boundaries; each call gets the
# errno a block device (or the kernel in front of it) gives, the daemon keeps
# serving, and no byte of the devices changes (sha256 of every device before
# and after the whole hostile sequence; only the scratch device is written).
# blockdev.sh has the plain block-device semantics (reads and writes at the
# end, truncate, EPERM for names, fallocate); this adds what a careless or
# malicious caller does:
#  - O_APPEND: write and pwrite go to the end (Linux's O_APPEND rule), and a
#    write at the end is ENOSPC, as on /dev/sdX; reads still work.
#    O_CREAT on an existing device opens it, O_CREAT|O_EXCL is EEXIST, on a
#    new name EPERM; O_TRUNC changes nothing.
#  - truncate to 2^63 - 1, 2^64 - 1 (negative): EINVAL; rename with
#    RENAME_EXCHANGE/NOREPLACE, names in .sys, chmod/chown: EPERM.
#  - xattrs: set/get/list/remove EOPNOTSUPP (the kernel answers itself after
#    the daemon's ENOSYS; system.posix_acl_access is ENODATA: no ACL).
#  - ioctls the mount does not have (block-device and inode-flag ones):
#    ENOTTY; FIEMAP EOPNOTSUPP.
#  - offsets near 2^63: at 2^63 - 1 - 4096 a read returns 0 and a write is
#    ENOSPC (buffered and O_DIRECT); where pos + len passes 2^63 - 1 the
#    kernel says EINVAL before blkfs sees it; lseek SEEK_DATA at the end is
#    ENXIO.
#  - zero-length reads and writes: 0, also at and past the end.
#  - requests over 1 MiB crossing the end (the kernel splits them): short.
#  - fallocate: modes other than PUNCH_HOLE|KEEP_SIZE and ZERO_RANGE
#    (with or without KEEP_SIZE) are EOPNOTSUPP, misaligned or empty ranges
#    EINVAL, ranges beyond 2^63 EFBIG.
#  - .sys: every writable attribute (the cache's and each filter's) refuses
#    garbage, negative, huge, empty, a NUL with junk after it, 64 KiB of
#    text, a write at an offset other than 0 (also O_APPEND) and a second
#    write in one open with EINVAL, and shows the same value afterwards;
#    read-only attributes refuse opening for writing (O_WRONLY, O_RDWR)
#    with EACCES at open(2), and show the same value afterwards.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require_helper bdev_check
require dd sha256sum find python3
bc=$BLKFS_TESTBIN/bdev_check

# chk_open WANT BDEV_CHECK_ARGS...: lib.sh's chk, but bdev_check's exit 1
# (the open failed) is a result like any other; WANT is every output line.
chk_open() {
	local want=$1 got rc
	shift
	got=$("$bc" "$@") && rc=0 || rc=$?
	[ "$rc" -le 1 ] || fail "bdev_check $* exited $rc: $got"
	got=${got//$'\n'/ }
	[ "$got" = "$want" ] || fail "bdev_check $*: expected '$want', got '$got'"
}

MiB=$((1 << 20))
S=$((8 * MiB))
I63=9223372036854775807		# 2^63 - 1
NEAR=$((I63 - 4096))		# a 4096-byte request here ends at 2^63 - 1
DNEAR=$((I63 - 8191))		# the same for O_DIRECT: 2^63 - 8192, aligned
filters="log, delay"
extra=""
# the fault and powerloss filters, when this build has them: their knobs too
for f in fault powerloss; do
	printf '[device x]\nbackend = null\nsize = 1M\nfilters = %s\n' "$f" >"$TDIR/probe.conf"
	if "$BLKFS" check -c "$TDIR/probe.conf" >/dev/null 2>&1; then
		filters="$filters, $f"
		[ "$f" != fault ] || extra="fault.probability = 0"
	fi
done
info "ram0 filters: $filters"

start_blkfs "[device ram0]
backend = ram
size = 8M
logical_block_size = 512
physical_block_size = 4096
filters = $filters
log.path = trace
$extra

[device d4k]
backend = ram
size = 8M
logical_block_size = 4096
physical_block_size = 4096

[device scr]
backend = ram
size = 4M"
dev=$MNT/ram0
d4k=$MNT/d4k
scr=$MNT/scr
sys=$MNT/.sys

# Contents to protect: a pattern over all of ram0 and d4k, on the backend.
chk_open "OK OK" "$dev" pattern 0 "$S" 7 fsync
chk_open "OK OK" "$d4k" pattern 0 "$S" 9 fsync
sums() {
	sha256sum "$dev" "$d4k" | awk '{ print $1 }' | tr '\n' ' '
}
before=$(sums)

# ---------------------------------------------------------------------------
info "open flags: O_APPEND, O_CREAT, O_EXCL, O_TRUNC"
chk_open "ENOSPC ENOSPC 0" -a "$dev" write 512 pwrite 0 512 lseek 0 cur
chk_open "ENOSPC" -a -w "$dev" write 1
chk_open "ENOSPC" -a -d "$dev" write 4096
chk_open "512 512" -a "$dev" read 512 pread 4096 512
chk_open "OK" -a "$dev" verify 0 65536 7
chk_open "open: EEXIST" -x "$dev" size
chk_open "$S" -c "$dev" size
chk_open "open: EPERM" -x "$MNT/new0" size
chk_open "open: EPERM" -c "$MNT/new1" size
chk_open "$S" -t "$dev" size
chk_open "$S" -t -w "$dev" size
chk_open "EBADF EBADF" -r "$dev" pwrite 0 512 write 1
chk_open "EBADF" -w "$dev" pread 0 512
chk_open "open: EISDIR" "$MNT" size
chk_open "EISDIR" -r "$sys/ram0" pread 0 10
chk_open "open: ENOENT" -r "$MNT/nosuch" size

info "truncate and names"
chk_open "EINVAL EINVAL EINVAL EINVAL OK" "$dev" truncate "$I63" truncate 18446744073709551615 \
	truncate $((1 << 62)) truncate $((S + 1)) truncate "$S"
chk_open EPERM exchange "$dev" "$d4k"
chk_open EPERM exchange "$dev" "$sys"
chk_open EPERM noreplace "$dev" "$MNT/other"
chk_open EPERM rename "$sys" "$MNT/sys2"
chk_open EPERM rename "$sys/ram0/size" "$sys/ram0/size2"
chk_open EPERM unlink "$sys/ram0/size"
chk_open EPERM rmdir "$sys/ram0/queue"
chk_open EPERM rmdir "$sys"
chk_open EPERM mkdir "$sys/ram0/new"
chk_open EPERM create "$sys/new"
chk_open EPERM mknod "$sys/ram0/node"
chk_open EPERM link "$sys/ram0/size" "$MNT/l"
chk_open EPERM symlink x "$sys/ram0/l"
chk_open ENOENT unlink "$MNT/nosuch"
chk_open EPERM chmod "$dev" 666
chk_open EPERM chown "$dev" 1 1
chk_open EPERM chmod "$sys/ram0/size" 666
chk_open OK utimes "$dev"

info "xattrs"
for f in "$dev" "$sys/ram0/size"; do
	chk_open "EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP EOPNOTSUPP" -r "$f" \
		setxattr user.x 1 getxattr user.x listxattr removexattr user.x \
		setxattr trusted.x 1 setxattr security.x 1
	chk_open "ENODATA EOPNOTSUPP" -r "$f" getxattr system.posix_acl_access getxattr security.selinux
done

info "ioctls"
# BLKSSZGET BLKFLSBUF BLKDISCARD BLKZEROOUT BLKGETSIZE64 FS_IOC_GETFLAGS
# FS_IOC_SETFLAGS, and made-up ones: ENOTTY; FS_IOC_FIEMAP: EOPNOTSUPP
for r in 0x1268 0x1261 0x1277 0x127f 0x80081272 0x80086601 0x40086602 0xdeadbeef 0xffffffff; do
	chk_open ENOTTY "$dev" ioctl "$r"
done
chk_open EOPNOTSUPP "$dev" ioctl 0xc020660b
chk_open ENOTTY -r "$sys/ram0/size" ioctl 0x80081272

info "offsets near 2^63"
chk_open "0 ENOSPC 0 ENOSPC" "$dev" pread "$NEAR" 4096 pwrite "$NEAR" 4096 pread $((I63 - 1)) 1 \
	pwrite $((I63 - 1)) 1
chk_open "0 ENOSPC" -d "$dev" pread "$DNEAR" 4096 pwrite "$DNEAR" 4096
chk_open "EINVAL EINVAL EINVAL EINVAL" "$dev" pread "$I63" 1 pwrite "$I63" 1 pread $((NEAR + 1)) 4096 \
	pwrite $((NEAR + 1)) 4096
chk_open "EINVAL EINVAL EINVAL" "$dev" pread 9223372036854775808 1 pwrite 9223372036854775808 1 \
	pwrite 18446744073709551615 512
chk_open "EINVAL EINVAL" -d "$dev" pread $((DNEAR + 4096)) 4096 pwrite $((DNEAR + 4096)) 4096
chk_open "$I63 EINVAL EINVAL" "$dev" lseek "$I63" set read 1 write 1
chk_open "ENXIO $S $S 4096 $S" "$dev" lseek "$S" data lseek 0 hole lseek 0 end lseek 4096 data \
	lseek 0 end

info "zero-length I/O"
chk_open "0 0 0 0 0 0 0 0" "$dev" pread 0 0 pwrite 0 0 pread "$S" 0 pwrite "$S" 0 \
	pwrite $((S * 2)) 0 pwrite "$NEAR" 0 read 0 write 0
chk_open "0 0 0" -d "$dev" pread 512 0 pwrite 512 0 pwrite "$S" 0

info "misaligned O_DIRECT"
chk_open "EINVAL EINVAL EINVAL EINVAL" -d "$dev" pwrite 100 512 pwrite 512 100 pread 512 100 pread 1 512
chk_open "EINVAL EINVAL" -d "$d4k" pwrite 512 4096 pwrite 4096 512

info "fallocate: modes and ranges"
# KEEP_SIZE alone, PUNCH_HOLE without KEEP_SIZE, NO_HIDE_STALE, COLLAPSE_RANGE,
# INSERT_RANGE, UNSHARE_RANGE, PUNCH_HOLE|ZERO_RANGE, plain allocation: EOPNOTSUPP
for m in 0 1 2 4 6 8 0x20 0x40 0x13 0x18; do
	chk_open EOPNOTSUPP "$dev" fallocate "$m" 0 4096
done
chk_open "EINVAL EINVAL EINVAL EINVAL EINVAL EINVAL" "$dev" punch 0 100 punch 100 512 zero 256 512 \
	zerokeep 512 100 punch "$S" 512 punch $((S + 4096)) 4096
chk_open "EINVAL EINVAL EINVAL" "$dev" fallocate 3 0 0 zero $((S - 4096)) 8192 fallocate 0x10 512 "$NEAR"
chk_open "EFBIG EFBIG" "$dev" punch "$NEAR" 8192 zero "$I63" 1
chk_open "EINVAL EINVAL" "$d4k" punch 512 4096 zero 4096 512
chk_open "EOPNOTSUPP" "$sys/ram0/queue/read_ahead_kb" punch 0 4096

info "still serving, nothing changed"
pid_alive "$DAEMON_PID" || fail "the daemon died"
after=$(sums)
assert_eq "sha256 of ram0 and d4k after the hostile sequence" "$before" "$after"
chk_open OK "$dev" verify 0 "$S" 7
chk_open OK -d "$d4k" verify 0 "$S" 9

# ---------------------------------------------------------------------------
info "requests over 1 MiB crossing the end (scratch device)"
SS=$((4 * MiB))
chk_open "512 OK 512" "$scr" pwrite $((SS - 512)) $((2 * MiB)) 33 expect $((SS - 512)) 512 33 \
	pread $((SS - 512)) $((3 * MiB))
chk_open "4096 OK 4096" -d "$scr" pwrite $((SS - 4096)) $((2 * MiB)) 44 expect $((SS - 4096)) 4096 44 \
	pread $((SS - 4096)) $((2 * MiB))
chk_open "$((MiB + 512)) OK" "$scr" pwrite $((SS - MiB - 512)) $((3 * MiB)) 55 \
	expect $((SS - MiB - 512)) $((MiB + 512)) 55
chk_open "ENOSPC 0" "$scr" pwrite "$SS" $((2 * MiB)) pread "$SS" $((2 * MiB))

# ---------------------------------------------------------------------------
info ".sys: bad values, partial writes, read-only attributes"
# put VALUE FILE: write VALUE (printf %b escapes) in one write(2) at offset
# 0; prints the error, if any.
# shellcheck disable=SC2069  # the error message only: stderr to the caller
put() {
	bash -c 'printf "%b" "$1" | dd of="$2" bs=1M iflag=fullblock conv=notrunc status=none' \
		bash "$@" 2>&1 >/dev/null
}
mapfile -t rw < <(find "$sys" -type f -perm -u+w | sort)
mapfile -t ro < <(find "$sys" -type f ! -perm -u+w | sort)
[ "${#rw[@]}" -ge 7 ] || fail "only ${#rw[@]} writable attributes: ${rw[*]}"
info "${#rw[@]} writable, ${#ro[@]} read-only attributes"
# Some 1000 hostile writes: in one process, not a dd (and a cat before and
# after) each, which took minutes on a loaded machine. Each is what dd did:
# open O_WRONLY|O_CREAT (no O_TRUNC), the whole value in one write(2)
# (at offset 0, or 1, or with O_APPEND; or two writes in one open).
IFS= read -r -d '' sys_py <<'PY' || true
import errno, os, sys

pid, sysdir, nrw = sys.argv[1], sys.argv[2], int(sys.argv[3])
rw, ro = sys.argv[4:4 + nrw], sys.argv[4 + nrw:]

def fail(msg):
    print(msg)
    sys.exit(1)

def alive():
    try:
        with open("/proc/%s/status" % pid) as f:
            st = [l.split()[1] for l in f if l.startswith("State:")]
    except OSError:
        return False
    return bool(st) and st[0] != "Z"

def cat(f):
    with open(f, "rb") as fd:
        return fd.read()

# put(f, chunks, off, flags): the open and the writes dd did; None when
# every write went through, else the errno of the open or the failed write.
def put(f, chunks, off=0, flags=0):
    try:
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | flags, 0o666)
    except OSError as e:
        return e.errno
    try:
        pos = off
        for c in chunks:
            done = 0
            while done < len(c):
                k = os.pwrite(fd, c[done:], pos) if off else os.write(fd, c[done:])
                done += k
                pos += k
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)
    return None

def show(v):
    v = v.decode("latin-1")
    return v if len(v) <= 40 else "%s...(%d bytes)" % (v[:20], len(v))

# refuse: the write fails with EINVAL, the value stays.
def refuse(f, v, how="", **kw):
    old = cat(f)
    err = put(f, [v] if isinstance(v, bytes) else v, **kw)
    vs = show(v if isinstance(v, bytes) else b"".join(v))
    if err is None:
        fail("%s took '%s' %s" % (f, vs, how))
    if err != errno.EINVAL:
        fail("%s: '%s' %s: not EINVAL: %s" % (f, vs, how, os.strerror(err)))
    new = cat(f)
    if new != old:
        fail("%s after refusing '%s' %s: expected '%s', got '%s'" % (f, vs, how, show(old), show(new)))

bad = [b"garbage", b"-1", b"-0", b"\n", b" ", b"\n\n\n", b"9" * 26, b"18446744073709551616",
       b"1e9", b"%s%n", b"\xff\xfe", b"9" * 65536, b"x" * 65536]
n = 0
for f in rw:
    v0 = cat(f).rstrip(b"\n")
    for v in bad:
        refuse(f, v)
        n += 1
    if v0 and b"\n" not in v0:
        # a NUL with junk after it: not the value before the NUL
        refuse(f, v0 + b"\0junk")
        # offset 0 only: a partial write, O_APPEND (at the file's size,
        # 4096) and a second write in the same open
        refuse(f, v0, "at offset 1", off=1)
        refuse(f, v0, "O_APPEND", flags=os.O_APPEND)
        refuse(f, [v0, v0], "twice in one open")
        n += 4
    if not alive():
        fail("the daemon died writing to %s" % f)
# numbers that overflow once taken as KiB
for v in (b"4294967296", b"4194305", b"18014398509481984"):
    for k in ("max_sectors_kb", "read_ahead_kb"):
        refuse("%s/ram0/queue/%s" % (sysdir, k), v)
        n += 1
for f in ro:
    old = cat(f)
    # the open itself is refused (as root the kernel does not check the
    # mode): no handle on an attribute that has no store, whatever a
    # write on one would then say
    for fl, name in ((os.O_WRONLY, "O_WRONLY"), (os.O_RDWR, "O_RDWR")):
        try:
            os.close(os.open(f, fl))
            fail("read-only %s opened %s" % (f, name))
        except OSError as e:
            if e.errno != errno.EACCES:
                fail("read-only %s: %s open not EACCES: %s" % (f, name, os.strerror(e.errno)))
    err = put(f, [b"1"])
    if err is None:
        fail("read-only %s took a write" % f)
    if err != errno.EACCES:
        fail("read-only %s: not EACCES: %s" % (f, os.strerror(err)))
    n += 1
    if not f.endswith(("/stat", "/blkfs_stat", "/unflushed_bytes", "/.transport")):  # counters move
        new = cat(f)
        if new != old:
            fail("%s after a refused write: expected '%s', got '%s'" % (f, show(old), show(new)))
print("%d hostile writes refused" % n)
PY
out=$(python3 -c "$sys_py" "$DAEMON_PID" "$sys" "${#rw[@]}" "${rw[@]}" "${ro[@]}" 2>&1) || fail "$out"
info "$out"
# the knobs still take good values
put "64\n" "$sys/ram0/queue/max_sectors_kb" || fail "max_sectors_kb refused 64"
assert_eq max_sectors_kb 64 "$(cat "$sys/ram0/queue/max_sectors_kb")"
put "1ms-2ms\n" "$sys/ram0/delay/write" || fail "delay/write refused 1ms-2ms"
assert_eq delay/write 1ms-2ms "$(cat "$sys/ram0/delay/write")"
put "0" "$sys/ram0/delay/write" || fail "delay/write refused 0"

# ---------------------------------------------------------------------------
info "at the end: still serving, data as before"
pid_alive "$DAEMON_PID" || fail "the daemon died"
assert_eq "sha256 of ram0 and d4k at the end" "$before" "$(sums)"
chk_open "OK OK" "$scr" fill 0 65536 66 expect 0 65536 66
stop_blkfs
