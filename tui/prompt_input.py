"""The prompt of ``trace`` and ``verify``: ``-p TEXT``, ``-p -`` (standard input) or ``-f FILE``,
read as UTF-8 and bounded by what the context can hold (:mod:`~tui.engine.model.text_size`) before it
is read whole. :mod:`tui.args` re-exports :func:`read_prompt`."""

from __future__ import annotations

import argparse
import sys

from .engine.model import text_size
from .engine.model.errors import TokenstepError

DEFAULT_N_CTX = 4096  # -c when not given (over --server, the server's own)


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt from -p, -p - (stdin) or -f; invalid UTF-8, or more text than the context
    can hold (:mod:`~tui.engine.model.text_size`, before it is read whole), is one sentence."""
    if args.file is not None and args.prompt is not None:
        raise TokenstepError("-p and -f both give the prompt; pass one of them.")
    n_ctx = args.ctx_size if (args.ctx_size or 0) > 0 else DEFAULT_N_CTX
    if args.file:
        try:
            with open(args.file, "rb") as fh:
                raw = text_size.read_bounded(fh, f"the prompt file {args.file}", n_ctx)
        except OSError as exc:
            raise TokenstepError(f"cannot read prompt file {args.file}: {exc.strerror}.") from exc
        source = args.file
    elif args.prompt == "-":
        raw = text_size.read_bounded(sys.stdin.buffer, "the prompt on standard input", n_ctx)
        source = "standard input"
    elif args.prompt is not None:
        try:  # bytes that are not UTF-8 reach argv as lone surrogates
            str(args.prompt).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TokenstepError(
                f"the prompt given with -p is not valid UTF-8 (bad byte at character {exc.start})."
            ) from exc
        text_size.check_text("the prompt given with -p", str(args.prompt), n_ctx)
        return str(args.prompt)
    else:
        raise TokenstepError("no prompt: pass -p TEXT, -p - for standard input, or -f FILE.")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenstepError(
            f"the prompt from {source} is not valid UTF-8 (bad byte at offset {exc.start})."
        ) from exc
