#!/bin/sh
# QDQ ResNet-50 and MobileNetV2 (models/quantize.py) through nnrun, against
# ONNX Runtime on the same file and input, and against fp32 torch.
#
# usage: tests/check_quant.sh [NAME...]      (default: resnet50 mobilenet_v2)
#
# The QDQ models are made once into build/models/NAME_qdq.onnx (with 8 test
# images, torch's fp32 logits for them and the output's quantization step),
# again when models/quantize.py changes (NN_QUANT_DIR=DIR: into DIR instead).  ONNX Runtime is onnxruntime-node in
# build/ort, as tools/bench uses it: installed with npm as tools/bench does
# when node and npm are there; without node/npm, or when the install fails
# (no network), the ORT comparison is skipped with a message and only the
# torch comparison runs.
# Passes when the channels-last passes (fuse_lut, layout_nhwc) change no
# output byte, nn's logits are within ORT_TOL relative L2 of ORT's (the QDQ
# Adds, which ORT runs as a fixed-point QLinearAdd and nn in float, flip a
# rare rounding that deep layers amplify: docs/quantization.md), and nn's
# top-1 agrees with torch's at least as often as ORT's does, less one image.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${NN_BUILD:-build}
DIR=build/models
QDIR=${NN_QUANT_DIR:-$DIR}
ORT_DIR=${NN_ORT_DIR:-$(pwd)/build/ort}
ORT_VERSION=1.30.0
ORT_TOL=${ORT_TOL:-0.03}
names=${*:-resnet50 mobilenet_v2}
PY=/usr/bin/python3

[ -n "${NN_BUILD:-}" ] || make -s $BUILD/nnrun || exit 2
for name in $names; do
    if [ ! -f "$DIR/$name.onnx" ]; then
        rm -f "$DIR/.done"
        make -s models || exit 2
        break
    fi
done

have_ort=0
if ! command -v node >/dev/null 2>&1; then
    echo "check_quant: ONNX Runtime comparison skipped: no node (tools/install-deps.sh bench installs it)"
elif [ -f "$ORT_DIR/node_modules/onnxruntime-node/package.json" ]; then
    have_ort=1
elif command -v npm >/dev/null 2>&1; then
    echo "check_quant: installing onnxruntime-node $ORT_VERSION into $ORT_DIR (as tools/bench does)"
    mkdir -p "$ORT_DIR"
    [ -f "$ORT_DIR/package.json" ] || echo '{"name": "nn-bench-ort", "private": true}' >"$ORT_DIR/package.json"
    if (cd "$ORT_DIR" && npm install --ignore-scripts --no-audit --no-fund "onnxruntime-node@$ORT_VERSION" >/dev/null 2>&1); then
        have_ort=1
    else
        echo "check_quant: ONNX Runtime comparison skipped: npm install failed"
    fi
else
    echo "check_quant: ONNX Runtime comparison skipped: no npm to install onnxruntime-node"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for name in $names; do
    q=$QDIR/${name}_qdq
    if [ ! -f "$q.onnx" ] || [ ! -f "$q.torch.npy" ] || [ models/quantize.py -nt "$q.onnx" ]; then
        $PY models/quantize.py "$DIR/$name.onnx" "$q.onnx" --calib 8 --test-inputs 8 --name "$name" >"$tmp/q.log" 2>&1 ||
            { echo "$name: FAIL  quantize.py: $(tail -n 1 "$tmp/q.log")"; failed=$((failed + 1)); continue; }
    fi
    mkdir -p "$tmp/nn" "$tmp/ort"
    rm -f "$tmp/nn/"* "$tmp/ort/"*
    if ! $BUILD/nnrun "$q.onnx" --input input="$q.input.npy" --save-outputs "$tmp/nn" --warmup 0 --iters 1 \
        >"$tmp/nn.log" 2>&1; then
        echo "$name: FAIL  nnrun: $(tail -n 1 "$tmp/nn.log")"
        failed=$((failed + 1))
        continue
    fi
    # the NCHW int8 path (no channels-last region, no byte tables) gives the very same bytes
    mkdir -p "$tmp/nchw"
    rm -f "$tmp/nchw/"*
    if ! $BUILD/nnrun "$q.onnx" --input input="$q.input.npy" --save-outputs "$tmp/nchw" --warmup 0 --iters 1 \
        --disable-pass fuse_lut,layout_nhwc >"$tmp/nchw.log" 2>&1 || ! cmp -s "$tmp/nn/output.npy" "$tmp/nchw/output.npy"; then
        echo "$name: FAIL  the outputs with and without the channels-last passes (fuse_lut, layout_nhwc) differ"
        failed=$((failed + 1))
        continue
    fi
    ort=""
    if [ $have_ort = 1 ]; then
        if NN_ORT_DIR=$ORT_DIR node tools/ort_run.js "$q.onnx" --input "$q.input.npy" --save-outputs "$tmp/ort" \
            --warmup 0 --iters 1 --threads 2 >"$tmp/ort.log" 2>&1; then
            ort=$tmp/ort/output.npy
        else
            echo "$name: FAIL  ort_run.js: $(tail -n 1 "$tmp/ort.log")"
            failed=$((failed + 1))
            continue
        fi
    fi
    $PY - "$name" "$tmp/nn/output.npy" "$q.torch.npy" "$q.json" "$ORT_TOL" "$ort" <<'PYEOF' || failed=$((failed + 1))
import json, sys
import numpy as np
name, nn_path, torch_path, meta, tol, ort_path = sys.argv[1:7]
nn = np.load(nn_path).astype(np.float64)
ref = np.load(torch_path).astype(np.float64)
step = json.load(open(meta))["output_scale"]
def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)
top_nn = (nn.argmax(1) == ref.argmax(1)).mean()
line = (f"{name}: vs torch fp32: rel L2 {rel(nn, ref):.4f}, top-1 {top_nn:.3f} "
        f"({len(set(ref.argmax(1)))} distinct classes in {len(ref)} images)")
ok = True
if ort_path:
    ort = np.load(ort_path).astype(np.float64)
    top_ort = (ort.argmax(1) == ref.argmax(1)).mean()
    e = rel(nn, ort)
    line += (f"; vs ORT: rel L2 {e:.4f}, max {np.abs(nn - ort).max() / step:.0f} output steps, "
             f"{(nn == ort).mean():.3f} of logits equal, top-1 {(nn.argmax(1) == ort.argmax(1)).mean():.3f}; "
             f"ORT vs torch top-1 {top_ort:.3f}")
    ok = e <= float(tol) and top_nn >= top_ort - 1.0 / len(ref)
else:
    ok = top_nn >= 0.5
print(("PASS  " if ok else "FAIL  ") + line)
sys.exit(0 if ok else 1)
PYEOF
done
[ $failed -eq 0 ]
