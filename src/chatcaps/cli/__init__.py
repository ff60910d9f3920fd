"""The `chatcaps` command line.

    chatcaps detect SOURCE [--json | --response-template]     every Caps field, as tables or as Caps JSON
    chatcaps render SOURCE --messages FILE [--tools FILE] [--reasoning low] [--report] [--json]
    chatcaps zoo [DIR] [--markdown | --json | --html OUT]     the caps matrix over a folder of templates
    chatcaps diff SOURCE [--mode raw|polyfills|both] [--json] jinja2 vs minijinja on the test contexts
    chatcaps serve (--upstream URL | --model DIR) [--port N]   OpenAI and Anthropic endpoints (docs/serve.md)
    chatcaps playground [SOURCE] [--playground-dir DIR]       the playground page alone, no model (docs/serve.md)

SOURCE is a template file (.jinja or any text), a model folder, a tokenizer_config.json, a .gguf file, a Mistral
tokenizer file (tekken.json, tokenizer.model.v*: its encoder), a Hub repo id (org/name, read from the Hugging Face
cache first) or a llama-server URL (http://host:port, read from /props); `--encoder NAME` stands for it.
Exit codes: 0 ok, 1 `diff` found a difference, 2 usage, 3 a chatcaps error (source, template or input), 130 Ctrl-C,
141 stdout closed early (`| head`); errors go to stderr in one line, a template error's line and span under it
(`TemplateError.pointer`). rich is imported only by the commands that draw
tables or progress bars, so the machine outputs (--json, --markdown, prompts) do not pay for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from chatcaps import __version__
from chatcaps.cli import detect, diff, render, serve, zoo
from chatcaps.cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_DIFFER,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Parser,
    error_text,
)
from chatcaps.errors import ChatcapsError, TemplateError

__all__ = ["EXIT_DIFFER", "EXIT_ERROR", "EXIT_USAGE", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="chatcaps",
        description="Find what a chat template can do, and render one request shape.",
        epilog="exit codes: 0 ok, 1 diff found differences, 2 usage, 3 source/template/input error, 130 Ctrl-C, "
        "141 stdout closed early",
    )
    parser.add_argument("--version", action="version", version=f"chatcaps {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    detect.add_parser(commands)
    render.add_parser(commands)
    zoo.add_parser(commands)
    diff.add_parser(commands)
    serve.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        code: int = args.run(args)
    except SystemExit as exit_:  # argparse: --help, --version and usage errors
        return EXIT_USAGE if isinstance(exit_.code, str) else exit_.code or 0
    except ChatcapsError as error:
        pointer = error.pointer() if isinstance(error, TemplateError) else ""
        print(f"chatcaps: error: {error_text(error)}" + (f"\n{pointer}" if pointer else ""), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("chatcaps: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code
