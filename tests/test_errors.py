"""The exception tree: each error survives pickling with its fields (the isolated minijinja worker sends them back
to the caller that way), and a llama-server failure is a SourceError."""

from __future__ import annotations

import pickle

import pytest

from chatcaps.errors import (
    ChatcapsError,
    InputError,
    RenderLimitError,
    ServerError,
    SourceError,
    TemplateNotFoundError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
)

ERRORS: list[ChatcapsError] = [
    ChatcapsError("plain"),
    SourceError("a.jinja: no such file"),
    TemplateNotFoundError("m: no chat template named 'x'", available=("default", "tool_use")),
    ServerError("HTTP 500: boom", url="http://h:1/props", status=500),
    TemplateSyntaxError("unexpected end", template_name="t.jinja", line=3, column=9),
    TemplateRenderError("roles must alternate", template_name="t.jinja", line=2),
    TemplateSecurityError("access to attribute '__class__' is unsafe", template_name="t.jinja"),
    RenderLimitError("render ran past time_s=1.0", limit="time_s", template_name="t.jinja"),
    InputError("must be a string", index=1, field="content"),
]


@pytest.mark.parametrize("error", ERRORS, ids=[type(error).__name__ for error in ERRORS])
def test_an_error_pickles_with_its_fields(error: ChatcapsError) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error)
    assert (str(copy), copy.args, vars(copy)) == (str(error), error.args, vars(error))


def test_a_server_error_is_a_source_error_that_says_url_status_and_message() -> None:
    error = ServerError("HTTP 500: boom", url="http://h:1/props", status=500)
    assert isinstance(error, SourceError)
    assert (str(error), error.url, error.status, error.message) == (
        "http://h:1/props: HTTP 500: boom",
        "http://h:1/props",
        500,
        "HTTP 500: boom",
    )
