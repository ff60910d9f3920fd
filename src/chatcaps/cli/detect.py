"""`chatcaps detect SOURCE [--json | --response-template]`: every Caps field, as tables or as Caps JSON."""

from __future__ import annotations

import argparse
import sys

from chatcaps.cli.common import Commands, make_console, print_table, source_options, template_of, write_json
from chatcaps.matrix import (
    CONTROL_COLUMNS,
    caps_groups,
    control_rows,
    json_text,
)


def _detect(args: argparse.Namespace) -> int:
    template = template_of(args)
    caps = template.caps
    if args.response_template:
        write_json(template.response_template())
        return 0
    if args.json:
        sys.stdout.write(caps.to_json().decode() + "\n")
        return 0
    console = make_console()
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
    print_table(console, "Caps", ("field", "value"), rows, sections[:-1])
    if caps.reasoning.controls:
        print_table(console, "reasoning.controls", CONTROL_COLUMNS, control_rows(caps))
    else:
        console.print("reasoning.controls: none")
    if caps.probe_errors:
        error_rows = [(error.probe, error.error) for error in caps.probe_errors]
        print_table(console, "probe_errors", ("probe", "error"), error_rows)
    else:
        console.print("probe_errors: none")
    return 0


def add_parser(commands: Commands) -> None:
    detect = commands.add_parser("detect", help="what a template can render and how (its Caps)")
    source_options(detect)
    detect_output = detect.add_mutually_exclusive_group()
    detect_output.add_argument("--json", action="store_true", help="print Caps JSON (caps.to_json()) instead of tables")
    detect_output.add_argument(
        "--response-template",
        action="store_true",
        help="print the reply grammar as a transformers response_template (JSON) instead of tables",
    )
    detect.set_defaults(run=_detect)
