#!/bin/sh
# `make install` as a user and a packager meet it: programs built against the
# installed library with nothing but pkg-config's flags (shared, and static
# with `pkg-config --static`, each with gcc and clang), the versioned shared
# library, the header under include/nn, and DESTDIR staging.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="$top/models/mobilenetv2.onnx"
version=$(sed -n 's/.*NN_VERSION_STRING "\(.*\)"/\1/p' "$top/engine/nn.h")
major=${version%%.*}
export NN_CACHE_DIR="$tmp/cache"
fail() { echo "FAIL: $*"; exit 1; }

make -s -C "$top" install PREFIX="$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"

# ---- the layout: libnn.so -> libnn.so.MAJOR -> libnn.so.VERSION (SONAME libnn.so.MAJOR), include/nn/nn.h
lib="$tmp/prefix/lib"
[ "$(readlink "$lib/libnn.so")" = "libnn.so.$major" ] || fail "libnn.so does not point to libnn.so.$major"
[ "$(readlink "$lib/libnn.so.$major")" = "libnn.so.$version" ] || fail "libnn.so.$major does not point to libnn.so.$version"
[ -f "$lib/libnn.so.$version" ] && [ ! -L "$lib/libnn.so.$version" ] || fail "libnn.so.$version is not a file"
soname=$(readelf -d "$lib/libnn.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libnn.so.$major" ] || fail "SONAME is '$soname', not libnn.so.$major"
[ -f "$tmp/prefix/include/nn/nn.h" ] || fail "no include/nn/nn.h"
[ ! -e "$tmp/prefix/include/nn.h" ] || fail "nn.h installed at the top of include/, where it can clash"
[ "$(pkg-config --modversion nn)" = "$version" ] || fail "nn.pc says version $(pkg-config --modversion nn), nn.h $version"
for tool in nnrun nndump nncache; do
    [ -x "$tmp/prefix/bin/$tool" ] || fail "bin/$tool not installed"
done

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

# deps PROGRAM: the single-threaded OpenBLAS, whichever flavour the system's libopenblas.so.0 points to
# (the GEMM calls it inside its own thread team), and one OpenMP runtime, libomp (never libgomp beside it)
deps() {
    d=$(ldd "$1")
    echo "$d" | grep -q 'libopenblas\.so\.0 => .*/openblas-serial/' ||
        fail "$1 does not load the serial OpenBLAS: $(echo "$d" | grep -i blas)"
    echo "$d" | grep -q 'libomp' || fail "$1 does not load libomp"
    if echo "$d" | grep -q libgomp; then fail "$1 loads libgomp beside libomp"; fi
}

compilers=""
for cc in gcc clang; do
    if command -v $cc >/dev/null; then compilers="$compilers $cc"; else echo "skipped: no $cc"; fi
done

# ---- shared: the program records libnn.so.MAJOR and runs from the prefix
for cc in $compilers; do
    $cc -std=c11 -Wall -Werror "$tmp/use_nn.c" -o "$tmp/use_nn_$cc" $(pkg-config --cflags --libs nn)
    "$tmp/use_nn_$cc" "$model" >/dev/null || fail "use_nn built with $cc failed"
    ldd "$tmp/use_nn_$cc" | grep -q "libnn\.so\.$major => $lib/libnn\.so\.$major" ||
        fail "use_nn ($cc) does not load $lib/libnn.so.$major: $(ldd "$tmp/use_nn_$cc" | grep libnn)"
    deps "$tmp/use_nn_$cc"
    echo "ok: shared link with $cc"
done
# the README's example, built as the README says, and shown there as it is in examples/hello.c
sed -n '/^#include <nn.h>/,/^}/p' "$top/examples/hello.c" >"$tmp/hello.expected"
sed -n '/^#include <nn.h>/,/^}/p' "$top/README.md" | cmp -s - "$tmp/hello.expected" ||
    fail "README.md's C example differs from examples/hello.c"
for cc in $compilers; do
    $cc -std=c11 -Wall -Wextra -Werror "$top/examples/hello.c" -o "$tmp/hello_$cc" $(pkg-config --cflags --libs nn)
    out=$("$tmp/hello_$cc" "$model") || fail "examples/hello.c built with $cc failed"
    echo "$out" | grep -q "1000 scores, top class" || fail "examples/hello.c printed '$out'"
done
echo "ok: examples/hello.c: $out"

# ---- static: a prefix with only libnn.a, so that -lnn must find it, and every library it needs must
# come from `pkg-config --static --libs nn` (the OpenMP runtime clang built it for included)
make -s -C "$top" install PREFIX="$tmp/static" >/dev/null
rm -f "$tmp/static/lib"/libnn.so*
for cc in $compilers; do
    PKG_CONFIG_PATH="$tmp/static/lib/pkgconfig" sh -c \
        "$cc -std=c11 '$tmp/use_nn.c' -o '$tmp/static_$cc' \$(pkg-config --cflags --static --libs nn)" ||
        fail "static link with $cc and pkg-config --static failed"
    if ldd "$tmp/static_$cc" | grep -q libnn; then fail "the static link with $cc still loads libnn.so"; fi
    deps "$tmp/static_$cc"
    "$tmp/static_$cc" "$model" >/dev/null || fail "the program statically linked with $cc failed"
    echo "ok: static link with $cc"
done

# ---- DESTDIR: everything under the staging folder, nn.pc naming the final prefix
make -s -C "$top" install DESTDIR="$tmp/stage" PREFIX=/opt/nn >/dev/null
for f in lib/libnn.a lib/libnn.so "lib/libnn.so.$version" lib/pkgconfig/nn.pc include/nn/nn.h bin/nnrun; do
    [ -e "$tmp/stage/opt/nn/$f" ] || fail "DESTDIR install lacks opt/nn/$f"
done
grep -q '^prefix=/opt/nn$' "$tmp/stage/opt/nn/lib/pkgconfig/nn.pc" || fail "the staged nn.pc does not name /opt/nn"
[ ! -e /opt/nn ] || echo "note: /opt/nn exists (not from this test)"
make -s -C "$top" uninstall DESTDIR="$tmp/stage" PREFIX=/opt/nn >/dev/null
left=$(find "$tmp/stage" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"

# only nn_* symbols may be exported
leaked=$(nm -D --defined-only "$lib/libnn.so" | awk '{print $3}' | grep -v '^nn_' | grep -v '^_' || true)
[ -z "$leaked" ] || fail "libnn.so exports non-nn symbols: $(echo "$leaked" | head)"
"$tmp/prefix/bin/nnrun" --version >/dev/null
echo "install: ok"
