"""`switchyard gpu-check`: the smoke check of serving on TensorRT-LLM, on a machine with a GPU.

Not part of `make test`: it needs a GPU, TensorRT-LLM and a `tritonserver`, as in NGC's
`nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3` image.

    prerequisites   nvidia-smi lists a GPU, `import tensorrt_llm` works, tritonserver is found
          │         (any missing: say which and how, exit 2)
          ▼
    build small     build_engines.build.build_model, as `switchyard build` does (--skip-build)
          ▼
    S1, S3, S4      `python -m bench gpu`, a process of its own from the source checkout:
          │         the live benchmarks on stacks whose `serving.target` is trtllm
          ▼
    one table       each benchmark's headline figure against its target
                    -> bench/results/gpu_check.json; exit 0 when every target is met, else 1

The benchmarks run as a process, not an import: the CLI imports no benchmark, so none ships in
the wheel (pyproject.toml), and a checkout, where bench/ sits beside switchyard/, runs them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from build_engines.trtllm_pin import KV_CACHE_CONFIG_KEYS, LLM_API_KEYS, SCHEDULER_CONFIG_KEYS, TRTLLM_VERSION
from config.settings import SwitchyardConfig

MODEL_ID = "small"  # the model and pool the live benchmarks serve (bench/live_runs.py)
# The source checkout this module sits in: `python -m bench` runs from its root.
CHECKOUT = Path(__file__).resolve().parents[1]
# Where NGC's Triton images install the server when it is not on PATH.
TRITONSERVER_FALLBACKS = (Path("/opt/tritonserver/bin/tritonserver"),)
# For each check's command; the slowest, `import tensorrt_llm`, loads CUDA and many libraries:
# tens of seconds on a cold machine.
COMMAND_TIMEOUT_S = 300.0

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
Which = Callable[[str], str | None]
BenchRunner = Callable[[Sequence[str]], int]  # argv -> exit code, the output left to the console


@dataclass(frozen=True, slots=True)
class Prerequisite:
    """One prerequisite's outcome: what was found (`ok`), or what is missing and how to fix it."""

    name: str
    ok: bool
    detail: str


def run_command(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """`argv` run to completion with its output captured as text (the checks' default runner)."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)


def check_gpus(run: Runner = run_command) -> Prerequisite:
    """`nvidia-smi -L` runs and lists at least one GPU ("GPU 0: NVIDIA H200 (UUID: ...)")."""
    name = "nvidia-smi"
    try:
        done = run(["nvidia-smi", "-L"])
    except FileNotFoundError:
        return Prerequisite(name, False, "not found on PATH: install the NVIDIA driver or run with --gpus all")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Prerequisite(name, False, f"did not run: {exc}")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or "no output"
        return Prerequisite(name, False, f"exited with code {done.returncode}: {said}")
    gpus = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
    if not gpus:
        return Prerequisite(name, False, "lists no GPU")
    return Prerequisite(name, True, "; ".join(gpus))


def check_tensorrt_llm(run: Runner = run_command, python: str = sys.executable) -> Prerequisite:
    """`import tensorrt_llm` works in `python` (this interpreter: the one the servers' Python
    backend runs); the detail is its `__version__`. A child process keeps CUDA and the import's
    banner out of this one."""
    name = "tensorrt_llm"
    try:
        done = run([python, "-c", "import tensorrt_llm; print(tensorrt_llm.__version__)"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Prerequisite(name, False, f"could not try the import: {exc}")
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        why = lines[-1] if lines else f"exit code {done.returncode}"
        return Prerequisite(name, False, f"import failed in {python}: {why}")
    # The import prints a banner of its own; the version is the last line.
    lines = done.stdout.strip().splitlines()
    return Prerequisite(name, True, f"version {lines[-1] if lines else 'unknown'}")


# Prints the installed LLM API's field lists (PyTorch backend) as JSON, for the pin's check.
_FIELDS_SCRIPT = """
import json
from tensorrt_llm.llmapi import KvCacheConfig, SchedulerConfig
from tensorrt_llm.llmapi.llm_args import TorchLlmArgs
print(json.dumps({
    "llm": sorted(TorchLlmArgs.model_fields) + ["backend"],
    "kv_cache_config": sorted(KvCacheConfig.model_fields),
    "scheduler_config": sorted(SchedulerConfig.model_fields),
}))
"""


def check_llm_api_pin(run: Runner = run_command, python: str = sys.executable) -> Prerequisite:
    """Every key build_engines/trtllm_pin.py lets a model.yaml hold exists in the installed
    TensorRT-LLM (the record, build_engines/llm_api_schema.py, was read from the pinned release's
    sources; this checks the real wheel)."""
    name = "LLM API keys"
    try:
        done = run([python, "-c", _FIELDS_SCRIPT])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Prerequisite(name, False, f"could not read the installed field lists: {exc}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        why = (done.stderr or done.stdout).strip().splitlines()
        return Prerequisite(
            name, False, f"could not read the installed field lists: {why[-1] if why else done.returncode}"
        )
    try:
        installed = json.loads(lines[-1])
    except json.JSONDecodeError:
        return Prerequisite(name, False, f"unexpected output: {lines[-1][:200]}")
    pinned = {"llm": LLM_API_KEYS, "kv_cache_config": KV_CACHE_CONFIG_KEYS, "scheduler_config": SCHEDULER_CONFIG_KEYS}
    absent = [f"{section}.{key}" for section, keys in pinned.items() for key in sorted(keys - set(installed[section]))]
    if absent:
        return Prerequisite(name, False, f"pinned keys the installed release lacks: {', '.join(absent)}")
    return Prerequisite(name, True, f"all {sum(map(len, pinned.values()))} pinned keys exist (pin {TRTLLM_VERSION})")


def check_tritonserver(which: Which = shutil.which, fallbacks: Sequence[Path] = TRITONSERVER_FALLBACKS) -> Prerequisite:
    """`tritonserver` on PATH, or at one of `fallbacks` (where NGC's images put it)."""
    name = "tritonserver"
    found = which("tritonserver")
    if found is not None:
        return Prerequisite(name, True, found)
    for path in fallbacks:
        if path.is_file():
            return Prerequisite(name, True, str(path))
    places = ", ".join(str(path) for path in fallbacks) or "nowhere else"
    return Prerequisite(name, False, f"not on PATH nor at {places}: use an NGC tritonserver *-trtllm-python-py3 image")


def check_prerequisites(
    run: Runner = run_command, which: Which = shutil.which, python: str = sys.executable
) -> list[Prerequisite]:
    """Every prerequisite, checked in full so one run names all that is missing."""
    found = [check_gpus(run), check_tensorrt_llm(run, python), check_tritonserver(which)]
    if found[1].ok:
        found.append(check_llm_api_pin(run, python))
    return found


def add_gpu_check_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`gpu-check` and its options, run by `gpu_check`."""
    check = sub.add_parser(
        "gpu-check", help="on a GPU machine: check TensorRT-LLM, build small, run benchmarks S1, S3 and S4 on it"
    )
    check.add_argument(
        "--engine",
        choices=["llmapi", "legacy"],
        default="llmapi",
        help="TensorRT-LLM engine: llmapi (LLM API, PyTorch backend) or legacy (TensorRT engines); default llmapi",
    )
    check.add_argument("--skip-build", action="store_true", help=f"use the {MODEL_ID!r} model already built")
    check.set_defaults(func=gpu_check)
    return check


def run_in_checkout(argv: Sequence[str]) -> int:
    """`argv` run from the checkout's root to its end, its output on this console: minutes of
    benchmarks, so no timeout; the exit code."""
    return subprocess.run(list(argv), cwd=CHECKOUT, check=False).returncode


def bench_command(engine: str, config_path: Path | None, meta: dict[str, str]) -> list[str]:
    """The benchmarks' command line: `python -m bench gpu` on `engine`, with the configuration
    this command read and what the prerequisites found."""
    argv = [sys.executable, "-m", "bench", "gpu", "--engine", engine, "--meta", json.dumps(meta)]
    return argv if config_path is None else [*argv, "--config", str(config_path.resolve())]


def gpu_check(config: SwitchyardConfig, args: argparse.Namespace, run_bench: BenchRunner = run_in_checkout) -> int:
    """Run the check; 2 when a prerequisite, the `small` model and pool or the benchmarks (a
    wheel without its checkout) are missing, 1 when a benchmark fails or misses its target, 0
    when every target is met."""
    if MODEL_ID not in config.models or MODEL_ID not in config.pools:
        print(f"switchyard gpu-check: the benchmarks need a model and pool named {MODEL_ID!r}", file=sys.stderr)
        return 2
    prerequisites = check_prerequisites()
    for p in prerequisites:
        print(f"{p.name:<13} {'ok' if p.ok else 'MISSING'}  {p.detail}")
    missing = [p.name for p in prerequisites if not p.ok]
    if missing:
        print(f"switchyard gpu-check: missing prerequisites: {', '.join(missing)}", file=sys.stderr)
        return 2

    if not (CHECKOUT / "bench" / "__main__.py").is_file():
        print(f"switchyard gpu-check: no benchmarks beside {CHECKOUT / 'switchyard'}: run it from a source checkout",
              file=sys.stderr)  # fmt: skip
        return 2
    from build_engines.build import build_model

    model_dir = config.model_dir(MODEL_ID)
    if not args.skip_build:
        build_model(MODEL_ID, config.models[MODEL_ID], model_dir)
    elif not (model_dir / "tokenizer.json").is_file():
        print(f"switchyard gpu-check: --skip-build, but {model_dir} holds no built model", file=sys.stderr)
        return 2
    meta = {p.name: p.detail for p in prerequisites}
    return run_bench(bench_command(args.engine, args.config, meta))
