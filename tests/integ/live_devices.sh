#!/usr/bin/env bash
# live_devices.sh: devices added and removed while the mount serves others
# (blkfs add / remove, MNT/.sys/control).
#  - add: a ram device with a filter appears in ls and .sys at once; its
#    data is written and read back byte for byte; a bad key is refused
#    (EINVAL) with the config parser's message naming the key, on stderr and
#    in the daemon log, and nothing is added; a taken name is EEXIST;
#  - the control file by hand: one command per write, the result read back
#    on the same descriptor; a user other than the mounter or root cannot
#    write it (EACCES), though they can read .sys (the mount is reachable),
#    nor open it for writing even past the file's mode (CAP_DAC_OVERRIDE:
#    EACCES from open(2), the daemon's check), though they can open it to
#    read;
#  - remove: refused (EBUSY, naming the holder) while the file is open and
#    while a loop device sits on it; after that it works and the file is gone
#    from ls; dirty data behind a slow filter is written back first, and
#    requests on another device go on meanwhile; the name can be added again
#    (a new, empty device); a failed writeback (fault filter) refuses the
#    remove with the error and the device keeps its data;
#  - fio --verify=crc32c on another device during a series of add/remove;
#  - blkfs stat --json lists the added device and not the removed one;
#  - every command answers --help with its usage (exit 0).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_root
require_fuse
require_blkfs
require fio losetup setpriv cmp python3
[ -e /dev/loop-control ] || skip "no /dev/loop-control"

# the mount must be reachable by nobody for the permission case to mean
# anything: $TDIR and the runner's directory for this test (both made for it)
chmod o+x "$TDIR"
[ -z "${BLKFS_TEST_BASE:-}" ] || chmod o+x "$BLKFS_TEST_BASE"
# the flusher stays out of the way: remove itself writes the slow device back
start_blkfs "[mount]
allow_other = yes

[cache]
dirty_background = 75%
dirty_limit = 90%
dirty_expire = 60s

[device ram0]
backend = ram
size = 64M"
CTL=$MNT/.sys/control

# blkfs_err CMD...: run blkfs, expect exit 1; its stderr in ERR.
blkfs_err() {
	local rc
	ERR=$("$BLKFS" "$@" 2>&1 >/dev/null) && rc=0 || rc=$?
	[ "$rc" -eq 1 ] || fail "blkfs $*: exit $rc (want 1): $ERR"
}

# ls_names: the device files as ls(1) lists them, one line (the test's
# names hold no blanks).
ls_names() {
	# shellcheck disable=SC2012  # what ls shows is the point
	ls "$MNT" | tr '\n' ' '
}

info "every command has --help"
for c in mount umount attach detach check stat add remove resize snapshot reset save; do
	out=$("$BLKFS" "$c" --help) || fail "blkfs $c --help: exit $?"
	case $out in "Usage: blkfs $c "*) ;; *) fail "blkfs $c --help says: $out" ;; esac
done

info "add a ram device with a filter"
out=$("$BLKFS" add "$MNT" ram1 backend=ram size=16M filters=delay delay.write=0) ||
	fail "blkfs add ram1 failed"
case $out in "added ram1: ram, 16777216 bytes"*) ;; *) fail "add said: $out" ;; esac
assert_eq "ls after add" "ram0 ram1 " "$(ls_names)"
assert_eq "size of ram1" 16777216 "$(stat -c %s "$MNT/ram1")"
assert_eq ".sys/ram1/size" 32768 "$(cat "$MNT/.sys/ram1/size")"
[ -d "$MNT/.sys/ram1/delay" ] || fail "no .sys/ram1/delay: the filter is not in the stack"

info "data on the added device, byte for byte"
head -c 16M /dev/urandom >"$TDIR/data"
ddev if="$TDIR/data" of="$MNT/ram1" bs=1M
echo 1 >"$MNT/.sys/ram1/drop_caches"
cmp "$TDIR/data" "$MNT/ram1" || fail "ram1 reads back other data"

info "a bad key: EINVAL, the parser's message naming it, nothing added"
expect_errno EINVAL "$BLKFS" add "$MNT" ram2 backend=ram sise=8M
blkfs_err add "$MNT" ram2 backend=ram sise=8M
case $ERR in *"argument 3: sise: unknown key for backend ram (allowed: backend, size,"*) ;;
*) fail "bad key: stderr is: $ERR" ;; esac
grep -q "control: add ram2 backend=ram sise=8M: argument 3: sise: unknown key" "$LOG" ||
	fail "the daemon log does not have the parser's message"
blkfs_err add "$MNT" ram2 backend=ram size=8M filters=delay delay.wrte=1ms
case $ERR in *"delay.wrte"*) ;; *) fail "bad filter key: stderr is: $ERR" ;; esac
blkfs_err add "$MNT" ram2 backend=ram size=8M logical_block_size=4096 size=8M
case $ERR in *"argument 5: size: duplicate key (first given in argument 3)"*) ;; *) fail "duplicate key: stderr is: $ERR" ;; esac
blkfs_err add "$MNT" ram2 backend=ram size=8M junk
case $ERR in *"argument 4: 'junk': expected KEY=VALUE"*) ;; *) fail "junk: stderr is: $ERR" ;; esac
if [ -e "$MNT/ram2" ] || [ -e "$MNT/.sys/ram2" ]; then
	fail "a refused add left ram2 behind"
fi
assert_eq "ls after refused adds" "ram0 ram1 " "$(ls_names)"

info "values with blanks travel quoted"
"$BLKFS" add "$MNT" logged backend=ram size=1M filters=log "log.path=$TDIR/a log" >/dev/null ||
	fail "add with a quoted log.path failed"
ddev if=/dev/zero of="$MNT/logged" bs=4k count=1
"$BLKFS" remove "$MNT" logged >/dev/null || fail "remove logged failed"
grep -q 'WRITE' "$TDIR/a log" || fail "the log filter did not write to '$TDIR/a log'"

info "a taken name: EEXIST"
expect_errno EEXIST "$BLKFS" add "$MNT" ram1 backend=ram size=8M
expect_errno EINVAL "$BLKFS" add "$MNT" control backend=ram size=8M
rc=0
"$BLKFS" add "$MNT" >/dev/null 2>&1 || rc=$?
assert_eq "add without a name: usage" 2 "$rc"

info "the control file by hand: the result on the same descriptor"
exec 3<>"$CTL"
printf 'remove "no such"\n' >&3 2>/dev/null && fail "remove of a missing device succeeded"
msg=$(cat <&3)
assert_eq "message read back" "no such: no such device" "$msg"
printf 'frob' >&3 2>/dev/null && fail "an unknown command succeeded"
msg=$(cat <&3)
case $msg in "unknown command 'frob' (commands: add, remove"*) ;; *) fail "frob: $msg" ;; esac
exec 3>&-
# ctl_write TEXT: TEXT in one write(2) to the control file; prints the
# message read back on the same descriptor, fails (1) as the write did.
ctl_write() {
	python3 - "$CTL" "$1" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    os.write(fd, sys.argv[2].encode())
    rc = 0
except OSError as e:
    print(os.strerror(e.errno), end=": ")
    rc = 1
print(os.read(fd, 4096).decode(), end="")
sys.exit(rc)
PY
}
if out=$(ctl_write 'add x backend=ram size=1M
remove x'); then
	fail "two lines in one write were taken"
fi
case $out in "Invalid argument: a second line (0x0a) at byte 25: one command per write"*) ;;
*) fail "two lines: $out" ;; esac
[ ! -e "$MNT/x" ] || fail "two lines in one write added x"

info "a user other than the mounter cannot write the control file"
setpriv --reuid=nobody --regid=nogroup --clear-groups cat "$MNT/.sys/ram0/size" >/dev/null ||
	fail "nobody cannot read .sys/ram0/size: the mount is not reachable, the check below means nothing"
if out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups \
	sh -c "echo 'add evil backend=ram size=1M' >'$CTL'" 2>&1); then
	fail "nobody wrote the control file"
fi
case $out in *"Permission denied"*) ;; *) fail "nobody's write: $out" ;; esac
# with CAP_DAC_OVERRIDE the kernel lets nobody past the file's mode: the
# daemon's own check of the writer's uid refuses
if out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=+dac_override \
	--ambient-caps=+dac_override sh -c "echo 'add evil backend=ram size=1M' >'$CTL'" 2>&1); then
	fail "nobody with CAP_DAC_OVERRIDE wrote the control file"
fi
case $out in *"Permission denied"*) ;; *) fail "nobody's write with CAP_DAC_OVERRIDE: $out" ;; esac
# and it refuses the open itself (the check at each write is a second
# line): no handle that could run a command; opening to read works
nobody_dac=(setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=+dac_override
	--ambient-caps=+dac_override)
for fl in O_WRONLY O_RDWR "O_WRONLY|O_TRUNC"; do
	assert_eq "nobody with CAP_DAC_OVERRIDE: $fl open of the control file" EACCES \
		"$(open_errno "$fl" "$CTL" "${nobody_dac[@]}")"
done
assert_eq "nobody with CAP_DAC_OVERRIDE: O_RDONLY open of the control file" OK \
	"$(open_errno O_RDONLY "$CTL" "${nobody_dac[@]}")"
rc=0
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$BLKFS" add "$MNT" evil backend=ram size=1M 2>&1) || rc=$?
assert_eq "blkfs add as nobody: exit" 2 "$rc"
case $out in *"Permission denied"*) ;; *) fail "blkfs add as nobody: $out" ;; esac
[ ! -e "$MNT/evil" ] || fail "nobody added a device"

info "remove refused while the file is open"
exec 4<"$MNT/ram1"
expect_errno EBUSY "$BLKFS" remove "$MNT" ram1
blkfs_err remove "$MNT" ram1
case $ERR in *"ram1: $MNT/ram1 is open (1 open file"*) ;; *) fail "remove while open: $ERR" ;; esac
exec 4<&-

info "remove refused while a loop device sits on it"
attach_loop "$MNT/ram1"
expect_errno EBUSY "$BLKFS" remove "$MNT" ram1
blkfs_err remove "$MNT" ram1
case $ERR in *"loop device $LOOP sits on $MNT/ram1"*) ;; *) fail "remove under $LOOP: $ERR" ;; esac
cmp -n 1M "$TDIR/data" "$LOOP" || fail "$LOOP reads other data"
detach_loop "$LOOP"
# the loop lets go of the file asynchronously (within a minute, on a busy machine)
for ((i = 0; i < 600; i++)); do
	"$BLKFS" remove "$MNT" ram1 >/dev/null 2>"$TDIR/rm.err" && break
	grep -q 'Device or resource busy' "$TDIR/rm.err" || fail "remove ram1: $(cat "$TDIR/rm.err")"
	sleep 0.1
done
[ "$i" -lt 600 ] || fail "remove ram1 still refused 60 s after the loop was detached: $(cat "$TDIR/rm.err")"
assert_eq "ls after remove" "ram0 " "$(ls_names)"
if [ -e "$MNT/ram1" ] || [ -e "$MNT/.sys/ram1" ]; then
	fail "ram1 is still there after remove"
fi
expect_errno ENOENT "$BLKFS" remove "$MNT" ram1

info "added again: a new, empty device"
"$BLKFS" add "$MNT" ram1 backend=ram size=16M >/dev/null
head -c 1M /dev/zero | cmp -n 1M - "$MNT/ram1" || fail "the new ram1 is not empty"

info "the kernel forgets a removed name at once (notify_delete), not after its timeout"
"$BLKFS" add "$MNT" quick backend=ram size=1M >/dev/null
stat "$MNT/quick" "$MNT/.sys/quick/size" >/dev/null	# entries and attributes cached for 1 s
"$BLKFS" remove "$MNT" quick >/dev/null
if [ -e "$MNT/quick" ] || [ -e "$MNT/.sys/quick" ]; then
	fail "quick still seen right after its remove: the kernel was not told"
fi

info "a failed writeback refuses the remove; nothing is dropped"
"$BLKFS" add "$MNT" bad backend=ram size=4M filters=fault fault.ops=write fault.errno=EIO \
	fault.probability=1 >/dev/null
head -c 1M /dev/urandom >"$TDIR/bad"
ddev if="$TDIR/bad" of="$MNT/bad" bs=1M
expect_errno EIO "$BLKFS" remove "$MNT" bad
blkfs_err remove "$MNT" bad
case $ERR in *"bad: writeback failed, 1048576 bytes not written (Input/output error): not removed"*) ;;
*) fail "remove with failing writes: $ERR" ;; esac
[ -e "$MNT/bad" ] || fail "bad went away although its writeback failed"
cmp -n 1M "$TDIR/bad" "$MNT/bad" || fail "bad's cached data changed after the refused remove"
echo no >"$MNT/.sys/bad/fault/enabled"
"$BLKFS" remove "$MNT" bad >/dev/null || fail "remove bad failed once writes pass"

info "remove writes dirty data back through a slow filter while ram0 serves"
"$BLKFS" add "$MNT" slow backend=ram size=8M filters=delay delay.write=3s >/dev/null
head -c 8M /dev/urandom >"$TDIR/slow"
ddev if="$TDIR/slow" of="$MNT/slow" bs=1M
dirty=$(awk '$1 == "dirty_bytes" { print $2 }' "$MNT/.sys/slow/blkfs_stat")
[ "$dirty" -gt 0 ] || fail "nothing dirty on slow before its remove"
fio --name=bg --filename="$MNT/ram0" --rw=randwrite --bs=4k --size=16M --ioengine=psync \
	--time_based --runtime=30 --output=/dev/null &
_BGPIDS+=($!)
bgpid=$!
sleep 0.5
t0=$(date +%s%N)
"$BLKFS" remove "$MNT" slow >/dev/null 2>"$TDIR/rmslow.err" &
rmpid=$!
sleep 0.2
a=$(awk '$1 == "user_writes" { print $2 }' "$MNT/.sys/ram0/blkfs_stat")
sleep 0.4
b=$(awk '$1 == "user_writes" { print $2 }' "$MNT/.sys/ram0/blkfs_stat")
# (a busy machine may hold this shell past the 3 s: then the remove may be
# over, which says nothing; one over in less than 3 s skipped the delay)
tc=$(date +%s%N)
if ! pid_alive "$rmpid" && [ $(((tc - t0) / 1000000)) -lt 3000 ]; then
	wait "$rmpid" && rc=0 || rc=$?
	fail "remove of slow ended within $(((tc - t0) / 1000000)) ms (exit $rc: $(cat "$TDIR/rmslow.err")): the writeback did not go through the 3 s delay"
fi
[ "$b" -gt "$a" ] || fail "ram0 served no write while slow was being removed ($a -> $b)"
wait "$rmpid" || fail "remove slow failed: $(cat "$TDIR/rmslow.err")"
t1=$(date +%s%N)
[ $(((t1 - t0) / 1000000)) -ge 3000 ] ||
	fail "remove of slow took $(((t1 - t0) / 1000000)) ms: the writeback did not go through the 3 s delay"
kill "$bgpid" 2>/dev/null || true
wait "$bgpid" 2>/dev/null || true
info "remove of slow took $(((t1 - t0) / 1000000)) ms; ram0 took $((b - a)) writes in 0.4 s of it"
[ ! -e "$MNT/slow" ] || fail "slow still there"

info "fio --verify=crc32c on ram0 during a series of add/remove"
fio --name=verify --filename="$MNT/ram0" --rw=randwrite --bs=4k --size=32M \
	--ioengine=libaio --direct=1 --iodepth=16 --verify=crc32c --verify_fatal=1 \
	--do_verify=1 --verify_state_save=0 --randrepeat=1 --loops=32 \
	--output="$TDIR/fio.out" &
fiopid=$!
_BGPIDS+=("$fiopid")
# readers of the names and .sys trees that come and go (a device's .sys
# nodes must stay valid while a reader holds them; ASan sees it otherwise)
(
	while [ ! -e "$TDIR/stop_readers" ]; do
		cat "$MNT"/.sys/t*/blkfs_stat "$MNT"/.sys/t*/delay/write >/dev/null 2>&1
		ls -R "$MNT/.sys" >/dev/null 2>&1
		stat "$MNT"/t* >/dev/null 2>&1
		echo 1 2>/dev/null >"$MNT/.sys/t0/drop_caches"
	done
) &
readpid=$!
_BGPIDS+=("$readpid")
n=0
while pid_alive "$fiopid" || [ "$n" -eq 0 ]; do
	name=t$((n % 3))
	"$BLKFS" add "$MNT" "$name" backend=ram size=4M filters=delay >/dev/null ||
		fail "add $name (round $n) failed"
	ddev if=/dev/urandom of="$MNT/$name" bs=64k count=8
	"$BLKFS" remove "$MNT" "$name" >/dev/null || fail "remove $name (round $n) failed"
	n=$((n + 1))
	[ "$n" -lt 200 ] || break
done
touch "$TDIR/stop_readers"
wait "$readpid" || true
wait "$fiopid" && rc=0 || rc=$?
grep -E 'err=|WRITE:|READ:' "$TDIR/fio.out" | sed 's/^/    /' || true
[ "$rc" -eq 0 ] || { cat "$TDIR/fio.out"; fail "fio exited $rc"; }
grep -q 'err= 0' "$TDIR/fio.out" || fail "fio: no 'err= 0' in its output"
[ "$n" -ge 3 ] || fail "only $n add/remove rounds ran during fio"
info "$n add/remove rounds ran while fio wrote and verified ram0"

info "blkfs stat --json: added devices in, removed ones out"
"$BLKFS" add "$MNT" late backend=ram size=4M >/dev/null
"$BLKFS" stat "$MNT" --json >"$TDIR/stat.json"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(" ".join(sorted(k for k in d if not k.startswith("."))))' \
	"$TDIR/stat.json" >"$TDIR/stat.names" || fail "blkfs stat --json is not JSON: $(cat "$TDIR/stat.json")"
assert_eq "devices in stat --json" "late ram0 ram1" "$(cat "$TDIR/stat.names")"

stop_blkfs
