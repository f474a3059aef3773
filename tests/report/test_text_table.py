"""`report.text_table.text_table`: the table of the CLI and the benchmarks, character for character."""

from __future__ import annotations

from report.result_files import format_table
from report.text_table import text_table


def test_numbers_sit_right_and_text_left() -> None:
    rows = [("dev", "3f2a9c01b2d4", "12"), ("alpha-long", "0123", "1.5"), ("x", "1.2.3", "")]
    assert text_table(("team", "key hash", "n"), rows).splitlines() == [
        "team        key hash      n",
        "----------  ------------  ---",
        "dev         3f2a9c01b2d4   12",
        "alpha-long          0123  1.5",
        "x           1.2.3",
    ]


def test_right_aligns_every_cell_but_not_the_headings() -> None:
    rows = [("s1", "a figure", "1.23"), ("s3", "x", "")]
    assert text_table(("bench", "figure", "value"), rows, align="right").splitlines() == [
        "bench  figure    value",
        "-----  --------  -----",
        "   s1  a figure   1.23",
        "   s3         x",
    ]


def test_no_rows_is_headings_and_rule() -> None:
    assert text_table(("team", "key hash"), []) == "team  key hash\n----  --------"


def test_result_rows_take_columns_in_first_seen_order() -> None:
    rows = [{"bench": "s1", "value": 1.23456, "met": None}, {"bench": "s4", "extra": 3}]
    assert format_table(rows).splitlines() == [
        "bench  value  met  extra",
        "-----  -----  ---  -----",
        "   s1   1.23",
        "   s4                  3",
    ]
    assert format_table([]) == "\n"
