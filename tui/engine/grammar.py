"""Grammars: llama.cpp's own grammar sampler (``llama_sampler_init_grammar``), GBNF text or a
JSON schema turned into GBNF by llama-cpp-python's port of llama.cpp's converter
(``llama_cpp.llama_grammar.json_schema_to_gbnf``).

The grammar sees only the tokens generated in this turn (llama-server accepts prompt tokens
with ``accept_grammar = false``). :class:`GrammarState` keeps the sampler in step with them:
a rewind resets it and feeds the kept tokens again.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from typing import Any

import llama_cpp
import numpy as np

from .errors import TokenstepError


def schema_to_gbnf(schema_text: str) -> str:
    """A JSON schema (text) as GBNF, with llama.cpp's converter as llama-cpp-python ships it."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        json.loads(schema_text)
    except ValueError as e:
        raise TokenstepError(f"-j/--json-schema is not valid JSON ({e}).") from None
    try:
        return str(json_schema_to_gbnf(schema_text))
    except Exception as e:  # noqa: BLE001 - the converter raises many kinds; one sentence
        raise TokenstepError(
            f"-j/--json-schema could not be turned into a grammar ({e})."
        ) from None


def init_grammar(vocab: Any, text: str) -> Any:
    """llama.cpp's grammar sampler; its parser prints errors straight to stderr, so that is
    caught here and its reason put in one sentence. Without a vocabulary llama.cpp aborts
    the process (``GGML_ASSERT(grammar.vocab != nullptr)``), so that is refused first."""
    if not vocab:
        raise TokenstepError(
            "a grammar (--grammar, -j/--json-schema) needs llama.cpp's vocabulary (the text of "
            "each token), and there is none here."
        )
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            smpl = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        said = tmp.read().decode("utf-8", "replace")
    if not smpl:
        why = next((ln for ln in said.splitlines() if ln.strip()), "")
        why = why.split("error parsing grammar:", 1)[-1].strip().rstrip(".")
        raise TokenstepError(
            f"the grammar does not parse ({why or 'llama.cpp refused it'}); "
            "it needs a root rule in GBNF."
        )
    return smpl


def check_grammar(vocab: Any, text: str) -> None:
    """Parse ``text`` with llama.cpp (one sentence if it does not)."""
    llama_cpp.llama_sampler_free(init_grammar(vocab, text))


class GrammarState:
    """One grammar sampler kept in step with the tokens generated since the prompt."""

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        self.text = ""
        self.smpl: Any = None
        self.seen: list[int] = []
        self._one = np.zeros(
            1, dtype=np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)
        )
        self._arr = llama_cpp.llama_token_data_array()
        self._arr.data = ctypes.cast(self._one.ctypes.data, llama_cpp.llama_token_data_p)  # type: ignore[assignment]

    def sync(self, text: str, generated: list[int]) -> Any:
        if text != self.text:
            self.free()
            self.text = text
        if not text:
            return None
        if self.smpl is None:
            self.smpl, self.seen = init_grammar(self.vocab, text), []
        n = len(self.seen)
        if generated[:n] == self.seen:
            tail = generated[n:]
        else:
            llama_cpp.llama_sampler_reset(self.smpl)
            self.seen, tail = [], generated
        for t in tail:
            if not self.allows(t):
                self.seen = []
                llama_cpp.llama_sampler_reset(self.smpl)
                raise TokenstepError(
                    f"the text generated so far breaks the grammar at token {t}: "
                    "rewind, or turn the grammar off."
                )
            llama_cpp.llama_sampler_accept(self.smpl, t)
            self.seen.append(t)
        return self.smpl

    def allows(self, token: int) -> bool:
        """common_sampler_sample's check: the grammar applied to the one token."""
        self._one["id"], self._one["logit"], self._one["p"] = token, 1.0, 0.0
        self._arr.size, self._arr.selected, self._arr.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.smpl, ctypes.byref(self._arr))
        return bool(np.isfinite(self._one["logit"][0]))

    def free(self) -> None:
        if self.smpl:
            llama_cpp.llama_sampler_free(self.smpl)
        self.smpl, self.seen, self.text = None, [], ""
