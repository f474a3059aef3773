"""Typed code behind the Triton Python models: tokenization, incremental detokenization,
stop strings, tensor conversion and the `llm` BLS orchestration."""
