"""`chatcaps.serve.http`: `both` (two awaits at once, a failure raised as it is and the other cancelled), and what a
streamed Anthropic answer, which counts the prompt while its first piece is awaited, does when the count fails: a 502
in Anthropic's shape, and the generation closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from serve_harness import Canned, serving

from chatcaps.errors import ServerError
from chatcaps.serve.app import create_app
from chatcaps.serve.http import both
from chatcaps.serve.request import GenerationEnd, Sampling


async def _later(value: object, delay_s: float) -> object:
    await anyio.sleep(delay_s)
    return value


async def _fails(delay_s: float) -> object:
    await anyio.sleep(delay_s)
    raise ValueError("no")


def test_both_gives_both_results_in_order() -> None:
    async def run() -> tuple[object, object]:
        return await both(_later(1, 0.02), _later("a", 0.0))

    assert anyio.run(run) == (1, "a")


@pytest.mark.parametrize("fails_first", [True, False])
def test_a_failure_is_raised_as_it_is_and_the_other_is_cancelled(fails_first: bool) -> None:
    cancelled: list[str] = []

    async def waits() -> object:
        try:
            await anyio.sleep(10)
        except anyio.get_cancelled_exc_class():
            cancelled.append("cancelled")
            raise
        return None

    async def run() -> object:
        return await (both(_fails(0.0), waits()) if fails_first else both(waits(), _fails(0.0)))

    with pytest.raises(ValueError, match=r"^no$"):
        anyio.run(run)
    assert cancelled == ["cancelled"]


class _CountFails(Canned):
    """Generates, but its tokenizer is gone: `count_tokens` fails once the first piece is out."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[str] = []

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        try:
            async for piece in super().generate(prompt, sampling):
                yield piece
        finally:
            self.closed.append("closed")

    async def count_tokens(self, text: str) -> int:
        await anyio.sleep(0.05)
        raise ServerError("the server did not answer: gone", url="http://upstream/tokenize", status=None)


def test_a_stream_whose_prompt_cannot_be_counted() -> None:
    backend = _CountFails()
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True}
    with serving(create_app(backend)) as base:
        response = httpx.post(f"{base}/v1/messages", json=body)
    assert (response.status_code, response.json()) == (
        502,
        {
            "type": "error",
            "error": {
                "type": "api_error",
                "message": "upstream http://upstream/tokenize: the server did not answer: gone",
            },
        },
    )
    assert backend.closed == ["closed"]
