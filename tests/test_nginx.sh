#!/bin/sh
# nnserve replicas (N = 1, 2) behind nginx on loopback (tests/test_nginx.py).
# usage: tests/test_nginx.sh [BUILD_DIR]
set -eu
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE=Haswell
exec /usr/bin/python3 tests/test_nginx.py "${1:-${NN_BUILD:-build}}"
