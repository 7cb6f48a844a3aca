#!/bin/sh
# Install the Debian packages a make target needs, only those missing.
# usage: tools/install-deps.sh build|test|python|bench
set -eu
case "${1:-build}" in
build) pkgs="clang libomp-dev make pkg-config protobuf-c-compiler libprotobuf-c-dev libonnx-dev libopenblas-serial-dev libopenblas0-serial libxxhash-dev libmicrohttpd-dev libjansson-dev libturbojpeg0-dev libpng-dev" ;;
# libclang-rt-14-dev: the sanitizer and libFuzzer runtimes (make sanitize, make tsan, make fuzz);
# libc6-dev-arm64-cross: the headers make check-portable compiles against for aarch64;
# python3-pil: the images of tests/test_server.sh and examples/classify.py; nginx-light: tests/test_nginx.sh
test) pkgs="python3-pytest python3-pil libonnx-testdata python3-torch python3-torchvision python3-onnx python3-numpy graphviz valgrind libclang-rt-14-dev libc6-dev-arm64-cross nginx-light" ;;
# make python: the headers its C extension builds against
python) pkgs="python3 python3-dev python3-numpy" ;;
bench)
    # Node.js may come from elsewhere with its own npm: what counts is the commands
    if command -v node >/dev/null && command -v npm >/dev/null; then pkgs="python3-numpy"; else pkgs="nodejs npm python3-numpy"; fi ;;
*) echo "install-deps.sh: unknown group '$1' (build, test or # make python: the headers its C extension builds against
python) pkgs="python3 python3-dev python3-numpy" ;;
bench)" >&2; exit 2 ;;
esac
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing missing Debian packages:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
