#!/bin/sh
# libnn.so and the programs that link libnn load no CUDA library: the CUDA
# backend is the plugin libnn_cuda.so (engine/plugin.h), opened only when a
# model asks for a gpuN device.  Where the plugin was built, it must link no
# part of libnn, and a program must find it beside itself.
set -u
BUILD=${1:-build}
fail=0
for f in "$BUILD/libnn.so" "$BUILD/nnrun" "$BUILD/nndump"; do
    cuda=$(ldd "$f" | grep -Ei 'libcud|libcublas|libnvrtc' || true)
    if [ -n "$cuda" ]; then
        echo "FAIL: $f loads CUDA libraries:"
        echo "$cuda"
        fail=1
    else
        echo "ok: $f loads no CUDA library"
    fi
done
if [ -f "$BUILD/libnn_cuda.so" ]; then
    if ldd "$BUILD/libnn_cuda.so" | grep -q 'libnn\.so'; then
        echo "FAIL: the plugin links libnn.so"
        fail=1
    fi
    # it refuses a libnn of another layout, with one line
    tmp=$(mktemp -d)
    cat > "$tmp/abi.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { printf("dlopen: %s\n", dlerror()); return 1; }
    const void *(*entry)(const void *, char *, size_t);
    *(void **)&entry = dlsym(lib, "nn_plugin_backend");
    unsigned table[64];
    memset(table, 0, sizeof table);
    table[0] = 999; /* an interface number no libnn has */
    char err[256] = "";
    const void *b = entry ? entry(table, err, sizeof err) : (const void *)1;
    printf("%s\n", err);
    return b == NULL && strstr(err, "another version of libnn") ? 0 : 1;
}
C
    if cc -o "$tmp/abi" "$tmp/abi.c" && msg=$("$tmp/abi" "$(pwd)/$BUILD/libnn_cuda.so"); then
        echo "ok: a libnn of another layout: $msg"
    else
        echo "FAIL: the plugin accepted a table of another layout: $msg"
        fail=1
    fi
    rm -rf "$tmp"
    # the plugin is found beside the program; without a GPU its attach fails with one clear line
    msg=$("$BUILD/nnrun" models/mobilenetv2.onnx --device gpu0 --iters 1 --warmup 0 2>&1 >/dev/null)
    case $msg in
    *"plugin"*) echo "FAIL: nnrun did not load the plugin beside it: $msg"; fail=1 ;;
    *"is not available"* | "") echo "ok: gpu0 through the plugin: ${msg:-ran}" ;;
    *) echo "FAIL: unexpected: $msg"; fail=1 ;;
    esac
fi
# a missing plugin is named, with where it was looked for
msg=$(NN_CUDA_PLUGIN=/nonexistent/libnn_cuda.so "$BUILD/nnrun" models/mobilenetv2.onnx --device gpu0 2>&1 >/dev/null)
case $msg in
*"is not available"*"/nonexistent/libnn_cuda.so"*) echo "ok: $msg" ;;
*) echo "FAIL: a missing plugin: $msg"; fail=1 ;;
esac
tmp=$(mktemp -d)
cp "$BUILD/nnrun" "$tmp/"
msg=$(env -u NN_CUDA_PLUGIN "$tmp/nnrun" models/mobilenetv2.onnx --device gpu0 2>&1 >/dev/null)
rc=$?
case $msg in
*"the CUDA plugin libnn_cuda.so is not installed (looked in $tmp and "*) [ $rc -eq 2 ] && echo "ok: $msg" ||
    { echo "FAIL: exit $rc for a missing plugin"; fail=1; } ;;
*) echo "FAIL: a plugin in no folder searched: $msg"; fail=1 ;;
esac
rm -rf "$tmp"
exit $fail
