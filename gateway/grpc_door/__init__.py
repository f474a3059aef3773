"""The gRPC front door: Triton's own protocol (KServe v2 `inference.GRPCInferenceService`) for
power users with `tritonclient`, behind the same keys, shares, routing, failover and metering
as the HTTP API (docs/grpc.md).

    tritonclient ── ModelInfer / ModelStreamInfer ──▶ service.py (auth: the team's key)
        tensors.py   the request's tensors ──▶ a GenerateBody, checked as HTTP's is
        serving/generation.py  GenerationService.start(): admission, idempotency, failover
        tensors.py   the InflightRequest's deltas ──▶ `llm`-shaped responses
        status.py    ApiError / backend failures ──▶ gRPC status codes (one table)
    models.py        ServerMetadata, ModelMetadata, ModelConfig of the pools' models
    server.py        one grpc.aio server per gateway worker (SO_REUSEPORT), from the lifespan
"""
