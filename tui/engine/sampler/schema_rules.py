"""The GBNF pieces llama.cpp's JSON-schema converter builds from (``common/json-schema-to-grammar.cpp``):
the built-in rules, literals, repetitions, and integer ranges spelled as digit rules.

An integer range is what llama-cpp-python's older Python converter lacks: for
``{"type": "integer", "minimum": 0, "maximum": 150}`` llama.cpp writes
``([0-9] | [1-9] [0-9] | "1" ([0-4] [0-9] | [5] "0"))``, where that converter allowed any integer
of up to 16 digits (a sampled reply held 2200000000).
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema_tree import INT64_MAX, INT64_MIN

INT_MAX = 2**31 - 1  # C's INT_MAX: "no maximum" for repetitions


@dataclass(frozen=True)
class Builtin:
    content: str
    deps: tuple[str, ...] = ()


SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

PRIMITIVE_RULES = {
    "boolean": Builtin('("true" | "false")'),
    "decimal-part": Builtin("[0-9]{1,16}"),
    "integral-part": Builtin("[0] | [1-9] [0-9]{0,15}"),
    "number": Builtin(
        '("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
        ("integral-part", "decimal-part"),
    ),
    "integer": Builtin('("-"? integral-part)', ("integral-part",)),
    "value": Builtin(
        "object | array | string | number | boolean | null",
        ("object", "array", "string", "number", "boolean", "null"),
    ),
    "object": Builtin(
        '"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
        ("string", "value"),
    ),
    "array": Builtin('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": Builtin(
        '"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
        '[0-9a-fA-F]{12} "\\""'
    ),
    "char": Builtin('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})'),
    "string": Builtin('"\\"" char* "\\""', ("char",)),
    "null": Builtin('"null"'),
}

STRING_FORMAT_RULES = {
    "date": Builtin(
        '[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )'
    ),
    "time": Builtin(
        '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
        '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
    ),
    "date-time": Builtin('date "T" time', ("date", "time")),
    "date-string": Builtin('"\\"" date "\\""', ("date",)),
    "time-string": Builtin('"\\"" time "\\""', ("time",)),
    "date-time-string": Builtin('"\\"" date-time "\\""', ("date-time",)),
}

RESERVED_NAMES = frozenset({"root", *PRIMITIVE_RULES, *STRING_FORMAT_RULES})

_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}


def format_literal(text: str) -> str:
    """A GBNF string literal (llama.cpp escapes CR, LF, quote and backslash)."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c, c) for c in text) + '"'


_HEX = frozenset("0123456789abcdefABCDEF")


def escape_length(pattern: str, pos: int) -> int:
    """How long the escape at ``pos`` is, if llama.cpp's grammar parser reads it (0: not)."""
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    c = pattern[pos + 1]
    if c in 'trn\\"[]-':
        return 2
    n_hex = {"x": 2, "u": 4, "U": 8}.get(c)
    if n_hex is None or pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in _HEX for h in pattern[pos + 2 : pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


def repetition(item: str, min_items: int, max_items: int, separator: str = "") -> str:
    """``item`` repeated min..max times (max ``INT_MAX``: no maximum), ``separator`` between."""
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item + "?"
    if not separator:
        if min_items == 1 and not has_max:
            return item + "+"
        if min_items == 0 and not has_max:
            return item + "*"
        return f"{item}{{{min_items},{max_items if has_max else ''}}}"
    rest = repetition(
        f"({separator} {item})",
        0 if min_items == 0 else min_items - 1,
        max_items - 1 if has_max else max_items,
    )
    result = f"{item} {rest}"
    return f"({result})?" if min_items == 0 else result


def int_range(min_value: int = INT64_MIN, max_value: int = INT64_MAX) -> str:
    """The integers from ``min_value`` to ``max_value`` as digit rules (an end at the int64
    limit is open), as llama.cpp's ``build_min_max_int`` writes them."""
    out: list[str] = []
    _min_max_int(min_value, max_value, out, 16, True)
    return "".join(out)


def _digit_range(out: list[str], lo: str, hi: str) -> None:
    out.append(f"[{lo}]" if lo == hi else f"[{lo}-{hi}]")


def _more_digits(out: list[str], lo: int, hi: int) -> None:
    out.append("[0-9]")
    if lo == hi == 1:
        return
    out.append("{" + str(lo))
    if hi != lo:
        out.append("," + (str(hi) if hi != INT_MAX else ""))
    out.append("}")


def _uniform_range(out: list[str], lo: str, hi: str) -> None:
    """Every number from ``lo`` to ``hi``, two digit strings of one length."""
    i = 0
    while i < len(lo) and i < len(hi) and lo[i] == hi[i]:
        i += 1
    if i > 0:
        out.append(f'"{lo[:i]}"')
    if i >= len(lo) or i >= len(hi):
        return
    if i > 0:
        out.append(" ")
    sub_len = len(lo) - i - 1
    if sub_len <= 0:
        out.append(f"[{lo[i]}-{hi[i]}]")
        return
    lo_sub, hi_sub = lo[i + 1 :], hi[i + 1 :]
    zeros, nines = "0" * sub_len, "9" * sub_len
    to_reached = False
    out.append("(")
    if lo_sub == zeros:
        _digit_range(out, lo[i], chr(ord(hi[i]) - 1))
        out.append(" ")
        _more_digits(out, sub_len, sub_len)
    else:
        out.append(f"[{lo[i]}] (")
        _uniform_range(out, lo_sub, nines)
        out.append(")")
        if ord(lo[i]) < ord(hi[i]) - 1:
            out.append(" | ")
            if hi_sub == nines:
                _digit_range(out, chr(ord(lo[i]) + 1), hi[i])
                to_reached = True
            else:
                _digit_range(out, chr(ord(lo[i]) + 1), chr(ord(hi[i]) - 1))
            out.append(" ")
            _more_digits(out, sub_len, sub_len)
    if not to_reached:
        out.append(" | ")
        _digit_range(out, hi[i], hi[i])
        out.append(" ")
        _uniform_range(out, zeros, hi_sub)
    out.append(")")


def _min_max_int(lo: int, hi: int, out: list[str], decimals_left: int, top: bool) -> None:
    has_min, has_max = lo != INT64_MIN, hi != INT64_MAX
    if has_min and has_max:
        if lo < 0 and hi < 0:
            out.append('"-" (')
            _min_max_int(-hi, -lo, out, decimals_left, True)
            out.append(")")
            return
        if lo < 0:
            out.append('"-" (')
            _min_max_int(0, -lo, out, decimals_left, True)
            out.append(") | ")
            lo = 0
        lo_s, hi_s = str(lo), str(hi)
        for digits in range(len(lo_s), len(hi_s)):
            _uniform_range(out, lo_s, "9" * digits)
            lo_s = "1" + "0" * digits
            out.append(" | ")
        _uniform_range(out, lo_s, hi_s)
        return
    less = max(decimals_left - 1, 1)
    if has_min:
        if lo < 0:
            out.append('"-" (')
            _min_max_int(INT64_MIN, -lo, out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            _more_digits(out, 0, decimals_left - 1)
        elif lo == 0:
            if top:
                out.append("[0] | [1-9] ")
                _more_digits(out, 0, less)
            else:
                _more_digits(out, 1, decimals_left)
        elif lo <= 9:
            c, start = str(lo), "1" if top else "0"
            if c > start:
                _digit_range(out, start, chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, 1, less)
                out.append(" | ")
            _digit_range(out, c, "9")
            out.append(" ")
            _more_digits(out, 0, less)
        else:
            lo_s = str(lo)
            c = lo_s[0]
            if c > "1":
                _digit_range(out, "1" if top else "0", chr(ord(c) - 1))
                out.append(" ")
                _more_digits(out, len(lo_s), less)
                out.append(" | ")
            _digit_range(out, c, c)
            out.append(" (")
            _min_max_int(int(lo_s[1:]), INT64_MAX, out, less, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                _digit_range(out, chr(ord(c) + 1), "9")
                out.append(" ")
                _more_digits(out, len(lo_s) - 1, less)
        return
    if has_max:
        if hi >= 0:
            if top:
                out.append('"-" [1-9] ')
                _more_digits(out, 0, less)
                out.append(" | ")
            _min_max_int(0, hi, out, decimals_left, True)
        else:
            out.append('"-" (')
            _min_max_int(-hi, INT64_MAX, out, decimals_left, False)
            out.append(")")
        return
    raise ValueError("At least one of min_value or max_value must be set")
