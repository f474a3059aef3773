"""The fleet's shared state in Redis, read and written through one place.

    registry.py       each server: pool, state, endpoints, pid, heartbeat (`sy:server:*`)
    server_state.py   STARTING ─▶ READY ─▶ DRAINING ─▶ DEAD
    epochs.py         each server id's newest registration (`sy:epoch:{id}`): fencing
    load_board.py     each server's last published load (`sy:load:{pool}`)
    pool_targets.py   each pool's target copies and the reasons (`sy:pool:{pool}:target`)
    server_health.py  a server's liveness: probe, engine heartbeat, verdict

Written by the server's own host process (server_host/), the supervisor and the autoscaler;
read by the router, the bulk dispatcher, the console and the CLI. Imports only `config` and
`contracts`, so every part above may use it.
"""
