"""`freeze_startup_heap`: what exists at the call leaves the collector's oldest generation, so
a later full collection walks only what was made since. In a child process: freezing is for
the life of the process, which the test runner's must not be."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import gc
from config.startup_heap import freeze_startup_heap
kept = [[i] for i in range(200_000)]  # lists: objects the collector tracks
before = len(gc.get_objects(generation=2))
frozen = freeze_startup_heap()
after = len(gc.get_objects(generation=2))
made_since = [[i] for i in range(1_000)]
gc.collect()
print(before, frozen, after, len(gc.get_objects(generation=2)))
"""


def test_a_full_collection_after_the_freeze_walks_only_what_was_made_since() -> None:
    result = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, check=True)
    before, frozen, after, later = (int(n) for n in result.stdout.split())
    assert before > 100_000 and frozen >= 200_000  # a full pass had them to walk; now none
    assert after < 1_000  # nothing left for a full pass to walk
    assert later < 1_000 + 1_000 + after  # only the lists made since, and their little company
