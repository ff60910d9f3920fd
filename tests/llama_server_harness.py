"""A real llama-server on loopback, for the tests and for scripts/llamacpp_caps.py: find the binary, start it, stop it.

The binary is built once by scripts/build_llama_server.sh into a cache outside the repo; `CHATCAPS_LLAMA_SERVER`
points elsewhere. `write_random_gguf` writes a small Llama model with random weights and a SentencePiece vocabulary
(byte fallback, BOS added by the tokenizer), for checks where only the template and the tokenizer matter.
Import as `from llama_server_harness import ...` (pytest puts `tests/` on `sys.path`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chatcaps.constants import build_cache_dir

VERSION = "0.3.36"
BUILD_SCRIPT = "scripts/build_llama_server.sh"
BINARY_ENV = "CHATCAPS_LLAMA_SERVER"
RANDOM_VOCAB = ("<unk>", "<s>", "</s>", "<think>", "</think>", "<|im_start|>", "<|im_end|>")
"""Tokens of `write_random_gguf` before its 256 byte tokens: unk, bos, eos, two user-defined, two control tokens."""


class LlamaServerMissing(RuntimeError):
    """The llama-server binary is not where the build script puts it."""


def llama_server_binary() -> Path:
    """The llama-server to run: `$CHATCAPS_LLAMA_SERVER`, else the build script's cached binary."""
    configured = os.environ.get(BINARY_ENV)
    path = Path(configured) if configured else build_cache_dir() / f"llama-server-{VERSION}" / "bin" / "llama-server"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise LlamaServerMissing(
            f"no llama-server binary at {path}: build it with `bash {BUILD_SCRIPT}` (about 8 minutes on 2 cores) "
            f"or set {BINARY_ENV} to one"
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    startup_s: float
    """From launch until /health answered 200."""

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text("utf-8", errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ServerStartError(RuntimeError):
    """llama-server exited or never became healthy; the message holds the last lines of its log."""


def start_llama_server(
    model: Path,
    *,
    log: Path,
    extra_args: Sequence[str] = (),
    ctx_size: int = 1024,
    timeout_s: float = 60.0,
    port: int | None = None,
) -> RunningServer:
    """Start llama-server on a loopback port (`port`, else a free one) with one thread and wait until /health says
    it is ready."""
    port = port or free_port()
    args = [
        str(llama_server_binary()),
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--jinja",
        "--threads",
        "1",
        "--threads-batch",
        "1",
        "--ctx-size",
        str(ctx_size),
        "--parallel",
        "1",
        "--no-webui",
        "--no-warmup",
        *extra_args,
    ]
    start = time.perf_counter()
    with log.open("wb") as handle:
        process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = RunningServer(f"http://127.0.0.1:{port}", process, log, 0.0)
    deadline = start + timeout_s
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise ServerStartError(f"llama-server exited with {process.returncode}:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.url}/health", timeout=2) as response:
                if response.status == 200:
                    return RunningServer(server.url, process, log, time.perf_counter() - start)
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    server.stop()
    raise ServerStartError(f"llama-server was not healthy after {timeout_s} s:\n{server.log_tail()}")


def post_json(url: str, body: dict[str, Any], timeout: float = 30.0) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode("utf-8"), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def write_random_gguf(
    path: Path,
    chat_template: str | list[dict[str, str]] | None,
    *,
    add_bos: bool = True,
    seed: int = 0,
    control_tokens: Sequence[str] = (),
) -> Path:
    """A 2-layer Llama GGUF with random weights and a SentencePiece vocabulary of `RANDOM_VOCAB` plus 256 bytes.

    `<think>`/`</think>` are user-defined tokens (rendered in output), `<|im_start|>`/`<|im_end|>` control tokens;
    bos is `<s>`, eos `</s>`. No space prefix, so a text tokenizes the same wherever it stands. A list of
    `{"name", "template"}` writes named templates ("default", "tool_use"), as gguf's writer does. `control_tokens`
    come last, as control tokens (llama.cpp retypes some by name when it loads the model: llama-vocab.cpp).
    """
    import gguf

    embd, heads, ff, layers = 64, 4, 128, 2
    tokens = [*RANDOM_VOCAB, *(f"<0x{byte:02X}>" for byte in range(256)), *control_tokens]
    types = [
        gguf.TokenType.UNKNOWN,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
        gguf.TokenType.USER_DEFINED,
        gguf.TokenType.USER_DEFINED,
        gguf.TokenType.CONTROL,
        gguf.TokenType.CONTROL,
        *[gguf.TokenType.BYTE] * 256,
        *[gguf.TokenType.CONTROL] * len(control_tokens),
    ]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(2048)
    writer.add_embedding_length(embd)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(embd // heads)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), embd))
    writer.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), embd))
    for layer in range(layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weight(embd, embd))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(ff, embd))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(ff, embd))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(embd, ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
