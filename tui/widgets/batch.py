"""Tab 2 (key 2), batch: the tokens of the last ``llama_decode`` call(s), one row each, with id,
piece, pos, seq_id and the logits flag. A prefill longer than ``n_batch`` is several calls and
each call is cut into ``n_ubatch`` chunks; both boundaries are drawn as rule lines."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from .common import DIM, LinePane, fmt_ms, is_special, piece_text, text_segments

RULE = Style(color="bright_yellow")
HEAD = Style(color="grey62", bold=True)
ON = Style(color="bright_green", bold=True)


class BatchPane(LinePane):
    """Rows: a header, then for each call a rule and its tokens (with ubatch rules)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._rows: list[tuple[str, int, int]] = []  # (kind, record index, token index)

    def relayout(self) -> None:
        self._rows = self._plan()
        if self.view is not None:
            self.border_title = (
                f"batch · last llama_decode · n_batch {self.view.header.n_batch}, "
                f"n_ubatch {self.view.header.n_ubatch}"
            )
        super().relayout()

    def _plan(self) -> list[tuple[str, int, int]]:
        v = self.view
        rows: list[tuple[str, int, int]] = [("head", 0, 0)]
        if v is None or not v.batch.last_records:
            return rows
        for r, rec in enumerate(v.batch.last_records):
            rows.append(("call", r, 0))
            starts = {a for a, _ in rec.call.ubatches}
            for i in range(rec.call.n_tokens):
                if i in starts and len(rec.call.ubatches) > 1:
                    rows.append(("ubatch", r, i))
                rows.append(("token", r, i))
        return rows

    def count_rows(self) -> int:
        return len(self._rows)

    def follow_row(self) -> int | None:
        return None

    def build_row(self, row: int, width: int) -> list[Segment]:
        v = self.view
        assert v is not None
        kind, r, i = self._rows[row]
        t = Text(no_wrap=True, overflow="crop")
        if kind == "head":
            if not v.batch.last_records:
                t.append("No batch yet: the prompt's batch appears when you send a message.", DIM)
            else:
                t.append(f"{'#':>5} {'id':>6}  {'piece':<16}{'pos':>6} {'seq':>4}  logits", HEAD)
        elif kind == "call":
            rec = v.batch.last_records[r]
            n = len(v.batch.last_records)
            t.append(
                f"── llama_decode {r + 1}/{n} · {_n(rec.call.n_tokens, 'token')} · "
                f"{_n(len(rec.call.ubatches), 'ubatch')} · {fmt_ms(self, rec.decode_ms)}",
                RULE,
            )
            if rec.reused and r == 0:
                t.append(f" · {rec.reused} earlier tokens reused from the KV cache", DIM)
        elif kind == "ubatch":
            rec = v.batch.last_records[r]
            a, b = next(u for u in rec.call.ubatches if u[0] == i)
            t.append(f"   ┄ ubatch tokens {a}–{b - 1} (one graph run)", DIM)
        else:
            tok = v.batch.last_records[r].call.tokens[i]
            data = v.batch.batch_pieces[r][i]
            piece = piece_text(data, special=is_special(data))
            piece.truncate(15, overflow="ellipsis")
            t.append(f"{i:>5} {tok.id:>6}  ")
            t.append_text(piece)
            t.append(" " * max(0, 16 - piece.cell_len))
            t.append(f"{tok.pos:>6} {','.join(map(str, tok.seq_ids)):>4}  ")
            t.append("✔ yes" if tok.logits else "· no", ON if tok.logits else DIM)
        return text_segments(self, t)


def _n(n: int, word: str) -> str:
    return f"1 {word}" if n == 1 else f"{n:,} {word}{'es' if word.endswith('ch') else 's'}"
