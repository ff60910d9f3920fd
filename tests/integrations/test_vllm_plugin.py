"""The chatcaps vLLM plugin through vLLM's own interfaces (src/chatcaps/integrations/vllm.py, docs/vllm.md).

The plugin is loaded as vLLM loads it (the `vllm.general_plugins` entry points, then the parser managers), the parser
composed as `vllm serve --tool-call-parser chatcaps --reasoning-parser chatcaps` composes it, and fed a real
tokenizer built here from each zoo template (a byte-level BPE with the template's markers and bos/eos as special
tokens, as a model's own tokenizer has them). The prompt is chatcaps' render, tokenized; the reply is read whole
(`Parser.parse`) and streamed one token at a time (`Parser.parse_delta`), and both equal `parse_reply` after the
decoded prompt. Replies: the llama.cpp parse cases chatcaps reads right (tests/data/reply/llamacpp_labels.json) and
the zoo's tool-call round trip (tests/reply/test_reply_calls_zoo.py).

vLLM is not in the project's venv (it pulls CUDA torch): this runs in the peer venv (scripts/vllm_plugin_check.sh).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from paths import DOCS, TESTS

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here: run bash scripts/vllm_plugin_check.sh")
sys.path.insert(0, str(TESTS / "reply"))  # the reply tests' corpus and round trip, read as they read them

from calls_renders import renders  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from test_llamacpp_corpus import CASES, LABELS, RUNNER  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from test_reply_calls_zoo import CONTENT, FAILURES, TOOLS, _rich, trips  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.parser.abstract_parser import DelegatingParser  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.plugins import load_plugins_by_group  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.reasoning import ReasoningParserManager  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from chatcaps import ChatTemplate, Reply, parse_reply  # noqa: E402
from chatcaps.integrations.vllm import ChatcapsParser, without_calls  # noqa: E402
from chatcaps.zoo import ZooTemplate  # noqa: E402

RUNNING = [case for case in CASES if case["id"] in LABELS["passing"] and not case["options"].get("is_partial")]
"""The llama.cpp cases chatcaps reads right, but partial ones (a server hands a parser whole outputs)."""


@pytest.fixture(scope="module", autouse=True)
def plugin() -> None:
    """The plugin as vLLM loads it: its entry point found in `vllm.general_plugins` and called."""
    plugins = load_plugins_by_group("vllm.general_plugins")
    assert "chatcaps" in plugins
    plugins["chatcaps"]()


def test_the_entry_point_registers_both_parsers() -> None:
    assert "chatcaps" in ToolParserManager.list_registered()
    assert "chatcaps" in ReasoningParserManager.list_registered()


def byte_tokenizer(template: ChatTemplate) -> Any:
    """The template in a tokenizer made here: the byte alphabet, and every marker its Caps name as a special token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    caps = template.caps
    call_format = caps.tools.call_format
    markers = {
        caps.reasoning.start_marker,
        caps.reasoning.end_marker,
        caps.end_of_turn,
        *caps.reasoning.content_headers,
    }
    if call_format is not None:
        markers |= {call_format.begin, call_format.end, *call_format.alternative_openers}
    markers |= {template.source.bos_token, template.source.eos_token}
    special = sorted(marker for marker in markers if marker and marker.strip() == marker)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    backend.train_from_iterator([], trainer=trainer)
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special])
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend,
        bos_token=template.source.bos_token or None,
        eos_token=template.source.eos_token or None,
    )
    tokenizer.chat_template = template.source.text
    return tokenizer


@cache
def tokenizer_of(file: str) -> Any:
    return byte_tokenizer(RUNNER.template_of(file))


def served(
    tokenizer: Any,
    prompt: str,
    text: str,
    tools: Sequence[Mapping[str, Any]] | None,
    parser_class: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """vLLM's result for `text` after `prompt`, whole and streamed token by token, each as a message."""
    messages = [{"role": "user", "content": "Hi"}]
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert tokenizer.decode(prompt_ids, skip_special_tokens=False) == prompt

    def request() -> tuple[Any, Any]:
        body = ChatCompletionRequest(model="m", messages=messages, tools=list(tools) if tools else None)
        parser = parser_class(tokenizer, body.tools, chat_template_kwargs={})
        body = parser.adjust_request(body)
        assert body.skip_special_tokens is False
        parser.set_prompt_token_ids(prompt_ids)
        return parser, body

    parser, body = request()
    reasoning, content, calls = parser.parse(text, body, enable_auto_tools=True)
    whole = {
        "reasoning_content": reasoning,
        "content": content or "",
        "tool_calls": [{"name": call.name, "arguments": call.arguments, "id": call.id} for call in calls or ()],
    }
    parser, body = request()
    pieces = token_pieces(tokenizer, text)
    deltas = [
        parser.parse_delta(piece, ids, body, prompt_ids, finished=at == len(pieces) - 1)
        for at, (piece, ids) in enumerate(pieces)
    ]
    return whole, merged(deltas)


def token_pieces(tokenizer: Any, text: str) -> list[tuple[str, list[int]]]:
    """`text` as vLLM's detokenizer hands it on: one token's text at a time (the bytes of a character together),
    and a last empty delta for the stop token, as the engine's last output."""
    pieces: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    for token in tokenizer.encode(text, add_special_tokens=False):
        pending.append(token)
        piece = tokenizer.decode(pending, skip_special_tokens=False)
        if "\ufffd" not in piece:
            pieces.append((piece, pending))
            pending = []
    if pending:
        pieces.append((tokenizer.decode(pending, skip_special_tokens=False), pending))
    return [*pieces, ("", [tokenizer.eos_token_id or 0])]


def merged(deltas: Sequence[Any]) -> dict[str, Any]:
    """vLLM's `DeltaMessage`s as the message a client builds of them."""
    reasoning, content = "", ""
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        if delta is None:
            continue
        reasoning += delta.reasoning or ""
        content += delta.content or ""
        for piece in delta.tool_calls:
            call = calls.setdefault(piece.index, {"name": "", "arguments": "", "id": ""})
            call["id"] = piece.id or call["id"]
            if piece.function is not None:
                call["name"] += piece.function.name or ""
                call["arguments"] += piece.function.arguments or ""
    return {"reasoning_content": reasoning or None, "content": content, "tool_calls": [calls[i] for i in sorted(calls)]}


def expected(reply: Reply) -> dict[str, Any]:
    """`parse_reply`'s message as `served` writes vLLM's (ids aside: the plugin gives vLLM's where the text writes
    none)."""
    calls = [
        {"name": call["function"]["name"], "arguments": call["function"]["arguments"]} for call in reply.tool_calls
    ]
    return {"reasoning_content": reply.reasoning_content, "content": reply.content, "tool_calls": calls}


def without_ids(message: dict[str, Any]) -> dict[str, Any]:
    return {**message, "tool_calls": [{k: v for k, v in call.items() if k != "id"} for call in message["tool_calls"]]}


def composed(reasoning: bool = True, tools: bool = True) -> Any:
    """The parser `vllm serve` composes for the chatcaps flags given."""
    parser = ParserManager.get_parser(
        tool_parser_name="chatcaps" if tools else None,
        reasoning_parser_name="chatcaps" if reasoning else None,
        enable_auto_tools=True,
    )
    assert issubclass(parser, ChatcapsParser)
    return parser


def check(file: str, prompt: str, text: str, tools: Sequence[Mapping[str, Any]] | None, name: str) -> None:
    tokenizer = tokenizer_of(file)
    caps = RUNNER.template_of(file).caps
    prefix = prompt
    want = expected(parse_reply(text, caps, prefix=prefix, tools=tools))
    whole, streamed = served(tokenizer, prompt, text, tools, composed())
    assert without_ids(whole) == want, name
    assert without_ids(streamed) == want, name
    assert all(call["id"] for call in whole["tool_calls"]), name


@pytest.mark.parametrize("case", RUNNING, ids=[case["id"] for case in RUNNING])
def test_llamacpp_case_through_vllm(case: dict[str, Any], zoo: tuple[ZooTemplate, ...]) -> None:
    result = RUNNER.render(RUNNER.template_of(case["template"]), case)
    check(case["template"], result.prompt, case["reply"], case["tools"] or None, case["id"])


def test_a_reply_vllm_reads_is_what_llamacpp_expects(zoo: tuple[ZooTemplate, ...]) -> None:
    """Where the case reads reasoning apart (not llama.cpp's raw default) and continues no message, vLLM's message is
    the case's expected one, ids included where the case gives them."""
    checked = 0
    for case in RUNNING:
        options = case["options"]
        if options.get("reasoning_format", "none") == "none" or options.get("continue_final_message"):
            continue
        result = RUNNER.render(RUNNER.template_of(case["template"]), case)
        whole, streamed = served(
            tokenizer_of(case["template"]), result.prompt, case["reply"], case["tools"], composed()
        )
        for got in (whole, streamed):
            wanted_ids = {call.get("id") for call in case["expected"]["tool_calls"]}
            got = got if wanted_ids != {None} else without_ids(got)
            assert RUNNER.difference(case["expected"], got, False) == "", case["id"]
        checked += 1
    assert checked > 0


ROUND_TRIP_SAMPLE = 12
"""How many zoo templates with a call format the round trip runs through vLLM (one per call format shape first)."""


def test_zoo_round_trip_through_vllm(zoo: tuple[ZooTemplate, ...]) -> None:
    templates = {entry.file: entry for entry in zoo}
    shapes: dict[str, str] = {}
    for file in sorted(templates):
        template = RUNNER.template_of(file)
        call_format = template.caps.tools.call_format
        if call_format is None or file in FAILURES:
            continue
        shapes.setdefault(f"{call_format.shape}/{call_format.arguments}/{file[:12]}", file)
    sample = list(shapes.values())[:ROUND_TRIP_SAMPLE]
    assert len(sample) == ROUND_TRIP_SAMPLE
    for file in sample:
        template = RUNNER.template_of(file)
        trip = next(trip for trip in trips(template, _rich(template), CONTENT) if trip.ok)
        check(file, trip.prefix, trip.text, TOOLS, file)


def delegating(reasoning: bool, tools: bool) -> Any:
    """The split parsers as vLLM's own `DelegatingParser` composes a pair (what a mix with another parser gets)."""
    return type(
        "Split",
        (DelegatingParser,),
        {
            "reasoning_parser_cls": ReasoningParserManager.get_reasoning_parser("chatcaps") if reasoning else None,
            "tool_parser_cls": ToolParserManager.get_tool_parser("chatcaps") if tools else None,
        },
    )


SPLIT: list[tuple[str, bool, bool, Callable[[Any], Any]]] = [
    ("reasoning parser alone", True, False, without_calls),
    ("tool parser alone", False, True, lambda caps: caps),
]


@pytest.mark.parametrize(("name", "reasoning", "tools", "caps_of"), SPLIT, ids=[row[0] for row in SPLIT])
def test_each_parser_alone(
    name: str, reasoning: bool, tools: bool, caps_of: Callable[[Any], Any], zoo: tuple[ZooTemplate, ...]
) -> None:
    """One flag alone, under the unified parser and under vLLM's `DelegatingParser`: with the reasoning parser alone
    calls stay in the content; with the tool parser alone the reasoning does (read raw, as vLLM leaves it). Under
    `DelegatingParser` the text after a reasoning block the prompt closed reaches the client as generated (vLLM
    calls no reasoning parser there), so it is compared as llama.cpp compares, whitespace around it aside; and what
    a continued message's prompt already wrote is not read again, so no continued message is among these."""
    for case in [case for case in RUNNING if not case["options"].get("continue_final_message")][::7]:
        file, text, tool_list = case["template"], case["reply"], case["tools"] or None
        prompt = RUNNER.render(RUNNER.template_of(file), case).prompt
        caps = caps_of(RUNNER.template_of(file).caps)
        want = expected(
            parse_reply(text, caps, prefix=prompt, tools=tool_list)
            if reasoning
            else parse_reply(text, caps, tools=tool_list, raw=True)
        )
        for got in served(tokenizer_of(file), prompt, text, tool_list, composed(reasoning, tools)):
            assert without_ids(got) == want, (name, case["id"])
        typed = {
            **want,
            "tool_calls": [{**call, "arguments": json.loads(call["arguments"])} for call in want["tool_calls"]],
        }
        for got in served(tokenizer_of(file), prompt, text, tool_list, delegating(reasoning, tools)):
            assert RUNNER.difference(typed, got, False) == "", (name, case["id"])


def test_the_reasoning_parser_reads_token_ids(zoo: tuple[ZooTemplate, ...]) -> None:
    """`is_reasoning_end` and `extract_content_ids` on ids, as vLLM's engine core asks them to start a structured
    output after the reasoning: a prompt that opened the block is inside it until the end marker comes."""
    file = "llamacpp__Qwen-Qwen3-0.6B.jinja"
    template = RUNNER.template_of(file)
    tokenizer = tokenizer_of(file)
    parser = ReasoningParserManager.get_reasoning_parser("chatcaps")(tokenizer)
    opened = template.render([{"role": "user", "content": "Hi"}], reasoning="on").prompt + "<think>\n"
    closed = template.render([{"role": "user", "content": "Hi"}], reasoning="off").prompt
    ids = tokenizer.encode(opened, add_special_tokens=False)
    answer = tokenizer.encode("plan</think>\n\nAnswer.", add_special_tokens=False)
    assert parser.is_reasoning_end(tokenizer.encode(closed, add_special_tokens=False))
    assert not parser.is_reasoning_end(ids)
    assert not parser.is_reasoning_end(ids + answer[:2])
    assert parser.is_reasoning_end(ids + answer)
    assert not parser.is_reasoning_end(
        tokenizer.encode(closed.removesuffix("<think>\n\n</think>\n\n"), add_special_tokens=False)
    )
    parser.set_prompt_token_ids(ids)
    assert tokenizer.decode(parser.extract_content_ids(answer)) == "\n\nAnswer."
    assert json.dumps([parser.reasoning_start_str, parser.reasoning_end_str]) == '["<think>", "</think>"]'


def test_the_reasoning_effort_example_reaches_vllms_render(
    zoo: tuple[ZooTemplate, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/vllm.md's example, run as written (the Hub template replaced by the zoo's copy of it): the kwargs it
    computes are what vLLM's request hands its render."""
    page = (DOCS / "vllm.md").read_text("utf-8")
    example = page.split("```python\n")[1].split("```")[0]
    template = RUNNER.template_of("llamacpp__Qwen-Qwen3-0.6B.jinja")
    monkeypatch.setattr(ChatTemplate, "from_hub", lambda *args, **kwargs: template)
    namespace: dict[str, Any] = {}
    exec(example, namespace)
    assert namespace["extra"] == {"chat_template_kwargs": {"enable_thinking": False}}
    body = ChatCompletionRequest(model="m", messages=namespace["body"]["messages"], **namespace["extra"])
    assert body.build_chat_params(None, "auto").chat_template_kwargs["enable_thinking"] is False


def test_the_tokenizer_mode_selects_the_chatcaps_renderer() -> None:
    from vllm.renderers.registry import RENDERER_REGISTRY  # type: ignore[import-not-found,unused-ignore]
    from vllm.tokenizers.registry import TokenizerRegistry  # type: ignore[import-not-found,unused-ignore]

    from chatcaps.integrations.vllm_renderer import ChatcapsRenderer

    assert RENDERER_REGISTRY.load_renderer_cls("chatcaps") is ChatcapsRenderer
    assert TokenizerRegistry.load_tokenizer_cls("chatcaps") is TokenizerRegistry.load_tokenizer_cls("hf")


@pytest.mark.parametrize(("effort", "planned"), [("high", {"thinking": True}), ("none", {"thinking": False})])
def test_vllm_builds_the_chatcaps_renderer_from_a_model_config(
    effort: str, planned: dict[str, Any], tmp_path: Path, zoo: tuple[ZooTemplate, ...]
) -> None:
    """`--tokenizer-mode chatcaps` as `vllm serve` takes it: vLLM's model config over a model folder (a Qwen2 config
    and a tokenizer built here carrying DeepSeek V3.1's template, which reads `thinking`), the renderer built by
    vLLM's `renderer_from_config`, and its prompt for a request's effort: the template rendered with the control the
    effort means (vLLM alone would pass `enable_thinking`, which this template never reads)."""
    from vllm.config import DeviceConfig, ModelConfig, VllmConfig  # type: ignore[import-not-found,unused-ignore]
    from vllm.renderers.registry import renderer_from_config  # type: ignore[import-not-found,unused-ignore]

    from chatcaps.integrations.vllm_renderer import ChatcapsRenderer

    file = "deepseek-ai__DeepSeek-V3.1__rev-gguf.jinja"
    tokenizer = tokenizer_of(file)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**MODEL_CONFIG, "vocab_size": len(tokenizer)}))
    model = ModelConfig(model=str(tmp_path), tokenizer_mode="chatcaps")
    renderer = renderer_from_config(VllmConfig(model_config=model, device_config=DeviceConfig(device="cpu")))
    assert type(renderer) is ChatcapsRenderer

    messages = [{"role": "user", "content": "Hi"}]
    body = ChatCompletionRequest(model="m", messages=messages, reasoning_effort=effort)
    _, prompt = renderer.render_messages(body.messages, body.build_chat_params(None, "auto"))
    text = tokenizer.decode(prompt["prompt_token_ids"], skip_special_tokens=False)
    assert text == RUNNER.template_of(file).render(messages, template_args=planned).prompt


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_TAG = {
    "type": "tag",
    "begin": '<tool_call>\n{"name": "get_weather", "arguments": ',
    "content": {
        "type": "json_schema",
        "json_schema": WEATHER["function"]["parameters"],
        "style": "json",
        "any_order": False,
        "max_whitespace_cnt": 8,
        "excludes": [],
    },
    "end": "}\n</tool_call>",
}
REQUIRED = {"type": "tags_with_separator", "tags": [WEATHER_TAG], "separator": "\n", "at_least_one": True}
LAZY = {"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [WEATHER_TAG], "at_least_one": False}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
TAGS = [
    ("required", None, {**REQUIRED, "stop_after_first": False}),
    (NAMED, None, {**REQUIRED, "stop_after_first": True}),
    ("none", None, {"type": "any_text", "excludes": ["<tool_call>"], "max_tokens": None, "max_chars": None}),
    ("auto", None, None),
    ("auto", "function", {**LAZY, "stop_after_first": False, "excludes": []}),
]


@pytest.mark.parametrize(("choice", "strict", "tag"), TAGS, ids=["required", "named", "none", "auto", "auto-strict"])
def test_the_request_gets_the_templates_structural_tag(
    choice: Any, strict: str | None, tag: dict[str, Any] | None, zoo: tuple[ZooTemplate, ...]
) -> None:
    """What `vllm serve` hands its engine for a request with tools: the structural tag in the template's own call
    format (Qwen2.5's `<tool_call>` JSON), as vLLM's sampling parameters carry it; "auto" only where the operator
    asks for the call envelope on every request (`--tool-strict-level function`)."""
    parser = ParserManager.get_parser(
        tool_parser_name="chatcaps", reasoning_parser_name="chatcaps", enable_auto_tools=True, tool_strict_level=strict
    )(tokenizer_of("llamacpp__Qwen-Qwen2.5-7B-Instruct.jinja"), [WEATHER])
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER])
    body.tool_choice = choice
    sampling = parser.adjust_request(body).to_sampling_params(100, {})
    given = sampling.structured_outputs and json.loads(sampling.structured_outputs.structural_tag)
    assert given == (tag and {"type": "structural_tag", "format": tag})


def test_a_format_no_tag_holds_gets_the_grammar(zoo: tuple[ZooTemplate, ...]) -> None:
    """Qwen3-Coder's XML-like parameters: the GBNF chatcaps gives llama-server, in xgrammar's dialect, as the
    request's `structured_outputs.grammar`."""
    from chatcaps.reply.constraint import constraint

    file = "Qwen__Qwen3-Coder-30B-A3B-Instruct__rev-minja.jinja"
    parser = composed()(tokenizer_of(file), [WEATHER])
    body = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER])
    body.tool_choice = "required"
    sampling = parser.adjust_request(body).to_sampling_params(100, {})
    grammar = constraint(RUNNER.template_of(file).caps, [WEATHER], "required")
    assert grammar is not None and sampling.structured_outputs.grammar == grammar.grammar
    assert '"<tool_call>" "\\x0a<function=" "get_weather" ">"' in grammar.grammar


STRUCTURAL_FAILURES = {
    "llamacpp__openai-gpt-oss-120b.jinja": "its call text starts with the analysis message's <|end|>, which the model "
    "wrote before the reasoning ended (vLLM renders and reads gpt-oss with openai_harmony, not with chatcaps)",
}
NO_RENDER = "no render of the calls (every reasoning intent raised)"
STRUCTURAL_FAILURES |= {
    "CohereForAI__c4ai-command-r-v01__tool_use_jsonschema.jinja": NO_RENDER,
    "llamacpp__CohereForAI-c4ai-command-r-plus-tool_use.jinja": NO_RENDER,
}
PREFILL = (
    "the template takes a final assistant message for a prefill and writes only its content, so the turn of calls "
    "renders none"
)
STRUCTURAL_FAILURES |= {
    "nvidia__NVIDIA-Nemotron-Nano-9B-v2__vllm-tool.jinja": PREFILL,
    "nvidia__Nemotron-H-Reasoning__vllm-tool.jinja": PREFILL,
}
"""Zoo templates with a tag whose own render xgrammar does not accept, and why."""


def test_structural_tags_over_the_zoo(zoo: tuple[ZooTemplate, ...]) -> None:
    """Every zoo template whose call format gives a tag, judged by xgrammar (vLLM's structured-output engine) on
    the template's own tokenizer: under "required" it accepts the template's render of sentinel calls (every JSON
    type; two calls where it writes more than one) after the reasoning, and rejects prose and a call to an
    undeclared tool; under "auto" it accepts prose, then the calls; under "none" it rejects the calls."""
    from chatcaps.integrations.vllm_tags import structural_tag

    rejected, tagged = {}, 0
    for entry in zoo:
        template = RUNNER.template_of(entry.file)
        calls = template.caps.tools.call_format
        required = calls and structural_tag(template.caps, TOOLS, "required")
        if not required:
            continue
        tagged += 1
        accepts = xgrammar_judge(template, entry.eos_token)
        texts = after_reasoning(template, entry.eos_token)
        own = next((text for text in texts if accepts(required, text)), None)
        if own is None:
            rejected[entry.file] = texts[0] if texts else NO_RENDER
            continue
        undeclared = own.replace("get_weather", "get_wether")
        assert not accepts(required, "I will look up the weather.") and not accepts(required, undeclared), entry.file
        assert accepts(structural_tag(template.caps, TOOLS, "auto"), f"Sure. {own}"), entry.file
        assert not accepts(structural_tag(template.caps, TOOLS, "none"), own), entry.file
    assert {file: STRUCTURAL_FAILURES.get(file, text) for file, text in rejected.items()} == STRUCTURAL_FAILURES
    assert tagged == 60


def xgrammar_judge(template: ChatTemplate, eos: str) -> Callable[[Any, str], bool]:
    """Whether xgrammar, on the template's own tokenizer, takes a text whole under a structural tag or a grammar
    (its EBNF text), then the end of turn (any token stands for it where the template has none)."""
    import xgrammar  # type: ignore[import-not-found,unused-ignore]

    tokenizer = byte_tokenizer(template)
    end_of_turn = template.caps.end_of_turn or eos
    stop = (tokenizer.convert_tokens_to_ids(end_of_turn) if end_of_turn else None) or 0
    info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, stop_token_ids=[stop])
    compiler = xgrammar.GrammarCompiler(info)

    def accepts(constraint: Any, text: str) -> bool:
        compiled = (
            compiler.compile_grammar(constraint)
            if isinstance(constraint, str)
            else compiler.compile_structural_tag(json.dumps(constraint.model_dump()))
        )
        matcher = xgrammar.GrammarMatcher(compiled)
        return bool(matcher.accept_string(text)) and bool(matcher.accept_token(stop))

    return accepts


def after_reasoning(template: ChatTemplate, eos: str) -> list[str]:
    """The model's text of a turn of calls after each of the template's prompts (`calls_renders.renders`), from the
    end of its reasoning on: where vLLM starts a structured output."""
    end = template.caps.reasoning.end_marker
    return [(text.partition(end)[2] if end and end in text else text).lstrip() for _, text in renders(template, eos)]


GRAMMAR_FAILURES = {
    "llamacpp__Kimi-K2-Instruct.jinja": "calls render as JSON lines, not in the call format (the sandbox refuses the "
    "template's list.append), as under llama.cpp's engine",
    "llamacpp__Kimi-K2-Thinking.jinja": "calls render as JSON lines, not in the call format (the sandbox refuses the "
    "template's list.append), as under llama.cpp's engine",
    "llamacpp__MiniMax-M3.jinja": "arrays and objects render as nested parameters the call format does not hold, as "
    "under llama.cpp's engine",
    "llamacpp__meetkai-functionary-medium-v3.2.jinja": "the prompt writes the start of the calls (>>>), which the "
    "request's grammar, made before vLLM renders, does not see",
    "meetkai__functionary-medium-v2.2.jinja": "the prompt writes the start of the calls, which the request's grammar, "
    "made before vLLM renders, does not see",
}
"""Zoo templates without a tag whose GBNF, in xgrammar's dialect, does not accept their own render, and why."""


def test_grammars_over_the_zoo_for_formats_without_a_tag(zoo: tuple[ZooTemplate, ...]) -> None:
    """Templates whose call format is no tag (XML-like or typed parameters, Python calls, ids or counters in the
    call) get the GBNF `chatcaps.reply.constraint` writes for llama-server, in xgrammar's dialect (its JSON schemas
    converted by xgrammar, as vLLM has no llama.cpp): xgrammar compiles it on the template's tokenizer, accepts the
    template's own render of sentinel calls after the reasoning, and rejects prose and an undeclared tool."""
    from chatcaps.integrations.vllm_tags import structural_tag
    from chatcaps.reply.constraint import constraint

    rejected, judged = {}, 0
    for entry in zoo:
        template = RUNNER.template_of(entry.file)
        if template.caps.tools.call_format is None or structural_tag(template.caps, TOOLS, "required") is not None:
            continue
        judged += 1
        found = constraint(template.caps, TOOLS, "required")
        assert found is not None
        accepts = xgrammar_judge(template, entry.eos_token)
        own = next((text for text in after_reasoning(template, entry.eos_token) if accepts(found.grammar, text)), None)
        if own is None:
            rejected[entry.file] = GRAMMAR_FAILURES.get(entry.file, "rejected")
            continue
        undeclared = own.replace("get_weather", "get_wether")
        assert not accepts(found.grammar, "I will look up the weather.") and not accepts(found.grammar, undeclared)
    assert rejected == GRAMMAR_FAILURES
    assert judged == 69


MODEL_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}
"""A small model's config: vLLM reads the architecture and sizes; no weights are loaded to render."""


EFFORTS = [
    ("deepseek-ai__DeepSeek-V3.1__rev-gguf.jinja", "high", {}, {"thinking": True}),
    ("deepseek-ai__DeepSeek-V3.1__rev-gguf.jinja", "none", {}, {"thinking": False}),
    ("llamacpp__Qwen-Qwen3-0.6B.jinja", "none", {}, {"enable_thinking": False}),
    ("llamacpp__Qwen-Qwen3-0.6B.jinja", "high", {"enable_thinking": False}, {"enable_thinking": False}),
    ("llamacpp__Qwen-Qwen3-0.6B.jinja", None, {"x": 1}, {"x": 1}),
]


@pytest.mark.parametrize(("file", "effort", "given", "planned"), EFFORTS)
def test_the_renderer_maps_the_effort_onto_the_templates_controls(
    file: str, effort: str | None, given: dict[str, Any], planned: dict[str, Any], zoo: tuple[ZooTemplate, ...]
) -> None:
    """The kwargs vLLM's request gives its render (`build_chat_params`), as `ChatcapsRenderer` rewrites them: the
    template's own control for the effort; a kwarg the request sets wins over it."""
    from chatcaps.integrations.vllm_renderer import template_kwargs

    messages = [{"role": "user", "content": "Hi"}]
    body = ChatCompletionRequest(model="m", messages=messages, reasoning_effort=effort, chat_template_kwargs=given)
    kwargs = body.build_chat_params(None, "auto").chat_template_kwargs
    rewritten = template_kwargs(messages, kwargs, RUNNER.template_of(file))
    if effort is None:
        assert rewritten == kwargs
    else:
        vllms = {key: value for key, value in kwargs.items() if key not in ("reasoning_effort", "enable_thinking")}
        assert rewritten == {**vllms, **planned}
