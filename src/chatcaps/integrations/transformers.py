"""transformers adapter: `apply_chat_template` rendered through chatcaps, and `generate_chat` that reads the reply.

A thin layer: `ChatTemplate.render` does the work (polyfills, the reasoning intent), the tokenizer tokenizes, the
model generates, and `RenderResult.parse_reply` reads the reply with the template's grammar into `reasoning_content`,
`content` and `tool_calls`.

`apply_chat_template(tokenizer, messages, ...)` takes what `tokenizer.apply_chat_template` takes, plus `reasoning=`,
and returns the same types (transformers 5.23, `PreTrainedTokenizerBase.apply_chat_template`): a `str` (a list of
them for a batch) when not tokenizing; a `BatchEncoding` when tokenizing, or its `input_ids` with
`return_dict=False`. Where chatcaps changes nothing, the output equals transformers' own.

BOS: like transformers, the rendered text is tokenized with `add_special_tokens=False`, so the only BOS is the one
the template writes (`caps.emits_bos`) and a second one is never added. A template that writes none gets none, as in
transformers (llama.cpp adds the model's BOS there instead; see `chatcaps.integrations.llamacpp`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from inspect import isfunction, ismethod
from typing import TYPE_CHECKING, Any, cast

from chatcaps import sources
from chatcaps.errors import InputError
from chatcaps.hook import message
from chatcaps.intent import Intent
from chatcaps.output import ParsedOutput
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.reply import Reply
from chatcaps.wire import openai

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Messages = Sequence[Mapping[str, Any]]
Tool = Mapping[str, Any] | Callable[..., Any]
_TOOL_USE = "tool_use"
_UNSUPPORTED = ("documents", "return_assistant_tokens_mask", "sanitize_control_tokens")
"""transformers arguments chatcaps' render has no counterpart for: refused by name rather than sent to the template."""


def template_for(
    tokenizer: PreTrainedTokenizerBase, chat_template: str | None = None, *, tools: Sequence[Tool] | None = None
) -> ChatTemplate:
    """The `ChatTemplate` transformers would render with (`get_chat_template`): `chat_template` as a template name or
    text, else the tokenizer's template ("tool_use" when tools are given and it has one), with its bos/eos tokens.

    Compiled once per (text, bos, eos) and shared, so repeated calls neither recompile nor re-detect.
    """
    named = tokenizer.chat_template if isinstance(tokenizer.chat_template, Mapping) else {}
    if chat_template is not None and chat_template not in named:
        text = chat_template
    else:
        name = chat_template or (_TOOL_USE if tools is not None and _TOOL_USE in named else None)
        text = sources.from_tokenizer(tokenizer, name=name).text
    return _compiled(text, _token(tokenizer.bos_token), _token(tokenizer.eos_token))


@lru_cache(maxsize=64)
def _compiled(text: str, bos_token: str, eos_token: str) -> ChatTemplate:
    return ChatTemplate(
        sources.from_str(text, name="tokenizer.chat_template"), bos_token=bos_token, eos_token=eos_token
    )


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    *,
    tools: Sequence[Tool] | None = None,
    reasoning: Intent = None,
    chat_template: str | None = None,
    tokenize: bool = False,
    return_dict: bool = True,
    return_tensors: str | None = None,
    add_generation_prompt: bool | None = None,
    continue_final_message: bool = False,
    padding: bool | str = False,
    truncation: bool = False,
    max_length: int | None = None,
    tokenizer_kwargs: Mapping[str, Any] | None = None,
    **template_args: Any,
) -> tuple[Any, RenderResult]:
    """`apply_chat_template` for one conversation, returning also the `RenderResult` (what was changed, how to read
    the reply: `starts_in_reasoning`, `reasoning_markers`, `parse_output`)."""
    outputs, results = _apply(
        tokenizer,
        [messages],
        tools=tools,
        reasoning=reasoning,
        chat_template=chat_template,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        template_args=template_args,
    )
    output = _encode(
        tokenizer,
        outputs[0],
        tokenize=tokenize,
        return_dict=return_dict,
        return_tensors=return_tensors,
        padding=padding,
        truncation=truncation,
        max_length=max_length,
        tokenizer_kwargs=tokenizer_kwargs,
    )
    return output, results[0]


def apply_chat_template(
    tokenizer: PreTrainedTokenizerBase,
    conversation: Messages | Sequence[Messages],
    *,
    tools: Sequence[Tool] | None = None,
    reasoning: Intent = None,
    chat_template: str | None = None,
    tokenize: bool = False,
    return_dict: bool = True,
    return_tensors: str | None = None,
    add_generation_prompt: bool | None = None,
    continue_final_message: bool = False,
    padding: bool | str = False,
    truncation: bool = False,
    max_length: int | None = None,
    tokenizer_kwargs: Mapping[str, Any] | None = None,
    **template_args: Any,
) -> Any:
    """A drop-in for `tokenizer.apply_chat_template` that renders through chatcaps (one conversation or a batch).

    Differences, on purpose: `reasoning=` is the chatcaps reasoning intent; `tokenize` defaults to False and the
    generation prompt is added unless `continue_final_message` is set (transformers: `tokenize=True`,
    `add_generation_prompt=False`). Any other keyword goes to the template, as in transformers.
    """
    batched = bool(conversation) and not isinstance(conversation[0], Mapping)
    conversations = cast("list[Messages]", list(conversation) if batched else [conversation])
    prompts, _ = _apply(
        tokenizer,
        conversations,
        tools=tools,
        reasoning=reasoning,
        chat_template=chat_template,
        add_generation_prompt=add_generation_prompt,
        continue_final_message=continue_final_message,
        template_args=template_args,
    )
    return _encode(
        tokenizer,
        prompts if batched else prompts[0],
        tokenize=tokenize,
        return_dict=return_dict,
        return_tensors=return_tensors,
        padding=padding,
        truncation=truncation,
        max_length=max_length,
        tokenizer_kwargs=tokenizer_kwargs,
    )


def _apply(
    tokenizer: PreTrainedTokenizerBase,
    conversations: Sequence[Messages],
    *,
    tools: Sequence[Tool] | None,
    reasoning: Intent,
    chat_template: str | None,
    add_generation_prompt: bool | None,
    continue_final_message: bool,
    template_args: Mapping[str, Any],
) -> tuple[list[str], list[RenderResult]]:
    refused = [name for name in _UNSUPPORTED if template_args.get(name)]
    if refused:
        raise InputError(f"{', '.join(refused)}: not supported by chatcaps' apply_chat_template")
    if not isinstance(continue_final_message, bool):
        raise InputError("continue_final_message: chatcaps takes True or False (no field name)")
    if add_generation_prompt and continue_final_message:
        raise InputError("continue_final_message and add_generation_prompt are not compatible: use one or the other")
    template = template_for(tokenizer, chat_template, tools=tools)
    schemas = None if tools is None else [_tool_schema(tool, index) for index, tool in enumerate(tools)]
    generation_prompt = not continue_final_message if add_generation_prompt is None else add_generation_prompt
    args = {name: value for name, value in template_args.items() if name not in _UNSUPPORTED}  # left at defaults
    results = [
        template.render(
            messages,
            tools=schemas,
            reasoning=reasoning,
            template_args=args,
            add_generation_prompt=generation_prompt,
            continue_final_message=continue_final_message,
        )
        for messages in conversations
    ]
    return [result.prompt for result in results], results


def _encode(
    tokenizer: PreTrainedTokenizerBase,
    prompts: str | list[str],
    *,
    tokenize: bool,
    return_dict: bool,
    return_tensors: str | None,
    padding: bool | str,
    truncation: bool,
    max_length: int | None,
    tokenizer_kwargs: Mapping[str, Any] | None,
) -> Any:
    """Tokenize as transformers' apply_chat_template does: the template's special tokens only, nothing added."""
    if not tokenize:
        return prompts
    encoding = tokenizer(
        prompts,
        padding=padding,
        truncation=truncation,
        max_length=max_length,
        add_special_tokens=False,
        return_tensors=return_tensors,
        **dict(tokenizer_kwargs or {}),
    )
    return encoding if return_dict else encoding["input_ids"]


def _tool_schema(tool: Tool, index: int) -> Mapping[str, Any]:
    """A tool as transformers passes it: a dict as is, a function as its JSON schema (from its docstring)."""
    if isinstance(tool, Mapping):
        return tool
    if isfunction(tool) or ismethod(tool):
        from transformers.utils.chat_template_utils import get_json_schema

        schema: Mapping[str, Any] = get_json_schema(tool)
        return schema
    raise InputError(f"tools[{index}]: a tool is a JSON schema dict or a Python function, not {type(tool).__name__}")


def _token(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class ChatGeneration:
    """One generated reply, read, with the render that produced its prompt and how long generating took."""

    reply: Reply
    """The reply read with the template's grammar (`RenderResult.parse_reply`): reasoning, content, tool calls,
    warnings."""
    render: RenderResult
    text: str
    """The generated text, special tokens kept (so markers survive), the end-of-sequence token cut off."""
    token_ids: tuple[int, ...]
    """The generated token ids, the end-of-sequence token included when one came."""
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    """Wall time of `model.generate`."""
    finish_reason: openai.FinishReason
    """"stop" (an eos id), "length" (`max_new_tokens`), or "tool_calls" where the model stopped after calling tools,
    as OpenAI reports it (`wire.openai.finish_reason`)."""

    @property
    def message(self) -> dict[str, Any]:
        """The reply as OpenAI's assistant message (`hook.message`): `content` (null where the model only called
        tools), `reasoning_content` when the model reasoned, `tool_calls` when it called tools."""
        return message(self.reply)

    @property
    def parsed(self) -> ParsedOutput:
        """The earlier reasoning/content split, kept for existing callers: `reply`'s content and reasoning, and
        whether the reasoning block closed (the reply is read once, by `parse_reply`)."""
        return ParsedOutput(
            self.reply.content, self.reply.reasoning_content, reasoning_finished=self.reply.finish == "complete"
        )

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0


def generate_chat(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    messages: Messages,
    *,
    tools: Sequence[Tool] | None = None,
    reasoning: Intent = None,
    max_new_tokens: int = 256,
    device: Any = None,
    move_model: bool = False,
    chat_template: str | None = None,
    template_args: Mapping[str, Any] | None = None,
    **generate_kwargs: Any,
) -> ChatGeneration:
    """Render with chatcaps, generate, and read the reply with the template's grammar (`RenderResult.parse_reply`).

    Inputs go to `device` (default: the model's device); `move_model=True` moves the model there first. Generation
    is greedy unless `generate_kwargs` (passed to `model.generate`) or the model's generation config say otherwise.
    """
    encoding, result = render_chat(
        tokenizer,
        messages,
        tools=tools,
        reasoning=reasoning,
        chat_template=chat_template,
        tokenize=True,
        return_tensors="pt",
        **dict(template_args or {}),
    )
    if device is not None and move_model:
        model = model.to(device)
    inputs = encoding.to(model.device if device is None else device)
    prompt_tokens = int(inputs["input_ids"].shape[1])
    started = time.perf_counter()
    generate = cast("Callable[..., Any]", model.generate)  # GenerationMixin's, which mypy does not see here
    output = generate(**inputs, max_new_tokens=max_new_tokens, **generate_kwargs)
    seconds = time.perf_counter() - started
    sequences = output if not hasattr(output, "sequences") else output.sequences
    token_ids = tuple(int(token) for token in sequences[0, prompt_tokens:])
    stops = eos_ids(model, tokenizer)
    end = next((index for index, token in enumerate(token_ids) if token in stops), None)
    if end is not None:
        token_ids = token_ids[: end + 1]
    text = cast(str, tokenizer.decode(list(token_ids[:end]), skip_special_tokens=False))
    reply = result.parse_reply(text)
    server: openai.ServerFinish = "length" if end is None else "stop"
    return ChatGeneration(
        reply=reply,
        render=result,
        text=text,
        token_ids=token_ids,
        prompt_tokens=prompt_tokens,
        completion_tokens=len(token_ids),
        seconds=seconds,
        finish_reason=openai.finish_reason(server, called_tools=bool(reply.tool_calls)),
    )


def eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Every id that ends generation: the generation config's eos ids (one or a list) and the tokenizer's eos.

    `model.generate` stops at the config's; a chat model's end of turn is often only the tokenizer's (or only the
    config's), so whoever reads generated ids (`generate_chat`, `chatcaps serve --model`) cuts at either."""
    config = getattr(model, "generation_config", None)
    configured = getattr(config, "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured]
    return frozenset(int(token) for token in [*ids, tokenizer.eos_token_id] if token is not None)
