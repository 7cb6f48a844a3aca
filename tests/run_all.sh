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
# C unit tests under valgrind, so leaks and bad reads fail them
# (libomp keeps its thread pool alive at exit: only definite leaks count)
VALGRIND="valgrind -q --leak-check=full --show-possibly-lost=no --errors-for-leak-kinds=definite --error-exitcode=9"
for t in build/tests/test_*; do
    suite "$(basename "$t")" $VALGRIND "$t"
done
suite cli tests/test_cli.sh
suite conformance build/tests/conformance --cache-dir "$NN_CACHE_DIR/conformance"
suite install tests/test_install.sh
suite models tests/check_models.sh
suite structure tests/check_structure.sh
suite cache tests/test_cache.sh
echo "suites failed:${failed_names:- none}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
