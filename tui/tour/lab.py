"""What each chapter of the tour runs on the model, as plain numbers.

A :class:`Lab` loads the model itself and makes its own contexts: the tour looks at the loop
without touching the app's conversation, and every context here is used only by the thread
that calls the lab. Each method runs one chapter's operation with llama.cpp and returns a
frozen record of what it measured or counted; nothing here knows about a screen.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engine import Engine, EngineConfig, Model, SamplerSettings
from ..engine.model.tokens import Vocab, display_bytes
from ..engine.model.vocab_only import VocabModel
from . import lab_kv
from .lab_kv import FullFacts, InsideFacts, PrefixFacts, RamFacts, WallFacts

CHAPTERS = (
    "loop",
    "tokens",
    "batch",
    "sampler",
    "inside",
    "exact",
    "wall",
    "ram",
    "full",
    "prefix",
)
# chapters that need a llama.cpp context of their own (a server's model has none here)
NEEDS_CONTEXT = frozenset(CHAPTERS) - {"tokens", "ram"}
PROMPTS = {"en": "The capital of France is", "zh": "法国的首都是"}
WORD = "unbelievably"  # a long English word: several subword pieces in most vocabularies
HANZI = "鑫"  # a rare character: byte pieces where the vocabulary has no whole token for it
TOP_P_GUESS = 0.5


def piece_text(vocab: Vocab, token: int) -> str:
    """A token's piece as the screen shows it (bytes that are not UTF-8 as <0xNN>)."""
    return display_bytes(vocab.piece(token))


@dataclass(frozen=True)
class LoopFacts:
    """The seven steps once, on the learner's prompt."""

    prompt: str
    ids: tuple[int, ...]
    pieces: tuple[str, ...]
    n_vocab: int  # the logits row's length
    top1: int
    top1_piece: str
    picked: int
    picked_piece: str
    eog: bool
    cells_before: int  # KV cells after the prefill
    cells_after: int  # ... and after the pick was fed back


@dataclass(frozen=True)
class TokenFacts:
    word: str
    word_pieces: tuple[str, ...]
    hanzi: str
    hanzi_ids: tuple[int, ...]
    hanzi_pieces: tuple[str, ...]
    hanzi_utf8: int  # bytes of the character in UTF-8
    message: str
    plain_count: int  # the message alone
    chat_count: int  # the message inside the chat template
    chat_pieces: tuple[str, ...]


@dataclass(frozen=True)
class BatchFacts:
    n_prompt: int
    prefill_calls: int
    prefill_ms: float
    decode_ms: float  # median of the one-token decodes
    n_decodes: int
    n_batch: int  # -b: the most tokens one llama_decode takes

    @property
    def ms_per_prompt_token(self) -> float:
        return self.prefill_ms / self.n_prompt if self.n_prompt else 0.0


@dataclass(frozen=True)
class StageCount:
    name: str
    param: str
    n: int


@dataclass(frozen=True)
class SamplerFacts:
    n_vocab: int
    top: tuple[tuple[str, float], ...]  # (piece, p) of the five highest logits, softmax at T=1
    stages: tuple[StageCount, ...]  # survivors after each stage of the default chain
    second_piece: str  # the second candidate, the one the guess asks about
    second_p: float
    top_p: float
    second_kept: bool  # does top-p TOP_P_GUESS (alone) keep it?
    kept_at_top_p: int  # how many candidates top-p TOP_P_GUESS keeps


@dataclass(frozen=True)
class ExactFacts:
    n_tokens: int
    replay_calls: int
    replay_max: float
    batched_calls: int
    batched_max: float
    top1_agree: bool
    flash_attn: str


@dataclass(frozen=True)
class Skipped:
    """A chapter this backend cannot run: the reason's key in the strings, and the sentence
    of the error that stopped it (reason ``error``)."""

    reason: str
    detail: str = ""


Facts = (
    LoopFacts
    | TokenFacts
    | BatchFacts
    | SamplerFacts
    | InsideFacts
    | ExactFacts
    | WallFacts
    | RamFacts
    | FullFacts
    | PrefixFacts
    | Skipped
)


class Lab:
    """The model, loaded for the tour, and the contexts each chapter makes and frees."""

    def __init__(
        self,
        model_path: str | Path | None,
        *,
        config: EngineConfig | None = None,
        lang: str = "en",
        prompt: str | None = None,
        local: bool = True,
    ) -> None:
        self.path = model_path
        # the flags' context settings; each chapter picks its own size (and the full chapter
        # its own --context-full)
        self.config = dataclasses.replace(config or EngineConfig(n_ctx=512), context_full="stop")
        self.lang = lang
        self.prompt = prompt or PROMPTS[lang]
        self.local = local
        self._model: Model | None = None

    # -- what the lab owns -----------------------------------------------------------------
    @property
    def model(self) -> Model:
        if self._model is None:
            self._model = Model(self.path)
        return self._model

    def engine(self, **config: object) -> Engine:
        """A fresh context on the lab's model, greedy, with the flags' settings."""
        cfg = dataclasses.replace(self.config, **config)  # type: ignore[arg-type]
        return Engine(self.model, cfg, SamplerSettings(temp=0.0))

    def close(self) -> None:
        if self._model is not None:
            self._model.close()
            self._model = None

    def run(self, chapter: str) -> Facts:
        """One chapter's operation; :class:`Skipped` where it needs a context and the tour
        runs over a server."""
        if not self.local and (chapter in NEEDS_CONTEXT or self.path is None):
            return Skipped("no_context")
        if chapter == "ram" and not self.local:
            return lab_kv.ram_from_header(self.path)
        return getattr(self, chapter)()  # type: ignore[no-any-return]

    def prompt_ids(self, vocab: Vocab) -> list[int]:
        return vocab.tokenize(self.prompt)

    # -- the chapters ----------------------------------------------------------------------
    def loop(self) -> LoopFacts:
        with self.engine() as eng:
            ids = self.prompt_ids(eng.vocab)
            eng.prefill(ids)
            before = eng.kv.used
            assert eng.logits is not None
            n_vocab = int(eng.logits.shape[0])
            top1 = int(np.argmax(eng.logits))
            rec = eng.step()  # greedy: sample, detokenize, feed back
            picked = eng.tokens[-1] if rec is not None else top1
            return LoopFacts(
                self.prompt,
                tuple(ids),
                tuple(piece_text(eng.vocab, t) for t in ids),
                n_vocab,
                top1,
                piece_text(eng.vocab, top1),
                picked,
                piece_text(eng.vocab, picked),
                eng.vocab.is_eog(picked),
                before,
                eng.kv.used,
            )

    def tokens(self) -> TokenFacts:
        if self.local:
            with self.engine(n_ctx=64) as eng:
                return token_facts(eng.vocab, eng.info.chat_template, MESSAGES[self.lang])
        vm = VocabModel(self.path)
        try:
            return token_facts(vm.vocab, None, MESSAGES[self.lang])
        finally:
            vm.close()

    def batch(self) -> BatchFacts:
        with self.engine() as eng:
            ids = self.prompt_ids(eng.vocab) * 4  # a wider batch: the prompt four times
            recs = eng.prefill(ids)
            times = []
            for _ in range(6):
                rec = eng.step()
                if rec is None:
                    break
                times.append(rec.decode_ms)
            return BatchFacts(
                len(ids),
                len(recs),
                sum(r.decode_ms for r in recs),
                float(np.median(times)) if times else 0.0,
                len(times),
                eng.config.n_batch,
            )

    def sampler(self) -> SamplerFacts:
        with self.engine() as eng:
            eng.prefill(self.prompt_ids(eng.vocab))
            logits = eng.logits
            assert logits is not None
            order = np.argsort(-logits, kind="stable")[:5]
            x = logits.astype(np.float64)
            p = np.exp(x - x.max())
            p /= p.sum()
            top = tuple((piece_text(eng.vocab, int(t)), float(p[t])) for t in order)
            chain = eng.preview(SamplerSettings())  # llama.cpp's defaults
            stages = tuple(StageCount(s.name, s.param, s.n) for s in chain.stages)
            alone = SamplerSettings(top_k=0, top_p=TOP_P_GUESS, min_p=0.0, temp=1.0)
            cut = eng.preview(alone)
            second = int(order[1])
            return SamplerFacts(
                int(logits.shape[0]),
                top,
                stages,
                piece_text(eng.vocab, second),
                float(p[second]),
                TOP_P_GUESS,
                bool(np.any(cut.final_ids == second)),
                int(cut.final_ids.size),
            )

    def inside(self) -> InsideFacts:
        cfg = dataclasses.replace(self.config, n_ctx=256, flash_attn="off")
        return lab_kv.inside_facts(self.model, cfg, self.prompt)

    def exact(self) -> ExactFacts:
        with self.engine() as eng:
            eng.prefill(self.prompt_ids(eng.vocab))
            for _ in range(4):
                if eng.step() is None:
                    break
            replay = eng.verify_last("replay")
            batched = eng.verify_last("batched")
            return ExactFacts(
                replay.n_tokens,
                replay.n_calls,
                replay.max_abs_diff,
                batched.n_calls,
                batched.max_abs_diff,
                batched.top1_agree,
                replay.flash_attn,
            )

    def wall(self) -> WallFacts:
        with self.engine() as eng:
            return lab_kv.wall_facts(eng, self.prompt_ids(eng.vocab))

    def ram(self) -> RamFacts:
        with self.engine() as eng:
            return lab_kv.ram_facts(eng)

    def full(self) -> FullFacts:
        with self.engine(n_ctx=lab_kv.FULL_CTX, context_full="shift") as eng:
            return lab_kv.full_facts(eng, self.prompt_ids(eng.vocab))

    def prefix(self) -> PrefixFacts:
        with self.engine() as eng:
            return lab_kv.prefix_facts(eng, self.prompt)


MESSAGES = {"en": "Hi", "zh": "你好"}


def token_facts(vocab: Vocab, template: str | None, message: str = "Hi") -> TokenFacts:
    """Subword pieces, a character in byte pieces, and what the chat template adds (ChatML,
    llama.cpp's fallback, for a model without a template)."""
    from ..engine.model.chat_template import CHATML, Message, chat_tokens

    word = vocab.tokenize(WORD, add_special=False)
    hanzi = vocab.tokenize(HANZI, add_special=False)
    plain = vocab.tokenize(message, add_special=False)
    chat = chat_tokens(vocab, template or CHATML, [Message("user", message)]).tokens
    return TokenFacts(
        WORD,
        tuple(piece_text(vocab, t) for t in word),
        HANZI,
        tuple(hanzi),
        tuple(piece_text(vocab, t) for t in hanzi),
        len(HANZI.encode("utf-8")),
        message,
        len(plain),
        len(chat),
        tuple(piece_text(vocab, t) for t in chat),
    )
