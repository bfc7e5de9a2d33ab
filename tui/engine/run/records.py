"""The session's step records, with bounded memory.

A :class:`~tui.engine.run.step.StepRecord` carries the top candidates, the sampler's stage
arrays and the batch it decoded: a few kilobytes. Kept for every step, a session that plays for
hours grows without bound. So the log keeps only the newest ``window`` records as objects; an
older one is written, in the JSON form ``tokenstep trace`` prints, to an unnamed temporary file
and dropped. Saving a session reads those lines back, so nothing is lost.

Records that carry attention weights are spilled the same way: the attention capture has
already moved the weights of all but its newest decodes into its own weight file
(:mod:`tui.engine.record.attention_store`), which the heatmap reads a row at a time, so memory stays
flat however long the session plays. The spilled JSON leaves the weights out (their shape
stays), as a saved session does.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    from .step import StepRecord

WINDOW = 256  # records kept as objects; rewind and the panes only look this far back


class RecordLog:
    """An append-only sequence of step records indexed by ``StepRecord.index``.

    ``log[i]`` works for every record still in memory (the newest ``window``); an index that has moved to disk raises ``IndexError``. Iterating yields the records
    in memory, oldest first. :meth:`dicts` yields every record, spilled or not, as a dict."""

    def __init__(
        self, to_dict: Callable[[StepRecord], dict[str, Any]], window: int = WINDOW
    ) -> None:
        self.to_dict = to_dict
        self.window = max(1, window)
        self._kept: list[StepRecord] = []  # the newest records, by index
        self._first = 0  # index of _kept[0]
        self._spill: IO[str] | None = None
        self._offsets: list[int] = []  # file offset of each spilled index >= _spill_from
        self._spill_from = 0

    def __len__(self) -> int:
        return self._first + len(self._kept)

    def __bool__(self) -> bool:
        return len(self) > 0

    def append(self, rec: StepRecord) -> None:
        if rec.index != len(self):
            raise ValueError(f"record {rec.index} appended at position {len(self)}")
        self._kept.append(rec)
        if len(self._kept) > 2 * self.window:  # evict in batches: O(1) amortized
            self._evict(len(self._kept) - self.window)

    def _evict(self, n: int) -> None:
        old, self._kept = self._kept[:n], self._kept[n:]
        for rec in old:
            self._write(rec)
        self._first += n

    def _write(self, rec: StepRecord) -> None:
        if self._spill is None:
            self._spill = tempfile.TemporaryFile("w+", encoding="utf-8")
            self._spill_from = rec.index
        self._spill.seek(0, 2)
        self._offsets.append(self._spill.tell())
        self._spill.write(json.dumps(self.to_dict(rec), ensure_ascii=False) + "\n")

    @property
    def spilled(self) -> int:
        """How many records live only in the temporary file."""
        return sum(1 for off in self._offsets if off >= 0)

    @overload
    def __getitem__(self, i: int) -> StepRecord: ...
    @overload
    def __getitem__(self, i: slice) -> list[StepRecord]: ...
    def __getitem__(self, i: int | slice) -> StepRecord | list[StepRecord]:
        if isinstance(i, slice):  # only the records still in memory
            return [r for j in range(*i.indices(len(self))) if (r := self.get(j)) is not None]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"no step record {i} (there are {n})")
        if i >= self._first:
            return self._kept[i - self._first]
        raise IndexError(f"step record {i} is no longer in memory (see RecordLog.dicts)")

    def get(self, i: int) -> StepRecord | None:
        """Record ``i`` if it is in memory, else None."""
        try:
            return self[i]
        except IndexError:
            return None

    def __iter__(self) -> Iterator[StepRecord]:
        yield from self._kept

    def __reversed__(self) -> Iterator[StepRecord]:
        yield from reversed(self._kept)

    def dicts(self, start: int = 0) -> Iterator[dict[str, Any]]:
        """Every record from index ``start`` on, as the trace's dict: spilled ones are read
        back from the temporary file, the others converted now."""
        for i in range(start, self._first):
            assert self._spill is not None
            off = self._offsets[i - self._spill_from]
            self._spill.seek(off)
            yield json.loads(self._spill.readline())
        for rec in self._kept[max(0, start - self._first) :]:
            yield self.to_dict(rec)
