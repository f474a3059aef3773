"""A process's own limits, raised where the platform needs them.

A gateway worker holds thousands of open streams, each a socket (its client's) plus its share
of the upstream gRPC and Redis connections; the default soft limit of open files (often 1,024)
would refuse connections long before memory or CPU runs out. Each long-lived process of ours
raises its soft limit to the hard limit at start; children inherit it (`make up`'s Redis,
Triton servers, gateway workers). The hard limit is the operator's: raise it with `ulimit -Hn`
or the container runtime's `nofile` (docs/capacity.md has the arithmetic).
"""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger(__name__)


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError) as exc:  # a sandbox may refuse; keep what we have
        logger.warning("could not raise the open-files limit from %d to %d: %s", soft, hard, exc)
        return soft
    return hard
