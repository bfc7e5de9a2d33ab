"""``tokenstep --resume FILE``: start from a saved or autosaved session.

The header line of the session file (see :mod:`tui.worker.session_store`) holds the conversation, the
sampler settings, the engine config and the exact context tokens. Resuming takes the saved
config and settings over the command line's (``-t`` and ``-m`` still apply), then decodes the
saved context tokens again in a fresh context: llama.cpp's KV cache is not in the file, so the
cache state is rebuilt by a real prefill, before the worker thread starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engine.model import checks, text_size
from ..engine.model.chat_template import Message, chat_tokens
from ..engine.model.context import EngineConfig
from ..engine.model.errors import TokenstepError
from ..engine.sampler.sampler_settings import SamplerSettings
from . import paths
from .chat import Span, chat_spans
from .session_store import FORMAT_VERSION, READABLE

if TYPE_CHECKING:
    from .thread import Worker

ROLES = ("system", "user", "assistant")


SETTINGS_KEYS = ("temp", "top_k", "top_p", "min_p", "seed", "greedy")
CONFIG_KEYS = ("n_ctx", "n_batch", "n_ubatch", "context_full", "n_keep")
CONFIG_OPTIONAL = ("flash_attn", "cache_type_k", "cache_type_v", "n_seq_max")
# Resuming renders the whole conversation through the chat template and tokenizes each
# message: 100,000 messages took 35 s before the screen opened (10,000: 1.6 s).
MAX_MESSAGES = 10_000
MAX_BRANCHES = 1_000  # paths not taken; a session keeps those of one turn
# The header of the largest context (2^20 tokens): its text at text_size's 32 bytes a token,
# its ids as JSON (at most 8 bytes each), and room for the rest.
MAX_HEADER_CHARS = 64 * 2**20
HOWS = ("rewind", "force", "fork", "jump")
MAX_CUTS = 64  # a pick's chain stages (llama.cpp's chains have a dozen)


def load_header(path: str | Path) -> dict[str, Any]:
    """The header of a session file, checked completely, once, before anything is built
    from it; any problem is one sentence that names the field."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline(MAX_HEADER_CHARS + 1)
    except OSError as exc:
        raise TokenstepError(f"cannot read the session file {path}: {exc.strerror}.") from exc
    except UnicodeDecodeError:
        raise TokenstepError(f"{path} is not a tokenstep session file (not UTF-8 text).") from None
    if len(first) > MAX_HEADER_CHARS:
        raise TokenstepError(
            f"the session file {path} cannot be resumed: its first line is longer than "
            f"{MAX_HEADER_CHARS // 2**20} MiB, more than any context tokenstep makes holds."
        )
    try:
        header = json.loads(first)
    except RecursionError:  # [[[[... nested deeper than the decoder recurses
        raise TokenstepError(
            f"{path} is not a tokenstep session file (its first line nests too deeply)."
        ) from None
    except ValueError:
        raise TokenstepError(
            f"{path} is not a tokenstep session file (its first line is not JSON)."
        ) from None
    version = header.get("tokenstep_session") if isinstance(header, dict) else None
    if type(version) is not int:  # true == 1 in Python
        raise TokenstepError(f"{path} is not a tokenstep session file.")
    if version > FORMAT_VERSION:
        raise TokenstepError(
            f"{path} was saved by a newer tokenstep (session format {version}); this one "
            f"reads formats {READABLE[0]} to {FORMAT_VERSION}."
        )
    if version not in READABLE:
        raise TokenstepError(f"{path} is not a tokenstep session file.")
    try:
        check_utf8(header)
        check_header(header)
    except TokenstepError as exc:
        raise TokenstepError(f"the session file {path} cannot be resumed: {exc}") from None
    return header


def _object(h: dict[str, Any], key: str, *, required: bool = True) -> dict[str, Any]:
    value = h.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise TokenstepError(f"{key} must be an object, not {checks.shown(value)}.")
    return value


def _field(obj: dict[str, Any], section: str, key: str) -> Any:
    if key not in obj:
        raise TokenstepError(f"{section}.{key} is missing.")
    return obj[key]


def saved_settings(h: dict[str, Any]) -> SamplerSettings:
    """The whole saved chain: the six keys every session has, and any of the others (an
    older session lacks them: llama.cpp's defaults)."""
    st = _object(h, "settings")
    for k in SETTINGS_KEYS:
        _field(st, "settings", k)
    names = {f.name for f in dataclasses.fields(SamplerSettings)}
    kw = {k: v for k, v in st.items() if k in names}
    bias = kw.get("logit_bias")
    if bias is not None:
        pairs = isinstance(bias, list) and all(
            isinstance(x, list) and len(x) == 2 and type(x[0]) is int and type(x[1]) in (int, float)
            for x in bias
        )
        if not pairs:
            raise TokenstepError("settings.logit_bias must be a list of [token id, bias] pairs.")
        kw["logit_bias"] = [(int(t), float(b)) for t, b in bias]
    return SamplerSettings(**kw)


def saved_config(h: dict[str, Any]) -> EngineConfig:
    """The saved config; a session saved over a server has null batch sizes (the server's
    own, unknown to tokenstep), checked here as the defaults they resume with."""
    cfg = _object(h, "config")
    fields = {k: _field(cfg, "config", k) for k in CONFIG_KEYS}
    if _object(h, "server", required=False):
        for key in ("n_batch", "n_ubatch"):
            if fields[key] is None:
                fields[key] = getattr(EngineConfig(), key)
    fields.update({k: cfg[k] for k in CONFIG_OPTIONAL if k in cfg})
    return EngineConfig(**fields)


def check_utf8(h: Any) -> None:
    """JSON's ``\\ud800`` is a lone surrogate, which has no UTF-8 form: the first string of
    the file that llama.cpp would be handed and could not be (a UnicodeEncodeError in the
    tokenizer, or DRY's breakers on the worker thread, where the app stayed at "loading…")."""
    stack: list[tuple[str, Any]] = [("", h)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
            stack += [(f"{where} (a key)", k) for k in v]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
        elif isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                raise TokenstepError(
                    f"{where} is not UTF-8 text (character {e.start} is a lone surrogate, "
                    f"U+{ord(v[e.start]):04X})."
                ) from None


def check_paths(data: Any) -> None:
    """The paths not taken as :func:`tui.worker.paths.to_json` writes them (the ids are
    checked against the vocabulary when the model is known, in ``from_json``)."""
    if data is None:
        return
    if not isinstance(data, dict):
        raise TokenstepError(f"paths must be an object, not {checks.shown(data)}.")
    start = data.get("reply_start")
    if start is not None:
        checks.whole(start, "paths.reply_start")
    branches = data.get("branches", [])
    if not isinstance(branches, list):
        raise TokenstepError(f"paths.branches must be a list, not {checks.shown(branches)}.")
    if len(branches) > MAX_BRANCHES:
        raise TokenstepError(
            f"paths.branches holds {len(branches)} paths (at most {MAX_BRANCHES})."
        )
    for i, b in enumerate(branches):
        at = f"paths.branches[{i}]"
        if not isinstance(b, dict):
            raise TokenstepError(f"{at} must be an object, not {checks.shown(b)}.")
        toks = b.get("tokens", [])
        if not isinstance(toks, list) or not all(type(t) is int and t >= 0 for t in toks):
            raise TokenstepError(f"{at}.tokens must be a list of token ids.")
        values = b.get("values", [])
        if not isinstance(values, list) or len(values) > len(toks):
            raise TokenstepError(f"{at}.values must be a list, one entry per token at most.")
        for j, v in enumerate(values):
            check_value(v, f"{at}.values[{j}]")
        how = b.get("how", "rewind")
        if how not in HOWS:
            raise TokenstepError(f"{at}.how must be one of {', '.join(HOWS)}.")


def check_value(v: Any, at: str) -> None:
    """A branch's pick: an object as :func:`tui.worker.paths.value_json` writes it, or
    format 1's ``[p, p', entropy]``."""
    if v is None:
        return
    if isinstance(v, list):
        ok = (
            len(v) == 3
            and all(type(x) in (int, float) for x in (v[0], v[2]))
            and (v[1] is None or type(v[1]) in (int, float))
        )
        if not ok:
            raise TokenstepError(f"{at} must be null, a pick or [p, p', entropy].")
        for x in v:
            if x is not None:
                checks.finite(x, at)
        return
    if not isinstance(v, dict):
        raise TokenstepError(f"{at} must be null, a pick or [p, p', entropy].")
    for key in ("p", "entropy"):
        checks.finite(v.get(key), f"{at}.{key}")
    if v.get("p_final") is not None:
        checks.finite(v["p_final"], f"{at}.p_final")
    checks.flag(v.get("forced"), f"{at}.forced")
    checks.flag(v.get("partial", False), f"{at}.partial")
    checks.whole(v.get("seed"), f"{at}.seed")
    cuts = v.get("cuts")
    if not isinstance(cuts, list) or len(cuts) > MAX_CUTS or not all(
        isinstance(c, list) and len(c) == 2 and isinstance(c[0], str)
        and type(c[1]) is int and c[1] >= 0
        for c in cuts
    ):
        raise TokenstepError(
            f"{at}.cuts must be a list of [stage, survivors], {MAX_CUTS} at most."
        )


def check_header(h: dict[str, Any]) -> None:
    """Every field resuming reads, by the same validators the command line's flags go
    through (:meth:`SamplerSettings.validate`, :meth:`EngineConfig.validate`)."""
    conv = h.get("conversation")
    if not isinstance(conv, list):
        raise TokenstepError(f"conversation must be a list, not {checks.shown(conv)}.")
    if len(conv) > MAX_MESSAGES:
        raise TokenstepError(
            f"conversation holds {len(conv):,} messages; tokenstep resumes at most "
            f"{MAX_MESSAGES:,}."
        )
    for i, m in enumerate(conv):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise TokenstepError(f"conversation[{i}] must have a role of {', '.join(ROLES)}.")
        checks.text(m.get("content"), f"conversation[{i}].content")
    mode = h.get("mode")
    if mode not in ("raw", "chat"):
        raise TokenstepError(f"mode must be raw or chat, not {checks.shown(mode)}.")
    if "prefix_cache" in h:
        checks.flag(h["prefix_cache"], "prefix_cache")
    saved_settings(h).validate(lambda k: f"settings.{k}")
    config = saved_config(h)
    config.validate(lambda k: f"config.{k}")
    n_chars = sum(len(m["content"]) for m in conv)  # before any of it is tokenized
    if n_chars * 4 > text_size.max_bytes(config.n_ctx):
        n_bytes = sum(len(m["content"].encode("utf-8")) for m in conv)
        text_size.check("its conversation", n_bytes, config.n_ctx)
    toks = h.get("context_tokens")
    if not isinstance(toks, list) or not all(type(t) is int and t >= 0 for t in toks):
        raise TokenstepError("context_tokens must be a list of token ids.")
    if len(toks) > config.n_ctx:
        raise TokenstepError(
            f"it holds {len(toks)} context tokens but its config.n_ctx is {config.n_ctx}."
        )
    server = _object(h, "server", required=False)
    if server:
        checks.text(server.get("url"), "server.url")
        if server.get("api") not in ("llama-server", "openai"):
            raise TokenstepError(
                f"server.api must be llama-server or openai, not {checks.shown(server.get('api'))}."
            )
    model = _object(h, "model", required=False)
    for key in ("path", "name"):
        if model.get(key) is not None:
            checks.text(model[key], f"model.{key}")
    att = _object(h, "attention", required=False)
    if "on" in att:
        checks.flag(att["on"], "attention.on")
    for key in ("layer", "head"):
        if att.get(key) is not None:
            checks.whole(att[key], f"attention.{key}")
    check_paths(h.get("paths"))


def apply_to_args(args: argparse.Namespace, header: dict[str, Any]) -> None:
    """The saved config, settings and mode replace the command line's (``header`` has
    passed :func:`load_header`). Over --server the context is the server's: the saved size
    and context-full rule stay out; null batch sizes (a session saved over a server) leave
    -b and -ub as given."""
    cfg, st = header["config"], header["settings"]
    if not getattr(args, "server", None):
        args.ctx_size = cfg["n_ctx"]
        args.context_full = cfg["context_full"]
        args.keep = cfg["n_keep"]
    if cfg["n_batch"] is not None:
        args.batch_size = cfg["n_batch"]
    if cfg["n_ubatch"] is not None:
        args.ubatch_size = cfg["n_ubatch"]
    if "n_seq_max" in cfg:
        args.parallel = cfg["n_seq_max"]
    for key in CONFIG_OPTIONAL:
        if key in cfg:
            setattr(args, key, cfg[key])
    args.temp, args.top_k, args.top_p = st["temp"], st["top_k"], st["top_p"]
    args.min_p, args.seed, args.greedy = st["min_p"], st["seed"], st["greedy"]
    args.saved_settings = st  # the whole chain (older sessions: the defaults for the rest)
    args.raw = header["mode"] == "raw"
    args.no_prefix_cache = not header.get("prefix_cache", True)
    att = header.get("attention")  # attention capture on: the context is built with it
    if isinstance(att, dict) and att.get("on") and getattr(args, "attention", None) is None:
        args.attention = str(att.get("layer") or 0)
    saved_model = (header.get("model") or {}).get("path")
    local = not getattr(args, "server", None)  # a server has its own model
    if local and args.model is None and saved_model and Path(saved_model).is_file():
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
    saved_name = (header.get("model") or {}).get("name")
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
    n_paths = paths.from_json(worker, header.get("paths"))
    if n_paths:
        worker.state.note(
            worker.state.notice + f" {n_paths} path(s) not taken came back (decoded again "
            "when you jump to one: their cells were not saved)."
        )
