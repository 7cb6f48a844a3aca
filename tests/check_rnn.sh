#!/bin/sh
# Run the recurrent models (LSTM, GRU) through nnrun and compare with PyTorch.
#
# usage: tests/check_rnn.sh [NAME...]      (default: the whole recurrent set)
#
# The models and torch's outputs come from `models/export.py --only rnn`
# (seeded random weights, fixed initial states, a Linear head); they are
# exported here when missing, apart from the six CNNs of `make models`.
# A model passes when ||nn - torch|| / ||torch|| <= TOL (1e-4).
# Environment: TOL, RNN_DIR (where the models live; default build/models), NN_BUILD, PYTHON.
set -u
cd "$(dirname "$0")/.." || exit 2

BUILD=${NN_BUILD:-build}
DIR=${RNN_DIR:-build/models}
TOL=${TOL:-1e-4}
PYTHON=${PYTHON:-/usr/bin/python3}
ALL="lstm_bidi2 gru2 lstm_seq"
names=${*:-$ALL}
for name in $names; do
    case " $ALL " in
    *" $name "*) ;;
    *) echo "check_rnn.sh: unknown model '$name' (one of: $ALL)" >&2; exit 2 ;;
    esac
done

[ -n "${NN_BUILD:-}" ] || make -s "$BUILD/nnrun" "$BUILD/tests/compare_npy" || exit 2

missing=""
for name in $names; do
    for ext in onnx input.npy output.npy; do
        [ -f "$DIR/$name.$ext" ] || { missing="$missing,$name"; break; }
    done
done
if [ -n "$missing" ]; then
    "$PYTHON" models/export.py --out "$DIR" --only "${missing#,}" ||
        { echo "check_rnn.sh: exporting the recurrent models failed (needs torch and onnx under $PYTHON)" >&2; exit 2; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
# check LABEL NAME NNRUN_ARGS...
check() {
    label=$1
    name=$2
    shift 2
    rm -rf "$tmp/out" && mkdir "$tmp/out"
    if ! "$BUILD/nnrun" "$DIR/$name.onnx" --input input="$DIR/$name.input.npy" --save-outputs "$tmp/out" \
        --warmup 0 --iters 1 --no-cache "$@" >"$tmp/log" 2>&1; then
        printf '%-28s FAIL  nnrun: %s\n' "$label" "$(tail -n 1 "$tmp/log")"
        failed=$((failed + 1))
        return
    fi
    if result=$("$BUILD/tests/compare_npy" "$tmp/out/output.npy" "$DIR/$name.output.npy" "$TOL" 2>&1); then
        printf '%-28s PASS  %s\n' "$label" "$result"
        passed=$((passed + 1))
    else
        printf '%-28s FAIL  %s  (tolerance %s)\n' "$label" "$result" "$TOL"
        failed=$((failed + 1))
    fi
}
for name in $names; do
    check "$name" "$name"
    # a plan for one sample, then micro-batches of one: neither may split
    # a symbolic sequence length as if it were the batch
    check "$name --batch 1" "$name" --batch 1
    check "$name --micro-batch 1" "$name" --micro-batch 1
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
