"""`switchyard.yaml`: the models, pools and gateway settings every component reads.

Validated once at load with pydantic, so a typo in the file is a clear error at start-up
rather than a surprise in a running server.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from config.internal_secrets import (
    TRITON_GRPC_KEY_HEADER,
    TRITON_KEY_FILE,
    TRITON_KEY_HEADER,
    RedisComponent,
    read_secret,
)
from config.network_settings import NetworkSpec
from config.redis_settings import RedisSpec as RedisSpec
from config.tier_names import RequestClass, ServiceTier

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "switchyard.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Architecture(_Strict):
    """Llama shape of a model the project builds itself (`switchyard build`)."""

    hidden_size: Annotated[int, Field(ge=8)]
    intermediate_size: Annotated[int, Field(ge=8)]
    num_hidden_layers: Annotated[int, Field(ge=1)]
    num_attention_heads: Annotated[int, Field(ge=1)]
    num_key_value_heads: Annotated[int, Field(ge=1)]
    vocab_size: Annotated[int, Field(ge=300)]

    @model_validator(mode="after")
    def _heads_divide(self) -> Architecture:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        return self


class ModelSpec(_Strict):
    """A Model record (docs/brief.md), plus what `switchyard build` needs to make one."""

    weights_gb: float = 0.0
    gpus_per_copy: Annotated[int, Field(ge=1)] = 1
    weights_uri: str
    max_context_tokens: Annotated[int, Field(ge=16)]
    architecture: Architecture | None = None  # None: an operator-provided checkpoint
    seed: int = 0
    # Weights' and KV cache's element type on a GPU (`switchyard plan`: 2 bytes, or 1 for fp8).
    dtype: Literal["float16", "bfloat16", "fp8"] = "float16"
    # KV cache bytes one token holds in one copy, for a model whose architecture is not given
    # here; with an architecture `switchyard plan` derives it and this overrides the derivation.
    kv_bytes_per_token: Annotated[int, Field(ge=1)] | None = None


class EngineSpec(_Strict):
    """A pool's engine settings: the fields of `engine.config.EngineConfig`, which the engine
    reads from its model's config.pbtxt (build_engines/repository.py writes them there)."""

    kv_capacity_tokens: Annotated[int, Field(ge=16)] = 80_000
    block_size: Annotated[int, Field(ge=1)] = 16
    max_num_seqs: Annotated[int, Field(ge=1)] = 256
    max_num_batched_tokens: Annotated[int, Field(ge=1)] = 512
    max_step_cost: Annotated[float, Field(gt=0)] = 4096.0
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    # The CPU engine's step cost grows with every sequence in it: cap bulk beside interactive.
    max_bulk_seqs_beside_interactive: Annotated[int, Field(ge=0)] | None = 4
    # ... adding at most this cost (4 decodes and a ~45-token chunk of a bulk prompt).
    max_bulk_cost_beside_interactive: Annotated[float, Field(gt=0)] | None = 64.0
    # A read with more tokens left than this yields the step to shorter prompts first
    # (engine/scheduler.py); None: reads in arrival order.
    long_prefill_tokens: Annotated[int, Field(ge=1)] | None = None
    # A request for at most this many tokens goes before the long streams for its few steps
    # (engine/scheduler.py, docs/latency.md): S1 on a CPU. None: off.
    express_max_tokens: Annotated[int, Field(ge=1)] | None = 16


class Ports(_Strict):
    http: Annotated[int, Field(ge=1, le=65535)]
    grpc: Annotated[int, Field(ge=1, le=65535)]
    metrics: Annotated[int, Field(ge=1, le=65535)]


# A team's name: the alphabet Redis keys and scoped request ids can hold without ambiguity.
TEAM_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
COPY_PORT_STRIDE = 10  # copy k of a pool listens on the pool's ports + 10·k


class PoolSpec(_Strict):
    """A Pool record: the servers that run one model, and how each is sized.

    `ports` are copy 0's; copy k uses each of them + 10·k (`copy_ports`), so the ports
    `make up` opens are predictable."""

    model_id: str
    target_copies: Annotated[int, Field(ge=0)] = 1
    # Tokens of work (prefill, and the decode streams a step shares) one server gets through a
    # second: turns a first-token target (`x-slo-ttft-ms`) into the router's start-cost budget
    # and a predicted TTFT (docs/tiers.md). None: targets only order a server's waiting work.
    prefill_tokens_per_s: Annotated[float, Field(gt=0)] | None = None
    # The autoscaler keeps the pool's copies within these bounds (`autoscaler:` below); None:
    # max_copies is target_copies (the autoscaler never goes above the ports the config checks).
    min_copies: Annotated[int, Field(ge=0)] = 1
    max_copies: Annotated[int, Field(ge=1)] | None = None
    engine: EngineSpec = EngineSpec()
    ports: Ports
    # The shortest time between two streamed responses of one reply (the first token and the
    # last are never held back). Deltas of the steps in between are merged into one response:
    # at 25 responses a second a stream reads as steady, and on a CPU host the per-response
    # cost of the Triton path stops competing with the engine for cores. 0 sends every step.
    stream_interval_ms: Annotated[int, Field(ge=0, le=1000)] = 40
    # The most streamed responses per second one server sends across all its replies: with
    # many replies in flight each one's responses are spaced further apart than
    # stream_interval_ms, so the streaming path's cost stays bounded however busy the engine.
    max_stream_responses_per_s: Annotated[int, Field(ge=1)] = 200
    # `llm` detokenizes in its own process (the same code as the `postprocessing` model)
    # instead of a BLS call per streamed response.
    postprocess_in_process: bool = True
    # On the CPU target the engine runs inside `llm`'s own process (no `cpu_engine` model):
    # its outputs reach the pipeline in memory, not through Triton and a second Python
    # process per streamed response (bls/in_process_engine.py). GPU targets keep their engine
    # model (TensorRT-LLM's backend).
    engine_in_process: bool = True

    @property
    def copies_limit(self) -> int:
        """The most copies the autoscaler may run (max_copies, else target_copies)."""
        return self.max_copies if self.max_copies is not None else max(self.target_copies, 1)

    def copy_ports(self, copy: int) -> Ports:
        """The ports of copy `copy` (0-based) of this pool's servers."""
        offset = COPY_PORT_STRIDE * copy
        return Ports(http=self.ports.http + offset, grpc=self.ports.grpc + offset, metrics=self.ports.metrics + offset)


class FleetSpec(_Strict):
    """How supervisors keep servers alive and how long a drain may take."""

    heartbeat_s: Annotated[float, Field(gt=0)] = 0.5  # probe every server this often
    dead_after_s: Annotated[float, Field(gt=0)] = 2.0  # unseen this long: dead (and restarted)
    startup_timeout_s: Annotated[float, Field(gt=0)] = 180.0  # loading longer: a failed start
    drain_timeout_s: Annotated[float, Field(gt=0)] = 600.0  # in-flight replies get this long
    # A draining server is stopped only after its engine has been empty this long, and no
    # sooner than this after the drain began: gateways must have read the new state by then.
    drain_settle_s: Annotated[float, Field(ge=0)] = 1.0
    max_restart_backoff_s: Annotated[float, Field(ge=0)] = 30.0  # a server that keeps failing to start
    # Each server publishes its load this often (fleet_state/load_board.py); gateways read the board
    # as often (router/server_directory.py): the load routing sees is at most ~2x this old.
    load_publish_s: Annotated[float, Field(gt=0, le=5)] = 0.1


# What a team may use when switchyard.yaml names no tiers for it.
DEFAULT_TIERS: tuple[ServiceTier, ...] = ("default", "flex", "batch")
TIER_OF_CLASS_NAME: dict[RequestClass, ServiceTier] = dict(
    zip(get_args(RequestClass), get_args(ServiceTier), strict=True)
)


class TeamSpec(_Strict):
    """A team: its share of the fleet (weight), the models it may use and optional hard limits.

    API keys are never in this file: `switchyard keys create TEAM` stores only the key's hash
    (in Redis); `api_key_hashes` may list static ones (hex SHA-256 of the key)."""

    weight: Annotated[float, Field(gt=0)] = 1.0
    models: list[str] = ["*"]  # "*" allows every model
    max_inflight_tokens: Annotated[int, Field(ge=1)] | None = None
    tokens_per_day: Annotated[int, Field(ge=1)] | None = None
    default_class: RequestClass = "interactive"
    # Entitlements (docs/tiers.md): the tiers the team may use, each with the team's weight
    # inside it (teams share a tier by these weights). None: `default`, `flex` and `batch` at
    # the team's weight; `priority` is only ever granted by name.
    tiers: dict[ServiceTier, Annotated[float, Field(gt=0)]] | None = None
    api_key_hashes: list[str] = []
    storage_bytes: Annotated[int, Field(ge=1)] | None = None  # None: bulk.team_storage_bytes

    def may_use(self, model_id: str) -> bool:
        return "*" in self.models or model_id in self.models

    @property
    def tier_weights(self) -> dict[ServiceTier, float]:
        """Each granted tier and the team's weight inside it."""
        if self.tiers is not None:
            return dict(self.tiers)
        return {tier: self.weight for tier in DEFAULT_TIERS}

    @model_validator(mode="after")
    def _default_class_granted(self) -> TeamSpec:
        tier = TIER_OF_CLASS_NAME[self.default_class]
        if tier not in self.tier_weights:
            granted = ", ".join(self.tier_weights) or "none"
            raise ValueError(
                f"default_class {self.default_class!r} is the {tier!r} tier, "
                f"which the team's tiers ({granted}) do not grant"
            )
        return self


class QuotaSpec(_Strict):
    """Admission settings shared by every gateway process."""

    lease_ttl_s: Annotated[float, Field(gt=0)] = 30.0  # a dead gateway's leases go after this
    queue_timeout_s: Annotated[float, Field(ge=0)] = 5.0  # fleet full: how long interactive waits
    # No idle room: how long a flex request waits for some (behind the higher tiers) before its 429.
    flex_wait_s: Annotated[float, Field(ge=0)] = 2.0
    capacity_refresh_s: Annotated[float, Field(gt=0)] = 1.0


class BulkSpec(_Strict):
    """Batches: where uploads live, their limits, and how the dispatcher releases them."""

    blob_dir: str = "var/blobs"  # the local blob store's folder (relative to the config's folder)
    max_file_bytes: Annotated[int, Field(ge=1)] = 200 * 1024 * 1024  # OpenAI's per-file limit
    max_requests_per_batch: Annotated[int, Field(ge=1)] = 50_000  # OpenAI's per-batch limit
    max_deadline_s: Annotated[float, Field(gt=0)] = 24 * 3600.0  # also the default deadline
    chunk_lines: Annotated[int, Field(ge=1)] = 256  # input lines per queued reference
    # Share of each pool's KV that bulk leaves for people (interactive requests) at all times.
    interactive_reserve_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.2
    # Share of prompt + max_tokens a bulk request leases (quota/lease_size.py): below 1 the
    # pool's bulk is counted at about the KV it holds (a reply grows a token a step) and the
    # engine preempts bulk on a server that runs over. 1 for a few CPU servers; ~0.9 for GPUs.
    lease_fraction: Annotated[float, Field(gt=0, le=1)] = 1.0
    max_inflight_per_pool: Annotated[int, Field(ge=1)] = 32  # bulk requests one dispatcher runs at once
    # ... while people are served in the pool (and 5 s after). On the CPU engine every bulk
    # request costs the CPUs people's requests need (S5: 1 keeps their first token within
    # 1.2x); a GPU server, where bulk rides along nearly free, takes more.
    max_inflight_beside_interactive: Annotated[int, Field(ge=1)] = 1
    max_attempts: Annotated[int, Field(ge=1)] = 3  # server failures before an entry is failed
    reclaim_idle_s: Annotated[float, Field(gt=0)] = 30.0  # a dead dispatcher's entries go to another after this
    results_flush_s: Annotated[float, Field(gt=0)] = 1.0  # how often results are written out
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 8009  # the dispatcher's /metrics; 0: none
    # Retention (bulk/retention.py; OpenAI's defaults): an uploaded file lives this long unless
    # its upload says `expires_after`; a batch's output and error files this long after they are
    # written; a batch's record (and a native upload's input) this long after the batch ends.
    file_ttl_s: Annotated[int, Field(ge=1)] = 30 * 86400
    output_file_ttl_s: Annotated[int, Field(ge=1)] = 30 * 86400
    batch_ttl_s: Annotated[int, Field(ge=1)] = 30 * 86400
    retention_sweep_s: Annotated[float, Field(gt=0)] = 60.0  # how often a dispatcher deletes what expired
    # What one team may keep stored (uploads, native batch inputs, output files), unless its
    # `teams.<team>.storage_bytes` says otherwise.
    team_storage_bytes: Annotated[int, Field(ge=1)] = 100 * 1024**3


class GpuSpec(_Strict):
    """The GPUs a pool's servers run on, for `switchyard plan`'s sizing (one kind per fleet).

    Gigabytes are decimal (10^9 bytes), as in the brief's arithmetic."""

    memory_gb: Annotated[float, Field(gt=0)] = 80.0
    # What the engine keeps out of the KV cache beyond the weights: activations, CUDA graphs,
    # the runtime's own buffers (TensorRT-LLM measures this at load; 2 GB is a round guess).
    runtime_reserve_gb: Annotated[float, Field(ge=0)] = 2.0
    # Share of what is then free that becomes KV cache: TensorRT-LLM's free_gpu_memory_fraction.
    kv_memory_fraction: Annotated[float, Field(gt=0, le=1)] = 0.9


class AutoscalerSpec(_Strict):
    """The fleet autoscaler (autoscaler/, docs/autoscaler.md): how far ahead it looks and how it holds
    back. Off by default: `make up` then runs each pool's `target_copies`."""

    enabled: bool = False
    interval_s: Annotated[float, Field(gt=0)] = 15.0  # one decision per pool this often
    # How long a new server takes to be ready: the forecast looks at least this far ahead. The
    # brief's GPUs take about eight minutes; the local supervisor waits this long before
    # starting a copy it was told to add, to stand in for it (0: start at once).
    startup_s: Annotated[float, Field(ge=0)] = 480.0
    start_delay_s: Annotated[float, Field(ge=0)] = 0.0
    # Keep every server's KV use at most this share of its capacity at the forecast peak.
    target_kv_fraction: Annotated[float, Field(gt=0, le=1)] = 0.8
    headroom_servers: Annotated[int, Field(ge=0)] = 1  # spare copies for a server that fails
    # Scale in only after the need has stayed below the fleet this long, one copy at a time.
    scale_in_after_s: Annotated[float, Field(ge=0)] = 600.0
    ttft_target_s: Annotated[float, Field(gt=0)] = 1.0  # p99 above this adds a copy at once
    # A live pool's per-server capacity is derived from its engine settings and these averages
    # (autoscaler/live.py); the brief's: 2,000 + 300 tokens, ~10 s a reply.
    avg_request_tokens: Annotated[int, Field(ge=1)] = 2_300
    avg_request_s: Annotated[float, Field(gt=0)] = 10.0
    bulk_tokens_per_entry: Annotated[int, Field(ge=1)] = 2_300  # a pending batch entry's estimated work
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 8010  # the autoscaler's /metrics; 0: none


class ServingSpec(_Strict):
    """Which engine serves behind `llm` on every server of the fleet (docs/gpu.md).

    Only the engine model changes: `llm`, `preprocessing` and `postprocessing`, the gateway,
    router, quota and bulk code are the same on both targets."""

    # cpu: the reference engine (`cpu_engine`); trtllm: TensorRT-LLM inside Triton on GPUs.
    target: Literal["cpu", "trtllm"] = "cpu"
    # On trtllm: llmapi (TensorRT-LLM's LLM API, PyTorch backend: the GPU path) or legacy
    # (prebuilt TensorRT engines and the C++ `tensorrtllm` backend, which upstream removed in
    # July 2026: built only while the pinned release has them, build_engines/trtllm_pin.py).
    trtllm_engine: Literal["llmapi", "legacy"] = "llmapi"


class GatewaySpec(_Strict):
    # Where the gateway's HTTP port and gRPC door listen (`SWITCHYARD_HOST` overrides it):
    # 0.0.0.0 behind a load balancer or Service. Its links' keepalives: `network:`.
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    # How long a finished request's result stays for repeats of its caller-made request_id (a
    # request without one keeps nothing after its end).
    idempotency_ttl_s: Annotated[int, Field(ge=60)] = 24 * 3600
    # ... and a bulk request's: its dispatcher writes the result itself and retries under a new id.
    bulk_result_ttl_s: Annotated[int, Field(ge=60)] = 600
    # The edge (gateway/edge_guard.py, docs/security.md): a JSON body over this is a 413 unread;
    # an upload (multipart /v1/files, /v1/batches) may be bulk.max_file_bytes plus 1 MiB of form.
    max_body_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    # Requests one API key may have in flight, streams among them (per gateway: each of its
    # worker processes allows its share). Beyond: 429 with Retry-After. The admin key is exempt.
    max_requests_per_key: Annotated[int, Field(ge=1)] = 1024
    max_streams_per_key: Annotated[int, Field(ge=1)] = 512
    # Open streams one gateway worker process holds (quota/stream_shares.py): a team below its
    # weighted share of them is always let in; beyond it, a team borrows idle ones only while
    # the worker is `stream_reserve_fraction` short of the maximum (429 past that); past the
    # maximum, 503. Each stream costs a socket and memory (docs/capacity.md): the brief's
    # 10,000 streams need 16 workers at 625 each, or 2 at 5,000.
    max_streams_per_worker: Annotated[int, Field(ge=1)] = 6000
    stream_reserve_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.1
    # A body must start within body_timeout_s, never pause longer, and average at least
    # min_body_bytes_per_s after that first allowance; else 408.
    body_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    min_body_bytes_per_s: Annotated[int, Field(ge=1)] = 64 * 1024
    # How long the edge trusts a key it resolved (a revoked key stops working within this).
    key_cache_s: Annotated[float, Field(ge=0)] = 2.0
    # Threads per gateway process that tokenize long prompts, off the event loop.
    tokenizer_threads: Annotated[int, Field(ge=1)] = 2
    # Triton's gRPC protocol with team keys (gateway/grpc_door/, docs/grpc.md), served by every
    # gateway worker on this port beside the HTTP one (switchyard.yaml: 8001). None: no door, so a
    # configuration made for a test serves HTTP only unless it names a port.
    grpc_port: Annotated[int, Field(ge=1, le=65535)] | None = None


class SwitchyardConfig(_Strict):
    """The whole file. `root` is the folder relative paths resolve against."""

    root: Path = Path(".")
    var_dir: str = "var"
    # Redis passwords and Triton's inference key (config/internal_secrets.py), one file each.
    secrets_dir: str = "var/secrets"
    models: dict[str, ModelSpec]
    pools: dict[str, PoolSpec]
    gateway: GatewaySpec = GatewaySpec()
    redis: RedisSpec = RedisSpec()
    teams: dict[str, TeamSpec] = {}
    quota: QuotaSpec = QuotaSpec()
    bulk: BulkSpec = BulkSpec()
    fleet: FleetSpec = FleetSpec()
    gpu: GpuSpec = GpuSpec()
    serving: ServingSpec = ServingSpec()
    autoscaler: AutoscalerSpec = AutoscalerSpec()
    # Where servers listen and what the registry records for them; gRPC keepalives.
    network: NetworkSpec = NetworkSpec()

    @model_validator(mode="after")
    def _team_names_safe(self) -> SwitchyardConfig:
        """Team names go into Redis keys (`sy:req:{team}:{id}`) and request ids (`team/id`): from
        an alphabet without the separators ':' and '/', so no name can reach another key."""
        for team_id in self.teams:
            if not TEAM_NAME.fullmatch(team_id):
                raise ValueError(
                    f"team name {team_id!r}: use 1-64 characters from A-Z, a-z, 0-9 and . _ - (no ':' or '/')"
                )
        return self

    @model_validator(mode="after")
    def _pools_name_models(self) -> SwitchyardConfig:
        for pool_id, pool in self.pools.items():
            if pool.model_id not in self.models:
                raise ValueError(f"pool {pool_id!r} names unknown model {pool.model_id!r}")
        return self

    @model_validator(mode="after")
    def _copy_bounds(self) -> SwitchyardConfig:
        for pool_id, pool in self.pools.items():
            if pool.min_copies > pool.copies_limit:
                raise ValueError(
                    f"pool {pool_id!r}: min_copies {pool.min_copies} is above max_copies {pool.copies_limit}"
                )
        return self

    @model_validator(mode="after")
    def _server_ports_distinct(self) -> SwitchyardConfig:
        """Every copy of every pool on its own ports, none of them the gateway's or Redis'."""
        owners: dict[int, str] = {self.gateway.port: "the gateway", self.redis.port: "redis"}
        for pool_id, pool in self.pools.items():
            for copy in range(max(pool.target_copies, pool.copies_limit)):
                offset = COPY_PORT_STRIDE * copy
                bases = (("http", pool.ports.http), ("grpc", pool.ports.grpc), ("metrics", pool.ports.metrics))
                for kind, base in bases:
                    port = base + offset
                    if port > 65535:
                        raise ValueError(f"pool {pool_id!r} copy {copy}: {kind} port {port} is above 65535")
                    owner = f"pool {pool_id!r} copy {copy} ({kind})"
                    if port in owners:
                        raise ValueError(
                            f"{owner} and {owners[port]} both want port {port}: copy k uses the pool's ports "
                            f"+ {COPY_PORT_STRIDE}·k, so pools' ports must be further apart"
                        )
                    owners[port] = owner
        return self

    @property
    def var_path(self) -> Path:
        return self.root / self.var_dir

    @property
    def secrets_path(self) -> Path:
        return self.root / self.secrets_dir

    def redis_url(self, component: RedisComponent) -> str:
        """The URL `component`'s Redis clients connect with (its own ACL user) when there are no
        sentinels; make clients with `config.redis_client`, which also handles sentinel mode.
        It holds a password: log `redis.address` instead."""
        return self.redis.url_for(component, root=self.root, secrets_path=self.secrets_path)

    def triton_grpc_headers(self) -> dict[str, str]:
        """What the gateway sends with every gRPC inference call: Triton refuses one without it."""
        return {TRITON_GRPC_KEY_HEADER: self.triton_inference_key()}

    def triton_http_headers(self) -> dict[str, str]:
        """The same key for Triton's HTTP inference endpoints."""
        return {TRITON_KEY_HEADER: self.triton_inference_key()}

    def triton_inference_key(self) -> str:
        return read_secret(self.secrets_path / TRITON_KEY_FILE)

    def model_dir(self, model_id: str) -> Path:
        return self.root / self.models[model_id].weights_uri

    def pool_repository(self, pool_id: str) -> Path:
        """Where `switchyard build` writes the filled Triton model repository of a pool."""
        return self.var_path / "model_repository" / pool_id

    @property
    def blob_path(self) -> Path:
        return self.root / self.bulk.blob_dir

    def pools_for_model(self, model_id: str) -> list[str]:
        return [pid for pid, pool in self.pools.items() if pool.model_id == model_id]


def dump_config(config: SwitchyardConfig, path: Path) -> Path:
    """Write `config` as YAML that `load_config` reads back identically from any folder
    (relative paths are made absolute against the original root)."""
    raw = config.model_dump(mode="json", exclude={"root"})
    raw["var_dir"] = str(config.var_path.resolve())
    raw["bulk"]["blob_dir"] = str(config.blob_path.resolve())
    raw["secrets_dir"] = str(config.secrets_path.resolve())
    raw["redis"] = config.redis.with_absolute_paths(config.root).model_dump(mode="json")
    for model_id, model in raw["models"].items():
        model["weights_uri"] = str(config.model_dir(model_id).resolve())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def load_config(path: Path | None = None) -> SwitchyardConfig:
    """Read and validate `switchyard.yaml` (the repository's own by default)."""
    path = (path or DEFAULT_CONFIG_PATH).resolve()
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return SwitchyardConfig(root=path.parent, **raw)
