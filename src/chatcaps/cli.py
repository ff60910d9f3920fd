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
import difflib
import ipaddress
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import orjson

from chatcaps import __version__, encoders, sources
from chatcaps.caps import Caps
from chatcaps.contexts import Context, load_contexts
from chatcaps.defaults import MAX_BODY_BYTES, SERVE_HOST, SERVE_PORT
from chatcaps.detect import detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName, Limits
from chatcaps.errors import ChatcapsError, InputError, ServerError, SourceError, TemplateError
from chatcaps.intent import Intent, validate_intent
from chatcaps.matrix import (
    CONTROL_COLUMNS,
    MATRIX_COLUMNS,
    caps_groups,
    control_rows,
    json_text,
    matrix,
    matrix_rows,
    report_lines,
)
from chatcaps.outcome import Outcome, engine_render
from chatcaps.polyfills import POLYFILLS
from chatcaps.render import ChatTemplate
from chatcaps.sources import TemplateSource
from chatcaps.transport import is_server_url
from chatcaps.vocab import TIERS
from chatcaps.zoo import FETCH_HINT, disagreements, load_zoo, read_labels, zoo_dir

if TYPE_CHECKING:
    from rich.console import Console

EXIT_DIFFER = 1
EXIT_USAGE = 2
EXIT_ERROR = 3
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
_HUB_ID = re.compile(r"\w[\w.-]*/\w[\w.-]*")
_FILE_SUFFIXES = frozenset({".jinja", ".j2", ".json", ".gguf", ".txt"})
_MODEL_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
_UNWRAPPED = 100_000
"""Console width off a terminal: wide enough that no table cell wraps."""
_ENGINES: tuple[EngineName, EngineName] = ("jinja2", "minijinja")
_T = TypeVar("_T")


# --- sources ------------------------------------------------------------------------------------------------------


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


def _template(args: argparse.Namespace) -> ChatTemplate:
    encoder = getattr(args, "encoder", None)  # the argument group makes it SOURCE or --encoder, one of the two
    if encoder is not None:
        source = sources.from_encoder(encoder)
    else:
        source = load_source(args.source, name=args.name, revision=args.revision)
    limits = Limits() if args.isolate is None else Limits(isolate=args.isolate)
    return ChatTemplate(source, bos_token=args.bos, eos_token=args.eos, engine=args.engine, limits=limits)


# --- output helpers -----------------------------------------------------------------------------------------------


def _write_json(data: Any) -> None:
    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")


def _console(*, stderr: bool = False) -> Console:
    """A rich console; off a terminal (a file, a pipe) tables are as wide as their cells unless COLUMNS says."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS") or _UNWRAPPED)
    return Console(file=stream, width=width, highlight=False, emoji=False)


def _print_table(
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


# --- detect -------------------------------------------------------------------------------------------------------


def _detect(args: argparse.Namespace) -> int:
    template = _template(args)
    caps = template.caps
    if args.response_template:
        _write_json(template.response_template())
        return 0
    if args.json:
        sys.stdout.write(caps.to_json().decode() + "\n")
        return 0
    console = _console()
    source = template.source
    header = [
        ("source", source.name),
        ("origin", source.origin),
        ("bos_token", json_text(template.bos_token)),
        ("eos_token", json_text(template.eos_token)),
    ]
    rows, sections = list(header), [len(header) - 1]
    for _, fields in caps_groups(caps):
        rows += fields
        sections.append(len(rows) - 1)
    _print_table(console, "Caps", ("field", "value"), rows, sections[:-1])
    if caps.reasoning.controls:
        _print_table(console, "reasoning.controls", CONTROL_COLUMNS, control_rows(caps))
    else:
        console.print("reasoning.controls: none")
    if caps.probe_errors:
        error_rows = [(error.probe, error.error) for error in caps.probe_errors]
        _print_table(console, "probe_errors", ("probe", "error"), error_rows)
    else:
        console.print("probe_errors: none")
    return 0


# --- render -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Request:
    messages: list[Any]
    tools: list[Any] | None
    template_args: dict[str, Any]
    reasoning: Intent
    add_generation_prompt: bool
    continue_final_message: bool


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


def _read_request(args: argparse.Namespace) -> _Request:
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
    return _Request(
        messages=messages,
        tools=tools,
        template_args=_template_args(args, base_args),
        reasoning=validate_intent(reasoning),
        add_generation_prompt=args.generation_prompt and generation_prompt,
        continue_final_message=args.continue_final_message or continue_final,
    )


def _render(args: argparse.Namespace) -> int:
    template = _template(args)
    request = _read_request(args)
    result = template.render(
        request.messages,
        tools=request.tools,
        reasoning=request.reasoning,
        template_args=request.template_args,
        add_generation_prompt=request.add_generation_prompt,
        continue_final_message=request.continue_final_message,
        disable=POLYFILLS if args.no_polyfills else (),
    )
    if args.json:
        _write_json(result.to_dict())
        return 0
    prompt = result.prompt
    sys.stdout.write(prompt if prompt.endswith("\n") else prompt + "\n")
    sys.stdout.flush()
    if args.report:
        sys.stderr.write("\n".join(report_lines(result)) + "\n")
    return 0


# --- serve --------------------------------------------------------------------------------------------------------

SERVE_EXTRA_HINT = "chatcaps serve needs the serve extra: pip install 'chatcaps[serve]'"
API_KEY_ENV = "CHATCAPS_API_KEY"


def _serve(args: argparse.Namespace) -> int:
    try:
        from chatcaps import serve
        from chatcaps.serve.backend import Backend
    except ImportError as error:
        raise InputError(f"{SERVE_EXTRA_HINT} ({error})") from error
    template = (
        ChatTemplate(load_source(args.template, name=args.template_name), engine=args.engine)
        if args.template is not None
        else ChatTemplate(sources.from_encoder(args.encoder))
        if args.encoder is not None
        else None
    )
    backend: Backend
    if args.upstream is not None:
        from chatcaps.integrations.llama_server import LlamaServerClient
        from chatcaps.serve.upstream import UpstreamBackend, Waiting

        if template is None and args.template_name is not None:
            source = sources.from_llama_server(args.upstream, name=args.template_name)
            template = ChatTemplate(source, engine=args.engine)
        try:
            backend = UpstreamBackend(LlamaServerClient(args.upstream, template=template, engine=args.engine))
        except ServerError as error:
            if template is None:  # the template is the server's: nothing to serve until it answers
                raise
            print(f"chatcaps: {error}; answering 503 until it is up (GET /health says when)", file=sys.stderr)
            backend = UpstreamBackend(Waiting(args.upstream, template, engine=args.engine))
    else:
        from chatcaps.serve.local import LocalBackend

        name = None if template is not None else args.template_name
        backend = LocalBackend.from_dir(args.model, template=template, template_name=name, engine=args.engine)
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if api_key is None and not _loopback(args.host):
        print(
            f"chatcaps: warning: listening on {args.host} with no --api-key: anyone who reaches it may use it",
            file=sys.stderr,
        )
    serve.run(
        backend,
        host=args.host,
        port=args.port,
        max_body_bytes=args.max_body_bytes,
        api_key=api_key,
        reasoning=args.reasoning,
        playground_dirs=_playground_dirs(args),
        engine=args.engine,
    )
    return 0


def _playground_dirs(args: argparse.Namespace) -> list[Path]:
    """The folders the playground may read templates from: those given, else the zoo where there is one."""
    if args.playground_dir:
        missing = [folder for folder in args.playground_dir if not Path(folder).is_dir()]
        if missing:
            raise InputError(f"--playground-dir {missing[0]}: no such folder")
        return [Path(folder) for folder in args.playground_dir]
    found = zoo_dir()
    return [] if found is None else [found]


def _playground(args: argparse.Namespace) -> int:
    try:
        from chatcaps import serve
    except ImportError as error:
        raise InputError(f"{SERVE_EXTRA_HINT} ({error})") from error
    template = None if args.source is None else _template(args)
    if not _loopback(args.host):
        print(
            f"chatcaps: warning: the playground on {args.host} has no API key: anyone who reaches it may use it",
            file=sys.stderr,
        )
    serve.run_playground(template, host=args.host, port=args.port, folders=_playground_dirs(args), engine=args.engine)
    return 0


def _loopback(host: str) -> bool:
    """Whether `host` (an address or a name) is this machine's loopback only."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


# --- zoo ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One template of a folder being surveyed; `error` when it could not even be read."""

    label: str
    text: str = ""
    bos_token: str = ""
    eos_token: str = ""
    error: str | None = None


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())}"


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
            entries.append(_Entry(label, error=_error_text(error)))
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
        return _error_text(error)


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

    with Progress(console=_console(stderr=True), transient=True) as progress:
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
        _write_json(
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
    console = _console()
    title = f"caps matrix: {len(caps)} templates in {folder} ({args.engine})"
    _print_table(console, title, MATRIX_COLUMNS, matrix_rows(caps))
    if failed:
        _print_table(console, f"failed ({len(failed)})", ("template", "error"), list(failed.items()))
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


# --- diff ---------------------------------------------------------------------------------------------------------


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
        raise InputError(
            f"--contexts {folder}: not a folder of contexts/*.json files ({_error_text(error)})"
        ) from error
    if not found:
        raise InputError(f"--contexts {folder}: no *.json contexts in it")
    return found


def _diff(args: argparse.Namespace) -> int:
    template = _template(args)  # compiles with jinja2: a template that does not parse there is an error (exit 3)
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
        _write_json(
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


# --- the parser ---------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in one line (exit 2) and no exit from `main` (it returns the code)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _source_options(parser: argparse.ArgumentParser, *, engine: bool = True, optional: bool = False) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="chatcaps",
        description="Find what a chat template can do, and render one request shape.",
        epilog="exit codes: 0 ok, 1 diff found differences, 2 usage, 3 source/template/input error, 130 Ctrl-C, "
        "141 stdout closed early",
    )
    parser.add_argument("--version", action="version", version=f"chatcaps {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    detect = commands.add_parser("detect", help="what a template can render and how (its Caps)")
    _source_options(detect)
    detect_output = detect.add_mutually_exclusive_group()
    detect_output.add_argument("--json", action="store_true", help="print Caps JSON (caps.to_json()) instead of tables")
    detect_output.add_argument(
        "--response-template",
        action="store_true",
        help="print the reply grammar as a transformers response_template (JSON) instead of tables",
    )
    detect.set_defaults(run=_detect)

    render = commands.add_parser("render", help="the prompt a template renders for a conversation, through polyfills")
    _source_options(render)
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

    diff = commands.add_parser("diff", help="jinja2 vs minijinja on the test contexts (exit 1 when they differ)")
    _source_options(diff, engine=False)
    diff.add_argument(
        "--mode",
        choices=("raw", "polyfills", "both"),
        default="both",
        help="raw renders, renders through the polyfills, or both (default)",
    )
    diff.add_argument("--contexts", metavar="DIR", help="a folder of contexts/*.json files (default: chatcaps')")
    diff.add_argument("--json", action="store_true", help="every case as JSON")
    diff.set_defaults(run=_diff, engine="jinja2", isolate=None)

    serve = commands.add_parser(
        "serve", help="OpenAI- and Anthropic-compatible chat endpoints, chatcaps rendering and reading"
    )
    model = serve.add_mutually_exclusive_group(required=True)
    model.add_argument("--upstream", metavar="URL", help="a running llama-server (template from its /props)")
    model.add_argument("--model", metavar="DIR", help="a transformers model folder, generated in-process")
    rendering = serve.add_mutually_exclusive_group()
    rendering.add_argument("--template", metavar="SOURCE", help="render with this template instead of the model's")
    rendering.add_argument(
        "--encoder", choices=encoders.names(), help="render with this prompt encoder instead of the model's template"
    )
    serve.add_argument("--template-name", metavar="NAME", help="which named template (e.g. tool_use)")
    serve.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2", help="template engine (default jinja2)")
    serve.add_argument("--host", default=SERVE_HOST, help=f"address to listen on (default {SERVE_HOST})")
    serve.add_argument("--port", type=int, default=SERVE_PORT, help=f"port to listen on (default {SERVE_PORT})")
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body accepted (default {MAX_BODY_BYTES // 2**20} MiB; more: 413)",
    )
    serve.add_argument(
        "--api-key",
        metavar="KEY",
        help=f"answer only requests that send KEY (x-api-key or Authorization: Bearer; /health stays open); "
        f"default ${API_KEY_ENV}, which keeps it out of the process list. Needed beyond loopback",
    )
    serve.add_argument(
        "--reasoning",
        choices=("show", "hide"),
        default="show",
        help="show the model's reasoning to clients (default), or hide it: only its token count is answered",
    )
    _playground_option(serve)
    serve.set_defaults(run=_serve)

    playground = commands.add_parser(
        "playground", help="the playground page alone (no model): Caps, prompt, report and replies read back"
    )
    _source_options(playground, engine=False, optional=True)
    playground.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2", help="template engine (default jinja2)")
    playground.add_argument("--host", default=SERVE_HOST, help=f"address to listen on (default {SERVE_HOST})")
    playground.add_argument("--port", type=int, default=SERVE_PORT, help=f"port to listen on (default {SERVE_PORT})")
    _playground_option(playground)
    playground.set_defaults(run=_playground, isolate=None)
    return parser


def _playground_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--playground-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose template files the playground may read (repeatable; default: the zoo, where there is "
        "one); no other file is read",
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        code: int = args.run(args)
    except SystemExit as exit_:  # argparse: --help, --version and usage errors
        return EXIT_USAGE if isinstance(exit_.code, str) else exit_.code or 0
    except ChatcapsError as error:
        pointer = error.pointer() if isinstance(error, TemplateError) else ""
        print(f"chatcaps: error: {_error_text(error)}" + (f"\n{pointer}" if pointer else ""), file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("chatcaps: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
