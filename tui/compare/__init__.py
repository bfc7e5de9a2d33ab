"""``tokenstep compare``: two configurations, A and B, on the same tokens in lockstep.

:mod:`~tui.compare.records` holds what a run finds (plain frozen records, no Textual, no
Rich); :mod:`~tui.compare.divergence` is the NumPy arithmetic on two logits rows;
:mod:`~tui.compare.lockstep` runs two llama.cpp contexts teacher-forced,
:mod:`~tui.compare.free` free-running, :mod:`~tui.compare.remote` against a llama-server's
top K; :mod:`~tui.compare.kld_base` keeps A's rows in a file; :mod:`~tui.compare.run` builds
the sides from the flags (:mod:`~tui.compare.sides`) and :mod:`~tui.compare.cli` parses
``A-flags --vs B-flags`` and prints JSON lines, a table, or hands the result to the compare
screen (``tui/compare/screen.py``'s ``run_screen(result)``, when it is there).
"""
