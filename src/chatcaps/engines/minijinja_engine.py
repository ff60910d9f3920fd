"""The minijinja engine: the same globals and filters as the jinja2 engine, on minijinja's Rust core (faster; see docs).

Differences from jinja2 that remain are measured by the parity test and listed in docs/engines.md.
Sandboxing: minijinja cannot read Python attributes of the plain data chatcaps passes in; its work per render is
bounded by `fuel` (derived from `Limits.time_s`), its recursion by its own fixed limit, and its output is checked
against `Limits.max_output_chars` once rendered (minijinja builds the output in one piece).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import minijinja

from chatcaps.engines.base import DEFAULT_LIMITS, EngineName, Limits
from chatcaps.engines.builtins import strftime_now, tojson
from chatcaps.errors import RenderLimitError, TemplateRenderError, TemplateSyntaxError

_GENERATION_OPEN = re.compile(r"\{%([-+]?)\s*generation\s*([-+]?)%\}")
_GENERATION_CLOSE = re.compile(r"\{%([-+]?)\s*endgeneration\s*([-+]?)%\}")

_OPERAND_ERRORS = ("too large", "too many elements")


class _Raised(Exception):
    """What `raise_exception` throws inside minijinja; minijinja passes Python exceptions through unchanged."""


def _raise_exception(message: str) -> None:
    raise _Raised(message)


def _indent(text: str, width: int | str = 4, first: bool = False, blank: bool = False) -> str:
    """jinja2's `indent`, which keeps a trailing newline that minijinja's drops."""
    indention = width if isinstance(width, str) else " " * width
    text += "\n"  # jinja2's own quirk: makes splitlines() keep a final empty line
    if blank:
        result = ("\n" + indention).join(text.splitlines())
    else:
        lines = text.splitlines()
        result = lines.pop(0)
        if lines:
            result += "\n" + "\n".join(indention + line if line else line for line in lines)
    return indention + result if first else result


def _is_iterable(value: Any) -> bool:
    """jinja2's `iterable` test: none is not iterable (minijinja says it is)."""
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _is_sequence(value: Any) -> bool:
    """jinja2's `sequence` test: anything with a length and item access, strings and dicts included."""
    try:
        len(value)
        value.__getitem__  # noqa: B018 - the attribute's presence is the test
    except Exception:
        return False
    return True


def _without_generation_tags(source: str) -> str:
    """`{% generation %}` as a block that always renders, keeping its whitespace-control marks (and so its spacing)."""
    source = _GENERATION_OPEN.sub(r"{%\1 if true \2%}", source)
    return _GENERATION_CLOSE.sub(r"{%\1 endif \2%}", source)


def _column(source: str, offset: int) -> int:
    return offset - (source.rfind("\n", 0, offset) + 1) + 1


class MinijinjaRenderer:
    """A template compiled by minijinja; see the module docstring."""

    engine: EngineName = "minijinja"

    def __init__(self, source: str, *, name: str = "<template>", limits: Limits = DEFAULT_LIMITS) -> None:
        self.source = source
        self.name = name
        self.limits = limits
        self._env = minijinja.Environment(
            trim_blocks=True,
            lstrip_blocks=True,
            pycompat=True,
            fuel=max(1, int(limits.time_s * limits.minijinja_fuel_per_s)),
            globals={"raise_exception": _raise_exception, "strftime_now": strftime_now},
            filters={"tojson": tojson, "indent": _indent},
            tests={"iterable": _is_iterable, "sequence": _is_sequence},
        )
        prepared = _without_generation_tags(source)
        try:
            self._env.add_template(name, prepared)
        except minijinja.TemplateError as error:
            line = error.line or 1
            column = _column(prepared, error.range[0]) if error.range else 1
            raise TemplateSyntaxError(
                error.detail or error.message, template_name=name, line=line, column=column
            ) from error

    def undeclared_variables(self) -> frozenset[str]:
        return frozenset(self._env.undeclared_variables_in_template(self.name))

    def render(self, variables: Mapping[str, Any]) -> str:
        try:
            output: str = self._env.render_template(self.name, **variables)
        except _Raised as error:
            raise TemplateRenderError(str(error), template_name=self.name) from error
        except minijinja.TemplateError as error:
            raise self._translate(error) from error
        except RecursionError as error:
            raise RenderLimitError(
                "render exceeded Python's recursion limit", limit="max_recursion", template_name=self.name
            ) from error
        except Exception as error:
            raise TemplateRenderError(f"{type(error).__name__}: {error}", template_name=self.name) from error
        if len(output) > self.limits.max_output_chars:
            raise RenderLimitError(
                f"output exceeded max_output_chars={self.limits.max_output_chars}",
                limit="max_output_chars",
                template_name=self.name,
            )
        return output

    def _translate(self, error: minijinja.TemplateError) -> Exception:
        detail = error.detail or error.message
        if error.kind == "OutOfFuel":
            return RenderLimitError(
                f"render ran out of fuel (time_s={self.limits.time_s})", limit="time_s", template_name=self.name
            )
        if "recursion limit" in detail:
            return RenderLimitError(f"minijinja: {detail}", limit="max_recursion", template_name=self.name)
        if error.kind == "InvalidOperation" and any(text in detail for text in _OPERAND_ERRORS):
            return RenderLimitError(f"minijinja: {detail}", limit="max_operand_chars", template_name=self.name)
        return TemplateRenderError(f"{error.kind}: {detail}", template_name=self.name, line=error.line)
