"""Hostile model files: a GGUF is written by a stranger, and so are its chat template and
its metadata strings. Real model files are built here with the ``gguf`` package (the
bundled model's metadata and tensors, one field changed), and small broken headers are
written byte by byte.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tests.support.cli import ROOT, one_sentence, run_cli
from tests.support.gguf_writer import WriteGGUF, write_gguf  # noqa: F401 (fixtures)
from tui.engine import ModelError
from tui.engine.model import gguf_header
from tui.engine.model.chat_template import Message, TemplateError, render_template

# -- chat templates ------------------------------------------------------------------------

# Each one would run a command or write a file outside the sandbox (checked below).
ATTACKS = {
    "subclasses": (
        "{% for c in ''.__class__.__mro__[1].__subclasses__() %}"
        "{% if c.__name__ == 'Popen' %}{{ c(['touch', MARKER]).wait() }}{% endif %}"
        "{% endfor %}"
    ),
    "os_system": "{{ cycler.__init__.__globals__.os.system('touch ' ~ MARKER) }}",
    "open_file": "{{ self.__init__.__globals__.__builtins__.open(MARKER, 'w').write('x') }}",
    "popen": "{{ lipsum.__globals__['os'].popen('touch ' ~ MARKER).read() }}",
}


def _attack(template: str, marker: Path) -> str:
    """The template around a normal chat layout, with the marker path filled in."""
    body = template.replace("MARKER", repr(str(marker)))
    return body + "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}"


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_templates_are_real(name: str, tmp_path: Path) -> None:
    """Outside a sandbox each template does what it says: the marker file appears."""
    marker = tmp_path / "pwned"
    jinja2.Environment().from_string(_attack(ATTACKS[name], marker)).render(messages=[])
    assert marker.exists()


@pytest.mark.parametrize("name", list(ATTACKS))
def test_hostile_template_runs_nothing(name: str, write_gguf: WriteGGUF, tmp_path: Path) -> None:  # noqa: F811
    marker = tmp_path / "pwned"
    path = write_gguf(f"{name}.gguf", {"tokenizer.chat_template": _attack(ATTACKS[name], marker)})
    res = run_cli("trace", "--chat", "-m", str(path), "-p", "hi", "-n", "1")
    one_sentence(res, "chat template tried something unsafe and was stopped", "unsafe")
    assert not marker.exists()


def test_hostile_template_plain_completion_still_works(write_gguf: WriteGGUF) -> None:  # noqa: F811
    """Without --chat the template is never rendered: the same file traces normally."""
    path = write_gguf("subclasses_raw.gguf", {"tokenizer.chat_template": ATTACKS["subclasses"]})
    res = run_cli("trace", "-m", str(path), "-p", "hi", "-n", "1", "--temp", "0")
    assert res.returncode == 0, res.stderr.decode()
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    assert recs and recs[-1]["sampled"]["id"] >= 0


def test_model_without_template_refuses_chat(write_gguf: WriteGGUF) -> None:  # noqa: F811
    path = write_gguf("no_template.gguf", {}, drop=("tokenizer.chat_template",))
    one_sentence(run_cli("trace", "--chat", "-m", str(path), "-p", "hi"), "no chat template")


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{{ 'a' * 10**8 }}", "100,000,000 items"),  # 100 MB if the guard failed
        ("{{ 2**100000 }}", "enormous power"),
        ("{{ '%99999999d' % 1 }}", "size of 99,999,999"),
        ("{{ '{:>99999999}'.format(1) }}", "size of 99,999,999"),
        ("{{ 'x'|center(99999999) }}", "size of 99,999,999"),
        ("{{ (['ab'] * 90000)|join('y' * 1000) }}", "join"),
        (
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}"
            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "built a value",
        ),
        ("{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('ab') }}", "built a value"),
        ("{{ ''.__class__ }}", "'__class__'"),  # fails at once, not an empty string
        ("{{ messages.append(1) }}", "'append'"),
    ],
)
def test_template_resource_attacks_fail_fast(template: str, needle: str) -> None:
    with pytest.raises(TemplateError, match="unsafe and was stopped") as exc:
        render_template(template, [Message("user", "hi")])
    assert needle in str(exc.value)


def test_guards_do_not_change_a_real_template(model) -> None:
    """The bundled template renders exactly as in Jinja2's stock sandbox."""
    tmpl = model.info.chat_template
    assert tmpl
    msgs = [
        Message("system", "Be brief."),
        Message("user", "Hi 👋 [bold]x[/]"),
        Message("assistant", "Hello."),
        Message("user", "What is 2+2?"),
    ]
    stock = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined
    )
    want = stock.from_string(tmpl).render(
        messages=[{"role": m.role, "content": m.content} for m in msgs],
        add_generation_prompt=True,
        bos_token="",
        eos_token="",
    )
    assert render_template(tmpl, msgs) == want


# -- metadata strings ----------------------------------------------------------------------

NASTY_NAME = "[bold]x[/]\x1b[2J\x07\nsecond line"


def test_name_with_markup_and_escapes_prints_literally(write_gguf: WriteGGUF) -> None:  # noqa: F811
    path = write_gguf("nasty_name.gguf", {"general.name": NASTY_NAME})
    res = run_cli("info", "-m", str(path))
    assert res.returncode == 0, res.stderr.decode()
    out = res.stdout.decode("utf-8")
    name_lines = [line for line in out.splitlines() if line.startswith("name ")]
    assert len(name_lines) == 1  # the newline did not start a second line
    assert name_lines[0].split(None, 1)[1] == "[bold]x[/]\\x1b[2J\\x07\\nsecond line"
    assert "\x1b" not in out and "\x07" not in out
    # --json keeps the exact string, escaped by JSON
    res = run_cli("info", "--json", "-m", str(path))
    assert json.loads(res.stdout)["name"] == NASTY_NAME
    assert b"\x1b" not in res.stdout


def test_architecture_with_escapes_in_error(write_gguf: WriteGGUF) -> None:  # noqa: F811
    """llama.cpp quotes the bad architecture back; the message stays one escaped line."""
    path = write_gguf("nasty_arch.gguf", {"general.architecture": "\x1b[2Jevil\nx"})
    msg = one_sentence(run_cli("info", "-m", str(path)), "unknown model architecture")
    assert "\\x1b[2Jevil\\nx" in msg


def test_block_count_zero_is_refused_before_llama_cpp(write_gguf: WriteGGUF) -> None:  # noqa: F811
    """llama.cpp aborts the whole process on block_count 0 (a GGML_ASSERT); the header
    check refuses the file first, with a sentence."""
    path = write_gguf("zero_layers.gguf", {"llama.block_count": 0})
    code = (
        "import llama_cpp, sys\n"
        "p = llama_cpp.llama_model_default_params()\n"
        "llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), p)\n"
    )
    bare = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        timeout=120,
        env={**os.environ, "GGML_NO_BACKTRACE": "1"},
    )
    assert bare.returncode < 0  # killed by SIGABRT
    for cmd in (("info",), ("trace", "-p", "hi")):
        one_sentence(run_cli(*cmd, "-m", str(path)), "claims 0 layers")


# -- broken headers, byte by byte ----------------------------------------------------------


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def _kv_u32(key: str, v: int) -> bytes:
    return _s(key) + struct.pack("<II", 4, v)


def _header(kvs: list[bytes], tensors: list[bytes] | None = None) -> bytes:
    tensors = tensors or []
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    return head + b"".join(kvs) + b"".join(tensors)


def _tensor(name: str, shape: tuple[int, ...], ggml_type: int) -> bytes:
    dims = struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
    return _s(name) + dims + struct.pack("<IQ", ggml_type, 0)


ARCH = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
BROKEN_HEADERS = {
    "unknown ggml type": (_header([ARCH], [_tensor("w", (32,), 9999)]), "unknown ggml type"),
    "removed ggml type": (_header([ARCH], [_tensor("w", (32,), 4)]), "removed ggml type"),
    "partial blocks": (_header([ARCH], [_tensor("w", (33,), 2)]), "whole blocks"),
    "five dimensions": (_header([ARCH], [_tensor("w", (1,) * 5, 0)]), "5 dimensions"),
    "alignment 0": (_header([ARCH, _kv_u32("general.alignment", 0)]), "power of two"),
    "alignment 3": (_header([ARCH, _kv_u32("general.alignment", 3)]), "power of two"),
    "duplicate key": (_header([ARCH, ARCH]), "appears twice"),
    "nested array": (
        _header([ARCH, _s("x.nested") + struct.pack("<IIQ", 9, 9, 1) + struct.pack("<IQ", 4, 0)]),
        "unknown value type 9",
    ),
    "huge array": (
        _header([ARCH, _s("x.big") + struct.pack("<IIQ", 9, 4, 2**60)]),
        "claims 1152921504606846976 elements",
    ),
    "huge string": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**62), "ends in the middle"),
    "impossible counts": (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 2**40), "impossible"),
    "version 1": (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "unsupported GGUF version 1"),
    "layers 100000": (_header([ARCH, _kv_u32("llama.block_count", 100000)]), "100000 layers"),
}


@pytest.mark.parametrize("case", list(BROKEN_HEADERS))
def test_broken_header_one_sentence(case: str, tmp_path: Path) -> None:
    data, needle = BROKEN_HEADERS[case]
    path = tmp_path / "broken.gguf"
    path.write_bytes(data)
    one_sentence(run_cli("info", "-m", str(path)), needle)


def test_header_cut_anywhere_is_a_model_error(model_path: Path, tmp_path: Path) -> None:
    """Cut the real header at 60 places (seeded): always ModelError, never another error."""
    with model_path.open("rb") as f:
        head = f.read(64 * 1024)
    path = tmp_path / "cut.gguf"
    cuts = [0, 3, 4, 8, 16, 23, 24, *random.Random(7).sample(range(25, len(head)), 53)]
    for n in cuts:
        path.write_bytes(head[:n])
        with pytest.raises(ModelError):
            gguf_header.validate(path)


def test_header_byte_flips_never_crash(model_path: Path, tmp_path: Path) -> None:
    """Flip bytes in the metadata region (seeded): ModelError or a clean read, nothing else."""
    data = bytearray(model_path.read_bytes()[: 4 * 2**20])  # whole header, some tensor data
    hdr = gguf_header.read_header(model_path)
    rng = random.Random(11)
    path = tmp_path / "flipped.gguf"
    outcomes = {"error": 0, "ok": 0}
    for _ in range(12):
        mutated = bytearray(data)
        for _ in range(4):
            mutated[rng.randrange(4, min(hdr.data_offset, 4096))] = rng.randrange(256)
        path.write_bytes(mutated)
        try:
            gguf_header.validate(path)
            outcomes["ok"] += 1
        except ModelError:
            outcomes["error"] += 1
    # The file holds only the first 4 MiB, so a header that still parses is truncated.
    assert outcomes["ok"] == 0 and outcomes["error"] == 12


def test_header_reader_stays_in_cli(tmp_path: Path) -> None:
    """A crafted header never reaches ggml with a bad type id (it would index out of range):
    the CLI answers in one sentence and the process was not killed."""
    path = tmp_path / "t.gguf"
    path.write_bytes(_header([ARCH], [_tensor("w", (32,), 2**31)]))
    res = subprocess.run(
        [sys.executable, "-m", "tui", "info", "-m", str(path)], capture_output=True, cwd=ROOT
    )
    one_sentence(res, "unknown ggml type")


def test_model_info_strings_are_escaped_for_the_panes(write_gguf: WriteGGUF) -> None:  # noqa: F811
    """What the TUI shows comes from ModelInfo: its name holds no control characters, and
    the markup is kept as literal text (the panes render it with rich Text, not markup)."""
    from tui.engine import Model
    from tui.engine.model.errors import one_line

    path = write_gguf("nasty_name_model.gguf", {"general.name": NASTY_NAME})
    m = Model(path)
    try:
        assert m.info.name == one_line(NASTY_NAME)
        assert m.info.name.startswith("[bold]x[/]\\x1b[2J")
        assert all(c.isprintable() for c in m.info.name + m.info.arch + m.info.desc)
    finally:
        m.close()


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{% for m in messages %}", "is broken"),  # syntax error
        ("{{ raise_exception('only user and assistant roles') }}", "raised an error"),
        ("{{ 1 / 0 }}", "division by zero"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "recursed too deeply"),
    ],
)
def test_broken_template_one_sentence(template: str, needle: str) -> None:
    with pytest.raises(TemplateError) as exc:
        render_template(template, [Message("user", "hi")])
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg and msg.endswith(".")


def test_template_that_drops_the_message(model) -> None:
    from tui.engine.model.chat_template import chat_tokens
    from tui.engine.model.tokens import Vocab

    vocab = Vocab(model.vocab, model.info.n_vocab)
    with pytest.raises(TemplateError, match="dropped a message"):
        chat_tokens(vocab, "<|im_start|>assistant\n", [Message("user", "hi")])
