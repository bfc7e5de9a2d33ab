"""A session saved over a server resumes over the same server (issue 37, item 5), natively and
over ``/v1``, end to end with a real llama-server: saved by the worker as ctrl+s saves it, then
resumed the way ``tokenstep --resume FILE --server URL`` does (:func:`tui.startup.run_app`'s
steps before the screen: ``load_header``, ``apply_to_args``, ``engine_from_args``, ``restore``).

The batch sizes are the server's own, unknown to tokenstep: the file holds null for them (it
held 0, which resuming refused), and a ``server`` section says where the session ran."""

from __future__ import annotations

import pytest

from tests.support.llama_server import llama_server  # noqa: F401  (the session fixture)
from tui.args import build_parsers
from tui.backend_flags import ignored_over_server
from tui.engine import SamplerSettings
from tui.engine.remote.openai_backend import OpenAIBackend
from tui.engine.remote.remote import RemoteBackend
from tui.trace_cli import engine_from_args
from tui.worker import Worker
from tui.worker.commands import Save, Send, Step
from tui.worker.resume import apply_to_args, load_header, restore
from tui.worker.session_store import read_session


@pytest.mark.parametrize("api", ["native", "openai"])
def test_a_session_saved_over_a_server_resumes_over_it(llama_server, tmp_path, api):  # noqa: F811
    url = llama_server.url
    settings = SamplerSettings(temp=0.0)
    backend = OpenAIBackend(url, settings) if api == "openai" else RemoteBackend(url, settings)
    w = Worker(backend, raw=False, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        w.handle(Send("Name a colour."))
        for _ in range(3):
            w.handle(Step())
        path = tmp_path / f"{api}.jsonl"
        w.handle(Save(str(path)))
        saved_tokens = list(backend.tokens)
        saved_messages = [(m.role, m.content) for m in w.state.messages]
    finally:
        backend.close()
    header, _records = read_session(path)
    assert header["config"]["n_batch"] is None and header["config"]["n_ubatch"] is None
    want_api = "openai" if api == "openai" else "llama-server"
    assert header["server"] == {"url": backend.url, "api": want_api}
    assert header["context_tokens"] == saved_tokens and len(saved_tokens) > 3

    argv = ["--server", url, "--resume", str(path), "-b", "256", "-ub", "128"]
    args = build_parsers()["app"].parse_args(argv + (["--api", "openai"] if api == "openai" else []))
    header = load_header(path)  # refused before: "config.n_batch and config.n_ubatch ..."
    apply_to_args(args, header)
    assert (args.batch_size, args.ubatch_size) == (256, 128)  # the command line's, not null
    assert ignored_over_server(args) is None  # the saved -c is not the user's: no warning
    args.threads = 1
    engine = engine_from_args(args)
    w2 = Worker(engine, raw=args.raw, autoplay=False, autosave_dir=None, close_engine=False)
    try:
        restore(w2, header, path)
        assert engine.tokens == saved_tokens
        assert [(m.role, m.content) for m in w2.state.messages] == saved_messages
        w2.handle(Step())  # and it goes on from there
        assert engine.tokens[: len(saved_tokens)] == saved_tokens
        assert len(engine.tokens) == len(saved_tokens) + 1
    finally:
        engine.close()


def test_a_local_session_still_needs_its_batch_sizes(tmp_path, model_path):
    """null batch sizes are a server's session's alone: without a ``server`` section the
    file is refused as before."""
    import json

    from tests.support.resume_files import write_resume

    path = write_resume(tmp_path / "s.jsonl", model_path, config={"n_batch": None})
    with pytest.raises(Exception, match="config.n_batch must be a whole number"):
        load_header(path)
    header = json.loads(path.read_text())
    header["server"] = {"url": "http://127.0.0.1:8080", "api": "ftp"}
    path.write_text(json.dumps(header) + "\n")
    with pytest.raises(Exception, match="server.api must be llama-server or openai, not"):
        load_header(path)
