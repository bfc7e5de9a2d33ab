"""Speculative decoding: draft a few tokens cheaply, verify them all in ONE ``llama_decode``.

From the target's last pick (sampled, not fed) a drafter (:mod:`tui.engine.speculative.spec_ngram`,
:mod:`tui.engine.speculative.spec_draft`) proposes up to ``k`` tokens; the verify batch is the pick
plus the draft, every row asking for logits, row ``i`` being what a one-token decode would
give. The target's whole chain samples row 0, 1, ... with each row's context as history; the
draft is accepted while the pick equals it, the first pick that differs replaces it, and all
``k`` accepted give one more: 1 to ``k + 1`` tokens a round, every one the target's own pick.
The rejected tail leaves both caches with ``llama_memory_seq_rm``. As llama-server
(``common_sampler_sample_and_accept_n``): the draft is capped by ``n_ctx - n_past - 2`` and
``n_predict - n_generated - 1``, an end-of-generation pick ends the round, and ``draft_n`` /
``draft_n_accepted`` count. It pays because decoding is bound by reading the weights: k + 1
tokens cost little more than one (``benchmarks/bench_spec.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..record.run_record import Round
from ..run.batch import BatchToken, DecodeCall, ubatch_chunks
from ..run.decode import decode
from ..run.logits import read_row
from ..run.paths import make_room
from ..run.prompt import truncate
from ..run.sequences import sample_row
from ..run.step import SpecInfo
from .spec_ngram import NgramSimple

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from ..run.backend import LocalSession
    from ..run.step import StepRecord


class Drafter(Protocol):
    """A draft source: ``draft`` proposes up to ``room`` tokens after the context and the pick
    not yet fed; ``draft_ms``/``draft_decodes`` are what the last draft cost in llama_decode
    calls of its own (0 for ngram-simple); ``source`` the context index an ngram draft was
    copied from (None: a model drafted it); ``keep`` follows a cut of the target's context and
    returns the cells it removed from the drafter's own cache."""

    name: str
    draft_ms: float
    draft_decodes: int
    source: int | None

    def draft(self, tokens: Sequence[int], sampled: int, room: int) -> list[int]: ...

    def keep(self, n_keep: int) -> int: ...

    def close(self) -> None: ...


@dataclass
class NgramDrafter:
    """ngram-simple behind the drafter protocol (its draft is capped by the room left)."""

    ngram: NgramSimple
    name: str = "ngram-simple"
    draft_ms: float = 0.0
    draft_decodes: int = 0
    source: int | None = None

    def draft(self, tokens: Sequence[int], sampled: int, room: int) -> list[int]:
        self.source = self.ngram.source(tokens, sampled)
        out = self.ngram.draft(tokens, sampled)
        return list(out[:room]) if room > 0 else list(out)

    def keep(self, n_keep: int) -> int:
        """Nothing to cut: the context itself is the n-gram table."""
        return 0

    def close(self) -> None:
        """Nothing to free."""


@dataclass
class SpecStats:
    """What this run's rounds add up to (llama-server's ``timings.draft_n`` and
    ``timings.draft_n_accepted``, and the decode time against the tokens it emitted)."""

    rounds: int = 0  # verify decodes (rounds with a draft)
    plain: int = 0  # one-token decodes (rounds without a draft)
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0  # tokens the rounds emitted
    verify_ms: float = 0.0
    plain_ms: float = 0.0
    draft_ms: float = 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_decode(self) -> float | None:
        n = self.rounds + self.plain
        return self.emitted / n if n else None

    def to_dict(self) -> dict[str, object]:
        return {
            "draft_n": self.drafted,
            "draft_n_accepted": self.accepted,
            "rounds": self.rounds,
            "plain_decodes": self.plain,
            "emitted": self.emitted,
            "verify_ms": round(self.verify_ms, 3),
            "plain_ms": round(self.plain_ms, 3),
            "draft_ms": round(self.draft_ms, 3),
        }


@dataclass
class Speculator:
    """A drafter, and the rounds it has run."""

    drafter: Drafter
    stats: SpecStats = field(default_factory=SpecStats)

    @property
    def name(self) -> str:
        return self.drafter.name

    def room(self, engine: LocalSession, n_remaining: int) -> int:
        """The longest draft this round may verify (llama-server's ``get_n_draft_max``,
        and what the batch and the cells hold)."""
        room = engine.n_ctx - engine.n_past - 2
        if n_remaining > 0:
            room = min(room, n_remaining - 1)
        room = min(room, engine.batch.capacity - 1, engine.n_cells - engine.kv.used - 1)
        return max(room, 0) if not engine.branches else 0

    def round(self, engine: LocalSession, last: int, n_remaining: int = -1) -> StepRecord | None:
        """One round after ``last`` (the pick not yet fed); ``n_remaining`` tokens may still
        be generated (-1: no limit). Returns the decode's record (its ``spec`` says what the
        round did; the record's ``sampled`` is the new pick not yet fed), or None when the
        context is full."""
        room = self.room(engine, n_remaining)
        draft: list[int] = []
        drafter = self.drafter
        ran = room > 0  # the drafter ran (a draft model decodes even when it drafts nothing)
        if ran:
            draft = drafter.draft(engine.tokens, last, room)[:room]
            n_vocab = engine.info.n_vocab
            bad = next((i for i, t in enumerate(draft) if not 0 <= t < n_vocab), None)
            draft = draft[:bad] if bad is not None else draft  # a larger draft vocabulary
        draft_ms = drafter.draft_ms if ran else 0.0
        draft_decodes = drafter.draft_decodes if ran else 0
        st = self.stats
        st.draft_ms += draft_ms
        if not draft:  # nothing to verify: a plain one-token decode, sampled as usual
            rec = engine.feed(last)
            if rec is None:
                return None
            sampled = engine.sample()
            rec.spec = SpecInfo(self.name, [], 0, [sampled.token])
            rec.spec.draft_ms, rec.spec.draft_decodes = draft_ms, draft_decodes
            rec.spec.why_none = (getattr(drafter, "cannot", None) or "") if ran else ""
            st.plain += 1
            st.plain_ms += rec.decode_ms
            st.emitted += 1
            rec.spec.draft_removed = self._keep(engine)
            engine.run.note(Round(rec.index, False, 1, draft_decodes, draft_ms))
            return rec
        rec = self._verify(engine, last, draft)
        spec = rec.spec
        assert spec is not None
        spec.type, spec.draft = self.name, list(draft)
        spec.draft_ms, spec.draft_decodes = draft_ms, draft_decodes
        spec.source = drafter.source
        st.rounds += 1
        st.drafted += len(draft)
        st.accepted += spec.accepted
        st.emitted += len(spec.picks)
        st.verify_ms += rec.decode_ms
        engine.run.note(Round(rec.index, True, len(spec.picks), draft_decodes, draft_ms))
        return rec

    def _verify(self, engine: LocalSession, last: int, draft: list[int]) -> StepRecord:
        """The verify decode, the picks row by row, and the cut of the rejected tail."""
        make_room(engine, len(draft) + 1)
        n0 = engine.n_past
        pos = engine.kv.last_pos(0) + 1
        batch = [last, *draft]
        call = DecodeCall(
            [BatchToken(t, pos + i, (0,), True) for i, t in enumerate(batch)],
            ubatch_chunks(len(batch), engine.config.n_ubatch),
        )
        rec = decode(engine, call, phase="verify", all_rows=True)
        spec = rec.spec
        assert spec is not None
        context = engine.tokens
        picks: list[int] = []
        accepted = 0
        for i in range(len(batch)):
            logits = read_row(engine.ctx, i, engine.info.n_vocab)
            row = spec.rows[i]
            rec.top, rec.entropy = row.top, row.entropy  # the p of the pick is this row's
            got = sample_row(engine, 0, logits, rec.index, context[: n0 + 1 + i])
            picks.append(got.token)
            row.pick, row.chain = got.token, got.chain
            if i == len(draft):
                break  # every drafted token was accepted: this is the one more
            if got.token != draft[i]:
                break
            if got.eog:  # llama.cpp: no draft token after an end of generation
                accepted += i + 1 == len(draft)  # it counts a trailing one as accepted
                break
            accepted += 1
        spec.picks, spec.accepted = picks, accepted
        n_keep = n0 + len(picks)
        last_row = len(picks) - 1
        rec.top, rec.entropy = spec.rows[last_row].top, spec.rows[last_row].entropy
        rec.chain = spec.rows[last_row].chain
        rec.sampled = picks[-1]
        spec.removed = engine.n_past - n_keep
        # The rejected tail leaves the cache (llama_memory_seq_rm); the last pick, at index
        # n_keep, waits to be decoded and keeps its place in the record.
        truncate(engine, n_keep, picks_from=n_keep + 1)
        engine.logits_memory.set(logits, rec.index, n_keep)
        rec.n_ctx_tokens, rec.kv_used = engine.n_past, engine.kv.used
        rec.kv_bytes = engine.kv_bytes_used
        spec.draft_removed = self._keep(engine)
        return rec

    def _keep(self, engine: LocalSession) -> int:
        """The draft context drops what the target dropped; the cells it removed."""
        return self.drafter.keep(engine.n_past)

    def close(self) -> None:
        self.drafter.close()


def generate(
    engine: LocalSession,
    spec: Speculator,
    n_predict: int,
    prompt: list[int] | None = None,
) -> Iterator[StepRecord]:
    """:func:`tui.engine.run.loop.generate` with speculation: prefill, the first pick as usual,
    then one round per record until ``n_predict`` tokens are emitted (the last pick is not
    fed). Each record is yielded once its picks are known."""
    pending = engine.prefill(prompt) if prompt is not None else []
    if n_predict <= 0:
        yield from pending
        return
    first = engine.sample()
    yield from pending
    n, last, stop = 1, first.token, first.eog
    while n < n_predict and not stop:
        rec = spec.round(engine, last, n_predict - n)
        if rec is None:
            break
        assert rec.spec is not None
        picks = rec.spec.picks
        n += len(picks)
        last, stop = picks[-1], engine.vocab.is_eog(picks[-1])
        yield rec
