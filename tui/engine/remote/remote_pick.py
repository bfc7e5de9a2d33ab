"""The pick over a server: what the next pick reads (the context the server's slot should
hold, the last answer's row) and stages 5 and 6 on it, tokenstep's chain on the server's top K
or the server's own pick (:class:`~tui.engine.remote.remote.RemoteBackend` is the rest).

The row is the top K the server sent, the rest of the vocabulary filled evenly
(``fill_row``): the chain runs on it as on a local row, with the context as history for the
penalties and DRY and the turn's tokens for the grammar. A pick whose request failed is kept
(``unsent_pick``) and sent again, so a fault never advances the seeded RNG twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model.errors import TokenstepError
from ..model.kvcache import KVMirror
from ..run.logits import LogitsMemory
from ..run.records import RecordLog
from ..run.step import Sampled, StepRecord
from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings
from ..wire.remote_step import chain_exactness, top_probs
from .remote_chain import NoLocalContext, pick_exactness, server_pick

if TYPE_CHECKING:
    from ..model.model import ModelInfo


class RemotePick(NoLocalContext):
    """The state a pick reads and the pick itself, for a backend over a server. The backend
    sets the fields below and asks again for the last row (:meth:`ensure_logits`)."""

    settings: SamplerSettings
    pick: str
    chain: SamplerChain | None
    check_chain: bool
    info: ModelInfo
    vocab: Any
    kv: KVMirror
    records: RecordLog
    logits_memory: LogitsMemory
    gen_start: int
    stop_reason: str | None
    _pending: tuple[int, int | None, int] | None  # a pick whose feed failed

    def ensure_logits(self) -> None:
        raise NotImplementedError

    def _again(self) -> StepRecord:
        raise NotImplementedError

    # -- state -----------------------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        return self.kv.tokens(0)

    @property
    def logits(self) -> Any:
        return self.logits_memory.logits

    @property
    def logits_record(self) -> int | None:
        return self.logits_memory.record

    @property
    def unsent_pick(self) -> int | None:
        """The token picked at this position whose request failed (the next step sends it
        again, so the seeded RNG does not advance twice); None when nothing is waiting."""
        pending = self._pending
        if pending is None or pending[:2] != (self.n_past, self.logits_record):
            return None
        return pending[2]

    def exactness(self, settings: SamplerSettings | None = None) -> str | None:
        """Why tokenstep's pick on the current top K may differ from the full vocabulary."""
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if rec is None or not rec.top:
            return None
        probs = top_probs(rec.server)
        return chain_exactness(settings or self.settings, probs, self.info.n_vocab)

    @property
    def generated(self) -> list[int]:
        """The tokens generated (or forced) in this turn: what the grammar has accepted."""
        toks = self.tokens
        return toks[min(self.gen_start, len(toks)) :]

    def _run(self, settings: SamplerSettings, *, commit: bool) -> ChainResult:
        """The chain on the filled top-K row, with the history penalties and DRY see and the
        turn's tokens the grammar has accepted, as the local engine runs it."""
        assert self.chain is not None and self.logits is not None
        return self.chain.run(
            self.logits, settings, commit=commit, history=self.tokens, generated=self.generated
        )

    # -- stages 5 and 6 ----------------------------------------------------------------------------
    def preview(self, settings: SamplerSettings | None = None) -> ChainResult:
        if self.logits is None:
            raise TokenstepError("there are no logits yet: send a prompt first.")
        return self._run(settings or self.settings, commit=False)

    def sample(self, force: int | None = None) -> Sampled:
        """Stages 5 and 6: tokenstep's chain on the top K (or the server's own pick)."""
        if self.logits is None or self.logits_record is None:
            self.ensure_logits()
        rec = self.records.get(self.logits_record) if self.logits_record is not None else None
        if self.pick == "server" and force is None and rec is not None and rec.server:
            if rec.server.pick_settings != self.settings.to_dict():
                # The settings changed since that answer: ask the server again with them.
                rec = self._again()
        logits = self.logits
        assert logits is not None
        settings = self.settings
        pending = self._pending
        if force is not None:
            if not 0 <= force < self.info.n_vocab:
                raise TokenstepError(f"token id {force} is outside the vocabulary.")
            token, result = force, self._run(settings, commit=False)
        elif pending is not None and pending[:2] == (self.n_past, self.logits_record):
            # The last feed failed (the server was unreachable): retry the same pick, so a
            # fault does not advance the seeded RNG twice.
            token, result = pending[2], self._run(settings, commit=False)
        elif self.pick == "server" and rec is not None and rec.server is not None:
            result = self._run(settings, commit=False)
            token = (
                rec.server.server_pick if rec.server.server_pick is not None else result.selected
            )
        else:
            result = self._run(settings, commit=True)
            token = result.selected
        eog = self.vocab.is_eog(token)
        if rec is not None:
            rec.note_pick(0, token, result, eog, forced=force is not None, settings=settings)
            forced = force is not None  # the record's pick: the chart reads it (partial: top K)
            self.run.note(server_pick(rec, self.n_past, token, result, forced, settings.seed, logits))
            if rec.server is not None:
                rec.server.pick = "forced" if force is not None else self.pick
                rec.server.approx = self.exactness(settings) or pick_exactness(
                    settings, rec.server.top_ids, result, token
                )
                if self.check_chain and force is None:
                    from ..wire.remote_post import check_row

                    rec.server.post_chain, rec.server.post_note = check_row(
                        self, result, self.tokens
                    )
        if eog:
            self.stop_reason = "end of generation"
        return Sampled(0, token, result, logits, rec, force is not None, eog)
