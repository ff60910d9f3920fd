"""chatcaps against vLLM's hand-picked parsers, for `bench_reply.py --peers` (a sibling module of it).

The replies are scripts/data/peer_replies.json (rendered from zoo templates by scripts/peer_replies.py, plus
hand-written ones), each with the message its text holds. A server never hands a parser the stop token, so both
sides get the text with a trailing stop of the format (peer_formats.json) cut off. chatcaps reads it with the Caps of
the format's zoo template (`parse_reply`, `prefix` the generation prompt, the tools given, `end_of_turn` what the
template writes after an assistant message); vLLM with the reasoning
and tool-call parsers its family is told to use, in the peer venv (scripts/peer_vllm.py, run as a child process:
vLLM is never imported here). Both results and the expected message are compared after the normalisations the
issue allows: whitespace around reasoning and content, an empty reasoning is none, arguments compared as JSON values
(key order aside), call ids aside.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from timing import percentile

from chatcaps import ChatTemplate, ReplyStream, parse_reply
from chatcaps.caps import Caps
from chatcaps.zoo import load_zoo

DATA = Path(__file__).resolve().parent / "data"
PEER_SCRIPT = Path(__file__).resolve().parent / "peer_vllm.py"
FIELDS = ("reasoning_content", "content", "tool_calls")


def peer_python() -> str:
    """The peer venv's python (scripts/peer_venv.sh): $PEER_PYTHON, else $PEER_VENV's, else the per-machine one."""
    cache = os.environ.get("CHATCAPS_BUILD_CACHE") or Path.home() / ".cache" / "chatcaps"
    venv = os.environ.get("PEER_VENV") or Path(cache) / "peer-venv"
    return os.environ.get("PEER_PYTHON", str(Path(venv) / "bin" / "python"))


def served(text: str, stops: Sequence[str]) -> tuple[str, str]:
    """The text as a server hands it over, and the stop token cut off its end ("" when none)."""
    trimmed = text.rstrip()
    for stop in stops:
        if trimmed.endswith(stop):
            return trimmed[: -len(stop)], stop
    return text, ""


def normal(message: dict[str, Any]) -> dict[str, Any]:
    """A message up to the allowed normalisations."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function", call)
        arguments = function["arguments"]
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        calls.append({"name": function["name"], "arguments": arguments})
    return {
        "reasoning_content": (message.get("reasoning_content") or "").strip() or None,
        "content": (message.get("content") or "").strip(),
        "tool_calls": calls,
    }


def run_peer(job: dict[str, Any]) -> dict[str, Any]:
    """The peer's results for `job` (see scripts/peer_vllm.py), or SystemExit with its error."""
    done = subprocess.run(
        [peer_python(), str(PEER_SCRIPT)], input=json.dumps(job), capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(
            f"the peer failed ({peer_python()}; make it with scripts/peer_venv.sh):\n{done.stderr[-3000:]}"
        )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def format_caps(formats: list[dict[str, Any]]) -> dict[str, Caps | None]:
    """Each format's Caps, detected from its zoo template (None where the format has no template)."""
    zoo = {entry.path.name: entry for entry in load_zoo()}
    found: dict[str, Caps | None] = {}
    for spec in formats:
        entry = zoo.get(spec["template"] or "")
        found[spec["format"]] = (
            ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token).caps if entry else None
        )
    return found


PLUGIN = "chatcaps plugin: "
"""The prefix of a format read by the chatcaps vLLM plugin (src/chatcaps/integrations/vllm.py) inside vLLM."""


def plugin_specs(specs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each format with a zoo template once more, read by the chatcaps plugin's parsers in vLLM (`--tool-call-parser
    chatcaps --reasoning-parser chatcaps`), the template on the format's tokenizer (gpt-oss too: a byte-level one
    with its header tokens, since the plugin composes its own parser rather than vLLM's Harmony one)."""
    zoo = {entry.path.name: entry for entry in load_zoo()}
    return {
        f"{PLUGIN}{name}": {
            **spec,
            "reasoning_parser": "chatcaps",
            "tool_parser": "chatcaps",
            "harmony": False,
            "chat_template": zoo[spec["template"]].read(),
        }
        for name, spec in specs.items()
        if spec["template"] in zoo
    }


def agreement(verbose: bool) -> None:
    """Print, per format, how often each side reads the message the text holds, and every disagreement; and how
    often the chatcaps plugin does, read inside vLLM (its `Parser.parse` and `parse_delta`)."""
    config = json.loads((DATA / "peer_formats.json").read_text("utf-8"))
    cases = _cases()
    specs = {spec["format"]: spec for spec in config["formats"]}
    plugins = plugin_specs(specs)
    for case in cases:
        case["served"], case["stop"] = served(case["text"], specs[case["format"]]["stop"])
    plugin_cases = [case for case in cases if PLUGIN + case["format"] in plugins]
    job = {
        "tools": config["tools"],
        "formats": {**specs, **plugins},
        "cases": [
            *({**case, "text": case["served"]} for case in cases),
            *({**case, "text": case["served"], "format": PLUGIN + case["format"]} for case in plugin_cases),
        ],
    }
    results = run_peer(job)["results"]
    peer, in_vllm = results[: len(cases)], results[len(cases) :]
    plugged = {id(case): result for case, result in zip(plugin_cases, in_vllm, strict=True)}
    caps = format_caps(config["formats"])
    rows: dict[str, dict[str, int]] = {}
    notes = []
    for case, theirs in zip(cases, peer, strict=True):
        spec, expected = specs[case["format"]], normal(case["expected"])
        tools = config["tools"] if spec["tools"] else None
        format_caps_ = caps[case["format"]]
        ours = ours_stream = None
        if format_caps_:
            end = case["end_of_turn"]
            reply = parse_reply(case["served"], format_caps_, prefix=case["prefix"], tools=tools, end_of_turn=end)
            ours = normal(reply.to_message())
            ours_stream = normal(streamed(case["served"], format_caps_, case["prefix"], tools, end))
        vllm = normal(theirs["batch"]) if "batch" in theirs else None
        vllm_stream = normal(theirs["stream"]) if "stream" in theirs else None
        row = rows.setdefault(
            case["format"],
            dict.fromkeys(
                ("n", "agree", "ours", "theirs", "ours stream=batch", "stream=batch", "plugin", "plugin stream"), 0
            ),
        )
        row["n"] += 1
        if id(case) in plugged:
            result = plugged[id(case)]
            row["plugin"] += "batch" in result and normal(result["batch"]) == expected
            row["plugin stream"] += "stream" in result and normal(result["stream"]) == expected
        row["ours"] += ours == expected
        row["theirs"] += vllm == expected
        row["agree"] += ours == vllm
        row["stream=batch"] += vllm_stream == vllm
        row["ours stream=batch"] += ours_stream == ours
        for field in FIELDS:
            row[f"ours {field}"] = row.get(f"ours {field}", 0) + bool(ours and ours[field] == expected[field])
            row[f"theirs {field}"] = row.get(f"theirs {field}", 0) + bool(vllm and vllm[field] == expected[field])
        if ours != vllm or verbose:
            right = " and ".join(name for name, got in (("chatcaps", ours), ("vLLM", vllm)) if got == expected)
            notes.append(
                f"[{case['format']} / {case['variant']}] right: {right or 'neither'}\n"
                f"    text     {case['served']!r}\n    expected {_short(expected)}\n"
                f"    chatcaps {_short(ours)}\n    vLLM     {_short(vllm) if vllm else theirs.get('error')}"
            )
    print(
        f"{'format':<32} {'vLLM parsers':<28} {'n':>3} {'agree':>5} {'chatcaps right':>14} {'vLLM right':>10}"
        f"  {'by field (r/c/calls), chatcaps | vLLM':<38} {'stream=batch, chatcaps | vLLM':<30}"
        f" plugin in vLLM right, whole | streamed"
    )
    for name, row in rows.items():
        spec, n = specs[name], row["n"]
        parsers = f"{spec['reasoning_parser'] or '-'} / {spec['tool_parser'] or '-'}"
        ours_right = f"{row['ours']}/{n}" if caps[name] else "no template"
        print(
            f"{name:<32} {parsers:<28} {n:>3} {row['agree']:>5} {ours_right:>14} {row['theirs']:>8}/{n}"
            f"  {_by(row, 'ours') + ' | ' + _by(row, 'theirs'):<38}"
            + f" {row['ours stream=batch']}/{n} | {row['stream=batch']}/{n}".ljust(31)
            + (f" {row['plugin']}/{n} | {row['plugin stream']}/{n}" if caps[name] else " no template")
        )
    with_template = [row for name, row in rows.items() if caps[name]]
    total = sum(row["n"] for row in with_template)
    for field in FIELDS:
        ours_total = sum(row[f"ours {field}"] for row in with_template)
        theirs_total = sum(row[f"theirs {field}"] for row in with_template)
        print(
            f"{field}: chatcaps right {ours_total}/{total}, vLLM right {theirs_total}/{total} (formats with a template)"
        )
    plugin_whole = sum(row["plugin"] for row in with_template)
    plugin_streamed = sum(row["plugin stream"] for row in with_template)
    print(f"the chatcaps plugin in vLLM: right {plugin_whole}/{total} whole, {plugin_streamed}/{total} streamed")
    print()
    print("\n".join(notes))


def streamed(text: str, caps: Caps, prefix: str, tools: Any, end_of_turn: str | None) -> dict[str, Any]:
    """`ReplyStream` fed one character at a time, its deltas merged (tool-call deltas by index, in OpenAI's shape)."""
    stream = ReplyStream(caps, prefix=prefix, tools=tools, end_of_turn=end_of_turn)
    merged: dict[str, Any] = {"reasoning_content": "", "content": "", "tool_calls": {}}
    deltas: list[dict[str, Any]] = [
        *stream.initial,
        *(delta for char in text for delta in stream.feed(char)),
        *stream.close(),
    ]
    for delta in deltas:
        merged["reasoning_content"] += delta.get("reasoning_content") or ""
        merged["content"] += delta.get("content") or ""
        for call in delta.get("tool_calls") or ():
            entry = merged["tool_calls"].setdefault(call["index"], {"name": "", "arguments": ""})
            entry["name"] += call.get("function", {}).get("name") or ""
            entry["arguments"] += call.get("function", {}).get("arguments") or ""
    merged["tool_calls"] = [merged["tool_calls"][index] for index in sorted(merged["tool_calls"])]
    return merged


def _by(row: dict[str, int], side: str) -> str:
    return "/".join(str(row[f"{side} {field}"]) for field in FIELDS)


def _short(message: dict[str, Any] | None) -> str:
    return "-" if message is None else json.dumps(message, ensure_ascii=False)


STREAM_FORMAT = "hermes <tool_call> JSON"
"""The format whose zoo template (Qwen3) gives chatcaps its Caps, prefix and end of turn for the streaming runs."""


def streaming(lengths: Sequence[int], reply_tokens: Callable[[int, bool], list[str]], repeat: int) -> None:
    """chatcaps' `ReplyStream.feed`, vLLM's `parse_delta` with its own parsers, and the same `parse_delta` with the
    chatcaps plugin's parsers (src/chatcaps/integrations/vllm.py: the cost a vLLM server pays per delta with
    `--tool-call-parser chatcaps --reasoning-parser chatcaps`), one token's text per call, side by side; best of
    `repeat` runs per position, microseconds. chatcaps reads with the Caps of the Qwen3 zoo template, vLLM with the
    parsers a Qwen3 deployment is told to use: `qwen3` alone (no tools), `qwen3` + `hermes` (tools given); the plugin
    with the same template on its tokenizer. Three replies: reasoning then content (`reply_tokens`), the same with
    tools given, and reasoning then one call whose argument is the rest of the reply (what an argument streamed as
    it comes costs)."""
    config = json.loads((DATA / "peer_formats.json").read_text("utf-8"))
    specs = {spec["format"]: spec for spec in config["formats"]}
    caps = format_caps([specs[STREAM_FORMAT]])[STREAM_FORMAT]
    assert caps is not None, "the streaming runs need the zoo (CHATCAPS_ZOO)"
    template = next(entry for entry in load_zoo() if entry.path.name == specs[STREAM_FORMAT]["template"])
    for name in ("think", STREAM_FORMAT):
        plugin = {"reasoning_parser": "chatcaps", "tool_parser": "chatcaps", "chat_template": template.read()}
        specs[f"chatcaps plugin: {name}"] = {**specs[name], **plugin}
    case = next(case for case in _cases() if case["format"] == STREAM_FORMAT)
    prefix, end_of_turn = case["prefix"], case["end_of_turn"]
    shapes = (
        ("reasoning", "think", None, False),
        ("+ tools", STREAM_FORMAT, config["tools"], False),
        ("+ one call", STREAM_FORMAT, config["tools"], True),
    )
    replies = [
        (shape, fmt, tools, length, served_pieces(call_tokens(tokens) if call else tokens))
        for shape, fmt, tools, call in shapes
        for length in lengths
        for tokens in (reply_tokens(length, True),)
    ]
    runs = [
        {"format": name, "prefix": prefix, "pieces": pieces, "stop": "<|im_end|>", "repeat": repeat}
        for _, fmt, _, _, pieces in replies
        for name in (fmt, f"chatcaps plugin: {fmt}")
    ]
    timings = run_peer({"tools": config["tools"], "formats": specs, "cases": [], "timings": runs})["timings"]
    print(
        f"{'tokens':>7} {'reply':>10} {'chatcaps median':>15} {'p95':>6} {'first/last 10%':>15}"
        f" {'vLLM median':>11} {'p95':>6} {'first/last 10%':>15}"
        f" {'plugin median':>13} {'p95':>6} {'first/last 10%':>15}  (us per delta)"
    )
    for at, (shape, _, tools, length, pieces) in enumerate(replies):
        vllm, plugin = timings[2 * at], timings[2 * at + 1]
        ours = timed_stream(pieces, prefix, caps, end_of_turn, tools, repeat)
        tenth = max(1, length // 10)
        print(f"{length:>7} {shape:>10} {_cols(ours, tenth, 15)} {_cols(vllm, tenth, 11)} {_cols(plugin, tenth, 13)}")


def call_tokens(tokens: list[str]) -> list[str]:
    """`tokens` with its content half turned into one Hermes call to `search`, whose query is that text."""
    close = tokens.index("</think>")
    words = [token.replace("\n", "\\n") for token in tokens[close + 1 : -1]]
    opener = ["\n\n", "<tool_call>", "\n", '{"name": "search", ', '"arguments": {"query": "']
    return [*tokens[: close + 1], *opener, *words[: -len(opener) - 3], '"}}', "\n", "</tool_call>", tokens[-1]]


def _cases() -> list[dict[str, Any]]:
    return json.loads((DATA / "peer_replies.json").read_text("utf-8"))["cases"]  # type: ignore[no-any-return]


def served_pieces(pieces: list[str]) -> list[str]:
    """The pieces a server hands a parser: the stop token (the last piece) is not among them."""
    return pieces[:-1]


def _cols(times: list[float], tenth: int, width: int) -> str:
    first, last = statistics.median(times[:tenth]), statistics.median(times[-tenth:])
    return f"{statistics.median(times):>{width}.2f} {percentile(times, 0.95):6.2f} {f'{first:.2f} / {last:.2f}':>15}"


def timed_stream(pieces: list[str], prefix: str, caps: Caps, end_of_turn: str, tools: Any, repeat: int) -> list[float]:
    import time

    best = [float("inf")] * len(pieces)
    for _ in range(repeat):
        feed = ReplyStream(caps, prefix=prefix, tools=tools, end_of_turn=end_of_turn).feed
        for index, piece in enumerate(pieces):
            started = time.perf_counter_ns()
            feed(piece)
            best[index] = min(best[index], (time.perf_counter_ns() - started) / 1e3)
    return best
