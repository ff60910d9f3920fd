"""A tiny trained chat model for integration tests: a real tokenizer, real weights, a real thinking template.

`tiny_model_dir()` is a saved Hugging Face folder (Qwen2 architecture, hidden size 64, 2 layers, a byte-level BPE
tokenizer trained here, `chat_template.jinja` from tests/data/tiny_model/); `tiny_gguf()` is the same weights and
vocabulary as a GGUF file that llama.cpp loads. The model is trained on the chats in tests/data/tiny_model/chats.json
until greedy decoding reproduces every reply exactly, in two forms: thinking (the default generation prompt; the reply
opens a `<think>` block) and off (`enable_thinking=false` prefills an empty block; the reply is the content alone).

Both are built once per machine and cached under `${CHATCAPS_BUILD_CACHE:-~/.cache/chatcaps}/tiny-model/<hash>/`,
keyed by a hash of the training data, the template, this file and the library versions, so a repeated run only
reads files. Concurrent builders (parallel test processes) wait on a file lock instead of training twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from chatcaps.constants import build_cache_dir

DATA = Path(__file__).parent / "data" / "tiny_model"
TEMPLATE_FILE = DATA / "chat_template.jinja"
CHATS_FILE = DATA / "chats.json"

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
"""Added but not special, as in Qwen3: they survive `skip_special_tokens`, and llama.cpp matches them in any text."""
EOS, PAD = "<|im_end|>", "<|endoftext|>"
# Qwen2's pre-tokenizer split, which llama.cpp implements as the "qwen2" pre-tokenizer (llama-vocab.cpp).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB_SIZE = 400
MODEL_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,  # heads of 32: vLLM's CPU attention takes no smaller (scripts/serve_check.py)
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}
SEED = 0
LEARNING_RATE = 3e-3
STEPS_PER_ROUND = 150
MAX_ROUNDS = 8
_VERSIONED = ("torch", "transformers", "tokenizers", "gguf", "safetensors")
_HF_DIR, _GGUF_FILE, _BUILD_INFO = "hf", "tiny.gguf", "build.json"


@dataclass(frozen=True)
class Sample:
    """One training example: the rendered prompt and the exact reply the model must generate after it."""

    prompt: str
    completion: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]


def tiny_chats() -> list[dict[str, Any]]:
    """The training chats: `{"messages": [...], "reply": {"reasoning_content", "content"}}` each."""
    chats: list[dict[str, Any]] = json.loads(CHATS_FILE.read_text(encoding="utf-8"))["chats"]
    return chats


@cache
def tiny_model_dir() -> Path:
    """The trained model as a Hugging Face folder: config, safetensors weights, tokenizer, chat_template.jinja."""
    return _once(_build_root() / _HF_DIR, _build_hf)


@cache
def tiny_gguf() -> Path:
    """The same weights and vocabulary as a GGUF file (architecture qwen2, f32), with the chat template in it."""
    hf_dir = tiny_model_dir()
    return _once(_build_root() / _GGUF_FILE, lambda target: write_gguf(hf_dir, target))


def build_info() -> dict[str, Any]:
    """What the build measured (training steps, final loss, seconds), read from the cache."""
    tiny_model_dir()
    info: dict[str, Any] = json.loads((_build_root() / _BUILD_INFO).read_text(encoding="utf-8"))
    return info


def _build_root() -> Path:
    return build_cache_dir() / "tiny-model" / _inputs_hash()


@cache
def _inputs_hash() -> str:
    digest = hashlib.sha256()
    for file in (CHATS_FILE, TEMPLATE_FILE, Path(__file__)):
        digest.update(file.read_bytes())
    for package in _VERSIONED:
        digest.update(f"{package}=={metadata.version(package)}".encode())
    return digest.hexdigest()[:16]


def _once(target: Path, build: Callable[[Path], None]) -> Path:
    """`target`, built by `build` into a temporary path and moved into place, under a lock, unless it exists."""
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
            try:
                build(scratch / target.name)
                os.replace(scratch / target.name, target)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    return target


def _build_hf(target: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    started = time.perf_counter()
    template = TEMPLATE_FILE.read_text(encoding="utf-8")
    tokenizer = _train_tokenizer(template)
    samples = training_samples(tokenizer)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic and, for a model this small, faster than two threads
    try:
        with torch.random.fork_rng():  # seeded here without touching the caller's random state
            torch.manual_seed(SEED)
            eos_id, pad_id = tokenizer.convert_tokens_to_ids([EOS, PAD])
            config = Qwen2Config(vocab_size=len(tokenizer), eos_token_id=eos_id, pad_token_id=pad_id, **MODEL_CONFIG)
            model = Qwen2ForCausalLM(config)
            # transformers leaves GenerationConfig.__init__ (**kwargs) unannotated
            model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, do_sample=False)  # type: ignore[no-untyped-call]
            steps, loss = _train(model, samples, pad_id)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    info = {"steps": steps, "final_loss": loss, "seconds": round(time.perf_counter() - started, 2)}
    (_build_root() / _BUILD_INFO).write_text(json.dumps(info), encoding="utf-8")


def _train_tokenizer(template: str) -> Any:
    """A byte-level BPE tokenizer in the Qwen2 layout, trained on the rendered training chats."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(THINK_TOKENS),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    backend.add_tokens([AddedToken(token, special=False, normalized=False) for token in THINK_TOKENS])
    # transformers leaves TokenizersBackend.__init__ (*args, **kwargs) unannotated
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS, pad_token=PAD)  # type: ignore[no-untyped-call]
    tokenizer.chat_template = template
    return tokenizer


def _corpus() -> list[str]:
    """The chats' text without control tokens (those are split off before BPE, so merges never see them)."""
    texts = []
    for chat in tiny_chats():
        texts += [message["content"] for message in chat["messages"]]
        texts += [chat["reply"]["reasoning_content"], chat["reply"]["content"]]
        texts += [f"{role}\n" for role in ("system", "user", "assistant")]
    return texts


def training_samples(tokenizer: Any) -> list[Sample]:
    """Every chat in both forms, as (prompt, reply) pairs, rendered by the template through transformers."""
    samples = []
    for chat in tiny_chats():
        messages, reply = chat["messages"], chat["reply"]
        thinking = f"<think>\n{reply['reasoning_content']}\n</think>\n\n{reply['content']}{EOS}"
        forms: tuple[tuple[dict[str, Any], dict[str, Any], str], ...] = (
            ({}, reply, thinking),
            ({"enable_thinking": False}, {"content": reply["content"]}, f"{reply['content']}{EOS}"),
        )
        for kwargs, answer, completion in forms:
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
            # The reply must be what the template itself writes for that assistant turn.
            full = tokenizer.apply_chat_template([*messages, {"role": "assistant", **answer}], tokenize=False, **kwargs)
            if not full.startswith(prompt + completion):
                raise RuntimeError(f"{prompt + completion!r} is not how the template renders the chat: {full!r}")
            samples.append(
                Sample(
                    prompt,
                    completion,
                    tuple(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
                    tuple(tokenizer(completion, add_special_tokens=False)["input_ids"]),
                )
            )
    return samples


def _train(model: Any, samples: list[Sample], pad_id: int) -> tuple[int, float]:
    """Full-batch Adam on the replies (prompt tokens are context only) until greedy decoding reproduces them all."""
    import torch

    length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    inputs = torch.full((len(samples), length), pad_id)
    labels = torch.full((len(samples), length), -100)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for row, sample in enumerate(samples):
        ids = sample.prompt_ids + sample.completion_ids
        inputs[row, : len(ids)] = torch.tensor(ids)
        labels[row, len(sample.prompt_ids) : len(ids)] = torch.tensor(sample.completion_ids)
        mask[row, : len(ids)] = 1
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    steps, loss = 0, float("inf")
    for _ in range(MAX_ROUNDS):
        model.train()
        for _ in range(STEPS_PER_ROUND):
            optimizer.zero_grad()
            output = model(input_ids=inputs, attention_mask=mask, labels=labels)
            output.loss.backward()
            optimizer.step()
            loss = float(output.loss.detach())
        steps += STEPS_PER_ROUND
        model.eval()
        if all(_greedy(model, sample) == sample.completion_ids for sample in samples):
            return steps, round(loss, 6)
    raise RuntimeError(f"the tiny model did not learn its replies in {steps} steps (loss {loss:.4f})")


def _greedy(model: Any, sample: Sample) -> tuple[int, ...]:
    import torch

    prompt = torch.tensor([sample.prompt_ids])
    with torch.no_grad():
        output = model.generate(prompt, max_new_tokens=len(sample.completion_ids) + 4, do_sample=False)
    return tuple(int(token) for token in output[0, prompt.shape[1] :])


def write_gguf(hf_dir: Path, target: Path) -> None:
    """Write the folder's weights and tokenizer as a llama.cpp GGUF (the layout convert_hf_to_gguf.py writes for
    Qwen2: NeoX RoPE, so no weight permutation; a gpt2-style BPE vocabulary with the "qwen2" pre-tokenizer)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    tokenizer = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tokens, types = _gguf_vocab(tokenizer, config["vocab_size"])
    ids = {token: index for index, token in enumerate(tokens)}

    writer = gguf.GGUFWriter(target, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN2])
    writer.add_name("chatcaps-tiny")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(config["rope_parameters"]["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(ids[PAD])  # as Qwen2's GGUFs: a bos id that is never added
    writer.add_add_bos_token(False)
    writer.add_eos_token_id(ids[EOS])
    writer.add_pad_token_id(ids[PAD])
    writer.add_chat_template((hf_dir / "chat_template.jinja").read_text(encoding="utf-8"))

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config["num_hidden_layers"])
    for name, array in sorted(load_file(hf_dir / "model.safetensors").items()):
        gguf_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise RuntimeError(f"no GGUF name for tensor {name}")
        writer.add_tensor(gguf_name, np.ascontiguousarray(array, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _gguf_vocab(tokenizer: dict[str, Any], size: int) -> tuple[list[str], list[int]]:
    """Tokens by id (byte-level strings, as tokenizer.json stores them) and their llama.cpp token types."""
    import gguf

    tokens: list[str | None] = [None] * size
    types = [int(gguf.TokenType.NORMAL)] * size
    for token, index in tokenizer["model"]["vocab"].items():
        tokens[index] = token
    for added in tokenizer["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = int(gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED)
    missing = [index for index, token in enumerate(tokens) if token is None]
    if missing:
        raise RuntimeError(f"token ids {missing} have no token")
    return [str(token) for token in tokens], types
