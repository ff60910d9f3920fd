"""llama.cpp's parse cases read by chatcaps: fully-right counts per category and per template, and every failure.

    CHATCAPS_ZOO=... python scripts/llamacpp_replies.py [--template TEXT] [--failures] [--ratchet]

Each case of tests/data/reply/llamacpp_cases.json (scripts/llamacpp_cases.py) is run as a user would: its zoo
template as a `ChatTemplate`, a render of llama.cpp's own conversation (one user turn, "Hey there!", or the case's
messages, continued where the case continues the final message) with the case's tools and reasoning ("on" where the
case enables thinking, "off" where it disables it, else the template's default), then `result.parse_reply(text)`
(`raw=True` where the case's reasoning format is llama.cpp's default, none) and the same text fed one character at a
time through `result.reply_stream()`, its deltas merged. Both are compared with the expected message: content and
reasoning after `.strip()` (llama.cpp compares them stripped, `assert_msg_equals(..., true)`), the calls' names, their
arguments as parsed JSON, and their ids where the case gives one. A case is fully right when both are. A partial
case (`is_partial`) is compared as llama.cpp does: on the stream, not closed, and without the arguments it cut off.

Failures are labelled in tests/data/reply/llamacpp_labels.json ("chatcaps defect", "llama.cpp-only convention": a
handler's behaviour that no template shows, or "chatcaps convention": documented in docs/reply.md); the rest print as
"unlabelled". The same file lists the passing cases; `--ratchet` rewrites that list, and
tests/reply/test_llamacpp_corpus.py fails when one of them stops passing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from chatcaps import ChatTemplate, RenderResult
from chatcaps.intent import Intent
from chatcaps.zoo import ZooTemplate, load_zoo

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "reply" / "llamacpp_cases.json"
LABELS = ROOT / "tests" / "data" / "reply" / "llamacpp_labels.json"
USER = {"role": "user", "content": "Hey there!"}
"""llama.cpp's `message_user`, the conversation of every case that gives none."""
NOT_RUN = "not run: the template is not in the zoo"
KINDS = ("chatcaps defect", "llama.cpp-only convention", "chatcaps convention")


@dataclass(frozen=True)
class Outcome:
    """One case run: what differs in the batch read and in the stream ("" where right), or why it did not run."""

    case: Mapping[str, Any]
    batch: str
    stream: str

    @property
    def right(self) -> bool:
        return not self.batch and not self.stream

    @property
    def kind(self) -> str:
        """The failure's kind: the first field that differs (batch first), without the values."""
        return (self.batch or self.stream).split(":")[0]


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(CASES.read_text("utf-8"))["cases"]
    return cases


def load_labels() -> dict[str, Any]:
    """The labels file: `passing` (case ids) and `failures` (case id -> {"label": one of KINDS, "why"})."""
    labels: dict[str, Any] = json.loads(LABELS.read_text("utf-8"))
    if wrong := {case: entry["label"] for case, entry in labels["failures"].items() if entry["label"] not in KINDS}:
        raise SystemExit(f"{LABELS}: labels not among {KINDS}: {wrong}")
    return labels


def canonical(message: Mapping[str, Any]) -> dict[str, Any]:
    """A case's message (llama.cpp's fields, empty meaning absent) as chatcaps' canonical input."""
    out: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message.get("reasoning_content"):
        out["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_call_id"):
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            for call in message["tool_calls"]
        ]
    return out


def intent_of(options: Mapping[str, Any]) -> Intent:
    thinking = options.get("enable_thinking")
    return None if thinking is None else ("on" if thinking else "off")


def render(template: ChatTemplate, case: Mapping[str, Any]) -> RenderResult:
    options = case["options"]
    messages = [canonical(message) for message in case["messages"]] if case["messages"] else [USER]
    continued = bool(options.get("continue_final_message"))
    return template.render(
        messages,
        tools=case["tools"] or None,
        reasoning=intent_of(options),
        add_generation_prompt=not continued and options.get("add_generation_prompt", True),
        continue_final_message=continued,
    )


def merged(deltas: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The message a client builds from `chat.completion.chunk` deltas."""
    content, reasoning = "", ""
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        for piece in delta.get("tool_calls", ()):
            call = calls.setdefault(piece["index"], {"id": "", "name": "", "arguments": ""})
            call["id"] = piece.get("id") or call["id"]
            function = piece.get("function", {})
            call["name"] = function.get("name") or call["name"]
            call["arguments"] += function.get("arguments") or ""
    return {"content": content, "reasoning_content": reasoning, "tool_calls": [calls[i] for i in sorted(calls)]}


def difference(expected: Mapping[str, Any], got: Mapping[str, Any], partial: bool) -> str:
    """ "" where `got` is the expected message as llama.cpp compares it, else the first field that differs."""
    for field in ("reasoning_content", "content"):
        want, have = (expected[field] or "").strip(), (got[field] or "").strip()
        if want != have:
            return f"{field}: want {want!r}, got {have!r}"
    want_calls, have_calls = expected["tool_calls"], got["tool_calls"]
    if len(want_calls) != len(have_calls):
        return f"call count: want {len(want_calls)}, got {len(have_calls)} {[c['name'] for c in have_calls]}"
    for index, (want, have) in enumerate(zip(want_calls, have_calls, strict=True)):
        if want["name"] != have["name"]:
            return f"call name: call {index} want {want['name']!r}, got {have['name']!r}"
        if want["arguments"] is not None or not partial:
            try:
                arguments = json.loads(have["arguments"])
            except json.JSONDecodeError:
                arguments = have["arguments"]
            if arguments != want["arguments"]:
                return f"call arguments: call {index} want {want['arguments']!r}, got {arguments!r}"
        if "id" in want and want["id"] != have["id"]:
            return f"call id: call {index} want {want['id']!r}, got {have['id']!r}"
    return ""


def as_expected(reply: Any) -> dict[str, Any]:
    """A `Reply` in the shape `difference` compares."""
    calls = [
        {"id": call["id"], "name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        for call in reply.tool_calls
    ]
    return {"content": reply.content, "reasoning_content": reply.reasoning_content, "tool_calls": calls}


@cache
def zoo_entries() -> dict[str, ZooTemplate]:
    return {entry.file: entry for entry in load_zoo()}


@cache
def template_of(file: str) -> ChatTemplate:
    entry = zoo_entries()[file]
    return ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)


def run_case(case: Mapping[str, Any]) -> Outcome:
    """Batch and stream compared; an exception is the outcome's text (a crash is a result to report, not a stop)."""
    if case["template"] not in zoo_entries():
        return Outcome(case, NOT_RUN, "")
    options = case["options"]
    raw = options.get("reasoning_format", "none") == "none"
    partial = bool(options.get("is_partial"))
    try:
        result = render(template_of(case["template"]), case)
    except Exception as error:  # the runner reports every failure, render errors included
        return Outcome(case, f"render error: {type(error).__name__}: {error}", "")
    text = case["reply"]
    batch = ""
    if not partial:
        try:
            batch = difference(case["expected"], as_expected(result.parse_reply(text, raw=raw)), partial)
        except Exception as error:
            batch = f"parse error: {type(error).__name__}: {error}"
    try:
        stream = result.reply_stream(raw=raw)
        deltas = list(stream.initial)
        for char in text:
            deltas += stream.feed(char)
        if not partial:
            deltas += stream.close()
        streamed = difference(case["expected"], merged(deltas), partial)
    except Exception as error:
        streamed = f"stream error: {type(error).__name__}: {error}"
    return Outcome(case, batch, streamed)


def run_all(cases: Iterable[Mapping[str, Any]]) -> list[Outcome]:
    return [run_case(case) for case in cases]


COLUMNS = (*KINDS, "unlabelled", NOT_RUN)
"""The failure columns of the tables: each label, then the unlabelled failures, then the cases not run."""
HEADINGS = ("defect", "llama.cpp-only", "chatcaps convention", "unlabelled", "not run")


def label_of(outcome: Outcome, labels: Mapping[str, Any]) -> str:
    """A failure's column: not run, else its label, else unlabelled."""
    if outcome.batch.startswith(NOT_RUN):
        return NOT_RUN
    return str(labels["failures"].get(outcome.case["id"], {}).get("label", "unlabelled"))


def table(title: str, outcomes: list[Outcome], key: str, labels: Mapping[str, Any]) -> list[str]:
    """Fully right / total per `key` (worst first, then the whole corpus), and the failures by label: the table
    docs/reply.md shows."""
    rows: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        rows[str(outcome.case[key]).removeprefix("llamacpp__").removesuffix(".jinja")].append(outcome)

    def row(name: str, group: list[Outcome]) -> str:
        failed = Counter(label_of(outcome, labels) for outcome in group if not outcome.right)
        cells = [str(failed[column] or "") for column in COLUMNS]
        return f"| {name} | {sum(o.right for o in group)} / {len(group)} | {' | '.join(cells)} |"

    order = sorted(rows, key=lambda name: (sum(o.right for o in rows[name]) - len(rows[name]), name))
    lines = [f"| {title} | fully right / total | {' | '.join(HEADINGS)} |", "|---" * (len(HEADINGS) + 2) + "|"]
    return [*lines, *(row(name, rows[name]) for name in order), row("all", outcomes)]


def report(outcomes: list[Outcome], labels: Mapping[str, Any], *, failures: bool) -> list[str]:
    right = sum(outcome.right for outcome in outcomes)
    lines = [f"{right} of {len(outcomes)} cases fully right (batch and stream)", ""]
    lines += [*table("category", outcomes, "category", labels), ""]
    lines += [*table("template", outcomes, "template", labels), ""]
    failed = [outcome for outcome in outcomes if not outcome.right]
    by_label: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in failed:
        by_label[label_of(outcome, labels)].append(outcome)
    lines.append("failures by label: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(by_label.items())))
    kinds = Counter(outcome.kind for outcome in failed)
    lines.append("failures by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    if failures:
        for label, group in sorted(by_label.items()):
            lines += ["", f"## {label} ({len(group)})"]
            for outcome in group:
                why = labels["failures"].get(outcome.case["id"], {}).get("why", "")
                lines.append(f"- {outcome.case['id']} [{outcome.case['category']}] {why}")
                lines += [f"    batch:  {outcome.batch}"] if outcome.batch else []
                lines += [f"    stream: {outcome.stream}"] if outcome.stream else []
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--template", default="", help="only cases whose template name holds this text")
    parser.add_argument("--failures", action="store_true", help="list every failure, by label")
    parser.add_argument("--ratchet", action="store_true", help="write the passing cases into the labels file")
    args = parser.parse_args(argv)
    cases = [case for case in load_cases() if args.template.lower() in case["template"].lower()]
    labels = load_labels()
    outcomes = run_all(cases)
    print("\n".join(report(outcomes, labels, failures=args.failures)))
    if args.ratchet:
        passing = sorted(outcome.case["id"] for outcome in outcomes if outcome.right)
        updated = labels | {"passing": passing}
        LABELS.write_text(json.dumps(updated, indent=1, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {len(passing)} passing cases to {LABELS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
