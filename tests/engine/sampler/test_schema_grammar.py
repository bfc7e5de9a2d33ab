"""``-j/--json-schema`` constrains as llama.cpp constrains (issue 31): the grammar tokenstep
makes of a schema is, character for character, the one llama-server makes of it (read back
from the ``generation_settings.grammar`` of a ``/completion`` asked with ``json_schema``), and
an integer's bounds hold: llama.cpp's own grammar sampler accepts exactly the integers inside
them, and replies sampled at temperature 1 over many seeds stay inside them.

llama-cpp-python's older Python converter, used before, wrote any integer of up to 16 digits for
``{"type": "integer", "minimum": 0, "maximum": 150}``; a sampled reply held 2200000000.
"""

from __future__ import annotations

import json
import re
import urllib.error

import llama_cpp
import pytest

from tests.support.llama_server import llama_server  # noqa: F401  (the module's server)
from tui.engine import SamplerSettings
from tui.engine.model.errors import TokenstepError
from tui.engine.sampler.grammar import GrammarState, schema_to_gbnf

AGE = {
    "type": "object",
    "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 150}},
    "required": ["age"],
    "additionalProperties": False,
}

SCHEMAS = {
    "age": AGE,
    "exclusive": {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 1000},
    "min-only": {"type": "integer", "minimum": 12},
    "min-negative": {"type": "integer", "minimum": -7},
    "min-large": {"type": "integer", "minimum": 3456},
    "max-only": {"type": "integer", "maximum": 99},
    "max-negative": {"type": "integer", "maximum": -3},
    "both-negative": {"type": "integer", "minimum": -120, "maximum": -15},
    "fractional": {"type": "integer", "minimum": 1.5, "maximum": 20.7},
    "wide": {"type": "integer", "minimum": -1000000, "maximum": 9876543210},
    "pattern": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}(x|y)?$"},
    "pattern-dot": {"type": "string", "pattern": '^a.b*(?:cd)+"\\.$'},
    "pattern-unsupported": {"type": "string", "pattern": "^\\d+$"},
    "enum": {"enum": ["red", "green", 3, None, {"a": [1, 2]}, "é\n"]},
    "const": {"const": "fixed"},
    "ref": {
        "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"$ref": "#/$defs/pt"}},
        "required": ["a"],
    },
    "ref-recursive": {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
            }
        },
        "$ref": "#/$defs/node",
    },
    "items-bounded": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 5},
    "items-min": {"type": "array", "minItems": 1},
    "items-max": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1},
    "tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}]},
    "strings": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 12},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            'odd "key"': {"type": ["string", "null"]},
        },
        "required": ["name"],
    },
    "alternatives": {"oneOf": [{"type": "integer", "maximum": 5}, {"type": "boolean"}]},
    "all-of": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}},
            {"anyOf": [{"type": "object", "properties": {"b": {"type": "string"}}}]},
        ]
    },
    "additional": {
        "type": "object",
        "properties": {"and": {"type": "number"}, "also": {"type": "number"}},
        "additionalProperties": {"type": "integer", "minimum": 1},
    },
    "any-object": {"type": "object"},
    "digits-9": {"type": "integer", "minimum": 9},
    "digits-10": {"type": "integer", "minimum": 10},
    "digits-big": {"type": "integer", "minimum": -999999999999, "maximum": 123456789012345},
    "exclusive-fractional": {"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 7.5},
    "type-list": {"type": ["integer", "string"], "minimum": 3},
    "values": {"enum": [1.5, 1e20, True, "a\u0001b", "é"]},
    "all-of-enums": {"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]},
    "pattern-groups": {"type": "string", "pattern": "^(a|b(c|d)*)+[x-z]{2,}e?f{3}\\\\\\.\\x41$"},
    "reserved-names": {
        "type": "object",
        "properties": {
            "string": {"type": "string"},
            "root": {"type": "number"},
            "char": {"type": "integer", "minimum": 1},
        },
    },
    "same-names": {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 1},
            "b": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 2}}},
        },
    },
    "non-ascii-key": {
        "type": "object",
        "properties": {"ключ": {"type": "string"}, "a-b_c": {"const": [1, {"k": None}]}},
        "required": ["ключ"],
    },
}


def server_grammar(server, schema: dict) -> str:  # noqa: ANN001
    """The grammar llama-server built from ``schema`` for one request (llama.cpp's
    ``json_schema_to_grammar``), as its reply's ``generation_settings`` reports it."""
    body = {"prompt": "x", "n_predict": 1, "json_schema": schema, "temperature": 0}
    return str(server.post("/completion", body)["generation_settings"]["grammar"])


def test_every_grammar_equals_llama_servers(llama_server):  # noqa: F811
    differ = {}
    for name, schema in SCHEMAS.items():
        ours, theirs = schema_to_gbnf(json.dumps(schema)), server_grammar(llama_server, schema)
        if ours != theirs:
            differ[name] = (ours, theirs)
    assert differ == {}


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        ({"type": "string", "pattern": "^(ab$"}, "Invalid pattern ^(ab$: unbalanced parentheses"),
        ({"type": "array", "prefixItems": [], "items": 3}, "at #/items: schema must be an object"),
        ({"$ref": "#/$defs/none"}, "cannot resolve $ref #/$defs/none, $defs not found"),
    ],
)
def test_a_schema_llama_server_refuses_is_refused_for_its_reason(llama_server, schema, reason):  # noqa: F811
    with pytest.raises(TokenstepError) as info:
        schema_to_gbnf(json.dumps(schema))
    said = str(info.value)
    assert said.startswith("-j/--json-schema could not be turned into a grammar (") and reason in said
    with pytest.raises(urllib.error.HTTPError) as refused:
        server_grammar(llama_server, schema)
    assert refused.value.code == 400 and reason in refused.value.read().decode()


def accepts(vocab, gbnf: str, text: str) -> bool:  # noqa: ANN001
    """llama.cpp's grammar sampler takes ``text``'s tokens one by one and then allows the end
    of generation (the grammar is complete)."""
    state = GrammarState(vocab)
    buf = (llama_cpp.llama_token * (len(text) + 8))()
    raw = text.encode()
    n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, len(buf), False, False)
    assert n >= 0
    try:
        state.sync(gbnf, list(buf[:n]))
    except TokenstepError:
        return False
    finally:
        ok_end = state.smpl is not None and state.allows(llama_cpp.llama_vocab_eos(vocab))
        state.free()
    return ok_end


@pytest.mark.parametrize(
    ("schema", "lo", "hi"),
    [
        ({"type": "integer", "minimum": 0, "maximum": 150}, 0, 150),
        ({"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 120}, -4, 119),
        ({"type": "integer", "minimum": -120, "maximum": -15}, -120, -15),
        ({"type": "integer", "minimum": 37}, 37, None),
        ({"type": "integer", "maximum": -3}, None, -3),
    ],
)
def test_llama_cpps_grammar_sampler_takes_exactly_the_integers_in_bounds(model, schema, lo, hi):
    gbnf = schema_to_gbnf(json.dumps(schema))
    for v in range(-400, 401):
        inside = (lo is None or v >= lo) and (hi is None or v <= hi)
        assert accepts(model.vocab, gbnf, str(v)) == inside, (v, gbnf)
    assert not accepts(model.vocab, gbnf, "007")  # JSON has no leading zeros
    if hi is not None:
        assert not accepts(model.vocab, gbnf, "2200000000")


PROMPT = "Reply with a JSON object giving a person's age:"


def test_sampled_replies_keep_the_bounds_over_many_seeds(make_engine):
    gbnf = schema_to_gbnf(json.dumps(AGE))
    complete = 0
    for seed in range(24):
        eng = make_engine(SamplerSettings(temp=1.5, seed=seed, grammar=gbnf))
        eng.prefill(eng.vocab.tokenize(PROMPT, add_special=True))
        out = b""
        ended = False
        for _ in range(48):
            sampled = eng.sample()
            if sampled.eog:
                ended = True
                break
            out += eng.vocab.piece(sampled.token)
            eng.feed(sampled.token)
        text = out.decode("utf-8", "replace")
        m = re.search(r'"age"\s*:\s*(-?\d+)(?=\D)', text)
        if m:  # a whole number was written: inside the bounds
            assert 0 <= int(m.group(1)) <= 150, (seed, text)
        if ended:
            complete += 1
            assert 0 <= json.loads(text)["age"] <= 150, (seed, text)
        eng.close()  # make_engine closes it again at the end: a no-op
    assert complete > 0  # the grammar lets a reply end (each ended one was checked)
