"""A ``pattern`` of a JSON schema as GBNF, read as llama.cpp reads it (``_pattern_to_rule`` in
``common/json-schema-to-grammar.cpp``): literals, ``.``, groups (``(?:`` too), alternatives,
character classes, ``* + ?`` and ``{m,n}``; escapes only where llama.cpp's grammar parser reads
them. Anything else is :class:`Unsupported` (the converter then accepts any string, as
llama.cpp does) or :class:`Invalid` (an error).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .schema_rules import INT_MAX, escape_length, repetition

_NON_LITERAL = frozenset("|.()[]{}*+?^$")
_ESCAPED_IN_REGEX_ONLY = frozenset("^$.[]()|{}*+?")
_MAX_PATTERN_DEPTH = 100
_STOI = re.compile(r"\s*[+-]?\d+")


class Unsupported(Exception):
    """A valid regular expression with no grammar equivalent."""


class Invalid(Exception):
    """Not a regular expression."""


def _stoi(text: str) -> int:
    m = _STOI.match(text)
    if m is None or abs(int(m.group(0))) > INT_MAX:
        raise Unsupported("invalid number in curly brackets")
    return int(m.group(0))


def pattern_rule(add_rule: Callable[[str, str], str], dotall: bool, text: str, name: str) -> str:
    """The rule for ``text`` (a pattern without its ^ and $); sub-rules go through ``add_rule``."""
    p = _Pattern(add_rule, dotall, text, name)
    rule = _to_rule(p.transform())
    if p.depth != 0:
        raise Invalid("unbalanced parentheses")
    return rule


def _to_rule(item: tuple[str, bool]) -> str:
    text, literal = item
    return f'"{text}"' if literal else text


class _Pattern:
    """One pass over a regular expression (without its ^ and $), llama.cpp's ``transform``."""

    def __init__(
        self, add_rule: Callable[[str, str], str], dotall: bool, text: str, name: str
    ) -> None:
        self.add_rule, self.dotall, self.text, self.name = add_rule, dotall, text, name
        self.i, self.depth = 0, 0
        self.sub_ids: dict[str, str] = {}

    def dot(self) -> str:
        rule = "[\\U00000000-\\U0010FFFF]" if self.dotall else "[^\\x0A\\x0D]"
        return self.add_rule("dot", rule)

    def transform(self) -> tuple[str, bool]:
        seq: list[tuple[str, bool]] = []
        s, n = self.text, len(self.text)
        while self.i < n:
            c = s[self.i]
            if c == ".":
                seq.append((self.dot(), False))
                self.i += 1
            elif c == "(":
                self.i += 1
                if self.i < n and s[self.i] == "?":
                    if self.i + 1 < n and s[self.i + 1] == ":":
                        self.i += 2
                    else:
                        raise Unsupported("unsupported group syntax")
                self.depth += 1
                if self.depth > _MAX_PATTERN_DEPTH:
                    raise Unsupported("pattern nesting too deep")
                seq.append((f"({_to_rule(self.transform())})", False))
            elif c == ")":
                self.i += 1
                if self.depth == 0:
                    raise Invalid("unbalanced parentheses")
                self.depth -= 1
                return _join(seq)
            elif c in "^$":
                raise Unsupported("anchor inside the pattern")
            elif c == "[":
                seq.append((self.char_class(), False))
            elif c == "|":
                seq.append(("|", False))
                self.i += 1
            elif c in "*+?":
                if not seq:
                    raise Invalid("nothing to repeat")
                seq[-1] = (_to_rule(seq[-1]) + c, False)
                self.i += 1
            elif c == "{":
                self.braces(seq)
            else:
                seq.append((self.literal(c), True))
        return _join(seq)

    def char_class(self) -> str:
        s, n = self.text, len(self.text)
        out = "["
        self.i += 1
        while self.i < n and s[self.i] != "]":
            if s[self.i] == "\\":
                k = escape_length(s, self.i)
                if k == 0:
                    raise Unsupported(
                        f"unsupported escape in character class: {s[self.i : self.i + 2]}"
                    )
                out += s[self.i : self.i + k]
                self.i += k
            else:
                out += s[self.i]
                self.i += 1
        if self.i >= n:
            raise Invalid("unterminated character class")
        self.i += 1
        return out + "]"

    def braces(self, seq: list[tuple[str, bool]]) -> None:
        s = self.text
        start = self.i + 1
        end = s.find("}", start)
        if end < 0:
            raise Unsupported("unterminated curly brackets")
        self.i = end + 1
        nums = s[start:end].split(",")
        if len(nums) not in (1, 2):
            raise Unsupported("wrong number of values in curly brackets")
        if len(nums) == 1:
            lo = hi = _stoi(nums[0])
        else:
            lo = _stoi(nums[0]) if nums[0] else 0
            hi = _stoi(nums[1]) if nums[1] else INT_MAX
        if not seq:
            raise Invalid("nothing to repeat")
        sub, literal = seq[-1]
        if not literal:
            if sub not in self.sub_ids:
                self.sub_ids[sub] = ""  # counted before the rule is named, as in llama.cpp
                self.sub_ids[sub] = self.add_rule(f"{self.name}-{len(self.sub_ids)}", sub)
            sub = self.sub_ids[sub]
        seq[-1] = (repetition(f'"{sub}"' if literal else sub, lo, hi), False)

    def literal(self, c: str) -> str:
        s, n = self.text, len(self.text)
        out = ""
        while self.i < n:
            ch = s[self.i]
            if ch == "\\":
                if self.i == n - 1:
                    raise Invalid("trailing backslash")
                nxt = s[self.i + 1]
                if nxt in _ESCAPED_IN_REGEX_ONLY:
                    out += nxt
                    self.i += 2
                else:
                    k = escape_length(s, self.i)
                    if k == 0:
                        raise Unsupported(f"unsupported escape: {s[self.i : self.i + 2]}")
                    out += s[self.i : self.i + k]
                    self.i += k
            elif ch == '"':
                out += '\\"'
                self.i += 1
            elif ch not in _NON_LITERAL and (
                self.i == n - 1
                or not out
                or s[self.i + 1] == "."
                or s[self.i + 1] not in _NON_LITERAL
            ):
                out += ch
                self.i += 1
            else:
                break
        if not out:  # nothing was read: a stray ']' or '}'
            raise Unsupported(f"unsupported character: {c}")
        return out


def _join(seq: list[tuple[str, bool]]) -> tuple[str, bool]:
    """The sequence as one rule, runs of literals merged into one."""
    parts: list[tuple[str, bool]] = []
    for text, literal in seq:
        if literal and parts and parts[-1][1]:
            parts[-1] = (parts[-1][0] + text, True)
        else:
            parts.append((text, literal))
    return " ".join(_to_rule(p) for p in parts), False
