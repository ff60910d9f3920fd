"""`chatcaps render SOURCE --messages FILE ...`: the prompt a template renders for a conversation, through the
polyfills."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from chatcaps.cli.common import Commands, source_options, template_of, write_json
from chatcaps.errors import InputError
from chatcaps.intent import Intent, validate_intent
from chatcaps.matrix import (
    report_lines,
)
from chatcaps.polyfills import POLYFILLS
from chatcaps.request import ChatRequest
from chatcaps.vocab import TIERS


def _read_json(path: str, what: str) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except OSError as error:
        raise InputError(f"{what} {path}: {error.strerror or error}") from error
    except orjson.JSONDecodeError as error:
        raise InputError(f"{what} {path}: not valid JSON: {error}") from error


def _reasoning_arg(value: str) -> Intent | str:
    """--reasoning: a tier, off/on, a token budget, or "default" (the template's own default)."""
    if value == "default" or value in ("off", "on", *TIERS):
        return value
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{value!r}: use off, on, low, medium, high, default or a token budget")


def _template_args(args: argparse.Namespace, base: Mapping[str, Any]) -> dict[str, Any]:
    """The context's template_args, then --template-args (JSON text or a file), then each --arg key=value."""
    merged = dict(base)
    if args.template_args is not None:
        text = args.template_args.strip()
        if text.startswith("{"):
            try:
                given = orjson.loads(text)
            except orjson.JSONDecodeError as error:
                raise InputError(f"--template-args: not valid JSON: {error}") from error
        else:
            given = _read_json(args.template_args, "--template-args file")
        if not isinstance(given, dict):
            raise InputError(f"--template-args must be a JSON object, got {type(given).__name__}")
        merged.update(given)
    for pair in args.arg:
        key, equals, raw = pair.partition("=")
        if not key or not equals:
            raise InputError(f"--arg {pair!r}: expected KEY=VALUE")
        try:
            merged[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            merged[key] = raw  # not JSON: a plain string
    return merged


def _read_request(args: argparse.Namespace) -> ChatRequest:
    data = _read_json(args.messages, "--messages file")
    if isinstance(data, dict):  # a contexts/*.json file: messages, tools, flags and intent together
        messages = data.get("messages", [])
        tools = data.get("tools")
        base_args = data.get("template_args") or {}
        reasoning = data.get("reasoning")
        generation_prompt = bool(data.get("add_generation_prompt", True))
        continue_final = bool(data.get("continue_final_message", False))
    else:
        messages, tools, base_args, reasoning, generation_prompt, continue_final = data, None, {}, None, True, False
    if not isinstance(base_args, dict):
        raise InputError(f"--messages file {args.messages}: template_args must be a JSON object")
    if args.tools:
        tools = _read_json(args.tools, "--tools file")
    if args.reasoning is not None:
        reasoning = None if args.reasoning == "default" else args.reasoning
    return ChatRequest(
        messages=messages,
        tools=tools,
        template_args=_template_args(args, base_args),
        reasoning=validate_intent(reasoning),
        add_generation_prompt=args.generation_prompt and generation_prompt,
        continue_final_message=args.continue_final_message or continue_final,
    )


def _render(args: argparse.Namespace) -> int:
    template = template_of(args)
    request = _read_request(args)
    result = template.render_request(request, disable=POLYFILLS if args.no_polyfills else ())
    if args.json:
        write_json(result.to_dict())
        return 0
    prompt = result.prompt
    sys.stdout.write(prompt if prompt.endswith("\n") else prompt + "\n")
    sys.stdout.flush()
    if args.report:
        sys.stderr.write("\n".join(report_lines(result)) + "\n")
    return 0


def add_parser(commands: Commands) -> None:
    render = commands.add_parser("render", help="the prompt a template renders for a conversation, through polyfills")
    source_options(render)
    render.add_argument(
        "--messages", required=True, metavar="FILE", help="JSON file: a list of messages, or a contexts/*.json file"
    )
    render.add_argument("--tools", metavar="FILE", help="JSON file with an OpenAI tool list")
    intent_or_raw = render.add_mutually_exclusive_group()
    intent_or_raw.add_argument(
        "--reasoning",
        type=_reasoning_arg,
        metavar="INTENT",
        help="reasoning intent: off, on, low, medium, high, a token budget, or default",
    )
    intent_or_raw.add_argument(
        "--no-polyfills", action="store_true", help="render the input as is (render_raw's prompt), with no intent"
    )
    render.add_argument("--template-args", metavar="JSON|FILE", help="template kwargs: a JSON object or a JSON file")
    render.add_argument(
        "--arg", action="append", default=[], metavar="KEY=VALUE", help="one template kwarg (VALUE as JSON, else text)"
    )
    render.add_argument(
        "--no-generation-prompt", dest="generation_prompt", action="store_false", help="omit the assistant header"
    )
    render.add_argument("--continue-final-message", action="store_true", help="continue the last assistant message")
    render.add_argument("--report", action="store_true", help="print what was done (polyfills, reasoning) to stderr")
    render.add_argument("--json", action="store_true", help="print the prompt and the report as JSON")
    render.set_defaults(run=_render)
