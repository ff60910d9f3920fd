"""llama.cpp's reply-parsing cases as data: tests/data/reply/llamacpp_cases.json, the yardstick of issue 27.

    python scripts/llamacpp_cases.py [--sdist PATH] [--check]

Reads `vendor/llama.cpp/tests/test-chat.cpp` out of the llama-cpp-python sdist the setup downloads
(~/.cache/chatcaps/sdist/llama_cpp_python-0.3.36.tar.gz) and writes one entry per parse case: a model reply text and
the message llama.cpp expects from it, with the template and the options the case sets. The facts carry over, the code
does not: this is a small reader of the C++ builder chains

    tst.test("reply").reasoning_format(...).enable_thinking(...).tools({ tool, ... }).expect(msg).run();

where `tst` is a `peg_tester("models/templates/NAME.jinja")` (a string, a `for` loop over strings, or a function's
parameter whose call sites give it), the expected message is a constant, a helper call (`simple_assist_msg`,
`message_with_tool_calls`, ...) or `expect_content`/`expect_reasoning`/`expect_tool_calls` on top, and the tools are
the file's `common_chat_tool` constants. A chain it cannot evaluate is counted and printed with the reason, never
dropped silently. `test-chat-auto-parser.cpp` has no reply -> message case bound to a template (its parse tests run
hand-built parsers), so it adds none.

Only the tests' own texts are stored; the templates stay in the zoo (`llamacpp__NAME.jinja`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tarfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "reply" / "llamacpp_cases.json"
SDIST = Path.home() / ".cache" / "chatcaps" / "sdist" / "llama_cpp_python-0.3.36.tar.gz"
MEMBER = "vendor/llama.cpp/tests/test-chat.cpp"

TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*|/\*.*?\*/)
    |(?P<raw>R"(?P<delim>[^(\s]*)\((?P<body>.*?)\)(?P=delim)")
    |(?P<string>"(?:\\.|[^"\\\n])*")
    |(?P<char>'(?:\\.|[^'\\])')
    |(?P<number>\d+(?:\.\d+)?[uUlLf]*)
    |(?P<name>[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)
    |(?P<punct>.)""",
    re.S | re.X,
)
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "0": "\0", "?": "?"}
"""C++ simple escapes; `\\x`/`\\u` are decoded apart."""
MSG_FIELDS = ("role", "content", "content_parts", "tool_calls", "reasoning_content", "tool_name", "tool_call_id")
"""`common_chat_msg`'s members in declaration order (common/chat.h), for brace initialisation."""
REASONING_FORMATS = {
    "COMMON_REASONING_FORMAT_NONE": "none",
    "COMMON_REASONING_FORMAT_AUTO": "auto",
    "COMMON_REASONING_FORMAT_DEEPSEEK": "deepseek",
    "COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY": "deepseek-legacy",
}
CONTINUATIONS = {
    "COMMON_CHAT_CONTINUATION_NONE": None,
    "COMMON_CHAT_CONTINUATION_AUTO": "auto",
    "COMMON_CHAT_CONTINUATION_REASONING": "reasoning",
    "COMMON_CHAT_CONTINUATION_CONTENT": "content",
}
TOOL_CHOICES = {
    "COMMON_CHAT_TOOL_CHOICE_AUTO": "auto",
    "COMMON_CHAT_TOOL_CHOICE_REQUIRED": "required",
    "COMMON_CHAT_TOOL_CHOICE_NONE": "none",
}
BOOLEANS = {"true": True, "false": False}


@dataclass(frozen=True)
class Tok:
    kind: str
    value: Any
    line: int


class Unextractable(Exception):
    """A chain (or a value in it) this reader does not evaluate; the message says what."""


def unescape(body: str) -> str:
    """A C++ string literal's body as the compiler stores it: UTF-8 bytes, `\\x` escapes being bytes of their own."""
    out, i = bytearray(), 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif e in "uU":
            width = 4 if e == "u" else 8
            out += chr(int(body[i + 2 : i + 2 + width], 16)).encode("utf-8")
            i += 2 + width
        elif e in ESCAPES:
            out += ESCAPES[e].encode("utf-8")
            i += 2
        else:
            raise Unextractable(f"escape \\{e}")
    return out.decode("utf-8")


def tokenize(source: str) -> list[Tok]:
    tokens: list[Tok] = []
    line = 1
    for match in TOKEN.finditer(source):
        text = match.group(0)
        if match.group("raw") is not None:
            tokens.append(Tok("string", match.group("body"), line))
        elif match.group("string") is not None:
            tokens.append(Tok("string", unescape(text[1:-1]), line))
        elif match.group("space") is None:
            kind = next(k for k in ("char", "number", "name", "punct") if match.group(k) is not None)
            tokens.append(Tok(kind, text, line))
        line += text.count("\n")
    return tokens


def tool(values: list[Any]) -> dict[str, Any]:
    """A `common_chat_tool{name, description, parameters}` as an OpenAI tool."""
    name, description, parameters = values
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": json.loads(parameters)},
    }


def msg(
    content: str = "",
    reasoning: str = "",
    name: str = "",
    arguments: str = "",
    call_id: str = "",
    *,
    calls: list[tuple[str, str, str]] | None = None,
    role: str = "assistant",
) -> dict[str, Any]:
    """A message as llama.cpp's `common_chat_msg` holds it: strings, empty meaning absent; arguments as written."""
    if calls is None:
        calls = [(name, arguments, call_id)] if name or call_id else []
    return {
        "role": role,
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": [{"name": n, "arguments": a, "id": i} for n, a, i in calls],
    }


def _call_of(value: Any) -> tuple[str, str, str]:
    if not isinstance(value, list) or not 1 <= len(value) <= 3:
        raise Unextractable(f"tool call {value!r}")
    name, arguments, call_id = [*value, "", ""][:3]
    return str(name), str(arguments), "" if call_id is None or call_id == [] else str(call_id)


HELPERS: dict[str, Callable[..., dict[str, Any]]] = {
    "simple_assist_msg": msg,
    "message_with_tool_calls": lambda name, arguments: msg("", "", name, arguments),
    "message_with_tool_calls_and_reasoning": lambda name, arguments, reasoning: msg("", reasoning, name, arguments),
    "message_with_reasoning_content_and_multiple_tool_calls": lambda reasoning, content, calls: msg(
        content, reasoning, calls=[(n, a, "") for n, a in calls]
    ),
    "message_with_content_and_tool_call": lambda content, name, arguments: msg(content, "", name, arguments),
    "message_with_reasoning_and_tool_call": lambda reasoning, name, arguments: msg("", reasoning, name, arguments),
}
"""The file's message helpers (test-chat.cpp, before `message_assist`), written again from their definitions."""


class Reader:
    """Evaluates the few C++ expression forms the chains use, over one file's tokens."""

    def __init__(self, tokens: list[Tok]) -> None:
        self.toks = tokens
        self.decls: dict[str, list[tuple[int, int, str]]] = {}  # name -> [(position, start of its value, type)]
        self._find_declarations()

    def _find_declarations(self) -> None:
        types = {"common_chat_tool", "common_chat_msg", "std::string", "char", "auto"}
        for i, tok in enumerate(self.toks[:-2]):
            if tok.kind != "name" or tok.value not in types:
                continue
            j = i + 1
            while self.toks[j].value in ("*", "&", "const"):
                j += 1
            name, after = self.toks[j], self.toks[j + 1]
            if name.kind == "name" and after.value in ("=", "{", ";"):
                start = {"=": j + 2, "{": j + 1, ";": -1}[after.value]
                self.decls.setdefault(name.value, []).append((i, start, tok.value))

    def lookup(self, name: str, at: int) -> Any:
        """The value of the last declaration of `name` before token `at` (blocks reuse names: order is scope)."""
        before = [(start, kind) for pos, start, kind in self.decls.get(name, ()) if pos < at]
        if not before:
            raise Unextractable(f"unknown name {name}")
        start, kind = before[-1]
        if start < 0 and kind == "common_chat_msg":
            return self.assigned(name, at)
        value, _ = self.expr(start, at=start)
        if kind == "common_chat_tool":
            return tool(value)
        if kind == "common_chat_msg" and isinstance(value, list):
            fields = dict(zip(MSG_FIELDS, value, strict=False))
            if fields.get("content_parts") or fields.get("tool_calls"):
                raise Unextractable(f"{name}: content parts or calls in a brace-initialised message")
            return msg(fields.get("content", ""), fields.get("reasoning_content", ""), role=fields["role"])
        return value

    def assigned(self, name: str, at: int) -> dict[str, Any]:
        """A message declared empty and filled member by member (`m.role = "user"; m.content = ...;`) before `at`."""
        pos = max(pos for pos, _, _ in self.decls[name] if pos < at)
        fields: dict[str, Any] = {}
        for i in range(pos, at):
            toks = self.toks[i : i + 4]
            if toks[0].value == name and toks[1].value == "." and toks[3].value == "=":
                fields[toks[2].value], _ = self.expr(i + 4, at=i)
        if set(fields) - {"role", "content", "reasoning_content", "tool_call_id"}:
            raise Unextractable(f"{name}: members {sorted(fields)}")
        message = msg(fields.get("content", ""), fields.get("reasoning_content", ""), role=fields["role"])
        return message | ({"tool_call_id": fields["tool_call_id"]} if "tool_call_id" in fields else {})

    def expr(self, i: int, *, at: int) -> tuple[Any, int]:
        """The value of the expression at token i and the index past it; `at` is where names are looked up."""
        value, i = self.primary(i, at=at)
        while self.toks[i].value == "+":
            more, i = self.primary(i + 1, at=at)
            value += more
        return value, i

    def primary(self, i: int, *, at: int) -> tuple[Any, int]:
        tok = self.toks[i]
        if tok.kind == "string":
            parts = [tok.value]
            i += 1
            while self.toks[i].kind == "string":
                parts.append(self.toks[i].value)
                i += 1
            return "".join(parts), i
        if tok.kind == "number":
            return int(tok.value.rstrip("uUlL")), i + 1
        if tok.value == "{":
            items: list[Any] = []
            i += 1
            while self.toks[i].value != "}":
                item, i = self.expr(i, at=at)
                items.append(item)
                if self.toks[i].value == ",":
                    i += 1
            return items, i + 1
        if tok.kind == "name":
            name = tok.value
            if name in BOOLEANS:
                return BOOLEANS[name], i + 1
            if name in REASONING_FORMATS:
                return REASONING_FORMATS[name], i + 1
            if name in CONTINUATIONS:
                return CONTINUATIONS[name], i + 1
            if name in TOOL_CHOICES:
                return TOOL_CHOICES[name], i + 1
            if name in ("std::string", "common_chat_tool_call") and self.toks[i + 1].value in "({":
                args, i = self.args(i + 1, at=at)
                return (args[0] if name == "std::string" else list(args)), i
            if self.toks[i + 1].value == "(":
                if name not in HELPERS:
                    raise Unextractable(f"call to {name}")
                args, j = self.args(i + 1, at=at)
                return HELPERS[name](*args), j
            return self.lookup(name, at), i + 1
        raise Unextractable(f"token {tok.value!r} on line {tok.line}")

    def args(self, i: int, *, at: int) -> tuple[list[Any], int]:
        """The arguments of the call whose "(" (or "{") is at token i."""
        close = ")" if self.toks[i].value == "(" else "}"
        values: list[Any] = []
        i += 1
        while self.toks[i].value != close:
            value, i = self.expr(i, at=at)
            values.append(value)
            if self.toks[i].value == ",":
                i += 1
            elif self.toks[i].value != close:
                raise Unextractable(f"{self.toks[i].value!r} on line {self.toks[i].line}")
        return values, i + 1


def matching(tokens: list[Tok], i: int) -> int:
    """The index of the bracket closing the one at i."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth, opener = 0, tokens[i].value
    for j in range(i, len(tokens)):
        if tokens[j].value == opener:
            depth += 1
        elif tokens[j].value == pairs[opener]:
            depth -= 1
            if depth == 0:
                return j
    raise Unextractable(f"unclosed {opener} on line {tokens[i].line}")


def template_paths(reader: Reader, arg: int) -> list[str]:
    """The template paths a `peg_tester(ARG ...)` stands for: a string, a loop variable or a function's parameter."""
    toks = reader.toks
    tok = toks[arg]
    if tok.kind == "string":
        return [tok.value]
    name = tok.value
    for i in range(arg, 0, -1):
        if toks[i].value == "for" and toks[i + 1].value == "(":
            colon = next(j for j in range(i + 2, matching(toks, i + 1)) if toks[j].value in (":", ";"))
            if toks[colon].value == ":" and toks[colon - 1].value == name:
                values, _ = reader.expr(colon + 1, at=colon)
                return [str(value) for value in values]
        if toks[i].value == "static" and toks[i + 1].value == "void" and toks[i + 3].value == "(":
            function = toks[i + 2].value
            params = toks[i + 4 : matching(toks, i + 3)]
            if name not in [p.value for p in params]:
                break
            paths: list[str] = []
            for j, call in enumerate(toks):
                if call.value == function and j != i + 2 and toks[j + 1].value == "(":
                    paths += template_paths(reader, j + 2)
            return paths
    raise Unextractable(f"template path {name}")


def category(case: dict[str, Any]) -> str:
    """llama.cpp groups its cases by template only, so by what a case exercises, first match: a continued message, an
    expected call, reasoning (expected, or a reasoning format asked for), else plain content (issue 27's figures)."""
    if case["options"].get("continue_final_message"):
        return "continuation"
    if case["expected"]["tool_calls"]:
        return "tool_calls"
    if case["expected"]["reasoning_content"] or case["options"].get("reasoning_format", "none") != "none":
        return "reasoning"
    return "content"


SETTERS = frozenset(
    {
        "reasoning_format",
        "enable_thinking",
        "parallel_tool_calls",
        "add_generation_prompt",
        "continue_final_message",
        "is_partial",
        "tool_choice",
    }
)
"""The builder's option setters, stored under their own names (`json_schema` is parsed apart)."""


def chain(reader: Reader, start: int) -> tuple[dict[str, Any], int]:
    """The case of the chain `X.test(...)...run()` whose `(` after `test` is at `start`; the index past `run()`."""
    toks = reader.toks
    (text,), i = reader.args(start, at=start)
    options: dict[str, Any] = {}
    tools: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] | None = None
    expected = msg()
    while not (toks[i].value == "." and toks[i + 1].value == "run"):
        if toks[i].value != "." or toks[i + 2].value != "(":
            raise Unextractable(f"chain form at {toks[i].value!r}")
        method = toks[i + 1].value
        args, i = reader.args(i + 2, at=start)
        if method in SETTERS:
            options[method] = args[0]
        elif method == "json_schema":
            options["json_schema"] = json.loads(args[0])
        elif method == "tools":
            tools = [item if isinstance(item, dict) else tool(item) for item in args[0]]
        elif method == "messages":
            messages = args[0]
        elif method == "expect":
            expected = dict(args[0])
        elif method == "expect_content":
            expected = expected | {"content": args[0]}
        elif method == "expect_reasoning":
            expected = expected | {"reasoning_content": args[0]}
        elif method == "expect_tool_calls":
            calls = [_call_of(call) for call in args[0]]
            expected = expected | {"tool_calls": [{"name": n, "arguments": a, "id": c} for n, a, c in calls]}
        elif method != "expect_reconstruction":
            raise Unextractable(f"method {method}")
    case = {"reply": text, "options": options, "tools": tools, "messages": messages, "expected": expected}
    return case, i + 4


def arguments_value(arguments: str, partial: bool) -> Any:
    """Expected arguments as JSON; a partial case's cut-off JSON is None (llama.cpp compares it as "" too)."""
    if arguments == "":
        return {} if not partial else None
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        if partial:
            return None
        raise Unextractable(f"arguments {arguments!r}") from None


def finish(case: dict[str, Any], template: str, line: int) -> dict[str, Any]:
    partial = bool(case["options"].get("is_partial"))
    expected = case["expected"]
    calls = []
    for call in expected["tool_calls"]:
        entry: dict[str, Any] = {"name": call["name"], "arguments": arguments_value(call["arguments"], partial)}
        if call["id"]:
            entry["id"] = call["id"]
        calls.append(entry)
    stem = template.removesuffix(".jinja")
    out = {
        "id": f"{line}:{stem}",
        "line": line,
        "template": f"llamacpp__{template}",
        "reply": case["reply"],
        "options": case["options"],
        "tools": case["tools"],
        "messages": case["messages"],
        "expected": {
            "content": expected["content"],
            "reasoning_content": expected["reasoning_content"],
            "tool_calls": calls,
        },
    }
    out["category"] = category(out)
    return out


def extract(source: str) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Every case of the file, and the chains left out by reason."""
    reader = Reader(tokenize(source))
    toks = reader.toks
    testers: dict[str, list[tuple[int, list[str]]]] = {}
    cases: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    i = 0
    while i < len(toks) - 3:
        tok = toks[i]
        if tok.kind == "name" and toks[i + 1].value == "=" and toks[i + 2].value == "peg_tester":
            try:
                paths = template_paths(reader, i + 4)
            except Unextractable as error:
                paths = []
                skipped[f"tester: {error}"] += 1
            testers.setdefault(tok.value, []).append((i, paths))
        elif tok.kind == "name" and tok.value in testers and toks[i + 1].value == "." and toks[i + 2].value == "test":
            line = tok.line
            paths = [p for pos, p in testers[tok.value] if pos < i][-1]
            try:
                case, end = chain(reader, i + 3)
                for path in paths:
                    cases.append(finish(case, path.removeprefix("models/templates/"), line))
                i = end
                continue
            except (Unextractable, ValueError, TypeError, KeyError, IndexError) as error:
                skipped[str(error) if isinstance(error, Unextractable) else f"{type(error).__name__}: {error}"] += len(
                    paths
                )
        i += 1
    return cases, skipped


def read_source(sdist: Path) -> str:
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith(MEMBER))
        handle = archive.extractfile(member)
        if handle is None:
            raise SystemExit(f"{sdist}: {member.name} is not a file")
        return handle.read().decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sdist", type=Path, default=SDIST)
    parser.add_argument("--check", action="store_true", help="exit 1 when the stored corpus differs")
    args = parser.parse_args(argv)
    cases, skipped = extract(read_source(args.sdist))
    ids = Counter(case["id"] for case in cases)
    if dupes := [name for name, n in ids.items() if n > 1]:
        raise SystemExit(f"duplicate case ids: {dupes}")
    counts = Counter(case["category"] for case in cases)
    print(f"{len(cases)} cases from {len({c['template'] for c in cases})} templates: {dict(sorted(counts.items()))}")
    print(f"{sum(skipped.values())} chains not extracted:")
    for reason, n in skipped.most_common():
        print(f"  {n:3d}  {reason}")
    text = json.dumps({"source": f"{args.sdist.name}:{MEMBER}", "cases": cases}, indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.read_text("utf-8") == text
        print("corpus is current" if same else f"{OUT} is stale: run scripts/llamacpp_cases.py")
        return 0 if same else 1
    OUT.write_text(text, "utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
