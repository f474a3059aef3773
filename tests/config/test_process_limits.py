"""`raise_open_files_limit`: the soft limit goes up to the hard one, in a child process so the
test's own limits stay as they were."""

from __future__ import annotations

import resource
import subprocess
import sys


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(256, hard)
    code = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({lowered}, {hard if hard != resource.RLIM_INFINITY else -1}))\n"
        "from config.process_limits import raise_open_files_limit\n"
        "print(raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    returned, now = (int(x) for x in out.stdout.split())
    expected = lowered if hard == resource.RLIM_INFINITY else hard
    assert returned == now == expected
