#!/usr/bin/env bash
# Build llama.cpp's own llama-server (and llama-perplexity, the compare tests' oracle) from the
# same llama.cpp that llama-cpp-python vendors, so the remote-backend tests compare one
# llama.cpp with itself; the web UI and curl are left out.
# Usage: scripts/build_llama_server.sh PYTHON DEST [TREE]   (DEST/bin/llama-server is the result)
# TREE is scripts/build_llama_cpp.sh's DIR: where it holds llama-cpp-python's build of this
# version, the two programs are built in that CMake tree, linked to the very libraries
# llama-cpp-python installed (only their own 16 files compile, not 194). Otherwise (an environment
# installed before that script, or from pip's wheel cache) llama.cpp is built here from the
# sdist, libraries and all (194 files, about 15 minutes on 2 cores).
# LLAMA_CMAKE_ARGS replaces -DGGML_NATIVE=ON in that second case (make test-avx2 builds for
# AVX2 without AVX-512); a TREE keeps the arguments it was configured with.
set -euo pipefail
PY=${1:?python}
DEST=${2:?destination}
TREE=${3:-}
VERSION=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
if [ -x "$DEST/bin/llama-server" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  exit 0
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The standalone build's switches: no web UI, no curl, no OpenSSL, no tests or examples.
TOOLS="-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
if [ -n "$TREE" ] && [ -f "$TREE/build/CMakeCache.txt" ] && [ -d "$TREE/src" ] \
  && [ "$(cat "$TREE/VERSION" 2>/dev/null)" = "$VERSION" ]; then
  BUILD="$TREE/build"
  echo "llama-server: building in llama-cpp-python's tree $BUILD..."
  # Only the two programs are added (scripts/llama_tools.cmake); the tree's own switches stay
  # as llama-cpp-python configured them, so its compiled libraries stay valid.
  cmake -S "$TREE/src" -B "$BUILD" -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    "-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(cd "$(dirname "$0")" && pwd)/llama_tools.cmake" \
    >"$WORK/cmake.log" 2>&1 || { tail -30 "$WORK/cmake.log"; exit 1; }
else
  echo "llama-server: fetching the llama-cpp-python $VERSION sdist (llama.cpp's sources)..."
  "$PY" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$WORK"
  tar -xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
  SRC=$(echo "$WORK"/llama_cpp_python-*/vendor/llama.cpp)
  BUILD="$WORK/build"
  echo "llama-server: building llama.cpp from $SRC (about 15 minutes on 2 cores)..."
  # shellcheck disable=SC2086
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release $TOOLS \
    ${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON} >"$WORK/cmake.log" 2>&1 \
    || { tail -30 "$WORK/cmake.log"; exit 1; }
fi
cmake --build "$BUILD" --target llama-server llama-perplexity -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
  >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
cp -a "$BUILD/bin" "$DEST/bin"
# In llama-cpp-python's tree libmtmd is built outside bin (it adds tools/mtmd itself).
find "$BUILD" -path "$BUILD/bin" -prune -o -name 'lib*.so*' -print | xargs -r cp -a -t "$DEST/bin"
echo "$VERSION" >"$DEST/VERSION"
echo "llama-server: $DEST/bin/llama-server"
