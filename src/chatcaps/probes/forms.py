"""The forms a reasoning text can take in a message, and how probes put a sentinel into each."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from chatcaps.probes.prober import Conversation
from chatcaps.vocab import BLOCK_FORMS, FIELD_FORMS, REASONING_CONTENT, ReasoningFormat

PROBED_FORMS: tuple[ReasoningFormat, ...] = (*FIELD_FORMS, *BLOCK_FORMS)

_CLOSING_TAG = re.compile(r"(</[^<>\s]+>|\[/[^\[\]\s]+\])")


@dataclass(frozen=True)
class Form:
    """Where a message's reasoning goes: a field, a content block, inline between markers, or nowhere."""

    name: ReasoningFormat
    start: str = ""
    end: str = ""


NO_REASONING = Form("none")


def place(messages: Conversation, form: Form, *, content: bool = True, absent: bool = False) -> Conversation:
    """A copy of `messages` with each `reasoning_content` moved into `form`; `content=False` blanks the answers
    (`absent`: leaves a field form's content key out instead)."""
    placed: Conversation = orjson.loads(orjson.dumps(messages))
    for message in placed:
        if REASONING_CONTENT not in message:
            continue
        reasoning = message.pop(REASONING_CONTENT)
        answer = message.get("content", "") if content else ""
        if form.name in BLOCK_FORMS:
            block_type, key = BLOCK_FORMS[form.name]
            blocks: list[dict[str, Any]] = [{"type": block_type, key: reasoning}]
            message["content"] = [*blocks, {"type": "text", "text": answer}] if answer else blocks
        elif form.name == "inline":
            message["content"] = f"{form.start}{reasoning}{form.end}{answer}"
        else:
            message["content"] = answer
            if absent and not answer:
                del message["content"]
            if form.name != "none":
                message[form.name] = reasoning
    return placed


def opening_of(end: str) -> str | None:
    """The opening tag a closing tag implies ("</think>" -> "<think>", "[/THINK]" -> "[THINK]"); a proposal only."""
    if end.startswith("</") or end.startswith("[/"):
        return end[0] + end[2:]
    return None


def closing_of(start: str) -> str | None:
    """The closing tag an opening tag implies ("<think>" -> "</think>"); a proposal only."""
    if re.fullmatch(r"<[^</>\s]+>|\[[^\[/\]\s]+\]", start):
        return start[0] + "/" + start[1:]
    return None


def split_block(text: str) -> tuple[str | None, str | None]:
    """Split rendered block text ("<think>\\n\\n</think>", "<think>") into its opening and closing markers."""
    stripped = text.strip()
    if not stripped:
        return None, None
    tags = list(_CLOSING_TAG.finditer(stripped))
    if not tags or tags[-1].end() != len(stripped) or tags[-1].start() == 0:
        return stripped, None
    closing = tags[-1].group()
    before = stripped[: tags[-1].start()].strip()
    implied = opening_of(closing)
    if implied and before.endswith(implied):
        return implied, closing
    return (before.split()[-1] if before else None), closing


def leading_closing_tag(text: str) -> str | None:
    """The marker right after a reasoning text that has no answer after it: a closing tag, else the first word."""
    stripped = text.strip()
    if not stripped:
        return None
    match = _CLOSING_TAG.match(stripped)
    return match.group() if match else stripped.split()[0]
