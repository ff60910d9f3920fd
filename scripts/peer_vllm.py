"""The peer side of `bench_reply.py --peers`: vLLM's own reasoning and tool-call parsers, run in the peer venv.

    ~/.cache/chatcaps/peer-venv/bin/python scripts/peer_vllm.py < job.json > result.json     (bench_reply.py does this)

Not part of chatcaps and never imported by it: it runs only under the venv `scripts/peer_venv.sh` makes. The job
holds the tools, each format's parser names and single-token markers, the reply texts, and the streaming runs to
time. Each format gets a byte-level BPE tokenizer built here (the byte alphabet plus its markers as whole tokens,
as in the family's real tokenizer), since vLLM's parsers look their markers up in the vocabulary and read token ids.

vLLM's general plugins are loaded first, as `vllm serve` loads them, so a format may name the chatcaps plugin's
parsers (`chatcaps`, with the format's `chat_template` on the tokenizer; scripts/vllm_plugin_check.sh installs it).
The parsers are composed as vLLM's server composes them (`ParserManager.get_parser`, the `Parser` its chat completion
holds per request): batch through `parser.parse(text, ...)` (reasoning first, then tool calls out of the content),
streaming through `parser.parse_delta(delta_text, delta_ids, ..., prompt_token_ids)` per token, which keeps the text
and ids read so far itself (the `previous + delta` concatenation is part of the time measured, as chatcaps' own
buffer copy is part of `ReplyStream.feed`'s).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def byte_tokenizer(tokens: list[str]) -> Any:
    """The byte alphabet, `tokens` as whole (non-special) tokens, and an end-of-sequence token."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(special_tokens=["<|peer_eos|>"], initial_alphabet=alphabet, show_progress=False)
    backend.train_from_iterator([], trainer=trainer)
    backend.add_tokens([AddedToken(token, special=False, normalized=False) for token in tokens])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|peer_eos|>")  # type: ignore[no-untyped-call]


class HarmonyTokenizer:
    """gpt-oss's own token ids (the o200k_harmony encoding openai_harmony ships), which vLLM's Harmony parser reads:
    ids of a byte-level stand-in would mean nothing to it."""

    def __init__(self) -> None:
        from openai_harmony import HarmonyEncodingName, load_harmony_encoding

        self.encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
        self.init_kwargs: dict[str, Any] = {}
        self.chat_template: str | None = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.encoding.encode(text, allowed_special="all"))

    def decode(self, ids: list[int], **_: Any) -> str:
        return str(self.encoding.decode(ids))

    def get_vocab(self) -> dict[str, int]:
        return {}


class Peer:
    """One format's vLLM parser, composed as `vllm serve --reasoning-parser R --tool-call-parser T` composes it."""

    def __init__(self, spec: dict[str, Any], tools: list[dict[str, Any]]) -> None:
        from vllm.entrypoints.openai.chat_completion.protocol import (  # type: ignore[import-not-found]
            ChatCompletionRequest,
        )
        from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found]

        self.tokenizer = HarmonyTokenizer() if spec.get("harmony") else byte_tokenizer(spec["tokens"])
        if spec.get("chat_template"):  # the chatcaps plugin reads its grammar from the tokenizer's template
            self.tokenizer.chat_template = spec["chat_template"]
        if spec.get("tokenizer_init"):
            self.tokenizer.init_kwargs.update(spec["tokenizer_init"])
        self.template_kwargs = spec.get("chat_template_kwargs")
        self.parser_class = ParserManager.get_parser(
            tool_parser_name=spec["tool_parser"],
            reasoning_parser_name=spec["reasoning_parser"],
            enable_auto_tools=True,
            is_harmony=spec.get("harmony", False),
            tokenizer=self.tokenizer,
        )
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        self.request = ChatCompletionRequest(model="peer", messages=messages, tools=tools if spec["tools"] else None)

    def _parser(self, template_kwargs: dict[str, Any] | None) -> Any:
        """A parser for one request, as the server makes it (`chat_template_kwargs` such as DeepSeek's `thinking`)."""
        self.request = self.request.model_copy(update={"chat_template_kwargs": template_kwargs})
        parser = self.parser_class(self.tokenizer, self.request.tools, chat_template_kwargs=template_kwargs)
        self.request = parser.adjust_request(self.request)
        return parser

    def parse(self, prefix: str, text: str, stop: str, template_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """vLLM's non-streaming result: reasoning, content, calls (name, arguments as a JSON string). The output's
        token ids end with the stop token, its text does not (as the engine hands them over)."""
        parser = self._parser(template_kwargs)
        parser.set_prompt_token_ids(self.tokenizer.encode(prefix, add_special_tokens=False))
        ids = self.tokenizer.encode(text + stop, add_special_tokens=False)
        reasoning, content, calls = parser.parse(text, self.request, enable_auto_tools=True, model_output_token_ids=ids)
        found = [{"name": call.name, "arguments": call.arguments} for call in calls or ()]
        return {"reasoning_content": reasoning, "content": content, "tool_calls": found}

    def stream(
        self, prefix: str, pieces: list[str], stop: str, template_kwargs: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], list[float]]:
        """vLLM's streaming result (its deltas merged) and each `parse_delta` call's time in microseconds. The last
        delta carries the stop token's id and no text, as the engine's last output does."""
        parser = self._parser(template_kwargs)
        prompt_ids = self.tokenizer.encode(prefix, add_special_tokens=False)
        merged: dict[str, Any] = {"reasoning_content": "", "content": "", "tool_calls": {}}
        times: list[float] = []
        deltas = [(piece, self.tokenizer.encode(piece, add_special_tokens=False)) for piece in pieces]
        if stop:
            deltas.append(("", self.tokenizer.encode(stop, add_special_tokens=False)))
        for index, (piece, delta_ids) in enumerate(deltas):
            started = time.perf_counter_ns()
            delta = parser.parse_delta(piece, delta_ids, self.request, prompt_ids, finished=index == len(deltas) - 1)
            times.append((time.perf_counter_ns() - started) / 1e3)
            _merge(merged, delta)
        calls = [merged["tool_calls"][index] for index in sorted(merged["tool_calls"])]
        return {
            "reasoning_content": merged["reasoning_content"] or None,
            "content": merged["content"],
            "tool_calls": calls,
        }, times


def _merge(merged: dict[str, Any], delta: Any) -> None:
    if delta is None:
        return
    merged["reasoning_content"] += getattr(delta, "reasoning", None) or ""
    merged["content"] += delta.content or ""
    for call in delta.tool_calls or ():
        entry = merged["tool_calls"].setdefault(call.index, {"name": "", "arguments": ""})
        if call.function is not None:
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""


def main() -> None:
    from vllm.plugins import load_general_plugins  # type: ignore[import-not-found]

    load_general_plugins()  # as vLLM starts: the chatcaps plugin's parsers where chatcaps is installed here
    job = json.load(sys.stdin)
    peers: dict[str, Peer | str] = {}
    for name, spec in job["formats"].items():
        try:
            peers[name] = Peer(spec, job["tools"])
        except Exception as error:  # the peer's own failure is a result to report, not a crash
            peers[name] = f"{type(error).__name__}: {error}"
    results: list[dict[str, Any]] = []
    for case in job["cases"]:
        peer = peers[case["format"]]
        if isinstance(peer, str):
            results.append({"error": peer})
            continue
        try:
            kwargs = case.get("chat_template_kwargs") or peer.template_kwargs
            stop = case.get("stop") or ""
            batch = peer.parse(case["prefix"], case["text"], stop, kwargs)
            streamed, _ = peer.stream(case["prefix"], _pieces(peer, case["text"]), stop, kwargs)
            results.append({"batch": batch, "stream": streamed})
        except Exception as error:
            results.append({"error": f"{type(error).__name__}: {error}"})
    timings = []
    for run in job.get("timings", ()):
        peer = peers[run["format"]]
        assert isinstance(peer, Peer), peer
        best: list[float] | None = None
        for _ in range(run["repeat"]):
            _, times = peer.stream(run["prefix"], run["pieces"], run.get("stop", ""))
            best = times if best is None else [min(one, other) for one, other in zip(best, times, strict=True)]
        timings.append(best)
    json.dump({"results": results, "timings": timings}, sys.stdout)


def _pieces(peer: Peer, text: str) -> list[str]:
    """The text as a model streams it: one token at a time, bytes of a character kept together."""
    pieces, pending = [], list[int]()
    for token in peer.tokenizer.encode(text, add_special_tokens=False):
        pending.append(token)
        piece = peer.tokenizer.decode(pending)
        if "\ufffd" not in piece:
            pieces.append(piece)
            pending = []
    if pending:
        pieces.append(peer.tokenizer.decode(pending))
    return pieces


if __name__ == "__main__":
    main()
