"""The paths not taken, driven through the worker's own commands (no screen): rewind, force
and fork each leave a branch; jumping to one gives the same next distribution as a fresh
context fed the same tokens; the branches survive save and ``--resume``."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tui.engine import SamplerSettings
from tui.engine.model import kv_order
from tui.engine.record.run_record import Pick
from tui.engine.record.surprise import along
from tui.worker.commands import (
    Force,
    ForkSeq,
    JumpPath,
    PathsShown,
    RewindTokens,
    Save,
    Send,
    Step,
    SurpriseScale,
)
from tui.worker.resume import load_header, restore
from tui.worker.session_store import FORMAT_VERSION, read_session
from tui.worker.thread import Worker

MESSAGE = "Name a colour."


def _worker(make_engine, tmp_path, **cfg) -> Worker:
    eng = make_engine(SamplerSettings(temp=0.8, seed=5), n_ctx=1024, **cfg)
    w = Worker(eng, autoplay=False, autosave_dir=tmp_path, close_engine=False)
    w.handle(PathsShown(True))  # the tree pane is showing: rewinds park their cells
    return w


def _steps(w: Worker, n: int) -> None:
    for _ in range(n):
        w.handle(Step())


def _three_branches(w: Worker) -> None:
    w.handle(Send(MESSAGE))
    _steps(w, 4)
    w.handle(RewindTokens(2))  # a branch: the four tokens
    _steps(w, 2)
    w.handle(Force(w.engine.vocab.tokenize(" zebra")[0]))  # a branch: the sampler's own pick
    _steps(w, 1)
    w.handle(ForkSeq())
    _steps(w, 2)
    w.handle(RewindTokens(1))  # a branch: the fork; and the live reply before the rewind
    assert w.error is None, w.error


def _fresh(make_engine, tokens: list[int]) -> np.ndarray:
    eng = make_engine(n_seq_max=1, n_ctx=1024)
    eng.prefill(tokens)
    assert eng.logits is not None
    return eng.logits.copy()


def test_rewind_force_and_fork_leave_branches(make_engine, tmp_path):
    w = _worker(make_engine, tmp_path, n_seq_max=4)
    _three_branches(w)
    hows = [b.how for b in w.state.paths]
    assert {"force", "fork", "rewind"} <= set(hows) and len(hows) >= 3, hows
    assert any(b.seq is not None for b in w.state.paths)  # cells parked in a seq_id
    live = tuple(w.engine.tokens[w.state.reply_start :])
    assert all(b.tokens != live for b in w.state.paths)
    # every branch has the p of its first token after the branch point
    for b in w.state.paths:
        at = next(i for i, t in enumerate(b.tokens) if i >= len(live) or live[i] != t)
        assert b.values[at] is not None and 0.0 <= b.values[at].p <= 1.0


def test_jumping_gives_the_same_distribution_as_stepping_there_fresh(make_engine, tmp_path):
    w = _worker(make_engine, tmp_path, n_seq_max=4)
    _three_branches(w)
    eng = w.engine
    start = w.state.reply_start
    assert start is not None
    seen = set()
    for b in list(w.state.paths):
        target = eng.tokens[:start] + list(b.tokens)
        w.handle(JumpPath(b.id))
        assert w.error is None, w.error
        assert eng.tokens == target and not eng.kv.check(eng.ctx)
        assert w.state.path_note is not None
        seen.add("cache" if "KV cache" in w.state.path_note else "recomputed")
        assert eng.logits is not None
        # Stepping there fresh: a cleared context decodes the same calls that wrote these
        # cells (verify's replay), so the same kernels see the same numbers in the same cell
        # order, and the logits are bit-identical. A single batched prefill would not do: on
        # an AVX2 build its kernels round otherwise than one-token steps do.
        pos = kv_order.read_positions(eng.ctx, 0)
        assert pos == sorted(pos) == eng.kv.positions(0)  # llama.cpp's own cell order
        again = eng.verify_last("replay")
        assert again.max_abs_diff == 0.0, again.explain()
    assert seen == {"cache", "recomputed"}  # parked cells, and the force's never-decoded pick
    w.handle(Step())
    assert w.error is None and not eng.kv.check(eng.ctx)
    assert eng.verify_last("replay").max_abs_diff == 0.0


def _tree(w: Worker) -> list[tuple[tuple[int, ...], str, list[Pick | None]]]:
    """Each branch's tokens, how it was left, and its picks whole but for their record and
    sequence (a resumed branch has neither: its cells and records were another context's)."""
    return [
        (
            tuple(b.tokens),
            b.how,
            [None if v is None else dataclasses.replace(v, record=None, seq=0) for v in b.values],
        )
        for b in w.state.paths
    ]


def test_the_tree_survives_save_and_resume(make_engine, tmp_path):
    """Each pick of a branch comes back whole: p, p', entropy, its seed, the chain's cuts and
    whether it was forced (a resumed pick with seed -1 and no cuts was format 1's loss)."""
    w = _worker(make_engine, tmp_path, n_seq_max=4)
    _three_branches(w)
    saved = _tree(w)
    picks = [v for b in w.state.paths for v in b.values if v is not None]
    # each pick holds its chain's seed: 5 on seq 0, 5 + seq_id on a fork's own chain (an AVX2
    # build's reply is still going when the fork steps, so its branch holds seq 2's picks)
    assert picks and all(v.seed == 5 + v.seq and v.cuts for v in picks)
    assert any(v.forced for v in picks)  # the reply left behind holds the forced token
    path = tmp_path / "s.jsonl"
    w.handle(Save(str(path)))
    header, _ = read_session(path)
    assert header["tokenstep_session"] == FORMAT_VERSION == 2
    w2 = _worker(make_engine, tmp_path / "2", n_seq_max=4)
    restore(w2, header, path)
    assert _tree(w2) == saved
    assert "path(s) not taken came back" in w2.state.notice
    b = w2.state.paths[0]
    w2.handle(JumpPath(b.id))
    assert w2.error is None
    assert w2.state.path_note is not None and "decoded again" in w2.state.path_note
    target = w2.engine.tokens
    fresh = _fresh(make_engine, target)
    assert w2.engine.logits is not None
    assert int(np.argmax(w2.engine.logits)) == int(np.argmax(fresh))


def test_the_surprise_scale_cycles_and_scores_the_next_prompt(make_engine, tmp_path):
    w = _worker(make_engine, tmp_path)
    scales = []
    for _ in range(4):
        w.handle(SurpriseScale())
        scales.append(w.state.surprise_scale)
    assert scales == ["p", "p'", "entropy", "off"]
    assert not w.engine.score_prompt
    w.handle(SurpriseScale())
    w.handle(Send(MESSAGE))
    assert not w.engine.score_prompt  # the run's prompt is decoded as without the map
    w.build_view()  # the text pane reads the map: the observer context scores the prompt
    vals = along(w.engine.run, w.engine.surprise, w.engine.tokens)
    assert vals[0] is None and all(v is not None and v.prompt for v in vals[1:])


def test_without_the_tree_pane_a_rewind_frees_its_cells(make_engine, tmp_path):
    w = _worker(make_engine, tmp_path)
    w.handle(PathsShown(False))
    w.handle(Send(MESSAGE))
    _steps(w, 3)
    used = w.engine.kv.used
    w.handle(RewindTokens(1))
    assert w.engine.kv.used == used - 1 and not w.engine.parked
    (b,) = w.state.paths
    assert b.seq is None and b.how == "rewind"
    w.handle(JumpPath(b.id))
    assert w.state.path_note is not None and "decoded again" in w.state.path_note


def test_the_tree_view_lists_live_and_branches_with_p_at_the_branch_point(make_engine, tmp_path):
    from tui.worker.paths import paths_view

    w = _worker(make_engine, tmp_path, n_seq_max=4)
    _three_branches(w)
    v = paths_view(w)
    assert v.rows[0].id == 0 and v.rows[0].how == "live"
    branches = v.rows[1:]
    assert len(branches) >= 3
    for r in branches:
        b = next(b for b in w.state.paths if b.id == r.id)
        assert b.values[r.at] is not None and r.p == b.values[r.at].p
        assert r.pieces[0] == w.engine.vocab.piece(b.tokens[r.at])
    assert any(r.cached for r in branches) and any(not r.cached for r in branches)


def test_the_surprise_view_equals_the_step_records(make_engine, tmp_path):
    from tui.engine.sampler.sampling import softmax
    from tui.worker.surprise import surprise_view

    w = _worker(make_engine, tmp_path)
    w.handle(SurpriseScale())
    w.handle(Send(MESSAGE))
    eng = w.engine
    rows = []
    for _ in range(5):
        assert eng.logits is not None
        rows.append((eng.logits.copy(), eng.records[eng.logits_record]))
        w.handle(Step())
    v = surprise_view(w, eng.tokens)
    start = w.state.reply_start
    assert start is not None and v.prompt_tokens == start
    assert v.prompt_scored == start - 1 and v.prompt_ppl is not None and v.prompt_ppl > 1
    assert v.scored_rows == start - 1 and v.extra_bytes == (start - 1) * eng.info.n_vocab * 4
    for k, (logits, rec) in enumerate(rows):
        got = v.values[start + k]
        assert got is not None and rec.sampled == eng.tokens[start + k]
        assert got[0] == pytest.approx(float(softmax(logits)[rec.sampled]), rel=1e-5)
        assert got[2] == pytest.approx(rec.entropy)
        assert rec.chain is not None and got[1] == pytest.approx(rec.chain.p_final(rec.sampled))


def test_a_format_1_tree_still_resumes(make_engine, tmp_path):
    """Format 1 saved each pick as [p, p', entropy]: such a file resumes, its branches with
    those three numbers and seed -1 (what it did not keep)."""
    w = _worker(make_engine, tmp_path, n_seq_max=4)
    _three_branches(w)
    path = tmp_path / "s.jsonl"
    w.handle(Save(str(path)))
    header, records = read_session(path)
    header["tokenstep_session"] = 1
    for b in header["paths"]["branches"]:
        b["values"] = [
            None if v is None else [v["p"], v["p_final"], v["entropy"]] for v in b["values"]
        ]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in [header, *records]), encoding="utf-8")
    header1 = load_header(old)
    w2 = _worker(make_engine, tmp_path / "2", n_seq_max=4)
    restore(w2, header1, old)
    want = [
        (t, how, [None if v is None else (v.p, v.p_final, v.entropy, -1, ()) for v in vs])
        for t, how, vs in _tree(w)
    ]
    got = [
        (t, how, [None if v is None else (v.p, v.p_final, v.entropy, v.seed, v.cuts) for v in vs])
        for t, how, vs in _tree(w2)
    ]
    assert got == want and got
