"""ReplyContext: what reading the reply to one prompt needs, read by `parse` and `stream` as `parse_reply` and
`ReplyStream` read it; what a continued message already wrote is found once, and only once a reply is read."""

from __future__ import annotations

from dataclasses import replace

from test_reply import HISTORY, PROMPTS, TURN_END, caps_for

from chatcaps import Reply, ReplyContext, parse_reply

CAPS = replace(caps_for("free"), end_of_turn=TURN_END)
PROMPT = HISTORY + PROMPTS["free"]


class Counted:
    """A `continue_from` that counts its calls."""

    def __init__(self, prompt: str, continued: str) -> None:
        self.prompt, self.continued, self.calls = prompt, continued, 0

    def __call__(self) -> tuple[str, str]:
        self.calls += 1
        return self.prompt, self.continued


def test_parse_is_parse_reply_with_the_context() -> None:
    context = ReplyContext(CAPS, PROMPT)
    text = "<think>\nAdd.\n</think>\n\nFour.<|im_end|>"
    assert context.parse(text) == parse_reply(text, CAPS, prefix=PROMPT) == Reply("Four.", "Add.")
    assert (
        context.parse(text, raw=True) == parse_reply(text, CAPS, raw=True) == Reply("<think>\nAdd.\n</think>\n\nFour.")
    )
    assert ReplyContext(CAPS, PROMPT, end_of_turn="").parse("Four.<|im_end|>") == Reply("Four.<|im_end|>")


def test_a_continued_message_is_found_once_when_a_reply_is_read() -> None:
    """The message's start (the prompt's last characters here) is read with the reply after the prompt before it,
    and sent as the stream's first deltas."""
    counted = Counted(PROMPT, "<think>\nLet me")
    context = ReplyContext(CAPS, PROMPT + "<think>\nLet me", continue_from=counted)
    assert counted.calls == 0
    assert context.parse(" think.", raw=True) == Reply("think.")
    assert counted.calls == 0  # raw reads the generated text alone
    assert context.parse(" think.</think>Hello.<|im_end|>") == Reply("Hello.", "Let me think.")
    stream = context.stream()
    assert stream.initial == [{"reasoning_content": "Let me"}]
    assert stream.feed(" think.</think>Hello.") == [{"reasoning_content": " think."}, {"content": "Hello."}]
    assert stream.close() == []
    assert stream.reply == Reply("Hello.", "Let me think.")
    assert counted.calls == 1
