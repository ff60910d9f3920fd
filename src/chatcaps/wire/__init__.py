"""Each API's wire, one module per API: its request body read into a `chatcaps.request.ChatRequest`, and its
shapes; pure functions of plain values, no HTTP and no chatcaps objects but the canonical request and the reply's
events (`chatcaps.events`), both of the base layer.

`openai.py` is OpenAI's chat completions (a body read; a tool call, a delta, an event as a delta, an assistant
message, a choice, a chunk, a completion, an error body, the finish reason). The reply side, the hook, the
integrations and `chatcaps serve` all build OpenAI's JSON here, so each shape is written once. `anthropic.py` is
Anthropic's Messages API (a body read; content blocks, the message, stream events, the error body, the thinking
signature), which `chatcaps serve` answers in beside OpenAI's. `fields.py` holds the checks both readers share. A
wire translates and decides nothing: what a request asks of the template and the grammar is the server's
pipeline's (`chatcaps.serve.pipeline`). The package sits below the reply side: it imports only the base layer.
"""
