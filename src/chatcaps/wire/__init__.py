"""Wire shapes, one module per API: pure functions of plain values, no HTTP and no chatcaps objects.

`openai.py` is OpenAI's chat-completions shapes (a tool call, a delta, an assistant message, a choice, a chunk, a
completion, an error body, the finish reason). The reply side, the hook, the integrations and `chatcaps serve` all
build OpenAI's JSON here, so each shape is written once. `anthropic.py` is Anthropic's Messages API (a request read
into canonical messages, content blocks, the message, stream events, the error body, the thinking signature), which
`chatcaps serve` answers in beside OpenAI's. The package sits below the reply side: it imports only the
base layer.
"""
