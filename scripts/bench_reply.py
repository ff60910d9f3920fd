"""Streaming cost of `ReplyStream` per feed call (one token's text each), against reply length.

    python scripts/bench_reply.py [--repeat 5]
    CHATCAPS_ZOO=... python scripts/bench_reply.py --peers [--verbose]
        # against vLLM's own parsers (scripts/peer_compare.py; its venv: scripts/peer_venv.sh): the agreement per reply
        # format on scripts/data/peer_replies.json, who is right where they differ, and the cost per delta side by side

A reply of N tokens' worth of text (4 characters a token: half reasoning, half content, a Qwen3-like grammar with its
end of turn; or content only; or a tenth content and then `<tool_call>` JSON calls, one in about 20 tokens, with the
Hermes-style call format) is fed one token at a time, each `feed` timed. Printed per length: the median and p95 of a
feed call over the whole reply, the median over its first and last tenth (flat when nothing re-scans the text
already read), and the same for transformers' `ResponseParser.feed` alone (the parser without chatcaps' deltas). Then
the batch `parse_reply` of the whole text. Best of `repeat` runs per call position, to keep machine load out.
"""

from __future__ import annotations

import argparse
import statistics
import time

from timing import percentile
from transformers.utils.chat_parsing import ResponseParser

from chatcaps import ReplyStream, parse_reply
from chatcaps.caps import CallFormat, Caps, Reasoning, Tools
from chatcaps.reply import response_template

LENGTHS = (100, 1_000, 8_000)
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
)
CALLS_CAPS = Caps(**{**CAPS.__dict__, "tools": Tools(calls=True, call_format=CALL_FORMAT)})
CALL = '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "note": "wordwordword"}}\n'


def reply_tokens(count: int, reasoning: bool) -> list[str]:
    """`count` pieces of text as a model emits them, the markers as single tokens: half reasoning, half content, or
    content only (so that the first and the last tenth are read in the same region)."""
    words = [("word", " ", "is", "\n", "tok")[index % 5].ljust(TOKEN_CHARS, "s") for index in range(count)]
    if not reasoning:
        return [*words[: count - 1], END_OF_TURN]
    half = count // 2
    return ["<think>", *words[1:half], "</think>", *words[half + 1 : count - 1], END_OF_TURN]


def call_tokens(count: int) -> list[str]:
    """A tenth content, then calls (`<tool_call>` and `</tool_call>` single tokens, the JSON in 4-character pieces)."""
    tokens = reply_tokens(count // 10, False)[:-1]
    while len(tokens) < count - 1:
        body = CALL.removeprefix("\n<tool_call>")
        tokens += ["\n", "<tool_call>"] + [body[at : at + TOKEN_CHARS] for at in range(0, len(body), TOKEN_CHARS)]
        tokens.append("</tool_call>")
    return [*tokens[: count - 1], END_OF_TURN]


def timed_feeds(tokens: list[str], repeat: int, parser_only: bool, caps: Caps = CAPS) -> list[float]:
    """Each feed call's best time over `repeat` runs, in microseconds, by position in the reply."""
    best = [float("inf")] * len(tokens)
    template = response_template(caps, end_of_turn=END_OF_TURN)
    for _ in range(repeat):
        feed = (
            ResponseParser(template, prefix=PREFIX).feed
            if parser_only
            else ReplyStream(caps, prefix=PREFIX, end_of_turn=END_OF_TURN).feed
        )
        for index, token in enumerate(tokens):
            started = time.perf_counter_ns()
            feed(token)
            best[index] = min(best[index], (time.perf_counter_ns() - started) / 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--peers", action="store_true", help="against vLLM's parsers (needs the peer venv and a zoo)")
    parser.add_argument("--verbose", action="store_true", help="with --peers: every reply, not only disagreements")
    args = parser.parse_args()
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
        shapes = (
            ("reasoning+content", reply_tokens(length, True), CAPS),
            ("content only", reply_tokens(length, False), CAPS),
            ("tool calls", call_tokens(length), CALLS_CAPS),
        )
        for shape, tokens, caps in shapes:
            for name, parser_only in (("ReplyStream", False), ("ResponseParser", True)):
                feeds = timed_feeds(tokens, args.repeat, parser_only, caps)
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
