"""The gateway: the doors a team comes in by. Each turns its protocol into one request type
(`serving.generation.GenerationInput`) and a `serving.principal.Principal`, and hands them to
the serving core (serving/), which knows no protocol.

    routes/, app.py, auth.py, sse.py, openai_serving.py, ...  the HTTP API (native,
                                                              OpenAI-compatible, batches)
    grpc_door/                                                Triton's gRPC protocol
    console/                                                  the web console
    edge_guard.py, edge_keys.py, key_slots.py, http_protocol.py
                                                              what every HTTP request meets
                                                              before any body is read

Imports the parts below (`serving`, `router`, `quota`, `bulk`, `fleet_state`, `contracts`,
`config`); never `engine`, `bls` or `trtllm`.
"""
