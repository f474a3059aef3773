"""`switchyard sim`: a short exact run of every policy writes the report, its figures and the
summary; bad arguments are refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from config.settings import load_config
from simulator.variants import VARIANTS
from switchyard.sim_commands import POLICY_NAMES, add_sim_parser, sim


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_sim_parser(parser.add_subparsers())
    return parser.parse_args(argv)


def test_policy_names_match_the_simulator_s() -> None:
    assert tuple(POLICY_NAMES) == VARIANTS


def test_a_short_run_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["sim", "weekday", "--gpus", "4", "--hours", "0.02", "--exact", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 0
    report = (tmp_path / "report.md").read_text()
    for policy in VARIANTS:
        assert f"**{policy}**" in report
    assert "S6 targets" in report and "not covered" in report  # 0.02 h never reaches the ramp
    assert (tmp_path / "servers.png").stat().st_size > 1000
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert [row["policy"] for row in rows] == list(VARIANTS)
    assert "report:" in capsys.readouterr().out


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    args = parse(["sim", "weekday", "--policies", "magic", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 2
    with pytest.raises(SystemExit):
        parse(["sim", "tuesday"])
    args = parse(["sim", "weekday", "--reserve-fraction", "1.5", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 2
    args = parse(["sim", "weekday", "--bulk-lease-fraction", "0", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 2
    args = parse(["sim", "weekday", "--jobs", "0", "--out", str(tmp_path)])
    assert sim(load_config(), args) == 2
