"""The `switchyard` command line: one module of subcommands per concern, registered in
`cli.py`. The top layer: nothing imports it.
"""
