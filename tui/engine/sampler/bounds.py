"""The bounds of what a sampler setting may ask of llama.cpp, each refused in one sentence
naming the setting (shared by the flags, a resume file and the app's ``:`` line).

llama.cpp takes counts as ``int32_t`` and builds structures as large as it is asked for: a
penalty window is a ring buffer of that many tokens, DRY scans the vocabulary once per
sequence breaker, and a grammar is checked against every token at every step.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from ..model.errors import TokenstepError

INT32_MAX = 2**31 - 1  # llama.cpp takes every count as an int32_t; ctypes cuts a larger one
# A penalty window is a ring buffer of that many tokens: --dry-penalty-last-n 99999999999
# (cut to 1,215,752,191 by ctypes) allocated 9.5 GB in 27 s. No window sees more than the
# context, and no context is larger than this (EngineConfig refuses a larger -c).
MAX_WINDOW = 1 << 20
MAX_BREAKERS = 64  # llama.cpp's DRY init scans the vocabulary per breaker: 64 took 1.3 s here
# A GBNF grammar file of 1.3 MB (120,000 alternatives) took 18 s to parse and 63 s a token.
MAX_GRAMMAR_BYTES = 128 << 10
MAX_GRAMMAR_RULES = 4096
MAX_LOGIT_BIAS = 1 << 18  # -l pairs: more than the largest vocabularies (256,000) have tokens


def check_grammar_size(text: str, what: str) -> None:
    """What a grammar may cost llama.cpp's parser: its size and its rules."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise TokenstepError(
            f"{what} is {size:,} bytes; tokenstep takes grammars of at most "
            f"{MAX_GRAMMAR_BYTES:,} bytes (llama.cpp checks every rule at every step)."
        )
    rules = len(_RULE.findall(text))
    if rules > MAX_GRAMMAR_RULES:
        raise TokenstepError(
            f"{what} has {rules:,} rules; tokenstep takes grammars of at most "
            f"{MAX_GRAMMAR_RULES:,}."
        )


_RULE = re.compile(r"^[ \t]*[A-Za-z0-9_-]+[ \t]*::=", re.MULTILINE)


def need_utf8(text: str, what: str) -> None:
    """llama.cpp takes text as UTF-8 bytes; a lone surrogate (``\\udcff``, what Python makes
    of the byte 0xff in a command-line argument) has no UTF-8 form."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        ch = ord(text[e.start])
        raw = f"the byte {ch - 0xDC00:#04x}" if 0xDC80 <= ch <= 0xDCFF else f"U+{ch:04X}"
        raise TokenstepError(
            f"{what} is not UTF-8 text ({raw} at character {e.start} has no UTF-8 form)."
        ) from None


def check_sizes(self: Any, n: Callable[[str], str]) -> None:
    """A :class:`SamplerSettings`' counts llama.cpp takes as int32, and the lists and text it
    builds a structure from."""
    for f in fields(self):
        v = getattr(self, f.name)
        if str(f.type) == "int" and abs(v) > INT32_MAX and f.name != "seed":
            cut = (v + 2**31) % 2**32 - 2**31
            raise TokenstepError(
                f"{n(f.name)} {v} does not fit llama.cpp's 32-bit int "
                f"(at most {INT32_MAX}; it would get {cut})."
            )
    for key in ("repeat_last_n", "dry_penalty_last_n"):
        v = getattr(self, key)
        if v > MAX_WINDOW:
            raise TokenstepError(
                f"{n(key)} {v} is longer than any context tokenstep runs "
                f"(at most {MAX_WINDOW} tokens): use -1 for the whole context."
            )
    breakers = self.dry_sequence_breakers
    if len(breakers) > MAX_BREAKERS:
        raise TokenstepError(
            f"{n('dry_sequence_breakers')}: {len(breakers)} breakers, at most {MAX_BREAKERS} "
            "(llama.cpp's DRY scans the whole vocabulary for each)."
        )
    for b in breakers:
        need_utf8(b, n("dry_sequence_breakers"))
    if len(self.logit_bias) > MAX_LOGIT_BIAS:
        raise TokenstepError(
            f"{n('logit_bias')}: {len(self.logit_bias)} biases, at most {MAX_LOGIT_BIAS}."
        )
    need_utf8(self.grammar, n("grammar"))
    check_grammar_size(self.grammar, n("grammar"))
