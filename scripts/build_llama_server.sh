#!/usr/bin/env bash
# Build llama.cpp's own llama-server (and llama-perplexity, the compare tests' oracle) from the same llama.cpp that llama-cpp-python vendors, so
# the remote-backend tests compare one llama.cpp with itself. Nothing is downloaded but the
# llama-cpp-python sdist from PyPI (pip's cache keeps it); the web UI and curl are left out.
# Usage: scripts/build_llama_server.sh PYTHON DEST   (DEST/bin/llama-server is the result)
# LLAMA_CMAKE_ARGS replaces -DGGML_NATIVE=ON (make test-avx2 builds for AVX2 without AVX-512).
set -euo pipefail
PY=${1:?python}
DEST=${2:?destination}
VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
if [ -x "$DEST/bin/llama-server" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "llama-server: fetching the llama-cpp-python $VERSION sdist (llama.cpp's sources)..."
"$PY" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
SRC=$(echo "$WORK"/llama_cpp_python-*/vendor/llama.cpp)
echo "llama-server: building from $SRC (about 15 minutes on 2 cores)..."
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF ${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON} >"$WORK/cmake.log" 2>&1 \
  || { tail -30 "$WORK/cmake.log"; exit 1; }
cmake --build "$WORK/build" --target llama-server llama-perplexity -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
cp -a "$WORK/build/bin" "$DEST/bin"
echo "$VERSION" >"$DEST/VERSION"
echo "llama-server: $DEST/bin/llama-server"
