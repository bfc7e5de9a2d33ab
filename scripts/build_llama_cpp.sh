#!/usr/bin/env bash
# Install llama-cpp-python from its sdist, compiled in a build tree that is kept: DIR/src (the
# sdist, llama.cpp vendored inside) and DIR/build (scikit-build-core's CMake tree). llama-server
# and llama-perplexity are later built in that same tree (scripts/build_llama_server.sh), so
# llama.cpp's libraries are compiled once for both: the server step compiles only its own 16
# files instead of 194 (llama-cpp-python 0.3.36). A local directory is never taken from
# pip's wheel cache, so the tree always exists after this step.
# Usage: scripts/build_llama_cpp.sh PYTHON DIR [REQUIREMENT]   (default: pyproject.toml's)
# LLAMA_CMAKE_ARGS replaces -DGGML_NATIVE=ON (make test-avx2 builds for AVX2 without AVX-512).
# An environment that has llama-cpp-python already keeps it (the server step then builds
# llama.cpp on its own, as before this tree existed).
set -euo pipefail
PY=${1:?python}
DIR=${2:?build directory}
REQ=${3:-$("$PY" -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"] if d.startswith("llama-cpp-python")))')}
if "$PY" -c 'import importlib.metadata as m; m.version("llama-cpp-python")' 2>/dev/null; then
  echo "llama.cpp: llama-cpp-python is installed already; kept"
  exit 0
fi
rm -rf "$DIR"
mkdir -p "$DIR"
echo "llama.cpp: fetching the $REQ sdist..."
"$PY" -m pip download --quiet --no-binary :all: --no-deps "$REQ" -d "$DIR"
tar -xzf "$DIR"/llama_cpp_python-*.tar.gz -C "$DIR"
rm "$DIR"/llama_cpp_python-*.tar.gz
mv "$DIR"/llama_cpp_python-* "$DIR/src"
# The tree must build again after pip's isolated build environment is gone: with no ninja on
# PATH scikit-build-core would fetch one into that environment, so use make there instead.
if [ -z "${CMAKE_GENERATOR:-}" ] && ! command -v ninja >/dev/null; then
  export CMAKE_GENERATOR="Unix Makefiles"
fi
echo "llama.cpp: building llama-cpp-python in $DIR/build (about 10 minutes on 2 cores)..."
SKBUILD_BUILD_DIR="$(cd "$DIR" && pwd)/build" CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=ON}" \
  "$PY" -m pip install "$DIR/src"
"$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' >"$DIR/VERSION"
