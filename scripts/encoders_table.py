"""Print docs/encoders.md's side-by-side table: the zoo's Jinja templates for DeepSeek-V3.2 rendered over the
reference vectors' conversations, each against the reference encoder's prompt, case by case.

Each case's conversation is given to a template as a server gives it: the tools a system or developer message carries
as the request's `tools` (the message without them), thinking mode as the template's reasoning toggle on (from its
Caps; "no toggle" where it has none: it renders chat mode only), the model's bos/eos tokens, a generation
prompt. A cell says `same`, where the two first part (the
character offset, then the text from there: reference / template, 40 characters each), or who refuses.

    CHATCAPS_ZOO=... python scripts/encoders_table.py [--vectors ../shared/encoders]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from chatcaps import ChatTemplate, sources
from chatcaps.errors import ChatcapsError
from chatcaps.vocab import common_prefix_length
from chatcaps.zoo import load_zoo

ROOT = Path(__file__).resolve().parents[1]
FAMILY = "DeepSeek-V3.2"
SHOWN = 40


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
    try:
        prompt = template.render_raw(messages, tools=tools, add_generation_prompt=True, **kwargs)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("CHATCAPS_ENCODERS", str(ROOT.parent / "shared" / "encoders"))
    parser.add_argument("--vectors", type=Path, default=Path(default), help="the reference vectors' folder")
    args = parser.parse_args()
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
