"""Builds the models the project serves: per model size, the CPU build (a small Llama-shaped
checkpoint and tokenizer made here, nothing downloaded) and the TensorRT-LLM build; and fills
the Triton model repository templates per pool. Imports `engine` and `config`.
"""
