"""What a command or a measurement shows a person: aligned text tables, and the result files
the benchmarks, the fault harness, the simulator and `switchyard gpu-check` write.

    text_table.py     the one table format of the command line and the benchmarks
    result_files.py   bench/results/<name>.json, and the table printed beside it

Imports no package of ours, so the CLI, the benchmarks and the fault harness all share it; the
benchmarks themselves stay out of the CLI (and out of the wheel).
"""
