"""`python -m bulk`: the dispatcher, configured from `SWITCHYARD_CONFIG` (what `make up` runs)."""

import asyncio
import os
from pathlib import Path

from bulk.service import serve_dispatcher
from config.logging_setup import configure_logging
from config.settings import load_config

configure_logging()
config_path = os.environ.get("SWITCHYARD_CONFIG")
asyncio.run(serve_dispatcher(load_config(Path(config_path) if config_path else None)))
