"""llama.cpp's own grammar engine as the judge of a GBNF grammar: `Judge.accepts(grammar, text)` runs the text, one
byte token at a time, through the grammar sampler llama-cpp-python exposes (`llama_sampler_init_grammar` over a real
vocabulary: `write_random_gguf`'s, whose 256 byte tokens spell any text), and says whether every token was allowed
and the end of generation then was. No regex of ours decides.

Import as `from gbnf_judge import Judge` (pytest puts `tests/` on `sys.path`).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp
from llama_server_harness import RANDOM_VOCAB, write_random_gguf

FIRST_BYTE = len(RANDOM_VOCAB)
EOS = RANDOM_VOCAB.index("</s>")


class GrammarSyntaxError(ValueError):
    """llama.cpp did not parse the grammar."""


class Judge:
    """A vocabulary loaded once (vocab only, no weights read)."""

    def __init__(self, directory: Path) -> None:
        path = write_random_gguf(directory / "judge.gguf", None)
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)

    def close(self) -> None:
        llama_cpp.llama_model_free(self._model)

    def compiles(self, grammar: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    def accepts(self, grammar: str, text: str) -> bool:
        """Every byte of `text` allowed in turn, then the end of generation."""
        sampler = llama_cpp.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if not sampler:
            raise GrammarSyntaxError(grammar)
        try:
            for byte in text.encode():
                token = FIRST_BYTE + byte
                if not self._allowed(sampler, token):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return self._allowed(sampler, EOS)
        finally:
            llama_cpp.llama_sampler_free(sampler)

    @staticmethod
    def _allowed(sampler: llama_cpp.llama_sampler_p, token: int) -> bool:
        data = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
        array = llama_cpp.llama_token_data_array(data, 1, -1, False)
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
        return bool(data[0].logit != float("-inf"))
