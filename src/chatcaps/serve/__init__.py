"""`chatcaps serve`: OpenAI's chat-completions and Anthropic's Messages API in front of a llama-server or a
transformers model, on one pipeline (`pipeline.py`): chatcaps writing the prompt (`hook.prerender`) and reading the
reply into events (`ReplyStream`), answered in the shapes of `chatcaps.wire.openai` and `chatcaps.wire.anthropic`
by each route's encoder. See docs/serve.md.

    app.py        the ASGI app (starlette): the OpenAI routes, `/v1/models`, `/health`, the API key
    anthropic.py  `/v1/messages` and `/v1/messages/count_tokens` on the same pipeline and backend
    pipeline.py   one pipeline for every API: a `ChatRequest` prepared (prompt, render, sampling, grammar) and
                  answered, whole or streamed, through the route's encoder
    playground.py the page at `/` and its JSON endpoints: Caps, render, a reply read back (`chatcaps playground`)
    http.py       what every route does around HTTP: the body, the first piece, events, disconnects
    visibility.py `--reasoning show|hide`: whether reasoning reaches clients
    request.py    what a backend is asked (the sampling, the grammar) and how a generation ended (pure)
    errors.py     errors -> HTTP, one table: status and error body per exception type (each API's shape)
    backend.py    what the app needs from a model
    upstream.py   a llama-server: `/completion`, streamed over the async transport
    local.py      a transformers model, generated in-process

Needs the `serve` extra (starlette, sse-starlette, uvicorn); imported only by `chatcaps serve`, never by
`import chatcaps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chatcaps.defaults import MAX_BODY_BYTES, SERVE_HOST, SERVE_PORT

if TYPE_CHECKING:
    from chatcaps.engines import EngineName
    from chatcaps.render import ChatTemplate
    from chatcaps.serve.backend import Backend
    from chatcaps.serve.visibility import Visibility


def run(
    backend: Backend,
    *,
    host: str = SERVE_HOST,
    port: int = SERVE_PORT,
    max_body_bytes: int = MAX_BODY_BYTES,
    api_key: str | None = None,
    reasoning: Visibility = "show",
    playground_dirs: Sequence[str | Path] = (),
    engine: EngineName = "jinja2",
) -> None:
    """Serve `backend` with uvicorn until interrupted, once `warm_up` has run; with `api_key`, only to requests that
    send it. The playground at `/` may read template files under `playground_dirs`."""
    import uvicorn

    from chatcaps.serve.app import create_app

    warm_up(backend)
    app = create_app(
        backend,
        max_body_bytes=max_body_bytes,
        api_key=api_key,
        reasoning=reasoning,
        playground_dirs=playground_dirs,
        engine=engine,
    )
    uvicorn.run(app, host=host, port=port, log_level="info")


def run_playground(
    template: ChatTemplate | None,
    *,
    host: str = SERVE_HOST,
    port: int = SERVE_PORT,
    folders: Sequence[str | Path] = (),
    engine: EngineName = "jinja2",
) -> None:
    """Serve the playground alone (no model) with uvicorn until interrupted, once `template`'s Caps are detected;
    its URL is printed first."""
    import uvicorn

    from chatcaps.serve.app import create_playground_app

    if template is not None:
        template.caps  # noqa: B018 (detected before listening, so that the first request does not pay for it)
    app = create_playground_app(template, folders=folders, engine=engine)
    shown = f"[{host}]" if ":" in host else host
    print(f"chatcaps playground: http://{shown}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def warm_up(backend: Backend) -> None:
    """Pay before listening for what the first request would: the templates' Caps and end of turn, transformers'
    reply parser (a second to import) and each grammar."""
    from chatcaps.reply import ReplyStream

    for tools in (False, True):
        template = backend.template(tools=tools)
        ReplyStream(template.caps)
