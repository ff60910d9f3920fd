"""`Prober`: renders probe conversations against one compiled template, memoised, recording instead of raising.

A probe that raises is a result, not a crash: its error goes to `errors` (later `Caps.probe_errors`) and the render
returns None. A template that fails only because `tools` is None (it iterates `tools` unguarded, as many do) is tried
again with `tools=[]`, so one unrelated failure does not hide every capability; the first error is still recorded.
A probe that hits a sandbox limit is not a result: the `RenderLimitError` (time, memory, output, operand size, range,
recursion) is raised at once, naming the probe, and detection stops there. A template that exhausts a limit on a
small probe conversation is not one to serve, and going on would cost up to `Limits.time_s` a render (a zoo template
takes 68 renders, median, and up to 146).
The renders of one detection share the budget `Limits.detect_time_s`, for templates slow but within `time_s`: a
probe that would start after it is spent raises `RenderLimitError(limit="detect_time_s")` instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import orjson

from chatcaps.caps import ProbeError
from chatcaps.engines import Renderer, mutable_renderer
from chatcaps.errors import ChatcapsError, RenderLimitError

Message = dict[str, Any]
Conversation = list[Message]


class Attempt(NamedTuple):
    """One render's result: the output (None when it raised), the error text (when it raised, or rendered only with
    `tools=[]`), and whether this call is the first to claim it (False when a probe took it from the memo before;
    a `preview` claims nothing)."""

    output: str | None
    error: str | None
    fresh: bool


@cache
def probe_data() -> dict[str, Any]:
    """The probe conversations, tools and content blocks (probes/conversations.json)."""
    text = resources.files("chatcaps.probes").joinpath("conversations.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def conversation(name: str) -> Conversation:
    """A fresh copy of one probe conversation: callers build variants from it without sharing state."""
    return orjson.loads(_encoded("conversations", name))  # type: ignore[no-any-return]


def as_role(messages: Sequence[Mapping[str, Any]], role: str, other: str) -> list[dict[str, Any]]:
    """`messages` with each turn of `role` sent as a turn of `other` (its content alone): whether the template tells
    the two apart."""
    return [
        dict(message) if message["role"] != role else {"role": other, "content": message["content"]}
        for message in messages
    ]


def probe_tools(count: int = 2) -> list[dict[str, Any]]:
    return orjson.loads(_encoded("tools", count))  # type: ignore[no-any-return]


@cache
def _encoded(part: str, key: str | int) -> bytes:
    """One conversation (by name) or the first tools (by count) as JSON, encoded once: copies are decoded from it."""
    data = probe_data()[part]
    return orjson.dumps(data[key] if isinstance(key, str) else data[:key])


class Prober:
    """Renders conversations the way transformers passes them, minus its reasoning aliasing.

    transformers copies `reasoning_content`/`thinking`/`reasoning` into each other before rendering; probes must see
    which single field a template reads, so messages reach the template exactly as given.
    """

    def __init__(
        self,
        renderer: Renderer,
        *,
        bos_token: str,
        eos_token: str,
        deadline: float | None = None,
        follow: Mapping[str, Any] | None = None,
    ) -> None:
        self.renderer = renderer
        self.follow = follow
        """A turn appended to every conversation that ends with an assistant turn (`followed`)."""
        self.bos_token = bos_token
        self.eos_token = eos_token
        self._memo: dict[bytes, tuple[str | None, str | None]] = {}
        self._unclaimed: set[bytes] = set()
        """Keys of renders no probe has claimed yet (made by `preview`, or being made for an `attempt`)."""
        self._errors: dict[tuple[str, str], None] = {}
        self.deadline = time.monotonic() + renderer.limits.detect_time_s if deadline is None else deadline
        """When `detect_time_s` runs out (`time.monotonic`); a Prober made for the same detection shares it."""
        self.needs_tool_list = False
        """Some render raised with `tools=None` and rendered with `tools=[]`."""
        self._mutable: Prober | None = None
        self._followed: Prober | None = None

    def followed(self, turn: Mapping[str, Any]) -> Prober:
        """A Prober of the same template whose conversations go on with `turn` where they end with an assistant
        turn, made once, sharing this detection's budget: for a template that takes a final assistant message for a
        prefill and writes only its content (Nemotron-Nano-9B-v2's vLLM template drops its calls), what it writes
        for a past turn is still what the model writes. What it records stays its own."""
        if self._followed is None:
            self._followed = Prober(
                self.renderer, bos_token=self.bos_token, eos_token=self.eos_token, deadline=self.deadline, follow=turn
            )
        return self._followed

    def mutable(self) -> Prober:
        """A Prober of the same template rendered with its data changeable (`engines.mutable_renderer`), made once,
        sharing this detection's budget: for the probes that read what a template writes where the sandbox refuses
        the render only because the template changes data it builds. What it records stays its own."""
        if self._mutable is None:
            renderer = mutable_renderer(self.renderer)
            self._mutable = Prober(renderer, bos_token=self.bos_token, eos_token=self.eos_token, deadline=self.deadline)
        return self._mutable

    @property
    def errors(self) -> tuple[ProbeError, ...]:
        return tuple(ProbeError(probe=probe, error=error) for probe, error in self._errors)

    def render(
        self,
        probe: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The template's output for this input, or None if it raised (recorded under `probe`).

        Raises `RenderLimitError` if the render hit a sandbox limit, or if the detection's budget is spent."""
        output, error, fresh = self.attempt(
            probe, messages, tools=tools, add_generation_prompt=add_generation_prompt, kwargs=kwargs
        )
        if error is not None and fresh:  # recorded once, under the probe that first met it
            self._errors[(probe, error)] = None
        return output

    def render_shapes(
        self,
        probe: str,
        shapes: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[int, str | None]:
        """The first of several shapes of one probe conversation that renders, as (its index, its output).

        A template may refuse one shape of a message for a reason unrelated to the probe (an empty content it indexes
        into, content and reasoning together on a tool-call turn), so one refusal is no "no": each refused shape
        before the one that renders is recorded naming both. When none renders, the first shape's error is recorded
        as `render` would and the result is (-1, None)."""
        refused: list[Attempt] = []
        for index, (name, messages) in enumerate(shapes):
            found = self.attempt(
                probe, messages, tools=tools, add_generation_prompt=add_generation_prompt, kwargs=kwargs
            )
            if found.output is not None:
                for (shape, _), failed in zip(shapes, refused, strict=False):
                    self.record(probe, failed.error or "", shape, name)
                if found.error is not None and found.fresh:
                    self._errors[(probe, found.error)] = None
                return index, found.output
            refused.append(found)
        if refused and refused[0].error is not None and refused[0].fresh:
            self._errors[(probe, refused[0].error)] = None
        return -1, None

    def record(self, probe: str, error: str, shape: str | None = None, instead: str | None = None) -> None:
        """Record `error` under `probe`; with `shape`, as that shape of its conversation refused where `instead`
        rendered."""
        self._errors[(probe, error if shape is None else _refusal(error, shape, instead))] = None

    def attempt(
        self,
        probe: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> Attempt:
        """This input's render, memoised, recording nothing. `fresh` once per render: for the first probe to ask."""
        key, found = self._memoised(probe, messages, tools, add_generation_prompt, kwargs)
        if key not in self._unclaimed:
            return Attempt(*found, fresh=False)
        self._unclaimed.discard(key)
        if found[0] is not None and found[1] is not None:
            self.needs_tool_list = True
        return Attempt(*found, fresh=True)

    def preview(
        self,
        probe: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
        kwargs: Mapping[str, Any] | None = None,
    ) -> Attempt:
        """This input's render, claimed by no probe: the next `attempt` of it still finds it fresh, so what it has to
        record (an error, a tool-list retry) is recorded where it would have been without the preview. `fresh`: no
        probe has claimed it. `probe` names it only in a `RenderLimitError`, which is raised at once as ever."""
        key, found = self._memoised(probe, messages, tools, add_generation_prompt, kwargs)
        return Attempt(*found, fresh=key in self._unclaimed)

    def _memoised(
        self,
        probe: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        kwargs: Mapping[str, Any] | None,
    ) -> tuple[bytes, tuple[str | None, str | None]]:
        """The memo key of this input and its render, rendered the first time it is asked for and unclaimed until an
        `attempt` claims it."""
        if self.follow is not None and messages and messages[-1].get("role") == "assistant":
            messages = [*messages, self.follow]
        variables = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **(kwargs or {}),
            "messages": messages,
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
        }
        key = orjson.dumps(variables, option=orjson.OPT_SORT_KEYS)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._render(probe, variables)
            self._unclaimed.add(key)
        return key, found

    def _render(self, probe: str, variables: dict[str, Any]) -> tuple[str | None, str | None]:
        output = self._attempt(probe, variables)
        if isinstance(output, str):
            return output, None
        if variables["tools"] is None:
            retried = self._attempt(probe, {**variables, "tools": []})
            if isinstance(retried, str):
                return retried, f"{output} (renders with tools=[])"
        return None, str(output)

    def _attempt(self, probe: str, variables: dict[str, Any]) -> str | ChatcapsError:
        """The template's output, or the error it raised; a limit it hit, or a spent detection budget, is raised."""
        if time.monotonic() > self.deadline:
            raise RenderLimitError(
                f"detection ran past detect_time_s={self.renderer.limits.detect_time_s} before probe {probe!r}",
                limit="detect_time_s",
                template_name=self.renderer.name,
            )
        try:
            return self.renderer.render(variables)
        except RenderLimitError as error:
            raise RenderLimitError(
                f"{error.message} (probe {probe!r}; detection stops at the first limit)",
                limit=error.limit,
                template_name=error.template_name,
            ) from error
        except ChatcapsError as error:
            return error


def _refusal(error: str, shape: str, instead: str | None) -> str:
    return f"{error} (refused with {shape}; renders with {instead})"
