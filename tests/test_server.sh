#!/bin/sh
# nnserve over real HTTP on loopback (tests/test_server.py says what is checked).
# usage: tests/test_server.sh [BUILD_DIR]
set -eu
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE=Haswell
exec /usr/bin/python3 tests/test_server.py "${1:-${NN_BUILD:-build}}"
