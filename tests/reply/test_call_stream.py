"""CallStream on its own: the raw text of call regions in (as `ReplyStream` hands it over), calls and their events
out (no id where the text writes none), warnings in the reply's list."""

from __future__ import annotations

from test_reply_calls import TOOLS, caps_for

from chatcaps.events import Call, CallArguments, CallEnd, CallStart
from chatcaps.reply.call_stream import CallStream


def call_stream(name: str, warnings: list[str]) -> CallStream:
    call_format = caps_for(name).tools.call_format
    assert call_format is not None
    return CallStream(call_format, TOOLS, warnings)


def test_parameters_stream_each_once_it_is_complete() -> None:
    """The name once it is complete, each parameter as JSON (typed from the tool's schema) once its closing tag is
    in, the closing brace when the region closes; the call joins `calls` then."""
    warnings: list[str] = []
    calls = call_stream("qwen3_coder", warnings)
    region = ["get_wea", "ther>\n<parameter=city>\nPar", "is\n</parameter>\n<parameter=days>\n3\n</param", "eter>\n"]
    assert [calls.feed(piece) for piece in region] == [
        [],
        [CallStart(0, "get_weather")],
        [CallArguments(0, '{"city": "Paris"')],
        [CallArguments(0, ', "days": 3')],
    ]
    assert calls.calls == []
    call = Call("get_weather", '{"city": "Paris", "days": 3}')
    assert calls.close("".join(region)) == [CallArguments(0, "}"), CallEnd(0, call)]
    assert calls.calls == [call]
    assert warnings == []


def test_calls_that_do_not_stream_come_whole_at_close() -> None:
    warnings: list[str] = []
    calls = call_stream("hermes", warnings)
    region = '\n{"name": "get_time", "arguments": {"zone": "CET"}}\n'
    assert calls.feed(region[:20]) == []
    assert calls.feed(region[20:]) == []
    call = Call("get_time", '{"zone": "CET"}')
    assert calls.close(region) == [CallStart(0, "get_time", None, '{"zone": "CET"}'), CallEnd(0, call)]
    assert calls.calls == [call]
    assert warnings == []


def test_warnings_go_to_the_replys_list_in_order() -> None:
    """A second region is the next call (index 1); what is odd about each is appended as it is found."""
    warnings = ["an earlier warning"]
    calls = call_stream("mistral_args", warnings)
    assert calls.feed('lookup[ARGS]{"q": 1}') == [CallStart(0, "lookup"), CallArguments(0, '{"q": 1}')]
    assert calls.close('lookup[ARGS]{"q": 1}') == [CallEnd(0, Call("lookup", '{"q": 1}'))]
    assert calls.feed("get_time[ARGS]zone") == [CallStart(1, "get_time"), CallArguments(1, "zone")]
    assert calls.close("get_time[ARGS]zone") == [CallEnd(1, Call("get_time", "zone"))]
    assert calls.feed("get_") == []
    assert calls.close("get_") == []
    assert calls.kept == "[TOOL_CALLS]get_"
    assert calls.calls == [Call("lookup", '{"q": 1}'), Call("get_time", "zone")]
    assert warnings == [
        "an earlier warning",
        "a call to 'lookup', which is not among the tools; kept",
        "the arguments of 'get_time' are no JSON object; kept as text: 'zone'",
        "a tool call that ends before its arguments begin, kept as content: 'get_'",
    ]
