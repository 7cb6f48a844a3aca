#!/bin/sh
# `make install` into a temporary prefix, then build a program against the
# installed library using nothing but `pkg-config --cflags --libs nn`.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$top" install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cat > "$tmp/use_nn.c" <<'C'
#include <nn.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    nn_options opt = nn_options_default();
    nn_model *m;
    if (nn_load(argv[1], &opt, &m) != NN_OK) { fprintf(stderr, "%s\n", nn_last_error()); return 1; }
    const char *name;
    nn_tensor in;
    nn_input_info(m, 0, &name, &in);
    in.dims[0] = 3; /* three samples: the library batches them */
    size_t n = (size_t)nn_tensor_elements(&in);
    in.data = calloc(n, sizeof(float));
    nn_tensor out;
    if (nn_predict(m, &in, 1, &out, 1) != NN_OK) { fprintf(stderr, "%s\n", nn_last_error()); return 1; }
    printf("%s -> %lld x %lld\n", name, (long long)out.dims[0], (long long)out.dims[1]);
    int ok = out.dims[0] == 3;
    nn_tensor_release(&out);
    free(in.data);
    nn_free(m);
    return ok ? 0 : 1;
}
C
cc -std=c11 "$tmp/use_nn.c" -o "$tmp/use_nn" $(pkg-config --cflags --libs nn)
"$tmp/use_nn" "$top/models/mobilenetv2.onnx"
# the single-threaded OpenBLAS, whichever flavour the system's libopenblas.so.0 points to
# (the GEMM calls it inside its own thread team), and one OpenMP runtime
deps=$(ldd "$tmp/use_nn")
if ! echo "$deps" | grep -q 'libopenblas\.so\.0 => .*/openblas-serial/'; then
    echo "FAIL: use_nn does not load the serial OpenBLAS:"; echo "$deps" | grep -i blas; exit 1
fi
if echo "$deps" | grep -q libgomp; then
    echo "FAIL: use_nn loads libgomp beside libomp:"; echo "$deps" | grep -i omp; exit 1
fi
# only nn_* symbols may be exported
leaked=$(nm -D --defined-only "$tmp/prefix/lib/libnn.so" | awk '{print $3}' | grep -v '^nn_' | grep -v '^_' || true)
if [ -n "$leaked" ]; then
    echo "FAIL: libnn.so exports non-nn symbols:"; echo "$leaked" | head; exit 1
fi
"$tmp/prefix/bin/nnrun" --version >/dev/null
echo "install: ok"
