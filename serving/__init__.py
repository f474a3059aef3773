"""The serving core: what runs a request once a door (gateway/: HTTP, OpenAI, batches, the
console, the gRPC door) has checked who asks and what. It knows no protocol: no FastAPI, no
gRPC (an import-linter contract holds it to that).

    generation.py         GenerationService: checks, claims the id, admits, starts or attaches
    requests_registry.py  the generations in flight in this process, and their readers
    readers.py            who reads a generation, and what a reader's leaving does
    request_lifecycle.py  an admitted request's lease, claim, mirror, final record and usage
    idempotency.py        a request_id names one generation, across processes (Redis)
    delta_records.py      a reply's deltas as Redis keeps them (tokens, log-probabilities)
    request_bus.py        cancels and followers across gateway processes
    metering.py           usage per request, as it reached the caller
    principal.py          who a request is for, and the model-access rule
    metrics.py, metrics_registry.py   the gateway's Prometheus metrics, across workers
    redis_retry.py        end-of-request writes retried while Redis is unreachable
"""
