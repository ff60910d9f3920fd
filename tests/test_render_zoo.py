"""`ChatTemplate.render` over the whole zoo: every context through every template with polyfills on, on both engines;
polyfills off equal to the raw render; and a reviewed snapshot of prompts for one template per reasoning mechanism."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from chatcaps import POLYFILLS, ChatTemplate, InputError, TemplateRenderError
from chatcaps.contexts import Context, metadata_failures
from chatcaps.engines import ENGINE_NAMES, EngineName
from chatcaps.engines.builtins import pinned_clock
from chatcaps.errors import ChatcapsError
from chatcaps.probes import PINNED_NOW
from chatcaps.zoo import ZooTemplate

EXEMPTIONS: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "render_exemptions.json").read_text("utf-8"))

SNAPSHOT_TEMPLATES = {
    "llamacpp__Qwen-Qwen3-0.6B.jinja": "reasoning_content field, enable_thinking toggle",
    "llamacpp__openai-gpt-oss-120b.jinja": "thinking field, reasoning_effort levels",
    "llamacpp__ByteDance-Seed-OSS.jinja": "thinking_budget",
    "llamacpp__NVIDIA-Nemotron-Nano-v2.jinja": "/no_think system flag",
    "llamacpp__deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "inline, forced open, no switch (prefill)",
    "llamacpp__deepseek-ai-DeepSeek-V3.1.jinja": "thinking toggle, off by default",
    "llamacpp__mistralai-Ministral-3-14B-Reasoning-2512.jinja": "thinking blocks",
    "openbmb__MiniCPM3-4B.jinja": "thought field",
    "llamacpp__CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "reasoning only next to tool calls",
    "llamacpp__Kimi-K3.jinja": "effort levels without medium",
    "llamacpp__Mistral-Small-3.2-24B-Instruct-2506.jinja": "9-character call ids",
    "llamacpp__meta-llama-Llama-3.1-8B-Instruct.jinja": "one tool call per turn",
    "01-ai__Yi-1.5-6B-Chat.jinja": "no reasoning",
}
SNAPSHOT_CONTEXTS = (
    "developer",
    "intent_budget",
    "intent_low",
    "intent_off",
    "intent_on",
    "multi_turn_reasoning",
    "parallel_tool_calls",
    "tool_call_loop_reasoning",
)


def render(template: ChatTemplate, context: Context, **options: Any) -> Any:
    return template.render(
        list(context.messages),
        tools=None if context.tools is None else list(context.tools),
        reasoning=context.reasoning,  # type: ignore[arg-type]
        template_args=context.template_args,
        add_generation_prompt=context.add_generation_prompt,
        continue_final_message=context.continue_final_message,
        **options,
    )


def _renders_at_all(template: ChatTemplate) -> bool:
    """Whether the template renders the simplest canonical conversation as it is (some need a role or a kwarg of
    their own, e.g. a "functions" turn or a `guideline`: then a typed render error is the right answer)."""
    try:
        template.render_raw([{"role": "user", "content": "Hello"}], add_generation_prompt=True)
    except TemplateRenderError:
        return False
    return True


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_every_context_renders_and_holds_its_metadata(
    zoo_template: ZooTemplate, contexts: tuple[Context, ...], engine: EngineName
) -> None:
    template = ChatTemplate(
        zoo_template.read(), bos_token=zoo_template.bos_token, eos_token=zoo_template.eos_token, engine=engine
    )
    caps = template.caps.to_dict()
    renders = _renders_at_all(template)
    exemption = EXEMPTIONS.get(zoo_template.file, {})
    failures: set[str] = set()
    refused = []
    for context in contexts:
        if not renders:
            with contextlib.suppress(TemplateRenderError):
                render(template, context)
            continue  # its output is off the canonical contract: only the typed error is checked
        try:
            result = render(template, context)
        except TemplateRenderError:
            refused.append(context.name)
            continue
        if context.continue_final_message:
            final = context.messages[-1]["content"]
            assert result.prompt.rstrip().endswith(final.rstrip()), context.name
        failures.update(metadata_failures(result.prompt, caps, context.test_metadata))
    assert failures - set(exemption.get("allowed", ())) == set()
    assert refused == exemption.get("raises", [])


def _failures(template: ChatTemplate, contexts: tuple[Context, ...]) -> set[str]:
    caps = template.caps.to_dict()
    found: set[str] = set()
    for context in contexts:
        with contextlib.suppress(TemplateRenderError):  # the contexts it refuses: `raises`, checked exactly above
            found.update(metadata_failures(render(template, context).prompt, caps, context.test_metadata))
    return found


def test_exemptions_still_apply(zoo: tuple[ZooTemplate, ...], contexts: tuple[Context, ...]) -> None:
    by_file = {template.file: template for template in zoo}
    stale = []
    for file, exemption in EXEMPTIONS.items():
        if file.startswith("_"):
            continue
        seen = set().union(*(_failures(ChatTemplate(by_file[file].read(), engine=e), contexts) for e in ENGINE_NAMES))
        if exemption["allowed"] and not seen & set(exemption["allowed"]):
            stale.append(file)
    assert stale == [], "exemptions in tests/data/render_exemptions.json that no longer apply: remove them"


def test_with_every_polyfill_off_render_is_the_raw_render(
    zoo_template: ZooTemplate, contexts: tuple[Context, ...]
) -> None:
    template = ChatTemplate(zoo_template.read(), bos_token=zoo_template.bos_token, eos_token=zoo_template.eos_token)
    for context in contexts:
        try:
            raw = template.render_raw(
                list(context.messages),
                tools=None if context.tools is None else list(context.tools),
                add_generation_prompt=context.add_generation_prompt,
                continue_final_message=context.continue_final_message,
                **context.template_args,
            )
        except ChatcapsError:
            with pytest.raises(ChatcapsError):
                render(template, context, disable=POLYFILLS)
            continue
        result = render(template, context, disable=POLYFILLS)
        assert result.prompt == raw, context.name
        assert result.applied == ()


def test_rendered_prompts_snapshot(
    zoo: tuple[ZooTemplate, ...], contexts: tuple[Context, ...], snapshot: SnapshotAssertion
) -> None:
    by_file = {template.file: template for template in zoo}
    by_name = {context.name: context for context in contexts}
    with pinned_clock(PINNED_NOW):  # templates that print today's date
        rendered = _snapshot_renders(by_file, by_name)
    assert rendered == snapshot


def _snapshot_renders(by_file: dict[str, ZooTemplate], by_name: dict[str, Context]) -> dict[str, Any]:
    rendered = {}
    for file, mechanism in SNAPSHOT_TEMPLATES.items():
        source = by_file[file]
        template = ChatTemplate(source.read(), bos_token=source.bos_token, eos_token=source.eos_token)
        for name in SNAPSHOT_CONTEXTS:
            result = render(template, by_name[name])
            rendered[f"{file} | {name}"] = {
                "mechanism": mechanism,
                "prompt": result.prompt,
                "applied": [record.to_dict() for record in result.applied],
                "reasoning": result.reasoning.to_dict(),
                "generation_prompt": result.generation_prompt,
                "starts_in_reasoning": result.starts_in_reasoning,
            }
    return rendered


def test_bad_input_in_any_zoo_template_is_an_input_error(zoo_template: ZooTemplate) -> None:
    template = ChatTemplate(zoo_template.read())
    with pytest.raises(InputError) as raised:
        template.render([{"role": "user", "content": "hi"}, {"role": "robot", "content": "beep"}])
    assert (raised.value.index, raised.value.field) == (1, "role")
