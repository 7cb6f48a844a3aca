#!/bin/sh
# nnrun as a user meets it: reports, JSON keys, and one clear error line with
# a non-zero exit for every kind of bad input.
set -u
cd "$(dirname "$0")/.."
BUILD=${NN_BUILD:-build}
NNRUN=$BUILD/nnrun
MODEL=models/mobilenetv2.onnx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
    lines=$(wc -l <"$tmp/err")
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
expect_error 2 "device 'gpu0' is not available" $NNRUN "$MODEL" --device gpu0
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
check "--version" sh -c "$NNRUN --version | grep -q '^nnrun [0-9]'"

$NNRUN "$MODEL" --iters 3 --warmup 1 --json >"$tmp/report.json" 2>"$tmp/err"
check "--json runs" test $? -eq 0
for key in '"model"' '"batch"' '"device"' '"load_ms"' '"latency_ms"' '"median"' '"p90"' '"p99"' '"throughput"' '"peak_rss_mb"' \
    '"first_result_ms"' '"cache"' '"weight_bytes"'; do
    check "json has $key" grep -q "$key" "$tmp/report.json"
done
check "json is one line" test "$(wc -l <"$tmp/report.json")" -eq 1

$NNRUN "$MODEL" --iters 2 --warmup 0 >"$tmp/report.txt" 2>&1
for word in "load" "cache" "first result" "latency" "median" "p90" "p99" "throughput" "peak RSS" "parameters"; do
    check "text report has '$word'" grep -q "$word" "$tmp/report.txt"
done

# the committed default model matches torch's output
$NNRUN "$MODEL" --input input=models/mobilenetv2.input.npy --save-outputs "$tmp/saved" --iters 1 --warmup 0 >/dev/null
check "default model runs with --input and --save-outputs" test -f "$tmp/saved/output.npy"
check "default model matches torch (rel L2 <= 1e-4)" "$BUILD/tests/compare_npy" "$tmp/saved/output.npy" models/mobilenetv2.output.npy 1e-4

echo "$((checks - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
