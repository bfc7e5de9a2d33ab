"""Pieces are bytes: CJK, emoji and combining marks survive the trip text -> ids -> pieces,
a piece that is not UTF-8 on its own is shown byte by byte, and a partial character at the
end waits for the next piece. llama-cpp-python's own tokenizer is the oracle.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_cpp import Llama

from tui.engine import TokenstepError
from tui.engine.model.tokens import Vocab, display_bytes, join_pieces

TEXTS = {
    "cjk": "日本語のテキストと中文，한국어도。",
    "emoji": "I ❤️ llamas 🦙🎉",
    "zwj_family": "👨‍👩‍👧‍👦 and 👩🏽‍💻",
    "skin_tones": "👍🏻👍🏼👍🏽👍🏾👍🏿",
    "flags": "🇫🇷🇯🇵🏳️‍🌈",
    "combining": "e\u0301 a\u0308 n\u0303 Z\u0335\u0327\u031b a\u0300\u0301\u0302\u0303",
    "vietnamese": "Tiếng Việt có dấu",
    "devanagari": "क्षत्रिय हिन्दी",
    "arabic": "مرحبا بالعالم",
    "math": "∀x∈ℝ: x² ≥ 0 𝔘𝔫𝔦",
}


@pytest.fixture(scope="module")
def vocab(model) -> Vocab:
    return Vocab(model.vocab, model.info.n_vocab)


@pytest.fixture(scope="module")
def oracle(model_path: Path) -> Llama:
    return Llama(model_path=str(model_path), vocab_only=True, verbose=False)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("name", list(TEXTS))
def test_pieces_round_trip(name: str, vocab: Vocab, oracle: Llama) -> None:
    text = TEXTS[name]
    ids = vocab.tokenize(text, add_special=False)
    assert ids == oracle.tokenize(text.encode(), add_bos=False, special=False)
    pieces = [vocab.piece(t) for t in ids]
    assert b"".join(pieces) == text.encode("utf-8")
    assert oracle.detokenize(ids) == text.encode("utf-8")
    assert join_pieces(pieces) == (text, b"")
    assert vocab.text(ids) == text


@pytest.mark.parametrize("name", ["cjk", "zwj_family", "skin_tones", "flags", "devanagari"])
def test_split_characters_show_as_hex_bytes(name: str, vocab: Vocab) -> None:
    """Some pieces are not UTF-8 by themselves: each bad byte is shown as <0xNN>."""
    pieces = vocab.pieces(vocab.tokenize(TEXTS[name], add_special=False))
    broken = [p for p in pieces if not _is_utf8(p.bytes)]
    assert broken, "expected at least one piece that splits a character"
    for p in broken:
        assert not p.is_valid_utf8
        # Recompute independently: Python's backslashreplace, rewritten as <0xNN>.
        want = re.sub(
            r"\\x([0-9a-f]{2})",
            lambda m: f"<0x{m.group(1).upper()}>",
            p.bytes.decode("utf-8", errors="backslashreplace"),
        )
        assert display_bytes(p.bytes) == p.text == want
        assert "<0x" in p.text
    for p in pieces:
        if p.is_valid_utf8:
            assert p.text == p.bytes.decode("utf-8")


@pytest.mark.parametrize("name", ["cjk", "zwj_family", "skin_tones"])
def test_partial_character_is_pending(name: str, vocab: Vocab) -> None:
    """At every prefix of the pieces the text shown is a prefix of the real text, and the
    held-back bytes are exactly the start of the next character."""
    text = TEXTS[name]
    data = text.encode()
    pieces = [vocab.piece(t) for t in vocab.tokenize(text, add_special=False)]
    seen_pending = 0
    for k in range(len(pieces) + 1):
        shown, pending = join_pieces(pieces[:k])
        joined = b"".join(pieces[:k])
        assert shown.encode() + pending == joined
        assert text.startswith(shown)
        assert len(pending) < 4
        if pending:
            seen_pending += 1
            assert not _is_utf8(pending)
            # the next complete character starts with the pending bytes
            rest = data[len(shown.encode()) :]
            assert rest.startswith(pending)
    assert seen_pending > 0


def test_join_pieces_edges() -> None:
    assert join_pieces([]) == ("", b"")
    assert join_pieces([b"a", b"\xf0\x9f"]) == ("a", b"\xf0\x9f")  # first half of an emoji
    assert join_pieces([b"a", b"\xf0\x9f", b"\xa6\x99"]) == ("a\U0001f999", b"")
    # A byte that can never start or continue a character is shown, not held back.
    assert join_pieces([b"\xff", b"b"]) == ("<0xFF>b", b"")
    # A broken sequence followed by ASCII: the lead byte is shown, the ASCII kept.
    assert join_pieces([b"\xe4\xbd", b"x"]) == ("<0xE4><0xBD>x", b"")
    assert display_bytes(b"\xe4\xbd\xa0\xe4") == "\u4f60<0xE4>"


def test_tokenize_refuses_lone_surrogates(vocab: Vocab) -> None:
    """Text that came from bytes that were not UTF-8 (surrogateescape) is refused, not
    passed to llama.cpp as invalid UTF-8."""
    with pytest.raises(TokenstepError, match="not valid UTF-8"):
        vocab.tokenize("ok \udcff")


def test_piece_out_of_range(vocab: Vocab) -> None:
    with pytest.raises(TokenstepError, match="outside the vocabulary"):
        vocab.piece(vocab.n_vocab)
    with pytest.raises(TokenstepError, match="outside the vocabulary"):
        vocab.piece(-1)


def test_escape_controls_keeps_newlines_and_hides_escapes(vocab: Vocab) -> None:
    from tui.engine.model.tokens import escape_controls

    # The vocabulary has a token for the ESC byte: a model can generate it.
    esc_ids = vocab.tokenize("\x1b[2J", add_special=False)
    shown, pending = join_pieces([vocab.piece(t) for t in esc_ids])
    assert shown == "\x1b[2J" and pending == b""
    assert escape_controls(shown) == "<0x1B>[2J"
    assert escape_controls("a\nb\tc\r\x07\x7f\u009b日") == "a\nb\tc<0x0D><0x07><0x7F><0xC2><0x9B>日"
    assert all(escape_controls(t) == t for t in TEXTS.values())


def test_one_rule_draws_whitespace_in_every_pane() -> None:
    """The token chips, the lens, /tokenize and the chain listing share one map: a piece that
    is only whitespace is never blank, and an unprintable character is spelled out."""
    from tui.engine import SamplerSettings
    from tui.engine.model.tokens import visible
    from tui.worker.sampler_listing import value_of

    assert visible(" a\n\t\r\xa0\x1b") == "␣a↵⇥␍\\xa0\\x1b"
    assert visible("root ::= [ \t]", space=False) == "root ::= [ ⇥]"
    shown = value_of(SamplerSettings(grammar='root ::= "a\u00a0b"'), "grammar")
    assert shown == 'root ::= "a\\xa0b"'
