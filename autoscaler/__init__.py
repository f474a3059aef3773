"""The autoscaler: each pool's target copies, set ahead of demand (servers take minutes to start).

    policies.py        Autoscaler (forecast, bulk deadlines, hysteresis), ReactiveAutoscaler,
                       StaticFleet: plain policy objects, no I/O (the simulator drives them too)
    signals.py         what a policy reads and decides (PoolSignals, ScalingDecision, ...)
    load_profile.py, rate_history.py, bulk_need.py, load_floor.py, pacing.py
                       the forecast and the bulk work a pool needs before its deadlines
    scaling_loop.py    AutoscalerService: one pass — read signals, decide, write targets, act
    live.py            the live loop put together: signals from Redis and the servers' metrics
    live_signals.py, bulk_backlog.py, ttft_window.py, usage_rates.py
                       those signals, read live
    actuators.py, kubernetes_actuator.py
                       who turns targets into servers: the local supervisor or Kubernetes
                       (the `kubernetes` extra)
    metrics.py, autoscaler_thread.py
                       its Prometheus metrics; the loop on a thread for `switchyard up`

Imports `fleet_state`, `bulk`, `quota` and below; never the supervisor (an actuator is passed in).
"""
