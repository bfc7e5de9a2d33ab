"""Building a :class:`~tui.worker.views.View`: one function per pane's group of fields.

Runs on the worker thread. What is costly to copy at 8k tokens is kept in :class:`Memo`
caches and reused while its key is unchanged; the append-mostly parts (pieces, KV cells) only
look up their new tail.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engine.model import secret
from ..engine.model.errors import TokenstepError
from ..engine.model.work import WorkSnapshot
from ..engine.observe.memory import memory_report
from ..engine.sampler.sampling import ChainResult, top_stats
from .caches import Memo
from .candidate_rows import moved_logits, with_survivors
from .chat import merge, messages_now, spans_now
from .paths import paths_view
from .remote_view import remote_view, where_it_runs
from .saving import n_records
from .surprise import SurpriseView, catch_up, surprise_view
from .views import (
    TOP_ROWS,
    BatchView,
    CacheView,
    CandidateRow,
    HeaderView,
    KVView,
    LogitsView,
    SeqView,
    TextView,
    TimelineView,
    View,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from .attention import AttentionView
    from .lens import LensView
    from .parts import ForkSession, WorkerParts

Cells = tuple[tuple[int, int, tuple[int, ...]], ...]  # (token, pos, seq_ids) per used cell
Candidates = tuple[tuple[CandidateRow, ...], ChainResult | None, float | None, int | None]
_NO_CANDIDATES: Candidates = ((), None, None, None)


class ViewBuilder:
    """The view caches of one worker and the per-pane builders that use them."""

    def __init__(
        self,
        w: WorkerParts,
        attention: Callable[[], AttentionView | None],
        lens: Callable[[], LensView | None],
    ) -> None:
        self.w = w
        self._attention, self._lens = attention, lens  # the two panes' controls build their own
        self.seq = 0
        self.pieces: Memo[tuple[int, ...], tuple[bytes, ...]] = Memo(
            lambda: tuple(w.engine.tokens), self._all_pieces, extend=self._more_pieces
        )
        self.kv_cells: Memo[tuple[Any, ...], Cells] = Memo(
            self._cells_key, self._all_cells, extend=self._more_cells
        )
        self.candidates: Memo[tuple[Any, ...], Candidates] = Memo(
            lambda: (
                len(w.engine.records),
                w.engine.n_past,
                w.picks,  # the preview must not outlive an RNG advance
                repr(w.engine.settings.to_dict()),
            ),
            self._candidates,
        )
        # The surprise values cost O(context) to copy: only when a step or a command changed them.
        self.surprise: Memo[tuple[Any, ...], SurpriseView] = Memo(
            lambda: (
                catch_up(w),  # first: the observer's replay may score prompt tokens
                len(w.engine.records),
                w.engine.n_past,
                w.commands,
                len(w.engine.surprise),
                w.engine.run.n,  # picks written again by a jump change no other key
            ),
            lambda: surprise_view(w, w.engine.tokens),
        )
        # The work counter's series cost O(steps) to copy; while a reply plays they are
        # copied at most twice a second (the chart lags by that much, its totals too).
        self.work: Memo[object, WorkSnapshot] = Memo(
            lambda: w.engine.work,
            lambda: w.engine.work.snapshot(),
            max_age=lambda: 0.5 if w.state.playing else 0.0,
        )

    def with_notice(self, last: View | None, text: str) -> View | None:
        """``last`` with ``text`` as its error notice (None without a view yet): what is shown
        when a view could not be built."""
        if last is None:
            return None
        self.seq += 1
        return replace(
            last, seq=self.seq, notice=secret.redact(text), notice_level="error", commands=self.w.commands
        )

    def build(self) -> View:
        self.seq += 1
        w, eng, s = self.w, self.w.engine, self.w.state
        return View(
            seq=self.seq,
            mode=s.mode,
            activity=s.activity,
            action=s.action,
            raw=w.raw,
            settings=eng.settings.copy(),
            notice=s.notice,
            notice_level=s.notice_level,
            stop_reason=eng.stop_reason,
            header=self.header(),
            text=self.text(self.pieces.get()),
            batch=self.batch(),
            kv=self.kv(),
            timeline=self.timeline(),
            logits=self.logits(),
            cache=self.cache(),
            attention=self._attention(),
            lens=self._lens(),
            paths=paths_view(w),
            commands=w.commands,
            capabilities=eng.capabilities,
            busy=s.busy,
        )

    # -- one sub-view per pane -------------------------------------------------------------------
    def header(self) -> HeaderView:
        w, eng, s = self.w, self.w.engine, self.w.state
        autosave = w.autosave_path
        return HeaderView(
            queued=s.queued,
            autosave_path=str(autosave) if autosave else None,
            last_saved=s.last_saved,
            n_records=n_records(w),
            flash_attn=eng.flash_attn_resolved,
            n_batch=eng.config.n_batch,
            n_ubatch=eng.config.n_ubatch,
            returned_text=s.returned_text,
            where=where_it_runs(eng),
            spec=w.spec.summary() if w.spec is not None else None,
            spec_short=w.spec.summary(short=True) if w.spec is not None else None,
            n_past=eng.run.n_past(),
        )

    def text(self, pieces: tuple[bytes, ...]) -> TextView:
        """The conversation and tokens panes (and the forked sequences)."""
        w, eng, s = self.w, self.w.engine, self.w.state
        return TextView(
            tokens=tuple(eng.tokens),
            pieces=pieces,
            spans=tuple(merge(spans_now(w))),
            reply_start=s.reply_start,
            n_ctx=eng.n_ctx,
            n_vocab=eng.info.n_vocab,
            messages=tuple(messages_now(w, pieces)),
            last_pick=s.last_pick,
            tokenized=s.tokenized,
            fork_at=s.fork_at,
            seqs=self.seq_views(),
            surprise=self.surprise.get(),
            spec=w.spec.marks if w.spec is not None and w.spec.pending is not None else None,
        )

    def batch(self) -> BatchView:
        """The pipeline and batch panes: the stages lit, the calls of the last command."""
        s, piece = self.w.state, self.w.engine.vocab.piece
        return BatchView(
            lit=s.lit,
            last_records=s.last_records,
            batch_pieces=tuple(tuple(piece(t.id) for t in r.call.tokens) for r in s.last_records),
            new_cells=s.new_cells,
            cut_cells=s.cut_cells,
        )

    def kv(self) -> KVView:
        eng = self.w.engine
        local = eng.capabilities.kv_cells  # a remote backend has no KV mirror to copy
        return KVView(
            kv_cells=self.kv_cells.get() if local else (),
            kv_bytes=eng.kv_bytes_used,
            kv_bytes_per_token=eng.layout.bytes_per_token,
            kv_bytes_allocated=eng.kv_bytes_allocated,
            kv_report=eng.kv_reports[0] if local and eng.kv_reports else None,
            kv_problems=tuple(eng.records[-1].kv_problems) if local and eng.records else (),
        )

    def timeline(self) -> TimelineView:
        calls, totals, older = self.w.engine.run.timeline()  # a function of the run's record
        return TimelineView(calls=calls, totals=totals, older=older)

    def logits(self) -> LogitsView:
        """The logits pane: the top candidates and what the sampler chain does to them."""
        rows, chain, entropy, next_pick = (
            _NO_CANDIDATES if self.w.engine.logits is None else self.candidates.get()
        )
        shown = spec_row_candidates(self.w)  # --spec-type: a row of the last verify batch
        spec_title = None
        if shown is not None:
            rows, chain, entropy, next_pick, spec_title = shown
        return LogitsView(
            candidates=rows,
            chain=chain,
            entropy=entropy,
            # Mid-decode (a key on the lane) the shown row already gave the token in flight:
            # the next step samples the row being computed, so no pick is promised from this one.
            next_pick=None if self.w.lane.in_decode else next_pick,
            remote=remote_view(self.w.engine),
            chain_cursor=self.w.desk.cursor,
            next_piece=None if next_pick is None else self.w.engine.vocab.piece(next_pick),
            spec_row=spec_title,
        )

    def cache(self) -> CacheView:
        """The cache tabs: memory, work, verify, prefix reuse per turn, context shifts."""
        eng, s = self.w.engine, self.w.state
        local = eng.local
        shifts = eng.shifts[s.shifts_from :]
        return CacheView(
            memory=memory_report(local) if local is not None and eng.capabilities.kv_cells else None,
            work=self.work.get(),
            verify=s.verify,
            turns=eng.run.turns(),
            shifts=tuple(shifts),
            shift_pieces=tuple(
                tuple(eng.vocab.piece(f.token) for f in ev.forgotten) for ev in shifts
            ),
            context_full=eng.config.context_full,
            n_keep=eng.keep_count(),
            verify_pieces=None
            if s.verify is None
            else (eng.vocab.piece(s.verify.top1_cached), eng.vocab.piece(s.verify.top1_fresh)),
        )

    def seq_views(self) -> tuple[SeqView, ...]:
        s = self.w.state
        eng: ForkSession | None = self.w.engine.local
        if s.fork_at is None or eng is None:  # only a local session forks
            return ()
        out = []
        for seq in eng.seq_ids:
            toks = s.fork_tokens.get(seq, [])
            stop = eng.stop_reason if seq == 0 else eng.branches[seq].stop_reason
            pieces = tuple(eng.vocab.piece(t) for t in toks)
            out.append(SeqView(seq, pieces, eng.kv.count(seq), stop))
        return tuple(out)

    # -- cache builders ----------------------------------------------------------------------------
    def _all_pieces(self) -> tuple[bytes, ...]:
        return tuple(map(self.w.engine.vocab.piece, self.w.engine.tokens))

    def _more_pieces(
        self, old: tuple[int, ...], pieces: tuple[bytes, ...], tokens: tuple[int, ...]
    ) -> tuple[bytes, ...] | None:
        """Between two views the context usually grew or shrank at the end, so only the new
        tail is looked up (a view at 8k tokens stays cheap)."""
        n = min(len(old), len(tokens))
        if tokens[:n] != old[:n]:  # a shift or a new chat: look everything up again
            return None
        return pieces[:n] + tuple(map(self.w.engine.vocab.piece, tokens[n:]))

    def _cells_key(self) -> tuple[Any, ...]:
        kv = self.w.engine.kv
        return (id(kv.cells), kv.n_shifts, tuple(kv.seq_ids()), len(kv.cells))

    def _all_cells(self) -> Cells:
        return tuple((c.token, c.pos, tuple(sorted(c.seqs))) for c in self.w.engine.kv.cells)

    def _more_cells(
        self, old_key: tuple[Any, ...], out: Cells, key: tuple[Any, ...]
    ) -> Cells | None:
        """The mirror appends cells for decodes and replaces its list for removals; it edits
        cells in place only for a fork or a shift, which change ``seq_ids`` or ``n_shifts``.
        So an unchanged key (its length aside) means: extend."""
        cells = self.w.engine.kv.cells
        if old_key[:3] != key[:3] or len(out) > len(cells):
            return None
        return out + tuple((c.token, c.pos, tuple(sorted(c.seqs))) for c in cells[len(out) :])

    def _candidates(self) -> Candidates:
        eng = self.w.engine
        logits = eng.logits
        assert logits is not None
        ended = self.w.desk.ended
        try:
            if ended is not None and ended[:2] == (
                eng.logits_record,
                repr(eng.settings.to_dict()),
            ):
                chain = ended[2]  # the row an end token was sampled from: that pick's chain
            else:
                chain = eng.preview()
        except TokenstepError as exc:  # a grammar that cannot go on: say so, show the rest
            self.w.state.note(str(exc)[:1].upper() + str(exc)[1:], "error")
            chain = eng.preview(replace(eng.settings, grammar=""))
        # Over llama-server only the top K are real candidates (the rest of the row stands in).
        n_rows = TOP_ROWS if eng.capabilities.full_vocab else min(TOP_ROWS, _n_top(eng))
        top, p_top, entropy = top_stats(logits, n_rows)  # one exp pass, no full softmax
        ids, p_rows = top.tolist(), p_top.tolist()
        if eng.capabilities.full_vocab:  # the ★ always on a row, with the chain's best
            ids, p_rows = with_survivors(logits, chain, ids, p_rows)
        seen = _seen_by_top_p(chain.handed_on(logits), chain, ids)
        rows = tuple(
            CandidateRow(t, eng.vocab.piece(t), float(logits[t]), pt, pf, cut, ps, mv)
            for t, pt, pf, cut, ps, mv in zip(
                ids,
                p_rows,
                chain.p_final_many(ids),
                chain.cut_by_many(ids),
                seen,
                moved_logits(logits, chain, ids),
                strict=True,
            )
        )
        return rows, chain, entropy, chain.selected


def spec_row_candidates(w: Any) -> tuple[Any, ...] | None:
    """The verify row the logits pane was moved to (< >): its top candidates as the verify
    decode left them, and the chain's cuts where the target sampled it."""
    run = w.spec
    if run is None or run.row is None or run.record is None or run.record.spec is None:
        return None
    row = run.record.spec.rows[run.row]
    ids = [c.id for c in row.top]
    chain = row.chain
    # A row after the first mismatch was never sampled: no p′ (drawn "–", as elsewhere).
    p_final = chain.p_final_many(ids) if chain is not None else [0.0] * len(ids)
    cut = chain.cut_by_many(ids) if chain is not None else ["never sampled"] * len(ids)
    rows = tuple(
        CandidateRow(c.id, c.piece, c.logit, c.p, pf, cb)
        for c, pf, cb in zip(row.top, p_final, cut, strict=True)
    )
    n = len(run.record.spec.rows)
    title = f"logits → sampler · verify row {run.row + 1} of {n}"  # 1-based, as "of n"
    return rows, chain, row.entropy, row.pick, title


def _n_top(eng: Any) -> int:
    """How many candidates the server sent for the current row."""
    rv = remote_view(eng)
    return rv.n_top if rv is not None else TOP_ROWS


def _seen_by_top_p(logits: Any, chain: Any, ids: list[int]) -> list[float | None]:
    """Each candidate's probability in the distribution the top-p stage sorted and summed:
    llama.cpp's top-p takes the softmax of what the stages before it left (top-k's survivors),
    on the logits penalties, DRY and logit bias handed on."""
    import numpy as np

    names = [st.name for st in chain.stages]
    if "top-p" not in names:
        return [None] * len(ids)
    i = names.index("top-p")
    x = np.asarray(logits, dtype=np.float64)
    pool = chain.stages[i - 1].survivors if i else np.arange(x.size)
    top = x[pool].max()
    z = float(np.exp(x[pool] - top).sum())
    inside = np.isin(np.asarray(ids), pool)
    return [float(np.exp(x[t] - top) / z) if ok else None for t, ok in zip(ids, inside, strict=True)]
