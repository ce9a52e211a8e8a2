#!/usr/bin/env bash
# crashcheck_ids.sh: the explorer checks the states it names, at any size,
# on dm-log-writes logs written here by hand (--base zeros: no mount).
#  - 70 single-block writes then a mark, --states 1: the checker gets the
#    in-order image, and its id names it ("70"). Without --states the
#    point lists the in-order state and the 70 states with one block
#    rolled back (--k 1 beyond --n), each id the image it names, and
#    --materialize writes the same bytes for an id, a run "A-B=KEEP"
#    included.
#  - --states MAX samples only where the default set has more than MAX
#    states: 9 blocks (512 states, all combinations) with --states 256
#    give 256 distinct ids, the in-order first; 12 blocks (beyond --n: 13
#    states with one rolled back) are explored exactly as without
#    --states; the table and --json say "exhaustive" or "sampled K of N".
#    With --k 3 and 300 blocks (a set too large to list) the sample is
#    drawn: distinct ids, at most 3 blocks rolled back each.
#  - The same --seed lists the same ids.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_blkfs
require python3 sha1sum


# expect_sha BLOCKS...: the sha1 of a 1 MiB device holding block N written
# as mklog writes it, for each N given (the rest zeros).
expect_sha() {
	python3 - "$@" <<'PY'
import hashlib, sys
img = bytearray(1 << 20)
for a in sys.argv[1:]:
    n = int(a)
    img[n * 4096:(n + 1) * 4096] = bytes([n % 251 + 1]) * 4096
print(hashlib.sha1(img).hexdigest())
PY
}

# A checker that records "ID SHA1" of every state it is given.
# shellcheck disable=SC2016  # the checker's shell expands it
rec='echo "$BLKFS_CRASH_STATE $(sha1sum <"$BLKFS_CRASH_DEV" | cut -c1-40)" >>"$IDS"'
# shellcheck disable=SC2016
ids='echo "$BLKFS_CRASH_STATE" >>"$IDS"'	# the ids alone: no process per state
export IDS
cc() { "$BLKFS" crashcheck "$@" --base zeros --scratch "$TDIR"; }

info "70 single-block writes, a mark, --states 1: the in-order image"
specs=()
for ((i = 0; i < 70; i++)); do specs+=("w$i"); done
mklog "$TDIR/w70.log" "${specs[@]}" m70
IDS=$TDIR/a.ids
cc "$TDIR/w70.log" --states 1 --check "$rec" >"$TDIR/a.out" 2>"$TDIR/a.err" ||
	fail "crashcheck: $(cat "$TDIR/a.out" "$TDIR/a.err")"
# shellcheck disable=SC2046  # one block number per word
all=$(expect_sha $(seq 0 69))
assert_eq "the one state checked" "70 $all" "$(cat "$IDS")"
grep -q "sampled 1 of 71" "$TDIR/a.out" || fail "table: $(cat "$TDIR/a.out")"

info "70 blocks without --states: in-order and each block rolled back, ids naming their images"
IDS=$TDIR/b.ids
cc "$TDIR/w70.log" --check "$rec" --json >"$TDIR/b.json" 2>"$TDIR/b.err" ||
	fail "crashcheck: $(cat "$TDIR/b.json" "$TDIR/b.err")"
python3 - >"$TDIR/b.want" <<'PY'
import hashlib
img = bytearray(1 << 20)
for n in range(70):
    img[n * 4096:(n + 1) * 4096] = bytes([n % 251 + 1]) * 4096
print('70', hashlib.sha1(img).hexdigest())
for n in range(70):
    one = bytearray(img)
    one[n * 4096:(n + 1) * 4096] = bytes(4096)
    print('70:%d=0' % n, hashlib.sha1(one).hexdigest())
PY
diff "$TDIR/b.want" "$IDS" >&2 || fail "the states and their images differ from the model's (above)"
python3 - "$TDIR/b.json" <<'PY' || fail "json: $(cat "$TDIR/b.json")"
import json, sys
j = json.load(open(sys.argv[1]))
[p] = j['points']
assert p['states'] == 71 and p['default_set'] == 71 and p['explored'] == 'exhaustive', p
assert p['full_set'] is None and j['sampled_points'] == 0, (p, j)
PY
cc "$TDIR/w70.log" --state 70:5=0 --materialize "$TDIR/s.img"
assert_eq "--materialize 70:5=0" "$(grep '^70:5=0 ' "$IDS" | cut -d' ' -f2)" "$(sha1sum <"$TDIR/s.img" | cut -c1-40)"
cc "$TDIR/w70.log" --state 70:0-69=0 --materialize "$TDIR/s.img"
assert_eq "--materialize 70:0-69=0 (durable only)" "$(expect_sha)" "$(sha1sum <"$TDIR/s.img" | cut -c1-40)"
cc "$TDIR/w70.log" --state 70:3-5=0,60=1 --materialize "$TDIR/s.img"
# shellcheck disable=SC2046  # one block number per word
assert_eq "--materialize 70:3-5=0,60=1" "$(expect_sha $(seq 0 69 | grep -vx '[345]'))" \
	"$(sha1sum <"$TDIR/s.img" | cut -c1-40)"
for bad in 70:3 70:70=0 70:5=2 70:5=0,4=0 71 x; do
	set +e
	out=$(cc "$TDIR/w70.log" --state "$bad" --materialize "$TDIR/s.img" 2>&1)
	st=$?
	set -e
	assert_eq "exit status of --state $bad" 2 "$st"
	case $out in *"--state $bad:"*) ;; *) fail "--state $bad: $out" ;; esac
done

info "--states samples only where the default set is larger"
# event 9: 9 blocks, 512 states; event 10 a flush; event 23: 12 blocks (beyond
# --n 10: 13 states, of 4096); event 25: after a flush, 1 state
specs=()
for ((i = 0; i < 9; i++)); do specs+=("w$i"); done
specs+=(mnine f)
for ((i = 20; i < 32; i++)); do specs+=("w$i"); done
specs+=(mtwelve f mend)
mklog "$TDIR/s.log" "${specs[@]}"
IDS=$TDIR/full.ids
cc "$TDIR/s.log" --check "$ids" >/dev/null 2>"$TDIR/err" || fail "crashcheck: $(cat "$TDIR/err")"
for run in 7a 7b 8; do
	IDS=$TDIR/$run.ids
	cc "$TDIR/s.log" --states 256 --seed "${run%[ab]}" --check "$ids" --json >"$TDIR/$run.json" \
		2>"$TDIR/err" || fail "crashcheck --states 256 --seed ${run%[ab]}: $(cat "$TDIR/err")"
done
python3 - "$TDIR" <<'PY' || fail "sampling (above)"
import collections, json, sys
d = sys.argv[1]
def ids(f):
    return [l.split()[0] for l in open(f)]
full = ids(d + '/full.ids')
byev = lambda l: collections.OrderedDict((e, [i for i in l if i.split(':')[0] == e]) for e in ('9', '23', '25'))
F = byev(full)
assert len(F['9']) == 512 and len(F['23']) == 13 and F['25'] == ['25'], {k: len(v) for k, v in F.items()}
a, b, c = ids(d + '/7a.ids'), ids(d + '/7b.ids'), ids(d + '/8.ids')
A = byev(a)
assert len(A['9']) == 256, len(A['9'])
assert len(set(A['9'])) == 256, ('ids listed twice', [i for i, n in collections.Counter(A['9']).items() if n > 1][:5])
assert A['9'][0] == '9' and set(A['9']) <= set(F['9']), A['9'][:3]
assert A['23'] == F['23'] and A['25'] == F['25'], ('not explored as without --states', A['23'], F['23'])
assert a == b, 'the same --seed listed other ids'
assert byev(c)['9'] != A['9'], 'another --seed listed the same sample'
j = json.load(open(d + '/7a.json'))
ex = {p['event']: p['explored'] for p in j['points']}
assert ex == {9: 'sampled 256 of 512', 10: 'exhaustive', 23: 'exhaustive', 24: 'exhaustive',
              25: 'exhaustive'}, ex
assert j['sampled_points'] == 1, j
PY
IDS=$TDIR/t.ids
cc "$TDIR/s.log" --states 256 --check "$ids" >"$TDIR/t.out" 2>"$TDIR/t.err" || fail "table run"
grep -Eq '^9 +mark +nine +256 +512 +sampled 256 of 512 ' "$TDIR/t.out" || fail "table: $(cat "$TDIR/t.out")"
grep -Eq '^23 +mark +twelve +13 +4096 +exhaustive ' "$TDIR/t.out" || fail "table: $(cat "$TDIR/t.out")"
grep -q "event 25: exhaustive" "$TDIR/t.err" || fail "progress line: $(cat "$TDIR/t.err")"

info "a set too large to list (--k 3, 300 blocks) is drawn from, without repeats"
specs=()
for ((i = 0; i < 300; i++)); do specs+=("w$i"); done
mklog "$TDIR/w300.log" "${specs[@]}" mend
for r in 1 2; do
	IDS=$TDIR/k$r.ids
	cc "$TDIR/w300.log" --k 3 --states 50 --seed 3 --check "$ids" --json >"$TDIR/k.json" \
		2>"$TDIR/err" || fail "crashcheck --k 3: $(cat "$TDIR/err")"
done
cmp -s "$TDIR/k1.ids" "$TDIR/k2.ids" || fail "the same --seed drew other states"
python3 - "$TDIR/k1.ids" "$TDIR/k.json" <<'PY' || fail "draw (above)"
import json, re, sys
ids = [l.split()[0] for l in open(sys.argv[1])]
assert len(ids) == 50 and len(set(ids)) == 50 and ids[0] == '300', ids[:5]
for i in ids[1:]:
    rolled = i.split(':')[1].split(',')
    assert 1 <= len(rolled) <= 3 and all(re.fullmatch(r'\d+=0', r) for r in rolled), i
[p] = json.load(open(sys.argv[2]))['points']
assert p['explored'] == 'sampled 50 of %d' % (1 + 300 + 300 * 299 // 2 + 300 * 299 * 298 // 6), p
PY
info "ok"
