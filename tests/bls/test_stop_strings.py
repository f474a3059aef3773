from __future__ import annotations

import random
import time

from bls.stop_strings import StopScan, scan_stop_strings


def run(deltas: list[str], stops: list[str]) -> tuple[list[str], bool]:
    """Feed deltas (the last one final); return what was emitted per call and the stop flag."""
    held, emitted = "", []
    for i, delta in enumerate(deltas):
        scan = scan_stop_strings(held, delta, stops, is_final=i == len(deltas) - 1)
        emitted.append(scan.emit)
        held = scan.held
        if scan.stop_hit:
            return emitted, True
    return emitted, False


def test_no_stops_emits_everything() -> None:
    assert scan_stop_strings("", "abc", [], is_final=False) == StopScan("abc", "", False)


def test_stop_inside_one_delta_cuts_before_it() -> None:
    assert scan_stop_strings("", "The end. Observation: x", ["Observation:"], is_final=False) == StopScan(
        "The end. ", "", True, after_stop=2
    )


def test_stop_split_across_deltas_is_found_and_never_emitted() -> None:
    emitted, hit = run(["The answer. Obs", "erv", "ation: more"], ["Observation:"])
    assert hit
    assert "".join(emitted) == "The answer. "
    assert emitted == ["The answer. ", "", ""]


def test_holdback_is_released_when_it_turns_out_not_to_be_a_stop() -> None:
    emitted, hit = run(["say Ob", "viously", " yes"], ["Observation:"])
    assert not hit
    assert emitted == ["say ", "Obviously", " yes"]


def test_final_flushes_held_text() -> None:
    emitted, hit = run(["ends with Obs", ""], ["Observation:"])
    assert not hit
    assert "".join(emitted) == "ends with Obs"
    assert emitted[0] == "ends with "


def test_earliest_of_several_stops_wins() -> None:
    scan = scan_stop_strings("", "a STOP b END c", ["END", "STOP"], is_final=False)
    assert scan == StopScan("a ", "", True, after_stop=len(" b END c"))


def test_holds_longest_possible_prefix_over_several_stops() -> None:
    scan = scan_stop_strings("", "xx\n\n#", ["\n\n##", "#!"], is_final=False)
    assert scan.emit == "xx"
    assert scan.held == "\n\n#"


def test_stop_at_very_start() -> None:
    assert scan_stop_strings("", "\nhello", ["\n"], is_final=True) == StopScan("", "", True, after_stop=len("hello"))


def _naive_holdback(text: str, stops: list[str]) -> int:
    """The definition, spelled out: the longest tail of `text` that is a proper prefix of a stop."""
    return max([k for stop in stops for k in range(1, len(stop)) if k <= len(text) and text.endswith(stop[:k])] or [0])


def test_holdback_matches_its_definition_on_random_texts() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice("abc") for _ in range(rng.randint(0, 12)))
        scan = scan_stop_strings("", text, stops, is_final=False)
        if not scan.stop_hit:
            assert len(scan.held) == _naive_holdback(text, stops), (text, stops)
            assert scan.emit + scan.held == text


def _scan_seconds(length: int) -> float:
    """Best of several runs of one scan that must consider every prefix length of the stop."""
    # The reply's tail of a's matches every prefix of the stop up to its "b": each longer one
    # fails only at that "b", after comparing half the stop.
    stop = "a" * (length // 2) + "b" + "a" * (length // 2)
    delta = "a" * length
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        scan_stop_strings("", delta, [stop], is_final=False)
        best = min(best, time.perf_counter() - began)
    return best


def test_scan_cost_grows_linearly_with_the_stop_strings_length() -> None:
    # 200x longer: a linear scan costs ~200x, the quadratic one ~3,000x (its compares are
    # memcmp, fast enough that lengths below ~10^4 hide it behind fixed costs). A ratio
    # measured side by side in one run, so a busy machine slows both alike.
    ratio = _scan_seconds(200_000) / _scan_seconds(1_000)
    assert ratio < 1_000, f"scan cost grew {ratio:.0f}x for a 200x longer stop string"
