"""Issue 5, claim 5: a shared prefix is computed once (prompt/prefix caching across turns)."""

from __future__ import annotations

import numpy as np

from tui.engine import SamplerSettings
from tui.engine.model import chat_template as chat_mod
from tui.engine.run.batch import BatchToken, DecodeCall

USER1 = "Name three rivers in Europe."
USER2 = "Which of them is the longest?"


def chat(eng, messages):
    return chat_mod.chat_tokens(
        eng.vocab, eng.info.chat_template, messages, add_bos=eng.info.add_bos
    ).tokens


def test_second_turn_prefills_only_new_tokens_and_equals_a_cold_prefill(make_engine):
    """Flash attention off: every batched row goes through the same kernels however the
    batch is cut, and K/V of a position never depend on later tokens (causal mask), so the
    warm and the cold prefill give the very same bits. (With flash attention on, its kernel
    tiles the work by the number of query rows, which changes the float rounding.)"""
    warm = make_engine(n_ctx=512, flash_attn="off")
    cold = make_engine(n_ctx=512, flash_attn="off")
    reply = chat_mod.Message("assistant", "The Danube, the Rhine and the Volga.")
    turn1 = chat(warm, [chat_mod.Message("user", USER1)])
    turn2 = chat(warm, [chat_mod.Message("user", USER1), reply, chat_mod.Message("user", USER2)])
    common = next(
        (i for i, (a, b) in enumerate(zip(turn1, turn2, strict=False)) if a != b), len(turn1)
    )
    assert 0 < common < len(turn2)
    warm.sync_prompt(turn1)
    recs = warm.sync_prompt(turn2)
    decoded = [t.id for r in recs for t in r.call.tokens]
    assert decoded == turn2[common:]  # only what the cache did not hold
    assert recs[0].call.tokens[0].pos == common
    t = warm.turns[-1]
    assert (t.reused, t.computed) == (common, len(turn2) - common)
    assert warm.turns[0].reused == 0 and warm.turns[0].computed == len(turn1)
    cold.sync_prompt(turn2)
    assert cold.turns[-1].computed == len(turn2)
    assert warm.logits is not None and cold.logits is not None
    assert np.array_equal(warm.logits, cold.logits)


def test_a_real_chat_turn_equals_replaying_the_same_calls(make_engine):
    """Turn 2 after a generated reply: the reply was decoded one token per call, so a cold
    batched prefill rounds differently (verify shows that); the same calls replayed in a
    fresh engine give identical logits, and the second turn decodes only the new tokens."""
    eng = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    turn1 = chat(eng, [chat_mod.Message("user", USER1)])
    eng.sync_prompt(turn1)
    reply_ids = []
    for _ in range(12):
        rec = eng.step()
        if rec is None:
            break
        reply_ids.append(rec.call.tokens[0].id)
    history = list(eng.tokens)
    new = eng.vocab.tokenize(
        "<|im_end|>\n<|im_start|>user\n", add_special=False, parse_special=True
    )
    new += eng.vocab.tokenize(USER2, add_special=False)
    new += eng.vocab.tokenize(
        "<|im_end|>\n<|im_start|>assistant\n", add_special=False, parse_special=True
    )
    recs = eng.sync_prompt(history + new)
    assert eng.turns[-1].reused == len(history) and eng.turns[-1].computed == len(new)
    assert sum(r.call.n_tokens for r in recs) == len(new)

    twin = make_engine(SamplerSettings(temp=0.0), n_ctx=512)
    twin.prefill(turn1)
    for tok in reply_ids:
        twin.feed(tok)
    twin.prefill(new)
    assert np.array_equal(twin.logits, eng.logits)


def test_no_prefix_cache_recomputes_everything(make_engine):
    eng = make_engine(n_ctx=512)
    turn1 = chat(eng, [chat_mod.Message("user", USER1)])
    eng.sync_prompt(turn1)
    turn2 = turn1 + eng.vocab.tokenize(" more", add_special=False)
    recs = eng.sync_prompt(turn2, reuse=False)
    assert eng.turns[-1].reused == 0 and eng.turns[-1].computed == len(turn2)
    assert recs[0].call.tokens[0] == BatchToken(turn2[0], 0, (0,), False)
    assert isinstance(recs[0].call, DecodeCall)
