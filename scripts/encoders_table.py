"""Print docs/encoders.md's side-by-side tables: the zoo's Jinja templates for a family rendered against its reference
encoder, case by case.

DeepSeek-V3.2 (the default): over the reference vectors' conversations, each against the reference encoder's prompt.
Each case's conversation is given to a template as a server gives it: the tools a system or developer message carries
as the request's `tools` (the message without them), thinking mode as the template's reasoning toggle on (from its
Caps; "no toggle" where it has none: it renders chat mode only), the model's bos/eos tokens, a generation
prompt.

Mistral (`--family mistral`): over the repository's test contexts, each zoo template against mistral-common's
`encode_chat_completion` for the tokenizer its model family ships (`MISTRAL`; chatcaps' Mistral encoder, proven equal to
it by tests/encoders/test_mistral.py), one table per tokenizer. A context is given to both as the request: messages
(call ids shortened to 9 characters, as Mistral's formats take them), tools, generation prompt, continued final
message, template args; the templates get `<s>` / `</s>`.

A cell says `same`, where the two first part (the character offset, then the text from there: reference / template,
40 characters each), or who refuses.

    CHATCAPS_ZOO=... python scripts/encoders_table.py [--vectors ../shared/encoders] [--family mistral]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from chatcaps import ChatTemplate, sources
from chatcaps.contexts import Context, load_contexts
from chatcaps.errors import ChatcapsError
from chatcaps.polyfills.tools import short_id
from chatcaps.vocab import common_prefix_length
from chatcaps.zoo import load_zoo

ROOT = Path(__file__).resolve().parents[1]
FAMILY = "DeepSeek-V3.2"
SHOWN = 40
MISTRAL: dict[str, tuple[str, ...]] = {
    "v1": (
        "mistralai__mistral-common__v1.jinja",
        "mistralai__Mistral-7B-Instruct-v0.1.jinja",
        "mistralai__Mistral-7B-Instruct-v0.1__rev-2024.jinja",
    ),
    "v3": (
        "mistralai__mistral-common__v3.jinja",
        "mistralai__Mistral-7B-Instruct-v0.3__rev-long.jinja",
        "CISCai__Mistral-7B-Instruct-v0.3-SOTA-GGUF.jinja",
        "mistralai__Mixtral-8x22B-Instruct-v0.1.jinja",
        "mistralai__Mistral-Large-Instruct-2407.jinja",
    ),
    "tekken_240718": ("llamacpp__mistralai-Mistral-Nemo-Instruct-2407.jinja",),
    "v7": ("mistralai__mistral-common__v7.jinja", "mistralai__Mistral-Large-Instruct-2411.jinja"),
}
"""The zoo's Mistral templates by the shipped tokenizer their models use (SentencePiece v1: Mistral-7B v0.1/v0.2;
v3: Mistral-7B v0.3, Mixtral-8x22B, Mistral-Large-2407; Tekken 240718: Mistral-Nemo; SentencePiece v7:
Mistral-Large-2411). Those of versions mistral-common ships no tokenizer for (Tekken v7, v11, v13, v15) are left out."""


def _request(case: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any] | None]:
    """The case's messages without the tools they carry, and those tools as the request's."""
    tools = next((message["tools"] for message in case["messages"] if message.get("tools")), None)
    messages = [{key: value for key, value in message.items() if key != "tools"} for message in case["messages"]]
    return messages, tools


def _toggle(template: ChatTemplate) -> str | None:
    return next((control.name for control in template.caps.reasoning.controls if control.role == "toggle"), None)


def _cell(template: ChatTemplate, case: dict[str, Any]) -> str:
    messages, tools = _request(case)
    toggle = _toggle(template)
    kwargs: dict[str, Any] = {toggle: True} if toggle and case["thinking_mode"] == "thinking" else {}
    if case["thinking_mode"] == "thinking" and not toggle:
        return "no toggle"
    return _compared(lambda: template.render_raw(messages, tools=tools, add_generation_prompt=True, **kwargs), case)


def _compared(render: Callable[[], str], case: dict[str, Any]) -> str:
    """The template's render (`render`) against `case`'s reference: its `prompt`, or its `error` where it refused."""
    try:
        prompt = render()
    except ChatcapsError as error:
        said = json.dumps(str(error).splitlines()[0][:SHOWN], ensure_ascii=False)
        return "both refuse" if "error" in case else f"refuses: {type(error).__name__} {said}"
    if "error" in case:
        return "renders; the reference refuses"
    reference = case["prompt"]
    if prompt == reference:
        return "same"
    at = common_prefix_length(prompt, reference)
    shown = (json.dumps(text[at : at + SHOWN], ensure_ascii=False) for text in (reference, prompt))
    return f"at {at}: {' / '.join(shown)}"


def _mistral_case(reference: ChatTemplate, context: Context) -> tuple[dict[str, Any], Callable[[ChatTemplate], str]]:
    """The context's reference (`prompt`, or `error` where mistral-common refuses it) and how a template renders it,
    its call ids shortened to the 9 characters Mistral's formats take (as the polyfill does), so that the tool
    conversations are compared rather than refused for their ids."""
    messages = [_short_ids(message) for message in context.messages]

    def render(template: ChatTemplate) -> str:
        return template.render_raw(
            messages,
            tools=context.tools,
            add_generation_prompt=context.add_generation_prompt,
            continue_final_message=context.continue_final_message,
            **context.template_args,
        )

    try:
        return {"prompt": render(reference)}, render
    except ChatcapsError as error:
        return {"error": str(error)}, render


def _short_ids(message: dict[str, Any]) -> dict[str, Any]:
    calls = message.get("tool_calls")
    if calls:
        message = {**message, "tool_calls": [{**call, "id": short_id(str(call["id"]))} for call in calls]}
    if message.get("tool_call_id") is not None:
        message = {**message, "tool_call_id": short_id(str(message["tool_call_id"]))}
    return message


def mistral_tables() -> None:
    """One table per shipped tokenizer: the zoo's templates of its models against its encoder, context by context."""
    zoo = {entry.file: entry for entry in load_zoo()}
    for version, files in MISTRAL.items():
        reference = ChatTemplate.from_mistral(version)
        templates = {
            file: ChatTemplate(sources.from_file(zoo[file].path), bos_token="<s>", eos_token="</s>") for file in files
        }
        print(f"\n`{version}` ({reference.source.name.rsplit('/', 1)[-1]})\n")
        print("| context | " + " | ".join(f"`{file}`" for file in templates) + " |")
        print("|---|" + "---|" * len(templates))
        for context in load_contexts():
            case, render = _mistral_case(reference, context)
            cells = " | ".join(
                _compared(partial(render, template), case).replace("|", "\\|") for template in templates.values()
            )
            print(f"| {context.name} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("CHATCAPS_ENCODERS", str(ROOT.parent / "shared" / "encoders"))
    parser.add_argument("--vectors", type=Path, default=Path(default), help="the reference vectors' folder")
    parser.add_argument("--family", choices=("deepseek-v3.2", "mistral"), default="deepseek-v3.2")
    args = parser.parse_args()
    if args.family == "mistral":
        mistral_tables()
        return
    cases = json.loads((args.vectors / "deepseek-v3.2" / "cases.json").read_text("utf-8"))["encode"]
    zoo = [entry for entry in load_zoo() if FAMILY in entry.model_id]
    # The model's own special tokens (the encoder's), which a template reads as bos_token / eos_token.
    model = ChatTemplate.from_encoder("deepseek-v3.2")
    templates = {
        entry.file: ChatTemplate(sources.from_file(entry.path), bos_token=model.bos_token, eos_token=model.eos_token)
        for entry in zoo
    }
    print("| case | mode | drop_thinking | " + " | ".join(f"`{name}`" for name in templates) + " |")
    print("|---|---|---|" + "---|" * len(templates))
    for case in cases:
        cells = " | ".join(_cell(template, case).replace("|", "\\|") for template in templates.values())
        print(f"| {case['name']} | {case['thinking_mode']} | {case['drop_thinking']} | {cells} |")


if __name__ == "__main__":
    main()
