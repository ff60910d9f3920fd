"""`chatcaps diff SOURCE [--mode raw|polyfills|both] [--json]`: jinja2 vs minijinja on the test contexts."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from chatcaps.cli.common import EXIT_DIFFER, Commands, error_text, source_options, template_of, write_json
from chatcaps.contexts import Context, load_contexts
from chatcaps.engines import EngineName
from chatcaps.errors import ChatcapsError, InputError
from chatcaps.outcome import Outcome, engine_render
from chatcaps.render import ChatTemplate

_ENGINES: tuple[EngineName, EngineName] = ("jinja2", "minijinja")


@dataclass(frozen=True)
class Case:
    """One context rendered by both engines in one mode."""

    mode: str
    context: str
    outcomes: tuple[Outcome, Outcome]

    @property
    def agree(self) -> bool:
        """Equal prompts, or both engines refusing (as the parity tests count it)."""
        first, second = self.outcomes
        return (first.raised and second.raised) or (not first.raised and first.output == second.output)

    def explain(self) -> str:
        """What differs: a unified diff of the prompts, or which engine raised what."""
        first, second = self.outcomes
        if first.output is not None and second.output is not None:
            lines = difflib.unified_diff(
                first.output.splitlines(keepends=True),
                second.output.splitlines(keepends=True),
                f"{_ENGINES[0]} ({self.mode}, {self.context})",
                f"{_ENGINES[1]} ({self.mode}, {self.context})",
            )
            return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
        said = [
            f"{engine} raised {outcome.error_type}: {' '.join(str(outcome.error).split())}"
            if outcome.raised
            else f"{engine} rendered {len(outcome.output or '')} characters"
            for engine, outcome in zip(_ENGINES, self.outcomes, strict=True)
        ]
        return f"{self.mode}, {self.context}: " + "; ".join(said) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "context": self.context,
            "agree": self.agree,
            **{engine: asdict(outcome) for engine, outcome in zip(_ENGINES, self.outcomes, strict=True)},
            "diff": None if self.agree else self.explain(),
        }


def _raw_outcomes(template: ChatTemplate, context: Context) -> tuple[Outcome, Outcome]:
    tokens = {"bos_token": template.bos_token, "eos_token": template.eos_token}
    text = template.source.text
    first, second = (engine_render(text, context, engine=engine, **tokens) for engine in _ENGINES)
    return first, second


def _polyfill_renderer(template: ChatTemplate, engine: EngineName) -> Callable[[Context], Outcome]:
    """Renders contexts through `ChatTemplate.render` on `engine`; a template this engine cannot compile is an
    outcome of every context."""
    try:
        on_engine = ChatTemplate(
            template.source, bos_token=template.bos_token, eos_token=template.eos_token, engine=engine
        )
    except ChatcapsError as error:
        failed = Outcome(None, type(error).__name__, str(error))
        return lambda context: failed

    def render(context: Context) -> Outcome:
        try:
            result = on_engine.render_context(context)
        except ChatcapsError as error:
            return Outcome(None, type(error).__name__, str(error))
        return Outcome(result.prompt)

    return render


def _contexts(folder: str | None) -> tuple[Context, ...]:
    if folder is None:
        return load_contexts()
    try:
        found = load_contexts(Path(folder))
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as error:
        raise InputError(f"--contexts {folder}: not a folder of contexts/*.json files ({error_text(error)})") from error
    if not found:
        raise InputError(f"--contexts {folder}: no *.json contexts in it")
    return found


def _diff(args: argparse.Namespace) -> int:
    template = template_of(args)  # compiles with jinja2: a template that does not parse there is an error (exit 3)
    contexts = _contexts(args.contexts)
    modes = ("raw", "polyfills") if args.mode == "both" else (args.mode,)
    cases = []
    if "raw" in modes:
        cases += [Case("raw", context.name, _raw_outcomes(template, context)) for context in contexts]
    if "polyfills" in modes:
        first, second = (_polyfill_renderer(template, engine) for engine in _ENGINES)
        cases += [Case("polyfills", context.name, (first(context), second(context))) for context in contexts]
    differ = [case for case in cases if not case.agree]
    if args.json:
        write_json(
            {
                "source": template.source.name,
                "engines": list(_ENGINES),
                "agree": not differ,
                "cases": [case.to_dict() for case in cases],
            }
        )
        return EXIT_DIFFER if differ else 0
    out = [f"{template.source.name}: {_ENGINES[0]} vs {_ENGINES[1]} on {len(contexts)} contexts"]
    for mode in modes:
        agree = [case.context for case in cases if case.mode == mode and case.agree]
        disagree = [case.context for case in differ if case.mode == mode]
        out.append(
            f"{mode}: {len(agree)} agree" + (f", {len(disagree)} differ: {', '.join(disagree)}" if disagree else "")
        )
    sys.stdout.write("\n".join(out) + "\n")
    for case in differ:
        sys.stdout.write("\n" + case.explain())
    return EXIT_DIFFER if differ else 0


def add_parser(commands: Commands) -> None:
    diff = commands.add_parser("diff", help="jinja2 vs minijinja on the test contexts (exit 1 when they differ)")
    source_options(diff, engine=False)
    diff.add_argument(
        "--mode",
        choices=("raw", "polyfills", "both"),
        default="both",
        help="raw renders, renders through the polyfills, or both (default)",
    )
    diff.add_argument("--contexts", metavar="DIR", help="a folder of contexts/*.json files (default: chatcaps')")
    diff.add_argument("--json", action="store_true", help="every case as JSON")
    diff.set_defaults(run=_diff, engine="jinja2", isolate=None)
