"""Python stack traces from a Triton Python stub that crashes, in the server's own log.

Every model's `initialize` calls `enable_fault_log()`. A stub inherits tritonserver's stderr,
which `server_host/triton_server.py` sends to `var/logs/triton-<name>.log`, so a SIGSEGV,
SIGFPE, SIGABRT or SIGBUS in a stub leaves, next to the server's own lines:

    Fatal Python error: Segmentation fault

    Thread 0x00007f... (most recent call first):
      File ".../bls/engine_host.py", line ... in pump
      ...

Without it a stub's crash shows only in the kernel's ring buffer (`dmesg`: "segfault at ...
in triton_python_backend_stub"): Triton itself logs nothing when a stub dies while it stops.
That is how the `cpu_engine` stub's crash on every stop was found (docs/tensors.md, notes):
a `MetricFamily` still alive when the stub tore down its shared memory.
"""

from __future__ import annotations

import faulthandler
import sys
from typing import TextIO

# What the regression tests look for in a server's log (faulthandler's own words).
FATAL_SIGNAL_LINE = "Fatal Python error: "


def enable_fault_log(stream: TextIO | None = None) -> None:
    """Dump every thread's Python stack to `stream` (the stub's stderr by default) on a fatal
    signal. Idempotent: a second call only re-points the handler."""
    faulthandler.enable(file=stream if stream is not None else sys.stderr, all_threads=True)
