#!/bin/sh
# What the optimizer leaves of the real CNNs, and whether it changes their outputs.
#
# usage: tests/check_structure.sh [NAME...]      (default: all six models of `make models`)
#
# Per model, from `nndump MODEL --batch 1 --format json --stage all`, the final graph has
#   - no BatchNormalization (folded into Conv/Gemm, or Mul+Add),
#   - no Identity or Dropout,
#   - no standalone Relu (fused into its producer),
#   - no Shape/Gather node whose result feeds, through any chain of nodes, the
#     shape input of a Reshape (constant folding at the bound batch),
#   - a static memory plan in which no two buffers live at the same time overlap
#     (values inside one buffer, views and Concat slices, nest), with arena <= 1.10 * the
#     lower bound (most bytes live at once);
# and nnrun's outputs with the full pipeline and with --no-opt agree within
# relative L2 1e-5 on the model's stored input.  Both runs use the same
# conv algorithm (--no-winograd): this check is about the passes, and
# Winograd's own rounding (~1e-5 relative on ResNet-50, kept within 1e-4 of
# PyTorch by check_models.sh) differs between a folded and an unfolded graph.
# One line per model and check; the last line is `N passed, N failed`.
set -u
cd "$(dirname "$0")/.." || exit 2

# NN_BUILD: another build folder (make sanitize), built by its caller
BUILD=${NN_BUILD:-build}
DIR=build/models
PYTHON=/usr/bin/python3
OUT_TOL=1e-5
ARENA_RATIO=1.10
ALL="resnet50 vgg19 densenet201 efficientnet_b0 googlenet mobilenet_v2"
names=${*:-$ALL}
for name in $names; do
    case " $ALL " in
    *" $name "*) ;;
    *) echo "check_structure.sh: unknown model '$name' (one of: $ALL)" >&2; exit 2 ;;
    esac
done

[ -n "${NN_BUILD:-}" ] || make -s $BUILD/nnrun $BUILD/nndump $BUILD/tests/compare_npy || exit 2
for name in $names; do
    if [ ! -f "$DIR/$name.onnx" ] || [ ! -f "$DIR/$name.input.npy" ]; then
        rm -f "$DIR/.done" # the stamp may outlive deleted files; export.py skips what exists
        make -s models || exit 2
        break
    fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results

# The structure checks of one nndump JSON: one "PASS|FAIL" line per check.
cat >"$tmp/structure.py" <<'EOF'
import json
import sys

name, path, ratio_limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(path) as f:
    dump = json.load(f)
stages = {s["name"]: s["nodes"] for s in dump["stages"]}
final, parsed = stages["final"], stages.get("parsed", [])


def report(check, ok, detail):
    print(f"{name:<16} {check:<28} {'PASS' if ok else 'FAIL'}  {detail}")


def count(nodes, op):
    return sum(n["op"] == op for n in nodes)


def show(nodes, limit=3):
    names = [n["name"] for n in nodes]
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


for check, ops in (("no BatchNormalization", ["BatchNormalization"]),
                   ("no Identity/Dropout", ["Identity", "Dropout"]),
                   ("no standalone Relu", ["Relu"])):
    left = [n for n in final if n["op"] in ops]
    before = sum(count(parsed, op) for op in ops)
    detail = f"{len(left)} left of {before} parsed"
    report(check, not left, detail + (f": {show(left)}" if left else ""))

# Shape/Gather reaching a Reshape's shape input, backwards through producers
producer = {out: n for n in final for out in n["outputs"]}
culprits = {}
for r in (n for n in final if n["op"] == "Reshape" and len(n["inputs"]) > 1):
    stack, seen = [r["inputs"][1]], set()
    while stack:
        v = stack.pop()
        p = producer.get(v)
        if p is None or p["name"] in seen:
            continue
        seen.add(p["name"])
        if p["op"] in ("Shape", "Gather"):
            culprits[p["name"]] = p
        stack.extend(p["inputs"])
left = list(culprits.values())
shape_nodes = sum(count(parsed, op) for op in ("Shape", "Gather"))
report("no Shape/Gather -> Reshape", not left,
       f"{len(left)} left ({shape_nodes} Shape/Gather parsed)" + (f": {show(left)}" if left else ""))

mem = dump["memory"]
arena, lower, naive = mem["arena_bytes"], mem["lower_bound_bytes"], mem["naive_bytes"]
if mem["dynamic"]:
    report("arena <= 1.10 * lower bound", False, "no static plan: the model stayed dynamic")
else:
    # buffers live at the same time lie apart, except values inside one
    # buffer (views, Concat slices), where one range must contain the other
    bufs = sorted(mem["buffers"], key=lambda b: b["offset"])
    clashes = []
    for i, a in enumerate(bufs):
        for b in bufs[i + 1:]:
            if b["offset"] >= a["offset"] + a["size"]:
                break
            a_end, b_end = a["offset"] + a["size"], b["offset"] + b["size"]
            nested = a["root"] == b["root"] and (b_end <= a_end or (a["offset"] == b["offset"] and a_end <= b_end))
            if not nested and a["first_use"] <= b["last_use"] and b["first_use"] <= a["last_use"]:
                clashes.append(f"{a['value']} / {b['value']}")
    outside = [b["value"] for b in bufs if b["offset"] + b["size"] > arena]
    report("plan: live buffers disjoint", not clashes and not outside,
           f"{len(bufs)} buffers, {len(clashes)} overlapping pairs, {len(outside)} outside the arena"
           + (": " + ", ".join((clashes + outside)[:3]) if clashes or outside else ""))
    ratio = arena / lower if lower else float("inf")
    report(f"arena <= {ratio_limit:.2f} * lower bound", ratio <= ratio_limit,
           f"arena {arena / 2**20:.2f} MiB, lower bound {lower / 2**20:.2f} MiB, ratio {ratio:.3f}, "
           f"naive {naive / 2**20:.2f} MiB; {len(final)} nodes (parsed {len(parsed)})")
EOF

# line CHECK STATUS DETAIL, for failures found here rather than by the script
line() {
    printf '%-16s %-28s %s  %s\n' "$name" "$1" "$2" "$3" | tee -a "$results"
}

for name in $names; do
    model=$DIR/$name.onnx
    if $BUILD/nndump "$model" --batch 1 --format json --stage all >"$tmp/dump.json" 2>"$tmp/err"; then
        $PYTHON "$tmp/structure.py" "$name" "$tmp/dump.json" "$ARENA_RATIO" 2>"$tmp/err" | tee -a "$results"
        [ -s "$tmp/err" ] && line "structure script" FAIL "$(tail -n 1 "$tmp/err")"
    else
        line "nndump" FAIL "$(tail -n 1 "$tmp/err")"
    fi

    # outputs: full pipeline vs the graph as parsed, on the stored input
    ok=1
    for mode in opt noopt; do
        flag=--no-winograd
        [ $mode = noopt ] && flag="--no-opt --no-winograd"
        rm -rf "${tmp:?}/$mode" && mkdir "$tmp/$mode"
        # shellcheck disable=SC2086  # flag is a list of words
        if ! $BUILD/nnrun "$model" --input input="$DIR/$name.input.npy" --warmup 0 --iters 1 $flag \
            --save-outputs "$tmp/$mode" >"$tmp/err" 2>&1; then
            line "outputs opt vs --no-opt" FAIL "nnrun ${flag:-(optimized)}: $(tail -n 1 "$tmp/err")"
            ok=0
            break
        fi
    done
    [ $ok = 1 ] || continue
    files=$(cd "$tmp/opt" && ls -- *.npy 2>/dev/null)
    if [ -z "$files" ]; then
        line "outputs opt vs --no-opt" FAIL "nnrun saved no outputs"
        continue
    fi
    for f in $files; do
        if result=$($BUILD/tests/compare_npy "$tmp/opt/$f" "$tmp/noopt/$f" $OUT_TOL 2>&1); then
            line "outputs opt vs --no-opt" PASS "${f%.npy}: $result (tolerance $OUT_TOL)"
        else
            line "outputs opt vs --no-opt" FAIL "${f%.npy}: $result (tolerance $OUT_TOL)"
        fi
    done
done

passed=$(grep -c ' PASS  ' "$results")
failed=$(grep -c ' FAIL  ' "$results")
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
