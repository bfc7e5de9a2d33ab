"""The pipeline stages of one token's trip, in loop order (index = stage number - 1).

A command lights the stages it ran; the pipeline pane draws them in this order."""

from __future__ import annotations

STAGES = ("tokenize", "batch", "decode", "logits", "sample", "end/detokenize", "feed back")
TOKENIZE, BATCH, DECODE, LOGITS, SAMPLE, DETOKENIZE, FEED_BACK = range(7)
