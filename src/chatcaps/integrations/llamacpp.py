"""llama-cpp-python adapter: a chat handler that renders through chatcaps and reads the reply with the template's
grammar: `reasoning_content`, `content` and `tool_calls`.

    from llama_cpp import Llama
    from chatcaps.integrations.llamacpp import chat_handler

    llm = Llama(model_path="model.gguf", chat_handler=chat_handler(reasoning="off"))
    reply = llm.create_chat_completion(messages=[{"role": "user", "content": "Hi"}])
    reply["choices"][0]["message"]  # {"role": "assistant", "content": ..., "reasoning_content": ...}

The handler follows llama-cpp-python's `LlamaChatCompletionHandler` protocol (llama_chat_format.py): the template
(by default the one in the model's GGUF, with its bos/eos tokens) renders the messages through `ChatTemplate.render`
(polyfills, the reasoning intent), the prompt goes to `Llama.create_completion` as token ids, and the reply comes back
as the same OpenAI-style dict llama-cpp-python returns, its message read by `RenderResult.parse_reply` (as
`chatcaps.hook.postprocess` gives it: `finish_reason` "tool_calls" where the model called tools). With `stream=True`
the chunks carry `reasoning_content`, `content` and `tool_calls` deltas (`chatcaps.hook.PostStream`).

The reasoning intent is set per handler (`chat_handler(reasoning=...)`). llama-cpp-python 0.3.36's
`create_chat_completion` forwards only its own parameters to the handler, so for another intent per request make a
handler for it (`dataclasses.replace(handler, reasoning="high")`), or call the handler directly:
`handler(llama=llm, messages=..., reasoning="off")`.

BOS: the prompt is tokenized with special tokens parsed; llama.cpp prepends the model's BOS (when its
`tokenizer.ggml.add_bos_token` asks for one) only when the template does not write it (`caps.emits_bos`), so there is
exactly one, as in llama.cpp's own chat path.

Known limits: llama-cpp-python decodes the reply without special tokens, so a template whose reasoning markers are
control tokens in the GGUF vocabulary loses them before the split (markers that are ordinary or user-defined tokens,
like Qwen3's `<think>`, survive); the same holds for tool-call markers.

`tool_choice` "required", a named function or "none", and `response_format` (`json_object`, `json_schema`), are kept
by the grammar chatcaps derives from the template's call format (`chatcaps.reply.constraint`, docs/constrained.md),
handed to llama.cpp's sampler as a `LlamaGrammar`. "auto" stays free here: llama-cpp-python's `create_completion`
takes no lazy grammar (its triggers). A `grammar` the caller passes wins.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from chatcaps.hook import PostStream, choice
from chatcaps.intent import Intent
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply.constraint import constraint
from chatcaps.wire import openai

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
        parallel_tool_calls: bool = True,
        **completion_kwargs: Any,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """Render, complete, split: the `LlamaChatCompletionHandler` protocol, plus `reasoning=`, `template_args=`
        and `parallel_tool_calls=` for a direct call (`create_chat_completion` forwards none of them). Sampling
        parameters go to `Llama.create_completion` unchanged."""
        from llama_cpp import llama_chat_format

        if tools is None and functions is not None:  # the legacy OpenAI field, converted as llama-cpp-python does
            tools = [{"type": "function", "function": function} for function in functions]
        ids, result = self.render(llama, messages, tools=tools, reasoning=reasoning, template_args=template_args)
        if grammar is None:
            grammar = _grammar(result, tools, tool_choice, response_format, parallel_tool_calls, verbose=llama.verbose)
        completion = llama.create_completion(
            prompt=ids,
            stream=stream,
            logprobs=top_logprobs if logprobs else None,
            grammar=grammar,
            **completion_kwargs,
        )
        # llama-cpp-python's own conversion (the dicts it returns everywhere), then the reply read on top.
        chat: Any = llama_chat_format._convert_completion_to_chat(completion, stream=stream)
        if stream:
            return _reply_chunks(chat, result)
        first = chat["choices"][0]
        first.update(
            choice(result.parse_reply(first["message"]["content"] or ""), finish_reason=first["finish_reason"])
        )
        return cast(dict[str, Any], chat)


def _grammar(
    result: RenderResult,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: Any,
    response_format: Mapping[str, Any] | None,
    parallel: bool,
    *,
    verbose: bool,
) -> Any:
    """The `LlamaGrammar` that keeps the reply to `tool_choice` and `response_format` in the template's own format,
    or None where the request asks for nothing a grammar holds from the first token ("auto": lazy, which
    `create_completion` cannot take)."""
    from llama_cpp.llama_grammar import LlamaGrammar

    found = constraint(
        result.caps, tools, tool_choice, parallel=parallel, response_format=response_format, prompt=result.prompt
    )
    if found is None or found.triggers:
        return None
    return LlamaGrammar.from_string(found.grammar, verbose=verbose)


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


def _reply_chunks(chunks: Iterator[dict[str, Any]], result: RenderResult) -> Iterator[dict[str, Any]]:
    """llama-cpp-python's chat chunks with each `content` delta read by `PostStream`: `reasoning_content`, `content`
    and `tool_calls` deltas, one chunk each (`wire.openai.Chunks`, with llama-cpp-python's id, model and time; a
    chunk whose text is held back keeps an empty delta, and its logprobs); the last chunk carries the finish reason,
    "tool_calls" where the model called tools."""
    stream = PostStream(result)
    for chunk in chunks:
        encoder = openai.Chunks(chunk["id"], chunk["model"], chunk["created"])
        choice = chunk["choices"][0]
        delta = choice["delta"]
        if "role" in delta:  # llama-cpp-python's first chunk; then what the prompt wrote of the message
            yield chunk
            yield from (encoder.delta(initial) for initial in stream.initial[1:])
            continue
        finished = choice["finish_reason"]
        deltas = stream.feed(delta.get("content") or "")
        if finished is not None:
            deltas += stream.close()
            finished = stream.finish_reason(finished)
        pieces = deltas or [{}]
        for index, piece in enumerate(pieces):
            last = index == len(pieces) - 1
            logprobs = choice.get("logprobs") if index == 0 else None
            yield encoder.delta(piece, finished if last else None, logprobs=logprobs)
