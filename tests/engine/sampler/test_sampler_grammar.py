"""Issue 12: grammars and llama-cpp-python's own Llama as oracles for the chain.

- ``tokenstep trace --samplers penalties;top_k;typ_p;top_p;min_p;temperature`` gives the text
  ``Llama.create_completion`` gives with the same top-k, typical-p, top-p, min-p, temperature
  and seed (its chain, no penalties).
- ``-j SCHEMA``: the text parses with json.loads and obeys the schema, for several seeds; every
  candidate marked "grammar" is one llama.cpp's grammar sampler sets to -inf.
"""

from __future__ import annotations

import ctypes
import json

import llama_cpp
import numpy as np
import pytest
from llama_cpp import Llama

from tests.support.cli import run_cli
from tui.engine import SamplerSettings
from tui.engine.sampler.grammar import schema_to_gbnf
from tui.engine.sampler.sampling import TOKEN_DATA

PROMPT = "A short poem about the sea:"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}


def _trace(*flags: str) -> list[dict]:
    res = run_cli("trace", "-p", PROMPT, "-c", "512", *flags, timeout=300)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.decode().splitlines()]


def _text(records: list[dict]) -> str:
    b = b"".join(
        bytes.fromhex(r["sampled"]["bytes"]) for r in records if r.get("sampled") and not r["eog"]
    )
    return b.decode("utf-8", "replace")


def test_samplers_flag_equals_llama_create_completion(model_path):
    n, seed = 32, 1234
    knobs = dict(top_k=30, typical_p=0.9, top_p=0.9, min_p=0.03, temperature=0.9)
    records = _trace(
        "-n",
        str(n),
        "-s",
        str(seed),
        "--samplers",
        "penalties;top_k;typ_p;top_p;min_p;temperature",
        "--top-k",
        "30",
        "--typical",
        "0.9",
        "--top-p",
        "0.9",
        "--min-p",
        "0.03",
        "--temp",
        "0.9",
        "-fa",
        "off",
    )
    names = [s["sampler"] for s in records[0]["stages"]]
    assert names == ["top_k", "typ_p", "top_p", "min_p", "temperature"]  # penalties neutral
    llm = Llama(model_path=str(model_path), n_ctx=512, n_threads=2, flash_attn=False, verbose=False)
    try:
        out = llm.create_completion(
            PROMPT,
            max_tokens=n,
            seed=seed,
            repeat_penalty=1.0,
            **knobs,  # type: ignore[arg-type]
        )
    finally:
        llm.close()
    assert _text(records) == out["choices"][0]["text"]


def _check_schema(obj: dict) -> None:
    assert set(obj) == {"name", "age", "pets"}
    assert isinstance(obj["name"], str) and len(obj["name"]) <= 12
    assert type(obj["age"]) is int
    assert isinstance(obj["pets"], list) and len(obj["pets"]) <= 3
    assert all(p in ("cat", "dog", "fish") for p in obj["pets"])


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_json_schema_text_parses_and_obeys_the_schema(seed):
    # llama.cpp's converter lets a reply lay its JSON out over lines, indented with up to 20
    # spaces or tabs each (seed 3 took 88 tokens): room for that
    records = _trace("-n", "160", "-s", str(seed), "--temp", "1.0", "-j", json.dumps(SCHEMA))
    assert records[-1]["eog"] or records[-1]["sampled"] is not None
    obj = json.loads(_text(records))
    _check_schema(obj)
    assert any(r.get("grammar", {}).get("forbidden", 0) > 0 for r in records)


def test_grammar_marks_are_what_llama_cpps_grammar_sets_to_minus_inf(make_engine):
    gbnf = schema_to_gbnf(json.dumps(SCHEMA))
    eng = make_engine(SamplerSettings(temp=1.0, seed=9, grammar=gbnf))
    toks = eng.vocab.tokenize(PROMPT, add_special=True)
    eng.prefill(toks)
    oracle = llama_cpp.llama_sampler_init_grammar(eng.model.vocab, gbnf.encode(), b"root")
    n = eng.info.n_vocab
    buf = np.zeros(n, dtype=TOKEN_DATA)
    arr = llama_cpp.llama_token_data_array()
    arr.data = ctypes.cast(buf.ctypes.data, llama_cpp.llama_token_data_p)
    try:
        for _ in range(20):
            res = eng.preview()
            ids = list(range(n))
            marked = {t for t, cb in zip(ids, res.cut_by_many(ids), strict=True) if cb == "grammar"}
            buf["id"], buf["logit"], buf["p"] = np.arange(n), eng.logits, 0.0
            arr.size, arr.selected, arr.sorted = n, -1, False
            llama_cpp.llama_sampler_apply(oracle, ctypes.byref(arr))
            minus_inf = set(buf["id"][np.isneginf(buf["logit"])].tolist())
            assert marked == minus_inf and res.n_forbidden == len(minus_inf) > 0
            sampled = eng.sample()
            assert sampled.token not in minus_inf
            if sampled.eog:
                break
            llama_cpp.llama_sampler_accept(oracle, sampled.token)
            eng.feed(sampled.token)
    finally:
        llama_cpp.llama_sampler_free(oracle)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--samplers", "top_k;bogus"), "no sampler 'bogus'"),
        (("--sampling-seq", "kq"), "letter 'q'"),
        (("--grammar", 'root ::= "a'), "does not parse"),
        (("--grammar", 'foo ::= "a"'), "has no root rule"),
        (("-j", '{"type":'), "not valid JSON"),
        (("-l", "99999999+1"), "outside the vocabulary"),
        (("-l", "abc"), "TOKEN_ID(+/-)BIAS"),
        (("--mirostat", "3"), "--mirostat"),
        (("--dry-base", "0.5"), "--dry-base"),
        (("--typical", "1.5"), "--typical"),
        (("--xtc-probability", "-1"), "--xtc-probability"),
        (("--grammar", "root ::= x", "-j", "{}"), "only one"),
    ],
)
def test_a_bad_chain_flag_is_one_sentence(flags, needle):
    from tests.support.cli import one_sentence

    one_sentence(run_cli("trace", "-p", "Hi", "-n", "1", *flags), needle)
