"""OpenAI's wire shapes: the bodies of `/v1/completions` and `/v1/chat/completions` (schemas),
`response_format` (response_format), tools and tool calls (tool_calls, tool_prompt), the chat
template that renders messages (chat_template), and log-probabilities as OpenAI returns them
(logprobs). The rest of contracts/ is the platform's own: `/v1/generate`, the `llm` tensors,
errors, grammars and metrics."""
