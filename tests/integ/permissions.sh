#!/usr/bin/env bash
# permissions.sh: as root, a config (or an aio image file) that users other
# than root can change is refused, saying why; device files take mode, uid
# and gid from the config; the mount is private to the mounting user unless
# [mount] allow_other = yes.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require su stat dd

id nobody >/dev/null 2>&1 || skip "no user nobody"
getent group disk >/dev/null 2>&1 || skip "no group disk"

info "a group- or world-writable config is refused as root"
conf=$TDIR/open.conf
printf '[device ram0]\nbackend = ram\nsize = 16M\n' >"$conf"
chmod 0664 "$conf"
out=$("$BLKFS" check -c "$conf" 2>&1) && fail "a group-writable config was accepted"
case $out in *"writable by users other than root"*"0664"*) ;; *) fail "unclear refusal: $out" ;; esac
chmod 0644 "$conf"
chown nobody "$conf"
out=$("$BLKFS" check -c "$conf" 2>&1) && fail "a config owned by nobody was accepted"
case $out in *"owner uid"*) ;; *) fail "unclear refusal: $out" ;; esac
chown root "$conf"
"$BLKFS" check -c "$conf" >/dev/null || fail "a root-owned 0644 config was refused"

info "an aio image file writable by others is refused"
odirect_dir || skip "no directory here takes O_DIRECT"
img=$ODIRECT_DIR/img
truncate -s 16M "$img"
chmod 0666 "$img"
printf '[device d0]\nbackend = aio\npath = %s\nsize = 16M\n' "$img" >"$TDIR/aio.conf"
out=$("$BLKFS" check -c "$TDIR/aio.conf" 2>&1) && fail "a world-writable image was accepted"
case $out in *":3: path:"*"writable by users other than root"*) ;; *) fail "unclear refusal: $out" ;; esac
chmod 0600 "$img"
"$BLKFS" check -c "$TDIR/aio.conf" >/dev/null || fail "a 0600 image was refused"

# other users must be able to reach the mount point for the checks below to mean anything
chmod 0711 "$TDIR" "$(dirname "$TDIR")"

info "private by default: another user cannot open the device"
start_blkfs "[device ram0]
backend = ram
size = 16M
mode = 0666"
if su nobody -s /bin/sh -c "dd if=$MNT/ram0 of=/dev/null bs=4k count=1 status=none" 2>/dev/null; then
	fail "user nobody could read a mount without allow_other"
fi
stop_blkfs

info "allow_other with mode/uid/gid: the kernel checks them"
start_blkfs "[mount]
allow_other = yes
[device ram0]
backend = ram
size = 16M
mode = 0660
uid = nobody
gid = disk"
assert_eq "mode/owner" "660 nobody disk" "$(stat -c '%a %U %G' "$MNT/ram0")"
su nobody -s /bin/sh -c "dd if=/dev/zero of=$MNT/ram0 bs=4k count=1 conv=notrunc status=none" ||
	fail "the owner could not write"
if su daemon -s /bin/sh -c "dd if=$MNT/ram0 of=/dev/null bs=4k count=1 status=none" 2>/dev/null; then
	fail "user daemon (not owner, not in disk) could read a 0660 device"
fi
stop_blkfs

info "an unknown user is a config error with its line"
printf '[device ram0]\nbackend = ram\nsize = 16M\nuid = no-such-user-here\n' >"$TDIR/u.conf"
out=$("$BLKFS" check -c "$TDIR/u.conf" 2>&1) && fail "an unknown user was accepted"
case $out in *"u.conf:4: uid: no user named no-such-user-here"*) ;; *) fail "unclear error: $out" ;; esac
