"""The bundled GGUF in the two forms the vLLM tests need, run once by scripts/setup_vllm.sh
with the vLLM environment's Python (transformers, torch, gguf).

* ``HF_DIR``: Hugging Face form, float32, for vLLM. transformers reads the GGUF with the gguf
  package, dequantizing every tensor (Q4_1, Q8_0, ...) to float32 and undoing llama.cpp's
  permutation of the Q and K rows; the quantizer it attaches is dropped, and the config's
  ``quantization_config`` with it (vLLM would look for a GGUF quantization method otherwise).
* ``F32_GGUF``: the same float32 numbers as a GGUF, every key of the original kept, for the
  local engine: llama.cpp on it and vLLM on ``HF_DIR`` compute the same weights, so what
  differs between their log-probabilities is kernel rounding alone.

Usage: python scripts/vllm_convert.py GGUF HF_DIR F32_GGUF
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def to_hf(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    where, name = str(gguf_path.parent), gguf_path.name
    model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(where, gguf_file=name).save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def to_f32_gguf(gguf_path: Path, out: Path) -> None:
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(gguf_path)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in (
            gguf.Keys.General.ARCHITECTURE,
            gguf.Keys.General.FILE_TYPE,
            gguf.Keys.General.ALIGNMENT,
        ):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        writer.add_tensor(t.name, data.reshape([int(d) for d in reversed(t.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)


def main() -> int:
    gguf_path, hf_dir, f32_path = (Path(a) for a in sys.argv[1:4])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything comes from the file
    if not (hf_dir / "config.json").is_file():
        to_hf(gguf_path, hf_dir)
    if not f32_path.is_file():
        to_f32_gguf(gguf_path, f32_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
