#!/usr/bin/env bash
# Build llama.cpp's llama-server once from the sources inside the llama-cpp-python sdist, into a cache outside the repo.
# The tests start it on loopback (tests/llama_server_harness.py finds it); a second run only prints where it is.
# Safe to run twice at once: each run builds in its own temporary folder and renames it into place; the first wins.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=0.3.36
CACHE=${CHATCAPS_BUILD_CACHE:-$HOME/.cache/chatcaps}
DEST="$CACHE/llama-server-$VERSION"
BIN="$DEST/bin/llama-server"
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"

if [ -x "$BIN" ]; then
  echo "llama-server: reusing $BIN"
  exit 0
fi

mkdir -p "$CACHE/sdist"
if [ ! -f "$SDIST" ]; then
  PIP=pip3
  [ -x .venv/bin/pip ] && PIP=.venv/bin/pip
  "$PIP" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
fi

CMAKE=cmake
if ! command -v cmake >/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check cmake
  CMAKE=.venv/bin/cmake
fi

WORK=$(mktemp -d "$CACHE/.llama-server-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "llama-server: building into $DEST (about 8 minutes on 2 cores)"
start=$(date +%s)
tar -xzf "$SDIST" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
# The prebuilt-UI option defaults on and would download the web UI; shared libs off gives one relocatable binary.
"$CMAKE" -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF \
  -DBUILD_SHARED_LIBS=OFF >"$WORK/cmake.log" 2>&1 || { tail -n 40 "$WORK/cmake.log"; exit 1; }
"$CMAKE" --build "$WORK/build" --target llama-server -j "$(nproc)" >"$WORK/build.log" 2>&1 \
  || { tail -n 40 "$WORK/build.log"; exit 1; }

mkdir -p "$WORK/out/bin"
cp "$WORK/build/bin/llama-server" "$WORK/out/bin/llama-server"
echo "$VERSION" >"$WORK/out/VERSION"
# rename is atomic; if another run finished first, keep its result and drop ours.
mv -T "$WORK/out" "$DEST" 2>/dev/null || true
[ -x "$BIN" ] || { echo "llama-server: build finished but $BIN is missing" >&2; exit 1; }
echo "llama-server: built $BIN in $(($(date +%s) - start)) s"
