"""tokenstep's sampler chain over a llama-server: what each stage needs, and how exact it is.

The server sends the top K of each row as ids and logprobs (``remote_step``). Most stages read
only ids and logits, so they run on that row as on a local one: top-k, top-p, min-p, typical,
top-n-σ, XTC, temperature and dynatemp, mirostat 1 and 2, logit bias, and the frequency and
presence penalties. Two read the *text* of tokens, which needs a ``llama_vocab``: DRY (its
sequence breakers and repeats are matched on pieces) and a grammar (each candidate's piece is
matched against the rules). llama.cpp does not check: DRY with a NULL vocabulary segfaults and
a grammar aborts (``GGML_ASSERT(grammar.vocab != nullptr)``). So with ``-m PATH`` (the GGUF the
server serves) tokenstep loads its vocabulary alone and checks it is the server's; without it
the two are refused in one sentence that names ``-m``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..model.errors import TokenstepError
from ..model.local_vocab import LocalVocab, ServerVocab, check_same_vocab
from ..record.run_record import Pick, Rewind, RunRecord
from ..run.backend import Capabilities
from ..sampler.chain_stages import STAGES, needs_vocab, vocab_refusal
from ..sampler.grammar import check_grammar
from ..sampler.sampling import ChainResult, SamplerChain, SamplerSettings, softmax
from .remote_vocab import remote_capabilities

if TYPE_CHECKING:
    from ..model.kvcache import KVMirror
    from ..model.model import ModelInfo
    from ..run.logits import LogitsMemory
    from ..run.step import StepRecord


class NoLocalContext:
    """What a backend without a local llama_context says of it: one sequence, no cells to
    keep, no local session (``local`` is None: no fork, no verify, no observers)."""

    _capabilities: Capabilities
    settings: SamplerSettings
    score_prompt: bool
    info: ModelInfo
    kv: KVMirror  # the tokens the server's slot should hold
    logits_memory: LogitsMemory
    run: RunRecord

    def use_chat_template(self, template: str) -> None:
        """Format chats with ``template`` (as :meth:`Engine.use_chat_template`)."""
        self.info = dataclasses.replace(self.info, chat_template=template)

    @property
    def n_past(self) -> int:
        return self.kv.count(0)

    def _truncate(self, n_keep: int, picks_from: int | None = None) -> None:
        """Keep ``n_keep`` tokens; the record drops picks from ``picks_from`` (prompt.truncate)."""
        n_past = self.n_past
        if n_keep >= n_past:
            return
        positions = self.kv.positions(0)
        if n_keep == 0:
            self.kv.clear()
        else:
            self.kv.seq_rm(0, positions[n_keep], -1)
        self.logits_memory.truncate(n_keep)
        self.run.note(Rewind(n_past - n_keep, n_keep, picks_from))

    def score_prompts(self, on: bool) -> None:
        """Kept for the surprise map's wording: a server's prompt rows have no logits here."""
        self.score_prompt = on

    def use_settings(self, settings: SamplerSettings) -> None:
        """The next request's settings (a whole new object, as the local Engine takes them)."""
        settings.validate()
        self.settings = settings

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def local(self) -> None:
        """No llama.cpp session here: forks, verify and the observers are refused."""
        return None

    @property
    def flash_attn_note(self) -> str | None:
        return None

    @property
    def seq_ids(self) -> list[int]:
        return [0]

    def keep_count(self) -> int:
        return 0

    def context_shift(self) -> None:
        return None


def no_vocab_where(url: str) -> str:
    """The end of the refusal sentence: why there is no vocabulary, and the flag that gives one."""
    return (
        f"the server at {url} sends none: give the GGUF it serves with -m PATH "
        "(tokenstep loads only its vocabulary)"
    )


# The flags that add an observer to the decode (an eval callback in a local context), with the
# capability each needs: with --server every one is refused in the same words.
OBSERVER_FLAGS = {
    "attention": "attention",
    "lens": "lens",
    "lens_grid": "lens",
    "graph": "graph",
    "profile": "graph",
}


def server_refusal(
    url: str, observers: Sequence[str], settings: SamplerSettings | None, *, vocab_file: bool
) -> str | None:
    """The sentence for the first flag --server cannot honour, or None: an observer flag
    (``--lens`` too, as ``--attention`` and ``--graph``), or a stage that reads the
    vocabulary's text when no ``-m`` gives one."""
    caps = remote_capabilities(url)
    if observers:
        return f"--{observers[0].replace('_', '-')} {caps.missing(OBSERVER_FLAGS[observers[0]])}."
    stage = needs_vocab(settings) if settings is not None and not vocab_file else None
    return vocab_refusal(stage, no_vocab_where(url)) if stage is not None else None


def chain_for(
    url: str,
    n_vocab: int,
    n_ctx: int,
    settings: SamplerSettings,
    server_vocab: ServerVocab,
    local_vocab: LocalVocab | None,
) -> tuple[SamplerChain, Capabilities]:
    """The chain for a server's rows, and the capabilities with ``vocab`` as it stands. Every
    stage the settings turn on is checked here, before any request samples."""
    caps = dataclasses.replace(remote_capabilities(url), vocab=local_vocab is not None)
    if local_vocab is not None:
        check_same_vocab(local_vocab, server_vocab, url)
        server_vocab.end_with(local_vocab.eog_ids())  # llama.cpp's own, as the grammar ends
    settings.check_vocab(n_vocab)
    chain = SamplerChain(
        n_vocab,
        settings.seed,
        local_vocab.ptr if local_vocab is not None else None,
        n_ctx,
        no_vocab=no_vocab_where(url),
    )
    try:
        refused = chain.refusal(settings)
        if refused is not None:
            raise TokenstepError(refused)
        if settings.grammar:
            check_grammar(chain.env.vocab, settings.grammar)
    except TokenstepError:
        chain.free()
        raise
    return chain, caps


# Stages that read every candidate standing, not only the best ones: while the stand-ins for
# the tokens past the top K are among them, what they do is not the full vocabulary's. The
# stand-ins hold the rest's probability mass at T=1 only: at another temperature the rest's
# share depends on how its logits spread, which the server never says.
WHOLE_ROW = {
    "top_n_sigma": "top-n-σ's σ of the logits took in",
    "typ_p": "typical's entropy took in",
    "temperature": "the temperature rescaled",
}


def _reads_whole_row(key: str, s: SamplerSettings) -> bool:
    if key == "temperature":
        return s.dynatemp_range > 0 or s.temp != 1.0
    return key in WHOLE_ROW


def pick_exactness(
    settings: SamplerSettings, top_ids: Sequence[int], result: ChainResult, token: int
) -> str | None:
    """Why a pick on the filled top-K row may not be the full vocabulary's, from what the
    chain did (``remote_step.chain_exactness`` reasons from the settings alone): a survivor
    outside the top K (a grammar or a penalty reached past them); a stage that reads every
    candidate (:data:`WHOLE_ROW`) while the stand-ins were among them; or the repeat penalty,
    which divides a positive logit and multiplies a negative one, while logprobs are all ≤ 0."""
    top = np.asarray(sorted(set(top_ids)), dtype=np.int64)
    k = int(top.size)
    if k >= result.n_vocab:
        return None
    live = result.final_ids[result.final_p > 0]
    live = live if live.size else np.array([token])
    outside = int((~np.isin(live, top)).sum())
    if outside:
        return (
            f"approximation: {outside:,} of the {live.size:,} candidate(s) the chain left lie "
            f"outside the server's top {k} (only an even spread stands in for them); a larger "
            "--n-probs sees further"
        )
    standing: np.ndarray | None = None  # None: the whole row, stand-ins included
    for st in result.stages:
        whole = _reads_whole_row(st.key, settings)
        if whole and (standing is None or not np.isin(standing, top).all()):
            return (
                f"approximation: {WHOLE_ROW[st.key]} the stand-ins for the tokens past the "
                f"server's top {k}"
            )
        standing = st.survivors
        if st.key == "grammar" and not result.grammar_first:
            standing = None  # the chain's first pass ran on the whole row; the grammar checked
    pen = STAGES["penalties"]
    if settings.repeat_penalty != 1.0 and not settings.mirostat and pen.active(settings):
        if "penalties" in settings.samplers and "penalties" not in settings.off:
            return (
                "approximation: the repeat penalty divides a positive logit and multiplies a "
                "negative one, and the server sends logprobs (all ≤ 0), never the logits' sign"
            )
    return None


def server_pick(
    rec: StepRecord, index: int, token: int, result: ChainResult, forced: bool, seed: int, row: np.ndarray
) -> Pick:
    """The record's pick over llama-server, with what the answer had: p is the server's own
    probability of the token (its top K's logprob), else the filled ``row``'s share of the
    rest; the entropy is the row's upper bound; marked partial."""
    server = rec.server
    p: float | None = None
    if server is not None and token in server.top_ids:
        p = float(np.exp(server.top_logprobs[server.top_ids.index(token)]))
    if p is None:
        p = float(softmax(row)[token])
    cuts = tuple((st.name, st.n) for st in result.stages)
    return Pick(0, index, token, p, result.p_final(token), rec.entropy, forced, seed, cuts, rec.index, True)
