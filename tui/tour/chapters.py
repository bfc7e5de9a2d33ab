"""The tour's chapters as pages: text with the lab's numbers in it, and the guesses.

Pure logic: a page is built from one chapter's facts (:mod:`~tui.tour.lab`) and one
language's strings, which name the facts' fields themselves (``{f.prefill_ms:.1f}``). A
guess's right answer is found among its choices by the number the lab measured, so the tour
can only ever call right what llama.cpp did. :class:`Tour` is the walk:
where the learner is, what they answered and the score, is :mod:`~tui.tour.walk`.
"""

from __future__ import annotations

from collections.abc import Callable

from .lab import (
    BatchFacts,
    ExactFacts,
    Facts,
    LoopFacts,
    SamplerFacts,
    Skipped,
    TokenFacts,
)
from .lab_kv import FullFacts, InsideFacts, PrefixFacts, RamFacts, WallFacts
from .page import Guess, Page, Strings, choice

__all__ = ["Guess", "Page", "Strings", "pages_for"]

STAGES = ("tokenize", "batch", "decode", "logits", "sample", "detok", "feed")
CALLS = (
    "llama_tokenize",
    "llama_batch_get_one",
    "llama_decode",
    "llama_get_logits_ith(ctx, -1)",
    "llama_sampler_sample",
    "llama_vocab_is_eog + llama_token_to_piece",
    "llama_decode (1 token)",
)


def _pages(chapter: str, s: Strings, *pages: tuple[str, str] | Guess) -> list[Page]:
    """One chapter's pages under its title: a (body, pane) is a page on ``s["pane." + pane]``;
    a Guess is the guess page, on the pane of the page before it (or, first, after it)."""
    panes = [p[1] for p in pages if not isinstance(p, Guess)]
    out: list[Page] = []
    for p in pages:
        if isinstance(p, Guess):
            seen = sum(not isinstance(o, Guess) for o in out)
            pane = panes[seen - 1] if seen else panes[0]
            out.append(Page(chapter, s[f"{chapter}.title"], s["guess.title"], s[f"pane.{pane}"], p))
        else:
            out.append(Page(chapter, s[f"{chapter}.title"], p[0], s[f"pane.{p[1]}"]))
    return out


def _loop(f: LoopFacts, s: Strings) -> list[Page]:
    names = tuple(s[f"stage.{k}"] for k in STAGES)
    live = (
        s["loop.1"].format(
            n=len(f.ids), pieces=" | ".join(f.pieces), ids=", ".join(map(str, f.ids))
        ),
        s["loop.2"].format(n=len(f.ids), last=len(f.ids) - 1),
        s["loop.3"].format(cells=f.cells_before),
        s["loop.4"].format(n_vocab=f.n_vocab, top1=f.top1),
        s["loop.5"].format(id=f.picked, piece=f.picked_piece),
        s["loop.6"].format(eog=s["yes"] if f.eog else s["no"], piece=f.picked_piece),
        s["loop.7"].format(before=f.cells_before, after=f.cells_after),
    )
    panes = ("tokens", "batch", "timeline", "logits", "logits", "text", "kv")
    pages = []
    for i, text in enumerate(live):
        if i == 4:  # before the pick is shown: guess it
            g = Guess(
                s["loop.guess_next.q"].format(prompt=f.prompt),
                (),
                -1,
                typed=f.top1_piece.strip() or f.top1_piece,
                why=s["loop.guess_next.why"].format(piece=f.top1_piece, id=f.top1),
            )
            pages.append(
                Page("loop", s["loop.title"], s["guess.title"], s["pane.logits"], g, names, i)
            )
        if i == 6:
            g = choice(
                s,
                "loop.guess_cells",
                f.cells_after,
                [f.cells_before, 2 * f.cells_before, f.cells_before + len(f.ids)],
                before=f.cells_before,
            )
            pages.append(Page("loop", s["loop.title"], s["guess.title"], s["pane.kv"], g, names, i))
        body = f"{CALLS[i]}\n{text}"
        pages.append(Page("loop", s["loop.title"], body, s[f"pane.{panes[i]}"], None, names, i))
    intro = Page("loop", s["loop.title"], s["loop.intro"].format(prompt=f.prompt), "", None, names)
    return [intro, *pages]


def _tokens(f: TokenFacts, s: Strings) -> list[Page]:
    n = len(f.hanzi_ids)
    g = choice(
        s,
        "tokens.guess",
        n,
        [1, 2, 3, f.hanzi_utf8],
        hanzi=f.hanzi,
        utf8=f.hanzi_utf8,
        pieces=" | ".join(f.hanzi_pieces),
    )
    word = s["tokens.word"].format(
        word=f.word, n=len(f.word_pieces), pieces=" | ".join(f.word_pieces)
    )
    extra = f.chat_count - f.plain_count
    chat = s["tokens.chat"].format(f=f, extra=extra, pieces=" | ".join(f.chat_pieces))
    return _pages("tokens", s, (word, "tokens"), g, (chat, "tokens"))


def _batch(f: BatchFacts, s: Strings) -> list[Page]:
    g = choice(s, "batch.guess", f.prefill_calls, [1, f.n_prompt], n=f.n_prompt, b=f.n_batch)
    ratio = f.prefill_ms / f.decode_ms if f.decode_ms else 0.0
    body = s["batch.times"].format(f=f, ratio=ratio)
    return _pages("batch", s, (s["batch.intro"], "batch"), g, (body, "timeline"))


def _sampler(f: SamplerFacts, s: Strings) -> list[Page]:
    top = "\n".join(f"  {piece!r:<16} p = {p:.3f}" for piece, p in f.top)
    stages = "\n".join(f"  {st.name:<12} {st.param:<10} {st.n:>7,}" for st in f.stages)
    yes, no = s["yes"], s["no"]
    g = Guess(
        s["sampler.guess.q"].format(piece=f.second_piece, p=f.second_p, top_p=f.top_p),
        (yes, no),
        0 if f.second_kept else 1,
        why=s["sampler.guess.why"].format(kept=f.kept_at_top_p, top_p=f.top_p),
    )
    probs = s["sampler.probs"].format(n_vocab=f.n_vocab, top=top)
    chain = s["sampler.chain"].format(n_vocab=f.n_vocab, stages=stages)
    return _pages("sampler", s, (probs, "logits"), (chain, "logits"), g)


def _inside(f: InsideFacts, s: Strings) -> list[Page]:
    n = f.n_tokens
    g = choice(s, "inside.guess", f.allowed, [n, n * n, f.masked], n=n, masked=f.masked)
    rows = min(n, 8)
    tri = "\n".join(
        "  " + " ".join("■" if c <= r else "·" for c in range(rows)) for r in range(rows)
    )
    body = s["inside.attn"].format(f=f)
    graph = s["inside.graph"].format(n=n, tri=tri)
    return [*_pages("inside", s, (graph, "mask"), g, (body, "attention")), *_lens(f, s)]


def _lens(f: InsideFacts, s: Strings) -> list[Page]:
    """The logit lens on the same prefill: guess the first layer whose top 5 holds
    llama.cpp's top-1, among three of the first, middle, three-quarter and last layers."""
    t, lens = s["inside.title"], f.lens
    if lens is None:
        return [Page("inside", t, s["lens.skip"].format(detail=f.lens_skip), s["pane.lens"])]
    last = lens.n_layer - 1
    others = [
        v for v in (last, 0, lens.n_layer // 2, 3 * lens.n_layer // 4) if v != lens.top5_layer
    ]
    g = choice(
        s,
        "lens.guess",
        lens.top5_layer,
        others[:3],
        piece=lens.top1_piece,
        last=last,
        id=lens.top1,
        top5=lens.top5_layer,
        top1=s["lens.never"] if lens.top1_layer is None else lens.top1_layer,
    )
    if lens.rounding_bound is None:
        bound = s["lens.no_bound"]
    else:
        bound = s["lens.bound"].format(bound=lens.rounding_bound)
    body = s["lens.result"].format(last=last, d=lens.max_abs_diff, bound=bound, head=lens.head)
    if lens.head_load_ms is not None and lens.head_load_ms >= 1.0:  # under 1 ms: read before
        body += "\n" + s["lens.head_read"].format(ms=lens.head_load_ms)
    return _pages("inside", s, (s["lens.intro"].format(last=last), "lens"), g, (body, "lens"))


def _exact(f: ExactFacts, s: Strings) -> list[Page]:
    bands = (s["exact.zero"], s["exact.small"], s["exact.large"])
    band = 0 if f.replay_max == 0.0 else (1 if f.replay_max < 0.01 else 2)
    g = Guess(
        s["exact.guess.q"].format(n=f.n_tokens, calls=f.replay_calls),
        bands,
        band,
        why=s["exact.guess.why"].format(d=f.replay_max),
    )
    body = s["exact.batched"].format(f=f, agree=s["yes"] if f.top1_agree else s["no"])
    return _pages("exact", s, (s["exact.intro"], "cache"), g, (body, "cache"))


def _wall(f: WallFacts, s: Strings) -> list[Page]:
    n = f.n
    g = choice(s, "wall.guess", f.without_cache, [n, n * n], n=n, formula=f.formula)
    shown = [p for p in f.series if p[0] in (1, 2, 4, 8, n) or p[0] == n]
    table = "\n".join(f"  {c:>4} {w:>8,} {wo:>10,}" for c, w, wo in shown)
    body = s["wall.table"].format(
        n=n,
        table=table,
        w=f.with_cache,
        wo=f.without_cache,
        formula=f.formula,
        ratio=f.without_cache / f.with_cache if f.with_cache else 0.0,
    )
    return _pages("wall", s, (s["wall.intro"].format(n=n), "cache"), g, (body, "cache"))


def _ram(f: RamFacts, s: Strings) -> list[Page]:
    wrong = [f.mha_bytes_per_token, f.bytes_per_token // 2, f.n_layer * f.k_row]
    g = choice(s, "ram.guess", f.bytes_per_token, wrong, name=f.name)
    body = s["ram.formula"].format(f=f)
    checks = (
        "\n".join(
            s["ram.cache"].format(
                kind=c.kind,
                cells=c.cells,
                layers=c.layers,
                ours=c.ours_mib,
                logged=c.logged_mib,
                ok=s["yes"] if c.agrees else s["no"],
            )
            for c in f.caches
        )
        or s["ram.no_log"]
    )
    big = s["ram.big"].format(per=f.big_bytes_per_token, ctx=f.big_ctx, mib=f.big_total / (1 << 20))
    return _pages("ram", s, g, (f"{body}\n\n{checks}", "memory"), (big, "memory"))


def _full(f: FullFacts, s: Strings) -> list[Page]:
    g = choice(
        s,
        "full.guess",
        f.n_discard,
        [f.n_past, f.n_past - f.n_keep, 1],
        n=f.n_ctx,
        keep=f.n_keep,
        past=f.n_past,
    )
    body = s["full.shift"].format(f=f, gone="".join(f.forgotten))
    stop = s["full.stop"].format(n=f.n_ctx, at=f.stop_at, reason=f.stop_reason)
    return _pages("full", s, (stop, "kv"), g, (body, "cache"))


def _prefix(f: PrefixFacts, s: Strings) -> list[Page]:
    g = choice(s, "prefix.guess", f.computed, [f.second_tokens, 0], n=f.second_tokens)
    body = s["prefix.result"].format(f=f)
    return _pages("prefix", s, (s["prefix.intro"], "cache"), g, (body, "cache"))


BUILDERS: dict[type, Callable[..., list[Page]]] = {
    LoopFacts: _loop,
    TokenFacts: _tokens,
    BatchFacts: _batch,
    SamplerFacts: _sampler,
    InsideFacts: _inside,
    ExactFacts: _exact,
    WallFacts: _wall,
    RamFacts: _ram,
    FullFacts: _full,
    PrefixFacts: _prefix,
}


def pages_for(chapter: str, facts: Facts, s: Strings) -> list[Page]:
    if isinstance(facts, Skipped):
        body = s[f"skip.{facts.reason}"].format(detail=facts.detail)
        return [Page(chapter, s[f"{chapter}.title"], body)]
    return BUILDERS[type(facts)](facts, s)
