"""The gateway's client side of routing: which server of a pool gets a request, and what
happens when that server fails.

    routing_policy.py    load + prefix affinity, bounded (a plain policy object)
    block_hashes.py, prefix_index.py
                         the prompt's chained block hashes; which servers recently read them
    server_directory.py  the gateway's view of the fleet (fleet_state's registry + load board)
    server_picker.py     the policy over that view, counting what this gateway sent since
    failover_backend.py  route, stream, fail over and resume mid-reply on another server
    triton_backend.py    the gRPC stream to one server's `llm` model
    llm_response.py      one of its responses read as a GenerationDelta (per token: raw bytes)
    routing_setup.py     all of it put together for the gateway's lifespan

Imports `fleet_state`, `quota` (capacity), `contracts` and `config`.
"""
