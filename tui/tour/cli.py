"""``tokenstep tour``: the guided tour on the model and context the flags name.

``--lang en|zh`` picks the language (default: the locale, zh where LC_ALL or LANG starts with
zh); ``-p TEXT`` is the prompt the first chapters run on. A bad flag or model file is one
sentence before the screen opens.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..engine import EngineConfig
from ..engine.model import interrupt

if TYPE_CHECKING:
    from ..engine.run.backend import Backend


def tour_parser() -> argparse.ArgumentParser:
    from ..args import _context_flags, _model_flags, _Parser

    p = _Parser(
        prog="tokenstep tour",
        description="A guided tour of the generation loop, run live on the model: a guess "
        "before every reveal, in English or Chinese.",
    )
    _model_flags(p)
    _context_flags(p)
    p.add_argument("--lang", choices=["en", "zh"], help="language (default: from the locale)")
    p.add_argument("-p", "--prompt", metavar="TEXT", help="the prompt the loop chapters run on")
    return p


def tour_main(
    argv: Sequence[str], make_config: Callable[[argparse.Namespace], EngineConfig]
) -> int:
    """Parse, check the model file, then run the tour's own app. ``make_config`` is the app's
    own flags-to-context function (the same checks, the same messages)."""
    from ..engine.model.model import probe
    from .lab import Lab
    from .screen import TourApp, TourScreen, locale_lang

    args = tour_parser().parse_args(list(argv))
    config = make_config(args)
    if not config.n_threads:  # as the app: every core but one, the screen needs a core
        config.n_threads = max(1, (os.cpu_count() or 2) - 1)
    probe(args.model)
    lang = args.lang or locale_lang()
    path, prompt = args.model, args.prompt

    def lab() -> Lab:
        return Lab(path, config=config, lang=lang, prompt=prompt)

    interrupt.hand_over()  # Ctrl-C is the tour's key from here on
    TourApp(TourScreen(lang, lab=lab)).run()
    return 0


def open_tour(app: object) -> None:
    """The app's ``l`` key: the tour on the app's model and context settings, in a context
    of its own, starting from what the chat box holds (if anything)."""
    from textual.app import App
    from textual.widgets import Input

    from .lab import Lab
    from .screen import TourScreen, locale_lang

    assert isinstance(app, App)
    engine: Backend = app.worker.engine  # type: ignore[attr-defined]
    session = engine.local  # the tour's context loads the same file, so it needs a local one
    local = engine.capabilities.attention and session is not None
    path = session.model.path if session is not None and local else None
    config = engine.config if local else None
    boxes = app.query("#chat").results(Input)
    prompt = next((b.value.strip() for b in boxes if b.value.strip()), None)
    lang = locale_lang()

    def lab() -> Lab:
        return Lab(path, config=config, lang=lang, prompt=prompt, local=local)

    app.push_screen(TourScreen(lang, lab=lab))
