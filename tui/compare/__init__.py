"""``tokenstep compare``: two configurations, A and B, on the same tokens in lockstep.

:mod:`~tui.compare.records` holds what a run finds (plain frozen records, no Textual, no
Rich); :mod:`~tui.compare.divergence` is the NumPy arithmetic on two logits rows;
:mod:`~tui.compare.lockstep` runs both llama.cpp contexts; :mod:`~tui.compare.cli` parses
``A-flags --vs B-flags`` and prints JSON lines or a table.
"""
