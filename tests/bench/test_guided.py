"""`python -m bench guided --quick`: every variant measured, masks cost something only where
sequences are constrained, every schema of the set compiles."""

from __future__ import annotations

from bench.bench_guided import main, run
from bench.guided_schemas import SCHEMAS
from contracts.guided_grammar import GrammarChecker, json_schema_grammar


def test_quick_run_measures_every_variant() -> None:
    rows, meta = run(quick=True)
    steps = [row for row in rows if "constrained" in row]
    assert [(row["vocab_size"], row["constrained"]) for row in steps] == [
        (512, 0), (512, 8), (512, 32), (4096, 0), (4096, 8), (4096, 32)
    ]  # fmt: skip
    for row in steps:
        assert row["step_ms"] > 0 and 0 <= row["mask_share"] < 1
        assert (row["mask_us_per_seq"] is None) == (row["constrained"] == 0)
    compiles = [row for row in rows if "compile_p50_ms" in row]
    assert len(compiles) == 2 and all(0 < r["compile_p50_ms"] <= r["compile_p99_ms"] for r in compiles)
    assert meta["quick"] is True


def test_every_bench_schema_passes_the_edge_check() -> None:
    checker = GrammarChecker()
    assert {name: checker.problem(json_schema_grammar(schema)) for name, schema in SCHEMAS.items()} == dict.fromkeys(
        SCHEMAS
    )


def test_the_command_prints_a_table(capsys: object) -> None:
    assert main(["--quick"]) == 0
