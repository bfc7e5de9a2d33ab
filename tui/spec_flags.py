"""Speculative decoding's flags, with llama-server's names and defaults (``--spec-type``,
``-md``, ``--spec-draft-*``, ``--spec-ngram-simple-*``), and the speculator they build.

llama-server has more types (``draft-eagle3``, ``draft-mtp``, ``ngram-map-k``, ``ngram-mod``,
``ngram-cache`` ...); tokenstep has the two that need no special model: ``ngram-simple`` and
``draft-simple``. In this llama.cpp ``--spec-draft-n-max``/``-n-min``/``-p-min`` apply to the
draft model only; ngram-simple drafts up to ``--spec-ngram-simple-size-m`` tokens.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .engine.model.errors import TokenstepError
from .engine.sampler.bounds import INT32_MAX

if TYPE_CHECKING:
    from .engine.run.backend import Backend
    from .engine.speculative.spec_verify import Speculator

SPEC_TYPES = ("none", "ngram-simple", "draft-simple")
LLAMA_SERVER_ONLY = (
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)


def spec_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("speculative decoding (llama-server's flags)")
    g.add_argument(
        "--spec-type",
        default="none",
        metavar="none|ngram-simple|draft-simple",
        help="draft tokens and verify them in one llama_decode: ngram-simple drafts from the "
        "context itself, draft-simple with a second model (-md) (default: none)",
    )
    g.add_argument(
        "-md",
        "--model-draft",
        "--spec-draft-model",
        dest="model_draft",
        metavar="PATH",
        help="draft model for --spec-type draft-simple (the same vocabulary as -m)",
    )
    g.add_argument(
        "--spec-draft-n-max",
        type=int,
        default=3,
        metavar="N",
        help="tokens the draft model drafts at most (default: 3)",
    )
    g.add_argument(
        "--spec-draft-n-min",
        type=int,
        default=0,
        metavar="N",
        help="a shorter draft from the draft model is dropped (default: 0)",
    )
    g.add_argument(
        "--spec-draft-p-min",
        "--draft-p-min",
        type=float,
        default=0.0,
        metavar="P",
        help="the draft model stops at a token below this probability (greedy) (default: 0.00)",
    )
    g.add_argument(
        "--spec-ngram-simple-size-n",
        type=int,
        default=12,
        metavar="N",
        help="ngram-simple: length of the n-gram looked up (default: 12)",
    )
    g.add_argument(
        "--spec-ngram-simple-size-m",
        type=int,
        default=48,
        metavar="N",
        help="ngram-simple: length of the m-gram drafted (default: 48)",
    )
    g.add_argument(
        "--spec-ngram-simple-min-hits",
        type=int,
        default=1,
        metavar="N",
        help="ngram-simple: minimum hits (default: 1; llama.cpp's ngram-simple ignores it)",
    )


def check_spec(args: argparse.Namespace) -> str:
    """The flags' own checks, before any model loads; returns the type ('none': off)."""
    kind = getattr(args, "spec_type", None)
    kind = "none" if kind is None else kind  # '' is a type named nothing: refused below
    if kind in LLAMA_SERVER_ONLY:
        raise TokenstepError(
            f"--spec-type {kind} is llama-server's; tokenstep has ngram-simple and draft-simple."
        )
    if kind not in SPEC_TYPES:
        raise TokenstepError(
            f"--spec-type must be none, ngram-simple or draft-simple, not {kind!r}."
        )
    md = getattr(args, "model_draft", None)
    if kind != "none" and getattr(args, "server", None):
        raise TokenstepError(
            "--spec-type needs the logits of every row of one llama_decode, which no server "
            "returns (llama-server's /completion and /v1/completions give one position's top "
            "K); drop --server or --spec-type."
        )
    if kind == "draft-simple" and not md:
        raise TokenstepError("--spec-type draft-simple needs a draft model: -md PATH.")
    if md and kind != "draft-simple":
        raise TokenstepError("-md gives a draft model; add --spec-type draft-simple to use it.")
    for flag, lo in (("draft_n_max", 0), ("draft_n_min", 0), ("ngram_simple_min_hits", 1)):
        v = getattr(args, f"spec_{flag}")
        if not lo <= v <= INT32_MAX:  # llama.cpp's int32_t, bounded as --top-k is
            name = flag.replace("_", "-")
            raise TokenstepError(
                f"--spec-{name} must be between {lo} and {INT32_MAX} (llama.cpp's 32-bit int), "
                f"not {v}."
            )
    if not 0.0 <= args.spec_draft_p_min <= 1.0:
        raise TokenstepError(
            f"--spec-draft-p-min must be between 0 and 1, not {args.spec_draft_p_min}."
        )
    for flag in ("size_n", "size_m"):
        v = getattr(args, f"spec_ngram_simple_{flag}")
        if not 1 <= v <= 1024:  # llama.cpp's range
            name = flag.replace("_", "-")
            raise TokenstepError(f"--spec-ngram-simple-{name} must be between 1 and 1024, not {v}.")
    return kind


def speculator_from_args(args: argparse.Namespace, engine: Backend) -> Speculator | None:
    """The speculator for ``engine`` (None without --spec-type); the draft model loads here."""
    kind = check_spec(args)
    if kind == "none":
        return None
    from .engine.speculative.spec_verify import NgramDrafter, Speculator

    if kind == "ngram-simple":
        from .engine.speculative.spec_ngram import NgramSimple

        ngram = NgramSimple(
            args.spec_ngram_simple_size_n,
            args.spec_ngram_simple_size_m,
            args.spec_ngram_simple_min_hits,
        )
        return Speculator(NgramDrafter(ngram))
    from .engine.speculative.spec_draft import DraftSimple

    local = engine.local
    if local is None:  # refused with --server before connecting
        raise TokenstepError(f"--spec-type {engine.capabilities.missing('fork')}.")
    return Speculator(
        DraftSimple(
            local,
            args.model_draft,
            n_max=args.spec_draft_n_max,
            n_min=args.spec_draft_n_min,
            p_min=args.spec_draft_p_min,
        )
    )
