"""The CPU reference engine: inflight batching over a paged KV cache, with chunked prefill and
prefix caching. Same request semantics as TensorRT-LLM's inflight batcher."""
