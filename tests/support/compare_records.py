"""Compare results built by hand from fixed numbers, for the compare screen's layout tests and
snapshots: the same picture on every CPU. They are shaped as a real run's records are (position
i predicts token i + 1, by_kl highest first, n_flips the positions whose top-1s differ), but
their figures are made up and say nothing about any model. Tests of what a real run shows use
real lockstep runs of the bundled model instead (tests/compare/test_compare_screen.py)."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from tui.compare.records import Position, Result, Side, Summary, TopEntry
from tui.compare.screen import CompareApp

PIECES = (
    "The", " cat", " sat", " on", " the", " mat", " because", " it", " was", " tired", ".",
    "\n", "Then", " the", " dog", " came", " in",
)  # fmt: skip
WORDS = (" cat", " dog", " moon", " couch", " sun", " bed", " mat", " a", " the", " in")
# per position: KL (nats)
KL = (0.0004, 0.027, 0.31, 0.0031, 0.51, 0.066, 0.0012, 0.045, 0.13, 0.0, 0.0009, 0.021)
KL += (0.0072, 0.0006, 1.42, 0.0019)
FLIPS = (4, 5, 14)


def side(label: str, differs: tuple[str, ...], kv: int | None, *, remote: bool = False) -> Side:
    return Side(
        label=label,
        differs=differs,
        model="SmolLM2-135M-Instruct.Q4_1.gguf",
        n_ctx=256,
        n_batch=512,
        n_ubatch=512,
        flash_attn="on",
        type_k="q4_0" if differs else "f16",
        type_v="q4_0" if differs else "f16",
        kv_bytes=kv,
        remote=remote,
        sampler="greedy",
    )


VOCAB = sorted(set(PIECES) | set(WORDS))
ID = {piece: 100 + i for i, piece in enumerate(VOCAB)}


def ranked(first: str, token: str, rank: int, j: int) -> list[str]:
    """Ten pieces, ``first`` at the top and the fed ``token`` at ``rank`` (or absent, -1)."""
    rest = [w for w in WORDS[j % 3 :] + WORDS[: j % 3] if w not in (first, token)]
    out = [first, *rest]
    if token != first and rank >= 0:
        out.insert(max(rank, 1), token)
    return out[:10]


def top(pieces: list[str], logit0: float) -> tuple[TopEntry, ...]:
    return tuple(
        TopEntry(id=ID[w], piece=w, logit=logit0 - 0.25 * i, p=round(0.30 / (i + 1), 4))
        for i, w in enumerate(pieces)
    )


def positions(free: bool = False) -> tuple[Position, ...]:
    out = []
    for j, kl in enumerate(KL):
        flip = j in FLIPS
        token = PIECES[j + 1]
        first_a = token if j % 4 == 0 else WORDS[j % len(WORDS)]
        first_b = WORDS[(j + 1) % len(WORDS)] if flip else first_a
        if first_b == first_a and flip:
            first_b = WORDS[(j + 2) % len(WORDS)]
        rank_b = -1 if j == 9 else (0 if first_b == token else 1 + j % 5)
        top_a = top(ranked(first_a, token, 1 + j % 3, j), 12.5)
        top_b = top(ranked(first_b, token, rank_b, j), 12.0)
        out.append(
            Position(
                position=j,
                token=ID[token],
                piece=token,
                kl=kl,
                top1_a=top_a[0].id,
                top1_b=top_b[0].id,
                same_top=not flip,
                rank_in_b=None if rank_b < 0 else rank_b,
                p_a=0.125,
                p_b=0.0625 if flip else 0.125,
                dp=-0.0625 if flip else 0.0,
                max_abs_dlogit=round(10 * kl + 0.5, 4),
                top_a=top_a,
                top_b=top_b,
                token_b=(top_b[0].id if j >= 4 else ID[token]) if free else None,
                piece_b=(top_b[0].piece if j >= 4 else token) if free else None,
            )
        )
    return tuple(out)


def fixed_result(*, free: bool = False, remote: bool = False) -> Result:
    """A run of 16 positions, 3 flips; ``free``: free-running, the texts part at 4;
    ``remote``: B is a server (its KV unseen, each KL a bound from its top K)."""
    ps = positions(free)
    a = side("A: f16 KV", (), 5_898_240)
    b = side("B: q4_0 KV", ("-ctk q4_0", "-ctv q4_0"), None if remote else 1_658_880,
             remote=remote)  # fmt: skip
    summary = Summary(
        n=len(ps),
        kl_mean=0.1597,
        kl_median=0.0241,
        kl_p99=1.285,
        kl_max=1.42,
        same_top=0.8125,
        first_flip=FLIPS[0],
        by_kl=tuple(sorted(range(len(KL)), key=lambda j: (-KL[j], j))),
        a=a,
        b=b,
        kl_is_bound=remote,
        mode="free" if free else "teacher",
        parted_at=4 if free else None,
        text_a="The cat sat on the mat because it was tired.\nThen the dog came in" if free else "",
        text_b="The cat sat on the couch and slept.\nThe dog" if free else "",
        n_flips=len(FLIPS),
    )
    return Result(tokens=tuple(ID[w] for w in PIECES), pieces=PIECES, positions=ps, summary=summary)


# -- reading the screen back ------------------------------------------------------------------
def screen_text(app: CompareApp) -> str:
    """The whole screen as plain text, as the terminal shows it."""
    w, h = app.size
    con = Console(width=w, height=h, file=io.StringIO(), record=True, color_system=None)
    con.print(
        app.screen._compositor.render_update(
            full=True, screen_stack=app._background_screens, simplify=True
        )
    )
    return con.export_text()


def run(coro):
    return asyncio.run(coro)


async def drive(app: CompareApp, keys: list[str], check, size=(140, 42)) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
            check(app, key)


def counted(argv: list[str]) -> tuple[list[int], int]:
    """The totals ``run_compare`` announced and the positions it then compared."""
    from tui.compare.cli import parse_sides
    from tui.compare.run import run_compare
    from tui.trace_cli import config_from_args, settings_from_args

    a, b, differs = parse_sides(argv)
    totals: list[int] = []
    r = run_compare(
        a,
        b,
        (config_from_args(a), config_from_args(b)),
        (settings_from_args(a), settings_from_args(b)),
        differs,
        on_total=totals.append,
    )
    return totals, len(r.positions)
