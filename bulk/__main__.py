"""`python -m bulk`: the dispatcher, configured from `SWITCHYARD_CONFIG` (what `make up` runs)."""

import asyncio
import logging.config
import os
from pathlib import Path

from bulk.service import serve_dispatcher
from config.logging_setup import logging_config
from config.settings import load_config

logging.config.dictConfig(logging_config("INFO"))
config_path = os.environ.get("SWITCHYARD_CONFIG")
asyncio.run(serve_dispatcher(load_config(Path(config_path) if config_path else None)))
