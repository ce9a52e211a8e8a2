#!/usr/bin/env bash
# ram_clone.sh: `blkfs add MNT NAME backend=ram clone=DEV@SNAP`, a ram
# device that starts as a snapshot of another and shares its pages.
#  - the clone reads exactly the snapshot (not what the origin wrote after
#    it), with the origin's size and block sizes, and costs no data memory
#    when added (arena_bytes unchanged, arena_devices 2);
#  - isolation both ways: writes to the clone leave the origin and the
#    snapshot as they were, and writes to the origin leave the clone;
#    a page the clone writes costs one page of the shared arena;
#  - the clone's own snapshot and reset change the clone alone;
#  - removal in either order: the clone first (the origin reads the same,
#    the clone's pages are freed), and the origin first (the clone still
#    reads what it held and takes writes);
#  - bad clone values are refused with the parser's message and nothing is
#    added: no such device, no such snapshot, not DEV@SNAP, a size that is
#    not the origin's, with image.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require cmp sha256sum dd

M=$((1 << 20))

start_blkfs "[cache]
size = 16M

[device o]
backend = ram
size = 16M
logical_block_size = 512
physical_block_size = 4096"

stat_of() {
	awk -v k="$2" '$1 == k { print $2; f = 1 } END { if (!f) print "none" }' "$MNT/.sys/$1/blkfs_stat"
}
# devread DEV: the device file in 1 MiB requests (cmp and sha256sum reading
# it themselves send the daemon one request per 4 or 32 KiB buffer).
devread() {
	dd if="$1" bs=1M status=none
}
sum_of() {
	devread "$1" | sha256sum | cut -d' ' -f1
}

info "origin: 8 MiB of data, snapshot base, 1 MiB rewritten after it"
dd if=/dev/urandom of="$TDIR/data" bs=1M count=8 status=none
dd if="$TDIR/data" of="$MNT/o" bs=1M conv=nocreat,fsync status=none
"$BLKFS" snapshot "$MNT" o base >/dev/null
"$BLKFS" save "$MNT" o "$TDIR/base.img" base >/dev/null
dd if=/dev/urandom of="$MNT/o" bs=1M count=1 seek=2 conv=nocreat,notrunc,fsync status=none
arena=$(stat_of o arena_bytes)

info "add a clone of o@base"
out=$("$BLKFS" add "$MNT" c backend=ram clone=o@base) || fail "add clone: $out"
[ -e "$MNT/c" ] || fail "no $MNT/c after add"
assert_eq "clone size" $((16 * M)) "$(stat -c %s "$MNT/c")"
assert_eq "clone logical block" 512 "$(cat "$MNT/.sys/c/queue/logical_block_size")"
assert_eq "clone physical block" 4096 "$(cat "$MNT/.sys/c/queue/physical_block_size")"
cmp <(devread "$MNT/c") "$TDIR/base.img" || fail "the clone does not read as snapshot base"
assert_eq "arena_bytes after the clone (nothing copied)" "$arena" "$(stat_of c arena_bytes)"
assert_eq "arena_devices" 2 "$(stat_of o arena_devices)"

info "isolation both ways"
o_sum=$(sum_of "$MNT/o")
dd if=/dev/urandom of="$MNT/c" bs=4096 count=1 seek=100 conv=nocreat,notrunc,fsync status=none
assert_eq "origin after a clone write" "$o_sum" "$(sum_of "$MNT/o")"
assert_eq "arena_bytes after one clone page" $((arena + 4096)) "$(stat_of c arena_bytes)"
"$BLKFS" save "$MNT" o "$TDIR/base2.img" base >/dev/null
cmp "$TDIR/base.img" "$TDIR/base2.img" || fail "snapshot base changed by a clone write"
c_sum=$(sum_of "$MNT/c")
dd if=/dev/urandom of="$MNT/o" bs=1M count=1 seek=5 conv=nocreat,notrunc,fsync status=none
assert_eq "clone after an origin write" "$c_sum" "$(sum_of "$MNT/c")"
o_sum=$(sum_of "$MNT/o")

info "the clone's own snapshot and reset"
"$BLKFS" snapshot "$MNT" c mine >/dev/null
dd if=/dev/zero of="$MNT/c" bs=1M count=4 conv=nocreat,notrunc,fsync status=none
"$BLKFS" reset "$MNT" c mine >/dev/null
assert_eq "clone after its reset" "$c_sum" "$(sum_of "$MNT/c")"
assert_eq "origin after the clone's reset" "$o_sum" "$(sum_of "$MNT/o")"

info "refusals"
for bad in "clone=o@nosnap:has no snapshot named nosnap" \
	   "clone=nosuch@base:no ram device named nosuch" \
	   "clone=o:is not DEV@SNAP" \
	   "clone=o@base size=32M:is not the size of o" \
	   "clone=o@base image=$TDIR/base.img:cannot go with image"; do
	args=${bad%%:*}
	want=${bad#*:}
	# shellcheck disable=SC2086
	if out=$("$BLKFS" add "$MNT" bad backend=ram $args 2>&1); then
		fail "add $args succeeded"
	fi
	case $out in
	*"$want"*) ;;
	*) fail "add $args: '$out' does not say '$want'" ;;
	esac
	[ ! -e "$MNT/bad" ] || fail "add $args left $MNT/bad"
done

info "removal: the clone first"
"$BLKFS" remove "$MNT" c >/dev/null
assert_eq "origin after the clone went" "$o_sum" "$(sum_of "$MNT/o")"
assert_eq "arena_devices" 1 "$(stat_of o arena_devices)"

info "removal: the origin first"
"$BLKFS" add "$MNT" c backend=ram clone=o@base >/dev/null
cmp <(devread "$MNT/c") "$TDIR/base.img" || fail "the second clone does not read as snapshot base"
"$BLKFS" remove "$MNT" o >/dev/null
[ ! -e "$MNT/o" ] || fail "$MNT/o still there"
assert_eq "arena_devices" 1 "$(stat_of c arena_devices)"
cmp <(devread "$MNT/c") "$TDIR/base.img" || fail "the clone lost data when its origin went"
dd if="$TDIR/data" of="$MNT/c" bs=1M count=8 seek=8 conv=nocreat,notrunc,fsync status=none
cmp -n $((8 * M)) <(devread "$MNT/c") "$TDIR/base.img" || fail "the clone's first 8 MiB changed"
cmp -i 0:$((8 * M)) -n $((8 * M)) "$TDIR/data" <(devread "$MNT/c") || fail "the clone's write did not land"
"$BLKFS" remove "$MNT" c >/dev/null
stop_blkfs
