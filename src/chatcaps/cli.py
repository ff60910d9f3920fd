"""The `chatcaps` command line.

    chatcaps render SOURCE --messages FILE [--tools FILE] [--engine minijinja] [--no-generation-prompt]

SOURCE is a template file, a model folder, a tokenizer_config.json, a .gguf file or a Hub repo id.
Exit codes: 0 ok, 2 usage, 3 template or input error; errors go to stderr in one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from chatcaps import sources
from chatcaps.engines import ENGINE_NAMES
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.render import ChatTemplate
from chatcaps.sources import TemplateSource

EXIT_TEMPLATE = 3  # usage errors exit 2, from argparse


def load_source(spec: str) -> TemplateSource:
    """Read SOURCE by what it is: a folder, a file (template, JSON config or GGUF), else a Hub repo id."""
    path = Path(spec)
    if path.is_dir():
        return sources.from_dir(path)
    if path.is_file():
        return sources.from_file(path)  # delegates .json and .gguf by suffix
    if spec.count("/") == 1 and not spec.startswith((".", "/")):
        return sources.from_hub(spec)
    raise InputError(f"{spec}: no such file or folder, and not a Hub repo id (org/name)")


def _read_json(path: str, what: str) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as error:
        raise InputError(f"{what} file {path}: {error}") from error


def _render(args: argparse.Namespace) -> int:
    template = ChatTemplate(load_source(args.source), engine=args.engine)
    conversation = _read_json(args.messages, "--messages")
    if isinstance(conversation, dict):  # a contexts/*.json file: messages, tools and flags together
        messages = conversation.get("messages", [])
        tools = conversation.get("tools")
        template_args = conversation.get("template_args", {})
        continue_final = bool(conversation.get("continue_final_message", False))
        generation_prompt = bool(conversation.get("add_generation_prompt", True))
    else:
        messages, tools, template_args, continue_final, generation_prompt = conversation, None, {}, False, True
    if args.tools:
        tools = _read_json(args.tools, "--tools")
    prompt = template.render_raw(
        messages,
        tools=tools,
        add_generation_prompt=args.generation_prompt and generation_prompt,
        continue_final_message=continue_final,
        **template_args,
    )
    sys.stdout.write(prompt)
    if not prompt.endswith("\n"):
        sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatcaps", description="Run chat templates the way inference servers do.")
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="print the prompt a template renders for a conversation")
    render.add_argument("source", help="template file, model folder, tokenizer_config.json, .gguf or Hub repo id")
    render.add_argument("--messages", required=True, help="JSON: a list of messages, or a contexts/*.json file")
    render.add_argument("--tools", help="JSON file with an OpenAI tool list")
    render.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2")
    render.add_argument(
        "--no-generation-prompt", dest="generation_prompt", action="store_false", help="omit the assistant header"
    )
    render.set_defaults(run=_render)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except ChatcapsError as error:
        print(f"chatcaps: {type(error).__name__}: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_TEMPLATE
    return code


if __name__ == "__main__":
    sys.exit(main())
