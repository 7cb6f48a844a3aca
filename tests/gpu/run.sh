#!/bin/sh
# The CUDA backend on a GPU: the six models (build/models, from `make
# models`) and the ONNX conformance suite on --device DEVICE against the
# CPU, then throughput at batch 1 and 64 and the share of copy time the
# batch pipeline hides under compute.  Without a GPU (or without a CUDA
# build) every check is reported as skipped, and counted.
#
# usage: tests/gpu/run.sh [DEVICE]        (default gpu0)
# A model passes when ||gpu - cpu|| / ||cpu|| <= 1e-4 in fp32 (TF32 off),
# <= 1e-2 with --fp16.
set -u
cd "$(dirname "$0")/../.." || exit 2
DEVICE=${1:-gpu0}
BUILD=${NN_BUILD:-build} # another build folder, as in tests/run_all.sh
NNRUN="$BUILD/nnrun"
PIPELINE=$BUILD/tests/gpu/pipeline
# the test programs live below $BUILD, the plugin in it
NN_CUDA_PLUGIN=${NN_CUDA_PLUGIN:-$(pwd)/$BUILD/libnn_cuda.so}
export NN_CUDA_PLUGIN
COMPARE=$BUILD/tests/compare_npy
DIR=build/models
MODELS="resnet50 vgg19 densenet201 efficientnet_b0 googlenet mobilenet_v2"
TOL_FP32=1e-4
TOL_FP16=1e-2
CHECKS_PER_MODEL=4 # fp32 vs CPU, fp16 vs CPU, batch 1, batch 64 with the pipeline's overlap
ALL_CHECKS=$(($(echo "$MODELS" | wc -w) * CHECKS_PER_MODEL + 1))

passed=0
failed=0
skipped=0
pass() {
    passed=$((passed + 1))
    echo "PASS  $*"
}
fail() {
    failed=$((failed + 1))
    echo "FAIL  $*"
}
skip() { # count, reason
    skipped=$((skipped + $1))
    shift
    echo "skip  $*"
}
summary() {
    echo "gpu: $passed passed, $failed failed, $skipped skipped"
    [ "$failed" -eq 0 ]
}

if [ ! -x "$PIPELINE" ] || [ ! -x "$NNRUN" ]; then
    skip "$ALL_CHECKS" "all $ALL_CHECKS GPU checks (this build has no CUDA backend: $PIPELINE is missing)"
    summary
    exit
fi
probe=$($NNRUN models/mobilenetv2.onnx --device "$DEVICE" --iters 1 --warmup 0 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 0 ]; then
    case $probe in
    *"is not available"*)
        skip "$ALL_CHECKS" "all $ALL_CHECKS GPU checks (no GPU: ${probe#nnrun: })"
        summary
        exit
        ;;
    esac
    fail "$DEVICE does not run the committed model: $probe"
    summary
    exit
fi

# the math options, once nnrun has them (nn_options.tf32 / .fp16)
has_option() { $NNRUN --help | grep -q -- "$1"; }
FP32_ARGS=""
has_option --tf32 && FP32_ARGS="--tf32 off"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# compare LABEL TOLERANCE DIR_GOT DIR_WANT: every output the CPU saved
compare() {
    worst=""
    for want in "$4"/*.npy; do
        got="$3/$(basename "$want")"
        if ! result=$($COMPARE "$got" "$want" "$2" 2>&1); then
            fail "$1: $(basename "$want" .npy): $result (tolerance $2)"
            return
        fi
        worst="$worst $(basename "$want" .npy): $result;"
    done
    pass "$1:$worst"
}

# run MODEL INPUT OUTDIR ARGS...: one prediction saved as .npy
run() {
    model=$1 input=$2 outdir=$3
    shift 3
    rm -rf "$outdir" && mkdir -p "$outdir"
    # shellcheck disable=SC2068  # the extra arguments are words
    $NNRUN "$model" --input input="$input" --save-outputs "$outdir" --iters 1 --warmup 0 $@ >"$tmp/log" 2>&1
}

throughput() { # MODEL BATCH
    $NNRUN "$1" --device "$DEVICE" --batch "$2" --warmup 3 --iters 20 --json 2>"$tmp/log" |
        sed -n 's/.*"throughput": \([0-9.]*\).*/\1/p'
}

for name in $MODELS; do
    model=$DIR/$name.onnx input=$DIR/$name.input.npy
    if [ ! -f "$model" ] || [ ! -f "$input" ]; then
        skip $CHECKS_PER_MODEL "$name: $CHECKS_PER_MODEL checks (no $model: run make models)"
        continue
    fi
    if ! run "$model" "$input" "$tmp/cpu"; then
        fail "$name: the CPU run: $(tail -n 1 "$tmp/log")"
        skip $((CHECKS_PER_MODEL - 1)) "$name: the GPU checks without a CPU reference"
        continue
    fi
    # shellcheck disable=SC2086
    if run "$model" "$input" "$tmp/gpu" --device "$DEVICE" $FP32_ARGS; then
        compare "$name fp32" "$TOL_FP32" "$tmp/gpu" "$tmp/cpu"
    else
        fail "$name fp32: $(tail -n 1 "$tmp/log")"
    fi
    if ! has_option --fp16; then
        skip 1 "$name fp16 (nnrun has no --fp16 option yet)"
    elif run "$model" "$input" "$tmp/gpu16" --device "$DEVICE" --fp16; then
        compare "$name fp16" "$TOL_FP16" "$tmp/gpu16" "$tmp/cpu"
    else
        fail "$name fp16: $(tail -n 1 "$tmp/log")"
    fi
    for batch in 1 64; do
        t=$(throughput "$model" $batch)
        if [ -z "$t" ]; then
            fail "$name batch $batch: $(tail -n 1 "$tmp/log")"
            continue
        fi
        if [ $batch -eq 1 ]; then
            pass "$name batch 1: $t samples/s"
        elif line=$($PIPELINE "$model" 64 1024 "$DEVICE" 2>&1); then
            pass "$name batch 64: $t samples/s (nnrun); 1024 samples in one nn_predict: $line"
        else
            fail "$name batch 64 pipeline: $line"
        fi
    done
done

echo "conformance on $DEVICE:"
if "$BUILD/tests/conformance" --device "$DEVICE" >"$tmp/conformance" 2>&1; then
    pass "conformance: $(tail -n 1 "$tmp/conformance")"
else
    grep '^FAIL' "$tmp/conformance" | head -n 20
    fail "conformance: $(tail -n 1 "$tmp/conformance")"
fi
summary
