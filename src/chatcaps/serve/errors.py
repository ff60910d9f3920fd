"""Errors → HTTP, one table: every exception a request can end in, as a status and a `Problem`, written in the error
shape of the API the route belongs to.

`app.py` registers the table's types as starlette `exception_handlers`, so a route raises and never builds an error
itself; a stream that has begun sends the same body as its last event (`answer` is the one call for both, whatever
the API: the seam a stream of any API ends through). Statuses, and OpenAI's `type`s and `code`s:

    InputError       400  invalid_request_error  invalid_value      `param`: the message index and field
    TemplateError    400  invalid_request_error  template_error     the template raised on this request; `template`:
                                                                    where (name, line, source_line, span)
    NotJSON          400  invalid_request_error  invalid_json       the body is not a JSON object
    Unauthorized     401  invalid_request_error  invalid_api_key    no key, or not the server's (`--api-key`)
    BodyTooLarge     413  invalid_request_error  request_too_large
    HTTPException    its  invalid_request_error  not_found, method_not_allowed (starlette's routing)
    ServerError      502  upstream_error         upstream_error (`upstream_status`: its HTTP status), or
                                                 upstream_unreachable (no answer; `upstream_status` null);
                     400  invalid_request_error  context_length_exceeded: the upstream's context cannot hold the
                                                 prompt (llama-server's `exceed_context_size_error`)
    UpstreamNotReady 503  upstream_error         upstream_not_ready (never reached yet, or still loading its model)
    anything else    500  server_error           internal_error (logged with its traceback)

The shape is the route's (`SHAPES`, by path prefix): OpenAI's `{"error": {"message", "type", "param", "code"}}`
everywhere but under `/v1/messages`, which answers Anthropic's `{"type": "error", "error": {"type", "message"}}`, its
`type` from the status (`chatcaps.wire.anthropic.error_type`: 400 invalid_request_error, 401 authentication_error,
404 not_found_error, 413 request_too_large, 503 overloaded_error, any other 4xx invalid_request_error, else api_error)
and the same message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.exceptions import HTTPException

from chatcaps.errors import InputError, ServerError, TemplateError
from chatcaps.wire import anthropic, openai

ANTHROPIC_PREFIX = "/v1/messages"
CONTEXT_EXCEEDED = "exceed_context_size_error"
"""llama-server's error type for a prompt its context cannot hold (tools/server: `ERROR_TYPE_EXCEED_CONTEXT_SIZE`)."""

_LOG = logging.getLogger("chatcaps.serve")


class NotJSON(Exception):
    """The request body is not JSON, or not a JSON object."""


class BodyTooLarge(Exception):
    """The request body is over the server's limit (`--max-body-bytes`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over {limit} bytes")


class Unauthorized(Exception):
    """The server has a key (`--api-key`) and the request did not send it (`x-api-key` or `Authorization: Bearer`)."""


class UpstreamNotReady(Exception):
    """The upstream has not been read yet (down, or loading its model): try again. `reason`: what reading it met."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"upstream {url} is not ready yet: {reason}")


@dataclass(frozen=True)
class Problem:
    """An error as the table reads it, before any API's shape: OpenAI's `type`, `code` and `param`, and fields of
    its own (`upstream_status`, `template`) that OpenAI's shape carries beside them."""

    status: int
    kind: openai.ErrorType
    message: str
    code: str | None = None
    param: str | None = None
    more: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    """Response headers the status calls for (`WWW-Authenticate` with a 401, `Retry-After` with a 503)."""


@dataclass(frozen=True)
class Answer:
    """An error as the server answers it."""

    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


def _bad_input(error: InputError, route: str) -> Problem:
    return Problem(400, "invalid_request_error", str(error), "invalid_value", openai.input_param(error))


def _template(error: TemplateError, route: str) -> Problem:
    message = f"the chat template failed on this request: {error}"
    return Problem(400, "invalid_request_error", message, "template_error", more={"template": error.location()})


def _not_json(error: NotJSON, route: str) -> Problem:
    return Problem(400, "invalid_request_error", str(error), "invalid_json")


def _unauthorized(error: Unauthorized, route: str) -> Problem:
    headers = {"WWW-Authenticate": "Bearer"}
    return Problem(401, "invalid_request_error", str(error), "invalid_api_key", headers=headers)


def _too_large(error: BodyTooLarge, route: str) -> Problem:
    return Problem(413, "invalid_request_error", str(error), "request_too_large")


def _routing(error: HTTPException, route: str) -> Problem:
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
    return Problem(error.status_code, "invalid_request_error", f"{route}: {error.detail}", code)


def _upstream(error: ServerError, route: str) -> Problem:
    more = {"upstream_status": error.status}
    if error.kind == CONTEXT_EXCEEDED:  # the request's own size: the client's to change
        return Problem(400, "invalid_request_error", f"upstream {error}", "context_length_exceeded", more=more)
    code = "upstream_unreachable" if error.status is None else "upstream_error"
    return Problem(502, "upstream_error", f"upstream {error}", code, more=more)


def _not_ready(error: UpstreamNotReady, route: str) -> Problem:
    return Problem(503, "upstream_error", str(error), "upstream_not_ready", headers={"Retry-After": "1"})


def _internal(error: Exception, route: str) -> Problem:
    return Problem(500, "server_error", f"internal error: {error}", "internal_error")


TABLE: Mapping[type[Exception], Callable[[Any, str], Problem]] = {
    InputError: _bad_input,
    TemplateError: _template,
    NotJSON: _not_json,
    Unauthorized: _unauthorized,
    BodyTooLarge: _too_large,
    HTTPException: _routing,
    ServerError: _upstream,
    UpstreamNotReady: _not_ready,
    Exception: _internal,
}
"""Each exception type and how it is answered; an exception takes the row of its nearest type (as starlette picks a
handler)."""


def openai_error(problem: Problem) -> dict[str, Any]:
    """OpenAI's error object."""
    return openai.error(problem.message, kind=problem.kind, param=problem.param, code=problem.code, **problem.more)


def anthropic_error(problem: Problem) -> dict[str, Any]:
    """Anthropic's error object: `{"type": "error", "error": {"type", "message"}}`."""
    return anthropic.error(problem.message, kind=anthropic.error_type(problem.status))


Shape = Callable[[Problem], dict[str, Any]]
SHAPES: tuple[tuple[str, Shape], ...] = ((ANTHROPIC_PREFIX, anthropic_error),)
"""The path prefixes whose API writes errors its own way; every other route answers OpenAI's shape."""


def shape(route: str) -> Shape:
    """The error shape of `route` ("POST /v1/messages/count_tokens": its path decides)."""
    path = route.partition(" ")[2] or route
    return next(
        (written for prefix, written in SHAPES if path == prefix or path.startswith(prefix + "/")), openai_error
    )


def answer(error: Exception, route: str) -> Answer:
    """How `error`, met while serving `route` ("POST /v1/chat/completions"), is answered, in the route's API's shape.
    A 500 (chatcaps' own failure, not the request's or the upstream's) is logged with its traceback."""
    problem = next(TABLE[kind] for kind in type(error).__mro__ if kind in TABLE)(error, route)
    if problem.status == 500:
        _LOG.error("chatcaps serve: %s failed", route, exc_info=error)
    return Answer(problem.status, shape(route)(problem), problem.headers)
