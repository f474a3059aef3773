"""The engine's metric names and labels: what the engine hosts export and everyone else parses.

The engine hosts export them (bls/metrics.py, from `engine.stats.EngineStats`); the router,
admission, the supervisor and the autoscaler parse them. The names are TensorRT-LLM's Triton
backend metrics, so both engines read the same (parsers: contracts/engine_metrics.py):

    nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type = max | free | used | tokens_per | reused}
    nv_trt_llm_request_metrics{request_type = active | max | scheduled | context | waiting}

and one of Switchyard's own, which TensorRT-LLM has no name for: requests in the engine (admitted
or waiting) per class, so the bulk dispatcher can tell whether people are being served there.

    switchyard_engine_requests{request_class = interactive | bulk}

and the KV blocks admitted requests hold, per class. An engine that preempts bulk for people
(the CPU reference engine) exports it, so the router may count bulk's blocks as room for an
interactive request; TensorRT-LLM never preempts bulk for people and exports none (no room).

    switchyard_engine_kv_blocks{request_class = interactive | bulk}

and the engine host's heartbeat (not in `EngineStats`: it is the host's, not the engine's):
the Unix time of the host's latest pass, which advances every ~0.2 s while the model's Python
stub runs, busy or idle. Triton's /v2/health/ready stays green when a stub has crashed, so a
supervisor reads liveness as "ready and this gauge advancing".

    switchyard_engine_heartbeat
"""

# No imports here: the Triton Python stub imports this module, and its embedded Python cannot
# load every extension module of the venv's (prometheus_client pulls in `ssl`, which fails there).

KV_CACHE_BLOCK_METRIC = "nv_trt_llm_kv_cache_block_metrics"
REQUEST_METRIC = "nv_trt_llm_request_metrics"
CLASS_METRIC = "switchyard_engine_requests"
KV_CLASS_METRIC = "switchyard_engine_kv_blocks"
PREEMPTION_METRIC = "switchyard_engine_preemptions"
HEARTBEAT_METRIC = "switchyard_engine_heartbeat"
