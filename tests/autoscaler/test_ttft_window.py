"""TTFT p99 from the difference of two scrapes of the gateway's histogram."""

from __future__ import annotations

import math

from autoscaler.ttft_window import TtftWindow, p99_of

NAME = "switchyard_gateway_time_to_first_token_seconds"


def page(counts: dict[float, int], model: str = "m", request_class: str = "interactive") -> str:
    lines = [f"# TYPE {NAME} histogram"]
    for le, count in counts.items():
        bound = "+Inf" if math.isinf(le) else repr(le)
        lines.append(f'{NAME}_bucket{{le="{bound}",model="{model}",request_class="{request_class}"}} {count}')
    lines.append(f'{NAME}_count{{model="{model}",request_class="{request_class}"}} {counts[math.inf]}')
    return "\n".join(lines) + "\n"


def test_p99_is_the_bound_of_the_bucket_that_holds_it() -> None:
    assert p99_of({0.1: 99, 0.5: 100, math.inf: 100}) == 0.1
    assert p99_of({0.1: 98, 0.5: 100, math.inf: 100}) == 0.5
    assert p99_of({0.1: 0, 0.5: 0, math.inf: 3}) == 0.5  # past the last bound: that bound
    assert p99_of({0.1: 0, math.inf: 0}) is None


def test_the_window_is_what_happened_between_two_scrapes() -> None:
    window = TtftWindow()
    window.observe(page({0.1: 100, 1.0: 100, math.inf: 100}))
    assert window.p99(["m"]) is None  # the first scrape is a baseline
    window.observe(page({0.1: 100, 1.0: 110, math.inf: 110}))  # the 10 new ones were slow
    assert window.p99(["m"]) == 1.0
    assert window.p99(["other"]) is None


def test_counts_that_went_down_start_a_new_baseline() -> None:
    window = TtftWindow()
    window.observe(page({0.1: 100, 1.0: 100, math.inf: 100}))
    window.observe(page({0.1: 5, 1.0: 5, math.inf: 5}))  # restarted, or another worker answered
    assert window.p99(["m"]) is None
    window.observe(page({0.1: 9, 1.0: 9, math.inf: 9}))
    assert window.p99(["m"]) == 0.1


def test_bulk_requests_are_not_counted() -> None:
    window = TtftWindow()
    window.observe(page({0.1: 0, 1.0: 0, math.inf: 0}, request_class="bulk"))
    window.observe(page({0.1: 0, 1.0: 9, math.inf: 9}, request_class="bulk"))
    assert window.p99(["m"]) is None


def test_priority_counts_with_interactive_and_flex_does_not() -> None:
    window = TtftWindow()
    zero = {0.1: 0, 1.0: 0, 5.0: 0, math.inf: 0}
    classes = ("priority", "interactive", "flex")
    window.observe("".join(page(zero, request_class=c) for c in classes))
    later = {
        "priority": {0.1: 50, 1.0: 50, 5.0: 50, math.inf: 50},
        "interactive": {0.1: 49, 1.0: 50, 5.0: 50, math.inf: 50},  # one of 100 demand requests over 0.1 s
        "flex": {0.1: 0, 1.0: 0, 5.0: 40, math.inf: 40},  # flex waited for room: not a shortage
    }
    window.observe("".join(page(later[c], request_class=c) for c in classes))
    assert window.p99(["m"]) == 0.1
