#!/bin/sh
# nnrun as a user meets it: reports, JSON keys, and one clear error line with
# a non-zero exit for every kind of bad input.
set -u
cd "$(dirname "$0")/.."
BUILD=${NN_BUILD:-build}
NNRUN=$BUILD/nnrun
MODEL=models/mobilenetv2.onnx
PY=/usr/bin/python3
tmp=$(mktemp -d)
writer=""
trap '[ -n "$writer" ] && kill "$writer" 2>/dev/null; rm -rf "$tmp"' EXIT
# plans go to a scratch folder (run_all.sh sets one too; this keeps a lone run out of ~/.cache)
NN_CACHE_DIR=${NN_CACHE_DIR:-$tmp/cache}
export NN_CACHE_DIR
# the GPU cases below assume a machine without a usable NVIDIA GPU, as CI is
have_gpu=false
nvidia-smi -L >/dev/null 2>&1 && have_gpu=true
fails=0
checks=0
check() { # description, then the condition as a command
    desc=$1
    shift
    checks=$((checks + 1))
    if ! "$@"; then
        echo "FAIL: $desc"
        fails=$((fails + 1))
    fi
}
# expect: exit code, text the single stderr line must contain, then the command
expect_error() {
    want_rc=$1
    want_text=$2
    shift 2
    "$@" >"$tmp/stdout" 2>"$tmp/err"
    rc=$?
    checks=$((checks + 1))
    # a sanitizer build (make sanitize) adds its own notes on huge allocations: not nnrun's lines
    lines=$(grep -cv '^==[0-9]*==WARNING: [A-Za-z]*Sanitizer' "$tmp/err")
    if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want_text" "$tmp/err" || [ "$lines" -ne 1 ]; then
        echo "FAIL: '$*' exited $rc (want $want_rc), stderr ($lines lines): $(cat "$tmp/err")"
        fails=$((fails + 1))
    fi
}

head -c 1000 "$MODEL" >"$tmp/truncated.onnx"
head -c 4000 /dev/urandom >"$tmp/garbage.onnx"
: >"$tmp/empty.onnx"
expect_error 1 "not a valid ONNX protobuf" $NNRUN "$tmp/truncated.onnx"
expect_error 1 "not a valid ONNX protobuf" $NNRUN "$tmp/garbage.onnx"
expect_error 1 "empty file" $NNRUN "$tmp/empty.onnx"
expect_error 1 "cannot open" $NNRUN "$tmp/missing.onnx"
$have_gpu || expect_error 2 "device 'gpu0' is not available" $NNRUN "$MODEL" --device gpu0
expect_error 2 "unknown device" $NNRUN "$MODEL" --device tpu
expect_error 2 "--batch needs an integer" $NNRUN "$MODEL" --batch 0
expect_error 2 "unknown option '--frobnicate'" $NNRUN "$MODEL" --frobnicate
expect_error 2 "the model has no input of that name" $NNRUN "$MODEL" --input nosuch=models/mobilenetv2.input.npy
expect_error 1 "cannot open" $NNRUN "$MODEL" --input input="$tmp/missing.npy"
expect_error 1 "more than the memory limit of 10.0 MiB" $NNRUN "$MODEL" --no-cache --max-memory 10M
expect_error 2 "--max-memory needs a size" $NNRUN "$MODEL" --max-memory 12X
expect_error 2 "--max-memory needs a size" $NNRUN "$MODEL" --max-memory -5
expect_error 2 "--cache-dir needs a folder" $NNRUN "$MODEL" --cache-dir
check "--max-memory 1G lets the model load" sh -c "$NNRUN $MODEL --iters 1 --warmup 0 --max-memory 1G >/dev/null"

check "--help lists options" sh -c "$NNRUN --help | grep -q -- '--scan-batch\|--batch N'"
$NNRUN --version >"$tmp/version"
check "--version names the engine version" grep -q '^nnrun [0-9]' "$tmp/version"
check "--version names the CPU kernels and ISA" grep -q '^cpu kernels  [a-z0-9]* (instruction set ' "$tmp/version"
check "--version names the OpenMP runtime" grep -q '^openmp       [0-9]*, runtime .*omp' "$tmp/version"
if [ -f "$(dirname "$NNRUN")/libnn_cuda.so" ]; then
    check "--version names the CUDA plugin beside nnrun" grep -q '^cuda         plugin .*/libnn_cuda.so: ' "$tmp/version"
else
    check "--version says no CUDA plugin is found" grep -q '^cuda         no plugin found' "$tmp/version"
fi
NN_CUDA_PLUGIN=/nonexistent/libnn_cuda.so $NNRUN --version >"$tmp/version2"
check "--version: a missing NN_CUDA_PLUGIN means CPU only" grep -q '^cuda         no plugin found' "$tmp/version2"

$NNRUN "$MODEL" --iters 3 --warmup 1 --json >"$tmp/report.json" 2>"$tmp/err"
check "--json runs" test $? -eq 0
for key in '"model"' '"batch"' '"device"' '"load_ms"' '"latency_ms"' '"median"' '"p90"' '"p99"' '"throughput"' '"peak_rss_mb"' \
    '"first_result_ms"' '"cache"' '"weight_bytes"' '"min"' '"mean"' '"p95"' '"max"' '"stddev"' '"throughput_basis"' \
    '"memory_bytes"' '"warnings"'; do
    check "json has $key" grep -q "$key" "$tmp/report.json"
done
check "json is one line" test "$(wc -l <"$tmp/report.json")" -eq 1

$NNRUN "$MODEL" --iters 2 --warmup 0 >"$tmp/report.txt" 2>&1
for word in "load" "cache" "first result" "latency" "median" "mean" "min" "max" "stddev" "p90" "p95" "p99" \
    "throughput" "runs x 1 sample in" "peak RSS" "parameters" "the model needs"; do
    check "text report has '$word'" grep -q "$word" "$tmp/report.txt"
done

# the committed default model matches torch's output
$NNRUN "$MODEL" --input input=models/mobilenetv2.input.npy --save-outputs "$tmp/saved" --iters 1 --warmup 0 >/dev/null
check "default model runs with --input and --save-outputs" test -f "$tmp/saved/output.npy"
check "default model matches torch (rel L2 <= 1e-4)" "$BUILD/tests/compare_npy" "$tmp/saved/output.npy" models/mobilenetv2.output.npy 1e-4

# ---- issue 27: nnrun's rough edges, each command as the issue gives it
# json FILE EXPR: a value from a JSON report (python's json module parses it, so it is valid JSON too)
json() { $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null; }

# the whole memory need: one message states it, and one retry at that figure loads the model
for cache in --no-cache ""; do
    $NNRUN "$MODEL" $cache --max-memory 1M --iters 1 --warmup 0 >/dev/null 2>"$tmp/err"
    rc=$?
    need=$(sed -n 's/.*model needs \([0-9.]*\) MiB (.*weights .*activations .*scratch .*inputs and outputs.*/\1/p' "$tmp/err")
    check "--max-memory 1M $cache: exit 1 and the whole need stated ($(cat "$tmp/err"))" test "$rc" -eq 1 -a -n "$need"
    check "--max-memory ${need}M $cache (the figure from the message) loads and runs" \
        sh -c "$NNRUN $MODEL $cache --max-memory ${need}M --iters 1 --warmup 0 >/dev/null"
done
$NNRUN "$MODEL" --no-cache --iters 1 --warmup 0 --json >"$tmp/need.json"
need_bytes=$(json "$tmp/need.json" "d['memory_bytes']")
sum_bytes=$(json "$tmp/need.json" "d['weight_bytes'] + d['arena_bytes'] + d['workspace_bytes'] + d['io_bytes']")
check "memory_bytes ($need_bytes) is weights + arena + scratch + inputs and outputs ($sum_bytes)" \
    test -n "$need_bytes" -a "$need_bytes" = "$sum_bytes"
check "a limit of memory_bytes exactly loads the model" \
    sh -c "$NNRUN $MODEL --no-cache --max-memory $need_bytes --iters 1 --warmup 0 >/dev/null"
expect_error 1 "model needs" $NNRUN "$MODEL" --no-cache --max-memory $((need_bytes - 1)) --iters 1
# an allocation that cannot succeed says how much it asked for
expect_error 1 "out of memory for 574218750.0 MiB of random data for input 'input'" \
    $NNRUN "$MODEL" --no-cache --batch 1000000000 --iters 1

# --scan-batch: a failed row is labelled with its batch.  The limit lies between batch 1's and batch 2's need.
$NNRUN "$MODEL" --batch 2 --micro-batch 2 --no-cache --iters 1 --warmup 0 --json >"$tmp/b2.json"
need1=$need_bytes
need2=$(json "$tmp/b2.json" "d['memory_bytes']")
limit=$(((need1 + need2) / 2))
$NNRUN "$MODEL" --scan-batch 1,2 --micro-batch 2 --no-cache --max-memory $limit --iters 2 --warmup 0 \
    >"$tmp/scan.txt" 2>"$tmp/scan.err"
rc=$?
check "scan with batch 2 over the memory limit: exit 0 (batch 1 ran)" test "$rc" -eq 0
check "scan: the failed row is batch 2" grep -q '^2 *failed' "$tmp/scan.txt"
check "scan: no row labelled batch 0" sh -c "! grep -q '^0 ' '$tmp/scan.txt'"
check "scan: batch 1 measured" grep -q '^1 *[0-9]' "$tmp/scan.txt"
check "scan: the error is printed once, naming batch 2" \
    test "$(grep -c 'model needs' "$tmp/scan.err")" -eq 1 -a "$(grep -c '^nnrun: batch 2: model needs' "$tmp/scan.err")" -eq 1
$NNRUN "$MODEL" --scan-batch 1,2 --micro-batch 2 --no-cache --max-memory $limit --iters 2 --warmup 0 --json \
    >"$tmp/scan.json" 2>/dev/null
check "scan JSON: batch 2 failed with its error" test "$(json "$tmp/scan.json" "[r['batch'] for r in d['scan'] if not r['ok'] and 'model needs' in r['error']]")" = "[2]"
# an unavailable device: the error once, exit 2 like a plain run, no table
if ! $have_gpu; then
    $NNRUN "$MODEL" --scan-batch 1,2 --device gpu0 >"$tmp/scan.txt" 2>"$tmp/scan.err"
    rc=$?
    check "scan --device gpu0: exit 2 (got $rc)" test "$rc" -eq 2
    check "scan --device gpu0: one error line ($(cat "$tmp/scan.err"))" \
        test "$(wc -l <"$tmp/scan.err")" -eq 1 -a "$(grep -c "gpu0" "$tmp/scan.err")" -eq 1
    check "scan --device gpu0: no table of failed rows" test ! -s "$tmp/scan.txt"
fi
# the latency budget picks the largest batch whose p99 fits
$NNRUN "$MODEL" --scan-batch 1,2 --iters 2 --warmup 0 --latency-budget 1000000 --json >"$tmp/budget.json" 2>/dev/null
check "--latency-budget 1000000 ms: batch 2 fits" test "$(json "$tmp/budget.json" "d['budget_batch']")" = 2
$NNRUN "$MODEL" --scan-batch 1,2 --iters 2 --warmup 0 --latency-budget 0.001 >"$tmp/budget.txt" 2>/dev/null
check "--latency-budget 0.001 ms: no batch fits" grep -q "no batch size meets a p99 latency of" "$tmp/budget.txt"
# progress: one line per finished point with --progress, none with --quiet or when stderr is no terminal
$NNRUN "$MODEL" --scan-batch 1,2 --iters 1 --warmup 0 --progress >/dev/null 2>"$tmp/progress"
check "--progress: a line per point" test "$(grep -c '^nnrun: \[[12]/2\] batch [12]: median' "$tmp/progress")" -eq 2
$NNRUN "$MODEL" --scan-batch 1,2 --iters 1 --warmup 0 --progress --quiet >/dev/null 2>"$tmp/progress"
check "--quiet: no progress lines" test ! -s "$tmp/progress"
$NNRUN "$MODEL" --scan-batch 1 --iters 1 --warmup 0 >/dev/null 2>"$tmp/progress"
check "stderr not a terminal: no progress lines" test ! -s "$tmp/progress"

$NNRUN "$MODEL" --duration 2.5 --iters 1 --warmup 0 --progress >/dev/null 2>"$tmp/progress"
check "--progress on a long run: a line every 2 s" grep -q '^nnrun: [0-9]* s, [0-9]* runs\? so far$' "$tmp/progress"

# output folders are checked before the model loads, not after the timed runs
start=$(date +%s)
expect_error 1 "--save-outputs '$tmp/no/such/dir': cannot create the folder" \
    $NNRUN "$MODEL" --save-outputs "$tmp/no/such/dir" --duration 30
check "--save-outputs to a missing parent fails at once (took $(($(date +%s) - start)) s of a 30 s run)" \
    test $(($(date +%s) - start)) -lt 20
$NNRUN "$MODEL" --save-outputs "$tmp/newdir" --iters 1 --warmup 0 >/dev/null 2>&1
check "--save-outputs creates its folder" test -f "$tmp/newdir/output.npy"

# bad values named plainly
expect_error 2 "--batch 99999999999 is too large" $NNRUN "$MODEL" --batch 99999999999
expect_error 2 "--scan-batch: empty or overlong size in '1,,4'" $NNRUN "$MODEL" --scan-batch 1,,4
expect_error 2 "--scan-batch: empty or overlong size in '1,4,'" $NNRUN "$MODEL" --scan-batch 1,4,
$PY -c "import numpy as np; np.save('$tmp/f64.npy', np.load('models/mobilenetv2.input.npy').astype(np.float64))"
expect_error 2 "holds float64 data and input 'input' takes float32 (numpy's default is float64: save x.astype(numpy.float32))" \
    $NNRUN "$MODEL" --input input="$tmp/f64.npy" --iters 1
# --input FILE for a model with one input
$NNRUN "$MODEL" --input models/mobilenetv2.input.npy --save-outputs "$tmp/plain" --iters 1 --warmup 0 >/dev/null
check "--input FILE without NAME= feeds the only input" \
    "$BUILD/tests/compare_npy" "$tmp/plain/output.npy" models/mobilenetv2.output.npy 1e-4
# ... and a model with two inputs asks for NAME=FILE
$PY - "$tmp/two.onnx" <<'PYEOF'
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [1, 3, 224, 224])
y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [1, 3, 224, 224])
z = helper.make_tensor_value_info('z', TensorProto.FLOAT, [1, 3, 224, 224])
g = helper.make_graph([helper.make_node('Add', ['x', 'y'], ['z'])], 'two', [x, y], [z])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), sys.argv[1])
PYEOF
expect_error 2 "the model has 2 inputs, so give NAME=FILE (e.g. x=models/mobilenetv2.input.npy)" \
    $NNRUN "$tmp/two.onnx" --input models/mobilenetv2.input.npy --iters 1
# one sample with --batch 8: warned, and the report counts the sample that ran
$NNRUN "$MODEL" --input input=models/mobilenetv2.input.npy --batch 8 --iters 1 --warmup 0 --json >"$tmp/b8.json" 2>"$tmp/err"
check "--batch 8 with a 1-sample input warns ($(cat "$tmp/err"))" grep -q "warning: --batch 8, but the input holds 1 sample" "$tmp/err"
check "--batch 8 with a 1-sample input: JSON says batch 8, samples 1" \
    test "$(json "$tmp/b8.json" "(d['batch'], d['samples'], d['throughput_basis']['samples_per_run'])")" = "(8, 1, 1)"
procs=$(nproc)
if [ "$procs" -lt 999 ]; then
    $NNRUN "$MODEL" --threads 999 --iters 1 --warmup 0 >/dev/null 2>"$tmp/err"
    check "--threads 999 on $procs processors warns" grep -q "warning: --threads 999 is more than the $procs processors" "$tmp/err"
fi

# statistics: by default at least 1 s and 10 runs; --iters and --duration override
$NNRUN "$MODEL" --warmup 0 --json >"$tmp/default.json" 2>/dev/null
check "default run: >= 10 runs and >= 1 s ($(json "$tmp/default.json" "(d['iters'], d['timed_s'])"))" \
    test "$(json "$tmp/default.json" "d['iters'] >= 10 and d['timed_s'] >= 1.0")" = True
check "statistics ordered: min <= median <= p90 <= p95 <= p99 <= max, min <= mean <= max" \
    test "$(json "$tmp/default.json" "(lambda l: l['min'] <= l['median'] <= l['p90'] <= l['p95'] <= l['p99'] <= l['max'] and l['min'] <= l['mean'] <= l['max'] and l['stddev'] >= 0)(d['latency_ms'])")" = True
check "throughput = runs x samples per run / seconds" \
    test "$(json "$tmp/default.json" "(lambda b: abs(b['runs'] * b['samples_per_run'] / b['seconds'] - d['throughput']) < 1e-3 * d['throughput'])(d['throughput_basis'])")" = True
$NNRUN "$MODEL" --warmup 0 --iters 5 --json >"$tmp/iters.json" 2>/dev/null
check "--iters 5 runs 5 times" test "$(json "$tmp/iters.json" "d['iters']")" = 5
$NNRUN "$MODEL" --warmup 0 --iters 2 --duration 0.5 --json >"$tmp/dur.json" 2>/dev/null
check "--duration 0.5 --iters 2: >= 0.5 s and >= 2 runs" \
    test "$(json "$tmp/dur.json" "d['timed_s'] >= 0.5 and d['iters'] >= 2")" = True

# --profile: the per-node table beside the per-op one, and the same in the JSON
$NNRUN "$MODEL" --iters 2 --warmup 0 --profile >"$tmp/profile.txt" 2>&1
check "--profile: per-op table" grep -q '^operator  *nodes  *ms per run  *share' "$tmp/profile.txt"
check "--profile: per-node table header" grep -q '^node  *operator  *output  *ms per run  *share  *GFLOP/s' "$tmp/profile.txt"
check "--profile: the first conv's row with its shape and GFLOP/s" \
    grep -q '^/features/features.0/features.0.0/Conv  *Conv+  *FLOAT\[1,32,112,112\]  *[0-9.]*  *[0-9.]*%  *[0-9.]*$' "$tmp/profile.txt"
$NNRUN "$MODEL" --iters 2 --warmup 0 --profile --json >"$tmp/profile.json" 2>"$tmp/err"
# (a loaded machine may add the noisy-machine warning: that is the only line allowed)
grep -v 'the machine is noisy' "$tmp/err" >"$tmp/err.other"
check "--profile --json: one JSON object, nothing else on stderr" test ! -s "$tmp/err.other" -a "$(json "$tmp/profile.json" "len(d['profile']['nodes'])")" = "$(json "$tmp/profile.json" "d['nodes']")"
check "--profile --json: node shares sum to 1" test "$(json "$tmp/profile.json" "abs(sum(n['share'] for n in d['profile']['nodes']) - 1) < 1e-3")" = True
# FLOPs of the first conv from its shapes in the ONNX file (32 filters of 3x3x3 on a 112x112 output)
check "--profile --json: the first conv's FLOPs are 2 x 32 x 112 x 112 x 3 x 3 x 3" \
    test "$(json "$tmp/profile.json" "int(d['profile']['nodes'][0]['flops'])")" = $((2 * 32 * 112 * 112 * 27))
check "--profile --json: per-op rows sum the nodes" \
    test "$(json "$tmp/profile.json" "sum(o['nodes'] for o in d['profile']['ops']) == len(d['profile']['nodes'])")" = True
# a QLinearConv counts its integer multiply-adds as a Conv counts its float ones
$PY - "$tmp/qconv.onnx" <<'PYEOF'
import sys, numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
c = lambda n, a: numpy_helper.from_array(np.asarray(a), n)
inits = [c('xs', np.float32(0.02)), c('xz', np.uint8(128)), c('w', np.ones((16, 8, 3, 3), np.int8)),
         c('ws', np.float32(0.01)), c('wz', np.int8(0)), c('ys', np.float32(0.05)), c('yz', np.uint8(128))]
node = helper.make_node('QLinearConv', ['x', 'xs', 'xz', 'w', 'ws', 'wz', 'ys', 'yz'], ['y'], pads=[1, 1, 1, 1])
g = helper.make_graph([node], 'q', [helper.make_tensor_value_info('x', TensorProto.UINT8, [1, 8, 10, 10])],
                      [helper.make_tensor_value_info('y', TensorProto.UINT8, [1, 16, 10, 10])], inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 13)]), sys.argv[1])
PYEOF
$NNRUN "$tmp/qconv.onnx" --iters 2 --warmup 0 --profile --json >"$tmp/qprofile.json" 2>/dev/null
# (channels-last by then, between two Transposes: passes/layout_nhwc.c)
check "--profile --json: a 3x3 QLinearConv's operations are 2 x 16 x 10 x 10 x 8 x 3 x 3" \
    test "$(json "$tmp/qprofile.json" "int([n for n in d['profile']['nodes'] if n['op'].startswith('QLinearConv')][0]['flops'])")" = $((2 * 16 * 100 * 72))

# energy from Linux powercap, read from a fake sysfs tree that a writer advances by 1 J every 50 ms
zone="$tmp/powercap/intel-rapl:0"
mkdir -p "$zone"
echo package-0 >"$zone/name"
echo 262143328850 >"$zone/max_energy_range_uj"
echo 1000 >"$zone/energy_uj"
sub="$tmp/powercap/intel-rapl:0:0" # a subzone, listed beside its package as sysfs does: never added
mkdir -p "$sub"
echo 262143328850 >"$sub/max_energy_range_uj"
echo 5 >"$sub/energy_uj"
(
    e=1000
    while :; do
        e=$((e + 1000000))
        echo $e >"$zone/energy_uj.new" && mv "$zone/energy_uj.new" "$zone/energy_uj"
        echo $((e * 10)) >"$sub/energy_uj.new" && mv "$sub/energy_uj.new" "$sub/energy_uj"
        sleep 0.05
    done
) &
writer=$!
NN_POWERCAP_ROOT="$tmp/powercap" $NNRUN "$MODEL" --iters 2 --duration 0.5 --warmup 0 --json >"$tmp/energy.json" 2>/dev/null
NN_POWERCAP_ROOT="$tmp/powercap" $NNRUN "$MODEL" --iters 2 --duration 0.5 --warmup 0 >"$tmp/energy.txt" 2>/dev/null
kill "$writer"
writer=""
# at most 20 J/s (less on a loaded machine); the subzone's 200 J/s, if it were added, would show
check "energy: joules_per_sample = joules / samples run" \
    test "$(json "$tmp/energy.json" "(lambda e: e['source'] == 'powercap' and abs(e['joules_per_sample'] * d['iters'] * d['samples'] - e['joules']) < 1e-6 * e['joules'])(d['energy'])")" = True
check "energy: the package's counter alone, at most 20 W ($(json "$tmp/energy.json" "d['energy']['watts']"))" \
    test "$(json "$tmp/energy.json" "0.5 <= d['energy']['watts'] <= 25")" = True
check "energy: text report line" grep -q '^energy  *[0-9.]* J/sample ([0-9.]* W average, Linux powercap' "$tmp/energy.txt"
NN_POWERCAP_ROOT="$tmp/nowhere" $NNRUN "$MODEL" --iters 1 --warmup 0 --verbose >"$tmp/energy.txt" 2>"$tmp/err"
check "no powercap: no energy line" sh -c "! grep -q '^energy' '$tmp/energy.txt'"
check "no powercap: --verbose says why in one line" \
    test "$(grep -c "^nnrun: energy not reported: $tmp/nowhere: No such file or directory" "$tmp/err")" -eq 1
NN_POWERCAP_ROOT="$tmp/nowhere" $NNRUN "$MODEL" --iters 1 --warmup 0 >/dev/null 2>"$tmp/err"
check "no powercap, not --verbose: silent" test ! -s "$tmp/err"

# ---- nndump: every stage as dot that dot can read, labels that say how a node runs
NNDUMP=$BUILD/nndump
$NNDUMP "$MODEL" --stage all --format dot --no-cache >"$tmp/all.dot" 2>"$tmp/err"
check "nndump --stage all --format dot: one digraph" test "$(grep -c '^digraph' "$tmp/all.dot")" -eq 1
stages=$($NNDUMP "$MODEL" --stage all --no-cache | grep -c '^stage ')
check "nndump --stage all --format dot: a cluster per stage ($stages)" \
    test "$(grep -c '^  subgraph cluster_' "$tmp/all.dot")" -eq "$stages" -a "$stages" -gt 2
$NNDUMP "$MODEL" --stage all --format dot --output-dir "$tmp/dots" --no-cache >"$tmp/files" 2>"$tmp/err"
check "nndump --output-dir: one file per stage, each listed" \
    test "$(ls "$tmp/dots" | wc -l)" -eq "$stages" -a "$(wc -l <"$tmp/files")" -eq "$stages"
check "nndump --output-dir: stage files named NN-STAGE.dot" test -f "$tmp/dots/00-parsed.dot"
final=$(ls "$tmp/dots"/*-final.dot)
check "nndump --output-dir: each file one digraph" test "$(cat "$tmp/dots"/*.dot | grep -c '^digraph')" -eq "$stages"
if command -v dot >/dev/null; then
    check "dot reads the combined graph" dot -Tsvg "$tmp/all.dot" -o "$tmp/all.svg"
    for f in "$tmp/dots"/*.dot; do
        check "dot reads $(basename "$f")" dot -Tsvg "$f" -o /dev/null
    done
else
    echo "skipped: rendering with dot (graphviz not installed)"
fi
check "nndump labels: the stem conv's kernel, stride and algorithm" \
    grep -q 'label="Conv\\n3x3 stride 2x2, [a-z]' "$final"
check "nndump labels: a depthwise conv's group" grep -q 'label="Conv\\n3x3 stride 1x1 group 32, depthwise' "$final"
$NNDUMP "$MODEL" --stage parsed --no-cache >"$tmp/parsed.txt"
parsed_nodes=$(sed -n 's/^stage parsed: \([0-9]*\) nodes.*/\1/p' "$tmp/parsed.txt")
file_nodes=$($PY -c "import onnx; print(len(onnx.load('$MODEL').graph.node))")
constants=$($PY -c "import onnx; print(sum(n.op_type == 'Constant' for n in onnx.load('$MODEL').graph.node))")
check "nndump: the file's node count is onnx's ($file_nodes)" grep -q "^$MODEL: $file_nodes nodes in the file" "$tmp/parsed.txt"
check "nndump: stage parsed explains the $file_nodes -> $parsed_nodes drop by the file's $constants Constant nodes" \
    grep -q "^stage parsed: $((file_nodes - constants)) nodes (the file's $file_nodes less $constants Constant nodes, evaluated into constants at import)" "$tmp/parsed.txt"
$NNDUMP "$MODEL" --format json --no-cache >"$tmp/dump.json"
check "nndump --format json: nodes say how they run" \
    test "$(json "$tmp/dump.json" "d['stages'][0]['nodes'][0]['runs_as'].split(', ')[0]")" = "3x3 stride 2x2"
expect_error 2 "--output-dir writes dot files" $NNDUMP "$MODEL" --output-dir "$tmp/x"

echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
