"""Small GGUF files written by hand, for hostile and tiny models."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

gguf = pytest.importorskip("gguf")


WriteGGUF = Callable[..., Path]


@pytest.fixture(scope="session")
def write_gguf(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> WriteGGUF:
    """``write_gguf(name, {key: value}, drop=(keys,))`` writes a full, loadable copy of the
    bundled model with some metadata changed. The source is parsed once per session (about
    3 s, the vocabulary dominates); each copy then takes about 0.3 s."""
    reader = gguf.GGUFReader(model_path)
    fields = []
    for name, f in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        fields.append((name, f.contents(), f.types[0], sub))
    folder = tmp_path_factory.mktemp("hostile")

    def write(name: str, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> Path:
        path = folder / name
        arch = changes.get("general.architecture", "llama")
        w = gguf.GGUFWriter(path, arch)
        for key, value, vtype, sub in fields:
            if key == "general.architecture" or key in drop:
                continue
            w.add_key_value(key, changes.get(key, value), vtype, sub_type=sub)
        for t in reader.tensors:
            w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    return write
