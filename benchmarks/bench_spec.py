"""13. Speculative decoding: why it works, and what it gives here.

13.1 The cost of a verify decode of k + 1 tokens (every row asking for logits) against a
one-token decode, k = 1..8, at the same context: decoding is bound by reading the weights,
so the curve is far flatter than k + 1. 13.2 Tokens per second greedy, with and without
``--spec-type ngram-simple`` and ``draft-simple`` (the bundled model requantized to Q2_K by
llama.cpp's quantizer as the draft), on a repetitive prompt and on free chat, alternating;
each row carries its acceptance rate and tokens per llama_decode. The same prompts on a
llama-server started with the same ``--spec-type`` are the anchor when its binary is there.
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

import llama_cpp

from tui.engine import Engine, EngineConfig, Model, SamplerSettings, default_model_path
from tui.engine.run import loop
from tui.engine.run.batch import BatchToken, DecodeCall, ubatch_chunks
from tui.engine.run.decode import decode
from tui.engine.speculative.spec_draft import DraftSimple
from tui.engine.speculative.spec_ngram import NgramSimple
from tui.engine.speculative.spec_verify import NgramDrafter, Speculator, generate

from .bench_remote import server_binary, start_server
from .common import THREADS, Row, median

REPEAT = "Count: " + ", ".join(str(i) for i in range(1, 41)) + "\nAgain: 1, 2, 3"
CHAT = (
    "<|im_start|>user\nWrite a short story about a cat who learns to cook.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def _engine(model: Model) -> Engine:
    return Engine(model, EngineConfig(n_ctx=1024, n_threads=THREADS), SamplerSettings(greedy=True))


def verify_cost(model: Model, reps: int) -> list[Row]:
    """Median ms of a decode of k + 1 tokens (all rows with logits), k = 0..8, cut again."""
    eng = _engine(model)
    try:
        toks = eng.vocab.tokenize(CHAT, add_special=True, parse_special=True)
        eng.prefill(toks)
        n0 = eng.n_past
        times: dict[int, list[float]] = {k: [] for k in range(9)}
        for _ in range(reps):
            for k in range(9):  # taking turns, so a change in load touches every size
                pos = eng.kv.last_pos(0) + 1
                batch = [
                    BatchToken(toks[(i + 3) % len(toks)], pos + i, (0,), True) for i in range(k + 1)
                ]
                rec = decode(
                    eng, DecodeCall(batch, ubatch_chunks(k + 1, 512)), phase="verify", all_rows=True
                )
                times[k].append(rec.decode_ms)
                eng.truncate(n0)
    finally:
        eng.close()
    one = median(times[0])
    curve = ", ".join(f"{k + 1}: {median(times[k]) / one:.2f}x" for k in range(1, 9))
    return [
        Row(
            "13.1 verify decode of k+1 tokens vs 1",
            f"{median(times[8]) / one:.2f}x for 9 tokens",
            "reported",
            None,
            f"one token {one:.2f} ms; tokens in the batch: {curve} (medians of {reps})",
        )
    ]


def _draft_model(dirname: str) -> Path:
    out = Path(dirname) / "draft.Q2_K.gguf"
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.allow_requantize, p.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q2_K, True, THREADS
    if llama_cpp.llama_model_quantize(str(default_model_path()).encode(), str(out).encode(), p):
        raise RuntimeError("llama_model_quantize failed")
    return out


def _run(model: Model, text: str, n: int, kind: str, draft: Path | None) -> tuple[float, str]:
    eng = _engine(model)
    spec = None
    try:
        toks = eng.vocab.tokenize(text, add_special=True, parse_special=True)
        eng.prefill(toks)
        eng.truncate(len(toks) - 1)  # the prompt's last token decodes inside the timing
        if kind == "ngram-simple":
            spec = Speculator(NgramDrafter(NgramSimple()))
        elif kind == "draft-simple":
            assert draft is not None
            spec = Speculator(DraftSimple(eng, draft, n_max=4))
            spec.drafter.draft(eng.tokens[:-1], eng.tokens[-1], 1)  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        if spec is None:
            for _ in loop.generate(eng, n, toks[-1:]):
                pass
            extra = ""
        else:
            for _ in generate(eng, spec, n, toks[-1:]):
                pass
            st = spec.stats
            acc = f"{st.acceptance:.0%}" if st.acceptance is not None else "-"
            extra = f"accepted {st.accepted}/{st.drafted} ({acc}), {st.tokens_per_decode:.2f} tokens per llama_decode"
        return n / (time.perf_counter() - t0), extra
    finally:
        if spec is not None:
            spec.close()
        eng.close()


def speed(model: Model, rounds: int) -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        draft = _draft_model(d)
        for name, text in (("repetitive list", REPEAT), ("free chat", CHAT)):
            for kind in ("ngram-simple", "draft-simple"):
                plain, sped, extra = [], [], ""
                for _ in range(rounds):
                    plain.append(_run(model, text, 64, "none", None)[0])
                    tps, extra = _run(model, text, 64, kind, draft)
                    sped.append(tps)
                p, s = median(plain), median(sped)
                rows.append(
                    Row(
                        f"13.2 {kind}, {name}, 64 greedy tokens",
                        f"{s / p:.2f}x plain",
                        "reported",
                        None,
                        f"{s:.1f} vs plain {p:.1f} tok/s (medians of {rounds}, alternating); {extra}",
                    )
                )
    return rows


def _server_reply(url: str, toks: list[int], n: int) -> dict:
    body = {"prompt": toks, "n_predict": n, "temperature": 0, "cache_prompt": False}
    req = urllib.request.Request(
        url + "/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def anchor(model: Model, rounds: int) -> list[Row]:
    """The same prompts on llama-server with the same --spec-type (1 thread, as it decodes
    for the tests), against the same server without speculation."""
    binary = server_binary()
    if binary is None:
        return [Row("13.3 llama-server anchor", "skipped", "reported", None, "no llama-server")]
    eng = _engine(model)
    try:
        prompts = {
            name: eng.vocab.tokenize(text, add_special=True, parse_special=True)
            for name, text in (("repetitive list", REPEAT), ("free chat", CHAT))
        }
    finally:
        eng.close()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        draft = _draft_model(d)
        kinds = {
            "none": (),
            "ngram-simple": ("--spec-type", "ngram-simple"),
            "draft-simple": (
                "--spec-type",
                "draft-simple",
                "-md",
                str(draft),
                "--spec-draft-n-max",
                "4",
            ),
        }
        rates: dict[tuple[str, str], list[float]] = {}
        drafts: dict[tuple[str, str], tuple[int, int]] = {}
        for kind, flags in kinds.items():
            proc, url = start_server(binary, Path(d) / f"{kind}.log", extra=flags)
            try:
                for name, toks in prompts.items():
                    for _ in range(rounds):
                        t = _server_reply(url, toks, 64)["timings"]
                        rates.setdefault((kind, name), []).append(t["predicted_per_second"])
                        drafts[(kind, name)] = (t.get("draft_n_accepted", 0), t.get("draft_n", 0))
            finally:
                proc.terminate()
                proc.wait(30)
        for kind in ("ngram-simple", "draft-simple"):
            for name in prompts:
                s, p = median(rates[(kind, name)]), median(rates[("none", name)])
                acc, n = drafts[(kind, name)]
                rows.append(
                    Row(
                        f"13.3 llama-server {kind}, {name}",
                        f"{s / p:.2f}x plain",
                        "reported",
                        None,
                        f"{s:.1f} vs plain {p:.1f} tok/s (its predicted_per_second, medians of "
                        f"{rounds}); draft_n_accepted {acc} of draft_n {n}",
                    )
                )
    return rows


def run(model: Model, rounds: int = 3) -> list[Row]:
    return verify_cost(model, reps=8 * rounds) + speed(model, rounds) + anchor(model, rounds)
