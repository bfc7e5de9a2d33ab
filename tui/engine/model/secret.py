"""The API key, known in one place so no text that leaves tokenstep carries it.

:func:`collect` learns the key from every spelling the command line has for it (``--api-key K``,
``--api-key=K``; abbreviations are off in every parser, and a refused prefix such as
``--api-k K`` is learnt too, since argparse's error would quote it) and from
``$OPENAI_API_KEY``. :func:`redact` replaces it, in its plain, ``repr`` and JSON spellings, by
``***``. Every channel passes text through it: stderr (:class:`~tui.engine.model.errors.TokenstepError`
messages), argparse's errors, the app's notice line, crash files, saved sessions, traces and a
served tab's command line (the key goes to tabs through their environment).

:func:`header_problem` refuses, in one sentence that does not repeat it, a key that cannot be an
HTTP header value (a line break or other control character, a character outside Latin-1):
http.client would raise ``ValueError``/``UnicodeEncodeError`` with the key in the message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

FLAG = "--api-key"
ENV = "OPENAI_API_KEY"
MASK = "***"
# A key shorter than this is kept out of argv but not masked in text: masking "42" would
# rewrite every 42 of a trace.
MIN_MASKED = 4

_keys: set[str] = set()
_forms: list[str] = []  # every spelling of every key, longest first


def _spellings(key: str) -> set[str]:
    forms = {key, repr(key)[1:-1], json.dumps(key)[1:-1], json.dumps(key, ensure_ascii=False)[1:-1]}
    forms.add(" ".join(key.split()))  # a quoted message has its whitespace collapsed
    for codec, errors in (("utf-8", "surrogateescape"), ("latin-1", "strict")):
        try:  # b'...' in an exception's message
            forms.add(repr(key.encode(codec, errors))[2:-1])
        except UnicodeEncodeError:
            pass
    return {f for f in forms if f.strip()}


def add(key: str | None) -> None:
    """Know ``key`` as a secret from now on (None or blank: nothing)."""
    if not key or len(key.strip()) < MIN_MASKED or key in _keys:
        return
    _keys.add(key)
    forms = set(_forms)
    for k in _keys:
        forms |= _spellings(k)
        forms |= {f"Bearer {f}" for f in _spellings(k)}
    _forms[:] = sorted(forms, key=len, reverse=True)


def _is_key_flag(arg: str) -> bool:
    """``--api-key`` or a prefix of it longer than ``--api`` (which is another flag)."""
    return len(arg) > len("--api") and FLAG.startswith(arg)


def collect(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> None:
    """Learn the key from ``argv`` (every spelling of the option) and the environment."""
    args = list(argv)
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if eq and _is_key_flag(flag):
            add(value)
        elif _is_key_flag(a) and i + 1 < len(args):
            add(args[i + 1])
    add((os.environ if environ is None else environ).get(ENV))


def known() -> bool:
    return bool(_keys)


def redact(text: str) -> str:
    """``text`` with every known key (and its ``Bearer`` form) replaced by ``***``."""
    if not _forms or not text:
        return text
    for form in _forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


def without_key(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """``argv`` without ``--api-key K`` / ``--api-key=K`` and the key it gave (a command line
    is visible to every user of the machine, in ``ps``)."""
    out: list[str] = []
    key: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        flag, eq, value = a.partition("=")
        if eq and _is_key_flag(flag):
            key = value
        elif _is_key_flag(a) and i + 1 < len(args):
            key = args[i + 1]
            i += 1
        else:
            out.append(a)
        i += 1
    return out, key


def header_problem(key: str) -> str | None:
    """The sentence that refuses a key no HTTP header can carry, without repeating it; None
    for a key that can be sent."""
    if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in key):
        return (
            "the API key (--api-key or $OPENAI_API_KEY) holds a line break or another control "
            "character, which an HTTP header cannot carry; give the key alone."
        )
    try:
        key.encode("latin-1")
    except UnicodeEncodeError as exc:
        return (
            "the API key (--api-key or $OPENAI_API_KEY) holds a character outside Latin-1 (at "
            f"character {exc.start + 1} of {len(key)}), which an HTTP header cannot carry."
        )
    return None


def forget() -> None:
    """Forget every key (for tests that run several commands in one process)."""
    _keys.clear()
    _forms.clear()
