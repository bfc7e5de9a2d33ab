"""``tokenstep --resume FILE``: start from a saved or autosaved session.

The header line of the session file (see :mod:`tui.worker.session_store`) holds the conversation, the
sampler settings, the engine config and the exact context tokens. Resuming takes the saved
config and settings over the command line's (``-t`` and ``-m`` still apply), then decodes the
saved context tokens again in a fresh context: llama.cpp's KV cache is not in the file, so the
cache state is rebuilt by a real prefill, before the worker thread starts.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.chat import Message, chat_tokens
from ..engine.errors import TokenstepError
from .chat import Span, chat_spans
from .session_store import FORMAT_VERSION

if TYPE_CHECKING:
    from .thread import Worker

ROLES = ("system", "user", "assistant")


def load_header(path: str | Path) -> dict[str, Any]:
    """The header of a session file, checked; any problem is one sentence."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
    except OSError as exc:
        raise TokenstepError(f"cannot read the session file {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError:
        raise TokenstepError(f"{path} is not a tokenstep session file (not UTF-8 text).") from None
    try:
        header = json.loads(first)
    except ValueError:
        raise TokenstepError(
            f"{path} is not a tokenstep session file (its first line is not JSON)."
        ) from None
    if not isinstance(header, dict) or header.get("tokenstep_session") != FORMAT_VERSION:
        raise TokenstepError(f"{path} is not a tokenstep session file.")
    try:
        _check(header)
    except (KeyError, TypeError, ValueError) as exc:
        raise TokenstepError(
            f"the session file {path} is damaged ({type(exc).__name__}: {exc})."
        ) from None
    return header


def _check(h: dict[str, Any]) -> None:
    for m in h["conversation"]:
        if m["role"] not in ROLES or not isinstance(m["content"], str):
            raise ValueError("a message is not a role and a text")
    toks = h["context_tokens"]
    if not isinstance(toks, list) or not all(type(t) is int and t >= 0 for t in toks):
        raise ValueError("context_tokens is not a list of token ids")
    if h["mode"] not in ("raw", "chat"):
        raise ValueError(f"mode {h['mode']!r}")
    for key in ("temp", "top_k", "top_p", "min_p", "seed", "greedy"):
        h["settings"][key]
    for key in ("n_ctx", "n_batch", "n_ubatch", "context_full", "n_keep"):
        h["config"][key]


def apply_to_args(args: argparse.Namespace, header: dict[str, Any]) -> None:
    """The saved config, settings and mode replace the command line's."""
    cfg, st = header["config"], header["settings"]
    args.ctx_size = cfg["n_ctx"]
    args.batch_size = cfg["n_batch"]
    args.ubatch_size = cfg["n_ubatch"]
    args.context_full = cfg["context_full"]
    args.keep = cfg["n_keep"]
    for key in ("flash_attn", "cache_type_k", "cache_type_v"):
        if key in cfg:
            setattr(args, key, cfg[key])
    args.temp, args.top_k, args.top_p = st["temp"], st["top_k"], st["top_p"]
    args.min_p, args.seed, args.greedy = st["min_p"], st["seed"], st["greedy"]
    args.raw = header["mode"] == "raw"
    args.no_prefix_cache = not header.get("prefix_cache", True)
    att = header.get("attention")  # attention capture on: the context is built with it
    if isinstance(att, dict) and att.get("on") and getattr(args, "attention", None) is None:
        args.attention = str(att.get("layer", 0))
    saved_model = header.get("model", {}).get("path")
    if args.model is None and saved_model and Path(saved_model).is_file():
        args.model = saved_model


def _tokens(value: Any) -> tuple[int, ...] | None:
    """A reply's saved token ids (sessions saved before they were kept have none)."""
    if isinstance(value, list) and all(isinstance(t, int) and t >= 0 for t in value):
        return tuple(value)
    return None


def restore(worker: Worker, header: dict[str, Any], path: str | Path) -> None:
    """Re-prefill the saved context and set the conversation. Call before the worker starts
    (this thread still owns the engine then)."""
    eng = worker.engine
    saved_name = header.get("model", {}).get("name")
    if saved_name is not None and saved_name != eng.info.name:
        raise TokenstepError(
            f"{path} was saved with the model {saved_name!r}, not {eng.info.name!r}; "
            "pass that model with -m."
        )
    tokens: list[int] = header["context_tokens"]
    if any(t >= eng.info.n_vocab for t in tokens):
        raise TokenstepError(f"{path} has token ids outside this model's vocabulary.")
    if len(tokens) > eng.n_ctx:
        raise TokenstepError(
            f"{path} holds {len(tokens)} context tokens but the context holds {eng.n_ctx}."
        )
    messages = [
        Message(m["role"], m["content"], _tokens(m.get("tokens"))) for m in header["conversation"]
    ]
    if any(t >= eng.info.n_vocab for m in messages for t in m.tokens or ()):
        raise TokenstepError(f"{path} has token ids outside this model's vocabulary.")
    records = eng.sync_prompt(tokens, reuse=False) if tokens else []
    n = len(tokens)
    spans: list[Span] = [Span("prompt", 0, n)] if n else []
    reply_start = n
    kept: list[Message] = messages
    tmpl = eng.info.chat_template
    if not worker.raw:
        if messages and messages[-1].role == "assistant":
            kept = messages[:-1]  # the reply lives in the cache, after reply_start
        if kept and tmpl:
            prompt = chat_tokens(eng.vocab, tmpl, kept, add_bos=eng.info.add_bos)
            p = len(prompt.tokens)
            if tokens[:p] == prompt.tokens:
                reply_start = p
                spans = chat_spans(kept, prompt.user_spans, p)
    else:
        kept = []
    worker.state.restore(
        messages=kept,
        spans=spans,
        reply_start=reply_start if n else None,
        records=records,
        new_cells=(0, eng.kv.used),
        notice=(
            f"Resumed {path}: {len(messages)} message(s) and the sampler settings; "
            f"{n} context tokens re-prefilled in {len(records)} llama_decode call(s). "
            "→ steps on, space plays."
        ),
    )
    worker.attention.restore(header.get("attention"))
