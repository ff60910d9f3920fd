"""Both engines: the transformers environment's globals and filters, error translation, and the sandbox limits."""

from __future__ import annotations

import ast
import json
import re
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any

import pytest
from paths import DATA, ROOT

from chatcaps.engines import DEFAULT_LIMITS, ENGINE_NAMES, EngineName, Limits, compile_template
from chatcaps.engines.minijinja_engine import fuel_budget
from chatcaps.errors import (
    ChatcapsError,
    RenderLimitError,
    TemplateError,
    TemplateRenderError,
    TemplateSecurityError,
    TemplateSyntaxError,
)
from chatcaps.probes.candidates import find_candidates

engines = pytest.mark.parametrize("engine", ENGINE_NAMES)
SRC = ROOT / "src" / "chatcaps"

NESTED_LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HUGE_REPEAT = "{{ 'x' * 10**10 }}"
SELF_RECURSION = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"


def render(source: str, engine: EngineName, limits: Limits = DEFAULT_LIMITS, **variables: object) -> str:
    return compile_template(source, engine=engine, limits=limits).render(variables)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@engines
def test_generation_tag_renders_its_body_with_the_same_spacing(engine: EngineName) -> None:
    source = "A\n{%- generation -%}\n  B{{ x }}\n{%- endgeneration %}\nC"
    assert render(source, engine, x=1) == "AB1C"


@engines
def test_tojson_does_not_escape_html_and_takes_transformers_options(engine: EngineName) -> None:
    value = {"b": "<é&>", "a": [1, 2]}
    assert render("{{ v|tojson }}", engine, v=value) == '{"b": "<é&>", "a": [1, 2]}'
    assert render("{{ v|tojson(indent=2, sort_keys=true) }}", engine, v=value) == (
        '{\n  "a": [\n    1,\n    2\n  ],\n  "b": "<é&>"\n}'
    )
    assert render("{{ v|tojson(separators=(',', ':')) }}", engine, v=value) == '{"b":"<é&>","a":[1,2]}'


@engines
def test_strftime_now_formats_the_current_date(engine: EngineName) -> None:
    assert render("{{ strftime_now('%Y-%m-%d') }}", engine) == datetime.now().strftime("%Y-%m-%d")


@engines
def test_raise_exception_becomes_a_render_error_keeping_the_message(engine: EngineName) -> None:
    with pytest.raises(TemplateRenderError) as raised:
        render("{{ raise_exception('Conversation roles must alternate') }}", engine)
    assert raised.value.message == "Conversation roles must alternate"


@engines
def test_namespace_and_dict_and_loop_controls(engine: EngineName) -> None:
    source = (
        "{% set ns = namespace(n=0) %}{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}"
        "{% if i == 5 %}{% break %}{% endif %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|{{ dict(a=1)['a'] }}"
    )
    assert render(source, engine) == "8|1"


@engines
def test_trim_and_lstrip_blocks_are_on(engine: EngineName) -> None:
    assert render("a\n    {% if true %}\nb\n    {% endif %}\nc", engine) == "a\nb\nc"


@engines
def test_syntax_error_names_template_line_and_column(engine: EngineName) -> None:
    with pytest.raises(TemplateSyntaxError) as raised:
        compile_template("line one\n{% if x %}\n  {{ x. }}\n", engine=engine, name="broken.jinja")
    error = raised.value
    assert (error.template_name, error.line) == ("broken.jinja", 3)
    assert error.column == 9  # the "}}" where an attribute name was expected
    assert str(error).startswith("broken.jinja:3:9: ")


SYNTAX_ERRORS = [
    ("line one\n{% if x %}\n  {{ x. }}\n", 3, 9),
    ("{% if x %}", 1, 9),
    ("{% for %}", 1, 8),
    ("a\n  {% endfor %}", 2, 6),
    ("{% for m in messages %}\n{{ m.content }\n{% endfor %}", 2, 14),
    ("é é {{ x. }}", 1, 11),  # characters, not UTF-8 bytes
    ("日本語 {% if %}", 1, 11),
    ("{% generation %}{{ x. }}{% endgeneration %}", 1, 23),  # the template's own columns, not the rewritten tag's
]


@pytest.mark.parametrize(("source", "line", "column"), SYNTAX_ERRORS, ids=[case[0] for case in SYNTAX_ERRORS])
def test_both_engines_and_the_candidate_finder_place_a_syntax_error_alike(source: str, line: int, column: int) -> None:
    positions = []
    for engine in ENGINE_NAMES:
        with pytest.raises(TemplateSyntaxError) as raised:
            compile_template(source, engine=engine, name="t.jinja")
        positions.append((raised.value.template_name, raised.value.line, raised.value.column))
    with pytest.raises(TemplateSyntaxError) as raised:
        find_candidates(source, name="t.jinja")
    positions.append((raised.value.template_name, raised.value.line, raised.value.column))
    assert positions == [("t.jinja", line, column)] * 3


NESTED_TOO_DEEPLY = [
    "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}",
    "{% if x %}" * 1000 + "{% endif %}" * 1000,
]


@pytest.mark.parametrize("source", NESTED_TOO_DEEPLY, ids=["brackets", "blocks"])
def test_a_template_nested_past_the_recursion_limit_is_a_syntax_error(source: str) -> None:
    """Both engines and the candidate finder refuse it as a syntax error where minijinja places its own nesting
    limit, not with Python's RecursionError."""
    found = []
    parsers: list[Callable[..., object]] = [partial(compile_template, engine=engine) for engine in ENGINE_NAMES]
    for parse in [*parsers, find_candidates]:
        with pytest.raises(TemplateSyntaxError) as raised:
            parse(source, name="deep.jinja")
        found.append((raised.value.template_name, raised.value.line, raised.value.column))
    assert found == [("deep.jinja", 1, found[0][2])] * 3


BIG = {"v": ["x" * 100]}
"""Over max_operand_chars=50 once printed by tojson: a limit a sandbox hook finds, not knowing the template."""
OVER = "tojson's result would be 121 characters, over max_operand_chars=50"
ISOLATED = Limits(isolate=True)
LOCAL = Limits(isolate=False)
Case = tuple[str, Limits, dict[str, Any], type[TemplateError], str]
IN_PROCESS: list[Case] = [
    ("{{ raise_exception('no') }}", LOCAL, {}, TemplateRenderError, "no"),
    ("{{ v|tojson }}", Limits(max_operand_chars=50, isolate=False), BIG, RenderLimitError, OVER),
    ("{{ f() }}", LOCAL, {"f": lambda: 1 / 0}, TemplateRenderError, "ZeroDivisionError: division by zero"),
]
IN_WORKER: list[Case] = [  # minijinja's isolated worker builds the error and sends it back
    ("{{ raise_exception('no') }}", ISOLATED, {}, TemplateRenderError, "no"),
    ("{{ v|tojson }}", replace(ISOLATED, max_operand_chars=50), BIG, RenderLimitError, OVER),
]
NAMED_ERRORS: list[tuple[EngineName, *Case]] = [
    *[(engine, *case) for engine in ENGINE_NAMES for case in IN_PROCESS],
    *[("minijinja", *case) for case in IN_WORKER],
]


@pytest.mark.parametrize(("engine", "source", "limits", "variables", "kind", "message"), NAMED_ERRORS)
def test_render_errors_are_born_with_the_template_name(
    engine: EngineName,
    source: str,
    limits: Limits,
    variables: dict[str, Any],
    kind: type[TemplateError],
    message: str,
) -> None:
    with pytest.raises(kind) as raised:
        compile_template(source, engine=engine, name="t.jinja", limits=limits).render(variables)
    assert (raised.value.template_name, raised.value.message) == ("t.jinja", message)


class PanicException(BaseException):
    """Named as pyo3's, which is what the minijinja rule matches (by name: pyo3 exports no class to import)."""


def _panic() -> None:
    raise PanicException("index out of bounds")


def test_a_panic_in_minijinja_is_a_render_error() -> None:
    with pytest.raises(TemplateRenderError) as raised:
        compile_template("{{ f() }}", engine="minijinja", name="t.jinja").render({"f": _panic})
    assert (raised.value.message, raised.value.template_name) == ("minijinja panicked: index out of bounds", "t.jinja")


def test_no_code_names_an_error_after_it_was_raised() -> None:
    """Errors are built with their template's name; nothing sets `template_name` on one afterwards."""
    patched = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text("utf-8")))
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute)
        and target.attr == "template_name"
        and not (isinstance(target.value, ast.Name) and target.value.id == "self")
    ]
    assert patched == []


@engines
@pytest.mark.parametrize("source", [NESTED_LOOPS, HUGE_REPEAT, SELF_RECURSION], ids=["loops", "repeat", "recursion"])
def test_exhaustion_stops_within_budget_with_a_limit_error(engine: EngineName, source: str) -> None:
    limits = Limits(time_s=1.0)
    started = time.perf_counter()
    with pytest.raises(RenderLimitError):
        render(source, engine, limits)
    assert time.perf_counter() - started < limits.time_s + 0.5
    assert peak_rss_bytes() < 2 * 1024**3


@engines
def test_time_budget_is_configurable(engine: EngineName) -> None:
    limits = Limits(time_s=0.2)
    started = time.perf_counter()
    with pytest.raises(RenderLimitError) as raised:
        render(NESTED_LOOPS, engine, limits)
    assert raised.value.limit == "time_s"
    assert time.perf_counter() - started < 0.6


@pytest.mark.parametrize(
    ("limits", "budget"),
    [
        (DEFAULT_LIMITS, (10_000_000, "time_s")),
        (Limits(max_memory_bytes=256 * 1024**2), (4_194_304, "max_memory_bytes")),
        (Limits(time_s=10.0, max_memory_bytes=None), (50_000_000, "time_s")),
        (Limits(time_s=1e-9), (1, "time_s")),
    ],
)
def test_minijinja_fuel_is_set_by_time_or_by_memory_whichever_is_less(limits: Limits, budget: tuple[int, str]) -> None:
    assert fuel_budget(limits) == budget


def test_minijinja_names_the_limit_that_set_its_fuel() -> None:
    limits = Limits(max_memory_bytes=64 * 1024**2, isolate=False)
    with pytest.raises(RenderLimitError) as raised:
        render(
            "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
            "minijinja",
            limits,
        )
    assert (raised.value.limit, raised.value.message) == (
        "max_memory_bytes",
        "render ran out of fuel (1,048,576 fuel, set by max_memory_bytes=67108864)",
    )


@engines
def test_output_size_is_bounded(engine: EngineName) -> None:
    limits = Limits(max_output_chars=1000)
    assert len(render("{% for i in range(1000) %}x{% endfor %}", engine, limits)) == 1000
    with pytest.raises(RenderLimitError) as raised:
        render("{% for i in range(1001) %}x{% endfor %}", engine, limits)
    assert raised.value.limit == "max_output_chars"


def test_jinja2_recursion_depth_is_configurable() -> None:
    source = "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}done{% endif %}{% endmacro %}{{ f(depth) }}"
    limits = Limits(max_recursion=5)
    assert render(source, "jinja2", limits, depth=4) == "done"
    with pytest.raises(RenderLimitError) as raised:
        render(source, "jinja2", limits, depth=5)
    assert raised.value.limit == "max_recursion"


def test_jinja2_operand_size_is_bounded_before_the_value_is_built() -> None:
    limits = Limits(max_operand_chars=100)
    assert render("{{ 'ab' * 50 }}|{{ ([1] * 3)|length }}|{{ 2 ** 10 }}", "jinja2", limits) == "ab" * 50 + "|3|1024"
    for source in ("{{ 'ab' * 51 }}", "{{ 51 * 'ab' }}", "{{ [0] * 101 }}", "{{ 10 ** 1000 }}"):
        with pytest.raises(RenderLimitError):
            render(source, "jinja2", limits)


ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ raise_exception.__globals__ }}",
    "{{ strftime_now.__globals__['__builtins__'] }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ dict.__class__ }}",
    "{{ (messages|attr('__class__')).__base__ }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ lipsum.__globals__['os'].popen('id').read() }}",
    "{% set ns = namespace() %}{% set ns.__class__ = 1 %}",
    "{{ '{0.__class__}'.format(messages) }}",
]


@engines
@pytest.mark.parametrize("source", ESCAPES)
def test_no_attribute_escape(engine: EngineName, source: str) -> None:
    try:
        output = render(source, engine, messages=[])
    except ChatcapsError:
        return
    for marker in ("class", "module", "function", "builtin", "uid=", "<"):
        assert marker not in output


def test_jinja2_reports_escapes_as_security_errors() -> None:
    with pytest.raises(TemplateSecurityError):
        render("{{ ''.__class__.__mro__ }}", "jinja2")


def test_deadline_never_fires_after_a_finished_render() -> None:
    renderer = compile_template("{% for i in range(200) %}{{ i }}{% endfor %}", limits=Limits(time_s=0.05))
    for _ in range(300):
        renderer.render({})
    time.sleep(0.3)  # a stray injected exception would surface during this sleep or the next statement
    assert renderer.render({}).startswith("0123")


def test_a_timed_out_render_does_not_disturb_other_threads() -> None:
    slow = compile_template(NESTED_LOOPS, limits=Limits(time_s=0.3))
    fast = compile_template("{{ n }}")
    errors: list[BaseException] = []
    results: list[str] = []

    def run_slow() -> None:
        try:
            slow.render({})
        except RenderLimitError as error:
            errors.append(error)

    def run_fast(n: int) -> None:
        deadline = time.perf_counter() + 0.6
        while time.perf_counter() < deadline:
            results.append(fast.render({"n": n}))

    threads = [threading.Thread(target=run_slow)] + [threading.Thread(target=run_fast, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [error.limit for error in errors] == ["time_s"]  # type: ignore[attr-defined]
    assert set(results) == {"0", "1", "2"}


DIFFERENCES = json.loads((DATA / "engine_differences.json").read_text(encoding="utf-8"))


@engines
@pytest.mark.parametrize("case", DIFFERENCES, ids=[case["name"] for case in DIFFERENCES])
def test_known_engine_differences_are_as_documented(engine: EngineName, case: dict[str, Any]) -> None:
    """Pins each difference listed in docs/engines.md, so a change in either engine shows up here."""
    expected = case[engine]
    if "output" in expected:
        assert render(case["source"], engine, **case["variables"]) == expected["output"]
    else:
        with pytest.raises(TemplateRenderError, match=re.escape(expected["error"])):
            render(case["source"], engine, **case["variables"])


def _loop_and_namespace() -> tuple[Any, Any]:
    """A live `loop` object and a template namespace, as a template sees them."""
    from chatcaps.engines.jinja2_engine import _LimitedSandbox

    seen: list[Any] = []
    env = _LimitedSandbox(DEFAULT_LIMITS)
    env.globals["grab"] = seen.append
    template = env.from_string(
        "{% set ns = namespace(found=1) %}{{ grab(ns) }}{% for x in [1, 2] %}{{ grab(loop) }}{% endfor %}"
    )
    template.render()
    return seen[0], seen[1]


_NAMESPACE, _LOOP = _loop_and_namespace()
_LOOKUP_OBJECTS = {
    "dict": {"role": "user", "items": "shadowed", 3: "three"},
    "str": "Hello",
    "namespace": _NAMESPACE,
    "loop": _LOOP,
    "list": [1, 2],
}
_LOOKUP_NAMES = ["role", "missing", "items", "get", "keys", "clear", "pop", "update", "setdefault", "__class__",
                 "_private", "__init__", "strip", "format", "format_map", "startswith", "found", "index0", "last",
                 "cycle", "_after", "append", "index", "mro"]  # fmt: skip


def _same_answer(ours: Any, theirs: Any) -> bool:
    import jinja2

    if isinstance(theirs, jinja2.Undefined):
        return (
            type(ours) is type(theirs)
            and ours._undefined_hint == theirs._undefined_hint
            and ours._undefined_name == theirs._undefined_name
            and ours._undefined_exception is theirs._undefined_exception
        )
    return bool(ours == theirs)


@pytest.mark.parametrize("kind", sorted(_LOOKUP_OBJECTS))
@pytest.mark.parametrize("name", _LOOKUP_NAMES)
def test_fast_lookups_answer_exactly_as_jinja2s_sandbox(kind: str, name: str) -> None:
    """The jinja2 engine's shortcuts for `obj.name` and `obj['name']` on dicts, strings, namespaces and loops return
    what transformers' sandbox returns, unsafe names included (those stay refused)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from chatcaps.engines.jinja2_engine import _LimitedSandbox

    ours, theirs = _LimitedSandbox(DEFAULT_LIMITS), ImmutableSandboxedEnvironment()
    obj = _LOOKUP_OBJECTS[kind]
    for lookup in ("getattr", "getitem"):
        mine, reference = getattr(ours, lookup)(obj, name), getattr(theirs, lookup)(obj, name)
        assert type(mine) is type(reference), (lookup, mine, reference)
        if callable(reference) and not isinstance(reference, type):
            assert getattr(mine, "__self__", None) is getattr(reference, "__self__", None)
            assert getattr(mine, "__name__", None) == getattr(reference, "__name__", None)
        else:
            assert _same_answer(mine, reference), (lookup, mine, reference)
    for argument in (3, 0, -1, slice(1, None), slice("a", None), ["unhashable"]):
        mine, reference = ours.getitem(obj, argument), theirs.getitem(obj, argument)
        assert type(mine) is type(reference), (argument, mine, reference)
        assert _same_answer(mine, reference), (argument, mine, reference)


_CALLS = [
    "{% macro m(x) %}<{{ x }}>{% endmacro %}{% autoescape true %}{{ m('<a>') }}{% endautoescape %}|{{ m('<b>') }}",
    "{% macro m(x) %}[{{ caller() }}{{ x }}]{% endmacro %}{% for i in [1, 2] %}{% call m(i) %}c{{ i }}{% endcall %}"
    "{% endfor %}",
    "{% for s in texts %}{{ s.strip() }}{{ s.split(',') }}{{ s.replace('a', 'bb') }}{{ '-'.join(texts) }}"
    "{{ s.center(9) }}{% endfor %}",
    "{% for k in ['k', 'z'] %}{{ data.get(k, 'none') }}{{ data.items() | list }}{{ data['items'] }}{% endfor %}",
    "{{ texts[0] }}{{ texts[1:] }}{{ texts[9] is defined }}{{ texts[-1] }}{{ 'a' ~ 1 ~ none ~ texts }}",
]


@pytest.mark.parametrize("source", _CALLS)
def test_fast_calls_render_exactly_as_jinja2s_sandbox(source: str) -> None:
    """The jinja2 engine's shortcuts for calling str and dict methods and macros (in loops, in call blocks, under
    autoescape) render what transformers' sandbox renders."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from chatcaps.engines.jinja2_engine import _LimitedSandbox

    theirs = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    variables = {"texts": ["a,b", " c "], "data": {"k": 1, "items": 5}}
    assert _LimitedSandbox(DEFAULT_LIMITS).from_string(source).render(variables) == theirs.from_string(source).render(
        variables
    )


def _nested(depth: int) -> Any:
    value: Any = "x"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def _from_stack(frames: int, call: Any) -> Any:
    return call() if frames <= 0 else _from_stack(frames - 1, call)


def test_plain_data_copies_deep_values_while_two_frames_a_level_would_fit() -> None:
    """Past the usual nesting the room left on the stack decides, as when the walk took two frames a level: what
    walks the copy again (the JSON encoder, the template) must fit too."""
    from chatcaps.engines.conversation import plain_data
    from chatcaps.errors import InputError

    assert plain_data(_nested(300)) == _nested(300)
    with pytest.raises(InputError, match="nested too deeply"):
        plain_data(_nested(600))
    with pytest.raises(InputError, match="nested too deeply"):
        _from_stack(600, lambda: plain_data(_nested(300)))


APPENDING = (
    "{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append('x') %}{% set _ = messages.append(2) %}{{ ns.ids }}"
)


@engines
def test_the_probes_mutable_renderer_lets_a_template_change_its_data_and_nothing_else(engine: EngineName) -> None:
    """`mutable_renderer` (for the probes alone) renders what the sandbox refuses only because the template changes
    a list, on a copy of the variables; a user's render keeps the refusal, and every other check stands."""
    from chatcaps.engines import mutable_renderer

    messages = [1]
    with pytest.raises((TemplateSecurityError, TemplateRenderError)):
        compile_template(APPENDING, engine=engine).render({"messages": messages})
    mutable = mutable_renderer(compile_template(APPENDING, engine=engine))
    assert (mutable.engine, mutable.render({"messages": messages}), messages) == ("jinja2", "['x']", [1])
    escape = mutable_renderer(compile_template("{{ messages.__class__.__mro__ }}", engine=engine))
    with pytest.raises(TemplateSecurityError):
        escape.render({"messages": messages})
