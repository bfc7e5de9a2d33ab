"""Snapshots of one page per chapter of the tour, in English and in Chinese, at 80x24.

The facts come from one lab run on the bundled model per language. The pages chosen show
counts, token ids, bytes and structure, which are the same on every CPU; the sampler's page
shows survivors of top-p and min-p, which move with the kernels' rounding, so its numbers are
masked (``redact``). Update with ``--snapshot-update`` only after looking at the SVGs."""

from __future__ import annotations

import re

import pytest

from tui.engine import EngineConfig
from tui.tour.lab import CHAPTERS, Lab
from tui.tour.screen import TourApp, TourScreen

# the page of each chapter that is snapshotted (its index in the chapter)
PAGE = {
    "loop": 1,  # step 1: the prompt's pieces and ids
    "tokens": 0,  # a word's subword pieces
    "batch": 1,  # the guess: how many llama_decode calls
    "sampler": 1,  # the chain's stages (counts masked)
    "inside": 0,  # the causal mask as a triangle
    "exact": 0,
    "wall": 2,  # the counted table beside n(n+1)/2
    "ram": 1,  # bytes per token from the hyperparameters, beside llama.cpp's log
    "full": 0,  # --context-full stop
    "prefix": 1,  # the guess: how many tokens the second turn decodes
}
FACTS: dict[str, dict] = {}


def facts(lang: str) -> dict:
    if lang not in FACTS:
        lab = Lab(None, config=EngineConfig(n_ctx=512, n_threads=2), lang=lang)
        try:
            FACTS[lang] = {ch: lab.run(ch) for ch in CHAPTERS}
        finally:
            lab.close()
    return FACTS[lang]


def mask_numbers(text: str) -> str:
    return re.sub(r"\s*\d[\d,.]*", " #", text)


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_one_page_per_chapter(snap_compare, lang: str, chapter: str) -> None:
    redact = mask_numbers if chapter == "sampler" else None
    screen = TourScreen(lang, facts=facts(lang), redact=redact)

    async def run_before(pilot) -> None:
        screen.tour.chapter, screen.tour.page = CHAPTERS.index(chapter), PAGE[chapter]
        screen.draw()
        await pilot.pause(0.1)

    assert snap_compare(TourApp(screen), terminal_size=(80, 24), run_before=run_before)
