"""The supervisor: each pool's server copies kept at their target, on one host.

    supervisor.py         start, probe, relaunch the dead, drain on request, adopt after a restart
    supervisor_thread.py  the supervisor on a loop and thread of its own, for `switchyard up`
    pool_scaling.py       which copies start or drain to reach a pool's target (a plain policy)
    server_copy.py        one copy: its ports, its process, its liveness
    local_probe.py        a copy's health: its fresh load report, else its own endpoints here

Imports `server_host` (the processes it launches), `fleet_state`, `build_engines` and below.
"""
