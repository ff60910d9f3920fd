#!/usr/bin/env bash
# Install llama-cpp-python into .venv for chatcaps.integrations.llamacpp and its tests; skip when already there.
# PyPI ships only its source distribution, so pip builds llama.cpp (about 9 minutes on 2 cores) into a wheel kept in
# the build cache, from which any later virtual environment installs quickly. The sdist is kept in the build cache
# too: the tests read the real vocab-only GGUF files it carries (vendor/llama.cpp/models/ggml-vocab-*.gguf).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

VERSION=0.3.36
CACHE=${CHATCAPS_BUILD_CACHE:-$HOME/.cache/chatcaps}
SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"

if [ ! -f "$SDIST" ]; then
  mkdir -p "$CACHE/sdist"
  .venv/bin/python -m pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
fi

# Importing it (not only its metadata) also checks its dependencies are there.
if ! .venv/bin/python -c "import sys, llama_cpp; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
  # The built wheel is kept in the build cache, so a new virtual environment (a fresh clone) installs in seconds.
  WHEEL=$(ls "$CACHE/wheels/llama_cpp_python-$VERSION-"*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$WHEEL" ]; then
    echo "llama-cpp-python: building $VERSION (about 9 minutes on 2 cores the first time)"
    start=$(date +%s)
    WORK=$(mktemp -d "$CACHE/.llama-cpp-python-wheel.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    # GGML_NATIVE=OFF: a binary that runs on any x86-64 machine, not only the one that built it.
    CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps \
      "$SDIST" -w "$WORK"
    mkdir -p "$CACHE/wheels"
    WHEEL="$CACHE/wheels/$(basename "$WORK"/llama_cpp_python-*.whl)"
    mv "$WORK"/llama_cpp_python-*.whl "$WHEEL"  # a rename within the cache: a concurrent run sees all or nothing
    echo "llama-cpp-python: built in $(($(date +%s) - start)) s"
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt "$WHEEL"
fi
