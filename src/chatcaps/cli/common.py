"""What every subcommand shares: exit codes, reading SOURCE, the source options, JSON and table output."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

import orjson

from chatcaps import encoders, sources
from chatcaps.engines import ENGINE_NAMES, Limits
from chatcaps.errors import InputError
from chatcaps.render import ChatTemplate
from chatcaps.sources import TemplateSource
from chatcaps.transport import is_server_url

if TYPE_CHECKING:
    from rich.console import Console

EXIT_DIFFER = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
_HUB_ID = re.compile(r"\w[\w.-]*/\w[\w.-]*")
_FILE_SUFFIXES = frozenset({".jinja", ".j2", ".json", ".gguf", ".txt"})
_UNWRAPPED = 100_000
"""Console width off a terminal: wide enough that no table cell wraps."""


def load_source(spec: str, *, name: str | None = None, revision: str | None = None) -> TemplateSource:
    """Read SOURCE by what it is: a server URL, a folder, a file (template, JSON config or GGUF), else a Hub repo id.

    `name` picks one of several templates (a model folder's, a config's, a GGUF's, a Hub repo's or a server's);
    `revision` is a Hub branch, tag or commit.
    """
    is_url = is_server_url(spec)
    path = Path(spec)
    is_hub = not (is_url or path.exists() or path.suffix in _FILE_SUFFIXES) and bool(_HUB_ID.fullmatch(spec))
    if revision is not None and not is_hub:
        raise InputError(f"{spec}: --revision applies to Hub repo ids only")
    if is_url:
        return sources.from_llama_server(spec, name=name)
    if path.is_dir():
        return sources.from_dir(path, name=name)
    if path.is_file():
        if sources.is_mistral_tokenizer(path):
            if name is not None:
                raise InputError(f"{spec}: a Mistral tokenizer file is one encoder; --name picks among templates")
            return sources.from_mistral(path)
        if path.suffix == ".json":
            return sources.from_tokenizer_config(path, name=name)
        if path.suffix == ".gguf":
            return sources.from_gguf(path, name=name)
        if name is not None:
            raise InputError(f"{spec}: a template file holds one template; --name picks among a source's several")
        return sources.from_file(path)
    if is_hub:
        return sources.from_hub(spec, revision=revision, name=name)
    raise InputError(f"{spec}: no such file or folder, and not a Hub repo id (org/name) or an http(s):// server URL")


def template_of(args: argparse.Namespace) -> ChatTemplate:
    encoder = getattr(args, "encoder", None)  # the argument group makes it SOURCE or --encoder, one of the two
    if encoder is not None:
        source = sources.from_encoder(encoder)
    else:
        source = load_source(args.source, name=args.name, revision=args.revision)
    limits = Limits() if args.isolate is None else Limits(isolate=args.isolate)
    return ChatTemplate(source, bos_token=args.bos, eos_token=args.eos, engine=args.engine, limits=limits)


def write_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")


def make_console(*, stderr: bool = False) -> Console:
    """A rich console; off a terminal (a file, a pipe) tables are as wide as their cells unless COLUMNS says."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS") or _UNWRAPPED)
    return Console(file=stream, width=width, highlight=False, emoji=False)


def print_table(
    console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], sections: Sequence[int] = ()
) -> None:
    """A table whose cells are plain text (rich markup such as "[b]" in a template is shown, not interpreted);
    a section line is drawn after each row index in `sections`."""
    from rich.table import Table
    from rich.text import Text

    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for index, row in enumerate(rows):
        table.add_row(*(Text(cell) for cell in row), end_section=index in sections)
    console.print(Text(title))  # not the table's own title, which rich pads with spaces to the table's width
    console.print(table)


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


def source_options(parser: argparse.ArgumentParser, *, engine: bool = True, optional: bool = False) -> None:
    """SOURCE and what picks and reads it; with `engine`, --encoder instead of SOURCE and the engine's options;
    `optional`: SOURCE may be left out."""
    where = parser.add_mutually_exclusive_group(required=True) if engine else parser
    where.add_argument(
        "source",
        metavar="SOURCE",
        nargs="?" if engine or optional else None,
        help="template file, model folder, tokenizer_config.json, .gguf, Hub repo id (org/name) or llama-server URL",
    )
    if engine:
        where.add_argument(
            "--encoder",
            choices=encoders.names(),
            help="a model's prompt encoder instead of a SOURCE (a model folder holding one is read as it; mistral-*:"
            " the tokenizers mistral-common ships)",
        )
    parser.add_argument("--name", help="which named template (e.g. tool_use) when the source holds several")
    parser.add_argument("--revision", metavar="REV", help="Hub branch, tag or commit (Hub repo ids only)")
    parser.add_argument("--bos", metavar="TOKEN", help="bos_token to render with, instead of the source's")
    parser.add_argument("--eos", metavar="TOKEN", help="eos_token to render with, instead of the source's")
    if engine:
        parser.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2", help="template engine (default jinja2)")
        parser.add_argument(
            "--isolate",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="minijinja: render in a worker process with a memory cap (the default where the platform has it); "
            "--no-isolate renders in-process, faster, for templates you have vetted",
        )


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (exit 2) and no exit from `main` (it returns the code)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


Commands: TypeAlias = "argparse._SubParsersAction[Parser]"
"""Where each subcommand adds its parser."""
