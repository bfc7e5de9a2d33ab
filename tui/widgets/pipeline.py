"""The pipeline pane (top): the seven stages of the loop, the ones the last command ran lit, each
with the one fact it produced. ``e`` adds a short explanation of a stage and the llama.cpp call
behind it (click a stage to pick which one)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size

from ..worker.stages import STAGES
from ..worker.views import View
from .common import Pane, fmt_bytes, fmt_ms, fmt_p, fmt_rate, piece_text

# Our own words; each names the llama.cpp call that does the work.
EXPLAIN = (
    (
        "llama_tokenize",
        "Text becomes integer ids from the model's vocabulary. Pieces are subwords, so a word "
        "may be one token or several, and token counts differ from character counts.",
    ),
    (
        "llama_batch_init",
        "The ids go into a llama_batch: each token with its position (pos), the sequence it "
        "belongs to (seq_id) and a flag for whether its logits are wanted. Only a prompt's "
        "last token needs logits; long prompts are cut into n_batch calls and n_ubatch chunks.",
    ),
    (
        "llama_decode",
        "One forward pass: llama.cpp builds the compute graph for the batch and runs it. Each "
        "token's K and V vectors are written into the KV cache. A prefill does many tokens in "
        "parallel; a decode step does exactly one.",
    ),
    (
        "llama_get_logits_ith",
        "The pass ends in one raw score per vocabulary entry for the next position. Scores "
        "are not probabilities until softmax, and nothing has been chosen yet.",
    ),
    (
        "llama_sampler_sample",
        "The sampler chain trims and reshapes the distribution (top-k, top-p, min-p, "
        "temperature), then a seeded RNG draws one token (dist). Greedy just takes the "
        "highest score.",
    ),
    (
        "llama_vocab_is_eog · llama_token_to_piece",
        "An end-of-generation token stops the reply. Any other token becomes its piece of "
        "bytes; a piece can be half of a UTF-8 character, so text is joined from the bytes.",
    ),
    (
        "llama_decode (1 token) · KV cache",
        "The new token goes back in as a one-token batch at the next position. Earlier "
        "tokens' K/V are already cached, so each step computes only one token.",
    ),
)

LIT = Style(color="black", bgcolor="bright_yellow", bold=True)
RAN = Style(color="bright_yellow", bold=True)
IDLE = Style(color="grey50")


class PipelinePane(Pane):
    DEFAULT_CSS = """
    PipelinePane { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.explain = False
        self.explain_stage: int | None = None  # None: follow the last stage that ran

    def facts(self, v: View) -> list[str]:
        """One line per stage, from what the last commands produced."""
        out = [""] * 7
        if not v.text.tokens:
            out[0] = "waiting for your message (type it below and press Enter)"
        tz = v.text.tokenized
        if tz is not None:
            out[0] = f"{tz.chars} chars → {_plural(tz.text_tokens, 'token')}" + (
                "" if v.raw else f" ({tz.prompt_tokens} with the chat template)"
            )
        recs = v.batch.last_records
        if recs:
            n = sum(r.call.n_tokens for r in recs)
            ms = sum(r.decode_ms for r in recs)
            last = recs[-1]
            if n == 1:
                t = last.call.tokens[0]
                out[1] = (
                    f"1 token · id {t.id} · pos {t.pos} · seq {','.join(map(str, t.seq_ids))} · logits on"
                )
                out[2] = f"1 token in {fmt_ms(self, ms)}"
            else:
                ub = sum(len(r.call.ubatches) for r in recs)
                # Read from the batch itself: a prefill asks for logits on its last token
                # only, a step after a fork on one row per sequence.
                toks = [t for r in recs for t in r.call.tokens]
                rows = sum(1 for t in toks if t.logits)
                seqs = sorted({q for t in toks for q in t.seq_ids})
                where = (
                    "logits on the last"
                    if rows == 1 and toks[-1].logits
                    else f"logits on {_plural(rows, 'row')}"
                )
                lo, hi = min(t.pos for t in toks), max(t.pos for t in toks)
                # After a fork every sequence's token sits at the same position.
                at = f"pos {lo}–{hi}" if hi > lo else f"pos {lo} in each sequence"
                out[1] = (
                    f"{n} tokens · {at}"
                    + (f" · seqs {','.join(map(str, seqs))}" if len(seqs) > 1 else "")
                    + f" · {_plural(len(recs), 'call')}, "
                    + f"{_plural(ub, 'ubatch').replace('chs', 'ches')} · {where}"
                )
                out[2] = f"{n} tokens in {fmt_ms(self, ms)} ({fmt_rate(self, n, ms)})"
                if last.reused:
                    out[2] += f" · {last.reused} reused"
            out[3] = f"{v.text.n_vocab:,} scores"
            if v.logits.candidates and v.logits.entropy is not None:
                top = v.logits.candidates[0]
                out[3] += f" · top {_plain(top.piece)} {top.logit:.2f} · H {v.logits.entropy:.2f} bits"
            added = v.batch.new_cells[1] - v.batch.new_cells[0]
            shift = v.batch.last_records[-1].shift if v.batch.last_records else None
            if shift is not None:  # the cache first dropped tokens, then took the new ones
                out[6] = (
                    f"context shift: forgot {shift.n_discard}, kept the first {shift.n_keep}; "
                    f"KV {v.kv.kv_used}/{v.text.n_ctx} cells · {fmt_bytes(v.kv.kv_bytes)}"
                )
            else:
                out[6] = (
                    f"KV {v.kv.kv_used}/{v.text.n_ctx} cells (+{added}) · {fmt_bytes(v.kv.kv_bytes)}"
                    " · earlier tokens not recomputed"
                )
        if v.action == "rewind":
            out[6] = (
                f"rewound: KV {v.kv.kv_used}/{v.text.n_ctx} cells (−1) · {fmt_bytes(v.kv.kv_bytes)}"
                " · llama_memory_seq_rm, nothing recomputed"
            )
            if v.logits.candidates and v.logits.entropy is not None:
                top = v.logits.candidates[0]
                out[3] = (
                    f"{v.text.n_vocab:,} scores kept from before · top {_plain(top.piece)} "
                    f"{top.logit:.2f} · H {v.logits.entropy:.2f} bits"
                )
        pk = v.text.last_pick
        if pk is not None:
            how = (
                "forced"
                if pk.forced
                else "greedy"
                if pk.greedy
                else f"mirostat{' v2' if pk.mirostat == 2 else ''} seed {pk.seed}"
                if pk.mirostat
                else f"dist seed {pk.seed}"
            )
            out[4] = (
                f"{_plain(pk.piece)} id {pk.id} · p {fmt_p(pk.p)} → p' {fmt_p(pk.p_final)} · {how}"
            )
            out[5] = (
                "end-of-generation token: the reply stops"
                if pk.eog
                else f"not an end token → {_plain(pk.piece)} ({_n_bytes(len(pk.piece))})"
            )
        # One step runs 5, 6, 7, then 2, 3, 4: the pick (5) came from the logits before, and
        # the new logits (4) are what the next step samples. Each row says which it is.
        if pk is not None and v.action in ("step", "force") and out[3]:
            if pk.eog:  # an end token is not fed: the pick came from the logits still shown
                out[3] = f"for pos {v.text.n_past}, sampled this step · " + out[3]
                out[4] = f"this step, pos {v.text.n_past} · " + out[4]
            else:
                out[3] = f"for pos {v.text.n_past}, the next step · " + out[3]
                out[4] = f"this step, pos {v.text.n_past - 1} · " + out[4]
        if v.action == "settings" and v.logits.next_pick is not None and v.logits.chain is not None:
            nxt = next((c for c in v.logits.candidates if c.id == v.logits.next_pick), None)
            ch = v.logits.chain
            chain = " → ".join(
                f"{st.name} {n:,}" for st, n in zip(ch.stages, ch.shown_counts(), strict=True)
            )
            piece = v.logits.next_piece
            if piece is None and nxt is not None:
                piece = nxt.piece
            out[4] = (
                f"preview, same logits, no decode: {chain}; next pick "
                f"{_plain(piece) if piece is not None else v.logits.next_pick}"
                + (f" p' {fmt_p(nxt.p_final)}" if nxt else "")
            )
        if v.logits.remote is not None and v.text.tokens:
            _over_http(v, out)
        return out

    def render(self) -> RenderableType:
        v = self.view
        t = Text(no_wrap=True, overflow="ellipsis")
        if v is None:
            return t
        facts = self.facts(v)
        last = v.batch.lit[-1] if v.batch.lit else None
        if self.has_class("-compact") and not self.explain:
            return self._compact(v, facts, last)
        for i, name in enumerate(STAGES):
            ran = i in v.batch.lit
            mark = "▶" if i == last else ("●" if ran else "○")
            style = LIT if i == last else (RAN if ran else IDLE)
            t.append(f"{mark} {i + 1} {name:<14}", style + Style(meta={"stage": i}))
            t.append(" ")
            t.append(facts[i] or "—", Style() if ran else Style(color="grey62"))
            t.append("\n")
        t.rstrip()
        if self.explain:
            return Group(t, self._explanation(last))
        return t

    def _explanation(self, last: int | None) -> Text:
        stage = self.explain_stage if self.explain_stage is not None else (last or 0)
        call, body = EXPLAIN[stage]
        t = Text()
        t.append(f"{stage + 1} {STAGES[stage]} · ", RAN)
        t.append(call, Style(color="bright_cyan"))
        t.append(" — ")
        t.append(body, Style(color="grey85"))
        return t

    def _compact(self, v: View, facts: list[str], last: int | None) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        short = ("tok", "batch", "decode", "logits", "sample", "detok", "feed")
        for i, name in enumerate(short):
            style = LIT if i == last else (RAN if i in v.batch.lit else IDLE)
            t.append(f" {name} ", style + Style(meta={"stage": i}))
            if i < 6:
                t.append("›", IDLE)
        if last is not None:
            t.append(f"\n{STAGES[last]}: {facts[last]}")
        return t

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.has_class("-compact") and not self.explain:
            return 2
        extra = 0
        if self.explain:
            last = self.view.batch.lit[-1] if self.view and self.view.batch.lit else None
            lines = self._explanation(last).wrap(self.app.console, max(width, 10))
            extra = len(lines)
        return 7 + extra

    def on_click(self, event: events.Click) -> None:
        stage = event.style.meta.get("stage") if event.style else None
        if stage is not None:
            self.explain = True
            self.explain_stage = int(stage)
            self.refresh(layout=True)

    def toggle_explain(self) -> None:
        self.explain = not self.explain
        self.explain_stage = None
        self.refresh(layout=True)


def _plural(n: int, word: str) -> str:
    return f"1 {word}" if n == 1 else f"{n:,} {word}s"


def _n_bytes(n: int) -> str:
    return _plural(n, "byte")


def _plain(piece: bytes) -> str:
    return f"'{piece_text(piece).plain}'"


def _over_http(v: View, out: list[str]) -> None:
    """Over llama-server: decode, logits and feed back happen on the server; say what crossed
    HTTP (never cells or raw logits, which only a local context has), what a rewind kept (the
    top K, not n_vocab scores) and what a failed request did not send."""
    rv = v.logits.remote
    assert rv is not None
    known = f"{rv.top_of} as logprobs"
    if v.logits.candidates and v.logits.entropy is not None:
        top = v.logits.candidates[0]
        known += f" · top {_plain(top.piece)} {top.logit:.2f} · H ≤ {v.logits.entropy:.2f} bits"
    if rv.unsent is not None:  # the last request failed: nothing of it reached the server
        shown = f"{_plain(rv.unsent_piece)} (id {rv.unsent})"
        out[1] = f"not sent: {shown} waits for the server; → sends it again"
        out[2] = "on the server: no answer to the last request; nothing changed here"
        out[3] = known + " · from before"
        out[6] = (
            f"not fed back: → sends {v.text.n_past + 1} token ids, the {v.text.n_past} kept "
            f"and {shown}"
        )
        return
    if v.action == "rewind":
        out[3] = known.replace(" as logprobs", " kept from before (logprobs)")
        then = "and its pick" if v.logits.candidates else "to ask for their logprobs again"
        out[6] = (
            f"rewound: nothing sent; → sends the {v.text.n_past} kept ids {then} "
            f"(the slot held {rv.slot_cached})"
        )
        return
    if not v.batch.last_records:
        return
    lost = " (lost)" if rv.cache_lost else ""  # it re-evaluated tokens it held before
    out[2] = (
        f"on the server: {rv.evaluated} evaluated, {rv.cached} from its cache{lost} · "
        f"server {rv.server_ms:.1f} ms, round trip {rv.round_trip_ms:.1f} ms"
        if rv.server_timed
        else f"on the server: no timings or cache counts reported · round trip "
        f"{rv.round_trip_ms:.1f} ms (all of it)"
    )
    out[3] = known
    out[6] = (
        f"fed back: the request sent the text of all {rv.sent} tokens; the server tokenizes it"
        if rv.as_text
        else f"fed back: the request sent all {rv.sent} token ids; the server caches them"
    )
