"""Call formats issue 27 found in the zoo (its section 1): each template's own assistant turn with two calls, the part
a model writes cut off the prompt, reads back as the same calls, in one go and one character at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_reply_calls import merged_calls

from chatcaps import ChatTemplate, ReplyStream, parse_reply
from chatcaps.vocab import common_prefix_length, read_quoted
from chatcaps.zoo import ZooTemplate

CHAT = [{"role": "user", "content": "Hi"}]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The tool {name}.",
            "parameters": {"type": "object", "properties": properties},
        },
    }
    for name, properties in (
        ("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"}}),
        ("get_time", {"zone": {"type": "string"}}),
    )
]
CALLS: list[dict[str, Any]] = [
    {"id": f"Zq7Id000{at}", "type": "function", "function": {"name": name, "arguments": arguments}}
    for at, (name, arguments) in enumerate((("get_weather", {"city": "Zü", "days": 2}), ("get_time", {"zone": "UTC"})))
]
FORMATS = {
    "llamacpp__meetkai-functionary-medium-v3.2.jinja": ">>>${name}\n${arguments}",
    "llamacpp__muse-glimmer.jinja": "<|start|>assistant to=${name}<|message|><atem:function_calls>\n"
    '<atem:invoke name="${name}">${arguments}\n</atem:invoke>\n</atem:function_calls>',
    "llamacpp__MiniMax-M3.jinja": '<invoke name="${name}">${arguments}]<]minimax[>[</invoke>\n]<]minimax[>[',
    "llamacpp__google-gemma-4-31B-it.jinja": "<|tool_call>call:${name}${arguments}<tool_call|>",
    "llamacpp__google-gemma-4-31B-it-interleaved.jinja": "<|tool_call>call:${name}${arguments}<tool_call|>",
}
"""Each template and the call text its Caps hold."""
DEEPSEEK = (
    "<\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>${name}\n```json\n${arguments}\n```"
    "<\uff5ctool\u2581call\u2581end\uff5c>"
)
WITH_NONE = (
    "deepseek-ai__DeepSeek-V3__rev-gguf.jinja",
    "deepseek-ai__DeepSeek-R1-Distill__early-rev.jinja",
    "llamacpp__deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
)
"""Templates that write calls only where content is None (`message['content'] is none`)."""
UNLISTED = ("llamacpp__llama-cpp-deepseek-r1.jinja",)
"""Templates that raise on any tool list (`tools | map(...) | tojson`: jinja2 cannot serialise the generator): their
calls render with no tools passed."""
FORMATS |= dict.fromkeys((*WITH_NONE, *UNLISTED), DEEPSEEK)


@pytest.fixture(scope="module")
def by_file(zoo: tuple[ZooTemplate, ...]) -> dict[str, ZooTemplate]:
    return {entry.file: entry for entry in zoo}


@pytest.mark.parametrize("file", sorted(FORMATS))
def test_the_templates_own_calls_read_back(by_file: dict[str, ZooTemplate], file: str) -> None:
    """The template's own render (`render_raw`: what the template writes, no polyfill), arguments in the shape it
    takes, with the content it writes calls beside."""
    entry = by_file[file]
    template = ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token)
    call_format = template.caps.tools.call_format
    assert call_format is not None
    assert call_format.call == FORMATS[file]
    tools = None if file in UNLISTED else TOOLS
    prompt = template.render_raw(CHAT, tools=tools)
    as_text = template.caps.tools.arguments == "string"  # the template takes arguments as JSON text only
    calls = [
        {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
        if as_text
        else call
        for call in CALLS
    ]
    message = {"role": "assistant", "content": None if file in WITH_NONE else "", "tool_calls": calls}
    turn = template.render_raw([*CHAT, message], tools=tools, add_generation_prompt=False)
    # The reply continues the turn where it leaves the prompt (a prompt that opens a think block the turn does not
    # write: the reply is read after the turn's opening).
    prefix, text = turn[: common_prefix_length(prompt, turn)], turn[common_prefix_length(prompt, turn) :]
    reply = parse_reply(text, template.caps, prefix=prefix, tools=TOOLS)
    read = [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in reply.tool_calls]
    assert read == [(call["function"]["name"], call["function"]["arguments"]) for call in CALLS]
    assert (reply.content, reply.warnings) == ("", ())
    stream = ReplyStream(template.caps, prefix=prefix, tools=TOOLS)
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert stream.reply == reply
    assert merged_calls(deltas) == list(reply.tool_calls)


def test_an_answer_after_the_prompts_call_opener_is_no_call(by_file: dict[str, ZooTemplate]) -> None:
    """The prompt ends with functionary's call opener `>>>`: an answer (`all\\n` and text) is no call, and `all\\n`
    is its header (grammar, raw or not; only at the message's start); a call with no opener before it at the start
    of the message is one."""
    entry = by_file["llamacpp__meetkai-functionary-medium-v3.2.jinja"]
    template = ChatTemplate(entry.read())
    prompt = template.render(CHAT, tools=TOOLS).prompt
    assert prompt.endswith(">>>")
    assert template.caps.reasoning.content_headers == ("all\n",)
    for raw in (False, True):
        answer = parse_reply("all\nIt is sunny.", template.caps, prefix=prompt, tools=TOOLS, raw=raw)
        assert (answer.content, answer.tool_calls) == ("It is sunny.", ())
    later = parse_reply("Sunny, all\nday.", template.caps, prefix=prompt, tools=TOOLS)
    assert (later.content, later.tool_calls) == ("Sunny, all\nday.", ())
    call = parse_reply('get_time\n{"zone": "UTC"}', template.caps, prefix=prompt, tools=TOOLS)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in call.tool_calls] == [
        ("get_time", '{"zone": "UTC"}')
    ]


def test_a_recipient_header_the_prompt_opens(by_file: dict[str, ZooTemplate]) -> None:
    """muse-glimmer's prompt ends `<|start|>assistant`; a call goes on ` to=NAME<|message|>...` and may stop at the
    `<|eom|>` that separates calls; an answer to the user (` to=user<|message|>...`) is no call, its header grammar."""
    template = ChatTemplate(by_file["llamacpp__muse-glimmer.jinja"].read())
    prompt = template.render(CHAT, tools=TOOLS).prompt
    call = (
        ' to=get_time<|message|><atem:function_calls>\n<atem:invoke name="get_time">\n'
        '<atem:parameter name="zone">UTC</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>'
    )
    reply = parse_reply(call, template.caps, prefix=prompt, tools=TOOLS)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls] == [
        ("get_time", '{"zone": "UTC"}')
    ]
    assert (reply.content, reply.warnings) == ("", ())
    answer = parse_reply(" to=user<|message|>It is noon.", template.caps, prefix=prompt, tools=TOOLS)
    # The answer's header, a message header addressed to the user, is grammar (Caps.reasoning.content_headers).
    assert (answer.content, answer.tool_calls, answer.warnings) == ("It is noon.", (), ())


def test_a_call_id_the_text_writes_is_the_calls_id(by_file: dict[str, ZooTemplate]) -> None:
    """Kimi-K2 names each call `functions.NAME:INDEX` where other templates write the request's id (its tool results
    quote it): that text is the call's id, read back in one go and streamed."""
    template = ChatTemplate(by_file["llamacpp__moonshotai-Kimi-K2.jinja"].read())
    prompt = template.render(CHAT, tools=TOOLS).prompt
    message = {"role": "assistant", "content": "", "tool_calls": CALLS}
    turn = template.render([*CHAT, message], tools=TOOLS, add_generation_prompt=False).prompt
    text = turn[common_prefix_length(prompt, turn) :]
    reply = parse_reply(text, template.caps, prefix=prompt, tools=TOOLS)
    assert [call["id"] for call in reply.tool_calls] == ["functions.get_weather:0", "functions.get_time:1"]
    stream = ReplyStream(template.caps, prefix=prompt, tools=TOOLS)
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert merged_calls(deltas) == list(reply.tool_calls)


def test_read_quoted() -> None:
    """gemma-4's value syntax: the value and where it ends; text that is no such value raises ValueError."""
    text = '{a:<|"|>x, "y"<|"|>,b:[1,None,{c:true}],d:-2.5e1} rest'
    assert read_quoted(text, '<|"|>') == ({"a": 'x, "y"', "b": [1, None, {"c": True}], "d": -25.0}, len(text) - 5)
    for bad in ('{a:<|"|>open}', "{a:1;b:2}", "{:1}", "[1 2]", "{a:word}", "[" * 5000, "{a:" * 5000):
        with pytest.raises(ValueError):
            read_quoted(bad, '<|"|>')


def test_quoted_arguments_nested_too_deep_are_kept_as_text(by_file: dict[str, ZooTemplate]) -> None:
    """A model's call nested past Python's recursion limit never raises: the call keeps its arguments as text, with
    a warning, in one go and streamed alike."""
    template = ChatTemplate(by_file["llamacpp__google-gemma-4-31B-it.jinja"].read())
    prompt = template.render(CHAT, tools=TOOLS).prompt
    arguments = "{zone:" + "[" * 5000
    text = f"<|tool_call>call:get_time{arguments}<tool_call|>"
    reply = parse_reply(text, template.caps, prefix=prompt, tools=TOOLS)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in reply.tool_calls] == [("get_time", arguments)]
    assert reply.warnings == (f"the arguments of 'get_time' are no JSON object; kept as text: {arguments!r}",)
    stream = ReplyStream(template.caps, prefix=prompt, tools=TOOLS)
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert merged_calls(deltas) == list(reply.tool_calls)


def test_render_sends_a_tool_call_turns_empty_content_as_none(by_file: dict[str, ZooTemplate]) -> None:
    """DeepSeek V3's GGUF template writes calls only for content None (Caps: `tools.calls_need_null_content`):
    `render` sends the turn's empty content as None, and the calls are in the prompt."""
    template = ChatTemplate(by_file["deepseek-ai__DeepSeek-V3__rev-gguf.jinja"].read())
    assert template.caps.tools.calls_need_null_content
    message = {"role": "assistant", "content": "", "tool_calls": CALLS[:1]}
    result = template.render([*CHAT, message], tools=TOOLS, add_generation_prompt=False)
    assert "get_weather" in result.prompt
    # the tools step put the definitions in a system turn first: the call turn is messages[2]
    assert "messages[2]: empty content of a tool-call turn sent as None" in [item.detail for item in result.applied]


def test_a_value_holding_whole_parameters_streams_as_it_reads_whole(by_file: dict[str, ZooTemplate]) -> None:
    """MiniMax-M3 writes a nested object's fields as parameters inside the parameter's value: while the outer one is
    open, its inner ones are no parameters of the call, so the stream, one character at a time, reads what the whole
    text reads (the value as written: nested values are XML, not JSON; docs/reply.md)."""
    template = ChatTemplate(by_file["llamacpp__MiniMax-M3.jinja"].read())
    prompt = template.render(CHAT, tools=TOOLS).prompt
    tag = "]<]minimax[>["
    inner = f"{tag}<max>10{tag}</max>"
    text = f'{tag}<tool_call>\n{tag}<invoke name="get_time">\n{tag}<zone>{inner}{tag}</zone>\n{tag}</invoke>\n'
    text += f"{tag}</tool_call>"
    reply = parse_reply(text, template.caps, prefix=prompt, tools=TOOLS)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply.tool_calls] == [
        ("get_time", {"zone": inner})
    ]
    stream = ReplyStream(template.caps, prefix=prompt, tools=TOOLS)
    deltas = stream.initial + [delta for char in text for delta in stream.feed(char)] + stream.close()
    assert merged_calls(deltas) == list(reply.tool_calls)
