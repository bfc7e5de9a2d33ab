"""Every sentence of the tour in English (the same keys as :mod:`~tui.tour.strings_zh`)."""

from __future__ import annotations

STRINGS: dict[str, str] = {
    "yes": "yes",
    "no": "no",
    "guess.title": "Your guess first.",
    "stage.tokenize": "1 tokenize",
    "stage.batch": "2 batch",
    "stage.decode": "3 decode",
    "stage.logits": "4 logits",
    "stage.sample": "5 sample",
    "stage.detok": "6 end? / detokenize",
    "stage.feed": "7 feed back",
    "pane.tokens": "In the app: tab 1, tokens.",
    "pane.batch": "In the app: tab 2, the batch.",
    "pane.timeline": "In the app: tab 3, the timeline of decode calls.",
    "pane.logits": "In the app: the logits pane, top right.",
    "pane.text": "In the app: the text pane, where each piece lands.",
    "pane.kv": "In the app: tab 4, the KV cache.",
    "pane.mask": "In the app: tab 5, the causal mask.",
    "pane.attention": "In the app: tab 6, attention weights (key a turns the capture on).",
    "pane.cache": "In the app: tab 0, the cache pane.",
    "pane.memory": "In the app: tab 9, KV memory.",
    "loop.title": "The loop, one turn",
    "loop.intro": (
        "A model never writes a sentence at once. It scores every possible next token, one is "
        "chosen, and that token goes back in as input. We run that turn now on your prompt:\n"
        "  {prompt}\n"
        "Each page lights one of the seven steps and names the llama.cpp call behind it."
    ),
    "loop.1": (
        "The text becomes {n} token ids. The model only ever sees these numbers.\n"
        "  pieces: {pieces}\n  ids:    {ids}"
    ),
    "loop.2": (
        "The {n} ids go into one batch: positions 0 to {last}, all in sequence 0, and only "
        "the last row asks for logits, because only its next token is wanted."
    ),
    "loop.3": (
        "One llama_decode runs the whole batch through every layer. Each token leaves its keys "
        "and values behind: the KV cache now holds {cells} cells."
    ),
    "loop.4": (
        "The last row comes back as {n_vocab:,} numbers, one score per entry of the vocabulary. "
        "No token is chosen yet. The highest score belongs to id {top1}."
    ),
    "loop.5": (
        "The sampler chain turns scores into a choice. The tour samples greedily, so it takes "
        "the highest: id {id}, {piece!r}."
    ),
    "loop.6": (
        "Is it an end-of-generation token? {eog}. Then the id is turned back into bytes: "
        "{piece!r}. That is the text you would see appear."
    ),
    "loop.7": (
        "The new token is decoded alone, one token wide. Only its own keys and values are "
        "computed; the older ones are read from the cache. Cells: {before} before, {after} "
        "after."
    ),
    "loop.guess_next.q": (
        "Which token comes next after: {prompt}\nType it (the leading space does not matter) "
        "and press Enter."
    ),
    "loop.guess_next.why": (
        "llama.cpp's highest logit is id {id}, {piece!r}. A small model often picks a frequent "
        "continuation rather than the fact you expected."
    ),
    "loop.guess_cells.q": (
        "The cache holds {before} cells. The picked token is fed back with one llama_decode. "
        "How many cells afterwards?"
    ),
    "loop.guess_cells.why": (
        "One token in, one cell more: the {before} old cells stay as they are, which is the "
        "whole point of the cache."
    ),
    "tokens.title": "Tokens are not words",
    "tokens.word": (
        "The vocabulary is made of pieces learned from text. The word {word!r} is {n} "
        "token(s):\n  {pieces}\n"
        "Frequent words get one piece; rare ones are glued from several."
    ),
    "tokens.guess.q": (
        "The character {hanzi} takes {utf8} bytes in UTF-8. How many tokens does this "
        "vocabulary need for it?"
    ),
    "tokens.guess.why": (
        "Its pieces: {pieces}. A piece shown as <0xNN> is a single byte that is not a whole "
        "character: it only becomes readable once the neighbouring pieces arrive."
    ),
    "tokens.chat": (
        "A chat message is wrapped by the model's chat template. {f.message!r} alone is "
        "{f.plain_count} token(s); inside the template it is {f.chat_count}, so the wrapping "
        "costs {extra}:\n"
        "  {pieces}\n"
        "Context size, speed and price are all counted in these tokens, not in letters."
    ),
    "batch.title": "Prefill wide, decode narrow",
    "batch.intro": (
        "All prompt tokens are known in advance, so they can be pushed through the model side "
        "by side. A generated token exists only after the previous step, so generation moves "
        "one token per call."
    ),
    "batch.guess.q": "The prompt has {n} tokens. How many llama_decode calls does its prefill take?",
    "batch.guess.why": (
        "One call carries up to the batch size (-b, {b} here): {n} tokens need ceil({n}/{b}) "
        "call(s), each one wide."
    ),
    "batch.times": (
        "Measured just now on this machine:\n"
        "  prefill: {f.n_prompt} tokens in {f.prefill_ms:.1f} ms ({f.ms_per_prompt_token:.2f} ms "
        "per token)\n"
        "  decode:  1 token in {f.decode_ms:.1f} ms (median of {f.n_decodes} steps)\n"
        "The wide call took as long as {ratio:.1f} one-token calls and carried {f.n_prompt} "
        "tokens: the weights are read once for the whole batch, and on a CPU that reading is "
        "most of a small decode's time."
    ),
    "sampler.title": "From logits to one token",
    "sampler.probs": (
        "Softmax turns the {n_vocab:,} logits into probabilities that add up to 1. The five "
        "largest:\n{top}"
    ),
    "sampler.chain": (
        "llama.cpp's default chain cuts the candidates stage by stage (survivors after each):\n"
        "{stages}\n"
        "Only after the cuts does dist draw one token from what is left."
    ),
    "sampler.guess.q": (
        "The second candidate is {piece!r} with p = {p:.3f}. Top-p {top_p} keeps the most "
        "likely tokens until their sum reaches {top_p}. Does it keep this one?"
    ),
    "sampler.guess.why": (
        "Top-p {top_p} kept {kept} candidate(s): it stops at the first token where the running "
        "sum reaches {top_p}."
    ),
    "inside.title": "Inside one decode",
    "inside.graph": (
        "A decode first builds a graph of operations, then the backend runs it: embeddings, "
        "n_layer blocks of attention and feed-forward, a final norm, the output head.\n"
        "Attention may only look backwards. For {n} tokens the causal mask lets row i see "
        "columns 0 to i (first rows shown):\n{tri}"
    ),
    "inside.guess.q": "How many cells of the {n} x {n} mask may attention use?",
    "inside.guess.why": (
        "The diagonal and everything below it: n(n+1)/2. The other {masked} are set to minus "
        "infinity before the softmax, so they get weight 0."
    ),
    "inside.attn": (
        "The weights copied out of layer {f.layer}'s softmax ({f.n_head} heads):\n"
        "  largest weight on a future token: {f.above_diagonal}\n"
        "  largest |row sum - 1|: {f.row_sum_err:.1e}\n"
        "The last token {f.last_piece!r} looks most at {f.top_piece!r} ({f.top_weight:.2f}, mean "
        "over heads)."
    ),
    "lens.intro": (
        "Every layer ends in a node l_out-N: the residual stream after layer N. The logit lens "
        "sends that row through the model's own head (the final norm, then the output matrix), "
        "as if the model stopped there. Layers count from 0 to {last}; the lab did this for "
        "the prompt's last position, in the same prefill."
    ),
    "lens.guess.q": (
        "llama.cpp's own top-1 here is {piece!r} (id {id}). Which layer's lens is the first "
        "to have it in its top 5?"
    ),
    "lens.guess.why": (
        "Layer {top5} is the first whose top 5 holds {piece!r}; the lens first ranks it top-1 "
        "at layer {top1}. The last layer's lens is llama.cpp's own logits, up to the head's "
        "8-bit rounding (next page)."
    ),
    "lens.never": "none",
    "lens.result": (
        "The lens of the last layer, {last}, is llama.cpp's own logits computed again here: "
        "max |difference| over the vocabulary {d:.3f}. {bound}\nThe head: {head}."
    ),
    "lens.bound": (
        "llama.cpp rounds the normed row to 8 bits before multiplying the quantized head, which "
        "can move a logit by at most {bound:.2f}; the difference stays within that."
    ),
    "lens.head_read": "Reading the head from the GGUF file took {ms:,.0f} ms (once per model).",
    "lens.no_bound": (
        "The difference is rounding: this head's type is one whose rounding the lens does not "
        "bound."
    ),
    "lens.skip": "The logit lens cannot read this model's head, so its guess is skipped: {detail}",
    "pane.lens": "In the app: tab 8, the logit lens.",
    "exact.title": "Why the cache is exact",
    "exact.intro": (
        "A past token's keys and values depend only on the tokens before it, and the mask "
        "keeps later tokens out. So they are fixed once computed, and keeping them loses nothing. "
        "The check: recompute the context in a fresh context with nothing cached."
    ),
    "exact.zero": "exactly 0",
    "exact.small": "above 0, below 0.01",
    "exact.large": "0.01 or more",
    "exact.guess.q": (
        "A second context replays the same {calls} decode calls over the {n} tokens, without "
        "any cache from the first. How far apart are the two logits rows at most?"
    ),
    "exact.guess.why": (
        "Measured: max |Δ| = {d}. Same calls, same kernels, same inputs: the cached run and "
        "the fresh one are the same arithmetic."
    ),
    "exact.batched": (
        "Recomputed in {f.batched_calls} wide call(s) instead, max |Δ| = {f.batched_max:.4f}; "
        "top-1 the same: {agree}. A batch of another shape rounds differently in some kernels "
        "(flash attention {f.flash_attn}); that is rounding, not the cache."
    ),
    "wall.title": "The quadratic wall",
    "wall.intro": (
        "Without a cache, every new token means pushing the whole context through the model "
        "again. We feed {n} tokens one call at a time and count both ways."
    ),
    "wall.guess.q": (
        "After {n} tokens, how many token passes would a loop without a cache have done in total?"
    ),
    "wall.guess.why": "1 + 2 + ... + n = n(n+1)/2 = {formula}: it grows with the square of n.",
    "wall.table": (
        "Counted from the decode calls that ran (context, with cache, without):\n{table}\n"
        "Total: {w} with the cache, {wo} without; n(n+1)/2 = {formula}. The cache saved "
        "{ratio:.1f}x."
    ),
    "ram.title": "What the cache costs in RAM",
    "ram.guess.q": "How many bytes does one token take in {name}'s KV cache?",
    "ram.guess.why": (
        "Every layer stores a K row and a V row per token, n_head_kv x head_dim values each."
    ),
    "ram.formula": (
        "{f.n_layer} layers x (K {f.n_head_kv}x{f.head_dim_k} {f.type_k} = {f.k_row} B + V "
        "{f.n_head_kv}x{f.head_dim_v} {f.type_v} = {f.v_row} B) = {f.bytes_per_token:,} B "
        "per token.\nWith one K/V head per query head ({f.n_head}) it would be "
        "{f.mha_bytes_per_token:,} B: grouped-"
        "query attention shares each K/V head."
    ),
    "ram.cache": (
        "  {kind}: {cells:,} cells x {layers} layers: ours {ours:.2f} MiB, llama.cpp logged "
        "{logged:.2f} MiB, agree: {ok}"
    ),
    "ram.no_log": "  (no context here: nothing logged to compare)",
    "ram.big": (
        "A larger model, typed in as sizes (32 layers, 8 K/V heads of 128, f16): {per:,} B per "
        "token, so a {ctx:,}-token context needs {mib:,.0f} MiB before any weight is counted."
    ),
    "full.title": "When the context is full",
    "full.stop": (
        "A context of {n} tokens filled up. With --context-full stop, generation ends at {at} "
        "tokens: {reason!r}."
    ),
    "full.guess.q": (
        "With --context-full shift and --keep {keep}, the {past} tokens must make room. How "
        "many does the shift forget?"
    ),
    "full.guess.why": (
        "Half of what follows the kept tokens: (n_past - n_keep) / 2, rounded down."
    ),
    "full.shift": (
        "The shift kept {f.n_keep}, dropped {f.n_discard} of {f.n_past} and slid the rest back; "
        "{f.after} tokens now. Forgotten, never seen again by attention:\n  {gone}"
    ),
    "prefix.title": "The prefix cache across turns",
    "prefix.intro": (
        "A second chat turn repeats the first prompt and the reply, then adds the new message. "
        "Whatever is still in the cache from the first turn need not be decoded again."
    ),
    "prefix.guess.q": "The second turn's prompt is {n} tokens. How many are decoded?",
    "prefix.guess.why": (
        "Only the tokens after the longest common prefix with the cache (at least one, to get "
        "logits for the last position)."
    ),
    "prefix.result": (
        "Turn 1: {f.first_tokens} prompt tokens, then a reply of {f.reply_tokens}.\n"
        "Turn 2: {f.second_tokens} tokens, {f.reused} found in the cache, {f.computed} decoded.\n"
        "Prefill time: {f.first_ms:.1f} ms, then {f.second_ms:.1f} ms."
    ),
    "skip.no_context": (
        "This chapter needs a llama.cpp context of its own, and the model here runs on a "
        "server: skipped."
    ),
    "skip.error": "This chapter could not run here: {detail}",
    "ui.chapter": "Chapter {i}/{n}",
    "ui.score": "score {right}/{asked}",
    "ui.keys": "Enter/→ on  ← back  q/Esc leave",
    "ui.keys_choice": "1-{n} answer",
    "ui.keys_typed": "type, then Enter (empty: skip)",
    "ui.running": "Running this chapter on the model...",
    "ui.right": "Right: {answer}.",
    "ui.wrong": "Not quite: the answer is {answer}.",
    "ui.end": (
        "End of the tour. You answered {right} of {asked} guesses right. Every number you saw "
        "came from llama.cpp on this model. Press q to leave, ← to go back."
    ),
}
