"""`chatcaps serve`'s 400 for a template that raises on the request points at the template's line: the error object
carries `template` (`TemplateError.location()`: the template's name, the 1-based line, that line's text and the span,
`[start, end)` columns in it), on both engines.

Needs the serve error table to add `template=error.location()` to its `template_error` body (wire.error's extra
fields go inside the error object); until that lands, the test fails on the missing `template` field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest
from serve_harness import serving

from chatcaps import ChatTemplate
from chatcaps.engines import EngineName
from chatcaps.serve.app import create_app
from chatcaps.serve.local import LocalBackend

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

TEMPLATE = (
    "{% for m in messages %}\n"
    "{% if m.content == 'explode' %}{{ raise_exception('Refused: explode') }}{% endif %}{{ m.content }}\n"
    "{% endfor %}"
)
"""Renders every conversation but one whose message says 'explode' (which detection's probes never send)."""


@pytest.mark.parametrize("engine", ["jinja2", "minijinja"])
def test_a_template_error_is_a_400_that_points_at_the_line(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, engine: EngineName
) -> None:
    template = ChatTemplate.from_str(TEMPLATE, name="explodes.jinja", engine=engine)
    backend = LocalBackend(model, tokenizer, name="tiny", template=template)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "explode"}]}
    with serving(create_app(backend)) as base:
        reply = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=60)
    call = "raise_exception('Refused: explode')"
    expected: dict[str, Any] = {
        "error": {
            "message": "the chat template failed on this request: Refused: explode",
            "type": "invalid_request_error",
            "param": None,
            "code": "template_error",
            "template": {
                "name": "explodes.jinja",
                "line": 2,
                "source_line": TEMPLATE.split("\n")[1],
                "span": [34, 34 + len(call)],
            },
        }
    }
    assert (reply.status_code, reply.json()) == (400, expected)
