"""The sampler-chain flags, with llama.cpp's names and defaults (``common/arg.cpp``), and how
they become :class:`~tui.engine.SamplerSettings`."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from .engine.model.errors import TokenstepError
from .engine.sampler.bounds import check_grammar_size, need_utf8
from .engine.sampler.sampler_settings import (
    DEFAULT_BREAKERS,
    parse_logit_bias,
    parse_samplers,
    parse_sampling_seq,
)


def finite_number(text: str) -> float:
    """A float flag value; nan and inf are refused (every comparison with nan is false, so a
    range check alone would let it through)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


# The flags given once per value. argparse finds each option's next one with a scan of all
# of them (Python 3.11's _parse_known_args), so n repeats cost n^2: 20,000 `-l ID-inf` took
# 10 s, 49,151 took 58 s. :func:`gather_repeats` takes them out first, in one pass.
REPEATED = {"-l": "logit_bias", "--logit-bias": "logit_bias"}
REPEATED["--dry-sequence-breaker"] = "dry_sequence_breaker"


def gather_repeats(
    p: argparse.ArgumentParser, argv: list[str]
) -> tuple[list[str], dict[str, list[str]]]:
    """``argv`` without the repeatable chain flags, and their values by dest, in order. A value
    argparse would not take (one that looks like a flag, or none) is left for it to refuse."""
    known = {f for f in REPEATED if f in p._option_string_actions}
    rest: list[str] = []
    got: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest += argv[i:]
            break
        flag, eq, value = a.partition("=")
        if eq and flag.startswith("--") and flag in known:
            got.setdefault(REPEATED[flag], []).append(value)
            i += 1
            continue
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if a in known and nxt is not None and not (nxt.startswith("-") and len(nxt) > 1):
            got.setdefault(REPEATED[a], []).append(nxt)
            i += 2
            continue
        rest.append(a)
        i += 1
    return rest, got


def parse_with_repeats(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``p.parse_args`` in linear time in the number of repeated flags."""
    rest, got = gather_repeats(p, argv)
    ns = p.parse_args(rest)
    for dest, values in got.items():
        setattr(ns, dest, [*(getattr(ns, dest, None) or []), *values])
    return ns


def add_chain_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampler chain (llama.cpp's flags and defaults)")
    num, add = finite_number, g.add_argument
    add("--repeat-penalty", type=num, default=1.0, help="repeat penalty, 1.0 = off (default 1.0)")
    add("--repeat-last-n", type=int, default=64, help="penalty window, -1 = context (default 64)")
    add("--presence-penalty", type=num, default=0.0, help="presence penalty (default 0.0)")
    add("--frequency-penalty", type=num, default=0.0, help="frequency penalty (default 0.0)")
    add("--dry-multiplier", type=num, default=0.0, help="DRY multiplier, 0 = off (default 0.0)")
    add("--dry-base", type=num, default=1.75, help="DRY base (default 1.75)")
    add("--dry-allowed-length", type=int, default=2, help="DRY allowed length (default 2)")
    add(
        "--dry-penalty-last-n",
        type=int,
        default=-1,
        help="DRY window, -1 = context, 0 = off (default -1)",
    )
    add(
        "--dry-sequence-breaker",
        action="append",
        metavar="STR",
        help="a DRY sequence breaker (repeatable; 'none' for none; default \\n : \" *)",
    )
    add("--top-nsigma", type=num, default=-1.0, help="top-n-sigma, -1 = off (default -1)")
    add("--typical", type=num, default=1.0, help="typical-p, 1.0 = off (default 1.0)")
    add("--xtc-probability", type=num, default=0.0, help="XTC probability, 0 = off (default 0)")
    add("--xtc-threshold", type=num, default=0.1, help="XTC threshold (default 0.1)")
    add("--dynatemp-range", type=num, default=0.0, help="dynamic temperature range (default 0)")
    add("--dynatemp-exp", type=num, default=1.0, help="dynamic temperature exponent (default 1)")
    add("--mirostat", type=int, default=0, help="mirostat 0 = off, 1 or 2 (default 0)")
    add("--mirostat-lr", type=num, default=0.1, help="mirostat learning rate eta (default 0.1)")
    add("--mirostat-ent", type=num, default=5.0, help="mirostat target entropy tau (default 5)")
    add(
        "-l",
        "--logit-bias",
        action="append",
        metavar="TOKEN_ID(+/-)BIAS",
        help="add a bias to one token's logit, e.g. 15043+1 or 15043-inf (repeatable)",
    )
    add(
        "--samplers",
        metavar="NAMES",
        help="the chain's order, ';'-separated "
        "(default penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)",
    )
    add("--sampling-seq", metavar="LETTERS", help="the same in one letter each (default edskypmxt)")
    add("--grammar", metavar="GBNF", help="constrain the text with a GBNF grammar")
    add("--grammar-file", metavar="FILE", help="read the GBNF grammar from a file")
    add("-j", "--json-schema", metavar="SCHEMA", help="constrain the text to a JSON schema")
    add("--json-schema-file", metavar="FILE", help="read the JSON schema from a file")


def _read(path: str, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TokenstepError(f"{flag}: cannot read {path} ({e.__class__.__name__}).") from None


def grammar_from_args(args: argparse.Namespace) -> str:
    """The GBNF text the flags ask for ("" for none); two of them at once is one sentence."""
    given = [
        f
        for f in ("grammar", "grammar_file", "json_schema", "json_schema_file")
        if getattr(args, f, None) is not None
    ]
    if len(given) > 1:
        names = " and ".join("--" + f.replace("_", "-") for f in given)
        raise TokenstepError(f"{names} both give a grammar: pass only one.")
    if not given:
        return ""
    from .engine.sampler.grammar import schema_to_gbnf

    flag = given[0]
    if flag in ("grammar", "json_schema"):  # bytes not UTF-8 reach argv as lone surrogates
        need_utf8(getattr(args, flag), "--grammar" if flag == "grammar" else "-j/--json-schema")
    if flag == "grammar":
        text, name = str(args.grammar), "--grammar"
    elif flag == "grammar_file":
        text, name = _read(args.grammar_file, "--grammar-file"), "--grammar-file"
    elif flag == "json_schema":
        text, name = schema_to_gbnf(args.json_schema), "the grammar -j/--json-schema makes"
    else:
        text = schema_to_gbnf(_read(args.json_schema_file, "--json-schema-file"))
        name = "the grammar --json-schema-file makes"
    check_grammar_size(text, name)
    return text


def chain_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The chain flags (when the parser has them) as SamplerSettings fields."""
    if not hasattr(args, "repeat_penalty"):
        return {}
    breakers = args.dry_sequence_breaker
    if breakers is None:
        dry_breakers = list(DEFAULT_BREAKERS)
    else:
        dry_breakers = [] if breakers == ["none"] else [_unescape(b) for b in breakers]
    f: dict[str, Any] = {
        "repeat_penalty": args.repeat_penalty,
        "repeat_last_n": args.repeat_last_n,
        "presence_penalty": args.presence_penalty,
        "frequency_penalty": args.frequency_penalty,
        "dry_multiplier": args.dry_multiplier,
        "dry_base": args.dry_base,
        "dry_allowed_length": args.dry_allowed_length,
        "dry_penalty_last_n": args.dry_penalty_last_n,
        "dry_sequence_breakers": dry_breakers,
        "top_n_sigma": args.top_nsigma,
        "typical_p": args.typical,
        "xtc_probability": args.xtc_probability,
        "xtc_threshold": args.xtc_threshold,
        "dynatemp_range": args.dynatemp_range,
        "dynatemp_exponent": args.dynatemp_exp,
        "mirostat": args.mirostat,
        "mirostat_eta": args.mirostat_lr,
        "mirostat_tau": args.mirostat_ent,
        "logit_bias": [parse_logit_bias(x) for x in args.logit_bias or []],
    }
    if args.samplers is not None and args.sampling_seq is not None:
        raise TokenstepError("--samplers and --sampling-seq both give the order: pass only one.")
    if args.samplers is not None:
        f["samplers"] = parse_samplers(args.samplers)
    elif args.sampling_seq is not None:
        f["samplers"] = parse_sampling_seq(args.sampling_seq)
    f["grammar"] = grammar_from_args(args)
    return f


def _unescape(text: str) -> str:
    """llama.cpp unescapes \\n, \\t, \\" ... in --dry-sequence-breaker."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
