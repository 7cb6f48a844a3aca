#!/bin/sh
# Pack what tests/gpu/device.sh needs on a lent GPU machine into .gpu/ (ignored; name it in
# the device tool's `carry`): this build's binaries in build/ layout with the shared
# libraries the lent machine's image lacks (OpenBLAS, libomp, protobuf-c, xxhash, gfortran),
# and ONNX's conformance data.  The models are not packed (800 MB): device.sh exports them
# there with that machine's torch.  cuDNN, cuBLASLt and the CUDA runtime are not packed
# either: the machine has its own (cuDNN 9.14 in /usr/lib/x86_64-linux-gnu on 2026-11-28).
#
# usage: make all test-programs && tests/gpu/bundle.sh
set -eu
cd "$(dirname "$0")/../.."
BUILD=${NN_BUILD:-build}
for f in nnrun libnn_cuda.so tests/compare_npy tests/conformance tests/gpu/pipeline; do
    [ -x "$BUILD/$f" ] || { echo "bundle: $BUILD/$f is missing (a CUDA build: make all test-programs)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/tests/gpu" "$tmp/lib" .gpu
cp "$BUILD/nnrun" "$BUILD/libnn_cuda.so" "$tmp/"
cp "$BUILD/tests/compare_npy" "$BUILD/tests/conformance" "$tmp/tests/"
cp "$BUILD/tests/gpu/pipeline" "$tmp/tests/gpu/"
# every library nnrun and the plugin load, except the C runtime and CUDA's own
ldd "$BUILD/nnrun" "$BUILD/libnn_cuda.so" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/(libcud|libcublas)' |
    while read -r lib; do cp -L "$lib" "$tmp/lib/"; done
tar -C "$tmp" -cJf .gpu/bundle.tar.xz .
tar -C /usr/share/libonnx-testdata -cJf .gpu/testdata.tar.xz data
ls -l .gpu
