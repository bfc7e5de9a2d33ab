"""The guided tour of the loop (``tokenstep tour``, the app's ``l`` key).

:mod:`~tui.tour.lab` runs each chapter's real operation in a context of its own and returns
plain numbers; :mod:`~tui.tour.chapters` turns them into screens and guesses;
:mod:`~tui.tour.screen` draws them; :mod:`~tui.tour.strings_en` and
:mod:`~tui.tour.strings_zh` hold every sentence in both languages.
"""
