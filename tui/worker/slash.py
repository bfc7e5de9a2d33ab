"""Chat-box commands that act on the next step: ``/force TEXT`` and ``/p TEXT``.

``/force TEXT`` tokenizes TEXT (llama_tokenize, no BOS; special-token text such as
``<|im_end|>`` is that token) and forces it when it is exactly one token, so any of the
vocabulary's entries can be forced, not only the 16 rows the logits pane lists; ``/force #ID``
forces a token id. ``/p TEXT`` (or ``/p #ID``) says where that token stands at this step: its
rank, logit and p in the full logits row (:mod:`tui.engine.sampler.lookup`), and its p′ after the
sampler chain or the stage that cut it. TEXT is taken as typed after one space, so
``/p  Paris`` (two spaces) asks for ' Paris'; when TEXT has no leading space and ' TEXT' is one
token too, ``/p`` gives both (a word inside a sentence carries its space).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..engine.model.errors import TokenstepError
from ..engine.sampler.lookup import Standing, standing, standing_top_k
from . import stepping

if TYPE_CHECKING:
    from .thread import Worker

COMMANDS = ("/force", "/p")


def parse(text: str) -> tuple[str, str] | None:
    """(command, argument) when ``text`` is one of :data:`COMMANDS`, else None."""
    for cmd in COMMANDS:
        if text == cmd or text.startswith(cmd + " "):
            return cmd, text[len(cmd) + 1 :]
    return None


def run(w: Worker, text: str) -> None:
    """Run a parsed chat-box command on the worker thread."""
    got = parse(text)
    if got is None:
        raise TokenstepError(f"unknown command {text.split()[0]!r}: /force and /p are known.")
    cmd, arg = got
    if cmd == "/force":
        force_text(w, arg)
    else:
        lookup(w, arg)


def _show(w: Worker, token: int) -> str:
    return f"{w.engine.vocab.piece(token).decode('utf-8', 'replace')!r} (id {token})"


def _token_id(w: Worker, arg: str) -> int | None:
    """``#ID`` as an id (checked against the vocabulary); None when ``arg`` is text."""
    if not (arg.startswith("#") and arg[1:].isdigit()):
        return None
    token = int(arg[1:])
    n_vocab = w.engine.info.n_vocab
    if not 0 <= token < n_vocab:
        raise TokenstepError(f"token id {token} is outside the vocabulary (0 to {n_vocab - 1}).")
    return token


def _one_token(w: Worker, arg: str, cmd: str) -> int:
    if not arg:
        raise TokenstepError(f"{cmd} needs a token: {cmd} TEXT, or {cmd} #ID for a token id.")
    token = _token_id(w, arg)
    if token is not None:
        return token
    ids = w.engine.vocab.tokenize(arg, add_special=False, parse_special=True)
    if len(ids) != 1:
        pieces = " · ".join(_show(w, t) for t in ids)
        raise TokenstepError(
            f"{arg!r} is {len(ids)} tokens here ({pieces}), and {cmd} takes one: "
            f"give one of them, or {cmd} #ID."
        )
    return ids[0]


def force_text(w: Worker, arg: str) -> None:
    """``/force TEXT``: force the one token TEXT is (or ``#ID``), as ``f`` forces a row."""
    token = _one_token(w, arg, "/force")
    where = describe(w, token) if w.engine.logits is not None else None
    stepping.force(w, token)
    s = w.state
    if where is not None and s.notice_level != "error" and s.notice.startswith("Forced"):
        s.note(f"Forced {where}; it was decoded like any sampled token.")


def lookup(w: Worker, arg: str) -> None:
    """``/p TEXT``: rank, logit, p and p′ of that token at this step."""
    token = _one_token(w, arg, "/p")
    out = [describe(w, token)]
    if _token_id(w, arg) is None and not arg.startswith(" "):
        spaced = w.engine.vocab.tokenize(" " + arg, add_special=False, parse_special=True)
        if len(spaced) == 1 and spaced[0] != token:
            out.append(describe(w, spaced[0]))
    w.state.note(" | ".join(out) + ".")


def describe(w: Worker, token: int) -> str:
    """One token at this step, in one clause: where it ranks and with what p."""
    eng = w.engine
    if eng.logits is None:
        raise TokenstepError("there is no logits row yet: send a message first.")
    row = eng.logits
    if eng.capabilities.full_vocab:
        st = standing(row, token)
    else:  # the ids the server sent (its top K), else the row's entries above its filler
        rec = eng.records.get(eng.logits_record) if eng.logits_record is not None else None
        step = rec.server if rec is not None else None
        known = (step.top_ids if step is not None else None) or np.nonzero(row > row.min())[0]
        st = standing_top_k(row, np.asarray(known), token)
    chain = eng.preview()
    cut = chain.cut_by(token)
    after = f"p′ {chain.p_final(token):.4f}" if cut is None else f"cut by {cut}"
    return f"{_show(w, token)} at {_standing_text(st)}, {after}"


def _standing_text(st: Standing) -> str:
    if st.rank is None:
        below = "" if st.below is None else f": its p is below {st.below:.4g}, the K-th's"
        return f"outside the top {st.top_k} the server sent{below}"
    tie = f" (tied with {st.ties})" if st.ties else ""
    if st.top_k is not None:  # over HTTP: log p of the top K only
        return (
            f"rank {st.rank}{tie} of the top {st.top_k} the server sent · "
            f"log p {np.log(st.p or 0.0):.2f} · p {st.p:.4g}"
        )
    return f"rank {st.rank:,}{tie} of {st.n_vocab:,} · logit {st.logit:.2f} · p {st.p:.4g}"
