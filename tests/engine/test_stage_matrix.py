"""Every sampler stage on every backend, and with every observer that changes how decoding
runs, each cell a real ``tokenstep trace`` process (against a REAL llama-server for the remote
backends). A cell either works, or it is exactly one sentence on stderr with exit code 1; a
crash (a negative return code, 134 from an abort, 139 from a segfault) or a traceback fails it.

Where a cell works on a backend that is not the reference (the local engine), its token ids
are compared with the reference's for the same flags whenever the trace says its pick is exact
(``server.pick_exact``), and the stages listed as exact over HTTP must say so: a claim of
exactness that does not hold fails, and so does an honest stage that stops claiming it.

A new backend joins by adding itself to :data:`BACKENDS` (its flags, whether it has a
vocabulary and an eval callback); its cells are generated from that.

Cost: each stage alone on each backend (-n 3), then each observer with the stages in three
groups that together turn every stage on (the lens alone costs ~4.7 s a process, its head
read; 15 of them would be most of the budget). 81 processes, two at a time: 44 s of CPU in
all, measured on a shared 2-core machine (161 s there under a load of 9).
"""

from __future__ import annotations

import json
import queue
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from tests.support.cli import run_cli
from tests.support.llama_server import Server, llama_server  # noqa: F401  (the session fixture)
from tui.engine import default_model_path

PROMPT = "The capital of France is"
BASE = ("-p", PROMPT, "-n", "3", "-c", "256", "-t", "1", "-s", "7")
VOCAB_REFUSAL = "needs llama.cpp's vocabulary"
OBSERVER_REFUSAL = "needs a local model"


@dataclass(frozen=True)
class Stage:
    name: str
    flags: tuple[str, ...]
    needs_vocab: bool = False  # reads the text of tokens (DRY, grammars)
    exact_remote: bool = True  # tokenstep's chain on the server's top 100 gives the full pick


STAGES = [
    # the repeat penalty divides a positive logit: logprobs (all <= 0) cannot say which are
    Stage(
        "penalties",
        ("--repeat-penalty", "1.5", "--frequency-penalty", "0.5", "--presence-penalty", "0.5"),
        exact_remote=False,
    ),
    Stage("dry", ("--dry-multiplier", "1", "--dry-allowed-length", "1"), needs_vocab=True),
    # top-n-sigma's sigma is over every logit, the stand-ins for the rest included
    Stage("top-n-sigma", ("--top-nsigma", "1"), exact_remote=False),
    Stage("top-k", ("--top-k", "3")),
    Stage("typical", ("--typical", "0.5")),
    Stage("top-p", ("--top-p", "0.5")),
    Stage("min-p", ("--min-p", "0.2")),
    Stage("xtc", ("--xtc-probability", "1", "--xtc-threshold", "0.1")),
    Stage("temperature", ("--temp", "1.5")),
    Stage("dynatemp", ("--dynatemp-range", "0.5", "--dynatemp-exp", "2")),
    Stage("mirostat-1", ("--mirostat", "1"), exact_remote=False),
    Stage("mirostat-2", ("--mirostat", "2"), exact_remote=False),
    Stage("logit-bias", ("-l", "7042-inf", "-l", "260+2")),  # ban " Paris", lift " the"
    Stage("grammar", ("--grammar", "root ::= [ a-zA-Z,.]+"), needs_vocab=True),
    Stage("json-schema", ("-j", '{"type":"string"}'), needs_vocab=True, exact_remote=False),
]
BY_NAME = {st.name: st for st in STAGES}

# Three groups that turn every stage on, for the observer cells (mirostat replaces the chain
# after the logit bias, so each mirostat has its own group).
GROUPS = {
    "chain": [
        BY_NAME[n]
        for n in (
            "penalties",
            "dry",
            "top-n-sigma",
            "top-k",
            "typical",
            "top-p",
            "min-p",
            "xtc",
            "dynatemp",
            "logit-bias",
            "grammar",
        )
    ],
    "mirostat-1": [BY_NAME["mirostat-1"], BY_NAME["json-schema"]],
    "mirostat-2": [BY_NAME["mirostat-2"], BY_NAME["temperature"], BY_NAME["grammar"]],
}

OBSERVERS = {"attention": ("--attention", "0"), "lens": ("--lens",), "graph": ("--graph",)}


@dataclass(frozen=True)
class Backend:
    name: str
    flags: Callable[[Server, int], tuple[str, ...]]  # the server and the slot to step
    vocab: bool  # DRY and grammars can be built
    observers: bool  # an eval callback in a local context (--attention, --lens, --graph)
    reference: bool = False  # the others' ids are compared with this one's


MODEL = str(default_model_path())
BACKENDS = [
    Backend("local", lambda _s, _n: ("-fa", "off"), vocab=True, observers=True, reference=True),
    Backend(
        "server", lambda s, n: ("--server", s.url, "--slot", str(n)), vocab=False, observers=False
    ),
    Backend(
        "server+vocab",
        lambda s, n: ("--server", s.url, "--slot", str(n), "-m", MODEL),
        vocab=True,
        observers=False,
    ),
]


@dataclass(frozen=True)
class Cell:
    backend: Backend
    stages: tuple[Stage, ...]
    observer: str = ""
    group: str = ""

    @property
    def id(self) -> str:
        what = f"group-{self.group}" if self.group else self.stages[0].name
        return f"{self.backend.name}:{what}" + (f":{self.observer}" if self.observer else "")

    def argv(self, server: Server, slot: int = 0) -> list[str]:
        flags = [f for st in self.stages for f in st.flags]
        obs = list(OBSERVERS[self.observer]) if self.observer else []
        n = ["-n", "1"] if self.observer == "lens" else []  # the lens: ~0.8 s a step, 2 cores
        return ["trace", *self.backend.flags(server, slot), *BASE, *flags, *obs, *n]

    def refusal(self) -> str | None:
        """The phrase of the one sentence this cell must end in, or None if it must run."""
        if self.observer and not self.backend.observers:
            return OBSERVER_REFUSAL
        if any(st.needs_vocab for st in self.stages) and not self.backend.vocab:
            return VOCAB_REFUSAL
        return None


CELLS = [Cell(b, (st,)) for b in BACKENDS for st in STAGES] + [
    Cell(b, tuple(group), obs, name)
    for b in BACKENDS
    for obs in ("", *OBSERVERS)
    for name, group in GROUPS.items()
]


@dataclass
class Outcome:
    proc: subprocess.CompletedProcess

    @property
    def err(self) -> str:
        return self.proc.stderr.decode(errors="replace")

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.proc.stdout.decode().splitlines()]

    def ids(self) -> list[int]:
        return [r["sampled"]["id"] for r in self.records() if r.get("sampled")]

    def exact(self) -> bool:
        return all(r["server"]["pick_exact"] for r in self.records() if "server" in r)

    def exact_ids(self) -> list[int]:
        """The picks up to the first one the trace does not call exact (after it the contexts
        of the two backends may differ, so nothing later can be compared)."""
        out = []
        for r in self.records():
            if not r.get("sampled"):
                continue
            if "server" in r and not r["server"]["pick_exact"]:
                break
            out.append(r["sampled"]["id"])
        return out


@pytest.fixture(scope="module")
def outcomes(llama_server) -> dict[str, Outcome]:  # noqa: F811
    # One slot per process running at a time (the fixture's -np 2): two clients on one slot
    # make llama-server evaluate two tokens in one batch where each alone evaluates one, and
    # its probabilities then move by up to 7% (p 0.2969 against 0.2760, measured here).
    slots: queue.Queue[int] = queue.Queue()
    for n in range(2):
        slots.put(n)

    def run(cell: Cell) -> tuple[str, Outcome]:
        slot = slots.get()
        try:
            return cell.id, Outcome(run_cli(*cell.argv(llama_server, slot), timeout=300))
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=2) as pool:  # two cores: two processes at a time
        return dict(pool.map(run, CELLS))


def _reference(cell: Cell) -> Cell:
    ref = next(b for b in BACKENDS if b.reference)
    return Cell(ref, cell.stages, "", cell.group)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_each_cell_runs_or_is_one_sentence(cell: Cell, outcomes: dict[str, Outcome]) -> None:
    out = outcomes[cell.id]
    rc, err = out.proc.returncode, out.err
    assert rc in (0, 1), f"{cell.id} crashed with return code {rc}:\n{err[-3000:]}"
    assert "Traceback" not in err and "GGML_ASSERT" not in err, err[-3000:]
    phrase = cell.refusal()
    if phrase is not None:
        assert rc == 1 and err.count("\n") == 1 and err.startswith("tokenstep: "), err
        assert phrase in err, err
        return
    assert rc == 0, err[-3000:]
    recs = out.records()
    n = 1 if cell.observer == "lens" else 3
    assert len(out.ids()) == n or recs[-1].get("eog"), (cell.id, out.ids())
    if cell.observer:
        key = {"attention": "attention", "lens": "lens", "graph": "graph"}[cell.observer]
        assert all(key in r for r in recs if r.get("sampled")), (cell.id, list(recs[0]))
    if cell.backend.reference and not cell.observer:
        return
    ref = outcomes[_reference(cell).id]
    assert ref.proc.returncode == 0, ref.err
    if not cell.backend.reference and all(st.exact_remote for st in cell.stages):
        assert out.exact(), (cell.id, [r["server"]["pick_note"] for r in recs if "server" in r])
    got = out.exact_ids()  # each claim of exactness holds: the same tokens as the local engine
    assert got == ref.ids()[: len(got)], (cell.id, out.ids(), ref.ids(), _why(out, ref))


def _why(out: Outcome, ref: Outcome) -> list:
    rows = []
    for a, b in zip(out.records(), ref.records(), strict=False):
        srv = a.get("server") or {}
        rows.append(
            (
                srv.get("cached"),
                srv.get("evaluated"),
                a["sampled"]["id"],
                [(c["id"], c["p"]) for c in a["top"][:4]],
                b["sampled"]["id"],
                [(c["id"], c["p"]) for c in b["top"][:4]],
            )
        )
    return rows
