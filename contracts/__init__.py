"""What crosses process boundaries: the request contract, the `llm` tensors, the engine's metrics."""
