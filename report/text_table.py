"""Aligned text tables: the one table format of the command line and the benchmarks.

    team        key hash      source
    ----------  ------------  ------
    dev         3f2a9c01b2d4  redis
    alpha             0123ab  file

Headings and a rule of dashes, then the rows; each column as wide as its widest cell, two
spaces between columns, no trailing spaces. It lives in `report`, below everything, because
the CLI (`switchyard quota`, `switchyard servers`) and the benchmarks both print tables and
neither may import the other: the CLI is the top layer, and no benchmark ships with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

# "numbers": cells that are numbers right-aligned, text left-aligned (the CLI's listings).
# "right": every cell right-aligned (benchmark results, mostly figures).
Align = Literal["numbers", "right"]


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]], align: Align = "numbers") -> str:
    """`head` over a rule over `rows`, in aligned columns (see the module docstring). Headings
    and the rule follow the "numbers" rule whatever `align` says, so text headings sit left."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str], right: bool) -> str:
        padded = [c.rjust(w) if right or _numeric(c) else c.ljust(w) for c, w in zip(cells, widths, strict=True)]
        return "  ".join(padded).rstrip()

    body = [line(row, right=align == "right") for row in rows]
    return "\n".join([line(head, right=False), line(["-" * w for w in widths], right=False), *body])


def _numeric(cell: str) -> bool:
    """`12`, `1.5`: digits with at most one decimal point (`1,024` and `-3` read as text)."""
    return bool(cell) and cell.replace(".", "", 1).isdigit()
