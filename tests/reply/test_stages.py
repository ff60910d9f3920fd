"""`chatcaps.reply.stages`: what the text passes through before the reply is routed."""

from __future__ import annotations

from chatcaps.reply.stages import RepeatedTag

TAG = "<|assistant|>"


def test_a_repeated_tag_is_dropped_once_it_is_whole() -> None:
    warnings: list[str] = []
    stage = RepeatedTag(TAG, warnings)
    assert [stage.feed(piece) for piece in (" <|assis", "tant|>", "Hi")] == ["", "", "Hi"]
    assert stage.done
    assert warnings == [
        "the reply starts with the generation prompt's last tag again, read as grammar: '<|assistant|>'"
    ]


def test_other_text_goes_on_as_it_was_written() -> None:
    stage = RepeatedTag(TAG, [])
    assert (stage.feed(" <|as"), stage.feed("k"), stage.done) == ("", " <|ask", True)
    held = RepeatedTag(TAG, [])
    assert (held.feed("<|assi"), held.flush(), held.done) == ("", "<|assi", True)
