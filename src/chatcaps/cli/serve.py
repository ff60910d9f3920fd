"""`chatcaps serve (--upstream URL | --model DIR)` and `chatcaps playground [SOURCE]` (docs/serve.md): the server is
imported only when one of them runs (the serve extra)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

from chatcaps import encoders, sources
from chatcaps.cli.common import Commands, load_source, source_options, template_of
from chatcaps.defaults import MAX_BODY_BYTES, SERVE_HOST, SERVE_PORT
from chatcaps.engines import ENGINE_NAMES
from chatcaps.errors import InputError, ServerError
from chatcaps.render import ChatTemplate
from chatcaps.zoo import zoo_dir

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
    template = None if args.source is None else template_of(args)
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


def add_parsers(commands: Commands) -> None:
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
    source_options(playground, engine=False, optional=True)
    playground.add_argument("--engine", choices=ENGINE_NAMES, default="jinja2", help="template engine (default jinja2)")
    playground.add_argument("--host", default=SERVE_HOST, help=f"address to listen on (default {SERVE_HOST})")
    playground.add_argument("--port", type=int, default=SERVE_PORT, help=f"port to listen on (default {SERVE_PORT})")
    _playground_option(playground)
    playground.set_defaults(run=_playground, isolate=None)


def _playground_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--playground-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder whose template files the playground may read (repeatable; default: the zoo, where there is "
        "one); no other file is read",
    )
