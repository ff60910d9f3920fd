"""chatcaps as a vLLM plugin: a tool-call parser and a reasoning parser named `chatcaps` whose grammar is the model's
own chat template (docs/vllm.md).

    pip install 'chatcaps[vllm]'
    vllm serve MODEL --enable-auto-tool-choice --tool-call-parser chatcaps --reasoning-parser chatcaps

vLLM loads the entry point `chatcaps` of the group `vllm.general_plugins` in every process it starts and calls
`register()`, which registers the two parsers with vLLM's `ToolParserManager` and `ReasoningParserManager`. vLLM
0.33's serving layer holds one unified `vllm.parser.Parser` per request, which it composes from the two names
(`ParserManager`); it has no registry for unified parsers, so `register()` also makes that composition give
`ChatcapsParser` wherever the selected parsers are chatcaps' (every other selection composes as before). One
`ReplyStream` then reads the whole reply, reasoning, content and calls, as `parse_reply` reads it.

The grammar comes from the tokenizer's chat template (`ChatTemplate.from_tokenizer`, detected once per tokenizer);
the reply is read after the prompt as vLLM tokenized it (its ids decoded), so a generation prompt that opened the
reasoning block, or a prefilled answer, is read as the prompt left it. The two split parsers implement vLLM's
`ReasoningParser` and `ToolParser` in full on the same reader, for what vLLM calls on them apart from the unified
parser: the engine core asks the reasoning parser where reasoning ends (`is_reasoning_end` on token ids) to start a
structured-output grammar there, and either may be composed with a parser of vLLM's own.

Only vLLM's processes import this module (it imports vLLM); chatcaps never does.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from vllm import envs  # type: ignore[import-not-found,unused-ignore]
from vllm.entrypoints.generate.base.protocol import (  # type: ignore[import-not-found,unused-ignore]
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.logger import init_logger  # type: ignore[import-not-found,unused-ignore]
from vllm.parser.abstract_parser import Parser  # type: ignore[import-not-found,unused-ignore]
from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found,unused-ignore]
from vllm.reasoning import ReasoningParser, ReasoningParserManager  # type: ignore[import-not-found,unused-ignore]
from vllm.renderers.chat_utils import make_tool_call_id  # type: ignore[import-not-found,unused-ignore]
from vllm.renderers.registry import RENDERER_REGISTRY  # type: ignore[import-not-found,unused-ignore]
from vllm.sampling_params import StructuredOutputsParams  # type: ignore[import-not-found,unused-ignore]
from vllm.tokenizers.registry import TokenizerRegistry  # type: ignore[import-not-found,unused-ignore]
from vllm.tool_parsers import ToolParser, ToolParserManager  # type: ignore[import-not-found,unused-ignore]
from vllm.tool_parsers.tool_strict_level import ToolStrictLevel  # type: ignore[import-not-found,unused-ignore]

from chatcaps.caps import Caps
from chatcaps.events import CallArguments, CallStart, Event, Reasoning, Text
from chatcaps.integrations.vllm_tags import structural_tag
from chatcaps.render import ChatTemplate
from chatcaps.reply import Reply, ReplyStream
from chatcaps.reply.constraint import ConstraintError, constraint

logger = init_logger(__name__)
NAME = "chatcaps"
"""The name both parsers are registered under (`--tool-call-parser chatcaps --reasoning-parser chatcaps`)."""
PROBE = "\0"
"""A character no reply holds, fed after a text to see which field it lands in (still reasoning, or not)."""


def register() -> None:
    """The `vllm.general_plugins` entry point: register both parsers and route their selection to `ChatcapsParser`;
    register the tokenizer mode `chatcaps` (vLLM's Hugging Face tokenizer, with `ChatcapsRenderer`, which maps the
    request's reasoning effort onto the template's controls: `chatcaps.integrations.vllm_renderer`). Safe to call
    more than once (vLLM loads general plugins in each of its processes)."""
    ToolParserManager.register_module(NAME, module=ChatcapsToolParser)
    ReasoningParserManager.register_module(NAME, module=ChatcapsReasoningParser)
    if NAME not in TokenizerRegistry.tokenizers:
        TokenizerRegistry.register(NAME, "vllm.tokenizers.hf", "CachedHfTokenizer")
    if NAME not in RENDERER_REGISTRY.renderers:
        RENDERER_REGISTRY.register(NAME, "chatcaps.integrations.vllm_renderer", "ChatcapsRenderer")
    compose = ParserManager._compose_parser
    if not getattr(compose, "chatcaps", False):
        ParserManager._compose_parser = classmethod(_composing(compose.__func__))


def _composing(compose: Callable[..., Any]) -> Callable[..., Any]:
    """vLLM's `ParserManager._compose_parser`, giving `ChatcapsParser` where every selected parser is chatcaps'.
    gpt-oss (`is_harmony`) keeps vLLM's Harmony parser, which its Harmony rendering goes with."""

    def composed(cls: Any, **kwargs: Any) -> Any:
        reasoning = ParserManager.get_reasoning_parser(kwargs["reasoning_parser_name"])
        tool = ParserManager.get_tool_parser(
            kwargs["tool_parser_name"], kwargs["enable_auto_tools"], kwargs.get("model_name")
        )
        selected = [parser for parser in (reasoning, tool) if parser is not None]
        ours = (ChatcapsReasoningParser, ChatcapsToolParser)
        if kwargs.get("is_harmony") or not selected or not all(issubclass(parser, ours) for parser in selected):
            return compose(cls, **kwargs)
        strict = kwargs.get("tool_strict_level")
        return type(
            "ChatcapsParser",
            (ChatcapsParser,),
            {
                "reasoning_parser_cls": reasoning,
                "tool_parser_cls": tool,
                "tool_strict_level": None if strict is None else ToolStrictLevel.from_name(strict),
            },
        )

    composed.chatcaps = True  # type: ignore[attr-defined]
    return composed


_TEMPLATES: weakref.WeakKeyDictionary[Any, ChatTemplate] = weakref.WeakKeyDictionary()


def template_of(tokenizer: Any) -> ChatTemplate:
    """The tokenizer's chat template, its Caps detected: once per tokenizer (a parser is made per request)."""
    template = _TEMPLATES.get(tokenizer)
    if template is None:
        template = ChatTemplate.from_tokenizer(tokenizer)
        template.caps  # noqa: B018 (detect now: a template chatcaps cannot read fails at startup, not on a request)
        _TEMPLATES[tokenizer] = template
    return template


def decoded(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """The text of `token_ids` with every special token written out: the grammar's markers may be special tokens."""
    return str(tokenizer.decode(list(token_ids), skip_special_tokens=False))


def without_calls(caps: Caps) -> Caps:
    """`caps` with no call format: calls are read as the content they are written in."""
    return replace(caps, tools=replace(caps.tools, call_format=None))


def tool_dicts(tools: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The request's tools as OpenAI's plain dicts (vLLM hands pydantic models)."""
    return [tool.model_dump(exclude_none=True) if hasattr(tool, "model_dump") else dict(tool) for tool in tools or ()]


def constrained(request: Any, caps: Caps, strict: ToolStrictLevel | None) -> Any:
    """`request` with the structural tag that keeps its reply to its `tool_choice` in the template's call format
    (`chatcaps.integrations.vllm_tags`), as vLLM's own parsers constrain theirs: "required", a named function and
    "none" always, "auto" where the operator asks for the call envelope on every request (`--tool-strict-level
    function` or `parameter`); never where the client sent a structured output of its own or the operator turned
    strict tool calling off (`VLLM_ENFORCE_STRICT_TOOL_CALLING=0`). A format no tag holds (parameters, Python calls,
    ids in the call) gets the grammar chatcaps gives llama-server, in xgrammar's dialect, for all but "auto" (a
    grammar holds from the first token; only a tag waits for a trigger)."""
    own = getattr(request, "response_format", None)
    if (
        not request.tools
        or not envs.VLLM_ENFORCE_STRICT_TOOL_CALLING
        or getattr(request, "structured_outputs", None) is not None
        or (own is not None and getattr(own, "type", "text") != "text")
    ):
        return request
    choice = request.tool_choice
    choice = "auto" if choice is None else choice.model_dump() if hasattr(choice, "model_dump") else choice
    if choice == "auto" and (strict or ToolStrictLevel.AUTO) < ToolStrictLevel.FUNCTION:
        return request
    tools, parallel = tool_dicts(request.tools), request.parallel_tool_calls is not False
    tag = structural_tag(caps, tools, choice, parallel=parallel)
    if tag is not None:
        request.structured_outputs = StructuredOutputsParams(structural_tag=json.dumps(tag.model_dump()))
    elif choice != "auto":
        try:
            grammar = constraint(caps, tools, choice, parallel=parallel)
        except ConstraintError as error:  # a format with no rules: read as before, unconstrained
            logger.warning("chatcaps: tool_choice %r left unconstrained: %s", choice, error)
            return request
        if grammar is not None:
            request.structured_outputs = StructuredOutputsParams(grammar=grammar.grammar)
    return request


@dataclass(frozen=True)
class Reading:
    """How one request's reply is read: the Caps (without a call format where calls are not parsed), the prompt it
    continues, the request's tools, and `raw` where no reasoning parser is selected (the reasoning stays in the
    content as written, vLLM's meaning of no reasoning parser)."""

    caps: Caps
    prefix: str = ""
    tools: tuple[Mapping[str, Any], ...] = ()
    raw: bool = False

    def stream(self) -> ReplyStream:
        return ReplyStream(self.caps, prefix=self.prefix, tools=self.tools or None, raw=self.raw)

    def parse(self, text: str) -> Reply:
        stream = self.stream()
        stream.feed_events(text)
        stream.close_events()
        return stream.reply


class Calls:
    """`ReplyStream`'s events as vLLM's deltas and calls: each call's id is the one its text writes, else one vLLM
    makes (`make_id(name)`, the server's id style)."""

    def __init__(self, make_id: Callable[[str], str]) -> None:
        self._make_id = make_id
        self._ids: dict[int, str] = {}

    def ident(self, index: int, written: str | None, name: str) -> str:
        if index not in self._ids:
            self._ids[index] = written if written is not None else self._make_id(name)
        return self._ids[index]

    def message(self, events: Sequence[Event], *, reasoning: bool = True) -> Any:
        """One `DeltaMessage` for `events` (None where they hold nothing to send); `reasoning=False` drops the
        reasoning (a request with `include_reasoning` false)."""
        fields: dict[str, Any] = {}
        for event in events:
            if isinstance(event, Text) or (reasoning and isinstance(event, Reasoning)):
                field = "content" if isinstance(event, Text) else "reasoning"
                fields[field] = fields.get(field, "") + event.text
            elif isinstance(event, CallStart):
                ident = self.ident(event.index, event.id, event.name)
                function = DeltaFunctionCall(name=event.name, arguments=event.arguments)
                call = DeltaToolCall(index=event.index, id=ident, type="function", function=function)
                fields.setdefault("tool_calls", []).append(call)
            elif isinstance(event, CallArguments):
                function = DeltaFunctionCall(name=None, arguments=event.piece)
                call = DeltaToolCall(index=event.index, id=None, type=None, function=function)
                fields.setdefault("tool_calls", []).append(call)
        return DeltaMessage(**fields) if fields else None

    def calls(self, reply: Reply) -> list[Any]:
        """The reply's calls as vLLM's `FunctionCall`s (the id kept on them, as vLLM's parsers keep it)."""
        return [
            FunctionCall(id=self.ident(index, call.id, call.name), name=call.name, arguments=call.arguments)
            for index, call in enumerate(reply.calls)
        ]


def _random_id(name: str) -> str:
    return str(make_tool_call_id())


class ChatcapsParser(Parser):  # type: ignore[misc,unused-ignore]
    """vLLM's unified parser on one `ReplyStream`: reasoning, content and calls read together, as `parse_reply`
    reads them; what is read follows the parsers selected (no reasoning parser: the reasoning stays in the content;
    no tool parser: calls stay in the content). With a tool parser, a call the model writes is read as a call
    whatever the request's `tool_choice`: the grammar holds it, and a reader without it reads what follows
    differently (gpt-oss' `<|constrain|>` answers)."""

    reasoning_parser_cls: type[ReasoningParser] | None = None
    tool_parser_cls: type[ToolParser] | None = None
    always_adjust_request = True

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, tools, *args, **kwargs)
        self._template = template_of(tokenizer)
        self._tools = tuple(tool_dicts(tools))
        self._prompt_ids: list[int] | None = None
        self._prefix = ""
        self._stream: ReplyStream | None = None
        self._reading_calls = False
        self._calls = Calls(self._new_id)

    def reading(self) -> Reading:
        caps = self._template.caps
        return Reading(
            caps if self.tool_parser_cls is not None else without_calls(caps),
            self._prefix,
            self._tools,
            raw=self.reasoning_parser_cls is None,
        )

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        if list(prompt_token_ids) != self._prompt_ids:
            self._prompt_ids = list(prompt_token_ids)
            self._prefix = decoded(self.model_tokenizer, prompt_token_ids)
            self._stream = None

    def adjust_request(self, request: Any) -> Any:
        """Keep special tokens in the text: the grammar reads its markers there (`<think>`, `<tool_call>`, ...);
        with a tool parser, keep the reply to the request's `tool_choice` (`constrained`)."""
        request.skip_special_tokens = False
        if hasattr(request, "spaces_between_special_tokens"):
            request.spaces_between_special_tokens = False
        if self.tool_parser_cls is None:
            return request
        return constrained(request, self._template.caps, getattr(self, "tool_strict_level", None))

    def is_reasoning_end(self, input_ids: list[int]) -> bool:
        return self._reasoning_parser is None or bool(self._reasoning_parser.is_reasoning_end(input_ids))

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        return 0

    def parse(
        self,
        model_output: str,
        request: Any,
        enable_auto_tools: bool = False,
        model_output_token_ids: Sequence[int] = (),
    ) -> tuple[str | None, str | None, list[Any] | None]:
        self._initialize_history_tool_call_cnt(request)
        reply = self.reading().parse(model_output)
        calls = self._calls.calls(reply)
        return reply.reasoning_content, reply.content or None, calls or None

    def parse_delta(
        self,
        delta_text: str,
        delta_token_ids: list[int],
        request: Any,
        prompt_token_ids: list[int] | None = None,
        *,
        finished: bool,
    ) -> Any:
        self._initialize_history_tool_call_cnt(request)
        if self._prompt_ids is None and prompt_token_ids is not None:
            self.set_prompt_token_ids(prompt_token_ids)
        events: list[Event] = []
        if self._stream is None:
            self._stream = self.reading().stream()
            events += self._stream.initial_events
        events += self._stream.feed_events(delta_text)
        if finished:
            events += self._stream.close_events()
        return self._calls.message(events, reasoning=request.include_reasoning)

    def _new_id(self, name: str) -> str:
        state = self._stream_state
        ident = make_tool_call_id(id_type=state.tool_call_id_type, func_name=name, idx=state.history_tool_call_cnt)
        state.history_tool_call_cnt += 1
        return str(ident)


class ChatcapsReasoningParser(ReasoningParser):  # type: ignore[misc,unused-ignore]
    """vLLM's `ReasoningParser` on chatcaps' reader: reasoning and content, calls left in the content for the tool
    parser. Under vLLM's own composition it reads the whole reply itself (`engine_based_streaming`: it never hands
    the rest on, and its last deltas come from `finish_streaming`), as the unified parser does."""

    engine_based_streaming = True

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)
        self._caps = without_calls(template_of(tokenizer).caps)
        self._prompt = ""
        self._stream: ReplyStream | None = None
        self._calls = Calls(_random_id)

    @property
    def reasoning_start_str(self) -> str | None:
        return self._caps.reasoning.start_marker

    @property
    def reasoning_end_str(self) -> str | None:
        return self._caps.reasoning.end_marker

    def set_prompt_token_ids(self, prompt_token_ids: Sequence[int]) -> None:
        self._prompt = decoded(self.model_tokenizer, prompt_token_ids)

    def adjust_initial_state_from_prompt(self, prompt_token_ids: Sequence[int]) -> None:
        self.set_prompt_token_ids(prompt_token_ids)

    def adjust_request(self, request: Any) -> Any:
        request.skip_special_tokens = False
        return request

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """The reasoning is over after these ids (the prompt, or the prompt and what was generated): neither can
        the text go on as reasoning nor open a reasoning block there (vLLM's meaning: its serving layer reads a
        reply with the reasoning parser until then, and its engine core starts a structured output after it)."""
        return not self._in_reasoning(input_ids, f"{self._caps.reasoning.start_marker or ''}{PROBE}")

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        """The ids after the reasoning (all of them where the text after the prompt goes on outside reasoning)."""
        return next((input_ids[at:] for at in range(len(input_ids) + 1) if not self._in_reasoning(input_ids[:at])), [])

    def _in_reasoning(self, input_ids: Sequence[int], probe: str = PROBE) -> bool:
        """`probe` fed after the ids lands in the reasoning. They are read after the prompt given, if any, from
        the text's last generation prompt on (so the prompt's own ids, read after the prompt, read the same)."""
        stream = ReplyStream(self._caps, prefix=self._prompt + decoded(self.model_tokenizer, input_ids))
        stream.feed_events(probe)
        stream.close_events()
        return PROBE in (stream.reply.reasoning_content or "")

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        reply = Reading(self._caps, self._prompt).parse(model_output)
        return reply.reasoning_content, reply.content or None

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> Any:
        events: list[Event] = []
        if self._stream is None:
            self._stream = Reading(self._caps, self._prompt).stream()
            events += self._stream.initial_events
        return self._calls.message([*events, *self._stream.feed_events(delta_text)])

    def has_engine_confirmed_reasoning_end(self) -> bool:
        """Never: this parser reads the content after the reasoning too (the text vLLM would hand on has had its
        markers read already)."""
        return False

    def finish_streaming(self) -> Any:
        return self._calls.message(self._stream.close_events()) if self._stream is not None else None


class ChatcapsToolParser(ToolParser):  # type: ignore[misc,unused-ignore]
    """vLLM's `ToolParser` on chatcaps' reader: calls and content out of the text after the reasoning (reasoning
    markers are not read: with no reasoning parser before it, the reasoning stays in the content as written).
    `tool_choice` "required" or a named tool are read as "auto" (`supports_required_and_named`: vLLM's own JSON
    constraint for them is not the template's call format); `adjust_request` constrains them in the template's
    format instead (`constrained`)."""

    supports_required_and_named = False
    engine_based_streaming = True

    def __init__(self, tokenizer: Any, tools: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer, tools)
        self._reading = Reading(template_of(tokenizer).caps, tools=tuple(tool_dicts(tools)), raw=True)
        self._stream: ReplyStream | None = None
        self._calls = Calls(_random_id)

    def adjust_request(self, request: Any) -> Any:
        request = super().adjust_request(request)
        request.skip_special_tokens = False
        return constrained(request, self._reading.caps, None)

    def extract_tool_calls(self, model_output: str, request: Any) -> Any:
        reply = self._reading.parse(model_output)
        calls = [ToolCall(id=call.id, function=call) for call in self._calls.calls(reply)]
        return ExtractedToolCallInformation(tools_called=bool(calls), tool_calls=calls, content=reply.content or None)

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request: Any,
    ) -> Any:
        if self._stream is None:
            self._stream = self._reading.stream()
        return self._calls.message(self._stream.feed_events(delta_text))

    def finish_streaming(self) -> Any:
        return self._calls.message(self._stream.close_events()) if self._stream is not None else None
