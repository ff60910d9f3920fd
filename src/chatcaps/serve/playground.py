"""The playground: a page at `GET /` and the JSON endpoints it calls (the tests call them too), to see what chatcaps
makes of a template and a request: the Caps, the prompt with its special tokens and generation prompt marked, the
render's report, and a pasted model reply read back whole and as streamed deltas. See docs/serve.md.

    GET  /                      the page (web/templates/playground.html, its CSS and JavaScript inlined)
    GET  /playground/templates  {"served": the served template's name or null, "folders", "files"}: what may be picked
    POST /playground/caps       {"template", "request"?} -> {"template", "caps"}
    POST /playground/render     {"template", "request", "special_tokens"?} -> {"template", "prompt", "pieces",
                                "special_tokens", "report"}
    POST /playground/reply      {"template", "request", "reply", "chunk_chars"?} -> {"choice", "warnings", "stream"}

`template` is `{"served": true}` (the server's own, the tool-use one for a request with tools where there is one),
`{"path": FILE}` (a file under a folder the server was told it may read: `--playground-dir`, by default the zoo; a
relative FILE is looked for under each; any other path is refused by name, never read) or `{"text": TEXT}` (pasted,
with optional `bos_token` and `eos_token`). `request` is a chat-completions body as `chatcaps serve` reads it
(`hook.prerender`: messages, tools, `reasoning_effort` / `reasoning` / `thinking`, `chat_template_kwargs`,
`add_generation_prompt`, `continue_final_message`). Errors are the server's (`serve/errors.py`): an `InputError` names
the message index and field, a template's error its line, source line and span.

Every template, pasted or read, is rendered in the sandbox under the default `Limits` (time, output, recursion), in a
worker thread, so a hostile one ends in `RenderLimitError` and the server goes on answering. Compiling and detecting
(the probes: 0.1 to 2 s) happen once per distinct template: the last `PLAYGROUND_TEMPLATES` are kept, by sha256.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from chatcaps import sources
from chatcaps.caps import Caps
from chatcaps.contexts import CONTEXTS, load_context
from chatcaps.defaults import PLAYGROUND_CHUNK_CHARS, PLAYGROUND_TEMPLATE_CHARS, PLAYGROUND_TEMPLATES
from chatcaps.engines import EngineName
from chatcaps.errors import InputError, SourceError
from chatcaps.hook import PostStream, choice, prerender
from chatcaps.lru import LastUsed
from chatcaps.render import ChatTemplate, RenderResult
from chatcaps.serve.http import json_response, read_object
from chatcaps.sources import TemplateSource
from chatcaps.vocab import shown
from chatcaps.web import environment, static
from chatcaps.zoo import read_manifest

Served = Callable[[bool], ChatTemplate]
"""The server's template for a request without (False) or with (True) tools; `Backend.template`."""
PASTED = "<pasted>"
"""The name a pasted template has in errors."""
DEFAULT_CONTEXT = "tool_call_object_arguments.json"
"""The conversation the page starts with (a tool call and its result, from chatcaps' contexts)."""
LISTED_FILES = 2000
"""The most template files `/playground/templates` lists (the zoo has about 200)."""
_LISTED_SUFFIXES = (".jinja", ".j2")
_READ_SUFFIXES = frozenset({".jinja", ".j2", ".txt", ".json"})
"""What `{"path": ...}` reads: template text, or a tokenizer_config.json / chat_template.json."""


@dataclass(frozen=True)
class Playground:
    """What the playground serves: the server's template (None: only picked or pasted ones), the folders whose files
    it may read (resolved), and the engine every template is compiled for."""

    served: Served | None
    folders: tuple[Path, ...]
    engine: EngineName = "jinja2"

    @classmethod
    def of(cls, served: Served | None, folders: Iterable[str | Path], engine: EngineName = "jinja2") -> Playground:
        return cls(served, tuple(dict.fromkeys(Path(folder).resolve() for folder in folders)), engine)


def routes(playground: Playground, *, max_body_bytes: int) -> list[Route]:
    """The page and its endpoints, for an app to mount beside its own routes (their failures are raised, for the
    app's error table)."""
    kept = _Kept(playground, PLAYGROUND_TEMPLATES)
    page = _page()

    async def index(http: Request) -> Response:
        return HTMLResponse(page)

    async def templates(http: Request) -> Response:
        return json_response(await anyio.to_thread.run_sync(kept.offered))

    async def caps(http: Request) -> Response:
        data = await read_object(http, max_body_bytes)
        spec, tools = _spec(data), bool(_request(data).get("tools"))
        template = await anyio.to_thread.run_sync(kept.load, spec, tools)
        return json_response({"template": _about(template), "caps": template.caps.to_dict()})

    async def render(http: Request) -> Response:
        data = await read_object(http, max_body_bytes)
        spec, request, extra = _spec(data), _request(data), _extra_tokens(data)
        return json_response(await anyio.to_thread.run_sync(lambda: _rendered(*kept.render(spec, request), extra)))

    async def reply(http: Request) -> Response:
        data = await read_object(http, max_body_bytes)
        spec, request, text, size = _spec(data), _request(data), _reply_text(data), _chunk_chars(data)
        return json_response(
            await anyio.to_thread.run_sync(lambda: _read_reply(kept.render(spec, request)[1], text, size))
        )

    return [
        Route("/", index, methods=["GET"]),
        Route("/playground/templates", templates, methods=["GET"]),
        Route("/playground/caps", caps, methods=["POST"]),
        Route("/playground/render", render, methods=["POST"]),
        Route("/playground/reply", reply, methods=["POST"]),
    ]


def _page() -> str:
    """The page, its assets inlined (one response, nothing else to fetch), its text boxes holding a tool
    conversation from chatcaps' contexts."""
    context = load_context(CONTEXTS.joinpath(DEFAULT_CONTEXT))
    indented = orjson.OPT_INDENT_2
    return (
        environment()
        .get_template("playground.html")
        .render(
            css=static("base.css") + static("playground.css"),
            script=static("playground.js"),
            messages=orjson.dumps(context.messages, option=indented).decode(),
            tools=orjson.dumps(context.tools, option=indented).decode(),
            kwargs=orjson.dumps(context.template_args, option=indented).decode(),
        )
    )


# --- reading the request ------------------------------------------------------------------------------------------


def _spec(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `template` field: one of `served`, `path`, `text`."""
    spec = data.get("template")
    picked = [key for key in ("served", "path", "text") if isinstance(spec, Mapping) and key in spec]
    if not isinstance(spec, Mapping) or len(picked) != 1:
        raise InputError(
            'template must be an object with one of "served": true, "path": FILE or "text": TEMPLATE, got '
            + shown(spec),
            field="template",
        )
    return spec


def _request(data: Mapping[str, Any]) -> Mapping[str, Any]:
    request = data.get("request", {})
    if not isinstance(request, Mapping):
        raise InputError(f"request must be a chat-completions body (an object), got {shown(request)}", field="request")
    return request


def _reply_text(data: Mapping[str, Any]) -> str:
    text = data.get("reply")
    if not isinstance(text, str):
        raise InputError(f"reply must be the model's text (a string), got {shown(text)}", field="reply")
    return text


def _chunk_chars(data: Mapping[str, Any]) -> int:
    size = data.get("chunk_chars", PLAYGROUND_CHUNK_CHARS)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise InputError(f"chunk_chars must be an integer >= 1, got {shown(size)}", field="chunk_chars")
    return size


def _extra_tokens(data: Mapping[str, Any]) -> tuple[str, ...]:
    tokens = data.get("special_tokens", [])
    if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
        raise InputError(f"special_tokens must be a list of strings, got {shown(tokens)}", field="special_tokens")
    return tuple(tokens)


def _token(spec: Mapping[str, Any], key: str) -> str:
    value = spec.get(key, "")
    if not isinstance(value, str):
        raise InputError(f"template.{key} must be a string, got {shown(value)}", field=f"template.{key}")
    return value


# --- templates ----------------------------------------------------------------------------------------------------


class _Kept:
    """The playground's templates, compiled and detected once each: the last `size` by sha256 of their name, text and
    tokens. Its methods block (reading files, compiling, detecting, rendering): the routes run them in threads."""

    def __init__(self, playground: Playground, size: int) -> None:
        self.playground = playground
        self.size = size
        self._entries: LastUsed[str, ChatTemplate] = LastUsed(size)

    def offered(self) -> dict[str, Any]:
        served = self.playground.served
        return {
            "served": None if served is None else served(False).source.name,
            "folders": [str(folder) for folder in self.playground.folders],
            "files": _listed(self.playground.folders),
        }

    def render(self, spec: Mapping[str, Any], request: Mapping[str, Any]) -> tuple[ChatTemplate, RenderResult]:
        template = self.load(spec, bool(request.get("tools")))
        return template, prerender(request, template)[1]

    def load(self, spec: Mapping[str, Any], tools: bool) -> ChatTemplate:
        """The template `spec` names, its Caps detected (a template that fails detection raises here)."""
        if "served" in spec:
            if self.playground.served is None:
                raise InputError("this server serves no template: pick a file or paste one", field="template.served")
            template = self.playground.served(tools)
        else:
            template = self._compiled(self._read(spec["path"]) if "path" in spec else self._pasted(spec))
        template.caps  # noqa: B018 (detected here, in the worker thread: no later step pays for it)
        return template

    def _pasted(self, spec: Mapping[str, Any]) -> TemplateSource:
        text = spec["text"]
        if not isinstance(text, str):
            raise InputError(f"template.text must be a string, got {shown(text)}", field="template.text")
        _check_size(len(text), "template.text")
        return sources.from_str(
            text, name=PASTED, bos_token=_token(spec, "bos_token"), eos_token=_token(spec, "eos_token")
        )

    def _read(self, given: object) -> TemplateSource:
        """A template file under one of the allowed folders (symbolic links resolved first), with the zoo manifest's
        tokens where the folder is a zoo."""
        if not isinstance(given, str) or not given:
            raise InputError(f"template.path must be a file name, got {shown(given)}", field="template.path")
        folders = self.playground.folders
        path = _inside(given, folders)
        if path is None:
            allowed = ", ".join(map(str, folders)) or "none (start the server with --playground-dir DIR)"
            raise InputError(
                f"{given}: not a file under the folders this server may read: {allowed}", field="template.path"
            )
        if path.suffix not in _READ_SUFFIXES:
            kinds = ", ".join(sorted(_READ_SUFFIXES))
            raise InputError(f"{given}: the playground reads template files ({kinds})", field="template.path")
        _check_size(path.stat().st_size, "template.path")
        try:
            source = sources.from_file(path)
        except SourceError as error:  # a JSON file that holds no template: the request's mistake, not the server's
            raise InputError(f"{given}: {error}", field="template.path") from error
        return _with_manifest_tokens(source, path, folders)

    def _compiled(self, source: TemplateSource) -> ChatTemplate:
        key = hashlib.sha256(orjson.dumps([source.name, source.text, source.bos_token, source.eos_token])).hexdigest()
        found = self._entries.get(key)
        if found is not None:
            return found
        template = ChatTemplate(source, engine=self.playground.engine)
        template.caps  # noqa: B018 (a template that fails detection is not kept)
        self._entries.put(key, template)
        return template


def _check_size(size: int, field: str) -> None:
    if size > PLAYGROUND_TEMPLATE_CHARS:
        raise InputError(f"the template is over the playground's {PLAYGROUND_TEMPLATE_CHARS} characters", field=field)


def _inside(given: str, folders: Sequence[Path]) -> Path | None:
    """The file `given` names, resolved, where it is a file inside one of `folders`; a relative name is looked for
    under each folder in turn."""
    path = Path(given)
    candidates = [path] if path.is_absolute() else [folder / path for folder in folders]
    for candidate in candidates:
        try:
            resolved = candidate.resolve()
            if not resolved.is_file():
                continue
        except (OSError, ValueError):  # a name no file can have (a NUL byte), a loop of links
            continue
        if any(resolved.is_relative_to(folder) for folder in folders):
            return resolved
    return None


def _with_manifest_tokens(source: TemplateSource, path: Path, folders: Sequence[Path]) -> TemplateSource:
    """A zoo file (FOLDER/templates/FILE beside FOLDER/MANIFEST.tsv) with the bos and eos its manifest row gives."""
    zoo = path.parent.parent
    if path.parent.name != "templates" or zoo not in folders or not (zoo / "MANIFEST.tsv").is_file():
        return source
    row = next((row for row in read_manifest(zoo) if row["file"] == path.name), None)
    if row is None:
        return source
    return sources.from_str(
        source.text, name=source.name, bos_token=row.get("bos_token") or "", eos_token=row.get("eos_token") or ""
    )


def _listed(folders: Sequence[Path]) -> list[str]:
    """The template files under `folders`, the first `LISTED_FILES` found, sorted."""
    found = (
        path for folder in folders for path in folder.rglob("*") if path.suffix in _LISTED_SUFFIXES and path.is_file()
    )
    return sorted(str(path) for path in itertools.islice(found, LISTED_FILES))


# --- answers ------------------------------------------------------------------------------------------------------


def _about(template: ChatTemplate) -> dict[str, Any]:
    source = template.source
    return {
        "name": source.name,
        "origin": source.origin,
        "sha256": source.sha256,
        "engine": template.engine,
        "bos_token": template.bos_token,
        "eos_token": template.eos_token,
    }


def special_tokens(template: ChatTemplate, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """What the prompt shows as special tokens: the source's bos and eos, the markers the Caps know (the end of turn,
    the reasoning markers and content headers, the tool-call format's opening and closing text and their
    alternatives) and the caller's `extra` (a tokenizer's, which a template alone does not name), whitespace trimmed;
    longest first, so that a token holding another is marked whole."""
    caps: Caps = template.caps
    reasoning, calls = caps.reasoning, caps.tools.call_format
    found = [template.bos_token, template.eos_token, caps.end_of_turn, reasoning.start_marker, reasoning.end_marker]
    found += reasoning.content_headers
    if calls is not None:
        found += [calls.begin, calls.end, *calls.alternative_openers, *calls.alternative_turn_ends]
    kept = {token.strip() for token in (*found, *extra) if token and token.strip()}
    return tuple(sorted(kept, key=lambda token: (-len(token), token)))


def pieces(prompt: str, tokens: Sequence[str], generation_prompt: str) -> list[dict[str, Any]]:
    """The prompt cut where a special token (`tokens`) begins or ends and where the generation prompt begins: each
    piece `{"text", "special", "generation"}`, in order (the page marks them; a client counting in UTF-16 needs no
    offsets)."""
    start = len(prompt) - len(generation_prompt) if generation_prompt and prompt.endswith(generation_prompt) else None
    found = [match.span() for match in re.finditer("|".join(map(re.escape, tokens)), prompt)] if tokens else []
    cuts = sorted({0, len(prompt), *(at for span in found for at in span), *([] if start is None else [start])})
    starts = [begin for begin, _ in found]

    def special(at: int) -> bool:
        index = bisect.bisect_right(starts, at) - 1
        return index >= 0 and at < found[index][1]

    return [
        {"text": prompt[begin:end], "special": special(begin), "generation": start is not None and begin >= start}
        for begin, end in itertools.pairwise(cuts)
    ]


def _rendered(template: ChatTemplate, result: RenderResult, extra: Sequence[str]) -> dict[str, Any]:
    tokens = special_tokens(template, extra)
    report = result.to_dict()
    del report["prompt"]
    return {
        "template": _about(template),
        "prompt": result.prompt,
        "pieces": pieces(result.prompt, tokens, result.generation_prompt),
        "special_tokens": list(tokens),
        "report": report,
    }


def _read_reply(result: RenderResult, text: str, size: int) -> dict[str, Any]:
    """The reply read whole (`parse_reply`: OpenAI's `choices[0]`, as `POST /v1/chat/completions` answers it, and
    the reader's warnings) and as it would stream, fed `size` characters at a time (`PostStream`: the deltas after
    each piece)."""
    reply = result.parse_reply(text)
    stream = PostStream(result)
    fed = [text[at : at + size] for at in range(0, len(text), size)]
    return {
        "choice": choice(reply),
        "warnings": list(reply.warnings),
        "stream": {
            "initial": stream.initial,
            "fed": [{"text": piece, "deltas": stream.feed(piece)} for piece in fed],
            "close": stream.close(),
        },
    }
