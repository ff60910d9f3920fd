"""CallStream on its own: the raw text of call regions in (as `ReplyStream` hands it over), OpenAI calls and
`tool_calls` deltas out, warnings in the reply's list."""

from __future__ import annotations

from typing import Any

from test_reply_calls import TOOLS, caps_for

from chatcaps.reply.call_stream import CallStream


def call_stream(name: str, warnings: list[str]) -> CallStream:
    call_format = caps_for(name).tools.call_format
    assert call_format is not None
    return CallStream(call_format, TOOLS, warnings)


def opening(index: int, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": ""}
    return {"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function", "function": function}]}


def test_parameters_stream_each_once_it_is_complete() -> None:
    """The name once it is complete, each parameter as JSON (typed from the tool's schema) once its closing tag is
    in, the closing brace when the region closes; the call joins `calls` then."""
    warnings: list[str] = []
    calls = call_stream("qwen3_coder", warnings)
    region = ["get_wea", "ther>\n<parameter=city>\nPar", "is\n</parameter>\n<parameter=days>\n3\n</param", "eter>\n"]
    assert [calls.feed(piece) for piece in region] == [
        [],
        [opening(0, "get_weather")],
        [{"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Paris"'}}]}],
        [{"tool_calls": [{"index": 0, "function": {"arguments": ', "days": 3'}}]}],
    ]
    assert calls.calls == []
    assert calls.close("".join(region)) == [{"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}]
    assert calls.calls == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 3}'},
        }
    ]
    assert warnings == []


def test_calls_that_do_not_stream_come_whole_at_close() -> None:
    warnings: list[str] = []
    calls = call_stream("hermes", warnings)
    region = '\n{"name": "get_time", "arguments": {"zone": "CET"}}\n'
    assert calls.feed(region[:20]) == []
    assert calls.feed(region[20:]) == []
    call = {"id": "call_0", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}
    assert calls.close(region) == [{"tool_calls": [{"index": 0, **call}]}]
    assert calls.calls == [call]
    assert warnings == []


def test_warnings_go_to_the_replys_list_in_order() -> None:
    """A second region is the next call (index 1); what is odd about each is appended as it is found."""
    warnings = ["an earlier warning"]
    calls = call_stream("mistral_args", warnings)
    assert calls.feed('lookup[ARGS]{"q": 1}') == [
        opening(0, "lookup"),
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": 1}'}}]},
    ]
    assert calls.close('lookup[ARGS]{"q": 1}') == []
    assert calls.feed("get_time[ARGS]zone") == [
        opening(1, "get_time"),
        {"tool_calls": [{"index": 1, "function": {"arguments": "zone"}}]},
    ]
    assert calls.close("get_time[ARGS]zone") == []
    assert calls.feed("get_") == []
    assert calls.close("get_") == []
    assert calls.kept == "[TOOL_CALLS]get_"
    assert [call["function"] for call in calls.calls] == [
        {"name": "lookup", "arguments": '{"q": 1}'},
        {"name": "get_time", "arguments": "zone"},
    ]
    assert warnings == [
        "an earlier warning",
        "a call to 'lookup', which is not among the tools; kept",
        "the arguments of 'get_time' are no JSON object; kept as text: 'zone'",
        "a tool call that ends before its arguments begin, kept as content: 'get_'",
    ]
