"""A model's vocabulary without its weights: what ``llama-tokenize`` loads.

``llama_model_params.vocab_only`` makes llama.cpp read the GGUF header, the architecture and
the tokenizer (SmolLM2's 49,152 pieces and merges), and no tensor data, so tokenizing needs no
context and almost no memory: the same ``llama_tokenize`` the engine calls, on the same
vocabulary, gives the same ids.
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp

from . import gguf_header, llama_log
from .model import _load, default_model_path
from .tokens import Vocab


class VocabModel:
    """A ``llama_model`` loaded with ``vocab_only``: :attr:`vocab` tokenizes and gives pieces."""

    def __init__(self, path: str | Path | None = None) -> None:
        llama_log.install()
        llama_cpp.llama_backend_init()
        p = Path(path) if path is not None else default_model_path()
        self.header = gguf_header.validate(p)
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.ptr: llama_cpp.llama_model_p | None = _load(self.header, params)
        ptr = llama_cpp.llama_model_get_vocab(self.ptr)
        self.vocab = Vocab(ptr, llama_cpp.llama_vocab_n_tokens(ptr))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(ptr))

    def close(self) -> None:
        if self.ptr:
            llama_cpp.llama_model_free(self.ptr)
            self.ptr = None
