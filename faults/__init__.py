"""The fault harness: faults brought together under mixed load, and the invariants that must
hold through them, checked from what the clients recorded (docs/chaos.md).

    chaos_run.py         `python -m bench chaos`: processes killed (chaos_faults) on one host
                         (chaos_stack, chaos_supervisor)
    partition_run.py     `python -m bench partitions`: links cut (partition_faults) between
                         hosts made of network namespaces (netns_hosts, partition_stack),
                         acknowledged writes counted (partition_probe)
    chaos_load.py        closed-loop team clients, recorded call by call (chaos_history)
    chaos_batches.py     one batch per team, submitted, waited for, collected and rerun
    chaos_invariants.py  the invariants, one `Check` each; recovery per fault kind
                         (partition_recovery); what a stopped stack left behind (chaos_aftermath)
    netns_hosts.py       hosts on one bridge, and the cuts between them; the integration tests'
                         hosts of their own too

Below `bench` (whose command line starts both runs) and above the parts it starts; the tests
use its hosts and invariants directly.
"""
