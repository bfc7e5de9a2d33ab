"""Token ids for an OpenAI-compatible server: whose tokenizer, and how a token text maps to one.

The ids come from the served GGUF's vocabulary (``-m PATH``,
:class:`~tui.engine.model.local_vocab.LocalVocab`) or the server's native ``/tokenize``; with
neither, one sentence asks for ``-m``. The legacy reply names candidates by text, which
llama-cpp-python's server writes as ``detokenize([id]).decode("utf-8", errors="ignore")``: a
control token is ``""``, half a UTF-8 character loses its bytes, and equal texts collide. So
:class:`PieceIndex` maps a text to an id only when exactly one id decodes to it. On SmolLM2's
49,152 ids, 48,836 texts name one id, ``""`` names 291 and ``" "`` 38; the index takes 0.3 to
0.9 s, once.
"""

from __future__ import annotations

from collections import defaultdict

import llama_cpp

from ..model.local_vocab import LocalVocab
from ..model.tokens import Vocab

TOKEN_ID_PREFIX = "token_id:"  # vLLM's --return-tokens-as-token-ids


class FileVocab(Vocab):
    """The served GGUF's vocabulary (-m) in the place of the server's ``/tokenize``."""

    def __init__(self, local: LocalVocab) -> None:
        super().__init__(local.ptr, local.n_vocab)
        self.eog_ids: set[int] = local.eog_ids()

    def learn(self, token: int, piece: bytes) -> None:
        """The file knows every piece; the server's text for it is not taken over it."""

    def end_with(self, ids: set[int]) -> None:
        """The end-of-generation tokens (as :meth:`ServerVocab.end_with`: the chain's check
        hands every vocabulary of a server the local file's)."""
        self.eog_ids = set(ids)

    def is_eog(self, token: int) -> bool:
        return token in self.eog_ids


class PieceIndex:
    """Token text -> ids, as llama-cpp-python's and vLLM's legacy replies write the text."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        index: dict[str, set[int]] = defaultdict(set)
        for tok in range(vocab.n_vocab):
            piece = vocab.piece(tok)
            index[piece.decode("utf-8", "ignore")].add(tok)
            if llama_cpp.llama_vocab_is_control(vocab.ptr, tok):
                index[""].add(tok)  # detokenized without special tokens it is no text at all
        self.index = dict(index)

    def to_id(self, text: str) -> tuple[int | None, bool]:
        """(id, True) when ``text`` names exactly one id; (the tokenizer's id for it, False)
        when it names several; (None, False) when it names none."""
        if text.startswith(TOKEN_ID_PREFIX) and text[len(TOKEN_ID_PREFIX) :].isdigit():
            tok = int(text[len(TOKEN_ID_PREFIX) :])
            return (tok, True) if 0 <= tok < self.vocab.n_vocab else (None, False)
        ids = self.index.get(text)
        if not ids:
            return None, False
        if len(ids) == 1:
            return next(iter(ids)), True
        toks = self.vocab.tokenize(text, add_special=False, parse_special=True) if text else []
        return (toks[0] if len(toks) == 1 and toks[0] in ids else min(ids)), False


def tokenizer_to_id(vocab: object) -> PieceIndex | None:
    """A PieceIndex where the vocabulary is a local file (a server's /tokenize cannot list all
    pieces in reasonable time), else None."""
    return PieceIndex(vocab) if isinstance(vocab, Vocab) else None
