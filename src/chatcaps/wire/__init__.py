"""Wire shapes, one module per API: pure functions of plain values, no HTTP and no chatcaps objects.

`openai.py` is OpenAI's chat-completions shapes (a tool call, a delta, an assistant message, a choice, a chunk, a
completion, an error body, the finish reason). The reply side, the hook, the integrations and `chatcaps serve` all
build OpenAI's JSON here, so each shape is written once. The package sits below the reply side: it imports only the
base layer.
"""
