"""Prompts for speculative decoding."""

from __future__ import annotations

CHAT = (
    "<|im_start|>user\nWrite a short story about a cat who learns to cook.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


LIST = "Colors: " + ", ".join(["red", "green", "blue", "yellow"] * 8)  # a period of 8 tokens


# ngram-simple finds the LATEST earlier occurrence, one period back, and drafts only when at
# least size_n tokens follow it: with the default 12 it needs a period longer than 12.
COUNT = "Count: " + ", ".join(str(i) for i in range(1, 31)) + "\nAgain: 1, 2, 3"


# Four times round: the model continues the list, with a few rounds that reject a draft.
LIST_X4 = "Colors: " + ", ".join(["red", "green", "blue", "yellow"] * 4)
