#!/usr/bin/env bash
# systemd_unit.sh: the unit `make install` ships. PID 1 here is not systemd,
# so what can be checked without it is:
#  - `make install PREFIX=$TDIR/prefix` (this build: O= the directory of
#    $BLKFS) installs blkfs, blkfs(1), blkfs.conf(5) and blkfs@.service,
#    and the installed unit's ExecStart and ExecStop name the installed
#    blkfs;
#  - `systemd-analyze verify` on the installed unit (an instance of the
#    template) says nothing at all: every command exists and is executable,
#    every setting parses (an unknown value is only a warning, so any output
#    fails), and the Documentation= pages are found by man(1) in the
#    installed MANDIR;
#  - the unit is Type=notify, runs `blkfs mount -f`, stops with `blkfs
#    umount`, and its TimeoutStopSec leaves a full cache time to drain
#    (at least 10 minutes; blkfs extends it while the writeback progresses).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_blkfs
require systemd-analyze make man

src=$(cd "$(dirname "$0")/../.." && pwd)
O=$(dirname "$BLKFS")
prefix=$TDIR/prefix
# -o: install the binary under test as it is. Without it make rebuilt
# $BLKFS whenever its flags differed from this make's (make test builds
# with CHECKS=1 and WERROR=1): the tests after this one, or running beside
# it, ran another binary, or found none while it was relinked.
out=$(make -s -C "$src" install O="$O" PREFIX="$prefix" -o "$O/blkfs" 2>&1) || fail "make install failed: $out"
for f in bin/blkfs share/man/man1/blkfs.1 share/man/man5/blkfs.conf.5 \
	lib/systemd/system/blkfs@.service; do
	[ -f "$prefix/$f" ] || fail "make install did not install $f"
done
unit=$prefix/lib/systemd/system/blkfs@.service
cmp -s "$BLKFS" "$prefix/bin/blkfs" || fail "the installed blkfs is not $BLKFS"

grep -qx "ExecStart=$prefix/bin/blkfs mount -f -c \${BLKFS_CONF} %f" "$unit" ||
	fail "ExecStart does not run the installed blkfs mount -f: $(grep ExecStart "$unit")"
grep -qx "ExecStop=$prefix/bin/blkfs umount %f" "$unit" ||
	fail "ExecStop does not run the installed blkfs umount: $(grep ExecStop "$unit")"
grep -qx 'Type=notify' "$unit" || fail "the unit is not Type=notify"
stop=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)min$/\1/p' "$unit")
[ "${stop:-0}" -ge 10 ] || fail "TimeoutStopSec is not at least 10min: $(grep TimeoutStopSec "$unit")"

# An instance of the template, as systemctl enable would load it.
mkdir -p "$TDIR/units"
cp "$unit" "$TDIR/units/blkfs@mnt-blk.service"
out=$(cd "$TDIR/units" && MANPATH=$prefix/share/man systemd-analyze verify \
	"./blkfs@mnt-blk.service" 2>&1) && rc=0 || rc=$?
[ "$rc" -eq 0 ] && [ -z "$out" ] || fail "systemd-analyze verify (exit $rc): $out"
info "systemd-analyze verify: clean"

# It must be able to fail: a unit whose ExecStart is missing is refused.
sed "s|^ExecStart=$prefix/bin/blkfs|ExecStart=$TDIR/no-such-blkfs|" "$unit" \
	>"$TDIR/units/blkfs@mnt-bad.service"
if (cd "$TDIR/units" && MANPATH=$prefix/share/man systemd-analyze verify \
	"./blkfs@mnt-bad.service" >/dev/null 2>&1); then
	fail "systemd-analyze verify accepts a unit whose ExecStart does not exist"
fi
