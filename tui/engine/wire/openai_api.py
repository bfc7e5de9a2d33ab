"""Which API a server speaks: llama-server's native one, or OpenAI's.

llama-server answers ``GET /props`` with its ``default_generation_settings``; an
OpenAI-compatible server (vLLM, SGLang, Ollama, llama-cpp-python's, a gateway) answers
``GET /v1/models`` and not that (vLLM 0.32: ``/props`` 404, ``/health`` 200 with an empty body,
so ``/health`` is never asked first). llama-server answers both, and is stepped natively unless
``--api openai`` asks for its ``/v1``. The key (``--api-key``) goes with every question.
"""

from __future__ import annotations

from .remote_http import ServerClient, ServerError

APIS = ("native", "openai")


def detect_api(url: str, timeout: float = 30.0, api_key: str | None = None) -> str:
    """ "native" or "openai", from what the server answers; a server that answers neither (or
    nothing) is one sentence."""
    client = ServerClient(url, timeout, api_key=api_key)  # "llama-server": the default API
    try:
        try:
            props = client.get("/props").body
            if isinstance(props, dict) and "default_generation_settings" in props:
                return "native"
        except ServerError as exc:
            if "HTTP" not in str(exc) and "not JSON" not in str(exc):
                raise  # nothing listens, a timeout, still loading: no second question helps
            if "(HTTP 401)" in str(exc) or "(HTTP 403)" in str(exc):
                # llama-server's --api-key (its /v1/models is public), or a gateway: the key's
                # sentence, about a server not yet known to be llama-server
                said = str(exc).replace("the llama-server at", "the server at", 1)
                raise ServerError(said, retry=exc.retry) from exc
        client.what = "OpenAI-compatible server"
        try:
            client.get("/v1/models")
        except ServerError as exc:
            if "(HTTP 401)" in str(exc) or "(HTTP 403)" in str(exc):
                raise  # an OpenAI-compatible server that wants a key: its own sentence
            reason = str(exc).rstrip(".")
            raise ServerError(
                f"{client.url} is not llama-server (its GET /props has no "
                f"default_generation_settings) nor an OpenAI-compatible server ({reason}).",
                retry=exc.retry,
            ) from exc
        return "openai"
    finally:
        client.close()
