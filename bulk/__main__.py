"""`python -m bulk`: the dispatcher, configured from the environment (`SWITCHYARD_CONFIG`,
`SWITCHYARD_GATEWAY_URL`, `SWITCHYARD_ADMIN_KEY`: config/environment.py), as `make up` runs it."""

import asyncio

from bulk.service import serve_dispatcher
from config.environment import SwitchyardEnvironment
from config.logging_setup import configure_logging
from config.settings import load_config

configure_logging()
environment = SwitchyardEnvironment()
asyncio.run(
    serve_dispatcher(
        load_config(environment.config), gateway_url=environment.gateway_url, admin_key=environment.admin_key
    )
)
