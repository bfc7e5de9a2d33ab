"""Tokenize: text to token ids, and token ids back to pieces of *bytes*.

A piece is not always valid UTF-8 on its own: a CJK character or an emoji can be split over
several byte-level pieces. So pieces are kept as bytes, shown with the broken bytes spelled
out (``<0xE4>``), and text is only ever made by joining the bytes of consecutive pieces.
"""

from __future__ import annotations

import codecs
import ctypes
import re
from dataclasses import dataclass

import llama_cpp

from .errors import TokenstepError


def _hex_escape(err: UnicodeError) -> tuple[str, int]:
    assert isinstance(err, UnicodeDecodeError)
    bad = err.object[err.start : err.end]
    return "".join(f"<0x{b:02X}>" for b in bad), err.end


codecs.register_error("tokenstep-hex", _hex_escape)


def display_bytes(data: bytes) -> str:
    """Text for a piece: valid UTF-8 decoded, every other byte shown as ``<0xNN>``."""
    return data.decode("utf-8", errors="tokenstep-hex")


# C0 controls but newline and tab, DEL, and the C1 controls (U+009B is an 8-bit CSI).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]+")


def escape_controls(text: str) -> str:
    """``text`` safe to draw in a terminal: control characters other than newline and tab
    become their UTF-8 bytes as ``<0xNN>`` (a model can emit ESC; it must not reach the
    terminal as an escape sequence)."""
    return _CONTROLS.sub(lambda m: "".join(f"<0x{b:02X}>" for b in m.group().encode()), text)


def join_pieces(pieces: list[bytes]) -> tuple[str, bytes]:
    """Join pieces into text. Returns (text, pending): ``pending`` is a trailing partial
    UTF-8 sequence that a later piece may still complete (it is not shown as text yet)."""
    data = b"".join(pieces)
    dec = codecs.getincrementaldecoder("utf-8")(errors="tokenstep-hex")
    text = dec.decode(data, final=False)
    pending, _ = dec.getstate()
    return text, pending


@dataclass(frozen=True)
class Piece:
    id: int
    bytes: bytes

    @property
    def text(self) -> str:
        return display_bytes(self.bytes)

    @property
    def is_valid_utf8(self) -> bool:
        try:
            self.bytes.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True


class Vocab:
    """The model's vocabulary: tokenize text and turn ids into byte pieces (cached)."""

    def __init__(self, vocab: llama_cpp.llama_vocab_p, n_vocab: int) -> None:
        self.ptr = vocab
        self.n_vocab = n_vocab
        self._pieces: dict[int, bytes] = {}

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """``llama_tokenize``: special-token text such as ``<|im_end|>`` stays plain text
        unless ``parse_special`` is set (a chat template sets it for its own markers)."""
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:  # lone surrogates: bytes that were not UTF-8
            raise TokenstepError(
                f"the text is not valid UTF-8 (a stray byte at character {exc.start})."
            ) from exc
        n_max = len(data) + 16
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(
            self.ptr, data, len(data), buf, n_max, add_special, parse_special
        )
        if n < 0:  # buffer too small: -n is the size needed
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(
                self.ptr, data, len(data), buf, n_max, add_special, parse_special
            )
            if n < 0:
                raise TokenstepError("the text could not be tokenized.")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """``llama_token_to_piece`` with special tokens rendered as their text."""
        if (cached := known_piece(self._pieces, token, self.n_vocab)) is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, True)
        data = buf.raw[:n]
        self._pieces[token] = data
        return data

    def pieces(self, tokens: list[int]) -> list[Piece]:
        return [Piece(t, self.piece(t)) for t in tokens]

    def text(self, tokens: list[int]) -> str:
        """The pieces joined into text (a trailing partial character is left out)."""
        return join_pieces([self.piece(t) for t in tokens])[0]

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.ptr, token))


_SHOWN = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}  # as the panes draw a piece


def quoted(piece: bytes, token: int) -> str:
    """A token for a sentence: its piece, visible and quoted, with the id beside it
    (``'␣Paris' (id 6342)``), where an id alone would mean nothing to the reader."""
    shown = "".join(
        _SHOWN.get(ch, ch if ch.isprintable() else repr(ch)[1:-1]) for ch in display_bytes(piece)
    )
    return f"'{shown or '∅'}' (id {token})"


# How every pane draws whitespace in a piece, so no token is blank: one map for the whole app.
WHITESPACE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(s: str, *, space: bool = True) -> str:
    """Whitespace as its stand-in (``space=False`` keeps a space as typed, where spaces are
    already read as gaps, such as a list of DRY breakers), every other unprintable character
    escaped (U+00A0 as ``\\xa0``)."""
    out = []
    for ch in s:
        if ch in WHITESPACE and (space or ch != " "):
            out.append(WHITESPACE[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return "".join(out)


def known_piece(pieces: dict[int, bytes], token: int, n_vocab: int) -> bytes | None:
    """``token``'s piece if ``pieces`` holds it, else None; an id outside the vocabulary is
    one sentence (a vocabulary's ``piece`` asks this before it asks llama.cpp or a server)."""
    cached = pieces.get(token)
    if cached is None and not 0 <= token < n_vocab:
        raise TokenstepError(f"token id {token} is outside the vocabulary (0..{n_vocab - 1}).")
    return cached
