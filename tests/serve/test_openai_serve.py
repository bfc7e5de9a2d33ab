"""``tokenstep serve --server`` with an OpenAI-compatible server: the API is asked once, tabs get
no slots, and the API key moves from the tabs' command line into their environment."""

from __future__ import annotations

from tests.support.openai_servers import llama_cpp_server  # noqa: F401  (the session fixture)
from tui.args import build_parsers
from tui.crash import shown_argv
from tui.serve_remote import remote_api, without_api_key

KEY = "sk-serve-SECRET-42"


def test_the_key_leaves_the_tabs_command_line():
    argv, env = without_api_key(["--server", "http://h:1", "--api-key", KEY, "-m", "x.gguf"])
    assert argv == ["--server", "http://h:1", "-m", "x.gguf"] and env == {"OPENAI_API_KEY": KEY}
    argv, env = without_api_key([f"--api-key={KEY}", "--api", "openai"])
    assert argv == ["--api", "openai"] and env == {"OPENAI_API_KEY": KEY}
    assert KEY not in " ".join(shown_argv(["tokenstep", "--api-key", KEY]))
    assert KEY not in " ".join(shown_argv(["tokenstep", f"--api-key={KEY}"]))


def test_serve_asks_the_api_once_and_names_the_model(llama_cpp_server):  # noqa: F811
    app_args = build_parsers()["app"].parse_args(["--server", llama_cpp_server.url])
    api, name = remote_api(app_args)
    assert api == "openai" and name == "SmolLM2-135M-Instruct.Q4_1"
