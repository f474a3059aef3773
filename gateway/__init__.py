"""The gateway: every door a team comes in by, and what runs behind the door.

    routes/, app.py, auth.py, sse.py, ...  the HTTP API (native, OpenAI-compatible, batches)
    grpc_door/                             Triton's gRPC protocol for power users
    console/                               the web console
    generation.py, request_lifecycle.py, metering.py, idempotency.py, ...
                                           what runs a request once it is admitted

Over ~5k lines on purpose: the three doors run in one process per worker and share one
admission, one key cache, one backend and one request registry; splitting them into packages
would only move that shared state behind another import. Imports the parts below (`router`,
`quota`, `bulk`, `fleet_state`, `contracts`, `config`); never `engine`, `bls` or `trtllm`.
"""
