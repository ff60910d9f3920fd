"""`chatcaps.reply.blocks`: a reply's events as blocks, one open at a time, numbered as they open."""

from __future__ import annotations

from chatcaps.events import Call, CallArguments, CallEnd, CallStart, Event, Reasoning, Text
from chatcaps.reply.blocks import Added, Blocks, Closed, Opened


def test_blocks_open_when_the_kind_of_text_changes() -> None:
    blocks = Blocks()
    start = CallStart(0, "add", None)
    whole = CallStart(1, "add", "t1", '{"a": 3}')
    events: list[Event] = [
        Reasoning("Add"),
        Reasoning(" two."),
        Text(""),
        Text("Sure."),
        start,
        CallArguments(0, '{"a": 2}'),
        CallEnd(0, Call("add", '{"a": 2}')),
        whole,
        CallEnd(1, Call("add", '{"a": 3}', "t1")),
    ]
    found = [block for event in events for block in blocks.feed(event)] + blocks.close()
    assert found == [
        Opened(0, "reasoning"),
        Added(0, "reasoning", "Add"),
        Added(0, "reasoning", " two."),
        Closed(0, "reasoning", "Add two."),
        Opened(1, "text"),
        Added(1, "text", "Sure."),
        Closed(1, "text", "Sure."),
        Opened(2, "call", start),
        Added(2, "call", '{"a": 2}'),
        Closed(2, "call", '{"a": 2}', start),
        Opened(3, "call", whole),
        Added(3, "call", '{"a": 3}'),
        Closed(3, "call", '{"a": 3}', whole),
    ]
    assert blocks.close() == []
