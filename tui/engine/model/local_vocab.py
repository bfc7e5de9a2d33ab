"""A model's vocabulary without its weights, for a backend whose logits come from elsewhere.

llama-server sends token ids and logprobs, never a ``llama_vocab``; DRY and grammars need one
(they match the text of tokens). ``-m PATH`` beside ``--server`` loads the same GGUF with
``llama_model_params.vocab_only``: llama.cpp reads the header and the token list only
(measured on the bundled SmolLM2-135M: 0.2 to 0.4 s and 19 MB, no weights).
:func:`check_same_vocab` then makes sure it is the vocabulary the server serves: the same
``n_vocab``, and a probe text tokenized by both into the same ids with the same pieces.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import llama_cpp

from . import gguf_header, llama_log
from .errors import TokenstepError
from .model import _load
from .tokens import Vocab

# Letters, digits, spaces, punctuation, an accent, a symbol above U+FFFF and a newline: a text
# that any two different tokenizers split differently.
PROBE_TEXT = "Hello, world! The café costs 42 € — naïve 🙂 tokens.\n\tdef f(x): return x**2"


class ServerVocab(Protocol):
    """What :func:`check_same_vocab` asks of the server's side (``RemoteVocab``)."""

    n_vocab: int
    eog_ids: set[int]

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]: ...

    def piece(self, token: int) -> bytes: ...

    def end_with(self, ids: set[int]) -> None: ...


class LocalVocab:
    """``llama_model_load_from_file`` with ``vocab_only``: a llama_vocab and nothing else."""

    def __init__(self, path: str | Path) -> None:
        llama_log.install()
        llama_cpp.llama_backend_init()
        self.path = Path(path)
        hdr = gguf_header.validate(self.path)  # a hostile header is one sentence, not a crash
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self.model: Any = _load(hdr, params)
        self.ptr = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.ptr))
        self.vocab = Vocab(self.ptr, self.n_vocab)

    def eog_ids(self) -> set[int]:
        """``llama_vocab_is_eog`` over the vocabulary: the ends of generation llama.cpp itself
        (and so the grammar, and llama-server) uses, where the server lists only its eos."""
        return {t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self.ptr, t)}

    def close(self) -> None:
        if self.model:
            llama_cpp.llama_model_free(self.model)
        self.model = self.ptr = None

    def __del__(self) -> None:  # pragma: no cover - best effort, as Model does
        try:
            self.close()
        except Exception:
            pass


def check_same_vocab(local: LocalVocab, server: ServerVocab, url: str) -> None:
    """One sentence unless ``local`` is the vocabulary of the model at ``url``."""
    where = f"-m {local.path} is not the model llama-server at {url} serves"
    if local.n_vocab != server.n_vocab:
        raise TokenstepError(
            f"{where}: its vocabulary has {local.n_vocab:,} tokens and the server's "
            f"{server.n_vocab:,}."
        )
    mine = local.vocab.tokenize(PROBE_TEXT, add_special=False)
    theirs = server.tokenize(PROBE_TEXT, add_special=False)
    if mine != theirs:
        at = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), 0)
        raise TokenstepError(
            f"{where}: the same text tokenizes differently (token {at}: id "
            f"{mine[at] if at < len(mine) else '-'} here, "
            f"{theirs[at] if at < len(theirs) else '-'} there)."
        )
    for tok in dict.fromkeys(theirs):
        if local.vocab.piece(tok) != server.piece(tok):
            raise TokenstepError(f"{where}: token {tok} has another text there.")
