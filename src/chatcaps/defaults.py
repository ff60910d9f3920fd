"""Every default a user may want to know or change, in one place: the server's address and body limit, how long to
wait for llama-server, how much each cache keeps, how much of a stranger's text an error quotes.

`constants.py` is where chatcaps meets its environment (variables, paths); this module holds the numbers those and the
command line start from. Sandbox limits are `chatcaps.Limits` (`engines/base.py`), where each is documented with its
measured cost.
"""

from __future__ import annotations

SERVE_HOST = "127.0.0.1"
"""`chatcaps serve` listens on loopback unless told otherwise (docs/serve.md says when to bind wider)."""
SERVE_PORT = 8000
MAX_BODY_BYTES = 16 * 1024 * 1024
"""The largest request body `chatcaps serve` reads: a long conversation with inline images fits."""

PROPS_TIMEOUT_S = 10.0
"""How long reading a llama-server's `/props` (a template source) may take."""
GENERATION_TIMEOUT_S = 300.0
"""How long one request to llama-server may take, generation included (a long reply on a CPU takes minutes)."""

COMPILED_TEMPLATES = 256
"""Compiled templates kept per process (`compile_template`), by source, engine, name and limits."""
GRAMMARS = 256
"""Reply grammars kept per process (`chatcaps.reply.grammar`), by Caps and end of turn."""
PROMPTS_PER_TEMPLATE = 128
"""Generation prompts a `ChatTemplate` keeps, one per distinct template kwargs and system flag; the least recently
used goes first, so clients sending ever new kwargs cannot grow it."""

PLAYGROUND_TEMPLATES = 32
"""Pasted or read templates the playground keeps compiled with their Caps (detection probes cost 0.1-2 s), the least
recently used going first."""
PLAYGROUND_TEMPLATE_CHARS = 128 * 1024
"""The longest template the playground takes, pasted or read from a file (the zoo's longest is under 17,000
characters)."""
PLAYGROUND_CHUNK_CHARS = 4
"""How many characters of a pasted reply the playground feeds its stream parser at a time, unless asked otherwise."""

QUOTED_CHARS = 200
"""How much of a server's answer or event an error quotes: enough to recognise it, not a whole reply."""
