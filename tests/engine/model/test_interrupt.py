"""A Ctrl-C is never lost (issue #31): one that lands inside a function llama.cpp calls back
through ctypes (its log while a model loads, the eval callback during a decode) is recorded,
not raised and dropped, and the next safe point raises it; every command turns it into one
sentence and exit code 130. The signal is raised where llama.cpp calls back, through the real
ctypes callbacks and the real model; on the code before the guard the ``KeyboardInterrupt``
reached ``sys.unraisablehook`` and the command ran on and exited 0."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from tests.support.cli import ROOT
from tui.cli import main
from tui.engine import Engine, EngineConfig, Model, SamplerSettings
from tui.engine.model import interrupt, llama_log
from tui.engine.observe.graph_tap import GraphTap
from tui.engine.run import loop


class SignalsInLogCallback:
    """Stands for llama_log's lock: the first time the log callback takes it, a Ctrl-C lands."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fired = False

    def __enter__(self) -> None:
        if not self.fired and sys._getframe(1).f_code is llama_log._on_log.__code__:
            self.fired = True
            signal.raise_signal(signal.SIGINT)
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@pytest.fixture
def dropped(monkeypatch) -> list[object]:
    """What ctypes prints as "Exception ignored" lands here instead."""
    seen: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


@pytest.fixture
def log_signals(monkeypatch) -> SignalsInLogCallback:
    fake = SignalsInLogCallback()
    monkeypatch.setattr(llama_log, "_lock", fake)
    return fake


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["tokenize", "The cat sat"], "tokenstep tokenize: interrupted; nothing was printed."),
        (["info"], "tokenstep info: interrupted; nothing was printed."),
        (
            ["trace", "-p", "The cat sat", "-n", "4"],
            "tokenstep trace: interrupted; the records above are whole; nothing more was decoded.",
        ),
        (
            ["verify", "-p", "The cat sat", "-n", "4"],
            "tokenstep verify: interrupted; nothing more was checked.",
        ),
        (
            ["compare", "-p", "The cat sat", "--text", "--vs", "-ctk", "q8_0"],
            "tokenstep compare: interrupted; nothing more was compared.",
        ),
    ],
)
def test_a_ctrl_c_in_the_log_callback_while_the_model_loads_ends_the_command(
    argv, said, model_path, log_signals, dropped, capsys
):
    assert main([*argv, "-m", str(model_path)]) == 130
    out, err = capsys.readouterr()
    assert log_signals.fired and dropped == []
    assert out == ""  # nothing after the load ran
    assert err.splitlines() == [said]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def test_the_load_itself_raises_it_and_frees_what_it_loaded(model_path, log_signals, dropped):
    with interrupt.guard(), pytest.raises(KeyboardInterrupt):
        Model(model_path)
    assert log_signals.fired and dropped == []


class SignalsInEvalCallback(GraphTap):
    """A census tap whose first node seen gets a Ctrl-C, inside llama.cpp's eval callback."""

    fired = False

    def _callback(self, t: int, ask: bool, user_data: int | None) -> bool:
        if not self.fired:
            self.fired = True
            signal.raise_signal(signal.SIGINT)
        return super()._callback(t, ask, user_data)


def test_a_ctrl_c_in_the_eval_callback_ends_the_run_before_the_next_decode(model, dropped):
    tap = SignalsInEvalCallback(census=True, n_layer=model.info.n_layer)
    engine = Engine(model, EngineConfig(n_ctx=256, n_threads=2), SamplerSettings(temp=0.0), [tap])
    try:
        prompt = engine.vocab.tokenize("The cat sat", add_special=True)
        with interrupt.guard(), pytest.raises(KeyboardInterrupt):
            list(loop.generate(engine, 8, prompt))
        assert tap.fired and dropped == []
        assert len(engine.records) == 1  # the prefill, during which it came; no decode after
    finally:
        engine.close()


def test_a_sigint_whose_python_handler_never_ran_is_raised_at_the_next_check():
    """The C handler ran (on a thread that could not wake the main one, or the raise was lost;
    here a handler that does nothing stands for that): the wakeup fd still holds SIGINT, and
    the next check raises it, and every check after; Python's handler is given back."""
    with interrupt.guard():
        interrupt.check()  # nothing yet
        mine = signal.signal(signal.SIGINT, lambda _n, _f: None)
        signal.raise_signal(signal.SIGINT)
        signal.signal(signal.SIGINT, mine)
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup fd given back
    interrupt.check()  # no guard: nothing to raise


@interrupt.called_from_c
def as_if_from_c() -> None:
    signal.raise_signal(signal.SIGINT)


def test_the_check_raises_on_the_main_thread_only_and_outside_a_callback_at_once():
    with interrupt.guard():
        as_if_from_c()  # recorded, not raised
        other: list[BaseException] = []

        def elsewhere() -> None:
            try:
                interrupt.check()
            except BaseException as exc:  # noqa: BLE001 - the test looks for any
                other.append(exc)

        t = threading.Thread(target=elsewhere)
        t.start()
        t.join()
        assert other == []  # a KeyboardInterrupt belongs to the main thread
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        with pytest.raises(KeyboardInterrupt):  # outside a callback it raises at once
            signal.raise_signal(signal.SIGINT)


def test_an_inner_guard_leaves_the_outer_one_in_force_and_hand_over_ends_it():
    with interrupt.guard():
        handler = signal.getsignal(signal.SIGINT)
        with interrupt.guard():
            assert signal.getsignal(signal.SIGINT) is handler
        assert signal.getsignal(signal.SIGINT) is handler  # still the outer one's
        as_if_from_c()
        with pytest.raises(KeyboardInterrupt):
            interrupt.hand_over()  # what came before the hand-over is raised there
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupt.guard():
        interrupt.hand_over()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.set_wakeup_fd(-1) == -1
        interrupt.check()  # handed over: nothing is recorded any more


def test_a_suite_started_in_the_background_takes_sigint_back():
    """A background job of a non-interactive shell starts with SIGINT ignored: the suite's
    conftest gives Python's handler back, so these tests and the processes they start see the
    Ctrl-C they send (with SIGINT left ignored, 20 of them failed)."""
    code = "import signal, tests.conftest; print(repr(signal.getsignal(signal.SIGINT)))"
    res = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.stdout.strip() == repr(signal.default_int_handler), res.stderr[-2000:]
