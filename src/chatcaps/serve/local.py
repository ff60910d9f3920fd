"""A transformers model as the backend, generated in-process: `model.generate` in a worker thread, its tokens decoded
as they come and handed to the event loop.

One generation runs at a time (a lock in the worker threads: the model is not shared between generations). A
generation whose reader went away (`aclose` on the iterator: the client disconnected) is stopped at its next token by
a stopping criterion, and one still queued behind the lock never starts.

Where llguidance is installed (`chatcaps[constrained]`), the grammar a request asks for (`chatcaps.reply.constraint`:
`tool_choice` required or named, "none", `response_format`) keeps the model to it: llguidance reads the same GBNF
(its `gbnf_to_lark`), each marker the grammar writes as a literal of its own also allowed as the tokenizer's added
token of that text (llguidance matches text with ordinary tokens only), and masks each step's logits on the
tokenizer's vocabulary (docs/constrained.md says why llguidance). "auto" with tools gets the lazy grammar as
llama-server applies it: the text is free until it holds a trigger word (the call opener), and from the trigger on
it is held to the grammar (`_LazyMasker`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from chatcaps import sources
from chatcaps.engines import EngineName
from chatcaps.errors import InputError
from chatcaps.integrations.transformers import eos_ids
from chatcaps.render import ChatTemplate
from chatcaps.reply.constraint import Constraint
from chatcaps.serve.backend import refuse
from chatcaps.serve.request import GenerationEnd, Sampling

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SUPPORTED = ("max_tokens", "temperature", "top_p", "seed", "stop")
CONSTRAINED_BY = "llguidance"
"""The library that applies a grammar here, where it is installed."""
_TOOL_USE = "tool_use"
_NO_CONTEXT_LIMIT = 4096
"""How many tokens to allow a model whose config names no context length, unless the request says."""
_INCOMPLETE = "\ufffd"
"""What decoding gives for a character whose bytes have not all been generated yet."""


class LocalBackend:
    """A transformers causal LM and its tokenizer. `template` overrides the tokenizer's; `template_name` picks one of
    the tokenizer's named templates; by default, as transformers does, requests with tools get its "tool_use"
    template where it has one."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str,
        template: ChatTemplate | None = None,
        template_name: str | None = None,
        engine: EngineName = "jinja2",
    ) -> None:
        self.model = name
        self._model = model
        self.tokenizer = tokenizer
        named = tokenizer.chat_template if isinstance(tokenizer.chat_template, Mapping) else {}
        picks_tool_use = template is None and template_name is None and _TOOL_USE in named
        self._template = template or ChatTemplate(sources.from_tokenizer(tokenizer, name=template_name), engine=engine)
        self._tool_use = (
            ChatTemplate(sources.from_tokenizer(tokenizer, name=_TOOL_USE), engine=engine)
            if picks_tool_use
            else self._template
        )
        self._lock = threading.Lock()
        self._stops = eos_ids(model, tokenizer)
        self._context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.grammars = CONSTRAINED_BY if importlib.util.find_spec(CONSTRAINED_BY) else None
        """What applies a grammar (the report's `backend`), None where nothing can: the app then refuses what needs
        one by name."""
        self.lazy_grammars = self.grammars is not None
        """Lazy grammars ("auto" with tools) are applied where grammars are (`_LazyMasker`)."""
        self._vocabulary: Any = None
        """llguidance's view of the tokenizer, made on the first grammar."""
        self.last: GenerationEnd | None = None
        """How the last generation ended, a stopped one included (its count is what it generated until then)."""

    @property
    def busy(self) -> bool:
        """Whether a generation is running now."""
        return self._lock.locked()

    @classmethod
    def from_dir(cls, path: str | Path, **options: Any) -> LocalBackend:
        """Load a model folder (`AutoModelForCausalLM`, `AutoTokenizer`) for inference."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        model.eval()  # type: ignore[no-untyped-call]
        return cls(model, tokenizer, name=Path(path).name, **options)

    def __repr__(self) -> str:
        return f"LocalBackend({self.model!r})"

    def template(self, *, tools: bool) -> ChatTemplate:
        return self._tool_use if tools else self._template

    def check(self, sampling: Sampling) -> None:
        refuse(sampling, (*SUPPORTED, *(("response_format",) if self.grammars else ())), "chatcaps serve --model")

    async def generate(self, prompt: str, sampling: Sampling) -> AsyncIterator[str | GenerationEnd]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | GenerationEnd | BaseException] = asyncio.Queue()

        def put(item: str | GenerationEnd | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        cancelled = threading.Event()
        worker = threading.Thread(target=self._run, args=(prompt, sampling, cancelled, put), daemon=True)
        worker.start()
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if isinstance(item, GenerationEnd):
                    return
        finally:
            cancelled.set()

    async def count_tokens(self, text: str) -> int:
        """The tokenizer's count of `text`, as `generate` encodes a prompt (nothing added)."""
        ids = await asyncio.to_thread(self.tokenizer, text, add_special_tokens=False)
        return len(ids["input_ids"])

    async def aclose(self) -> None:
        return None

    def _run(
        self,
        prompt: str,
        sampling: Sampling,
        cancelled: threading.Event,
        put: Callable[[str | GenerationEnd | BaseException], None],
    ) -> None:
        """The worker thread: generate under the lock, every decoded piece to `put`, then a `GenerationEnd`."""
        try:
            with self._lock:
                if cancelled.is_set():
                    return
                self.last = self._generate(prompt, sampling, cancelled, put)
            put(self.last)
        except BaseException as error:  # handed to the request, which raises it
            put(error)

    def _generate(
        self, prompt: str, sampling: Sampling, cancelled: threading.Event, put: Callable[[str], None]
    ) -> GenerationEnd:
        from transformers import StoppingCriteriaList, set_seed

        inputs = self.tokenizer(prompt, add_special_tokens=False, return_tensors="pt").to(self._model.device)
        prompt_tokens = int(inputs["input_ids"].shape[1])
        if self._context and prompt_tokens >= self._context:
            raise InputError(
                f"the prompt has {prompt_tokens} tokens; the model's context is {self._context}", field="messages"
            )
        room = self._context - prompt_tokens if self._context else _NO_CONTEXT_LIMIT
        options: dict[str, Any] = {"max_new_tokens": min(sampling.max_tokens or room, room)}
        if sampling.temperature:
            options.update(do_sample=True, temperature=sampling.temperature)
        elif sampling.temperature == 0:
            options["do_sample"] = False
        if sampling.top_p is not None:
            options["top_p"] = sampling.top_p
        if sampling.seed is not None:
            set_seed(sampling.seed)
        if sampling.grammar is not None:
            options["logits_processor"] = [self.logits_processor(sampling.grammar)]
        pipe = _TokenPipe(self.tokenizer, self._stops, sampling.stop, put)
        stopping = StoppingCriteriaList([_Stop(lambda: pipe.ended or cancelled.is_set())])
        generate = cast("Callable[..., Any]", self._model.generate)  # GenerationMixin's, which mypy does not see
        generate(**inputs, streamer=pipe, stopping_criteria=stopping, **options)
        return GenerationEnd(prompt_tokens, pipe.count, "stop" if pipe.ended else "length", pipe.stop_word)

    def logits_processor(self, grammar: Constraint) -> _Masker | _LazyMasker:
        """A transformers logits processor that keeps one generation to `grammar` (lazily where it has triggers)."""
        import llguidance
        import llguidance.hf

        if self._vocabulary is None:
            self._vocabulary = llguidance.hf.from_tokenizer(self.tokenizer)  # type: ignore[arg-type]  # any HF tokenizer
        lark = llguidance.LLMatcher.grammar_from_lark(lark_grammar(grammar.grammar, self.tokenizer))
        matcher = llguidance.LLMatcher(self._vocabulary, lark)
        if matcher.is_error():
            raise InputError(f"llguidance refused the grammar: {matcher.get_error()}", field="tool_choice")
        masker = _Masker(matcher, self._vocabulary.vocab_size)
        return _LazyMasker(masker, self.tokenizer, grammar.triggers) if grammar.triggers else masker


_LARK_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)*/|\b[A-Z][A-Z0-9_]*\b')
"""In `gbnf_to_lark`'s output: a string literal, a regex, or a terminal's name."""
_LARK_CHAR = re.compile(r"\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\.|[^\\]", re.DOTALL)
"""One character of a Lark string literal, escaped or not."""


def lark_grammar(gbnf: str, tokenizer: PreTrainedTokenizerBase) -> str:
    """`gbnf` as llguidance's Lark (its own `gbnf_to_lark`), read byte by byte as llama.cpp reads it, and each marker
    the grammar writes as a literal of its own also allowed as the tokenizer's added token of that text (llguidance
    matches text with ordinary tokens only).

    Byte by byte: `gbnf_to_lark` makes each rule of literals and classes only one lexeme (a terminal), and every
    literal is one too; llguidance's lexer is greedy and never backs off a lexeme, so where one lexeme can run on
    past where another ends, text the GBNF accepts is rejected: "text up to `</think>`" runs on into `</think>`,
    a parameter's leading layout into the next parameter's name. Every terminal is made a rule and every literal
    its characters, so that the only lexemes are single characters and classes (and the added tokens), and the
    parser, as llama.cpp's, decides."""
    from llguidance.gbnf_to_lark import gbnf_to_lark

    added = {json.dumps(marker, ensure_ascii=False): token for marker, token in tokenizer.get_added_vocab().items()}

    def bytewise(match: re.Match[str]) -> str:
        text = match[0]
        if text.startswith("/"):
            return text
        if not text.startswith('"'):
            return text.lower()
        chars = _LARK_CHAR.findall(text[1:-1])
        spelled = "(" + " ".join(f'"{char}"' for char in chars) + ")" if len(chars) > 1 else text
        return f"({spelled} | <[{added[text]}]>)" if text in added else spelled

    return _LARK_TOKEN.sub(bytewise, gbnf_to_lark(gbnf))


class _Masker:
    """A transformers logits processor: the grammar's allowed tokens only (llguidance's bitmask), the token generated
    last step consumed first; logits past the tokenizer's vocabulary (a model's padding rows) never allowed."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        import llguidance.torch

        self.matcher = matcher
        self.vocab_size = vocab_size
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)
        self.started = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import llguidance.torch

        if self.started:
            self.matcher.consume_token(int(input_ids[0, -1]))
        self.started = True
        llguidance.torch.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        llguidance.torch.apply_token_bitmask_inplace(scores[:, : self.vocab_size], self.bitmask.to(scores.device))
        scores[:, self.vocab_size :] = float("-inf")
        return scores


class _LazyMasker:
    """A lazy grammar as llama-server applies one (`grammar_lazy` with word triggers): every token allowed until the
    generated text holds a trigger word; then the grammar is fed the text from the trigger on (tokenized afresh:
    llguidance matches bytes, however they were split) and masks every step after. Where that text already breaks
    the grammar (the token that completed the trigger went on past what the grammar allows), the reply stays free,
    as llama-server's would end in an error."""

    def __init__(self, masker: _Masker, tokenizer: PreTrainedTokenizerBase, triggers: tuple[str, ...]) -> None:
        self.masker = masker
        self.tokenizer = tokenizer
        self.triggers = triggers
        self.window = max(len(word) for word in triggers) + 1
        """How many of the last tokens can hold a trigger that the last token completed (each token writes at
        least one character)."""
        self.generated: list[int] = []
        self.started = False
        self.state: Literal["free", "held", "broken"] = "free"

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.state == "held":
            return self.masker(input_ids, scores)
        if self.started:
            self.generated.append(int(input_ids[0, -1]))
        self.started = True
        if self.state == "free" and self._triggered():
            self.state = "held"
            self.masker.started = False  # its first call masks without consuming: the text was consumed here
            return self.masker(input_ids, scores)
        scores[:, self.masker.vocab_size :] = float("-inf")
        return scores

    def _triggered(self) -> bool:
        tail = cast(str, self.tokenizer.decode(self.generated[-self.window :], skip_special_tokens=False))
        found = [at for word in self.triggers if (at := tail.find(word)) >= 0]
        if not found:
            return False
        held = self.tokenizer.encode(tail[min(found) :], add_special_tokens=False)
        self.masker.matcher.consume_tokens(held)
        if self.masker.matcher.is_error():
            self.state = "broken"
            return False
        return True


class _TokenPipe:
    """A transformers streamer: generated ids decoded as they come (special tokens kept, so markers survive), the
    text each new token completes handed to `emit`. The end-of-sequence token ends the text and is not part of it;
    so does a `stop` string (OpenAI's: the text ends before it), and text that may be the start of one is held back
    until it is known not to be."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        stops: frozenset[int],
        stop: tuple[str, ...],
        emit: Callable[[str], None],
    ) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.stop = stop
        self.emit = emit
        self.ids: list[int] = []
        self.count = 0
        """Tokens generated, the end-of-sequence token included (as `generate_chat` counts them)."""
        self.ended = False
        self.stop_word: str | None = None
        """The stop string that ended the text, where one did."""
        self._prompt_seen = False
        self._sent = 0
        self._stopped = False

    def put(self, value: Any) -> None:
        """Called by `generate`: first with the prompt's ids (skipped), then with each new token."""
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            if self.ended:
                break
            self.count += 1
            if token in self.stops:
                self.ended = True
            else:
                self.ids.append(token)
        self._flush(final=False)

    def end(self) -> None:
        self._flush(final=True)

    def _flush(self, *, final: bool) -> None:
        if self._stopped:
            return
        text = cast(str, self.tokenizer.decode(self.ids, skip_special_tokens=False))
        if text.endswith(_INCOMPLETE) and not final:
            return
        found = sorted((at, word) for word in self.stop if (at := text.find(word, self._sent)) >= 0)
        end = found[0][0] if found else len(text) if final else len(text) - _held(text, self.stop)
        if end > self._sent:
            self.emit(text[self._sent : end])
        self._sent = max(self._sent, end)
        if found:
            self._stopped = self.ended = True
            self.stop_word = found[0][1]


def _held(text: str, stop: tuple[str, ...]) -> int:
    """How much of the end of `text` could be the start of a stop string."""
    return max((size for word in stop for size in range(1, len(word)) if text.endswith(word[:size])), default=0)


class _Stop:
    """A stopping criterion: true once `done()` is (the text hit a stop string, or the request is gone)."""

    def __init__(self, done: Callable[[], bool]) -> None:
        self.done = done

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.done(), dtype=torch.bool, device=input_ids.device)
