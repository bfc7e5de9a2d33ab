"""Incremental line wrapping (tui/widgets/flow.py) against wrapping from scratch.

A pure unit test: no model, no app. The oracle is the same greedy wrap run on the whole list;
the incremental path must give identical lines after appends, truncations and edits."""

from __future__ import annotations

import random

import pytest
from rich.segment import Segment

from tui.widgets.flow import Atom, FlowLines, changed_from


def _atoms(words: list[str], trim: bool = False) -> list[Atom]:
    return [
        Atom((Segment(w.rstrip("\n")),), len(w.rstrip("\n")), w.endswith("\n"), trim=trim)
        for w in words
    ]


def _text(flow: FlowLines) -> list[str]:
    return ["".join(s.text for s in line) for line in flow.lines]


def _fresh(words: list[str], width: int, trim: bool = False) -> list[str]:
    f = FlowLines()
    f.update(_atoms(words, trim), 0, width)
    return _text(f)


def test_wrap_rules():
    f = FlowLines()
    f.update(_atoms(["ab", "cd", "ef\n", "ghijklmnop", "q"]), 0, 5)
    # greedy fill, a break after "ef", an atom wider than the line is cut into full lines
    assert _text(f) == ["abcd", "ef", "ghijk", "lmnop", "q"]
    assert "".join(_text(f)) == "abcdefghijklmnopq"  # nothing lost or doubled


def test_changed_from():
    assert changed_from((1, 2, 3), (1, 2, 3, 4)) == 3
    assert changed_from((1, 2, 3), (1, 2)) == 2
    assert changed_from((1, 2, 3, 4, 5), (1, 2, 9, 4, 5)) == 2
    assert changed_from((), (1,)) == 0


@pytest.mark.parametrize("trim", [False, True])
def test_incremental_equals_fresh_wrap(trim):
    rng = random.Random(1)
    for _ in range(1500):
        width = rng.randint(1, 12)
        words = [
            " " * rng.randint(0, 2)
            + "x" * rng.randint(1, 15)
            + ("\n" if rng.random() < 0.1 else "")
            for _ in range(rng.randint(0, 30))
        ]
        flow = FlowLines()
        flow.update(_atoms(words, trim), 0, width)
        for _ in range(5):
            new = list(words)
            op = rng.random()
            if op < 0.4:
                new += ["y" * rng.randint(1, 15) for _ in range(rng.randint(1, 3))]
            elif op < 0.7 and new:
                new = new[: rng.randint(0, len(new))]
            elif new:
                new[rng.randrange(len(new))] = "z" * rng.randint(1, 15)
            flow.update(_atoms(new, trim), changed_from(tuple(words), tuple(new)), width)
            assert _text(flow) == _fresh(new, width, trim)
            words = new


def test_a_word_that_wraps_drops_its_leading_space():
    words = ["The", " days", " of", " the", " week"]
    f = FlowLines()
    f.update([Atom((Segment(w),), len(w), trim=True) for w in words], 0, 9)
    assert _text(f) == ["The days", "of the", "week"]  # no line starts with a space
    chips = FlowLines()  # chips keep their cells: no trimming unless asked
    chips.update(_atoms(words), 0, 9)
    assert _text(chips) == ["The days", " of the", " week"]
