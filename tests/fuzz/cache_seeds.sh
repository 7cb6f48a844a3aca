#!/bin/sh
# Seeds for tests/fuzz/fuzz_cache.c: real plan files, as nnrun writes them
# for every ONNX node-test model (batch 1, the fuzzer's options); plans
# above libFuzzer's -max_len are left out.
# usage: tests/fuzz/cache_seeds.sh OUT_DIR ONNX_NODE_TESTS_DIR NNRUN MAX_BYTES
set -eu
out=$1 node_tests=$2 nnrun=$3 max=$4
rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for dir in "$node_tests"/*/; do
    name=$(basename "$dir")
    timeout 20 "$nnrun" "$dir/model.onnx" --cache-dir "$tmp/$name" --threads 1 --iters 1 --warmup 0 \
        >/dev/null 2>&1 || continue
    for plan in "$tmp/$name"/*.nnplan; do
        [ -f "$plan" ] && [ "$(stat -c %s "$plan")" -le "$max" ] && cp "$plan" "$out/$name.nnplan"
    done
    rm -rf "${tmp:?}/$name"
done
echo "cache fuzz seeds: $(ls "$out" | wc -l) plans in $out"
