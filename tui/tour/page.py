"""A page of the tour and its guess: the types :mod:`~tui.tour.chapters` builds and the
screen shows, and the multiple-choice guess whose right answer is found by value."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Strings = Mapping[str, str]


@dataclass(frozen=True)
class Guess:
    question: str
    choices: tuple[str, ...]  # empty: a typed answer
    answer: int  # index of the right choice (-1 for a typed answer)
    typed: str = ""  # the right typed answer
    why: str = ""  # said after the answer, right or wrong

    def is_right(self, given: str) -> bool:
        if self.choices:
            return given.isdigit() and int(given) - 1 == self.answer
        return _norm(given) == _norm(self.typed)

    @property
    def shown_answer(self) -> str:
        return self.choices[self.answer] if self.choices else self.typed


def _norm(text: str) -> str:
    return text.strip().casefold()


@dataclass(frozen=True)
class Page:
    chapter: str
    title: str
    body: str
    pane: str = ""  # where the app shows the same thing
    guess: Guess | None = None
    stages: tuple[str, ...] = ()  # the seven steps, with the lit one marked
    lit: int = -1


def choice(s: Strings, key: str, actual: object, others: Sequence[object], **kw: object) -> Guess:
    """A multiple-choice guess: the measured value among distractors (deduplicated, sorted
    when they are numbers), the right one found by value."""
    values: list[object] = []
    for v in [actual, *others]:
        if v not in values:
            values.append(v)
    if all(isinstance(v, int) for v in values):
        values.sort()  # type: ignore[type-var]
    choices = tuple(f"{v:,}" if isinstance(v, int) else str(v) for v in values)
    return Guess(
        s[f"{key}.q"].format(**kw), choices, values.index(actual), why=s[f"{key}.why"].format(**kw)
    )
