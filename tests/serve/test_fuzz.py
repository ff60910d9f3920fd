"""Bad input never gives a 500: hypothesis draws request bodies from each endpoint's request schema, as the schema
allows them or with one place in them (any field, item or block, at any depth) made junk (another JSON type, a huge
string, deep nesting, a block of an unknown type), taken out, or given an unknown field; and bodies broken as bytes
(invalid UTF-8, a lone surrogate, cut short, a stray byte). Each is posted to `chatcaps serve`
over `Canned` (no model: the server, not the model, is under test); the answer must be a 4xx in the error shape of
the endpoint's API, or a valid answer (`serve_harness.Validated` checks both against the SDKs' own pydantic types).

`ENDPOINTS` maps each path to its request strategy: another API is one more line there.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_harness import INVALID, Canned, serving

from chatcaps.serve.app import create_app

MAX_BODY = 4 * 2**20
EXAMPLES = 200
FIELDS = 4
"""Optional fields per object, at most."""
HUGE = 2**20
"""A huge string: a MiB (the body limit here is 4)."""
DEEP_MARK = "\x00deep:"
"""A string the encoder replaces with that many nested lists (past what `json.dumps` itself would recurse into)."""

# --- values -------------------------------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_huge = st.sampled_from(["x", "\u00e9", "{{", "<think>", "\n"]).map(lambda text: text * (HUGE // len(text)))
_deep = st.integers(2, 3000).map(lambda depth: f"{DEEP_MARK}{depth}")
_unknown_block = st.text(max_size=12).map(lambda kind: {"type": kind, "text": "x"})
JUNK: st.SearchStrategy[Any] = _json | _huge | _deep | _unknown_block
"""A value of any wrong kind: another JSON type, a huge string, deep nesting, a block of an unknown type."""


def objects(schema: Mapping[str, st.SearchStrategy[Any]], *, required: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """An object of `schema`'s fields: the required ones and up to `FIELDS` others, each a value its strategy
    draws."""

    @st.composite
    def drawn(draw: st.DrawFn) -> dict[str, Any]:
        names = draw(st.sets(st.sampled_from(sorted(schema)), max_size=FIELDS)) | set(required)
        return {name: draw(schema[name]) for name in sorted(names)}

    return drawn()


def blocks(schema: Mapping[str, Mapping[str, st.SearchStrategy[Any]]]) -> st.SearchStrategy[Any]:
    """A content block of one of `schema`'s types: its `type` and all its fields."""
    return st.one_of(*(st.fixed_dictionaries({"type": st.just(kind), **fields}) for kind, fields in schema.items()))


_text = st.text(max_size=40)
_word = st.text(string.ascii_letters + "_", min_size=1, max_size=12)
_schema_object = st.just({"type": "object", "properties": {"city": {"type": "string"}}})
_arguments = st.dictionaries(_word, _text | st.integers(), max_size=2)

# --- OpenAI chat completions ----------------------------------------------------------------------------------------

_chat_blocks = blocks(
    {
        "text": {"text": _text},
        "image_url": {"image_url": st.fixed_dictionaries({"url": st.just("https://example.com/x.png")})},
    }
)
_chat_content = _text | st.lists(_chat_blocks, min_size=1, max_size=3)
_chat_call = st.fixed_dictionaries(
    {
        "id": _word,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": _word, "arguments": _arguments.map(json.dumps)}),
    }
)
_chat_messages = st.lists(
    st.one_of(
        st.fixed_dictionaries({"role": st.sampled_from(["system", "developer", "user"]), "content": _chat_content}),
        objects(
            {
                "content": _chat_content,
                "tool_calls": st.lists(_chat_call, min_size=1, max_size=2),
                "reasoning_content": _text,
            },
        ).map(lambda message: {**message, "role": "assistant"}),
    ),
    min_size=1,
    max_size=4,
)
_chat_tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": _word, "description": _text, "parameters": _schema_object}),
    }
)
CHAT = objects(
    {
        "model": _word,
        "messages": _chat_messages,
        "tools": st.lists(_chat_tool, max_size=2),
        "tool_choice": st.just("auto"),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "max_tokens": st.integers(1, 4096),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "seed": st.integers(-(2**63), 2**63),
        "stop": _text | st.lists(_text, max_size=4),
        "n": st.just(1),
        "presence_penalty": st.floats(-2, 2),
        "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high"]),
        "chat_template_kwargs": st.dictionaries(_word, _json, max_size=3),
        "continue_final_message": st.booleans(),
        "reasoning_format": st.sampled_from(["auto", "deepseek", "none"]),
        "grammar": _text,
        "top_k": st.integers(0, 100),
    },
    required=("messages",),
)

# --- Anthropic messages ---------------------------------------------------------------------------------------------

_source = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("base64"), "media_type": st.just("image/png"), "data": st.just("iVBORw0KGgo=")}
    ),
    st.fixed_dictionaries({"type": st.just("url"), "url": st.just("https://example.com/x.png")}),
)
_messages_user = _text | st.lists(
    blocks(
        {
            "text": {"text": _text},
            "image": {"source": _source},
            "tool_result": {"tool_use_id": _word, "content": _text, "is_error": st.booleans()},
        }
    ),
    min_size=1,
    max_size=3,
)
_messages_assistant = _text | st.lists(
    blocks(
        {
            "text": {"text": _text},
            "tool_use": {"id": _word, "name": _word, "input": _arguments},
            "thinking": {"thinking": _text, "signature": _text},
            "redacted_thinking": {"data": _text},
        }
    ),
    min_size=1,
    max_size=3,
)
MESSAGES = objects(
    {
        "model": _word,
        "system": _text | st.lists(blocks({"text": {"text": _text}}), max_size=2),
        "tools": st.lists(
            st.fixed_dictionaries({"name": _word, "description": _text, "input_schema": _schema_object}), max_size=2
        ),
        "tool_choice": st.fixed_dictionaries({"type": st.sampled_from(["auto", "any", "none"])}),
        "thinking": st.one_of(
            st.fixed_dictionaries({"type": st.just("enabled"), "budget_tokens": st.integers(1024, 10**5)}),
            st.fixed_dictionaries({"type": st.sampled_from(["disabled", "adaptive"])}),
        ),
        "stop_sequences": st.lists(_text, max_size=3),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(0, 100),
        "metadata": st.fixed_dictionaries({"user_id": _word}),
        "stream": st.booleans(),
    },
).flatmap(
    lambda body: st.fixed_dictionaries(
        {
            "max_tokens": st.integers(1, 4096),
            "messages": st.lists(st.tuples(_messages_user, _messages_assistant), min_size=1, max_size=2).map(
                lambda turns: [
                    message
                    for user, assistant in turns
                    for message in ({"role": "user", "content": user}, {"role": "assistant", "content": assistant})
                ][:-1]
            ),
        }
    ).map(lambda required: {**body, **required})
)

ENDPOINTS: Mapping[str, st.SearchStrategy[Any]] = {
    "/v1/chat/completions": CHAT,
    "/v1/messages": MESSAGES,
}
"""Each endpoint fuzzed, and a request body its schema allows (`mutated` breaks one part of it)."""

Path = tuple[str | int, ...]
_REMOVED = object()


def _paths(value: Any, at: Path = ()) -> Iterator[Path]:
    """Every place in `value`: itself, and each item of its lists and objects, all the way down."""
    yield at
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*at, key))


def _replaced(value: Any, path: Path, new: Any) -> Any:
    """`value` with the place at `path` set to `new` (`_REMOVED`: taken out), the rest as it was."""
    if not path:
        return new
    key, rest = path[0], path[1:]
    if isinstance(value, dict):
        changed = {**value, key: _replaced(value[key], rest, new)}
        return {name: item for name, item in changed.items() if item is not _REMOVED}
    items = [_replaced(item, rest, new) if index == key else item for index, item in enumerate(value)]
    return [item for item in items if item is not _REMOVED]


@st.composite
def mutated(draw: st.DrawFn, bodies: st.SearchStrategy[Any]) -> Any:
    """A drawn body with one place in it (the whole body, a field, an item, a block, ...) replaced by `JUNK`, taken
    out, or given a field nobody asked for."""
    body = draw(bodies)
    path = draw(st.sampled_from(list(_paths(body))))
    way = draw(st.sampled_from(["junk", "junk", "remove", "extra"]))
    if way == "junk" or not path:
        return _replaced(body, path, draw(JUNK))
    if way == "remove":
        return _replaced(body, path, _REMOVED)
    parent = path[:-1]
    target = body
    for key in parent:
        target = target[key]
    extra = {draw(_word): draw(JUNK)}
    return _replaced(body, parent, {**target, **extra} if isinstance(target, dict) else [*target, draw(JUNK)])


# --- bodies as bytes ------------------------------------------------------------------------------------------------


def encoded(body: Any) -> bytes:
    """`body` as JSON, each `DEEP_MARK` string replaced by that many nested lists."""
    text = json.dumps(body)
    while (start := text.find(json.dumps(DEEP_MARK)[:-1])) >= 0:
        end = text.index('"', start + 1) + 1
        depth = int(json.loads(text[start:end]).removeprefix(DEEP_MARK))
        text = text[:start] + "[" * depth + "]" * depth + text[end:]
    return text.encode()


@st.composite
def broken(draw: st.DrawFn, bodies: st.SearchStrategy[Any]) -> bytes:
    """A drawn body's bytes, broken one way: an invalid UTF-8 sequence or a lone surrogate in a string, cut short,
    or a stray byte."""
    sent = encoded(draw(bodies))
    at = draw(st.integers(0, len(sent)))
    way = draw(st.sampled_from(["utf8", "surrogate", "cut", "byte"]))
    quote = sent.find(b'"', at)
    inside = quote + 1 if quote >= 0 else at
    if way == "utf8":
        return (
            sent[:inside]
            + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]))
            + sent[inside:]
        )
    if way == "surrogate":
        return sent[:inside] + b"\\ud800" + sent[inside:]
    if way == "cut":
        return sent[:at]
    return sent[:at] + draw(st.binary(min_size=1, max_size=1)) + sent[at:]


# --- the test -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serving(create_app(Canned(), max_body_bytes=MAX_BODY)) as url:
        yield url


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as client:
        yield client


def _posted(http: httpx.Client, base: str, path: str, body: bytes) -> None:
    response = http.post(f"{base}{path}", content=body, headers={"content-type": "application/json"})
    response.read()
    found, INVALID[:] = list(INVALID), []
    assert response.status_code < 500, (response.status_code, response.text[:2000], body[:300])
    assert found == [], (found, body[:300])
    if response.status_code >= 400:
        assert response.status_code in (400, 404, 413), response.text[:500]


FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_a_drawn_request_is_a_4xx_in_shape_or_an_answer(base: str, http: httpx.Client, path: str) -> None:
    @FUZZ
    @given(ENDPOINTS[path] | mutated(ENDPOINTS[path]))
    def posted(body: Any) -> None:
        _posted(http, base, path, encoded(body))

    posted()


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_broken_bytes_are_a_400_in_shape(base: str, http: httpx.Client, path: str) -> None:
    @FUZZ
    @given(broken(ENDPOINTS[path]))
    def posted(body: bytes) -> None:
        _posted(http, base, path, body)

    posted()
