"""Streaming cost of `ReplyStream` per feed call (one token's text each), against reply length.

    python scripts/bench_reply.py [--repeat 5]
    CHATCAPS_ZOO=... python scripts/bench_reply.py --peers [--verbose]
        # against vLLM's own parsers (scripts/peer_compare.py; its venv: scripts/peer_venv.sh): the agreement per reply
        # format on scripts/data/peer_replies.json, who is right where they differ, and the cost per delta side by side

A reply of N tokens' worth of text (4 characters a token: half reasoning, half content, a Qwen3-like grammar with its
end of turn; or content only; or a tenth content and then `<tool_call>` JSON calls, one in about 20 tokens, with the
Hermes-style call format; or Qwen3-Coder-style parameter calls, which stream; or one such call whose value is nearly
the whole reply) is fed one token at a time, each `feed` timed (and each `feed_events`: the same reader, its events
before they are OpenAI's deltas). Printed per length: the median and p95 of a feed call over the whole reply,
the median over its first and last tenth (flat when nothing re-scans the text already read), and the same for
transformers' `ResponseParser.feed` alone on the grammar chatcaps reads with
(`chatcaps.reply.grammar.loaded`: the parser without chatcaps' deltas). Then the batch `parse_reply` of the whole text.
Best of `repeat` runs per call position, to keep machine load out.

With a zoo (`CHATCAPS_ZOO`), two gpt-oss (Harmony) shapes too, read with the Caps detected from the zoo's gpt-oss
template: an analysis message then the final answer (half each, every header token a token of its own), and an
analysis message then one call whose argument is the rest of the reply.
"""

from __future__ import annotations

import argparse
import statistics
import time

from timing import percentile
from transformers.utils.chat_parsing import ResponseParser

from chatcaps import ChatTemplate, ReplyStream, parse_reply
from chatcaps.caps import CallFormat, Caps, Reasoning, Tools
from chatcaps.reply.grammar import loaded
from chatcaps.zoo import load_zoo, zoo_dir

LENGTHS = (100, 1_000, 8_000)
WHAT = ("ReplyStream", "events", "ResponseParser")
TOKEN_CHARS = 4
END_OF_TURN = "<|im_end|>"
CAPS = Caps(
    "",
    "jinja2",
    reasoning=Reasoning(
        format="reasoning_content", start_marker="<think>", end_marker="</think>", default_state="free"
    ),
    generation_prompt="<|im_start|>assistant\n",
)
PREFIX = "<|im_start|>user\nHi<|im_end|>\n" + CAPS.generation_prompt
CALL_FORMAT = CallFormat(
    begin="",
    call='\n<tool_call>\n{"name": "${name}", "arguments": ${arguments}}\n</tool_call>',
    separator="",
    end="",
    arguments="json",
    keys={"name": "name", "arguments": "arguments"},
    exact_values=True,
    shape="object",
)
CALLS_CAPS = Caps(**{**CAPS.__dict__, "tools": Tools(calls=True, call_format=CALL_FORMAT)})
CALL = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "note": "wordwordword"}}\n'
PARAMETER_FORMAT = CallFormat(
    begin="",
    call="<tool_call>\n<function=${name}>${arguments}\n</function>\n</tool_call>",
    separator="",
    end="",
    arguments="parameters",
    parameter="\n<parameter=${key}>\n${value}\n</parameter>",
    exact_values=True,
    shape="named",
)
PARAMETER_CAPS = Caps(**{**CAPS.__dict__, "tools": Tools(calls=True, call_format=PARAMETER_FORMAT)})
PARAMETER_CALL = (
    "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
    "</parameter>\n<parameter=note>\nwordwordword\n</parameter>\n</function>\n</tool_call>"
)


def reply_tokens(count: int, reasoning: bool) -> list[str]:
    """`count` pieces of text as a model emits them, the markers as single tokens: half reasoning, half content, or
    content only (so that the first and the last tenth are read in the same region)."""
    words = [("word", " ", "is", "\n", "tok")[index % 5].ljust(TOKEN_CHARS, "s") for index in range(count)]
    if not reasoning:
        return [*words[: count - 1], END_OF_TURN]
    half = count // 2
    return ["<think>", *words[1:half], "</think>", *words[half + 1 : count - 1], END_OF_TURN]


def call_tokens(count: int, call: str = CALL) -> list[str]:
    """A tenth content, then calls (`<tool_call>` and `</tool_call>` single tokens, the rest in 4-character pieces)."""
    tokens = reply_tokens(count // 10, False)[:-1]
    while len(tokens) < count - 1:
        body = call.removeprefix("\n<tool_call>").removesuffix("</tool_call>")
        tokens += ["\n", "<tool_call>"] + [body[at : at + TOKEN_CHARS] for at in range(0, len(body), TOKEN_CHARS)]
        tokens.append("</tool_call>")
    return [*tokens[: count - 1], END_OF_TURN]


def long_parameter_tokens(count: int) -> list[str]:
    """One parameter call whose value is nearly all of the reply (a file's content, say), in 4-character pieces."""
    text = "<tool_call>\n<function=write>\n<parameter=content>\n" + "word" * count
    tokens = [text[at : at + TOKEN_CHARS] for at in range(0, len(text), TOKEN_CHARS)][: count - 2]
    return [*tokens, "\n</parameter>\n</function>\n</tool_call>", END_OF_TURN]


HARMONY_TEMPLATE = "llamacpp__openai-gpt-oss-120b.jinja"
"""The zoo template whose detected Caps read the gpt-oss shapes."""
HARMONY_CALL = "<|start|>assistant<|channel|>commentary to=functions.write <|constrain|>json<|message|>"


def harmony_caps() -> Caps | None:
    """The Caps detected from the zoo's gpt-oss template; None without a zoo."""
    if zoo_dir() is None:
        return None
    entry = next((entry for entry in load_zoo() if entry.file == HARMONY_TEMPLATE), None)
    if entry is None:
        return None
    return ChatTemplate(entry.read(), bos_token=entry.bos_token, eos_token=entry.eos_token).caps


def harmony_tokens(count: int, call: bool) -> list[str]:
    """Half an analysis message, then the final answer (`call` false) or one call whose argument holds the rest of
    the reply; header tokens single tokens, as gpt-oss' tokenizer has them."""
    words = [("word", " ", "is", "\n", "tok")[index % 5].ljust(TOKEN_CHARS, "s") for index in range(count)]
    half = count // 2
    reasoning = ["<|channel|>", "analysis", "<|message|>", *words[3:half], "<|end|>"]
    if not call:
        final = ["<|start|>", "assistant", "<|channel|>", "final", "<|message|>"]
        return [*reasoning, *final, *words[len(reasoning) + len(final) : count - 1], "<|return|>"]
    head = ["<|start|>", "assistant", "<|channel|>", "commentary", " to", "=functions", ".write", " ", "<|constrain|>"]
    head += ["json", "<|message|>", '{"', "content", '": "']
    body = words[len(reasoning) + len(head) : count - 2]
    return [*reasoning, *head, *(word.replace("\n", " ") for word in body), '"}', "<|call|>"]


def timed_feeds(tokens: list[str], repeat: int, what: str, caps: Caps = CAPS, *, harmony: bool = False) -> list[float]:
    """Each feed call's best time over `repeat` runs, in microseconds, by position in the reply (`harmony`: after
    the gpt-oss generation prompt, with the end of turn its Caps hold). `what`: "ReplyStream" (`feed`, OpenAI's
    deltas), "events" (`feed_events`, the events every reader of the stream takes), "ResponseParser" (the parser
    alone)."""
    best = [float("inf")] * len(tokens)
    prefix, end = (caps.generation_prompt, None) if harmony else (PREFIX, END_OF_TURN)
    for _ in range(repeat):
        stream = ReplyStream(caps, prefix=prefix, end_of_turn=end)
        feed = (
            ResponseParser(loaded(caps, end), prefix=prefix).feed
            if what == "ResponseParser"
            else stream.feed_events
            if what == "events"
            else stream.feed
        )
        for index, token in enumerate(tokens):
            started = time.perf_counter_ns()
            feed(token)
            best[index] = min(best[index], (time.perf_counter_ns() - started) / 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="only the reply shapes whose name holds this text (gpt-oss, ...)")
    parser.add_argument("--peers", action="store_true", help="against vLLM's parsers (needs the peer venv and a zoo)")
    parser.add_argument("--verbose", action="store_true", help="with --peers: every reply, not only disagreements")
    args = parser.parse_args()
    harmony = harmony_caps()
    if args.peers:
        import peer_compare

        peer_compare.agreement(args.verbose)
        peer_compare.streaming(LENGTHS, reply_tokens, args.repeat)
        return
    print(
        f"{'tokens':>7} {'reply':>17} {'what':>15} {'median':>7} {'p95':>7} {'first 10%':>9} {'last 10%':>8}  (us/feed)"
    )
    for length in LENGTHS:
        tenth = max(1, length // 10)
        shapes: list[tuple[str, list[str], Caps]] = [
            ("reasoning+content", reply_tokens(length, True), CAPS),
            ("content only", reply_tokens(length, False), CAPS),
            ("tool calls", call_tokens(length), CALLS_CAPS),
            ("parameter calls", call_tokens(length, PARAMETER_CALL), PARAMETER_CAPS),
            ("one long parameter", long_parameter_tokens(length), PARAMETER_CAPS),
        ]
        if harmony is not None:
            shapes += [
                ("gpt-oss answer", harmony_tokens(length, False), harmony),
                ("gpt-oss call", harmony_tokens(length, True), harmony),
            ]
        for shape, tokens, caps in shapes:
            if args.only not in shape:
                continue
            for name in WHAT if hasattr(ReplyStream, "feed_events") else (WHAT[0], WHAT[2]):
                feeds = timed_feeds(tokens, args.repeat, name, caps, harmony=caps is harmony)
                print(
                    f"{length:>7} {shape:>17} {name:>15} {statistics.median(feeds):7.2f} {percentile(feeds, 0.95):7.2f}"
                    f" {statistics.median(feeds[:tenth]):9.2f} {statistics.median(feeds[-tenth:]):8.2f}"
                )
        text = "".join(reply_tokens(length, True))
        batch = min(_timed_batch(text) for _ in range(args.repeat))
        print(f"{length:>7} {'reasoning+content':>17} {'parse_reply':>15} {batch:7.1f} us the whole reply")


def _timed_batch(text: str) -> float:
    started = time.perf_counter_ns()
    parse_reply(text, CAPS, prefix=PREFIX, end_of_turn=END_OF_TURN)
    return (time.perf_counter_ns() - started) / 1e3


if __name__ == "__main__":
    main()
