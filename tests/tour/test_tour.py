"""The tour's lab against the engine and arithmetic, its strings in both languages, and the
CJK wrapping (issue 34). The lab runs every chapter once per module on the bundled model, and
once on a Gemma-2-shaped model written here (another architecture: two KV caches, a byte
vocabulary, no chat template)."""

from __future__ import annotations

import math
import string
from pathlib import Path

import numpy as np
import pytest
from rich.cells import cell_len

from tests.support.swa_model import write_swa_model
from tui.engine import EngineConfig
from tui.engine.model import gguf_header
from tui.engine.model.chat_template import CHATML, Message, chat_tokens
from tui.engine.model.info import facts as header_facts
from tui.tokenize_cli import tokenize_main
from tui.tour import lab_kv
from tui.tour.chapters import pages_for
from tui.tour.lab import CHAPTERS, HANZI, WORD, Lab, Skipped
from tui.tour.screen import locale_lang
from tui.tour.strings_en import STRINGS as EN
from tui.tour.strings_zh import STRINGS as ZH
from tui.tour.walk import Tour
from tui.tour.wrap import CLOSING, pack, wrap

CONFIG = EngineConfig(n_ctx=512, n_threads=2)


def run_lab(path: Path | None, lang: str = "en") -> dict:
    lab = Lab(path, config=CONFIG, lang=lang)
    try:
        return {ch: lab.run(ch) for ch in CHAPTERS}
    finally:
        lab.close()


@pytest.fixture(scope="module")
def smol() -> dict:
    return run_lab(None)


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_lab(write_swa_model(tmp_path_factory.mktemp("tour") / "gemma2-tour.gguf"))


def test_no_chapter_was_skipped(smol, gemma):
    for found in (smol, gemma):
        assert [c for c, f in found.items() if isinstance(f, Skipped)] == []


def test_the_loop_counts_tokens_as_tokenize_does(smol, capsys):
    f = smol["loop"]
    assert tokenize_main([f.prompt, "--show-count"]) == 0
    shown = capsys.readouterr().out.strip().splitlines()[-1]
    assert shown == f"Total number of tokens: {len(f.ids)}"
    assert f.cells_before == len(f.ids) and f.cells_after == len(f.ids) + 1
    assert f.picked == f.top1  # greedy: the sampler takes llama.cpp's highest logit
    assert f.n_vocab == 49152


def test_tokens_are_pieces_of_the_text(smol, model):
    f = smol["tokens"]
    vocab = model.vocab
    from tui.engine.model.tokens import Vocab

    v = Vocab(vocab, model.info.n_vocab)
    assert "".join(f.word_pieces) == WORD
    assert b"".join(v.piece(t) for t in f.hanzi_ids) == HANZI.encode("utf-8")
    assert f.hanzi_utf8 == 3 and 1 <= len(f.hanzi_ids) <= 3
    chat = chat_tokens(v, model.info.chat_template or CHATML, [Message("user", f.message)])
    assert (
        f.chat_count
        == len(chat.tokens)
        > f.plain_count
        == len(v.tokenize(f.message, add_special=False))
    )


def test_the_prefill_is_one_call_per_batch(smol):
    f = smol["batch"]
    assert f.n_prompt == 4 * len(smol["loop"].ids)
    assert f.prefill_calls == math.ceil(f.n_prompt / f.n_batch) == 1
    assert f.prefill_ms > 0 and f.decode_ms > 0 and f.n_decodes >= 1


def test_the_sampler_cuts_as_top_p_counts(smol, make_engine):
    f = smol["sampler"]
    counts = [s.n for s in f.stages]
    assert counts[0] == 40 and counts == sorted(counts, reverse=True)  # each stage only cuts
    eng = make_engine()
    eng.prefill(eng.vocab.tokenize(smol["loop"].prompt))
    x = eng.logits.astype(np.float64)
    p = np.sort(np.exp(x - x.max()) / np.exp(x - x.max()).sum())[::-1]
    cum = np.cumsum(p)
    kept = int(np.searchsorted(cum, f.top_p)) + 1  # the first prefix whose sum reaches top-p
    if abs(cum[kept - 1] - f.top_p) > 1e-6:  # away from a tie with the threshold
        assert f.kept_at_top_p == kept
    assert f.second_kept == (f.kept_at_top_p >= 2)
    assert abs(sum(pp for _, pp in f.top) - p[:5].sum()) < 1e-6


def test_the_mask_is_a_lower_triangle_in_the_models_own_weights(smol, gemma):
    for f in (smol["inside"], gemma["inside"]):
        n = f.n_tokens
        assert f.allowed == n * (n + 1) // 2 and f.masked == n * (n - 1) // 2
        assert f.above_diagonal == 0.0  # -inf before the softmax is exactly 0 after it
        # each row is a float32 softmax over at most n keys: its sum is 1 within n roundings
        assert f.row_sum_err <= n * np.finfo(np.float32).eps * 4


def test_replaying_the_same_calls_is_bit_identical(smol, gemma):
    for f in (smol["exact"], gemma["exact"]):
        assert f.replay_max == 0.0
        assert f.replay_calls >= 2 and f.batched_calls == 1


def test_the_wall_is_n_n_plus_1_over_2(smol, gemma):
    for f in (smol["wall"], gemma["wall"]):
        n = f.n
        assert n == lab_kv.WALL_N
        assert f.with_cache == n and f.without_cache == n * (n + 1) // 2 == f.formula
        assert [c for c, _, _ in f.series] == list(range(1, n + 1))


def _header_bytes(path: Path | None) -> tuple[int, int]:
    from tui.engine.model.model import default_model_path

    hf = header_facts(gguf_header.validate(path or default_model_path()))
    per = sum(2 * h * (hf.head_dim_k + hf.head_dim_v) for h in hf.n_head_kv)  # f16: 2 bytes
    return per, hf.n_layer


def test_kv_bytes_per_token_from_the_header_and_llama_cpps_log(smol, gemma, tmp_path):
    f = smol["ram"]
    assert f.bytes_per_token == 30 * (3 * 64 + 3 * 64) * 2 == _header_bytes(None)[0]
    assert f.caches and all(c.agrees for c in f.caches)
    assert sum(c.cells for c in f.caches) == 512
    assert (
        f.big_bytes_per_token == 32 * 2 * 8 * 128 * 2
        and f.big_total == f.big_bytes_per_token * 8192
    )
    g = gemma["ram"]
    assert len(g.caches) == 2 and all(c.agrees for c in g.caches)  # Gemma 2: SWA and global
    assert g.bytes_per_token == 4 * 2 * (2 * 16) * 2


def test_a_full_context_stops_or_shifts_half(smol, gemma):
    for f in (smol["full"], gemma["full"]):
        assert f.n_ctx == lab_kv.FULL_CTX and f.stop_at == f.n_ctx
        assert f.stop_reason.startswith("context full")
        assert f.n_discard == (f.n_past - f.n_keep) // 2 == len(f.forgotten)
        assert f.after == f.n_past - f.n_discard + 1


def test_the_second_turn_reuses_the_first(smol):
    f = smol["prefix"]
    assert f.reused == f.first_tokens + f.reply_tokens
    assert f.reused + f.computed == f.second_tokens and f.computed >= 1


def test_every_guess_is_answered_by_the_labs_number(smol):
    tour = Tour(EN)
    for ch, f in smol.items():
        tour.arrived(ch, f)
    expected = {
        ("tokens", len(smol["tokens"].hanzi_ids)),
        ("batch", smol["batch"].prefill_calls),
        ("inside", smol["inside"].allowed),
        ("inside", smol["inside"].lens.top5_layer),
        ("wall", smol["wall"].without_cache),
        ("ram", smol["ram"].bytes_per_token),
        ("full", smol["full"].n_discard),
        ("prefix", smol["prefix"].computed),
        ("loop", smol["loop"].cells_after),
    }
    found = set()
    for ch, pages in tour.pages.items():
        for p in pages:
            g = p.guess
            if g is not None and g.choices and g.shown_answer.replace(",", "").isdigit():
                found.add((ch, int(g.shown_answer.replace(",", ""))))
    assert expected <= found
    typed = [p.guess for p in tour.pages["loop"] if p.guess and not p.guess.choices]
    assert typed and typed[0].is_right(smol["loop"].top1_piece.upper())  # case and space aside


def test_a_server_skips_every_chapter_in_one_sentence():
    lab = Lab(None, lang="en", local=False)
    got = {ch: lab.run(ch) for ch in CHAPTERS}
    assert all(isinstance(f, Skipped) and f.reason == "no_context" for f in got.values())
    page = pages_for("wall", got["wall"], ZH)[0]
    assert page.body == ZH["skip.no_context"] and page.guess is None


def test_both_languages_have_the_same_keys_and_fields():
    assert set(EN) == set(ZH)
    fields = string.Formatter()
    for key in EN:
        a = {f[1] for f in fields.parse(EN[key]) if f[1]}
        b = {f[1] for f in fields.parse(ZH[key]) if f[1]}
        assert a == b, key


def test_chinese_text_wraps_by_cells():
    text = ZH["exact.intro"] + "\n  " + ZH["tokens.chat"]
    for width in (20, 37, 78):
        lines = wrap(text, width)
        assert all(cell_len(line) <= width for line in lines)
        assert not any(line[:1] in CLOSING for line in lines)
        # only the breaks were added: the characters are all there, in order
        assert "".join(lines).replace(" ", "") == text.replace("\n", "").replace(" ", "")
    assert wrap("the unbelievably long word", 12) == ["the", "unbelievably", "long word"]
    assert wrap("一二三四五六", 7) == ["一二三", "四五六"]  # 3 wide characters are 6 cells
    assert pack(["1 切分 token", "2 组成 batch", "7 回送"], 26) == [
        "1 切分 token  2 组成 batch",
        "7 回送",
    ]


def test_the_locale_picks_the_language():
    assert locale_lang({"LANG": "zh_CN.UTF-8"}) == "zh"
    assert locale_lang({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert locale_lang({}) == "en"


def test_every_page_builds_on_both_architectures_in_both_languages(smol, gemma):
    for found in (smol, gemma):
        for strings in (EN, ZH):
            tour = Tour(strings)
            for ch, f in found.items():
                tour.arrived(ch, f)
            guesses = [p.guess for pages in tour.pages.values() for p in pages if p.guess]
            assert len(tour.pages) == len(CHAPTERS) and len(guesses) >= len(CHAPTERS)
            for g in guesses:  # the lab's value is always among the choices
                assert (g.answer >= 0 and g.shown_answer in g.choices) or (
                    g.typed and not g.choices
                )


def test_the_lens_layer_is_the_one_trace_lens_reports(smol, gemma, capsys):
    """The lab's lens rides on its own prefill; ``tokenstep trace --lens`` on the same prompt
    (same context size, flash attention off as the lab's attention capture has it) names the
    same first layers for llama.cpp's top-1."""
    import json

    from tui.args import parse
    from tui.trace_cli import trace_main

    f = smol["inside"].lens
    assert f is not None and smol["inside"].lens_skip == ""
    argv = ["trace", "--lens", "-p", "The capital of France is", "-n", "1", "-t", "2"]
    cmd, args = parse([*argv, "-c", "256", "--flash-attn", "off"])
    assert cmd == "trace" and trace_main(args) == 0
    recs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    check = next(d["lens_check"] for d in recs if "lens_check" in d)
    assert check["pos"] == smol["inside"].n_tokens - 1
    assert (f.top1, f.top5_layer, f.top1_layer) == (
        check["top1"]["id"],
        check["top5_layer"],
        check["top1_layer"],
    )
    assert f.n_layer == 30 and 0 <= f.top5_layer < f.n_layer
    assert f.top1_layer is None or f.top5_layer <= f.top1_layer  # a top-1 is in the top 5
    # the last layer's lens is llama.cpp's logits up to the Q8_0 head's activation rounding
    assert f.rounding_bound is not None and f.max_abs_diff <= f.rounding_bound
    g = gemma["inside"].lens  # an unquantized head: no rounding to bound
    assert g is not None and g.rounding_bound is None and g.n_layer == 4


def test_the_lens_guess_offers_layers_and_skips_an_unreadable_head(smol, monkeypatch):
    f = smol["inside"]
    assert f.lens is not None
    for strings in (EN, ZH):
        pages = pages_for("inside", f, strings)
        (g,) = [p.guess for p in pages[3:] if p.guess is not None]
        assert 3 <= len(g.choices) <= 4 and g.shown_answer == str(f.lens.top5_layer)
        assert all(0 <= int(c) < f.lens.n_layer for c in g.choices)
        assert f"{f.lens.max_abs_diff:.3f}" in pages[-1].body

    from tui.engine.model import lens

    sentence = "the lens needs output_norm.weight; this model has none"
    monkeypatch.setattr(lens, "head_problem", lambda header: sentence)  # no loadable GGUF lacks it
    lab = Lab(None, config=CONFIG)
    try:
        skipped = lab.run("inside")
    finally:
        lab.close()
    assert isinstance(skipped, lab_kv.InsideFacts) and skipped.lens is None
    assert skipped.allowed == f.allowed  # the attention pages are all still there
    pages = pages_for("inside", skipped, ZH)
    assert len(pages) == 4 and pages[-1].guess is None
    assert pages[-1].body == ZH["lens.skip"].format(detail=sentence)
