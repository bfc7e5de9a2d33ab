"""The non-interactive commands: ``trace``, ``info`` and ``verify``, and the flag checks the
app shares with them (:func:`engine_from_args`, :func:`preflight`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .args import DEFAULT_N_CTX, read_prompt
from .backend_flags import ignored_over_server, remote_from_args, server_conflicts
from .engine import Engine, EngineConfig, Model, SamplerSettings, TokenstepError
from .engine.model import chat_template as chat_mod
from .engine.model import info, rules, secret
from .engine.model.model import probe
from .engine.model.offload import Offload
from .engine.run import loop, trace

if TYPE_CHECKING:
    from .engine.run.backend import Backend
    from .engine.run.step import StepRecord
    from .engine.speculative.spec_verify import Speculator

GGML_MAX_N_THREADS = 512  # ggml.h


def settings_from_args(args: argparse.Namespace) -> SamplerSettings:
    from .sampler_flags import chain_fields

    saved = getattr(args, "saved_settings", None)
    if isinstance(saved, dict):  # --resume: the saved chain, every parameter
        try:
            s = SamplerSettings.from_dict(saved)
        except (TypeError, ValueError):
            raise TokenstepError("the saved sampler settings are not valid.") from None
        s.validate()
        return s
    s = SamplerSettings(
        temp=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        greedy=args.greedy,
        **chain_fields(args),
    )
    s.validate()
    return s


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    c = EngineConfig(
        n_ctx=DEFAULT_N_CTX if args.ctx_size is None else args.ctx_size,
        n_batch=args.batch_size,
        n_ubatch=args.ubatch_size,
        n_threads=args.threads,
        flash_attn=args.flash_attn,
        cache_type_k=args.cache_type_k,
        cache_type_v=args.cache_type_v,
        context_full=getattr(args, "context_full", None) or "stop",
        n_keep=getattr(args, "keep", 0),
        offload_kqv=not getattr(args, "no_kv_offload", False),
        n_seq_max=getattr(args, "parallel", 2),
        swa_full=getattr(args, "swa_full", True),
    )
    c.validate()
    if c.n_threads > GGML_MAX_N_THREADS:  # ggml does not check; far more threads segfault
        raise TokenstepError(
            f"-t/--threads must be at most {GGML_MAX_N_THREADS}, not {c.n_threads}."
        )
    return c


def offload_from_args(args: argparse.Namespace) -> Offload:
    off = Offload(
        n_gpu_layers=getattr(args, "n_gpu_layers", 0),
        split_mode=getattr(args, "split_mode", "layer"),
        tensor_split=getattr(args, "tensor_split", None),
        main_gpu=getattr(args, "main_gpu", 0),
        kv_offload=not getattr(args, "no_kv_offload", False),
    )
    off.validate()
    return off


def engine_from_args(args: argparse.Namespace, *, observers: bool = True) -> Backend:
    """Validate every flag first (cheap), then load the model and create the context (or, with
    --server, connect to llama-server). ``observers=False`` (the app): the context gets no
    eval callback and keeps its flash attention; the app's observers run in a context of
    their own (tui/worker/observers.py)."""
    config = config_from_args(args)
    settings = settings_from_args(args)
    if getattr(args, "server", None):
        return remote_from_args(args, settings)
    if observers and getattr(args, "attention", None) is not None:
        config.flash_attn = "off"  # the capture turns it off: say so in the trace
    template = getattr(args, "chat_template", None)
    template_text = chat_mod.template_from(template) if template else None  # before loading
    repack = getattr(args, "repack", None)  # --repack / --no-repack / neither (None)
    model = Model(args.model, offload=offload_from_args(args), repack_flag=repack)
    if getattr(args, "lens_grid", False):
        args.lens = True  # the grid rides on the lens capture
    if getattr(args, "lens", False):
        from .engine.model.lens import head_problem

        problem = head_problem(model.header)
        if problem is not None:
            model.close()
            raise TokenstepError(f"--lens: {problem}.")
    taps = graph_observers(args, model.info.n_layer) if observers else []
    engine = Engine(model, config, settings, taps)
    if getattr(args, "lens", False):
        from .engine.observe.lens_capture import find_lens

        cap = find_lens(engine)
        if cap is not None:  # the one-time head read, before any decode is timed
            cap.lens_head(engine)
            if getattr(args, "lens_grid", False):
                cap.set_grid(True)
                engine.score_prompts(True)  # every prompt row's l_out reaches the last layer
    if template_text is not None:
        engine.use_chat_template(template_text)
    return engine


def graph_observers(args: argparse.Namespace, n_layer: int) -> list:
    """--attention / --lens / --graph / --profile as one eval-callback observer (a context has one
    cb_eval). None of them: no callback at all, so decoding costs nothing extra."""
    spec = getattr(args, "attention", None)
    census, profile = getattr(args, "graph", False), getattr(args, "profile", False)
    lens = getattr(args, "lens", False)
    if spec is None and not (census or profile or lens):
        return []  # and the capture's modules are not even imported (start-up time)
    from .engine.observe.attention_capture import AttentionCapture, parse_layers
    from .engine.observe.graph_tap import GraphTap

    if spec is not None:
        conflict = rules.attention_capture_conflict(args.cache_type_v, args.flash_attn)
        if conflict is not None:
            raise TokenstepError(conflict.replace("attention capture", "--attention", 1))
        layers = parse_layers(spec, n_layer)
        if lens:
            from .engine.observe.lens_capture import AttentionLensCapture

            return [
                AttentionLensCapture(
                    n_layer=n_layer, layers=layers, census=census, profile=profile, lens=True
                )
            ]
        return [AttentionCapture(n_layer, layers, census=census, profile=profile)]
    if lens:
        from .engine.observe.lens_capture import LensCapture

        return [LensCapture(n_layer=n_layer, census=census, profile=profile)]
    if census or profile:
        return [GraphTap(census=census, profile=profile, n_layer=n_layer)]
    return []


def prompt_tokens(engine: Backend, text: str, *, chat: bool, special: bool) -> list[int]:
    if not text.strip():
        raise TokenstepError("the prompt is empty.")
    if chat:
        tmpl = engine.info.chat_template
        if not tmpl:
            raise TokenstepError("this model has no chat template; drop --chat.")
        return chat_mod.chat_tokens(
            engine.vocab, tmpl, [chat_mod.Message("user", text)], add_bos=engine.info.add_bos
        ).tokens
    return engine.vocab.tokenize(text, add_special=True, parse_special=special)


def preflight(args: argparse.Namespace) -> None:
    """What the interactive app checks before it takes the screen: flags, then the model."""
    from .spec_flags import check_spec

    config_from_args(args)
    settings = settings_from_args(args)
    check_spec(args)
    if getattr(args, "server", None):
        from .engine.wire.remote_http import parse_url

        server_conflicts(args, settings)
        parse_url(args.server)
        if args.model:
            probe(args.model)  # the vocabulary --server's DRY and grammars read
        return
    offload_from_args(args)
    probe(args.model)
    if getattr(args, "model_draft", None):
        probe(args.model_draft)


def trace_main(args: argparse.Namespace) -> int:
    if args.n_predict < 0:
        raise TokenstepError(f"-n/--n-predict must be 0 or more, not {args.n_predict}.")
    settings_from_args(args)  # flags first: a typo should not wait for a model load
    config_from_args(args)
    from .spec_flags import check_spec, speculator_from_args

    check_spec(args)
    text = read_prompt(args)
    if not text.strip():  # before the model load, like the flags
        raise TokenstepError("the prompt is empty.")
    engine = engine_from_args(args)
    if (ignored := ignored_over_server(args)) is not None:
        print(f"tokenstep: warning: {ignored}", file=sys.stderr)
    spec = None
    try:
        spec = speculator_from_args(args, engine)
        toks = prompt_tokens(engine, text, chat=args.chat, special=args.special)
        n_sampled, seen = 0, 0
        lens, local = None, engine.local
        if getattr(args, "lens", False):  # the capture's modules load only with --lens
            from .engine.observe.lens_capture import find_lens

            # --lens with --server is refused before connecting
            lens = find_lens(local) if local is not None else None
        events = getattr(args, "events", False)
        if isinstance(engine, Engine) and spec is None and not events and not engine.observers:
            engine.observe_off_thread(True)  # each record's views beside the next decode
        # JSON off this thread where building it asks no server (a remote vocabulary's pieces)
        writer = trace.LineWriter(engine, sys.stdout, secret.redact, build=local is not None)
        try:
            for rec in generate_records(engine, spec, args.n_predict, toks):
                if lens is not None and local is not None:  # the token joins llama.cpp's top-1
                    lens.note_pick(local, rec)
                new: tuple[object, ...] = ()
                if events:  # the app's own record, through its serializer
                    new, seen = new_events(engine, seen)
                writer.put(rec, new)
                n_sampled += len(rec.spec.picks) if rec.spec else rec.sampled is not None
        finally:
            writer.close()
        if n_sampled < args.n_predict and engine.stop_reason:
            print(secret.redact(stopped_early(engine, n_sampled, args.n_predict)), file=sys.stderr)
    finally:
        if spec is not None:
            spec.close()
        engine.close()
    return 0


def new_events(engine: Backend, seen: int) -> tuple[tuple[object, ...], int]:
    """The run record's events since the ``seen``-th (``trace --events`` writes each as one
    JSON line, :func:`tui.engine.record.run_record.event_to_dict`), and how many were noted so far."""
    run = engine.run
    kept = run.recent()
    return kept[max(0, len(kept) - (run.n - seen)) :], run.n


def generate_records(
    engine: Backend, spec: Speculator | None, n_predict: int, toks: list[int]
) -> Iterator[StepRecord]:
    """The loop's records, or with --spec-type one record per draft-verify round."""
    if spec is None:
        return loop.generate(engine, n_predict, toks)
    from .engine.speculative import spec_verify

    local = engine.local
    if local is None:  # --spec-type with --server is refused before connecting
        raise TokenstepError(f"--spec-type {engine.capabilities.missing('fork')}.")
    return spec_verify.generate(local, spec, n_predict, toks)


def stopped_early(engine: Backend, n_sampled: int, n_predict: int) -> str:
    """The one line ``trace`` writes to stderr when it stops before -n tokens (the exit code
    stays 0: stopping is the loop's rule, not an error)."""
    why = engine.stop_reason or ""
    line = f"tokenstep: stopped after {n_sampled} of -n {n_predict} tokens: {why}"
    if why.startswith("context full") and engine.server is not None:
        line += (
            f" ({engine.n_past} of the server's {engine.n_ctx} tokens; its own -c and "
            "--context-shift decide, not tokenstep's)"
        )
    elif why.startswith("context full"):
        line += f" ({engine.n_past} of -c {engine.n_ctx} tokens)"
        if why == "context full":
            line += "; a larger -c or --context-full shift keeps going"
    return line + "."


def info_main(args: argparse.Namespace) -> int:
    if args.ctx_size < 0:
        raise TokenstepError(f"-c/--ctx-size must be at least 1, not {args.ctx_size}.")
    hdr = probe(args.model)  # header checks, then llama.cpp reads the vocabulary only
    f = info.facts(hdr)
    n_ctx = args.ctx_size or f.n_ctx_train
    if n_ctx < 1:
        raise TokenstepError("the model does not state its training context; pass -c N.")
    kv = {t: f.kv_bytes_per_token(t, t) for t in info.CALC_TYPES}
    data = {
        "path": str(hdr.path),
        "file_bytes": hdr.file_size,
        "arch": f.arch,
        "name": f.name,
        "size_label": f.n_params_hint,
        "n_vocab": f.n_vocab,
        "n_layer": f.n_layer,
        "n_head": f.n_head,
        "n_head_kv": sorted(set(f.n_head_kv)),
        "n_embd": f.n_embd,
        "head_dim": f.head_dim_k,
        "n_ff": f.n_ff,
        "n_ctx_train": f.n_ctx_train,
        "sliding_window": f.sliding_window,
        "tensors": len(hdr.tensors),
        "chat_template": bool(f.chat_template),
        "kv_cache": {
            "n_ctx": n_ctx,
            "bytes_per_token": kv,
            "bytes": {t: b * n_ctx for t, b in kv.items()},
        },
    }
    # The caches the app and `trace` create (two for a model with sliding-window layers):
    # the same --swa-full and sequence count as their EngineConfig.
    config = EngineConfig(swa_full=args.swa_full)
    data["swa_full"] = config.swa_full
    data["kv_caches"] = [
        {"kind": c.kind, "cells": c.cells, "layers": len(c.layers), "bytes": c.bytes}
        for c in info.cache_plan(
            hdr, f, n_ctx, config.n_ubatch, config.n_seq_max, swa_full=config.swa_full
        )
    ]
    data |= (built := info.build_facts(args.repack))  # llama.cpp's system info, --repack
    if args.json:
        print(json.dumps(data))
        return 0
    w = max(len(k) for k in data)
    for k, v in data.items():
        if k in ("kv_cache", "kv_caches", "swa_full", *built):
            continue
        shown = ", ".join(str(x) for x in v) if isinstance(v, list) else v  # not "[3]"
        print(f"{k:<{w}}  {_safe(shown)}")
    print(f"\nKV cache for {n_ctx:,} tokens (K and V the same type):")
    for t in info.CALC_TYPES:
        print(f"  {t:<5} {kv[t]:>9,} B/token  {kv[t] * n_ctx / 2**20:>10.2f} MiB")
    if len(data["kv_caches"]) > 1:
        swa = info.swa_layers(hdr, f) or []
        print(
            f"\nSliding window of {f.sliding_window:,} tokens on {sum(swa)} of {f.n_layer} "
            "layers: llama.cpp allocates two caches. As the app and trace create them "
            f"(-ub {config.n_ubatch}, {config.n_seq_max} sequences, "
            + (
                "--swa-full: the SWA cache holds the whole context too, so rewind and prefix "
                "reuse work; --no-swa-full shows llama.cpp's tools' smaller one):"
                if config.swa_full
                else "--no-swa-full: the SWA cache holds the window only, as llama.cpp's "
                "tools make it):"
            )
        )
        for c in data["kv_caches"]:
            sizes = "  ".join(f"{t} {b / 2**20:.2f} MiB" for t, b in c["bytes"].items())
            print(f"  {c['kind']:<8} {c['cells']:>7,} cells x {c['layers']:>3} layers  {sizes}")
    print(f"\nllama.cpp: {built['system_info']}\n{built['repack']['reason']}.")
    return 0


def _safe(v: object) -> str:
    """Metadata is written by strangers: show control characters escaped, never interpreted."""
    s = str(v)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
