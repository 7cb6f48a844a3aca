#!/bin/sh
# Run the real non-CNN models (Swin-T, ViT-B/16, a BERT-style encoder with an
# attention mask, RetinaNet, SSDlite, Faster R-CNN) through nnrun and compare
# every output with PyTorch's: floats by relative L2 <= TOL (1e-4), integer
# outputs (detection labels) and all shapes exactly.
#
# usage: tests/check_zoo.sh [NAME...|zoo]  (default: models/export.py's `real` group;
#        `zoo`: the benchmark's group, against torch, batch 2 where it runs batched)
#
# The models come from `models/export.py --only real` (seeded random weights,
# BN statistics calibrated on random images); they are exported into ZOO_DIR
# when missing (several minutes on 2 cores, once).
#
# Expected refusals: a model listed in EXPECT_REFUSED with the text its
# refusal must contain counts as passed while nnrun refuses it with that
# text, and fails the suite once it loads (so the list only shrinks).  When
# an op lands, delete the model's entry from the
# line below; nothing else changes.
EXPECT_REFUSED=""
#
# Environment: TOL, ZOO_DIR (default build/zoo), NN_BUILD, PYTHON, NNRUN_ARGS.
set -u
cd "$(dirname "$0")/.." || exit 2

BUILD=${NN_BUILD:-build}
DIR=${ZOO_DIR:-build/zoo}
TOL=${TOL:-1e-4}
PYTHON=${PYTHON:-/usr/bin/python3}
NNRUN_ARGS=${NNRUN_ARGS:-}
ALL="swin_t vit_b_16 bert_small retinanet_resnet50_fpn ssdlite320_mobilenet_v3_large fasterrcnn_mobilenet_v3_large_320_fpn"
names=${*:-$ALL}
# any other model of models/zoo.py may be named too, or `zoo` for the benchmark's group
if [ $# -gt 0 ]; then
    known=$(cd models && "$PYTHON" -c 'import zoo; print(" ".join(zoo.ZOO)); print("GROUP", " ".join(zoo.GROUPS["zoo"]))' 2>/dev/null) ||
        { echo "check_zoo.sh: cannot read models/zoo.py (needs torch under $PYTHON)" >&2; exit 2; }
    group=$(printf '%s\n' "$known" | sed -n 's/^GROUP //p')
    known=$(printf '%s\n' "$known" | sed -n 1p)
    names=$(for n in $names; do [ "$n" = zoo ] && echo "$group" || echo "$n"; done)
    for name in $names; do
        case " $known " in
        *" $name "*) ;;
        *) echo "check_zoo.sh: unknown model '$name' (one of: $known; or zoo)" >&2; exit 2 ;;
        esac
    done
fi

[ -n "${NN_BUILD:-}" ] || make -s "$BUILD/nnrun" || exit 2

missing=""
for name in $names; do
    [ -f "$DIR/$name.json" ] && [ -f "$DIR/$name.onnx" ] || missing="$missing,$name"
done
if [ -n "$missing" ]; then
    echo "check_zoo.sh: exporting ${missing#,} into $DIR"
    "$PYTHON" models/export.py --out "$DIR" --only "${missing#,}" >"$DIR.export.log" 2>&1 ||
        { tail -n 5 "$DIR.export.log"; echo "check_zoo.sh: export failed (needs torch, torchvision, onnx under $PYTHON)" >&2; exit 2; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
for name in $names; do
    expect=""
    for e in $EXPECT_REFUSED; do
        [ "${e%%=*}" = "$name" ] && expect=${e#*=}
    done
    set --
    for f in "$DIR/$name.inputs"/*.npy; do
        set -- "$@" --input "$(basename "$f" .npy)=$f"
    done
    outs=$(cd "$DIR/$name.outputs" && ls -- *.npy | sed 's/\.npy$//')
    rm -rf "$tmp/out" && mkdir "$tmp/out"
    # shellcheck disable=SC2086  # NNRUN_ARGS is a list of words
    if ! "$BUILD/nnrun" "$DIR/$name.onnx" "$@" --save-outputs "$tmp/out" --warmup 0 --iters 1 --no-cache \
        $NNRUN_ARGS >"$tmp/log" 2>&1; then
        why=$(tail -n 1 "$tmp/log")
        if [ -n "$expect" ] && printf '%s' "$why" | grep -q -- "$expect"; then
            printf '%-40s REFUSED as expected (%s): %s\n' "$name" "$expect" "$why"
            passed=$((passed + 1))
        else
            printf '%-40s FAIL  nnrun: %s\n' "$name" "$why"
            failed=$((failed + 1))
        fi
        continue
    fi
    # shellcheck disable=SC2086  # one word per output name
    result=$("$PYTHON" tests/compare_outputs.py "$tmp/out" "$DIR/$name.outputs" "$TOL" $outs 2>&1)
    rc=$?
    if [ -n "$expect" ]; then
        printf '%-40s FAIL  listed in EXPECT_REFUSED (%s) but loads (%s): delete its entry\n' "$name" "$expect" \
            "$([ $rc -eq 0 ] && echo "outputs match: $result" || echo "outputs differ: $result")"
        failed=$((failed + 1))
    elif [ $rc -eq 0 ]; then
        printf '%-40s PASS  %s\n' "$name" "$result"
        passed=$((passed + 1))
    else
        printf '%-40s FAIL  %s  (tolerance %s)\n' "$name" "$result" "$TOL"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
