"""Progress text: exact bars and ETAs, as the CLI and the status API show them."""

from __future__ import annotations

import pytest

from bulk.progress import eta_text, progress_bar


def test_bar_shows_done_then_failed_then_pending_with_percent_finished() -> None:
    assert progress_bar(8, 1, 1, 20, width=10) == "[████▒░░░░░] 50%"
    assert progress_bar(14, 1, 1, 30) == "[" + "█" * 14 + "▒" * 2 + "░" * 14 + "] 53%"
    assert progress_bar(0, 0, 0, 7, width=7) == "[░░░░░░░] 0%"
    assert progress_bar(3, 2, 2, 7, width=7) == "[███▒▒▒▒] 100%"


def test_bar_rounds_down_so_full_means_finished() -> None:
    assert progress_bar(999, 0, 0, 1000, width=10) == "[█████████░] 99%"
    assert progress_bar(1000, 0, 0, 1000, width=10) == "[██████████] 100%"
    # Cells come from the running totals, so they always add up to the width.
    assert progress_bar(1, 1, 0, 3, width=4) == "[█▒░░] 66%"


def test_empty_batch_is_complete() -> None:
    assert progress_bar(0, 0, 0, 0, width=5) == "[█████] 100%"


@pytest.mark.parametrize(("counts", "width"), [((-1, 0, 0, 5), 10), ((3, 2, 1, 5), 10), ((0, 0, 0, 5), 0)])
def test_bar_rejects_impossible_counts(counts: tuple[int, int, int, int], width: int) -> None:
    with pytest.raises(ValueError):
        progress_bar(*counts, width=width)


@pytest.mark.parametrize(
    ("eta", "text"),
    [
        (None, "–"),
        (float("inf"), "–"),
        (0.0, "0s"),
        (-5.0, "0s"),
        (0.2, "1s"),
        (42.0, "42s"),
        (59.5, "1m 00s"),
        (190.0, "3m 10s"),
        (3600.0, "1h 00m"),
        (3900.0, "1h 05m"),
        (3959.0, "1h 05m"),
        (26 * 3600 + 60.0, "1d 02h"),  # minutes dropped once days show
    ],
)
def test_eta_text(eta: float | None, text: str) -> None:
    assert eta_text(eta) == text
