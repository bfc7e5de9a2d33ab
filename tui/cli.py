"""Command line: ``tokenstep`` (the app), ``tokenstep trace``, ``tokenstep info``,
``tokenstep verify``, ``tokenstep tokenize``, ``tokenstep serve``, ``tokenstep tour``,
``tokenstep compare``.

The top of the package: it parses (:mod:`tui.args`) and hands over to the command or the app.
Every user mistake ends with one sentence on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Callable, Sequence
from types import TracebackType

from .args import parse
from .engine.model import interrupt, secret
from .engine.model.errors import TokenstepError, one_line

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


def _redacting_hook(hook: Hook) -> Hook:
    """``sys.excepthook`` that prints an unexpected traceback with the API key masked."""
    import traceback

    def redacted(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        text = "".join(traceback.format_exception(kind, exc, tb))
        sys.stderr.write(secret.redact(text))

    return redacted if secret.known() else hook


# What a Ctrl-C stopped, per command (the app's start-up under "").
INTERRUPTED = {
    "": "the app did not start",
    "trace": "the records above are whole; nothing more was decoded",
    "verify": "nothing more was checked",
    "info": "nothing was printed",
    "tokenize": "nothing was printed",
    "serve": "the server did not start",
    "tour": "the tour did not start",
    "compare": "nothing more was compared",
}


def main(argv: Sequence[str] | None = None) -> int:
    with interrupt.guard():  # a Ctrl-C inside llama.cpp's callbacks is kept, not dropped
        return _main(list(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    secret.collect(argv)  # before anything can print: every message below is masked
    sys.excepthook = _redacting_hook(sys.excepthook)
    try:
        if argv[:1] == ["tokenize"]:  # the vocabulary only: no engine flags, no context
            from .tokenize_cli import tokenize_main

            return tokenize_main(argv[1:])
        if argv[:1] == ["tour"]:  # the guided tour: the model and context flags only
            from .tour.cli import tour_main
            from .trace_cli import config_from_args

            return tour_main(argv[1:], config_from_args)
        if argv[:1] == ["compare"]:  # two configurations in lockstep: A-flags --vs B-flags
            from .compare.cli import compare_main
            from .trace_cli import config_from_args, settings_from_args

            return compare_main(argv[1:], config_from_args, settings_from_args)
        cmd, args = parse(argv)
        if getattr(args, "server", None):  # a key no header can carry: said before connecting
            from .engine.remote.openai_backend import api_key_from

            api_key_from(getattr(args, "api_key", None))
        if cmd in ("trace", "verify", "info") and not faulthandler.is_enabled():
            # A native crash (in llama.cpp) prints the Python stack on stderr instead of
            # ending with exit code 139 and nothing said; the app writes it to a file instead.
            faulthandler.enable(all_threads=True)
        if cmd == "trace":
            from .trace_cli import trace_main

            return trace_main(args)
        if cmd == "info":
            from .trace_cli import info_main

            return info_main(args)
        if cmd == "verify":
            from .verify_cli import verify_main

            return verify_main(args)
        if cmd == "serve":
            from .serve import serve_main  # aiohttp and textual-serve load only to serve

            return serve_main(args)
        from .trace_cli import preflight

        preflight(args)  # a bad flag or model file fails here, before the UI takes the screen
        from .startup import run_app  # textual loads only for the app

        return run_app(args)
    except TokenstepError as exc:
        print(f"tokenstep: {secret.redact(one_line(str(exc)))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        try:
            sys.stdout.flush()  # whole lines before the sentence
        except OSError:
            pass
        name = argv[0] if argv[:1] and argv[0] in INTERRUPTED else ""
        what = f"tokenstep{' ' + name if name else ''}: interrupted"
        print(f"{what}; {INTERRUPTED[name]}.", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
