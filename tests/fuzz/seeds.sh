#!/bin/sh
# Seeds for tests/fuzz/fuzz_load.c, whose first input byte picks the reader
# (0 ONNX model, 1 .npy, 2 .pb tensor): every ONNX node-test model and its
# first input, every file of the malformed corpus, and a .npy.
# usage: tests/fuzz/seeds.sh OUT_DIR ONNX_NODE_TESTS_DIR MALFORMED_CORPUS_DIR
set -eu
out=$1 node_tests=$2 malformed=$3
rm -rf "$out"
mkdir -p "$out"
# prefix BYTE FILE NAME: the seed is BYTE followed by FILE; seeds above libFuzzer's -max_len are left out
prefix() {
    [ "$(stat -c %s "$2")" -lt 65535 ] || return 0
    { printf "\\$1"; cat "$2"; } >"$out/$3"
}
for dir in "$node_tests"/*/; do
    name=$(basename "$dir")
    prefix 000 "$dir/model.onnx" "$name.onnx"
    [ -f "$dir/test_data_set_0/input_0.pb" ] && prefix 002 "$dir/test_data_set_0/input_0.pb" "$name.pb"
done
find "$malformed" -name '*.onnx' | while read -r f; do
    rel=${f#"$malformed"/}
    prefix 000 "$f" "malformed_$(echo "$rel" | tr '/' '_')"
done
prefix 001 models/mobilenetv2.output.npy output.npy
echo "fuzz seeds: $(ls "$out" | wc -l) files in $out"
