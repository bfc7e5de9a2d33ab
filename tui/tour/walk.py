"""The walk through the tour: where the learner is, what they answered, the score."""

from __future__ import annotations

from dataclasses import dataclass, field

from .chapters import Page, Strings, pages_for
from .lab import CHAPTERS, Facts


@dataclass
class Tour:
    """Where the learner is, chapter by chapter; the pages of a chapter exist once its facts
    have arrived from the lab."""

    strings: Strings
    chapter: int = 0
    page: int = 0
    pages: dict[str, list[Page]] = field(default_factory=dict)
    answers: dict[tuple[str, int], tuple[str, bool]] = field(default_factory=dict)

    def arrived(self, chapter: str, facts: Facts) -> None:
        self.pages[chapter] = pages_for(chapter, facts, self.strings)

    @property
    def name(self) -> str:
        return CHAPTERS[self.chapter]

    @property
    def current(self) -> Page | None:
        """The page on screen; None while its chapter is still running on the model."""
        if self.finished:
            return None
        got = self.pages.get(self.name)
        return got[self.page] if got else None

    @property
    def finished(self) -> bool:
        return self.chapter >= len(CHAPTERS)

    @property
    def answer(self) -> tuple[str, bool] | None:
        return None if self.finished else self.answers.get((self.name, self.page))

    def forward(self) -> bool:
        """Next page (an unanswered guess counts as skipped); False past the last page."""
        if self.finished:
            return False
        got = self.pages.get(self.name)
        if got is None:
            return True  # still running: stay
        if self.page + 1 < len(got):
            self.page += 1
        else:
            self.chapter, self.page = self.chapter + 1, 0
        return not self.finished

    def back(self) -> None:
        if self.finished:
            self.chapter = len(CHAPTERS) - 1
            self.page = max(0, len(self.pages.get(self.name, [None])) - 1)
        elif self.page > 0:
            self.page -= 1
        elif self.chapter > 0:
            self.chapter -= 1
            self.page = max(0, len(self.pages.get(self.name, [None])) - 1)

    def give(self, text: str) -> bool | None:
        """Answer the guess on this page (once); None where there is nothing to answer."""
        page = self.current
        if page is None or page.guess is None or self.answer is not None:
            return None
        if page.guess.choices and not (
            text.isdigit() and 1 <= int(text) <= len(page.guess.choices)
        ):
            return None
        right = page.guess.is_right(text)
        self.answers[(self.name, self.page)] = (text, right)
        return right

    @property
    def score(self) -> tuple[int, int]:
        """(right, answered)."""
        return sum(r for _, r in self.answers.values()), len(self.answers)
