"""llama-server's own post-chain probabilities beside tokenstep's chain (``--server-chain-check``).

With ``post_sampling_probs: true`` llama-server's ``completion_probabilities[0].top_probs`` are
the probabilities its chain left (renormalised), not the raw logprobs. Asked with the same
prompt and every field of tokenstep's chain (``remote_step.server_chain``), it checks the chain
live: on the bundled model, "The capital of France is" at T 0.8, top-k 40, top-p 0.9, min-p
0.05 leaves " Paris" 0.9599 and " the" 0.0401 on both sides. Two honest reasons to disagree
are said in the note: tokenstep's chain saw the top K only, or the server's list is capped by
``n_probs``. It is a second request per row on the same slot (one token evaluated); a failure
is noted and the step goes on (the pick is made: no RNG advances twice).
"""

from __future__ import annotations

import math
from typing import Any

from ..model.errors import TokenstepError
from ..sampler.sampling import ChainResult, SamplerSettings
from .remote_http import ServerClient, ServerError
from .remote_reply import Fields
from .remote_step import server_chain

AGREE = 1e-3  # float32 sums over up to K survivors


def post_chain(
    client: ServerClient,
    prompt: list[int],
    settings: SamplerSettings,
    n_probs: int,
    slot: int,
    n_ctx: int,
    n_vocab: int,
) -> list[tuple[int, float]]:
    """The server's post-chain (id, p) for the next position, best first."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "n_predict": 1,
        "n_probs": n_probs,
        "post_sampling_probs": True,
        "cache_prompt": True,
        "id_slot": slot,
        "n_keep": 0,
        "seed": settings.seed,
    }
    body.update(server_chain(settings, n_ctx))
    reply = client.post("/completion", body)
    f = Fields(client.url, "/completion")
    probs = f.obj(reply.body, "the reply").get("completion_probabilities")
    if not probs:
        raise f.missing("completion_probabilities (post_sampling_probs)")
    first = f.obj(f.items(probs, "completion_probabilities", 1 << 24)[0], "[0]")
    where = "completion_probabilities[0].top_probs"
    out = []
    for i, c in enumerate(f.items(first.get("top_probs") or [], where, max(n_probs, 1))):
        c = f.obj(c, f"{where}[{i}]")
        tok = f.token(c.get("id"), f"{where}[{i}].id", n_vocab)
        out.append((tok, f.number(c.get("prob"), f"{where}[{i}].prob", 0.0, 1.0 + AGREE)))
    return sorted(out, key=lambda t: -t[1])


def compare(theirs: list[tuple[int, float]], ours: ChainResult, n_top: int, n_probs: int) -> str:
    """One sentence: do the two chains leave the same survivors with the same probabilities?"""
    mine = {int(t): float(p) for t, p in zip(ours.final_ids, ours.final_p, strict=True) if p > 0}
    server = dict(theirs)
    if not server:
        return "the server's chain returned no survivors"
    shared = set(mine) & set(server)
    delta = max((abs(mine[t] - server[t]) for t in shared), default=math.inf)
    if set(mine) == set(server) and delta <= AGREE:
        return (
            f"the server's chain agrees: the same {len(server)} survivor(s), max |Δp| {delta:.1e}"
        )
    why = []
    if len(server) >= n_probs:
        why.append(f"the server lists only its top {n_probs} survivors")
    outside = len(set(mine) - set(server))
    if outside:
        why.append(f"{outside} of ours are not in its list")
    if len(mine) and len(server) > len(mine):
        why.append("ours ran on the top K only")
    reason = "; ".join(why) or f"tokenstep's chain ran on the top {n_top} only"
    shown = f"max |Δp| {delta:.3f} over {len(shared)} shared" if shared else "no survivor shared"
    return (
        f"the server's chain differs: {len(server)} survivor(s) there, {len(mine)} here, "
        f"{shown} ({reason})"
    )


def check_row(backend: Any, result: ChainResult, prompt: list[int]) -> tuple[list, str]:
    """Ask and compare; a failed request is the note, never an error of the step."""
    try:
        theirs = post_chain(
            backend.client,
            prompt,
            backend.settings,
            backend.n_probs,
            backend.slot,
            backend.n_ctx,
            backend.info.n_vocab,
        )
    except (ServerError, TokenstepError) as exc:
        return [], f"the server's chain was not asked: {exc}".rstrip(".")
    step = backend.records[backend.logits_record].server
    return theirs, compare(theirs, result, step.n_top if step else 0, backend.n_probs)
