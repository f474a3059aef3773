"""What the Triton model shells import must load inside the Python backend's stub.

The stub embeds its own build of Python, which cannot load this venv's `_ssl` extension
(`undefined symbol: _PyModule_Add`): asyncio survives that (it imports `ssl` in a try), but a
module that needs `ssl` (prometheus_client, httpx) makes every model fail to load. So nothing
under `bls/`, nor what it imports from `contracts/`, may need `ssl`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

IMPORT_ALL_WITHOUT_SSL = """
import importlib, pkgutil, sys
sys.modules["ssl"] = None  # `import ssl` now raises ImportError, as it does in the stub
import bls
for module in pkgutil.iter_modules(bls.__path__):
    importlib.import_module("bls." + module.name)
"""


def test_every_bls_module_imports_where_ssl_cannot_load() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL_WITHOUT_SSL], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
