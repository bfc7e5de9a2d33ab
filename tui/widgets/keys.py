"""The key map, in one place: the app's bindings, the key bar and the help screen read it."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.run.backend import Capabilities


@dataclass(frozen=True)
class Key:
    keys: str  # Textual key names, comma separated
    action: str
    label: str  # how the key bar shows it
    short: str  # what it does, in a word or two
    help: str  # one line for the help screen
    group: str
    anywhere: bool = False  # also works while typing in the chat box
    spec: bool = False  # only does something with --spec-type: the bar shows it only then
    bar: bool = True  # False: the help lists it, the key bar leaves it out (a rare key)
    needs: str = ""  # a Capabilities field: without it the bar leaves the key out, help says why


def off(k: Key, caps: Capabilities) -> str | None:
    """Why ``k`` does nothing on this backend, in one sentence (None: it works)."""
    missing = caps.missing(k.needs) if k.needs else None
    return None if missing is None else f"Off here: {k.needs} {missing}."


KEYS: tuple[Key, ...] = (
    Key("space", "toggle_play", "space", "run/pause", "Autoplay on/off. Off is step mode.", "step"),
    Key(
        "right,n",
        "step",
        "→",
        "step",
        "One loop turn: sample, detokenize, feed back (one llama_decode).",
        "step",
    ),
    Key(
        "left,backspace",
        "rewind",
        "←",
        "rewind",
        "Drop the newest token from the KV cache; nothing is recomputed.",
        "step",
    ),
    Key("up", "cursor(-1)", "↑↓", "pick", "Move the cursor through the candidates.", "step"),
    Key("down", "cursor(1)", "", "", "", "step"),
    Key(
        "f,enter",
        "force",
        "f",
        "force",
        "Force the highlighted candidate as the next token.",
        "step",
    ),
    Key("t", "adjust('temp', -1)", "t/T", "temp", "Temperature down/up (0 is greedy).", "sampler"),
    Key("T", "adjust('temp', 1)", "", "", "", "sampler"),
    Key("k", "adjust('top_k', -1)", "k/K", "top-k", "top-k down/up (1 at the bottom; off, 0, is past 200).", "sampler"),
    Key("K", "adjust('top_k', 1)", "", "", "", "sampler"),
    Key("p", "adjust('top_p', -1)", "p/P", "top-p", "top-p down/up (1.0 is off).", "sampler"),
    Key("P", "adjust('top_p', 1)", "", "", "", "sampler"),
    Key("m", "adjust('min_p', -1)", "m/M", "min-p", "min-p down/up (0 is off).", "sampler"),
    Key("M", "adjust('min_p', 1)", "", "", "", "sampler"),
    Key("g", "greedy", "g", "greedy", "Greedy on/off (always the highest logit).", "sampler"),
    Key(
        "colon",
        "chain_set",
        ":",
        "chain",
        "Sampler chain: [ ] pick a stage, { } move it up/down, x turn it off/on, : set any "
        "parameter by llama.cpp's flag name (defaults shown); re-runs on the same logits.",
        "sampler",
    ),
    Key(
        "full_stop",
        "spec_stage",
        ".",
        "stages",
        "--spec-type: replay the last round's stages in order (1 draft, 2 verify batch, "
        "3 accept, 4 cut the cache), from its record; < > move the logits pane across its rows.",
        "step",
        spec=True,
    ),
    Key("less_than_sign", "spec_row(-1)", "", "", "", "step"),  # --spec-type: verify rows
    Key("greater_than_sign", "spec_row(1)", "", "", "", "step"),
    Key("left_square_bracket", "chain('cursor', '-1')", "", "", "", "sampler"),
    Key("right_square_bracket", "chain('cursor', '1')", "", "", "", "sampler"),
    Key("left_curly_bracket", "chain('move', '-1')", "", "", "", "sampler"),
    Key("right_curly_bracket", "chain('move', '1')", "", "", "", "sampler"),
    Key("x", "chain('toggle')", "", "", "", "sampler"),
    Key("s", "seed", "s", "seed", "Next seed: a fresh RNG for the dist sampler.", "sampler"),
    Key(
        "1",
        "tab('tokens')",
        "1-5",
        "panes",
        "Bottom panes: 1 tokens, 2 batch, 3 timeline, 4 KV cache, 5 mask.",
        "view",
    ),
    Key("2", "tab('batch')", "", "", "", "view"),
    Key("3", "tab('timeline')", "", "", "", "view"),
    Key("4", "tab('kv')", "", "", "", "view"),
    Key("5", "tab('mask')", "", "", "", "view"),
    Key(
        "6",
        "tab('attention')",
        "6/7",
        "inside",
        "Inside one decode: 6 attention weights (the model's own), 7 decode anatomy.",
        "view",
    ),
    Key("7", "tab('anatomy')", "", "", "", "view"),
    Key(
        "8",
        "tab('lens')",
        "8/L",
        "lens",
        "Logit lens: what each layer would predict (its l_out through the model's head), "
        "computed only while tab 8 shows; L switches between the preview and the last step; "
        "G shows the grid over every position of the context (top-1 and p per layer).",
        "view",
    ),
    Key("L", "lens_mode", "", "", "", "view"),
    Key("G", "lens_grid", "", "", "", "view"),
    Key(
        "a",
        "attention",
        "a",
        "attn",
        "Attention capture on/off, in an observer context of its own (flash attention off "
        "there) that replays the run's decodes; the run's context is never rebuilt.",
        "view",
        needs="attention",
    ),
    Key(
        "A",
        "attention_all",
        "A",
        "all layers",
        "Attention for every layer in one replay: [ and ] then switch layers at once.",
        "view",
        needs="attention",
    ),
    Key(
        "9",
        "tab('memory')",
        "9/0",
        "cache",
        "Cache panes: 9 KV memory, 0 cache (verify, work, prefix reuse, shifts, sequences).",
        "view",
    ),
    Key("0", "tab('cache')", "", "", "", "view"),
    Key(
        "pagedown",
        "scroll_tab(1)",
        "PgUp/PgDn",
        "scroll tab",
        "Scroll the bottom tab (8's layers, 9 and 0 are longer than the pane); Home/End go "
        "to its top and its end.",
        "view",
    ),
    Key("pageup", "scroll_tab(-1)", "", "", "", "view"),
    Key("home", "scroll_tab(-2)", "", "", "", "view"),
    Key("end", "scroll_tab(2)", "", "", "", "view"),
    Key(
        "z",
        "zoom_tab",
        "z",
        "zoom",
        "Enlarge the bottom pane to the whole window, and back (the chart, the lens, the "
        "cache tab get every row; the other panes come back with z).",
        "view",
    ),
    Key(
        "v",
        "verify('batched')",
        "v/V",
        "verify",
        "Verify the KV cache: recompute the context from scratch and compare the logits "
        "(v in as few batches as -b allows, V replaying the same decode calls).",
        "step",
        needs="verify",
    ),
    Key("V", "verify('replay')", "", "", "", "step"),
    Key(
        "F",
        "fork",
        "F",
        "fork",
        "Fork sequence 0 into seq 1 (llama_memory_seq_cp); → steps both in one batch.",
        "step",
        needs="fork",
    ),
    Key("b", "boundaries", "b", "boundaries", "Show token boundaries in the text.", "view"),
    Key(
        "u",
        "surprise",
        "u",
        "surprise",
        "Surprise map: colour tokens by p, p′ or entropy, then off (with a local model prompts get a p too).",
        "view",
    ),
    Key(
        "c",
        "tab('run')",
        "c/w",
        "run/paths",
        "c: run over time (←/→ move the token cursor); w: paths not taken (Enter jumps).",
        "view",
    ),
    Key("w", "tab('paths')", "", "", "", "view"),
    Key(
        "percent_sign",
        "seen",
        "%",
        "p|k",
        "Logits: p|k, the distribution top-p saw (softmax over top-k's survivors), and its "
        "running sum Σ, so each top-p cut can be checked; % again for p and p′.",
        "view",
    ),
    Key("number_sign", "ids", "#", "ids", "Show token ids on the chips.", "view"),
    Key(
        "e",
        "explain",
        "e",
        "explain",
        "Explain the pipeline stage (click a stage to choose).",
        "view",
    ),
    Key("y", "copy_reply", "y", "copy", "Copy (yank) the newest reply to the clipboard.", "view"),
    Key("i,slash", "focus_chat", "i", "type", "Go to the chat box (Esc comes back).", "view"),
    Key(
        "ctrl+n,f2",  # F2 for a browser, which keeps ctrl+n (a new window) for itself
        "new_chat",
        "^n",
        "new chat",
        "New chat: autosave, then empty the KV cache.",
        "app",
        True,
    ),
    Key(
        "ctrl+s",
        "save",
        "^s",
        "save",
        "Save the session (conversation, settings, step records).",
        "app",
        True,
    ),
    Key(
        "l",
        "tour",
        "l",
        "tour",
        "Guided tour of the loop on this model, a guess before each reveal, in a context of "
        "its own (English or Chinese, from the locale; tokenstep tour --lang picks).",
        "app",
        bar=False,
    ),
    Key(
        "question_mark,f1", "help", "?", "help", "This help (F1 works in the chat box too).", "app"
    ),
    Key("ctrl+q,ctrl+c", "quit", "^q", "quit", "Quit (the session is autosaved).", "app", True),
)

CHAT_KEYS: tuple[tuple[str, str], ...] = (
    ("enter", "send"),
    ("esc", "controls"),
    ("F1", "help"),
    ("^s", "save"),
    ("^n", "new chat"),
    ("^q", "quit"),
)

# Keys a bottom pane takes while it has the focus (its own bindings, built from here): in
# those tabs the same arrows mean something else, and the key bar and help say what.
PANE_KEYS: dict[str, tuple[Key, ...]] = {
    "attention": (
        Key("left", "head(-1)", "←→", "head", "The previous/next head (mean, 0 … n_head-1).", "pane"),
        Key("right", "head(1)", "", "", "", "pane"),
        Key("up,k", "cursor(-1)", "↑↓", "query", "The query row whose keys are ranked.", "pane"),
        Key("down,j", "cursor(1)", "", "", "", "pane"),
        Key("pageup", "cursor(-10)", "", "", "", "pane"),
        Key("pagedown", "cursor(10)", "", "", "", "pane"),
        Key("home", "cursor_to(0)", "", "", "", "pane"),
        Key("end", "cursor_to(-1)", "", "", "", "pane"),
        Key("left_square_bracket", "layer(-1)", "[ ]", "layer", "The previous/next layer.", "pane"),
        Key("right_square_bracket", "layer(1)", "", "", "", "pane"),
        Key("m", "mean", "m", "mean", "The mean over heads.", "pane"),
        Key("s", "scale", "s", "scale", "Colour scale: per row or absolute.", "pane"),
    ),
    "anatomy": (
        # a scrolling pane: its own ← → would scroll sideways (nothing: it is not wider), so
        # here they stay the app's rewind and step
        Key("up", "scroll_up", "↑↓", "scroll", "Scroll the anatomy (← → stay rewind, step).", "pane"),
        Key("down", "scroll_down", "", "", "", "pane"),
        Key("left", "app.rewind", "", "", "", "pane"),
        Key("right", "app.step", "", "", "", "pane"),
    ),
    "run": (
        Key("left", "move(-1)", "←→", "cursor", "Move the token cursor one step.", "pane"),
        Key("right", "move(1)", "", "", "", "pane"),
        Key("home", "move_to(0)", "", "", "", "pane"),
        Key("end", "move_to(-1)", "", "", "", "pane"),
        Key(
            "up",
            "plot(-1)",
            "↑↓",
            "plot",
            "Entropy or p of the pick (both at once when the pane is tall: z).",
            "pane",
        ),
        Key("down", "plot(1)", "", "", "", "pane"),
    ),
    "paths": (
        Key("up", "cursor(-1)", "↑↓", "branch", "Move through the branches.", "pane"),
        Key("down", "cursor(1)", "", "", "", "pane"),
        Key("enter", "jump", "⏎", "jump", "Jump to the branch (its end).", "pane"),
    ),
}
PANE_TITLES = {
    "attention": "6 attention",
    "anatomy": "7 anatomy",
    "run": "c run chart",
    "paths": "w paths",
}

STAGE_KEY_NAMES = frozenset(k for key in KEYS for k in key.keys.split(","))


def pane_bindings(pane: str) -> list[tuple[str, str, str]]:
    """(keys, action, description) for a pane's own BINDINGS."""
    return [(k.keys, k.action, k.short or k.action) for k in PANE_KEYS[pane]]
