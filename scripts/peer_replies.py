"""Reply texts for the peer comparison (`bench_reply.py --peers`), made by rendering, kept as data.

    CHATCAPS_ZOO=... python scripts/peer_replies.py [--check]   # writes scripts/data/peer_replies.json

For each format of scripts/data/peer_formats.json with a zoo template: the conversation [user] rendered with its
generation prompt, and [user, assistant(M)] rendered without, for a few assistant messages M (reasoning, content, one
call, two parallel calls). The model's part is the turn's render past the prompt, cut at the end of turn. Left out:
a turn that does not go on from the prompt (a message without reasoning after a prompt that opened it), a text that
holds more than one message, and the variants the format's `skip` names, with the reason. The expected message is M
as the text holds it: a field whose sentinel the template did not write (Llama 3.1 drops the content next to a call)
is expected empty, since no parser can read what is not there. Then the format's hand-written variations, with the
same generation prompt unless they give their own `prefix`. Each reply keeps the end of turn the template writes
after an assistant message (chatcaps' `end_of_turn` argument, found by rendering). Only rendered replies are stored,
never template text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from chatcaps import ChatTemplate
from chatcaps.errors import ChatcapsError
from chatcaps.reply import end_of_turn_in
from chatcaps.zoo import load_zoo

DATA = Path(__file__).resolve().parent / "data"
CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]
REASONING, CONTENT = "Zq7 plans: first <a>, then {b}.", 'Zq7 answers "yes".'


def _call(index: int, city: str, days: int) -> dict[str, Any]:
    arguments = {"city": city, "days": days}
    return {"id": f"Zq7call0{index}", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


MESSAGES: dict[str, dict[str, Any]] = {
    "content": {"content": CONTENT},
    "reasoning, content": {"reasoning_content": REASONING, "content": CONTENT},
    "content, call": {"content": CONTENT, "tool_calls": [_call(1, "Paris", 3)]},
    "reasoning, content, call": {
        "reasoning_content": REASONING,
        "content": CONTENT,
        "tool_calls": [_call(1, "Paris", 3)],
    },
    "reasoning, call": {"reasoning_content": REASONING, "content": "", "tool_calls": [_call(1, "Paris", 3)]},
    "two calls": {"content": "", "tool_calls": [_call(1, "Paris", 3), _call(2, "Oslo", 1)]},
}


def expected_of(message: dict[str, Any], text: str) -> dict[str, Any]:
    """The message as `text` holds it: reasoning and content only where the template wrote them."""
    calls = [
        {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        for call in message.get("tool_calls", ())
    ]
    return {
        "reasoning_content": REASONING if REASONING in text and "reasoning_content" in message else None,
        "content": CONTENT if CONTENT in text else "",
        "tool_calls": calls,
    }


def rendered_cases(spec: dict[str, Any], template: ChatTemplate, tools: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """The generation prompt the template writes, and the rendered cases of one format."""
    given = tools if spec["tools"] else None
    try:
        prompt = template.render(CHAT, tools=given, reasoning=spec["intent"]).prompt
        bare = template.render(CHAT, tools=given, reasoning=spec["intent"], add_generation_prompt=False).prompt
    except ChatcapsError as error:
        raise SystemExit(f"{spec['template']}: the prompt does not render: {error}") from error
    generation_prompt = prompt[len(bare) :] if prompt.startswith(bare) else prompt
    content_turn = template.render(
        [*CHAT, {"role": "assistant", "content": CONTENT}], reasoning=spec["intent"], add_generation_prompt=False
    ).prompt
    end = end_of_turn_in(content_turn, CONTENT)
    cases, seen = [], set()
    for name, message in MESSAGES.items():
        if ("tool_calls" in message) != spec["tools"] or f"rendered: {name}" in spec.get("skip", {}):
            continue
        try:
            turn = template.render(
                [*CHAT, {"role": "assistant", **message}],
                tools=given,
                reasoning=spec["intent"],
                add_generation_prompt=False,
            ).prompt
        except ChatcapsError:
            continue
        if not turn.startswith(prompt):
            continue  # the turn does not go on from the generation prompt: no model given that prompt writes it
        text = turn[len(prompt) :]
        if end and end in text:
            text, rest = text[: text.index(end) + len(end)], text[text.index(end) + len(end) :]
            if rest.strip():
                continue  # more than one message
        expected = expected_of(message, text)
        if text in seen or (REASONING not in text and CONTENT not in text and not expected["tool_calls"]):
            continue
        seen.add(text)
        cases.append({"variant": f"rendered: {name}", "text": text, "expected": expected, "end_of_turn": end})
    return generation_prompt, cases


def main() -> None:
    config = json.loads((DATA / "peer_formats.json").read_text("utf-8"))
    zoo = {entry.path.name: entry for entry in load_zoo()}
    out = []
    for spec in config["formats"]:
        prefix, cases, end = "", list[Any](), None
        if spec["template"]:
            entry = zoo[spec["template"]]
            template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
            prefix, cases = rendered_cases(spec, template, config["tools"])
            end = end_of_turn_in(
                template.render([*CHAT, {"role": "assistant", "content": CONTENT}], add_generation_prompt=False).prompt,
                CONTENT,
            )
        cases += [{"variant": variation["name"], **variation, "end_of_turn": end} for variation in spec["variations"]]
        for case in cases:
            case.pop("name", None)
            out.append({"format": spec["format"], "prefix": case.pop("prefix", prefix), **case})
    path, text = DATA / "peer_replies.json", json.dumps({"cases": out}, indent=1, ensure_ascii=False) + "\n"
    if "--check" in sys.argv[1:]:
        if path.read_text("utf-8") != text:
            raise SystemExit(f"{path} is not what the zoo renders now: run scripts/peer_replies.py")
        print(f"{path}: up to date ({len(out)} replies)")
        return
    path.write_text(text, "utf-8")
    print(f"{len(out)} replies over {len(config['formats'])} formats -> {path}")


if __name__ == "__main__":
    main()
