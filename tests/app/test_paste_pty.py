"""A paste always lands in the chat box, whatever has the focus: the app runs in a real
pseudo-terminal (``python -m tui`` as a user starts it, Textual's own Linux driver reading the
bytes) and the test writes what a terminal sends for a bracketed paste, ``ESC[200~ ... ESC[201~``.

As reported: while a reply plays the focus is on the controls; a 210 kB paste vanished (the chat
box stayed empty) and the Enter after it forced a token. The reply plays on until the test ends
(end-of-generation tokens are biased away and a full context shifts).
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.pty import TIMEOUT, Terminal
from tui.worker.session_store import read_session

ENDLESS = ("--greedy", "-t", "1", "--context-full", "shift", "-l", "0-inf", "-l", "2-inf")
ENDLESS += ("-l", "4-inf")
START, END = b"\x1b[200~", b"\x1b[201~"


def latest_conversation(folder: Path) -> list[dict]:
    files = sorted(folder.rglob("*.jsonl"))
    if not files:
        return []
    header, _ = read_session(files[-1])
    return list(header["conversation"])


def wait_for(cond, what: str):
    end = time.monotonic() + TIMEOUT
    while not (value := cond()):
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def reply_playing(term: Terminal, message: bytes) -> None:
    term.until(b"waiting for a message", "the model to load")
    term.write(message + b"\r")
    term.until(b"generating", "the reply to start")


def test_a_paste_in_step_mode_lands_in_the_chat_box_and_enter_sends_it(tmp_path):
    """Paused mid-reply (the keys are on the controls): the paste goes into the chat box, so
    the Enter after it sends it (the message is autosaved as it is sent)."""
    term = Terminal(tmp_path, "-c", "2048", *ENDLESS)
    try:
        reply_playing(term, b"Tell me a story.")
        since = term.mark()
        term.write(b" ")  # space pauses: step mode, the reply waits for a key
        term.until(b"Step mode", "step mode", since)
        lines = [f"Line {i} of the pasted notes about the sea." for i in range(60)]
        pasted = "\n".join(lines)  # 2,6 kB, 60 lines
        term.write(START + pasted.encode() + END)
        term.write(b"\r")
        convo = wait_for(
            lambda: (c := latest_conversation(term.autosaves)) and len(c) >= 3 and c,
            f"the pasted message in the autosave of {term.autosaves}",
        )
        assert convo[-1] == {"role": "user", "content": " ".join(lines)}  # joined, whole
        assert convo[0] == {"role": "user", "content": "Tell me a story."}
    finally:
        code = term.close()
    assert code == 0


def test_a_210_kb_paste_during_a_reply_lands_in_the_chat_box(tmp_path):
    """While the reply plays: the paste is in the box (the notice says where it went); Enter
    then queues it, which the worker refuses in one sentence (too long for -c 512) and hands
    back to the box, while the reply plays on. The Enter forces no token."""
    term = Terminal(tmp_path, "-c", "512", *ENDLESS)
    try:
        reply_playing(term, b"Tell me a story.")
        big = "the waves rolled in and " * 8_750  # 210,000 characters, one line
        since = term.mark()
        term.write(START + big.encode() + END)
        term.until(b"Pasted 210,000 characters into the chat box", "the paste's notice", since)
        term.write(b"\r")
        term.until(b"but the context holds 512", "the refusal", since)
        assert b"Forced token" not in term.out[since:]
    finally:
        code = term.close()
    assert code == 0
    convo = latest_conversation(term.autosaves)
    assert convo[0] == {"role": "user", "content": "Tell me a story."}
    assert len(convo) == 2 and convo[1]["role"] == "assistant"  # the reply, not cut by Enter
