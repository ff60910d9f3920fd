"""Errors → HTTP, one table: every exception a request can end in, as a status and OpenAI's error body.

`app.py` registers the table's types as starlette `exception_handlers`, so a route raises and never builds an error
itself; a stream that has begun sends the same body as its last event. Statuses, `type`s and `code`s:

    InputError       400  invalid_request_error  invalid_value      `param`: the message index and field
    TemplateError    400  invalid_request_error  template_error     the template raised on this request; `template`:
                                                                    where (name, line, source_line, span)
    NotJSON          400  invalid_request_error  invalid_json       the body is not a JSON object
    BodyTooLarge     413  invalid_request_error  request_too_large
    HTTPException    its  invalid_request_error  not_found, method_not_allowed (starlette's routing)
    ServerError      502  upstream_error         upstream_error (`upstream_status`: its HTTP status), or
                                                 upstream_unreachable (no answer; `upstream_status` null)
    anything else    500  server_error           internal_error

Under `ANTHROPIC_PREFIX` (`/v1/messages`, `/v1/messages/count_tokens`) the same status is answered in Anthropic's
shape, `{"type": "error", "error": {"type", "message"}}`, its `type` by status (`wire.anthropic.error_type`:
400 invalid_request_error, 401 authentication_error, 404 not_found_error, 413 request_too_large, 503
overloaded_error, else api_error) and the same message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.exceptions import HTTPException

from chatcaps.errors import InputError, ServerError, TemplateError
from chatcaps.wire import anthropic, openai

ANTHROPIC_PREFIX = "/v1/messages"


class NotJSON(Exception):
    """The request body is not JSON, or not a JSON object."""


class BodyTooLarge(Exception):
    """The request body is over the server's limit (`--max-body-bytes`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"the request body is over {limit} bytes")


@dataclass(frozen=True)
class Answer:
    """An error as the server answers it."""

    status: int
    body: dict[str, Any]


def _bad_input(error: InputError, route: str) -> Answer:
    param = openai.input_param(error)
    return Answer(400, openai.error(str(error), kind="invalid_request_error", param=param, code="invalid_value"))


def _template(error: TemplateError, route: str) -> Answer:
    message = f"the chat template failed on this request: {error}"
    body = openai.error(message, kind="invalid_request_error", code="template_error", template=error.location())
    return Answer(400, body)


def _not_json(error: NotJSON, route: str) -> Answer:
    return Answer(400, openai.error(str(error), kind="invalid_request_error", code="invalid_json"))


def _too_large(error: BodyTooLarge, route: str) -> Answer:
    return Answer(413, openai.error(str(error), kind="invalid_request_error", code="request_too_large"))


def _routing(error: HTTPException, route: str) -> Answer:
    code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
    body = openai.error(f"{route}: {error.detail}", kind="invalid_request_error", code=code)
    return Answer(error.status_code, body)


def _upstream(error: ServerError, route: str) -> Answer:
    code = "upstream_unreachable" if error.status is None else "upstream_error"
    body = openai.error(f"upstream {error}", kind="upstream_error", code=code, upstream_status=error.status)
    return Answer(502, body)


def _internal(error: Exception, route: str) -> Answer:
    return Answer(500, openai.error(f"internal error: {error}", kind="server_error", code="internal_error"))


TABLE: Mapping[type[Exception], Callable[[Any, str], Answer]] = {
    InputError: _bad_input,
    TemplateError: _template,
    NotJSON: _not_json,
    BodyTooLarge: _too_large,
    HTTPException: _routing,
    ServerError: _upstream,
    Exception: _internal,
}
"""Each exception type and how it is answered; an exception takes the row of its nearest type (as starlette picks a
handler)."""


def answer(error: Exception, route: str) -> Answer:
    """How `error`, met while serving `route` ("POST /v1/chat/completions"), is answered."""
    rule = next(TABLE[kind] for kind in type(error).__mro__ if kind in TABLE)
    found = rule(error, route)
    if not route.partition(" ")[2].startswith(ANTHROPIC_PREFIX):
        return found
    return Answer(
        found.status, anthropic.error(found.body["error"]["message"], kind=anthropic.error_type(found.status))
    )
