"""`chatcaps zoo [DIR] [--markdown | --json | --html OUT]`: the caps matrix over a folder of templates."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from chatcaps import sources
from chatcaps.caps import Caps
from chatcaps.cli.common import Commands, error_text, make_console, print_table, write_json
from chatcaps.detect import detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName
from chatcaps.errors import ChatcapsError, SourceError
from chatcaps.matrix import (
    MATRIX_COLUMNS,
    matrix,
    matrix_rows,
)
from chatcaps.zoo import FETCH_HINT, disagreements, load_zoo, read_labels, zoo_dir

_MODEL_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
_T = TypeVar("_T")


@dataclass(frozen=True)
class _Entry:
    """One template of a folder being surveyed; `error` when it could not even be read."""

    label: str
    text: str = ""
    bos_token: str = ""
    eos_token: str = ""
    error: str | None = None


def _zoo_entries(folder: Path) -> list[_Entry]:
    """A zoo (MANIFEST.tsv: tokens from the manifest), or any folder of *.jinja / *.gguf files and model folders."""
    if (folder / "MANIFEST.tsv").is_file():
        return [_Entry(t.file, t.read(), t.bos_token, t.eos_token) for t in load_zoo(folder)]
    if not folder.is_dir():
        raise SourceError(f"{folder}: no such folder")
    entries = []
    for path in sorted(folder.iterdir()):
        is_model = path.is_dir() and any((path / file).is_file() for file in _MODEL_FILES)
        if not (is_model or (path.is_file() and path.suffix in (".jinja", ".gguf"))):
            continue
        label = path.name + ("/" if is_model else "")
        try:
            source = sources.from_dir(path) if is_model else sources.from_file(path)
        except ChatcapsError as error:
            entries.append(_Entry(label, error=error_text(error)))
            continue
        entries.append(_Entry(label, source.text, source.bos_token, source.eos_token))
    if not entries:
        raise SourceError(f"{folder}: no *.jinja or *.gguf templates and no model folders in it")
    return entries


def _survey(entry: _Entry, engine: EngineName) -> Caps | str:
    """The entry's Caps, or why there are none; runs in worker processes under --jobs."""
    if entry.error is not None:
        return entry.error
    source = sources.from_str(entry.text, name=entry.label)
    try:
        return detect_caps(source, bos_token=entry.bos_token, eos_token=entry.eos_token, engine=engine)
    except ChatcapsError as error:
        return error_text(error)


def _survey_all(entries: Sequence[_Entry], engine: EngineName, jobs: int) -> Iterator[Caps | str]:
    if jobs <= 1:
        yield from (_survey(entry, engine) for entry in entries)
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(_survey, entries, [engine] * len(entries), chunksize=4)


def _with_progress(results: Iterator[_T], total: int, what: str = "detecting caps") -> Iterator[_T]:
    """A progress bar on stderr, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield from results
        return
    from rich.progress import Progress

    with Progress(console=make_console(stderr=True), transient=True) as progress:
        task = progress.add_task(what, total=total)
        for result in results:
            yield result
            progress.advance(task)


def _zoo(args: argparse.Namespace) -> int:
    folder = Path(args.dir) if args.dir is not None else zoo_dir()
    if folder is None:
        raise SourceError(f"no template zoo found and no DIR given; get the zoo with: {FETCH_HINT}")
    entries = _zoo_entries(folder)
    results = list(_with_progress(_survey_all(entries, args.engine, args.jobs), len(entries)))
    found = {entry.label: result for entry, result in zip(entries, results, strict=True)}
    caps = {label: result for label, result in found.items() if isinstance(result, Caps)}
    failed = {label: result for label, result in found.items() if isinstance(result, str)}
    if args.json:
        write_json(
            {
                label: {"error": result} if isinstance(result, str) else result.to_dict()
                for label, result in found.items()
            }
        )
        return 0
    if args.html is not None:
        return _site(Path(args.html), folder, entries, caps, failed, args)
    if args.markdown:
        lines = matrix(caps)
        if failed:
            lines += ["", f"Templates that failed ({len(failed)}):", ""]
            lines += [f"- {label}: {error}" for label, error in failed.items()]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    console = make_console()
    title = f"caps matrix: {len(caps)} templates in {folder} ({args.engine})"
    print_table(console, title, MATRIX_COLUMNS, matrix_rows(caps))
    if failed:
        print_table(console, f"failed ({len(failed)})", ("template", "error"), list(failed.items()))
    return 0


def _site(
    out: Path,
    folder: Path,
    entries: Sequence[_Entry],
    caps: Mapping[str, Caps],
    failed: Mapping[str, str],
    args: argparse.Namespace,
) -> int:
    """`zoo --html OUT`: the static site, its template pages rendered in `--jobs` processes."""
    from chatcaps.web.site import SiteTemplate, site_files

    templates = [SiteTemplate(entry.label, entry.text, entry.bos_token, entry.eos_token) for entry in entries]
    found = disagreements(caps, read_labels(folder))
    title = f"chatcaps zoo: {len(caps)} templates in {folder.name}"
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as pool:
        run = map if pool is None else partial(pool.map, chunksize=4)

        def pages(page: Callable[[SiteTemplate], str], shown: Sequence[SiteTemplate]) -> Iterator[str]:
            return _with_progress(iter(run(page, shown)), len(shown), "rendering pages")

        files = site_files(templates, caps, failed, found, title=title, engine=args.engine, map_pages=pages)
    for folder_of_pages in {Path(name).parent for name in files} - {Path(".")}:  # a page of a template gone
        for page in (out / folder_of_pages).glob("*.html"):
            if page.relative_to(out).as_posix() not in files:
                page.unlink()
    for name, text in files.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    print(f"wrote {out / 'index.html'} and {len(files) - 1} more files (template pages: {len(caps)})")
    return 0


def add_parser(commands: Commands) -> None:
    zoo = commands.add_parser("zoo", help="the caps matrix over a folder of templates")
    zoo.add_argument(
        "dir",
        nargs="?",
        metavar="DIR",
        help="a zoo (with MANIFEST.tsv) or a folder of *.jinja, *.gguf and model folders (default: the configured zoo)",
    )
    output = zoo.add_mutually_exclusive_group()
    output.add_argument("--markdown", action="store_true", help="a Markdown table, as in docs/zoo.md")
    output.add_argument(
        "--html", metavar="OUT", help="a static site in folder OUT: the matrix (index.html) and a page per template"
    )
    output.add_argument("--json", action="store_true", help="{template: Caps as JSON, or {'error': ...}}")
    zoo.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2", help="template engine (default jinja2)")
    zoo.add_argument("--jobs", type=int, default=1, metavar="N", help="detect in N processes (default 1)")
    zoo.set_defaults(run=_zoo)
