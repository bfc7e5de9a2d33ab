"""Incremental line wrapping (tui/widgets/flow.py) against wrapping from scratch.

A pure unit test: no model, no app. The oracle is the same greedy wrap run on the whole list;
the incremental path must give identical lines after appends, truncations and edits."""

from __future__ import annotations

import random

from rich.segment import Segment

from tui.widgets.flow import Atom, FlowLines, changed_from


def _atoms(words: list[str]) -> list[Atom]:
    return [Atom((Segment(w.rstrip("\n")),), len(w.rstrip("\n")), w.endswith("\n")) for w in words]


def _text(flow: FlowLines) -> list[str]:
    return ["".join(s.text for s in line) for line in flow.lines]


def _fresh(words: list[str], width: int) -> list[str]:
    f = FlowLines()
    f.update(_atoms(words), 0, width)
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


def test_incremental_equals_fresh_wrap():
    rng = random.Random(1)
    for _ in range(1500):
        width = rng.randint(1, 12)
        words = [
            "x" * rng.randint(1, 15) + ("\n" if rng.random() < 0.1 else "")
            for _ in range(rng.randint(0, 30))
        ]
        flow = FlowLines()
        flow.update(_atoms(words), 0, width)
        for _ in range(5):
            new = list(words)
            op = rng.random()
            if op < 0.4:
                new += ["y" * rng.randint(1, 15) for _ in range(rng.randint(1, 3))]
            elif op < 0.7 and new:
                new = new[: rng.randint(0, len(new))]
            elif new:
                new[rng.randrange(len(new))] = "z" * rng.randint(1, 15)
            flow.update(_atoms(new), changed_from(tuple(words), tuple(new)), width)
            assert _text(flow) == _fresh(new, width)
            words = new
