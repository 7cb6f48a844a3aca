#!/bin/sh
# Every test suite of the project, in order; the last line tallies suites.
# Run through `make test`, which builds everything first.
set -u
cd "$(dirname "$0")/.."
# Plan-cache files go to a scratch folder, never into the user's ~/.cache.
NN_CACHE_DIR=$(mktemp -d /tmp/nn-test-cache.XXXXXX)
export NN_CACHE_DIR
trap 'rm -rf "$NN_CACHE_DIR"' EXIT
passed=0
failed=0
failed_names=""
suite() {
    name=$1
    shift
    echo "=== $name"
    start=$(date +%s)
    if "$@"; then
        passed=$((passed + 1))
        echo "=== $name: ok ($(($(date +%s) - start)) s)"
    else
        failed=$((failed + 1))
        failed_names="$failed_names $name"
        echo "=== $name: FAILED ($(($(date +%s) - start)) s)"
    fi
}
# NN_BUILD: the build folder whose binaries run (make sanitize: build/asan);
# NN_SANITIZER set: they carry ASan + UBSan, which replace valgrind.
BUILD=${NN_BUILD:-build}
sanitizer=${NN_SANITIZER:-}
skip() {
    echo "=== $1: skipped ($2)"
}
# C unit tests under valgrind, so leaks and bad reads fail them
# (libomp keeps its thread pool alive at exit: only definite leaks count)
VALGRIND="valgrind -q --leak-check=full --show-possibly-lost=no --errors-for-leak-kinds=definite --error-exitcode=9"
[ -n "$sanitizer" ] && VALGRIND=""
for t in "$BUILD"/tests/test_*; do
    suite "$(basename "$t")" $VALGRIND "$t"
done
# the ISA the environment asks for is the one every kernel family starts with
for isa in scalar avx2 avx512; do
    suite "isa $isa" env NN_ISA=$isa "$BUILD/tests/test_isa"
done
# one thread pool: every parallel loop of the kernels and the engine goes through nn_par_for (ops/par.h);
# an OpenMP region would start libomp's team, whose threads spin for 200 ms beside the pool's afterwards
# (an object calling __kmpc_fork_call opens one; only par.o may, for NN_PAR=omp)
suite "one thread pool" sh -c "! nm -A '$BUILD/libnn.a' | grep ' U __kmpc_fork_call' | grep -v ':par.o:'"
# the parallel for's OpenMP path (NN_PAR=omp, the A/B switch)
# (libomp keeps the root it allocates for each application thread that opens a parallel region after
# that thread exits: LeakSanitizer is told so for this suite alone, where only libomp runs our tasks)
suite "test_par omp" env NN_PAR=omp LSAN_OPTIONS=suppressions=tests/lsan-libomp.supp "$BUILD/tests/test_par"
# valgrind hides AVX-512 from the program: the int8 GEMM's VNNI kernel is checked natively
suite "test_qgemm native" "$BUILD/tests/test_qgemm"
# and the Winograd weight transform's AVX-512 variant (the runs above, under valgrind, reach AVX2 at most)
suite "test_winograd native" "$BUILD/tests/test_winograd"
# likewise the bf16 kernel (AVX512-BF16); skipped, not passed, where the processor lacks it
if "$BUILD/tests/test_gemm_bf16" --available; then
    suite "test_gemm_bf16 native" "$BUILD/tests/test_gemm_bf16"
    suite "test_gemm_bf16 wide blocks" env NN_CPU_CACHES=l1d:32k,l2:4m "$BUILD/tests/test_gemm_bf16"
    suite "bf16 nnrun" tests/check_bf16.sh
else
    skip "test_gemm_bf16 native" "no AVX512-BF16 on this processor"
    skip "bf16 nnrun" "no AVX512-BF16 on this processor"
fi
# threads on one real model: valgrind would only serialize them (races: make tsan)
suite concurrency "$BUILD/tests/concurrency"
# the portable ISA's GEMM calls the serial OpenBLAS from several threads at once (ops/gemm_scalar.c's lock)
suite "concurrency scalar" env NN_ISA=scalar "$BUILD/tests/concurrency"
suite cli tests/test_cli.sh
suite conformance "$BUILD/tests/conformance" --cache-dir "$NN_CACHE_DIR/conformance"
# CUDA builds: the models and conformance on a GPU (each check reported skipped when there is none)
if [ -x "$BUILD/tests/gpu/pipeline" ] && [ -z "$sanitizer" ]; then
    suite gpu tests/gpu/run.sh
fi
if [ -n "$sanitizer" ]; then
    skip install "packaging, not memory safety: a program built against the installed library needs the sanitizer runtime"
else
    suite install tests/test_install.sh
fi
# a CPU user needs no CUDA: the GPU backend is the plugin libnn_cuda.so, opened for gpuN only
suite "libnn without CUDA" tests/check_cpu_only.sh "$BUILD"
suite malformed tests/malformed/run.sh
suite leaks tests/check_leaks.sh
# load/free 1000 times: too slow for valgrind, and ASan's quarantine keeps freed memory resident on purpose
if [ -n "$sanitizer" ]; then
    skip load_free_rss "ASan holds freed memory; LeakSanitizer checks every run instead"
else
    suite load_free_rss "$BUILD/tests/load_free_rss"
fi
suite models tests/check_models.sh
suite rnn_models tests/check_rnn.sh
suite quant_models tests/check_quant.sh
# the integer ops with weights packed at load, fresh and from the plan cache, under each ISA, against numpy
suite quant_prepacked /usr/bin/python3 tests/check_qprepack.py "$BUILD/nnrun" "$NN_CACHE_DIR/qprepack" avx512 avx2 scalar
# the NCHW depthwise convs on their integer paths (they run through the float kernels by default,
# and channels-last unless layout_nhwc is off)
suite quant_prepacked_int env NN_QDW_FLOAT=0 "NN_QPREPACK_ARGS=--disable-pass layout_nhwc" /usr/bin/python3 \
    tests/check_qprepack.py "$BUILD/nnrun" "$NN_CACHE_DIR/qprepack-int" avx512 avx2
# the convs in NCHW too: passes/layout_nhwc.c takes most of them channels-last by default
suite quant_prepacked_nchw env "NN_QPREPACK_ARGS=--disable-pass layout_nhwc" /usr/bin/python3 tests/check_qprepack.py \
    "$BUILD/nnrun" "$NN_CACHE_DIR/qprepack-nchw" avx512 avx2 scalar
suite structure tests/check_structure.sh
# docs/operators.md is generated from ops/ops.def, the ONNX schemas and the conformance list: `make docs`
suite operators_doc /usr/bin/python3 tools/gen_operators.py --check
# the sources build for a generic x86-64 and for aarch64, where only the portable kernels exist
suite portable make -s check-portable
suite cache tests/test_cache.sh
# the Python package (make python-build) with pytest, and examples/classify.py; its extension links the
# uninstrumented libnn.a, so a sanitizer build has nothing of its own to run here
if [ -n "$sanitizer" ]; then
    skip python "the extension links build/libnn.a, not the sanitizer build"
else
    suite python env PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
fi
# nnserve over HTTP on loopback (ASan's build under make sanitize: its leak check is the exit status)
suite server tests/test_server.sh "$BUILD"
# two replicas behind nginx as a round-robin upstream
suite nginx tests/test_nginx.sh "$BUILD"
echo "suites failed:${failed_names:- none}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
