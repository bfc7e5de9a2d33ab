"""``tokenstep tokenize``: text to token ids and pieces, with the vocabulary only.

Like llama.cpp's ``llama-tokenize``: the model is loaded with ``vocab_only`` (no weights, no
context), the text is tokenized with the model's own BOS rule (``--no-bos`` drops it) and
special-token text stays plain unless ``--parse-special``. One line per token,
``    id -> 'piece'`` (invalid UTF-8 as ``<0xNN>``, a newline or other unprintable character
escaped as ``\\n``); ``--ids``
prints only the ids as ``[1, 2, 3]``, ``--pieces`` only the pieces as a JSON list, and
``--show-count`` adds the total.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .engine.model import text_size
from .engine.model.errors import TokenstepError
from .engine.model.tokens import display_bytes

MAX_N_CTX = 1 << 20  # the largest context tokenstep makes (EngineConfig.validate)


def tokenize_parser() -> argparse.ArgumentParser:
    from .args import _Parser

    p = _Parser(
        prog="tokenstep tokenize",
        description="Tokenize a text with the model's vocabulary only (like llama-tokenize): "
        "ids and pieces, nothing decoded.",
    )
    p.add_argument("text", nargs="?", metavar="TEXT", help="the text to tokenize")
    p.add_argument("-m", "--model", metavar="PATH", help="GGUF model file (default: bundled)")
    p.add_argument("-p", "--prompt", metavar="TEXT", help="the text (as TEXT)")
    p.add_argument("-f", "--file", metavar="PATH", help="read the text from a file, verbatim")
    p.add_argument("--stdin", action="store_true", help="read the text from standard input")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--ids", action="store_true", help="print only the ids: [1, 2, 3]")
    out.add_argument("--pieces", action="store_true", help="print only the pieces (JSON list)")
    p.add_argument("--no-bos", action="store_true", help="no BOS token even if the model adds one")
    p.add_argument(
        "--parse-special",
        "--special",
        action="store_true",
        help="parse special-token text such as <|im_end|> (default: plain text, as "
        "llama-tokenize's --no-parse-special)",
    )
    p.add_argument(
        "--no-parse-special", action="store_false", dest="parse_special", help=argparse.SUPPRESS
    )
    p.add_argument("--show-count", action="store_true", help="print the number of tokens")
    return p


def check_given(args: argparse.Namespace) -> None:
    """Exactly one of TEXT, -p, -f and --stdin gives the text."""
    given = [
        name
        for name, on in (
            ("TEXT", args.text is not None),
            ("-p", args.prompt is not None),
            ("-f", args.file is not None),
            ("--stdin", args.stdin),
        )
        if on
    ]
    if len(given) > 1:
        raise TokenstepError(f"{' and '.join(given)} both give the text; pass one of them.")
    if not given:
        raise TokenstepError("no text: pass TEXT, -p TEXT, -f FILE or --stdin.")


def read_text(args: argparse.Namespace, n_ctx: int = 0) -> str:
    """The text from TEXT, -p, -f or --stdin; one larger than a context of ``n_ctx`` tokens
    (the model's training context) can hold is refused before it is read whole
    (:mod:`~tui.engine.model.text_size`)."""
    check_given(args)
    if args.file is not None:
        try:
            with open(args.file, "rb") as fh:
                raw = text_size.read_bounded(fh, f"the text in {args.file}", n_ctx)
        except OSError as exc:
            raise TokenstepError(f"cannot read {args.file}: {exc.strerror}.") from exc
    elif args.stdin or args.prompt == "-":  # -p - as in trace
        raw = text_size.read_bounded(sys.stdin.buffer, "the text on standard input", n_ctx)
    else:
        text = str(args.text if args.text is not None else args.prompt)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise TokenstepError(
                f"the text is not valid UTF-8 (bad byte at character {exc.start})."
            ) from exc
        text_size.check_text("the text", text, n_ctx)
        return text
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenstepError(
            f"the text is not valid UTF-8 (bad byte at offset {exc.start})."
        ) from exc


def tokenize_main(argv: Sequence[str]) -> int:
    args = tokenize_parser().parse_args(list(argv))
    check_given(args)  # a missing text is said before the header is read
    from .engine.model import gguf_header
    from .engine.model.info import facts
    from .engine.model.model import default_model_path

    path = Path(args.model) if args.model is not None else default_model_path()
    n_train = facts(gguf_header.validate(path)).n_ctx_train or 0  # the header only
    n_ctx = min(n_train, MAX_N_CTX)  # a header's claim, bounded as -c is
    text = read_text(args, n_ctx)  # before the model load: a typo should not wait for it
    from .engine.model.vocab_only import VocabModel

    model = VocabModel(args.model)
    try:
        ids = model.vocab.tokenize(
            text, add_special=model.add_bos and not args.no_bos, parse_special=args.parse_special
        )
        out = sys.stdout
        if args.ids:
            out.write("[" + ", ".join(str(t) for t in ids) + "]\n")
        elif args.pieces:
            pieces = [display_bytes(model.vocab.piece(t)) for t in ids]
            out.write(json.dumps(pieces, ensure_ascii=False) + "\n")
        else:
            for t in ids:
                shown = display_bytes(model.vocab.piece(t))
                safe = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
                out.write(f"{t:>6} -> '{safe}'\n")
        if args.show_count:
            out.write(f"Total number of tokens: {len(ids)}\n")
    finally:
        model.close()
    return 0
