"""The escape corpus (payloads.json): server-side template injection payloads, each through both engines and through
`compile_template` + render, `detect_caps` and `ChatTemplate.render`. None may reach Python internals: each ends in a
chatcaps error or in output that shows no Python repr, no planted secret and no change to the caller's data."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chatcaps import ChatTemplate, detect_caps
from chatcaps.engines import ENGINE_NAMES, EngineName, compile_template
from chatcaps.errors import ChatcapsError, TemplateSecurityError

from .harness import (
    CANARY_ENV,
    CANARY_FILE_TEXT,
    PAYLOADS,
    SETUPS,
    configure,
    leaks,
    payload_source,
    plant_canaries,
    short_conversation,
)

CATEGORIES = {
    "attribute-walk",
    "attr-filter",
    "map-attribute",
    "format-string",
    "globals-internals",
    "namespace",
    "dict",
    "range",
    "mutation",
    "files-env-imports",
}
payloads = pytest.mark.parametrize("payload", PAYLOADS, ids=[payload["name"] for payload in PAYLOADS])
engines = pytest.mark.parametrize("engine", ENGINE_NAMES)
setups = pytest.mark.parametrize("setup", SETUPS)


@pytest.fixture(scope="module")
def canary_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return plant_canaries(tmp_path_factory.mktemp("canary"))


def _outcome(run: Any) -> tuple[str, str]:
    """("output", text) or ("error", message): anything but a chatcaps error fails the test."""
    try:
        return "output", str(run())
    except ChatcapsError as error:
        return "error", f"{type(error).__name__}: {error}"


def test_the_corpus_covers_every_category_the_issue_names() -> None:
    counts = Counter(payload["category"] for payload in PAYLOADS)
    assert len(PAYLOADS) >= 40
    assert set(counts) == CATEGORIES
    assert len({payload["name"] for payload in PAYLOADS}) == len(PAYLOADS)


def test_the_canaries_are_readable_by_python_itself(canary_file: Path) -> None:
    """The secrets are really there: a payload that does not print them was blocked, not pointed at nothing."""
    import os

    assert os.environ[CANARY_ENV[0]] == CANARY_ENV[1]
    assert canary_file.read_text(encoding="utf-8") == CANARY_FILE_TEXT


@setups
@payloads
def test_payload_is_blocked_by_the_engine(setup: str, payload: dict[str, Any], canary_file: Path) -> None:
    engine, limits = configure(setup)
    messages = short_conversation()
    before = copy.deepcopy(messages)
    source = payload_source(payload, canary_file)
    variables = {"messages": messages, "tools": None}
    kind, text = _outcome(lambda: compile_template(source, engine=engine, limits=limits).render(variables))
    assert leaks(text) == [], f"{kind}: {text[:300]}"
    assert messages == before, "the template changed the caller's messages"


@setups
@payloads
def test_payload_is_blocked_through_render(setup: str, payload: dict[str, Any], canary_file: Path) -> None:
    engine, limits = configure(setup)
    messages = short_conversation()
    before = copy.deepcopy(messages)
    source = payload_source(payload, canary_file)
    kind, text = _outcome(lambda: ChatTemplate(source, engine=engine, limits=limits).render(messages).prompt)
    assert leaks(text) == [], f"{kind}: {text[:300]}"
    assert messages == before


@setups
@payloads
def test_payload_is_blocked_through_detect_caps(setup: str, payload: dict[str, Any], canary_file: Path) -> None:
    engine, limits = configure(setup)
    source = payload_source(payload, canary_file)
    kind, text = _outcome(lambda: detect_caps(source, engine=engine, limits=limits).to_json().decode())
    assert leaks(text) == [], f"{kind}: {text[:300]}"


def test_jinja2_refuses_attribute_walks_as_security_errors() -> None:
    """jinja2's sandbox names the refusal; the walk does not just print nothing."""
    for name in ("str-mro-subclasses", "int-mro", "getattribute-method", "namespace-set-dunder"):
        source = next(payload["template"] for payload in PAYLOADS if payload["name"] == name)
        with pytest.raises(TemplateSecurityError):
            compile_template(source).render({"messages": short_conversation()})


@engines
def test_objects_that_are_not_data_print_as_their_type_name(engine: EngineName) -> None:
    """A function, a class, a bound method or a generator prints `<TypeName>`, never its repr with an address."""
    renderer = compile_template(
        "{{ raise_exception }}|{{ messages[0].items }}|{{ [strftime_now] }}|{{ messages|map(attribute='role') }}",
        engine=engine,
    )
    expected = {
        "jinja2": "<function>|<builtin_function_or_method>|['<function>']|<generator>",
        "minijinja": (
            "minijinja_py::environment::Environment::add_function::{{closure}}|<method>|"
            "[minijinja_py::environment::Environment::add_function::{{closure}}]|['user', 'assistant']"
        ),
    }
    assert renderer.render({"messages": short_conversation()}) == expected[engine]


def test_minijinja_sees_read_only_copies_of_lists_and_dicts() -> None:
    """minijinja calls public Python methods of what it is given; changing ones are hidden, `copy` is read-only."""
    messages = short_conversation()
    renderer = compile_template(
        "{{ messages.append is defined }}|{{ messages[0].update is defined }}|{{ messages[0].get('role') }}|"
        "{{ messages|length }}|{% set c = messages.copy() %}{{ c.append is defined }}|{{ messages|tojson }}",
        engine="minijinja",
    )
    assert renderer.render({"messages": messages}) == (
        'False|False|user|2|False|[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there"}]'
    )
    for source in ("{{ messages.append(1) }}", "{{ messages[0].update({'content': 'x'}) }}", "{{ messages.pop() }}"):
        with pytest.raises(ChatcapsError):
            compile_template(source, engine="minijinja").render({"messages": messages})
    assert messages == short_conversation()


def test_minijinja_hands_back_read_only_lists_it_was_given() -> None:
    """A list the template wrote comes back from a data method (a `get` default, `fromkeys`) or from `sum` as a
    read-only copy: minijinja hands Python such lists as plain ones, which `extend` could double without bound."""
    renderer = compile_template(
        "{% set got = messages[0].get('none', [0]) %}{% set summed = [[0], [1]]|sum(start=[]) %}"
        "{% set keys = messages[0].fromkeys([0]) %}"
        "{{ got }} {{ got.extend is defined }}|{{ summed }} {{ summed.extend is defined }}|"
        "{{ keys.role }} {{ keys.role.extend is defined }} {{ keys.update is defined }}|{{ [1, 2]|sum }}",
        engine="minijinja",
    )
    assert renderer.render({"messages": short_conversation()}) == "[0] False|[0, 1] False|[0] False False|3"


def test_payloads_file_is_data_with_the_fields_the_tests_read() -> None:
    raw = json.loads((Path(__file__).parent / "payloads.json").read_text(encoding="utf-8"))
    assert all(set(payload) == {"name", "category", "template"} for payload in raw)
