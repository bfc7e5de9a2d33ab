"""``--kld-base FILE``: A's logits kept, so later runs compare B against them without running A.

As ``llama-perplexity --kl-divergence-base`` keeps a base's log-probabilities, but in
tokenstep's own format, and exact: the first line is ``tokenstep-kld-base 1``; the second a
JSON object (``n_vocab``, ``n_ctx``, ``chunks``, ``score_from``, ``bos``, ``tokens``, ``model``
and A's side as the summary prints it); then A's float32 logits rows, little-endian, n_vocab
each, for the compared positions in order (the spans :func:`~tui.compare.lockstep.spans` gives
for those settings). Rows, not log-probabilities rounded to 16 bits: KL from a base file equals
the KL of a run with A live. A missing file is written; an existing one is read, and then its
text, context size and scoring are the run's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..engine import EngineConfig
from ..engine.model.errors import TokenstepError
from ..engine.model.tokens import Vocab
from ..engine.model.vocab_only import VocabModel
from .lockstep import LocalSide
from .records import Side

MAGIC = b"tokenstep-kld-base 1\n"


class BaseWriter:
    """A's context, with every row it hands to lockstep also appended to the file."""

    def __init__(self, path: str, side: LocalSide, header: dict[str, Any]) -> None:
        self.side = side
        self.config = side.config
        self.vocab = side.vocab
        try:
            self.fh: IO[bytes] = open(path, "xb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise TokenstepError(f"cannot write --kld-base {path}: {exc.strerror}.") from None
        self.fh.write(MAGIC + json.dumps(header).encode() + b"\n")

    def clear(self) -> None:
        self.side.clear()

    def decode(self, tokens: Sequence[int], pos0: int, want: Sequence[bool]) -> np.ndarray:
        rows = self.side.decode(tokens, pos0, want)
        self.fh.write(rows.astype("<f4", copy=False).tobytes())
        return rows

    def close(self) -> None:
        self.fh.close()


class BaseReader:
    """A's rows from a base file, handed to lockstep in the order they were written."""

    def __init__(self, path: str) -> None:
        try:
            self.fh: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise TokenstepError(f"cannot read --kld-base {path}: {exc.strerror}.") from None
        try:
            magic = self.fh.readline()
            if magic != MAGIC:
                raise TokenstepError(
                    f"--kld-base {path} is not a tokenstep base file (it does not start with "
                    f"{MAGIC.decode().strip()!r}; llama-perplexity's own files are not read)."
                )
            try:
                self.header: dict[str, Any] = json.loads(self.fh.readline())
                self.n_vocab = int(self.header["n_vocab"])
                self.tokens = [int(t) for t in self.header["tokens"]]
                self.n_ctx = int(self.header["n_ctx"])
                self.side = Side(**{**self.header["side"], "differs": ()})
            except (ValueError, KeyError, TypeError) as exc:
                raise TokenstepError(f"--kld-base {path} has a damaged header ({exc}).") from None
        except TokenstepError:
            self.fh.close()
            raise
        self.path = path
        self.config = EngineConfig(n_ctx=self.n_ctx, n_batch=self.side.n_batch or 512)
        self.config.n_ubatch = min(self.config.n_ubatch, self.config.n_batch)
        self._vm = VocabModel(self.header.get("model"))
        self.vocab: Vocab = self._vm.vocab
        if self.vocab.n_vocab != self.n_vocab:
            raise TokenstepError(f"--kld-base {path} was written for another vocabulary.")

    def clear(self) -> None:
        pass

    def decode(self, tokens: Sequence[int], pos0: int, want: Sequence[bool]) -> np.ndarray:
        n = sum(want)
        data = self.fh.read(n * self.n_vocab * 4)
        if len(data) != n * self.n_vocab * 4:
            raise TokenstepError(f"--kld-base {self.path} ends early: it holds fewer rows.")
        return np.frombuffer(data, dtype="<f4").reshape(n, self.n_vocab).astype(np.float32)

    def close(self) -> None:
        self.fh.close()
        self._vm.close()


def header(
    side: LocalSide,
    tokens: Sequence[int],
    *,
    chunks: bool,
    score_from: int,
    bos: int | None,
    described: Side,
) -> dict[str, Any]:
    from .records import to_json

    return {
        "n_vocab": side.n_vocab,
        "n_ctx": side.context.n_ctx,
        "chunks": chunks,
        "score_from": score_from,
        "bos": bos,
        "model": str(side.model.path),
        "tokens": [int(t) for t in tokens],
        "side": to_json(described),
    }


def exists(path: str | None) -> bool:
    return bool(path) and Path(str(path)).exists()
