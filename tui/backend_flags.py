"""Where the model runs: the flags for a remote llama-server (``--server``) and for GPU
offload of a local model (``-ngl``, ``-sm``, ``-ts``, ``-mg``, ``--no-kv-offload``), with
llama.cpp's names. Part of the command line (:mod:`tui.args`); :func:`remote_from_args` turns
the server's flags into the backend the worker and ``trace`` drive."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from .engine.model.errors import TokenstepError

if TYPE_CHECKING:
    from .engine.run.backend import Backend
    from .engine.sampler.sampler_settings import SamplerSettings


def server_flags(p: argparse.ArgumentParser) -> None:
    """A model that lives elsewhere: step a running llama-server instead of a local context."""
    p.add_argument(
        "--server",
        metavar="URL",
        help="step the model of a running llama-server (http://HOST:PORT) instead of a local one",
    )
    p.add_argument(
        "--api",
        choices=["native", "openai"],
        default=None,
        help="with --server: llama-server's native /completion, or an OpenAI-compatible "
        "/v1/completions (default: native where the server answers /props, else openai)",
    )
    p.add_argument(
        "--server-model",
        metavar="NAME",
        default=None,
        help="with --server and an OpenAI-compatible server: the model to step, one of its "
        "/v1/models (needed when it serves several)",
    )
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help="with --server: sent as 'Authorization: Bearer KEY' on every request, native or "
        "/v1 (default $OPENAI_API_KEY); never saved, traced or shown",
    )
    p.add_argument(
        "--n-probs",
        type=int,
        default=None,
        metavar="K",
        help="with --server: candidates the server returns per step (default 100 natively, "
        "20 over /v1: OpenAI's and vLLM's cap)",
    )
    p.add_argument(
        "--pick",
        choices=["tokenstep", "server"],
        default="tokenstep",
        help="with --server: who samples, tokenstep's chain on the top K (default) or the "
        "server's own chain (its RNG restarts every request)",
    )
    p.add_argument(
        "--server-chain-check",
        action="store_true",
        help="with --server (native API): after each pick, ask llama-server's own post-chain "
        "probabilities (post_sampling_probs) with the same settings and show them beside "
        "tokenstep's chain (a second request per token)",
    )
    p.add_argument(
        "--slot",
        type=int,
        default=None,
        metavar="N",
        help="with --server: the server slot to step (id_slot; a server started with -np N has "
        "slots 0 to N-1; default 0)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="with --server: the longest one whole request may take, connect to last byte "
        "(default 60)",
    )


def _seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r}: use a number of seconds above 0, at most 86400")
    return value


def _gpu_layers(text: str) -> int:
    """-ngl N, or 'all' (every layer), as llama.cpp takes it."""
    if text.strip().lower() == "all":
        return 1 << 30
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of layers or 'all'") from None
    if n < -1:
        raise argparse.ArgumentTypeError(f"{n} layers: use 0 or more, -1 or 'all'")
    return (1 << 30) if n == -1 else n


def _tensor_split(text: str) -> list[float]:
    """-ts 3,1: the share of the model each GPU holds (llama.cpp's proportions)."""
    try:
        parts = [float(x) for x in text.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list like 3,1") from None
    if not parts or any(not math.isfinite(x) or x < 0 for x in parts) or sum(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of shares like 3,1")
    return parts


def gpu_flags(p: argparse.ArgumentParser) -> None:
    """GPU offload for a local model, with llama.cpp's names (a CPU-only build accepts them and
    says it has no GPU backend)."""
    p.add_argument(
        "-ngl",
        "--n-gpu-layers",
        "--gpu-layers",
        type=_gpu_layers,
        default=0,
        metavar="N",
        help="layers to store in VRAM (N, or 'all'; default 0)",
    )
    p.add_argument(
        "-sm",
        "--split-mode",
        choices=["none", "layer", "row"],
        default="layer",
        help="how to split the model across GPUs (default layer)",
    )
    p.add_argument(
        "-ts",
        "--tensor-split",
        type=_tensor_split,
        metavar="N0,N1,...",
        help="share of the model on each GPU, e.g. 3,1",
    )
    p.add_argument(
        "-mg", "--main-gpu", type=int, default=0, metavar="I", help="the GPU for -sm none/row"
    )
    p.add_argument(
        "--no-kv-offload",
        action="store_true",
        help="keep the KV cache in system memory even when layers are on a GPU",
    )


def repack_flags(p: argparse.ArgumentParser) -> None:
    """Extra buffer types (weight repacking, AMX), with llama.cpp's names. Neither flag: off
    where this llama.cpp has AMX kernels (they crash on the first decode, llama.cpp #20824),
    llama.cpp's default (on) elsewhere."""
    p.add_argument(
        "--repack",
        dest="repack",
        action="store_true",
        default=None,
        help="load weights with llama.cpp's extra buffer types (repacked for faster matmuls; "
        "default on, except where this llama.cpp has AMX kernels, which crash)",
    )
    p.add_argument(
        "-nr",
        "--no-repack",
        dest="repack",
        action="store_false",
        help="load weights without extra buffer types (llama-server's --no-repack)",
    )


def repack_with_server(args: argparse.Namespace) -> str | None:
    """--repack / --no-repack with --server: the sentence that refuses it (the server loads its
    own model, with its own flag), or None."""
    if getattr(args, "repack", None) is None:
        return None
    flag = "--repack" if args.repack else "--no-repack"
    return (
        f"{flag} and --server both given: the server loads its own model (pass {flag} to "
        "llama-server)."
    )


def swa_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--swa-full",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="models with sliding-window layers: a full-size cache for those layers too, so "
        "rewind, prefix reuse and shifts keep working (default on; --no-swa-full gives "
        "llama.cpp's tools' smaller window-sized cache)",
    )


def server_conflicts(args: argparse.Namespace, settings: SamplerSettings | None = None) -> None:
    """What --server cannot do, refused in one sentence before connecting (observer flags; DRY
    and grammars unless -m gives the served GGUF's vocabulary) and its own flags' ranges."""
    from .engine.remote.remote_chain import OBSERVER_FLAGS, server_refusal

    on = [f for f in OBSERVER_FLAGS if getattr(args, f, None) not in (None, False)]
    refused = server_refusal(args.server, on, settings, vocab_file=bool(args.model))
    if refused is not None:
        raise TokenstepError(refused)
    if (clash := repack_with_server(args)) is not None:
        raise TokenstepError(clash)
    if getattr(args, "pick", None) == "server" and settings is not None:
        from .engine.wire.remote_step import server_pick_refusal

        if (why := server_pick_refusal(settings)) is not None:
            raise TokenstepError(why)
    n_probs = getattr(args, "n_probs", None)
    if n_probs is not None and n_probs < 1:
        raise TokenstepError(f"--n-probs must be 1 or more, not {args.n_probs}.")
    if getattr(args, "api", None) == "openai" and getattr(args, "slot", None) is not None:
        raise TokenstepError("--slot is llama-server's native API; /v1/completions has no slots.")
    if (getattr(args, "slot", None) or 0) < 0:
        raise TokenstepError(f"--slot must be 0 or more, not {args.slot}.")


def ignored_over_server(args: argparse.Namespace) -> str | None:
    """The sentence for -c or --context-full given with --server, which the server's own
    context overrides (said, not dropped in silence); None when neither was given."""
    if not getattr(args, "server", None):
        return None
    given = [
        flag
        for flag, on in (
            (f"-c {args.ctx_size}", getattr(args, "ctx_size", None) is not None),
            (
                f"--context-full {getattr(args, 'context_full', None)}",
                getattr(args, "context_full", None) is not None,
            ),
        )
        if on
    ]
    if not given:
        return None
    verb = "do" if len(given) > 1 else "does"
    return (
        f"{' and '.join(given)} {verb} nothing with --server: the context is the server's own "
        "(start llama-server with -c N, and --context-shift to shift it)."
    )


def remote_from_args(args: argparse.Namespace, settings: SamplerSettings) -> Backend:
    """A RemoteBackend (or OpenAIBackend) for --server: the worker and ``trace`` drive it
    through the Backend protocol; what it cannot do, its capabilities leave out."""
    from .engine.model.local_vocab import LocalVocab
    from .engine.remote.openai_backend import api_key_from
    from .engine.remote.remote import RemoteBackend
    from .engine.wire.openai_api import detect_api

    server_conflicts(args, settings)
    api = getattr(args, "api", None)
    key = api_key_from(getattr(args, "api_key", None))
    timeout = getattr(args, "timeout", 60.0)
    local_vocab = LocalVocab(args.model) if args.model else None  # the file, before connecting
    if api is None:
        api = detect_api(args.server, timeout, key)
    if api == "openai":
        from .engine.remote.openai_backend import DEFAULT_OPENAI_N_PROBS, OpenAIBackend

        if getattr(args, "slot", None) is not None:
            raise TokenstepError(
                "--slot is llama-server's native API; /v1/completions has no slots."
            )
        if getattr(args, "server_chain_check", False):
            raise TokenstepError(
                "--server-chain-check reads llama-server's native post_sampling_probs; "
                "/v1/completions has none."
            )
        return OpenAIBackend(
            args.server,
            settings,
            n_probs=args.n_probs or DEFAULT_OPENAI_N_PROBS,
            pick=args.pick,
            timeout=timeout,
            local_vocab=local_vocab,
            model=getattr(args, "server_model", None),
            api_key=key,
        )
    backend = RemoteBackend(
        args.server,
        settings,
        n_probs=args.n_probs or 100,
        pick=args.pick,
        slot=args.slot or 0,
        timeout=getattr(args, "timeout", 60.0),
        local_vocab=local_vocab,  # closed with the backend (or, if it fails, when collected)
        check_chain=getattr(args, "server_chain_check", False),
        api_key=key,
    )
    return backend
