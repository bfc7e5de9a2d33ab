"""Grammars: llama.cpp's own grammar sampler (``llama_sampler_init_grammar``), GBNF text or a
JSON schema turned into GBNF as llama.cpp's converter turns it (:mod:`.schema_gbnf`, the rules
``llama-server --json-schema`` uses; llama-cpp-python's older Python port drops an integer's
``minimum``/``maximum``).

The grammar sees only the tokens generated in this turn (llama-server accepts prompt tokens
with ``accept_grammar = false``). :class:`GrammarState` keeps the sampler in step with them:
a rewind resets it and feeds the kept tokens again.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import tempfile
import time
from typing import Any

import llama_cpp
import numpy as np

from ..model import llama_log
from ..model.errors import TokenstepError
from .bounds import check_grammar_size

# llama.cpp's converter writes a count as a repetition ("char{0,12}", "item (\",\" space
# item){1,4}"), and llama.cpp's grammar parser expands it into copies of the rule: it refuses a
# minimum over MAX_REPETITION_THRESHOLD (2,000) and silently drops a larger maximum (the rule
# then repeats without end). Refused here first, with the count, in one sentence; an array's
# count may be one more (its first item stands before the repetition).
MAX_REPEAT = 2000
# One application of a grammar to the whole vocabulary, in this thread's CPU time: a rule of
# 8,000 alternatives took 0.7 to 3.5 s of CPU here, 11,000 4.8 to 5.0 s, a JSON grammar under
# 0.01 s (and a step applies it at least twice). The first 1,024 tokens go first: a grammar
# far past the bound is refused from their time, without the whole vocabulary's.
MAX_APPLY_S = 0.5
_REPEATS = {"minLength": MAX_REPEAT, "maxLength": MAX_REPEAT}
_REPEATS |= {"minItems": MAX_REPEAT + 1, "maxItems": MAX_REPEAT + 1}
_BRACES = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def check_schema_cost(schema: Any) -> None:
    """The repetition counts a schema asks for, against what llama.cpp's grammar parser
    repeats, before anything is converted."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack += node
            continue
        if not isinstance(node, dict):
            continue
        stack += node.values()
        for key, most in _REPEATS.items():
            n = node.get(key)
            if isinstance(n, int | float) and not isinstance(n, bool) and n > most:
                raise TokenstepError(
                    f"-j/--json-schema asks for {key} {_count(n)}; llama.cpp's grammar parser "
                    f"repeats a rule at most {MAX_REPEAT:,} times ({key} at most {most:,})."
                )
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            for m in _BRACES.finditer(pattern):
                n = max(int(x) for x in m.groups() if x)
                if n > MAX_REPEAT:
                    raise TokenstepError(
                        f"-j/--json-schema's pattern repeats {n} times ({m.group(0)}); "
                        f"llama.cpp's grammar parser repeats a rule at most {MAX_REPEAT:,} times."
                    )


def _count(n: float) -> str:
    return f"{n:,.0f}" if n < 1e30 else f"{n:g}"


def schema_to_gbnf(schema_text: str) -> str:
    """A JSON schema (text) as GBNF, the grammar llama.cpp's own converter makes of it."""
    try:
        schema = json.loads(schema_text)
    except RecursionError:
        raise TokenstepError("-j/--json-schema nests too deeply.") from None
    except ValueError as e:
        raise TokenstepError(f"-j/--json-schema is not valid JSON ({e}).") from None
    check_schema_cost(schema)
    from .schema_gbnf import json_schema_to_grammar  # 4 modules only -j needs: not at start-up

    try:
        return json_schema_to_grammar(schema)
    except RecursionError:
        raise TokenstepError("-j/--json-schema nests too deeply.") from None
    except ValueError as e:  # llama.cpp's reason, e.g. "JSON schema error at #: ..."
        raise TokenstepError(
            f"-j/--json-schema could not be turned into a grammar ({str(e).rstrip('.')})."
        ) from None


def init_grammar(vocab: Any, text: str) -> Any:
    """llama.cpp's grammar sampler; its parser prints errors straight to stderr, so that is
    caught here and its reason put in one sentence. Without a vocabulary llama.cpp aborts
    the process (``GGML_ASSERT(grammar.vocab != nullptr)``), so that is refused first."""
    if not vocab:
        raise TokenstepError(
            "a grammar (--grammar, -j/--json-schema) needs llama.cpp's vocabulary (the text of "
            "each token), and there is none here."
        )
    check_grammar_size(text, "the grammar")
    mark = llama_log.mark()
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            smpl = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        said = tmp.read().decode("utf-8", "replace")
    if not smpl:
        raise TokenstepError(_refusal(said, llama_log.first_error(mark)))
    return smpl


def _refusal(said: str, logged: str | None) -> str:
    """Why llama.cpp refused a grammar: its parser's error (printed to stderr), or the check
    after parsing (logged: left recursion, an undefined rule, no root rule)."""
    why = next((ln for ln in said.splitlines() if ln.strip()), "")
    why = why.split("error parsing grammar:", 1)[-1].strip().rstrip(".")
    if why:
        return f"the grammar does not parse ({why})."
    logged = (logged or "").strip().rstrip(".")
    if "left recursion" in logged:
        return (
            f"the grammar is left-recursive (llama.cpp: {logged}): a rule may not begin with "
            'itself, as in root ::= root "a" | "a"; write the repetition as root ::= "a"+.'
        )
    if "does not contain" in logged:
        return 'the grammar has no root rule: llama.cpp starts from "root ::= ...".'
    return f"llama.cpp refused the grammar ({logged or 'it gave no reason'})."


def check_grammar(vocab: Any, text: str) -> None:
    """Parse ``text`` with llama.cpp and apply it once to the whole vocabulary, as the first
    step will (one sentence if it does not parse, or if that one application takes longer than
    a step may)."""
    smpl = init_grammar(vocab, text)
    try:
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        part = min(n_vocab, _SAMPLE)
        took = _apply_time(smpl, part) * n_vocab / part
        if took <= 4 * MAX_APPLY_S and part < n_vocab:
            took = _apply_time(smpl, n_vocab)
    finally:
        llama_cpp.llama_sampler_free(smpl)
    if took > MAX_APPLY_S:
        raise TokenstepError(
            f"the grammar takes about {took:.1f} s of CPU to check the vocabulary once (at most "
            f"{MAX_APPLY_S:g} s; every step does it): write it with fewer alternatives."
        )


def _apply_time(smpl: Any, n: int) -> float:
    """CPU seconds of this thread (less inflated by a busy machine than the wall clock) for
    one application of ``smpl`` to the first ``n`` token ids."""
    cand = np.zeros(n, dtype=_TOKEN_DATA)
    cand["id"] = np.arange(n)
    arr = llama_cpp.llama_token_data_array()
    arr.data = ctypes.cast(cand.ctypes.data, llama_cpp.llama_token_data_p)  # type: ignore[assignment]
    arr.size, arr.selected, arr.sorted = n, -1, False
    t0 = time.thread_time()
    llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
    return time.thread_time() - t0


_SAMPLE = 1024
_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=True)


class GrammarState:
    """One grammar sampler kept in step with the tokens generated since the prompt."""

    def __init__(self, vocab: Any) -> None:
        self.vocab = vocab
        self.text = ""
        self.smpl: Any = None
        self.seen: list[int] = []
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._arr = llama_cpp.llama_token_data_array()
        self._arr.data = ctypes.cast(self._one.ctypes.data, llama_cpp.llama_token_data_p)  # type: ignore[assignment]

    def sync(self, text: str, generated: list[int]) -> Any:
        if text != self.text:
            self.free()
            self.text = text
        if not text:
            return None
        if self.smpl is None:
            self.smpl, self.seen = init_grammar(self.vocab, text), []
        n = len(self.seen)
        if generated[:n] == self.seen:
            tail = generated[n:]
        else:
            llama_cpp.llama_sampler_reset(self.smpl)
            self.seen, tail = [], generated
        for t in tail:
            if not self.allows(t):
                self.seen = []
                llama_cpp.llama_sampler_reset(self.smpl)
                raise TokenstepError(
                    f"the text generated so far breaks the grammar at token {t}: "
                    "rewind, or turn the grammar off."
                )
            llama_cpp.llama_sampler_accept(self.smpl, t)
            self.seen.append(t)
        return self.smpl

    def allows(self, token: int) -> bool:
        """common_sampler_sample's check: the grammar applied to the one token."""
        self._one["id"], self._one["logit"], self._one["p"] = token, 1.0, 0.0
        self._arr.size, self._arr.selected, self._arr.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(self.smpl, ctypes.byref(self._arr))
        return bool(np.isfinite(self._one["logit"][0]))

    def free(self) -> None:
        if self.smpl:
            llama_cpp.llama_sampler_free(self.smpl)
        self.smpl, self.seen, self.text = None, [], ""
