"""Which llama.cpp cell holds which token, and sequence 0's cells kept in position order.

The oracle for the cell order is llama.cpp itself: ``llama_state_seq_get_data`` lists a
sequence's cells in cell order (``kv_order.read_positions``). The oracle for the numbers is a
replay of the engine's own decode calls in a cleared context (verify's ``replay``), which
writes the cells in position order: bit-identical only when the cached cells are in that
order too."""

from __future__ import annotations

from tui.engine import SamplerSettings
from tui.engine.model import kv_order
from tui.engine.record.surprise import along
from tui.engine.run import paths
from tui.engine.run.batch import BatchToken, DecodeCall
from tui.engine.run.decode import decode
from tui.worker.commands import PathsShown, RewindTokens, Send, Step
from tui.worker.thread import Worker

PROMPT = "The capital of France is"


def mirror_order(eng, seq: int) -> list[int]:
    """The positions of ``seq``'s cells in the mirror's idea of llama.cpp's cell order."""
    return [c.pos for c in sorted((c for c in eng.kv.cells if seq in c.seqs), key=lambda c: c.cell)]


def assert_mirror_knows(eng) -> None:
    for seq in eng.kv.seq_ids():
        assert mirror_order(eng, seq) == kv_order.read_positions(eng.ctx, seq), seq


def holes_under_sequence_0(eng) -> None:
    """A parked path dropped after sequence 0 went on: its own cells are freed under
    sequence 0's two newest cells."""
    eng.prefill(eng.vocab.tokenize(PROMPT))
    for _ in range(5):
        eng.step()
    seq = paths.park(eng)
    eng.rewind(4)
    eng.step(force=eng.vocab.tokenize(" Berlin")[0])
    eng.step()
    paths.drop(eng, seq)
    assert eng.kv.slots is not None and eng.kv.slots.holes == 4


def test_the_cell_slots_replay_llamas_head():
    s = kv_order.CellSlots(16)
    assert s.place_calls([4, 4]) == list(range(8)) and s.head == 8
    s.free([2, 3, 5])  # llama_memory_seq_rm: the head goes back to the lowest freed cell
    assert s.head == 2 and s.holes == 3
    assert s.place(1) == [2] and s.head == 3
    s.free([6])
    assert s.place(2) == [3, 5]  # the first free cells from the head, in cell order
    s.moved()  # llama_memory_seq_add: the next search starts at cell 0
    assert s.place(1) == [6]
    s.head = 12  # 12 > 8 used + 2: enough free cells below, so the search starts at 0
    assert s.place(1) == [8]
    assert kv_order.ubatch_sizes(10, 4, 3) == [3, 1, 3, 1, 2]


def test_the_mirror_knows_where_llama_puts_every_cell(make_engine):
    eng = make_engine(SamplerSettings(temp=0.9, seed=7), n_seq_max=4)
    holes_under_sequence_0(eng)
    assert_mirror_knows(eng)
    eng.step()
    assert_mirror_knows(eng)
    dst = eng.fork(0)
    for _ in range(3):
        eng.step_seqs()
        assert_mirror_knows(eng)
    eng.drop_seq(dst)  # its cells alternate with sequence 0's: three more holes
    assert_mirror_knows(eng)
    for _ in range(3):
        eng.step()
        assert_mirror_knows(eng)
    eng.rewind(2)
    eng.prefill(eng.vocab.tokenize(" and Paris"))
    assert_mirror_knows(eng)


def test_llama_fills_a_hole_out_of_order_and_the_numbers_change(make_engine):
    """Why the engine keeps the order: the same tokens, decoded by the same calls, in other
    cells. Flash attention adds V cell by cell into an f16 accumulator, so the order rounds."""
    eng = make_engine(SamplerSettings(temp=0.0), n_seq_max=4)
    holes_under_sequence_0(eng)
    pos = eng.kv.last_pos(0) + 1
    token = eng.sample().token
    decode(eng, DecodeCall([BatchToken(token, pos, (0,), True)], [(0, 1)]))  # no keeping
    got = kv_order.read_positions(eng.ctx, 0)
    assert got is not None and got != sorted(got)  # llama.cpp put it in the lowest hole
    assert mirror_order(eng, 0) == got and kv_order.seq_in_order(eng.kv) is False
    res = eng.verify_last("replay")
    assert eng.flash_attn_resolved != "on" or res.max_abs_diff > 0.0
    assert res.cells_in_order is False and "not in position order" in res.explain()


def test_a_step_over_a_hole_decodes_the_tail_again_in_order(make_engine):
    eng = make_engine(SamplerSettings(temp=0.0), n_seq_max=4)
    holes_under_sequence_0(eng)
    tokens = eng.tokens
    values = along(eng.run, eng.surprise, tokens)
    n_records = len(eng.records)
    rec = eng.step()
    assert rec is not None and not rec.kv_problems
    # One more call before the step: the two tokens above the holes, decoded again into them.
    redo = eng.records[n_records]
    assert [t.id for t in redo.call.tokens] == tokens[-2:] and rec.index == n_records + 1
    assert eng.tokens[: len(tokens)] == tokens
    assert along(eng.run, eng.surprise, tokens) == values  # their p and p' are the ones picked with
    pos = kv_order.read_positions(eng.ctx, 0)
    assert pos == sorted(pos) and mirror_order(eng, 0) == pos
    assert eng.kv.slots is not None and eng.kv.slots.holes == 0  # the 3 lowest of 6 free cells
    assert eng.verify_last("replay").max_abs_diff == 0.0
    assert eng.step() is not None and len(eng.records) == rec.index + 2  # no more decoding again
    assert eng.verify_last("replay").max_abs_diff == 0.0


def test_a_new_message_after_a_dropped_path_lands_in_order(make_engine, tmp_path):
    eng = make_engine(SamplerSettings(temp=0.8, seed=5), n_ctx=1024, n_seq_max=4)
    w = Worker(eng, autoplay=False, autosave_dir=tmp_path, close_engine=False)
    w.handle(PathsShown(True))
    w.handle(Send("Name a colour."))
    for _ in range(6):
        w.handle(Step())
    w.handle(RewindTokens(4))  # the four tokens are parked
    w.handle(Step())
    w.handle(Step())
    w.handle(Send("And another one?"))  # a new turn drops the parked path: its cells free
    assert w.error is None, w.error
    pos = kv_order.read_positions(eng.ctx, 0)
    assert pos == sorted(pos) and mirror_order(eng, 0) == pos
    turn = eng.turns[-1]
    assert turn.reused + turn.computed == eng.n_past
    assert eng.verify_last("replay").max_abs_diff == 0.0
    for _ in range(3):
        w.handle(Step())
        assert eng.verify_last("replay").max_abs_diff == 0.0


def test_a_context_shift_keeps_llamas_own_order_and_verify_says_so(make_engine):
    """After a shift the kept cells stay and new tokens fill the gap, as in llama.cpp: the
    engine does not decode the window again (that would undo what the shift saves)."""
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=48, context_full="shift", n_keep=4)
    eng.prefill(eng.vocab.tokenize("One two three four five six seven eight nine ten"))
    words = eng.vocab.tokenize(" eleven twelve thirteen fourteen fifteen")
    i = 0
    while len(eng.shifts) == 0 or i < 60:  # forced: no end of generation before the shift
        assert eng.step(force=words[i % len(words)]) is not None
        i += 1
    assert_mirror_knows(eng)
    got = kv_order.read_positions(eng.ctx, 0)
    assert got is not None and got != sorted(got)
    res = eng.verify_last("replay")
    assert res.cells_in_order is False and "not in position order" in res.explain()


def test_a_fork_over_a_hole_steps_both_sequences_in_order(make_engine):
    """A fork's first step decodes one token per sequence in one call: over the holes it would
    put both in freed cells under sequence 0's newest, so the fork first decodes sequence 0's
    tail again into them."""
    eng = make_engine(SamplerSettings(temp=0.9, seed=7), n_seq_max=4)
    holes_under_sequence_0(eng)
    tokens = eng.tokens
    n_records = len(eng.records)
    dst = eng.fork(0)
    redo = eng.records[n_records]
    assert [t.id for t in redo.call.tokens] == tokens[-2:] and len(eng.records) == n_records + 1
    for _ in range(3):
        assert eng.step_seqs() is not None
    assert_mirror_knows(eng)
    for seq in (0, dst):
        pos = kv_order.read_positions(eng.ctx, seq)
        assert pos == sorted(pos) == eng.kv.positions(seq), seq
