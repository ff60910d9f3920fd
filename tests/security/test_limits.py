"""Each sandbox limit is a named `Limits` field: set small, it stops exactly the operation it names, at its value,
and leaves one just under it alone. Also the fixes found by the corpus and the fuzzing, one test each."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatcaps import Limits
from chatcaps.engines import ENGINE_NAMES, EngineName, compile_template, render_conversation
from chatcaps.engines.bounds import bounded_json, json_size, plain_json_bound, printed_size, printf_size, replace_size
from chatcaps.errors import InputError, RenderLimitError, TemplateRenderError

from .harness import nested

engines = pytest.mark.parametrize("engine", ENGINE_NAMES)
SMALL = Limits(max_operand_chars=100)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def render(source: str, limits: Limits = SMALL, engine: EngineName = "jinja2", **variables: object) -> str:
    return compile_template(source, engine=engine, limits=limits).render(variables)


def limit_of(source: str, limits: Limits = SMALL, engine: EngineName = "jinja2", **variables: object) -> str:
    with pytest.raises(RenderLimitError) as raised:
        render(source, limits, engine, **variables)
    return raised.value.limit


@pytest.mark.parametrize(
    ("at_limit", "over_limit"),
    [
        ("{{ 'x' * 50 ~ 'y' * 50 }}", "{{ 'x' * 50 ~ 'y' * 51 }}"),
        ("{{ 'x' * 50 + 'y' * 50 }}", "{{ 'x' * 50 + 'y' * 51 }}"),
        (
            "{% set t %}{{ 'x' * 50 }}{{ 'y' * 50 }}{% endset %}{{ t }}",
            "{% set t %}{{ 'x' * 51 }}{{ 'y' * 50 }}{% endset %}",
        ),
        ("{{ ('ab' * 10)|replace('a', 'x' * 9) }}", "{{ ('ab' * 10)|replace('a', 'x' * 10) }}"),
        ("{{ ('ab' * 10).replace('a', 'x' * 9) }}", "{{ ('ab' * 10).replace('a', 'x' * 10) }}"),
        ("{{ ['x' * 50, 'y' * 50]|join }}", "{{ ['x' * 50, 'y' * 51]|join }}"),
        ("{{ ''.join(['x' * 50, 'y' * 50]) }}", "{{ ''.join(['x' * 50, 'y' * 51]) }}"),
        ("{{ 'x'|center(100) }}", "{{ 'x'|center(101) }}"),
        ("{{ 'x'.ljust(100) }}", "{{ 'x'.rjust(101) }}"),
        ("{{ '%96d' % 1 }}", "{{ '%101d' % 1 }}"),
        ("{{ '{:>94}'.format(1) }}", "{{ '{:>101}'.format(1) }}"),
        ("{{ '%96d'|format(1) }}", "{{ '%101d'|format(1) }}"),
        ("{{ (['x'] * 100)|length }}", "{{ ['x'] * 101 }}"),
        ("{{ 'a'|indent(99) }}", "{{ 'a\nb'|indent(50) }}"),
        ("{{ [1]|batch(100, 0)|list|length }}", "{{ [1]|batch(101, 0)|list }}"),
    ],
)
def test_max_operand_chars_stops_each_string_builder_at_its_value(at_limit: str, over_limit: str) -> None:
    render(at_limit)
    assert limit_of(over_limit) == "max_operand_chars"


def test_printing_a_list_counts_every_reference_to_a_shared_string() -> None:
    """`[s] * n` is n references, but prints n copies: the printed size is what is checked."""
    assert limit_of("{{ ['x' * 30] * 3 }}") == "max_operand_chars"  # 3 x 32 characters printed
    assert render("{{ ['x' * 30] * 2 }}") == str(["x" * 30] * 2)


@engines
def test_tojson_and_indent_are_checked_before_building_on_both_engines(engine: EngineName) -> None:
    assert limit_of("{{ messages|tojson(indent=1000) }}", engine=engine, messages=[[1]]) == "max_operand_chars"
    assert render("{{ messages|tojson(indent=2) }}", engine=engine, messages=[1]) == "[\n  1\n]"
    assert limit_of("{{ 'a\nb\nc'|indent(40) }}", engine=engine) == "max_operand_chars"
    assert limit_of("{{ strftime_now('%c' * 2) }}", engine=engine) == "max_operand_chars"


@engines
def test_indented_tojson_is_counted_as_it_is_built(engine: EngineName) -> None:
    """A usual indent is streamed and stops at the limit (100 here); output is json.dumps' to the character."""
    items = list(range(20))
    expected = json.dumps(items[:8], indent=4)
    assert render("{{ messages|tojson(indent=4) }}", engine=engine, messages=items[:8]) == expected
    assert limit_of("{{ messages|tojson(indent=4) }}", engine=engine, messages=items) == "max_operand_chars"
    assert limit_of("{{ messages|tojson(indent=' ' * 65) }}", engine=engine, messages=[1]) == "max_operand_chars"


@given(value=json_values, indent=st.sampled_from([None, 0, 2, 4, "\t", " " * 64, " " * 65]), sort_keys=st.booleans())
def test_bounded_json_is_json_dumps(value: object, indent: object, sort_keys: bool) -> None:
    expected = json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)  # type: ignore[arg-type]
    assert bounded_json(value, 10**6, False, indent, None, sort_keys) == expected


@given(
    value=json_values,
    indent=st.sampled_from([None, 2, "\t"]),
    sort_keys=st.booleans(),
    ensure_ascii=st.booleans(),
)
def test_minijinja_writes_the_renders_own_input_as_json_dumps_within_the_limit(
    value: object, indent: object, sort_keys: bool, ensure_ascii: bool
) -> None:
    """On minijinja, `tojson` of the input (a read-only copy, written from the plain container it stands for) is
    `json.dumps`, never longer than `max_operand_chars` whatever its escapes; refused past the limit, or early where
    compact JSON's estimate passes it."""
    expected = json.dumps([value], ensure_ascii=ensure_ascii, indent=indent, sort_keys=sort_keys)  # type: ignore[arg-type]
    source = "{{ messages|tojson(indent=i, sort_keys=s, ensure_ascii=a) }}"
    renderer = compile_template(source, engine="minijinja", limits=SMALL)
    variables = {"messages": [value], "i": indent, "s": sort_keys, "a": ensure_ascii}
    try:
        assert renderer.render(variables) == expected
        assert len(expected) <= SMALL.max_operand_chars
    except RenderLimitError as error:
        assert error.limit == "max_operand_chars"
        # Refused past the limit, or early only where compact JSON's estimate passes it.
        early = indent is None and json_size([value], None, None, SMALL.max_operand_chars) > SMALL.max_operand_chars
        assert len(expected) > SMALL.max_operand_chars or early
    wide = "{{ messages|tojson(separators=(',' * 100, ':')) }}"
    assert limit_of(wide, engine="minijinja", messages=[1, 2]) == "max_operand_chars"


@given(value=json_values, ensure_ascii=st.booleans())
def test_plain_json_bound_is_never_below_what_json_writes(value: object, ensure_ascii: bool) -> None:
    """The bound that lets `tojson` of the render's input skip `json_size`'s walk is never below the JSON
    `json.dumps` writes, escapes and values held twice included."""
    for data in ([value], {"k": value, "again": [value, value]}):
        assert plain_json_bound(data, ensure_ascii, 1 << 40) >= len(json.dumps(data, ensure_ascii=ensure_ascii))


@engines
def test_tojson_of_an_input_that_shares_one_container_is_refused_before_it_is_written(engine: EngineName) -> None:
    """100,000 references to one 1,000-character message: 100 MB of JSON from 1 KB of memory, refused by the
    estimate (which walks a shared container once) before anything is written."""
    shared = {"role": "user", "content": "x" * 1000}
    messages = [shared] * 100_000
    assert limit_of("{{ messages|tojson }}", Limits(), engine, messages=messages) == "max_operand_chars"


@engines
@pytest.mark.parametrize(("text", "ensure_ascii"), [("\x1f" * 20, False), ("\U0001f600" * 10, True)])
def test_tojson_counts_escapes_as_written(engine: EngineName, text: str, ensure_ascii: bool) -> None:
    """A string JSON writes six or twelve characters a character for: 20 or 10 characters estimated, 120 written."""
    source = "{{ [t]|tojson(ensure_ascii=a) }}"
    assert len(json.dumps([text], ensure_ascii=ensure_ascii)) == 124
    assert limit_of(source, engine=engine, t=text, a=ensure_ascii) == "max_operand_chars"
    assert render(source, Limits(max_operand_chars=124), engine, t=text, a=ensure_ascii) == json.dumps(
        [text], ensure_ascii=ensure_ascii
    )


def test_max_int_bits_bounds_powers_and_products() -> None:
    limits = Limits(max_int_bits=100)
    assert render("{{ 2 ** 100 }}", limits) == str(2**100)
    assert limit_of("{{ 2 ** 101 }}", limits) == "max_int_bits"
    assert render("{{ (2 ** 49) * (2 ** 49) }}", limits) == str(2**98)
    assert limit_of("{{ (2 ** 50) * (2 ** 50) }}", limits) == "max_int_bits"


@engines
def test_max_range_is_named(engine: EngineName) -> None:
    assert render("{{ range(100000)|length }}", engine=engine) == "100000"
    assert limit_of("{{ range(100001)|length }}", engine=engine) == "max_range"


def test_max_range_is_configurable_on_jinja2() -> None:
    assert render("{{ range(10)|length }}", Limits(max_range=10)) == "10"
    assert limit_of("{{ range(11) }}", Limits(max_range=10)) == "max_range"
    assert limit_of("{{ range(10 ** 30) }}") == "max_range"  # longer than sys.maxsize


def test_max_memory_bytes_stops_a_render_that_keeps_growing() -> None:
    source = (
        "{% set big = 'x' * 4000000 %}{% set ns = namespace(l=[]) %}"
        "{% for i in range(100000) %}{% set ns.l = ns.l + [big ~ i] %}{% endfor %}"
    )
    limits = Limits(time_s=5.0, max_memory_bytes=200 * 1024**2)
    started = time.perf_counter()
    assert limit_of(source, limits) == "max_memory_bytes"
    assert time.perf_counter() - started < limits.time_s


def test_sum_of_lists_takes_linear_time_on_both_engines() -> None:
    for engine in ENGINE_NAMES:
        started = time.perf_counter()
        assert render("{{ ([[0]] * 200000)|sum(start=[])|length }}", Limits(), engine) == "200000"
        # Linear: 0.1-0.3 s here, 1 s on a loaded 2-core machine; quadratic (Python's own sum of lists) takes minutes.
        assert time.perf_counter() - started < 5.0
        assert render("{{ [1, 2, 3]|sum }}|{{ [[1], [2]]|sum(start=[0]) }}", Limits(), engine) == "6|[0, 1, 2]"
    with pytest.raises(TemplateRenderError, match='can only concatenate list \\(not "tuple"\\) to list'):
        render("{{ [[1], (2,)]|sum(start=[]) }}", Limits())


def test_a_minijinja_panic_is_a_render_error() -> None:
    """minijinja 3.0 panicked on a reversed slice of an empty list (pyo3 raises a BaseException for a Rust panic);
    3.1 renders it. Either way the caller sees the output or a chatcaps error, never the panic."""
    template = "{% for m in messages[::-1] %}{% endfor %}done"
    try:
        rendered = render(template, Limits(), "minijinja", messages=[])
    except TemplateRenderError as error:
        assert "minijinja panicked: index out of bounds" in str(error)
    else:
        assert rendered == "done"


@engines
def test_input_deeper_than_the_recursion_limit_is_an_input_error(engine: EngineName) -> None:
    renderer = compile_template("{{ messages[0].content }}", engine=engine)
    with pytest.raises(InputError, match="nested too deeply"):
        render_conversation(renderer, [{"role": "user", "content": nested(5000, "list")}])


def test_size_estimates_are_exact_where_they_can_be() -> None:
    assert printed_size("abc", 100) == 3
    assert printed_size(["ab", {"k": 1}], 1000) >= len(str(["ab", {"k": 1}]))
    assert printed_size([["x" * 10] * 10] * 10, 10**9) >= 1000
    assert printf_size("%5s|%-3d|%.2f%%", ("ab", 7, 1.5), 10**9) >= len("{:>5}|{:<3d}|{:.2f}%".format("ab", 7, 1.5))
    assert printf_size("%(a)s%(a)s", {"a": "x" * 10}, 10**9) >= 20
    assert replace_size("abcabc", "b", "xyz") == len("abcabc".replace("b", "xyz"))
    assert replace_size("abcabc", "", "-") == len("abcabc".replace("", "-"))
    assert replace_size("abcabc", "b", "xyz", 1) == len("abcabc".replace("b", "xyz", 1))
    value = {"a": [1, {"b": "c"}], "d": "e"}
    assert json_size(value, 4, None, 10**9) >= len(json.dumps(value, indent=4))
