"""Batches: ingestion into a blob store, a Redis Streams queue of references, the dispatcher."""
