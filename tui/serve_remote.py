"""``tokenstep serve --server``: which API the server speaks, asked once before any tab
opens, and the API key moved from the tabs' command line into their environment."""

from __future__ import annotations

import argparse
from pathlib import Path


def remote_api(app_args: argparse.Namespace) -> tuple[str, str]:
    """With ``--server``: which API it speaks (--api, else detected once here) and, over
    /v1, the model each tab steps."""
    from .engine.remote.openai_backend import api_key_from
    from .engine.wire.openai_api import detect_api
    from .engine.wire.openai_reply import choose_model, read_model_list
    from .engine.wire.remote_http import ServerClient

    key = api_key_from(app_args.api_key)
    api = app_args.api or detect_api(app_args.server, 30.0, key)
    if api != "openai":
        return api, ""
    client = ServerClient(app_args.server, 30.0, api_key=key, what="OpenAI-compatible server")
    try:
        models = read_model_list(client.url, client.get("/v1/models").body)
    finally:
        client.close()
    served = choose_model(client.url, models, app_args.server_model)
    return api, Path(served.id).name.removesuffix(".gguf")


def without_api_key(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The tabs' flags without the API key, in any spelling :mod:`~tui.engine.model.secret` knows,
    and the environment that carries it instead (a command line is visible to every user of
    the machine, in ``ps``)."""
    from .engine.model import secret

    out, key = secret.without_key(argv)
    return out, ({secret.ENV: key} if key else {})
