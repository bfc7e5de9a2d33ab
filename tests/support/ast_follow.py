"""Following a handed object through a function's local names, for the tests that read the
source (ownership, parts)."""

from __future__ import annotations

import ast
from collections.abc import Callable

Is = Callable[[ast.expr, set[str]], bool]


def bound_names(fn: ast.AST, names: set[str], is_handle: Is) -> set[str]:
    """``names`` and the local names bound to a value ``is_handle`` accepts (``eng = w.engine``;
    ``s, eng = w.state, w.engine``; ``x = engine``)."""
    names = set(names)
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            t, v = node.targets[0], node.value
            pairs = (
                zip(t.elts, v.elts, strict=False)
                if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple)
                else [(t, v)]
            )
            for name, value in pairs:
                if isinstance(name, ast.Name) and is_handle(value, names):
                    names.add(name.id)
    return names
