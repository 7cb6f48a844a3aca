#!/bin/sh
# Leaks in nnrun over whole runs: a real model with a cold plan cache (parse,
# optimize, write the cache), the same model again (a cache hit), loads that
# fail early (truncated file) and late (shape inference, memory limit).
# Each must report 0 bytes definitely lost and no memory error: under
# valgrind normally, under LeakSanitizer in a `make sanitize` build
# (NN_SANITIZER set), which valgrind cannot run.  libomp keeps its thread
# pool alive at exit, so only definite leaks count.
# Environment: NN_BUILD (build folder, default build), NN_SANITIZER.
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${NN_BUILD:-build}
MODEL=models/mobilenetv2.onnx
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NN_CACHE_DIR="$tmp/cache"
passed=0
failed=0

# leak_check LABEL WANT_RC ARGS...: run nnrun ARGS, expect exit WANT_RC and a clean leak report
leak_check() {
    label=$1 want_rc=$2
    shift 2
    t0=$(date +%s)
    if [ -n "${NN_SANITIZER:-}" ]; then
        "$BUILD/nnrun" "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        report=$(grep -m1 "ERROR: [A-Za-z]*Sanitizer\|runtime error:" "$tmp/err")
    else
        valgrind --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99 \
            "$BUILD/nnrun" "$@" >"$tmp/out" 2>"$tmp/err"
        rc=$?
        lost=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$tmp/err")
        errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9,]*\) errors.*/\1/p' "$tmp/err")
        report=""
        [ "${lost:-0}" = 0 ] || report="definitely lost: $lost bytes"
        [ "${errors:-missing}" = 0 ] || report="$report; valgrind errors: ${errors:-no summary}"
    fi
    secs=$(($(date +%s) - t0))
    cache=$(grep -o 'cache [a-z]*' "$tmp/out" | head -n 1)
    if [ "$rc" -ne "$want_rc" ] || [ -n "$report" ]; then
        echo "FAIL $label: exit $rc (want $want_rc) ${report:+- $report} ($secs s)"
        grep -v '^==' "$tmp/err" | tail -n 3
        grep -A12 "definitely lost in\|ERROR: [A-Za-z]*Sanitizer\|runtime error:\|Invalid\|uninitialised" "$tmp/err" | head -n 30
        failed=$((failed + 1))
    else
        echo "PASS $label: exit $rc, 0 bytes definitely lost${cache:+ ($cache)} ($secs s)"
        passed=$((passed + 1))
    fi
}

head -c 100000 "$MODEL" >"$tmp/truncated.onnx"
leak_check "real model, cold cache" 0 "$MODEL" --iters 1 --warmup 0
leak_check "real model, cache hit" 0 "$MODEL" --iters 1 --warmup 0
leak_check "failing load: truncated file" 1 "$tmp/truncated.onnx"
leak_check "failing load: over --max-memory" 1 "$MODEL" --no-cache --max-memory 1M
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
