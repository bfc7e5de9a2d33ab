"""``--spec-type draft-simple -md PATH``: a smaller model with the same vocabulary drafts.

As llama.cpp's ``common_speculative_impl_draft_simple`` (``common/speculative.cpp``): the draft
model's own context (as many cells as the target's) holds the target's tokens; it decodes the
target's last pick, then drafts greedily with top-k 10 alone (``p`` is the softmax over those
10). A token with ``p < --spec-draft-p-min`` ends the draft, which stops at
``--spec-draft-n-max`` (or the room left) and is dropped under ``--spec-draft-n-min``; every
drafted token but the last is decoded there. After the verify the rejected cells leave with
``llama_memory_seq_rm``. Compatibility is ``common_speculative_are_compatible``'s: the same
vocabulary type, BOS and EOS use, sizes within 128, every text equal from id 5 up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llama_cpp
import numpy as np

from ..model.context import EngineConfig
from ..model.errors import TokenstepError
from ..model.model import Model
from ..run.session import Engine
from ..sampler.sampling import SamplerSettings, top_k_by_logit

if TYPE_CHECKING:
    from pathlib import Path

    from ..run.backend import LocalSession

N_MAX, N_MIN, P_MIN = 3, 0, 0.0  # common.h: common_params_speculative_draft
DRAFT_TOP_K = 10  # the draft sampler: top-k 10 only (common_speculative_impl_draft_simple)
VOCAB_MAX_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID


def vocab_mismatch(target: Model, draft: Model) -> str | None:
    """Why ``draft`` cannot draft for ``target`` (llama.cpp's check), or None."""
    vt, vd = target.vocab, draft.vocab
    if llama_cpp.llama_vocab_type(vt) != llama_cpp.llama_vocab_type(vd):
        return (
            f"its vocabulary type is {draft.info.vocab_type}, the target's is "
            f"{target.info.vocab_type}"
        )
    for what, add, tok in (
        ("BOS", llama_cpp.llama_vocab_get_add_bos, llama_cpp.llama_vocab_bos),
        ("EOS", llama_cpp.llama_vocab_get_add_eos, llama_cpp.llama_vocab_eos),
    ):
        if add(vt) != add(vd) or (add(vt) and tok(vt) != tok(vd)):
            return f"its {what} token differs from the target's"
    nt, nd = target.info.n_vocab, draft.info.n_vocab
    if abs(nt - nd) > VOCAB_MAX_SIZE_DIFFERENCE:
        return f"it has {nd:,} tokens and the target {nt:,} (at most 128 apart)"
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(nt, nd)):
        if llama_cpp.llama_vocab_get_text(vt, i) != llama_cpp.llama_vocab_get_text(vd, i):
            return f"its token {i} differs from the target's"
    return None


@dataclass
class DraftSimple:
    """The draft model, its own context, and the last draft's cost."""

    target: LocalSession
    path: str | Path
    n_max: int = N_MAX  # --spec-draft-n-max
    n_min: int = N_MIN  # --spec-draft-n-min
    p_min: float = P_MIN  # --spec-draft-p-min
    engine: Engine = field(init=False)
    draft_ms: float = 0.0  # the llama_decode time of the last draft in the draft context
    draft_decodes: int = 0  # llama_decode calls the last draft made
    source: int | None = None  # a model drafts: no context index to copy from
    cannot: str | None = None  # why the last call drafted nothing it could not feed

    name = "draft-simple"

    def __post_init__(self) -> None:
        model = Model(self.path, repack_flag=self.target.model.repack.use_extra_bufts)
        why = vocab_mismatch(self.target.model, model)
        if why is not None:
            model.close()
            raise TokenstepError(f"-md {self.path} cannot draft for this model: {why}.")
        cfg = self.target.config
        config = EngineConfig(
            n_ctx=self.target.n_ctx,
            n_batch=cfg.n_batch,
            n_ubatch=cfg.n_ubatch,
            n_threads=cfg.n_threads,
            flash_attn=cfg.flash_attn,
            n_seq_max=1,
        )
        self.engine = Engine(model, config, SamplerSettings(greedy=True))

    def draft(self, tokens: Sequence[int], sampled: int, room: int) -> list[int]:
        """Up to ``min(n_max, room)`` tokens after ``tokens`` + ``sampled``. llama.cpp's check
        lets the draft's vocabulary be up to 128 tokens smaller than the target's: an id of the
        context past the draft's vocabulary cannot be fed to it (llama_decode fails with -1),
        so there is no draft while the context holds one, and :attr:`cannot` says why."""
        eng = self.engine
        self.cannot = None
        n_vocab = eng.info.n_vocab
        fed = [*tokens, sampled]
        bad = next((t for t in fed if not 0 <= t < n_vocab), None)
        if bad is not None:
            self.draft_ms, self.draft_decodes = 0.0, 0
            self.cannot = (
                f"the context holds token {bad:,}, which the draft model's {n_vocab:,}-token "
                "vocabulary lacks, so it cannot be fed to it"
            )
            return []
        first = len(eng.records)
        eng.sync_prompt([*tokens, sampled])  # the common prefix stays, the rest is decoded
        out: list[int] = []
        limit = min(self.n_max, room) if room > 0 else self.n_max
        while True:
            logits = eng.logits
            assert logits is not None
            top = top_k_by_logit(logits, DRAFT_TOP_K)
            z = logits[top].astype(np.float64)
            p = np.exp(z - z.max())
            p /= p.sum()
            best = int(np.argmax(p))
            if float(p[best]) < self.p_min:
                break
            out.append(int(top[best]))
            if len(out) >= limit:
                break
            if eng.feed(out[-1]) is None:  # the draft context is full
                break
        new = eng.records[first:]
        self.draft_ms = sum(r.decode_ms for r in new)
        self.draft_decodes = len(new)
        if len(out) < self.n_min:
            return []
        return out

    def keep(self, n_keep: int) -> int:
        """After the target's verify: the draft context keeps the first ``n_keep`` tokens
        (llama_memory_seq_rm in its own cache); the cells that left."""
        before = self.engine.kv.used
        self.engine.truncate(n_keep)
        return before - self.engine.kv.used

    def close(self) -> None:
        model = self.engine.model
        self.engine.close()
        model.close()
