"""The server's side of the model: its capabilities, vocabulary and facts, over HTTP.

Tokens go through ``/tokenize`` (with their pieces) and ``/detokenize``; the model's facts come
from ``/props`` and ``/v1/models``. llama-server does not list its end-of-generation tokens, so
they are the eos token from ``/props`` and the tokens whose text llama.cpp itself treats as an
end of generation (:data:`~tui.engine.wire.remote_step.EOG_NAMES`).
"""

from __future__ import annotations

import os
from typing import Any

from ..model.errors import one_line
from ..model.model import ModelInfo
from ..model.tokens import known_piece
from ..run.backend import Capabilities
from ..wire.remote_http import ServerClient
from ..wire.remote_reply import read_detokenized, read_health, read_models, read_props, read_tokens
from ..wire.remote_step import EOG_NAMES


def remote_capabilities(url: str) -> Capabilities:
    return Capabilities(
        f"the server at {url}",
        kv_cells=False,
        attention=False,
        graph=False,
        verify=False,
        fork=False,
        full_vocab=False,
        context_shift=False,
        lens=False,
    )


class RemoteVocab:
    """The server's vocabulary: ``/tokenize`` (with pieces) and ``/detokenize``, cached."""

    def __init__(self, client: ServerClient, n_vocab: int) -> None:
        self.client = client
        self.n_vocab = n_vocab
        self._pieces: dict[int, bytes] = {}
        self.eog_ids: set[int] = set()

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        if not text:
            return []
        body = {
            "content": text,
            "add_special": add_special,
            "parse_special": parse_special,
            "with_pieces": True,
        }
        reply = self.client.post("/tokenize", body)
        n_bytes = len(text.encode("utf-8", "surrogatepass"))
        tokens = read_tokens(self.client.url, reply.body, self.n_vocab, n_bytes)
        for tok, piece in tokens:
            if piece is not None:
                self.learn(tok, piece)
        return [tok for tok, _ in tokens]

    def learn(self, token: int, piece: bytes) -> None:
        """Remember a token's bytes (checked by :mod:`~tui.engine.wire.remote_reply`)."""
        self._pieces[token] = piece

    def piece(self, token: int) -> bytes:
        if (cached := known_piece(self._pieces, token, self.n_vocab)) is not None:
            return cached
        reply = self.client.post("/detokenize", {"tokens": [token]})
        self._pieces[token] = read_detokenized(self.client.url, reply.body)
        return self._pieces[token]

    def text(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def end_with(self, ids: set[int]) -> None:
        """The end-of-generation tokens, as the server's props (or a local -m) name them."""
        self.eog_ids = set(ids)

    def is_eog(self, token: int) -> bool:
        return token in self.eog_ids


def model_info(
    url: str, props: dict[str, Any], meta: dict[str, Any], vocab: RemoteVocab
) -> ModelInfo:
    """The model's facts from the checked ``/props`` and ``/v1/models`` (see
    :func:`~tui.engine.wire.remote_reply.read_props`, :func:`~tui.engine.wire.remote_reply.read_models`)."""
    path = str(props.get("model_path") or props.get("model_alias") or url)
    eos_text = props.get("eos_token") or ""
    bos_text = props.get("bos_token") or ""
    names = [n for n in dict.fromkeys([eos_text, *EOG_NAMES]) if n]
    toks = vocab.tokenize("".join(names), add_special=False, parse_special=True)
    pieces = {vocab.piece(t).decode("utf-8", "replace"): t for t in toks}
    vocab.end_with({t for name, t in pieces.items() if name in names})
    eos = pieces.get(eos_text, -1)
    bos_toks = vocab.tokenize(bos_text, add_special=False, parse_special=True) if bos_text else []
    n_vocab = int(meta.get("n_vocab") or vocab.n_vocab)
    return ModelInfo(
        path=path,
        arch="?",
        name=one_line(os.path.basename(path).removesuffix(".gguf")),
        desc=one_line(f"served by llama-server at {url}"),
        quant=one_line(str(props.get("model_ftype") or meta.get("ftype") or "?")),
        size_bytes=int(meta.get("size") or 0),
        n_params=int(meta.get("n_params") or 0),
        n_vocab=n_vocab,
        n_layer=0,
        n_head=0,
        n_head_kv=0,
        n_embd=int(meta.get("n_embd") or 0),
        head_dim_k=0,
        head_dim_v=0,
        n_ff=0,
        n_ctx_train=int(meta.get("n_ctx_train") or 0),
        n_swa=0,
        vocab_type="?",
        bos=bos_toks[0] if len(bos_toks) == 1 else -1,
        eos=eos,
        eot=-1,
        eog_ids=sorted(vocab.eog_ids),
        chat_template=props.get("chat_template") or None,
        add_bos=False,  # the chat template writes its own markers; ids are sent as they are
    )


def handshake(client: ServerClient, slot: int = 0) -> dict[str, Any]:
    """``GET /health`` (503 while the model loads), then ``GET /props``, which also says how
    many slots the server has (``total_slots``, its ``-np``): ``slot`` must be one of them."""
    read_health(client.url, client.get("/health").body)
    return read_props(client.url, client.get("/props").body, slot)


def model_meta(client: ServerClient) -> dict[str, Any]:
    """``GET /v1/models``: n_vocab (required), n_ctx_train, size (one model per server)."""
    return read_models(client.url, client.get("/v1/models").body)
