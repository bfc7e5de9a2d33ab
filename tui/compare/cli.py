"""``tokenstep compare A-FLAGS --vs B-FLAGS``: the command line, and what it prints.

The flags before ``--vs`` are llama.cpp's own (the app's parser: ``-m``, ``-c``, ``-b``, ``-ub``,
``-fa``, ``-ctk``, ``-ctv``, ``--repack``, the sampler's) and set both sides; the flags after it
are B's changes, in the same names, parsed on top of A's. ``--json`` prints one JSON line per
position and then the summary object; without it, on a pipe (or with ``--text``) a table; on a
terminal the compare screen (:mod:`tui.compare.screen`, when it is there).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Callable, Sequence

from ..engine import EngineConfig, SamplerSettings
from ..engine.model import interrupt, secret
from ..engine.model.errors import TokenstepError
from .progress import Progress, is_tty, quiet_keys
from .records import Position, Result
from .sides import SIDE_FLAGS

INTERRUPTED = "nothing more was compared"
RUN_FLAGS = {
    "prompt": "-p",
    "file": "-f",
    "n_predict": "-n",
    "json": "--json",
    "text": "--text",
    "chunks": "--chunks",
    "score_from": "--score-from",
    "free": "--free",
    "kld_base": "--kld-base",
}


def compare_parser() -> argparse.ArgumentParser:
    from ..args import _context_flags, _model_flags, _Parser, _sampler_flags
    from ..backend_flags import repack_flags

    p = _Parser(
        prog="tokenstep compare",
        description="Run two configurations, A and B, on the same tokens in lockstep and "
        "compare their next-token distributions position by position: KL(A||B) in nats, "
        "whether the top-1 agrees, where A's next token ranks in B. The flags before --vs set "
        "both sides; the flags after it are B's changes, in the same names "
        "(e.g. --vs -ctk q4_0 -ctv q4_0, --vs -m other.gguf, --vs -ub 1).",
        epilog="Defaults follow llama-perplexity: -c 512 and -b 512; -ub, when not given, is 512 "
        "capped at -b, as llama.cpp caps it.",
    )
    _model_flags(p)
    _context_flags(p, one_sequence=True)  # -np, --context-full, --keep: refused, not shown
    _sampler_flags(p)
    repack_flags(p)
    # -ub not given: llama.cpp's 512, capped at -b as llama.cpp caps it (filled per side below)
    p.set_defaults(ctx_size=512, batch_size=512, ubatch_size=None)
    for action in p._actions:  # the app's help names the app's defaults
        if action.dest == "ctx_size":
            action.help = "context size in tokens, each side's (default 512)"
        elif action.dest == "batch_size":
            action.help = "logical batch size: max tokens per llama_decode (default 512)"
        elif action.dest == "ubatch_size":
            action.help = "physical batch size: tokens per graph run (default 512, at most -b)"
    p.add_argument("-p", "--prompt", metavar="TEXT", help="the text both sides are fed")
    p.add_argument("-f", "--file", metavar="PATH", help="read the text from a file")
    p.add_argument(
        "-n",
        "--n-predict",
        type=int,
        default=0,
        metavar="N",
        help="feed A's own greedy continuation of the text, N tokens (default 0: the text alone)",
    )
    p.add_argument("--json", action="store_true", help="one JSON line per position, then a summary")
    p.add_argument("--text", action="store_true", help="the table, even on a terminal")
    p.add_argument(
        "--chunks",
        action="store_true",
        help="score as llama-perplexity --kl-divergence does: chunks of -c tokens, each from "
        "BOS and an empty cache, the second half of each compared",
    )
    p.add_argument(
        "--score-from",
        type=int,
        default=0,
        metavar="POS",
        help="compare the positions from POS on (default 0; not with --chunks)",
    )
    p.add_argument(
        "--kld-base",
        metavar="FILE",
        help="keep A's logits rows in FILE (written when it does not exist), or compare B "
        "against the rows FILE keeps, without running A (then the file's text, -c and "
        "scoring are the run's); tokenstep's own exact format, not llama-perplexity's",
    )
    p.add_argument(
        "--server",
        metavar="URL",
        help="after --vs: B is this llama-server (top-K log-probabilities only: the KL is a "
        "lower bound, and says so)",
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help="with --server: sent to B's server as 'Authorization: Bearer KEY' (default "
        "$OPENAI_API_KEY); never printed",
    )
    p.add_argument(
        "--n-probs",
        type=int,
        default=100,
        metavar="K",
        help="with --server: the top K B's server sends per position (default 100)",
    )
    p.add_argument(
        "--free",
        action="store_true",
        help="free-running: each side generates -n tokens (default 32) with its own sampler "
        "chain and seed; shows where the texts part",
    )
    return p


# Context flags that mean nothing here: each side's context holds one sequence, the text,
# which fits in -c (or --chunks cuts it to -c), so no context fills or shifts.
ONE_SEQUENCE = {"parallel": "-np", "context_full": "--context-full", "keep": "--keep"}


def _one_sequence(ns: argparse.Namespace) -> None:
    """Refuse -np, --context-full and --keep in one sentence."""
    given = [flag for d, flag in ONE_SEQUENCE.items() if getattr(ns, d) is not None]
    if given:
        raise TokenstepError(
            f"{given[0]} means nothing to compare: each side's context holds one sequence, "
            "the text, which fits in -c (or --chunks cuts it to -c), so none fills or shifts."
        )


def split_vs(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    argv = list(argv)
    if "--vs" not in argv:
        return argv, None
    i = argv.index("--vs")
    return argv[:i], argv[i + 1 :]


def parse_sides(
    argv: Sequence[str],
) -> tuple[argparse.Namespace, argparse.Namespace, tuple[str, ...]]:
    """A's namespace, B's (A's with B's flags parsed on top) and B's changes as flags."""
    p = compare_parser()
    a_argv, b_argv = split_vs(argv)
    a = p.parse_args(a_argv)  # --help, and A's mistakes, before asking for --vs
    _one_sequence(a)
    a.parallel, a.context_full, a.keep = 1, None, 0  # what both sides run with (B copies A)
    if b_argv is None:
        raise TokenstepError(
            "compare needs --vs and B's changes after it (e.g. --vs -ctk q4_0 -ctv q4_0); "
            "see 'tokenstep compare --help'."
        )
    try:
        alone = p.parse_args(b_argv)
    except TokenstepError as exc:
        raise TokenstepError(f"after --vs: {exc}") from None
    _one_sequence(alone)
    defaults = p.parse_args([])
    run = [f for f in RUN_FLAGS if getattr(alone, f) != getattr(defaults, f)]
    if run:
        raise TokenstepError(
            f"{RUN_FLAGS[run[0]]} after --vs: the text and the output are the run's; put it before --vs."
        )
    if a.server:
        raise TokenstepError(
            "--server before --vs: A must be local (its logits are the reference); put "
            "--server URL after --vs."
        )
    if (a.api_key is not None or alone.api_key is not None) and not alone.server:
        raise TokenstepError("--api-key without --server: only a server B takes a key.")
    b = p.parse_args(b_argv, namespace=copy.copy(a))
    if b.server:  # a key no header can carry: said before any model loads
        from ..engine.remote.openai_backend import api_key_from

        b.api_key = api_key_from(b.api_key)
    for ns in (a, b):
        if ns.ubatch_size is None:
            ns.ubatch_size = min(512, ns.batch_size)
    differs = tuple(
        f"{SIDE_FLAGS[d]} {getattr(b, d)}" for d in SIDE_FLAGS if getattr(b, d) != getattr(a, d)
    )
    return a, b, differs


def nats(x: float) -> str:
    """A KL for reading: 0 when it is exactly 0, 6 decimals down to 1e-3, then 3 digits."""
    if x == 0.0:
        return "0"
    return f"{x:.6f}" if abs(x) >= 1e-3 else f"{x:.3e}"


def summary_line(result: Result) -> str:
    """ "B: q4_0 KV: 68% less KV memory, top-1 differs at 3 of 200 positions, KL mean ..." """
    s = result.summary
    bits = [s.b.label.removeprefix("B: ")]
    saving = s.kv_saving
    if saving is not None and abs(saving) >= 0.005:
        bits[0] += f": {abs(saving):.0%} {'less' if saving > 0 else 'more'} KV memory"
    bits.append(f"top-1 differs at {s.n_flips} of {s.n} positions")
    kl = "KL bound" if s.kl_is_bound else "KL"
    bits.append(
        f"{kl} mean {nats(s.kl_mean)}, median {nats(s.kl_median)}, p99 {nats(s.kl_p99)}, "
        f"max {nats(s.kl_max)} nats"
    )
    if s.first_flip is not None:
        bits.append(f"first flip at position {s.first_flip}")
    if s.shared_logits:
        bits.append("B differs only in its sampler: both sides share A's logits")
    return ", ".join(bits) + "."


def table(result: Result, top: int = 10) -> str:
    s = result.summary
    lines = [summary_line(result), ""]
    for side in (s.a, s.b):
        if side.remote:
            lines.append(f"{side.label}: its top K log-probabilities only, the KL a lower bound")
            continue
        kv = f"{side.kv_bytes / 2**20:.2f} MiB KV" if side.kv_bytes is not None else "KV unseen"
        lines.append(
            f"{side.label}: {side.model}, -c {side.n_ctx} -b {side.n_batch} -ub {side.n_ubatch} "
            f"-fa {side.flash_attn} -ctk {side.type_k} -ctv {side.type_v}, {kv}"
        )
    lines += [
        "",
        f"{'pos':>6} {'KL':>10} {'next':<14} {'top A':<14} {'top B':<14} "
        f"{'rank B':>6} {'Δp':>8} {'max|Δlogit|':>11}",
    ]
    by_pos = {p.position: p for p in result.positions}
    for pos in s.by_kl[:top]:
        p = by_pos[pos]
        mark = " " if p.same_top else "*"
        lines.append(
            f"{p.position:>6} {nats(p.kl):>10} {p.piece[:14]!r:<14} "
            f"{p.top_a[0].piece[:12]!r:<14} {p.top_b[0].piece[:12]!r:<14}"
            f"{mark}{p.rank_in_b + 1 if p.rank_in_b is not None else '-':>5} {p.dp:>+8.4f} "
            f"{p.max_abs_dlogit:>11.4f}"
        )
    lines.append("(* the top-1 differs; rank B: where the next token ranks in B, 1 = B's top-1)")
    if s.mode == "free":
        lines += ["", f"A's text: {s.text_a!r}", f"B's text: {s.text_b!r}"]
        if s.parted_at is None:
            lines.append("The texts never part.")
        else:
            p = by_pos[s.parted_at]
            lines.append(
                f"They part at position {p.position}: A picks {p.piece!r}, B picks "
                f"{p.piece_b if p.piece_b is not None else p.token_b!r}."
            )
            lines.append(f"{'A top':<24}{'p':>8}   {'B top':<24}{'p':>8}")
            for ca, cb in zip(p.top_a, p.top_b, strict=True):
                lines.append(f"{ca.piece!r:<24}{ca.p:>8.4f}   {cb.piece!r:<24}{cb.p:>8.4f}")
    return "\n".join(lines)


def has_screen() -> bool:
    """Whether the compare screen (``tui/compare/screen.py``, ``run_screen(result)``) is
    there; until it is, a terminal gets the table too."""
    import importlib.util

    return importlib.util.find_spec(f"{__package__}.screen") is not None


def compare_main(
    argv: Sequence[str],
    make_config: Callable[[argparse.Namespace], EngineConfig],
    make_settings: Callable[[argparse.Namespace], SamplerSettings],
) -> int:
    """Parse, run both sides, print. ``make_config`` and ``make_settings`` are the app's own
    flags-to-context and flags-to-chain functions (the same checks, the same messages)."""
    from .run import run_compare

    a, b, differs = parse_sides(argv)
    ca, sa = make_config(a), make_settings(a)
    try:
        cb, sb = make_config(b), make_settings(b)
    except TokenstepError as exc:
        raise TokenstepError(f"after --vs: {exc}") from None
    emit: Callable[[Position], None] | None = None
    if a.json:

        def emit(p: Position) -> None:
            print(secret.redact(json.dumps(p.to_json(), ensure_ascii=False)), flush=False)

    # JSON lines on the same terminal are progress enough (a line between them would split one)
    shown = is_tty(sys.stderr) and not (a.json and is_tty(sys.stdout))
    progress = Progress(sys.stderr, tick=1.0) if shown else None

    def on_position(p: Position) -> None:
        interrupt.check()
        if emit is not None:
            emit(p)
        if progress is not None:
            progress.step()

    def on_total(n: int) -> None:
        interrupt.check()  # a Ctrl-C while the models loaded
        if progress is not None:
            progress.start(n)

    try:
        with quiet_keys(sys.stdin), interrupt.guard():  # tokenstep's own, when it runs
            result = run_compare(
                a, b, (ca, cb), (sa, sb), differs, on_position=on_position, on_total=on_total
            )
            interrupt.check()  # one in the last window, after its last position
    except KeyboardInterrupt:
        if progress is not None:
            progress.clear()
        sys.stdout.flush()
        print(f"tokenstep compare: interrupted; {INTERRUPTED}.", file=sys.stderr)
        return 130
    finally:
        if progress is not None:
            progress.clear()
    if a.json:
        print(secret.redact(json.dumps(result.summary.to_json(), ensure_ascii=False)))
        return 0
    if sys.stdout.isatty() and not a.text and has_screen():
        from .screen import run_screen  # Textual loads only here

        interrupt.hand_over()  # Ctrl-C is a key of the screen's from here on
        run_screen(result)
        return 0
    print(secret.redact(table(result)))  # as trace's lines: no text leaves with the key
    return 0
