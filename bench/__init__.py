"""The benchmarks: each starts the real stack (or the parts it measures), drives load, prints a
table and writes `bench/results/<name>.json`; variants are compared as ratios in one run.

Over ~5k lines because each scenario (S1-S12) is a file of its own with its own load shape;
they share only `common.py` and `live.py`. Imports anything below it; only the CLI imports it.
"""
