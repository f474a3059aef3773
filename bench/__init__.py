"""The benchmarks: each starts the real stack (or the parts it measures), drives load, prints a
table and writes `bench/results/<name>.json`; variants are compared as ratios in one run.

Each scenario (S1-S9) and each cost measured (edge, concurrency, serving overhead, the gRPC
door, guided decoding) is a file of its own with its own load shape; the live ones share
`live.py`. `python -m bench chaos` and `python -m bench partitions` hand over to the fault
harness (`faults/`), the one package below this one that is ours alone.

The top of the house beside the CLI: imports anything below it, and nothing imports it, the
CLI included (`switchyard gpu-check` runs `python -m bench gpu` as a process), so no benchmark
ships in the wheel.
"""
