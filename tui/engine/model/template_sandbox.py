"""The Jinja2 environment a model's chat template runs in.

A chat template is code written by whoever made the GGUF file. On top of Jinja2's immutable
sandbox: an unsafe attribute fails at once (the stock sandbox renders ``{{ ''.__class__ }}``
as nothing); operations that blow up memory or CPU in one step (``'a' * 10**10``, ``9**9**9``,
a huge ``%``/``format`` width) are refused before they run, and built values stay under a
size limit; the render has a budget of its thread's CPU time (so a loaded machine stops the same
templates at the same point), its output a size limit (``MAX_OUTPUT``: a
10^5 × 10^5 loop of literal text reached 955 MB within the budget, as literal output checks no
clock), and ``range`` a count. Defence in depth for one process, not a jail.
"""

from __future__ import annotations

import functools
import re
import string
import time
from collections.abc import Callable, Iterable
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError, safe_range

MAX_LEN = 16 * 2**20  # characters in one string, items in one list
MAX_WIDTH = 100_000  # a number a template passes as a width, count or repeat
MAX_INT_BITS = 4096
BUDGET_S = 5.0  # CPU seconds of the rendering thread (time.thread_time)
MAX_OUTPUT = MAX_LEN  # characters one render (or one {% set %} block) may produce
MAX_RANGE_ITEMS = 1_000_000  # items of every range() of one render together
_CHUNK = 4096  # output pieces joined between two checks

_PERCENT_SPEC = re.compile(r"%[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")


def _sized(value: Any) -> Any:
    """Refuse a value that is already too big to be part of a prompt."""
    if isinstance(value, (str, bytes, list, tuple, dict, set)) and len(value) > MAX_LEN:
        raise SecurityError(f"the template built a value of {len(value):,} items")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise SecurityError("the template built an enormous number")
    return value


def _width(n: Any) -> None:
    if isinstance(n, int) and not isinstance(n, bool) and abs(n) > MAX_WIDTH:
        raise SecurityError(f"the template asked for a size of {n:,}")


def _check_percent(fmt: str) -> None:
    for m in _PERCENT_SPEC.finditer(fmt):
        for part in m.groups():
            if part == "*":
                raise SecurityError("the template used a '*' width in % formatting")
            if part:
                _width(int(part))


def _check_format(fmt: str) -> None:
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError as exc:
        raise SecurityError(f"the template used a bad format string ({exc})") from exc
    for _literal, _name, spec, _conv in fields:
        if spec and "{" in spec:
            raise SecurityError("the template used a nested format width")
        for digits in re.findall(r"\d+", spec or ""):
            _width(int(digits))


def _repeat_size(left: Any, right: Any) -> int | None:
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int):
            return len(seq) * n
    return None


class GuardedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox with size and time limits; make one per render."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ranged = 0
        self.deadline = time.thread_time() + BUDGET_S
        self.filters = {name: self._guard_filter(f) for name, f in self.filters.items()}
        self.globals["range"] = self._range

    @property
    def deadline(self) -> float:
        return self._deadline

    @deadline.setter
    def deadline(self, when: float) -> None:
        """A render starts by setting its deadline (a compiled template is reused): the
        count of range items starts again too."""
        self._deadline, self.ranged = when, 0

    def tick(self) -> None:
        if time.thread_time() > self.deadline:
            raise SecurityError(f"the template ran for more than {BUDGET_S:.0f} seconds of CPU")

    def _range(self, *args: int) -> range:
        self.tick()
        r = safe_range(*args)
        self.ranged += len(r)
        if self.ranged > MAX_RANGE_ITEMS:
            raise SecurityError(
                f"the template looped over more than {MAX_RANGE_ITEMS:,} range() items"
            )
        return r

    def concat(self, pieces: Iterable[str]) -> str:  # type: ignore[override]
        """``"".join`` of the output, checked as it grows (Jinja joins a render's output and
        each ``{% set %}`` block's with ``environment.concat``)."""
        chunks: list[str] = []
        buf: list[str] = []
        size = 0
        for piece in pieces:
            buf.append(piece)
            size += len(piece)
            if len(buf) >= _CHUNK or size > MAX_OUTPUT:
                self.tick()
                if size > MAX_OUTPUT:
                    raise SecurityError(f"the template's output passed {MAX_OUTPUT:,} characters")
                chunks.append("".join(buf))
                buf = []
        chunks.append("".join(buf))
        return "".join(chunks)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(
            f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe"
        )

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        self.tick()
        if operator == "*":
            size = _repeat_size(left, right)
            if size is not None and size > MAX_LEN:
                raise SecurityError(f"the template tried to build {size:,} items at once")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and max(left.bit_length(), 1) * right > MAX_INT_BITS:
                raise SecurityError("the template tried to compute an enormous power")
        elif operator == "%" and isinstance(left, str):
            _check_percent(left)
        return _sized(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self.tick()
        for a in (*args, *kwargs.values()):
            _sized(a)
        return _sized(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        self.tick()
        return _sized(super().getattr(obj, attribute))

    def getitem(self, obj: Any, argument: Any) -> Any:
        self.tick()
        return _sized(super().getitem(obj, argument))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_format(value.__self__)
        return wrapped

    def _guard_filter(self, f: Callable[..., Any]) -> Callable[..., Any]:
        skip = 2 if hasattr(f, "jinja_pass_arg") else 1  # (context,) value, then the options
        name = getattr(f, "__name__", "")

        @functools.wraps(f)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            self.tick()
            for a in (*args[skip:], *kwargs.values()):
                _width(a)
                _sized(a)
            value = args[skip - 1] if len(args) >= skip else None
            if name == "do_join" and isinstance(value, (list, tuple)):
                sep = args[skip] if len(args) > skip else kwargs.get("d", "")
                total = len(value) * len(str(sep)) + sum(
                    len(v) for v in value if isinstance(v, str)
                )
                if total > MAX_LEN:
                    raise SecurityError(f"the template tried to join {total:,} characters")
            elif name == "do_replace" and isinstance(value, str) and len(args) > skip + 1:
                old, new = str(args[skip]), str(args[skip + 1])
                grow = (value.count(old) if old else len(value) + 1) * len(new)
                if grow > MAX_LEN:
                    raise SecurityError("the template tried to grow a string past the limit")
            elif name == "do_format" and isinstance(value, str):
                _check_percent(value)
            return _sized(f(*args, **kwargs))

        return guarded
