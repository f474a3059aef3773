"""Batches: ingestion into a blob store, a Redis Streams queue of references, the dispatcher
that releases them onto spare room, results and deadlines. Runs without the web app: imports
`fleet_state`, `quota`, `contracts` and `config`, never `gateway`.
"""
