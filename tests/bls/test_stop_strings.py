from __future__ import annotations

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
        "The end. ", "", True
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
    assert scan == StopScan("a ", "", True)


def test_holds_longest_possible_prefix_over_several_stops() -> None:
    scan = scan_stop_strings("", "xx\n\n#", ["\n\n##", "#!"], is_final=False)
    assert scan.emit == "xx"
    assert scan.held == "\n\n#"


def test_stop_at_very_start() -> None:
    assert scan_stop_strings("", "\nhello", ["\n"], is_final=True) == StopScan("", "", True)
