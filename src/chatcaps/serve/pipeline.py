"""One pipeline for every API the server speaks: a `ChatRequest` (read by the route's wire module) prepared into a
prompt, its render, the sampling and the grammar (`prepare`), generated, and answered by one responder (`respond`)
through the route's `Encoder`, whole or streamed.

Preparing is: the sampling checked by the backend; the template chosen (a tool-use one for a request with tools);
`reasoning_format: "none"` checked against `--reasoning`; `tool_choice` passed to a template that reads the
variable, else kept to by a grammar where the backend applies one, else refused unless "auto"; parallel calls turned
off the same way (the template's `parallel_tool_calls`, else a grammar, else a note that it was not held); the
render (`hook.prerender`, errors located in the client's body); and the grammar the request asks for
(`chatcaps.reply.constraint`; "auto" with tools a lazy one where the backend's grammars may wait for a trigger). A
request's own llama.cpp `grammar` or `json_schema` is kept, and then no other.

Responding is the same for every API: the backend's pieces read by the render's `ReplyStream` into the events of
`chatcaps.events` (the same reader for a whole reply and a streamed one), what `--reasoning hide` keeps from clients
left out (`serve/visibility.py`), and the encoder's shapes. A stream's first piece is awaited before the response
starts (with the prompt's token count, where the encoder's first event carries it), so that a backend failing before
any output is answered with its status; a failure midway ends the stream with the error event the table gives it;
however the stream stops, the backend's iterator is closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, Protocol

import anyio
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response

from chatcaps.caps import Caps
from chatcaps.errors import InputError
from chatcaps.events import Event
from chatcaps.hook import Grammar, prerender, report
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply
from chatcaps.reply.constraint import constraint
from chatcaps.request import ChatRequest
from chatcaps.serve import errors, visibility
from chatcaps.serve.backend import Backend, close_quietly
from chatcaps.serve.http import both, collect, first, sse_event, whole
from chatcaps.serve.request import GenerationEnd, Sampling
from chatcaps.serve.visibility import Visibility

_PARALLEL = "parallel_tool_calls"


@dataclass(frozen=True)
class Prepared:
    """A request ready to generate: the prompt, its render, the sampling with its grammar."""

    request: ChatRequest
    prompt: str
    render: RenderResult
    sampling: Sampling
    grammar: Grammar | None = None


def prepare(backend: Backend, request: ChatRequest, reasoning: Visibility) -> Prepared:
    """The prompt, its render, the sampling and the grammar for `request` on `backend` (the module's docstring)."""
    sampling = Sampling.of(request.sampling)
    backend.check(sampling)
    template = backend.template(tools=request.has_tools)
    visibility.check_raw(request.raw, template.caps, reasoning)
    request, prompt, render = rendered(backend, request, template)
    if backend.grammars is None:
        return Prepared(request, prompt, render, sampling)
    sampling = constrain(request, render, prompt, sampling, lazy=backend.lazy_grammars, caps_key=template.caps_key)
    grammar = Grammar(sampling.grammar.kind, backend.grammars, sampling.grammar.loosened) if sampling.grammar else None
    return Prepared(request, prompt, render, sampling, grammar)


def rendered(
    backend: Backend, request: ChatRequest, template: ChatTemplate | None = None
) -> tuple[ChatRequest, str, RenderResult]:
    """The request as rendered (its tool choice and parallel calls passed to the template where it reads them), the
    prompt and the render; `template` is the backend's for the request unless given."""
    template = template or backend.template(tools=request.has_tools)
    constrained = backend.grammars is not None
    request = with_parallel(
        with_tool_choice(request, template.caps, constrained=constrained), template.caps, constrained
    )
    prompt, render = prerender(request, template)
    return request, prompt, render


def with_tool_choice(request: ChatRequest, caps: Caps, *, constrained: bool = False) -> ChatRequest:
    """The request with its `tool_choice` passed to the template where it reads the variable; elsewhere, unless a
    grammar keeps the model to it (`constrained`), only "auto" (what a model does with tools anyway) is accepted.
    The refusal names the choice, and "auto", as the client's API spells them."""
    choice = request.tool_choice
    if choice is None:
        return request
    if "tool_choice" in caps.template_variables:
        return replace(request, template_args={"tool_choice": choice.value, **(request.template_args or {})})
    if choice.free or constrained:
        return request
    raise InputError(
        f"request.tool_choice {choice.spelled} cannot be honoured: the template does not read tool_choice and this "
        f"backend applies no grammar (send {request.words.auto} or leave it out)",
        field="tool_choice",
    )


def with_parallel(request: ChatRequest, caps: Caps, constrained: bool) -> ChatRequest:
    """The request with parallel calls turned off where it asks: by the template where it reads
    `parallel_tool_calls`, else by the grammar a constraining `tool_choice` gets, else not at all (noted)."""
    if request.parallel_calls:
        return request
    if _PARALLEL in caps.template_variables:
        return replace(request, template_args={_PARALLEL: False, **(request.template_args or {})})
    if constrained and request.tool_choice is not None and not request.tool_choice.free:
        return request
    note = f"{request.words.parallel}: the template does not read parallel_tool_calls; not held"
    return replace(request, notes=(*request.notes, note))


def constrain(
    request: ChatRequest,
    render: RenderResult,
    prompt: str,
    sampling: Sampling,
    *,
    lazy: bool,
    caps_key: bytes | None = None,
) -> Sampling:
    """`sampling` with the grammar the request asks for (`chatcaps.reply.constraint`), for a backend that applies
    grammars; `ConstraintError` (an `InputError`) where the template's format cannot express it. Without `lazy` (a
    backend whose grammars cannot wait for a trigger), "auto" stays free."""
    choice = None if request.tool_choice is None else request.tool_choice.value
    own = [name for name in ("grammar", "json_schema") if name in sampling.llama_cpp]
    asked = [*sampling.constrained, *(["tool_choice"] if choice not in (None, "auto") else [])]
    if own and asked:
        raise InputError(f"request.{own[0]} and request.{asked[0]} both constrain generation; send one", field=own[0])
    if own:
        return sampling
    found = constraint(
        render.caps,
        list(render.tools) if render.tools else None,
        choice,
        parallel=request.parallel_calls,
        response_format=request.answer_format,
        prompt=prompt,
        caps_key=caps_key,
    )
    return replace(sampling, grammar=None if found is not None and found.kind == "lazy" and not lazy else found)


# --- the responder ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    """A reply read whole, as an encoder answers it: the reply (the reasoning left in: `shown` is what clients see),
    how generation ended, the hidden reasoning's token count (None where nothing was hidden, or not counted) and
    chatcaps' report."""

    reply: Reply
    shown: Reply
    finished: GenerationEnd
    hidden: int | None
    report: Mapping[str, Any]


class Encoder(Protocol):
    """One API's answers for the responder: a whole response, or a stream's events (JSON objects, framed by the
    responder), in the API's shapes."""

    route: str
    """The route's name for the error table (`POST /v1/messages`)."""
    named: bool
    """Each event carries an `event:` line naming its `type` (Anthropic's)."""
    initial: bool
    """The stream answers what the prompt already wrote of the message (a prefill), as OpenAI's does."""
    counts_prompt: bool
    """The stream's first event carries the prompt's token count."""
    counts_hidden: bool
    """A stream's end needs the hidden reasoning's token count (its usage)."""
    done: str | None
    """The text of the stream's last event, after the JSON ones (`[DONE]`); None: none."""
    ping: Callable[[], ServerSentEvent] | None
    """What an idle stream sends (None: sse-starlette's comment line)."""

    def whole(self, ended: Ended, events: list[Event]) -> dict[str, Any]:
        """The whole response (`events`: the reply's, as the client would see them streamed, what the prompt
        already wrote left out)."""
        ...

    def opening(self, prompt_tokens: int | None) -> list[dict[str, Any]]:
        """A stream's first events (OpenAI's role; Anthropic's `message_start`, with the prompt's token count)."""
        ...

    def events(self, event: Event) -> list[dict[str, Any]]:
        """What one of the reply's events is in the stream (often one event; none for what the API does not send)."""
        ...

    def closing(self, ended: Ended) -> list[dict[str, Any]]:
        """A stream's last events, the reply read whole."""
        ...


async def respond(
    http: Request, backend: Backend, prepared: Prepared, reasoning: Visibility, encoder: Encoder
) -> Response:
    """Generate `prepared` on `backend` and answer it through `encoder`: whole (`http.whole`: cancelled when the
    client disconnects) or as server-sent events."""
    reading = _Reading(backend, prepared, reasoning, encoder)
    pieces = backend.generate(prepared.prompt, prepared.sampling)
    if not prepared.request.stream:
        return await whole(http.receive, reading.whole(pieces))
    if encoder.counts_prompt:
        try:  # counted while the first piece is awaited
            prompt_tokens, piece = await both(backend.count_tokens(prepared.prompt), first(pieces))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await close_quietly(pieces)
            raise
        return EventSourceResponse(
            reading.events(piece, pieces, prompt_tokens), sep="\n", ping_message_factory=encoder.ping
        )
    piece = await first(pieces)
    return EventSourceResponse(reading.events(piece, pieces), sep="\n", ping_message_factory=encoder.ping)


class _Reading:
    """One request's reply: the backend's pieces read by the hook, answered through the encoder."""

    def __init__(self, backend: Backend, prepared: Prepared, reasoning: Visibility, encoder: Encoder) -> None:
        self.backend = backend
        self.prepared = prepared
        self.reasoning = reasoning
        self.encoder = encoder

    async def whole(self, pieces: AsyncIterator[str | GenerationEnd]) -> dict[str, Any]:
        text, finished = await collect(pieces)
        stream = self.prepared.render.reply_stream(raw=self.prepared.request.raw)
        events = visibility.shown_events([*stream.feed_events(text), *stream.close_events()], self.reasoning)
        return self.encoder.whole(await self._ended(stream.reply, finished, count=True), events)

    async def events(
        self, first: str | GenerationEnd, pieces: AsyncIterator[str | GenerationEnd], prompt_tokens: int | None = None
    ) -> AsyncIterator[dict[str, str]]:
        """The encoder's events for the stream, from its `first` piece on; a failure midway ends the stream with
        the error body the table gives it."""
        named = self.encoder.named
        try:
            for event in self.encoder.opening(prompt_tokens):
                yield sse_event(event, named=named)
            stream = self.prepared.render.reply_stream(raw=self.prepared.request.raw)
            finished = None
            visible = visibility.shown_stream(stream, first, pieces, self.reasoning, initial=self.encoder.initial)
            async with aclosing(visible) as events:  # closed now, however this stream stops
                async for read in events:
                    if isinstance(read, GenerationEnd):
                        finished = read
                        continue
                    for event in self.encoder.events(read):
                        yield sse_event(event, named=named)
            assert finished is not None  # the stream ends with it
            ended = await self._ended(stream.reply, finished, count=self.encoder.counts_hidden)
            for event in self.encoder.closing(ended):
                yield sse_event(event, named=named)
            if self.encoder.done is not None:
                yield {"data": self.encoder.done}
        except Exception as error:  # the response has begun: the client learns of it in the stream
            yield sse_event(errors.answer(error, self.encoder.route).body, named=named)
        finally:
            with anyio.CancelScope(shield=True):
                await close_quietly(pieces)

    async def _ended(self, reply: Reply, finished: GenerationEnd, *, count: bool) -> Ended:
        hidden = await visibility.hidden_tokens(self.backend, reply, self.reasoning) if count else None
        found = report(self.prepared.render, reply, self.prepared.grammar)
        shown = visibility.shown_reply(reply, self.reasoning)
        return Ended(reply, shown, finished, hidden, visibility.shown_report(found, self.reasoning))
