"""One host's whole platform, as `switchyard up`, the benches and the integration tests start it.

    local_stack.py     Redis, the supervisor (and its servers), the autoscaler, the gateway
                       and the bulk dispatcher, started in order and stopped together
    redis_server.py    a local redis-server with per-component users (ACLs) and durability
    redis_sentinel.py  a primary, replicas and sentinels, and a node's rejoin as a replica
    secret_files.py    the internal secrets under var/ (Redis passwords, Triton's key)
    measured_stack.py  the config of a stack a benchmark or a fault run starts for itself

Imports the supervisor, the autoscaler and below; the gateway and the dispatcher it starts as
processes of their own, by command line.
"""
