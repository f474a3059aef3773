"""The TensorRT-LLM release the GPU path is written against: the one place its version lives.

Everything else says "the pinned release" and points here: the Dockerfile's NGC tag is the one
whose TensorRT-LLM is `TRTLLM_VERSION`, `switchyard gpu-check` prints it beside the installed
version, and the LLM API arguments a model.yaml may hold are the release's documented ones
(`build_engines/llm_api_schema.py`). What the code must know about the release besides its
version is a fact on `PINNED_RELEASE`, next to the version it belongs to:

    has_tensorrt_engine_backend   TensorRT engines built ahead of time (`trtllm-build`) and the
                                  C++ `tensorrtllm` Triton backend: the legacy GPU path.
                                  Upstream removed them, with the legacy runtime, in July 2026
                                  (NVIDIA/TensorRT-LLM#15763, #15907, #15918;
                                  triton-inference-server/tensorrtllm_backend#858), keeping
                                  only the LLM API (PyTorch) backend, which loads HF checkpoints
                                  directly. When the pin moves to a release without them this
                                  turns False and `--engine legacy` refuses to build.
    supports_priority             `generate_async(priority=...)` with the scheduler's
                                  `waiting_queue_policy: priority` (1.3 on); without it the
                                  engine loop holds bulk back itself (trtllm/engine_loop.py).

Moving the pin: change `TRTLLM_VERSION`, check both facts and the argument record against the
new release's `llm_args.py`, and run `switchyard gpu-check` in its NGC image.
"""

from __future__ import annotations

from dataclasses import dataclass

from build_engines.llm_api_schema import keys_of


@dataclass(frozen=True, slots=True)
class TrtllmRelease:
    """A TensorRT-LLM release and what Switchyard relies on it having."""

    version: str
    has_tensorrt_engine_backend: bool
    supports_priority: bool


PINNED_RELEASE = TrtllmRelease(version="1.2.0", has_tensorrt_engine_backend=True, supports_priority=False)
TRTLLM_VERSION = PINNED_RELEASE.version

# The documented names `switchyard gpu-check` looks for in the installed wheel's field lists.
LLM_API_KEYS = keys_of(None)
KV_CACHE_CONFIG_KEYS = keys_of("kv_cache_config")
SCHEDULER_CONFIG_KEYS = keys_of("scheduler_config")


class LegacyEngineUnavailable(ValueError):
    """The legacy TensorRT-engine path was asked for, and the pinned release no longer has it."""


def require_tensorrt_engine_backend(release: TrtllmRelease = PINNED_RELEASE) -> None:
    """Raise unless `release` still ships TensorRT engines and the C++ Triton backend."""
    if not release.has_tensorrt_engine_backend:
        raise LegacyEngineUnavailable(
            f"TensorRT-LLM {release.version} (build_engines/trtllm_pin.py) has no TensorRT engine "
            "backend: upstream removed `trtllm-build` and the C++ Triton backend in July 2026. Serve "
            "with `trtllm_engine: llmapi` (the LLM API loads the HF checkpoint directly)."
        )
