"""Snapshots of the compare screen at 100x30 and 140x42 (and 80x24, the smallest the app is drawn for).

The records are built by hand from fixed numbers (tests/support/compare_records.py), not from a run of
the model: a real run's KL and p move with the CPU's kernels, these do not, so the pictures
are the same on every machine. What a real run shows is checked against its records in
tests/compare/test_compare_screen.py. Update with ``--snapshot-update`` only after looking at the SVGs."""

from __future__ import annotations

import pytest

from tests.support.compare_records import fixed_result
from tui.compare.screen import CompareApp

SIZES = [(100, 30), (140, 42)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_flip_opened_by_n(snap_compare, size):
    assert snap_compare(CompareApp(fixed_result()), press=["n", "n"], terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_free_running_texts(snap_compare, size):
    assert snap_compare(CompareApp(fixed_result(free=True)), press=["t"], terminal_size=size)


def test_a_remote_b_at_100x30(snap_compare):
    assert snap_compare(CompareApp(fixed_result(remote=True)), press=["k"], terminal_size=(100, 30))


def test_help_at_100x30(snap_compare):
    assert snap_compare(
        CompareApp(fixed_result()), press=["question_mark"], terminal_size=(100, 30)
    )


def test_at_80x24_the_strip_keeps_its_lines_and_the_lists_shorten(snap_compare):
    assert snap_compare(CompareApp(fixed_result()), press=["n"], terminal_size=(80, 24))
