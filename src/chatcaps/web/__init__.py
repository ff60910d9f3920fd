"""The pages chatcaps shows people: the zoo site (`chatcaps zoo --html`) and the playground of `chatcaps serve`.

Everything a page needs ships in this package (templates/ for jinja2, static/ for CSS and JavaScript), so pages open
from disk or from the server with no network and no build step.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

__all__ = ["environment", "static"]


@cache
def environment() -> Environment:
    """The jinja2 environment of the pages' own templates (HTML autoescaped; an undefined name is an error)."""
    return Environment(
        loader=PackageLoader("chatcaps.web", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
    )


def static(name: str) -> str:
    """The text of one shipped asset (static/NAME), for a page to inline or a site to copy."""
    return resources.files("chatcaps.web").joinpath("static", name).read_text(encoding="utf-8")
