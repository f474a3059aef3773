"""`python -m gateway`: serve with settings from the environment (`SWITCHYARD_CONFIG`, ...)."""

from gateway.server import main

main()
