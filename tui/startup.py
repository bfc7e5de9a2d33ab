"""From parsed flags to a running app: decode threads, ``--resume``, the engine, the app.

:func:`tui.cli.main` calls :func:`run_app` after :func:`tui.trace_cli.preflight` has checked the
flags and the model file, so a mistake is one sentence before the UI takes the screen."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import crash
from .app import TokenstepApp
from .backend_flags import ignored_over_server
from .engine.model import interrupt
from .engine.model.chat_template import CHATML
from .engine.model.errors import TokenstepError
from .engine.model.model import system_info
from .engine.run.backend import Backend
from .spec_flags import speculator_from_args
from .trace_cli import engine_from_args
from .worker import session_store
from .worker.resume import apply_to_args, load_header, restore
from .worker.spec_run import SpecRun


def app_threads() -> int:
    """Decode threads when -t is not given: every core but one. The screen needs a core;
    llama.cpp's threads wait for each other by spinning, so a decode that shares its cores
    with the UI thread slows down many times over (measured on 2 cores: -t 2 gave 530 ms per
    token next to a busy UI, -t 1 gave 16-19 ms)."""
    return max(1, (os.cpu_count() or 2) - 1)


def build_app(engine: Backend, args: argparse.Namespace, **kw: Any) -> TokenstepApp:
    """The app for these flags: the chat template (ChatML when the model has none, said at
    start-up) and the system prompt."""
    fallback = not args.raw and not engine.info.chat_template
    if fallback:  # llama.cpp's fallback, as llama-server uses: say so before anyone types
        engine.use_chat_template(CHATML)
    app = TokenstepApp(
        engine,
        raw=args.raw,
        prefix_cache=not args.no_prefix_cache,
        prefill=args.prompt or "",
        **kw,
    )
    system = getattr(args, "system_prompt", None)
    if system:
        app.worker.system_prompt = system
    if fallback:
        app.worker.state.note(
            "This model has no chat template: using ChatML, llama.cpp's fallback (as "
            "llama-server does). Start with --chat-template NAME|FILE for another, or --raw.",
            "warn",
        )
    return app


def start_observers(app: TokenstepApp, engine: Backend, args: argparse.Namespace) -> None:
    """``--attention`` (or a resumed session that had it on): the capture starts on, in an
    observer context of its own; the run's context is made as if nobody looked."""
    layers = getattr(args, "attention", None)
    if layers is not None and engine.capabilities.attention:
        from .engine.observe.attention_capture import parse_layers

        app.worker.attention.start(parse_layers(layers, engine.info.n_layer))


def start_notes(
    app: TokenstepApp, engine: Backend, crashed: str | None, ignored: str | None = None
) -> None:
    """The lines start-up owes the user, before the notice already set (the ChatML fallback,
    a resumed session's): the last run's crash, flags --server ignores, and extra buffers
    turned off (or forced on over the AMX kernels), so whoever sees a slower prefill knows
    why."""
    local = engine.local  # extra buffers are a local model's choice (a server made its own)
    choice = local.model.repack if local is not None else None
    notes = [crashed] if crashed else []
    if ignored:
        notes.append(ignored[0].upper() + ignored[1:])
    if choice is not None and choice.notable:
        notes.append(choice.reason[0].upper() + choice.reason[1:] + ".")
    if not notes:
        return
    state = app.worker.state
    warn = crashed is not None or bool(ignored or choice and choice.amx and choice.use_extra_bufts)
    level = "warn" if warn or state.notice_level == "warn" else state.notice_level
    state.note(" ".join([*notes, state.notice] if state.notice else notes), level)


def run_app(args: argparse.Namespace) -> int:
    header = None
    if getattr(args, "resume", None):
        header = load_header(args.resume)  # a bad file fails here, before the UI starts
        apply_to_args(args, header)
    if not args.threads:
        args.threads = app_threads()
    folder = session_store.default_autosave_dir()
    crashed = crash.previous_crash(folder)  # told once: the file is renamed
    if crashed:
        print(f"tokenstep: {crashed}", file=sys.stderr)
    stack = crash.CrashLog(folder)  # a native crash from here on leaves its stack there
    stack.install(f"llama.cpp: {system_info()}")
    guard = crash.TerminalGuard()  # and gives the terminal back
    guard.start(f"tokenstep: the app crashed; terminal restored; the stack is in {stack.path}")
    try:
        return _run(args, header, crashed, guard)
    finally:
        guard.release()
        stack.close()  # reached only without a native crash: the file goes


def _run(
    args: argparse.Namespace, header: dict | None, crashed: str | None, guard: crash.TerminalGuard
) -> int:
    try:
        engine = engine_from_args(args, observers=False)  # looking never changes the run
    except TokenstepError as exc:
        if header is None:
            raise
        raise TokenstepError(f"resuming {args.resume}: {exc}") from None
    app = build_app(engine, args, autosave_dir=session_store.default_autosave_dir())
    try:
        start_observers(app, engine, args)
    except BaseException:
        engine.close()
        raise
    spec = None
    try:
        spec = speculator_from_args(args, engine)  # --spec-type: the draft model loads here
    except BaseException:
        engine.close()
        raise
    if spec is not None:
        app.worker.spec = SpecRun(spec)
    if header is not None:
        try:
            restore(app.worker, header, args.resume)
        except BaseException:
            engine.close()
            raise
    start_notes(app, engine, crashed, ignored_over_server(args))
    try:
        interrupt.hand_over()  # a Ctrl-C of the start-up ends it here; then it is a key
    except BaseException:
        engine.close()
        raise
    guard.screen_taken()
    try:
        app.run()
    except KeyboardInterrupt:
        pass
    finally:
        guard.release()  # the app gave the terminal back (a crash never gets here)
        stopped = app.worker.stop(timeout=0.2 if app.quit_now else 60.0)
        if spec is not None and stopped:  # not under a decode still running
            spec.close()
    return 0
