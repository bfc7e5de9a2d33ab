"""The command line's flags and the prompt: parsers for ``tokenstep`` (the app), ``trace``,
``info`` and ``verify``, and :func:`read_prompt`.

Flags follow llama.cpp's names and meanings. A mistake raises :class:`TokenstepError` with one
sentence; :func:`tui.cli.main` prints it. A leaf module: the app and the commands import it, it
imports neither.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from .backend_flags import gpu_flags, repack_flags, server_flags, swa_flag
from .engine.model import secret
from .engine.model.errors import TokenstepError
from .prompt_input import DEFAULT_N_CTX as DEFAULT_N_CTX
from .prompt_input import read_prompt as read_prompt
from .sampler_flags import finite_number as _number
from .spec_flags import spec_flags
from .version import VersionAction

COMMANDS = ("trace", "info", "verify", "serve")


class _Parser(argparse.ArgumentParser):
    """No abbreviations (the key has one spelling); errors as one masked sentence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        see = " ".join(w for w in ("tokenstep", self._cmd, "--help") if w)
        raise TokenstepError(f"{secret.redact(message)} (see '{see}').")

    @property
    def _cmd(self) -> str:
        return self.prog.split()[-1] if " " in self.prog else ""


def _model_flags(p: argparse.ArgumentParser, *, server: bool = False) -> None:
    with_server = (
        "; with --server, the GGUF the server serves: only its vocabulary is loaded, for DRY "
        "and grammars"
    )
    p.add_argument(
        "-m",
        "--model",
        metavar="PATH",
        help="GGUF model file (default: bundled SmolLM2-135M-Instruct)"
        + (with_server if server else ""),
    )


def _context_flags(p: argparse.ArgumentParser, *, one_sequence: bool = False) -> None:
    """The context's flags. ``one_sequence``: a command whose contexts hold one sequence and
    never fill (compare) parses -np, --context-full and --keep without showing them (default
    None), so it can refuse them in its own sentence."""

    def shown(default: Any, text: str) -> dict[str, Any]:
        if one_sequence:
            return {"default": None, "help": argparse.SUPPRESS}
        return {"default": default, "help": text}

    p.add_argument(
        "-c",
        "--ctx-size",
        type=int,
        default=None,  # None: 4096, or over --server the server's (a given -c is warned)
        metavar="N",
        help="context size in tokens (default 4096; with --server, the server's own)",
    )
    p.add_argument(
        "-b",
        "--batch-size",
        type=int,
        default=2048,
        metavar="N",
        help="logical batch size: max tokens per llama_decode (default 2048)",
    )
    p.add_argument(
        "-ub",
        "--ubatch-size",
        type=int,
        default=512,
        metavar="N",
        help="physical batch size: tokens per graph run (default 512)",
    )
    p.add_argument(
        "-np",
        "--parallel",
        type=int,
        metavar="N",
        **shown(
            2,
            "sequences the context holds (default 2): a fork, or paths not taken kept in the cache",
        ),
    )
    p.add_argument(
        "-t",
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="CPU threads (default: all cores; the app keeps one for its UI)",
    )
    p.add_argument(
        "-fa",
        "--flash-attn",
        choices=["on", "off", "auto"],
        default="auto",
        help="flash attention (default auto)",
    )
    p.add_argument(
        "-ctk",
        "--cache-type-k",
        default="f16",
        metavar="TYPE",
        help="K cache type: f16, q8_0, q4_0, ... (default f16)",
    )
    p.add_argument(
        "-ctv",
        "--cache-type-v",
        default="f16",
        metavar="TYPE",
        help="V cache type (quantized V needs flash attention)",
    )
    p.add_argument(
        "--context-full",
        choices=["stop", "shift"],
        **shown(
            None,  # None: stop (over --server the server's own rule)
            "when the context is full: stop, or shift (forget the oldest half after --keep)",
        ),
    )
    p.add_argument(
        "--keep",
        type=int,
        metavar="N",
        **shown(
            0,
            "tokens a context shift never drops, plus BOS; -1 keeps the whole prompt (default 0)",
        ),
    )
    swa_flag(p)


def _sampler_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--temp", type=_number, default=0.8, help="temperature; 0 means greedy (default 0.8)"
    )
    p.add_argument("--top-k", type=int, default=40, help="top-k, 0 = off (default 40)")
    p.add_argument("--top-p", type=_number, default=0.95, help="top-p, 1.0 = off (default 0.95)")
    p.add_argument("--min-p", type=_number, default=0.05, help="min-p, 0.0 = off (default 0.05)")
    p.add_argument(
        "-s", "--seed", type=int, default=42, help="RNG seed for the dist sampler (default 42)"
    )
    p.add_argument("--greedy", action="store_true", help="always take the highest logit")
    from .sampler_flags import add_chain_flags

    add_chain_flags(p)


def _attention_spec(text: str) -> str:
    """Syntax of --attention (a layer, a comma list or 'all'); the range is checked once the
    model says how many layers it has."""
    from .engine.observe.attention_capture import parse_layers

    try:
        parse_layers(text)
    except TokenstepError as exc:
        raise argparse.ArgumentTypeError(
            str(exc).replace("--attention takes", "expected").rstrip(".")
        ) from None
    return text


def _graph_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--attention",
        type=_attention_spec,
        metavar="LAYER|all",
        help="add each step's attention weights (kq_soft_max) for these layers; "
        "turns flash attention off",
    )
    p.add_argument(
        "--graph",
        action="store_true",
        help="add the graph census: node count and each layer's chain of named ops",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="time every graph node (SLOWER: each node runs on its own)",
    )


def _prompt_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--prompt", metavar="TEXT", help="prompt text ('-' reads standard input)")
    p.add_argument("-f", "--file", metavar="PATH", help="read the prompt from a file")
    p.add_argument(
        "--chat", action="store_true", help="wrap the prompt in the model's chat template"
    )
    p.add_argument(
        "--special",
        action="store_true",
        help="parse special-token text such as <|im_end|> in the prompt",
    )


def build_parsers() -> dict[str, argparse.ArgumentParser]:
    app = _Parser(prog="tokenstep", description="Step a real llama.cpp model one token at a time.")
    _model_flags(app, server=True)
    _context_flags(app)
    _sampler_flags(app)
    server_flags(app)
    gpu_flags(app)
    repack_flags(app)
    spec_flags(app)
    app.add_argument("-p", "--prompt", metavar="TEXT", help="pre-fill the chat box")
    app.add_argument("--raw", action="store_true", help="plain completion, no chat template")
    app.add_argument(
        "--chat-template",
        metavar="NAME|FILE",
        help="chat template: a name (chatml) or a Jinja file; default the model's own, or "
        "ChatML (llama.cpp's fallback, as llama-server uses) when it has none",
    )
    app.add_argument(
        "-sys",
        "--system-prompt",
        metavar="TEXT",
        help="system message at the start of every chat (in the app: /system TEXT)",
    )
    app.add_argument("--version", action=VersionAction)
    app.add_argument(
        "--no-prefix-cache", action="store_true", help="re-decode the whole prompt each turn"
    )
    app.add_argument(
        "--resume",
        metavar="FILE",
        help="start from a saved or autosaved session (.jsonl): conversation, settings, and "
        "the context re-prefilled",
    )
    app.add_argument(
        "--attention",
        metavar="LAYER|all",
        help="start with attention capture on for LAYER (or all), in an observer context of "
        "its own (flash attention off there, the run's context untouched); 'a' toggles it",
    )
    app.epilog = (
        "Commands: 'tokenstep trace --help', 'tokenstep info --help', 'tokenstep verify --help', "
        "'tokenstep tokenize --help', 'tokenstep serve --help'."
    )

    trace = _Parser(
        prog="tokenstep trace", description="Print one JSON object per llama_decode call."
    )
    _model_flags(trace, server=True)
    _context_flags(trace)
    _sampler_flags(trace)
    _prompt_flags(trace)
    server_flags(trace)
    gpu_flags(trace)
    repack_flags(trace)
    trace.add_argument(
        "-n",
        "--n-predict",
        type=int,
        default=32,
        metavar="N",
        help="tokens to generate (default 32)",
    )
    _graph_flags(trace)
    spec_flags(trace)
    trace.add_argument(
        "--lens",
        action="store_true",
        help="add the logit lens: each layer's top 5 for the predicted row (l_out projected "
        "by the model's head; costs n_layer x n_vocab x n_embd per step)",
    )
    trace.add_argument(
        "--lens-grid",
        action="store_true",
        help="the lens over every position of each decode too (lens_grid: per position and "
        "layer the top-1 and its p; prompts get logits on every row; as many multiply-adds "
        "as --lens per position, at most the last 64 positions of a decode)",
    )
    trace.add_argument(
        "--events",
        action="store_true",
        help="after each record, the run record's events it made (decode, pick with p, p′, "
        "the chain's survivors and the seed, turn, round), as the app keeps them",
    )

    info = _Parser(
        prog="tokenstep info",
        description="Model facts and KV cache sizes, from the GGUF header only.",
    )
    _model_flags(info)
    info.add_argument(
        "-c",
        "--ctx-size",
        type=int,
        default=0,
        metavar="N",
        help="context size for the KV sizes (default: n_ctx_train)",
    )
    swa_flag(info)
    repack_flags(info)
    info.add_argument("--json", action="store_true", help="print JSON")

    verify = _Parser(
        prog="tokenstep verify",
        description="After every step, recompute the context from scratch in a fresh context "
        "and compare logits with the cached step's. Exit code 3 if a top-1 token differs.",
    )
    _model_flags(verify)
    _context_flags(verify)
    _sampler_flags(verify)
    _prompt_flags(verify)
    gpu_flags(verify)
    repack_flags(verify)
    verify.add_argument("--server", help=argparse.SUPPRESS)  # refused: verify needs a context
    spec_flags(verify)
    for flag in ("--api", "--server-model", "--api-key"):  # with either API, the same sentence
        verify.add_argument(flag, help=argparse.SUPPRESS)
    verify.add_argument(
        "-n",
        "--n-predict",
        type=int,
        default=16,
        metavar="N",
        help="tokens to generate, each one checked (default 16)",
    )
    verify.add_argument(
        "--no-replay",
        action="store_true",
        help="skip the final replay of the engine's own decode calls",
    )
    return {"app": app, "trace": trace, "info": info, "verify": verify, "serve": _serve_parser()}


def _serve_parser() -> argparse.ArgumentParser:
    serve = _Parser(
        prog="tokenstep serve",
        description="Serve the app to browsers (textual-serve): each tab runs its own app "
        "process on the same model.",
        epilog="Every other flag is the app's (see 'tokenstep --help') and reaches each tab's app.",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument(
        "--max-sessions",
        type=int,
        default=8,
        metavar="N",
        help="tabs open at once; one over the cap is told so, with no process (default 8)",
    )
    return serve


def parse(argv: Sequence[str]) -> tuple[str, argparse.Namespace]:
    parsers = build_parsers()
    if argv and argv[0] == "serve":  # the flags serve does not know are the app's
        served, app_argv = parsers["serve"].parse_known_args(list(argv[1:]))
        served.app_argv = app_argv
        return "serve", served
    from .sampler_flags import parse_with_repeats

    if argv and argv[0] in COMMANDS:
        return argv[0], parse_with_repeats(parsers[argv[0]], list(argv[1:]))
    return "app", parse_with_repeats(parsers["app"], list(argv))
