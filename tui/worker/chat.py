"""The chat: which context tokens came from where (spans), and what a new message sends.

A :class:`Span` is a run of context tokens with one origin: template text, a message, or the
reply. The worker keeps the spans of the prompt it sent; the reply's span is added when a view
is built, and a context shift cuts the forgotten tokens out of every span.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.model import text_size
from ..engine.model.chat_template import Message, chat_tokens
from ..engine.model.errors import ContextFullError, TokenstepError
from . import paths
from .remote_view import lost_cache_note, prefill_note
from .stages import BATCH, DECODE, LOGITS, TOKENIZE
from .state import Span, Tokenized

if TYPE_CHECKING:
    from collections.abc import Callable

    from .parts import WorkerParts


def chat_spans(messages: list[Message], spans: list[tuple[int, int]], n: int) -> list[Span]:
    """Template text between the messages, and each message's own tokens with its role."""
    out: list[Span] = []
    pos = 0
    for m, (a, b) in zip(messages, spans, strict=True):
        if a > pos:
            out.append(Span("template", pos, a))
        if b > a:
            out.append(Span(m.role, a, b))
        pos = b
    if n > pos:
        out.append(Span("template", pos, n))
    return out


def clip(spans: list[Span], n: int) -> list[Span]:
    """Spans of the first ``n`` tokens (after a rewind)."""
    return [Span(sp.role, sp.start, min(sp.end, n)) for sp in spans if sp.start < n]


def cut(spans: list[Span], a: int, n: int) -> list[Span]:
    """Spans after tokens [a, a + n) left the context (a context shift)."""

    def move(i: int) -> int:
        return i if i <= a else max(a, i - n)

    return [Span(sp.role, move(sp.start), move(sp.end)) for sp in spans]


def merge(spans: list[Span]) -> list[Span]:
    """Drop empty spans and join neighbours with the same role."""
    out: list[Span] = []
    for sp in spans:
        if sp.end <= sp.start:
            continue
        if out and out[-1].role == sp.role and out[-1].end == sp.start:
            out[-1] = Span(sp.role, out[-1].start, sp.end)
        else:
            out.append(sp)
    return out


# -- what the chat holds now (the reply included) ----------------------------------------------
def reply_tokens(w: WorkerParts) -> int:
    start = w.state.reply_start
    return 0 if start is None else max(0, w.engine.n_past - start)


def reply_text(w: WorkerParts) -> str:
    assert w.state.reply_start is not None
    toks = w.engine.tokens[w.state.reply_start :]
    data = b"".join(w.engine.vocab.piece(t) for t in toks)
    return data.decode("utf-8", errors="replace")


def spans_now(w: WorkerParts) -> list[Span]:
    s = w.state
    spans = clip(s.spans, w.engine.n_past)
    if s.reply_start is not None and reply_tokens(w):
        role = "generated" if w.raw else "reply"
        spans.append(Span(role, s.reply_start, w.engine.n_past))
    return spans


def messages_now(w: WorkerParts, pieces: tuple[bytes, ...] | None = None) -> list[Message]:
    s = w.state
    msgs = list(s.messages)
    if s.reply_start is not None and reply_tokens(w):
        if pieces is None:
            text = reply_text(w)
        else:
            text = b"".join(pieces[s.reply_start :]).decode("utf-8", errors="replace")
        msgs.append(Message("assistant", text, tuple(w.engine.tokens[s.reply_start :])))
    return msgs


def _shown(piece: bytes) -> str:
    return repr(piece.decode("utf-8", errors="replace"))


# -- sending a message -------------------------------------------------------------------------
def send(w: WorkerParts, text: str) -> None:
    """Enter in the chat box: send now, queue it while a reply plays, or send the queued one."""
    s = w.state
    if not text.strip():
        if s.queued:  # Enter on an empty box: send the queued message now
            text = s.take_queued() or text
        else:
            s.note("Type a message first.", "warn")
            return
    elif s.activity == "generating" and s.mode == "autoplay":
        # the size now: a message that cannot fit is refused before it is queued
        _or_give_back(w, text, planned)
        s.queue(text)
        s.note("Queued: your message is sent when this reply ends.", "warn")
        return
    _or_give_back(w, text, send_now)


def _or_give_back(w: WorkerParts, text: str, act: Callable[[WorkerParts, str], object]) -> None:
    """``act(w, text)``; a refusal puts ``text`` back in the chat box (never lost), then rises."""
    try:
        act(w, text)
    except TokenstepError:
        w.state.give_back(text)
        raise


def set_system(w: WorkerParts, text: str) -> None:
    """A new system prompt: the first message of this chat from the next message on (the
    conversation is rendered again, so the cache is reused only up to where it changed)."""
    s = w.state
    w.keep_system_prompt(text.strip() or None)
    if w.raw:
        s.note("Raw mode has no chat template, so no system message; it is kept for chat mode.")
        return
    rest = s.with_system(Message("system", w.system_prompt) if w.system_prompt else None)
    what = (
        f"System prompt set ({len(w.system_prompt):,} characters)"
        if w.system_prompt
        else "System prompt removed"
    )
    n = len(w.engine.vocab.tokenize(w.system_prompt, add_special=False)) if w.system_prompt else 0
    if n >= w.engine.n_ctx:  # said now, not at every message sent
        s.note(
            f"System prompt set ({len(text.strip()):,} characters, {n:,} tokens): longer than "
            f"the whole context ({w.engine.n_ctx:,} tokens), so no message fits; shorten it "
            "with /system TEXT (/system alone removes it) or start with a larger -c.",
            "warn",
        )
        return
    later = (
        ": the next message renders the conversation with it, and the KV cache is reused only "
        "up to where the prompt changed."
        if rest
        else ": it opens the next message's prompt."
    )
    s.note(what + later)


def send_queued(w: WorkerParts) -> None:
    """The reply ended: send the queued message; one that does not fit any longer (the reply grew)
    goes back to the chat box."""
    s = w.state
    text = s.take_queued()
    if not text:
        return
    _or_give_back(w, text, send_now)


@dataclass(frozen=True)
class Planned:
    """What sending ``text`` now would put in the context."""

    messages: list[Message]
    tokens: list[int]
    spans: list[Span]
    text_tokens: int


def planned(w: WorkerParts, text: str) -> Planned:
    """Tokenize the conversation with the new message (the worker owns tokenization);
    a conversation longer than the context is refused, in one sentence."""
    s, eng = w.state, w.engine
    what = "this text" if w.raw else "this message"
    text_size.check_text(what, text, eng.n_ctx)  # before it is tokenized whole
    messages = list(s.messages)
    if not w.raw and not messages and w.system_prompt:
        messages.append(Message("system", w.system_prompt))
    if not w.raw:
        if s.reply_start is not None and reply_tokens(w):
            reply = tuple(eng.tokens[s.reply_start :])
            messages.append(Message("assistant", reply_text(w), reply))
        messages.append(Message("user", text))
        tmpl = eng.info.chat_template
        if not tmpl:
            raise TokenstepError("this model has no chat template; start with --raw.")
        prompt = chat_tokens(eng.vocab, tmpl, messages, add_bos=eng.info.add_bos)
        tokens = prompt.tokens
        spans = chat_spans(messages, prompt.user_spans, len(tokens))
        text_tokens = prompt.user_spans[-1][1] - prompt.user_spans[-1][0]
    else:
        new = eng.vocab.tokenize(text, add_special=eng.n_past == 0)
        tokens = eng.tokens + new
        spans = spans_now(w) + [Span("prompt", eng.n_past, len(tokens))]
        text_tokens = len(new)
    if len(tokens) > eng.n_ctx:
        raise ContextFullError(too_long(w, messages, spans, len(tokens), text_tokens))
    return Planned(messages, tokens, spans, text_tokens)


def too_long(w: WorkerParts, messages: list[Message], spans: list[Span], n: int, text: int) -> str:
    """Why a message does not fit, and what helps: a new chat (ctrl+n) only when a new chat
    would hold it, which a system prompt or a message longer than the context rules out."""
    ctx = w.engine.n_ctx
    system = next((sp.end - sp.start for sp in spans if sp.role == "system"), 0)
    earlier = n > text if w.raw else len(messages) > 1 + bool(system)  # a chat to leave
    # A new chat holds the system prompt, this message and the template's few tokens around them.
    fresh = system + text if earlier else n
    if earlier and fresh <= ctx:
        return (
            f"the conversation would need {n:,} tokens but the context holds {ctx:,}; press "
            "ctrl+n for a new chat or start with a larger -c."
        )
    if system >= text:
        return (
            f"the system prompt alone is {system:,} tokens and the context holds {ctx:,}, so no "
            "message fits; shorten it with /system TEXT (/system alone removes it) or start "
            "with a larger -c."
        )
    what = "this text" if w.raw else "this message"
    return (
        f"{what} alone is {text:,} tokens (the prompt would need {fresh:,}) but the context "
        f"holds {ctx:,}; shorten it or start with a larger -c."
    )


def send_now(w: WorkerParts, text: str) -> None:
    """Tokenize the conversation with the new message and prefill what the cache lacks; then
    autosave, so a crash during the reply keeps the message."""
    s, eng = w.state, w.engine
    was_cut = s.activity == "generating" and s.reply_start is not None
    plan = planned(w, text)
    messages, tokens, spans, text_tokens = plan.messages, plan.tokens, plan.spans, plan.text_tokens
    if len(eng.seq_ids) > 1:
        w.drop_forks()
    paths.new_turn(w)
    held = list(eng.tokens)
    records = eng.sync_prompt(tokens, reuse=w.prefix_cache)
    decoded = sum(r.call.n_tokens for r in records)
    s.sent(
        messages,
        merge(spans),
        eng.n_past,
        Tokenized(len(text), text_tokens, len(tokens), records[0].reused),
    )
    s.playback.start_reply()
    s.ran("send", (TOKENIZE, BATCH, DECODE, LOGITS), unsaved=True)
    s.note_records(records, (eng.kv.used - decoded, eng.kv.used))
    note = prefill_note(records[0]) or (
        f"Prefill: {decoded} tokens in {len(records)} llama_decode call(s)"
    )
    if records[0].reused and records[0].server is None:
        note += f", {records[0].reused} reused from the KV cache"
    cut_at = records[0].reused
    if w.prefix_cache and cut_at < min(len(held), len(tokens)) and held[cut_at] != tokens[cut_at]:
        piece = eng.vocab.piece
        note += (
            f"; the cache was cut at token {cut_at}: it held {_shown(piece(held[cut_at]))} "
            f"(id {held[cut_at]}), the new prompt has {_shown(piece(tokens[cut_at]))} "
            f"(id {tokens[cut_at]}) there"
        )
    if was_cut:
        note += "; the previous reply was cut where it stood"
    tail = ". Space pauses." if s.mode == "autoplay" else ". → steps one token, space plays."
    lost = lost_cache_note(records[-1])
    s.note(note + tail + lost, "warn" if lost else "info")
    w.autosave()
