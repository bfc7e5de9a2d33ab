"""Docstrings of ``tui`` are short and in the present tense: what the code is and does, and
why where that is not obvious. How it came to be belongs to git. ``ast`` reads every module,
class and function docstring. Every one fits in :data:`CEILING` lines (40 ran to 15 to 33
lines); a longer lesson in numbers measured on llama.cpp would be named in
:data:`LONGER` with its length, so none grows unseen."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import tui

ROOT = Path(tui.__file__).parent
CEILING = 14  # lines of a docstring, its quotes' lines included

# Longer docstrings that teach llama.cpp with numbers measured on it: "path:name" -> lines.
LONGER: dict[str, int] = {}

# The code's history told in a docstring ("it used to", "no longer", "is now"): git's job.
HISTORY = re.compile(
    r"\b(used to|no longer|any ?more|formerly|previously|until now|(is|are|does|do) now"
    r"|now (is|are|does|do|takes|keeps|goes)|(was|were) (stuck|fixed|changed))\b",
    re.IGNORECASE,
)


@functools.cache
def docstrings() -> dict[str, str]:
    """"path:name" -> docstring, for every module, class and function of tui."""
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                if doc is not None:
                    found[f"{rel}:{getattr(node, 'name', '<module>')}"] = doc
    return found


def lines(doc: str) -> int:
    return doc.count("\n") + 1


def test_docstrings_stay_under_the_ceiling():
    docs = docstrings()
    assert len(docs) > 1000  # the scan reads the tree
    over = {k: lines(d) for k, d in docs.items() if lines(d) > LONGER.get(k, CEILING)}
    assert over == {}, "shorten these (or, for a lesson in measured numbers, name them)"


def test_the_named_longer_docstrings_exist_and_are_longer_than_the_ceiling():
    docs = docstrings()
    stale = {k for k in LONGER if k not in docs or lines(docs[k]) <= CEILING}
    assert stale == set(), "a named exception is gone or short now: drop it from LONGER"


def test_no_docstring_tells_the_code_s_history():
    told = {
        k: m.group(0) for k, d in docstrings().items() if (m := HISTORY.search(" ".join(d.split())))
    }
    assert told == {}


def test_the_history_pattern_catches_history():
    for text in ("It used to toggle", "the key is now sent", "a row no longer drawn"):
        assert HISTORY.search(text), text
    for text in ("the chain as it runs now", "the token it was sampled from"):
        assert not HISTORY.search(text), text
