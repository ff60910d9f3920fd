"""A reply's tool calls as they stream: the raw text of each call region in, calls and their events out
(`chatcaps.events`: `CallStart`, `CallArguments`, `CallEnd`; ids only where the model wrote them).

`ReplyStream` routes the parser's regions; what a `tool_calls` region holds is read here, apart from that routing, as
transformers keeps its structured content parsers apart from its region router. Where a format's arguments stream
(`streamed_head`: an opening text, the name, then the arguments), the name is sent once it is complete and the
arguments follow in pieces, JSON text as written or each parameter as JSON once its closing text is in, and they are
checked when the region closes. Other formats send each call whole when its region closes (`read_region`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from chatcaps.caps import CallFormat
from chatcaps.events import Call, CallArguments, CallEnd, CallStart, Event
from chatcaps.reply.calls import Channel, closing_text, filled_id, opening_text, read_region, streamed_head
from chatcaps.reply.layout import Layout
from chatcaps.reply.parameters import balanced, parameter_pattern, parameter_read
from chatcaps.vocab import PLACEHOLDER


class CallStream:
    """The tool calls of one reply, fed the raw text of each call region (`feed`) until it closes (`close`).

    `calls` holds the calls read so far; a streamed call joins it when its region closes. Warnings
    are appended to `warnings`, the reply's own list, so that they keep the order they were found in. `kept` is,
    after each `close`, the region's text that is no call (a call that does not parse, with its opening and closing
    text; text after a call): the reply's content, where the region stood.
    """

    def __init__(
        self,
        call_format: CallFormat,
        tools: Sequence[Mapping[str, Any]],
        warnings: list[str],
        channel: Channel | None = None,
    ) -> None:
        self.calls: list[Call] = []
        self.call_format = call_format
        self._warnings = warnings
        self._tool_names = {_tool_name(tool) for tool in tools} - {""}
        self._properties = {_tool_name(tool): _properties(tool) for tool in tools}
        self._head = streamed_head(call_format, channel)
        """Where the calls' arguments stream: the name, then what comes before the arguments (`streamed_head`)."""
        self._parameter = parameter_pattern(call_format) if self._head is not None else None
        """The parameters form's pattern for one argument, where arguments stream as parameters complete."""
        closing = (call_format.parameter or "").partition("${value}")[2].split()
        self._parameter_end = PLACEHOLDER.split(closing[-1])[-1] if closing else ""
        """The literal end of a parameter's closing text (`</parameter>`; `>` of `</${key}>`): a parameter cannot be
        complete before it."""
        self._parameter_start = (call_format.parameter or "").strip().split("${", 1)[0]
        """The literal a parameter opens with (`<parameter=`): the next parameter starts at its next occurrence, so a
        value holding whole parameters of its own (MiniMax's nested tags) is not read from the inside while it is
        still open. "" where a parameter opens with a hole."""
        self._raw = ""
        """The open region's text so far."""
        self._arguments_at: int | None = None
        """Where the open streamed call's arguments begin in `_raw`; None until its name is complete."""
        self._id: str | None = None
        self._name = self._arguments = ""
        """The open streamed call: its id (None where the model writes none), its name and the arguments sent so
        far."""
        self._sent = self._checked = 0
        self._left = ""
        """The open streamed call's text between its parameters so far, which is no parameter (kept as content)."""
        self._layout = Layout()
        self.kept = ""

    def feed(self, text: str) -> list[Event]:
        """The events a further piece of the open region's text completes (none where calls do not stream): the
        call's name once it is complete, then each new piece of its arguments (layout whitespace held)."""
        # Appended through a local with the attribute cleared: CPython then grows the string in place, where
        # `self._raw += ...` copies it whole at every piece (a long call streams in thousands of pieces).
        raw, self._raw = self._raw, ""
        raw += text
        self._raw = raw
        deltas: list[Event] = []
        if self._head is None:
            return deltas
        index = len(self.calls)
        if self._arguments_at is None:
            head = self._head.match(raw)
            if head is None:
                return deltas
            deltas.append(self._started(head, head.end()))
        if self._parameter is not None:
            piece = self._parameter_pieces(raw)
        else:
            piece = self._layout.push(raw[self._sent :])
            self._sent = len(raw)
        if piece:
            self._arguments += piece
            deltas.append(CallArguments(index, piece))
        return deltas

    def close(self, value: Any, *, closed: bool = True) -> list[Event]:
        """The region closed, `value` the parser's value for it, `closed` False where the text ended inside it: a
        streamed call's last piece, checked; else each call the region held, whole."""
        raw, self._raw = self._raw, ""
        self.kept = ""
        if self._head is not None:
            deltas = self._streamed_call_closed(raw, closed)
        else:
            read = read_region(value, raw, self.call_format, self._tool_names)
            self._warnings += read.warnings
            self.kept = read.content
            deltas = self._whole_calls(read.calls)
        if self.kept and not deltas and closed:  # no call read: the text it closed with goes back too
            self.kept += closing_text(self.call_format)
        return deltas

    def _started(self, head: re.Match[str], arguments_at: int) -> CallStart:
        """A streamed call's first event, its name complete in `head`; its arguments begin at `arguments_at`."""
        index = len(self.calls)
        self._arguments_at = self._sent = self._checked = arguments_at
        self._left = ""
        self._layout = Layout()
        self._name, self._arguments = head["name"], ""
        groups = head.groupdict()
        self._id = groups.get("id") or filled_id(self.call_format, self._name, groups.get("index")) or None
        if self._tool_names and self._name not in self._tool_names:
            self._warnings.append(f"a call to {self._name!r}, which is not among the tools; kept")
        return CallStart(index, self._name, self._id)

    def _whole_calls(self, calls: tuple[Call, ...]) -> list[Event]:
        deltas: list[Event] = []
        for call in calls:
            index = len(self.calls)
            self.calls.append(call)
            deltas += (CallStart(index, call.name, call.id, call.arguments), CallEnd(index, call))
        return deltas

    def _next_parameter(self, raw: str, position: int, final: bool) -> re.Match[str] | None:
        """The next complete parameter from `position` on: it starts at the next opening literal (so a value holding
        whole parameters of its own, MiniMax's nested tags, is not read from the inside), and one not complete yet
        holds back those after it, until the region closes (`final`): then it is text, and reading goes on past it
        as the whole region's search would."""
        assert self._parameter is not None
        while True:
            if self._parameter_start:
                start = raw.find(self._parameter_start, position)
                found = self._parameter.match(raw, start) if start >= 0 else None
            else:
                found = self._parameter.search(raw, position)
                start = found.start() if found else -1
            if start < 0:
                return None
            match = balanced(found, self.call_format) if found is not None else None
            if match is not None or not final:
                return match
            position = start + 1

    def _parameter_pieces(self, raw: str, *, final: bool = False) -> str:
        """The JSON text of the parameters completed since the last call (`{"key": value` first, `, "key": value`
        after), each value typed from the tool's schema; the text between them is kept (`_left`). The pattern runs
        only once the text holds a parameter's closing text again, so a long value is not searched anew at every
        piece of it."""
        closing, pieces = self._parameter_end, list[str]()
        if not final:
            found = raw.find(closing, max(self._sent, self._checked - len(closing)))
            self._checked = len(raw)
            if found < 0:
                return ""
        properties = self._properties.get(self._name, {})
        while (match := self._next_parameter(raw, self._sent, final)) is not None:
            value = parameter_read(match, properties.get(match["key"]), self.call_format)
            opening = ", " if self._arguments or pieces else "{"
            key, text = json.dumps(match["key"], ensure_ascii=False), json.dumps(value, ensure_ascii=False)
            pieces.append(f"{opening}{key}: {text}")
            self._left += raw[self._sent : match.start()]
            self._sent = match.end()
        if final:
            self._left += raw[self._sent :]
            self._sent = len(raw)
        return "".join(pieces)

    def _streamed_call_closed(self, raw: str, closed: bool) -> list[Event]:
        """A streamed call's region closed: its arguments, all sent, checked; a region whose name never came, warned."""
        assert self._head is not None  # only streamed calls come here
        deltas = list[Event]()
        if self._arguments_at is None and closed:
            # A call without arguments (GLM's `<tool_call>NAME</tool_call>`): the name ends where the region closed.
            head = self._head.match(raw + closing_text(self.call_format))
            if head is not None and head.end("name") <= len(raw):
                deltas.append(self._started(head, min(head.end(), len(raw))))
        if self._arguments_at is None:
            if raw.strip():
                self._warnings.append(f"a tool call that ends before its arguments begin, kept as content: {raw!r}")
                self.kept = opening_text(self.call_format) + raw
            return []
        index = len(self.calls)
        if not self._arguments.strip() and self._parameter is None:  # none written: `{}`
            self._arguments = "{}"
            deltas.append(CallArguments(index, "{}"))
        if self._parameter is not None:
            closing = self._parameter_pieces(raw, final=True)
            closing += "}" if self._arguments or closing else "{}"
            self._arguments += closing
            deltas.append(CallArguments(index, closing))
            left = self._left.strip()
            if left:
                self._warnings.append(f"text in a tool call that is no parameter, kept as content: {left!r}")
                self.kept = left
        self._arguments_at = None
        try:
            valid = isinstance(json.loads(self._arguments), dict)
        except ValueError:
            valid = False
        if not valid:
            self._warnings.append(
                f"the arguments of {self._name!r} are no JSON object; kept as text: {self._arguments!r}"
            )
        call = Call(self._name, self._arguments, self._id)
        self.calls.append(call)
        return [*deltas, CallEnd(index, call)]


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function", tool)
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else ""


def _properties(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's parameter schemas by name."""
    function = tool.get("function", tool)
    parameters = function.get("parameters") if isinstance(function, Mapping) else None
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    return dict(properties) if isinstance(properties, Mapping) else {}
