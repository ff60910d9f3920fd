"""Random outputs drawn from a grammar itself: a walk that takes, at each step, one of the tokens the grammar's own
matcher allows, at random, until the grammar lets it end and it does. Two matchers: llguidance's (`Llguidance`, on a
Hugging Face tokenizer, the `--model` backend's matcher reading the GBNF through `serve.local.lark_grammar`) and
llama.cpp's grammar sampler (`LlamaCpp`, via llama-cpp-python over `gbnf_judge.Judge`'s vocabulary, whose 256 byte
tokens spell any text). What the walk writes is then whatever the grammar admits, nothing a model prefers.

A walk that only chose at random would rarely end (a string closes on one character of hundreds), so after
`budget` steps it finishes: where the text so far ends with the start of one of the grammar's literals (`"`, `}`,
`</parameter>`, ...), it writes the rest of that literal where the matcher takes all of it (tried on a copy), the
longest start first, else a whole literal (the shorter first), else any token. Either way the matcher allows every
token, so every text is the grammar's. A walk that has not ended after `limit` steps is given up (None).

Import as `from grammar_sampler import Llguidance, LlamaCpp, walk` (pytest puts `tests/` on `sys.path`).
"""

from __future__ import annotations

import ctypes
import random
import re
from collections.abc import Sequence
from typing import Any, Protocol

_CLASS = re.compile(r"\[(?:\\.|[^\]\\])*\]")
_LITERAL = re.compile(r'"((?:\\.|[^"\\])*)"')
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_SIMPLE = {"n": "\n", "t": "\t", "r": "\r"}
STRUCTURE = frozenset('"{}[],:<>\n')
"""Characters that close or separate what a grammar writes: a token holding one is drawn more often."""


def literals(gbnf: str) -> list[str]:
    """The texts of the grammar's string literals (classes left out), unescaped."""

    def unescaped(match: re.Match[str]) -> str:
        code = match[1]
        return chr(int(code[1:], 16)) if code[0] in "xuU" and len(code) > 1 else _SIMPLE.get(code, code)

    found = {_ESCAPE.sub(unescaped, text) for text in _LITERAL.findall(_CLASS.sub(" ", gbnf))}
    return sorted(text for text in found if text)


class Matcher(Protocol):
    """One grammar's state as it is fed tokens."""

    def allowed(self) -> list[int]: ...

    def consume(self, token: int) -> None: ...

    def ends(self) -> bool:
        """Whether the grammar lets the text end here."""
        ...

    def takes(self, tokens: Sequence[int]) -> bool:
        """Whether the grammar allows all of `tokens` from here; where it does, they are consumed."""
        ...


class Engine(Protocol):
    texts: Sequence[str]
    """Each token's text."""

    def matcher(self, gbnf: str) -> Matcher: ...

    def text(self, tokens: Sequence[int]) -> str: ...

    def tokens(self, text: str) -> list[int]: ...


def walk(
    engine: Engine, gbnf: str, rng: random.Random, *, budget: int = 48, limit: int = 400, tries: int = 12
) -> str | None:
    """One random text the grammar admits whole, or None where the walk did not end within `limit` tokens (`tries`:
    how many whole literals a finishing step tries)."""
    matcher = engine.matcher(gbnf)
    texts = engine.texts
    whole = literals(gbnf)
    rests: dict[str, list[str]] = {}
    for text in whole:
        for size in range(1, len(text)):
            rests.setdefault(text[:size], []).append(text[size:])
    longest = max((len(prefix) for prefix in rests), default=0)
    spelled: dict[str, list[int]] = {}
    tokens: list[int] = []
    written = ""
    for step in range(limit):
        if matcher.ends() and (step >= budget or rng.random() < 0.2):
            return engine.text(tokens)
        allowed = matcher.allowed()
        if not allowed:
            return engine.text(tokens) if matcher.ends() else None
        chosen: list[int] = []
        if step >= budget:
            started = [
                rest for size in range(min(longest, len(written)), 0, -1) for rest in rests.get(written[-size:], ())
            ]
            ready = set(allowed)
            for rest in [*started, *rng.sample(whole, min(tries, len(whole)))]:
                if rest not in spelled:
                    spelled[rest] = engine.tokens(rest)
                chosen = spelled[rest]
                if chosen and chosen[0] in ready and matcher.takes(chosen):
                    break
                chosen = []
        if not chosen:
            weights = [8 if STRUCTURE & set(texts[token]) else 1 for token in allowed]
            chosen = [rng.choices(allowed, weights)[0]]
            matcher.consume(chosen[0])
        tokens += chosen
        written += "".join(texts[token] for token in chosen)
    return None


class Llguidance:
    """llguidance's matcher on a Hugging Face tokenizer (the GBNF read through `serve.local.lark_grammar`)."""

    def __init__(self, tokenizer: Any) -> None:
        import llguidance.hf

        self.tokenizer = tokenizer
        self.vocabulary = llguidance.hf.from_tokenizer(tokenizer)
        self.size = len(tokenizer)
        self.eos = tokenizer.eos_token_id
        self.texts: Sequence[str] = [tokenizer.decode([token]) for token in range(self.size)]

    def matcher(self, gbnf: str) -> Matcher:
        import llguidance

        from chatcaps.serve.local import lark_grammar

        lark = llguidance.LLMatcher.grammar_from_lark(lark_grammar(gbnf, self.tokenizer))
        found = llguidance.LLMatcher(self.vocabulary, lark)
        if found.is_error():
            raise ValueError(found.get_error())
        return _LlguidanceMatcher(found, self)

    def text(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=False))

    def tokens(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


class _LlguidanceMatcher:
    def __init__(self, matcher: Any, engine: Llguidance) -> None:
        self.matcher = matcher
        self.engine = engine

    def allowed(self) -> list[int]:
        mask = self.matcher.compute_bitmask()
        bits = int.from_bytes(mask, "little")
        return [token for token in range(self.engine.size) if bits >> token & 1 and token != self.engine.eos]

    def consume(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise ValueError(self.matcher.get_error())

    def ends(self) -> bool:
        return bool(self.matcher.is_accepting())

    def takes(self, tokens: Sequence[int]) -> bool:
        trial = self.matcher.deep_copy()
        if trial.try_consume_tokens(list(tokens)) != len(tokens):
            return False
        self.matcher = trial
        return True


class LlamaCpp:
    """llama.cpp's grammar sampler (`llama_sampler_init_grammar`) over `gbnf_judge.Judge`'s vocabulary: its 256
    byte tokens only, so that a text is the bytes drawn."""

    def __init__(self, judge: Any) -> None:
        import gbnf_judge

        self.judge = judge
        self.first = gbnf_judge.FIRST_BYTE
        self.eos = gbnf_judge.EOS
        self.texts: Sequence[str] = [chr(byte) if byte < 0x80 else "\ufffd" for byte in range(256)]

    def matcher(self, gbnf: str) -> Matcher:
        import llama_cpp

        sampler = llama_cpp.llama_sampler_init_grammar(self.judge.vocab, gbnf.encode(), b"root")
        if not sampler:
            raise ValueError("llama.cpp did not read the grammar")
        return _LlamaCppMatcher(sampler, self)

    def text(self, tokens: Sequence[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    def tokens(self, text: str) -> list[int]:
        return list(text.encode())


class _LlamaCppMatcher:
    def __init__(self, sampler: Any, engine: LlamaCpp) -> None:
        import llama_cpp

        self.sampler = sampler
        self.engine = engine
        self.ids = [engine.first + byte for byte in range(256)] + [engine.eos]
        self.data = (llama_cpp.llama_token_data * len(self.ids))()
        self.array = llama_cpp.llama_token_data_array(self.data, len(self.ids), -1, False)
        self.last: list[bool] = []

    def __del__(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_free(self.sampler)

    def _mask(self) -> list[bool]:
        import llama_cpp

        for at, token in enumerate(self.ids):
            self.data[at] = llama_cpp.llama_token_data(token, 0.0, 0.0)
        self.array.size, self.array.sorted = len(self.ids), False
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(self.array))
        allowed = {int(self.data[at].id) for at in range(self.array.size) if self.data[at].logit != float("-inf")}
        return [token in allowed for token in self.ids]

    def allowed(self) -> list[int]:
        self.last = self.last or self._mask()
        return [byte for byte, ok in enumerate(self.last[:256]) if ok]

    def consume(self, token: int) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_accept(self.sampler, self.engine.first + token)
        self.last = []

    def ends(self) -> bool:
        self.last = self.last or self._mask()
        return self.last[-1]

    def takes(self, tokens: Sequence[int]) -> bool:
        import llama_cpp

        if not self.allowed_byte(tokens[0]):  # most literals tried fail at once: no copy for those (4 ms each)
            return False
        trial = _LlamaCppMatcher(llama_cpp.llama_sampler_clone(self.sampler), self.engine)
        for token in tokens:
            if not trial.allowed_byte(token):
                return False
            trial.consume(token)
        self.sampler, trial.sampler = trial.sampler, self.sampler
        self.last = []
        return True

    def allowed_byte(self, byte: int) -> bool:
        import llama_cpp

        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(self.engine.first + byte, 0.0, 0.0))
        array = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        return bool(data[0].logit != float("-inf"))
