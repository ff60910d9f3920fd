"""llama-cpp-python adapter: a chat handler that renders through chatcaps and splits `reasoning_content` out.

    from llama_cpp import Llama
    from chatcaps.integrations.llamacpp import chat_handler

    llm = Llama(model_path="model.gguf", chat_handler=chat_handler(reasoning="off"))
    reply = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}])
    reply["choices"][0]["message"]  # {"role": "assistant", "content": ..., "reasoning_content": ...}

The handler follows llama-cpp-python's `LlamaChatCompletionHandler` protocol (llama_chat_format.py): the template
(by default the one in the model's GGUF, with its bos/eos tokens) renders the messages through `ChatTemplate.render`
(polyfills, the reasoning intent), the prompt goes to `Llama.create_completion` as token ids, and the reply comes back
as the same OpenAI-style dict llama-cpp-python returns, its message split by `RenderResult.parse_output`. With
`stream=True` the chunks carry `reasoning_content` and `content` deltas.

The reasoning intent is set per handler (`chat_handler(reasoning=...)`). llama-cpp-python 0.3.36's
`create_chat_completion` forwards only its own parameters to the handler, so for another intent per request make a
handler for it (`dataclasses.replace(handler, reasoning="high")`), or call the handler directly:
`handler(llama=llm, messages=..., reasoning="off")`.

BOS: the prompt is tokenized with special tokens parsed; llama.cpp prepends the model's BOS (when its
`tokenizer.ggml.add_bos_token` asks for one) only when the template does not write it (`caps.emits_bos`), so there is
exactly one, as in llama.cpp's own chat path.

Known limits: llama-cpp-python decodes the reply without special tokens, so a template whose reasoning markers are
control tokens in the GGUF vocabulary loses them before the split (markers that are ordinary or user-defined tokens,
like Qwen3's `<think>`, survive). Tool calls are rendered into the prompt but not parsed out of the reply, and
`tool_choice` is not enforced.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult

if TYPE_CHECKING:
    from llama_cpp import Llama

_UNSET: Any = object()


@dataclass(frozen=True)
class ChatHandler:
    """A llama-cpp-python chat handler rendering through chatcaps; make one with `chat_handler(...)`."""

    template: ChatTemplate | None = None
    """None: the template in the loaded model's GGUF."""
    reasoning: Intent = None
    template_args: Mapping[str, Any] = field(default_factory=dict)

    def template_for(self, llama: Llama) -> ChatTemplate:
        """The template this handler renders with for `llama`."""
        return self.template if self.template is not None else _gguf_template(os.fspath(llama.model_path))

    def render(
        self,
        llama: Llama,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        reasoning: Intent = _UNSET,
        template_args: Mapping[str, Any] | None = None,
    ) -> tuple[list[int], RenderResult]:
        """The prompt's token ids for `llama` and the render they came from (what `__call__` sends)."""
        template = self.template_for(llama)
        result = template.render(
            messages,
            tools=tools,
            reasoning=self.reasoning if reasoning is _UNSET else reasoning,
            template_args={**self.template_args, **(template_args or {})},
        )
        ids = llama.tokenize(result.prompt.encode("utf-8"), add_bos=not template.caps.emits_bos, special=True)
        return ids, result

    def __call__(
        self,
        *,
        llama: Llama,
        messages: Sequence[Mapping[str, Any]],
        functions: Sequence[Mapping[str, Any]] | None = None,
        function_call: Any = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        tool_choice: Any = None,
        stream: bool = False,
        response_format: Mapping[str, Any] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        grammar: Any = None,
        reasoning: Intent = _UNSET,
        template_args: Mapping[str, Any] | None = None,
        **completion_kwargs: Any,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """Render, complete, split: the `LlamaChatCompletionHandler` protocol, plus `reasoning=` and
        `template_args=` for a direct call. Sampling parameters go to `Llama.create_completion` unchanged."""
        from llama_cpp import llama_chat_format

        if tools is None and functions is not None:  # the legacy OpenAI field, converted as llama-cpp-python does
            tools = [{"type": "function", "function": function} for function in functions]
        ids, result = self.render(llama, messages, tools=tools, reasoning=reasoning, template_args=template_args)
        if response_format is not None and response_format.get("type") == "json_object":
            grammar = llama_chat_format._grammar_for_response_format(cast(Any, response_format), verbose=llama.verbose)
        completion = llama.create_completion(
            prompt=ids,
            stream=stream,
            logprobs=top_logprobs if logprobs else None,
            grammar=grammar,
            **completion_kwargs,
        )
        # llama-cpp-python's own conversion (the dicts it returns everywhere), then the split on top.
        chat: Any = llama_chat_format._convert_completion_to_chat(completion, stream=stream)
        if stream:
            return _split_chunks(chat, result)
        message = chat["choices"][0]["message"]
        message.update(result.parse_output(message["content"] or "").to_message())
        return cast(dict[str, Any], chat)


def chat_handler(
    template: ChatTemplate | None = None,
    *,
    reasoning: Intent = None,
    template_args: Mapping[str, Any] | None = None,
) -> ChatHandler:
    """A handler for `Llama(..., chat_handler=...)`: `template` (default: the model's own, from its GGUF) rendered
    through chatcaps with this reasoning intent and these extra template variables."""
    return ChatHandler(template, reasoning, dict(template_args or {}))


@lru_cache(maxsize=16)
def _gguf_template(model_path: str) -> ChatTemplate:
    return ChatTemplate.from_gguf(model_path)


def _split_chunks(chunks: Iterator[dict[str, Any]], result: RenderResult) -> Iterator[dict[str, Any]]:
    """llama-cpp-python's chat chunks with each `content` delta split into `reasoning_content` / `content` deltas."""
    split = _StreamSplit(result)
    for chunk in chunks:
        choice = chunk["choices"][0]
        delta = choice["delta"]
        if "role" not in delta:
            finished = choice["finish_reason"] is not None
            choice["delta"] = split.feed(delta.get("content") or "", final=finished)
        yield chunk


class _StreamSplit:
    """`parse_output` over the text so far, sending on only what more text cannot change.

    Held back: everything while the text could still be the start of the opening marker, and any tail that could be
    the start of the closing marker. What `parse_output` returns then only ever grows, so the deltas join up to the
    same reasoning and content as the whole reply parsed at once.
    """

    def __init__(self, result: RenderResult) -> None:
        self.result = result
        self.start = result.reasoning_markers.get("start") or ""
        self.end = result.reasoning_markers.get("end") or ""
        self.text = ""
        self.sent = {"reasoning_content": "", "content": ""}

    def feed(self, piece: str, *, final: bool = False) -> dict[str, str]:
        self.text += piece
        parsed = self.result.parse_output(self.text if final else self.text[: len(self.text) - self._held()])
        delta = {}
        for key, value in (("reasoning_content", parsed.reasoning_content or ""), ("content", parsed.content)):
            if len(value) > len(self.sent[key]) and value.startswith(self.sent[key]):
                delta[key] = value[len(self.sent[key]) :]
                self.sent[key] = value
        return delta

    def _held(self) -> int:
        opening = self.text.lstrip()
        if self.start and not self.result.starts_in_reasoning and self.start.startswith(opening):
            return len(self.text)
        if self.end:
            for size in range(min(len(self.end) - 1, len(self.text)), 0, -1):
                if self.end.startswith(self.text[-size:]):
                    return size
        return 0
