"""The GPU engine behind `llm`: TensorRT-LLM's LLM API adapted to the `cpu_engine` contract."""
