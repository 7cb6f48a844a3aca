#!/bin/sh
# Run the real CNNs through nnrun and compare with PyTorch's outputs.
#
# usage: tests/check_models.sh [NAME...]      (default: all six, then the committed default model)
#
# The models and torch's outputs come from `make models` (models/export.py,
# seeded random weights, batch 2); they are generated here when missing.
# The committed models/mobilenetv2.* (batch 1) is checked too and needs no
# Python.  A model passes when ||nn - torch|| / ||torch|| <= TOL (1e-4).
# Environment: TOL, NNRUN_ARGS (extra nnrun arguments, e.g. a device), NN_BUILD.
set -u
cd "$(dirname "$0")/.." || exit 2

# NN_BUILD: another build folder (make sanitize), built by its caller
BUILD=${NN_BUILD:-build}
DIR=build/models
TOL=${TOL:-1e-4}
NNRUN_ARGS=${NNRUN_ARGS:-}
ALL="resnet50 vgg19 densenet201 efficientnet_b0 googlenet mobilenet_v2"
names=${*:-$ALL}
for name in $names; do
    case " $ALL " in
    *" $name "*) ;;
    *) echo "check_models.sh: unknown model '$name' (one of: $ALL)" >&2; exit 2 ;;
    esac
done

[ -n "${NN_BUILD:-}" ] || make -s $BUILD/nnrun $BUILD/tests/compare_npy || exit 2

for name in $names; do
    if [ ! -f "$DIR/$name.onnx" ] || [ ! -f "$DIR/$name.input.npy" ] || [ ! -f "$DIR/$name.output.npy" ]; then
        # the stamp may outlive deleted files; export.py skips what exists
        rm -f "$DIR/.done"
        make -s models || exit 2
        break
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
saves=$tmp/outputs
log=$tmp/nnrun.log
passed=0
failed=0

# check LABEL MODEL INPUT EXPECTED
check() {
    rm -rf "$saves" && mkdir "$saves"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # NNRUN_ARGS is a list of words
    if ! $BUILD/nnrun "$2" --input input="$3" --save-outputs "$saves" --warmup 0 --iters 1 $NNRUN_ARGS >"$log" 2>&1; then
        printf '%-24s FAIL  nnrun: %s\n' "$1" "$(tail -n 1 "$log")"
        failed=$((failed + 1))
        return
    fi
    t1=$(date +%s.%N)
    result=$($BUILD/tests/compare_npy "$saves/output.npy" "$4" "$TOL" 2>&1)
    rc=$?
    secs=$(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')
    if [ $rc -eq 0 ]; then
        printf '%-24s PASS  %s  (nnrun %s s)\n' "$1" "$result" "$secs"
        passed=$((passed + 1))
    else
        printf '%-24s FAIL  %s  (tolerance %s)\n' "$1" "$result" "$TOL"
        failed=$((failed + 1))
    fi
}

for name in $names; do
    check "$name" "$DIR/$name.onnx" "$DIR/$name.input.npy" "$DIR/$name.output.npy"
done
if [ $# -eq 0 ]; then
    check "mobilenetv2 (committed)" models/mobilenetv2.onnx models/mobilenetv2.input.npy \
        models/mobilenetv2.output.npy
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
