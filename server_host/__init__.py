"""A server's host process: `switchyard triton` around one Triton server.

    server_process.py     the process: launch Triton, register, publish load, drain on SIGTERM
    triton_install.py     the backend directory and environment the wheel's tritonserver needs
    triton_server.py      one tritonserver process: its ports, its key, start and stop
    self_registration.py  the server's own heartbeat and state in the registry
    load_publisher.py     its load, read from its metrics and published ten times a second
    leftovers.py          what an earlier copy on the same ports left behind
    process.py, adopted_process.py, ports.py, signals.py
                          child processes, processes taken over by pid, port plans, signals

Imports `config`, `contracts`, `fleet_state` and `threads`; the supervisor and the stack launch it.
"""
