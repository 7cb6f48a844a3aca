#!/bin/sh
# The plan cache as users meet it through nnrun and nndump: a hit gives
# bit-identical outputs to a miss on every model; every kind of damaged,
# foreign or stale file is reported as a warning and rebuilt (never a crash,
# never a wrong output); writes are atomic under concurrent loads; the
# folder's size cap evicts the least recently used plans, and nncache lists,
# prunes and clears it.
#
# usage: tests/test_cache.sh   (the six models come from `make models`; missing ones are skipped, visibly)
set -u
cd "$(dirname "$0")/.."
BUILD=${NN_BUILD:-build}
NNRUN=$BUILD/nnrun
NNDUMP=$BUILD/nndump
NNCACHE=$BUILD/nncache
unset NN_CACHE_MAX # the default cap; section 5 sets its own
MODEL=models/mobilenetv2.onnx
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
checks=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
same_outputs() { # two folders of .npy outputs, byte for byte
    for f in "$1"/*.npy; do
        cmp -s "$f" "$2/$(basename "$f")" || return 1
    done
    [ -n "$(ls "$1")" ]
}
json_cache() { sed -n 's/.*"cache": "\([a-z]*\)".*/\1/p' "$1"; }

# run NAME CACHE_DIR MODEL [nnrun args]: outputs in $tmp/NAME/, JSON report
# in $tmp/NAME.json, stderr in $tmp/NAME.err; returns nnrun's exit code
run() {
    run_name=$1 run_dir=$2 run_model=$3
    shift 3
    rm -rf "${tmp:?}/$run_name"
    mkdir -p "$tmp/$run_name"
    $NNRUN "$run_model" --cache-dir "$run_dir" --iters 1 --warmup 0 --json --save-outputs "$tmp/$run_name" "$@" \
        >"$tmp/$run_name.json" 2>"$tmp/$run_name.err"
}

# ---- 1. miss then hit, bit-identical, on every model
models="$MODEL"
for n in resnet50 vgg19 densenet201 efficientnet_b0 googlenet mobilenet_v2; do
    if [ -f "$BUILD/models/$n.onnx" ]; then
        models="$models $BUILD/models/$n.onnx"
    else
        echo "skipped: $BUILD/models/$n.onnx missing (make models)"
    fi
done
for model in $models; do
    n=$(basename "$model" .onnx)
    checks=$((checks + 1))
    run "$n-miss" "$tmp/cache-c1" "$model" || { fail "$n: miss run failed: $(cat "$tmp/$n-miss.err")"; continue; }
    run "$n-hit" "$tmp/cache-c1" "$model" || { fail "$n: hit run failed: $(cat "$tmp/$n-hit.err")"; continue; }
    if [ "$(json_cache "$tmp/$n-miss.json")" != miss ] || [ "$(json_cache "$tmp/$n-hit.json")" != hit ]; then
        fail "$n: expected a miss then a hit, got $(json_cache "$tmp/$n-miss.json") then $(json_cache "$tmp/$n-hit.json") ($(cat "$tmp/$n-hit.err"))"
    elif ! same_outputs "$tmp/$n-miss" "$tmp/$n-hit"; then
        fail "$n: outputs from the cache differ from the freshly built plan"
    else
        echo "ok: $n hit is bit-identical to miss (load $(sed -n 's/.*"load_ms": \([0-9.]*\).*/\1/p' "$tmp/$n-miss.json") ms -> $(sed -n 's/.*"load_ms": \([0-9.]*\).*/\1/p' "$tmp/$n-hit.json") ms)"
    fi
done

# ---- 2. damaged, foreign and stale files: a warning, the right outputs, and a rewrite
run ref "$tmp/cache-ref" "$MODEL" --no-cache || fail "reference run failed"
run good "$tmp/cache-good" "$MODEL" || fail "first cached run failed"
plan=$(ls "$tmp/cache-good"/*.nnplan)
size=$(wc -c <"$plan")
# ways to damage a file, each given the file last; header offsets follow
# engine/cache_int.h's header record: key 16, file size 32, sections 40..71,
# model hash 72, model identity 88, checksum 128
poke() { printf '\377\377\377\377' | dd of="$2" bs=1 seek="$1" conv=notrunc 2>/dev/null; }
cut() { truncate -s "$1" "$2"; }
replace_with_model() { cp "$MODEL" "$1"; }
append_byte() { printf x >>"$1"; }
# damaged NAME EXPECTED-WARNING DAMAGE [ARGS]: a copy of the good plan in a
# fresh folder, damaged with DAMAGE ARGS FILE, must be rebuilt and rewritten
damaged() {
    name=$1 want=$2
    shift 2
    checks=$((checks + 1))
    d=$tmp/case-$name
    mkdir -p "$d"
    f=$d/$(basename "$plan")
    cp "$plan" "$f"
    "$@" "$f"
    run "$name" "$d" "$MODEL"
    rc=$?
    if [ $rc -ne 0 ]; then
        fail "$name: nnrun exited $rc: $(cat "$tmp/$name.err")"
    elif ! grep -q "warning: plan cache.*$want" "$tmp/$name.err"; then
        fail "$name: expected a warning with '$want', got: $(cat "$tmp/$name.err")"
    elif [ "$(json_cache "$tmp/$name.json")" != miss ] || ! same_outputs "$tmp/ref" "$tmp/$name"; then
        fail "$name: not rebuilt, or outputs differ from the reference"
    elif ! run "$name-again" "$d" "$MODEL" || [ "$(json_cache "$tmp/$name-again.json")" != hit ]; then
        fail "$name: the rebuilt plan was not rewritten (next load: $(json_cache "$tmp/$name-again.json"))"
    fi
}
damaged zero-length "is empty" cut 0
damaged cut-in-header "shorter than its header" cut 40
damaged cut-in-meta "truncated" cut 300
damaged cut-in-data "truncated" cut $((size / 2))
damaged cut-last-byte "truncated" cut $((size - 1))
damaged foreign "not an nn plan file" replace_with_model
damaged magic "not an nn plan file" poke 0
damaged version "another version of the plan format" poke 8
damaged key "stale" poke 20
damaged file-size "truncated or extended" poke 36
damaged sections "damaged\|outside the file" poke 60
damaged recorded-model-hash "stale" poke 76
damaged recorded-model-identity "damaged" poke 100
damaged checksum "damaged" poke 130
damaged meta "damaged" poke 300
damaged weights "damaged" poke $((size - 4096))
damaged appended "truncated or extended" append_byte

# a folder where the file should be: warned, rebuilt, outputs right, nothing crashes
checks=$((checks + 1))
mkdir -p "$tmp/cache-dir-case/$(basename "$plan")"
if ! run dir-case "$tmp/cache-dir-case" "$MODEL"; then
    fail "a folder in the file's place: nnrun failed: $(cat "$tmp/dir-case.err")"
elif ! grep -q "not a regular file" "$tmp/dir-case.err" || ! same_outputs "$tmp/ref" "$tmp/dir-case"; then
    fail "a folder in the file's place: $(cat "$tmp/dir-case.err")"
fi

# a cache folder that cannot be created or written: warned, the load still works
checks=$((checks + 1))
: >"$tmp/a-file"
if ! run no-folder "$tmp/a-file/cache" "$MODEL" || ! grep -q "cannot write the plan cache" "$tmp/no-folder.err" ||
    ! same_outputs "$tmp/ref" "$tmp/no-folder"; then
    fail "uncreatable cache folder: $(cat "$tmp/no-folder.err")"
fi
if [ "$(id -u)" -ne 0 ]; then
    checks=$((checks + 1))
    mkdir -p "$tmp/cache-read-only" && chmod 555 "$tmp/cache-read-only"
    if ! run read-only "$tmp/cache-read-only" "$MODEL" || ! grep -q "cannot write the plan cache" "$tmp/read-only.err" ||
        ! same_outputs "$tmp/ref" "$tmp/read-only"; then
        fail "read-only cache folder: $(cat "$tmp/read-only.err")"
    fi
else
    echo "skipped: read-only cache folder (running as root, which writes anyway)"
fi

# a stale plan: the model file at the same path changed (one weight byte) since the plan was written
checks=$((checks + 1))
mkdir -p "$tmp/stale"
cp "$MODEL" "$tmp/stale/model.onnx"
run stale-1 "$tmp/cache-stale" "$tmp/stale/model.onnx"
printf '\077' | dd of="$tmp/stale/model.onnx" bs=1 seek=$(($(wc -c <"$MODEL") / 2)) conv=notrunc 2>/dev/null
run stale-ref "$tmp/cache-none" "$tmp/stale/model.onnx" --no-cache
if ! run stale-2 "$tmp/cache-stale" "$tmp/stale/model.onnx" || ! grep -q "stale" "$tmp/stale-2.err" ||
    ! same_outputs "$tmp/stale-ref" "$tmp/stale-2" || same_outputs "$tmp/ref" "$tmp/stale-2"; then
    fail "changed model file: $(cat "$tmp/stale-2.err")"
fi

# other options make another plan, not a stale one
checks=$((checks + 1))
run batch2 "$tmp/cache-good" "$MODEL" --batch 2
if [ "$(json_cache "$tmp/batch2.json")" != miss ] || [ -s "$tmp/batch2.err" ] || [ "$(ls "$tmp/cache-good" | wc -l)" -ne 2 ]; then
    fail "--batch 2 should be a plain miss beside the batch-1 plan: $(cat "$tmp/batch2.err")"
fi

# --no-cache neither reads nor writes
checks=$((checks + 1))
run off "$tmp/cache-off" "$MODEL" --no-cache
if [ "$(json_cache "$tmp/off.json")" != off ] || [ -e "$tmp/cache-off" ]; then
    fail "--no-cache wrote or reported a cache"
fi

# ---- 3. concurrent loads: all succeed, no half-written file left, the survivor is valid
checks=$((checks + 1))
pids=""
for i in 1 2 3 4; do
    run "conc-$i" "$tmp/cache-conc" "$MODEL" &
    pids="$pids $!"
done
for p in $pids; do
    wait "$p" || fail "a concurrent load failed"
done
for i in 1 2 3 4; do
    same_outputs "$tmp/ref" "$tmp/conc-$i" || fail "concurrent load $i gave other outputs: $(cat "$tmp/conc-$i.err")"
done
if [ "$(ls "$tmp/cache-conc" | wc -l)" -ne 1 ] || ! run conc-after "$tmp/cache-conc" "$MODEL" ||
    [ "$(json_cache "$tmp/conc-after.json")" != hit ]; then
    fail "after concurrent loads: $(ls "$tmp/cache-conc") / $(cat "$tmp/conc-after.err")"
fi

# ---- 4. nndump --stage final reads a hit the same as a miss (only the pass table differs: no passes ran)
checks=$((checks + 1))
without_passes() { sed '/^passes/,/^memory plan/{/^memory plan/!d}' "$1"; }
$NNDUMP "$MODEL" --cache-dir "$tmp/cache-dump" >"$tmp/dump-miss.txt" 2>&1
$NNDUMP "$MODEL" --cache-dir "$tmp/cache-dump" >"$tmp/dump-hit.txt" 2>&1
if ! grep -q "plan came from the cache" "$tmp/dump-hit.txt" || ! grep -q "^stage final" "$tmp/dump-hit.txt" ||
    [ "$(without_passes "$tmp/dump-miss.txt")" != "$(without_passes "$tmp/dump-hit.txt")" ]; then
    fail "nndump from a cache hit differs from a miss"
fi

# ---- 5. the size cap: least recently used plans go first, a hit counts as a use, nncache
# Tiny models from ONNX's node tests give small plans; file times set with touch stand for use.
node=/usr/share/libonnx-testdata/data/node
lru=$tmp/cache-lru
plan_of() { ls "$1"/"$2"-*.nnplan 2>/dev/null; }
bytes_of() { wc -c <"$1"; }
checks=$((checks + 1))
# the three share the name "model": tell them apart by folder, one plan per folder, then gather them
for t in relu sigmoid tanh; do
    run "cap1-$t" "$tmp/cache-one-$t" "$node/test_$t/model.onnx"
done
relu=$(plan_of "$tmp/cache-one-relu" model) sigm=$(plan_of "$tmp/cache-one-sigmoid" model)
tanh=$(plan_of "$tmp/cache-one-tanh" model)
if [ -z "$relu" ] || [ -z "$sigm" ] || [ -z "$tanh" ] || [ "$relu" = "$sigm" ]; then
    fail "cap: expected one plan per model, got: $relu / $sigm / $tanh"
else
    r=$(bytes_of "$relu") s=$(bytes_of "$sigm") h=$(bytes_of "$tanh")
    mkdir -p "$lru"
    cp "$relu" "$sigm" "$lru/"
    touch -d '3 days ago' "$lru/$(basename "$relu")"
    touch -d '2 days ago' "$lru/$(basename "$sigm")"
    # room for two: writing tanh's plan evicts relu's, the least recently used
    NN_CACHE_MAX=$((s + h)) run cap-evict "$lru" "$node/test_tanh/model.onnx"
    if [ -e "$lru/$(basename "$relu")" ] || [ ! -e "$lru/$(basename "$sigm")" ] || [ ! -e "$lru/$(basename "$tanh")" ]; then
        fail "cap: writing a plan beyond the cap should evict the oldest only: $(ls "$lru")"
    else
        echo "ok: the cap evicts the least recently used plan"
    fi
    # a hit refreshes: sigmoid (older) is hit, so writing relu again evicts tanh instead
    checks=$((checks + 1))
    touch -d '2 days ago' "$lru/$(basename "$sigm")"
    touch -d '1 day ago' "$lru/$(basename "$tanh")"
    NN_CACHE_MAX=$((s + h)) run cap-hit "$lru" "$node/test_sigmoid/model.onnx"
    [ "$(json_cache "$tmp/cap-hit.json")" = hit ] || fail "cap: expected a hit on sigmoid: $(cat "$tmp/cap-hit.err")"
    NN_CACHE_MAX=$((s + r)) run cap-refresh "$lru" "$node/test_relu/model.onnx"
    if [ ! -e "$lru/$(basename "$sigm")" ] || [ -e "$lru/$(basename "$tanh")" ] || [ ! -e "$lru/$(basename "$relu")" ]; then
        fail "cap: a hit should make its plan the most recently used: $(ls "$lru")"
    else
        echo "ok: a hit makes its plan the most recently used"
    fi
fi
# a plan larger than the cap is not written (and nothing is evicted for it); a bad NN_CACHE_MAX is a warning
checks=$((checks + 1))
NN_CACHE_MAX=1K run cap-small "$tmp/cache-small" "$node/test_relu/model.onnx"
if ! grep -q "not cached: the plan.*exceed the plan cache's cap" "$tmp/cap-small.err" || [ -n "$(ls "$tmp/cache-small" 2>/dev/null)" ]; then
    fail "cap: a plan over the cap: $(cat "$tmp/cap-small.err") / $(ls "$tmp/cache-small" 2>/dev/null)"
fi
checks=$((checks + 1))
NN_CACHE_MAX=lots run cap-bad "$tmp/cache-bad" "$node/test_relu/model.onnx"
if ! grep -q "NN_CACHE_MAX='lots' is not a size" "$tmp/cap-bad.err" || [ "$(json_cache "$tmp/cap-bad.json")" != miss ]; then
    fail "cap: a bad NN_CACHE_MAX: $(cat "$tmp/cap-bad.err")"
fi

# nncache list / prune / clear, with a damaged and a foreign-looking file among the plans
checks=$((checks + 1))
lst=$tmp/cache-list
mkdir -p "$lst"
cp "$relu" "$sigm" "$tanh" "$lst/" 2>/dev/null
touch -d '3 days ago' "$lst/$(basename "$relu")"
head -c 5000 /dev/urandom >"$lst/junk-0123456789abcdef.nnplan"
head -c 100 "$sigm" >"$lst/short-0123456789abcdef.nnplan"
echo keep >"$lst/notes.txt"
NN_CACHE_DIR=$lst $NNCACHE list >"$tmp/list.txt" 2>&1 || fail "nncache list failed: $(cat "$tmp/list.txt")"
if ! grep -q "^5 plans" "$tmp/list.txt" || [ "$(grep -c ' ok  ' "$tmp/list.txt")" -ne 3 ] ||
    ! grep -q "damaged (not a plan file).*junk-" "$tmp/list.txt" || ! grep -q "damaged (shorter.*short-" "$tmp/list.txt"; then
    fail "nncache list: $(cat "$tmp/list.txt")"
elif [ "$(sed -n 3p "$tmp/list.txt" | awk '{print $NF}')" != "$(basename "$relu")" ]; then
    fail "nncache list does not show the least recently used plan first: $(cat "$tmp/list.txt")"
fi
checks=$((checks + 1))
# prune: the two damaged files, then the oldest plan to fit the cap
$NNCACHE --dir "$lst" prune --max $((s + h)) >"$tmp/prune.txt" 2>&1 || fail "nncache prune failed: $(cat "$tmp/prune.txt")"
if [ "$(ls "$lst" | sort | tr '\n' ' ')" != "$(printf '%s\n' notes.txt "$(basename "$sigm")" "$(basename "$tanh")" | sort | tr '\n' ' ')" ]; then
    fail "nncache prune left: $(ls "$lst") ($(cat "$tmp/prune.txt"))"
fi
checks=$((checks + 1))
NN_CACHE_DIR=$lst $NNCACHE clear >"$tmp/clear.txt" 2>&1 || fail "nncache clear failed: $(cat "$tmp/clear.txt")"
if [ "$(ls "$lst")" != notes.txt ] || ! grep -q "removed 2 files" "$tmp/clear.txt"; then
    fail "nncache clear left: $(ls "$lst") ($(cat "$tmp/clear.txt"))"
fi
$NNCACHE list --max 1G >/dev/null 2>&1 && fail "nncache list --max should be refused"

# evicting a plan a running process uses (a hit keeps it mapped and reads its weights in place) leaves
# that process's outputs right: eviction only removes the name
checks=$((checks + 1))
run busy-1 "$tmp/cache-busy" "$MODEL" >/dev/null
touch -d '1 day ago' "$tmp/cache-busy"/*.nnplan
mkdir -p "$tmp/busy-2"
$NNRUN "$MODEL" --cache-dir "$tmp/cache-busy" --iters 1 --warmup 0 --json --duration 3 --save-outputs "$tmp/busy-2" \
    >"$tmp/busy-2.json" 2>"$tmp/busy-2.err" &
busy=$!
# a hit refreshes the plan's time once it has mapped it: clear then, during the timed runs
waited=0
while [ -z "$(find "$tmp/cache-busy" -name '*.nnplan' -newermt '1 hour ago')" ] && [ $waited -lt 300 ]; do
    sleep 0.1
    waited=$((waited + 1))
done
$NNCACHE --dir "$tmp/cache-busy" clear >/dev/null
if ! wait $busy || [ "$(json_cache "$tmp/busy-2.json")" != hit ] || ! same_outputs "$tmp/ref" "$tmp/busy-2"; then
    fail "a plan cleared while a process ran from it: $(cat "$tmp/busy-2.err") ($(json_cache "$tmp/busy-2.json"))"
elif [ -n "$(ls "$tmp/cache-busy")" ]; then
    fail "nncache clear left $(ls "$tmp/cache-busy")"
fi

echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
